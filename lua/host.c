/* host.c — the Lua bridge for C programs (venom_lua.h): opening states with
 * venom loadable, running code, and moving tensors across without copies.
 *
 * Every call into Lua runs under lua_cpcall, so a Lua error (or Lua running
 * out of memory) comes back as a status, never as a longjmp through the
 * host. Each protected worker reports its own failures through
 * vn_set_error() and returns normally; a raise that escapes a worker is
 * turned into VN_ERR_SCRIPT by `protected`. */
#define _GNU_SOURCE /* dladdr */
#include "venom_lua.h"

#include "binding.h"
#include "lv.h"

#include <lauxlib.h>
#include <lualib.h>

#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef VENOM_LUA_DIR
#define VENOM_LUA_DIR "lua"
#endif
#ifndef VENOM_INSTALL_LUA_DIR
#define VENOM_INSTALL_LUA_DIR "/usr/local/share/lua/5.1"
#endif
#ifndef VENOM_LUA_REL_DIR
#define VENOM_LUA_REL_DIR "../share/lua/5.1"
#endif

/* ---- where the Lua modules are ----------------------------------------------- */

static char module_dir[PATH_MAX];
static pthread_once_t module_dir_once = PTHREAD_ONCE_INIT;

static bool has_venom(const char *dir)
{
    char path[PATH_MAX];
    int n = snprintf(path, sizeof path, "%s/venom/init.lua", dir);
    return n > 0 && (size_t)n < sizeof path && access(path, R_OK) == 0;
}

/* An installed library finds the modules relative to itself (so a moved or
 * DESTDIR-staged prefix still works); a library in the build tree finds the
 * source tree's; the configured install directory is the last resort. */
static void find_module_dir(void)
{
    Dl_info info;
    char lib[PATH_MAX], cand[PATH_MAX];
    if (dladdr((void *)vn_lua_open, &info) && info.dli_fname && realpath(info.dli_fname, lib)) {
        int n = snprintf(cand, sizeof cand, "%s/%s", dirname(lib), VENOM_LUA_REL_DIR);
        if (n > 0 && (size_t)n < sizeof cand && has_venom(cand) && realpath(cand, module_dir))
            return;
    }
    snprintf(module_dir, sizeof module_dir, "%s",
             has_venom(VENOM_LUA_DIR) ? VENOM_LUA_DIR : VENOM_INSTALL_LUA_DIR);
}

const char *vn_lua_module_dir(void)
{
    pthread_once(&module_dir_once, find_module_dir);
    return module_dir;
}

/* ---- protected calls ------------------------------------------------------------ */

/* Runs worker(L) with `job` as its light userdata argument under lua_cpcall.
 * The worker sets job's status itself; an error it raises becomes
 * VN_ERR_SCRIPT with Lua's message. */
typedef struct {
    vn_status status;
} job_head;

static vn_status protected(lua_State *L, lua_CFunction worker, job_head *job, const char *what)
{
    job->status = VN_OK;
    int top = lua_gettop(L);
    if (lua_cpcall(L, worker, job) != 0) {
        const char *msg = lua_tostring(L, -1);
        job->status = vn_set_error(VN_ERR_SCRIPT, "%s: %s", what, msg ? msg : "(no message)");
    }
    lua_settop(L, top);
    return job->status;
}

/* Message handler: the error text plus a stack traceback. */
static int traceback(lua_State *L)
{
    const char *msg = lua_tostring(L, 1);
    if (!msg) msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
    luaL_traceback(L, L, msg, 1);
    return 1;
}

/* Call the function below nargs arguments with the traceback handler; on an
 * error store it as VN_ERR_SCRIPT. Leaves nres results (or nothing). */
static vn_status call_traced(lua_State *L, int nargs, int nres)
{
    int base = lua_gettop(L) - nargs;
    lua_pushcfunction(L, traceback);
    lua_insert(L, base);
    int rc = lua_pcall(L, nargs, nres, base);
    lua_remove(L, base);
    if (rc == 0) return VN_OK;
    vn_status s = vn_set_error(VN_ERR_SCRIPT, "%s", lua_tostring(L, -1) ? lua_tostring(L, -1)
                                                                         : "(error object is not a string)");
    lua_pop(L, 1);
    return s;
}

/* ---- states ---------------------------------------------------------------------- */

static int setup_worker(lua_State *L)
{
    job_head *job = lua_touserdata(L, 1);
    lua_getglobal(L, "package");
    if (!lua_istable(L, -1)) {
        job->status = vn_set_error(VN_ERR_SCRIPT, "vn_lua_setup: the state has no package "
                                                  "library (open the standard libraries first)");
        return 0;
    }
    const char *dir = vn_lua_module_dir();
    lua_getfield(L, -1, "path");
    lua_pushfstring(L, "%s/?.lua;%s/?/init.lua;%s", dir, dir,
                    lua_isstring(L, -1) ? lua_tostring(L, -1) : "");
    lua_setfield(L, -3, "path");
    lua_pop(L, 1);
    lua_getfield(L, -1, "preload");
    if (lua_istable(L, -1)) {
        lua_pushcfunction(L, luaopen_venom_core);
        lua_setfield(L, -2, "venom.core");
    }
    return 0;
}

vn_status vn_lua_setup(lua_State *L)
{
    if (!L) return vn_set_error(VN_ERR_ARG, "vn_lua_setup: expected a lua_State, got NULL");
    job_head job;
    return protected(L, setup_worker, &job, "vn_lua_setup");
}

static int open_worker(lua_State *L)
{
    job_head *job = lua_touserdata(L, 1);
    luaL_openlibs(L);
    setup_worker(L);
    if (job->status) return 0;
    lua_getglobal(L, "require");
    lua_pushliteral(L, "venom");
    if ((job->status = call_traced(L, 1, 1))) return 0;
    lua_setglobal(L, "venom");
    return 0;
}

lua_State *vn_lua_open(void)
{
    lua_State *L = luaL_newstate();
    if (!L) {
        vn_set_error(VN_ERR_MEMORY, "vn_lua_open: cannot create a Lua state (out of memory)");
        return NULL;
    }
    job_head job;
    if (protected(L, open_worker, &job, "vn_lua_open")) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", vn_last_error());
        lua_close(L);
        vn_set_error(job.status, "vn_lua_open: venom did not load (%s)", msg);
        return NULL;
    }
    return L;
}

void vn_lua_close(lua_State *L)
{
    if (L) lua_close(L);
}

/* ---- running code ------------------------------------------------------------------ */

typedef struct {
    job_head head;
    const char *code, *path;
    int argc;
    const char *const *argv;
} run_job;

static int string_worker(lua_State *L)
{
    run_job *job = lua_touserdata(L, 1);
    if (luaL_loadbuffer(L, job->code, strlen(job->code), "=(vn_lua_run_string)")) {
        job->head.status = vn_set_error(VN_ERR_SCRIPT, "%s", lua_tostring(L, -1));
        return 0;
    }
    job->head.status = call_traced(L, 0, 0);
    return 0;
}

vn_status vn_lua_run_string(lua_State *L, const char *code)
{
    if (!L || !code)
        return vn_set_error(VN_ERR_ARG, "vn_lua_run_string: %s is NULL", L ? "code" : "the state");
    run_job job = {.code = code};
    return protected(L, string_worker, &job.head, "vn_lua_run_string");
}

static int file_worker(lua_State *L)
{
    run_job *job = lua_touserdata(L, 1);
    lua_createtable(L, job->argc, 1);
    lua_pushstring(L, job->path);
    lua_rawseti(L, -2, 0);
    for (int i = 0; i < job->argc; i++) {
        lua_pushstring(L, job->argv[i]);
        lua_rawseti(L, -2, i + 1);
    }
    lua_setglobal(L, "arg");
    if (luaL_loadfile(L, job->path)) {
        job->head.status = vn_set_error(VN_ERR_SCRIPT, "%s", lua_tostring(L, -1));
        return 0;
    }
    luaL_checkstack(L, job->argc + 2, "too many arguments for the script");
    for (int i = 0; i < job->argc; i++) lua_pushstring(L, job->argv[i]);
    job->head.status = call_traced(L, job->argc, 0);
    return 0;
}

vn_status vn_lua_run_file(lua_State *L, const char *path, int argc, const char *const *argv)
{
    if (!L || !path)
        return vn_set_error(VN_ERR_ARG, "vn_lua_run_file: %s is NULL", L ? "path" : "the state");
    if (argc < 0 || (argc > 0 && !argv))
        return vn_set_error(VN_ERR_ARG, "vn_lua_run_file: argc %d with %s argv", argc,
                            argv ? "an" : "a NULL");
    for (int i = 0; i < argc; i++)
        if (!argv[i]) return vn_set_error(VN_ERR_ARG, "vn_lua_run_file: argv[%d] is NULL", i);
    run_job job = {.path = path, .argc = argc, .argv = argv};
    return protected(L, file_worker, &job.head, "vn_lua_run_file");
}

/* ---- tensors across the boundary ------------------------------------------------------ */

/* A tensor the host hands in must be usable: `what` names it for messages. */
static vn_status check_handed(const vn_tensor *t, const char *what)
{
    if (!t) return vn_set_error(VN_ERR_ARG, "%s: expected a tensor, got NULL", what);
    if (vn_tensor_is_freed(t)) return vn_set_error(VN_ERR_STATE, "%s: the tensor was freed", what);
    return VN_OK;
}

/* The tensor value at index i as a new reference, or NULL with an error
 * naming `what` and the Lua type found. */
static vn_tensor *take_tensor(lua_State *L, int i, const char *what)
{
    vn_tensor *t = lv_totensor(L, i);
    if (!t) {
        vn_set_error(VN_ERR_ARG, "%s: expected a venom tensor, found %s", what, luaL_typename(L, i));
        return NULL;
    }
    if (vn_tensor_is_freed(t)) {
        vn_set_error(VN_ERR_STATE, "%s: the tensor was freed (t:free())", what);
        return NULL;
    }
    return vn_tensor_retain(t);
}

typedef struct {
    job_head head;
    const char *name;
    vn_tensor *t;
} tensor_job;

/* Pushes the job's tensor (retained) as a userdata sharing it. */
static int push_worker(lua_State *L)
{
    tensor_job *job = lua_touserdata(L, 1);
    lv_push(L, vn_tensor_retain(job->t));
    return 1;
}

vn_status vn_lua_push_tensor(lua_State *L, vn_tensor *t)
{
    if (!L) return vn_set_error(VN_ERR_ARG, "vn_lua_push_tensor: the state is NULL");
    vn_status s = check_handed(t, "vn_lua_push_tensor");
    if (s) return s;
    /* lua_cpcall drops results, so this one call runs through lua_pcall to
     * keep the new value on the stack. */
    tensor_job job = {.t = t};
    lua_pushcfunction(L, push_worker);
    lua_pushlightuserdata(L, &job);
    if (lua_pcall(L, 1, 1, 0) != 0) {
        s = vn_set_error(VN_ERR_SCRIPT, "vn_lua_push_tensor: %s", lua_tostring(L, -1));
        lua_pop(L, 1);
    }
    return s;
}

vn_tensor *vn_lua_to_tensor(lua_State *L, int index)
{
    if (!L) {
        vn_set_error(VN_ERR_ARG, "vn_lua_to_tensor: the state is NULL");
        return NULL;
    }
    char what[64];
    snprintf(what, sizeof what, "vn_lua_to_tensor: stack index %d", index);
    return take_tensor(L, index, what);
}

static int set_worker(lua_State *L)
{
    tensor_job *job = lua_touserdata(L, 1);
    if (job->t) lv_push(L, vn_tensor_retain(job->t));
    else lua_pushnil(L);
    lua_setglobal(L, job->name);
    return 0;
}

vn_status vn_lua_set_tensor(lua_State *L, const char *name, vn_tensor *t)
{
    if (!L || !name)
        return vn_set_error(VN_ERR_ARG, "vn_lua_set_tensor: %s is NULL", L ? "name" : "the state");
    if (t && vn_tensor_is_freed(t))
        return vn_set_error(VN_ERR_STATE, "vn_lua_set_tensor: '%s': the tensor was freed", name);
    tensor_job job = {.name = name, .t = t};
    return protected(L, set_worker, &job.head, "vn_lua_set_tensor");
}

static int get_worker(lua_State *L)
{
    tensor_job *job = lua_touserdata(L, 1);
    char what[128];
    snprintf(what, sizeof what, "vn_lua_get_tensor: global '%s'", job->name);
    lua_getglobal(L, job->name);
    job->t = take_tensor(L, -1, what);
    if (!job->t) job->head.status = vn_last_status();
    return 0;
}

vn_tensor *vn_lua_get_tensor(lua_State *L, const char *name)
{
    if (!L || !name) {
        vn_set_error(VN_ERR_ARG, "vn_lua_get_tensor: %s is NULL", L ? "name" : "the state");
        return NULL;
    }
    tensor_job job = {.name = name};
    if (protected(L, get_worker, &job.head, "vn_lua_get_tensor")) {
        vn_tensor_release(job.t);
        return NULL;
    }
    return job.t;
}

/* ---- calling a Lua function ----------------------------------------------------------------- */

typedef struct {
    job_head head;
    const char *fn;
    int nargs, nres;
    vn_tensor *const *args;
    vn_tensor **res;
} call_job;

static int call_worker(lua_State *L)
{
    call_job *job = lua_touserdata(L, 1);
    lua_getglobal(L, job->fn);
    if (!lua_isfunction(L, -1)) {
        job->head.status = vn_set_error(VN_ERR_ARG, "vn_lua_call: global '%s' is %s, expected a "
                                                    "function", job->fn, luaL_typename(L, -1));
        return 0;
    }
    luaL_checkstack(L, job->nargs + job->nres + 2, "too many arguments or results");
    for (int i = 0; i < job->nargs; i++) lv_push(L, vn_tensor_retain(job->args[i]));
    int base = lua_gettop(L) - job->nargs; /* where the results will start */
    if ((job->head.status = call_traced(L, job->nargs, job->nres))) return 0;
    for (int i = 0; i < job->nres; i++) {
        if (lua_isnil(L, base + i)) continue;
        char what[128];
        snprintf(what, sizeof what, "vn_lua_call: '%s' result %d", job->fn, i + 1);
        if (!(job->res[i] = take_tensor(L, base + i, what))) {
            job->head.status = vn_last_status();
            return 0;
        }
    }
    return 0;
}

vn_status vn_lua_call(lua_State *L, const char *fn, int nargs, vn_tensor *const *args, int nres,
                      vn_tensor **res)
{
    if (!L || !fn)
        return vn_set_error(VN_ERR_ARG, "vn_lua_call: %s is NULL", L ? "fn" : "the state");
    if (nargs < 0 || nres < 0 || (nargs > 0 && !args) || (nres > 0 && !res))
        return vn_set_error(VN_ERR_ARG, "vn_lua_call: '%s': %d arguments%s and %d results%s", fn,
                            nargs, nargs > 0 && !args ? " in a NULL array" : "", nres,
                            nres > 0 && !res ? " into a NULL array" : "");
    for (int i = 0; i < nres; i++) res[i] = NULL;
    for (int i = 0; i < nargs; i++) {
        char what[128];
        snprintf(what, sizeof what, "vn_lua_call: '%s' argument %d", fn, i + 1);
        vn_status s = check_handed(args[i], what);
        if (s) return s;
    }
    call_job job = {.fn = fn, .nargs = nargs, .nres = nres, .args = args, .res = res};
    vn_status s = protected(L, call_worker, &job.head, "vn_lua_call");
    if (s)
        for (int i = 0; i < nres; i++) {
            vn_tensor_release(res[i]);
            res[i] = NULL;
        }
    return s;
}
