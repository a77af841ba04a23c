/* lv_view.c — views and copies of tensors in the venom.core Lua module:
 * reshape, view, transpose, permute, narrow, select, (un)squeeze, expand
 * (views sharing storage); contiguous, clone, dtype and device conversion
 * (to, float, long, ...), index_select, cat (new storage); and copy_ and
 * fill_, which write into a tensor. Dims and positions are 1-based here. */
#include "lv.h"

#include <stdio.h>
#include <string.h>

/* The families, each name written once: a name in a list gets its wrapper
 * l_<name> and its registration entry. The casts are t:float() = t:to("f32")
 * and so on (the names of Torch7). */
#define LV_RESHAPE_OPS(X) X(reshape) X(view)
#define LV_COPY_OPS(X) X(contiguous) X(clone)
#define LV_CASTS(X) X(float, VN_F32) X(long, VN_I64) X(int, VN_I32) X(byte, VN_U8)

static int lv_reshape_like(lua_State *L, vn_tensor *(*f)(const vn_tensor *, int, const int64_t *))
{
    vn_tensor *t = lv_check(L, 1);
    int64_t shape[VN_MAX_DIMS];
    int nd = lv_shape(L, 2, lua_gettop(L), shape, true);
    return lv_push(L, f(t, nd, shape));
}

#define LV_RESHAPE_WRAPPER(name)                                                \
    static int l_##name(lua_State *L) { return lv_reshape_like(L, vn_##name); }
LV_RESHAPE_OPS(LV_RESHAPE_WRAPPER)

static int l_transpose(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    int nd = vn_tensor_ndim(t);
    int d0 = lv_dim(L, 2, nd), d1 = lv_dim(L, 3, nd);
    return lv_push(L, vn_transpose(t, d0, d1));
}

/* t:t(): the transpose of a matrix (a vector or scalar is returned as is). */
static int l_t(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    int nd = vn_tensor_ndim(t);
    if (nd > 2) return lv_raise(L, "t: expected a tensor of at most 2 dims, found %d (use transpose)", nd);
    if (nd < 2) {
        lua_settop(L, 1);
        return 1;
    }
    return lv_push(L, vn_transpose(t, 0, 1));
}

/* t:permute(d1, d2, ...) or t:permute({d1, d2, ...}) */
static int l_permute(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    int nd = vn_tensor_ndim(t), dims[VN_MAX_DIMS];
    bool seen[VN_MAX_DIMS] = {false};
    bool table = lua_istable(L, 2);
    int n = table ? (int)lua_objlen(L, 2) : lua_gettop(L) - 1;
    if (n != nd) return lv_raise(L, "permute: expected %d dims (a permutation of 1..%d), found %d", nd, nd, n);
    for (int k = 0; k < nd; k++) {
        int at = 2 + k;
        if (table) {
            lua_rawgeti(L, 2, k + 1);
            at = lua_gettop(L);
        }
        dims[k] = lv_dim(L, at, nd);
        if (seen[dims[k]]) return lv_raise(L, "permute: dim %d appears twice (expected a permutation of 1..%d)", dims[k] + 1, nd);
        seen[dims[k]] = true;
        if (table) lua_pop(L, 1);
    }
    return lv_push(L, vn_permute(t, dims));
}

/* t:narrow(dim, start, length): entries start..start+length-1 of dim. */
static int l_narrow(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    int d = lv_dim(L, 2, vn_tensor_ndim(t));
    int64_t size = vn_tensor_shape(t)[d];
    int64_t start = lv_int(L, 3, "start"), len = lv_int(L, 4, "length");
    if (start < 0) start += size + 1;
    if (len < 0) lv_argfail(L, 4, "length must be >= 0, found %lld", (long long)len);
    if (start < 1 || start - 1 + len > size)
        lv_raise(L, "narrow: start %lld, length %lld is out of range for dim %d of size %lld "
                    "(expected start in 1..%lld and start + length - 1 <= %lld)",
                 (long long)lua_tonumber(L, 3), (long long)len, d + 1, (long long)size,
                 (long long)size, (long long)size);
    return lv_push(L, vn_narrow(t, d, start - 1, len));
}

/* t:select(dim, i): entry i of dim, removing the dim. */
static int l_select(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    int d = lv_dim(L, 2, vn_tensor_ndim(t));
    int64_t i = lv_pos(L, 3, d, vn_tensor_shape(t)[d]);
    return lv_push(L, vn_select(t, d, i));
}

static int l_unsqueeze(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    int d = lv_dim(L, 2, vn_tensor_ndim(t) + 1);
    return lv_push(L, vn_unsqueeze(t, d));
}

/* t:squeeze([dim]): drop that dim if it has size 1 (else t as is), or every
 * dim of size 1. */
static int l_squeeze(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    int nd = vn_tensor_ndim(t);
    const int64_t *s = vn_tensor_shape(t);
    if (!lua_isnoneornil(L, 2)) {
        int d = lv_dim(L, 2, nd);
        if (s[d] != 1) {
            lua_settop(L, 1);
            return 1;
        }
        return lv_push(L, vn_squeeze(t, d));
    }
    int64_t shape[VN_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < nd; d++)
        if (s[d] != 1) shape[n++] = s[d];
    return lv_push(L, vn_reshape(t, n, shape));
}

/* t:expand(sizes...): a broadcast view; -1 keeps a size. */
static int l_expand(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    int64_t shape[VN_MAX_DIMS];
    int n = lv_shape(L, 2, lua_gettop(L), shape, true);
    int nd = vn_tensor_ndim(t), lead = n - nd;
    for (int k = 0; k < n; k++) {
        if (shape[k] != -1) continue;
        if (k < lead) return lv_raise(L, "expand: -1 is not allowed for a new leading dim (size %d)", k + 1);
        shape[k] = vn_tensor_shape(t)[k - lead];
    }
    return lv_push(L, vn_expand(t, n, shape));
}

LV_COPY_OPS(LV_UNARY_WRAPPER)

/* t:to(dtype) or t:to(device). A name that is neither gets a message
 * listing both kinds, so t:to("gpu") does not read as a bad dtype only. */
static int l_to(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    if (lua_gettop(L) > 2)
        return lv_raise(L, "to: expected one dtype or device, found %d arguments",
                          lua_gettop(L) - 1);
    if (lua_type(L, 2) == LUA_TSTRING && lv_device_name_at(L, 2) >= 0)
        return lv_push(L, vn_to_device(t, (vn_device)lv_device_name_at(L, 2)));
    if (lv_dtype_name_at(L, 2) < 0)
        lv_argfail(L, 2, "expected a dtype ('f32', 'i32', 'i64', 'u8', 'bf16' or 'f16') or a device "
                   "('cpu' or 'cuda'), found %s%s%s", lua_type(L, 2) == LUA_TSTRING ? "'" : "",
                   lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : luaL_typename(L, 2),
                   lua_type(L, 2) == LUA_TSTRING ? "'" : "");
    return lv_push(L, vn_to_dtype(t, lv_dtype(L, 2)));
}

/* The Torch7 type names, by dtype (VN_F32, VN_I32, VN_I64, VN_U8, VN_BF16,
 * VN_F16), as x:type() gives them after "venom." or "venom.cuda.". */
static const char *const lv_type_names[] = {"FloatTensor", "IntTensor", "LongTensor",
                                            "ByteTensor", "BFloat16Tensor", "HalfTensor"};

/* The dtype of a type name without its "venom." or "venom.cuda." prefix, or -1. */
static int lv_type_dtype(const char *s)
{
    for (int d = 0; d < (int)(sizeof lv_type_names / sizeof lv_type_names[0]); d++)
        if (strcmp(s, lv_type_names[d]) == 0) return d;
    return -1;
}

/* t:type() → "venom.FloatTensor", "venom.cuda.LongTensor", ... (as Torch7);
 * t:type(name) converts: to the dtype and device a type name says, or to a
 * dtype ("i64") on t's device; t itself when it is that already. */
static int l_type(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    vn_dtype dtype = vn_tensor_dtype(t);
    vn_device device = vn_tensor_device(t);
    if (lua_isnoneornil(L, 2)) {
        lua_pushfstring(L, "venom.%s%s", device == VN_CUDA ? "cuda." : "", lv_type_names[dtype]);
        return 1;
    }
    const char *s = lv_string(L, 2, "type");
    int d = lv_dtype_name_at(L, 2);
    if (d < 0 && strncmp(s, "venom.cuda.", 11) == 0) d = lv_type_dtype(s + 11), device = VN_CUDA;
    else if (d < 0 && strncmp(s, "venom.", 6) == 0) d = lv_type_dtype(s + 6), device = VN_CPU;
    if (d < 0)
        lv_argfail(L, 2, "unknown type '%s' (expected a name like 'venom.FloatTensor', "
                   "'venom.cuda.LongTensor' or a dtype like 'i64')", s);
    if ((vn_dtype)d == dtype && device == vn_tensor_device(t)) {
        lua_settop(L, 1);
        return 1;
    }
    vn_tensor *moved = vn_to_device(t, device);
    vn_tensor *r = moved ? vn_to_dtype(moved, (vn_dtype)d) : NULL;
    vn_tensor_release(moved);
    return lv_push(L, r);
}

#define LV_CAST_WRAPPER(name, dtype)                                            \
    static int l_##name(lua_State *L) { return lv_push(L, vn_to_dtype(lv_check(L, 1), dtype)); }
LV_CASTS(LV_CAST_WRAPPER)

/* t:index_select(dim, idx): entries idx[1], idx[2], ... (1-based) of dim. */
static int l_index_select(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    int d = lv_dim(L, 2, vn_tensor_ndim(t));
    vn_tensor *idx = lv_indices0(L, 3, vn_tensor_shape(t)[d], "index_select", "index");
    vn_tensor *r = vn_index_select(t, d, idx);
    vn_tensor_release(idx);
    return lv_push(L, r);
}

/* The tensors of the non-empty table at argument 1 of cat and stack, in a
 * scratch array left on the stack (at *scratch) until the caller removes it;
 * their count in *n. Arguments past 2 are dropped, so the array cannot land
 * on the dim. */
static vn_tensor **lv_tensor_list(lua_State *L, const char *op, int *n, int *scratch)
{
    lv_checktype(L, 1, LUA_TTABLE, "the tensors");
    lua_settop(L, 2);
    *n = (int)lua_objlen(L, 1);
    if (*n == 0) lv_raise(L, "%s: expected a non-empty table of tensors", op);
    vn_tensor **ts = lua_newuserdata(L, sizeof *ts * (size_t)*n);
    *scratch = lua_gettop(L);
    for (int k = 0; k < *n; k++) {
        lua_rawgeti(L, 1, k + 1);
        ts[k] = lv_totensor(L, -1);
        if (!ts[k]) lv_raise(L, "%s: element %d of the table is a %s, expected a tensor", op, k + 1, luaL_typename(L, -1));
        if (vn_tensor_is_freed(ts[k])) lv_raise(L, "%s: element %d of the table was freed", op, k + 1);
        lua_pop(L, 1);
    }
    return ts;
}

/* Raise unless ts[1..n) have ts[0]'s dtype and shape (but along dim `free`,
 * 0-based, or nowhere when -1), so that the messages count table elements
 * and dims from 1, as the caller does. */
static void lv_check_list(lua_State *L, const char *op, vn_tensor *const *ts, int n, int free)
{
    int nd = vn_tensor_ndim(ts[0]);
    for (int k = 1; k < n; k++) {
        const int64_t *a = vn_tensor_shape(ts[0]), *b = vn_tensor_shape(ts[k]);
        bool ok = vn_tensor_ndim(ts[k]) == nd && vn_tensor_dtype(ts[k]) == vn_tensor_dtype(ts[0]);
        for (int j = 0; ok && j < nd; j++) ok = j == free || a[j] == b[j];
        if (!ok) {
            char x[128], y[128], where[32] = "";
            if (free >= 0) snprintf(where, sizeof where, " outside dim %d", free + 1);
            lv_raise(L, "%s: element %d of the table (%s %s) does not match element 1 (%s %s)%s", op,
                     k + 1, vn_dtype_name(vn_tensor_dtype(ts[k])),
                     vn_shape_str(vn_tensor_ndim(ts[k]), b, x, sizeof x),
                     vn_dtype_name(vn_tensor_dtype(ts[0])), vn_shape_str(nd, a, y, sizeof y), where);
        }
    }
}

/* cat({t1, t2, ...}, [dim = 1]). */
static int l_cat(lua_State *L)
{
    int n, scratch;
    vn_tensor **ts = lv_tensor_list(L, "cat", &n, &scratch);
    int nd = vn_tensor_ndim(ts[0]);
    if (nd == 0) return lv_raise(L, "cat: element 1 of the table is 0-d; cannot concatenate 0-d tensors");
    int d = lv_optdim(L, 2, nd, 0);
    lv_check_list(L, "cat", ts, n, d);
    vn_tensor *r = vn_cat(ts, n, d);
    lua_remove(L, scratch);
    return lv_push(L, r);
}

/* stack({t1, t2, ...}, [dim = 1]): along a new dim (1..ndim+1), so n
 * tensors of shape (a, b) stacked at dim 2 give (a, n, b). */
static int l_stack(lua_State *L)
{
    int n, scratch;
    vn_tensor **ts = lv_tensor_list(L, "stack", &n, &scratch);
    int d = lv_optdim(L, 2, vn_tensor_ndim(ts[0]) + 1, 0);
    lv_check_list(L, "stack", ts, n, -1);
    vn_tensor *r = vn_stack(ts, n, d);
    lua_remove(L, scratch);
    return lv_push(L, r);
}

/* t:copy_(src): src (a tensor, broadcast and converted, or a number). */
static int l_copy_(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    if (lua_type(L, 2) == LUA_TNUMBER) {
        double v = lua_tonumber(L, 2);
        lv_check_representable(L, "copy_", v, vn_tensor_dtype(t), NULL);
        lv_status(L, vn_tensor_fill_(t, v));
    } else {
        lv_status(L, vn_tensor_copy_(t, lv_check(L, 2)));
    }
    lua_settop(L, 1);
    return 1;
}

static int l_fill_(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    double v = lv_number(L, 2, "value");
    lv_check_representable(L, "fill_", v, vn_tensor_dtype(t), NULL);
    lv_status(L, vn_tensor_fill_(t, v));
    lua_settop(L, 1);
    return 1;
}

#define LV_REG_CAST(name, dtype) LV_REG(name)

const luaL_Reg lv_view_methods[] = {
    LV_COPY_OPS(LV_REG) LV_RESHAPE_OPS(LV_REG) LV_REG(transpose) LV_REG(t) LV_REG(permute)
    LV_REG(narrow) LV_REG(select) LV_REG(unsqueeze) LV_REG(squeeze) LV_REG(expand) LV_REG(to)
    LV_CASTS(LV_REG_CAST) LV_REG(type) LV_REG(index_select) LV_REG(copy_) LV_REG(fill_)
    {NULL, NULL},
};

const luaL_Reg lv_view_functions[] = {
    LV_REG(cat) LV_REG(stack)
    {NULL, NULL},
};
