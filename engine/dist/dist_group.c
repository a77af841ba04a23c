/* dist_group.c — groups of ranks (MPI sub-communicators), so that a
 * collective that concerns some ranks only moves data among them: FlexMoE's
 * expert replicas average their gradients over the replicas' ranks, not the
 * world (venom.nn_moe_parallel). A group is made by MPI_Comm_split over the
 * world (every rank calls it, in the same order), after a check that every
 * rank passed the same list. */
#include "dist_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct vn_dist_group {
    MPI_Comm comm;  /* MPI_COMM_NULL on a rank outside the group */
    int n, rank;    /* its size; this rank's place in it (-1 outside) */
    int *ranks;     /* its world ranks, in the caller's order */
};

/* The checks that need no other rank: 1..world_size distinct ranks in range. */
static vn_status check_ranks(const int *ranks, int n, int world)
{
    if (!ranks || n <= 0 || n > world)
        return vn__err(VN_ERR_ARG, "new_group: expected 1 to %d ranks, got %d", world, n);
    for (int i = 0; i < n; i++) {
        if (ranks[i] < 0 || ranks[i] >= world)
            return vn__err(VN_ERR_ARG, "new_group: rank %d (entry %d) is not in 0..%d", ranks[i],
                           i + 1, world - 1);
        for (int j = 0; j < i; j++)
            if (ranks[j] == ranks[i])
                return vn__err(VN_ERR_ARG, "new_group: rank %d is listed twice", ranks[i]);
    }
    return VN_OK;
}

/* Every rank's list must be the same (a rank whose own checks failed still
 * takes part, so that all fail together): the largest and smallest of the
 * ranks' digests of their lists (FNV-1a over the count and the ranks) must
 * agree. */
static vn_status check_same_list(const int *ranks, int n, vn_status local)
{
    uint64_t h = 1469598103934665603u;
    for (int i = -1; !local && i < n; i++) {
        h ^= (uint64_t)(uint32_t)(i < 0 ? n : ranks[i]);
        h *= 1099511628211u;
    }
    uint64_t hi[2] = {local != VN_OK, h}, lo = h; /* hi: any refusal, the largest digest */
    int rc = MPI_Allreduce(MPI_IN_PLACE, hi, 2, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    if (rc == MPI_SUCCESS)
        rc = MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    if (local) return local;
    if (rc != MPI_SUCCESS) return vn__mpi_err(rc, "new_group");
    if (hi[0])
        return vn__err(VN_ERR_ARG, "new_group: another rank refused its list (its own error "
                                   "says why)");
    if (hi[1] != lo)
        return vn__err(VN_ERR_ARG, "new_group: the ranks passed different lists of ranks (this "
                                   "rank %d of them); every rank must pass the same list", n);
    return VN_OK;
}

vn_dist_group *vn_dist_group_new(const int *ranks, int n)
{
    vn_status s = vn__dist_ready("new_group");
    if (s) return NULL;
    s = check_ranks(ranks, n, vn_dist_world_size());
    if (check_same_list(ranks, n, s)) return NULL;
    vn_dist_group *g = calloc(1, sizeof *g);
    int *copy = malloc((size_t)n * sizeof *copy);
    int me = vn_dist_rank(), place = -1;
    for (int i = 0; i < n; i++)
        if (ranks[i] == me) place = i;
    /* Everyone splits (a rank that is out of memory too, as MPI_UNDEFINED):
     * colour 0 for the members, ordered as listed. */
    MPI_Comm comm = MPI_COMM_NULL;
    int rc = MPI_Comm_split(MPI_COMM_WORLD, g && copy && place >= 0 ? 0 : MPI_UNDEFINED,
                            place, &comm);
    if (rc == MPI_SUCCESS && comm != MPI_COMM_NULL)
        rc = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    /* all ranks succeed or all fail (a member out of memory would leave the
     * others a group without it) */
    int ok = g && copy && rc == MPI_SUCCESS, all = 0;
    int rc2 = MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all || rc2 != MPI_SUCCESS) {
        if (comm != MPI_COMM_NULL) MPI_Comm_free(&comm);
        free(g);
        free(copy);
        if (rc != MPI_SUCCESS || rc2 != MPI_SUCCESS)
            return vn__mpi_err(rc != MPI_SUCCESS ? rc : rc2, "new_group"), NULL;
        if (ok) return vn__errp(VN_ERR_MEMORY, "new_group: another rank ran out of memory");
        return vn__errp(VN_ERR_MEMORY, "new_group: out of memory");
    }
    memcpy(copy, ranks, (size_t)n * sizeof *copy);
    *g = (vn_dist_group){comm, n, place, copy};
    return g;
}

int vn_dist_group_size(const vn_dist_group *g) { return g ? g->n : 0; }
int vn_dist_group_rank(const vn_dist_group *g) { return g ? g->rank : -1; }

vn_status vn_dist_group_all_reduce(const vn_dist_group *g, vn_tensor *t, vn_dist_op op)
{
    const char *name = "group all_reduce";
    vn_status s = vn__dist_ready(name);
    if (s) return s;
    if (!g) return vn__err(VN_ERR_ARG, "%s: the group is NULL (freed?)", name);
    if (g->rank < 0)
        return vn__err(VN_ERR_ARG, "%s: rank %d is not in this group of %d ranks; only its "
                                   "members call its collectives", name, vn_dist_rank(), g->n);
    if ((s = vn__check_dtype_arg(t, VN_F32, name, "tensor", 0))) return s;
    if (op != VN_DIST_SUM && op != VN_DIST_AVG && op != VN_DIST_MAX)
        return vn__err(VN_ERR_ARG, "%s: unknown reduction %d; expected sum, avg or max", name,
                       (int)op);
    if (!vn_tensor_is_contiguous(t))
        return vn__err(VN_ERR_ARG, "%s: the tensor is written in place and must be contiguous "
                                   "(shape %s is a strided view)",
                       name, vn__shape(t->ndim, t->shape));
    if ((s = vn__begin_write(t, name))) return s;
    int64_t n = vn_tensor_numel(t);
    if (n > INT32_MAX)
        return vn__err(VN_ERR_ARG, "%s: %lld elements; MPI moves at most 2^31 - 1 in one call",
                       name, (long long)n);
    /* the members' sizes first: a mismatch is an error on each, not a hang */
    int64_t lo = n, hi = n;
    int rc = MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT64_T, MPI_MIN, g->comm);
    if (rc == MPI_SUCCESS) rc = MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT64_T, MPI_MAX, g->comm);
    if (rc != MPI_SUCCESS) return vn__mpi_err(rc, name);
    if (lo != hi)
        return vn__err(VN_ERR_SHAPE, "%s: the group's ranks passed tensors of different sizes "
                                     "(%lld to %lld elements; this rank %s)", name, (long long)lo,
                       (long long)hi, vn__shape(t->ndim, t->shape));
    float *x = vn__ptr(t);
    rc = MPI_Allreduce(MPI_IN_PLACE, x, (int)n, MPI_FLOAT, op == VN_DIST_MAX ? MPI_MAX : MPI_SUM,
                       g->comm);
    if (rc != MPI_SUCCESS) return vn__mpi_err(rc, name);
    if (op == VN_DIST_AVG)
        for (int64_t i = 0; i < n; i++) x[i] /= (float)g->n;
    return VN_OK;
}

void vn_dist_group_free(vn_dist_group *g)
{
    if (!g) return;
    int ended = 0;
    MPI_Finalized(&ended);
    if (g->comm != MPI_COMM_NULL && !ended) MPI_Comm_free(&g->comm);
    free(g->ranks);
    free(g);
}
