/* Deliberately wrong rmsnorm variants, linked into the tests only: the checker must flag
 * every one. Each is v0's structure with one realistic bug:
 *   eps_ignored       rsqrt(mean) with no eps: wrong where eps is comparable to the mean square
 *   last_not_written  the loop bound stops one short: the last element keeps its poison
 *   fp16_accumulate   sums of squares kept in half: loses precision, overflows past 65504
 *   sumsq_skips_last  the last element is missing from the sum of squares
 *   tail_dropped      the sum of squares stops at the last whole 16-byte vector (a vector loop that
 *                     forgets the remainder): 4 of 4100 bf16 elements, every output ~u/8 too large
 *   bf16_accumulate   sums of squares kept in bf16: the small terms vanish against the running sum
 * Each thread's partial sum covers elements i, i + 256, ...: a half-precision one of 64 terms (a
 * 16384-wide row) or 128 (32768) loses enough to fail the bias check (lab/core/compare.c); the CPU
 * stand-ins in test_rmsnorm.c compute the same way and show it on the goldens. */
#include "kernels/common.cuh"
#include "kernels/rmsnorm/rmsnorm.h"
#include "lab/core/registry.h"

enum bug { EPS_IGNORED, LAST_NOT_WRITTEN, FP16_ACCUMULATE, SUMSQ_SKIPS_LAST, TAIL_DROPPED, BF16_ACCUMULATE };

template <typename T, int BUG>
static __global__ void rmsnorm_mutant(const T *__restrict__ x, const T *__restrict__ residual,
                                      const T *__restrict__ weight, T *out, T *residual_out, int64_t hidden, float eps)
{
    const int64_t row = blockIdx.x;
    const int64_t sum_end = BUG == SUMSQ_SKIPS_LAST ? hidden - 1
                            : BUG == TAIL_DROPPED   ? hidden - hidden % (int64_t)(16 / sizeof(T))
                                                    : hidden;
    float sum_sq = 0.f;
    __half sum_half = __float2half(0.f);
    __nv_bfloat16 sum_bf16 = __float2bfloat16(0.f);
    for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
        float r = kl::to_f32(x[row * hidden + i]);
        if (residual) {
            r += kl::to_f32(residual[row * hidden + i]);
            residual_out[row * hidden + i] = kl::from_f32<T>(r);
        }
        if (i < sum_end) {
            if (BUG == FP16_ACCUMULATE) sum_half = __hadd(sum_half, __float2half(r * r));
            else if (BUG == BF16_ACCUMULATE) sum_bf16 = __hadd(sum_bf16, __float2bfloat16(r * r));
            else sum_sq += r * r;
        }
    }
    if (BUG == FP16_ACCUMULATE) sum_sq = __half2float(sum_half);
    if (BUG == BF16_ACCUMULATE) sum_sq = __bfloat162float(sum_bf16);
    const float mean_sq = kl::block_sum(sum_sq) / (float)hidden;
    const float inv_rms = BUG == EPS_IGNORED ? rsqrtf(mean_sq) : rsqrtf(mean_sq + eps);
    const int64_t write_end = BUG == LAST_NOT_WRITTEN ? hidden - 1 : hidden;
    for (int64_t i = threadIdx.x; i < write_end; i += blockDim.x) {
        float r = kl::to_f32(x[row * hidden + i]);
        if (residual) r += kl::to_f32(residual[row * hidden + i]);
        out[row * hidden + i] = kl::from_f32<T>(r * inv_rms * kl::to_f32(weight[i]));
    }
}

template <int BUG>
static cudaError_t launch(const struct kl_rmsnorm_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_rmsnorm_check_params(p, "mutant");
    if (rc != cudaSuccess || p->num_tokens == 0) return rc;
    KL_DISPATCH_FLOAT(p->dtype, T,
                      rmsnorm_mutant<T, BUG><<<(unsigned)p->num_tokens, 256, 0, stream>>>(
                          (const T *)p->x, (const T *)p->residual, (const T *)p->weight, (T *)p->out,
                          (T *)p->residual_out, p->hidden, p->eps));
    return cudaGetLastError();
}

KL_VARIANT(rmsnorm, mutant_eps_ignored, launch<EPS_IGNORED>, .min_cc = 70, .summary = "eps left out", .mutant = 1);
KL_VARIANT(rmsnorm, mutant_last_not_written, launch<LAST_NOT_WRITTEN>, .min_cc = 70,
           .summary = "last element of each row never written", .mutant = 1);
KL_VARIANT(rmsnorm, mutant_fp16_accumulate, launch<FP16_ACCUMULATE>, .min_cc = 70,
           .summary = "sum of squares accumulated in fp16", .mutant = 1);
KL_VARIANT(rmsnorm, mutant_sumsq_skips_last, launch<SUMSQ_SKIPS_LAST>, .min_cc = 70,
           .summary = "last element left out of the sum of squares", .mutant = 1);
KL_VARIANT(rmsnorm, mutant_tail_dropped, launch<TAIL_DROPPED>, .min_cc = 70,
           .summary = "sum of squares stops at the last whole 16-byte vector", .mutant = 1);
KL_VARIANT(rmsnorm, mutant_bf16_accumulate, launch<BF16_ACCUMULATE>, .min_cc = 80,
           .summary = "sum of squares accumulated in bf16", .mutant = 1);
