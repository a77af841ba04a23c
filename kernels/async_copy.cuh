/* async_copy.cuh — the cp.async helpers of the Sparse Tensor Core kernels
 * (vnm_sptc.cu, vnm_wgmma.cu): 16-byte global → shared copies in commit
 * groups. */
#ifndef VENOM_KERNELS_ASYNC_COPY_CUH
#define VENOM_KERNELS_ASYNC_COPY_CUH

#include <stdint.h>

static __device__ inline uint32_t smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

/* 16 bytes global → shared, asynchronously; zero-filled when !valid. */
static __device__ inline void cp_async16(void *dst, const void *src, bool valid)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(dst)), "l"(src),
                 "r"(valid ? 16 : 0));
}
static __device__ inline void cp_async_commit(void) { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> static __device__ inline void cp_async_wait(void)
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

#endif
