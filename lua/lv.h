/* lv.h — what the files of the venom.core Lua binding share: the tensor
 * userdata box and the argument helpers. Conventions: an lv_* helper that
 * finds a bad argument raises a Lua error (it does not return); Lua-side
 * dims, positions and indices are 1-based and converted here to 0-based. */
#ifndef VENOM_LV_H
#define VENOM_LV_H

#include "venom.h"

#include <lauxlib.h>
#include <lua.h>
#include <stdbool.h>

#define LV_MT "venom.Tensor"

typedef struct {
    vn_tensor *t; /* one reference; NULL once collected */
} lv_box;

typedef struct {
    vn_dtype dtype;
    bool requires_grad;
    vn_device device; /* VN_CPU unless {device = "cuda"} */
} lv_opts;

int lv_fail(lua_State *L);
int lv_raise(lua_State *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int lv_argfail(lua_State *L, int i, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
vn_tensor *lv_totensor(lua_State *L, int i);
vn_tensor *lv_check(lua_State *L, int i);
vn_tensor *lv_optcheck(lua_State *L, int i);
void lv_check_operand(lua_State *L, int i);
vn_tensor *lv_operand(lua_State *L, int i, vn_dtype dtype);
int lv_push(lua_State *L, vn_tensor *t);
void lv_status(lua_State *L, vn_status s);
bool lv_whole(double x);
int64_t lv_int(lua_State *L, int i, const char *what);
int lv_dim(lua_State *L, int i, int n);
int lv_optdim(lua_State *L, int i, int n, int def);
int64_t lv_pos(lua_State *L, int i, int dim0, int64_t size);
int lv_shape(lua_State *L, int first, int last, int64_t *shape, bool allow_infer);
vn_dtype lv_dtype_at(lua_State *L, int at, int argi);
vn_dtype lv_dtype(lua_State *L, int i);
void lv_parse_opts(lua_State *L, int i, lv_opts *o);
lv_opts lv_take_opts(lua_State *L, int *top);
int lv_push_new(lua_State *L, vn_tensor *t, const lv_opts *o);
vn_tensor *lv_indices0(lua_State *L, int i, int64_t limit, const char *op, const char *what);
bool lv_is_integer_dtype(vn_dtype d);

/* lv_checkpoint.c: venom.save/load and the RNG state. */
extern const luaL_Reg lv_checkpoint_functions[];

/* lv_sparse.c: V:N:M sparse matrices (venom.VNM userdata) and their ops. */
extern const luaL_Reg lv_sparse_functions[];

/* lv_device.c: t:cuda()/cpu()/device()/is_cuda(), venom.cuda_* and autocast. */
extern const luaL_Reg lv_device_functions[];
int lv_device_name_at(lua_State *L, int i);
vn_device lv_device(lua_State *L, int i);
int l_cuda(lua_State *L);
int l_cpu(lua_State *L);
int l_device(lua_State *L);
int l_is_cuda(lua_State *L);

/* lv_transformer.c: embedding, layer_norm and causal_attention. */
extern const luaL_Reg lv_transformer_functions[];

/* lv_convert.c: Lua tables <-> tensors, and printing; the rule for a Lua
 * number becoming an element of a dtype (lv_representable) and its error. */
bool lv_representable(vn_dtype d, double v);
void lv_check_representable(lua_State *L, const char *op, double v, vn_dtype d, const char *hint);
int l_tensor(lua_State *L);
int l_totable(lua_State *L);
int l_tostring(lua_State *L);
int l_concat(lua_State *L);

#endif
