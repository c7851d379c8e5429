# numerics_check: the classic reproducibility counterexamples, from the library.
add_executable(numerics_check ${CMAKE_CURRENT_LIST_DIR}/numerics_check.c)
target_link_libraries(numerics_check PRIVATE gptx gptx_prog_common m)
gptx_target_warnings(numerics_check)
gptx_program(numerics_check INSTALL)
