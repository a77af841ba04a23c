/* lv_convert.c — tensors from nested Lua tables (venom.tensor), back to
 * tables (t:totable()), and readable printing (tostring, ..). */
#include "lv.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- tensor() from nested tables, totable() ------------------------------- */

static void lv_store(void *buf, vn_dtype d, int64_t k, double v)
{
    switch (d) {
    case VN_F32: ((float *)buf)[k] = (float)v; break;
    case VN_I32: ((int32_t *)buf)[k] = (int32_t)v; break;
    case VN_I64: ((int64_t *)buf)[k] = (int64_t)v; break;
    case VN_U8: ((uint8_t *)buf)[k] = (uint8_t)v; break;
    case VN_BF16: case VN_F16: break; /* built as f32 and converted by the engine */
    }
}

static double lv_load(const void *buf, vn_dtype d, int64_t k)
{
    switch (d) {
    case VN_F32: return ((const float *)buf)[k];
    case VN_I32: return ((const int32_t *)buf)[k];
    case VN_I64: return (double)((const int64_t *)buf)[k];
    case VN_U8: return ((const uint8_t *)buf)[k];
    case VN_BF16: case VN_F16: break; /* converted to f32 by the engine first */
    }
    return 0;
}

/* The one rule for a Lua number becoming an element of dtype d: f32 takes
 * any number (rounding it, NaN and ±inf included); an integer dtype takes a
 * whole number within its range and nothing else, so 0.5, 300 (for u8), NaN
 * and inf are refused rather than truncated, wrapped or made INT64_MIN. */
bool lv_representable(vn_dtype d, double v)
{
    double lo, hi; /* v must lie in [lo, hi) */
    switch (d) {
    case VN_F32: case VN_BF16: case VN_F16: return true; /* rounded, like f32 */
    case VN_I32: lo = -2147483648.0, hi = 2147483648.0; break;
    case VN_I64: lo = -9223372036854775808.0, hi = 9223372036854775808.0; break;
    case VN_U8: lo = 0, hi = 256; break;
    default: return false;
    }
    return v >= lo && v < hi && (double)(int64_t)v == v; /* NaN fails v >= lo */
}

/* v for a message: %.14g, but "nan" where printf may say "-nan". */
static const char *lv_numtext(double v, char *buf, size_t n)
{
    if (v != v) snprintf(buf, n, "nan");
    else snprintf(buf, n, "%.14g", v);
    return buf;
}

/* "whole numbers in 0..255" for the messages. */
static const char *lv_range_text(vn_dtype d)
{
    switch (d) {
    case VN_I32: return "whole numbers in -2147483648..2147483647";
    case VN_I64: return "whole numbers in -2^63..2^63-1";
    case VN_U8: return "whole numbers in 0..255";
    default: return "any number";
    }
}

/* Raise "<op>: the number 0.5 is not representable as i64 (i64 holds whole
 * numbers in ...; <hint>)" unless v is representable in d. `hint` may be
 * NULL. */
void lv_check_representable(lua_State *L, const char *op, double v, vn_dtype d, const char *hint)
{
    if (lv_representable(d, v)) return;
    char num[32];
    lv_raise(L, "%s: the number %s is not representable as %s (%s holds %s%s%s)", op,
             lv_numtext(v, num, sizeof num), vn_dtype_name(d), vn_dtype_name(d), lv_range_text(d), hint ? "; " : "",
             hint ? hint : "");
}

typedef struct {
    void *buf;
    vn_dtype dtype;
    int ndim;
    const int64_t *shape;
    int64_t n;                  /* elements stored so far */
    int64_t pos[VN_MAX_DIMS];   /* 1-based position being read */
} lv_filler;

/* "[2][3]" for the first `depth` entries of the position. */
static const char *lv_path(const lv_filler *f, int depth, char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int d = 0; d < depth && used < n; d++)
        used += (size_t)snprintf(buf + used, n - used, "[%lld]", (long long)f->pos[d]);
    return buf;
}

/* The table on top of the stack (at depth d, #t = n) must be a plain list:
 * a nil inside a Lua list ends it for #, so {1, nil, 3}, {[1] = 1, [3] = 3}
 * or t[5] = 5 after {1, 2, 3} would otherwise lose elements silently, and
 * {x = 1} would become an empty tensor. */
static void lv_check_keys(lua_State *L, const lv_filler *f, int d, int64_t n)
{
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        lua_pop(L, 1);
        double k = lua_type(L, -1) == LUA_TNUMBER ? lua_tonumber(L, -1) : 0;
        if (lv_whole(k) && k >= 1 && k <= (double)n) continue;
        char path[128], key[160];
        if (lua_type(L, -1) == LUA_TNUMBER) snprintf(key, sizeof key, "%.14g", k);
        else if (lua_type(L, -1) == LUA_TSTRING) snprintf(key, sizeof key, "'%.120s'", lua_tostring(L, -1));
        else snprintf(key, sizeof key, "of type %s", luaL_typename(L, -1));
        lv_path(f, d, path, sizeof path);
        if (n == 0)
            lv_raise(L, "tensor: the table%s%s has a non-sequence key %s (expected a list of "
                     "numbers or of tables)", d ? " at " : "", path, key);
        lv_raise(L, "tensor: the table%s%s has a non-sequence key %s (expected keys 1..%lld only; "
                 "a nil inside a list ends it)", d ? " at " : "", path, key, (long long)n);
    }
}

/* Copy the nested table on top of the stack (at depth d) into f->buf. */
static void lv_fill(lua_State *L, lv_filler *f, int d)
{
    char path[128];
    int64_t n = (int64_t)lua_objlen(L, -1);
    if (n != f->shape[d])
        lv_raise(L, "tensor: ragged table: %s has %lld elements, expected %lld like the first one",
                 lv_path(f, d, path, sizeof path), (long long)n, (long long)f->shape[d]);
    lv_check_keys(L, f, d, n);
    for (int64_t k = 1; k <= n; k++) {
        f->pos[d] = k;
        lua_rawgeti(L, -1, (int)k);
        if (d == f->ndim - 1) {
            if (lua_type(L, -1) != LUA_TNUMBER)
                lv_raise(L, "tensor: expected a number at %s, found %s",
                         lv_path(f, d + 1, path, sizeof path), luaL_typename(L, -1));
            double v = lua_tonumber(L, -1);
            char num[32];
            if (!lv_representable(f->dtype, v))
                lv_raise(L, "tensor: value %s at %s does not fit in dtype %s (%s)",
                         lv_numtext(v, num, sizeof num), lv_path(f, d + 1, path, sizeof path),
                         vn_dtype_name(f->dtype), lv_range_text(f->dtype));
            lv_store(f->buf, f->dtype, f->n++, v);
        } else {
            if (!lua_istable(L, -1))
                lv_raise(L, "tensor: expected a table at %s (a row of %lld), found %s",
                         lv_path(f, d + 1, path, sizeof path), (long long)f->shape[d + 1],
                         luaL_typename(L, -1));
            lv_fill(L, f, d + 1);
        }
        lua_pop(L, 1);
    }
}

/* tensor(data, [dtype | opts]): data is a number (0-d), a tensor (copied) or
 * a rectangular nested table of numbers. */
int l_tensor(lua_State *L)
{
    lv_opts o = {VN_F32, false, VN_CPU};
    if (lua_gettop(L) > 2)
        return lv_raise(L, "tensor: expected (data, [dtype | opts]), found %d arguments",
                          lua_gettop(L));
    if (lua_type(L, 2) == LUA_TSTRING) o.dtype = lv_dtype(L, 2);
    else if (lua_istable(L, 2)) lv_parse_opts(L, 2, &o);
    else if (!lua_isnoneornil(L, 2))
        lv_argfail(L, 2, "expected a dtype name or an options table, found %s", luaL_typename(L, 2));

    if (lua_type(L, 1) == LUA_TNUMBER) {
        double v = lua_tonumber(L, 1);
        char num[32];
        if (!lv_representable(o.dtype, v))
            lv_argfail(L, 1, "value %s does not fit in dtype %s (%s)", lv_numtext(v, num, sizeof num),
                       vn_dtype_name(o.dtype), lv_range_text(o.dtype));
        return lv_push_new(L, vn_full(o.dtype, 0, NULL, v), &o);
    }
    if (lv_totensor(L, 1)) return lv_push_new(L, vn_to_dtype(lv_check(L, 1), o.dtype), &o);
    if (!lua_istable(L, 1))
        lv_argfail(L, 1, "expected a (nested) table of numbers or a number, found %s",
                   luaL_typename(L, 1));

    /* The shape follows the first element down; lv_fill checks the rest. */
    int64_t shape[VN_MAX_DIMS];
    int nd = 0;
    lua_pushvalue(L, 1);
    while (lua_istable(L, -1)) {
        if (nd == VN_MAX_DIMS)
            lv_argfail(L, 1, "tables nested deeper than %d levels (the most dims a tensor has)",
                       VN_MAX_DIMS);
        shape[nd] = (int64_t)lua_objlen(L, -1);
        if (shape[nd++] == 0) break;
        lua_rawgeti(L, -1, 1);
        lua_remove(L, -2);
    }
    lua_pop(L, 1);

    int64_t numel = 1;
    for (int d = 0; d < nd; d++) numel *= shape[d];
    /* 16-bit floats are filled as f32 and converted by the engine. */
    bool half = o.dtype == VN_BF16 || o.dtype == VN_F16;
    lv_filler f = {.dtype = half ? VN_F32 : o.dtype, .ndim = nd, .shape = shape};
    f.buf = lua_newuserdata(L, (size_t)(numel ? numel : 1) * vn_dtype_size(f.dtype));
    luaL_checkstack(L, VN_MAX_DIMS + 8, "tensor");
    lua_pushvalue(L, 1);
    lv_fill(L, &f, 0);
    lua_pop(L, 1);
    vn_tensor *t = vn_from_data(f.dtype, nd, shape, f.buf);
    if (t && half) {
        vn_tensor *c = vn_to_dtype(t, o.dtype);
        vn_tensor_release(t);
        t = c;
    }
    return lv_push_new(L, t, &o);
}

static void lv_build(lua_State *L, const void *buf, vn_dtype dt, int ndim, const int64_t *shape,
                     int d, int64_t *k)
{
    lua_createtable(L, (int)shape[d], 0);
    for (int64_t i = 0; i < shape[d]; i++) {
        if (d == ndim - 1) lua_pushnumber(L, lv_load(buf, dt, (*k)++));
        else lv_build(L, buf, dt, ndim, shape, d + 1, k);
        lua_rawseti(L, -2, (int)i + 1);
    }
}

/* t:totable(): nested Lua tables (a number for a 0-d tensor). */
int l_totable(lua_State *L)
{
    vn_tensor *t = lv_check(L, 1);
    vn_dtype dt = vn_tensor_dtype(t);
    if (dt == VN_BF16 || dt == VN_F16) { /* through f32, which holds every value */
        bool grad = vn_set_grad_enabled(false);
        lv_push(L, vn_to_dtype(t, VN_F32));
        vn_set_grad_enabled(grad);
        lua_replace(L, 1);
        return l_totable(L);
    }
    size_t nbytes = (size_t)vn_tensor_numel(t) * vn_dtype_size(dt);
    void *buf = lua_newuserdata(L, nbytes ? nbytes : 1);
    lv_status(L, vn_tensor_copy_out(t, buf, nbytes));
    if (vn_tensor_ndim(t) == 0) {
        lua_pushnumber(L, lv_load(buf, dt, 0));
        return 1;
    }
    luaL_checkstack(L, VN_MAX_DIMS + 4, "totable");
    int64_t k = 0;
    lv_build(L, buf, dt, vn_tensor_ndim(t), vn_tensor_shape(t), 0, &k);
    return 1;
}

/* ---- printing -------------------------------------------------------------- */

#define LV_PRINT_MAX 1000 /* more elements than this: elide the middle of each dim */
#define LV_EDGE 3         /* entries shown at each end of an elided dim */
#define LV_LINE 80        /* wrap rows longer than this */
#define LV_PREFIX 7       /* strlen("tensor(") */

enum { LV_INT, LV_FIXED, LV_SCI };

typedef struct {
    int ndim;
    const int64_t *shape;
    bool elide;
    double *vals; /* the shown values, in print order */
    int64_t next;
    int mode, width;
} lv_printer;

static int64_t lv_shown(const lv_printer *p, int d)
{
    return p->elide && p->shape[d] > 2 * LV_EDGE ? 2 * LV_EDGE : p->shape[d];
}

/* Index along dim d of the k-th shown entry. */
static int64_t lv_shown_at(const lv_printer *p, int d, int64_t k)
{
    return lv_shown(p, d) < p->shape[d] && k >= LV_EDGE ? p->shape[d] - 2 * LV_EDGE + k : k;
}

static void lv_gather(const vn_tensor *t, lv_printer *p, int d, int64_t *idx)
{
    if (d == p->ndim) {
        double v = 0;
        vn_tensor_get(t, idx, &v);
        p->vals[p->next++] = v;
        return;
    }
    for (int64_t k = 0; k < lv_shown(p, d); k++) {
        idx[d] = lv_shown_at(p, d, k);
        lv_gather(t, p, d + 1, idx);
    }
}

static int lv_fmt_num(char *buf, size_t n, double v, int mode)
{
    if (isnan(v)) return snprintf(buf, n, "nan");
    if (isinf(v)) return snprintf(buf, n, v > 0 ? "inf" : "-inf");
    if (mode == LV_INT) return snprintf(buf, n, "%.0f", v);
    return snprintf(buf, n, mode == LV_SCI ? "%.4e" : "%.4f", v);
}

static void lv_spaces(luaL_Buffer *b, int n)
{
    for (int i = 0; i < n; i++) luaL_addchar(b, ' ');
}

/* Separator between entries of a row, wrapping before column LV_LINE. */
static void lv_sep(luaL_Buffer *b, int *col, int col0, int width)
{
    if (*col + 2 + width > LV_LINE) {
        luaL_addstring(b, ",\n");
        lv_spaces(b, col0);
        *col = col0;
    } else {
        luaL_addstring(b, ", ");
        *col += 2;
    }
}

/* Separator between sub-arrays: a comma, `nl` newlines, the indent. */
static void lv_newrow(luaL_Buffer *b, int nl, int col0)
{
    luaL_addchar(b, ',');
    for (int i = 0; i < nl; i++) luaL_addchar(b, '\n');
    lv_spaces(b, col0);
}

static void lv_emit(lv_printer *p, luaL_Buffer *b, int d)
{
    int64_t shown = lv_shown(p, d);
    bool gap = shown < p->shape[d];
    int col0 = LV_PREFIX + d + 1;
    luaL_addchar(b, '[');
    if (d == p->ndim - 1) {
        int col = col0;
        for (int64_t k = 0; k < shown; k++) {
            if (k > 0) lv_sep(b, &col, col0, p->width);
            if (gap && k == LV_EDGE) {
                luaL_addstring(b, "...");
                col += 3;
                lv_sep(b, &col, col0, p->width);
            }
            char s[64];
            int len = lv_fmt_num(s, sizeof s, p->vals[p->next++], p->mode);
            lv_spaces(b, p->width - len);
            luaL_addlstring(b, s, (size_t)len);
            col += len > p->width ? len : p->width;
        }
    } else {
        for (int64_t k = 0; k < shown; k++) {
            if (k > 0) lv_newrow(b, p->ndim - d - 1, col0);
            if (gap && k == LV_EDGE) {
                luaL_addstring(b, "...");
                lv_newrow(b, p->ndim - d - 1, col0);
            }
            lv_emit(p, b, d + 1);
        }
    }
    luaL_addchar(b, ']');
}

/* Push the PyTorch-like text of the tensor at i:
 * tensor([[ 0.1000, -2.0000], ...], dtype=f32, shape=(2, 2)). */
static void lv_tostring(lua_State *L, int i)
{
    lv_box *box = luaL_checkudata(L, i, LV_MT);
    const vn_tensor *t = box->t;
    if (!t || vn_tensor_is_freed(t)) {
        lua_pushliteral(L, "tensor(<freed>)");
        return;
    }
    vn_tensor *host = NULL; /* a CUDA tensor is printed from one copy on the CPU */
    if (vn_tensor_device(t) == VN_CUDA) {
        bool grad = vn_set_grad_enabled(false);
        host = vn_to_device(t, VN_CPU);
        vn_set_grad_enabled(grad);
        if (!host) lv_fail(L);
    }
    const vn_tensor *vals = host ? host : t;
    int64_t numel = vn_tensor_numel(t);
    lv_printer p = {.ndim = vn_tensor_ndim(t), .shape = vn_tensor_shape(t), .elide = numel > LV_PRINT_MAX};
    int64_t count = 1;
    for (int d = 0; d < p.ndim; d++) count *= lv_shown(&p, d);
    p.vals = lua_newuserdata(L, (size_t)(count ? count : 1) * sizeof(double));
    int64_t idx[VN_MAX_DIMS] = {0};
    if (numel > 0) lv_gather(vals, &p, 0, idx);
    vn_tensor_release(host);

    /* One format for all entries so the columns line up. */
    double maxabs = 0;
    for (int64_t k = 0; k < count; k++)
        if (isfinite(p.vals[k])) {
            double a = p.vals[k] < 0 ? -p.vals[k] : p.vals[k];
            if (a > maxabs) maxabs = a;
        }
    if (lv_is_integer_dtype(vn_tensor_dtype(t))) p.mode = LV_INT;
    else if (maxabs >= 1e8 || (maxabs > 0 && maxabs < 1e-4)) p.mode = LV_SCI;
    else p.mode = LV_FIXED;
    char s[64];
    for (int64_t k = 0; k < count && numel > 0; k++) {
        int len = lv_fmt_num(s, sizeof s, p.vals[k], p.mode);
        if (len > p.width) p.width = len;
    }

    luaL_Buffer b;
    luaL_buffinit(L, &b);
    luaL_addstring(&b, "tensor(");
    p.next = 0;
    if (numel == 0) luaL_addstring(&b, "[]");
    else if (p.ndim == 0) luaL_addlstring(&b, s, (size_t)lv_fmt_num(s, sizeof s, p.vals[0], p.mode));
    else lv_emit(&p, &b, 0);
    char shape[128], tail[256];
    snprintf(tail, sizeof tail, ", dtype=%s, shape=%s%s", vn_dtype_name(vn_tensor_dtype(t)),
             vn_shape_str(p.ndim, p.shape, shape, sizeof shape),
             vn_tensor_device(t) == VN_CUDA ? ", device=cuda" : "");
    luaL_addstring(&b, tail);
    const char *fn = vn_tensor_grad_fn_name(t);
    if (fn) {
        snprintf(tail, sizeof tail, ", grad_fn=<%s>", fn);
        luaL_addstring(&b, tail);
    } else if (vn_tensor_requires_grad(t)) {
        luaL_addstring(&b, ", requires_grad=true");
    }
    luaL_addchar(&b, ')');
    luaL_pushresult(&b);
    lua_remove(L, -2); /* the scratch values */
}

int l_tostring(lua_State *L)
{
    lv_tostring(L, 1);
    return 1;
}

/* a .. b where either side is a tensor. */
int l_concat(lua_State *L)
{
    for (int i = 1; i <= 2; i++) {
        if (lv_totensor(L, i)) {
            lv_tostring(L, i);
        } else if (lua_type(L, i) == LUA_TSTRING || lua_type(L, i) == LUA_TNUMBER) {
            lua_pushvalue(L, i);
        } else {
            lv_argfail(L, i, "cannot concatenate a tensor with a %s", luaL_typename(L, i));
        }
    }
    lua_concat(L, 2);
    return 1;
}

