/* lv_optim.c — the optimizer steps of the venom.core Lua module, in place on
 * the parameters and their state (see vn_sgd_step and vn_adam_step in
 * venom.h); venom.optim (lua/venom/optim.lua) keeps the state and calls
 * them. */
#include "lv.h"

/* sgd_step(param, grad, momentum_buf | nil, lr, momentum, dampening,
 *          weight_decay, nesterov, first_step) — see vn_sgd_step. */
static int l_sgd_step(lua_State *L)
{
    vn_tensor *p = lv_check(L, 1), *g = lv_check(L, 2), *buf = lv_optcheck(L, 3);
    lv_status(L, vn_sgd_step(p, g, buf, lv_number(L, 4, "lr"), lv_optnumber(L, 5, 0, "momentum"),
                             lv_optnumber(L, 6, 0, "dampening"), lv_optnumber(L, 7, 0, "weight_decay"), lua_toboolean(L, 8),
                             lua_toboolean(L, 9)));
    return 0;
}

/* adam_step(param, grad, exp_avg, exp_avg_sq, step, lr, beta1, beta2, eps,
 *           weight_decay, decoupled) — see vn_adam_step. */
static int l_adam_step(lua_State *L)
{
    vn_tensor *p = lv_check(L, 1), *g = lv_check(L, 2), *m = lv_check(L, 3), *v = lv_check(L, 4);
    int64_t step = lv_int(L, 5, "step");
    lv_status(L, vn_adam_step(p, g, m, v, step, lv_number(L, 6, "lr"), lv_number(L, 7, "beta1"),
                              lv_number(L, 8, "beta2"), lv_number(L, 9, "eps"),
                              lv_optnumber(L, 10, 0, "weight_decay"), lua_toboolean(L, 11)));
    return 0;
}

/* The n tensors of the list at stack index i into out (n entries). */
static void lv_tensor_list(lua_State *L, int i, int n, vn_tensor **out, const char *what)
{
    lv_checktype(L, i, LUA_TTABLE, what);
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
    lv_checktype(L, 1, LUA_TTABLE, "params");
    int n = (int)lua_objlen(L, 1);
    vn_tensor **t = lua_newuserdata(L, sizeof *t * (size_t)(4 * n + 1));
    lv_tensor_list(L, 1, n, t, "params");
    lv_tensor_list(L, 2, n, t + n, "grads");
    lv_tensor_list(L, 3, n, t + 2 * n, "exp_avgs");
    lv_tensor_list(L, 4, n, t + 3 * n, "exp_avg_sqs");
    int64_t step = lv_int(L, 5, "step");
    lv_status(L, vn_adam_step_multi(n, t, (const vn_tensor *const *)(t + n), t + 2 * n, t + 3 * n,
                                    step, lv_number(L, 6, "lr"), lv_number(L, 7, "beta1"),
                                    lv_number(L, 8, "beta2"), lv_number(L, 9, "eps"),
                                    lv_optnumber(L, 10, 0, "weight_decay"), lua_toboolean(L, 11)));
    return 0;
}

const luaL_Reg lv_optim_functions[] = {
    LV_REG(sgd_step) LV_REG(adam_step) LV_REG(adam_step_multi)
    {NULL, NULL},
};
