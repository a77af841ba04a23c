/* train_classifier.c — training a classifier from C with libvenom alone.
 *
 *   train_classifier                           three interleaved 2-D spirals
 *   train_classifier --fashion-mnist DIR       Fashion-MNIST from the IDX files in DIR
 *   options: --epochs N  --hidden H  --lr LR  --seed S
 *
 * Everything Lua does in tutorial 1 is done here through venom.h: tensors,
 * a two-hidden-layer MLP written as vn_linear + vn_relu, cross-entropy,
 * vn_backward, and Adam through vn_adam_step. Build it against an installed
 * venom with
 *
 *   cc train_classifier.c $(pkg-config --cflags --libs venom) -o train_classifier
 *
 * Every vn_* call that can fail returns NULL or a status and leaves a message
 * in vn_last_error(); this program stops at the first failure with that
 * message (a library never exits, but a small program may). */
#include <venom.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- failing loudly ------------------------------------------------------------ */

static void die(const char *what)
{
    fprintf(stderr, "train_classifier: %s: %s (%s)\n", what, vn_last_error(),
            vn_status_name(vn_last_status()));
    exit(1);
}

static vn_tensor *must(vn_tensor *t, const char *what)
{
    if (!t) die(what);
    return t;
}

static void check(vn_status s, const char *what)
{
    if (s != VN_OK) die(what);
}

/* ---- data ------------------------------------------------------------------------ */

typedef struct {
    vn_tensor *x; /* (n, features) f32 */
    vn_tensor *y; /* (n) i64 class ids, 0-based */
} dataset;

/* n points per class on `classes` spiral arms: arm c at radius r has angle
 * 4r + 2πc/classes, plus Gaussian noise of 0.2 radians. Hard for a linear
 * model, easy for a small MLP. */
static dataset make_spirals(int64_t n, int classes)
{
    int64_t total = n * classes, xs[] = {total, 2}, two = 2 * total;
    vn_tensor *noise = must(vn_randn(1, &two), "randn");
    const float *e = vn_tensor_data(noise);
    float *pts = malloc(sizeof(float) * 2 * (size_t)total);
    int64_t *ids = malloc(sizeof(int64_t) * (size_t)total);
    if (!pts || !ids) {
        fprintf(stderr, "train_classifier: out of memory\n");
        exit(1);
    }
    for (int c = 0; c < classes; c++)
        for (int64_t i = 0; i < n; i++) {
            int64_t k = c * n + i;
            double r = (double)(i + 1) / (double)n;
            double a = 4 * r + 2 * 3.14159265358979323846 * c / classes + 0.2 * e[2 * k];
            pts[2 * k] = (float)(r * cos(a));
            pts[2 * k + 1] = (float)(r * sin(a));
            ids[k] = c;
        }
    dataset d = {must(vn_from_data(VN_F32, 2, xs, pts), "from_data"),
                 must(vn_from_data(VN_I64, 1, &total, ids), "from_data")};
    free(pts);
    free(ids);
    vn_tensor_release(noise);
    return d;
}

/* Images (n, 28, 28) u8 → (n, 784) f32 in [0, 1]; labels u8 → i64. */
static dataset load_fashion(const char *dir, const char *split)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s-images-idx3-ubyte.gz", dir, split);
    vn_tensor *img = must(vn_idx_load(path), "idx_load");
    snprintf(path, sizeof path, "%s/%s-labels-idx1-ubyte.gz", dir, split);
    vn_tensor *lab = must(vn_idx_load(path), "idx_load");
    int64_t flat[] = {vn_tensor_shape(img)[0], 784};
    vn_tensor *rows = must(vn_reshape(img, 2, flat), "reshape");
    vn_tensor *f = must(vn_to_dtype(rows, VN_F32), "to_dtype");
    vn_tensor *scale = must(vn_full(VN_F32, 0, NULL, 1.0 / 255), "full");
    dataset d = {must(vn_mul(f, scale), "mul"), must(vn_to_dtype(lab, VN_I64), "to_dtype")};
    vn_tensor *tmp[] = {img, lab, rows, f, scale};
    for (int i = 0; i < 5; i++) vn_tensor_release(tmp[i]);
    return d;
}

static void dataset_free(dataset *d)
{
    vn_tensor_release(d->x);
    vn_tensor_release(d->y);
}

/* ---- the model: in → hidden → hidden → classes, ReLU between ------------------ */

#define LAYERS 3

typedef struct {
    vn_tensor *w[LAYERS], *b[LAYERS];
    /* Adam's moment estimates, one pair per parameter */
    vn_tensor *m[2 * LAYERS], *v[2 * LAYERS];
    int64_t step;
} mlp;

/* A parameter with PyTorch's default init for linear layers,
 * U(−1/√in, 1/√in), written through the data pointer. */
static vn_tensor *uniform_param(int ndim, const int64_t *shape, int64_t fan_in)
{
    vn_tensor *t = must(vn_rand(ndim, shape), "rand");
    float *p = vn_tensor_data(t);
    float bound = (float)(1 / sqrt((double)fan_in));
    for (int64_t i = 0; i < vn_tensor_numel(t); i++) p[i] = (2 * p[i] - 1) * bound;
    check(vn_tensor_set_requires_grad(t, true), "requires_grad");
    return t;
}

static mlp mlp_new(int64_t in, int64_t hidden, int64_t classes)
{
    mlp net = {0};
    int64_t sizes[] = {in, hidden, hidden, classes};
    for (int l = 0; l < LAYERS; l++) {
        int64_t ws[] = {sizes[l + 1], sizes[l]};
        net.w[l] = uniform_param(2, ws, sizes[l]);
        net.b[l] = uniform_param(1, &sizes[l + 1], sizes[l]);
    }
    for (int k = 0; k < 2 * LAYERS; k++) {
        vn_tensor *p = k % 2 ? net.b[k / 2] : net.w[k / 2];
        net.m[k] = must(vn_zeros(VN_F32, vn_tensor_ndim(p), vn_tensor_shape(p)), "zeros");
        net.v[k] = must(vn_zeros(VN_F32, vn_tensor_ndim(p), vn_tensor_shape(p)), "zeros");
    }
    return net;
}

static void mlp_free(mlp *net)
{
    for (int l = 0; l < LAYERS; l++) {
        vn_tensor_release(net->w[l]);
        vn_tensor_release(net->b[l]);
    }
    for (int k = 0; k < 2 * LAYERS; k++) {
        vn_tensor_release(net->m[k]);
        vn_tensor_release(net->v[k]);
    }
}

/* logits = W3·relu(W2·relu(W1·x + b1) + b2) + b3. Each intermediate is
 * released as soon as the next one exists: the tape keeps what backward
 * needs alive by itself. */
static vn_tensor *mlp_forward(const mlp *net, const vn_tensor *x)
{
    vn_tensor *h = vn_tensor_retain((vn_tensor *)x);
    for (int l = 0; l < LAYERS; l++) {
        vn_tensor *z = must(vn_linear(h, net->w[l], net->b[l]), "linear");
        vn_tensor_release(h);
        if (l == LAYERS - 1) return z;
        h = must(vn_relu(z), "relu");
        vn_tensor_release(z);
    }
    return h;
}

/* One Adam step on every parameter (AdamW-style decoupled decay, here 0),
 * then clear the gradients for the next batch. */
static void mlp_step(mlp *net, double lr)
{
    net->step++;
    for (int k = 0; k < 2 * LAYERS; k++) {
        vn_tensor *p = k % 2 ? net->b[k / 2] : net->w[k / 2];
        check(vn_adam_step(p, vn_tensor_grad(p), net->m[k], net->v[k], net->step, lr, 0.9, 0.999,
                           1e-8, 0.0, true),
              "adam_step");
        vn_tensor_zero_grad(p);
    }
}

/* Mean cross-entropy and accuracy over a whole dataset, without recording. */
static void evaluate(const mlp *net, const dataset *d, double *loss, double *accuracy)
{
    bool was = vn_set_grad_enabled(false);
    vn_tensor *logits = mlp_forward(net, d->x);
    vn_tensor *l = must(vn_cross_entropy(logits, d->y, VN_REDUCE_MEAN), "cross_entropy");
    vn_tensor *pred = must(vn_argmax(logits, 1, false), "argmax");
    vn_tensor *hit = must(vn_eq(pred, d->y), "eq");
    vn_tensor *hitf = must(vn_to_dtype(hit, VN_F32), "to_dtype");
    vn_tensor *acc = must(vn_mean_all(hitf), "mean_all");
    check(vn_tensor_item(l, loss), "item");
    check(vn_tensor_item(acc, accuracy), "item");
    vn_tensor *tmp[] = {logits, l, pred, hit, hitf, acc};
    for (int i = 0; i < 6; i++) vn_tensor_release(tmp[i]);
    vn_set_grad_enabled(was);
}

/* One pass over the training set in shuffled mini-batches; returns the mean
 * training loss of the pass. */
static double train_epoch(mlp *net, const dataset *d, int64_t batch, double lr)
{
    int64_t n = vn_tensor_shape(d->x)[0];
    vn_tensor *perm = must(vn_randperm(n), "randperm");
    double sum = 0;
    for (int64_t start = 0; start < n; start += batch) {
        int64_t len = n - start < batch ? n - start : batch;
        vn_tensor *idx = must(vn_narrow(perm, 0, start, len), "narrow");
        vn_tensor *xb = must(vn_index_select(d->x, 0, idx), "index_select");
        vn_tensor *yb = must(vn_index_select(d->y, 0, idx), "index_select");
        vn_tensor *logits = mlp_forward(net, xb);
        vn_tensor *loss = must(vn_cross_entropy(logits, yb, VN_REDUCE_MEAN), "cross_entropy");
        check(vn_backward(loss, NULL), "backward");
        mlp_step(net, lr);
        double l;
        check(vn_tensor_item(loss, &l), "item");
        sum += l * (double)len;
        vn_tensor *tmp[] = {idx, xb, yb, logits, loss};
        for (int i = 0; i < 5; i++) vn_tensor_release(tmp[i]);
    }
    vn_tensor_release(perm);
    return sum / (double)n;
}

int main(int argc, char **argv)
{
    const char *fashion = NULL;
    int epochs = -1;
    long hidden = -1, seed = 0;
    double lr = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) {
            fprintf(stderr, "usage: %s [--fashion-mnist DIR] [--epochs N] [--hidden H] [--lr LR] "
                            "[--seed S]\n", argv[0]);
            return 2;
        }
        if (strcmp(a, "--fashion-mnist") == 0) fashion = v;
        else if (strcmp(a, "--epochs") == 0) epochs = atoi(v);
        else if (strcmp(a, "--hidden") == 0) hidden = atol(v);
        else if (strcmp(a, "--lr") == 0) lr = atof(v);
        else if (strcmp(a, "--seed") == 0) seed = atol(v);
        else {
            fprintf(stderr, "train_classifier: unknown option %s\n", a);
            return 2;
        }
        i++;
    }
    vn_manual_seed((uint64_t)seed);

    dataset train, test;
    int64_t in, classes, batch;
    if (fashion) {
        train = load_fashion(fashion, "train");
        test = load_fashion(fashion, "t10k");
        in = 784, classes = 10, batch = 128;
        if (epochs < 0) epochs = 2;
        if (hidden < 0) hidden = 256;
        if (lr < 0) lr = 1e-3;
    } else {
        train = make_spirals(200, 3);
        test = make_spirals(100, 3); /* fresh noise: held-out points */
        in = 2, classes = 3, batch = 32;
        if (epochs < 0) epochs = 40;
        if (hidden < 0) hidden = 64;
        if (lr < 0) lr = 1e-2;
    }
    printf("%s: %lld training and %lld test examples, MLP %lld-%ld-%ld-%lld, Adam lr %g\n",
           fashion ? "Fashion-MNIST" : "spirals", (long long)vn_tensor_shape(train.x)[0],
           (long long)vn_tensor_shape(test.x)[0], (long long)in, hidden, hidden,
           (long long)classes, lr);

    mlp net = mlp_new(in, hidden, classes);
    double loss0, acc0, loss, acc;
    evaluate(&net, &train, &loss0, &acc0);
    evaluate(&net, &test, &loss, &acc);
    printf("before training: train loss %.4f, test accuracy %.3f\n", loss0, acc);
    for (int e = 1; e <= epochs; e++) {
        double train_loss = train_epoch(&net, &train, batch, lr);
        if (e % (fashion ? 1 : 10) == 0 || e == epochs) {
            evaluate(&net, &test, &loss, &acc);
            printf("epoch %3d: train loss %.4f, test loss %.4f, test accuracy %.3f\n", e,
                   train_loss, loss, acc);
        }
    }
    double loss1, acc1;
    evaluate(&net, &train, &loss1, &acc1);
    evaluate(&net, &test, &loss, &acc);
    printf("result: train loss %.4f -> %.4f, test accuracy %.3f\n", loss0, loss1, acc);

    mlp_free(&net);
    dataset_free(&train);
    dataset_free(&test);
    size_t in_use;
    vn_memory_stats(&in_use, NULL);
    printf("engine memory still in use: %zu bytes\n", in_use);
    return 0;
}
