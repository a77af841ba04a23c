/* lv_image.c — images (stb_image) and directories in the venom.core Lua
 * module; venom.image (lua/venom/image.lua) and venom.data.ImageFolder
 * (lua/venom/data_image.lua) are built on these. Pixel positions are 1-based
 * in Lua, 0-based in the engine.
 *
 *   core.image_load(path [, channels])            → u8 (H, W, C)
 *   core.image_load_batch(paths, channels, threads) → {images...}, in the order of paths
 *   core.image_save(path, img [, quality])
 *   core.image_resize(img, height, width)         → u8 image
 *   core.image_crop(img, top, left, height, width [, fill]) → u8 image (top, left 1-based)
 *   core.image_hflip(img)                         → u8 image
 *   core.image_to_float(img)                      → f32 (C, H, W) or (B, C, H, W) of x/255
 *   core.dir_list(path)                           → names (sorted), is_dir (booleans)
 *   core.make_dir(path)                           (mkdir -p) */
#include "lv.h"

static int channels_at(lua_State *L, int i)
{
    if (lua_isnoneornil(L, i)) return 0;
    int64_t c = lv_int(L, i, "channels");
    if (c < 0 || c > 4)
        return lv_argfail(L, i, "channels must be 0 (as stored) or 1..4, found %lld", (long long)c);
    return (int)c;
}

static int l_image_load(lua_State *L)
{
    const char *path = lv_string(L, 1, "image_load: path");
    return lv_push(L, vn_image_load(path, channels_at(L, 2)));
}

static int l_image_load_batch(lua_State *L)
{
    lv_checktype(L, 1, LUA_TTABLE, "image_load_batch: paths (a list of file names)");
    int channels = channels_at(L, 2);
    int64_t threads = lv_int(L, 3, "image_load_batch: threads");
    if (threads < 0 || threads > 1024)
        return lv_argfail(L, 3, "image_load_batch: threads must be 0..1024, found %lld",
                          (long long)threads);
    int n = (int)lua_objlen(L, 1);
    /* Scratch arrays as userdata: collected even if a check below raises. */
    const char **paths = lua_newuserdata(L, sizeof *paths * ((size_t)n + 1));
    vn_tensor **out = lua_newuserdata(L, sizeof *out * ((size_t)n + 1));
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, 1, i + 1);
        if (lua_type(L, -1) != LUA_TSTRING)
            return lv_raise(L, "image_load_batch: paths[%d] must be a string, found %s", i + 1,
                            luaL_typename(L, -1));
        paths[i] = lua_tostring(L, -1); /* kept alive by the table at 1 */
        lua_pop(L, 1);
    }
    lv_status(L, vn_image_load_batch(n, paths, channels, (int)threads, out));
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lv_push(L, out[i]);
        lua_rawseti(L, -2, i + 1);
    }
    return 1;
}

static int l_image_save(lua_State *L)
{
    const char *path = lv_string(L, 1, "image_save: path");
    vn_tensor *img = lv_check(L, 2);
    int64_t quality = lua_isnoneornil(L, 3) ? 0 : lv_int(L, 3, "image_save: quality");
    if (!lua_isnoneornil(L, 3) && (quality < 1 || quality > 100))
        return lv_argfail(L, 3, "image_save: quality must be 1..100, found %lld",
                          (long long)quality);
    lv_status(L, vn_image_save(path, img, (int)quality));
    return 0;
}

static int l_image_resize(lua_State *L)
{
    vn_tensor *img = lv_check(L, 1);
    int64_t h = lv_int(L, 2, "image_resize: height"), w = lv_int(L, 3, "image_resize: width");
    return lv_push(L, vn_image_resize(img, h, w));
}

static int l_image_crop(lua_State *L)
{
    vn_tensor *img = lv_check(L, 1);
    int64_t top = lv_int(L, 2, "image_crop: top"), left = lv_int(L, 3, "image_crop: left");
    int64_t h = lv_int(L, 4, "image_crop: height"), w = lv_int(L, 5, "image_crop: width");
    int64_t fill = lua_isnoneornil(L, 6) ? 0 : lv_int(L, 6, "image_crop: fill");
    if (fill < 0 || fill > 255)
        return lv_argfail(L, 6, "image_crop: fill must be 0..255, found %lld", (long long)fill);
    return lv_push(L, vn_image_crop(img, top - 1, left - 1, h, w, (int)fill));
}

static int l_image_hflip(lua_State *L) { return lv_push(L, vn_image_hflip(lv_check(L, 1))); }

static int l_image_to_float(lua_State *L) { return lv_push(L, vn_image_to_float(lv_check(L, 1))); }

static int l_dir_list(lua_State *L)
{
    const char *path = lv_string(L, 1, "dir_list: path");
    int n;
    char **names;
    bool *is_dir;
    lv_status(L, vn_dir_list(path, &n, &names, &is_dir));
    lua_createtable(L, n, 0);
    lua_createtable(L, n, 0);
    for (int i = 0; i < n; i++) {
        lua_pushstring(L, names[i]);
        lua_rawseti(L, -3, i + 1);
        lua_pushboolean(L, is_dir[i]);
        lua_rawseti(L, -2, i + 1);
    }
    vn_dir_list_free(n, names, is_dir);
    return 2;
}

static int l_make_dir(lua_State *L)
{
    lv_status(L, vn_make_dir(lv_string(L, 1, "make_dir: path")));
    return 0;
}

const luaL_Reg lv_image_functions[] = {
    LV_REG(image_load) LV_REG(image_load_batch) LV_REG(image_save) LV_REG(image_resize)
    LV_REG(image_crop) LV_REG(image_hflip) LV_REG(image_to_float) LV_REG(dir_list)
    LV_REG(make_dir)
    {NULL, NULL},
};
