/* lv_tensor.c — the venom.core Lua module: tensors as userdata over the vn_*
 * API of venom.h (nothing of the engine's internals). This file holds the
 * tensor userdata (boxing, creation, properties, elements, metamethods) and
 * luaopen_venom_core, which gathers the tables of its siblings: lv_view.c
 * (views and copies), lv_ops.c (arithmetic, pointwise, reductions), lv_nn.c,
 * lv_optim.c, lv_autograd.c, lv_device.c, lv_graph.c, lv_convert.c (tables and
 * printing), lv_sparse.c, lv_transformer.c, lv_checkpoint.c, lv_system.c;
 * lv_args.c reads their arguments.
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

#include <math.h>
#include <string.h>

/* The creation families, each name written once: a name in a list gets its
 * wrapper l_<name> and its registration entry. */
#define LV_FILLED(X) X(zeros, 0) X(ones, 1) X(empty, NAN) /* NaN: uninitialized */
#define LV_FILLED_LIKE(X) X(zeros_like, 0) X(ones_like, 1)
#define LV_RANDOM(X) X(rand) X(randn)

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

/* Engine bytes in use after our last full collection, or the lowest count
 * seen since (see lv_gc_nudge); and how many full collections in a row
 * freed little. Per thread: states may run on several. */
static _Thread_local size_t lv_gc_base;
static _Thread_local int lv_gc_idle;

/* Lua's collector sees a few bytes per tensor userdata while the storage may
 * be megabytes, so left alone it lets garbage tensors pile up. Run a full
 * collection whenever engine memory grew by more than an eighth of what it
 * was at the low point since the last one (at least 32 MB, at most 256 MB):
 * a training loop then keeps a flat resident size, and its garbage buffers
 * come back through the allocator's cache while still warm. (With a slack of
 * 256 MB instead, a 784-1024-1024-10 MLP training loop held twice the
 * memory; a full collection of a script's small Lua heap is cheap.)
 * A collection that freed less than a quarter of that growth found the
 * memory live (a forward pass's activations, which its graph holds): each
 * such one in a row doubles the growth the next waits for, up to 256 MB,
 * until one frees more or memory falls to a new low point (the end of a
 * training step), which start again from the eighth. (A step of tutorial 3's
 * GPT grows by ~70 MB of live activations: two fruitless full collections
 * of ~0.5 ms each in every step with a fixed slack, one now.) */
static void lv_gc_nudge(lua_State *L)
{
    const size_t lo = (size_t)32 << 20, hi = (size_t)256 << 20;
    size_t in_use, cached;
    vn_memory_stats(&in_use, &cached);
    if (in_use < lv_gc_base) lv_gc_base = in_use, lv_gc_idle = 0;
    size_t slack = lv_gc_base / 8 < lo ? lo : lv_gc_base / 8 > hi ? hi : lv_gc_base / 8;
    for (int i = 0; i < lv_gc_idle && slack < hi; i++) slack = 2 * slack < hi ? 2 * slack : hi;
    if (in_use > lv_gc_base + slack) {
        lua_gc(L, LUA_GCCOLLECT, 0);
        size_t after;
        vn_memory_stats(&after, &cached);
        lv_gc_idle = in_use - after < slack / 4 ? lv_gc_idle + (slack < hi) : 0;
        lv_gc_base = after;
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

/* Push a and b (taking their references) as two results; either NULL
 * releases the other and raises the engine's last error. */
int lv_push2(lua_State *L, vn_tensor *a, vn_tensor *b)
{
    if (!a || !b) {
        vn_tensor_release(a);
        vn_tensor_release(b);
        return lv_fail(L);
    }
    lv_push(L, a);
    lv_push(L, b);
    return 2;
}

/* r, a reduction over every element of an ndim-d tensor, with keepdim:
 * every dim of size 1 (r itself otherwise). Consumes r; NULL passes. */
vn_tensor *lv_keepdim_all(vn_tensor *r, int ndim, bool keepdim)
{
    if (!r || !keepdim || ndim == 0) return r;
    int64_t ones[VN_MAX_DIMS] = {1, 1, 1, 1, 1, 1, 1, 1};
    vn_tensor *k = vn_reshape(r, ndim, ones);
    vn_tensor_release(r);
    return k;
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

#define LV_FILLED_WRAPPER(name, value)                                          \
    static int l_##name(lua_State *L) { return lv_create(L, value); }
LV_FILLED(LV_FILLED_WRAPPER)

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

#define LV_RANDOM_WRAPPER(name)                                                 \
    static int l_##name(lua_State *L) { return lv_random(L, vn_##name##_on); }
LV_RANDOM(LV_RANDOM_WRAPPER)

/* full(shape, value, [opts]) */
static int l_full(lua_State *L)
{
    int top = lua_gettop(L);
    lv_opts o = lv_take_opts(L, &top);
    if (top != 2) return lv_raise(L, "full: expected (shape, value, [opts]), found %d arguments", top);
    int64_t shape[VN_MAX_DIMS];
    int nd = lv_shape(L, 1, 1, shape, false);
    double v = lv_number(L, 2, "value");
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
        stop = lv_number(L, 1, "stop");
    } else {
        start = lv_number(L, 1, "start");
        stop = lv_number(L, 2, "stop");
        step = top >= 3 ? lv_number(L, 3, "step") : 1; /* not past the options */
    }
    return lv_push_new(L, vn_arange(start, stop, step, o.dtype), &o);
}

/* linspace(start, stop, steps, [opts]): steps points from start to stop,
 * both included. */
static int l_linspace(lua_State *L)
{
    int top = lua_gettop(L);
    lv_opts o = lv_take_opts(L, &top);
    if (top != 3)
        return lv_raise(L, "linspace: expected (start, stop, steps, [opts]), found %d arguments", top);
    double start = lv_number(L, 1, "start"), stop = lv_number(L, 2, "stop");
    int64_t steps = lv_int(L, 3, "steps");
    return lv_push_new(L, vn_linspace(start, stop, steps, o.dtype), &o);
}

/* eye(n, [m], [opts]): the n × m identity (m = n when absent). */
static int l_eye(lua_State *L)
{
    int top = lua_gettop(L);
    lv_opts o = lv_take_opts_at(L, &top, 2, VN_F32);
    if (top < 1 || top > 2)
        return lv_raise(L, "eye: expected (n, [m], [opts]), found %d arguments", top);
    int64_t n = lv_int(L, 1, "n"), m = top == 2 ? lv_int(L, 2, "m") : n;
    return lv_push_new(L, vn_eye(n, m, o.dtype), &o);
}

/* randint(low, high, dims... | shape_table, [opts]): integers in
 * [low, high), i64 unless the options say otherwise. */
static int l_randint(lua_State *L)
{
    int top = lua_gettop(L);
    lv_opts o = lv_take_opts_at(L, &top, 3, VN_I64);
    if (top < 2) return lv_raise(L, "randint: expected (low, high, shape..., [opts]), found %d arguments", top);
    int64_t low = lv_int(L, 1, "low"), high = lv_int(L, 2, "high");
    int64_t shape[VN_MAX_DIMS];
    int nd = lv_shape(L, 3, top, shape, false);
    return lv_push_new(L, vn_randint(low, high, o.dtype, nd, shape), &o);
}

/* f(x, [value,] [opts]): a tensor of x's shape filled with value, with x's
 * dtype and device unless the options (at opts_at) say otherwise. */
static int lv_create_like(lua_State *L, const char *op, int opts_at, double value)
{
    vn_tensor *x = lv_check(L, 1);
    lv_opts o = {vn_tensor_dtype(x), false, vn_tensor_device(x)};
    if (lua_gettop(L) > opts_at)
        lv_argfail(L, opts_at + 1, "expected at most %d arguments, found %d", opts_at, lua_gettop(L));
    if (lua_type(L, opts_at) == LUA_TSTRING) {
        o.dtype = lv_dtype(L, opts_at);
    } else if (!lua_isnoneornil(L, opts_at)) {
        lv_checktype(L, opts_at, LUA_TTABLE, "options");
        lv_parse_opts(L, opts_at, &o);
    }
    lv_check_representable(L, op, value, o.dtype, NULL);
    return lv_push_new(L, vn_full_like(x, value, o.dtype, o.device), &o);
}

#define LV_FILLED_LIKE_WRAPPER(name, value)                                     \
    static int l_##name(lua_State *L) { return lv_create_like(L, #name, 2, value); }
LV_FILLED_LIKE(LV_FILLED_LIKE_WRAPPER)

/* full_like(x, value, [opts]) */
static int l_full_like(lua_State *L)
{
    lv_check(L, 1);
    return lv_create_like(L, "full_like", 3, lv_number(L, 2, "value"));
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
    double v = lv_number(L, top, "value");
    lv_check_representable(L, "set", v, vn_tensor_dtype(t), NULL);
    int64_t idx[VN_MAX_DIMS];
    lv_index_args(L, t, 2, top - 2, idx, "set");
    lv_status(L, vn_tensor_set(t, idx, v));
    lua_settop(L, 1);
    return 1;
}

/* The tensor box at i, freed or not. */
static lv_box *lv_checkbox(lua_State *L, int i)
{
    lv_box *b = luaL_testudata(L, i, LV_MT);
    if (!b) lv_argfail(L, i, "expected a tensor, found %s", luaL_typename(L, i));
    return b;
}

static int l_free(lua_State *L)
{
    vn_tensor_free(lv_checkbox(L, 1)->t);
    return 0;
}

static int l_is_freed(lua_State *L)
{
    lua_pushboolean(L, vn_tensor_is_freed(lv_checkbox(L, 1)->t));
    return 1;
}

static int l_gc(lua_State *L)
{
    lv_box *b = lv_checkbox(L, 1);
    vn_tensor_release(b->t);
    b->t = NULL;
    return 0;
}

/* #t: the size of dim 1. */
static int l_len(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    if (vn_tensor_ndim(t) == 0) return lv_raise(L, "#: a 0-d tensor has no length (use t:item())");
    lua_pushnumber(L, (lua_Number)vn_tensor_shape(t)[0]);
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
        if (vn_tensor_ndim(t) == 0) return lv_raise(L, "cannot index a 0-d tensor (use t:item())");
        int64_t i = lv_pos(L, 2, 0, vn_tensor_shape(t)[0]);
        if (vn_tensor_ndim(t) == 1) {
            double v;
            lv_status(L, vn_tensor_get(t, &i, &v));
            lua_pushnumber(L, v);
            return 1;
        }
        return lv_push(L, vn_select(t, 0, i));
    }
    return lv_raise(L, "cannot index a tensor with a %s", luaL_typename(L, 2));
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
    if (vn_tensor_ndim(t) == 0) return lv_raise(L, "cannot index a 0-d tensor (use t:fill_(v))");
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

/* ---- registration -------------------------------------------------------------- */

#define LV_REG_FILLED(name, value) LV_REG(name)

static const luaL_Reg lv_tensor_methods[] = {
    LV_REG(shape) LV_REG(size) LV_REG(dim) LV_REG(numel) LV_REG(dtype) LV_REG(is_contiguous)
    LV_REG(item) LV_REG(totable) LV_REG(get) LV_REG(set) LV_REG(free) LV_REG(is_freed)
    {NULL, NULL},
};

static const luaL_Reg lv_tensor_functions[] = {
    LV_REG(tensor) LV_FILLED(LV_REG_FILLED) LV_RANDOM(LV_REG) LV_REG(full) LV_REG(arange)
    LV_REG(linspace) LV_REG(eye) LV_REG(randint) LV_FILLED_LIKE(LV_REG_FILLED) LV_REG(full_like)
    LV_REG(randperm) LV_REG(manual_seed) LV_REG(is_tensor)
    {NULL, NULL},
};

static const luaL_Reg lv_tensor_meta[] = {
    LV_META(len) LV_META(newindex) LV_META(tostring) LV_META(concat) LV_META(gc)
    {NULL, NULL},
};

/* Tensor methods; each is also a module function (venom.exp(x) = x:exp())
 * unless a function of that name comes first. */
static const luaL_Reg *const lv_method_tables[] = {
    lv_tensor_methods, lv_view_methods, lv_ops_methods, lv_nn_methods,
    lv_autograd_methods, lv_device_methods, lv_conv_methods, NULL,
};

static const luaL_Reg *const lv_function_tables[] = {
    lv_tensor_functions, lv_view_functions, lv_ops_functions, lv_nn_functions,
    lv_optim_functions, lv_autograd_functions, lv_system_functions, lv_sparse_functions,
    lv_graph_functions, lv_transformer_functions, lv_checkpoint_functions, lv_device_functions, lv_moe_functions,
    lv_image_functions, lv_dynamic_functions,
    lv_quant_functions, lv_conv_functions,
    lv_dist_functions, NULL,
};

/* __index is not here: it is a closure over the methods (luaopen_venom_core). */
static const luaL_Reg *const lv_meta_tables[] = {lv_tensor_meta, lv_ops_meta, NULL};

int luaopen_venom_core(lua_State *L)
{
    lua_newtable(L); /* methods */
    for (const luaL_Reg *const *m = lv_method_tables; *m; m++) lv_setfuncs(L, *m);
    int methods = lua_gettop(L);

    luaL_newmetatable(L, LV_MT);
    for (const luaL_Reg *const *m = lv_meta_tables; *m; m++) lv_setfuncs(L, *m);
    lua_pushvalue(L, methods);
    lua_pushcclosure(L, l_index, 1);
    lua_setfield(L, -2, "__index");
    lua_pushvalue(L, methods);
    lua_setfield(L, -2, "__methods"); /* for the REPL's completion */
    lua_pop(L, 1);

    lua_newtable(L); /* the module */
    for (const luaL_Reg *const *f = lv_function_tables; *f; f++) lv_setfuncs(L, *f);
    for (const luaL_Reg *const *m = lv_method_tables; *m; m++) {
        for (const luaL_Reg *r = *m; r->name; r++) {
            lua_getfield(L, -1, r->name);
            bool taken = !lua_isnil(L, -1);
            lua_pop(L, 1);
            if (taken) continue;
            lv_pushfunc(L, r);
            lua_setfield(L, -2, r->name);
        }
    }
    lua_pushvalue(L, methods);
    lua_setfield(L, -2, "Tensor");
    lua_pushliteral(L, VENOM_VERSION);
    lua_setfield(L, -2, "version");
    lv_graph_open(L);
    lua_remove(L, methods);
    return 1;
}
