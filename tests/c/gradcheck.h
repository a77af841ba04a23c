/* gradcheck.h — shared helpers of the C tests: build tensors from literals,
 * compare tensors, and check autograd gradients against central finite
 * differences. */
#ifndef VENOM_GRADCHECK_H
#define VENOM_GRADCHECK_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "venom.h"

/* Fails the current cmocka test with vn_last_error() if p is NULL. */
#define CHECK_PTR(p) do { if (!(p)) fail_msg("%s: %s", #p, vn_last_error()); } while (0)
#define CHECK_OK(s) do { vn_status s_ = (s); if (s_ != VN_OK) fail_msg("%s: %s", #s, vn_last_error()); } while (0)

/* f32 tensor of the given shape from a literal array. */
vn_tensor *tf32(int ndim, const int64_t *shape, const float *data);
/* f32 tensor of the given shape filled from a private generator (uniform in
 * [lo, hi)), independent of the engine RNG. */
vn_tensor *trand(int ndim, const int64_t *shape, double lo, double hi, unsigned seed);
/* trand, marked as requiring a gradient. */
vn_tensor *gc_param(int ndim, const int64_t *shape, double lo, double hi, unsigned seed);
/* A contiguous f32 copy of t's elements, malloc'd (free it). */
float *gc_values(const vn_tensor *t);
/* Fails the test unless r is NULL with status `want` and a message that
 * holds every string of the NULL-terminated `needles`. */
void gc_expect_error(vn_tensor *r, vn_status want, const char *const *needles);
#define GC_EXPECT_ERROR(r, st, ...) gc_expect_error((r), (st), (const char *const[]){__VA_ARGS__, NULL})
/* Releases the n tensors (NULLs allowed); GC_RELEASE(a, b, ...) counts them. */
void gc_release_all(vn_tensor **ts, size_t n);
#define GC_RELEASE(...) gc_release_all((vn_tensor *[]){__VA_ARGS__}, \
                                       sizeof((vn_tensor *[]){__VA_ARGS__}) / sizeof(vn_tensor *))

/* Largest |a - b| / (1 + |b|) over all elements (shapes must match). */
double max_rel_diff(const vn_tensor *a, const vn_tensor *b);

/* The function being checked: builds an output from the inputs (with
 * autograd on). gradcheck reduces it to a scalar as sum(out * R) with a fixed
 * random R, so every output element is checked with its own weight. */
typedef vn_tensor *(*gc_fn)(vn_tensor **inputs, void *ctx);

/* For every input that requires grad, compares the gradient from
 * vn_backward with the central difference (f(x+eps) - f(x-eps)) / 2eps at
 * every element. Passes when |analytic - numeric| <= tol * (1 + |numeric|).
 * Returns the worst error seen; fails the test (with the input, element and
 * both values) when it is beyond tol. */
double gradcheck(gc_fn f, vn_tensor **inputs, int n, void *ctx, double eps, double tol);

/* Fails the test unless result is NULL with vn_last_status() == want and
 * vn_last_error() containing needle (the shared form of the bad-input
 * checks of a function that returns a pointer). */
void expect_null_error(const void *result, vn_status want, const char *needle);

#endif
