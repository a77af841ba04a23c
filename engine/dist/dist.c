/* dist.c — the world (MPI_COMM_WORLD) and the collectives on CPU tensors.
 * Each collective first exchanges every rank's dtype and shape
 * (MPI_Allgather of a fixed-size record), so that ranks that disagree all
 * fail with the same message instead of hanging or reading past a buffer;
 * then one MPI call moves the data. The communicator returns errors
 * (MPI_ERRORS_RETURN) and they become VN_ERR_STATE. */
#include "dist_internal.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool initialized;    /* vn_dist_init ran and vn_dist_finalize did not */
static bool we_called_init; /* MPI_Finalize is ours to call */
static int world_rank, world_size = 1, local_rank;

vn_status vn__mpi_err(int rc, const char *op)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", rc);
    return vn__err(VN_ERR_STATE, "%s: MPI failed: %s", op, text);
}

vn_status vn__dist_ready(const char *op)
{
    if (initialized) return VN_OK;
    return vn__err(VN_ERR_STATE, "%s: the distributed world is not initialized; call "
                                 "venom.distributed.init() (vn_dist_init) first", op);
}

bool vn_dist_built(void) { return true; }
bool vn_dist_nccl_built(void) { return vn__nccl_built(); }
bool vn_dist_is_initialized(void) { return initialized; }
int vn_dist_rank(void) { return initialized ? world_rank : 0; }
int vn_dist_world_size(void) { return initialized ? world_size : 1; }
int vn_dist_local_rank(void) { return initialized ? local_rank : 0; }

static void finalize_at_exit(void) { vn_dist_finalize(); }

vn_status vn_dist_init(void)
{
    if (initialized) return VN_OK;
    int started = 0, ended = 0, rc;
    MPI_Initialized(&started);
    MPI_Finalized(&ended);
    if (ended)
        return vn__err(VN_ERR_STATE, "distributed init: MPI was already finalized in this "
                                     "process; it cannot be started twice");
    if (!started) {
        int provided = 0;
        if ((rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided)) != MPI_SUCCESS)
            return vn__mpi_err(rc, "distributed init");
        we_called_init = true;
        atexit(finalize_at_exit); /* mpirun reports ranks that exit without MPI_Finalize */
    }
    if ((rc = MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN)) != MPI_SUCCESS ||
        (rc = MPI_Comm_rank(MPI_COMM_WORLD, &world_rank)) != MPI_SUCCESS ||
        (rc = MPI_Comm_size(MPI_COMM_WORLD, &world_size)) != MPI_SUCCESS)
        return vn__mpi_err(rc, "distributed init");
    /* The local rank: this rank's place among the ranks sharing its memory
     * (its host), from MPI itself rather than launcher-specific variables. */
    MPI_Comm host;
    if ((rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL,
                                  &host)) != MPI_SUCCESS)
        return vn__mpi_err(rc, "distributed init");
    rc = MPI_Comm_rank(host, &local_rank);
    MPI_Comm_free(&host);
    if (rc != MPI_SUCCESS) return vn__mpi_err(rc, "distributed init");
    initialized = true;
    return VN_OK;
}

void vn_dist_finalize(void)
{
    int ended = 0;
    MPI_Finalized(&ended);
    vn__nccl_finalize();
    if (initialized && we_called_init && !ended) MPI_Finalize();
    initialized = false;
}

void vn_dist_abort(int code)
{
    int ended = 0;
    MPI_Finalized(&ended);
    if (initialized && !ended && world_size > 1) MPI_Abort(MPI_COMM_WORLD, code);
}

vn_status vn_dist_barrier(void)
{
    vn_status s = vn__dist_ready("barrier");
    if (s) return s;
    int rc = MPI_Barrier(MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? VN_OK : vn__mpi_err(rc, "barrier");
}

/* ---- argument checks and the shape exchange ------------------------------ */

static MPI_Datatype mpi_type(vn_dtype d)
{
    switch (d) {
    case VN_F32: return MPI_FLOAT;
    case VN_I32: return MPI_INT32_T;
    case VN_I64: return MPI_INT64_T;
    default: return MPI_UINT8_T;
    }
}

static MPI_Op mpi_op(vn_dist_op op) { return op == VN_DIST_MAX ? MPI_MAX : MPI_SUM; }

/* A usable tensor of a dtype MPI (CPU) or NCCL (CUDA, in a build with
 * NCCL) moves for this op, at most INT_MAX elements (MPI counts are ints).
 * u8 only where nothing is added. */
static vn_status check_tensor(const vn_tensor *t, const char *op, bool allow_u8)
{
    vn_status s = vn__check_arg(t, op, "tensor", VN_ALLOW_CUDA | VN_ALLOW_HALF);
    if (s) return s;
    if (vn__is_cuda(t) && !vn__nccl_built())
        return vn__err(VN_ERR_DEVICE, "%s: a CUDA tensor; this build has no NCCL (VENOM_NCCL), "
                                      "so collectives take CPU tensors (move it with :cpu())", op);
    if (t->dtype != VN_F32 && t->dtype != VN_I32 && t->dtype != VN_I64 &&
        !(allow_u8 && t->dtype == VN_U8))
        return vn__err(VN_ERR_DTYPE, "%s: expected a tensor of dtype f32, i32 or i64%s, got %s",
                       op, allow_u8 ? " or u8" : "", vn_dtype_name(t->dtype));
    if (vn_tensor_numel(t) > INT_MAX)
        return vn__err(VN_ERR_ARG, "%s: %lld elements; MPI moves at most %d in one call", op,
                       (long long)vn_tensor_numel(t), INT_MAX);
    return VN_OK;
}

/* op must be a vn_dist_op; NCCL averages f32 only. */
static vn_status check_op(const vn_tensor *t, vn_dist_op op, const char *name)
{
    if (op != VN_DIST_SUM && op != VN_DIST_AVG && op != VN_DIST_MAX)
        return vn__err(VN_ERR_ARG, "%s: unknown reduction %d; expected sum, avg or max", name, (int)op);
    if (op == VN_DIST_AVG && t && t->storage && vn__is_cuda(t) && t->dtype != VN_F32)
        return vn__err(VN_ERR_DTYPE, "%s: avg of a CUDA %s tensor; NCCL averages f32 only (use "
                                     "sum)", name, vn_dtype_name(t->dtype));
    return VN_OK;
}

/* What each rank tells the others about its tensor before a collective:
 * whether its own arguments passed their checks, its dtype and shape. */
enum { DESC_REFUSED, DESC_DTYPE, DESC_NDIM, DESC_SHAPE, DESC_LEN = DESC_SHAPE + VN_MAX_DIMS };

/* The exchange every collective starts with. `local` is the verdict of this
 * rank's own checks (t may be unusable when it is not VN_OK): a rank whose
 * arguments were refused still takes part, so that the others learn it and
 * fail too instead of waiting for it forever. Then every rank's (dtype,
 * shape) is compared with rank 0's; with skip_dim0, dim 0 may differ
 * (all_to_all). On a mismatch every rank returns the same error, listing
 * each rank's shape. */
static vn_status exchange_shapes(const vn_tensor *t, const char *op, bool skip_dim0,
                                 vn_status local)
{
    int64_t mine[DESC_LEN] = {local != VN_OK};
    if (!local) {
        mine[DESC_DTYPE] = t->dtype;
        mine[DESC_NDIM] = t->ndim;
        for (int d = 0; d < t->ndim; d++) mine[DESC_SHAPE + d] = t->shape[d];
    }
    int64_t *all = malloc((size_t)world_size * sizeof mine);
    int rc = all ? MPI_Allgather(mine, DESC_LEN, MPI_INT64_T, all, DESC_LEN, MPI_INT64_T,
                                 MPI_COMM_WORLD) : MPI_ERR_NO_MEM;
    if (local) { /* this rank's own message stays the one its caller sees */
        free(all);
        return local;
    }
    if (rc != MPI_SUCCESS) {
        free(all);
        return vn__mpi_err(rc, op);
    }
    int refused = -1;
    bool same_dtype = true, same_shape = true;
    for (int r = 0; r < world_size; r++) {
        const int64_t *a = all, *b = all + (size_t)r * DESC_LEN;
        if (b[DESC_REFUSED] && refused < 0) refused = r;
        same_dtype &= a[DESC_DTYPE] == b[DESC_DTYPE];
        same_shape &= a[DESC_NDIM] == b[DESC_NDIM];
        for (int d = skip_dim0 ? 1 : 0; same_shape && d < a[DESC_NDIM]; d++)
            same_shape &= a[DESC_SHAPE + d] == b[DESC_SHAPE + d];
    }
    vn_status s = VN_OK;
    if (refused >= 0) {
        s = vn__err(VN_ERR_ARG, "%s: rank %d refused its arguments (its own error says why), so "
                                "no rank moved any data", op, refused);
    } else if (!same_dtype || !same_shape) {
        char list[512] = "";
        size_t len = 0;
        for (int r = 0; r < world_size && len < sizeof list - 64; r++) {
            const int64_t *b = all + (size_t)r * DESC_LEN;
            len += (size_t)snprintf(list + len, sizeof list - len, "%srank %d: %s %s",
                                    r ? ", " : "", r, vn_dtype_name((vn_dtype)b[DESC_DTYPE]),
                                    vn__shape((int)b[DESC_NDIM], b + DESC_SHAPE));
        }
        s = vn__err(same_dtype ? VN_ERR_SHAPE : VN_ERR_DTYPE,
                    "%s: the ranks passed different %s (%s); every rank must pass the same "
                    "dtype and shape%s", op, same_dtype ? "shapes" : "dtypes", list,
                    skip_dim0 ? " apart from the first dim" : "");
    }
    free(all);
    return s;
}

/* x /= world_size, element by element, for the avg reduction. */
static void divide_by_world(void *data, vn_dtype dtype, int64_t n)
{
    if (dtype == VN_F32)
        for (int64_t i = 0; i < n; i++) ((float *)data)[i] /= (float)world_size;
    else if (dtype == VN_I32)
        for (int64_t i = 0; i < n; i++) ((int32_t *)data)[i] /= world_size;
    else
        for (int64_t i = 0; i < n; i++) ((int64_t *)data)[i] /= world_size;
}

/* Checks shared by the in-place collectives: a contiguous tensor that may
 * be written (local, after `local`, the caller's own verdict), then the
 * exchange. */
static vn_status check_in_place(vn_tensor *t, const char *op, bool allow_u8, vn_status local)
{
    vn_status s = vn__dist_ready(op);
    if (s) return s;
    s = local ? local : check_tensor(t, op, allow_u8);
    if (!s && !vn_tensor_is_contiguous(t))
        s = vn__err(VN_ERR_ARG, "%s: the tensor is written in place and must be contiguous "
                                "(shape %s is a strided view); pass t:contiguous()",
                    op, vn__shape(t->ndim, t->shape));
    if (!s) s = vn__begin_write(t, op);
    return exchange_shapes(t, op, false, s);
}

/* Checks shared by the collectives that make a new tensor. */
static vn_status check_out_of_place(const vn_tensor *t, const char *op, bool allow_u8,
                                    bool skip_dim0, vn_status local)
{
    vn_status s = vn__dist_ready(op);
    if (s) return s;
    s = local ? local : check_tensor(t, op, allow_u8);
    return exchange_shapes(t, op, skip_dim0, s);
}

/* ---- the collectives ------------------------------------------------------ */

vn_status vn_dist_all_reduce(vn_tensor *t, vn_dist_op op)
{
    vn_status s = check_in_place(t, "all_reduce", false, check_op(t, op, "all_reduce"));
    if (s) return s;
    if (vn__is_cuda(t)) return vn__nccl_all_reduce(t, op);
    int64_t n = vn_tensor_numel(t);
    int rc = MPI_Allreduce(MPI_IN_PLACE, vn__ptr(t), (int)n, mpi_type(t->dtype), mpi_op(op),
                           MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return vn__mpi_err(rc, "all_reduce");
    if (op == VN_DIST_AVG) divide_by_world(vn__ptr(t), t->dtype, n);
    return VN_OK;
}

vn_status vn_dist_broadcast(vn_tensor *t, int root)
{
    vn_status bad_root = VN_OK;
    if (root < 0 || root >= vn_dist_world_size())
        bad_root = vn__err(VN_ERR_ARG, "broadcast: root rank %d; expected 0..%d", root,
                           vn_dist_world_size() - 1);
    vn_status s = check_in_place(t, "broadcast", true, bad_root);
    if (s) return s;
    if (vn__is_cuda(t)) return vn__nccl_broadcast(t, root);
    int rc = MPI_Bcast(vn__ptr(t), (int)vn_tensor_numel(t), mpi_type(t->dtype), root,
                       MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? VN_OK : vn__mpi_err(rc, "broadcast");
}

vn_tensor *vn_dist_all_gather(const vn_tensor *t)
{
    if (check_out_of_place(t, "all_gather", true, false, VN_OK)) return NULL;
    int64_t shape[VN_MAX_DIMS] = {world_size};
    int ndim = t->ndim ? t->ndim : 1;
    for (int d = 0; d < t->ndim; d++) shape[d] = t->shape[d];
    shape[0] *= t->ndim ? world_size : 1;
    int64_t n = vn_tensor_numel(t);
    if (n * world_size > INT_MAX) /* the same on every rank: the shapes agree */
        return vn__errp(VN_ERR_ARG, "all_gather: %lld elements in all; MPI moves at most %d",
                        (long long)(n * world_size), INT_MAX);
    vn_tensor *src = vn__plain_contiguous(t);
    vn_tensor *out = src ? vn__new_like(t, t->dtype, ndim, shape) : NULL;
    if (out && vn__is_cuda(t)) {
        if (vn__nccl_all_gather(src, out)) {
            vn_tensor_release(out);
            out = NULL;
        }
    } else if (out) {
        int rc = MPI_Allgather(vn__ptr(src), (int)n, mpi_type(t->dtype), vn__ptr(out), (int)n,
                               mpi_type(t->dtype), MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) {
            vn__mpi_err(rc, "all_gather");
            vn_tensor_release(out);
            out = NULL;
        }
    }
    vn_tensor_release(src);
    return out;
}

vn_tensor *vn_dist_reduce_scatter(const vn_tensor *t, vn_dist_op op)
{
    if (check_out_of_place(t, "reduce_scatter", false, false, check_op(t, op, "reduce_scatter")))
        return NULL;
    if (t->ndim == 0 || t->shape[0] % world_size) /* the same on every rank */
        return vn__errp(VN_ERR_SHAPE, "reduce_scatter: the first dim of shape %s must be a multiple of "
                                      "the world size %d", vn__shape(t->ndim, t->shape),
                        world_size);
    int64_t shape[VN_MAX_DIMS];
    memcpy(shape, t->shape, sizeof shape);
    shape[0] /= world_size;
    vn_tensor *src = vn__plain_contiguous(t);
    vn_tensor *out = src ? vn__new_like(t, t->dtype, t->ndim, shape) : NULL;
    if (out && vn__is_cuda(t)) {
        if (vn__nccl_reduce_scatter(src, out, op)) {
            vn_tensor_release(out);
            out = NULL;
        }
    } else if (out) {
        int64_t n = vn_tensor_numel(out);
        int rc = MPI_Reduce_scatter_block(vn__ptr(src), vn__ptr(out), (int)n, mpi_type(t->dtype),
                                          mpi_op(op), MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) {
            vn__mpi_err(rc, "reduce_scatter");
            vn_tensor_release(out);
            out = NULL;
        } else if (op == VN_DIST_AVG) {
            divide_by_world(vn__ptr(out), t->dtype, n);
        }
    }
    vn_tensor_release(src);
    return out;
}

/* Element counts and displacements of an all_to_allv from row counts. */
static vn_status rows_to_elements(const int64_t *rows, int64_t row_size, int *count, int *displ,
                                  const char *what)
{
    int64_t at = 0;
    for (int r = 0; r < world_size; r++) {
        if (rows[r] * row_size > INT_MAX || at > INT_MAX)
            return vn__err(VN_ERR_ARG, "all_to_all: %s %lld rows of %lld elements; MPI moves at "
                                       "most %d", what, (long long)rows[r], (long long)row_size,
                           INT_MAX);
        count[r] = (int)(rows[r] * row_size);
        displ[r] = (int)at;
        at += count[r];
    }
    return VN_OK;
}

/* This rank's own checks of all_to_all's arguments. */
static vn_status check_counts(const vn_tensor *t, const int64_t *send_counts)
{
    vn_status s = check_tensor(t, "all_to_all", true);
    if (s) return s;
    if (t->ndim == 0) return vn__err(VN_ERR_SHAPE, "all_to_all: expected a tensor with rows "
                                                   "(at least 1 dim), got a 0-d tensor");
    if (!send_counts) return vn__err(VN_ERR_ARG, "all_to_all: send_counts is NULL");
    int64_t total = 0;
    for (int r = 0; r < world_size; r++) {
        if (send_counts[r] < 0)
            return vn__err(VN_ERR_ARG, "all_to_all: send count %lld for rank %d; expected >= 0",
                           (long long)send_counts[r], r);
        total += send_counts[r];
    }
    if (total != t->shape[0])
        return vn__err(VN_ERR_ARG, "all_to_all: the send counts sum to %lld rows but the "
                                   "tensor has %lld (the first dim of %s)", (long long)total,
                       (long long)t->shape[0], vn__shape(t->ndim, t->shape));
    return VN_OK;
}

vn_tensor *vn_dist_all_to_all(const vn_tensor *t, const int64_t *send_counts,
                              int64_t *recv_counts)
{
    if (check_out_of_place(t, "all_to_all", true, true, check_counts(t, send_counts)))
        return NULL;
    int64_t row = vn__numel(t->ndim - 1, t->shape + 1);
    int64_t *recv = malloc((size_t)world_size * sizeof *recv);
    int *ints = malloc((size_t)world_size * 4 * sizeof *ints); /* send, sdispl, recv, rdispl */
    vn_tensor *src = NULL, *out = NULL;
    int rc = recv && ints ? MPI_Alltoall(send_counts, 1, MPI_INT64_T, recv, 1, MPI_INT64_T,
                                         MPI_COMM_WORLD) : MPI_ERR_NO_MEM;
    vn_status s = rc == MPI_SUCCESS ? VN_OK : vn__mpi_err(rc, "all_to_all");
    if (!s) s = rows_to_elements(send_counts, row, ints, ints + world_size, "sending");
    if (!s) s = rows_to_elements(recv, row, ints + 2 * world_size, ints + 3 * world_size,
                                 "receiving");
    if (!s) {
        int64_t shape[VN_MAX_DIMS];
        memcpy(shape, t->shape, sizeof shape);
        shape[0] = 0;
        for (int r = 0; r < world_size; r++) shape[0] += recv[r];
        src = vn__plain_contiguous(t);
        out = src ? vn__new_like(t, t->dtype, t->ndim, shape) : NULL;
        s = out ? VN_OK : VN_ERR_MEMORY;
    }
    if (!s && vn__is_cuda(t)) {
        s = vn__nccl_all_to_all(src, out, ints);
    } else if (!s) {
        MPI_Datatype ty = mpi_type(t->dtype);
        rc = MPI_Alltoallv(vn__ptr(src), ints, ints + world_size, ty, vn__ptr(out),
                           ints + 2 * world_size, ints + 3 * world_size, ty, MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS) s = vn__mpi_err(rc, "all_to_all");
    }
    if (!s && recv_counts) memcpy(recv_counts, recv, (size_t)world_size * sizeof *recv);
    if (s) {
        vn_tensor_release(out);
        out = NULL;
    }
    vn_tensor_release(src);
    free(recv);
    free(ints);
    return out;
}
