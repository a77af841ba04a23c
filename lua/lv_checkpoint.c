/* lv_checkpoint.c — venom.save / venom.load (safetensors files through
 * vn_save / vn_load) and the engine RNG state as a tensor, for checkpoints.
 *
 *     venom.save("model.safetensors", {["fc.weight"] = w, ["fc.bias"] = b}, {epoch = 3})
 *     local tensors, meta = venom.load("model.safetensors")   -- meta.epoch == "3"
 *
 * Tensors are written in the sorted order of their names and metadata keys
 * are sorted too, so the same tables always give the same file. venom.save
 * and venom.load are these wrapped by lua/venom/init.lua, which also takes a
 * whole state dict (its numbers and strings go to the metadata). */
#include "lv.h"

#include <lauxlib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *key;
    const void *value; /* a vn_tensor* (tensors) or a string (metadata) */
} lv_pair;

static int by_key(const void *a, const void *b)
{
    return strcmp(((const lv_pair *)a)->key, ((const lv_pair *)b)->key);
}

/* Shortest of %.15g..%.17g that reads back as x, so 0.1 stays "0.1" and
 * every double survives the trip through text. */
static void format_number(double x, char *buf, size_t n)
{
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, n, "%.*g", digits, x);
        if (strtod(buf, NULL) == x) return;
    }
}

/* The entries of the table at i as a sorted array of pairs (a userdata left
 * on the stack, so a later error frees it). Tensors: string key → tensor.
 * Metadata: string key → string, number (written exactly) or boolean;
 * converted strings are kept alive in the table at `keep`. */
static lv_pair *collect(lua_State *L, int i, bool tensors, int keep, int *count)
{
    const char *what = tensors ? "tensors" : "metadata";
    int n = 0;
    lua_pushnil(L);
    while (lua_next(L, i)) {
        n++;
        lua_pop(L, 1);
    }
    lv_pair *pairs = lua_newuserdata(L, sizeof *pairs * (size_t)(n + 1));
    n = 0;
    lua_pushnil(L);
    while (lua_next(L, i)) {
        if (lua_type(L, -2) != LUA_TSTRING)
            lv_argfail(L, i, "%s: keys must be names (strings), found a %s key", what,
                       luaL_typename(L, -2));
        size_t klen;
        const char *key = lua_tolstring(L, -2, &klen);
        if (strlen(key) != klen)
            lv_argfail(L, i, "%s: the name '%s...' contains a NUL byte", what, key);
        const void *value = NULL;
        if (tensors) {
            if (!lv_totensor(L, -1))
                lv_argfail(L, i, "tensors['%s'] is a %s, expected a tensor (strings and numbers "
                           "go in the metadata table)", key, luaL_typename(L, -1));
            if (vn_tensor_is_freed(lv_totensor(L, -1)))
                lv_argfail(L, i, "tensors['%s'] was freed (t:free())", key);
            value = lv_totensor(L, -1);
        } else if (lua_type(L, -1) == LUA_TSTRING) {
            size_t vlen;
            value = lua_tolstring(L, -1, &vlen);
            if (strlen(value) != vlen)
                lv_argfail(L, i, "metadata['%s'] contains a NUL byte", key);
        } else if (lua_type(L, -1) == LUA_TNUMBER) {
            char buf[32];
            format_number(lua_tonumber(L, -1), buf, sizeof buf);
            lua_pushstring(L, buf);
            value = lua_tostring(L, -1);
            lua_rawseti(L, keep, (int)lua_objlen(L, keep) + 1);
        } else if (lua_type(L, -1) == LUA_TBOOLEAN) {
            value = lua_toboolean(L, -1) ? "true" : "false";
        } else {
            lv_argfail(L, i, "metadata['%s'] is a %s, expected a string, number or boolean", key,
                       luaL_typename(L, -1));
        }
        pairs[n++] = (lv_pair){key, value};
        lua_pop(L, 1);
    }
    qsort(pairs, (size_t)n, sizeof *pairs, by_key);
    *count = n;
    return pairs;
}

/* save(path, tensors, [metadata]): an atomic write (see vn_save). */
static int l_save(lua_State *L)
{
    const char *path = lv_string(L, 1, "path");
    lv_checktype(L, 2, LUA_TTABLE, "tensors");
    if (!lua_isnoneornil(L, 3)) lv_checktype(L, 3, LUA_TTABLE, "metadata");
    lua_settop(L, 3);
    lua_newtable(L); /* 4: strings made from numbers */
    int nt, nm = 0;
    lv_pair *tp = collect(L, 2, true, 4, &nt);
    lv_pair *mp = lua_isnil(L, 3) ? NULL : collect(L, 3, false, 4, &nm);
    const char **names = lua_newuserdata(L, sizeof *names * (size_t)(nt + 2 * nm + 1));
    vn_tensor **ts = lua_newuserdata(L, sizeof *ts * (size_t)(nt + 1));
    const char **keys = names + nt, **values = names + nt + nm;
    for (int k = 0; k < nt; k++) names[k] = tp[k].key, ts[k] = (vn_tensor *)tp[k].value;
    for (int k = 0; k < nm; k++) keys[k] = mp[k].key, values[k] = mp[k].value;
    vn_tensor_map m = {nt, names, ts, nm, keys, values};
    lv_status(L, vn_save(path, &m));
    return 0;
}

/* load(path) → tensors (name → tensor), metadata (key → string). */
static int l_load(lua_State *L)
{
    const char *path = lv_string(L, 1, "path");
    vn_tensor_map *m = vn_load(path);
    if (!m) return lv_fail(L);
    lua_createtable(L, 0, m->n);
    for (int k = 0; k < m->n; k++) {
        lua_pushstring(L, m->names[k]);
        lv_push(L, vn_tensor_retain(m->tensors[k]));
        lua_rawset(L, -3);
    }
    lua_createtable(L, 0, m->n_meta);
    for (int k = 0; k < m->n_meta; k++) {
        lua_pushstring(L, m->meta_values[k]);
        lua_setfield(L, -2, m->meta_keys[k]);
    }
    vn_tensor_map_free(m);
    return 2;
}

/* get_rng_state() → i64 tensor of 4 elements: the xoshiro256** state. */
static int l_get_rng_state(lua_State *L)
{
    uint64_t s[4];
    lv_status(L, vn_rng_get_state(s));
    return lv_push(L, vn_from_data(VN_I64, 1, (int64_t[]){4}, s));
}

/* set_rng_state(t): t as returned by get_rng_state. */
static int l_set_rng_state(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    if (vn_tensor_dtype(t) != VN_I64 || vn_tensor_numel(t) != 4)
        lv_argfail(L, 1, "expected the i64 tensor of 4 elements from get_rng_state, found %s with "
                   "%lld elements", vn_dtype_name(vn_tensor_dtype(t)),
                   (long long)vn_tensor_numel(t));
    uint64_t s[4];
    lv_status(L, vn_tensor_copy_out(t, s, sizeof s));
    lv_status(L, vn_rng_set_state(s));
    return 0;
}

const luaL_Reg lv_checkpoint_functions[] = {
    LV_REG(save) LV_REG(load) LV_REG(get_rng_state) LV_REG(set_rng_state)
    {NULL, NULL},
};
