/* Programmatic Dependent Launch, tested: a producer that writes a consumer's input late, and a
 * consumer that reads its input before griddepcontrol.wait, which must be caught.
 *
 * kl_test_late_write is the kernel before the variant on the stream, as the previous layer's
 * kernel is in serving: it lets its dependents launch at once (griddepcontrol.launch_dependents,
 * as a PDL producer does), then spins for a while, then writes the input. A variant launched with
 * programmatic stream serialization starts during the spin; one that reads x before its
 * griddepcontrol.wait reads what was there before (the test poisons it with NaN) and fails. A
 * variant that waits, or does not use PDL, sees the input whatever the spin's length: no verdict
 * of a correct variant depends on time.
 *
 * mutant_pdl_reads_before_wait is v2_pdl's few-rows form with x loaded above the wait (the weight
 * load's place), a mistake the goldens and the catalogue cannot see: nothing runs before it there. */
#include "kernels/common.cuh"
#include "kernels/ptx_sys_scope.cuh"
#include "kernels/rmsnorm/rmsnorm.h"
#include "lab/core/registry.h"
#include "lab/rmsnorm/rmsnorm_module.h"

static __global__ void late_write(uint4 *dst, const uint4 *src, size_t words, unsigned long long spin_ns)
{
    kl::pdl_release();
    const unsigned long long start = kl::ptx::globaltimer();
    while (kl::ptx::globaltimer() - start < spin_ns) {
    }
    for (size_t i = threadIdx.x; i < words; i += blockDim.x) dst[i] = src[i];
}

extern "C" cudaError_t kl_test_late_write(void *dst, const void *src, size_t bytes, cudaStream_t stream)
{
    if (bytes % 16 || ((uintptr_t)dst | (uintptr_t)src) % 16) return cudaErrorInvalidValue;
    /* One block, so the consumer's blocks find free SMs during the spin. 50 ms: a dependent grid
     * launches within microseconds of the trigger; the margin is for a busy driver. */
    late_write<<<1, 256, 0, stream>>>((uint4 *)dst, (const uint4 *)src, bytes / 16, 50ull * 1000 * 1000);
    return cudaGetLastError();
}

template <typename T>
static __global__ void __launch_bounds__(1024)
    reads_before_wait(const T *__restrict__ x, const T *__restrict__ residual, const T *__restrict__ weight, T *out,
                      T *residual_out, int64_t hidden, float eps)
{
    constexpr int kMax = 32; /* elements a thread holds: hidden <= 32 x 1024 */
    const int64_t row = blockIdx.x;
    float v[kMax];
#pragma unroll
    for (int k = 0; k < kMax; k++) {
        const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
        v[k] = i < hidden ? kl::to_f32(x[row * hidden + i]) : 0.f; /* THE BUG: x comes from the previous kernel */
    }
    kl::pdl_release();
    kl::pdl_wait();
    float sum_sq = 0.f;
#pragma unroll
    for (int k = 0; k < kMax; k++) {
        const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
        if (i >= hidden) continue;
        if (residual) {
            v[k] += kl::to_f32(residual[row * hidden + i]);
            residual_out[row * hidden + i] = kl::from_f32<T>(v[k]);
        }
        sum_sq += v[k] * v[k];
    }
    const float inv_rms = rsqrtf(kl::block_sum(sum_sq) / (float)hidden + eps);
#pragma unroll
    for (int k = 0; k < kMax; k++) {
        const int64_t i = threadIdx.x + (int64_t)k * blockDim.x;
        if (i < hidden) out[row * hidden + i] = kl::from_f32<T>(v[k] * inv_rms * kl::to_f32(weight[i]));
    }
}

static cudaError_t launch_reads_before_wait(const struct kl_rmsnorm_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_rmsnorm_check_params(p, "mutant_pdl_reads_before_wait");
    if (rc != cudaSuccess || p->num_tokens == 0) return rc;
    if (p->hidden > 32 * 1024) return cudaErrorInvalidValue;
    const bool pdl = kl::this_device().cc >= 90;
    KL_DISPATCH_FLOAT(p->dtype, T,
                      rc = kl::launch_pdl(reads_before_wait<T>, dim3((unsigned)p->num_tokens), dim3(1024), pdl, stream,
                                          (const T *)p->x, (const T *)p->residual, (const T *)p->weight, (T *)p->out,
                                          (T *)p->residual_out, p->hidden, p->eps));
    return rc != cudaSuccess ? rc : cudaGetLastError();
}

/* sm_90: below it there is no PDL, the mistake is harmless and nothing could catch it. */
KL_VARIANT(rmsnorm, mutant_pdl_reads_before_wait, launch_reads_before_wait, .min_cc = 90,
           .summary = "x loaded before griddepcontrol.wait", .mutant = 1);
