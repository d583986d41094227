/* One call inside a graph replay, phase by phase (lab/allreduce/timeline.h). */
#include <math.h>
#include <stdlib.h>

#include "lab/allreduce/timeline.h"

const char *const kl_ar_graph_names[KL_AR_GRAPH_PHASES] = {"boundary_ns", "start_ns", "send_ns",  "wait_ns",
                                                           "exit_ns",     "tail_ns",  "period_ns"};

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int kl_ar_graph_phases(const unsigned long long *rows, int calls, double ns[KL_AR_GRAPH_PHASES],
                       double mean[KL_AR_GRAPH_PHASES])
{
    enum { NT = KL_AR_TRACE_STAMPS };
    int period_calls = 0;
    double *d = calls > 1 ? malloc(sizeof *d * (size_t)calls) : NULL;
    for (int q = 0; q < KL_AR_GRAPH_PHASES; q++) {
        ns[q] = NAN;
        if (mean) mean[q] = NAN;
        int n = 0;
        double sum = 0.;
        for (int i = 1; d && i < calls; i++) {
            const unsigned long long *a = rows + (size_t)(i - 1) * NT, *b = rows + (size_t)i * NT;
            const unsigned long long released = b[KL_AR_T_RELEASED];
            const unsigned long long from[KL_AR_GRAPH_PHASES] = {a[KL_AR_T_EXIT],    released,         b[KL_AR_T_ENTRY],
                                                                 b[KL_AR_T_COPIED], b[KL_AR_T_REDUCED], b[KL_AR_T_EXIT],
                                                                 a[KL_AR_T_ENTRY]};
            const unsigned long long to[KL_AR_GRAPH_PHASES] = {released ? released : b[KL_AR_T_ENTRY],
                                                               b[KL_AR_T_ENTRY],
                                                               b[KL_AR_T_COPIED],
                                                               b[KL_AR_T_REDUCED],
                                                               b[KL_AR_T_EXIT],
                                                               b[KL_AR_T_LAST_EXIT],
                                                               b[KL_AR_T_ENTRY]};
            if (from[q] && to[q] && to[q] >= from[q]) sum += d[n++] = (double)(to[q] - from[q]);
        }
        if (n) {
            qsort(d, (size_t)n, sizeof *d, cmp_double);
            ns[q] = d[n / 2];
            if (mean) mean[q] = sum / n;
        }
        if (q == KL_AR_GRAPH_PERIOD) period_calls = n;
    }
    free(d);
    return period_calls;
}
