/* lv_system.c — what the venom.core Lua module offers besides tensors:
 * engine memory (memory_stats, empty_cache), a monotonic clock and isatty
 * (venom.util's progress display uses both), idx_load (IDX files such as
 * MNIST, read by venom.data) and read_file (a file's bytes, gunzipped by
 * zlib when it is gzip: venom.data's .gz text files) and the per-op
 * profiler's start / stop / entries. */
#include "lv.h"

#include <lualib.h>

#include <stdio.h>
#include <time.h>
#include <unistd.h>

static int l_idx_load(lua_State *L)
{
    return lv_push(L, vn_idx_load(lv_string(L, 1, "path")));
}

/* read_file(path) → the file's bytes as a Lua string (gzip decompressed). */
static int l_read_file(lua_State *L)
{
    vn_tensor *t = vn_read_file(lv_string(L, 1, "path"));
    if (!t) return lv_fail(L);
    lua_pushlstring(L, vn_tensor_data(t), (size_t)vn_tensor_numel(t));
    vn_tensor_release(t);
    return 1;
}

static int l_memory_stats(lua_State *L)
{
    size_t in_use, cached;
    vn_memory_stats(&in_use, &cached);
    lua_pushnumber(L, (lua_Number)in_use);
    lua_pushnumber(L, (lua_Number)cached);
    return 2;
}

static int l_empty_cache(lua_State *L)
{
    (void)L;
    vn_empty_cache();
    return 0;
}

/* clock(): monotonic seconds. */
static int l_clock(lua_State *L)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    lua_pushnumber(L, (lua_Number)ts.tv_sec + (lua_Number)ts.tv_nsec * 1e-9);
    return 1;
}

/* The per-op profiler (venom/profile.h); venom.profile (lua/venom/profile.lua)
 * wraps these three. profile_entries() → an array of {op, forward_calls,
 * forward_s, backward_calls, backward_s}. */
static int l_profile_start(lua_State *L)
{
    (void)L;
    vn_profile_start();
    return 0;
}

static int l_profile_stop(lua_State *L)
{
    (void)L;
    vn_profile_stop();
    return 0;
}

static int l_profile_entries(lua_State *L)
{
    vn_profile_entry e[VN_PROFILE_MAX_OPS];
    int n = vn_profile_entries(e, VN_PROFILE_MAX_OPS);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_createtable(L, 0, 5);
        lua_pushstring(L, e[i].op);
        lua_setfield(L, -2, "op");
        lua_pushnumber(L, (lua_Number)e[i].forward_calls);
        lua_setfield(L, -2, "forward_calls");
        lua_pushnumber(L, e[i].forward_s);
        lua_setfield(L, -2, "forward_s");
        lua_pushnumber(L, (lua_Number)e[i].backward_calls);
        lua_setfield(L, -2, "backward_calls");
        lua_pushnumber(L, e[i].backward_s);
        lua_setfield(L, -2, "backward_s");
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

/* isatty([fd = 1 | file]) */
static int l_isatty(lua_State *L)
{
    int fd = 1;
    FILE **f = luaL_testudata(L, 1, LUA_FILEHANDLE);
    if (f) fd = *f ? fileno(*f) : -1;
    else if (!lua_isnoneornil(L, 1)) fd = (int)lv_int(L, 1, "fd");
    lua_pushboolean(L, fd >= 0 && isatty(fd));
    return 1;
}

const luaL_Reg lv_system_functions[] = {
    LV_REG(memory_stats) LV_REG(empty_cache) LV_REG(clock) LV_REG(isatty) LV_REG(idx_load)
    LV_REG(read_file) LV_REG(profile_start) LV_REG(profile_stop) LV_REG(profile_entries)
    {NULL, NULL},
};
