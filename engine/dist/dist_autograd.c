/* dist_autograd.c — the all_to_all that autograd goes back through, for MoE
 * expert parallelism (tokens travel to the rank of their expert and the
 * expert's outputs travel back), and the gradient scaling of expert
 * replicas (vn_dist_scale_grad). Only public vn_dist_* calls, so the file is
 * the same with and without MPI (without it vn_dist_all_to_all says so). */
#include "internal.h"

#include <math.h>
#include <string.h>

struct all_to_all_saved {
    double grad_scale;
};

/* The gradient of the received rows goes back to the ranks that sent them:
 * an all_to_all with the counts swapped (saved[0] = send counts, then the
 * received counts, 2·P entries), times grad_scale. */
static vn_status all_to_all_backward(vn_node *n, const vn_tensor *g)
{
    const int64_t *counts = vn_tensor_data(n->saved[0]);
    int P = (int)(vn_tensor_numel(n->saved[0]) / 2);
    vn_tensor *back = vn_dist_all_to_all(g, counts + P, NULL);
    if (!back) return vn_last_status();
    double scale = VN_SAVED_STATE(n, struct all_to_all_saved)->grad_scale;
    if (scale != 1.0) { /* vn_mul: back may be a CUDA tensor (NCCL) */
        vn_tensor *factor = vn_full(VN_F32, 0, NULL, scale);
        vn_tensor *scaled = factor ? vn_mul(back, factor) : NULL;
        vn_tensor_release(factor);
        vn_tensor_release(back);
        if (!scaled) return vn_last_status();
        back = scaled;
    }
    return vn__accum(n, 0, back);
}

vn_tensor *vn_dist_all_to_all_autograd(const vn_tensor *t, const int64_t *send_counts,
                                       int64_t *recv_counts, double grad_scale)
{
    int64_t P2 = 2 * (int64_t)vn_dist_world_size();
    vn_tensor *counts = vn_zeros(VN_I64, 1, &P2);
    if (!counts) return NULL;
    int64_t *c = vn_tensor_data(counts);
    bool scale_ok = isfinite(grad_scale);
    if (send_counts) memcpy(c, send_counts, (size_t)P2 / 2 * sizeof *c);
    /* NULL counts (also for a bad grad_scale) reach vn_dist_all_to_all,
     * which refuses them in step with the other ranks, so none waits. */
    vn_tensor *out = vn_dist_all_to_all(t, send_counts && scale_ok ? c : NULL, c + P2 / 2);
    if (!scale_ok && send_counts)
        vn__err(VN_ERR_ARG, "all_to_all: grad_scale = %g; expected a finite number", grad_scale);
    if (out && recv_counts) memcpy(recv_counts, c + P2 / 2, (size_t)P2 / 2 * sizeof *c);
    vn_node *n = out ? vn__record(out, "all_to_all", all_to_all_backward, 1, &t) : NULL;
    if (n) {
        n->saved[0] = vn_tensor_retain(counts);
        VN_SAVED_STATE(n, struct all_to_all_saved)->grad_scale = grad_scale;
    }
    vn_tensor_release(counts);
    return out;
}

struct scale_grad_saved {
    double scale;
};

static vn_status scale_grad_backward(vn_node *n, const vn_tensor *g)
{
    double scale = VN_SAVED_STATE(n, struct scale_grad_saved)->scale;
    vn_tensor *factor = vn_full(VN_F32, 0, NULL, scale); /* a 0-d CPU scalar joins CUDA too */
    vn_tensor *scaled = factor ? vn_mul(g, factor) : NULL;
    vn_tensor_release(factor);
    return scaled ? vn__accum(n, 0, scaled) : vn_last_status();
}

vn_tensor *vn_dist_scale_grad(const vn_tensor *t, double scale)
{
    vn_status s = vn__check_arg(t, "scale_grad", "input", VN_ALLOW_CUDA);
    if (s) return NULL;
    if (!isfinite(scale))
        return vn__errp(VN_ERR_ARG, "scale_grad: scale = %g; expected a finite number", scale);
    vn_tensor *out = vn__alias(t);
    if (!out) return NULL; /* vn__alias said why */
    vn_node *n = vn__record(out, "scale_grad", scale_grad_backward, 1, &t);
    if (n) VN_SAVED_STATE(n, struct scale_grad_saved)->scale = scale;
    return out;
}
