/* lv_transformer.c — the transformer ops of the venom.core Lua module (engine/
 * ops_transformer.c), all differentiable:
 *
 *   venom.embedding(weight, ids) → out            weight (V, D), ids (...) of
 *       1-based rows 1..V (an integer tensor) → (..., D)
 *   venom.layer_norm(x, [gamma], [beta], [eps = 1e-5]) → y
 *       over the last dim of x; gamma/beta (D) or nil
 *   venom.causal_attention(q, k, v) → out          (B, H, T, Dh) each:
 *       softmax(q·kᵀ/√Dh with future positions masked)·v
 *   venom.causal_self_attention(qkv, n_head) → out  qkv (B, T, 3C) = [q | k | v]
 *       → (B, T, C): the same attention over n_head heads of C / n_head,
 *       split and merged by the op (on CUDA without copies)
 *   venom.causal_self_attention_last(qkv, n_head) → out (B, 1, C): its last
 *       position alone, for decoding with a KV cache (CPU, no gradient)
 *   venom.bias_gelu(x, bias) → gelu(x + bias)       x (..., D), bias (D)
 *
 * Ids are 1-based here, like every index on the Lua side, and converted to
 * 0-based before they reach the engine. */
#include "lv.h"

static int l_embedding(lua_State *L)
{
    vn_tensor *w = lv_check(L, 1);
    if (vn_tensor_ndim(w) != 2) {
        char s[128];
        return lv_raise(L, "embedding: expected weight of shape (V, D), found %s",
                        vn_shape_str(vn_tensor_ndim(w), vn_tensor_shape(w), s, sizeof s));
    }
    vn_tensor *ids = lv_indices0(L, 2, vn_tensor_shape(w)[0], "embedding", "ids");
    vn_tensor *r = vn_embedding(w, ids);
    vn_tensor_release(ids);
    return lv_push(L, r);
}

static int l_layer_norm(lua_State *L)
{
    vn_tensor *x = lv_check(L, 1), *gamma = lv_optcheck(L, 2), *beta = lv_optcheck(L, 3);
    return lv_push(L, vn_layer_norm(x, gamma, beta, lv_optnumber(L, 4, 1e-5, "eps")));
}

static int l_causal_attention(lua_State *L)
{
    vn_tensor *q = lv_check(L, 1), *k = lv_check(L, 2), *v = lv_check(L, 3);
    return lv_push(L, vn_causal_attention(q, k, v));
}

static int l_causal_self_attention(lua_State *L)
{
    vn_tensor *qkv = lv_check(L, 1);
    return lv_push(L, vn_causal_self_attention(qkv, lv_int(L, 2, "n_head")));
}

static int l_causal_self_attention_last(lua_State *L)
{
    vn_tensor *qkv = lv_check(L, 1);
    return lv_push(L, vn_causal_self_attention_last(qkv, lv_int(L, 2, "n_head")));
}

static int l_bias_gelu(lua_State *L)
{
    vn_tensor *x = lv_check(L, 1), *bias = lv_check(L, 2);
    return lv_push(L, vn_bias_gelu(x, bias));
}

const luaL_Reg lv_transformer_functions[] = {
    LV_REG(embedding) LV_REG(layer_norm) LV_REG(causal_attention)
    LV_REG(causal_self_attention) LV_REG(causal_self_attention_last) LV_REG(bias_gelu)
    {NULL, NULL},
};
