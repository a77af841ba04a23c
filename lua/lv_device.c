/* lv_device.c — devices in Lua: t:cuda(), t:cpu(), t:device(), the
 * venom.cuda_* functions behind the venom.cuda table (lua/venom/init.lua),
 * and the autocast setting behind venom.autocast. */
#include "lv.h"

#include <string.h>

/* The device named by the string at i ("cpu" or "cuda"), or -1 if the
 * string names none. */
int lv_device_name_at(lua_State *L, int i)
{
    const char *s = lua_tostring(L, i);
    if (s && strcmp(s, "cpu") == 0) return VN_CPU;
    if (s && (strcmp(s, "cuda") == 0 || strcmp(s, "cuda:0") == 0)) return VN_CUDA;
    return -1;
}

static int l_cuda(lua_State *L) { return lv_push(L, vn_to_device(lv_check(L, 1), VN_CUDA)); }
static int l_cpu(lua_State *L) { return lv_push(L, vn_to_device(lv_check(L, 1), VN_CPU)); }

static int l_device(lua_State *L)
{
    lua_pushstring(L, vn_device_name(vn_tensor_device(lv_check(L, 1))));
    return 1;
}

static int l_is_cuda(lua_State *L)
{
    lua_pushboolean(L, vn_tensor_device(lv_check(L, 1)) == VN_CUDA);
    return 1;
}

static int l_cuda_is_available(lua_State *L)
{
    lua_pushboolean(L, vn_cuda_is_available());
    return 1;
}

static int l_cuda_device_count(lua_State *L)
{
    lua_pushinteger(L, vn_cuda_device_count());
    return 1;
}

static int l_cuda_device_name(lua_State *L)
{
    char buf[256];
    lv_status(L, vn_cuda_device_name(buf, sizeof buf));
    lua_pushstring(L, buf);
    return 1;
}

static int l_cuda_synchronize(lua_State *L)
{
    lv_status(L, vn_cuda_synchronize());
    return 0;
}

static int l_cuda_memory_stats(lua_State *L)
{
    size_t in_use, cached;
    vn_cuda_memory_stats(&in_use, &cached);
    lua_createtable(L, 0, 2);
    lua_pushnumber(L, (double)in_use);
    lua_setfield(L, -2, "in_use");
    lua_pushnumber(L, (double)cached);
    lua_setfield(L, -2, "cached");
    return 1;
}

static int l_cuda_empty_cache(lua_State *L)
{
    vn_cuda_empty_cache();
    return 0;
}

static int l_cuda_set_allow_tf32(lua_State *L)
{
    lv_checktype(L, 1, LUA_TBOOLEAN, "allow");
    lua_pushboolean(L, vn_cuda_set_allow_tf32(lua_toboolean(L, 1)));
    return 1;
}

/* set_autocast(dtype | nil | false) → the previous dtype name ("f32" = off). */
static int l_set_autocast(lua_State *L)
{
    const char *s = lua_type(L, 1) == LUA_TSTRING ? lua_tostring(L, 1) : NULL;
    if (s && strcmp(s, "f32") && strcmp(s, "bf16") && strcmp(s, "f16"))
        return lv_argfail(L, 1, "autocast takes 'bf16', 'f16' or 'f32' (off), got '%s'", s);
    vn_dtype d = lua_isnoneornil(L, 1) || (lua_isboolean(L, 1) && !lua_toboolean(L, 1))
                     ? VN_F32 : lv_dtype(L, 1);
    vn_dtype prev;
    lv_status(L, vn_set_autocast(d, &prev));
    lua_pushstring(L, vn_dtype_name(prev));
    return 1;
}

static int l_get_autocast(lua_State *L)
{
    lua_pushstring(L, vn_dtype_name(vn_get_autocast()));
    return 1;
}

const luaL_Reg lv_device_methods[] = {
    LV_REG(cuda) LV_REG(cpu) LV_REG(device) LV_REG(is_cuda)
    {NULL, NULL},
};

const luaL_Reg lv_device_functions[] = {
    LV_REG(cuda_is_available) LV_REG(cuda_device_count) LV_REG(cuda_device_name)
    LV_REG(cuda_synchronize) LV_REG(cuda_memory_stats) LV_REG(cuda_empty_cache)
    LV_REG(cuda_set_allow_tf32) LV_REG(set_autocast) LV_REG(get_autocast)
    {NULL, NULL},
};
