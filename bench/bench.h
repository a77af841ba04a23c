/* bench.h — what the C benchmarks share: a monotonic clock and the exit on
 * an engine error. BENCH_NAME (defined before the include) names the
 * program in messages. */
#ifndef VENOM_BENCH_H
#define VENOM_BENCH_H

#include "venom.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
 * the benchmarks time work, also in process CPU time, which an idle thread
 * spinning between regions (as `venom` lets it, lua/main.c) would inflate.
 * Call first in main. */
static inline void passive_omp(char **argv)
{
    if (!getenv("OMP_WAIT_POLICY")) {
        setenv("OMP_WAIT_POLICY", "passive", 1);
        execv("/proc/self/exe", argv);
    }
}

/* Entries a command-line list may have (parse_list keeps the first ones). */
#define BENCH_MAX_LIST 16

/* A comma-separated list of positive integers into out (or of RxK pairs
 * into pairs, when pairs is not NULL), at most BENCH_MAX_LIST entries;
 * returns their count. A bad entry prints "BENCH_NAME: bad <name> entry"
 * and exits with status 2. */
static inline int parse_list(const char *s, int64_t *out, int64_t (*pairs)[2], const char *name)
{
    int n = 0;
    char *copy = strdup(s), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        long long a, b;
        if (n == BENCH_MAX_LIST) break;
        if (pairs ? sscanf(tok, "%lldx%lld", &a, &b) != 2 || a < 1 || b < 1
                  : sscanf(tok, "%lld", &a) != 1 || a < 1) {
            fprintf(stderr, "%s: bad %s entry '%s'\n", BENCH_NAME, name, tok);
            exit(2);
        }
        if (pairs) pairs[n][0] = a, pairs[n][1] = b;
        else out[n] = a;
        n++;
    }
    free(copy);
    return n;
}

#endif
