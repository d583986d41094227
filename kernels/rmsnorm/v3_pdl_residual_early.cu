/* v3_pdl_residual_early: fused add + RMSNorm on a decode batch with the residual loaded before the PDL wait.
 *
 * What changed from v2, for few rows with a residual: v2 loads only the weight before griddepcontrol.wait,
 * then x AND the residual, so twice the plain form's bytes sit on the critical path (the guide's v2_pdl rows
 * show what that costs on decode-64-add against decode-64). The residual stream was written several kernels
 * back (why it is safe to read early: see the kernel), so it is loaded with the weight; x, the previous
 * kernel's output, after the wait: one round trip for x alone. Mapping as v2: a block per row, one 16-byte
 * vector a thread (4096 bf16: 512 threads). Plain RMSNorm, many rows, long rows: v2_pdl's own launcher.
 * Predicted decode-64-add: ~2.2 us on H200, ~2.35 us on H100, as fast as a plain copy of the same bytes.
 * Run alone: build/kernlab bench rmsnorm --variant v3_pdl_residual_early --workload decode-64-add */
#include <stdio.h>

#include "kernels/common.cuh"
#include "kernels/rmsnorm/rmsnorm.h"
#include "kernels/variant.h"

constexpr int kMaxThreads = 1024; /* per row: the most threads, the shortest per-thread chain */
constexpr int kMaxVpt = 2; /* vectors per thread held across the wait: at 4 (bf16) the 64-register cap of
                            * 1024-thread blocks spilled 104 bytes (ptxas, sm_90a) */

template <typename T, int W, int VPT>
static __global__ void __launch_bounds__(kMaxThreads)
    rmsnorm_v3(const T *__restrict__ x, const T *__restrict__ residual, const T *__restrict__ weight, T *out,
               T *residual_out, int64_t hidden, float eps)
{
    using V = kl::vec<T, W>;
    const int64_t row = blockIdx.x;
    const int nvec = (int)(hidden / W);

    /* Before the wait: weight and residual. The residual stream was written by the previous layer's
     * add + RMSNorm, with the O-projection GEMM (or the tensor-parallel all-reduce) between it and
     * us, launched without PDL: that kernel starts only once everything before it has finished, and we
     * start only after it has, so the residual is complete. (An engine whose every kernel in between
     * lets its dependents start early must load the residual after the wait, as v2 does.)
     * Both stay packed (a 16-byte word is 4 registers as loaded, 8 as floats) until after the wait. */
    V wv[VPT], rv[VPT];
#pragma unroll
    for (int i = 0; i < VPT; i++) {
        const int j = threadIdx.x + i * blockDim.x;
        wv[i] = j < nvec ? reinterpret_cast<const V *>(weight)[j] : V{};
        rv[i] = j < nvec ? reinterpret_cast<const V *>(residual + row * hidden)[j] : V{};
    }
    kl::pdl_release();
    kl::pdl_wait(); /* x is the previous kernel's output; out and residual_out may still be read by it */

    const V *xr = reinterpret_cast<const V *>(x + row * hidden);
    float v[VPT][W];
    float sum_sq = 0.f;
#pragma unroll
    for (int i = 0; i < VPT; i++) {
        const int j = threadIdx.x + i * blockDim.x;
        if (j < nvec) {
            const V a = xr[j];
            V s;
#pragma unroll
            for (int k = 0; k < W; k++) {
                v[i][k] = kl::to_f32(a.v[k]) + kl::to_f32(rv[i].v[k]);
                s.v[k] = kl::from_f32<T>(v[i][k]);
                sum_sq += v[i][k] * v[i][k];
            }
            reinterpret_cast<V *>(residual_out + row * hidden)[j] = s;
        }
    }
    const float inv_rms = rsqrtf(kl::block_sum(sum_sq) / (float)hidden + eps);

    V *orow = reinterpret_cast<V *>(out + row * hidden);
#pragma unroll
    for (int i = 0; i < VPT; i++) {
        const int j = threadIdx.x + i * blockDim.x;
        if (j < nvec) {
            V o;
#pragma unroll
            for (int k = 0; k < W; k++) o.v[k] = kl::from_f32<T>(v[i][k] * inv_rms * kl::to_f32(wv[i].v[k]));
            orow[j] = o;
        }
    }
}

template <typename T, int W>
static cudaError_t launch_w(const struct kl_rmsnorm_params *p, int vpt, int threads, bool pdl, cudaStream_t stream)
{
    const dim3 grid((unsigned)p->num_tokens), block((unsigned)threads);
#define KL_V3_VPT(n)                                                                                              \
    case n:                                                                                                       \
        return kl::launch_pdl(rmsnorm_v3<T, W, n>, grid, block, pdl, stream, (const T *)p->x,                  \
                              (const T *)p->residual, (const T *)p->weight, (T *)p->out, (T *)p->residual_out, \
                              p->hidden, p->eps)
    switch (vpt) {
        KL_V3_VPT(1);
        KL_V3_VPT(2);
    }
#undef KL_V3_VPT
    return cudaErrorInvalidValue;
}

static cudaError_t launch(const struct kl_rmsnorm_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_rmsnorm_check_params(p, "v3_pdl_residual_early");
    if (rc != cudaSuccess || p->num_tokens == 0) return rc;
    const kl::device_caps dev = kl::this_device();
    const bool vector = kl_rmsnorm_vec16_ok(p);
    const int64_t nvec = vector ? p->hidden * (int64_t)kl_dtype_size(p->dtype) / 16 : p->hidden;
    int vpt = 1;
    while (vpt <= kMaxVpt && (nvec + vpt - 1) / vpt > kMaxThreads) vpt *= 2;
    if (!p->residual || p->num_tokens >= 2 * dev.sms || vpt > kMaxVpt) {
        /* Nothing new to load early (plain), bandwidth-bound (many rows), or too long to hold: v2. */
        const auto v2 = (kl_rmsnorm_launch_fn)kl_variant_launcher("rmsnorm", "v2_pdl", "v3_pdl_residual_early");
        return v2 ? v2(p, stream) : cudaErrorInvalidValue;
    }
    const int threads = (int)(((nvec + vpt - 1) / vpt + 31) / 32 * 32);
    const bool pdl = dev.cc >= 90;
    KL_DISPATCH_FLOAT(p->dtype, T,
                      rc = vector ? launch_w<T, 16 / sizeof(T)>(p, vpt, threads, pdl, stream)
                                  : launch_w<T, 1>(p, vpt, threads, pdl, stream));
    return rc != cudaSuccess ? rc : cudaGetLastError();
}

KL_VARIANT(rmsnorm, v3_pdl_residual_early, launch, .min_cc = 70,
           .summary = "few rows with a residual: weight and residual loaded before the PDL wait, x after; else v2");
