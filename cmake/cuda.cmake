# cuda.cmake — the CUDA backend (kernels/*.cu) of libvenom, included from the
# top-level CMakeLists.txt after the venom target exists.
#
# VENOM_CUDA=AUTO (default) builds it when a CUDA compiler (nvcc) is found,
# ON requires one, OFF never builds it. Without it kernels/stub.c stands in:
# vn_cuda_device_count() is 0 and moving a tensor to CUDA is a clear error.
# Code is generated for sm_90 (H200/H100) plus compute_90 PTX, which the
# driver can compile for newer GPUs; kernels/vnm_wgmma.cu (wgmma, an sm_90a
# instruction) is built for sm_90a alone (VENOM_CUDA_SM90A). The CUDA runtime is linked statically
# (no libcudart at run time). cuBLAS (with cuBLASLt) and cuSPARSE are not
# linked: kernels/gemm.cu and csr.cu dlopen them on first use, so that a
# CPU-only run does not load them (~180 MB resident at start-up); their
# sonames and the toolkit's copies are found here.
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
  list(REMOVE_ITEM VENOM_CUDA_SOURCES ${PROJECT_SOURCE_DIR}/kernels/vnm_wgmma.cu) # below
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
                              ${PROJECT_SOURCE_DIR}/kernels/vnm_densify.cu
                              ${PROJECT_SOURCE_DIR}/kernels/attention.cu PROPERTIES
                              COMPILE_OPTIONS "-Xptxas=-v,-warn-spills,-Werror")
  # The sm_90a forward V:N:M kernel (wgmma.mma_async.sp): its own object
  # library, since sm_90a code is a separate -gencode and runs on compute
  # capability 9.0 only. With it, vnm_sptc.cu is built with VNK_HAVE_SM90A
  # and vnk_vnm_spmm picks it on such a device (the rule: kernels.h,
  # vnk_vnm_fwd); without it (-DVENOM_CUDA_SM90A=OFF) the mma.sp kernel
  # runs everywhere.
  option(VENOM_CUDA_SM90A "Build the sm_90a (wgmma) forward V:N:M kernel" ON)
  if(VENOM_CUDA_SM90A)
    add_library(venom_sm90a OBJECT ${PROJECT_SOURCE_DIR}/kernels/vnm_wgmma.cu)
    set_target_properties(venom_sm90a PROPERTIES CUDA_ARCHITECTURES OFF POSITION_INDEPENDENT_CODE ON)
    target_include_directories(venom_sm90a PRIVATE $<TARGET_PROPERTY:venom,INCLUDE_DIRECTORIES>)
    target_compile_options(venom_sm90a PRIVATE -gencode=arch=compute_90a,code=sm_90a ${cuda_flags}
                           -Xptxas=-v,-warn-spills,-Werror)
    target_sources(venom PRIVATE $<TARGET_OBJECTS:venom_sm90a>)
    set_property(SOURCE ${PROJECT_SOURCE_DIR}/kernels/vnm_sptc.cu APPEND PROPERTY COMPILE_DEFINITIONS
                 VNK_HAVE_SM90A)
  endif()
  target_link_libraries(venom PRIVATE CUDA::cudart_static ${CMAKE_DL_LIBS})
  # The soname is what libX.so links to (libcublas.so -> libcublas.so.13),
  # the name the loader searches; the full path is the fallback.
  foreach(lib cublas cusparse)
    get_target_property(path CUDA::${lib} IMPORTED_LOCATION)
    get_filename_component(soname "${path}" NAME)
    if(IS_SYMLINK "${path}")
      file(READ_SYMLINK "${path}" soname)
      get_filename_component(soname "${soname}" NAME)
    endif()
    get_filename_component(dir "${path}" DIRECTORY)
    string(TOUPPER ${lib} LIB)
    list(APPEND lib_defs VNK_${LIB}_SONAME="${soname}" VNK_${LIB}_PATH="${dir}/${soname}")
  endforeach()
  set_property(SOURCE ${PROJECT_SOURCE_DIR}/kernels/gemm.cu ${PROJECT_SOURCE_DIR}/kernels/csr.cu
               APPEND PROPERTY COMPILE_DEFINITIONS ${lib_defs})
  message(STATUS "venom: building the CUDA backend for ${VENOM_CUDA_ARCHITECTURES}"
                 " (sm_90a wgmma kernel: ${VENOM_CUDA_SM90A})")
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
