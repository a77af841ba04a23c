/* vnm_wgmma.cu — the forward V:N:M kernel on sm_90a: y = X·Wᵀ + bias with
 * wgmma.mma_async.sp (Hopper's warpgroup-wide sparse MMA; mma.sp.sync, the
 * sm_80 instruction the other kernels use, reaches only part of Hopper's
 * sparse peak). Built for -gencode arch=compute_90a,code=sm_90a only
 * (cmake/cuda.cmake): sm_90a code runs on compute capability 9.0 devices
 * and nowhere else, so vnk_vnm_spmm (vnm_sptc.cu) calls it only there (the
 * rule is in kernels.h, vnk_vnm_fwd).
 *
 *   k_spmm_wgmma  a CTA is one warpgroup and owns 64 rows of one V-block ×
 *           128 batch rows; per k-tile one m64n128k32 wgmma.sp with the
 *           packed A tiles in registers (each warp's 16 rows as mma.sp
 *           reads them) and the k-tile's 32 gathered rows of Xᵀ in shared
 *           memory, 128-byte swizzled, N-major, read through a matrix
 *           descriptor. X, the values and the metadata arrive by cp.async
 *           in a VNM_WG_STAGES-deep ring; bias is added in the epilogue.
 * Every index (the copies, the swizzled B tile, the descriptor, the
 * accumulator map) is a function of vnm_wgmma_index.h, which the host
 * emulator tests/c/test_vnm_wgmma_emu.c replays against a software
 * wgmma.sp written from the PTX ISA.
 *
 * Ordering, per k-tile kt (PTX ISA, "Asynchronous Warpgroup Level Matrix
 * Multiply-Accumulate"): cp.async.wait_group VNM_WG_PENDING (this thread's
 * copies of kt landed), fence.proxy.async (they were written through the
 * generic proxy; wgmma reads shared memory through the async proxy),
 * __syncthreads (every thread's copies are in, and every warp has retired
 * wgmma kt − 2, whose slot the next copies overwrite), the copies of kt +
 * VNM_WG_AHEAD, the A registers and metadata of kt (one of two register
 * sets by parity: wgmma kt − 1 may still read the other), wgmma.fence
 * (orders those register writes and the accumulators' before the wgmma),
 * the wgmma, wgmma.commit_group, and wgmma.wait_group 1 (retires kt − 1,
 * keeps kt in flight while the next iteration waits for its copies). After
 * the loop, wgmma.wait_group 0 before the epilogue reads the accumulators.
 * vnm_wgmma_index.h explains the counts; the emulator keeps the books of
 * slots, commit groups, waits and wgmmas in flight. */
#include "async_copy.cuh"
#include "internal.cuh"
#include "vnm_wgmma_index.h"

/* sm_90a device code: the wgmma instructions exist only there. */
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define VNK_WGMMA_CODE 1
#endif

#ifdef VNK_WGMMA_CODE

static __device__ inline void wgmma_fence(void) { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
static __device__ inline void wgmma_commit(void) { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> static __device__ inline void wgmma_wait(void)
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Orders this thread's generic-proxy writes to shared memory (its cp.async
 * copies) before later async-proxy reads (wgmma's descriptor reads). */
static __device__ inline void fence_proxy_async(void) { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
/* Keeps the compiler from moving accumulator reads or writes across the
 * asynchronous MMA (which it does not know reads and writes them). */
static __device__ inline void acc_fence(float (&d)[VNM_WG_ACC])
{
#pragma unroll
    for (int i = 0; i < VNM_WG_ACC; i++) asm volatile("" : "+f"(d[i])::"memory");
}

/* d (64 × 128 f32, VNM_WG_ACC per thread) = A (64 × 32, 2:4: this
 * thread's four registers a, metadata e, selector 0) · B (32 × 128 at
 * descriptor bdesc, N-major: imm-trans-b = 1), + d when accumulate (the
 * scale-d predicate); no negation. */
/* The 64 accumulator operands %0..%63 of the asm below. */
#define VNK_WG_ACC_OUTS \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define VNK_WG_ACC_LIST \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "  \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "  \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "  \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define VNK_WGMMA_SP(T)                                                                            \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %70, 0;\n"                                        \
                 "wgmma.mma_async.sp.sync.aligned.m64n128k32.f32." T "." T " " VNK_WG_ACC_LIST      \
                 ", {%64, %65, %66, %67}, %68, %69, 0, p, 1, 1, 1;\n}\n"                            \
                 : VNK_WG_ACC_OUTS                                                                  \
                 : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(bdesc), "r"(e), "r"(accumulate ? 1 : 0))
template <bool BF16>
static __device__ inline void wgmma_sp(float (&d)[VNM_WG_ACC], const uint4 &a, uint64_t bdesc, uint32_t e,
                                       bool accumulate)
{
    if (BF16)
        VNK_WGMMA_SP("bf16");
    else
        VNK_WGMMA_SP("f16");
}
#undef VNK_WGMMA_SP
#undef VNK_WG_ACC_LIST
#undef VNK_WG_ACC_OUTS

/* One stage of the ring (k-tile kt into the stage at st): thread tid's
 * share of the copies vnm_wg_copy lists. X pieces are zero-filled for a
 * padding column (gather < 0) or batch rows past B; A and metadata pieces
 * of row tiles past the matrix are not copied (those warps use zeros). */
static __device__ inline void wg_load_stage(unsigned char *st, const vnk_vnm &w, const int32_t *gk,
                                            const uint16_t *xt, int64_t ldx, int64_t B, int64_t r0,
                                            int64_t n0, int64_t kt)
{
    for (int q = threadIdx.x; q < VNM_WG_COPIES; q += VNM_WG_THREADS) {
        vnm_copy c = vnm_wg_copy(q);
        if (c.kind == VNM_COPY_X) {
            int32_t col = gk[c.row];
            int64_t n = n0 + c.piece;
            bool valid = col >= 0 && n < B;
            cp_async16(st + vnm_wg_xs_at(c.row, c.piece), valid ? xt + col * ldx + n : xt, valid);
            continue;
        }
        if (r0 / 16 + c.row >= w.row_tiles) continue;
        int64_t t = vnm_tile(r0, c.row, kt, w.k_tiles);
        if (c.kind == VNM_COPY_A)
            cp_async16(st + vnm_wg_vs_at(c.row, c.piece), w.values + t * 256 + c.piece * 8, true);
        else
            cp_async16(st + vnm_wg_ms_at(c.row, 4 * c.piece), w.meta + t * 16 + c.piece * 4, true);
    }
}

/* Iteration kt of the k-loop (the header's order): wait for k-tile kt's
 * copies, make them visible to the async proxy, barrier, copy k-tile kt +
 * AHEAD into the slot of kt − 2, load this warp's A registers and
 * metadata (a, e: this k-tile parity's set), issue the wgmma and retire
 * the previous one. */
template <bool BF16>
static __device__ __forceinline__ void wg_step(float (&acc)[VNM_WG_ACC], uint4 &a, uint32_t &e, int64_t kt,
                                               unsigned char *ring, const vnk_vnm &w, const int32_t *gather,
                                               const uint16_t *xt, int64_t ldx, int64_t B, int64_t r0,
                                               int64_t n0, bool live)
{
    cp_async_wait<VNM_WG_PENDING>();
    fence_proxy_async();
    __syncthreads();
    const int64_t next = kt + VNM_WG_AHEAD;
    if (next < w.k_tiles)
        wg_load_stage(ring + (next % VNM_WG_STAGES) * VNM_WG_STAGE_BYTES, w, gather + next * 32, xt, ldx, B, r0,
                      n0, next);
    cp_async_commit();
    const unsigned char *st = ring + (kt % VNM_WG_STAGES) * VNM_WG_STAGE_BYTES;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    a = make_uint4(0, 0, 0, 0);
    e = VNM_WG_META_PAD;
    if (live) {
        a = *(const uint4 *)(st + vnm_wg_vs_at(warp, lane));
        e = *(const uint32_t *)(st + vnm_wg_ms_at(warp, vnm_meta_word_lane(lane)));
    }
    acc_fence(acc);
    wgmma_fence();
    wgmma_sp<BF16>(acc, a, vnm_wg_desc(smem_addr(st)), e, vnm_wg_scale_d(kt));
    wgmma_commit();
    wgmma_wait<VNM_WG_INFLIGHT>();
    acc_fence(acc);
}

#endif /* VNK_WGMMA_CODE */

/* Grid: (⌈16·row_tiles / 64⌉, ⌈B / 128⌉), VNM_WG_THREADS threads; dynamic
 * shared memory vnm_wg_smem(gather bytes): the ring from the first
 * 1024-aligned address, then the gather row when gather_smem. */
template <bool BF16>
__global__ void __launch_bounds__(VNM_WG_THREADS)
    k_spmm_wgmma(vnk_vnm w, const uint16_t *xt, int64_t ldx, int64_t B, const float *bias, float *y,
                 bool gather_smem)
{
#ifdef VNK_WGMMA_CODE
    extern __shared__ __align__(16) unsigned char smem[];
    unsigned char *ring = smem + vnm_wg_pad(smem_addr(smem));
    const int tid = threadIdx.x, warp = tid >> 5;
    const int64_t r0 = vnm_wg_row0(blockIdx.x), n0 = vnm_wg_batch0(blockIdx.y);
    const int64_t ccols = w.k_tiles * 32;
    const int32_t *gather = w.gather + r0 / w.V * ccols;
    if (gather_smem) { /* read by every stage's copies: one pass of 16-byte copies */
        int32_t *gs = (int32_t *)(ring + VNM_WG_STAGES * VNM_WG_STAGE_BYTES);
        for (int64_t q = tid; q < ccols / 4; q += VNM_WG_THREADS) cp_async16(gs + 4 * q, gather + 4 * q, true);
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
        gather = gs;
    }
    const bool live = r0 / 16 + warp < w.row_tiles; /* this warp's 16 rows hold matrix rows */
    /* Not zeroed: the first wgmma ignores it (scale-d false), and a zeroing
     * mov would make ptxas serialize every wgmma of the loop (C7515). */
    float acc[VNM_WG_ACC];
    for (int s = 0; s < VNM_WG_AHEAD; s++) {
        if (s < w.k_tiles)
            wg_load_stage(ring + s * VNM_WG_STAGE_BYTES, w, gather + s * 32, xt, ldx, B, r0, n0, s);
        cp_async_commit();
    }
    /* Two k-tiles per pass: even ones use registers a0, e0, odd ones a1, e1
     * (those of the wgmma still in flight stay untouched). */
    uint4 a0, a1;
    uint32_t e0, e1;
    for (int64_t kt = 0; kt < w.k_tiles; kt += 2) {
        wg_step<BF16>(acc, a0, e0, kt, ring, w, gather, xt, ldx, B, r0, n0, live);
        if (kt + 1 < w.k_tiles) wg_step<BF16>(acc, a1, e1, kt + 1, ring, w, gather, xt, ldx, B, r0, n0, live);
    }
    wgmma_wait<0>();
    acc_fence(acc);
    cp_async_wait<0>();
#pragma unroll
    for (int i = 0; i < VNM_WG_ACC; i++) {
        int64_t r = r0 + vnm_wg_d_row(tid, i), n = n0 + vnm_wg_d_col(tid, i);
        if (r < w.R && n < B) y[n * w.R + r] = (w.k_tiles > 0 ? acc[i] : 0.0f) + (bias ? bias[r] : 0.0f);
    }
#elif defined(__CUDA_ARCH__)
    __trap(); /* device code for another architecture: never launched (vnk_vnm_fwd) */
#endif
}

int vnk__vnm_spmm_wgmma(float *y, const vnk_vnm *w, const uint16_t *xt, int64_t ldx, const float *bias,
                        int64_t B)
{
    int64_t gbytes = vnm_fwd_gather_bytes(w->k_tiles);
    size_t smem = (size_t)vnm_wg_smem(gbytes);
    int64_t ny = (B + VNM_WG_BN - 1) / VNM_WG_BN;
    if (ny > 65535)
        return vnk__fail("vnk_vnm_spmm (wgmma): B=%lld needs more than 65535 batch tiles", (long long)B);
    dim3 grid((unsigned)((w->row_tiles * 16 + VNM_WG_BM - 1) / VNM_WG_BM), (unsigned)ny);
    bool bf16 = w->dtype == VN_BF16;
    const void *fn = bf16 ? (const void *)k_spmm_wgmma<true> : (const void *)k_spmm_wgmma<false>;
    if (vnk__cuda(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem),
                  "vnk_vnm_spmm (wgmma): allowing %zu bytes of shared memory", smem))
        return 1;
    if (bf16)
        k_spmm_wgmma<true><<<grid, VNM_WG_THREADS, smem>>>(*w, xt, ldx, B, bias, y, gbytes > 0);
    else
        k_spmm_wgmma<false><<<grid, VNM_WG_THREADS, smem>>>(*w, xt, ldx, B, bias, y, gbytes > 0);
    return vnk__launched("vnk_vnm_spmm (k_spmm_wgmma)");
}
