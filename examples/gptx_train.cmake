# gptx-train's data-parallel pieces (examples/CMakeLists.txt creates the target).
target_sources(gptx-train PRIVATE ${CMAKE_CURRENT_LIST_DIR}/train/train_dp.c)
