# cmake -DCURRENT=<gptx.h> -DFROZEN=<frozen copy> -DVERSION=<x.y.z> -P check_frozen.cmake
# The frozen header of this version must exist and equal the current one.
if(NOT EXISTS "${FROZEN}")
  message(FATAL_ERROR "abi_frozen_current: no frozen header for gptx ${VERSION} at ${FROZEN}: "
    "a new release keeps a copy of its public header; run `cmake --build <build> --target "
    "abi-update` and add ${VERSION} to GPTX_FROZEN_HEADERS in tests/abi/CMakeLists.txt")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files "${CURRENT}" "${FROZEN}"
  RESULT_VARIABLE differ)
if(differ)
  message(FATAL_ERROR "abi_frozen_current: ${CURRENT} differs from the frozen header of "
    "gptx ${VERSION} (${FROZEN}). A released header never changes: bump the version in "
    "CMakeLists.txt and gptx.h (CHANGELOG.md), then run `cmake --build <build> --target "
    "abi-update`, which records the ABI and freezes the new header.")
endif()
message(STATUS "abi_frozen_current: the frozen header of gptx ${VERSION} equals ${CURRENT}")
