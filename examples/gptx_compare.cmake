# gptx-compare: layered comparison of one model and batch in two contexts.
add_executable(gptx-compare ${CMAKE_CURRENT_LIST_DIR}/gptx_compare.c)
target_link_libraries(gptx-compare PRIVATE gptx gptx_prog_common m)
target_compile_definitions(gptx-compare PRIVATE _POSIX_C_SOURCE=200809L)
gptx_target_warnings(gptx-compare)
gptx_program(gptx-compare INSTALL)
