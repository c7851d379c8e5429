# Warnings every gptx target is built with; -Werror when GPTX_WERROR is ON (CI).
function(gptx_target_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wshadow -Wstrict-prototypes
    -Wmissing-prototypes -Wno-unused-parameter $<$<BOOL:${GPTX_WERROR}>:-Werror>)
endfunction()
