/* All-reduce, the obviously right way: add the ranks' rows in rank order, in float64. Starting
 * from rank 0's value (not from 0.0) keeps IEEE's sign of zero: -0 + -0 is -0. The fused form is
 * that sum followed by the residual RMSNorm of reference/rmsnorm.c, unchanged. */
#include "allreduce.h"

#include <stdlib.h>

#include "rmsnorm.h"

void kl_allreduce_reference(const double *x, int world, int64_t n, double *out)
{
    for (int64_t i = 0; i < n; i++) {
        double acc = x[i];
        for (int r = 1; r < world; r++) acc += x[r * n + i];
        out[i] = acc;
    }
}

void kl_allreduce_add_rmsnorm_reference(const double *x, int world, const double *residual, const double *weight,
                                        int64_t num_tokens, int64_t hidden, double eps, double *out,
                                        double *residual_out)
{
    const int64_t n = num_tokens * hidden;
    double *s = malloc(sizeof(double) * (size_t)(n ? n : 1));
    kl_allreduce_reference(x, world, n, s);
    kl_rmsnorm_reference(s, residual, weight, num_tokens, hidden, eps, out, residual_out);
    free(s);
}
