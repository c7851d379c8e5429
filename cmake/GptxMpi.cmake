# Communicator engines (lib/comm*.c, docs/distributed.md).
#
# GPTX_MPI  (AUTO, ON, OFF): the MPI engine for CPU data parallelism.
#   AUTO builds it when an MPI C library is found (Debian: libopenmpi-dev).
# GPTX_NCCL (AUTO, ON, OFF): the NCCL engine for CUDA contexts. AUTO builds it
#   when the CUDA toolkit (runtime headers and libcudart) and nccl.h/libnccl
#   are found; it is plain C against the CUDA runtime API, so no CUDA
#   compiler is needed. NCCL_ROOT (variable or environment) points at a
#   non-standard NCCL install.
#
# Included by the top-level CMakeLists.txt after the targets gptx_objects,
# gptx and gptx_static exist. Sets GPTX_HAVE_MPI and GPTX_HAVE_NCCL (read by
# cmake/GptxInstall.cmake) and GPTX_COMM_PC_LIBS (pkg-config Libs.private).

set(GPTX_NCCL AUTO CACHE STRING
    "Build the NCCL communicator (CUDA data parallelism): AUTO, ON or OFF")
set_property(CACHE GPTX_MPI PROPERTY STRINGS AUTO ON OFF)
set_property(CACHE GPTX_NCCL PROPERTY STRINGS AUTO ON OFF)

set(GPTX_COMM_PC_LIBS "")

# Links a dependency into the library and, for the static archive, into its users.
function(gptx_comm_link)
  target_link_libraries(gptx PRIVATE ${ARGN})
  target_link_libraries(gptx_static INTERFACE ${ARGN})
endfunction()

# Turns full library paths into "-L<dir> -l<name>" for pkg-config.
function(gptx_comm_pc_flags out)
  set(flags "")
  foreach(lib ${ARGN})
    if(lib MATCHES "^/")
      get_filename_component(dir "${lib}" DIRECTORY)
      get_filename_component(name "${lib}" NAME_WE)
      string(REGEX REPLACE "^lib" "" name "${name}")
      list(APPEND flags "-L${dir}" "-l${name}")
    elseif(lib MATCHES "^-")
      list(APPEND flags "${lib}")
    else()
      list(APPEND flags "-l${lib}")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES flags)
  string(REPLACE ";" " " flags "${flags}")
  set(${out} "${flags}" PARENT_SCOPE)
endfunction()

# ---- MPI -------------------------------------------------------------------
set(GPTX_HAVE_MPI OFF)
if(NOT GPTX_MPI STREQUAL "OFF")
  find_package(MPI COMPONENTS C QUIET)
  if(MPI_C_FOUND)
    set(GPTX_HAVE_MPI ON)
  elseif(GPTX_MPI STREQUAL "ON")
    message(FATAL_ERROR "GPTX_MPI=ON but no MPI C library was found (Debian: apt-get install "
                        "libopenmpi-dev openmpi-bin)")
  endif()
endif()
message(STATUS "gptx: MPI communicator ${GPTX_HAVE_MPI}")
if(GPTX_HAVE_MPI)
  target_sources(gptx_objects PRIVATE ${PROJECT_SOURCE_DIR}/lib/comm_mpi.c)
  target_compile_definitions(gptx_objects PRIVATE GPTX_HAVE_MPI=1)
  # MPI's headers are someone else's code: no warnings from them
  target_include_directories(gptx_objects SYSTEM PRIVATE ${MPI_C_INCLUDE_DIRS})
  gptx_comm_link(MPI::MPI_C)
  gptx_comm_pc_flags(_gptx_mpi_pc ${MPI_C_LIBRARIES})
  string(APPEND GPTX_COMM_PC_LIBS " ${_gptx_mpi_pc}")
  # mpirun for the tests (tests/mpi); found next to the compiler wrapper
  if(NOT MPIEXEC_EXECUTABLE)
    find_program(MPIEXEC_EXECUTABLE NAMES mpirun mpiexec)
  endif()
endif()

# ---- NCCL ------------------------------------------------------------------
set(GPTX_HAVE_NCCL OFF)
if(NOT GPTX_NCCL STREQUAL "OFF")
  find_package(CUDAToolkit QUIET)
  set(_gptx_nccl_hints ${NCCL_ROOT} $ENV{NCCL_ROOT})
  if(CUDAToolkit_FOUND)
    list(APPEND _gptx_nccl_hints ${CUDAToolkit_LIBRARY_ROOT} ${CUDAToolkit_TARGET_DIR})
  endif()
  find_path(GPTX_NCCL_INCLUDE_DIR nccl.h HINTS ${_gptx_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS}
            PATH_SUFFIXES include)
  find_library(GPTX_NCCL_LIBRARY nccl HINTS ${_gptx_nccl_hints} ${CUDAToolkit_LIBRARY_DIR}
               PATH_SUFFIXES lib lib64)
  if(CUDAToolkit_FOUND AND TARGET CUDA::cudart AND GPTX_NCCL_INCLUDE_DIR AND GPTX_NCCL_LIBRARY)
    set(GPTX_HAVE_NCCL ON)
  elseif(GPTX_NCCL STREQUAL "ON")
    message(FATAL_ERROR "GPTX_NCCL=ON but the CUDA toolkit (${CUDAToolkit_FOUND}), nccl.h "
                        "(${GPTX_NCCL_INCLUDE_DIR}) or libnccl (${GPTX_NCCL_LIBRARY}) is missing")
  endif()
endif()
message(STATUS "gptx: NCCL communicator ${GPTX_HAVE_NCCL}")
if(GPTX_HAVE_NCCL)
  target_sources(gptx_objects PRIVATE ${PROJECT_SOURCE_DIR}/lib/comm_nccl.c)
  target_compile_definitions(gptx_objects PRIVATE GPTX_HAVE_NCCL=1)
  target_include_directories(gptx_objects SYSTEM PRIVATE ${GPTX_NCCL_INCLUDE_DIR}
                                                         ${CUDAToolkit_INCLUDE_DIRS})
  # full paths, so the exported static target needs no CUDA package lookup
  gptx_comm_link(${GPTX_NCCL_LIBRARY} ${CUDA_cudart_LIBRARY})
  gptx_comm_pc_flags(_gptx_nccl_pc ${GPTX_NCCL_LIBRARY} ${CUDA_cudart_LIBRARY})
  string(APPEND GPTX_COMM_PC_LIBS " ${_gptx_nccl_pc}")
endif()
string(STRIP "${GPTX_COMM_PC_LIBS}" GPTX_COMM_PC_LIBS)
