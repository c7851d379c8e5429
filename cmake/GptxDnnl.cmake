# oneDNN for the CPU backend's bf16 policies (backends/cpu/cpu_dnnl.c,
# docs/precision.md).
#
# GPTX_DNNL (AUTO, ON, OFF): AUTO builds the bf16 policies of the CPU backend
# when oneDNN is found (Debian: libdnnl-dev), through its CMake package or,
# failing that, pkg-config; ON requires it; OFF leaves them out (they are then
# GPTX_ERR_UNSUPPORTED, saying why). oneDNN's Debian build runs on OpenMP:
# gptx calls two functions of the OpenMP API (omp_get_max_threads,
# omp_set_num_threads) so that every oneDNN product runs on the calling pool
# thread alone, and links the OpenMP runtime oneDNN uses (libgomp).
#
# Included by the top-level CMakeLists.txt after gptx_objects, gptx and
# gptx_static exist. Sets GPTX_HAVE_DNNL and GPTX_DNNL_PC_LIBS (pkg-config
# Libs.private); cmake/GptxInstall.cmake reads both.

set(GPTX_DNNL AUTO CACHE STRING "Build the CPU bf16 policies on oneDNN: AUTO, ON or OFF")
set_property(CACHE GPTX_DNNL PROPERTY STRINGS AUTO ON OFF)

set(GPTX_HAVE_DNNL OFF)
set(GPTX_DNNL_PC_LIBS "")
set(_gptx_dnnl_libs "")
if(NOT GPTX_DNNL STREQUAL "OFF")
  find_package(dnnl CONFIG QUIET)
  if(TARGET DNNL::dnnl)
    set(_gptx_dnnl_libs DNNL::dnnl)
    set(GPTX_HAVE_DNNL ON)
    set(GPTX_DNNL_FROM_CMAKE ON)
  else()
    pkg_check_modules(GPTX_PC_DNNL QUIET IMPORTED_TARGET dnnl)
    if(GPTX_PC_DNNL_FOUND)
      set(_gptx_dnnl_libs PkgConfig::GPTX_PC_DNNL)
      set(GPTX_HAVE_DNNL ON)
    endif()
  endif()
  # libgomp.so is in the compiler's own folder; libgomp.so.1 is in the system one
  find_library(GPTX_OPENMP_RUNTIME NAMES gomp libgomp.so.1)
  mark_as_advanced(GPTX_OPENMP_RUNTIME)
  if(GPTX_HAVE_DNNL AND NOT GPTX_OPENMP_RUNTIME)
    set(GPTX_HAVE_DNNL OFF)
  endif()
  if(NOT GPTX_HAVE_DNNL AND GPTX_DNNL STREQUAL "ON")
    message(FATAL_ERROR "GPTX_DNNL=ON but oneDNN (and libgomp) were not found "
                        "(Debian: apt-get install libdnnl-dev)")
  endif()
endif()
message(STATUS "gptx: CPU bf16 policies on oneDNN ${GPTX_HAVE_DNNL}")

if(GPTX_HAVE_DNNL)
  target_sources(gptx_objects PRIVATE ${PROJECT_SOURCE_DIR}/backends/cpu/cpu_dnnl.c)
  target_compile_definitions(gptx_objects PRIVATE GPTX_HAVE_DNNL=1)
  # headers only: the objects are linked below
  target_include_directories(gptx_objects PRIVATE
    $<TARGET_PROPERTY:${_gptx_dnnl_libs},INTERFACE_INCLUDE_DIRECTORIES>)
  foreach(t gptx)
    target_link_libraries(${t} PRIVATE ${_gptx_dnnl_libs} ${GPTX_OPENMP_RUNTIME})
  endforeach()
  target_link_libraries(gptx_static INTERFACE ${_gptx_dnnl_libs} ${GPTX_OPENMP_RUNTIME})
  set(GPTX_DNNL_PC_LIBS "-ldnnl -lgomp")
endif()
