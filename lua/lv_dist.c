/* lv_dist.c — collectives over MPI in the venom.core Lua module; the
 * user-facing module is venom.distributed (lua/venom/distributed.lua).
 * Ranks are MPI's, 0-based (rank 0 is the one that writes checkpoints),
 * unlike dims and indices.
 *
 *   core.dist_built(), dist_nccl_built(), dist_init(), dist_is_initialized(), dist_finalize()
 *   core.dist_rank(), dist_world_size(), dist_local_rank(), dist_barrier()
 *   core.dist_all_reduce(t, op)          in place; op "sum" | "avg" | "max"
 *   core.dist_broadcast(t, root)         in place; root 0-based
 *   core.dist_all_gather(t), dist_reduce_scatter(t, op)
 *   core.dist_all_to_all(t, counts, grad_scale) → received rows, their per-rank
 *                                        counts; differentiable (grad_scale default 1)
 *   core.dist_scale_grad(t, scale)       identity; its backward multiplies by scale
 *   core.dist_reducer(params, bytes)     → the gradient reducer of DataParallel
 *   core.dist_reducer_finish(r), dist_reducer_stats(r), dist_reducer_free(r)
 *   core.dist_group(ranks)               → a group of ranks (0-based), made on every rank
 *   core.dist_group_info(g)              → its size, this rank's place (-1 outside)
 *   core.dist_group_all_reduce(g, t, op), dist_group_free(g) */
#include "lv.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define LV_REDUCER_MT "venom.DistReducer"

static vn_dist_op check_op(lua_State *L, int i)
{
    static const char *const names[] = {"sum", "avg", "max", NULL};
    static const vn_dist_op ops[] = {VN_DIST_SUM, VN_DIST_AVG, VN_DIST_MAX};
    const char *name = luaL_optstring(L, i, "sum");
    for (int k = 0; names[k]; k++)
        if (!strcmp(name, names[k])) return ops[k];
    return (vn_dist_op)lv_argfail(L, i, "expected \"sum\", \"avg\" or \"max\", found \"%s\"", name);
}

static int l_dist_finalize(lua_State *L)
{
    vn_dist_finalize();
    return 0;
}

/* The calls without arguments, each name written once: those returning a
 * boolean, an integer, or a status (raised on failure). */
#define LV_DIST_BOOLS(X) X(built) X(nccl_built) X(is_initialized)
#define LV_DIST_INTS(X) X(rank) X(world_size) X(local_rank)
#define LV_DIST_CALLS(X) X(init) X(barrier)
#define LV_DIST_BOOL_WRAPPER(name)                                              \
    static int l_dist_##name(lua_State *L)                                      \
    {                                                                           \
        lua_pushboolean(L, vn_dist_##name());                                   \
        return 1;                                                               \
    }
#define LV_DIST_INT_WRAPPER(name)                                               \
    static int l_dist_##name(lua_State *L)                                      \
    {                                                                           \
        lua_pushinteger(L, vn_dist_##name());                                   \
        return 1;                                                               \
    }
#define LV_DIST_CALL_WRAPPER(name)                                              \
    static int l_dist_##name(lua_State *L)                                      \
    {                                                                           \
        lv_status(L, vn_dist_##name());                                         \
        return 0;                                                               \
    }
LV_DIST_BOOLS(LV_DIST_BOOL_WRAPPER)
LV_DIST_INTS(LV_DIST_INT_WRAPPER)
LV_DIST_CALLS(LV_DIST_CALL_WRAPPER)

static int l_dist_all_reduce(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    lv_status(L, vn_dist_all_reduce(t, check_op(L, 2)));
    lua_settop(L, 1);
    return 1;
}

static int l_dist_broadcast(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    int64_t root = lua_isnoneornil(L, 2) ? 0 : lv_int(L, 2, "root rank");
    if (root < 0 || root > 1 << 30) return lv_argfail(L, 2, "expected a rank >= 0, found %lld", (long long)root);
    lv_status(L, vn_dist_broadcast(t, (int)root));
    lua_settop(L, 1);
    return 1;
}

static int l_dist_all_gather(lua_State *L) { return lv_push(L, vn_dist_all_gather(lv_check(L, 1))); }

static int l_dist_reduce_scatter(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    return lv_push(L, vn_dist_reduce_scatter(t, check_op(L, 2)));
}

/* all_to_all(t, counts, grad_scale): counts is a table of world_size row
 * counts; autograd goes back through it (vn_dist_all_to_all_autograd). */
static int l_dist_all_to_all(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    lv_checktype(L, 2, LUA_TTABLE, "send counts (a table of one count per rank)");
    int world = vn_dist_world_size();
    if ((int)lua_objlen(L, 2) != world)
        return lv_argfail(L, 2, "expected %d send counts (one per rank), found %d", world,
                          (int)lua_objlen(L, 2));
    /* Lua's memory, so an error below frees it: a box of 2·world counts. */
    int64_t *counts = lua_newuserdata(L, 2 * (size_t)world * sizeof *counts);
    for (int r = 0; r < world; r++) {
        lua_rawgeti(L, 2, r + 1);
        counts[r] = lv_int(L, -1, "send count");
        lua_pop(L, 1);
    }
    double scale = lua_isnoneornil(L, 3) ? 1.0 : lv_number(L, 3, "grad_scale");
    vn_tensor *out = vn_dist_all_to_all_autograd(t, counts, counts + world, scale);
    lv_push(L, out);
    lua_createtable(L, world, 0);
    for (int r = 0; r < world; r++) {
        lua_pushnumber(L, (lua_Number)counts[world + r]);
        lua_rawseti(L, -2, r + 1);
    }
    return 2;
}

/* scale_grad(t, scale): the identity whose backward multiplies by scale. */
static int l_dist_scale_grad(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    return lv_push(L, vn_dist_scale_grad(t, lv_number(L, 2, "scale")));
}

/* ---- the gradient reducer: a box with a __gc ----------------------------- */

static int reducer_gc(lua_State *L)
{
    vn_dist_reducer **slot = (vn_dist_reducer **)lv_box_check(L, 1, LV_REDUCER_MT, "a reducer");
    vn_dist_reducer_free(*slot);
    *slot = NULL;
    return 0;
}

static vn_dist_reducer *check_reducer(lua_State *L, int i)
{
    vn_dist_reducer *r = *(vn_dist_reducer **)lv_box_check(L, i, LV_REDUCER_MT, "a reducer");
    if (!r) lv_argfail(L, i, "the reducer was freed");
    return r;
}

/* dist_reducer(params, bucket_bytes): params is a list of tensors. */
static int l_dist_reducer(lua_State *L)
{
    lv_checktype(L, 1, LUA_TTABLE, "parameters (a list of tensors)");
    double bytes = lv_number(L, 2, "bucket size in bytes");
    if (!(bytes >= 4 && bytes <= 1e15)) return lv_argfail(L, 2, "expected a bucket size >= 4 bytes, found %g", bytes);
    int n = (int)lua_objlen(L, 1);
    vn_tensor **params = lua_newuserdata(L, ((size_t)n + 1) * sizeof *params);
    for (int k = 0; k < n; k++) {
        lua_rawgeti(L, 1, k + 1);
        params[k] = lv_check(L, -1);
        lua_pop(L, 1);
    }
    if (luaL_newmetatable(L, LV_REDUCER_MT)) {
        lua_pushcfunction(L, reducer_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    vn_dist_reducer **slot = (vn_dist_reducer **)lv_box_new(L, LV_REDUCER_MT);
    if (!(*slot = vn_dist_reducer_new(params, n, (size_t)bytes))) return lv_fail(L);
    return 1;
}

static int l_dist_reducer_finish(lua_State *L)
{
    lv_status(L, vn_dist_reducer_finish(check_reducer(L, 1)));
    return 0;
}

static int l_dist_reducer_stats(lua_State *L)
{
    vn_dist_reducer_stats st = vn_dist_reducer_get_stats(check_reducer(L, 1));
    lua_createtable(L, 0, 7);
    lua_pushnumber(L, (lua_Number)st.steps);
    lua_setfield(L, -2, "steps");
    lua_pushinteger(L, st.nbuckets);
    lua_setfield(L, -2, "buckets");
    lua_pushnumber(L, (lua_Number)st.bytes_per_step);
    lua_setfield(L, -2, "bytes_per_step");
    lua_pushnumber(L, st.wait_seconds);
    lua_setfield(L, -2, "wait_seconds");
    lua_pushnumber(L, (lua_Number)st.bytes_reduced);
    lua_setfield(L, -2, "bytes_reduced");
    lua_pushnumber(L, (lua_Number)st.pieces_early);
    lua_setfield(L, -2, "pieces_early");
    lua_pushnumber(L, (lua_Number)st.bytes_started_early);
    lua_setfield(L, -2, "bytes_started_early");
    return 1;
}

static int l_dist_reducer_free(lua_State *L) { return reducer_gc(L); }

/* ---- groups of ranks: a box with a __gc ----------------------------------- */

#define LV_GROUP_MT "venom.DistGroup"

static int group_gc(lua_State *L)
{
    vn_dist_group **slot = (vn_dist_group **)lv_box_check(L, 1, LV_GROUP_MT, "a group");
    vn_dist_group_free(*slot);
    *slot = NULL;
    return 0;
}

static vn_dist_group *check_group(lua_State *L, int i)
{
    vn_dist_group *g = *(vn_dist_group **)lv_box_check(L, i, LV_GROUP_MT, "a group");
    if (!g) lv_argfail(L, i, "the group was freed");
    return g;
}

/* dist_group(ranks): ranks is a list of 0-based world ranks. */
static int l_dist_group(lua_State *L)
{
    lv_checktype(L, 1, LUA_TTABLE, "ranks (a list of 0-based ranks)");
    int n = (int)lua_objlen(L, 1);
    /* Every key must be one of 1..n: {0, nil, 2} or {0, x = 1} would
     * otherwise make a group without the ranks the caller listed. */
    int keys = 0;
    for (lua_pushnil(L); lua_next(L, 1); lua_pop(L, 1)) keys++;
    if (keys != n)
        return lv_argfail(L, 1, "ranks must be a plain list (keys 1..%d), found %d keys "
                          "(a hole or a named key?)", n, keys);
    int *ranks = lua_newuserdata(L, ((size_t)n + 1) * sizeof *ranks);
    for (int k = 0; k < n; k++) {
        lua_rawgeti(L, 1, k + 1);
        if (lua_type(L, -1) != LUA_TNUMBER) /* not lua_isnumber: "1" is not a rank */
            return lv_argfail(L, 1, "entry %d is a %s; expected a rank (an integer)", k + 1,
                              luaL_typename(L, -1));
        lua_Number v = lua_tonumber(L, -1);
        /* range first: converting a double outside int's range is undefined */
        if (!(v >= INT_MIN && v <= INT_MAX) || v != (lua_Number)(int)v)
            return lv_argfail(L, 1, "entry %d is %g; expected a rank (an integer)", k + 1, v);
        ranks[k] = (int)v;
        lua_pop(L, 1);
    }
    if (luaL_newmetatable(L, LV_GROUP_MT)) {
        lua_pushcfunction(L, group_gc);
        lua_setfield(L, -2, "__gc");
    }
    lua_pop(L, 1);
    vn_dist_group **slot = (vn_dist_group **)lv_box_new(L, LV_GROUP_MT);
    if (!(*slot = vn_dist_group_new(ranks, n))) return lv_fail(L);
    return 1;
}

/* dist_group_info(g) → its size, this rank's place in it (0-based, -1 outside) */
static int l_dist_group_info(lua_State *L)
{
    vn_dist_group *g = check_group(L, 1);
    lua_pushinteger(L, vn_dist_group_size(g));
    lua_pushinteger(L, vn_dist_group_rank(g));
    return 2;
}

static int l_dist_group_all_reduce(lua_State *L)
{
    vn_dist_group *g = check_group(L, 1);
    lv_status(L, vn_dist_group_all_reduce(g, lv_check(L, 2), check_op(L, 3)));
    return 0;
}

static int l_dist_group_free(lua_State *L) { return group_gc(L); }

/* dist_abort(code): ends the whole job when in a world of 2 or more. */
static int l_dist_abort(lua_State *L)
{
    vn_dist_abort((int)luaL_optinteger(L, 1, 1));
    return 0;
}

#define LV_DIST_REG(name) LV_REG(dist_##name)
const luaL_Reg lv_dist_functions[] = {
    LV_DIST_BOOLS(LV_DIST_REG) LV_DIST_INTS(LV_DIST_REG) LV_DIST_CALLS(LV_DIST_REG)
    LV_REG(dist_finalize) LV_REG(dist_abort)
    LV_REG(dist_all_reduce) LV_REG(dist_broadcast) LV_REG(dist_all_gather)
    LV_REG(dist_reduce_scatter) LV_REG(dist_all_to_all) LV_REG(dist_scale_grad)
    LV_REG(dist_reducer) LV_REG(dist_reducer_finish) LV_REG(dist_reducer_stats)
    LV_REG(dist_reducer_free) LV_REG(dist_group) LV_REG(dist_group_info)
    LV_REG(dist_group_all_reduce) LV_REG(dist_group_free)
    {NULL, NULL},
};
