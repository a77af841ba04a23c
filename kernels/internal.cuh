/* internal.cuh — helpers shared by the .cu files in kernels/: error messages,
 * launch checks, grid sizes, the dtype switch and block/warp reductions.
 * Not part of the C ABI (kernels.h is). */
#ifndef VENOM_KERNELS_INTERNAL_CUH
#define VENOM_KERNELS_INTERNAL_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels.h"

/* ---- errors ---------------------------------------------------------------- */

/* Stores a printf-style message for vnk_error() and returns 1 (failure), so
 * that `return vnk__fail(...)` reads as one step. */
int vnk__fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* 0 when e is cudaSuccess; otherwise stores "<what>: <CUDA's message>" and
 * returns 1. `what` is printf-style, to name sizes and directions. */
int vnk__cuda(cudaError_t e, const char *what, ...) __attribute__((format(printf, 2, 3)));

/* ---- libraries opened on first use ------------------------------------------ */

/* cuBLAS (with cuBLASLt) and cuSPARSE are not linked into libvenom but opened
 * with dlopen the first time a GEMM or a CSR product runs on the GPU:
 * loading them costs about 180 MB of resident memory at start-up (cuBLASLt's
 * relocations and constructors alone ~150 MB), which a CPU-only run should
 * not pay. vnk__dlopen tries `soname` through the usual search path, then
 * `fallback` (the toolkit's copy found at configure time); vnk__dlsym looks
 * up one entry point. Both return NULL with the message set ("cannot load
 * libcublas.so.13 ..."); callers hold their own lock. */
void *vnk__dlopen(const char *soname, const char *fallback);
void *vnk__dlsym(void *lib, const char *soname, const char *name);

/* For a file's X-macro list of entry points, entries X(field, symbol, type):
 * LIST(VNK_FN_FIELD) declares the fields of its struct of function pointers,
 * and LIST(VNK_DLSYM_FIELD), in a loader with `lib`, `soname` and `fns` (that
 * struct) in scope, fills them, returning 1 (message set) at the first
 * symbol missing. The type is decltype(&symbol), from the library's own
 * header, so a wrong signature cannot compile; an overloaded name needs its
 * type spelled out, checked against the header with a static_assert. */
#define VNK_DLSYM_FIELD(field, sym, type)                                        \
    if (!(fns.field = reinterpret_cast<type>(vnk__dlsym(lib, soname, #sym)))) return 1;
#define VNK_FN_FIELD(field, sym, type) type field;

/* After a kernel launch: picks up a launch failure (bad configuration, no
 * device) through cudaGetLastError() and names the kernel. Execution errors
 * surface later, at the next synchronizing call. */
static inline int vnk__launched(const char *kernel)
{
    return vnk__cuda(cudaGetLastError(), "%s: kernel launch", kernel);
}

/* ---- launch geometry --------------------------------------------------------- */

#define VNK_THREADS 256
/* Enough blocks to fill an H200 many times over; kernels loop (grid-stride)
 * over whatever lies beyond. */
#define VNK_MAX_BLOCKS 65536

/* Blocks for n work items at `per_block` items per block, in 1..VNK_MAX_BLOCKS
 * (computed in 64 bits: n may exceed INT_MAX). */
static inline unsigned vnk__blocks(int64_t n, int64_t per_block)
{
    int64_t b = (n + per_block - 1) / per_block;
    if (b < 1) b = 1;
    if (b > VNK_MAX_BLOCKS) b = VNK_MAX_BLOCKS;
    return (unsigned)b;
}

/* The first index and the stride of a grid-stride loop, in 64 bits. */
#define VNK_GRID_START ((int64_t)blockIdx.x * blockDim.x + threadIdx.x)
#define VNK_GRID_STEP ((int64_t)gridDim.x * blockDim.x)

/* ---- dtypes ------------------------------------------------------------------ */

/* Runs stmt with T bound to the C type of d, for the four dtypes arithmetic
 * kernels take; `otherwise` runs for bf16/f16 (storage-only dtypes). */
#define VNK_DTYPE_SWITCH(d, T, otherwise, ...)                        \
    switch (d) {                                                      \
    case VN_F32: { typedef float T; __VA_ARGS__; } break;             \
    case VN_I32: { typedef int32_t T; __VA_ARGS__; } break;           \
    case VN_I64: { typedef int64_t T; __VA_ARGS__; } break;           \
    case VN_U8: { typedef uint8_t T; __VA_ARGS__; } break;            \
    default: otherwise;                                               \
    }

/* dtype names and sizes come from the engine: vn_dtype_name, vn_dtype_size
 * (venom.h; 0 bytes for an unknown dtype). */

/* An i32 or i64 index/target array read as int64 (the caller checked the
 * dtype is one of the two). */
static __device__ inline int64_t vnk__index_at(const void *idx, bool is64, int64_t j)
{
    return is64 ? ((const int64_t *)idx)[j] : (int64_t)((const int32_t *)idx)[j];
}

/* ---- reductions inside a warp / block ------------------------------------------ */

static __device__ inline float vnk__warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}

static __device__ inline float vnk__warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
    return v;
}

/* The sum (or max) of v over the block, returned to every thread. blockDim.x
 * is a multiple of 32, at most 1024. Uses 33 floats of shared memory and
 * synchronizes, so every thread of the block must call it. */
static __device__ inline float vnk__block_reduce(float v, bool max)
{
    __shared__ float part[32];
    __shared__ float total;
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = max ? vnk__warp_max(v) : vnk__warp_sum(v);
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < nwarps ? part[lane] : (max ? -INFINITY : 0.0f);
        w = max ? vnk__warp_max(w) : vnk__warp_sum(w);
        if (lane == 0) total = w;
    }
    __syncthreads();
    float r = total;
    __syncthreads(); /* `total` and `part` are reused by the next call */
    return r;
}

/* f32 → bf16 or f16, round to nearest even (as vn_to_dtype on the CPU). */
template <typename T> static __device__ inline T vnk__round_half(float v);
template <> __device__ inline __nv_bfloat16 vnk__round_half<__nv_bfloat16>(float v)
{
    return __float2bfloat16_rn(v);
}
template <> __device__ inline __half vnk__round_half<__half>(float v) { return __float2half_rn(v); }

#endif
