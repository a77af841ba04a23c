/* profile.c — the per-op profiler (venom/profile.h). Per thread: a table of
 * op kinds and their times, filled by two hooks that cost one branch when
 * profiling is off: vn__record (the end of an op's forward) and vn_backward
 * (around each backward rule). */
#include "internal.h"

#include <time.h>

_Thread_local bool vn__profiling;
static _Thread_local vn_profile_entry rows[VN_PROFILE_MAX_OPS];
static _Thread_local int nrows;
static _Thread_local double mark; /* the end of the last timed op */

double vn__profile_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The row of op kind `op`. Names are static strings, usually compared by
 * pointer; strcmp catches one name spelled in two files. */
static vn_profile_entry *row(const char *op)
{
    for (int i = 0; i < nrows; i++)
        if (rows[i].op == op || !strcmp(rows[i].op, op)) return &rows[i];
    if (nrows == VN_PROFILE_MAX_OPS - 1) op = "(other ops)"; /* the last row collects the rest */
    if (nrows == VN_PROFILE_MAX_OPS) return &rows[nrows - 1];
    rows[nrows] = (vn_profile_entry){.op = op};
    return &rows[nrows++];
}

void vn__profile_forward(const char *op)
{
    double now = vn__profile_now();
    vn_profile_entry *r = row(op);
    r->forward_calls++;
    r->forward_s += now - mark;
    mark = now;
}

void vn__profile_backward(const char *op, double start)
{
    double now = vn__profile_now();
    vn_profile_entry *r = row(op);
    r->backward_calls++;
    r->backward_s += now - start;
    mark = now;
}

void vn__profile_mark(void) { mark = vn__profile_now(); }

void vn_profile_start(void)
{
    nrows = 0;
    mark = vn__profile_now();
    vn__profiling = true;
}

void vn_profile_stop(void) { vn__profiling = false; }

int vn_profile_entries(vn_profile_entry *out, int cap)
{
    for (int i = 0; i < nrows && i < cap; i++) out[i] = rows[i];
    return nrows;
}
