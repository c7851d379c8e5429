# oneDNN for the CPU backend's bf16 policies (backends/cpu/cpu_dnnl.c,
# docs/precision.md).
#
# GPTX_DNNL (AUTO, ON, OFF): AUTO builds the bf16 policies of the CPU backend
# when a usable oneDNN is found (Debian: libdnnl-dev), through its header and
# library or, failing that, pkg-config; ON requires it; OFF leaves them out
# (they are then GPTX_ERR_UNSUPPORTED, saying why).
#
# Accepted: oneDNN 2.6 or later 2.x, and 3.x, built on the OpenMP CPU runtime
# (DNNL_CPU_RUNTIME OMP in dnnl_config.h; Debian's 2.6 and PyPI's
# onednn-devel-cpu-gomp 3.2 are). gptx calls two functions of the OpenMP API
# (omp_get_max_threads, omp_set_num_threads) so that every oneDNN product runs
# on the calling pool thread alone, and links the OpenMP runtime oneDNN uses
# (libgomp). Other runtimes are refused: under TBB or SYCL (PyPI's plain
# onednn/onednn-devel since 2024) oneDNN would start threads of its own beside
# the pool, and its K-blocking, hence the bits, would follow their count.
# Under ON a refused oneDNN is an error, under AUTO the policies are left out
# with a STATUS line saying why.
#
# GPTX_DNNL_ROOT: a oneDNN install prefix searched first (include/ and lib/
# inside it: a venv with `pip install onednn-devel-cpu-gomp`, or a source
# build's install prefix); CMAKE_PREFIX_PATH works too. The library's folder
# goes into the build RPATH (CMake's default for linked full paths).
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
  set(GPTX_DNNL_ROOT "" CACHE PATH "A oneDNN install prefix searched first (include/, lib/)")
  if(GPTX_DNNL_ROOT)
    find_path(GPTX_DNNL_INCLUDE_DIR NAMES oneapi/dnnl/dnnl.h
              PATHS "${GPTX_DNNL_ROOT}/include" NO_DEFAULT_PATH)
    find_library(GPTX_DNNL_LIBRARY NAMES dnnl
                 PATHS "${GPTX_DNNL_ROOT}/lib" "${GPTX_DNNL_ROOT}/lib64" NO_DEFAULT_PATH)
  endif()
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
  set(_gptx_dnnl_why "oneDNN was not found (Debian: apt-get install libdnnl-dev; "
                     "or -DGPTX_DNNL_ROOT=<prefix with include/oneapi/dnnl and lib/libdnnl.so>)")
  # The version and the CPU runtime, from the headers found
  set(GPTX_DNNL_VERSION "")
  if(GPTX_HAVE_DNNL)
    set(_gptx_dnnl_h "")
    foreach(dir ${GPTX_DNNL_INCLUDE})
      if(EXISTS "${dir}/oneapi/dnnl/dnnl_version.h" AND NOT _gptx_dnnl_h)
        set(_gptx_dnnl_h "${dir}/oneapi/dnnl")
      endif()
    endforeach()
    set(_major "")
    set(_minor "")
    set(_patch "")
    set(_runtime "")
    if(_gptx_dnnl_h)
      file(STRINGS "${_gptx_dnnl_h}/dnnl_version.h" _v REGEX "^#define DNNL_VERSION_(MAJOR|MINOR|PATCH) ")
      foreach(line ${_v})
        if(line MATCHES "DNNL_VERSION_MAJOR +([0-9]+)")
          set(_major ${CMAKE_MATCH_1})
        elseif(line MATCHES "DNNL_VERSION_MINOR +([0-9]+)")
          set(_minor ${CMAKE_MATCH_1})
        elseif(line MATCHES "DNNL_VERSION_PATCH +([0-9]+)")
          set(_patch ${CMAKE_MATCH_1})
        endif()
      endforeach()
      if(EXISTS "${_gptx_dnnl_h}/dnnl_config.h")
        file(STRINGS "${_gptx_dnnl_h}/dnnl_config.h" _r REGEX "^#define DNNL_CPU_RUNTIME ")
        if(_r MATCHES "DNNL_RUNTIME_([A-Z]+)")
          set(_runtime ${CMAKE_MATCH_1})
        endif()
      endif()
    endif()
    set(GPTX_DNNL_VERSION "${_major}.${_minor}.${_patch}")
    if(_major STREQUAL "" OR _minor STREQUAL "")
      set(GPTX_HAVE_DNNL OFF)
      set(_gptx_dnnl_why "oneDNN at ${GPTX_DNNL_INCLUDE} has no readable oneapi/dnnl/dnnl_version.h")
    elseif(NOT (_major EQUAL 3 OR (_major EQUAL 2 AND _minor GREATER_EQUAL 6)))
      set(GPTX_HAVE_DNNL OFF)
      set(_gptx_dnnl_why "oneDNN ${GPTX_DNNL_VERSION} at ${GPTX_DNNL_INCLUDE} is not one gptx "
                         "accepts (2.6 or later 2.x, or 3.x)")
    elseif(NOT _runtime STREQUAL "OMP")
      set(GPTX_HAVE_DNNL OFF)
      set(_gptx_dnnl_why "oneDNN ${GPTX_DNNL_VERSION} at ${GPTX_DNNL_INCLUDE} runs on the "
                         "'${_runtime}' CPU runtime, and gptx needs the OpenMP one (DNNL_CPU_RUNTIME "
                         "OMP: Debian's libdnnl-dev, PyPI's onednn-devel-cpu-gomp, or a source "
                         "build with -DDNNL_CPU_RUNTIME=OMP)")
    endif()
  endif()
  # libgomp.so is in the compiler's own folder; libgomp.so.1 is in the system one
  find_library(GPTX_OPENMP_RUNTIME NAMES gomp libgomp.so.1)
  mark_as_advanced(GPTX_OPENMP_RUNTIME)
  if(GPTX_HAVE_DNNL AND NOT GPTX_OPENMP_RUNTIME)
    set(GPTX_HAVE_DNNL OFF)
    set(_gptx_dnnl_why "the OpenMP runtime oneDNN runs on (libgomp) was not found")
  endif()
  if(NOT GPTX_HAVE_DNNL)
    string(JOIN "" _gptx_dnnl_why ${_gptx_dnnl_why})
    if(GPTX_DNNL STREQUAL "ON")
      message(FATAL_ERROR "GPTX_DNNL=ON but ${_gptx_dnnl_why}")
    endif()
    message(STATUS "gptx: CPU bf16 policies left out: ${_gptx_dnnl_why}")
  endif()
endif()
if(GPTX_HAVE_DNNL)
  message(STATUS "gptx: CPU bf16 policies on oneDNN ${GPTX_DNNL_VERSION} (${GPTX_DNNL_LIBS})")
else()
  message(STATUS "gptx: CPU bf16 policies on oneDNN OFF")
endif()

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
  # a oneDNN outside the system folders (GPTX_DNNL_ROOT): its folder too
  get_filename_component(_gptx_dnnl_libdir "${GPTX_DNNL_LIBS}" DIRECTORY)
  if(NOT _gptx_dnnl_libdir IN_LIST CMAKE_C_IMPLICIT_LINK_DIRECTORIES)
    set(GPTX_DNNL_PC_LIBS "-L${_gptx_dnnl_libdir} -ldnnl -lgomp")
  endif()
endif()
