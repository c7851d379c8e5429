# Communicator engines (lib/comm*.c, docs/distributed.md), built as modules
# (cmake/GptxModules.cmake): MPI's is libgptx_mpi.so, NCCL's lives in the
# cuda module (backends/cuda/CMakeLists.txt). libgptx links neither.
#
# GPTX_MPI  (AUTO, ON, OFF): the MPI engine for CPU data parallelism.
#   AUTO builds it when an MPI C library is found (Debian: libopenmpi-dev).
# GPTX_NCCL (AUTO, ON, OFF): the NCCL engine for CUDA contexts. AUTO builds it
#   when the CUDA toolkit (runtime headers and libcudart) and nccl.h/libnccl
#   are found; it is plain C against the CUDA runtime API, so no CUDA
#   compiler is needed. NCCL_ROOT (variable or environment) points at a
#   non-standard NCCL install.
#
# Included by the top-level CMakeLists.txt after cmake/GptxModules.cmake.
# Sets GPTX_HAVE_MPI and GPTX_HAVE_NCCL (read by cmake/GptxInstall.cmake and
# the tests).

set(GPTX_NCCL AUTO CACHE STRING
    "Build the NCCL communicator (CUDA data parallelism): AUTO, ON or OFF")
set_property(CACHE GPTX_MPI PROPERTY STRINGS AUTO ON OFF)
set_property(CACHE GPTX_NCCL PROPERTY STRINGS AUTO ON OFF)

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
  gptx_add_module(mpi
    SOURCES ${PROJECT_SOURCE_DIR}/backends/mpi/mpi_engine.c
            ${PROJECT_SOURCE_DIR}/backends/mpi/mpi_module.c
    INCLUDE ${PROJECT_SOURCE_DIR}/backends/mpi
    LINK MPI::MPI_C)
  # MPI's headers are someone else's code: no warnings from them
  target_include_directories(gptx_mpi SYSTEM PRIVATE ${MPI_C_INCLUDE_DIRS})
  # mpirun for the tests (tests/comm); found next to the compiler wrapper
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
  if(GPTX_HAVE_CUDA AND GPTX_NCCL_INCLUDE_DIR AND GPTX_NCCL_LIBRARY)
    set(GPTX_HAVE_NCCL ON)
  elseif(GPTX_NCCL STREQUAL "ON")
    message(FATAL_ERROR "GPTX_NCCL=ON but the CUDA backend (${GPTX_HAVE_CUDA}), nccl.h "
                        "(${GPTX_NCCL_INCLUDE_DIR}) or libnccl (${GPTX_NCCL_LIBRARY}) is missing")
  endif()
endif()
message(STATUS "gptx: NCCL communicator ${GPTX_HAVE_NCCL}")
if(GPTX_HAVE_CUDA)
  gptx_add_cuda_module() # with the NCCL engine when GPTX_HAVE_NCCL
endif()
