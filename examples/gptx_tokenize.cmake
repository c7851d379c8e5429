# gptx-tokenize: text files -> llm.c token shards (a train/val pair, or fixed-size shards) with the GPT-2 tokenizer.
find_package(Threads REQUIRED)
add_executable(gptx-tokenize ${CMAKE_CURRENT_LIST_DIR}/gptx_tokenize.c
                             ${CMAKE_CURRENT_LIST_DIR}/gptx_tokenize_pair.c   # the pair as one unit
                             ${CMAKE_CURRENT_LIST_DIR}/gptx_tokenize_stream.c # blocks on threads
                             ${CMAKE_CURRENT_LIST_DIR}/gptx_tokenize_shards.c  # shards, resume
                             ${CMAKE_CURRENT_LIST_DIR}/gptx_tokenize_split.c)  # held-out pieces
target_link_libraries(gptx-tokenize PRIVATE gptx gptx_prog_common Threads::Threads)
target_compile_definitions(gptx-tokenize PRIVATE _POSIX_C_SOURCE=200809L)
gptx_target_warnings(gptx-tokenize)
gptx_program(gptx-tokenize INSTALL)
