/* dist_stub.c — venom.distributed in a build without MPI (VENOM_MPI=OFF, or
 * CMake found no MPI): a world of one that cannot be joined, so that every
 * entry point says plainly what is missing. */
#include "internal.h"

#define NO_MPI "venom was built without MPI (Open MPI was not found when it was configured, " \
               "or VENOM_MPI=OFF); install libopenmpi-dev and reconfigure"

bool vn_dist_built(void) { return false; }
bool vn_dist_nccl_built(void) { return false; }
vn_status vn_dist_init(void) { return vn__err(VN_ERR_STATE, "distributed init: " NO_MPI); }
bool vn_dist_is_initialized(void) { return false; }
void vn_dist_finalize(void) {}
void vn_dist_abort(int code) {}
int vn_dist_rank(void) { return 0; }
int vn_dist_world_size(void) { return 1; }
int vn_dist_local_rank(void) { return 0; }
vn_status vn_dist_barrier(void) { return vn__err(VN_ERR_STATE, "barrier: " NO_MPI); }
vn_status vn_dist_all_reduce(vn_tensor *t, vn_dist_op op)
{
    return vn__err(VN_ERR_STATE, "all_reduce: " NO_MPI);
}
vn_status vn_dist_broadcast(vn_tensor *t, int root)
{
    return vn__err(VN_ERR_STATE, "broadcast: " NO_MPI);
}
vn_tensor *vn_dist_all_gather(const vn_tensor *t) { return vn__errp(VN_ERR_STATE, "all_gather: " NO_MPI); }
vn_tensor *vn_dist_reduce_scatter(const vn_tensor *t, vn_dist_op op)
{
    return vn__errp(VN_ERR_STATE, "reduce_scatter: " NO_MPI);
}
vn_tensor *vn_dist_all_to_all(const vn_tensor *t, const int64_t *send_counts, int64_t *recv_counts)
{
    return vn__errp(VN_ERR_STATE, "all_to_all: " NO_MPI);
}
vn_dist_reducer *vn_dist_reducer_new(vn_tensor *const *params, int n, size_t bucket_bytes)
{
    return vn__errp(VN_ERR_STATE, "DataParallel: " NO_MPI);
}
vn_status vn_dist_reducer_finish(vn_dist_reducer *r)
{
    return vn__err(VN_ERR_STATE, "DataParallel finish: " NO_MPI);
}
vn_dist_reducer_stats vn_dist_reducer_get_stats(const vn_dist_reducer *r)
{
    return (vn_dist_reducer_stats){0};
}
void vn_dist_reducer_free(vn_dist_reducer *r) {}
vn_dist_group *vn_dist_group_new(const int *ranks, int n)
{
    return vn__errp(VN_ERR_STATE, "new_group: " NO_MPI);
}
int vn_dist_group_size(const vn_dist_group *g) { return 0; }
int vn_dist_group_rank(const vn_dist_group *g) { return -1; }
vn_status vn_dist_group_all_reduce(const vn_dist_group *g, vn_tensor *t, vn_dist_op op)
{
    return vn__err(VN_ERR_STATE, "group all_reduce: " NO_MPI);
}
void vn_dist_group_free(vn_dist_group *g) {}
