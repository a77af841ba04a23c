/* lv_graph.c — CSR graphs in the venom.core Lua module.
 *
 * A graph is a userdata box holding one vn_csr, with the metatable
 * "venom.Graph" (made when the module opens) whose __index is the methods
 * table core.graph_methods: the C methods below, to which venom.graph
 * (lua/venom/graph.lua) adds its Lua ones (edges, degree, gcn_norm,
 * propagate, ...). An edge src→dst is the matrix entry (dst, src); Lua
 * vertex and edge numbers are 1-based, the engine's 0-based.
 *
 *   core.graph_from_edges(src, dst, n [, values]) → g   src, dst: 1-based integer tensors (E)
 *   core.is_graph(v)
 *   g:num_nodes(), g:num_edges()
 *   g:row_ptr(), g:row_idx(), g:col_idx()   the CSR arrays, 0-based i64
 *   g:values()                              f32 (E) or nil (all ones)
 *   g:spmm(x [, values]), g:scatter(x, "src"|"dst"), g:gather(e, "sum"|"mean"|"max"),
 *   g:edge_softmax(scores)                  differentiable
 *   g:slice(first, count)                   edges first .. first+count−1 (1-based) as a graph */
#include "lv.h"

#include <string.h>

#define LV_GRAPH_MT "venom.Graph"

static vn_csr *check_graph(lua_State *L, int i)
{
    return *(vn_csr **)lv_box_check(L, i, LV_GRAPH_MT, "a graph");
}

static int graph_gc(lua_State *L)
{
    vn_csr **slot = (vn_csr **)lv_box_check(L, 1, LV_GRAPH_MT, "a graph");
    vn_csr_free(*slot);
    *slot = NULL;
    return 0;
}

/* Pushes a new graph made by make(args...) (NULL: raise the engine's error),
 * its box made first. */
#define PUSH_GRAPH(L, make)                                                          \
    do {                                                                             \
        vn_csr **slot_ = (vn_csr **)lv_box_new(L, LV_GRAPH_MT);                       \
        if (!(*slot_ = (make))) return lv_fail(L);                                    \
        return 1;                                                                    \
    } while (0)

static int graph_num_nodes(lua_State *L)
{
    lua_pushnumber(L, (lua_Number)vn_csr_rows(check_graph(L, 1)));
    return 1;
}

static int graph_num_edges(lua_State *L)
{
    lua_pushnumber(L, (lua_Number)vn_csr_nnz(check_graph(L, 1)));
    return 1;
}

/* The array methods g:<name>() = vn_csr_<name>(g), each name written once. */
#define LV_GRAPH_ARRAYS(X) X(row_ptr) X(row_idx) X(col_idx)
#define LV_GRAPH_ARRAY_WRAPPER(name)                                            \
    static int graph_##name(lua_State *L) { return lv_push(L, vn_csr_##name(check_graph(L, 1))); }
LV_GRAPH_ARRAYS(LV_GRAPH_ARRAY_WRAPPER)

static int graph_values(lua_State *L)
{
    vn_tensor *v = vn_csr_values(check_graph(L, 1));
    if (v) return lv_push(L, v);
    if (vn_last_status() != VN_OK) return lv_fail(L);
    lua_pushnil(L);
    return 1;
}

/* g:spmm(x [, values]) */
static int graph_spmm(lua_State *L)
{
    vn_csr *a = check_graph(L, 1);
    vn_tensor *x = lv_check(L, 2), *values = lv_optcheck(L, 3);
    return lv_push(L, vn_csr_spmm(a, values, x));
}

/* g:scatter(x, "src" | "dst") */
static int graph_scatter(lua_State *L)
{
    vn_csr *a = check_graph(L, 1);
    vn_tensor *x = lv_check(L, 2);
    const char *side = lv_string(L, 3, "scatter's side");
    if (strcmp(side, "src") && strcmp(side, "dst"))
        return lv_argfail(L, 3, "scatter: side must be \"src\" or \"dst\", found \"%s\"", side);
    return lv_push(L, vn_csr_scatter(a, x, side[0] == 's'));
}

/* g:gather(e, "sum" | "mean" | "max") */
static int graph_gather(lua_State *L)
{
    static const char *const names[] = {"sum", "mean", "max"};
    static const vn_gather_op ops[] = {VN_GATHER_SUM, VN_GATHER_MEAN, VN_GATHER_MAX};
    vn_csr *a = check_graph(L, 1);
    vn_tensor *e = lv_check(L, 2);
    const char *name = lv_string(L, 3, "gather's reduction");
    for (int k = 0; k < 3; k++)
        if (!strcmp(name, names[k])) return lv_push(L, vn_csr_gather(a, e, ops[k]));
    return lv_argfail(L, 3, "gather: reduction must be \"sum\", \"mean\" or \"max\", found \"%s\"",
                      name);
}

static int graph_edge_softmax(lua_State *L)
{
    vn_csr *a = check_graph(L, 1);
    return lv_push(L, vn_csr_edge_softmax(a, lv_check(L, 2)));
}

/* g:slice(first, count), first 1-based */
static int graph_slice(lua_State *L)
{
    vn_csr *a = check_graph(L, 1);
    int64_t first = lv_int(L, 2, "first"), count = lv_int(L, 3, "count");
    PUSH_GRAPH(L, vn_csr_slice(a, first - 1, count));
}

static int graph_tostring(lua_State *L)
{
    vn_csr *a = check_graph(L, 1);
    int n = (int)vn_csr_rows(a), e = (int)vn_csr_nnz(a);
    lua_pushfstring(L, "Graph(%d node%s, %d edge%s)", n, n == 1 ? "" : "s", e, e == 1 ? "" : "s");
    return 1;
}

#define LV_GRAPH_REG(name) {#name, graph_##name},

static const luaL_Reg graph_methods[] = {
    LV_GRAPH_REG(num_nodes) LV_GRAPH_REG(num_edges) LV_GRAPH_ARRAYS(LV_GRAPH_REG)
    LV_GRAPH_REG(values) LV_GRAPH_REG(spmm) LV_GRAPH_REG(scatter) LV_GRAPH_REG(gather)
    LV_GRAPH_REG(edge_softmax) LV_GRAPH_REG(slice)
    {NULL, NULL},
};

/* core.graph_from_edges(src, dst, n [, values]): the n-vertex graph with
 * the edges src[k] → dst[k] (1-based), stored as the entries (dst, src). */
static int l_graph_from_edges(lua_State *L)
{
    int64_t n = lv_int(L, 3, "the number of vertices");
    if (n < 0) return lv_argfail(L, 3, "graph: the number of vertices is %lld, expected >= 0",
                                 (long long)n);
    vn_tensor *values = lv_optcheck(L, 4);
    /* Boxed at once, so a bad index in dst does not leak the src copy. */
    lv_push(L, lv_indices0(L, 1, n, "graph", "src"));
    lv_push(L, lv_indices0(L, 2, n, "graph", "dst"));
    vn_tensor *src0 = lv_totensor(L, -2), *dst0 = lv_totensor(L, -1);
    PUSH_GRAPH(L, vn_csr_from_coo(n, n, dst0, src0, values));
}

static int l_is_graph(lua_State *L)
{
    lua_pushboolean(L, luaL_testudata(L, 1, LV_GRAPH_MT) != NULL);
    return 1;
}

/* Makes the metatable and sets core.graph_methods (the module is on top). */
void lv_graph_open(lua_State *L)
{
    lua_newtable(L);
    lv_setfuncs(L, graph_methods);
    luaL_newmetatable(L, LV_GRAPH_MT);
    lua_pushcfunction(L, graph_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushcfunction(L, graph_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushvalue(L, -2);
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
    lua_setfield(L, -2, "graph_methods");
}

const luaL_Reg lv_graph_functions[] = {
    LV_REG(graph_from_edges) LV_REG(is_graph)
    {NULL, NULL},
};
