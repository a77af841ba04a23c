/* lv_ops.c — the tensor ops of the venom.core Lua module: arithmetic and
 * comparisons (a + b, a:lt(b), in place a:add_(b)), pointwise functions
 * (exp, relu, clamp, ...), where, reductions (sum, max, argmax, ...),
 * statistics (var, std, norm), ordering (sort, topk) and matmul. Each is a
 * tensor method and a module function (x:exp() = venom.exp(x)); the
 * arithmetic ones are also the metamethods + - * / ^.
 *
 * Either operand of a binary op may be a Lua number: it becomes a 0-d tensor
 * of the other operand's dtype, which the engine broadcasts. argmax/argmin,
 * max/min over a dim, sort and topk give 1-based positions. */
#include "lv.h"

#include <math.h>
#include <string.h>

/* The op families, each name written once: a name in a list gets its
 * wrapper l_<name> calling vn_<name> (a reduction also vn_<name>_all), its
 * entry among the methods (and so the module functions), and in
 * LV_ARITH_OPS also the in-place l_<name>_ and the metamethod __<name>. */
#define LV_ARITH_OPS(X) X(add) X(sub) X(mul) X(div)
#define LV_COMPARE_OPS(X) X(eq) X(ne) X(lt) X(le) X(gt) X(ge)
#define LV_UNARY_OPS(X) X(neg) X(abs) X(exp) X(log) X(sqrt) X(relu) X(gelu) X(tanh) X(sigmoid)
#define LV_REDUCE_OPS(X) X(sum) X(mean)
#define LV_EXTREMUM_OPS(X) X(max, argmax) X(min, argmin) /* and where it is, over a dim */
#define LV_ARG_OPS(X) X(argmax) X(argmin)
#define LV_STAT_OPS(X) X(var) X(std)

/* ---- operands: numbers meet tensors ------------------------------------------ */

/* Check that the value at i is a number or a usable tensor. */
static void lv_check_operand(lua_State *L, int i)
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
static vn_tensor *lv_operand(lua_State *L, int i, vn_dtype dtype)
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

/* ---- arithmetic ------------------------------------------------------------ */

typedef vn_tensor *(*lv_binfn)(const vn_tensor *, const vn_tensor *);

/* f(a, b) where either may be a number (see lv_operand). */
static int lv_binop(lua_State *L, lv_binfn f, const char *op)
{
    lv_check_operand(L, 1);
    lv_check_operand(L, 2);
    vn_tensor *like = lv_totensor(L, 1) ? lv_totensor(L, 1) : lv_totensor(L, 2);
    if (!like) return lv_raise(L, "expected a tensor among the two operands, found two numbers");
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

#define LV_BINOP_WRAPPER(name)                                                  \
    static int l_##name(lua_State *L) { return lv_binop(L, vn_##name, #name); }
LV_ARITH_OPS(LV_BINOP_WRAPPER)
LV_COMPARE_OPS(LV_BINOP_WRAPPER)

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

#define LV_INPLACE_WRAPPER(name)                                                \
    static int l_##name##_(lua_State *L) { return lv_inplace(L, vn_##name, #name "_"); }
LV_ARITH_OPS(LV_INPLACE_WRAPPER)

LV_UNARY_OPS(LV_UNARY_WRAPPER)

/* __unm gets the operand twice; neg takes the first. */
static int l_unm(lua_State *L) { return l_neg(L); }

/* t:clamp(lo, hi): nil means no bound. The bounds of an integer tensor
 * must be numbers its dtype holds, as for the other integer ops. */
static int l_clamp(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    double lo = lv_optnumber(L, 2, NAN, "lo"), hi = lv_optnumber(L, 3, NAN, "hi");
    for (int k = 0; k < 2; k++)
        if (!lua_isnoneornil(L, 2 + k))
            lv_check_representable(L, "clamp", k ? hi : lo, vn_tensor_dtype(t),
                                   "convert the tensor with :float() first");
    return lv_push(L, vn_clamp(t, lo, hi));
}

static int l_masked_fill(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1), *mask = lv_check(L, 2);
    double v = lv_number(L, 3, "value");
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

/* t:f([dim], [keepdim]): over dim, or over everything when dim is nil.
 * With `where` (argmax for max), over a dim also the 1-based i64 positions
 * of the values, as a second result (PyTorch's and Torch7's max(dim)). */
static int lv_reduce(lua_State *L, lv_allfn all, lv_dimfn along, lv_dimfn where)
{
    vn_tensor *t = lv_check(L, 1);
    int nd = vn_tensor_ndim(t);
    bool keep = lua_toboolean(L, 3);
    if (lua_isnoneornil(L, 2)) return lv_push(L, lv_keepdim_all(all(t), nd, keep));
    int d = lv_dim(L, 2, nd);
    if (!where) return lv_push(L, along(t, d, keep));
    vn_tensor *v = along(t, d, keep);
    return lv_push2(L, v, v ? lv_shifted(where(t, d, keep), 1) : NULL);
}

#define LV_REDUCE_WRAPPER(name)                                                 \
    static int l_##name(lua_State *L) { return lv_reduce(L, vn_##name##_all, vn_##name, NULL); }
LV_REDUCE_OPS(LV_REDUCE_WRAPPER)
#define LV_EXTREMUM_WRAPPER(name, where)                                        \
    static int l_##name(lua_State *L)                                           \
    {                                                                           \
        return lv_reduce(L, vn_##name##_all, vn_##name, vn_##where);            \
    }
LV_EXTREMUM_OPS(LV_EXTREMUM_WRAPPER)

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

#define LV_ARG_WRAPPER(name)                                                    \
    static int l_##name(lua_State *L) { return lv_arg(L, vn_##name, #name); }
LV_ARG_OPS(LV_ARG_WRAPPER)

/* ---- statistics and ordering ------------------------------------------------------ */

typedef vn_tensor *(*lv_stat_allfn)(const vn_tensor *, double);
typedef vn_tensor *(*lv_stat_dimfn)(const vn_tensor *, int, double, bool);

/* t:var([dim], [{correction = 1, keepdim = false}]): over dim, or over every
 * element when dim is nil (the options may then come second). */
static int lv_stat(lua_State *L, lv_stat_allfn all, lv_stat_dimfn along)
{
    vn_tensor *t = lv_check(L, 1);
    int nd = vn_tensor_ndim(t), at = lua_istable(L, 2) ? 2 : 3; /* the options */
    if (lua_gettop(L) > at) lv_argfail(L, at + 1, "expected at most %d arguments, found %d", at, lua_gettop(L));
    double correction = 1;
    bool keep = false;
    if (!lua_isnoneornil(L, at)) {
        lv_checktype(L, at, LUA_TTABLE, "options");
        lua_getfield(L, at, "correction");
        lua_getfield(L, at, "keepdim");
        if (!lua_isnil(L, -2) && lua_type(L, -2) != LUA_TNUMBER)
            lv_argfail(L, at, "option correction must be a number, found %s", luaL_typename(L, -2));
        if (!lua_isnil(L, -1) && lua_type(L, -1) != LUA_TBOOLEAN)
            lv_argfail(L, at, "option keepdim must be a boolean, found %s", luaL_typename(L, -1));
        correction = lua_isnil(L, -2) ? 1 : lua_tonumber(L, -2);
        keep = lua_toboolean(L, -1);
        lua_pop(L, 2);
        for (lua_pushnil(L); lua_next(L, at); lua_pop(L, 1)) {
            const char *key = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : "";
            if (strcmp(key, "correction") && strcmp(key, "keepdim"))
                lv_argfail(L, at, "unknown option %s (expected correction or keepdim)",
                           *key ? key : luaL_typename(L, -2));
        }
    }
    if (at == 3 && !lua_isnoneornil(L, 2))
        return lv_push(L, along(t, lv_dim(L, 2, nd ? nd : 1), correction, keep));
    return lv_push(L, lv_keepdim_all(all(t, correction), nd, keep));
}

#define LV_STAT_WRAPPER(name)                                                   \
    static int l_##name(lua_State *L) { return lv_stat(L, vn_##name##_all, vn_##name); }
LV_STAT_OPS(LV_STAT_WRAPPER)

/* t:norm([p = 2], [dim], [keepdim]): p = 1, 2 or math.huge. */
static int l_norm(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    int nd = vn_tensor_ndim(t);
    double p = lv_optnumber(L, 2, 2, "p");
    if (!(p == 1 || p == 2 || p == HUGE_VAL))
        lv_argfail(L, 2, "p must be 1, 2 or math.huge, found %g", p);
    bool keep = lv_optbool(L, 4, false, "keepdim");
    if (lua_isnoneornil(L, 3)) return lv_push(L, lv_keepdim_all(vn_norm_all(t, p), nd, keep));
    return lv_push(L, vn_norm(t, p, lv_dim(L, 3, nd ? nd : 1), keep));
}

/* The 0-based dim at i, the last one when nil (a 0-d tensor orders as one
 * element, so it has a dim 1 here). */
static int lv_order_dim(lua_State *L, int i, const vn_tensor *t)
{
    int nd = vn_tensor_ndim(t) ? vn_tensor_ndim(t) : 1;
    return lv_optdim(L, i, nd, nd - 1);
}

/* t:sort([dim = -1], [descending = false]) → values, 1-based i64 indices. */
static int l_sort(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1), *v, *ix;
    int d = lv_order_dim(L, 2, t);
    vn_sort(t, d, lv_optbool(L, 3, false, "descending"), &v, &ix);
    return lv_push2(L, v, lv_shifted(ix, 1));
}

/* t:topk(k, [dim = -1], [largest = true]) → values, 1-based i64 indices. */
static int l_topk(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1), *v, *ix;
    int64_t k = lv_int(L, 2, "k");
    int d = lv_order_dim(L, 3, t);
    int64_t n = vn_tensor_ndim(t) ? vn_tensor_shape(t)[d] : 1;
    if (k < 0 || k > n)
        lv_argfail(L, 2, "k must be in 0..%lld (the size of dim %d), found %lld", (long long)n, d + 1,
                   (long long)k);
    vn_topk(t, k, d, lv_optbool(L, 4, true, "largest"), &v, &ix);
    return lv_push2(L, v, lv_shifted(ix, 1));
}

/* ---- linear algebra ------------------------------------------------------------ */

static int l_matmul(lua_State *L)
{
    vn_tensor *a = lv_check(L, 1), *b = lv_check(L, 2);
    return lv_push(L, vn_matmul(a, b));
}

/* a < b, a <= b (and so a > b, a >= b): Lua 5.1 turns the result of these
 * metamethods into one boolean, so an elementwise answer cannot come back. */
static int l_compare_meta(lua_State *L)
{
    return lv_raise(L, "cannot compare tensors with <, <=, > or >= (Lua wants one boolean); "
                         "use a:lt(b), a:le(b), a:gt(b) or a:ge(b) for an elementwise u8 mask");
}

/* ---- registration ---------------------------------------------------------------- */

#define LV_REG_INPLACE(name) {#name "_", l_##name##_},
#define LV_REG_EXTREMUM(name, where) LV_REG(name)

const luaL_Reg lv_ops_methods[] = {
    LV_ARITH_OPS(LV_REG) LV_REG(pow) LV_ARITH_OPS(LV_REG_INPLACE) LV_COMPARE_OPS(LV_REG)
    LV_UNARY_OPS(LV_REG) LV_REG(clamp) LV_REG(masked_fill)
    LV_REDUCE_OPS(LV_REG) LV_EXTREMUM_OPS(LV_REG_EXTREMUM) LV_ARG_OPS(LV_REG)
    LV_STAT_OPS(LV_REG) LV_REG(norm) LV_REG(sort) LV_REG(topk) LV_REG(matmul)
    {NULL, NULL},
};

const luaL_Reg lv_ops_functions[] = {
    LV_REG(where)
    {NULL, NULL},
};

const luaL_Reg lv_ops_meta[] = {
    LV_ARITH_OPS(LV_META) LV_META(pow) LV_META(unm)
    {"__lt", l_compare_meta},
    {"__le", l_compare_meta},
    {NULL, NULL},
};
