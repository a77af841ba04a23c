/* venom/profile.h — a per-op profiler: wall time spent in each op kind,
 * forward and backward, on the calling thread. Reached only through venom.h. */
#ifndef VENOM_H
#error "include <venom.h>, not <venom/profile.h>"
#endif
#ifndef VENOM_PROFILE_H
#define VENOM_PROFILE_H

/* One row of the profile: an op kind (the name its autograd node carries,
 * e.g. "matmul", "layer_norm", "causal_attention"; "optimizer step" for the
 * fused optimizer updates) and its accumulated wall time in seconds.
 *
 * Backward time is exact: the time of the op's backward rule inside
 * vn_backward (its gradient accumulation included). Forward time is the
 * wall time from the end of the previous op on this thread to the end of
 * this one (ops recorded under no_grad count too), so it also holds
 * whatever the caller did between the two: Lua glue, data loading, ops that
 * record nothing. The first op after vn_profile_start is timed from the
 * start. */
typedef struct vn_profile_entry {
    const char *op;        /* static string, valid for the life of the process */
    int64_t forward_calls;
    double forward_s;
    int64_t backward_calls;
    double backward_s;
} vn_profile_entry;

/* Starts profiling on the calling thread, clearing earlier counts. Ops run
 * by other threads are not counted. Costs one branch per op when off. */
void vn_profile_start(void);

/* Stops profiling on the calling thread; the counts stay readable. */
void vn_profile_stop(void);

/* Copies at most cap rows (in order of first appearance) into out (which may
 * be NULL when cap is 0) and returns the number of op kinds seen since
 * vn_profile_start; at most VN_PROFILE_MAX_OPS kinds are kept, later ones
 * add to the row "(other ops)". */
#define VN_PROFILE_MAX_OPS 128
int vn_profile_entries(vn_profile_entry *out, int cap);

#endif
