/* lv_conv.c — convolutions, pooling, batch norm and flatten in the
 * venom.core Lua module (engine/ops_conv.c, ops_pool.c, ops_batchnorm.c;
 * venom/conv.h), all differentiable, on the CPU or CUDA. A size pair (kernel, stride,
 * padding, dilation) is a number n, meaning {n, n}, or a table {h, w}.
 *
 *   venom.conv2d(x, weight, [bias], [stride=1], [padding=0], [dilation=1], [groups=1])
 *       x (B, C_in, H, W), weight (C_out, C_in/groups, kh, kw), bias (C_out)
 *   venom.im2col(x, kernel, [stride=1], [padding=0], [dilation=1]) → (B, C·kh·kw, Ho·Wo)
 *   venom.max_pool2d(x, kernel, [stride=kernel], [padding=0])
 *   venom.avg_pool2d(x, kernel, [stride=kernel], [padding=0])
 *   venom.adaptive_avg_pool2d(x, size)                size: n or {oh, ow}
 *   venom.batch_norm(x, weight, bias, running_mean, running_var, training,
 *                    [momentum=0.1], [eps=1e-5])   weight..running_var may be nil
 *   x:flatten([start_dim=1], [end_dim=-1])          1-based dims, as everywhere in Lua */
#include "lv.h"

/* The pair at i (a number or {h, w}), or def when absent. */
static void lv_pair(lua_State *L, int i, int64_t def0, int64_t def1, const char *what,
                    int64_t out[2])
{
    if (lua_isnoneornil(L, i)) {
        out[0] = def0;
        out[1] = def1;
    } else if (lua_type(L, i) == LUA_TNUMBER) {
        out[0] = out[1] = lv_int(L, i, what);
    } else if (lua_type(L, i) == LUA_TTABLE && lua_objlen(L, i) == 2) {
        for (int k = 0; k < 2; k++) {
            lua_rawgeti(L, i, k + 1);
            out[k] = lv_int(L, -1, what);
            lua_pop(L, 1);
        }
    } else {
        lv_argfail(L, i, "%s must be an integer or a {height, width} pair, found %s", what,
                   lua_type(L, i) == LUA_TTABLE ? "a table that is not a pair"
                                                : luaL_typename(L, i));
    }
}

static int l_conv2d(lua_State *L)
{
    vn_tensor *x = lv_check(L, 1), *w = lv_check(L, 2), *b = lv_optcheck(L, 3);
    int64_t stride[2], padding[2], dilation[2];
    lv_pair(L, 4, 1, 1, "stride", stride);
    lv_pair(L, 5, 0, 0, "padding", padding);
    lv_pair(L, 6, 1, 1, "dilation", dilation);
    int64_t groups = lua_isnoneornil(L, 7) ? 1 : lv_int(L, 7, "groups");
    return lv_push(L, vn_conv2d(x, w, b, stride, padding, dilation, groups));
}

static int l_im2col(lua_State *L)
{
    vn_tensor *x = lv_check(L, 1);
    int64_t kernel[2], stride[2], padding[2], dilation[2];
    lv_pair(L, 2, 0, 0, "kernel size", kernel);
    lv_pair(L, 3, 1, 1, "stride", stride);
    lv_pair(L, 4, 0, 0, "padding", padding);
    lv_pair(L, 5, 1, 1, "dilation", dilation);
    return lv_push(L, vn_im2col(x, kernel, stride, padding, dilation));
}

/* max_pool2d and avg_pool2d: (x, kernel, [stride = kernel], [padding = 0]). */
#define LV_POOL_OPS(X) X(max_pool2d) X(avg_pool2d)
#define LV_POOL_WRAPPER(name)                                                   \
    static int l_##name(lua_State *L)                                           \
    {                                                                           \
        vn_tensor *x = lv_check(L, 1);                                          \
        int64_t kernel[2], stride[2], padding[2];                               \
        if (lua_isnoneornil(L, 2)) lv_argfail(L, 2, "kernel size expected");    \
        lv_pair(L, 2, 0, 0, "kernel size", kernel);                             \
        lv_pair(L, 3, kernel[0], kernel[1], "stride", stride);                  \
        lv_pair(L, 4, 0, 0, "padding", padding);                                \
        return lv_push(L, vn_##name(x, kernel, stride, padding));               \
    }
LV_POOL_OPS(LV_POOL_WRAPPER)

static int l_adaptive_avg_pool2d(lua_State *L)
{
    vn_tensor *x = lv_check(L, 1);
    int64_t size[2];
    if (lua_isnoneornil(L, 2)) lv_argfail(L, 2, "output size expected");
    lv_pair(L, 2, 0, 0, "output size", size);
    return lv_push(L, vn_adaptive_avg_pool2d(x, size[0], size[1]));
}

static int l_batch_norm(lua_State *L)
{
    vn_tensor *x = lv_check(L, 1), *w = lv_optcheck(L, 2), *b = lv_optcheck(L, 3);
    vn_tensor *rm = lv_optcheck(L, 4), *rv = lv_optcheck(L, 5);
    if (lua_type(L, 6) != LUA_TBOOLEAN)
        lv_argfail(L, 6, "training must be a boolean, found %s", luaL_typename(L, 6));
    bool training = lua_toboolean(L, 6);
    double momentum = lv_optnumber(L, 7, 0.1, "momentum"), eps = lv_optnumber(L, 8, 1e-5, "eps");
    return lv_push(L, vn_batch_norm(x, w, b, rm, rv, training, momentum, eps));
}

static int l_flatten(lua_State *L)
{
    vn_tensor *x = lv_check(L, 1);
    int n = vn_tensor_ndim(x) ? vn_tensor_ndim(x) : 1;
    int start = lv_optdim(L, 2, n, 0), end = lv_optdim(L, 3, n, n - 1);
    return lv_push(L, vn_flatten(x, start, end));
}

const luaL_Reg lv_conv_methods[] = {
    LV_REG(flatten)
    {NULL, NULL},
};

const luaL_Reg lv_conv_functions[] = {
    LV_REG(conv2d) LV_REG(im2col) LV_POOL_OPS(LV_REG) LV_REG(adaptive_avg_pool2d)
    LV_REG(batch_norm)
    {NULL, NULL},
};
