/* lv_args.c — reading the arguments of the venom.core functions: errors,
 * integers, dims, positions, shapes, dtypes, option tables, and index
 * tensors, which Lua counts from 1 and the engine from 0.
 *
 * Every helper that finds a bad argument raises a Lua error naming what was
 * expected and what was found; none returns a bad value. */
#include "lv.h"

#include <math.h>

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* ---- errors ---------------------------------------------------------------- */

/* Raise the engine's last error as a Lua error at the caller's line. */
/* Raises msg positioned at the user's line: the innermost Lua frame outside
 * venom's own Lua modules, as venom.util.where() finds it (so an error in an
 * op that nn.Linear:forward called points at the script that called the
 * model, not at nn.lua). Before venom.util is loaded, or if it fails, the
 * caller's position, as luaL_error gives. */
static int raise_at_user(lua_State *L, const char *msg)
{
    bool have = false;
    lua_getfield(L, LUA_REGISTRYINDEX, "_LOADED");
    lua_getfield(L, -1, "venom.util");
    if (lua_istable(L, -1)) {
        lua_getfield(L, -1, "where");
        /* a non-function, or a failed call's message, is one value to drop */
        have = lua_isfunction(L, -1) && lua_pcall(L, 0, 1, 0) == 0 && lua_isstring(L, -1);
        if (!have) lua_pop(L, 1);
    }
    if (!have) luaL_where(L, 1);
    lua_pushstring(L, msg);
    lua_concat(L, 2);
    return lua_error(L);
}

int lv_fail(lua_State *L) { return raise_at_user(L, vn_last_error()); }

/* Raise a printf-formatted error (lua_pushfstring has no %lld). */
int lv_raise(lua_State *L, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return raise_at_user(L, msg);
}

/* "bad argument #i to 'f' (message)", printf-formatted, in Lua's own words.
 * f is the running function's registered name (lv_setfuncs gives it as
 * upvalue 1), so the message names it where Lua cannot (a pcall, a tail
 * call, a call through a local of another name), and i counts from self
 * only when Lua called it as that method (x:narrow), as Lua counts.
 * Functions without a registered name get luaL_argerror's message. */
int lv_argfail(lua_State *L, int i, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (lua_type(L, lua_upvalueindex(1)) != LUA_TSTRING) return luaL_argerror(L, i, msg);
    const char *name = lua_tostring(L, lua_upvalueindex(1));
    lua_Debug ar;
    bool method = lua_getstack(L, 0, &ar) && lua_getinfo(L, "n", &ar) && ar.namewhat &&
                  strcmp(ar.namewhat, "method") == 0 && ar.name && strcmp(ar.name, name) == 0;
    if (method && i == 1) return lv_raise(L, "calling '%s' on bad self (%s)", name, msg);
    return lv_raise(L, "bad argument #%d to '%s' (%s)", method ? i - 1 : i, name, msg);
}

/* Set the functions of `reg` into the table on top of the stack, each a
 * closure over its name for lv_argfail. */
void lv_setfuncs(lua_State *L, const luaL_Reg *reg)
{
    for (; reg->name; reg++) {
        lv_pushfunc(L, reg);
        lua_setfield(L, -2, reg->name);
    }
}

/* Push the function of one entry as a closure over its name. */
void lv_pushfunc(lua_State *L, const luaL_Reg *reg)
{
    lua_pushstring(L, reg->name);
    lua_pushcclosure(L, reg->func, 1);
}

/* Raise the engine's last error unless s is VN_OK. */
void lv_status(lua_State *L, vn_status s)
{
    if (s != VN_OK) lv_fail(L);
}

/* ---- numbers, dims, positions, shapes, dtypes, options ---------------------- */

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
    if (x != x || x != floor(x))
        lv_argfail(L, i, "%s must be an integer, found %g", what, x);
    if (!lv_whole(x)) /* whole, but past the exactly representable range */
        lv_argfail(L, i, "%s must be an integer in [-2^53, 2^53], found %g", what, x);
    return (int64_t)x;
}

/* The number at i (strings are not numbers); `what` names it. */
double lv_number(lua_State *L, int i, const char *what)
{
    if (lua_type(L, i) != LUA_TNUMBER)
        lv_argfail(L, i, "%s must be a number, found %s", what, luaL_typename(L, i));
    return lua_tonumber(L, i);
}

double lv_optnumber(lua_State *L, int i, double def, const char *what)
{
    return lua_isnoneornil(L, i) ? def : lv_number(L, i, what);
}

/* A boolean at i, or def when it is nil or absent. */
bool lv_optbool(lua_State *L, int i, bool def, const char *what)
{
    if (lua_isnoneornil(L, i)) return def;
    if (lua_type(L, i) != LUA_TBOOLEAN)
        lv_argfail(L, i, "%s must be a boolean, found %s", what, luaL_typename(L, i));
    return lua_toboolean(L, i);
}

/* The string at i (numbers are not strings). */
const char *lv_string(lua_State *L, int i, const char *what)
{
    if (lua_type(L, i) != LUA_TSTRING)
        lv_argfail(L, i, "%s must be a string, found %s", what, luaL_typename(L, i));
    return lua_tostring(L, i);
}

/* Raise unless the value at i has Lua type `type` (LUA_TTABLE, ...). */
void lv_checktype(lua_State *L, int i, int type, const char *what)
{
    if (lua_type(L, i) != type)
        lv_argfail(L, i, "%s must be a %s, found %s", what, lua_typename(L, type), luaL_typename(L, i));
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

/* The dtype named by the string at i, or -1 if the value is not a string
 * or names none (as lv_device_name_at does for devices). */
int lv_dtype_name_at(lua_State *L, int i)
{
    if (lua_type(L, i) != LUA_TSTRING) return -1;
    const char *s = lua_tostring(L, i);
    for (size_t k = 0; k < sizeof lv_dtypes / sizeof lv_dtypes[0]; k++)
        if (strcmp(s, lv_dtypes[k].name) == 0) return (int)lv_dtypes[k].dtype;
    return -1;
}

/* The dtype named by the string at stack index `at` (argument `argi`). */
static vn_dtype lv_dtype_at(lua_State *L, int at, int argi)
{
    if (lua_type(L, at) == LUA_TSTRING) {
        int d = lv_dtype_name_at(L, at);
        if (d >= 0) return (vn_dtype)d;
        lv_argfail(L, argi, "unknown dtype '%s' (expected 'f32', 'i32', 'i64', 'u8', 'bf16' or "
                   "'f16')", lua_tostring(L, at));
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
    return lv_take_opts_at(L, top, 1, VN_F32);
}

/* lv_take_opts for a function whose shape starts at argument `first` (a
 * table there alone is a shape) and whose dtype is `dtype` unless the
 * options say otherwise. */
lv_opts lv_take_opts_at(lua_State *L, int *top, int first, vn_dtype dtype)
{
    lv_opts o = {dtype, false, VN_CPU};
    int i = *top;
    if (i >= 1 && lua_type(L, i) == LUA_TSTRING) {
        o.dtype = lv_dtype(L, i);
        (*top)--;
        return o;
    }
    if (i < first || !lua_istable(L, i)) return o;
    if (i == first) {
        if (lua_objlen(L, i) > 0) return o;
        lua_pushnil(L);
        if (!lua_next(L, i)) return o; /* {}: the 0-d shape */
        bool named = lua_type(L, -2) == LUA_TSTRING;
        lua_pop(L, 2);
        if (!named) return o;
    }
    lv_parse_opts(L, i, &o);
    (*top)--;
    return o;
}

/* ---- indices: 1-based in Lua, 0-based in the engine ------------------------ */

/* t + k as a new tensor of t's dtype; consumes t (NULL passes through). */
vn_tensor *lv_shifted(vn_tensor *t, double k)
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

/* The tensor at stack index i, which must hold integers (1-based indices);
 * `op` and `what` name it in the message ("cross_entropy", "target"). */
vn_tensor *lv_check_indices(lua_State *L, int i, const char *op, const char *what)
{
    vn_tensor *idx = lv_check(L, i);
    vn_dtype dt = vn_tensor_dtype(idx);
    if (!lv_is_integer_dtype(dt))
        lv_raise(L, "%s: %s must be an integer tensor (i64, i32 or u8) of 1-based indices, found %s",
                 op, what, vn_dtype_name(dt));
    return idx;
}

/* The 1-based integer indices in `idx` (at stack index i) as a new 0-based
 * i64 tensor, each checked to lie in 1..limit. `op` and `what` name them in
 * messages ("cross_entropy", "target"). */
vn_tensor *lv_indices0(lua_State *L, int i, int64_t limit, const char *op, const char *what)
{
    vn_tensor *idx = lv_check_indices(L, i, op, what);
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

void **lv_box_check(lua_State *L, int i, const char *mt, const char *what)
{
    void **slot = luaL_testudata(L, i, mt);
    if (!slot) lv_argfail(L, i, "expected %s, found %s", what, luaL_typename(L, i));
    return slot;
}

void **lv_box_new(lua_State *L, const char *mt)
{
    void **slot = lua_newuserdata(L, sizeof *slot);
    *slot = NULL;
    luaL_getmetatable(L, mt);
    lua_setmetatable(L, -2);
    return slot;
}
