# Modules: backends and communicator engines built as shared objects that
# libgptx loads on demand (lib/core/module.h, docs/modules.md), so the core
# library and its static archive need neither CUDA nor MPI.
#
#   gptx_add_module(<name> SOURCES ... [LINK ...] [INCLUDE ...] [DEFINE ...])
# builds libgptx_<name>.so next to libgptx.so (where the core looks first
# after $GPTX_MODULE_PATH), exporting only gptx_module_entry, and installs it
# into the library folder. Every module gets the shim that forwards the core
# functions it calls to the core (backends/common/module_host.c).

set(GPTX_MODULES "" CACHE INTERNAL "the modules this build makes")

function(gptx_add_module name)
  cmake_parse_arguments(M "" "" "SOURCES;LINK;INCLUDE;DEFINE" ${ARGN})
  set(target gptx_${name})
  add_library(${target} MODULE ${M_SOURCES} ${PROJECT_SOURCE_DIR}/backends/common/module_host.c)
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    OUTPUT_NAME gptx_${name}
    LIBRARY_OUTPUT_DIRECTORY "${PROJECT_BINARY_DIR}"
    C_VISIBILITY_PRESET hidden
    CUDA_VISIBILITY_PRESET hidden
    LINK_DEPENDS ${PROJECT_SOURCE_DIR}/backends/common/module.map)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/include
    ${GPTX_LIB_INCLUDE_DIRS} ${M_INCLUDE})
  target_compile_definitions(${target} PRIVATE GPTX_BUILDING_LIBRARY _POSIX_C_SOURCE=200809L
    ${M_DEFINE})
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:C>:-O3 -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes
                            -Wno-unused-parameter $<$<BOOL:${GPTX_WERROR}>:-Werror>>)
  target_link_libraries(${target} PRIVATE ${M_LINK})
  target_link_options(${target} PRIVATE
    "LINKER:--version-script=${PROJECT_SOURCE_DIR}/backends/common/module.map"
    "LINKER:--no-undefined")
  install(TARGETS ${target} LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT Runtime)
  set(GPTX_MODULES ${GPTX_MODULES} ${name} CACHE INTERNAL "the modules this build makes")
endfunction()
