#ifndef KL_REFERENCE_RMSNORM_H
#define KL_REFERENCE_RMSNORM_H
#include <stdint.h>
/* x, residual (may be NULL), weight -> out, residual_out (written when residual != NULL).
 * Row-major [num_tokens, hidden]; float64 throughout. */
void kl_rmsnorm_reference(const double *x, const double *residual, const double *weight, int64_t num_tokens,
                          int64_t hidden, double eps, double *out, double *residual_out);
#endif
