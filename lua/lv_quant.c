/* lv_quant.c — BitNet b1.58 in the venom.core Lua module (engine/quant/,
 * formulas in engine/include/venom/quant.h):
 *
 *   core.bitlinear(x, w) → y                 differentiable (STE), CPU
 *   core.ternary_quantize(w) → γ·W̃, γ
 *   core.ternary_pack(w) → packed, γ          u8 (N, 32·⌈K/128⌉)
 *   core.ternary_unpack(packed, K) → W̃        f32 in {−1, 0, 1}
 *   core.ternary_check(packed, K)             raises on corrupt data
 *   core.ternary_matmul(x, packed, K, γ) → y  int8 × ternary inference
 *   core.ternary_isa() → "avx512vnni" | "avx2" | "portable"
 *   core.ternary_kernel(rows) → the kernel a product of that many rows runs (large weights)
 *   core.ternary_set_kernel(name)             "auto" or a kernel: force it
 *   core.rms_norm(x, weight, eps) → y          differentiable (nn.RMSNorm)
 *   core.ternary_fake_quant(w, count) → γ·W̃  differentiable (STE)
 *   core.int8_fake_quant(x) → x̃/s             differentiable (STE)
 *   core.ternary_vnm_pack(S) → packed, γ       S a V:N:M matrix
 *   core.ternary_vnm_check(packed, S)         raises on corrupt data
 *   core.ternary_vnm_matmul(x, S, packed, γ) → y
 *
 * nn.BitLinear (lua/venom/nn_quant.lua) and venom.export_ternary build on
 * them. */
#include "lv.h"

#include <string.h>

static int l_bitlinear(lua_State *L)
{
    vn_tensor *x = lv_check(L, 1), *w = lv_check(L, 2);
    return lv_push(L, vn_bitlinear(x, w));
}

/* Pushes t and γ, or raises the engine's error. */
static int push_with_gamma(lua_State *L, vn_tensor *t, float gamma)
{
    if (!t) return lv_fail(L);
    lv_push(L, t);
    lua_pushnumber(L, gamma);
    return 2;
}

static int l_ternary_quantize(lua_State *L)
{
    float gamma = 0;
    vn_tensor *t = vn_ternary_quantize(lv_check(L, 1), &gamma);
    return push_with_gamma(L, t, gamma);
}

static int l_ternary_pack(lua_State *L)
{
    float gamma = 0;
    vn_tensor *t = vn_ternary_pack(lv_check(L, 1), &gamma);
    return push_with_gamma(L, t, gamma);
}

static int l_ternary_unpack(lua_State *L)
{
    vn_tensor *p = lv_check(L, 1);
    return lv_push(L, vn_ternary_unpack(p, lv_int(L, 2, "K")));
}

static int l_ternary_check(lua_State *L)
{
    vn_tensor *p = lv_check(L, 1);
    lv_status(L, vn_ternary_check(p, lv_int(L, 2, "K")));
    return 0;
}

/* Checks the codes on every call (one vectorised pass over the bytes), so
 * packed data from anywhere never gives silent garbage. */
static int l_ternary_matmul(lua_State *L)
{
    vn_tensor *x = lv_check(L, 1), *p = lv_check(L, 2);
    int64_t K = lv_int(L, 3, "K");
    double gamma = lv_number(L, 4, "gamma");
    lv_status(L, vn_ternary_check(p, K));
    return lv_push(L, vn_ternary_matmul(x, p, K, (float)gamma));
}

static int l_rms_norm(lua_State *L)
{
    vn_tensor *x = lv_check(L, 1), *w = lv_check(L, 2);
    return lv_push(L, vn_rms_norm(x, w, lv_number(L, 3, "eps")));
}

static int l_ternary_isa(lua_State *L)
{
    lua_pushstring(L, vn_ternary_isa());
    return 1;
}

static int l_ternary_set_kernel(lua_State *L)
{
    size_t len;
    const char *name = luaL_checklstring(L, 1, &len);
    if (strlen(name) != len) /* the C API would see only the part before the NUL */
        return lv_argfail(L, 1, "kernel name has a NUL byte at %zu", strlen(name));
    lv_status(L, vn_ternary_set_kernel(name));
    return 0;
}

static int l_ternary_kernel(lua_State *L)
{
    int64_t rows = lv_int(L, 1, "rows");
    if (rows < 0) return lv_argfail(L, 1, "rows must be >= 0, found %lld", (long long)rows);
    lua_pushstring(L, vn_ternary_kernel(rows));
    return 1;
}

static int l_ternary_fake_quant(lua_State *L)
{
    vn_tensor *w = lv_check(L, 1);
    return lv_push(L, vn_ternary_fake_quant(w, lv_int(L, 2, "count")));
}

static int l_int8_fake_quant(lua_State *L) { return lv_push(L, vn_int8_fake_quant(lv_check(L, 1))); }

static int l_ternary_vnm_pack(lua_State *L)
{
    float gamma = 0;
    vn_tensor *t = vn_ternary_vnm_pack(lv_check_vnm(L, 1), &gamma);
    return push_with_gamma(L, t, gamma);
}

static int l_ternary_vnm_check(lua_State *L)
{
    vn_tensor *p = lv_check(L, 1);
    lv_status(L, vn_ternary_vnm_check(p, lv_check_vnm(L, 2)));
    return 0;
}

/* As l_ternary_matmul: the codes (and the pattern's zeros) are checked on
 * every call. */
static int l_ternary_vnm_matmul(lua_State *L)
{
    vn_tensor *x = lv_check(L, 1);
    vn_vnm *s = lv_check_vnm(L, 2);
    vn_tensor *p = lv_check(L, 3);
    double gamma = lv_number(L, 4, "gamma");
    lv_status(L, vn_ternary_vnm_check(p, s));
    return lv_push(L, vn_ternary_vnm_matmul(x, s, p, (float)gamma));
}

const luaL_Reg lv_quant_functions[] = {
    LV_REG(bitlinear) LV_REG(ternary_quantize) LV_REG(ternary_pack) LV_REG(ternary_unpack)
    LV_REG(ternary_check) LV_REG(ternary_matmul) LV_REG(ternary_isa) LV_REG(ternary_set_kernel)
    LV_REG(ternary_kernel) LV_REG(ternary_fake_quant)
    LV_REG(int8_fake_quant) LV_REG(rms_norm) LV_REG(ternary_vnm_pack) LV_REG(ternary_vnm_check) LV_REG(ternary_vnm_matmul)
    {NULL, NULL},
};
