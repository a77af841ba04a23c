/* lv_ops.c — the tensor ops of the venom.core Lua module: arithmetic and
 * comparisons (a + b, a:lt(b), in place a:add_(b)), pointwise functions
 * (exp, relu, clamp, ...), where, reductions (sum, max, argmax, ...) and
 * matmul. Each is a tensor method and a module function (x:exp() =
 * venom.exp(x)); the arithmetic ones are also the metamethods + - * / ^.
 *
 * Either operand of a binary op may be a Lua number: it becomes a 0-d tensor
 * of the other operand's dtype, which the engine broadcasts. argmax/argmin
 * give 1-based positions. */
#include "lv.h"

#include <math.h>

/* The op families, each name written once: a name in a list gets its
 * wrapper l_<name> calling vn_<name> (a reduction also vn_<name>_all), its
 * entry among the methods (and so the module functions), and in
 * LV_ARITH_OPS also the in-place l_<name>_ and the metamethod __<name>. */
#define LV_ARITH_OPS(X) X(add) X(sub) X(mul) X(div)
#define LV_COMPARE_OPS(X) X(eq) X(ne) X(lt) X(le) X(gt) X(ge)
#define LV_UNARY_OPS(X) X(neg) X(abs) X(exp) X(log) X(sqrt) X(relu) X(gelu) X(tanh) X(sigmoid)
#define LV_REDUCE_OPS(X) X(sum) X(mean) X(max) X(min)
#define LV_ARG_OPS(X) X(argmax) X(argmin)

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

#define LV_REDUCE_WRAPPER(name)                                                 \
    static int l_##name(lua_State *L) { return lv_reduce(L, vn_##name##_all, vn_##name); }
LV_REDUCE_OPS(LV_REDUCE_WRAPPER)

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
    return luaL_error(L, "cannot compare tensors with <, <=, > or >= (Lua wants one boolean); "
                         "use a:lt(b), a:le(b), a:gt(b) or a:ge(b) for an elementwise u8 mask");
}

/* ---- registration ---------------------------------------------------------------- */

#define LV_REG_INPLACE(name) {#name "_", l_##name##_},

const luaL_Reg lv_ops_methods[] = {
    LV_ARITH_OPS(LV_REG) LV_REG(pow) LV_ARITH_OPS(LV_REG_INPLACE) LV_COMPARE_OPS(LV_REG)
    LV_UNARY_OPS(LV_REG) LV_REG(clamp) LV_REG(masked_fill)
    LV_REDUCE_OPS(LV_REG) LV_ARG_OPS(LV_REG) LV_REG(matmul)
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
