# cuda.cmake — the CUDA backend (kernels/*.cu) of libvenom, included from the
# top-level CMakeLists.txt after the venom target exists.
#
# VENOM_CUDA=AUTO (default) builds it when a CUDA compiler (nvcc) is found,
# ON requires one, OFF never builds it. Without it kernels/stub.c stands in:
# vn_cuda_device_count() is 0 and moving a tensor to CUDA is a clear error.
# Code is generated for sm_90 (H200/H100) plus compute_90 PTX, which the
# driver can compile for newer GPUs. The CUDA runtime is linked statically
# (no libcudart at run time); cuBLAS/cuBLASLt dynamically.
set(VENOM_CUDA AUTO CACHE STRING "Build the CUDA backend: AUTO (if nvcc is found), ON or OFF")
set_property(CACHE VENOM_CUDA PROPERTY STRINGS AUTO ON OFF)

set(VENOM_HAVE_CUDA OFF)
if(NOT VENOM_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc) # the toolkit's default place, off PATH
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(VENOM_HAVE_CUDA ON)
  elseif(VENOM_CUDA STREQUAL "ON")
    message(FATAL_ERROR "VENOM_CUDA=ON but no CUDA compiler (nvcc) was found; install the CUDA "
                        "toolkit or configure with -DVENOM_CUDA=OFF")
  endif()
endif()

if(VENOM_HAVE_CUDA)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  # cuBLAS/cuBLASLt (GEMM), cuSPARSE (CSR) and the static runtime are part
  # of the toolkit, but a trimmed image may lack them: say so plainly.
  foreach(lib cudart_static cublas cublasLt cusparse)
    if(NOT TARGET CUDA::${lib})
      message(FATAL_ERROR "venom: the CUDA backend needs lib${lib} from the CUDA toolkit, not "
              "found under ${CUDAToolkit_LIBRARY_DIR} (nvcc ${CUDAToolkit_VERSION}); install it "
              "(e.g. the toolkit's libcublas-dev / cuda-libraries-dev packages) or configure with "
              "-DVENOM_CUDA=OFF")
    endif()
  endforeach()
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  file(GLOB VENOM_CUDA_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/kernels/*.cu)
  target_sources(venom PRIVATE ${VENOM_CUDA_SOURCES})
  # The target exists before CUDA is enabled, so it is set here, not by
  # CMAKE_CUDA_ARCHITECTURES. -DVENOM_CUDA_ARCHITECTURES=... overrides.
  set(VENOM_CUDA_ARCHITECTURES "90-real;90-virtual" CACHE STRING "CUDA targets of kernels/")
  set_target_properties(venom PROPERTIES CUDA_ARCHITECTURES "${VENOM_CUDA_ARCHITECTURES}")
  # Host-side warnings as errors too (nvcc forwards -Xcompiler flags to gcc).
  set(cuda_flags -Xcompiler=-Wall,-Wno-unused-parameter)
  if(VENOM_WERROR)
    list(APPEND cuda_flags -Werror=all-warnings -Xcompiler=-Werror)
  endif()
  target_compile_options(venom PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${cuda_flags}>)
  # The tensor-core kernels (Sparse Tensor Core V:N:M, attention): ptxas
  # prints each kernel's registers, shared memory and stack in the build log
  # (-v), and a register spill is a build error (-warn-spills with ptxas's
  # -Werror), whatever VENOM_WERROR: a spilling inner loop would lose the
  # speed these kernels exist for.
  set_source_files_properties(${PROJECT_SOURCE_DIR}/kernels/vnm_sptc.cu
                              ${PROJECT_SOURCE_DIR}/kernels/attention.cu PROPERTIES
                              COMPILE_OPTIONS "-Xptxas=-v,-warn-spills,-Werror")
  target_link_libraries(venom PRIVATE CUDA::cudart_static CUDA::cublas CUDA::cublasLt CUDA::cusparse)
  message(STATUS "venom: building the CUDA backend for ${VENOM_CUDA_ARCHITECTURES}")
  # GPU benchmarks (tables, never pass/fail; tests/gpu/device-check.sh runs
  # them): bench/cuda_ops (GEMM against cuBLAS, launch overhead, bandwidth)
  # and bench/vnm_gpu (the V:N:M Sparse Tensor Core kernels) when present.
  foreach(bench cuda_ops vnm_gpu)
    if(EXISTS ${PROJECT_SOURCE_DIR}/bench/${bench}.c)
      add_executable(${bench} bench/${bench}.c)
      target_link_libraries(${bench} PRIVATE venom CUDA::cudart_static CUDA::cublas m)
      target_include_directories(${bench} PRIVATE ${VENOM_PRIVATE_INCLUDES}) # kernels.h, vnm_sptc.h
      set_target_properties(${bench} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
    endif()
  endforeach()
else()
  target_sources(venom PRIVATE ${PROJECT_SOURCE_DIR}/kernels/stub.c)
  message(STATUS "venom: no CUDA backend (VENOM_CUDA=${VENOM_CUDA})")
endif()
