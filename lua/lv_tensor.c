/* binding.c — the venom.core Lua module: tensors as userdata over the vn_*
 * API of venom.h (nothing of the engine's internals).
 *
 * A tensor is a userdata box holding one reference to a vn_tensor, with the
 * metatable "venom.Tensor". Every failed vn_ call becomes a Lua error carrying
 * vn_last_error(); wrong arguments are Lua errors naming what was expected
 * and what was found. Lua counts from 1: dims, positions, narrow/select
 * starts, argmax results, class targets and index_select indices are 1-based
 * here and converted at this boundary (the C API is 0-based).
 *
 * Temporaries: a function first checks all its Lua arguments (which may
 * raise), then calls the engine and releases its temporaries, and only then
 * pushes the result or raises, so an error never leaks a tensor. */
#include "binding.h"
#include "lv.h"
#include "venom.h"

#include <lauxlib.h>
#include <lualib.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>


/* ---- errors ---------------------------------------------------------------- */

/* Raise the engine's last error as a Lua error at the caller's line. */
int lv_fail(lua_State *L)
{
    return luaL_error(L, "%s", vn_last_error());
}

/* Raise a printf-formatted error (lua_pushfstring has no %lld). */
int lv_raise(lua_State *L, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return luaL_error(L, "%s", msg);
}

/* "bad argument #i to 'f' (message)", printf-formatted. */
int lv_argfail(lua_State *L, int i, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return luaL_argerror(L, i, msg);
}

/* ---- tensors on the stack ------------------------------------------------- */

/* The tensor at i, or NULL if the value is not a tensor. */
vn_tensor *lv_totensor(lua_State *L, int i)
{
    lv_box *b = luaL_testudata(L, i, LV_MT);
    return b ? b->t : NULL;
}

/* The usable tensor at i; a Lua error for anything else or a freed tensor. */
vn_tensor *lv_check(lua_State *L, int i)
{
    vn_tensor *t = lv_totensor(L, i);
    if (!t) lv_argfail(L, i, "expected a tensor, found %s", luaL_typename(L, i));
    if (vn_tensor_is_freed(t))
        lv_argfail(L, i, "the tensor was freed (t:free()) and can no longer be used");
    return t;
}

/* Like lv_check, but nil (or nothing) gives NULL. */
vn_tensor *lv_optcheck(lua_State *L, int i)
{
    return lua_isnoneornil(L, i) ? NULL : lv_check(L, i);
}

/* Check that the value at i is a number or a usable tensor. */
void lv_check_operand(lua_State *L, int i)
{
    if (lua_type(L, i) == LUA_TNUMBER) return;
    if (!lv_totensor(L, i))
        lv_argfail(L, i, "expected a tensor or a number, found %s", luaL_typename(L, i));
    lv_check(L, i);
}

/* The one place numbers meet tensors: a checked operand at i as a new
 * reference — the tensor itself, or the number as a 0-d tensor of `dtype`
 * that the broadcasting ops stretch. The caller first checks the number
 * with lv_check_scalar. NULL (engine error set) only when the engine cannot
 * allocate. */
vn_tensor *lv_operand(lua_State *L, int i, vn_dtype dtype)
{
    if (lua_type(L, i) == LUA_TNUMBER) return vn_full(dtype, 0, NULL, lua_tonumber(L, i));
    return vn_tensor_retain(lv_totensor(L, i));
}

/* If the operand at i is a number, raise unless `dtype` holds it exactly:
 * 0.5, NaN or 300 meeting an integer tensor is an error naming `op` rather
 * than a silently truncated or wrapped value. Called for every operand
 * before any lv_operand, so that an error leaks nothing. */
static void lv_check_scalar(lua_State *L, int i, vn_dtype dtype, const char *op)
{
    if (lua_type(L, i) == LUA_TNUMBER)
        lv_check_representable(L, op, lua_tonumber(L, i), dtype,
                               "convert the tensor with :float() first");
}

/* Engine bytes in use after our last full collection, or the lowest count
 * seen since (see lv_gc_nudge). */
static _Thread_local size_t lv_gc_base; /* per thread: states may run on several */

/* Lua's collector sees a few bytes per tensor userdata while the storage may
 * be megabytes, so left alone it lets garbage tensors pile up. Run a full
 * collection whenever engine memory grew by more than an eighth of what it
 * was at the low point since the last one (at least 32 MB, at most 256 MB):
 * a training loop then keeps a flat resident size, and its garbage buffers
 * come back through the allocator's cache while still warm. (With a slack of
 * 256 MB instead, a 784-1024-1024-10 MLP training loop held twice the
 * memory; a full collection of a script's small Lua heap is cheap.) */
static void lv_gc_nudge(lua_State *L)
{
    const size_t lo = (size_t)32 << 20, hi = (size_t)256 << 20;
    size_t in_use, cached;
    vn_memory_stats(&in_use, &cached);
    if (in_use < lv_gc_base) lv_gc_base = in_use;
    size_t slack = lv_gc_base / 8 < lo ? lo : lv_gc_base / 8 > hi ? hi : lv_gc_base / 8;
    if (in_use > lv_gc_base + slack) {
        lua_gc(L, LUA_GCCOLLECT, 0);
        vn_memory_stats(&in_use, &cached);
        lv_gc_base = in_use;
    }
}

/* Push t (taking its reference) as a new tensor userdata; NULL raises the
 * engine's last error. */
int lv_push(lua_State *L, vn_tensor *t)
{
    if (!t) return lv_fail(L);
    lv_box *b = lua_newuserdata(L, sizeof *b);
    b->t = t;
    luaL_getmetatable(L, LV_MT);
    lua_setmetatable(L, -2);
    lv_gc_nudge(L);
    return 1;
}

/* Raise the engine's last error unless s is VN_OK. */
void lv_status(lua_State *L, vn_status s)
{
    if (s != VN_OK) lv_fail(L);
}

/* ---- numbers, dims, positions, shapes, options ---------------------------- */

/* Whether x is a whole number that a double holds exactly (NaN is not).
 * Written without libm, which the executable does not link. */
bool lv_whole(double x)
{
    return x >= -9007199254740992.0 && x <= 9007199254740992.0 && (double)(int64_t)x == x;
}

/* The integer at i (a number with no fraction; strings are not numbers). */
int64_t lv_int(lua_State *L, int i, const char *what)
{
    if (lua_type(L, i) != LUA_TNUMBER)
        lv_argfail(L, i, "%s must be an integer, found %s", what, luaL_typename(L, i));
    double x = lua_tonumber(L, i);
    if (!lv_whole(x))
        lv_argfail(L, i, "%s must be an integer, found %g", what, x);
    return (int64_t)x;
}

/* A 1-based dim at i (1..n, or -n..-1 from the end) → 0-based. */
int lv_dim(lua_State *L, int i, int n)
{
    int64_t d = lv_int(L, i, "dim");
    if (d >= 1 && d <= n) return (int)d - 1;
    if (d < 0 && d >= -n) return (int)(d + n);
    if (n == 0) return lv_argfail(L, i, "dim %lld out of range: the tensor is 0-d", (long long)d);
    return lv_argfail(L, i, "dim %lld out of range for %d dims (expected 1..%d or -%d..-1)",
                      (long long)d, n, n, n);
}

int lv_optdim(lua_State *L, int i, int n, int def)
{
    return lua_isnoneornil(L, i) ? def : lv_dim(L, i, n);
}

/* A 1-based position at i along dim `dim0` (0-based) of `size` elements
 * (1..size, or -size..-1 from the end) → 0-based. */
int64_t lv_pos(lua_State *L, int i, int dim0, int64_t size)
{
    int64_t k = lv_int(L, i, "index");
    if (k >= 1 && k <= size) return k - 1;
    if (k < 0 && k >= -size) return k + size;
    return lv_argfail(L, i, "index %lld out of range for dim %d of size %lld (expected 1..%lld)",
                      (long long)k, dim0 + 1, (long long)size, (long long)size);
}

/* The largest size along one dim the binding accepts: far beyond any
 * memory, and small enough that a product of a few sizes stays exact. */
#define LV_MAX_SIZE 1e15

/* One size of a shape, at stack index `at` (argument `argi` for messages). */
static int64_t lv_size(lua_State *L, int at, int argi, int k, bool allow_infer)
{
    char found[64];
    if (lua_type(L, at) == LUA_TNUMBER) {
        double x = lua_tonumber(L, at);
        if (x >= LV_MAX_SIZE)
            return lv_argfail(L, argi, "size %d of the shape is too large: %.14g (the limit is %g "
                              "elements along a dim)", k, x, LV_MAX_SIZE);
        if (lv_whole(x) && (x >= 0 || (allow_infer && x == -1))) return (int64_t)x;
        snprintf(found, sizeof found, "%.14g", x);
    } else {
        snprintf(found, sizeof found, "%s", luaL_typename(L, at));
    }
    return lv_argfail(L, argi, "size %d of the shape must be a non-negative integer%s, found %s",
                      k, allow_infer ? " (or -1)" : "", found);
}

/* A shape from arguments first..last: numbers, or one table of numbers. */
int lv_shape(lua_State *L, int first, int last, int64_t *shape, bool allow_infer)
{
    if (first == last && lua_istable(L, first)) {
        int n = (int)lua_objlen(L, first);
        if (n > VN_MAX_DIMS)
            lv_argfail(L, first, "a shape has at most %d dims, found %d", VN_MAX_DIMS, n);
        for (int k = 0; k < n; k++) {
            lua_rawgeti(L, first, k + 1);
            shape[k] = lv_size(L, -1, first, k + 1, allow_infer);
            lua_pop(L, 1);
        }
        return n;
    }
    int n = last - first + 1;
    if (n < 0) n = 0;
    if (n > VN_MAX_DIMS) lv_argfail(L, first, "a shape has at most %d dims, found %d", VN_MAX_DIMS, n);
    for (int k = 0; k < n; k++) shape[k] = lv_size(L, first + k, first + k, k + 1, allow_infer);
    return n;
}

static const struct {
    const char *name;
    vn_dtype dtype;
} lv_dtypes[] = {
    {"f32", VN_F32},   {"float32", VN_F32}, {"float", VN_F32}, {"i32", VN_I32},
    {"int32", VN_I32}, {"int", VN_I32},     {"i64", VN_I64},   {"int64", VN_I64},
    {"long", VN_I64},  {"u8", VN_U8},       {"uint8", VN_U8},  {"byte", VN_U8},
    {"bf16", VN_BF16}, {"bfloat16", VN_BF16}, {"f16", VN_F16}, {"float16", VN_F16},
    {"half", VN_F16},
};

/* The dtype named by the string at stack index `at` (argument `argi`). */
vn_dtype lv_dtype_at(lua_State *L, int at, int argi)
{
    if (lua_type(L, at) == LUA_TSTRING) {
        const char *s = lua_tostring(L, at);
        for (size_t k = 0; k < sizeof lv_dtypes / sizeof lv_dtypes[0]; k++)
            if (strcmp(s, lv_dtypes[k].name) == 0) return lv_dtypes[k].dtype;
        lv_argfail(L, argi, "unknown dtype '%s' (expected 'f32', 'i32', 'i64', 'u8', 'bf16' or "
                   "'f16')", s);
    }
    return (vn_dtype)lv_argfail(L, argi, "expected a dtype name ('f32', 'i32', 'i64', 'u8', "
                                "'bf16' or 'f16'), found %s", luaL_typename(L, at));
}

vn_dtype lv_dtype(lua_State *L, int i)
{
    return lv_dtype_at(L, i, i);
}


/* Read an options table {dtype = ..., requires_grad = ...} at i. */
void lv_parse_opts(lua_State *L, int i, lv_opts *o)
{
    lua_pushnil(L);
    while (lua_next(L, i)) {
        const char *key = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
        if (key && strcmp(key, "dtype") == 0) {
            o->dtype = lv_dtype_at(L, lua_gettop(L), i);
        } else if (key && strcmp(key, "requires_grad") == 0) {
            o->requires_grad = lua_toboolean(L, -1);
        } else if (key && strcmp(key, "device") == 0) {
            if (lv_device_name_at(L, lua_gettop(L)) < 0)
                lv_argfail(L, i, "option device: expected 'cpu' or 'cuda', found %s",
                           lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1)
                                                          : luaL_typename(L, -1));
            o->device = (vn_device)lv_device_name_at(L, lua_gettop(L));
        } else {
            lv_argfail(L, i, "unknown option %s%s%s (expected dtype, device or requires_grad)",
                       key ? "'" : "a ", key ? key : luaL_typename(L, -2), key ? "'" : " key");
        }
        lua_pop(L, 1);
    }
}

/* If the last argument (*top) is an options table or a dtype name (as in
 * venom.tensor(data, "i64")), read it and drop it from the count. A lone
 * table is a shape unless it has string keys. */
lv_opts lv_take_opts(lua_State *L, int *top)
{
    lv_opts o = {VN_F32, false, VN_CPU};
    int i = *top;
    if (i >= 1 && lua_type(L, i) == LUA_TSTRING) {
        o.dtype = lv_dtype(L, i);
        (*top)--;
        return o;
    }
    if (i < 1 || !lua_istable(L, i)) return o;
    if (i == 1) {
        if (lua_objlen(L, 1) > 0) return o;
        lua_pushnil(L);
        if (!lua_next(L, 1)) return o; /* {}: the 0-d shape */
        bool named = lua_type(L, -2) == LUA_TSTRING;
        lua_pop(L, 2);
        if (!named) return o;
    }
    lv_parse_opts(L, i, &o);
    (*top)--;
    return o;
}

/* Push a new tensor after moving it to the options' device (when it is not
 * there yet) and applying requires_grad. */
int lv_push_new(lua_State *L, vn_tensor *t, const lv_opts *o)
{
    if (t && vn_tensor_device(t) != o->device) {
        vn_tensor *moved = vn_to_device(t, o->device);
        vn_tensor_release(t);
        t = moved;
    }
    if (t && o->requires_grad && vn_tensor_set_requires_grad(t, true) != VN_OK) {
        vn_tensor_release(t);
        t = NULL;
    }
    return lv_push(L, t);
}

/* t + k as a new tensor of t's dtype; consumes t (NULL passes through). */
static vn_tensor *lv_shifted(vn_tensor *t, double k)
{
    if (!t) return NULL;
    vn_tensor *c = vn_full(vn_tensor_dtype(t), 0, NULL, k);
    vn_tensor *r = c ? vn_add(t, c) : NULL;
    vn_tensor_release(c);
    vn_tensor_release(t);
    return r;
}

bool lv_is_integer_dtype(vn_dtype d)
{
    return d == VN_I32 || d == VN_I64 || d == VN_U8;
}

/* The 1-based integer indices in `idx` (at stack index i) as a new 0-based
 * i64 tensor, each checked to lie in 1..limit. `op` and `what` name them in
 * messages ("cross_entropy", "target"). */
vn_tensor *lv_indices0(lua_State *L, int i, int64_t limit, const char *op, const char *what)
{
    vn_tensor *idx = lv_check(L, i);
    vn_dtype dt = vn_tensor_dtype(idx);
    if (!lv_is_integer_dtype(dt))
        lv_raise(L, "%s: %s must be an integer tensor (i64, i32 or u8) of 1-based indices, found %s",
                 op, what, vn_dtype_name(dt));
    /* A fresh copy on the CPU we may change in place (copy_ brings a CUDA
     * tensor over); it goes back to idx's device at the end. */
    vn_tensor *out = vn_empty(VN_I64, vn_tensor_ndim(idx), vn_tensor_shape(idx));
    if (!out) lv_fail(L);
    if (vn_tensor_copy_(out, idx) != VN_OK) {
        vn_tensor_release(out);
        lv_fail(L);
    }
    int64_t *v = vn_tensor_data(out), n = vn_tensor_numel(out);
    for (int64_t k = 0; k < n; k++) {
        if (v[k] < 1 || v[k] > limit) {
            long long bad = (long long)v[k];
            vn_tensor_release(out);
            lv_raise(L, "%s: %s[%lld] = %lld is out of range (expected 1..%lld)", op, what,
                     (long long)k + 1, bad, (long long)limit);
        }
        v[k] -= 1;
    }
    if (vn_tensor_device(idx) != VN_CPU) {
        vn_tensor *moved = vn_to_device(out, vn_tensor_device(idx));
        vn_tensor_release(out);
        if (!moved) lv_fail(L);
        out = moved;
    }
    return out;
}

/* ---- creation -------------------------------------------------------------- */

/* f(dims... | shape_table, [opts]): filled with `value`, or uninitialized
 * when value is NaN. */
static int lv_create(lua_State *L, double value)
{
    int top = lua_gettop(L);
    lv_opts o = lv_take_opts(L, &top);
    int64_t shape[VN_MAX_DIMS];
    int nd = lv_shape(L, 1, top, shape, false);
    return lv_push_new(L, value == value ? vn_full_on(o.device, o.dtype, nd, shape, value)
                                         : vn_empty_on(o.device, o.dtype, nd, shape), &o);
}

static int l_zeros(lua_State *L) { return lv_create(L, 0); }
static int l_ones(lua_State *L) { return lv_create(L, 1); }
static int l_empty(lua_State *L) { return lv_create(L, NAN); }

static int lv_random(lua_State *L, vn_tensor *(*make)(vn_device, int, const int64_t *))
{
    int top = lua_gettop(L);
    lv_opts o = lv_take_opts(L, &top);
    if (o.dtype != VN_F32)
        lv_argfail(L, top + 1, "random tensors are f32, found dtype %s", vn_dtype_name(o.dtype));
    int64_t shape[VN_MAX_DIMS];
    int nd = lv_shape(L, 1, top, shape, false);
    return lv_push_new(L, make(o.device, nd, shape), &o);
}

static int l_rand(lua_State *L) { return lv_random(L, vn_rand_on); }
static int l_randn(lua_State *L) { return lv_random(L, vn_randn_on); }

/* full(shape, value, [opts]) */
static int l_full(lua_State *L)
{
    int top = lua_gettop(L);
    lv_opts o = lv_take_opts(L, &top);
    if (top != 2) return luaL_error(L, "full: expected (shape, value, [opts]), found %d arguments", top);
    int64_t shape[VN_MAX_DIMS];
    int nd = lv_shape(L, 1, 1, shape, false);
    double v = luaL_checknumber(L, 2);
    lv_check_representable(L, "full", v, o.dtype, NULL);
    return lv_push_new(L, vn_full_on(o.device, o.dtype, nd, shape, v), &o);
}

/* arange([start,] stop, [step], [opts]): start, start+step, ... < stop. */
static int l_arange(lua_State *L)
{
    int top = lua_gettop(L);
    lv_opts o = lv_take_opts(L, &top);
    double start = 0, stop, step = 1;
    if (top == 1) {
        stop = luaL_checknumber(L, 1);
    } else {
        start = luaL_checknumber(L, 1);
        stop = luaL_checknumber(L, 2);
        step = top >= 3 ? luaL_checknumber(L, 3) : 1; /* not past the options */
    }
    return lv_push_new(L, vn_arange(start, stop, step, o.dtype), &o);
}

/* randperm(n): an i64 permutation of 1..n. */
static int l_randperm(lua_State *L)
{
    int64_t n = lv_int(L, 1, "n");
    return lv_push(L, lv_shifted(vn_randperm(n), 1));
}

static int l_manual_seed(lua_State *L)
{
    int64_t s = lv_int(L, 1, "seed");
    if (s < 0) lv_argfail(L, 1, "seed must be >= 0, found %lld", (long long)s);
    vn_manual_seed((uint64_t)s);
    return 0;
}

/* ---- properties and elements ----------------------------------------------- */

static void lv_push_shape(lua_State *L, const vn_tensor *t)
{
    int nd = vn_tensor_ndim(t);
    const int64_t *s = vn_tensor_shape(t);
    lua_createtable(L, nd, 0);
    for (int d = 0; d < nd; d++) {
        lua_pushnumber(L, (lua_Number)s[d]);
        lua_rawseti(L, -2, d + 1);
    }
}

static int l_shape(lua_State *L)
{
    lv_push_shape(L, lv_check(L, 1));
    return 1;
}

/* t:size() → shape table; t:size(dim) → number. */
static int l_size(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    if (lua_isnoneornil(L, 2)) {
        lv_push_shape(L, t);
        return 1;
    }
    int d = lv_dim(L, 2, vn_tensor_ndim(t));
    lua_pushnumber(L, (lua_Number)vn_tensor_shape(t)[d]);
    return 1;
}

static int l_dim(lua_State *L)
{
    lua_pushinteger(L, vn_tensor_ndim(lv_check(L, 1)));
    return 1;
}

static int l_numel(lua_State *L)
{
    lua_pushnumber(L, (lua_Number)vn_tensor_numel(lv_check(L, 1)));
    return 1;
}

static int l_dtype(lua_State *L)
{
    lua_pushstring(L, vn_dtype_name(vn_tensor_dtype(lv_check(L, 1))));
    return 1;
}

static int l_is_contiguous(lua_State *L)
{
    lua_pushboolean(L, vn_tensor_is_contiguous(lv_check(L, 1)));
    return 1;
}

static int l_item(lua_State *L)
{
    double v;
    lv_status(L, vn_tensor_item(lv_check(L, 1), &v));
    lua_pushnumber(L, v);
    return 1;
}

/* Read ndim 1-based positions from arguments first.. into idx. */
static void lv_index_args(lua_State *L, const vn_tensor *t, int first, int count, int64_t *idx,
                          const char *op)
{
    int nd = vn_tensor_ndim(t);
    if (count != nd)
        lv_raise(L, "%s: expected %d indices for a %d-d tensor, found %d", op, nd, nd, count);
    for (int d = 0; d < nd; d++) idx[d] = lv_pos(L, first + d, d, vn_tensor_shape(t)[d]);
}

/* t:get(i, j, ...) */
static int l_get(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    int64_t idx[VN_MAX_DIMS];
    lv_index_args(L, t, 2, lua_gettop(L) - 1, idx, "get");
    double v;
    lv_status(L, vn_tensor_get(t, idx, &v));
    lua_pushnumber(L, v);
    return 1;
}

/* t:set(i, j, ..., value) */
static int l_set(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    int top = lua_gettop(L);
    double v = luaL_checknumber(L, top);
    lv_check_representable(L, "set", v, vn_tensor_dtype(t), NULL);
    int64_t idx[VN_MAX_DIMS];
    lv_index_args(L, t, 2, top - 2, idx, "set");
    lv_status(L, vn_tensor_set(t, idx, v));
    lua_settop(L, 1);
    return 1;
}

static int l_free(lua_State *L)
{
    lv_box *b = luaL_checkudata(L, 1, LV_MT);
    vn_tensor_free(b->t);
    return 0;
}

static int l_is_freed(lua_State *L)
{
    lv_box *b = luaL_checkudata(L, 1, LV_MT);
    lua_pushboolean(L, vn_tensor_is_freed(b->t));
    return 1;
}

static int l_gc(lua_State *L)
{
    lv_box *b = luaL_checkudata(L, 1, LV_MT);
    vn_tensor_release(b->t);
    b->t = NULL;
    return 0;
}

/* #t: the size of dim 1. */
static int l_len(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    if (vn_tensor_ndim(t) == 0) return luaL_error(L, "#: a 0-d tensor has no length (use t:item())");
    lua_pushnumber(L, (lua_Number)vn_tensor_shape(t)[0]);
    return 1;
}

/* ---- views and copies ------------------------------------------------------ */

static int lv_reshape_like(lua_State *L, vn_tensor *(*f)(const vn_tensor *, int, const int64_t *))
{
    vn_tensor *t = lv_check(L, 1);
    int64_t shape[VN_MAX_DIMS];
    int nd = lv_shape(L, 2, lua_gettop(L), shape, true);
    return lv_push(L, f(t, nd, shape));
}

static int l_reshape(lua_State *L) { return lv_reshape_like(L, vn_reshape); }
static int l_view(lua_State *L) { return lv_reshape_like(L, vn_view); }

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
    if (nd > 2) return luaL_error(L, "t: expected a tensor of at most 2 dims, found %d (use transpose)", nd);
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
    if (n != nd) return luaL_error(L, "permute: expected %d dims (a permutation of 1..%d), found %d", nd, nd, n);
    for (int k = 0; k < nd; k++) {
        int at = 2 + k;
        if (table) {
            lua_rawgeti(L, 2, k + 1);
            at = lua_gettop(L);
        }
        dims[k] = lv_dim(L, at, nd);
        if (seen[dims[k]]) return luaL_error(L, "permute: dim %d appears twice (expected a permutation of 1..%d)", dims[k] + 1, nd);
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
        if (k < lead) return luaL_error(L, "expand: -1 is not allowed for a new leading dim (size %d)", k + 1);
        shape[k] = vn_tensor_shape(t)[k - lead];
    }
    return lv_push(L, vn_expand(t, n, shape));
}

static int l_contiguous(lua_State *L) { return lv_push(L, vn_contiguous(lv_check(L, 1))); }
static int l_clone(lua_State *L) { return lv_push(L, vn_clone(lv_check(L, 1))); }
static int l_detach(lua_State *L) { return lv_push(L, vn_detach(lv_check(L, 1))); }

/* t:to(dtype) or t:to(device). A name that is neither gets a message
 * listing both kinds, so t:to("gpu") does not read as a bad dtype only. */
static int l_to(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    if (lua_gettop(L) > 2)
        return luaL_error(L, "to: expected one dtype or device, found %d arguments",
                          lua_gettop(L) - 1);
    if (lua_type(L, 2) == LUA_TSTRING && lv_device_name_at(L, 2) >= 0)
        return lv_push(L, vn_to_device(t, (vn_device)lv_device_name_at(L, 2)));
    bool known = false;
    for (size_t k = 0; lua_type(L, 2) == LUA_TSTRING && k < sizeof lv_dtypes / sizeof lv_dtypes[0]; k++)
        known = known || strcmp(lua_tostring(L, 2), lv_dtypes[k].name) == 0;
    if (!known)
        lv_argfail(L, 2, "expected a dtype ('f32', 'i32', 'i64', 'u8', 'bf16' or 'f16') or a device "
                   "('cpu' or 'cuda'), found %s%s%s", lua_type(L, 2) == LUA_TSTRING ? "'" : "",
                   lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : luaL_typename(L, 2),
                   lua_type(L, 2) == LUA_TSTRING ? "'" : "");
    return lv_push(L, vn_to_dtype(t, lv_dtype(L, 2)));
}

static int l_float(lua_State *L) { return lv_push(L, vn_to_dtype(lv_check(L, 1), VN_F32)); }
static int l_long(lua_State *L) { return lv_push(L, vn_to_dtype(lv_check(L, 1), VN_I64)); }
static int l_int(lua_State *L) { return lv_push(L, vn_to_dtype(lv_check(L, 1), VN_I32)); }
static int l_byte(lua_State *L) { return lv_push(L, vn_to_dtype(lv_check(L, 1), VN_U8)); }

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

/* cat({t1, t2, ...}, [dim = 1]). The shapes are checked here so that the
 * messages count table elements and dims from 1, as the caller does. */
static int l_cat(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 2); /* the scratch array below must not land on the dim */
    int n = (int)lua_objlen(L, 1);
    if (n == 0) return luaL_error(L, "cat: expected a non-empty table of tensors");
    vn_tensor **ts = lua_newuserdata(L, sizeof *ts * (size_t)n);
    int scratch = lua_gettop(L);
    for (int k = 0; k < n; k++) {
        lua_rawgeti(L, 1, k + 1);
        ts[k] = lv_totensor(L, -1);
        if (!ts[k]) return luaL_error(L, "cat: element %d of the table is a %s, expected a tensor", k + 1, luaL_typename(L, -1));
        if (vn_tensor_is_freed(ts[k])) return luaL_error(L, "cat: element %d of the table was freed", k + 1);
        lua_pop(L, 1);
    }
    int nd = vn_tensor_ndim(ts[0]);
    if (nd == 0) return luaL_error(L, "cat: element 1 of the table is 0-d; cannot concatenate 0-d tensors");
    int d = lv_optdim(L, 2, nd, 0);
    for (int k = 1; k < n; k++) {
        const int64_t *a = vn_tensor_shape(ts[0]), *b = vn_tensor_shape(ts[k]);
        bool ok = vn_tensor_ndim(ts[k]) == nd && vn_tensor_dtype(ts[k]) == vn_tensor_dtype(ts[0]);
        for (int j = 0; ok && j < nd; j++) ok = j == d || a[j] == b[j];
        if (!ok) {
            char x[128], y[128];
            return lv_raise(L, "cat: element %d of the table (%s %s) does not match element 1 "
                            "(%s %s) outside dim %d", k + 1, vn_dtype_name(vn_tensor_dtype(ts[k])),
                            vn_shape_str(vn_tensor_ndim(ts[k]), b, x, sizeof x),
                            vn_dtype_name(vn_tensor_dtype(ts[0])), vn_shape_str(nd, a, y, sizeof y), d + 1);
        }
    }
    vn_tensor *r = vn_cat(ts, n, d);
    lua_remove(L, scratch);
    return lv_push(L, r);
}

/* ---- arithmetic ------------------------------------------------------------ */

typedef vn_tensor *(*lv_binfn)(const vn_tensor *, const vn_tensor *);

/* f(a, b) where either may be a number (see lv_operand). */
static int lv_binop(lua_State *L, lv_binfn f, const char *op)
{
    lv_check_operand(L, 1);
    lv_check_operand(L, 2);
    vn_tensor *like = lv_totensor(L, 1) ? lv_totensor(L, 1) : lv_totensor(L, 2);
    if (!like) return luaL_error(L, "expected a tensor among the two operands, found two numbers");
    vn_dtype dt = vn_tensor_dtype(like);
    lv_check_scalar(L, 1, dt, op);
    lv_check_scalar(L, 2, dt, op);
    vn_tensor *a = lv_operand(L, 1, dt);
    vn_tensor *b = a ? lv_operand(L, 2, dt) : NULL;
    vn_tensor *r = b ? f(a, b) : NULL;
    vn_tensor_release(a);
    vn_tensor_release(b);
    return lv_push(L, r);
}

#define LV_BINOP(name)                                                          \
    static int l_##name(lua_State *L) { return lv_binop(L, vn_##name, #name); }
LV_BINOP(add)
LV_BINOP(sub)
LV_BINOP(mul)
LV_BINOP(div)
LV_BINOP(eq)
LV_BINOP(ne)
LV_BINOP(lt)
LV_BINOP(le)
LV_BINOP(gt)
LV_BINOP(ge)

/* a ^ b: a number exponent uses the scalar power (its gradient is simpler). */
static int l_pow(lua_State *L)
{
    if (lv_totensor(L, 1) && lua_type(L, 2) == LUA_TNUMBER)
        return lv_push(L, vn_pow_scalar(lv_check(L, 1), lua_tonumber(L, 2)));
    return lv_binop(L, vn_pow, "pow");
}

/* In place: self = f(self, other), not recorded by autograd. */
static int lv_inplace(lua_State *L, lv_binfn f, const char *op)
{
    vn_tensor *t = lv_check(L, 1);
    lv_check_operand(L, 2);
    lv_check_scalar(L, 2, vn_tensor_dtype(t), op);
    bool prev = vn_set_grad_enabled(false);
    vn_tensor *b = lv_operand(L, 2, vn_tensor_dtype(t));
    vn_tensor *r = b ? f(t, b) : NULL;
    vn_set_grad_enabled(prev); /* so copy_ refuses a leaf that requires grad */
    vn_status s = r ? vn_tensor_copy_(t, r) : VN_ERR_ARG;
    vn_tensor_release(b);
    vn_tensor_release(r);
    lv_status(L, s);
    lua_settop(L, 1);
    return 1;
}

static int l_add_(lua_State *L) { return lv_inplace(L, vn_add, "add_"); }
static int l_sub_(lua_State *L) { return lv_inplace(L, vn_sub, "sub_"); }
static int l_mul_(lua_State *L) { return lv_inplace(L, vn_mul, "mul_"); }
static int l_div_(lua_State *L) { return lv_inplace(L, vn_div, "div_"); }

#define LV_UNARY(name)                                                          \
    static int l_##name(lua_State *L) { return lv_push(L, vn_##name(lv_check(L, 1))); }
LV_UNARY(neg)
LV_UNARY(abs)
LV_UNARY(exp)
LV_UNARY(log)
LV_UNARY(sqrt)
LV_UNARY(relu)
LV_UNARY(gelu)
LV_UNARY(tanh)
LV_UNARY(sigmoid)

/* __unm gets the operand twice; neg takes the first. */
static int l_unm(lua_State *L) { return l_neg(L); }

/* t:clamp(lo, hi): nil means no bound. */
static int l_clamp(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    double lo = lua_isnoneornil(L, 2) ? NAN : luaL_checknumber(L, 2);
    double hi = lua_isnoneornil(L, 3) ? NAN : luaL_checknumber(L, 3);
    return lv_push(L, vn_clamp(t, lo, hi));
}

static int l_masked_fill(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1), *mask = lv_check(L, 2);
    double v = luaL_checknumber(L, 3);
    lv_check_representable(L, "masked_fill", v, vn_tensor_dtype(t),
                           "convert the tensor with :float() first");
    return lv_push(L, vn_masked_fill(t, mask, v));
}

/* where(cond, a, b): a and b may be numbers. */
static int l_where(lua_State *L)
{
    vn_tensor *c = lv_check(L, 1);
    lv_check_operand(L, 2);
    lv_check_operand(L, 3);
    vn_tensor *like = lv_totensor(L, 2) ? lv_totensor(L, 2) : lv_totensor(L, 3);
    vn_dtype dt = like ? vn_tensor_dtype(like) : VN_F32;
    lv_check_scalar(L, 2, dt, "where");
    lv_check_scalar(L, 3, dt, "where");
    vn_tensor *a = lv_operand(L, 2, dt);
    vn_tensor *b = a ? lv_operand(L, 3, dt) : NULL;
    vn_tensor *r = b ? vn_where(c, a, b) : NULL;
    vn_tensor_release(a);
    vn_tensor_release(b);
    return lv_push(L, r);
}

/* ---- reductions ------------------------------------------------------------ */

typedef vn_tensor *(*lv_allfn)(const vn_tensor *);
typedef vn_tensor *(*lv_dimfn)(const vn_tensor *, int, bool);

/* t:f([dim], [keepdim]): over dim, or over everything when dim is nil. */
static int lv_reduce(lua_State *L, lv_allfn all, lv_dimfn along)
{
    vn_tensor *t = lv_check(L, 1);
    int nd = vn_tensor_ndim(t);
    bool keep = lua_toboolean(L, 3);
    if (!lua_isnoneornil(L, 2)) return lv_push(L, along(t, lv_dim(L, 2, nd), keep));
    vn_tensor *r = all(t);
    if (r && keep && nd > 0) { /* keepdim over everything: every dim of size 1 */
        int64_t ones[VN_MAX_DIMS] = {1, 1, 1, 1, 1, 1, 1, 1};
        vn_tensor *k = vn_reshape(r, nd, ones);
        vn_tensor_release(r);
        r = k;
    }
    return lv_push(L, r);
}

static int l_sum(lua_State *L) { return lv_reduce(L, vn_sum_all, vn_sum); }
static int l_mean(lua_State *L) { return lv_reduce(L, vn_mean_all, vn_mean); }
static int l_max(lua_State *L) { return lv_reduce(L, vn_max_all, vn_max); }
static int l_min(lua_State *L) { return lv_reduce(L, vn_min_all, vn_min); }

/* t:argmax([dim], [keepdim]): 1-based i64 positions (over the flattened
 * tensor when dim is nil). */
static int lv_arg(lua_State *L, lv_dimfn f, const char *op)
{
    vn_tensor *t = lv_check(L, 1);
    if (!lua_isnoneornil(L, 2)) {
        int d = lv_dim(L, 2, vn_tensor_ndim(t));
        return lv_push(L, lv_shifted(f(t, d, lua_toboolean(L, 3)), 1));
    }
    if (vn_tensor_numel(t) == 0) { /* said here: the engine would see the flattened shape */
        char s[128];
        return lv_raise(L, "%s: the tensor of shape %s has no elements; expected at least one", op,
                        vn_shape_str(vn_tensor_ndim(t), vn_tensor_shape(t), s, sizeof s));
    }
    int64_t all = -1;
    vn_tensor *flat = vn_reshape(t, 1, &all);
    vn_tensor *r = flat ? f(flat, 0, false) : NULL;
    vn_tensor_release(flat);
    return lv_push(L, lv_shifted(r, 1));
}

static int l_argmax(lua_State *L) { return lv_arg(L, vn_argmax, "argmax"); }
static int l_argmin(lua_State *L) { return lv_arg(L, vn_argmin, "argmin"); }

/* ---- linear algebra, softmax, losses ---------------------------------------- */

static int l_matmul(lua_State *L)
{
    vn_tensor *a = lv_check(L, 1), *b = lv_check(L, 2);
    return lv_push(L, vn_matmul(a, b));
}

/* linear(x, w, [b]): x·wᵀ + b */
static int l_linear(lua_State *L)
{
    vn_tensor *x = lv_check(L, 1), *w = lv_check(L, 2), *b = lv_optcheck(L, 3);
    return lv_push(L, vn_linear(x, w, b));
}

/* softmax(x, [dim = -1]) */
static int l_softmax(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    int nd = vn_tensor_ndim(t);
    return lv_push(L, vn_softmax(t, lv_optdim(L, 2, nd, nd - 1)));
}

static int l_log_softmax(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    int nd = vn_tensor_ndim(t);
    return lv_push(L, vn_log_softmax(t, lv_optdim(L, 2, nd, nd - 1)));
}

static vn_reduction lv_reduction(lua_State *L, int i)
{
    static const char *const names[] = {"mean", "sum", "none", NULL};
    static const vn_reduction values[] = {VN_REDUCE_MEAN, VN_REDUCE_SUM, VN_REDUCE_NONE};
    if (lua_isnoneornil(L, i)) return VN_REDUCE_MEAN;
    if (lua_type(L, i) != LUA_TSTRING)
        lv_argfail(L, i, "expected a reduction ('mean', 'sum' or 'none'), found %s", luaL_typename(L, i));
    const char *s = lua_tostring(L, i);
    for (int k = 0; names[k]; k++)
        if (strcmp(s, names[k]) == 0) return values[k];
    return (vn_reduction)lv_argfail(L, i, "unknown reduction '%s' (expected 'mean', 'sum' or 'none')", s);
}

typedef vn_tensor *(*lv_lossfn)(const vn_tensor *, const vn_tensor *, vn_reduction);

/* f(scores (N, C), target (N) of classes 1..C, [reduction]) */
static int lv_class_loss(lua_State *L, lv_lossfn f, const char *op)
{
    vn_tensor *x = lv_check(L, 1);
    vn_reduction red = lv_reduction(L, 3);
    int nd = vn_tensor_ndim(x);
    if (nd != 2) {
        char s[128];
        return lv_raise(L, "%s: expected scores of shape (N, C), found %s", op,
                        vn_shape_str(nd, vn_tensor_shape(x), s, sizeof s));
    }
    vn_tensor *target = lv_indices0(L, 2, vn_tensor_shape(x)[1], op, "target");
    vn_tensor *r = f(x, target, red);
    vn_tensor_release(target);
    return lv_push(L, r);
}

static int l_cross_entropy(lua_State *L) { return lv_class_loss(L, vn_cross_entropy, "cross_entropy"); }
static int l_nll_loss(lua_State *L) { return lv_class_loss(L, vn_nll_loss, "nll_loss"); }

static int l_mse_loss(lua_State *L)
{
    vn_tensor *a = lv_check(L, 1), *b = lv_check(L, 2);
    return lv_push(L, vn_mse_loss(a, b, lv_reduction(L, 3)));
}

/* dropout(x, p, [training = true]) */
static int l_dropout(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    double p = luaL_checknumber(L, 2);
    bool training = lua_isnoneornil(L, 3) ? true : lua_toboolean(L, 3);
    return lv_push(L, vn_dropout(t, p, training));
}

/* sgd_step(param, grad, momentum_buf | nil, lr, momentum, dampening,
 *          weight_decay, nesterov, first_step) — see vn_sgd_step. */
static int l_sgd_step(lua_State *L)
{
    vn_tensor *p = lv_check(L, 1), *g = lv_check(L, 2), *buf = lv_optcheck(L, 3);
    lv_status(L, vn_sgd_step(p, g, buf, luaL_checknumber(L, 4), luaL_optnumber(L, 5, 0),
                             luaL_optnumber(L, 6, 0), luaL_optnumber(L, 7, 0), lua_toboolean(L, 8),
                             lua_toboolean(L, 9)));
    return 0;
}

/* adam_step(param, grad, exp_avg, exp_avg_sq, step, lr, beta1, beta2, eps,
 *           weight_decay, decoupled) — see vn_adam_step. */
static int l_adam_step(lua_State *L)
{
    vn_tensor *p = lv_check(L, 1), *g = lv_check(L, 2), *m = lv_check(L, 3), *v = lv_check(L, 4);
    int64_t step = lv_int(L, 5, "step");
    lv_status(L, vn_adam_step(p, g, m, v, step, luaL_checknumber(L, 6), luaL_checknumber(L, 7),
                              luaL_checknumber(L, 8), luaL_checknumber(L, 9),
                              luaL_optnumber(L, 10, 0), lua_toboolean(L, 11)));
    return 0;
}

/* The n tensors of the list at stack index i into out (n entries). */
static void lv_tensor_list(lua_State *L, int i, int n, vn_tensor **out, const char *what)
{
    luaL_checktype(L, i, LUA_TTABLE);
    if ((int)lua_objlen(L, i) != n)
        lv_argfail(L, i, "expected %d %s (one per parameter), found %d", n, what,
                   (int)lua_objlen(L, i));
    for (int k = 0; k < n; k++) {
        lua_rawgeti(L, i, k + 1);
        out[k] = lv_totensor(L, -1);
        if (!out[k]) lv_argfail(L, i, "%s[%d] is a %s, expected a tensor", what, k + 1,
                                luaL_typename(L, -1));
        lua_pop(L, 1);
    }
}

/* adam_step_multi(params, grads, exp_avgs, exp_avg_sqs, step, lr, beta1,
 * beta2, eps, [weight_decay], [decoupled]): lists of tensors. */
static int l_adam_step_multi(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    int n = (int)lua_objlen(L, 1);
    vn_tensor **t = lua_newuserdata(L, sizeof *t * (size_t)(4 * n + 1));
    lv_tensor_list(L, 1, n, t, "params");
    lv_tensor_list(L, 2, n, t + n, "grads");
    lv_tensor_list(L, 3, n, t + 2 * n, "exp_avgs");
    lv_tensor_list(L, 4, n, t + 3 * n, "exp_avg_sqs");
    int64_t step = lv_int(L, 5, "step");
    lv_status(L, vn_adam_step_multi(n, t, (const vn_tensor *const *)(t + n), t + 2 * n, t + 3 * n,
                                    step, luaL_checknumber(L, 6), luaL_checknumber(L, 7),
                                    luaL_checknumber(L, 8), luaL_checknumber(L, 9),
                                    luaL_optnumber(L, 10, 0), lua_toboolean(L, 11)));
    return 0;
}

static int l_idx_load(lua_State *L)
{
    return lv_push(L, vn_idx_load(luaL_checkstring(L, 1)));
}

/* ---- autograd ---------------------------------------------------------------- */

/* t:backward([grad]) */
static int l_backward(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1), *g = lv_optcheck(L, 2);
    lv_status(L, vn_backward(t, g));
    return 0;
}

static int l_requires_grad(lua_State *L)
{
    lua_pushboolean(L, vn_tensor_requires_grad(lv_check(L, 1)));
    return 1;
}

/* t:requires_grad_([on = true]) → t */
static int l_requires_grad_(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    bool on = lua_isnoneornil(L, 2) ? true : lua_toboolean(L, 2);
    lv_status(L, vn_tensor_set_requires_grad(t, on));
    lua_settop(L, 1);
    return 1;
}

static int l_zero_grad(lua_State *L)
{
    vn_tensor_zero_grad(lv_check(L, 1));
    return 0;
}

static int l_is_leaf(lua_State *L)
{
    lua_pushboolean(L, vn_tensor_is_leaf(lv_check(L, 1)));
    return 1;
}

static int l_grad_fn(lua_State *L)
{
    const char *name = vn_tensor_grad_fn_name(lv_check(L, 1));
    if (name) lua_pushstring(L, name);
    else lua_pushnil(L);
    return 1;
}

/* t.grad: the accumulated gradient or nil. */
static int lv_push_grad(lua_State *L, vn_tensor *t)
{
    vn_tensor *g = vn_tensor_grad(t);
    if (!g) {
        lua_pushnil(L);
        return 1;
    }
    return lv_push(L, vn_tensor_retain(g));
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
    double v = luaL_checknumber(L, 2);
    lv_check_representable(L, "fill_", v, vn_tensor_dtype(t), NULL);
    lv_status(L, vn_tensor_fill_(t, v));
    lua_settop(L, 1);
    return 1;
}

static int l_set_grad_enabled(lua_State *L)
{
    lua_pushboolean(L, vn_set_grad_enabled(lua_toboolean(L, 1)));
    return 1;
}

static int l_is_grad_enabled(lua_State *L)
{
    lua_pushboolean(L, vn_is_grad_enabled());
    return 1;
}

/* no_grad(fn, ...): fn(...) with grad mode off, restored even if fn fails. */
static int l_no_grad(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TFUNCTION);
    bool prev = vn_set_grad_enabled(false);
    int rc = lua_pcall(L, lua_gettop(L) - 1, LUA_MULTRET, 0);
    vn_set_grad_enabled(prev);
    if (rc != 0) return lua_error(L);
    return lua_gettop(L);
}

/* ---- misc -------------------------------------------------------------------- */

static int l_memory_stats(lua_State *L)
{
    size_t in_use, cached;
    vn_memory_stats(&in_use, &cached);
    lua_pushnumber(L, (lua_Number)in_use);
    lua_pushnumber(L, (lua_Number)cached);
    return 2;
}

static int l_empty_cache(lua_State *L)
{
    (void)L;
    vn_empty_cache();
    return 0;
}

/* clock(): monotonic seconds. */
static int l_clock(lua_State *L)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)ts.tv_nsec * 1e-9);
    return 1;
}

/* isatty([fd = 1 | file]) */
static int l_isatty(lua_State *L)
{
    int fd = 1;
    FILE **f = luaL_testudata(L, 1, LUA_FILEHANDLE);
    if (f) fd = *f ? fileno(*f) : -1;
    else if (!lua_isnoneornil(L, 1)) fd = (int)lv_int(L, 1, "fd");
    lua_pushboolean(L, fd >= 0 && isatty(fd));
    return 1;
}

static int l_is_tensor(lua_State *L)
{
    lua_pushboolean(L, lv_totensor(L, 1) != NULL);
    return 1;
}

/* ---- metamethods ------------------------------------------------------------- */

/* t.name: a method, t.grad, or t[i] = t:select(1, i) (a number for 1-D). */
static int l_index(lua_State *L)
{
    if (lua_type(L, 2) == LUA_TSTRING) {
        lua_pushvalue(L, 2);
        lua_rawget(L, lua_upvalueindex(1));
        if (!lua_isnil(L, -1)) return 1;
        if (strcmp(lua_tostring(L, 2), "grad") == 0) return lv_push_grad(L, lv_check(L, 1));
        return 1; /* nil */
    }
    if (lua_type(L, 2) == LUA_TNUMBER) {
        vn_tensor *t = lv_check(L, 1);
        if (vn_tensor_ndim(t) == 0) return luaL_error(L, "cannot index a 0-d tensor (use t:item())");
        int64_t i = lv_pos(L, 2, 0, vn_tensor_shape(t)[0]);
        if (vn_tensor_ndim(t) == 1) {
            double v;
            lv_status(L, vn_tensor_get(t, &i, &v));
            lua_pushnumber(L, v);
            return 1;
        }
        return lv_push(L, vn_select(t, 0, i));
    }
    return luaL_error(L, "cannot index a tensor with a %s", luaL_typename(L, 2));
}

/* t.grad = g | nil, and t[i] = number | tensor (fills that slice). */
static int l_newindex(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    if (lua_type(L, 2) == LUA_TSTRING && strcmp(lua_tostring(L, 2), "grad") == 0) {
        lv_status(L, vn_tensor_set_grad(t, lv_optcheck(L, 3)));
        return 0;
    }
    if (lua_type(L, 2) != LUA_TNUMBER)
        return lv_raise(L, "cannot set field '%s' of a tensor (only t.grad and t[i] can be set)",
                        lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : luaL_typename(L, 2));
    if (vn_tensor_ndim(t) == 0) return luaL_error(L, "cannot index a 0-d tensor (use t:fill_(v))");
    int64_t i = lv_pos(L, 2, 0, vn_tensor_shape(t)[0]);
    bool number = lua_type(L, 3) == LUA_TNUMBER;
    if (!number && !lv_totensor(L, 3))
        return lv_raise(L, "t[i] = v: v must be a number or a tensor, found %s", luaL_typename(L, 3));
    if (number) lv_check_representable(L, "t[i] = v", lua_tonumber(L, 3), vn_tensor_dtype(t), NULL);
    if (number && vn_tensor_ndim(t) == 1) {
        lv_status(L, vn_tensor_set(t, &i, lua_tonumber(L, 3)));
        return 0;
    }
    vn_tensor *src = number ? NULL : lv_check(L, 3);
    vn_tensor *row = vn_select(t, 0, i);
    if (!row) return lv_fail(L);
    vn_status s = src ? vn_tensor_copy_(row, src) : vn_tensor_fill_(row, lua_tonumber(L, 3));
    vn_tensor_release(row);
    lv_status(L, s);
    return 0;
}

/* a < b, a <= b (and so a > b, a >= b): Lua 5.1 turns the result of these
 * metamethods into one boolean, so an elementwise answer cannot come back. */
static int l_compare_meta(lua_State *L)
{
    return luaL_error(L, "cannot compare tensors with <, <=, > or >= (Lua wants one boolean); "
                         "use a:lt(b), a:le(b), a:gt(b) or a:ge(b) for an elementwise u8 mask");
}

/* ---- registration -------------------------------------------------------------- */

/* Tensor methods; each is also a module function (venom.exp(x) = x:exp()). */
static const luaL_Reg lv_methods[] = {
    {"shape", l_shape},
    {"size", l_size},
    {"dim", l_dim},
    {"numel", l_numel},
    {"dtype", l_dtype},
    {"item", l_item},
    {"totable", l_totable},
    {"get", l_get},
    {"set", l_set},
    {"free", l_free},
    {"is_freed", l_is_freed},
    {"clone", l_clone},
    {"contiguous", l_contiguous},
    {"is_contiguous", l_is_contiguous},
    {"reshape", l_reshape},
    {"view", l_view},
    {"transpose", l_transpose},
    {"t", l_t},
    {"permute", l_permute},
    {"narrow", l_narrow},
    {"select", l_select},
    {"unsqueeze", l_unsqueeze},
    {"squeeze", l_squeeze},
    {"expand", l_expand},
    {"to", l_to},
    {"cuda", l_cuda},
    {"cpu", l_cpu},
    {"device", l_device},
    {"is_cuda", l_is_cuda},
    {"float", l_float},
    {"long", l_long},
    {"int", l_int},
    {"byte", l_byte},
    {"add", l_add},
    {"sub", l_sub},
    {"mul", l_mul},
    {"div", l_div},
    {"pow", l_pow},
    {"add_", l_add_},
    {"sub_", l_sub_},
    {"mul_", l_mul_},
    {"div_", l_div_},
    {"eq", l_eq},
    {"ne", l_ne},
    {"lt", l_lt},
    {"le", l_le},
    {"gt", l_gt},
    {"ge", l_ge},
    {"neg", l_neg},
    {"abs", l_abs},
    {"exp", l_exp},
    {"log", l_log},
    {"sqrt", l_sqrt},
    {"relu", l_relu},
    {"gelu", l_gelu},
    {"tanh", l_tanh},
    {"sigmoid", l_sigmoid},
    {"clamp", l_clamp},
    {"masked_fill", l_masked_fill},
    {"sum", l_sum},
    {"mean", l_mean},
    {"max", l_max},
    {"min", l_min},
    {"argmax", l_argmax},
    {"argmin", l_argmin},
    {"matmul", l_matmul},
    {"softmax", l_softmax},
    {"log_softmax", l_log_softmax},
    {"index_select", l_index_select},
    {"backward", l_backward},
    {"requires_grad", l_requires_grad},
    {"requires_grad_", l_requires_grad_},
    {"zero_grad", l_zero_grad},
    {"detach", l_detach},
    {"is_leaf", l_is_leaf},
    {"grad_fn", l_grad_fn},
    {"copy_", l_copy_},
    {"fill_", l_fill_},
    {NULL, NULL},
};

static const luaL_Reg lv_functions[] = {
    {"tensor", l_tensor},
    {"zeros", l_zeros},
    {"ones", l_ones},
    {"empty", l_empty},
    {"rand", l_rand},
    {"randn", l_randn},
    {"full", l_full},
    {"arange", l_arange},
    {"randperm", l_randperm},
    {"manual_seed", l_manual_seed},
    {"set_grad_enabled", l_set_grad_enabled},
    {"is_grad_enabled", l_is_grad_enabled},
    {"no_grad", l_no_grad},
    {"cat", l_cat},
    {"where", l_where},
    {"memory_stats", l_memory_stats},
    {"empty_cache", l_empty_cache},
    {"clock", l_clock},
    {"isatty", l_isatty},
    {"is_tensor", l_is_tensor},
    {"linear", l_linear},
    {"cross_entropy", l_cross_entropy},
    {"nll_loss", l_nll_loss},
    {"mse_loss", l_mse_loss},
    {"dropout", l_dropout},
    {"sgd_step", l_sgd_step},
    {"adam_step", l_adam_step},
    {"adam_step_multi", l_adam_step_multi},
    {"idx_load", l_idx_load},
    {NULL, NULL},
};

static const luaL_Reg lv_meta[] = {
    {"__add", l_add},
    {"__sub", l_sub},
    {"__mul", l_mul},
    {"__div", l_div},
    {"__pow", l_pow},
    {"__unm", l_unm},
    {"__len", l_len},
    {"__newindex", l_newindex},
    {"__tostring", l_tostring},
    {"__concat", l_concat},
    {"__lt", l_compare_meta},
    {"__le", l_compare_meta},
    {"__gc", l_gc},
    {NULL, NULL},
};

int luaopen_venom_core(lua_State *L)
{
    lua_newtable(L); /* methods */
    luaL_setfuncs(L, lv_methods, 0);
    int methods = lua_gettop(L);

    luaL_newmetatable(L, LV_MT);
    luaL_setfuncs(L, lv_meta, 0);
    lua_pushvalue(L, methods);
    lua_pushcclosure(L, l_index, 1);
    lua_setfield(L, -2, "__index");
    lua_pushvalue(L, methods);
    lua_setfield(L, -2, "__methods"); /* for the REPL's completion */
    lua_pop(L, 1);

    lua_newtable(L); /* the module */
    luaL_setfuncs(L, lv_functions, 0);
    luaL_setfuncs(L, lv_sparse_functions, 0);
    luaL_setfuncs(L, lv_transformer_functions, 0);
    luaL_setfuncs(L, lv_checkpoint_functions, 0);
    luaL_setfuncs(L, lv_device_functions, 0);
    for (const luaL_Reg *r = lv_methods; r->name; r++) {
        lua_getfield(L, -1, r->name);
        bool taken = !lua_isnil(L, -1);
        lua_pop(L, 1);
        if (taken) continue;
        lua_pushcfunction(L, r->func);
        lua_setfield(L, -2, r->name);
    }
    lua_pushvalue(L, methods);
    lua_setfield(L, -2, "Tensor");
    lua_pushliteral(L, VENOM_VERSION);
    lua_setfield(L, -2, "version");
    lua_remove(L, methods);
    return 1;
}
