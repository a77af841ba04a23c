/* venom_lua.h — the Lua bridge for C programs (libvenom_lua).
 *
 * Opens LuaJIT states with the `venom` module ready to `require`, runs Lua
 * scripts and strings in them, and hands tensors between C and Lua without
 * copying: a tensor pushed into Lua is the same vn_tensor (same header, same
 * storage) that the C side holds, and a tensor taken out of Lua is the
 * object the script holds.
 *
 *     lua_State *L = vn_lua_open();
 *     vn_lua_set_tensor(L, "x", x);              // Lua sees x, no copy
 *     vn_lua_run_file(L, "train.lua", 0, NULL);
 *     vn_tensor *w = vn_lua_get_tensor(L, "w");  // a new reference
 *     vn_lua_close(L);
 *
 * Link with `pkg-config --cflags --libs venom-lua` or the CMake target
 * venom::venom_lua. This header needs only venom.h; include <lua.h> (and
 * link luajit) only to use the returned lua_State with the Lua C API.
 *
 * Conventions, as in venom.h: every function returns a vn_status or NULL on
 * failure and leaves the message in vn_last_error() and the status in
 * vn_last_status(). A Lua syntax or runtime error is VN_ERR_SCRIPT, with
 * Lua's message and a stack traceback as the message (cut to ~1 KB). Nothing
 * here raises a Lua error into the host or aborts: every call into Lua runs
 * protected. (Lua itself panics if it cannot allocate outside a protected
 * call, which these functions avoid.)
 *
 * Ownership. Pushing a tensor into Lua retains it: the Lua value holds one
 * reference, dropped when Lua's garbage collector collects the value (or at
 * vn_lua_close), so the host may release its own reference at once. A
 * tensor returned to the host (vn_lua_get_tensor, vn_lua_to_tensor,
 * vn_lua_call results) is a new reference the host releases. A script that
 * calls t:free() on a tensor the host handed in frees it for the host too:
 * the host's later calls on it fail with VN_ERR_STATE.
 *
 * Indices. Lua code counts from 1 (dims, class targets, argmax results);
 * the C API counts from 0. Tensors cross the bridge unchanged, so a host
 * handing 0-based class ids to a script converts them (y + 1) in Lua, and
 * back (pred - 1) for results, as the tutorial's train.lua does.
 *
 * Threads. A lua_State belongs to one thread at a time; distinct states may
 * run on distinct threads at once (the rules of venom.h apply to the tensors
 * they share). Grad mode is per thread, so venom.no_grad in one state does
 * not affect a state running on another thread.
 */
#ifndef VENOM_LUA_H
#define VENOM_LUA_H

#include "venom.h"

#ifdef __cplusplus
extern "C" {
#endif

struct lua_State;

/* A new LuaJIT state with the standard libraries open, the venom modules
 * findable (vn_lua_setup) and `venom` loaded into the global `venom`.
 * Returns NULL on failure: VN_ERR_MEMORY (no state), VN_ERR_SCRIPT (the
 * venom Lua modules did not load: the message lists where Lua looked). */
struct lua_State *vn_lua_open(void);

/* Close a state from vn_lua_open (NULL-safe). Tensors only Lua held are
 * released; the host's own references stay valid. */
void vn_lua_close(struct lua_State *L);

/* Make venom loadable in a state the host opened itself (standard libraries
 * already open): registers the compiled venom.core module in package.preload
 * and puts venom's Lua module directory first on package.path. It does not
 * require venom. Errors: VN_ERR_ARG (L NULL), VN_ERR_SCRIPT (package
 * library missing). */
vn_status vn_lua_setup(struct lua_State *L);

/* The directory holding venom's Lua modules (venom/init.lua, ...) that
 * vn_lua_setup puts on package.path: the installed share/lua/5.1 next to
 * this library when it is installed, else the source tree's lua/. */
const char *vn_lua_module_dir(void);

/* Run a chunk of Lua code (with `venom` as a global after vn_lua_open).
 * Errors: VN_ERR_ARG (NULL argument), VN_ERR_SCRIPT. */
vn_status vn_lua_run_string(struct lua_State *L, const char *code);

/* Run a Lua file. The global `arg` is set as by the venom executable:
 * arg[0] = path, arg[1..argc] = argv[0..argc-1]; the chunk also receives
 * argv as `...`. argv may be NULL when argc is 0. Errors: VN_ERR_ARG,
 * VN_ERR_SCRIPT (including a missing or unreadable file). */
vn_status vn_lua_run_file(struct lua_State *L, const char *path, int argc,
                          const char *const *argv);

/* Push t onto L's stack as a venom tensor (retained: the same vn_tensor,
 * no copy). For hosts that use the Lua C API. Errors: VN_ERR_ARG (NULL),
 * VN_ERR_STATE (t was freed), VN_ERR_SCRIPT (Lua out of memory). */
vn_status vn_lua_push_tensor(struct lua_State *L, vn_tensor *t);

/* The tensor at stack index `index` of L, as a new reference (the object the
 * Lua value wraps, no copy). NULL with VN_ERR_ARG if the value is not a
 * venom tensor, VN_ERR_STATE if it was freed. The stack is unchanged. */
vn_tensor *vn_lua_to_tensor(struct lua_State *L, int index);

/* Set the global `name` to t (retained; NULL sets it to nil). Errors:
 * VN_ERR_ARG, VN_ERR_STATE (t freed), VN_ERR_SCRIPT. */
vn_status vn_lua_set_tensor(struct lua_State *L, const char *name, vn_tensor *t);

/* The tensor in the global `name`, as a new reference. NULL with VN_ERR_ARG
 * if the global is not a tensor (the message says what it is). */
vn_tensor *vn_lua_get_tensor(struct lua_State *L, const char *name);

/* Call the global function `fn` with nargs tensors (each retained by Lua
 * for the call; none copied) and collect nres results into res[0..nres-1]
 * as new references. A result that is nil or missing gives NULL; one that
 * is neither nil nor a tensor is a VN_ERR_ARG error (res then holds only
 * NULLs). Errors: VN_ERR_ARG (fn not a function, bad counts, NULL or freed
 * argument), VN_ERR_SCRIPT (the function raised an error). */
vn_status vn_lua_call(struct lua_State *L, const char *fn, int nargs, vn_tensor *const *args,
                      int nres, vn_tensor **res);

#ifdef __cplusplus
}
#endif
#endif
