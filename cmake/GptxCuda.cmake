# GPTX_CUDA: AUTO builds the CUDA backend when a CUDA compiler is found, ON
# requires it, OFF skips it. The CUDA backend's sources arrive with
# backends/cuda/CMakeLists.txt; until they exist the build is CPU-only and
# gptx_features() does not report GPTX_FEATURE_CUDA.
set(GPTX_HAVE_CUDA OFF)
if(NOT GPTX_CUDA STREQUAL "OFF")
  # Machine code + PTX for each listed architecture (the CUDA_ARCHITECTURES
  # of every CUDA target). The default serves A100 and H100/H200 builds; one
  # GPU's own number halves the device compile (tests/gpu/run_all.sh passes
  # 90 on an H200). Not CMAKE_CUDA_ARCHITECTURES: enable_language caches the
  # compiler's default there (sm_75 with nvcc 13), too old for bf16.
  set(GPTX_CUDA_ARCHITECTURES "80;90" CACHE STRING
      "CUDA architectures to build for (e.g. 90 for H100/H200)")
  option(GPTX_CUDA_PTXAS_VERBOSE "ptxas's per-kernel register and spill report in the build log" OFF)
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
