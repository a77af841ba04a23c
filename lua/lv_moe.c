/* lv_moe.c — Mixture-of-Experts dispatch in the venom.core Lua module
 * (engine/ops_moe.c; the layer is nn.MoE in lua/venom/nn_moe.lua):
 *
 *   venom.scatter_add_rows(y, idx, weights, n_rows) → out     differentiable
 *       y (m, F...) f32, idx (m) 1-based rows in 1..n_rows, weights (m) f32
 *       or nil → out (n_rows, F...): out[idx[k]] += weights[k] · y[k]
 *   venom.moe_route(scores, k [, threshold [, capacity_factor]]) → routing
 *       scores (T, E) f32; threshold and capacity_factor default to math.huge
 *       (plain top-k, no capacity). routing = {tokens, slots, load, first,
 *       mask, selected, dropped, capacity}: tokens (S) 1-based token of each
 *       kept assignment, grouped by expert (load[e] of them for expert e);
 *       slots (S) 1-based positions (t−1)·E + e in the flattened scores;
 *       first (E) tokens whose first choice is each expert; mask (T, E) u8
 *       chosen before the capacity drop; the counts as numbers.
 *
 * The gather that goes with the scatter is x:index_select(1, idx). */
#include "lv.h"

#include <limits.h>
#include <math.h>
#include <string.h>

static int l_scatter_add_rows(lua_State *L)
{
    vn_tensor *y = lv_check(L, 1), *w = lv_optcheck(L, 3);
    int64_t n = lv_int(L, 4, "n_rows");
    if (n < 0) return lv_argfail(L, 4, "scatter_add_rows: n_rows must be >= 0, found %lld", (long long)n);
    vn_tensor *idx = lv_indices0(L, 2, n, "scatter_add_rows", "idx");
    vn_tensor *out = vn_scatter_add_rows(y, idx, w, n);
    vn_tensor_release(idx);
    return lv_push(L, out);
}

static void set_tensor(lua_State *L, const char *name, vn_tensor *t)
{
    lv_push(L, t);
    lua_setfield(L, -2, name);
}

static void set_number(lua_State *L, const char *name, int64_t v)
{
    lua_pushnumber(L, (lua_Number)v);
    lua_setfield(L, -2, name);
}

/* A failed vn_moe_route: the engine names a NaN score by its 0-based
 * [token, expert]; Lua counts from 1, so on that failure the binding finds
 * the first NaN itself and says where in Lua's terms. Other failures pass. */
static int route_fail(lua_State *L, const vn_tensor *scores)
{
    if (!strstr(vn_last_error(), "is NaN (token")) return lv_fail(L);
    vn_tensor *host = vn_to_device(scores, VN_CPU);
    vn_tensor *c = host ? vn_contiguous(host) : NULL;
    vn_tensor_release(host);
    if (!c) return lv_fail(L);
    const float *s = vn_tensor_data(c);
    int64_t E = vn_tensor_shape(c)[1], n = vn_tensor_numel(c), i = 0;
    while (i < n && s[i] == s[i]) i++;
    vn_tensor_release(c);
    if (i == n) return lv_fail(L);
    long long t = (long long)(i / E) + 1, e = (long long)(i % E) + 1;
    return lv_raise(L, "moe_route: scores[%lld, %lld] is NaN (token %lld, expert %lld): the router's "
                    "logits are not finite", t, e, t, e);
}

static int l_moe_route(lua_State *L)
{
    vn_tensor *scores = lv_check(L, 1);
    int64_t k = lv_int(L, 2, "k");
    double threshold = lv_optnumber(L, 3, INFINITY, "threshold");
    double cf = lv_optnumber(L, 4, INFINITY, "capacity_factor");
    if (k < 1 || k > INT_MAX) /* the engine's own check names E; this keeps k an int */
        return lv_argfail(L, 2, "moe_route: k = %lld experts per token, expected >= 1", (long long)k);
    vn_moe_routing r;
    if (vn_moe_route(scores, (int)k, threshold, cf, &r)) return route_fail(L, scores);
    /* Lua counts from 1: both index lists move up by one (new tensors). */
    vn_tensor *tokens = lv_shifted(r.tokens, 1), *slots = lv_shifted(r.slots, 1);
    r.tokens = r.slots = NULL; /* lv_shifted took them */
    if (!tokens || !slots) {
        vn_tensor_release(tokens);
        vn_tensor_release(slots);
        vn_moe_routing_release(&r);
        return lv_fail(L);
    }
    lua_createtable(L, 0, 8);
    set_tensor(L, "tokens", tokens);
    set_tensor(L, "slots", slots);
    set_tensor(L, "load", r.load);
    set_tensor(L, "first", r.first);
    set_tensor(L, "mask", r.mask);
    set_number(L, "selected", r.selected);
    set_number(L, "dropped", r.dropped);
    set_number(L, "capacity", r.capacity);
    return 1;
}

const luaL_Reg lv_moe_functions[] = {
    LV_REG(scatter_add_rows) LV_REG(moe_route)
    {NULL, NULL},
};
