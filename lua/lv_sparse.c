/* lv_sparse.c — V:N:M sparse matrices in the venom.core Lua module.
 *
 * A matrix is a userdata box holding one vn_vnm, with the metatable
 * "venom.VNM" (created on first use) and the methods to_dense, mask, stats,
 * values, columns and indices. The functions below go into the module table:
 *
 *   core.vnm_from_dense(W, V, N, M) → S
 *   core.vnm_from_pattern(R, K, V, N, M, columns, indices [, values]) → S
 *   core.vnm_linear(x, S, values [, bias]) → y      differentiable
 *   core.vnm_mlp(x, S1, values1, bias1, S2, values2, bias2) → y
 *                                                    differentiable (biases may be nil)
 *   core.vnm_spmm(S, values, x), core.vnm_spmm_t(S, values, dy),
 *   core.vnm_sddmm(S, dy, x)                         the plain kernels
 *   core.vnm_isa() → "avx512" | "portable"
 *   core.set_vnm_precision("f32" | "bf16"), core.vnm_precision() → "f32" | "bf16"
 *   core.set_vnm_cuda_dx("auto" | "sparse" | "dense"), core.vnm_cuda_dx() → the same
 *   core.vnm_shadow_linear(x, S, W [, bias]) → y    differentiable (the
 *   core.vnm_shadow_decay_(W, S, f) → W             pruning shadow, shadow.h)
 *
 * venom.sparse (lua/venom/sparse.lua) wraps them with option tables. */
#include "lv.h"

#include <string.h>

#define LV_VNM_MT "venom.VNM"

vn_vnm *lv_check_vnm(lua_State *L, int i)
{
    return *(vn_vnm **)lv_box_check(L, i, LV_VNM_MT, "a V:N:M sparse matrix");
}

static int vnm_gc(lua_State *L)
{
    vn_vnm **slot = (vn_vnm **)lv_box_check(L, 1, LV_VNM_MT, "a V:N:M sparse matrix");
    vn_vnm_free(*slot);
    *slot = NULL;
    return 0;
}

/* The methods S:<name>() that return vn_vnm_<name>(S) as a new tensor,
 * each name written once. */
#define LV_VNM_TENSOR_METHODS(X) X(to_dense) X(mask) X(values) X(columns) X(indices)

#define LV_VNM_TENSOR_WRAPPER(name)                                             \
    static int vnm_##name(lua_State *L) { return lv_push(L, vn_vnm_##name(lv_check_vnm(L, 1))); }
LV_VNM_TENSOR_METHODS(LV_VNM_TENSOR_WRAPPER)

static void set_int(lua_State *L, const char *k, int64_t v)
{
    lua_pushnumber(L, (lua_Number)v);
    lua_setfield(L, -2, k);
}

/* S:stats() → {rows, cols, V, N, M, nnz, sparsity, bytes, value_bytes,
 * index_bytes, column_bytes, dense_bytes} */
static int vnm_stats(lua_State *L)
{
    vn_vnm_summary st;
    lv_status(L, vn_vnm_stats(lv_check_vnm(L, 1), &st));
    lua_createtable(L, 0, 12);
    set_int(L, "rows", st.rows);
    set_int(L, "cols", st.cols);
    set_int(L, "V", st.V);
    set_int(L, "N", st.N);
    set_int(L, "M", st.M);
    set_int(L, "nnz", st.nnz);
    lua_pushnumber(L, st.sparsity);
    lua_setfield(L, -2, "sparsity");
    set_int(L, "bytes", st.bytes);
    set_int(L, "value_bytes", st.value_bytes);
    set_int(L, "index_bytes", st.index_bytes);
    set_int(L, "column_bytes", st.column_bytes);
    set_int(L, "dense_bytes", st.dense_bytes);
    return 1;
}

static int vnm_tostring(lua_State *L)
{
    vn_vnm_summary st;
    lv_status(L, vn_vnm_stats(lv_check_vnm(L, 1), &st));
    lua_pushfstring(L, "VNM(%d × %d, %d:%d:%d, sparsity %f)", (int)st.rows, (int)st.cols,
                    (int)st.V, (int)st.N, (int)st.M, st.sparsity);
    return 1;
}

#define LV_VNM_REG(name) {#name, vnm_##name},

static const luaL_Reg vnm_methods[] = {
    LV_VNM_TENSOR_METHODS(LV_VNM_REG) LV_VNM_REG(stats)
    {NULL, NULL},
};

/* A new, empty box with the metatable (made on first use) on the stack. */
static vn_vnm **new_box(lua_State *L)
{
    if (luaL_newmetatable(L, LV_VNM_MT)) {
        lua_pushcfunction(L, vnm_gc);
        lua_setfield(L, -2, "__gc");
        lua_pushcfunction(L, vnm_tostring);
        lua_setfield(L, -2, "__tostring");
        lua_newtable(L);
        lv_setfuncs(L, vnm_methods);
        lua_setfield(L, -2, "__index");
    }
    lua_pop(L, 1);
    return (vn_vnm **)lv_box_new(L, LV_VNM_MT);
}

/* core.vnm_from_dense(W, V, N, M) */
static int l_vnm_from_dense(lua_State *L)
{
    vn_tensor *w = lv_check(L, 1);
    int64_t V = lv_int(L, 2, "V"), N = lv_int(L, 3, "N"), M = lv_int(L, 4, "M");
    vn_vnm **slot = new_box(L);
    if (!(*slot = vn_vnm_from_dense(w, V, N, M))) return lv_fail(L);
    return 1;
}

/* core.vnm_from_pattern(R, K, V, N, M, columns, indices [, values]) */
static int l_vnm_from_pattern(lua_State *L)
{
    int64_t R = lv_int(L, 1, "R"), K = lv_int(L, 2, "K"), V = lv_int(L, 3, "V");
    int64_t N = lv_int(L, 4, "N"), M = lv_int(L, 5, "M");
    vn_tensor *cols = lv_check(L, 6), *idx = lv_check(L, 7), *values = lv_optcheck(L, 8);
    vn_vnm **slot = new_box(L);
    if (!(*slot = vn_vnm_from_pattern(R, K, V, N, M, cols, idx, values))) return lv_fail(L);
    return 1;
}

/* core.vnm_linear(x, S, values [, bias]) */
static int l_vnm_linear(lua_State *L)
{
    vn_tensor *x = lv_check(L, 1);
    vn_vnm *s = lv_check_vnm(L, 2);
    vn_tensor *values = lv_check(L, 3), *bias = lv_optcheck(L, 4);
    return lv_push(L, vn_vnm_linear(x, s, values, bias));
}

/* core.vnm_mlp(x, S1, values1, bias1, S2, values2, bias2): bias1, bias2 may be nil */
static int l_vnm_mlp(lua_State *L)
{
    vn_tensor *x = lv_check(L, 1);
    vn_vnm *fc = lv_check_vnm(L, 2), *proj = lv_check_vnm(L, 5);
    vn_tensor *v1 = lv_check(L, 3), *b1 = lv_optcheck(L, 4), *v2 = lv_check(L, 6);
    vn_tensor *b2 = lv_optcheck(L, 7);
    return lv_push(L, vn_vnm_mlp(x, fc, v1, b1, proj, v2, b2));
}

/* core.vnm_shadow_linear(x, S, W [, bias]) */
static int l_vnm_shadow_linear(lua_State *L)
{
    vn_tensor *x = lv_check(L, 1);
    vn_vnm *s = lv_check_vnm(L, 2);
    vn_tensor *w = lv_check(L, 3), *bias = lv_optcheck(L, 4);
    return lv_push(L, vn_vnm_shadow_linear(x, s, w, bias));
}

/* core.vnm_shadow_decay_(W, S, f) → W */
static int l_vnm_shadow_decay_(lua_State *L)
{
    vn_tensor *w = lv_check(L, 1);
    vn_vnm *s = lv_check_vnm(L, 2);
    lv_status(L, vn_vnm_shadow_decay(w, s, luaL_checknumber(L, 3)));
    lua_settop(L, 1);
    return 1;
}

/* The plain kernels f(S, a, b), each name written once. */
#define LV_VNM_KERNELS(X) X(vnm_spmm) X(vnm_spmm_t) X(vnm_sddmm)

typedef vn_tensor *(*lv_vnm_kernelfn)(const vn_vnm *, const vn_tensor *, const vn_tensor *);

static int lv_vnm_kernel(lua_State *L, lv_vnm_kernelfn f)
{
    vn_vnm *s = lv_check_vnm(L, 1);
    return lv_push(L, f(s, lv_check(L, 2), lv_check(L, 3)));
}

#define LV_VNM_KERNEL_WRAPPER(name)                                             \
    static int l_##name(lua_State *L) { return lv_vnm_kernel(L, vn_##name); }
LV_VNM_KERNELS(LV_VNM_KERNEL_WRAPPER)

static int l_vnm_isa(lua_State *L)
{
    lua_pushstring(L, vn_vnm_isa());
    return 1;
}

/* venom.set_vnm_precision(p): the CPU forward, dX and dW of V:N:M layers in "f32"
 * (default) or "bf16" (AVX-512 BF16; see vn_vnm_set_precision). */
static int l_set_vnm_precision(lua_State *L)
{
    if (lua_type(L, 1) != LUA_TSTRING && lua_type(L, 1) != LUA_TNUMBER)
        return lv_argfail(L, 1, "precision must be \"f32\" or \"bf16\", found %s", luaL_typename(L, 1));
    size_t len;
    const char *s = lua_tolstring(L, 1, &len);
    vn_vnm_precision p;
    /* the length too: "bf16\0x" is not "bf16" */
    if (len == 3 && strcmp(s, "f32") == 0) p = VN_VNM_F32;
    else if (len == 4 && strcmp(s, "bf16") == 0) p = VN_VNM_BF16;
    else return lv_argfail(L, 1, "precision must be \"f32\" or \"bf16\", found \"%s\"", s);
    lv_status(L, vn_vnm_set_precision(p));
    return 0;
}

static int l_vnm_precision(lua_State *L)
{
    lua_pushstring(L, vn_vnm_get_precision() == VN_VNM_BF16 ? "bf16" : "f32");
    return 1;
}

/* venom.set_vnm_cuda_dx(path): how dx of a V:N:M layer runs on CUDA
 * (vn_vnm_set_cuda_dx): "auto" (default), "sparse" or "dense". */
static const char *const cuda_dx_names[] = {"auto", "sparse", "dense"};

static int l_set_vnm_cuda_dx(lua_State *L)
{
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    for (int i = 0; i < 3; i++)
        if (len == strlen(cuda_dx_names[i]) && strcmp(s, cuda_dx_names[i]) == 0) {
            lv_status(L, vn_vnm_set_cuda_dx((vn_vnm_cuda_dx)i));
            return 0;
        }
    return lv_argfail(L, 1, "path must be \"auto\", \"sparse\" or \"dense\", found \"%s\"", s);
}

static int l_vnm_cuda_dx(lua_State *L)
{
    lua_pushstring(L, cuda_dx_names[vn_vnm_get_cuda_dx()]);
    return 1;
}

const luaL_Reg lv_sparse_functions[] = {
    LV_REG(vnm_from_dense) LV_REG(vnm_from_pattern) LV_REG(vnm_linear) LV_REG(vnm_mlp)
    LV_REG(vnm_shadow_linear) LV_REG(vnm_shadow_decay_)
    LV_VNM_KERNELS(LV_REG) LV_REG(vnm_isa)
    LV_REG(set_vnm_precision) LV_REG(vnm_precision) LV_REG(set_vnm_cuda_dx) LV_REG(vnm_cuda_dx)
    {NULL, NULL},
};
