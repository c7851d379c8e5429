# Install rules and package files for gptx.
#
# Included by the top-level CMakeLists.txt after the targets `gptx` (shared,
# SONAME libgptx.so.1) and `gptx_static` (static, OUTPUT_NAME gptx) exist.
# Installs:
#   include/gptx/*.h
#   lib/libgptx.so.0.2.0, libgptx.so.1, libgptx.so, libgptx.a
#   lib/cmake/gptx/gptx{Config,ConfigVersion,Targets,Targets-<config>}.cmake
#     -> find_package(gptx CONFIG) gives gptx::gptx and gptx::gptx_static
#   lib/pkgconfig/gptx.pc
# The build tree also gets gptxConfig.cmake + gptxTargets.cmake, so a consumer
# can use -Dgptx_DIR=<build dir> without installing.

include(CMakePackageConfigHelpers)

set(GPTX_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/gptx" CACHE STRING
  "Where gptxConfig.cmake is installed (relative to the prefix)")
set(GPTX_INSTALL_PKGCONFIGDIR "${CMAKE_INSTALL_LIBDIR}/pkgconfig" CACHE STRING
  "Where gptx.pc is installed (relative to the prefix)")
mark_as_advanced(GPTX_INSTALL_CMAKEDIR GPTX_INSTALL_PKGCONFIGDIR)

# ---- headers and libraries -------------------------------------------------
install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/gptx/"
  DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/gptx"
  COMPONENT Development
  FILES_MATCHING PATTERN "*.h")

# The include directory of the installed targets comes from their
# $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}> (no INCLUDES DESTINATION here,
# which would only duplicate it).
install(TARGETS gptx gptx_static
  EXPORT gptxTargets
  RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}" COMPONENT Runtime
  LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT Runtime
          NAMELINK_COMPONENT Development
  ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT Development)

# ---- CMake package ---------------------------------------------------------
# gptx_static's link interface holds ${BLAS_LIBRARIES} (full paths),
# Threads::Threads and m; gptxConfig.cmake finds Threads (and BLAS) again so
# Threads::Threads exists for the consumer.
install(EXPORT gptxTargets
  NAMESPACE gptx::
  FILE gptxTargets.cmake
  DESTINATION "${GPTX_INSTALL_CMAKEDIR}"
  COMPONENT Development)
export(EXPORT gptxTargets
  NAMESPACE gptx::
  FILE "${PROJECT_BINARY_DIR}/gptxTargets.cmake")

configure_package_config_file(
  "${PROJECT_SOURCE_DIR}/cmake/gptxConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/gptxConfig.cmake"
  INSTALL_DESTINATION "${GPTX_INSTALL_CMAKEDIR}")
# The version policy is the ABI promise's (docs/abi.md): any request from
# GPTX_ABI_FIRST_VERSION up to this version is answered (find_package(gptx
# 0.5) finds 0.7), an older ABI generation or a newer release is not.
configure_file("${PROJECT_SOURCE_DIR}/cmake/gptxConfigVersion.cmake.in"
               "${PROJECT_BINARY_DIR}/gptxConfigVersion.cmake" @ONLY)
install(FILES
    "${PROJECT_BINARY_DIR}/gptxConfig.cmake"
    "${PROJECT_BINARY_DIR}/gptxConfigVersion.cmake"
  DESTINATION "${GPTX_INSTALL_CMAKEDIR}"
  COMPONENT Development)

# ---- pkg-config ------------------------------------------------------------
# gptx.pc (shared) and gptx-static.pc (static: the archive by its path, as
# -lgptx would pick the .so) are configured at install time; DESTDIR is
# honoured by file(INSTALL). They are relocatable: `prefix=${pcfiledir}/../..`
# (one ".." per component of the pkgconfig folder below the prefix), so
# pkg-config keeps working when the installed prefix is moved. Only when that
# folder, the libdir or the includedir is absolute does `prefix=` hold the
# prefix actually installed to (cmake --install --prefix ... included).
if(NOT DEFINED GPTX_PC_LIBS_PRIVATE)
  set(GPTX_PC_LIBS_PRIVATE "-lopenblas -ljansson -lpcre2-8 -lpthread -lm")
  # dlopen for the modules (glibc 2.34 and later have it in libc)
  if(CMAKE_DL_LIBS)
    string(APPEND GPTX_PC_LIBS_PRIVATE " -l${CMAKE_DL_LIBS}")
  endif()
  # oneDNN and its OpenMP runtime for the CPU bf16 policies (cmake/GptxDnnl.cmake)
  if(GPTX_HAVE_DNNL)
    string(APPEND GPTX_PC_LIBS_PRIVATE " ${GPTX_DNNL_PC_LIBS}")
  endif()
endif()
foreach(_gptx_kind LIBDIR INCLUDEDIR)
  if(IS_ABSOLUTE "${CMAKE_INSTALL_${_gptx_kind}}")
    set(GPTX_PC_${_gptx_kind} "${CMAKE_INSTALL_${_gptx_kind}}")
  else()
    set(GPTX_PC_${_gptx_kind} "\${prefix}/${CMAKE_INSTALL_${_gptx_kind}}")
  endif()
endforeach()
if(IS_ABSOLUTE "${GPTX_INSTALL_PKGCONFIGDIR}")
  set(_gptx_pc_destination "${GPTX_INSTALL_PKGCONFIGDIR}")
else()
  set(_gptx_pc_destination "\${CMAKE_INSTALL_PREFIX}/${GPTX_INSTALL_PKGCONFIGDIR}")
endif()
# the prefix seen from the .pc file's folder: lib/pkgconfig -> ${pcfiledir}/../..
set(GPTX_PC_RELATIVE_PREFIX "")
if(NOT IS_ABSOLUTE "${GPTX_INSTALL_PKGCONFIGDIR}" AND NOT IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}"
   AND NOT IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  string(REGEX REPLACE "/+$" "" _gptx_pc_rel "${GPTX_INSTALL_PKGCONFIGDIR}")
  string(REGEX REPLACE "/+" ";" _gptx_pc_parts "${_gptx_pc_rel}")
  set(GPTX_PC_RELATIVE_PREFIX "\${pcfiledir}")
  foreach(_gptx_part IN LISTS _gptx_pc_parts)
    if(_gptx_part STREQUAL "..")
      message(FATAL_ERROR "GPTX_INSTALL_PKGCONFIGDIR ${GPTX_INSTALL_PKGCONFIGDIR}: give a folder "
                          "below the prefix (no ..) or an absolute one")
    endif()
    if(NOT _gptx_part STREQUAL ".")
      string(APPEND GPTX_PC_RELATIVE_PREFIX "/..")
    endif()
  endforeach()
endif()
file(CONFIGURE OUTPUT "${PROJECT_BINARY_DIR}/gptx_install_pkgconfig.cmake"
  CONTENT [==[
# Generated by cmake/GptxInstall.cmake: writes gptx.pc for the install prefix.
set(GPTX_PC_PREFIX [[@GPTX_PC_RELATIVE_PREFIX@]])
if(GPTX_PC_PREFIX STREQUAL "")
  set(GPTX_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
endif()
set(GPTX_PC_LIBDIR [[@GPTX_PC_LIBDIR@]])
set(GPTX_PC_INCLUDEDIR [[@GPTX_PC_INCLUDEDIR@]])
set(GPTX_PC_LIBS_PRIVATE [[@GPTX_PC_LIBS_PRIVATE@]])
set(PROJECT_VERSION [[@PROJECT_VERSION@]])
configure_file([[@PROJECT_SOURCE_DIR@/gptx.pc.in]] [[@PROJECT_BINARY_DIR@/gptx.pc]] @ONLY)
configure_file([[@PROJECT_SOURCE_DIR@/gptx-static.pc.in]] [[@PROJECT_BINARY_DIR@/gptx-static.pc]] @ONLY)
file(INSTALL [[@PROJECT_BINARY_DIR@/gptx.pc]] [[@PROJECT_BINARY_DIR@/gptx-static.pc]]
     DESTINATION "@_gptx_pc_destination@")
]==] @ONLY)
install(SCRIPT "${PROJECT_BINARY_DIR}/gptx_install_pkgconfig.cmake"
  COMPONENT Development)
