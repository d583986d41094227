/* RMSNorm, the obviously right way: float64, one row at a time.
 *   r = x (+ residual);  out = r / sqrt(mean(r^2) + eps) * weight */
#include "rmsnorm.h"

#include <math.h>

void kl_rmsnorm_reference(const double *x, const double *residual, const double *weight, int64_t num_tokens,
                          int64_t hidden, double eps, double *out, double *residual_out)
{
    for (int64_t t = 0; t < num_tokens; t++) {
        const double *xr = x + t * hidden;
        double sum_sq = 0;
        for (int64_t i = 0; i < hidden; i++) {
            double r = residual ? xr[i] + residual[t * hidden + i] : xr[i];
            if (residual) residual_out[t * hidden + i] = r;
            sum_sq += r * r;
        }
        double inv_rms = 1.0 / sqrt(sum_sq / (double)hidden + eps);
        for (int64_t i = 0; i < hidden; i++) {
            double r = residual ? residual_out[t * hidden + i] : xr[i];
            out[t * hidden + i] = r * inv_rms * weight[i];
        }
    }
}
