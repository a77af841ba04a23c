# mpi.cmake — engine/dist over MPI (Open MPI from Debian: libopenmpi-dev), or
# engine/dist/dist_stub.c, whose vn_dist_init says venom was built without
# MPI. VENOM_MPI: AUTO builds with MPI when find_package finds it, ON
# requires it, OFF never uses it. Sets VENOM_HAVE_MPI and trims
# VENOM_ENGINE_SOURCES to the files of the chosen side.
set(VENOM_HAVE_MPI OFF)
if(NOT VENOM_MPI STREQUAL "OFF")
  if(VENOM_MPI STREQUAL "ON")
    find_package(MPI REQUIRED COMPONENTS C)
  else()
    find_package(MPI COMPONENTS C)
  endif()
  set(VENOM_HAVE_MPI ${MPI_C_FOUND})
endif()
set(dist_dir ${PROJECT_SOURCE_DIR}/engine/dist)
list(REMOVE_ITEM VENOM_ENGINE_SOURCES ${dist_dir}/dist_nccl.c) # cmake/nccl.cmake adds it
if(VENOM_HAVE_MPI)
  list(REMOVE_ITEM VENOM_ENGINE_SOURCES ${dist_dir}/dist_stub.c)
  # The real file: Open MPI takes an absolute mpirun path as its install
  # prefix, and /bin/mpirun (merged /usr) would give "/", which it refuses.
  find_program(mpiexec_found NAMES mpirun mpiexec HINTS ${MPI_HOME}/bin)
  get_filename_component(VENOM_MPIEXEC "${mpiexec_found}" REALPATH)
  message(STATUS "venom: distributed over MPI ${MPI_C_VERSION} (${VENOM_MPIEXEC})")
else()
  list(REMOVE_ITEM VENOM_ENGINE_SOURCES ${dist_dir}/dist.c ${dist_dir}/dist_reducer.c
    ${dist_dir}/dist_group.c)
  message(STATUS "venom: no MPI; venom.distributed.init() will say so")
endif()
