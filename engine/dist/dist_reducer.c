/* dist_reducer.c — data parallelism's gradient all-reduce, in buckets that
 * start during the backward (the scheme of PyTorch's DDP, Li et al., VLDB
 * 2020). Each parameter carries a grad-ready hook (vn_tensor.grad_ready,
 * called by vn_backward once no node is left to add to its gradient). A
 * bucket whose gradients are all final is copied into one flat buffer and
 * handed to MPI_Iallreduce, which runs while the backward goes on through
 * the earlier layers. Buckets start strictly in index order, so every rank
 * posts the same all-reduces in the same order even if its hooks came in
 * another order. A bucket holds bucket_bytes at most: a large gradient is
 * cut into pieces across several buckets, so that the buckets before it
 * stay small and its own all-reduce runs as several that Open MPI can move
 * one after another. While all-reduces are in flight, the engine's
 * progress hook (internal.h) gives MPI a turn after each backward node and
 * between slices of each large GEMM. A linear layer's weight gradient comes
 * over slice by slice (the grad_rows hook): its GEMM computes dW in slices of
 * rows, and each piece whose rows are done is copied and its bucket starts
 * while the GEMM goes on, so even the first layer's all-reduce (final only
 * when the backward ends) overlaps its own computation.
 *
 * CUDA parameters take the same path with another transport: the buckets
 * live on the device, the copies into them are queued on the compute
 * stream, and a bucket's all-reduce is ncclAllReduce (ncclAvg) on NCCL's
 * own stream, ordered after those copies by an event (dist_nccl.c) and not
 * waited for, so the GPU goes on with the backward; once the last bucket
 * has started, the compute stream waits for NCCL's (an event again) and
 * the means are copied into the gradients before the optimizer can read
 * them. Only the transport (the copies, start, wait and the means, below)
 * differs; the layout and the order in which buckets start are one. */
#include "dist_internal.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

struct bucket {
    int first, count; /* its pieces: [first, first + count) */
    int ready;        /* how many of them are in flat this step */
    int64_t numel;
    float *flat;      /* host memory, or dev's on the GPU */
    vn_tensor *dev;   /* the buffer of CUDA parameters' buckets */
    MPI_Request request;
};

/* A run of one parameter's gradient that lies in one bucket. */
struct piece {
    int slot, bucket;
    int64_t from, numel; /* elements [from, from + numel) of the gradient */
    int64_t offset;      /* where they lie in the bucket's flat buffer */
    bool ready;          /* copied into flat this step */
};

/* What each parameter's hook gets: its reducer and its place. */
struct slot {
    vn_dist_reducer *r;
    vn_tensor *param; /* retained */
    int first, count; /* its pieces */
    bool ready;       /* its whole gradient is final this step */
    int64_t row_len;  /* elements per row (grad_rows hands over whole rows) */
};

struct vn_dist_reducer {
    int n, nbuckets, npieces;
    bool cuda;            /* CUDA parameters: device buckets, NCCL */
    struct slot *slots;   /* parameters in reverse order: the backward reaches them so */
    struct piece *pieces; /* in bucket order, each bucket's in slot order */
    struct bucket *buckets;
    int next;   /* the first bucket not started this step */
    int nready; /* parameters whose whole gradient is final this step */
    int nput;   /* pieces in their buckets this step */
    vn_status failed; /* a grad_rows hook's failure, for the next grad-ready hook */
    vn_dist_reducer_stats stats;
};

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The progress hook while buckets are in flight: one MPI_Test each (an
 * error shows at the final wait). */
static void progress(void *ud)
{
    vn_dist_reducer *r = ud;
    for (int i = 0; i < r->next; i++) {
        int done = 0;
        MPI_Test(&r->buckets[i].request, &done, MPI_STATUS_IGNORE);
    }
}

/* ---- the transport: MPI on host buffers, NCCL on device buffers ---------- */

/* dst[0, n) = src's n floats (zeros for NULL), in r's buffers. */
static vn_status copy_in(const vn_dist_reducer *r, float *dst, const float *src, int64_t n)
{
    if (r->cuda) return vn__nccl_copy(dst, src, (size_t)n * sizeof *dst, "DataParallel");
    if (src)
        memcpy(dst, src, (size_t)n * sizeof *dst);
    else
        memset(dst, 0, (size_t)n * sizeof *dst);
    return VN_OK;
}

/* The means into a gradient: sum / world size from MPI's sums; NCCL's
 * ncclAvg has already divided (on the device, in its own way). */
static vn_status copy_out(const vn_dist_reducer *r, float *dst, const float *src, int64_t n)
{
    if (r->cuda) return vn__nccl_copy(dst, src, (size_t)n * sizeof *dst, "DataParallel");
    float world = (float)vn_dist_world_size();
    for (int64_t i = 0; i < n; i++) dst[i] = src[i] / world;
    return VN_OK;
}

/* Waits for the buckets started this step: MPI_Wait on each; on CUDA the
 * compute stream waits for NCCL's (the host does not). */
static vn_status wait_started(vn_dist_reducer *r)
{
    const char *op = "DataParallel: gradient all-reduce";
    if (r->cuda) return r->next ? vn__nccl_join(op) : VN_OK;
    vn_status s = VN_OK;
    for (int i = 0; i < r->next; i++) {
        int rc = MPI_Wait(&r->buckets[i].request, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS && !s) s = vn__mpi_err(rc, op);
    }
    return s;
}

/* ---- the reducer ----------------------------------------------------------- */

/* Copies a piece's final gradient into its bucket's buffer: the
 * parameter's gradient (zeros without one) plus, from a grad_rows hook
 * (CPU only), the last node's contribution `part` (the sum the backward is
 * about to store, computed the same way: the same bits). Each piece once
 * per step, so every element is reduced exactly once. */
static vn_status put_piece(vn_dist_reducer *r, struct piece *pc, const float *part)
{
    struct bucket *b = &r->buckets[pc->bucket];
    float *dst = b->flat + pc->offset;
    const vn_tensor *g = r->slots[pc->slot].param->grad;
    const float *old = g && g->storage ? (const float *)vn__ptr(g) + pc->from : NULL;
    if (part && old) {
        for (int64_t i = 0; i < pc->numel; i++) dst[i] = old[i] + part[pc->from + i];
    } else {
        vn_status s = copy_in(r, dst, part ? part + pc->from : old, pc->numel);
        if (s) return s;
    }
    pc->ready = true;
    b->ready++;
    r->nput++;
    r->stats.bytes_reduced += pc->numel * (int64_t)sizeof *dst;
    if (part) r->stats.pieces_early++;
    return VN_OK;
}

/* Starts the all-reduce of a bucket whose pieces are all in its buffer. */
static vn_status start_bucket(vn_dist_reducer *r, struct bucket *b)
{
    if (r->nput < r->npieces) /* some gradient is still being computed: this one can overlap it */
        r->stats.bytes_started_early += b->numel * (int64_t)sizeof(float);
    if (r->cuda) return vn__nccl_bucket_start(b->flat, b->numel, "DataParallel: gradient all-reduce");
    int rc = MPI_Iallreduce(MPI_IN_PLACE, b->flat, (int)b->numel, MPI_FLOAT, MPI_SUM,
                            MPI_COMM_WORLD, &b->request);
    if (rc == MPI_SUCCESS && !vn__progress_fn) { /* MPI gets turns until the step completes */
        vn__progress_fn = progress;
        vn__progress_ud = r;
    }
    return rc == MPI_SUCCESS ? VN_OK : vn__mpi_err(rc, "DataParallel: gradient all-reduce");
}

/* Removes this reducer's progress hook (another reducer's stays). */
static void stop_progress(vn_dist_reducer *r)
{
    if (vn__progress_ud == r) {
        vn__progress_fn = NULL;
        vn__progress_ud = NULL;
    }
}

/* Waits for every bucket, writes the means into the gradients and gets
 * ready for the next step (whatever happened). */
static vn_status complete_step(vn_dist_reducer *r, vn_status s)
{
    stop_progress(r);
    double t0 = now_seconds();
    vn_status ws = wait_started(r);
    if (!s) s = ws;
    r->stats.wait_seconds += now_seconds() - t0;
    for (int k = 0; k < r->n && !s; k++) {
        vn_tensor *p = r->slots[k].param;
        if (!p->grad || !p->grad->storage) { /* it got none here: it gets the others' mean */
            vn_tensor *g = vn__new_like(p, VN_F32, p->ndim, p->shape);
            if (!g) {
                s = vn__err(VN_ERR_MEMORY, "DataParallel: out of memory for a gradient");
                break;
            }
            vn_tensor_release(p->grad);
            p->grad = g;
        }
    }
    for (int k = 0; k < r->npieces && !s; k++) {
        const struct piece *pc = &r->pieces[k];
        float *dst = (float *)vn__ptr(r->slots[pc->slot].param->grad) + pc->from;
        s = copy_out(r, dst, r->buckets[pc->bucket].flat + pc->offset, pc->numel);
    }
    for (int k = 0; k < r->n; k++) r->slots[k].ready = false;
    for (int k = 0; k < r->npieces; k++) r->pieces[k].ready = false;
    for (int i = 0; i < r->nbuckets; i++) r->buckets[i].ready = 0;
    r->next = 0;
    r->nready = 0;
    r->nput = 0;
    r->failed = VN_OK;
    if (!s) r->stats.steps++;
    return s;
}

/* Starts, in order, the complete buckets whose predecessors have started;
 * completes the step once the last one has and every parameter's gradient
 * is final (not from a grad_rows hook: its GEMM's rule has yet to store
 * the gradient the means overwrite), or when forced (finish). Otherwise
 * tests the buckets in flight: MPI moves a non-blocking collective's data
 * only inside MPI calls (no progress thread), so each hook gives it a turn. */
static vn_status advance(vn_dist_reducer *r, bool force)
{
    vn_status s = VN_OK;
    while (!s && r->next < r->nbuckets && r->buckets[r->next].ready == r->buckets[r->next].count)
        if (!(s = start_bucket(r, &r->buckets[r->next]))) r->next++;
    if (s || (r->next == r->nbuckets && (force || r->nready == r->n))) return complete_step(r, s);
    for (int i = 0; i < r->next && !r->cuda; i++) {
        int done = 0, rc = MPI_Test(&r->buckets[i].request, &done, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS) return complete_step(r, vn__mpi_err(rc, "DataParallel: gradient all-reduce"));
    }
    return VN_OK;
}

static vn_status on_grad_ready(vn_tensor *t, void *ud)
{
    struct slot *sl = ud;
    vn_dist_reducer *r = sl->r;
    if (sl->ready)
        return vn__err(VN_ERR_STATE, "DataParallel: a second backward reached a parameter of "
                                     "shape %s before the first backward's gradients were "
                                     "reduced; call finish() (dp:sync()) between them",
                       vn__shape(t->ndim, t->shape));
    sl->ready = true;
    r->nready++;
    for (int k = sl->first; k < sl->first + sl->count && !r->failed; k++)
        if (!r->pieces[k].ready) r->failed = put_piece(r, &r->pieces[k], NULL);
    if (r->failed) return complete_step(r, r->failed);
    return advance(r, false);
}

/* Rows lo..hi of the parameter's gradient are final (internal.h): the pieces
 * that now lie wholly in rows 0..hi go to their buckets, and the buckets
 * they complete start, while the GEMM computes the remaining rows. */
static void on_grad_rows(vn_tensor *t, void *ud, const float *part, int64_t lo, int64_t hi)
{
    struct slot *sl = ud;
    vn_dist_reducer *r = sl->r;
    if (sl->ready || r->failed) return; /* a second backward: grad_ready reports it */
    (void)lo;
    int64_t done = hi * sl->row_len; /* rows arrive in order from 0: elements [0, done) */
    for (int k = sl->first; k < sl->first + sl->count; k++) {
        struct piece *pc = &r->pieces[k];
        if (!pc->ready && pc->from + pc->numel <= done && (r->failed = put_piece(r, pc, part)))
            return;
    }
    r->failed = advance(r, false);
}

vn_status vn_dist_reducer_finish(vn_dist_reducer *r)
{
    if (!r) return vn__err(VN_ERR_ARG, "DataParallel finish: the reducer is NULL");
    bool any = r->next > 0;
    for (int k = 0; k < r->npieces; k++) any |= r->pieces[k].ready; /* rows handed over, too */
    if (!any && !r->failed) return VN_OK; /* the backward finished the step, or none ran */
    for (int k = 0; k < r->npieces && !r->failed; k++)
        if (!r->pieces[k].ready) r->failed = put_piece(r, &r->pieces[k], NULL);
    if (r->failed) return complete_step(r, r->failed);
    return advance(r, true);
}

/* The checks of vn_dist_reducer_new that need no other rank. */
static vn_status check_params(vn_tensor *const *params, int n)
{
    if (!params || n <= 0)
        return vn__err(VN_ERR_ARG, "DataParallel: expected at least one parameter, got %d", n);
    for (int k = 0; k < n; k++) {
        const vn_tensor *p = params[k];
        vn_status s = vn__check_dtype_arg(p, VN_F32, "DataParallel", "parameter", VN_ALLOW_CUDA);
        if (s) return s;
        /* one transport for all buckets: MPI for CPU tensors, NCCL for CUDA ones */
        if (vn__is_cuda(p) != vn__is_cuda(params[0]))
            return vn__err(VN_ERR_DEVICE, "DataParallel: parameter %d is on %s and parameter 1 "
                                          "on %s; expected every parameter on one device (CPU "
                                          "gradients go over MPI, CUDA ones over NCCL)",
                           k + 1, vn__is_cuda(p) ? "cuda" : "cpu",
                           vn__is_cuda(params[0]) ? "cuda" : "cpu");
        if (vn__is_cuda(p) && !vn__nccl_built())
            return vn__err(VN_ERR_DEVICE, "DataParallel: the parameters are CUDA tensors and "
                                          "venom was built without NCCL, which all-reduces CUDA "
                                          "gradients (build with CUDA, MPI and NCCL: VENOM_NCCL; "
                                          "or train on the CPU)");
        if (!p->requires_grad || p->grad_fn)
            return vn__err(VN_ERR_ARG, "DataParallel: parameter %d (shape %s) must be a leaf "
                                       "that requires grad", k + 1, vn__shape(p->ndim, p->shape));
        if (p->grad_ready)
            return vn__err(VN_ERR_STATE, "DataParallel: parameter %d (shape %s) already belongs "
                                         "to a DataParallel", k + 1, vn__shape(p->ndim, p->shape));
    }
    return VN_OK;
}

/* Every rank's parameter list must match rank 0's: the count, each
 * parameter's size and the device (a rank whose own checks failed takes
 * part too, so that all ranks fail together). */
static vn_status check_same_params(vn_tensor *const *params, int n, vn_status local)
{
    /* n first, the numel of each, then 1 for CUDA parameters */
    int64_t *mine = calloc((size_t)n + 2, sizeof *mine);
    int64_t *first = calloc((size_t)n + 2, sizeof *first);
    vn_status s = mine && first ? local : vn__err(VN_ERR_MEMORY, "DataParallel: out of memory");
    if (mine) {
        mine[0] = s ? -1 : n;
        for (int k = 0; !s && k < n; k++) mine[k + 1] = vn_tensor_numel(params[k]);
        if (!s) mine[n + 1] = vn__is_cuda(params[0]);
    }
    /* Rank 0's list to everyone, then a vote on whether it matched. */
    int64_t n0 = mine ? mine[0] : -1;
    int rc = MPI_Bcast(&n0, 1, MPI_INT64_T, 0, MPI_COMM_WORLD);
    int agree = rc == MPI_SUCCESS && !s && n0 == n;
    if (agree && first) {
        memcpy(first, mine, ((size_t)n + 2) * sizeof *mine);
        rc = MPI_Bcast(first, n + 2, MPI_INT64_T, 0, MPI_COMM_WORLD);
        agree = rc == MPI_SUCCESS && !memcmp(first, mine, ((size_t)n + 2) * sizeof *mine);
    }
    int all = 0;
    int rc2 = MPI_Allreduce(&agree, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    free(mine);
    free(first);
    if (s) return s;
    if (rc != MPI_SUCCESS) return vn__mpi_err(rc, "DataParallel");
    if (rc2 != MPI_SUCCESS) return vn__mpi_err(rc2, "DataParallel");
    if (!all)
        return vn__err(VN_ERR_SHAPE, "DataParallel: the ranks' models differ (this rank has %d "
                                     "parameters, rank 0 has %lld, or their sizes or devices "
                                     "differ); every rank must wrap the same model", n, (long long)n0);
    return VN_OK;
}

/* Lays the parameters, in reverse order, into buckets of at most cap
 * floats, cutting a gradient into pieces where a bucket fills up. Counts
 * the pieces and buckets; with r, also fills its slots (retaining the
 * parameters), pieces and the buckets' extents (allocated to those counts). */
static void layout(vn_dist_reducer *r, vn_tensor *const *params, int n, int64_t cap,
                   int *npieces, int *nbuckets)
{
    int np = 0, nb = 0;
    int64_t fill = 0; /* floats in bucket nb so far */
    bool open = false; /* bucket nb has a piece (one of 0 floats, for an empty parameter, too) */
    for (int k = 0; k < n; k++) {
        vn_tensor *p = params[n - 1 - k];
        int64_t numel = vn_tensor_numel(p), from = 0;
        if (r)
            r->slots[k] = (struct slot){r, vn_tensor_retain(p), np, 0, false,
                                        p->ndim > 1 && p->shape[0] ? numel / p->shape[0] : 1};
        do {
            int64_t take = numel - from < cap - fill ? numel - from : cap - fill;
            if (r) {
                struct bucket *b = &r->buckets[nb];
                r->pieces[np] = (struct piece){k, nb, from, take, fill, false};
                r->slots[k].count++;
                if (b->count++ == 0) b->first = np;
                b->numel += take;
            }
            np++;
            from += take;
            fill += take;
            open = true;
            if (fill == cap) { /* full: the next piece opens a new bucket */
                nb++;
                fill = 0;
                open = false;
            }
        } while (from < numel);
    }
    *npieces = np;
    *nbuckets = nb + (open ? 1 : 0);
}

vn_dist_reducer *vn_dist_reducer_new(vn_tensor *const *params, int n, size_t bucket_bytes)
{
    vn_status s = check_params(params, n);
    if (!s && bucket_bytes < sizeof(float))
        s = vn__err(VN_ERR_ARG, "DataParallel: bucket size %zu bytes; expected at least 4",
                    bucket_bytes);
    if (s && !vn_dist_is_initialized()) return NULL; /* no world to fail with: the argument's error */
    if (vn__dist_ready("DataParallel") || check_same_params(params, n, s)) return NULL;
    bool cuda = vn__is_cuda(params[0]);
    if (cuda && vn__nccl_setup("DataParallel")) return NULL; /* collective, as the checks were */
    int64_t cap = (int64_t)(bucket_bytes / sizeof(float));
    int npieces, nbuckets;
    layout(NULL, params, n, cap, &npieces, &nbuckets); /* count first */
    vn_dist_reducer *r = calloc(1, sizeof *r);
    if (r) {
        r->slots = calloc((size_t)n, sizeof *r->slots);
        r->pieces = calloc((size_t)npieces, sizeof *r->pieces);
        r->buckets = calloc((size_t)nbuckets, sizeof *r->buckets);
    }
    if (!r || !r->slots || !r->pieces || !r->buckets) {
        vn_dist_reducer_free(r);
        return vn__errp(VN_ERR_MEMORY, "DataParallel: out of memory");
    }
    r->n = n;
    r->cuda = cuda;
    layout(r, params, n, cap, &r->npieces, &r->nbuckets);
    for (int k = 0; k < n; k++)
        r->stats.bytes_per_step += vn_tensor_numel(params[k]) * (int64_t)sizeof(float);
    r->stats.nbuckets = r->nbuckets;
    for (int i = 0; i < r->nbuckets; i++) r->buckets[i].request = MPI_REQUEST_NULL;
    for (int i = 0; i < r->nbuckets; i++) {
        struct bucket *b = &r->buckets[i];
        if (cuda && b->numel <= INT32_MAX && (b->dev = vn__new_like(params[0], VN_F32, 1, &b->numel)))
            b->flat = vn__ptr(b->dev);
        else if (!cuda && b->numel <= INT32_MAX)
            b->flat = malloc((size_t)b->numel * sizeof(float));
        if (!b->flat) {
            vn_dist_reducer_free(r);
            return vn__errp(VN_ERR_MEMORY, "DataParallel: cannot allocate a bucket of %lld floats",
                            (long long)b->numel);
        }
    }
    for (int k = 0; k < n; k++) {
        r->slots[k].param->grad_ready = on_grad_ready;
        r->slots[k].param->grad_rows = on_grad_rows;
        r->slots[k].param->grad_ready_ud = &r->slots[k];
    }
    return r;
}

vn_dist_reducer_stats vn_dist_reducer_get_stats(const vn_dist_reducer *r)
{
    vn_dist_reducer_stats none = {0};
    return r ? r->stats : none;
}

void vn_dist_reducer_free(vn_dist_reducer *r)
{
    if (!r) return;
    stop_progress(r);
    /* the buffers' memory may be reused only after the all-reduces in flight */
    if (r->cuda && r->next) (void)vn__nccl_join("DataParallel free");
    for (int i = 0; i < r->nbuckets; i++) {
        if (r->buckets[i].request != MPI_REQUEST_NULL) MPI_Wait(&r->buckets[i].request, MPI_STATUS_IGNORE);
        if (!r->cuda) free(r->buckets[i].flat);
        vn_tensor_release(r->buckets[i].dev);
    }
    for (int k = 0; k < r->n; k++) {
        vn_tensor *p = r->slots[k].param;
        if (!p) continue;
        if (p->grad_ready_ud == &r->slots[k]) {
            p->grad_ready = NULL;
            p->grad_rows = NULL;
            p->grad_ready_ud = NULL;
        }
        vn_tensor_release(p);
    }
    free(r->slots);
    free(r->pieces);
    free(r->buckets);
    free(r);
}
