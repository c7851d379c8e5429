# gptx-tokenize: text file -> llm.c token shards (train/val) with the GPT-2 tokenizer.
add_executable(gptx-tokenize ${CMAKE_CURRENT_LIST_DIR}/gptx_tokenize.c
                             ${CMAKE_CURRENT_LIST_DIR}/gptx_tokenize_pair.c) # the pair as one unit
target_link_libraries(gptx-tokenize PRIVATE gptx gptx_prog_common)
target_compile_definitions(gptx-tokenize PRIVATE _POSIX_C_SOURCE=200809L)
gptx_target_warnings(gptx-tokenize)
gptx_program(gptx-tokenize INSTALL)
