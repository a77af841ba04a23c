/* lv_autograd.c — autograd in the venom.core Lua module: t:backward(),
 * requires_grad, grad_fn, detach, t.grad (read by the __index of
 * lv_tensor.c), the grad mode (set_grad_enabled, no_grad) and the functions
 * run at the end of the next backward (after_backward). */
#include "lv.h"

/* The functions queued by after_backward(fn): a table in the registry under
 * this key's address, taken out (and so emptied) by each backward. */
static const char after_backward_key = 0;

/* after_backward(fn): fn() runs once, at the end of the next successful
 * t:backward() (then the queue is empty again; a failed backward drops it;
 * an error in one function does not stop the others, see l_backward).
 * What PyTorch's queue_callback gives DistributedDataParallel: the FlexMoE
 * expert replicas all-reduce their gradients there, once every gradient of
 * the backward is final. */
static int l_after_backward(lua_State *L)
{
    lv_checktype(L, 1, LUA_TFUNCTION, "fn");
    lua_pushlightuserdata(L, (void *)&after_backward_key);
    lua_rawget(L, LUA_REGISTRYINDEX);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        lua_newtable(L);
        lua_pushlightuserdata(L, (void *)&after_backward_key);
        lua_pushvalue(L, -2);
        lua_rawset(L, LUA_REGISTRYINDEX);
    }
    lua_pushvalue(L, 1);
    lua_rawseti(L, -2, (int)lua_objlen(L, -2) + 1);
    return 0;
}

/* t:backward([grad]), then the functions after_backward queued, in order.
 * Every one runs even when an earlier one fails, and then the first error is
 * raised from here: a user's function that fails must not skip the
 * all-reduce of an expert's replicas queued behind it, or the replicas'
 * gradients (and so their weights) would silently differ between ranks. */
static int l_backward(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1), *g = lv_optcheck(L, 2);
    vn_status s = vn_backward(t, g);
    lua_pushlightuserdata(L, (void *)&after_backward_key);
    lua_rawget(L, LUA_REGISTRYINDEX);
    int queue = lua_gettop(L);
    lua_pushlightuserdata(L, (void *)&after_backward_key);
    lua_pushnil(L);
    lua_rawset(L, LUA_REGISTRYINDEX); /* taken out first: a callback may queue for the next one */
    lv_status(L, s);
    if (lua_istable(L, queue)) {
        int n = (int)lua_objlen(L, queue), first_error = 0;
        for (int i = 1; i <= n; i++) {
            lua_rawgeti(L, queue, i);
            if (lua_pcall(L, 0, 0, 0) != 0) {
                if (first_error) lua_pop(L, 1); /* a later error: the first one is raised */
                else first_error = lua_gettop(L);
            }
        }
        if (first_error) {
            lua_pushvalue(L, first_error);
            return lua_error(L);
        }
    }
    return 0;
}

static int l_requires_grad(lua_State *L)
{
    lua_pushboolean(L, vn_tensor_requires_grad(lv_check(L, 1)));
    return 1;
}

/* t:requires_grad_([on = true]) → t */
static int l_requires_grad_(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    bool on = lua_isnoneornil(L, 2) ? true : lua_toboolean(L, 2);
    lv_status(L, vn_tensor_set_requires_grad(t, on));
    lua_settop(L, 1);
    return 1;
}

static int l_zero_grad(lua_State *L)
{
    vn_tensor_zero_grad(lv_check(L, 1));
    return 0;
}

static int l_is_leaf(lua_State *L)
{
    lua_pushboolean(L, vn_tensor_is_leaf(lv_check(L, 1)));
    return 1;
}

static int l_grad_fn(lua_State *L)
{
    const char *name = vn_tensor_grad_fn_name(lv_check(L, 1));
    if (name) lua_pushstring(L, name);
    else lua_pushnil(L);
    return 1;
}

/* t.grad: the accumulated gradient or nil. */
int lv_push_grad(lua_State *L, vn_tensor *t)
{
    vn_tensor *g = vn_tensor_grad(t);
    if (!g) {
        lua_pushnil(L);
        return 1;
    }
    return lv_push(L, vn_tensor_retain(g));
}

/* t:detach(): the same data, cut from the graph (no grad history). */
LV_UNARY_WRAPPER(detach)

static int l_set_grad_enabled(lua_State *L)
{
    lua_pushboolean(L, vn_set_grad_enabled(lua_toboolean(L, 1)));
    return 1;
}

static int l_is_grad_enabled(lua_State *L)
{
    lua_pushboolean(L, vn_is_grad_enabled());
    return 1;
}

/* no_grad(fn, ...): fn(...) with grad mode off, restored even if fn fails. */
static int l_no_grad(lua_State *L)
{
    lv_checktype(L, 1, LUA_TFUNCTION, "fn");
    bool prev = vn_set_grad_enabled(false);
    int rc = lua_pcall(L, lua_gettop(L) - 1, LUA_MULTRET, 0);
    vn_set_grad_enabled(prev);
    if (rc != 0) return lua_error(L);
    return lua_gettop(L);
}

const luaL_Reg lv_autograd_methods[] = {
    LV_REG(backward) LV_REG(requires_grad) LV_REG(requires_grad_) LV_REG(zero_grad)
    LV_REG(detach) LV_REG(is_leaf) LV_REG(grad_fn)
    {NULL, NULL},
};

const luaL_Reg lv_autograd_functions[] = {
    LV_REG(set_grad_enabled) LV_REG(is_grad_enabled) LV_REG(no_grad) LV_REG(after_backward)
    {NULL, NULL},
};
