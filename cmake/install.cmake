# install.cmake — what `cmake --install` puts where (included from the
# top-level CMakeLists.txt, after every target is defined):
#
#   lib/libvenom.so, libvenom.a     the engine (venom.h)
#   lib/libvenom_lua.so             the Lua bridge for C hosts (venom_lua.h)
#   include/venom.h, venom_lua.h
#   include/venom/*.h               venom.h's sub-headers (reached only through it)
#   bin/venom                       the script runner and REPL
#   share/lua/5.1/venom/*.lua       the Lua modules
#   lib/lua/5.1/venom/core.so       the C module, for a stock `luajit`
#   lib/pkgconfig/venom.pc, venom-lua.pc
#   lib/cmake/venom/                find_package(venom): venom::venom, venom::venom_lua
#
# Installed binaries find their libraries through an RPATH relative to
# themselves, and the bridge finds the Lua modules relative to itself, so an
# installed tree keeps working when it is moved.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set_target_properties(venom PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR})
set_target_properties(venom_lua PROPERTIES VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR})

# libvenom.a from the objects already built for libvenom.so (compiled as
# position-independent code, so one compilation serves both).
add_library(venom_static STATIC $<TARGET_OBJECTS:venom>)
set_target_properties(venom_static PROPERTIES OUTPUT_NAME venom)
if(TARGET venom_sm90a) # the sm_90a kernel's objects, which libvenom.so links from its own library
  target_sources(venom_static PRIVATE $<TARGET_OBJECTS:venom_sm90a>)
endif()
if(VENOM_HAVE_CUDA) # the same objects; the property must still be set on the target
  set_target_properties(venom_static PROPERTIES CUDA_ARCHITECTURES "${VENOM_CUDA_ARCHITECTURES}")
  # libvenom.a users link the CUDA runtime (static, C++) and cuBLAS too.
  set(VENOM_PC_CUDA_LIBS "-L${CUDAToolkit_LIBRARY_DIR} -lcublas -lcublasLt -lcudart_static -ldl -lrt -lstdc++")
endif()

if(VENOM_HAVE_MPI) # libvenom.a users link MPI too
  list(JOIN MPI_C_LIBRARIES " " VENOM_PC_MPI_LIBS)
endif()

# RPATHs from each installed binary to the library directory.
file(RELATIVE_PATH rel_bin ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_LIBDIR})
file(RELATIVE_PATH rel_core ${CMAKE_INSTALL_FULL_LIBDIR}/lua/5.1/venom ${CMAKE_INSTALL_FULL_LIBDIR})
set_target_properties(venom_exe PROPERTIES INSTALL_RPATH "$ORIGIN/${rel_bin}")
set_target_properties(venom_lua_core PROPERTIES INSTALL_RPATH "$ORIGIN/${rel_core}")
set_target_properties(venom_lua PROPERTIES INSTALL_RPATH "$ORIGIN")

install(TARGETS venom venom_lua EXPORT venomTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS venom_static ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES engine/include/venom.h lua/include/venom_lua.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# venom.h's sub-headers (venom/moe.h, ...), reached only through venom.h
install(DIRECTORY engine/include/venom DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(TARGETS venom_exe RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS venom_lua_core LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/lua/5.1/venom)
install(DIRECTORY lua/venom DESTINATION ${CMAKE_INSTALL_DATADIR}/lua/5.1 FILES_MATCHING PATTERN "*.lua")

# pkg-config files locate the prefix from their own directory (${pcfiledir}).
file(RELATIVE_PATH VENOM_PC_PREFIX ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" VENOM_PC_PREFIX "${VENOM_PC_PREFIX}")
foreach(pc venom venom-lua)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/${pc}.pc.in ${CMAKE_BINARY_DIR}/${pc}.pc @ONLY)
  install(FILES ${CMAKE_BINARY_DIR}/${pc}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endforeach()

set(cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/venom)
install(EXPORT venomTargets NAMESPACE venom:: DESTINATION ${cmake_dir})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/venomConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES cmake/venomConfig.cmake ${CMAKE_BINARY_DIR}/venomConfigVersion.cmake
        DESTINATION ${cmake_dir})
