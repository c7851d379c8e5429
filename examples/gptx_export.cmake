# gptx-export: a model to a Hugging Face GPT-2 folder or an llm.c model file.
add_executable(gptx-export ${CMAKE_CURRENT_LIST_DIR}/gptx_export.c
                           ${CMAKE_CURRENT_LIST_DIR}/gptx_export_tokenizer.c)
target_link_libraries(gptx-export PRIVATE gptx gptx_prog_common m)
target_compile_definitions(gptx-export PRIVATE _POSIX_C_SOURCE=200809L)
gptx_target_warnings(gptx-export)
gptx_program(gptx-export INSTALL)
