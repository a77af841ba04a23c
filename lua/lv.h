/* lv.h — what the files of the venom.core Lua binding share: the tensor
 * userdata box, the argument helpers, the registration macros and the
 * luaL_Reg tables each file exports to luaopen_venom_core (lv_tensor.c).
 * Conventions: an lv_* helper that finds a bad argument raises a Lua error
 * (it does not return); Lua-side dims, positions and indices are 1-based and
 * converted here to 0-based. */
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

/* Registration: LV_REG(exp) is the entry {"exp", l_exp}, LV_META(add) the
 * entry {"__add", l_add}. A file lists a family of ops once, as an X-macro
 * (#define LV_UNARY_OPS(X) X(neg) X(exp) ...), and expands the list both
 * into its wrappers and, with LV_REG, into its table: adding an op is one
 * line. LV_UNARY_WRAPPER(exp) defines l_exp(t) = vn_exp(t). */
#define LV_REG(name) {#name, l_##name},
#define LV_META(name) {"__" #name, l_##name},
#define LV_UNARY_WRAPPER(name)                                                  \
    static int l_##name(lua_State *L) { return lv_push(L, vn_##name(lv_check(L, 1))); }

/* lv_args.c: errors and the arguments (numbers, dims, shapes, dtypes,
 * options, 1-based indices). */
int lv_fail(lua_State *L);
int lv_raise(lua_State *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int lv_argfail(lua_State *L, int i, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void lv_setfuncs(lua_State *L, const luaL_Reg *reg);
void lv_pushfunc(lua_State *L, const luaL_Reg *reg);
void lv_status(lua_State *L, vn_status s);
bool lv_whole(double x);
int64_t lv_int(lua_State *L, int i, const char *what);
double lv_number(lua_State *L, int i, const char *what);
double lv_optnumber(lua_State *L, int i, double def, const char *what);
bool lv_optbool(lua_State *L, int i, bool def, const char *what);
const char *lv_string(lua_State *L, int i, const char *what);
void lv_checktype(lua_State *L, int i, int type, const char *what);
int lv_dim(lua_State *L, int i, int n);
int lv_optdim(lua_State *L, int i, int n, int def);
int64_t lv_pos(lua_State *L, int i, int dim0, int64_t size);
int lv_shape(lua_State *L, int first, int last, int64_t *shape, bool allow_infer);
int lv_dtype_name_at(lua_State *L, int i);
vn_dtype lv_dtype(lua_State *L, int i);
void lv_parse_opts(lua_State *L, int i, lv_opts *o);
lv_opts lv_take_opts(lua_State *L, int *top);
lv_opts lv_take_opts_at(lua_State *L, int *top, int first, vn_dtype dtype);
vn_tensor *lv_shifted(vn_tensor *t, double k);
vn_tensor *lv_check_indices(lua_State *L, int i, const char *op, const char *what);
/* Engine objects Lua holds (a vn_vnm, a vn_csr): a userdata "box" of one
 * pointer whose metatable is registered as mt, and whose __gc frees the
 * object and sets the slot to NULL. lv_box_check gives the slot of the box
 * at i, or raises an argument error "expected <what>"; lv_box_new pushes an
 * empty box (NULL) with mt's metatable, which must exist: make the box
 * first, then the object, so a failed allocation of the box leaks nothing. */
void **lv_box_check(lua_State *L, int i, const char *mt, const char *what);
void **lv_box_new(lua_State *L, const char *mt);
/* lv_sparse.c: the V:N:M matrix at i (NULL once freed: the engine's calls
 * refuse a NULL matrix), or an argument error. */
vn_vnm *lv_check_vnm(lua_State *L, int i);
vn_tensor *lv_indices0(lua_State *L, int i, int64_t limit, const char *op, const char *what);
bool lv_is_integer_dtype(vn_dtype d);

/* lv_tensor.c: the tensor userdata on the stack, and luaopen_venom_core. */
vn_tensor *lv_totensor(lua_State *L, int i);
vn_tensor *lv_check(lua_State *L, int i);
vn_tensor *lv_optcheck(lua_State *L, int i);
int lv_push(lua_State *L, vn_tensor *t);
int lv_push_new(lua_State *L, vn_tensor *t, const lv_opts *o);
int lv_push2(lua_State *L, vn_tensor *a, vn_tensor *b);
vn_tensor *lv_keepdim_all(vn_tensor *r, int ndim, bool keepdim);

/* lv_view.c: views and copies (reshape, narrow, to, cat, copy_, ...). */
extern const luaL_Reg lv_view_methods[];
extern const luaL_Reg lv_view_functions[];

/* lv_ops.c: arithmetic, comparisons, pointwise ops, where, reductions,
 * matmul, and the metamethods + - * / ^ and < <=. */
extern const luaL_Reg lv_ops_methods[];
extern const luaL_Reg lv_ops_functions[];
extern const luaL_Reg lv_ops_meta[];

/* lv_nn.c: linear, softmax, losses, dropout. */
extern const luaL_Reg lv_nn_methods[];
extern const luaL_Reg lv_nn_functions[];

/* lv_optim.c: the optimizer steps (sgd_step, adam_step, adam_step_multi). */
extern const luaL_Reg lv_optim_functions[];

/* lv_autograd.c: backward, requires_grad, detach, grad mode; t.grad. */
extern const luaL_Reg lv_autograd_methods[];
extern const luaL_Reg lv_autograd_functions[];
int lv_push_grad(lua_State *L, vn_tensor *t);

/* lv_system.c: memory_stats, empty_cache, clock, isatty, idx_load. */
extern const luaL_Reg lv_system_functions[];

/* lv_checkpoint.c: venom.save/load and the RNG state. */
extern const luaL_Reg lv_checkpoint_functions[];

/* lv_sparse.c: V:N:M sparse matrices (venom.VNM userdata) and their ops. */
extern const luaL_Reg lv_sparse_functions[];

/* lv_graph.c: CSR graphs (venom.Graph userdata) and their SAGA-NN ops;
 * lv_graph_open makes the metatable and core.graph_methods. */
extern const luaL_Reg lv_graph_functions[];
void lv_graph_open(lua_State *L);

/* lv_moe.c: Mixture-of-Experts dispatch (scatter_add_rows, moe_route). */
extern const luaL_Reg lv_moe_functions[];
/* lv_dynamic.c: dynamic activation sparsity (act_sparse_linear). */
extern const luaL_Reg lv_dynamic_functions[];

/* lv_device.c: t:cuda()/cpu()/device()/is_cuda(), venom.cuda_* and autocast. */
extern const luaL_Reg lv_device_methods[];
extern const luaL_Reg lv_device_functions[];
int lv_device_name_at(lua_State *L, int i);

/* lv_dist.c: collectives over MPI and DataParallel's gradient reducer. */
extern const luaL_Reg lv_dist_functions[];

/* lv_transformer.c: embedding, layer_norm and causal_attention. */
extern const luaL_Reg lv_transformer_functions[];

/* lv_image.c: images through stb_image (load, save, resize, crop, hflip)
 * and the directory listing and mkdir of image folders. */
extern const luaL_Reg lv_image_functions[];
/* lv_quant.c: BitNet b1.58 (bitlinear, ternary_pack/unpack/check/matmul). */
extern const luaL_Reg lv_quant_functions[];
/* lv_conv.c: conv2d, im2col, pooling, batch_norm; x:flatten(). */
extern const luaL_Reg lv_conv_methods[];
extern const luaL_Reg lv_conv_functions[];

/* lv_convert.c: Lua tables <-> tensors, and printing; the rule for a Lua
 * number becoming an element of a dtype (lv_representable) and its error. */
bool lv_representable(vn_dtype d, double v);
void lv_check_representable(lua_State *L, const char *op, double v, vn_dtype d, const char *hint);
int l_tensor(lua_State *L);
int l_totable(lua_State *L);
int l_tostring(lua_State *L);
int l_concat(lua_State *L);

#endif
