/* elementwise.cu — vnk_map (every vnk_op over a strided loop into a
 * contiguous output) and vnk_fill. The formulas are those of the CPU kernels
 * in engine/ops_pointwise.c, conversions those of vn_tensor_copy_ in
 * engine/tensor.c.
 *
 * One kernel per family, switching on the op inside: the switch is uniform
 * across a warp, so it costs a few instructions next to the memory traffic,
 * and each formula is written once. */
#include "internal.cuh"
#include "scalar.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <type_traits>

/* ---- the loop -------------------------------------------------------------- */

/* Offsets (in elements) of inputs 0..nin-1 at flat output position pos: the
 * position is split into an index per dim, last dim fastest. */
static __device__ inline void loop_offsets(const vnk_loop &L, int nin, int64_t pos, int64_t off[3])
{
    off[0] = off[1] = off[2] = 0;
    for (int d = L.ndim - 1; d >= 0; d--) {
        int64_t i = pos;
        if (d > 0) { /* dim 0 takes what is left: no division */
            i = pos % L.shape[d];
            pos /= L.shape[d];
        }
        for (int k = 0; k < nin; k++) off[k] += i * L.st[k][d];
    }
}

/* ---- integer-safe arithmetic ------------------------------------------------- */

/* Integer add/sub/mul wrap (two's complement) as on the CPU: computed in the
 * unsigned type, where overflow is defined. u8 promotes to int and cannot
 * overflow before the cast back. */
template <typename T> struct unsigned_of { typedef T type; };
template <> struct unsigned_of<int32_t> { typedef uint32_t type; };
template <> struct unsigned_of<int64_t> { typedef uint64_t type; };

template <typename T> static __device__ inline T wrap_add(T a, T b)
{
    typedef typename unsigned_of<T>::type U;
    return (T)((U)a + (U)b);
}
template <typename T> static __device__ inline T wrap_sub(T a, T b)
{
    typedef typename unsigned_of<T>::type U;
    return (T)((U)a - (U)b);
}
template <typename T> static __device__ inline T wrap_mul(T a, T b)
{
    typedef typename unsigned_of<T>::type U;
    return (T)((U)a * (U)b);
}

/* −a and |a| per dtype (float keeps the sign of zero: −0.0f, not 0 − 0). */
static __device__ inline float v_neg(float a) { return -a; }
static __device__ inline int32_t v_neg(int32_t a) { return (int32_t)(0u - (uint32_t)a); }
static __device__ inline int64_t v_neg(int64_t a) { return (int64_t)(0ull - (uint64_t)a); }
static __device__ inline uint8_t v_neg(uint8_t a) { return (uint8_t)(-a); }

static __device__ inline float v_abs(float a) { return fabsf(a); }
static __device__ inline int32_t v_abs(int32_t a)
{
    return (int32_t)(a < 0 ? 0u - (uint32_t)a : (uint32_t)a);
}
static __device__ inline int64_t v_abs(int64_t a)
{
    return (int64_t)(a < 0 ? 0ull - (uint64_t)a : (uint64_t)a);
}
static __device__ inline uint8_t v_abs(uint8_t a) { return a; }

/* ---- f32 math, as in ops_pointwise.c ------------------------------------------ */

/* tanh_f, gelu_f, gelu_grad, clamp_f and pow_grad_exponent come from
 * scalar.h, which the CPU kernels include too, so both devices round alike. */

/* The f32 ops; b is the u8 mask (as 0/nonzero) for KEEP_SET/KEEP_CLEAR. */
static __device__ inline float f32_op(vnk_op op, float a, float b, float c, float p0, float p1)
{
    switch (op) {
    case VNK_DIV: return a / b;
    case VNK_POW: return powf(a, b);
    case VNK_EXP: return expf(a);
    case VNK_LOG: return logf(a);
    case VNK_SQRT: return sqrtf(a);
    case VNK_POW_SCALAR: return p0 == 2.0f ? a * a : powf(a, p0);
    case VNK_RELU: return a < 0.0f ? 0.0f : a; /* keeps NaN */
    case VNK_GELU: return gelu_f(a);
    case VNK_TANH: return tanh_f(a);
    case VNK_SIGMOID: return 1.0f / (1.0f + expf(-a));
    case VNK_CLAMP: return clamp_f(a, p0, p1);
    case VNK_DIV_GB: return -a * b / (c * c);
    case VNK_POW_GA: return a * c * powf(b, c - 1.0f);
    case VNK_POW_GB: return pow_grad_exponent(a, b, c);
    case VNK_ABS_B: return b > 0 ? a : (b < 0 ? -a : 0.0f);
    case VNK_SQRT_B: return 0.5f * a / b;
    case VNK_POW_SCALAR_B: return p0 == 2.0f ? 2.0f * a * b : a * p0 * powf(b, p0 - 1.0f);
    case VNK_RELU_B: return b > 0.0f ? a : 0.0f;
    case VNK_GELU_B: return a * gelu_grad(b);
    case VNK_TANH_B: return a * (1.0f - b * b);
    case VNK_SIGMOID_B: return a * b * (1.0f - b);
    case VNK_CLAMP_B: return (b >= p0 && b <= p1) ? a : 0.0f;
    case VNK_KEEP_SET: return b != 0.0f ? a : 0.0f;
    case VNK_KEEP_CLEAR: return b != 0.0f ? 0.0f : a;
    default: return NAN; /* not an f32 op: vnk_map never launches it here */
    }
}

static __global__ void map_f32(vnk_op op, float *out, const void *in0, const void *in1,
                               const void *in2, vnk_loop L, int nin, int64_t n, float p0, float p1)
{
    bool mask_b = op == VNK_KEEP_SET || op == VNK_KEEP_CLEAR;
    for (int64_t pos = VNK_GRID_START; pos < n; pos += VNK_GRID_STEP) {
        int64_t off[3];
        loop_offsets(L, nin, pos, off);
        float a = ((const float *)in0)[off[0]], b = 0.0f, c = 0.0f;
        if (nin > 1)
            b = mask_b ? (float)((const uint8_t *)in1)[off[1]] : ((const float *)in1)[off[1]];
        if (nin > 2) c = ((const float *)in2)[off[2]];
        out[pos] = f32_op(op, a, b, c, p0, p1);
    }
}

/* ---- ops of any dtype ----------------------------------------------------------- */

/* add/sub/mul/neg/abs (output T), comparisons (output u8), where (u8 a, T b,
 * c → T), masked_fill (T a, u8 b → T) and the integer clamp. q0, q1 are p0,
 * p1 already cast to T: masked_fill's value, clamp's bounds. */
template <typename T>
static __global__ void map_typed(vnk_op op, void *out, const void *in0, const void *in1,
                                 const void *in2, vnk_loop L, int nin, int64_t n, T q0, T q1)
{
    const T *a = (const T *)in0, *b = (const T *)in1, *c = (const T *)in2;
    const uint8_t *m0 = (const uint8_t *)in0, *m1 = (const uint8_t *)in1;
    T *o = (T *)out;
    uint8_t *ob = (uint8_t *)out;
    for (int64_t pos = VNK_GRID_START; pos < n; pos += VNK_GRID_STEP) {
        int64_t off[3];
        loop_offsets(L, nin, pos, off);
        switch (op) {
        case VNK_ADD: o[pos] = wrap_add(a[off[0]], b[off[1]]); break;
        case VNK_SUB: o[pos] = wrap_sub(a[off[0]], b[off[1]]); break;
        case VNK_MUL: o[pos] = wrap_mul(a[off[0]], b[off[1]]); break;
        case VNK_NEG: o[pos] = v_neg(a[off[0]]); break;
        case VNK_ABS: o[pos] = v_abs(a[off[0]]); break;
        case VNK_EQ: ob[pos] = (uint8_t)(a[off[0]] == b[off[1]]); break;
        case VNK_NE: ob[pos] = (uint8_t)(a[off[0]] != b[off[1]]); break;
        case VNK_LT: ob[pos] = (uint8_t)(a[off[0]] < b[off[1]]); break;
        case VNK_LE: ob[pos] = (uint8_t)(a[off[0]] <= b[off[1]]); break;
        case VNK_GT: ob[pos] = (uint8_t)(a[off[0]] > b[off[1]]); break;
        case VNK_GE: ob[pos] = (uint8_t)(a[off[0]] >= b[off[1]]); break;
        case VNK_WHERE: o[pos] = m0[off[0]] ? b[off[1]] : c[off[2]]; break;
        case VNK_MASKED_FILL: o[pos] = m1[off[1]] ? q0 : a[off[0]]; break;
        case VNK_CLAMP: o[pos] = VN_CLAMP_INT(a[off[0]], q0, q1); break;
        default: break; /* not a typed op: vnk_map never launches it here */
        }
    }
}

/* ---- conversions ------------------------------------------------------------------- */

/* Element i of a `d` array as a double (exact for every dtype but i64 beyond
 * 2^53, as on the CPU, which converts through double too). */
static __device__ inline double load_as_double(const void *p, vn_dtype d, int64_t i)
{
    switch (d) {
    case VN_F32: return ((const float *)p)[i];
    case VN_I32: return ((const int32_t *)p)[i];
    case VN_I64: return (double)((const int64_t *)p)[i];
    case VN_U8: return ((const uint8_t *)p)[i];
    case VN_BF16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    case VN_F16: return __half2float(((const __half *)p)[i]);
    }
    return 0;
}

/* v limited to [lo, hi], NaN to 0 (tensor.c's saturate): converting an
 * out-of-range value to an integer type is undefined. */
static __host__ __device__ inline double saturate(double v, double lo, double hi)
{
    return v != v ? 0 : v < lo ? lo : v > hi ? hi : v;
}

/* Stores v converted to d at element i: integers truncate toward zero and
 * saturate, floats round to nearest even. Used by the host too (vnk_fill). */
static __host__ __device__ inline void store_converted(void *p, vn_dtype d, int64_t i, double v)
{
    switch (d) {
    case VN_F32: ((float *)p)[i] = (float)v; break;
    case VN_I32: ((int32_t *)p)[i] = (int32_t)saturate(v, INT32_MIN, INT32_MAX); break;
    /* the upper bound is the largest double below 2^63 */
    case VN_I64: ((int64_t *)p)[i] = (int64_t)saturate(v, -0x1p63, 0x1p63 - 1024); break;
    case VN_U8: ((uint8_t *)p)[i] = (uint8_t)saturate(v, 0, 255); break;
    case VN_BF16: ((__nv_bfloat16 *)p)[i] = __double2bfloat16(v); break;
    case VN_F16: ((__half *)p)[i] = __double2half(v); break;
    }
}

static __global__ void convert(void *out, vn_dtype od, const void *in, vn_dtype id, vnk_loop L,
                               int64_t n)
{
    for (int64_t pos = VNK_GRID_START; pos < n; pos += VNK_GRID_STEP) {
        int64_t off[3];
        loop_offsets(L, 1, pos, off);
        store_converted(out, od, pos, load_as_double(in, id, off[0]));
    }
}

/* A copy within one dtype moves the bits (exact for every i64, and NaN
 * payloads survive); U is an unsigned type of the element's size. */
template <typename U>
static __global__ void copy_bits(U *out, const U *in, vnk_loop L, int64_t n)
{
    for (int64_t pos = VNK_GRID_START; pos < n; pos += VNK_GRID_STEP) {
        int64_t off[3];
        loop_offsets(L, 1, pos, off);
        out[pos] = in[off[0]];
    }
}

/* ---- vnk_map -------------------------------------------------------------------------- */

static const char *op_name(vnk_op op)
{
    static const char *const names[] = {
        "add", "sub", "mul", "div", "pow", "eq", "ne", "lt", "le", "gt", "ge", "neg", "abs",
        "exp", "log", "sqrt", "pow_scalar", "relu", "gelu", "tanh", "sigmoid", "clamp",
        "div_gb", "pow_ga", "pow_gb", "abs_b", "sqrt_b", "pow_scalar_b", "relu_b", "gelu_b",
        "tanh_b", "sigmoid_b", "clamp_b", "keep_set", "keep_clear", "where", "masked_fill",
        "copy"};
    return (unsigned)op < sizeof names / sizeof names[0] ? names[op] : "unknown op";
}

/* How many inputs op reads. */
static int op_arity(vnk_op op)
{
    switch (op) {
    case VNK_NEG: case VNK_ABS: case VNK_EXP: case VNK_LOG: case VNK_SQRT:
    case VNK_POW_SCALAR: case VNK_RELU: case VNK_GELU: case VNK_TANH: case VNK_SIGMOID:
    case VNK_CLAMP: case VNK_COPY:
        return 1;
    case VNK_DIV_GB: case VNK_POW_GA: case VNK_POW_GB: case VNK_WHERE:
        return 3;
    default:
        return 2;
    }
}

static bool arith_dtype(vn_dtype d) { return d == VN_F32 || d == VN_I32 || d == VN_I64 || d == VN_U8; }

/* vn_dtype from the header is a C enum: a bad value is possible from C. */
static bool known_dtype(vn_dtype d) { return vn_dtype_size(d) != 0; }

/* Checks the dtypes of op; returns 1 with a message when they do not fit. */
static int check_map(vnk_op op, vn_dtype dtype, vn_dtype out_dtype, int nin)
{
    const char *name = op_name(op);
    if ((unsigned)op > (unsigned)VNK_COPY) return vnk__fail("vnk_map: unknown op %d", (int)op);
    if (nin != op_arity(op))
        return vnk__fail("vnk_map(%s): expected %d inputs, got %d", name, op_arity(op), nin);
    if (!known_dtype(dtype) || !known_dtype(out_dtype))
        return vnk__fail("vnk_map(%s): unknown dtype %d or %d", name, (int)dtype, (int)out_dtype);
    vn_dtype want_out = dtype;
    switch (op) {
    case VNK_COPY: return 0;
    case VNK_ADD: case VNK_SUB: case VNK_MUL: case VNK_NEG: case VNK_ABS:
    case VNK_WHERE: case VNK_MASKED_FILL: case VNK_CLAMP:
        if (!arith_dtype(dtype))
            return vnk__fail("vnk_map(%s): expected an f32, i32, i64 or u8 input, got %s", name,
                             vn_dtype_name(dtype));
        break;
    case VNK_EQ: case VNK_NE: case VNK_LT: case VNK_LE: case VNK_GT: case VNK_GE:
        if (!arith_dtype(dtype))
            return vnk__fail("vnk_map(%s): expected f32, i32, i64 or u8 inputs, got %s", name,
                             vn_dtype_name(dtype));
        want_out = VN_U8;
        break;
    default:
        if (dtype != VN_F32)
            return vnk__fail("vnk_map(%s): expected f32 inputs, got %s", name,
                             vn_dtype_name(dtype));
        want_out = VN_F32;
        break;
    }
    if (out_dtype != want_out)
        return vnk__fail("vnk_map(%s): the output must be %s for %s inputs, got %s", name,
                         vn_dtype_name(want_out), vn_dtype_name(dtype),
                         vn_dtype_name(out_dtype));
    return 0;
}

static bool is_f32_op(vnk_op op)
{
    switch (op) {
    case VNK_ADD: case VNK_SUB: case VNK_MUL: case VNK_NEG: case VNK_ABS:
    case VNK_EQ: case VNK_NE: case VNK_LT: case VNK_LE: case VNK_GT: case VNK_GE:
    case VNK_WHERE: case VNK_MASKED_FILL: case VNK_COPY:
        return false;
    default:
        return true;
    }
}

int vnk_map(void *out, vn_dtype out_dtype, const void *const *in, int nin, vn_dtype dtype,
            const vnk_loop *L, vnk_op op, double p0, double p1)
{
    if (check_map(op, dtype, out_dtype, nin)) return 1;
    if (!L || L->ndim < 1 || L->ndim > VN_MAX_DIMS)
        return vnk__fail("vnk_map(%s): loop of %d dims (expected 1..%d)", op_name(op),
                         L ? L->ndim : 0, VN_MAX_DIMS);
    int64_t n = 1;
    for (int d = 0; d < L->ndim; d++) {
        if (L->shape[d] < 0)
            return vnk__fail("vnk_map(%s): negative size %lld in dim %d", op_name(op),
                             (long long)L->shape[d], d);
        n *= L->shape[d];
    }
    if (n == 0) return 0;
    if (!out || !in) return vnk__fail("vnk_map(%s): NULL output or input array", op_name(op));
    for (int k = 0; k < nin; k++)
        if (!in[k]) return vnk__fail("vnk_map(%s): input %d is NULL", op_name(op), k);
    const void *a = in[0], *b = nin > 1 ? in[1] : NULL, *c = nin > 2 ? in[2] : NULL;
    unsigned blocks = vnk__blocks(n, VNK_THREADS);

    if (op == VNK_COPY) {
        if (dtype != out_dtype) {
            convert<<<blocks, VNK_THREADS>>>(out, out_dtype, a, dtype, *L, n);
        } else {
            switch (vn_dtype_size(dtype)) {
            case 1: copy_bits<<<blocks, VNK_THREADS>>>((uint8_t *)out, (const uint8_t *)a, *L, n); break;
            case 2: copy_bits<<<blocks, VNK_THREADS>>>((uint16_t *)out, (const uint16_t *)a, *L, n); break;
            case 4: copy_bits<<<blocks, VNK_THREADS>>>((uint32_t *)out, (const uint32_t *)a, *L, n); break;
            default: copy_bits<<<blocks, VNK_THREADS>>>((uint64_t *)out, (const uint64_t *)a, *L, n); break;
            }
        }
        return vnk__launched("vnk_map(copy)");
    }
    if (is_f32_op(op) && dtype == VN_F32) {
        /* a NaN clamp bound leaves that side open (the caller normally
         * replaces it already) */
        if (op == VNK_CLAMP || op == VNK_CLAMP_B) {
            if (isnan(p0)) p0 = -INFINITY;
            if (isnan(p1)) p1 = INFINITY;
        }
        map_f32<<<blocks, VNK_THREADS>>>(op, (float *)out, a, b, c, *L, nin, n, (float)p0,
                                         (float)p1);
    } else if (op == VNK_CLAMP) {
        /* an integer clamp (check_map let only integers through): the
         * bounds as T, as the CPU's k_clamp makes them */
#define CLAMP_LAUNCH(T, TMIN, TMAX)                                                     \
    map_typed<T><<<blocks, VNK_THREADS>>>(op, out, a, b, c, *L, nin, n,                  \
                                          VN_CLAMP_BOUND(T, p0, TMIN, TMAX, TMIN),        \
                                          VN_CLAMP_BOUND(T, p1, TMIN, TMAX, TMAX))
        switch (dtype) {
        case VN_I32: CLAMP_LAUNCH(int32_t, INT32_MIN, INT32_MAX); break;
        case VN_I64: CLAMP_LAUNCH(int64_t, INT64_MIN, INT64_MAX); break;
        case VN_U8: CLAMP_LAUNCH(uint8_t, 0, UINT8_MAX); break;
        default: break;
        }
#undef CLAMP_LAUNCH
    } else {
        /* masked_fill's value, cast like the CPU's (T)p0 (the caller checked
         * that it fits) */
        VNK_DTYPE_SWITCH(dtype, T, break,
            map_typed<T><<<blocks, VNK_THREADS>>>(op, out, a, b, c, *L, nin, n,
                                                  op == VNK_MASKED_FILL ? (T)p0 : (T)0, (T)0));
    }
    char what[64];
    snprintf(what, sizeof what, "vnk_map(%s)", op_name(op));
    return vnk__launched(what);
}

/* ---- vnk_fill ------------------------------------------------------------------------------ */

template <typename U>
static __global__ void fill_bits(U *out, int64_t n, U v)
{
    for (int64_t i = VNK_GRID_START; i < n; i += VNK_GRID_STEP) out[i] = v;
}

int vnk_fill(void *out, vn_dtype dtype, int64_t n, double value)
{
    size_t size = vn_dtype_size(dtype);
    if (!size) return vnk__fail("vnk_fill: unknown dtype %d", (int)dtype);
    if (n < 0) return vnk__fail("vnk_fill: negative count %lld", (long long)n);
    if (n == 0) return 0;
    if (!out) return vnk__fail("vnk_fill: NULL output");
    /* The element's bits, converted once on the host as the CPU's fill_
     * does (saturating, round to nearest even). */
    union {
        uint8_t u8;
        uint16_t u16;
        uint32_t u32;
        uint64_t u64;
    } bits;
    memset(&bits, 0, sizeof bits);
    store_converted(&bits, dtype, 0, value);
    unsigned blocks = vnk__blocks(n, VNK_THREADS);
    switch (size) {
    case 1: fill_bits<<<blocks, VNK_THREADS>>>((uint8_t *)out, n, bits.u8); break;
    case 2: fill_bits<<<blocks, VNK_THREADS>>>((uint16_t *)out, n, bits.u16); break;
    case 4: fill_bits<<<blocks, VNK_THREADS>>>((uint32_t *)out, n, bits.u32); break;
    default: fill_bits<<<blocks, VNK_THREADS>>>((uint64_t *)out, n, bits.u64); break;
    }
    return vnk__launched("vnk_fill");
}

/* ---- vnk_f32_to_half ---------------------------------------------------------------------- */

/* out[j] = in[j] rounded to T, 4 elements per thread and step: one 16-byte
 * load and one 8-byte store (n4 = n / 4 groups; the caller checked the
 * alignment), then the last n % 4 one by one. With nonfinite non-NULL, a
 * thread that wrote an Inf or NaN (b16_nonfinite of the rounded bits: f32
 * past the 16-bit range counts) stores 1 there (racing stores of the same
 * value: no atomics needed). */
template <typename T>
__global__ void k_f32_to_half(T *out, const float *in, int64_t n, int *nonfinite)
{
    constexpr int bf16 = std::is_same<T, __nv_bfloat16>::value;
    const int64_t n4 = n / 4;
    bool bad = false;
    for (int64_t j = VNK_GRID_START; j < n4; j += VNK_GRID_STEP) {
        float4 v = ((const float4 *)in)[j];
        union {
            T h[4];
            uint2 u;
        } o;
        o.h[0] = vnk__round_half<T>(v.x), o.h[1] = vnk__round_half<T>(v.y);
        o.h[2] = vnk__round_half<T>(v.z), o.h[3] = vnk__round_half<T>(v.w);
        ((uint2 *)out)[j] = o.u;
        bad |= b16_nonfinite(o.u.x, bf16) | b16_nonfinite(o.u.x >> 16, bf16) |
               b16_nonfinite(o.u.y, bf16) | b16_nonfinite(o.u.y >> 16, bf16);
    }
    for (int64_t j = 4 * n4 + VNK_GRID_START; j < n; j += VNK_GRID_STEP) {
        union {
            T h;
            uint16_t u;
        } o;
        o.h = vnk__round_half<T>(in[j]);
        out[j] = o.h;
        bad |= b16_nonfinite(o.u, bf16);
    }
    if (nonfinite && bad) *nonfinite = 1;
}

static int f32_to_half(const char *op, void *out, vn_dtype dtype, const float *in, int64_t n,
                       int *nonfinite)
{
    if (dtype != VN_BF16 && dtype != VN_F16)
        return vnk__fail("%s: expected dtype bf16 or f16, got %s", op, vn_dtype_name(dtype));
    if (n < 0) return vnk__fail("%s: negative count %lld", op, (long long)n);
    if (n == 0) return 0;
    if (!out || !in) return vnk__fail("%s: NULL array", op);
    if ((uintptr_t)in % 16 || (uintptr_t)out % 8)
        return vnk__fail("%s: needs in 16-byte and out 8-byte aligned", op);
    unsigned blocks = vnk__blocks((n + 3) / 4, VNK_THREADS);
    if (dtype == VN_BF16)
        k_f32_to_half<<<blocks, VNK_THREADS>>>((__nv_bfloat16 *)out, in, n, nonfinite);
    else
        k_f32_to_half<<<blocks, VNK_THREADS>>>((__half *)out, in, n, nonfinite);
    return vnk__launched(op);
}

int vnk_f32_to_half(void *out, vn_dtype dtype, const float *in, int64_t n)
{
    return f32_to_half("vnk_f32_to_half", out, dtype, in, n, NULL);
}

int vnk_f32_to_half_check(void *out, vn_dtype dtype, const float *in, int64_t n, int *nonfinite)
{
    if (!nonfinite) return vnk__fail("vnk_f32_to_half_check: the flag is NULL");
    return f32_to_half("vnk_f32_to_half_check", out, dtype, in, n, nonfinite);
}
