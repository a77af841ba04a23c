/* venom/dist.h — training on several processes: collectives on tensors over
 * MPI (Open MPI), and the bucketed gradient all-reduce of data parallelism.
 * Reached through venom.h only. Built when CMake finds MPI (VENOM_MPI=
 * AUTO|ON|OFF); without it vn_dist_init fails with VN_ERR_STATE ("venom was
 * built without MPI") and the rest behaves as a 1-process world.
 *
 * The world is MPI_COMM_WORLD: start the processes with `mpirun -np P`.
 * Every collective must be called by every rank, in the same order, with
 * tensors of the same shape and dtype (all_to_all: the same trailing dims).
 * Before moving data each collective exchanges the ranks' shapes and dtypes,
 * so a mismatch is a VN_ERR_SHAPE (or VN_ERR_DTYPE) on every rank, naming the
 * shape of each rank, instead of a hang or garbage. MPI errors come back as
 * VN_ERR_STATE with MPI's message (the communicator uses MPI_ERRORS_RETURN,
 * so a bad argument never aborts the job). Tensors: contiguous CPU tensors of
 * dtype f32, i32 or i64 (u8 too for broadcast and all_gather). CUDA tensors
 * go through NCCL in a build with it (VENOM_NCCL: nccl.h and libnccl found
 * beside CUDA and MPI): one communicator per process, bootstrapped over MPI
 * by the first CUDA collective, on a stream of its own ordered against the
 * compute stream; each process uses its device 0 (give each rank its own GPU
 * with CUDA_VISIBLE_DEVICES, e.g. from vn_dist_local_rank), and avg takes
 * f32 only there. Without NCCL a CUDA tensor is VN_ERR_DEVICE. The gradient
 * reducer (DataParallel) takes CPU parameters (MPI) or CUDA parameters
 * (NCCL), not a mix. All functions are for one thread. */
#ifndef VENOM_H
#error "include <venom.h>, not <venom/dist.h>"
#endif
#ifndef VENOM_DIST_H
#define VENOM_DIST_H

/* How all_reduce and reduce_scatter combine the ranks' values: the sum, the
 * mean (sum / world size; integer dtypes round toward zero) or the maximum. */
typedef enum { VN_DIST_SUM = 0, VN_DIST_AVG, VN_DIST_MAX } vn_dist_op;

/* True when venom was built with MPI, and with NCCL (CUDA collectives). */
bool vn_dist_built(void);
bool vn_dist_nccl_built(void);
/* Joins the world: MPI_Init (unless the host already did it) with
 * MPI_ERRORS_RETURN on MPI_COMM_WORLD. Outside mpirun a process is a world
 * of one (rank 0, world size 1), where every collective is a copy. Calling
 * it again is a no-op. MPI_Finalize runs at exit (or vn_dist_finalize).
 * Errors: VN_ERR_STATE without MPI or when MPI fails to start. */
vn_status vn_dist_init(void);
/* True between vn_dist_init and vn_dist_finalize. */
bool vn_dist_is_initialized(void);
/* Leaves the world (MPI_Finalize, if venom called MPI_Init). Idempotent. */
void vn_dist_finalize(void);
/* Ends every process of the job (MPI_Abort with `code`) when this one has
 * joined a world of two or more: the way out for a rank that failed while
 * the others may be waiting in a collective it will never join. Returns
 * (doing nothing) otherwise, and without MPI. */
void vn_dist_abort(int code);
/* This process's rank in 0..world_size-1, the number of processes, and the
 * rank among the processes on this host (for picking a GPU). 0, 1 and 0
 * before vn_dist_init. */
int vn_dist_rank(void);
int vn_dist_world_size(void);
int vn_dist_local_rank(void);

/* Waits until every rank has called it. */
vn_status vn_dist_barrier(void);
/* In place: t = op over the ranks of t (element by element), through
 * MPI_Allreduce (Open MPI gives every rank the same bits). Errors: VN_ERR_STATE (not
 * initialized, MPI), VN_ERR_SHAPE / VN_ERR_DTYPE (ranks disagree),
 * VN_ERR_ARG (non-contiguous, a leaf that requires grad under grad mode),
 * VN_ERR_DEVICE (CUDA). */
vn_status vn_dist_all_reduce(vn_tensor *t, vn_dist_op op);
/* In place: t = rank root's t. Errors: those of all_reduce, VN_ERR_ARG for a
 * root outside 0..world_size-1. */
vn_status vn_dist_broadcast(vn_tensor *t, int root);
/* The ranks' tensors stacked along dim 0 in rank order: (d0, ...) on each
 * of P ranks gives (P·d0, ...). A 0-d tensor gives (P). New tensor, or NULL
 * with the errors of all_reduce. */
vn_tensor *vn_dist_all_gather(const vn_tensor *t);
/* op over the ranks, then rank r keeps rows [r·d0/P, (r+1)·d0/P) of dim 0:
 * (d0, ...) gives (d0/P, ...). VN_ERR_SHAPE when P does not divide d0. */
vn_tensor *vn_dist_reduce_scatter(const vn_tensor *t, vn_dist_op op);
/* Exchange of rows (dim 0) with per-rank counts, as MoE expert parallelism
 * needs: this rank sends rows [Σ_{q<r} send_counts[q], + send_counts[r]) of t
 * to rank r (send_counts has world_size entries summing to t's dim 0) and
 * receives, in rank order, what each rank sends it. The counts it receives
 * are written to recv_counts (world_size entries) when it is not NULL.
 * Errors: those of all_reduce; VN_ERR_ARG for negative counts or counts that
 * do not sum to dim 0; VN_ERR_SHAPE when the trailing dims differ. */
vn_tensor *vn_dist_all_to_all(const vn_tensor *t, const int64_t *send_counts,
                              int64_t *recv_counts);

/* vn_dist_all_to_all with a backward, for MoE expert parallelism (tokens go
 * to the rank of their expert, the expert's outputs come back the same way).
 * The forward is vn_dist_all_to_all (same arguments, same errors). When t
 * needs a gradient the result records a node whose backward sends the
 * received rows' gradient back to the ranks they came from (an all_to_all
 * with the counts swapped) and multiplies it by grad_scale (1: the plain
 * gradient; expert parallelism passes 1/P and P, see nn.MoE). That backward
 * is a collective too: every rank must run the backward of each such call,
 * in the same order, so the graphs of all ranks must reach it alike (e.g.
 * run every local expert, even on zero rows). Errors: those of
 * vn_dist_all_to_all; VN_ERR_ARG for a grad_scale that is not finite (every
 * rank then fails). */
vn_tensor *vn_dist_all_to_all_autograd(const vn_tensor *t, const int64_t *send_counts,
                                       int64_t *recv_counts, double grad_scale);

/* An identity whose backward multiplies the gradient by `scale`: the output
 * is a new header over t's data (no copy); dL/dt = scale · dL/dout. FlexMoE
 * expert replicas (venom.nn_moe_parallel) use it so that each of R replicas
 * of an expert holds R × its share of the expert's gradient and their
 * average (the all-reduce among them) is the whole gradient, as DataParallel
 * averages gradients that are P × a rank's share. CPU or CUDA; not a
 * collective (built with and without MPI). Errors: VN_ERR_ARG for a NULL
 * or freed t and for a scale that is not finite. */
vn_tensor *vn_dist_scale_grad(const vn_tensor *t, double scale);

/* ---- groups of ranks ------------------------------------------------------- */

/* A group of ranks (an MPI sub-communicator), so that a collective among
 * some ranks moves data among them alone, as FlexMoE's expert replicas
 * averaging their gradients (venom.nn_moe_parallel). vn_dist_group_new is
 * a collective over the whole world: every rank calls it, in the same
 * order, with the same list of n distinct world ranks (0-based); the
 * members are ordered as listed. Ranks outside the list get a group too,
 * whose collectives they must not call. Errors: VN_ERR_STATE (not
 * initialized, MPI), VN_ERR_ARG (an empty list, a rank out of range or
 * listed twice, lists that differ between ranks: on every rank),
 * VN_ERR_MEMORY. Free with vn_dist_group_free (before MPI ends). */
typedef struct vn_dist_group vn_dist_group;
vn_dist_group *vn_dist_group_new(const int *ranks, int n);
/* The number of ranks in the group; this rank's place in it (0-based, in
 * the order listed), -1 outside it. */
int vn_dist_group_size(const vn_dist_group *g);
int vn_dist_group_rank(const vn_dist_group *g);
/* In place, among the group's members only: t = op over them of t (sum,
 * avg = sum / group size, max), through MPI_Allreduce on the group's
 * communicator. Contiguous f32 CPU tensors. Errors: VN_ERR_ARG (a rank
 * outside the group, a bad tensor or op), VN_ERR_SHAPE (the members' sizes
 * differ: on each member), VN_ERR_STATE (MPI). */
vn_status vn_dist_group_all_reduce(const vn_dist_group *g, vn_tensor *t, vn_dist_op op);
void vn_dist_group_free(vn_dist_group *g);

/* ---- data parallel: the gradient reducer --------------------------------- */

/* Averages the gradients of n parameters over the ranks during the backward
 * (data parallelism, as PyTorch's DistributedDataParallel; Li et al., VLDB
 * 2020). The parameters (leaf f32 tensors that require grad, all on the CPU
 * or all on CUDA; the same list, shapes, order and device on every rank) are
 * laid, in reverse order (the
 * backward reaches the last layers first), into buckets of at most
 * bucket_bytes, a large gradient cut into pieces across several. A
 * grad-ready hook on each parameter notes when its gradient is final; once
 * a bucket is complete, and all buckets before it have started, its
 * gradients (copied into one flat buffer as each becomes final; a linear
 * layer's weight gradient row slice by row slice of its GEMM, a V:N:M
 * layer's values row block by row block of its SDDMM, the GMP shadow's
 * dense weight by rows of its GEMM) go to a non-blocking MPI_Iallreduce,
 * overlapping the rest of the backward (which gives MPI a turn after each
 * node and between slices of each large GEMM or SDDMM).
 * When the last bucket has started the reducer waits for all of them and writes the means
 * back into the gradients. A parameter that got no gradient counts as zeros.
 * CUDA parameters (a build with NCCL): the buckets live on the device, each
 * complete one is averaged by ncclAllReduce (ncclAvg) on NCCL's stream,
 * ordered after the compute stream's copies into it by an event, while the
 * compute stream goes on with the backward; at the end the compute stream
 * waits for NCCL's (the host does not) before the means are copied into the
 * gradients, so an optimizer step queued after sees them (no row-slice
 * handover on CUDA: a gradient goes to its bucket whole). The shapes and
 * devices are checked across ranks here (VN_ERR_SHAPE on every rank), and
 * the NCCL communicator is made here (collectively) for CUDA parameters.
 * Errors: VN_ERR_STATE (not initialized, MPI, NCCL), VN_ERR_ARG,
 * VN_ERR_DEVICE (parameters on both devices; CUDA ones without NCCL),
 * VN_ERR_MEMORY. Free with vn_dist_reducer_free, which removes the hooks. */
typedef struct vn_dist_reducer vn_dist_reducer;
vn_dist_reducer *vn_dist_reducer_new(vn_tensor *const *params, int n, size_t bucket_bytes);
/* Finishes this step's reduction: starts the buckets not yet started (their
 * parameters got no gradient this step, or a backward failed), waits for
 * all, writes the means. A no-op when the backward already finished it. */
vn_status vn_dist_reducer_finish(vn_dist_reducer *r);
/* Counters since vn_dist_reducer_new: completed steps, buckets, gradient
 * bytes all-reduced per step (the payload, the sum of the gradients' sizes),
 * seconds spent waiting for all-reduces to complete (the communication the
 * backward did not hide; about 0 for CUDA parameters, whose wait is the
 * compute stream's, not the host's), the bytes copied into the buckets in all (each
 * element once per step: steps × bytes_per_step after whole steps), and the
 * pieces handed over from a linear layer's weight-gradient GEMM slice by
 * slice, before the layer's backward had finished, and the bytes whose
 * all-reduce started before the last piece of the gradient was final, while
 * the backward was still computing (the most it can hide; the rest starts
 * at its end). */
typedef struct {
    int64_t steps;
    int nbuckets;
    int64_t bytes_per_step;
    double wait_seconds;
    int64_t bytes_reduced;
    int64_t pieces_early;
    int64_t bytes_started_early;
} vn_dist_reducer_stats;
vn_dist_reducer_stats vn_dist_reducer_get_stats(const vn_dist_reducer *r);
/* Removes the hooks and frees the buffers. NULL-safe. */
void vn_dist_reducer_free(vn_dist_reducer *r);

#endif
