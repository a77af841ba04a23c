/* lv_dynamic.c — dynamic activation sparsity in the venom.core Lua module.
 *
 *   core.act_sparse_linear(x, w, bias|nil, act [, tile_rows [, dense_above]])
 *   core.act_sparse_mlp(x, w1, b1|nil, w2, b2|nil, act [, tile_rows [, dense_above [, mask]]])
 *       → y, {density =, tile_density =, dense =}
 *   mask (u8, x's leading dims; 1 a real row, 0 padding): only the real
 *   rows are computed, y's padding rows are 0 (vn_act_sparse_mlp_masked).
 *   act: "relu" or "relu2"; tile_rows a whole number ≥ 1 (nil: the
 *   default), dense_above a share in [0, 1] (nil: the default). The
 *   pure-Lua layers are in lua/venom/nn_dynamic.lua. */
#include "lv.h"

#include <math.h>
#include <string.h>

/* The options at i (act), i+1 (tile_rows), i+2 (dense_above). */
static void check_act_opts(lua_State *L, int i, const char *op, vn_sparse_act *act, int64_t *tile,
                           double *dense_above)
{
    const char *name = lv_string(L, i, "the activation");
    *act = !strcmp(name, "relu") ? VN_ACT_RELU : !strcmp(name, "relu2") ? VN_ACT_RELU2 : 0;
    if (!*act) lv_raise(L, "%s: activation \"%s\", expected \"relu\" or \"relu2\"", op, name);
    double t = lv_optnumber(L, i + 1, 0, "tile_rows");
    if (!lua_isnoneornil(L, i + 1) && !(t >= 1 && t <= 1e9 && t == floor(t)))
        lv_raise(L, "%s: tile_rows %g, expected a whole number >= 1", op, t);
    *tile = (int64_t)t;
    *dense_above = lv_optnumber(L, i + 2, -1, "dense_above");
    if (!lua_isnoneornil(L, i + 2) && !(*dense_above >= 0 && *dense_above <= 1))
        lv_raise(L, "%s: dense_above %g, expected a share in [0, 1]", op, *dense_above);
}

/* Pushes y and the stats table (raises the engine's error for NULL). */
static int push_with_stats(lua_State *L, vn_tensor *y, const vn_act_sparse_stats *st)
{
    if (!y) return lv_fail(L);
    lv_push(L, y);
    lua_createtable(L, 0, 3);
    lua_pushnumber(L, st->density);
    lua_setfield(L, -2, "density");
    lua_pushnumber(L, st->tile_density);
    lua_setfield(L, -2, "tile_density");
    lua_pushboolean(L, st->dense);
    lua_setfield(L, -2, "dense");
    return 2;
}

static int l_act_sparse_linear(lua_State *L)
{
    vn_tensor *x = lv_check(L, 1), *w = lv_check(L, 2), *b = lv_optcheck(L, 3);
    vn_sparse_act act;
    int64_t tile;
    double dense_above;
    check_act_opts(L, 4, "act_sparse_linear", &act, &tile, &dense_above);
    vn_act_sparse_stats st;
    return push_with_stats(L, vn_act_sparse_linear(x, w, b, act, tile, dense_above, &st), &st);
}

static int l_act_sparse_mlp(lua_State *L)
{
    vn_tensor *x = lv_check(L, 1), *w1 = lv_check(L, 2), *b1 = lv_optcheck(L, 3);
    vn_tensor *w2 = lv_check(L, 4), *b2 = lv_optcheck(L, 5);
    vn_sparse_act act;
    int64_t tile;
    double dense_above;
    check_act_opts(L, 6, "act_sparse_mlp", &act, &tile, &dense_above);
    vn_tensor *mask = lv_optcheck(L, 9);
    vn_act_sparse_stats st;
    return push_with_stats(L, vn_act_sparse_mlp_masked(x, w1, b1, w2, b2, mask, act, tile, dense_above, &st),
                           &st);
}

const luaL_Reg lv_dynamic_functions[] = {
    LV_REG(act_sparse_linear) LV_REG(act_sparse_mlp)
    {NULL, NULL},
};
