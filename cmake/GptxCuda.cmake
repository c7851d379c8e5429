# GPTX_CUDA: AUTO builds the CUDA backend when a CUDA compiler is found, ON
# requires it, OFF skips it. The CUDA backend's sources arrive with
# backends/cuda/CMakeLists.txt; until they exist the build is CPU-only and
# gptx_features() does not report GPTX_FEATURE_CUDA.
set(GPTX_HAVE_CUDA OFF)
if(NOT GPTX_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(EXISTS ${PROJECT_SOURCE_DIR}/backends/cuda/CMakeLists.txt AND CMAKE_CUDA_COMPILER)
    set(GPTX_HAVE_CUDA ON)
  elseif(GPTX_CUDA STREQUAL "ON")
    if(NOT CMAKE_CUDA_COMPILER)
      message(FATAL_ERROR "GPTX_CUDA=ON but no CUDA compiler was found")
    else()
      message(FATAL_ERROR "GPTX_CUDA=ON but this tree has no CUDA backend yet (backends/cuda)")
    endif()
  endif()
endif()
message(STATUS "gptx: CUDA backend ${GPTX_HAVE_CUDA}")
if(GPTX_HAVE_CUDA)
  include(${PROJECT_SOURCE_DIR}/backends/cuda/CMakeLists.txt)
endif()
