# venomConfig.cmake — find_package(venom) for an installed venom. Gives the
# imported targets
#   venom::venom      libvenom.so, include dir with venom.h
#   venom::venom_lua  libvenom_lua.so (the Lua bridge, venom_lua.h); links venom::venom
# Static linking goes through pkg-config: `pkg-config --static --libs venom`.
include("${CMAKE_CURRENT_LIST_DIR}/venomTargets.cmake")
