#ifndef KL_REFERENCE_ALLREDUCE_H
#define KL_REFERENCE_ALLREDUCE_H
#include <stdint.h>
/* out[i] = x[0][i] + x[1][i] + ... + x[world-1][i]: x is [world, n] row-major (row r is rank r's
 * contribution), float64, summed in rank order starting from rank 0's value. */
void kl_allreduce_reference(const double *x, int world, int64_t n, double *out);

/* The fused all-reduce + residual add + RMSNorm a tensor-parallel decoder runs before each norm:
 *   s = x[0] + ... + x[world-1] (as above);  residual_out = s + residual;
 *   out = residual_out / sqrt(mean(residual_out^2) + eps) * weight  (per token)
 * x [world, num_tokens, hidden], residual, out, residual_out [num_tokens, hidden], weight [hidden];
 * float64. Every rank ends with the same out and residual_out. */
void kl_allreduce_add_rmsnorm_reference(const double *x, int world, const double *residual, const double *weight,
                                        int64_t num_tokens, int64_t hidden, double eps, double *out,
                                        double *residual_out);
#endif
