/* lv_dynamic.c — dynamic activation sparsity in the venom.core Lua module.
 *
 *   core.act_sparse_linear(x, w, bias|nil, act [, tile_rows [, dense_above]])
 *       → y, {density =, tile_density =, dense =}
 *   act: "relu" or "relu2"; tile_rows a whole number ≥ 1 (nil: the
 *   default), dense_above a share in [0, 1] (nil: the default). The
 *   pure-Lua layer is nn.SparseInputLinear (lua/venom/nn_dynamic.lua). */
#include "lv.h"

#include <math.h>
#include <string.h>

static int l_act_sparse_linear(lua_State *L)
{
    vn_tensor *x = lv_check(L, 1), *w = lv_check(L, 2), *b = lv_optcheck(L, 3);
    const char *name = lv_string(L, 4, "act_sparse_linear: the activation");
    vn_sparse_act act = !strcmp(name, "relu") ? VN_ACT_RELU : !strcmp(name, "relu2") ? VN_ACT_RELU2 : 0;
    if (!act) return lv_raise(L, "act_sparse_linear: activation \"%s\", expected \"relu\" or \"relu2\"", name);
    double tile = lv_optnumber(L, 5, 0, "act_sparse_linear: tile_rows");
    if (!lua_isnoneornil(L, 5) && !(tile >= 1 && tile <= 1e9 && tile == floor(tile)))
        return lv_raise(L, "act_sparse_linear: tile_rows %g, expected a whole number >= 1", tile);
    double dense_above = lv_optnumber(L, 6, -1, "act_sparse_linear: dense_above");
    if (!lua_isnoneornil(L, 6) && !(dense_above >= 0 && dense_above <= 1))
        return lv_raise(L, "act_sparse_linear: dense_above %g, expected a share in [0, 1]", dense_above);
    vn_act_sparse_stats st;
    vn_tensor *y = vn_act_sparse_linear(x, w, b, act, (int64_t)tile, dense_above, &st);
    if (!y) return lv_fail(L);
    lv_push(L, y);
    lua_createtable(L, 0, 3);
    lua_pushnumber(L, st.density);
    lua_setfield(L, -2, "density");
    lua_pushnumber(L, st.tile_density);
    lua_setfield(L, -2, "tile_density");
    lua_pushboolean(L, st.dense);
    lua_setfield(L, -2, "dense");
    return 2;
}

const luaL_Reg lv_dynamic_functions[] = {
    LV_REG(act_sparse_linear)
    {NULL, NULL},
};
