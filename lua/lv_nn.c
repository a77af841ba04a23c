/* lv_nn.c — the neural-network functions of the venom.core Lua module:
 * linear, softmax and log_softmax (also tensor methods), the losses
 * cross_entropy, nll_loss and mse_loss, and dropout. venom.nn
 * (lua/venom/nn.lua) builds its modules on them.
 *
 * Class targets are 1-based (1..C) here, like every index on the Lua side,
 * and converted to 0-based before they reach the engine. */
#include "lv.h"

#include <string.h>

/* The families, each name written once: a name in a list gets its wrapper
 * l_<name> calling vn_<name>, and its registration entry. */
#define LV_SOFTMAX_OPS(X) X(softmax) X(log_softmax)
#define LV_CLASS_LOSSES(X) X(cross_entropy) X(nll_loss)

/* linear(x, w, [b]): x·wᵀ + b */
static int l_linear(lua_State *L)
{
    vn_tensor *x = lv_check(L, 1), *w = lv_check(L, 2), *b = lv_optcheck(L, 3);
    return lv_push(L, vn_linear(x, w, b));
}

typedef vn_tensor *(*lv_softmaxfn)(const vn_tensor *, int);

/* f(x, [dim = -1]): softmax or log_softmax along dim. */
static int lv_softmax_like(lua_State *L, lv_softmaxfn f)
{
    vn_tensor *t = lv_check(L, 1);
    int nd = vn_tensor_ndim(t);
    return lv_push(L, f(t, lv_optdim(L, 2, nd, nd - 1)));
}

#define LV_SOFTMAX_WRAPPER(name)                                                \
    static int l_##name(lua_State *L) { return lv_softmax_like(L, vn_##name); }
LV_SOFTMAX_OPS(LV_SOFTMAX_WRAPPER)

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
    /* The targets go 0-based on their own device without a look at their
     * values: the engine checks the range, once (for CUDA targets that is
     * one round trip to the GPU, not a copy to the CPU and back as well). */
    vn_tensor *idx = lv_check_indices(L, 2, op, "target");
    vn_tensor *target = lv_shifted(vn_tensor_dtype(idx) == VN_I64 ? vn_tensor_retain(idx)
                                                                  : vn_to_dtype(idx, VN_I64), -1);
    if (!target) lv_fail(L);
    vn_tensor *r = f(x, target, red);
    vn_tensor_release(target);
    if (!r && vn_last_status() == VN_ERR_ARG) {
        /* Say which target is out of range in Lua's 1-based terms (this
         * raises when it finds one); otherwise the engine's message stands. */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", vn_last_error());
        vn_tensor_release(lv_indices0(L, 2, vn_tensor_shape(x)[1], op, "target"));
        vn_set_error(VN_ERR_ARG, "%s", msg);
    }
    return lv_push(L, r);
}

#define LV_CLASS_LOSS_WRAPPER(name)                                             \
    static int l_##name(lua_State *L) { return lv_class_loss(L, vn_##name, #name); }
LV_CLASS_LOSSES(LV_CLASS_LOSS_WRAPPER)

static int l_mse_loss(lua_State *L)
{
    vn_tensor *a = lv_check(L, 1), *b = lv_check(L, 2);
    return lv_push(L, vn_mse_loss(a, b, lv_reduction(L, 3)));
}

/* dropout(x, p, [training = true]) */
static int l_dropout(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    double p = lv_number(L, 2, "p");
    bool training = lua_isnoneornil(L, 3) ? true : lua_toboolean(L, 3);
    return lv_push(L, vn_dropout(t, p, training));
}

const luaL_Reg lv_nn_methods[] = {
    LV_SOFTMAX_OPS(LV_REG)
    {NULL, NULL},
};

const luaL_Reg lv_nn_functions[] = {
    LV_REG(linear) LV_CLASS_LOSSES(LV_REG) LV_REG(mse_loss) LV_REG(dropout)
    {NULL, NULL},
};
