/* The Lua bridge (venom_lua.h): states, running code, tensors crossing
 * without copies, references held and dropped by Lua, every failure coming
 * back as a status and message (never a Lua error thrown into C), bad
 * handles, and states on two threads at once. */
#include "gradcheck.h"
#include "venom_lua.h"

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const int64_t S23[] = {2, 3};

static void expect_fail(vn_status got, vn_status want, const char *needle, const char *what)
{
    if (got != want || vn_last_status() != want || !strstr(vn_last_error(), needle))
        fail_msg("%s: expected %s with '%s', got %s: '%s'", what, vn_status_name(want), needle,
                 vn_status_name(got), vn_last_error());
}

/* A pointer result as a status (the result released). */
static vn_status ptr_or(vn_tensor *t)
{
    if (!t) return vn_last_status();
    vn_tensor_release(t);
    return VN_OK;
}

static lua_State *open_state(void)
{
    lua_State *L = vn_lua_open();
    CHECK_PTR(L);
    return L;
}

static void test_open_and_run(void **state)
{
    lua_State *L = open_state();
    char init[4096];
    snprintf(init, sizeof init, "%s/venom/init.lua", vn_lua_module_dir());
    assert_int_equal(access(init, R_OK), 0);
    CHECK_OK(vn_lua_run_string(L, "assert(venom.ones(2, 2):sum():item() == 4)"));
    /* the global venom is the module require gives */
    CHECK_OK(vn_lua_run_string(L, "assert(venom == require 'venom' and venom.nn)"));
    expect_fail(vn_lua_run_string(L, "x = = 1"), VN_ERR_SCRIPT, "(vn_lua_run_string):1:",
                "syntax error");
    expect_fail(vn_lua_run_string(L, "local function f() error('boom') end\nf()"),
                VN_ERR_SCRIPT, "boom", "runtime error");
    assert_non_null(strstr(vn_last_error(), "stack traceback"));
    /* an engine error raised in Lua keeps the engine's words */
    expect_fail(vn_lua_run_string(L, "venom.zeros(2, 3):matmul(venom.zeros(4, 5))"),
                VN_ERR_SCRIPT, "inner dims 3 and 4 differ", "engine error");
    /* the state is still usable after errors */
    CHECK_OK(vn_lua_run_string(L, "ok = true"));
    vn_lua_close(L);
    vn_lua_close(NULL);
}

static void test_run_file(void **state)
{
    char path[] = "/tmp/venom_bridge_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char code[] =
        "local a, b = ...\n"
        "assert(select('#', ...) == 2 and a == 'one' and b == 'two')\n"
        "assert(arg[0] == SCRIPT and arg[1] == 'one' and arg[2] == 'two')\n"
        "result = venom.tensor({1, 2, 3}) * 2\n";
    assert_int_equal(write(fd, code, sizeof code - 1), (ssize_t)(sizeof code - 1));
    close(fd);
    lua_State *L = open_state();
    char set[256];
    snprintf(set, sizeof set, "SCRIPT = '%s'", path);
    CHECK_OK(vn_lua_run_string(L, set));
    const char *argv[] = {"one", "two"};
    CHECK_OK(vn_lua_run_file(L, path, 2, argv));
    vn_tensor *r = vn_lua_get_tensor(L, "result");
    CHECK_PTR(r);
    float got[3];
    CHECK_OK(vn_tensor_copy_out(r, got, sizeof got));
    assert_true(got[0] == 2 && got[1] == 4 && got[2] == 6);
    vn_tensor_release(r);
    expect_fail(vn_lua_run_file(L, path, 0, NULL), VN_ERR_SCRIPT, "assertion failed",
                "script without its arguments");
    unlink(path);
    expect_fail(vn_lua_run_file(L, path, 0, NULL), VN_ERR_SCRIPT, path, "missing file");
    expect_fail(vn_lua_run_file(L, path, 1, NULL), VN_ERR_ARG, "argv", "argc without argv");
    vn_lua_close(L);
}

/* Tensors cross as themselves: the same vn_tensor and storage, Lua's writes
 * visible to C, and Lua's reference keeping a tensor alive after C drops
 * its own. */
static void test_tensors_cross_without_copies(void **state)
{
    lua_State *L = open_state();
    const float vals[] = {1, 2, 3, 4, 5, 6};
    vn_tensor *t = tf32(2, S23, vals);
    float *data = vn_tensor_data(t);
    CHECK_OK(vn_lua_set_tensor(L, "t", t));
    CHECK_OK(vn_lua_run_string(L, "t:mul_(10); assert(t:get(2, 3) == 60)"));
    assert_true(data[5] == 60 && data[0] == 10);

    vn_tensor *back = vn_lua_get_tensor(L, "t");
    assert_ptr_equal(back, t);
    vn_tensor_release(back);

    /* C drops its reference; Lua's keeps the tensor and its values */
    vn_tensor_release(t);
    back = vn_lua_get_tensor(L, "t");
    CHECK_PTR(back);
    assert_ptr_equal(vn_tensor_data(back), data);
    assert_true(((float *)vn_tensor_data(back))[1] == 20);

    /* call: arguments and results are the same objects */
    CHECK_OK(vn_lua_run_string(L, "function same(a) return a, a:view(6) end"));
    vn_tensor *res[2];
    CHECK_OK(vn_lua_call(L, "same", 1, &back, 2, res));
    assert_ptr_equal(res[0], back);
    assert_ptr_equal(vn_tensor_data(res[1]), data); /* a view: shared storage */
    assert_int_equal(vn_tensor_ndim(res[1]), 1);
    vn_tensor_release(res[0]);
    vn_tensor_release(res[1]);

    /* a script that frees a host tensor frees it for the host too */
    CHECK_OK(vn_lua_run_string(L, "function kill(a) a:free() end"));
    CHECK_OK(vn_lua_call(L, "kill", 1, &back, 0, NULL));
    assert_true(vn_tensor_is_freed(back));
    vn_clear_error();
    assert_null(vn_tensor_data(back));
    assert_int_equal(vn_last_status(), VN_ERR_STATE);
    vn_tensor_release(back);
    vn_lua_close(L);
}

/* Lua drops its reference when the value is collected or the state closed. */
static void test_lua_references_are_released(void **state)
{
    lua_State *L = open_state();
    CHECK_OK(vn_lua_run_string(L, "collectgarbage()"));
    size_t base, now;
    vn_memory_stats(&base, NULL);
    int64_t big[] = {1024, 1024}; /* 4 MiB */
    vn_tensor *t = vn_zeros(VN_F32, 2, big);
    CHECK_PTR(t);
    CHECK_OK(vn_lua_set_tensor(L, "big", t));
    vn_tensor_release(t);
    vn_memory_stats(&now, NULL);
    assert_true(now >= base + ((size_t)4 << 20)); /* alive: Lua holds it */
    CHECK_OK(vn_lua_set_tensor(L, "big", NULL));
    CHECK_OK(vn_lua_run_string(L, "assert(big == nil); collectgarbage(); collectgarbage()"));
    vn_memory_stats(&now, NULL);
    assert_true(now < base + ((size_t)4 << 20));

    /* closing the state releases what only Lua held */
    t = vn_zeros(VN_F32, 2, big);
    CHECK_OK(vn_lua_set_tensor(L, "big", t));
    vn_tensor_release(t);
    vn_lua_close(L);
    vn_memory_stats(&now, NULL);
    assert_true(now < base + ((size_t)4 << 20));
}

static void test_call_failures(void **state)
{
    lua_State *L = open_state();
    vn_tensor *t = vn_zeros(VN_F32, 2, S23), *res[2] = {t, t};
    CHECK_PTR(t);
    CHECK_OK(vn_lua_run_string(L, "function two() return venom.ones(1), 42 end\n"
                                  "function none() end\n"
                                  "function fails(a) return a:matmul(a) end\n"
                                  "n = 7"));
    expect_fail(vn_lua_call(L, "nothing", 0, NULL, 0, NULL), VN_ERR_ARG, "is nil", "missing fn");
    expect_fail(vn_lua_call(L, "n", 0, NULL, 0, NULL), VN_ERR_ARG, "is number", "fn not a function");
    expect_fail(vn_lua_call(L, "two", 0, NULL, 2, res), VN_ERR_ARG, "result 2", "number result");
    assert_null(res[0]); /* nothing leaks, nothing half-filled */
    assert_null(res[1]);
    CHECK_OK(vn_lua_call(L, "none", 0, NULL, 2, res));
    assert_null(res[0]);
    assert_null(res[1]);
    expect_fail(vn_lua_call(L, "fails", 1, &t, 1, res), VN_ERR_SCRIPT, "matmul", "error inside");
    assert_null(res[0]);
    vn_tensor *null_arg = NULL;
    expect_fail(vn_lua_call(L, "none", 1, &null_arg, 0, NULL), VN_ERR_ARG, "NULL", "NULL argument");
    expect_fail(vn_lua_call(L, "none", 1, NULL, 0, NULL), VN_ERR_ARG, "NULL array", "NULL args");
    expect_fail(vn_lua_call(L, "none", -1, NULL, 0, NULL), VN_ERR_ARG, "-1 arguments", "nargs < 0");
    expect_fail(ptr_or(vn_lua_get_tensor(L, "n")), VN_ERR_ARG, "found number", "number global");
    expect_fail(ptr_or(vn_lua_get_tensor(L, "absent")), VN_ERR_ARG, "found nil", "nil global");
    vn_tensor *freed = vn_zeros(VN_F32, 2, S23);
    vn_tensor_free(freed);
    expect_fail(vn_lua_call(L, "none", 1, &freed, 0, NULL), VN_ERR_STATE, "freed", "freed argument");
    expect_fail(vn_lua_set_tensor(L, "f", freed), VN_ERR_STATE, "freed", "set freed");
    expect_fail(vn_lua_push_tensor(L, freed), VN_ERR_STATE, "freed", "push freed");
    CHECK_OK(vn_lua_set_tensor(L, "t", t));
    CHECK_OK(vn_lua_run_string(L, "t:free()"));
    expect_fail(ptr_or(vn_lua_get_tensor(L, "t")), VN_ERR_STATE, "freed", "get freed");
    vn_tensor_release(freed);
    vn_tensor_release(t);
    vn_lua_close(L);
}

/* A host that opened its own state: setup, push, to_tensor. */
static void test_host_state(void **state)
{
    lua_State *L = luaL_newstate();
    assert_non_null(L);
    luaL_openlibs(L);
    CHECK_OK(vn_lua_setup(L));
    CHECK_OK(vn_lua_run_string(L, "venom = require 'venom'"));
    vn_tensor *t = vn_ones(VN_I64, 2, S23);
    CHECK_PTR(t);
    int top = lua_gettop(L);
    CHECK_OK(vn_lua_push_tensor(L, t));
    assert_int_equal(lua_gettop(L), top + 1);
    lua_setglobal(L, "pushed");
    CHECK_OK(vn_lua_run_string(L, "assert(pushed:dtype() == 'i64' and pushed:sum():item() == 6)"));
    lua_getglobal(L, "pushed");
    vn_tensor *back = vn_lua_to_tensor(L, -1);
    assert_ptr_equal(back, t);
    vn_tensor_release(back);
    lua_pushnumber(L, 3);
    expect_fail(ptr_or(vn_lua_to_tensor(L, -1)), VN_ERR_ARG, "found number", "to_tensor(number)");
    assert_int_equal(lua_gettop(L), top + 2); /* the stack is left alone */
    lua_settop(L, top);
    lua_close(L);
    vn_tensor_release(t);

    lua_State *bare = luaL_newstate(); /* no standard libraries: no package */
    expect_fail(vn_lua_setup(bare), VN_ERR_SCRIPT, "package", "setup without package");
    lua_close(bare);
}

static void test_null_handles(void **state)
{
    vn_tensor *t = vn_zeros(VN_F32, 2, S23), *res;
    CHECK_PTR(t);
    expect_fail(vn_lua_setup(NULL), VN_ERR_ARG, "NULL", "setup(NULL)");
    expect_fail(vn_lua_run_string(NULL, "x = 1"), VN_ERR_ARG, "NULL", "run_string(NULL)");
    expect_fail(vn_lua_run_file(NULL, "x.lua", 0, NULL), VN_ERR_ARG, "NULL", "run_file(NULL)");
    expect_fail(vn_lua_push_tensor(NULL, t), VN_ERR_ARG, "NULL", "push(NULL)");
    expect_fail(ptr_or(vn_lua_to_tensor(NULL, 1)), VN_ERR_ARG, "NULL", "to_tensor(NULL)");
    expect_fail(vn_lua_set_tensor(NULL, "x", t), VN_ERR_ARG, "NULL", "set(NULL)");
    expect_fail(ptr_or(vn_lua_get_tensor(NULL, "x")), VN_ERR_ARG, "NULL", "get(NULL)");
    expect_fail(vn_lua_call(NULL, "f", 0, NULL, 1, &res), VN_ERR_ARG, "NULL", "call(NULL)");
    lua_State *L = open_state();
    expect_fail(vn_lua_run_string(L, NULL), VN_ERR_ARG, "NULL", "run_string(L, NULL)");
    expect_fail(vn_lua_run_file(L, NULL, 0, NULL), VN_ERR_ARG, "NULL", "run_file(L, NULL)");
    expect_fail(vn_lua_push_tensor(L, NULL), VN_ERR_ARG, "NULL", "push(L, NULL)");
    expect_fail(vn_lua_set_tensor(L, NULL, t), VN_ERR_ARG, "NULL", "set(L, NULL name)");
    expect_fail(ptr_or(vn_lua_get_tensor(L, NULL)), VN_ERR_ARG, "NULL", "get(L, NULL name)");
    expect_fail(vn_lua_call(L, NULL, 0, NULL, 0, NULL), VN_ERR_ARG, "NULL", "call(L, NULL fn)");
    expect_fail(vn_lua_call(L, "f", 0, NULL, 1, NULL), VN_ERR_ARG, "NULL array", "call NULL res");
    vn_lua_close(L);
    vn_tensor_release(t);
}

/* ---- two states on two threads --------------------------------------------------- */

typedef struct {
    int k;
    double sum;
    char error[512];
} thread_job;

/* Each thread trains its own tiny model in its own state, with no_grad
 * blocks in between; the result must match the same run on one thread. */
static void *lua_thread(void *arg)
{
    thread_job *j = arg;
    lua_State *L = vn_lua_open();
    char code[1024];
    snprintf(code, sizeof code,
             "local nn, optim = venom.nn, venom.optim\n"
             "local x = venom.arange(0, 24):reshape(8, 3) / 24 + %d\n"
             "local w = venom.full({3, 1}, 0.5):requires_grad_(true)\n"
             "local target = venom.ones(8, 1)\n"
             "for i = 1, 30 do\n"
             "  local loss = venom.mse_loss(x:matmul(w), target)\n"
             "  w:zero_grad(); loss:backward()\n"
             "  venom.no_grad(function() w:sub_(w.grad * 0.1) end)\n"
             "end\n"
             "out = venom.no_grad(function() return x:matmul(w):sum() end)\n",
             j->k);
    vn_tensor *out = NULL;
    if (!L || vn_lua_run_string(L, code) || !(out = vn_lua_get_tensor(L, "out")) ||
        vn_tensor_item(out, &j->sum))
        snprintf(j->error, sizeof j->error, "%s", vn_last_error());
    vn_tensor_release(out);
    vn_lua_close(L);
    return NULL;
}

static void test_states_on_threads(void **state)
{
    enum { N = 3 };
    thread_job alone[N], together[N];
    pthread_t th[N];
    for (int k = 0; k < N; k++) {
        alone[k] = (thread_job){.k = k};
        lua_thread(&alone[k]);
        if (alone[k].error[0]) fail_msg("job %d: %s", k, alone[k].error);
        together[k] = (thread_job){.k = k};
    }
    for (int k = 0; k < N; k++) assert_int_equal(pthread_create(&th[k], NULL, lua_thread, &together[k]), 0);
    for (int k = 0; k < N; k++) pthread_join(th[k], NULL);
    for (int k = 0; k < N; k++) {
        if (together[k].error[0]) fail_msg("job %d on a thread: %s", k, together[k].error);
        assert_true(together[k].sum == alone[k].sum);
    }
    assert_true(alone[0].sum != alone[1].sum); /* the jobs really differ */
}

int main(void)
{
    cmocka_set_message_output(CM_OUTPUT_TAP);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_and_run),
        cmocka_unit_test(test_run_file),
        cmocka_unit_test(test_tensors_cross_without_copies),
        cmocka_unit_test(test_lua_references_are_released),
        cmocka_unit_test(test_call_failures),
        cmocka_unit_test(test_host_state),
        cmocka_unit_test(test_null_handles),
        cmocka_unit_test(test_states_on_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
