/* drive_lua.c — a C program that drives a Lua training script through the
 * bridge (venom_lua.h, libvenom_lua).
 *
 *   drive_lua [train.lua]     (default: train.lua next to this program's source)
 *
 * The C side makes the data; the Lua side (train.lua) standardizes it in
 * place and trains a model on it; the C side reads the results. Tensors
 * cross without copies: standardize_ hands back the very tensor, and the
 * storage, that C made. Build it against an installed venom with
 *
 *   cc drive_lua.c $(pkg-config --cflags --libs venom-lua) -o drive_lua */
#include <venom_lua.h>

#include <stdio.h>
#include <stdlib.h>

#ifndef TRAIN_LUA
#define TRAIN_LUA "train.lua"
#endif

static void die(const char *what)
{
    fprintf(stderr, "drive_lua: %s failed (%s):\n%s\n", what, vn_status_name(vn_last_status()),
            vn_last_error());
    exit(1);
}

#define N 400
#define CLASSES 4

/* Four Gaussian blobs far from the origin (so standardizing matters):
 * class c is centred at 100 + 6·(±1, ±1). Labels are 0-based, as C counts. */
static void make_blobs(vn_tensor **x, vn_tensor **y)
{
    int64_t xs[] = {N, 2}, n = N;
    vn_tensor *noise = vn_randn(2, xs);
    *x = vn_empty(VN_F32, 2, xs);
    *y = vn_empty(VN_I64, 1, &n);
    if (!noise || !*x || !*y) die("making the data");
    const float *e = vn_tensor_data(noise);
    float *px = vn_tensor_data(*x);
    int64_t *py = vn_tensor_data(*y);
    for (int i = 0; i < N; i++) {
        int c = i % CLASSES;
        px[2 * i] = 100 + 6 * (c & 1 ? 1 : -1) + 2 * e[2 * i];
        px[2 * i + 1] = 100 + 6 * (c & 2 ? 1 : -1) + 2 * e[2 * i + 1];
        py[i] = c;
    }
    vn_tensor_release(noise);
}

int main(int argc, char **argv)
{
    const char *script = argc > 1 ? argv[1] : TRAIN_LUA;
    vn_manual_seed(1);

    /* 1. A Lua state with venom loaded, and the script's functions defined.
     *    HOSTED tells the script not to run its own stand-alone demo. */
    struct lua_State *L = vn_lua_open();
    if (!L) die("vn_lua_open");
    printf("Lua modules from %s\n", vn_lua_module_dir());
    if (vn_lua_run_string(L, "HOSTED = true; EPOCHS = 80")) die("vn_lua_run_string");
    if (vn_lua_run_file(L, script, 0, NULL)) die("vn_lua_run_file");

    /* 2. Data made in C, handed to Lua, changed there in place. */
    vn_tensor *x, *y;
    make_blobs(&x, &y);
    float *data = vn_tensor_data(x);
    vn_tensor *back = NULL;
    if (vn_lua_call(L, "standardize_", 1, &x, 1, &back)) die("standardize_");
    printf("standardize_: same tensor %s, same storage %s\n", back == x ? "yes" : "no",
           vn_tensor_data(back) == data ? "yes" : "no");
    vn_tensor_release(back);
    /* The C pointer sees what Lua wrote: column means 0, variances 1. */
    double mean[2] = {0, 0}, var[2] = {0, 0};
    for (int i = 0; i < N; i++)
        for (int j = 0; j < 2; j++) mean[j] += data[2 * i + j] / (double)N;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < 2; j++) var[j] += (data[2 * i + j] - mean[j]) * (data[2 * i + j] - mean[j]) / N;
    printf("seen from C: column means %.4f %.4f, variances %.4f %.4f\n", mean[0], mean[1], var[0],
           var[1]);

    /* 3. Train in Lua; get the loss curve and the predictions back. */
    vn_tensor *args[] = {x, y}, *res[2];
    if (vn_lua_call(L, "train", 2, args, 2, res)) die("train");
    if (!res[0] || !res[1]) {
        fprintf(stderr, "drive_lua: train returned nil instead of two tensors\n");
        return 1;
    }
    const float *loss = vn_tensor_data(res[0]);
    int64_t epochs = vn_tensor_numel(res[0]);
    const int64_t *pred = vn_tensor_data(res[1]), *label = vn_tensor_data(y);
    int hits = 0;
    for (int i = 0; i < N; i++) hits += pred[i] == label[i];
    printf("trained in Lua: %lld epochs, loss %.4f -> %.4f, accuracy %.3f\n", (long long)epochs,
           loss[0], loss[epochs - 1], (double)hits / N);

    /* 4. A global set from C is visible to Lua code, and one Lua sets is
     *    visible to C. */
    if (vn_lua_set_tensor(L, "data", x)) die("vn_lua_set_tensor");
    if (vn_lua_run_string(L, "count = venom.tensor({data:size(1)})")) die("vn_lua_run_string");
    vn_tensor *count = vn_lua_get_tensor(L, "count");
    double rows = 0;
    if (!count || vn_tensor_item(count, &rows)) die("reading count");
    printf("Lua counted %.0f rows of the C tensor\n", rows);
    vn_tensor_release(count);

    /* 5. A Lua error comes back as a status and a message, not a crash. */
    vn_status s = vn_lua_run_string(L, "local a = venom.zeros(2, 3)\nreturn a:matmul(a)");
    const char *msg = vn_last_error();
    int first_line = 0;
    while (msg[first_line] && msg[first_line] != '\n') first_line++;
    printf("a failing chunk gave '%s': %.*s\n", vn_status_name(s), first_line, msg);

    vn_lua_close(L); /* Lua's references go; ours stay valid */
    printf("after closing Lua, x is still usable: %s\n", vn_tensor_is_freed(x) ? "no" : "yes");
    vn_tensor_release(x);
    vn_tensor_release(y);
    vn_tensor_release(res[0]);
    vn_tensor_release(res[1]);
    return 0;
}
