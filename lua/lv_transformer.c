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
 *   venom.gpt_decoder(spec) → decoder              a GPT's decoding step in one
 *       call (vn_gpt_decoder_new; spec below); decoder:step(token, pos),
 *       then decoder:logits() → its logits as a Lua list;
 *       decoder:next(token, pos, temperature, top_k) → the step and a token
 *       drawn from its logits (vn_gpt_decoder_next);
 *       decoder:generate(out, n, temperature, top_k): n such draws from
 *       the list out's last token, appended to out; decoder:current() →
 *       false once a weight was freed or written in place; decoder:free()
 *   venom.sample_logits(list, temperature, top_k, u) → a 1-based index
 *       drawn from a list of logits (vn_sample_logits)
 *
 * Ids are 1-based here, like every index on the Lua side, and converted to
 * 0-based before they reach the engine. */
#include "lv.h"

#include <math.h>
#include <stdio.h>

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

/* ---- the GPT decoder (vn_gpt_decoder): a box with a __gc ----------------------
 *
 * spec = {wte = T, wpe = T, n_head = n, ln_f = norm, blocks = {block, ...}}
 *   norm  = {weight = T, bias = T or nil, eps = e, rms = bool}
 *   block = {ln1 = norm, ln2 = norm, qkv = lin, attn_proj = lin, fc = lin,
 *            mlp_proj = lin, cache = T}
 *   lin   = {weight = T, bias = T or nil}                 (f32)
 *         | {packed = T, gamma = g, norm = T or nil, norm_eps = e}  (ternary)
 * The engine checks every tensor; here a field of the wrong Lua type is an
 * error naming its path ("blocks[2].fc.weight"). */

#define LV_DECODER_MT "venom.GptDecoder"

/* The value at key of the table at index t, pushed; must be a table
 * (path.key names it). */
static void push_table_field(lua_State *L, int t, const char *key, const char *path)
{
    lua_getfield(L, t, key);
    if (!lua_istable(L, -1))
        lv_raise(L, "gpt_decoder: %s%s: expected a table, found %s", path, key, luaL_typename(L, -1));
}

/* l_gpt_decoder keeps a table at this stack index that holds every tensor
 * read from the spec until the decoder has retained them: a field may be
 * computed (an __index function) and referenced by nothing else, and a
 * collection before vn_gpt_decoder_new would free it under the pointer. */
#define SPEC_TENSORS 2

/* The tensor at key of the table at t, or NULL when absent; anchored in
 * the SPEC_TENSORS table. Messages name the field path, sub.key (sub NULL:
 * path key): the path's parts are joined only for a message (snprintf for
 * every field cost ~1 µs of a generation's set-up). */
static vn_tensor *tensor_field(lua_State *L, int t, const char *key, const char *path, const char *sub)
{
    lua_getfield(L, t, key);
    vn_tensor *x = NULL;
    if (!lua_isnil(L, -1) && !(x = lv_totensor(L, -1)))
        lv_raise(L, "gpt_decoder: %s%s%s%s: expected a tensor, found %s", path, sub ? sub : "", sub ? "." : "",
                 key, luaL_typename(L, -1));
    if (x) lua_rawseti(L, SPEC_TENSORS, (int)lua_objlen(L, SPEC_TENSORS) + 1); /* pops it */
    else lua_pop(L, 1);
    return x;
}

static double number_field(lua_State *L, int t, const char *key, const char *path, const char *sub,
                           double def)
{
    lua_getfield(L, t, key);
    double v = def;
    if (!lua_isnil(L, -1)) {
        if (lua_type(L, -1) != LUA_TNUMBER)
            lv_raise(L, "gpt_decoder: %s%s%s%s: expected a number, found %s", path, sub ? sub : "",
                     sub ? "." : "", key, luaL_typename(L, -1));
        v = lua_tonumber(L, -1);
    }
    lua_pop(L, 1);
    return v;
}

static int64_t int_field(lua_State *L, int t, const char *key)
{
    lua_getfield(L, t, key);
    int type = lua_type(L, -1);
    double v = lua_tonumber(L, -1);
    lua_pop(L, 1);
    if (type != LUA_TNUMBER) /* required: no default */
        return lv_raise(L, "gpt_decoder: %s: expected a whole number, found %s", key, lua_typename(L, type));
    if (!lv_whole(v)) return lv_raise(L, "gpt_decoder: %s = %g, expected a whole number", key, v);
    return (int64_t)v;
}

static vn_decode_norm norm_field(lua_State *L, int t, const char *key, const char *path)
{
    push_table_field(L, t, key, path);
    int n = lua_gettop(L);
    vn_decode_norm r = {tensor_field(L, n, "weight", path, key), tensor_field(L, n, "bias", path, key),
                        number_field(L, n, "eps", path, key, 1e-5), false};
    lua_getfield(L, n, "rms");
    r.rms = lua_toboolean(L, -1);
    lua_pop(L, 2);
    return r;
}

static vn_decode_linear linear_field(lua_State *L, int t, const char *key, const char *path)
{
    push_table_field(L, t, key, path);
    int n = lua_gettop(L);
    vn_decode_linear r = {.weight = tensor_field(L, n, "weight", path, key),
                          .bias = tensor_field(L, n, "bias", path, key),
                          .packed = tensor_field(L, n, "packed", path, key),
                          .gamma = (float)number_field(L, n, "gamma", path, key, NAN), /* required with packed */
                          .norm = tensor_field(L, n, "norm", path, key),
                          .norm_eps = number_field(L, n, "norm_eps", path, key, 1e-6)};
    lua_pop(L, 1);
    return r;
}

static int decoder_gc(lua_State *L)
{
    vn_gpt_decoder **slot = luaL_checkudata(L, 1, LV_DECODER_MT);
    vn_gpt_decoder_free(*slot);
    *slot = NULL;
    return 0;
}

/* token and pos (1-based) in range, or an error saying so in 1-based terms
 * (the engine's would count from 0). */
static void check_step(lua_State *L, vn_gpt_decoder *d, int64_t token, int64_t pos)
{
    int64_t V = vn_gpt_decoder_vocab(d), T = vn_gpt_decoder_block_size(d);
    if (token < 1 || token > V || pos < 1 || pos > T)
        lv_raise(L, "gpt_decoder: token %lld at position %lld, expected a token in 1..%lld at a "
                 "position in 1..%lld", (long long)token, (long long)pos, (long long)V, (long long)T);
}

/* decoder:step(token, pos), both 1-based: runs the step, whose logits
 * decoder:logits() and decoder:sample(...) read. */
static int decoder_step(lua_State *L)
{
    vn_gpt_decoder **slot = (vn_gpt_decoder **)lv_box_check(L, 1, LV_DECODER_MT, "a GPT decoder");
    if (!*slot) return lv_raise(L, "gpt_decoder: step on a freed decoder");
    int64_t token = lv_int(L, 2, "token"), pos = lv_int(L, 3, "pos");
    check_step(L, *slot, token, pos);
    if (!vn_gpt_decoder_step(*slot, token - 1, pos - 1)) return lv_fail(L);
    return 0;
}

/* decoder:logits() → the last step's logits, a list of vocab numbers (a new
 * table each call: the caller may edit it). */
static int decoder_logits(lua_State *L)
{
    vn_gpt_decoder **slot = (vn_gpt_decoder **)lv_box_check(L, 1, LV_DECODER_MT, "a GPT decoder");
    if (!*slot) return lv_raise(L, "gpt_decoder: logits of a freed decoder");
    int64_t V = vn_gpt_decoder_vocab(*slot);
    const float *logits = vn_gpt_decoder_logits(*slot);
    if (!logits) return lv_fail(L);
    lua_createtable(L, (int)V, 0);
    for (int64_t i = 0; i < V; i++) {
        lua_pushnumber(L, logits[i]);
        lua_rawseti(L, -2, (int)(i + 1));
    }
    return 1;
}

/* The sampling options at i and i + 1: temperature, top_k (nil: all); the
 * engine checks their ranges. */
static void sample_args(lua_State *L, int i, double *temperature, int64_t *top_k)
{
    *temperature = lv_number(L, i, "temperature");
    *top_k = lua_isnoneornil(L, i + 1) ? 0 : lv_int(L, i + 1, "top_k");
}

/* decoder:next(token, pos, temperature, top_k) → the next token (1-based):
 * the step and the draw in one call (vn_gpt_decoder_next). */
static int decoder_next(lua_State *L)
{
    vn_gpt_decoder **slot = (vn_gpt_decoder **)lv_box_check(L, 1, LV_DECODER_MT, "a GPT decoder");
    if (!*slot) return lv_raise(L, "gpt_decoder: next on a freed decoder");
    int64_t token = lv_int(L, 2, "token"), pos = lv_int(L, 3, "pos"), top_k, next;
    double temperature;
    sample_args(L, 4, &temperature, &top_k);
    check_step(L, *slot, token, pos);
    lv_status(L, vn_gpt_decoder_next(*slot, token - 1, pos - 1, temperature, top_k, &next));
    lua_pushnumber(L, (lua_Number)(next + 1));
    return 1;
}

/* decoder:generate(out, n, temperature, top_k): n times decoder:next on
 * the last token of the list out at its position #out, appending each drawn
 * token to out, in one call: a Lua call per token cost ~0.3 µs of LuaJIT
 * stitching and argument checks, ~3% of a narrow packed model's token
 * (bench/RESULTS.md, issue 20). The positions must stay within block_size
 * (#out + n − 1 ≤ block_size). */
static int decoder_generate(lua_State *L)
{
    vn_gpt_decoder **slot = (vn_gpt_decoder **)lv_box_check(L, 1, LV_DECODER_MT, "a GPT decoder");
    if (!*slot) return lv_raise(L, "gpt_decoder: generate on a freed decoder");
    lv_checktype(L, 2, LUA_TTABLE, "out");
    int64_t n = lv_int(L, 3, "n"), top_k, len = (int64_t)lua_objlen(L, 2);
    double temperature;
    sample_args(L, 4, &temperature, &top_k);
    int64_t T = vn_gpt_decoder_block_size(*slot);
    if (n < 0 || len < 1 || (n > 0 && len + n - 1 > T))
        return lv_raise(L, "gpt_decoder: generate %lld tokens after %lld, expected n ≥ 0 and a non-empty "
                        "list whose positions stay within block_size %lld", (long long)n, (long long)len,
                        (long long)T);
    lua_rawgeti(L, 2, (int)len);
    double last = lua_tonumber(L, -1);
    if (lua_type(L, -1) != LUA_TNUMBER || !lv_whole(last) || fabs(last) > 0x1p53) {
        bool number = lua_type(L, -1) == LUA_TNUMBER; /* (tostring would make a string a number) */
        return lv_raise(L, "gpt_decoder: generate: out[%lld] is %s%s, expected a token id in 1..%lld",
                        (long long)len, number ? "" : "a ", number ? lua_tostring(L, -1) : luaL_typename(L, -1),
                        (long long)vn_gpt_decoder_vocab(*slot));
    }
    int64_t token = (int64_t)last;
    lua_pop(L, 1);
    for (int64_t i = 0; i < n; i++, len++) {
        int64_t next;
        check_step(L, *slot, token, len);
        lv_status(L, vn_gpt_decoder_next(*slot, token - 1, len - 1, temperature, top_k, &next));
        token = next + 1;
        lua_pushnumber(L, (lua_Number)token);
        lua_rawseti(L, 2, (int)(len + 1));
    }
    return 0;
}

/* decoder:current() → false once a tensor of its spec other than a cache
 * was freed or written in place since it was made (vn_gpt_decoder_current),
 * or the decoder was freed: a kept decoder is then made again. */
static int decoder_current(lua_State *L)
{
    vn_gpt_decoder **slot = (vn_gpt_decoder **)lv_box_check(L, 1, LV_DECODER_MT, "a GPT decoder");
    lua_pushboolean(L, *slot && vn_gpt_decoder_current(*slot));
    return 1;
}

static const luaL_Reg decoder_methods[] = {
    {"step", decoder_step}, {"logits", decoder_logits}, {"next", decoder_next},
    {"generate", decoder_generate}, {"current", decoder_current}, {"free", decoder_gc}, {NULL, NULL}};

/* venom.sample_logits(list, temperature, top_k, u) → a 1-based index drawn
 * from a Lua list of logits (vn_sample_logits); an entry that is not a
 * number, or is NaN or +inf, is an error naming its 1-based position. */
static int l_sample_logits(lua_State *L)
{
    lv_checktype(L, 1, LUA_TTABLE, "logits");
    double temperature, u = lv_number(L, 4, "u");
    int64_t top_k, index;
    sample_args(L, 2, &temperature, &top_k);
    int n = (int)lua_objlen(L, 1);
    double *l = lua_newuserdata(L, sizeof(double) * (size_t)(n ? n : 1)); /* collected on error */
    for (int i = 0; i < n; i++) {
        lua_rawgeti(L, 1, i + 1);
        int type = lua_type(L, -1);
        l[i] = lua_tonumber(L, -1);
        if (type != LUA_TNUMBER || l[i] != l[i] || l[i] == HUGE_VAL) {
            char found[64];
            if (type == LUA_TNUMBER) snprintf(found, sizeof found, "%g", l[i]);
            else snprintf(found, sizeof found, "a %s", luaL_typename(L, -1));
            return lv_raise(L, "sample_logits: logit %d is %s, expected a finite number or -inf", i + 1,
                            found);
        }
        lua_pop(L, 1);
    }
    lv_status(L, vn_sample_logits(l, n, temperature, top_k, u, &index));
    lua_pushnumber(L, (lua_Number)(index + 1));
    return 1;
}

static int l_gpt_decoder(lua_State *L)
{
    lv_checktype(L, 1, LUA_TTABLE, "spec");
    lua_settop(L, 1);
    if (luaL_newmetatable(L, LV_DECODER_MT)) {
        lua_pushcfunction(L, decoder_gc);
        lua_setfield(L, -2, "__gc");
        lua_newtable(L);
        lv_setfuncs(L, decoder_methods);
        lua_setfield(L, -2, "__index");
    }
    lua_pop(L, 1);
    lua_newtable(L); /* at SPEC_TENSORS */
    vn_gpt_decoder_spec spec = {.wte = tensor_field(L, 1, "wte", "", NULL),
                                .wpe = tensor_field(L, 1, "wpe", "", NULL),
                                .ln_f = norm_field(L, 1, "ln_f", ""),
                                .n_head = int_field(L, 1, "n_head")};
    push_table_field(L, 1, "blocks", ""); /* at 3 */
    spec.n_layer = (int64_t)lua_objlen(L, 3);
    /* the blocks' array as a userdata: collected if a bad field raises */
    vn_decode_block *blocks = lua_newuserdata(L, sizeof *blocks * (size_t)(spec.n_layer ? spec.n_layer : 1));
    for (int64_t i = 0; i < spec.n_layer; i++) {
        char path[32];
        snprintf(path, sizeof path, "blocks[%lld].", (long long)i + 1);
        lua_rawgeti(L, 3, (int)(i + 1));
        if (!lua_istable(L, -1))
            return lv_raise(L, "gpt_decoder: blocks[%lld]: expected a table, found %s", (long long)i + 1,
                            luaL_typename(L, -1));
        int b = lua_gettop(L);
        blocks[i] = (vn_decode_block){
            .ln1 = norm_field(L, b, "ln1", path), .ln2 = norm_field(L, b, "ln2", path),
            .qkv = linear_field(L, b, "qkv", path), .attn_proj = linear_field(L, b, "attn_proj", path),
            .fc = linear_field(L, b, "fc", path), .mlp_proj = linear_field(L, b, "mlp_proj", path),
            .cache = tensor_field(L, b, "cache", path, NULL)};
        lua_pop(L, 1);
    }
    spec.blocks = blocks;
    vn_gpt_decoder **slot = (vn_gpt_decoder **)lv_box_new(L, LV_DECODER_MT);
    if (!(*slot = vn_gpt_decoder_new(&spec))) return lv_fail(L);
    return 1;
}

const luaL_Reg lv_transformer_functions[] = {
    LV_REG(embedding) LV_REG(layer_norm) LV_REG(causal_attention)
    LV_REG(causal_self_attention) LV_REG(causal_self_attention_last) LV_REG(bias_gelu)
    LV_REG(gpt_decoder) LV_REG(sample_logits)
    {NULL, NULL},
};
