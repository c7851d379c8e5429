# oneDNN for the CPU backend's bf16 policies (backends/cpu/cpu_dnnl.c,
# docs/precision.md).
#
# GPTX_DNNL (AUTO, ON, OFF): AUTO builds the bf16 policies of the CPU backend
# when oneDNN is found (Debian: libdnnl-dev), through its header and library
# or, failing that, pkg-config; ON requires it; OFF leaves them out (they are then
# GPTX_ERR_UNSUPPORTED, saying why). oneDNN's Debian build runs on OpenMP:
# gptx calls two functions of the OpenMP API (omp_get_max_threads,
# omp_set_num_threads) so that every oneDNN product runs on the calling pool
# thread alone, and links the OpenMP runtime oneDNN uses (libgomp).
#
# Included by the top-level CMakeLists.txt after gptx_objects, gptx and
# gptx_static exist. Sets GPTX_HAVE_DNNL, GPTX_DNNL_LIBS and GPTX_DNNL_INCLUDE
# (bench/ links them too) and GPTX_DNNL_PC_LIBS (pkg-config Libs.private);
# cmake/GptxInstall.cmake reads the first and the last.

set(GPTX_DNNL AUTO CACHE STRING "Build the CPU bf16 policies on oneDNN: AUTO, ON or OFF")
set_property(CACHE GPTX_DNNL PROPERTY STRINGS AUTO ON OFF)

set(GPTX_HAVE_DNNL OFF)
set(GPTX_DNNL_PC_LIBS "")
set(GPTX_DNNL_LIBS "")
if(NOT GPTX_DNNL STREQUAL "OFF")
  # The header and the library directly, not oneDNN's CMake package: Debian's
  # package config (built with the OpenCL GPU runtime) requires the OpenCL
  # development files, which a fresh machine lacks, and its find_dependency
  # would then fall on every consumer of the installed gptx package too.
  find_path(GPTX_DNNL_INCLUDE_DIR NAMES oneapi/dnnl/dnnl.h)
  find_library(GPTX_DNNL_LIBRARY NAMES dnnl)
  mark_as_advanced(GPTX_DNNL_INCLUDE_DIR GPTX_DNNL_LIBRARY)
  if(GPTX_DNNL_INCLUDE_DIR AND GPTX_DNNL_LIBRARY)
    set(GPTX_DNNL_LIBS "${GPTX_DNNL_LIBRARY}")
    set(GPTX_DNNL_INCLUDE "${GPTX_DNNL_INCLUDE_DIR}")
    set(GPTX_HAVE_DNNL ON)
  else()
    pkg_check_modules(GPTX_PC_DNNL QUIET dnnl)
    if(GPTX_PC_DNNL_FOUND)
      find_library(GPTX_DNNL_PC_LIBRARY NAMES dnnl HINTS ${GPTX_PC_DNNL_LIBRARY_DIRS})
      mark_as_advanced(GPTX_DNNL_PC_LIBRARY)
      if(GPTX_DNNL_PC_LIBRARY)
        set(GPTX_DNNL_LIBS "${GPTX_DNNL_PC_LIBRARY}")
        set(GPTX_DNNL_INCLUDE "${GPTX_PC_DNNL_INCLUDE_DIRS}")
        set(GPTX_HAVE_DNNL ON)
      endif()
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
  target_include_directories(gptx_objects PRIVATE ${GPTX_DNNL_INCLUDE})
  foreach(t gptx)
    target_link_libraries(${t} PRIVATE ${GPTX_DNNL_LIBS} ${GPTX_OPENMP_RUNTIME})
  endforeach()
  target_link_libraries(gptx_static INTERFACE ${GPTX_DNNL_LIBS} ${GPTX_OPENMP_RUNTIME})
  set(GPTX_DNNL_PC_LIBS "-ldnnl -lgomp")
endif()
