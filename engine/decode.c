/* decode.c — one decoding step of a GPT (models/gpt.lua) in a single call:
 * the new token's row through every block with the KV cache, then the
 * final norm and the tied head, for batch 1 (venom/transformer.h,
 * vn_gpt_decoder_*).
 *
 * Why: at batch 1 on a narrow model (tutorial 5: width 128) a step is some
 * 25 small ops per block, and run one by one from Lua each pays its
 * argument checks, a tensor allocation and a Lua ↔ C crossing, which cost
 * more than the products themselves (bench/RESULTS.md, issue 20). Here the
 * checks happen once, when the decoder is made, and a step writes into
 * scratch rows it keeps.
 *
 * The same numbers as the ops: each step calls the row functions those ops
 * run (vn__layer_norm_row, vnq__rms_row, vn__attention_last_row,
 * vn__gelu_f32, vnq__quantize_into + vnq__product, vn__sgemm with the
 * arguments vn_linear passes for one row), or ones that give their bits in
 * fewer passes (a packed layer's RMSNorm and quantiser in one,
 * vnq__rms_quantize_row; its product on the weights re-laid with one row
 * per vector lane, vnq__lanes_product, where the kernel is VNNI's), so a
 * decoder's logits are bit for bit those of models/gpt.lua's step through
 * the ops (tests/lua/test_gpt_decoder.lua checks this). f32 Linear layers and packed ternary
 * BitLinear layers both go through here, so that their comparison
 * (bench/ternary_generate.lua) measures the products, not the overheads. */
#include "blas.h"
#include "internal.h"
#include "quant_internal.h"
#include "vec_math.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { QKV, ATTN_PROJ, FC, MLP_PROJ, N_LINEAR };
static const char *const linear_names[N_LINEAR] = {"qkv", "attn_proj", "fc", "mlp_proj"};

typedef struct {
    const float *weight, *bias; /* NULL weight: no norm */
    double eps;
    bool rms;
} norm_plan;

typedef struct {
    const float *weight, *bias; /* f32 layer (weight NULL when packed) */
    const uint8_t *packed;      /* packed ternary layer */
    uint8_t *lanes;             /* its copy re-laid for vnq__lanes_product, or NULL */
    size_t lanes_bytes;
    float gamma;
    const float *norm; /* the RMSNorm before a packed layer, or NULL */
    double norm_eps;
    int64_t N, K, Kp;
} linear_plan;

typedef struct {
    norm_plan ln1, ln2;
    linear_plan lin[N_LINEAR];
    float *cache; /* (T, 3C) */
} block_plan;

struct vn_gpt_decoder {
    int64_t V, C, H, T, n_layer, n_head;
    const float *wte, *wpe;
    norm_plan ln_f;
    block_plan *blocks;
    /* Every tensor read or written, retained: a step first checks that
     * none was freed since (vn_tensor_free), and they are released at the
     * end. */
    vn_tensor **held;
    int n_held;
    /* Each held tensor's storage version when it was read, and whether it
     * is a cache (written by the steps, so not watched):
     * vn_gpt_decoder_current. */
    uint32_t *version;
    bool *is_cache;
    float *buf; /* x, h, a, b, the hidden pair, the norm's row, logits */
    float *x, *h, *a, *b, *hid, *act, *row, *logits;
    double *dlogits; /* the logits as vn_sample_logits takes them */
    bool stepped;    /* logits hold a step's */
    void *qmem; /* the int8 row of a packed product */
    vnq_rows q;
    /* The packed products' kernel, chosen once (vnq__product: the choice
     * reads the environment, ~2% of a narrow model's step). */
    vnq_kernel kernel;
    /* Whether the packed products run on re-laid copies of the weights
     * (vnq__lanes_product): where the kernel chosen is VNNI's and the
     * largest packed weight is small enough (vnq__lanes_usable). */
    bool lanes;
};

/* ---- checks at creation ----------------------------------------------------------- */

static const char OP[] = "gpt_decoder";

/* Where a tensor of the spec sits, for messages: "block 2 of 3: fc" (block
 * ≥ 0, counted from 1 in messages for C and Lua callers alike) or "ln_f"
 * (block < 0), then the field ("weight", ...; NULL: none). The text is
 * formatted only for a message: snprintf for every tensor was ~8% of a
 * one-token generation (bench/RESULTS.md, issue 20). */
typedef struct {
    int64_t block, n_layer;
    const char *part;
} place;

typedef struct {
    char s[112];
} name_text;

static name_text name_of(const place *pl, const char *field)
{
    name_text t;
    const char *sp = field ? " " : "", *f = field ? field : "";
    if (pl->block >= 0)
        snprintf(t.s, sizeof t.s, "block %lld of %lld: %s%s%s", (long long)pl->block + 1,
                 (long long)pl->n_layer, pl->part, sp, f);
    else snprintf(t.s, sizeof t.s, "%s%s%s", pl->part, sp, f);
    return t;
}

/* t a contiguous CPU tensor of dtype want and shape (nd dims); name says
 * where it sits. */
static vn_status check_tensor(const vn_tensor *t, vn_dtype want, const char *name, int nd,
                              const int64_t *shape)
{
    vn_status st = vn__check_dtype_arg(t, want, OP, name, 0);
    if (st) return st;
    bool same = t->ndim == nd;
    for (int i = 0; same && i < nd; i++) same = t->shape[i] == shape[i];
    if (!same)
        return vn__err(VN_ERR_SHAPE, "%s: %s of shape %s, expected %s", OP, name,
                       vn__shape(t->ndim, t->shape), vn__shape(nd, shape));
    if (!vn_tensor_is_contiguous(t))
        return vn__err(VN_ERR_ARG, "%s: %s is not contiguous, expected a plain row-major tensor",
                       OP, name);
    return VN_OK;
}

/* check_tensor, then t retained into d->held. A failed check runs again
 * with the place's name formatted, for the message. */
static vn_status hold(vn_gpt_decoder *d, const vn_tensor *t, vn_dtype want, const place *pl,
                      const char *field, int nd, const int64_t *shape)
{
    if (check_tensor(t, want, "", nd, shape)) return check_tensor(t, want, name_of(pl, field).s, nd, shape);
    d->version[d->n_held] = t->storage->version;
    d->held[d->n_held++] = vn_tensor_retain((vn_tensor *)t);
    return VN_OK;
}

/* hold for a vector (n), for a matrix (r, c). */
static vn_status hold1(vn_gpt_decoder *d, const vn_tensor *t, vn_dtype want, const place *pl,
                       const char *field, int64_t n)
{
    return hold(d, t, want, pl, field, 1, &n);
}

static vn_status hold2(vn_gpt_decoder *d, const vn_tensor *t, vn_dtype want, const place *pl,
                       const char *field, int64_t r, int64_t c)
{
    return hold(d, t, want, pl, field, 2, (int64_t[]){r, c});
}

static vn_status check_eps(double eps, const place *pl, const char *field)
{
    if (!(eps > 0) || !isfinite(eps))
        return vn__err(VN_ERR_ARG, "%s: %s eps = %g, expected a positive finite number", OP,
                       name_of(pl, field).s, eps);
    return VN_OK;
}

static vn_status plan_norm(vn_gpt_decoder *d, const vn_decode_norm *n, const place *pl, norm_plan *p)
{
    if (!n->weight) return vn__err(VN_ERR_ARG, "%s: %s is NULL, expected (%lld) f32", OP,
                                   name_of(pl, "weight").s, (long long)d->C);
    if (n->rms && n->bias)
        return vn__err(VN_ERR_ARG, "%s: %s is an RMSNorm with a bias, expected none", OP,
                       name_of(pl, NULL).s);
    vn_status st = check_eps(n->eps, pl, NULL);
    if (!st) st = hold1(d, n->weight, VN_F32, pl, "weight", d->C);
    if (!st && n->bias) st = hold1(d, n->bias, VN_F32, pl, "bias", d->C);
    if (st) return st;
    *p = (norm_plan){vn_tensor_data(n->weight), n->bias ? vn_tensor_data(n->bias) : NULL, n->eps,
                     n->rms};
    return VN_OK;
}

/* One projection K → N: f32 weight (N, K) with an optional bias (N), or
 * packed ternary (N, row bytes of K) with γ and an optional RMSNorm (K). */
static vn_status plan_linear(vn_gpt_decoder *d, const vn_decode_linear *l, const place *pl, int64_t N,
                             int64_t K, linear_plan *p)
{
    vn_status st = VN_OK;
    *p = (linear_plan){.N = N, .K = K, .Kp = vn_ternary_row_bytes(K) * 4};
    if (!l->weight == !l->packed)
        return vn__err(VN_ERR_ARG, "%s: %s has %s, expected either an f32 weight or packed ternary "
                       "weights", OP, name_of(pl, NULL).s, l->weight ? "both" : "neither");
    if (l->weight) {
        if (l->norm) return vn__err(VN_ERR_ARG, "%s: %s: an input RMSNorm goes with packed weights "
                                    "only", OP, name_of(pl, NULL).s);
        st = hold2(d, l->weight, VN_F32, pl, "weight", N, K);
        if (!st && l->bias) st = hold1(d, l->bias, VN_F32, pl, "bias", N);
        if (st) return st;
        p->weight = vn_tensor_data(l->weight);
        p->bias = l->bias ? vn_tensor_data(l->bias) : NULL;
        return VN_OK;
    }
    if (l->bias)
        return vn__err(VN_ERR_ARG, "%s: %s: packed ternary layers have no bias", OP, name_of(pl, NULL).s);
    if (!(l->gamma >= 0) || !isfinite(l->gamma))
        return vn__err(VN_ERR_ARG, "%s: %s gamma = %g, expected a finite γ ≥ 0", OP, name_of(pl, NULL).s,
                       l->gamma);
    st = hold2(d, l->packed, VN_U8, pl, "packed weights", N, vn_ternary_row_bytes(K));
    /* a code 3 would be read as 2; the message names the layer (formatted
     * when the check fails, which then runs again) */
    if (!st && vnq__check_codes(l->packed, K, OP)) {
        char op[160];
        snprintf(op, sizeof op, "%s: %s", OP, name_of(pl, NULL).s);
        st = vnq__check_codes(l->packed, K, op);
    }
    if (!st && l->norm) {
        st = check_eps(l->norm_eps, pl, "norm weight");
        if (!st) st = hold1(d, l->norm, VN_F32, pl, "norm weight", K);
    }
    if (st) return st;
    p->packed = vn_tensor_data(l->packed);
    if (d->lanes) { /* re-laid once here, for every step of the generation */
        p->lanes_bytes = vnq__lanes_bytes(N, p->Kp);
        p->lanes = vn__mem_alloc(p->lanes_bytes);
        if (!p->lanes) return vn__err(VN_ERR_MEMORY, "%s: out of memory", OP);
        vnq__lanes_pack(p->packed, N, p->Kp, p->lanes);
    }
    p->gamma = l->gamma;
    p->norm = l->norm ? vn_tensor_data(l->norm) : NULL;
    p->norm_eps = l->norm_eps;
    return VN_OK;
}

static vn_status plan_block(vn_gpt_decoder *d, const vn_decode_block *s, int64_t i, block_plan *p)
{
    int64_t C = d->C, H = d->H;
    const vn_decode_linear *lin[N_LINEAR] = {&s->qkv, &s->attn_proj, &s->fc, &s->mlp_proj};
    const int64_t out[N_LINEAR] = {3 * C, C, H, C}, in[N_LINEAR] = {C, C, C, H};
    place pl = {i, d->n_layer, "ln1"};
    vn_status st = plan_norm(d, &s->ln1, &pl, &p->ln1);
    pl.part = "ln2";
    if (!st) st = plan_norm(d, &s->ln2, &pl, &p->ln2);
    for (int k = 0; k < N_LINEAR && !st; k++) {
        pl.part = linear_names[k];
        st = plan_linear(d, lin[k], &pl, out[k], in[k], &p->lin[k]);
    }
    pl.part = "cache";
    if (!st) st = hold(d, s->cache, VN_F32, &pl, NULL, 3, (int64_t[]){1, d->T, 3 * C});
    if (!st) {
        d->is_cache[d->n_held - 1] = true;
        p->cache = vn_tensor_data(s->cache);
    }
    return st;
}

/* Block i's cache shares no memory with any other tensor the decoder holds
 * (the tensors are contiguous, so each is one range of bytes): a step
 * writes into it, and would change a weight, or another block's cache,
 * that lay there. A tensor held twice is the same range: only the cache's
 * own entries are skipped, by identity, and one cache given to two blocks
 * is refused. */
static vn_status check_cache_apart(const vn_gpt_decoder *d, const vn_tensor *cache, int64_t i)
{
    const char *c0 = vn_tensor_data(cache), *c1 = c0 + vn_tensor_numel(cache) * sizeof(float);
    int own = 0;
    for (int k = 0; k < d->n_held; k++) {
        const vn_tensor *t = d->held[k];
        if (t == cache && own++ == 0) continue; /* the cache's own entry (a second: shared) */
        const char *t0 = vn_tensor_data(t), *t1 = t0 + vn_tensor_numel(t) * vn_dtype_size(t->dtype);
        if (t0 < t1 && t0 < c1 && c0 < t1)
            return vn__err(VN_ERR_ARG, "%s: block %lld of %lld: cache shares memory with another "
                           "tensor of the spec (a weight or another block's cache), which the "
                           "steps would overwrite; expected a cache of its own", OP, (long long)i + 1,
                           (long long)d->n_layer);
    }
    return VN_OK;
}

void vn_gpt_decoder_free(vn_gpt_decoder *d)
{
    if (!d) return;
    for (int i = 0; i < d->n_held; i++) vn_tensor_release(d->held[i]);
    for (int64_t i = 0; d->blocks && i < d->n_layer; i++)
        for (int k = 0; k < N_LINEAR; k++) {
            const linear_plan *l = &d->blocks[i].lin[k];
            if (l->lanes) vn__mem_free(l->lanes, l->lanes_bytes);
        }
    if (d->qmem) vn__mem_free(d->qmem, d->q.nbytes);
    free(d->held);
    free(d->version);
    free(d->is_cache);
    free(d->blocks);
    free(d->buf);
    free(d->dlogits);
    free(d);
}

/* The first dim of the fc layer's weights (the MLP's hidden width), 0 when
 * there is no usable tensor (plan_linear then says what is wrong). */
static int64_t hidden_width(const vn_decode_linear *fc)
{
    const vn_tensor *t = fc->weight ? fc->weight : fc->packed;
    return t && !vn_tensor_is_freed(t) && t->ndim == 2 ? t->shape[0] : 0;
}

vn_gpt_decoder *vn_gpt_decoder_new(const vn_gpt_decoder_spec *s)
{
    if (!s) return vn__errp(VN_ERR_ARG, "%s: spec is NULL", OP);
    if (vn__check_dtype_arg(s->wte, VN_F32, OP, "wte", 0) ||
        vn__check_dtype_arg(s->wpe, VN_F32, OP, "wpe", 0))
        return NULL;
    if (s->wte->ndim != 2 || s->wpe->ndim != 2)
        return vn__errp(VN_ERR_SHAPE, "%s: wte %s and wpe %s, expected (vocab, C) and (block_size, C)",
                        OP, vn__shape(s->wte->ndim, s->wte->shape),
                        vn__shape(s->wpe->ndim, s->wpe->shape));
    int64_t V = s->wte->shape[0], C = s->wte->shape[1], T = s->wpe->shape[0];
    if (s->n_layer < 1 || !s->blocks)
        return vn__errp(VN_ERR_ARG, "%s: n_layer = %lld%s, expected ≥ 1 blocks", OP,
                        (long long)s->n_layer, s->blocks ? "" : " and no blocks");
    if (s->n_head < 1 || C % s->n_head)
        return vn__errp(VN_ERR_ARG, "%s: n_head = %lld, expected a divisor of C = %lld", OP,
                        (long long)s->n_head, (long long)C);
    int64_t H = hidden_width(&s->blocks[0].fc);
    if (V < 1 || C < 1 || T < 1 || V > INT_MAX || 3 * C > INT_MAX || H > INT_MAX)
        return vn__errp(VN_ERR_SHAPE, "%s: wte %s, wpe %s: expected non-empty sizes within BLAS's "
                        "int", OP, vn__shape(2, s->wte->shape), vn__shape(2, s->wpe->shape));
    vn_gpt_decoder *d = calloc(1, sizeof *d);
    if (!d) return vn__errp(VN_ERR_MEMORY, "%s: out of memory", OP);
    *d = (vn_gpt_decoder){.V = V, .C = C, .H = H, .T = T, .n_layer = s->n_layer, .n_head = s->n_head};
    int64_t kmax = H > C ? H : C, Kp = vn_ternary_row_bytes(kmax) * 4;
    /* x, h, a, b: C each; hid, act: H; row: kmax; logits: V */
    size_t nbuf = (size_t)(4 * C + 2 * H + kmax + V);
    size_t nheld = (size_t)(4 + 17 * s->n_layer);
    d->held = calloc(nheld, sizeof *d->held);
    d->version = calloc(nheld, sizeof *d->version);
    d->is_cache = calloc(nheld, sizeof *d->is_cache);
    d->blocks = calloc((size_t)s->n_layer, sizeof *d->blocks);
    d->buf = malloc(nbuf * sizeof(float));
    d->dlogits = malloc(sizeof(double) * (size_t)V);
    d->qmem = vn__mem_alloc(vnq__rows_bytes(1, Kp));
    vn_status st = VN_OK;
    if (!d->held || !d->version || !d->is_cache || !d->blocks || !d->buf || !d->dlogits || !d->qmem) {
        if (d->qmem) d->q.nbytes = vnq__rows_bytes(1, Kp);
        vn_gpt_decoder_free(d);
        return vn__errp(VN_ERR_MEMORY, "%s: out of memory", OP);
    }
    vnq__rows_at(d->qmem, 1, Kp, &d->q);
    /* (for the largest packed weight the decoder may hold: qkv or the MLP's) */
    d->kernel = vnq__kernel_for_shape(1, 3 * C > H ? 3 * C : H, Kp / 4);
    d->lanes = d->kernel == vnq__kernel("avx512vnni") && vnq__lanes_usable(3 * C > H ? 3 * C : H, kmax);
    float *p = d->buf;
    d->x = p, d->h = p += C, d->a = p += C, d->b = p += C, d->hid = p += C, d->act = p += H;
    d->row = p += H, d->logits = p + kmax;
    st = hold2(d, s->wte, VN_F32, &(place){-1, 0, "wte"}, NULL, V, C);
    if (!st) st = hold2(d, s->wpe, VN_F32, &(place){-1, 0, "wpe"}, NULL, T, C);
    if (!st) st = plan_norm(d, &s->ln_f, &(place){-1, 0, "ln_f"}, &d->ln_f);
    for (int64_t i = 0; i < s->n_layer && !st; i++) st = plan_block(d, &s->blocks[i], i, &d->blocks[i]);
    if (!st && H < 1) /* an empty MLP: BLAS libraries differ on empty products */
        st = vn__err(VN_ERR_SHAPE, "%s: the MLP's hidden width (fc's rows) is 0, expected ≥ 1", OP);
    for (int64_t i = 0; i < s->n_layer && !st; i++) st = check_cache_apart(d, s->blocks[i].cache, i);
    if (st) {
        vn_gpt_decoder_free(d);
        return NULL;
    }
    d->wte = vn_tensor_data(s->wte);
    d->wpe = vn_tensor_data(s->wpe);
    return d;
}

/* ---- the step --------------------------------------------------------------------- */

static void norm(const norm_plan *n, int64_t C, const float *x, float *y)
{
    float stats[2];
    if (n->rms) vnq__rms_row(x, n->weight, C, n->eps, y);
    else vn__layer_norm_row(x, n->weight, n->bias, C, n->eps, y, stats);
}

/* y (N) = the layer applied to the row x (K): what vn_linear does for one
 * row (the bias copied in, then sgemm adding onto it), or nn.BitLinear's
 * vn_rms_norm + vn_ternary_matmul. */
static void linear(vn_gpt_decoder *d, const linear_plan *l, const float *x, float *y)
{
    if (l->packed) {
        if (l->norm) vnq__rms_quantize_row(x, l->norm, l->K, l->norm_eps, d->row, l->Kp, &d->q);
        else vnq__quantize_into(x, 1, l->K, l->Kp, &d->q);
        if (l->lanes)
            vnq__lanes_product(l->lanes, l->N, l->Kp, d->q.q, d->q.sum[0], d->q.s[0], l->gamma, y);
        else vnq__product(d->kernel, l->packed, l->N, l->Kp, &d->q, 1, l->gamma, y);
        return;
    }
    if (l->bias) memcpy(y, l->bias, sizeof(float) * (size_t)l->N);
    vn__sgemm(CblasNoTrans, CblasTrans, 1, (int)l->N, (int)l->K, 1.0f, x, (int)l->K, l->weight,
              (int)l->K, l->bias ? 1.0f : 0.0f, y, (int)l->N);
}

const float *vn_gpt_decoder_step(vn_gpt_decoder *d, int64_t token, int64_t pos)
{
    if (!d) return vn__errp(VN_ERR_ARG, "%s: decoder is NULL", OP);
    if (token < 0 || token >= d->V || pos < 0 || pos >= d->T)
        return vn__errp(VN_ERR_ARG, "%s: token %lld at position %lld, expected a token in 0..%lld at "
                        "a position in 0..%lld", OP, (long long)token, (long long)pos,
                        (long long)d->V - 1, (long long)d->T - 1);
    /* A weight written since vn_gpt_decoder_new is refused, not read: the
     * packed weights' re-laid copy (VNNI) and their code check date from
     * then, so a step would use the old codes on one CPU and the new,
     * unchecked ones on another. */
    for (int i = 0; i < d->n_held; i++) {
        if (vn_tensor_is_freed(d->held[i]))
            return vn__errp(VN_ERR_STATE, "%s: a tensor it reads was freed (vn_tensor_free) after the "
                            "decoder was made", OP);
        if (!d->is_cache[i] && d->held[i]->storage->version != d->version[i])
            return vn__errp(VN_ERR_STATE, "%s: a weight it reads was written in place (copy_, fill_, "
                            "an optimizer step) after the decoder was made; make a new decoder", OP);
    }
    int64_t C = d->C, H = d->H;
    float *x = d->x, *h = d->h, *a = d->a, *b = d->b;
    for (int64_t j = 0; j < C; j++) x[j] = d->wte[token * C + j] + d->wpe[pos * C + j];
    for (int64_t i = 0; i < d->n_layer; i++) {
        const block_plan *bp = &d->blocks[i];
        float *qkv = bp->cache + pos * 3 * C; /* this position's row of the cache */
        norm(&bp->ln1, C, x, a);
        linear(d, &bp->lin[QKV], a, qkv);
        vn__attention_last_row(bp->cache, 3 * C, pos + 1, C, d->n_head, b);
        linear(d, &bp->lin[ATTN_PROJ], b, a);
        for (int64_t j = 0; j < C; j++) h[j] = x[j] + a[j];
        norm(&bp->ln2, C, h, a);
        linear(d, &bp->lin[FC], a, d->hid);
        vn__gelu_f32(d->act, d->hid, H);
        linear(d, &bp->lin[MLP_PROJ], d->act, a);
        for (int64_t j = 0; j < C; j++) x[j] = h[j] + a[j];
    }
    norm(&d->ln_f, C, x, a);
    /* the tied head: logits = ln_f(x)·wteᵀ, as vn_linear without a bias */
    vn__sgemm(CblasNoTrans, CblasTrans, 1, (int)d->V, (int)C, 1.0f, a, (int)C, d->wte, (int)C, 0.0f,
              d->logits, (int)d->V);
    d->stepped = true;
    return d->logits;
}

const float *vn_gpt_decoder_logits(const vn_gpt_decoder *d)
{
    if (!d) return vn__errp(VN_ERR_ARG, "%s: decoder is NULL", OP);
    if (!d->stepped) return vn__errp(VN_ERR_STATE, "%s: no step yet, so no logits", OP);
    return d->logits;
}

bool vn_gpt_decoder_current(const vn_gpt_decoder *d)
{
    if (!d) return false;
    for (int i = 0; i < d->n_held; i++) {
        const vn_tensor *t = d->held[i];
        if (vn_tensor_is_freed(t) || (!d->is_cache[i] && t->storage->version != d->version[i]))
            return false;
    }
    return true;
}

int64_t vn_gpt_decoder_vocab(const vn_gpt_decoder *d) { return d ? d->V : 0; }

int64_t vn_gpt_decoder_block_size(const vn_gpt_decoder *d) { return d ? d->T : 0; }

/* ---- sampling ---------------------------------------------------------------------- */

static int descending(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The sampling options of vn_sample_logits and vn_gpt_decoder_next. */
static vn_status check_sampling(const char *op, double temperature, int64_t top_k)
{
    if (!(temperature > 0) || !isfinite(temperature) || top_k < 0)
        return vn__err(VN_ERR_ARG, "%s: temperature %g, top_k %lld: expected a positive finite "
                       "temperature and top_k ≥ 0 (0: every token)", op, temperature, (long long)top_k);
    return VN_OK;
}

vn_status vn_sample_logits(const double *l, int64_t n, double temperature, int64_t top_k, double u,
                           int64_t *index)
{
    const char *op = "sample_logits";
    if (!l || !index || n < 1)
        return vn__err(VN_ERR_ARG, "%s: expected n ≥ 1 logits and an index to write, found n = %lld%s",
                       op, (long long)n, l && index ? "" : " or a NULL pointer");
    vn_status st = check_sampling(op, temperature, top_k);
    if (st) return st;
    if (!(u >= 0 && u < 1)) return vn__err(VN_ERR_ARG, "%s: u = %g, expected u in [0, 1)", op, u);
    /* the max, and whether any logit is NaN or +inf (which would draw
     * garbage), in vector lanes; the culprit is looked for only then */
    double max = -INFINITY;
    int bad = 0;
#pragma omp simd reduction(max : max) reduction(| : bad)
    for (int64_t i = 0; i < n; i++) {
        bad |= !(l[i] < INFINITY); /* NaN or +inf */
        max = l[i] > max ? l[i] : max;
    }
    for (int64_t i = 0; bad && i < n; i++)
        if (!(l[i] < INFINITY))
            return vn__err(VN_ERR_ARG, "%s: logits[%lld] is %g, expected a finite number or -inf", op,
                           (long long)i, l[i]);
    if (max == -INFINITY) /* would always draw the first */
        return vn__err(VN_ERR_ARG, "%s: every logit is -inf, nothing to draw", op);
    double floor = -INFINITY;
    if (top_k > 0 && top_k < n) { /* the top_k-th largest value */
        double *sorted = malloc(sizeof(double) * (size_t)n);
        if (!sorted) return vn__err(VN_ERR_MEMORY, "%s: out of memory", op);
        memcpy(sorted, l, sizeof(double) * (size_t)n);
        qsort(sorted, (size_t)n, sizeof(double), descending);
        floor = sorted[top_k - 1];
        free(sorted);
    }
    /* the running sums, then the weights, in one block */
    double *run = malloc((sizeof(double) + sizeof(float)) * (size_t)n);
    if (!run) return vn__err(VN_ERR_MEMORY, "%s: out of memory", op);
    float *w = (float *)(void *)(run + n);
    /* The weights in f32 through the vectorised exp of the softmaxes
     * (vec_math.h): libm's exp, one call per logit, cost as much as the
     * rest of a narrow model's draw (bench/RESULTS.md, issue 20). An
     * exponent below VN_EXP_MIN (where the exp clamps) gives 0, as does a
     * logit outside the top_k or −inf. The exponent (l − max) /
     * temperature is (l − max)·pre·inv_t: pre = 1 (exact) unless
     * 1/temperature overflows (a temperature below about 5.6e-309), where
     * the max's 0·inf would be NaN and leave no weight at all; there
     * pre = inv_t = 1/√temperature, both finite. */
    double inv_t = 1.0 / temperature, pre = 1.0, total = 0;
    if (isinf(inv_t)) pre = inv_t = 1.0 / sqrt(temperature);
    for (int64_t i = 0; i < n; i++) w[i] = (float)((l[i] - max) * pre * inv_t);
    vn__exp_shift_f32(w, n, 0.0f, 1.0f);
    for (int64_t i = 0; i < n; i++) { /* & rather than &&: no branch, vector lanes */
        int keep = (l[i] >= floor) & ((l[i] - max) * pre * inv_t >= VN_EXP_MIN);
        w[i] = keep ? w[i] : 0.0f;
    }
    /* Σ w in double in index order, each running sum kept: the draw is the
     * first index whose running sum passes u·total (one chain of additions,
     * not two: the sums were computed twice, ~5% of a narrow packed model's
     * token). A 0 weight leaves the sum as it was, so that index has a
     * positive weight. */
    for (int64_t i = 0; i < n; i++) run[i] = total += w[i];
    double target = u * total;
    *index = -1;
    for (int64_t i = 0; i < n; i++)
        if (run[i] > target) {
            *index = i;
            break;
        }
    for (int64_t i = n - 1; *index < 0 && i >= 0; i--) /* u·total rounded up to the total: the last */
        if (w[i] > 0) *index = i;
    free(run);
    return VN_OK;
}

vn_status vn_gpt_decoder_next(vn_gpt_decoder *d, int64_t token, int64_t pos, double temperature,
                              int64_t top_k, int64_t *next)
{
    /* bad options are refused before the step writes its cache row and
     * the draw advances the RNG: a failed call changes nothing */
    vn_status st = check_sampling(OP, temperature, top_k);
    if (!st && !next) st = vn__err(VN_ERR_ARG, "%s: next is NULL, expected where to write the token", OP);
    if (st) return st;
    if (!vn_gpt_decoder_step(d, token, pos)) return vn_last_status();
    int bad = 0; /* a NaN or +inf logit, looked for in vector lanes */
#pragma omp simd reduction(| : bad)
    for (int64_t i = 0; i < d->V; i++) {
        bad |= !(d->logits[i] < INFINITY);
        d->dlogits[i] = d->logits[i];
    }
    for (int64_t i = 0; bad && i < d->V; i++)
        if (!(d->logits[i] < INFINITY)) /* no index: it says nothing of the cause */
            return vn__err(VN_ERR_ARG, "%s: a logit of the step is %s, expected a finite number or "
                           "-inf (are the weights not finite?)", OP, isnan(d->logits[i]) ? "nan" : "inf");
    /* u as vn_rand draws one element, so the same stream gives the same tokens */
    return vn_sample_logits(d->dlogits, d->V, temperature, top_k, vn__rng_uniform_f32(), next);
}
