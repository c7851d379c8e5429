# The shipped programs (examples/, bench/): where they find the bundled data
# and the library, built or installed.
#
# Data: data/ is installed to <datadir>/gptx and mirrored into the build tree
# at the same place under the build folder, so a program finds it at
# <its folder>/GPTX_DATA_FROM_BIN in both (examples/common/prog_data.c; the
# environment variable GPTX_DATA_DIR overrides). No program has a path into
# the source tree compiled in.
# Library: installed programs carry RUNPATH $ORIGIN/<bindir -> libdir>, so
# they run from any prefix (moved ones too) without LD_LIBRARY_PATH.

file(RELATIVE_PATH GPTX_DATA_FROM_BIN "${CMAKE_INSTALL_FULL_BINDIR}"
     "${CMAKE_INSTALL_FULL_DATADIR}/gptx")
file(RELATIVE_PATH _gptx_lib_from_bin "${CMAKE_INSTALL_FULL_BINDIR}" "${CMAKE_INSTALL_FULL_LIBDIR}")
set(GPTX_BUILD_DATA_DIR "${PROJECT_BINARY_DIR}/${CMAKE_INSTALL_DATADIR}/gptx")

# the build tree's copy (re-copied when a file is newer)
file(COPY "${PROJECT_SOURCE_DIR}/data/" DESTINATION "${GPTX_BUILD_DATA_DIR}")
install(DIRECTORY "${PROJECT_SOURCE_DIR}/data/" DESTINATION "${CMAKE_INSTALL_DATADIR}/gptx"
        COMPONENT Runtime)

# the data lookup and the presets every program shares (no libgptx needed)
add_library(gptx_prog_data STATIC "${PROJECT_SOURCE_DIR}/examples/common/prog_data.c"
                                  "${PROJECT_SOURCE_DIR}/examples/common/prog_presets.c")
target_include_directories(gptx_prog_data PUBLIC "${PROJECT_SOURCE_DIR}/examples/common")
target_compile_definitions(gptx_prog_data PRIVATE
  GPTX_DATA_FROM_BIN="${GPTX_DATA_FROM_BIN}"
  GPTX_DATA_INSTALL_DIR="${CMAKE_INSTALL_FULL_DATADIR}/gptx")
gptx_target_warnings(gptx_prog_data)

# gptx_program(<target> [INSTALL]): links the data lookup and the exit that
# skips the libraries' destructors (examples/common/prog_exit.c: OpenBLAS's
# joins worker threads that may never end); INSTALL also installs the
# program with its RUNPATH.
function(gptx_program target)
  cmake_parse_arguments(P "INSTALL" "" "" ${ARGN})
  target_link_libraries(${target} PRIVATE gptx_prog_data)
  target_sources(${target} PRIVATE "${PROJECT_SOURCE_DIR}/examples/common/prog_exit.c")
  if(P_INSTALL)
    set_target_properties(${target} PROPERTIES INSTALL_RPATH "$ORIGIN/${_gptx_lib_from_bin}")
    install(TARGETS ${target} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT Runtime)
  endif()
endfunction()

# what the programs share beyond the data lookup: whole-file reads, opening
# a model in any format, the rule for "<|endoftext|>" in text, the flag
# parser (examples/common/)
add_library(gptx_prog_common STATIC "${PROJECT_SOURCE_DIR}/examples/common/prog_files.c"
                                    "${PROJECT_SOURCE_DIR}/examples/common/prog_flags.c"
                                    "${PROJECT_SOURCE_DIR}/examples/common/prog_model.c"
                                    "${PROJECT_SOURCE_DIR}/examples/common/prog_error.c"
                                    "${PROJECT_SOURCE_DIR}/examples/common/prog_text.c"
                                    "${PROJECT_SOURCE_DIR}/examples/common/prog_inputs.c"
                                    "${PROJECT_SOURCE_DIR}/examples/common/prog_outputs.c"
                                    "${PROJECT_SOURCE_DIR}/examples/common/prog_threads.c")
target_include_directories(gptx_prog_common PUBLIC "${PROJECT_SOURCE_DIR}/examples/common")
target_link_libraries(gptx_prog_common PUBLIC gptx)
gptx_target_warnings(gptx_prog_common)
