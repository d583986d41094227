/* What the rmsnorm module shares with its tests and perf workloads. */
#ifndef KL_RMSNORM_MODULE_H
#define KL_RMSNORM_MODULE_H

#include <stdbool.h>

#include "kernels/rmsnorm/rmsnorm.h"
#include "lab/core/registry.h"
#include "lab/core/tensor.h"

#define KL_RMSNORM_DEFAULT_EPS 1e-6

struct kl_rmsnorm_problem {
    int64_t num_tokens, hidden;
    enum kl_dtype dtype;
    double eps;
    bool has_residual;
    struct kl_tensor x, residual, weight; /* host, in dtype */
};

struct kl_rmsnorm_problem *kl_rmsnorm_problem_random(int64_t num_tokens, int64_t hidden, enum kl_dtype dtype,
                                                     bool residual, double scale, double eps, uint64_t seed);
void kl_rmsnorm_problem_free(struct kl_rmsnorm_problem *p);
/* The device side, for kl_tensor_upload/download/release (lab/core/registry.h) and the
 * generic run: its buffers and outputs (module.c). */
extern const struct kl_tensor_ops kl_rmsnorm_ops;

extern const struct kl_perf_ops kl_rmsnorm_perf;

#ifdef __cplusplus
extern "C" {
#endif
/* Tests only (lab/rmsnorm/mutants_pdl.cu): on stream, a kernel that lets the next one launch at
 * once (PDL), spins, then copies src to dst (16-byte multiples): the late producer of a PDL test. */
cudaError_t kl_test_late_write(void *dst, const void *src, size_t bytes, cudaStream_t stream);
#ifdef __cplusplus
}
#endif

#endif
