# Adds tests/gpu and bench/gpu to a build whose tests/CMakeLists.txt and
# bench/CMakeLists.txt do not include them yet:
#   cmake -DCMAKE_PROJECT_INCLUDE=<this file> ...
# (run_all.sh uses it only when the add_subdirectory lines are missing). The
# files are include()d at the end of the top-level directory (deferred calls
# may not add subdirectories), so they use CMAKE_CURRENT_LIST_DIR.
include(CheckLanguage)
check_language(CXX)
if(CMAKE_CXX_COMPILER)
  enable_language(CXX) # not allowed in the deferred call
endif()
cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL _gptx_gpu_hook)
function(_gptx_gpu_hook)
  if(GPTX_BUILD_TESTS AND NOT TARGET test_cuda_cache)
    include(${CMAKE_SOURCE_DIR}/tests/gpu/CMakeLists.txt)
  endif()
  if(GPTX_BUILD_BENCH AND EXISTS ${CMAKE_SOURCE_DIR}/bench/gpu/CMakeLists.txt
     AND NOT TARGET gptx-bench-gpu)
    include(${CMAKE_SOURCE_DIR}/bench/gpu/CMakeLists.txt)
  endif()
endfunction()
