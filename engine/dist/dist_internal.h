/* dist_internal.h — what the files of engine/dist share (MPI builds only). */
#ifndef VENOM_DIST_INTERNAL_H
#define VENOM_DIST_INTERNAL_H

#include "internal.h"

#include <mpi.h>

/* An MPI return code other than MPI_SUCCESS as VN_ERR_STATE, with MPI's
 * text: "op: MPI failed: <message>". */
vn_status vn__mpi_err(int rc, const char *op);
/* VN_ERR_STATE unless vn_dist_init has run. */
vn_status vn__dist_ready(const char *op);

/* The collectives on CUDA tensors (dist_nccl.c, VENOM_NCCL), called by dist.c
 * after its checks and the shape exchange; all_to_all takes MPI_Alltoallv's
 * four arrays (send counts, send displacements, receive counts, receive
 * displacements, in elements) end to end. Without NCCL dist.c refuses CUDA
 * tensors before it gets here, and these return "venom was built without
 * NCCL" (VN_ERR_DEVICE) as a second line of defence. */
#ifdef VENOM_HAVE_NCCL
bool vn__nccl_built(void);
void vn__nccl_finalize(void);
vn_status vn__nccl_all_reduce(vn_tensor *t, vn_dist_op op);
vn_status vn__nccl_broadcast(vn_tensor *t, int root);
vn_status vn__nccl_all_gather(const vn_tensor *src, vn_tensor *out);
vn_status vn__nccl_reduce_scatter(const vn_tensor *src, vn_tensor *out, vn_dist_op op);
vn_status vn__nccl_all_to_all(const vn_tensor *src, vn_tensor *out, const int *ints);
/* The device side of the gradient reducer (dist_reducer.c, DataParallel of
 * CUDA parameters). setup: the communicator, made collectively when the
 * reducer is (not in the middle of a backward). copy: bytes from src to dst
 * (zeros when src is NULL), both on the device, queued on the compute
 * stream. bucket_start: the mean over the ranks of flat's n floats, in
 * place (ncclAllReduce with ncclAvg), on NCCL's stream after the work
 * queued on the compute stream so far (the copies that filled flat); not
 * waited for. join: the compute stream's later work waits for every bucket
 * started (so the optimizer reads the means). */
vn_status vn__nccl_setup(const char *op);
vn_status vn__nccl_copy(void *dst, const void *src, size_t bytes, const char *op);
vn_status vn__nccl_bucket_start(float *flat, int64_t n, const char *op);
vn_status vn__nccl_join(const char *op);
#else
static inline bool vn__nccl_built(void) { return false; }
static inline void vn__nccl_finalize(void) {}
#define VN__NO_NCCL vn__err(VN_ERR_DEVICE, "venom was built without NCCL")
static inline vn_status vn__nccl_all_reduce(vn_tensor *t, vn_dist_op op) { return VN__NO_NCCL; }
static inline vn_status vn__nccl_broadcast(vn_tensor *t, int root) { return VN__NO_NCCL; }
static inline vn_status vn__nccl_all_gather(const vn_tensor *src, vn_tensor *out) { return VN__NO_NCCL; }
static inline vn_status vn__nccl_reduce_scatter(const vn_tensor *src, vn_tensor *out, vn_dist_op op)
{
    return VN__NO_NCCL;
}
static inline vn_status vn__nccl_all_to_all(const vn_tensor *src, vn_tensor *out, const int *ints)
{
    return VN__NO_NCCL;
}
static inline vn_status vn__nccl_setup(const char *op) { return VN__NO_NCCL; }
static inline vn_status vn__nccl_copy(void *dst, const void *src, size_t bytes, const char *op)
{
    return VN__NO_NCCL;
}
static inline vn_status vn__nccl_bucket_start(float *flat, int64_t n, const char *op) { return VN__NO_NCCL; }
static inline vn_status vn__nccl_join(const char *op) { return VN__NO_NCCL; }
#endif

#endif
