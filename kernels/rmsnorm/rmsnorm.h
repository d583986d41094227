/* RMSNorm and fused add + RMSNorm: the C ABI every variant implements.
 *
 *   plain:  out[t, i] = x[t, i] / sqrt(mean_j x[t, j]^2 + eps) * weight[i]
 *   fused:  residual_out = x + residual;  out = rmsnorm(residual_out) * weight
 * All tensors share one dtype (fp32, fp16 or bf16); every variant accumulates in float32. */
#ifndef KL_KERNELS_RMSNORM_H
#define KL_KERNELS_RMSNORM_H

#include <cuda_runtime_api.h>
#include <stdbool.h>
#include <stdint.h>

#include "kernels/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

struct kl_rmsnorm_params {
    const void *x;        /* [num_tokens, hidden] */
    const void *residual; /* [num_tokens, hidden], or NULL for plain RMSNorm */
    const void *weight;   /* [hidden] */
    void *out;            /* [num_tokens, hidden] */
    void *residual_out;   /* [num_tokens, hidden]: x + residual; NULL when residual is NULL */
    int64_t num_tokens;
    int64_t hidden;
    float eps;
    enum kl_dtype dtype;  /* KL_F32, KL_F16 or KL_BF16 for every tensor */
};

typedef cudaError_t (*kl_rmsnorm_launch_fn)(const struct kl_rmsnorm_params *p, cudaStream_t stream);

/* Shape and pointer checks every launcher starts with: cudaErrorInvalidValue, with the
 * argument at fault printed to stderr, or cudaSuccess. */
cudaError_t kl_rmsnorm_check_params(const struct kl_rmsnorm_params *p, const char *variant);

/* Whether rows can move as 16-byte vectors: hidden a multiple of 16 bytes and every tensor given
 * 16-byte aligned. Otherwise a variant falls back to element-wide accesses. */
bool kl_rmsnorm_vec16_ok(const struct kl_rmsnorm_params *p);

#ifdef __cplusplus
}
#endif
#endif
