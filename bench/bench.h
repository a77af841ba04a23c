/* bench.h — what the C benchmarks share: a monotonic clock and the exit on
 * an engine error. BENCH_NAME (defined before the include) names the
 * program in messages. */
#ifndef VENOM_BENCH_H
#define VENOM_BENCH_H

#include "venom.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* Seconds on the monotonic clock. */
static inline double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Prints "BENCH_NAME: what: <engine error>" and exits with status 1. */
static inline void die(const char *what)
{
    fprintf(stderr, "%s: %s: %s\n", BENCH_NAME, what, vn_last_error());
    exit(1);
}

/* Runs the program again with OMP_WAIT_POLICY=passive unless it is set:
 * spinning OpenMP threads starve OpenBLAS's. Call first in main. */
static inline void passive_omp(char **argv)
{
    if (!getenv("OMP_WAIT_POLICY")) {
        setenv("OMP_WAIT_POLICY", "passive", 1);
        execv("/proc/self/exe", argv);
    }
}

#endif
