# dist.cmake — the distributed tests (tests/dist/test_*.lua), included from
# the top-level CMakeLists.txt. Each runs as two ranks under mpirun
# (--oversubscribe: CI machines may have fewer cores than ranks), killed
# after 150 s so that a hang fails the test instead of stalling CI (not
# less: on a loaded machine a passing run took over 60 s). Open MPI
# refuses to run as root unless told (containers run CI as root); one BLAS
# and one OpenMP thread per rank. Without MPI they are TAP skips.
#
# In the sanitizer build these tests run without the leak checker (address
# and UB checks stay on): Open MPI keeps memory from MPI_Init past
# MPI_Finalize and unloads the plugins that allocated it, so the reports
# cannot be told apart or suppressed. A bare init() reports the same bytes
# and allocations as the whole of one_process.lua (bench/RESULTS.md).
set(env "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1")
if(VENOM_SANITIZE)
  string(APPEND env " ASAN_OPTIONS=detect_leaks=0")
endif()
set(can_run OFF)
set(why "venom was built without MPI (VENOM_MPI)")
if(VENOM_HAVE_MPI)
  if(EXISTS "${VENOM_MPIEXEC}")
    set(can_run ON)
  else()
    set(why "no mpirun found (install openmpi-bin)")
  endif()
endif()
file(GLOB scripts CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/dist/test_*.lua)
foreach(src ${scripts})
  get_filename_component(name ${src} NAME_WE)
  if(can_run)
    venom_tap_script(dist_${name}
      "cd \"${PROJECT_SOURCE_DIR}\" && ${env} exec timeout 150 \"${VENOM_MPIEXEC}\" -np 2 --oversubscribe \"${CMAKE_BINARY_DIR}/venom\" \"${src}\"")
  else()
    venom_tap_script(dist_${name} "echo '1..0 # SKIP ${why}'")
  endif()
endforeach()
# Three ranks: groups of ranks, and expert replicas averaging over their
# own ranks only (a world of 3, where that differs from the world).
if(can_run)
  venom_tap_script(dist_replicas_3ranks
    "cd \"${PROJECT_SOURCE_DIR}\" && ${env} exec timeout 150 \"${VENOM_MPIEXEC}\" -np 3 --oversubscribe \"${CMAKE_BINARY_DIR}/venom\" \"${PROJECT_SOURCE_DIR}/tests/dist/replicas_3ranks.lua\"")
else()
  venom_tap_script(dist_replicas_3ranks "echo '1..0 # SKIP ${why}'")
endif()
# Two ranks in two network namespaces over TCP (tests/dist/netns.sh: skips
# without root or `ip netns`).
if(can_run)
  venom_tap_script(dist_netns
    "${env} exec timeout 150 sh \"${PROJECT_SOURCE_DIR}/tests/dist/netns.sh\" \"${CMAKE_BINARY_DIR}\" \"${PROJECT_SOURCE_DIR}\" \"${VENOM_MPIEXEC}\"")
else()
  venom_tap_script(dist_netns "echo '1..0 # SKIP ${why}'")
endif()
# One process, no mpirun: init() outside mpirun is a world of one (and,
# without MPI, an error saying so).
venom_tap_script(dist_one_process
  "cd \"${PROJECT_SOURCE_DIR}\" && ${env} exec timeout 60 \"${CMAKE_BINARY_DIR}/venom\" \"${PROJECT_SOURCE_DIR}/tests/dist/one_process.lua\"")

# The tutorials with --distributed against their 1-process runs (a shell
# script that starts mpirun itself).
if(can_run)
  venom_tap_script(dist_test_tutorials
    "${env} exec timeout 300 sh \"${PROJECT_SOURCE_DIR}/tests/dist/test_tutorials.sh\" \"${CMAKE_BINARY_DIR}\" \"${PROJECT_SOURCE_DIR}\" \"${VENOM_MPIEXEC}\"")
else()
  venom_tap_script(dist_test_tutorials "echo '1..0 # SKIP ${why}'")
endif()
# ZeRO-1 and expert-parallel MoE in a world of one (no mpirun): the plain
# optimizer's and layer's numbers exactly. Needs MPI's init, so the same
# environment (no leak checker under the sanitizers), and a skip without MPI.
if(VENOM_HAVE_MPI)
  venom_tap_script(dist_zero_single
    "cd \"${PROJECT_SOURCE_DIR}\" && ${env} exec timeout 60 \"${CMAKE_BINARY_DIR}/venom\" \"${PROJECT_SOURCE_DIR}/tests/dist/zero_single.lua\"")
else()
  venom_tap_script(dist_zero_single "echo '1..0 # SKIP ${why}'")
endif()
