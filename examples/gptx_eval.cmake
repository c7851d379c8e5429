# gptx-eval: loss and perplexity of a model (any format) on a text or a shard.
add_executable(gptx-eval ${CMAKE_CURRENT_LIST_DIR}/gptx_eval.c ${CMAKE_CURRENT_LIST_DIR}/gptx_eval_mc.c)
target_link_libraries(gptx-eval PRIVATE gptx gptx_prog_common m)
gptx_target_warnings(gptx-eval)
gptx_program(gptx-eval INSTALL)
