/* dist_nccl.c — the collectives on CUDA tensors, through NCCL (built when
 * CMake finds nccl.h and libnccl beside a CUDA build with MPI: VENOM_NCCL).
 * dist.c has checked the arguments and exchanged the ranks' shapes over MPI
 * before it calls these, so every rank arrives with the same sizes.
 *
 * One communicator per process, made by the first CUDA collective (which
 * every rank joins): rank 0 asks NCCL for a unique id and MPI broadcasts it
 * (as llm.c bootstraps NCCL), then ncclCommInitRank. NCCL runs on a stream
 * of its own: an event orders it after the work venom has queued on its
 * compute stream (the legacy default stream, kernels/kernels.h), and
 * another orders the compute stream's later work after it, so the caller
 * sees the result as if the collective were one more kernel. */
#include "dist_internal.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <string.h>

static ncclComm_t comm;
static cudaStream_t stream;
static cudaEvent_t before, after;

static vn_status nccl_err(ncclResult_t rc, const char *op)
{
    return vn__err(VN_ERR_STATE, "%s: NCCL failed: %s", op, ncclGetErrorString(rc));
}

static vn_status cuda_err(cudaError_t rc, const char *op)
{
    return vn__err(VN_ERR_STATE, "%s: CUDA failed around NCCL: %s", op, cudaGetErrorString(rc));
}

/* Makes the stream, events and communicator on first use. Each step that
 * one rank could fail alone is agreed on over MPI first, so that no rank
 * waits in ncclCommInitRank for one that gave up. */
static vn_status ready(const char *op)
{
    if (comm) return VN_OK;
    struct {
        ncclUniqueId id;
        int failed;
    } msg;
    memset(&msg, 0, sizeof msg);
    ncclResult_t nr = ncclSuccess;
    if (vn_dist_rank() == 0 && (nr = ncclGetUniqueId(&msg.id)) != ncclSuccess) msg.failed = 1;
    int rc = MPI_Bcast(&msg, (int)sizeof msg, MPI_BYTE, 0, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return vn__mpi_err(rc, op);
    if (msg.failed)
        return vn_dist_rank() == 0 ? nccl_err(nr, op)
                                   : vn__err(VN_ERR_STATE, "%s: NCCL failed on rank 0 (its "
                                                           "error says why)", op);
    cudaError_t ce = stream ? cudaSuccess : cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (ce == cudaSuccess && !before) ce = cudaEventCreateWithFlags(&before, cudaEventDisableTiming);
    if (ce == cudaSuccess && !after) ce = cudaEventCreateWithFlags(&after, cudaEventDisableTiming);
    int ok = ce == cudaSuccess, all_ok = 0;
    rc = MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return vn__mpi_err(rc, op);
    if (!ok) return cuda_err(ce, op);
    if (!all_ok) return vn__err(VN_ERR_STATE, "%s: another rank could not set up CUDA for NCCL "
                                              "(its error says why)", op);
    if ((nr = ncclCommInitRank(&comm, vn_dist_world_size(), msg.id, vn_dist_rank())) != ncclSuccess) {
        comm = NULL;
        return nccl_err(nr, op);
    }
    return VN_OK;
}

vn_status vn__nccl_setup(const char *op) { return ready(op); }

/* NCCL's stream waits for the compute stream's queued work. */
static vn_status begin(const char *op)
{
    vn_status s = ready(op);
    if (s) return s;
    cudaError_t ce = cudaEventRecord(before, cudaStreamLegacy);
    if (ce == cudaSuccess) ce = cudaStreamWaitEvent(stream, before, 0);
    return ce == cudaSuccess ? VN_OK : cuda_err(ce, op);
}

/* The compute stream's next work waits for what NCCL was given. */
static vn_status end(ncclResult_t nr, const char *op)
{
    if (nr != ncclSuccess) return nccl_err(nr, op);
    cudaError_t ce = cudaEventRecord(after, stream);
    if (ce == cudaSuccess) ce = cudaStreamWaitEvent(cudaStreamLegacy, after, 0);
    return ce == cudaSuccess ? VN_OK : cuda_err(ce, op);
}

static ncclDataType_t nccl_type(vn_dtype d)
{
    switch (d) {
    case VN_F32: return ncclFloat32;
    case VN_I32: return ncclInt32;
    case VN_I64: return ncclInt64;
    default: return ncclUint8;
    }
}

/* dist.c refuses AVG of integer CUDA tensors, so ncclAvg sees f32 only. */
static ncclRedOp_t nccl_op(vn_dist_op op)
{
    return op == VN_DIST_MAX ? ncclMax : op == VN_DIST_AVG ? ncclAvg : ncclSum;
}

bool vn__nccl_built(void) { return true; }

void vn__nccl_finalize(void)
{
    if (comm) ncclCommDestroy(comm);
    comm = NULL;
}

vn_status vn__nccl_all_reduce(vn_tensor *t, vn_dist_op op)
{
    const char *name = "all_reduce";
    vn_status s = begin(name);
    if (s) return s;
    void *p = vn__ptr(t);
    return end(ncclAllReduce(p, p, (size_t)vn_tensor_numel(t), nccl_type(t->dtype), nccl_op(op),
                             comm, stream), name);
}

vn_status vn__nccl_broadcast(vn_tensor *t, int root)
{
    const char *name = "broadcast";
    vn_status s = begin(name);
    if (s) return s;
    void *p = vn__ptr(t);
    return end(ncclBroadcast(p, p, (size_t)vn_tensor_numel(t), nccl_type(t->dtype), root, comm,
                             stream), name);
}

vn_status vn__nccl_all_gather(const vn_tensor *src, vn_tensor *out)
{
    const char *name = "all_gather";
    vn_status s = begin(name);
    if (s) return s;
    return end(ncclAllGather(vn__ptr(src), vn__ptr(out), (size_t)vn_tensor_numel(src),
                             nccl_type(src->dtype), comm, stream), name);
}

vn_status vn__nccl_reduce_scatter(const vn_tensor *src, vn_tensor *out, vn_dist_op op)
{
    const char *name = "reduce_scatter";
    vn_status s = begin(name);
    if (s) return s;
    return end(ncclReduceScatter(vn__ptr(src), vn__ptr(out), (size_t)vn_tensor_numel(out),
                                 nccl_type(src->dtype), nccl_op(op), comm, stream), name);
}

/* counts/displacements in elements, 4 arrays of world_size: send, send
 * displacement, receive, receive displacement (as MPI_Alltoallv's). */
vn_status vn__nccl_all_to_all(const vn_tensor *src, vn_tensor *out, const int *ints)
{
    const char *name = "all_to_all";
    vn_status s = begin(name);
    if (s) return s;
    int P = vn_dist_world_size();
    size_t es = vn_dtype_size(src->dtype);
    ncclDataType_t ty = nccl_type(src->dtype);
    const char *from = vn__ptr(src);
    char *to = vn__ptr(out);
    ncclResult_t nr = ncclGroupStart();
    for (int r = 0; r < P && nr == ncclSuccess; r++) {
        nr = ncclSend(from + (size_t)ints[P + r] * es, (size_t)ints[r], ty, r, comm, stream);
        if (nr == ncclSuccess)
            nr = ncclRecv(to + (size_t)ints[3 * P + r] * es, (size_t)ints[2 * P + r], ty, r, comm,
                          stream);
    }
    ncclResult_t ne = ncclGroupEnd();
    return end(nr != ncclSuccess ? nr : ne, name);
}

/* ---- the gradient reducer's device side (dist_reducer.c) ------------------ */

vn_status vn__nccl_copy(void *dst, const void *src, size_t bytes, const char *op)
{
    cudaError_t ce = src ? cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cudaStreamLegacy)
                         : cudaMemsetAsync(dst, 0, bytes, cudaStreamLegacy);
    return ce == cudaSuccess ? VN_OK : cuda_err(ce, op);
}

/* begin() orders it after the copies into flat (and the backward kernels
 * that computed the gradients they read), which were queued on the compute
 * stream before; without end() the compute stream runs on (the rest of the
 * backward) while NCCL reduces. Reusing the one `before` event per bucket is
 * safe: cudaStreamWaitEvent waits for the event's state when it is called. */
vn_status vn__nccl_bucket_start(float *flat, int64_t n, const char *op)
{
    vn_status s = begin(op);
    if (s) return s;
    ncclResult_t nr = ncclAllReduce(flat, flat, (size_t)n, ncclFloat32, ncclAvg, comm, stream);
    return nr == ncclSuccess ? VN_OK : nccl_err(nr, op);
}

vn_status vn__nccl_join(const char *op) { return end(ncclSuccess, op); }
