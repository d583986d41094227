/* v1_vec16: 16-byte loads, the row held in registers, one pass over global memory.
 *
 * What changed from v0: each thread loads VPT vectors of 16 bytes (8 bf16) with all loads
 * issued before the first use, keeps them in registers through the reduction, then scales and
 * stores them. Global memory is read once and written once: the byte model's minimum.
 * The reduction is warp shuffles plus one shared-memory step (2 barriers instead of 8).
 * Work mapping: one block per row; at most 256 threads, VPT = 1..16 vectors each, chosen so
 * that VPT * threads * 8 covers the row (4096 bf16: 256 threads x 2 vectors).
 * Rows whose length is not a multiple of 16 bytes, or misaligned pointers, fall back to
 * W = 1 (scalar elements) through the same template.
 * Bound: DRAM bandwidth. Run alone: build/kernlab bench rmsnorm --variant v1_vec16 */
#include <stdio.h>

#include "kernels/common.cuh"
#include "kernels/rmsnorm/rmsnorm.h"
#include "kernels/variant.h"

template <typename T, int W, int VPT>
static __global__ void __launch_bounds__(1024) rmsnorm_v1(const T *__restrict__ x, const T *__restrict__ residual,
                                                   const T *__restrict__ weight, T *out, T *residual_out,
                                                   int64_t hidden, float eps)
{
    using V = kl::vec<T, W>;
    const int64_t row = blockIdx.x;
    const int nvec = (int)(hidden / W);
    const V *xr = reinterpret_cast<const V *>(x + row * hidden);
    const V *rr = reinterpret_cast<const V *>(residual + row * hidden);

    /* Vector i of this thread is element block threadIdx.x + i * blockDim.x of the row:
     * consecutive threads take consecutive 16-byte vectors, so each warp load is 512
     * contiguous bytes. The loop is unrolled, so v[][] stays in registers. */
    float v[VPT][W];
    float sum_sq = 0.f;
#pragma unroll
    for (int i = 0; i < VPT; i++) {
        const int j = threadIdx.x + i * blockDim.x;
        if (j < nvec) {
            V a = xr[j];
            if (residual) {
                V b = rr[j], s;
#pragma unroll
                for (int k = 0; k < W; k++) {
                    v[i][k] = kl::to_f32(a.v[k]) + kl::to_f32(b.v[k]);
                    s.v[k] = kl::from_f32<T>(v[i][k]);
                }
                reinterpret_cast<V *>(residual_out + row * hidden)[j] = s;
            } else {
#pragma unroll
                for (int k = 0; k < W; k++) v[i][k] = kl::to_f32(a.v[k]);
            }
#pragma unroll
            for (int k = 0; k < W; k++) sum_sq += v[i][k] * v[i][k];
        }
    }
    const float inv_rms = rsqrtf(kl::block_sum(sum_sq) / (float)hidden + eps);

    const V *wr = reinterpret_cast<const V *>(weight);
    V *orow = reinterpret_cast<V *>(out + row * hidden);
#pragma unroll
    for (int i = 0; i < VPT; i++) {
        const int j = threadIdx.x + i * blockDim.x;
        if (j < nvec) {
            V w = wr[j], o;
#pragma unroll
            for (int k = 0; k < W; k++) o.v[k] = kl::from_f32<T>(v[i][k] * inv_rms * kl::to_f32(w.v[k]));
            orow[j] = o;
        }
    }
}

/* Smallest vectors-per-thread that covers the row with at most 256 threads (1024 for rows too
 * long for that); threads rounded up to whole warps for block_sum. */
template <typename T, int W>
static cudaError_t launch_w(const struct kl_rmsnorm_params *p, cudaStream_t stream)
{
    const int64_t nvec = p->hidden / W;
    int vpt = 1;
    while (vpt < 16 && (nvec + vpt - 1) / vpt > 256) vpt *= 2;
    const int64_t threads64 = ((nvec + vpt - 1) / vpt + 31) / 32 * 32;
    if (threads64 > 1024) {
        fprintf(stderr, "rmsnorm v1_vec16: hidden=%lld is longer than 1024 threads x 16 vectors\n",
                (long long)p->hidden);
        return cudaErrorInvalidValue;
    }
    const dim3 grid((unsigned)p->num_tokens), block((unsigned)threads64);
    const T *x = (const T *)p->x, *res = (const T *)p->residual, *w = (const T *)p->weight;
    T *out = (T *)p->out, *res_out = (T *)p->residual_out;
    switch (vpt) {
    case 1: rmsnorm_v1<T, W, 1><<<grid, block, 0, stream>>>(x, res, w, out, res_out, p->hidden, p->eps); break;
    case 2: rmsnorm_v1<T, W, 2><<<grid, block, 0, stream>>>(x, res, w, out, res_out, p->hidden, p->eps); break;
    case 4: rmsnorm_v1<T, W, 4><<<grid, block, 0, stream>>>(x, res, w, out, res_out, p->hidden, p->eps); break;
    case 8: rmsnorm_v1<T, W, 8><<<grid, block, 0, stream>>>(x, res, w, out, res_out, p->hidden, p->eps); break;
    default: rmsnorm_v1<T, W, 16><<<grid, block, 0, stream>>>(x, res, w, out, res_out, p->hidden, p->eps);
    }
    return cudaGetLastError();
}

static bool aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

static cudaError_t launch(const struct kl_rmsnorm_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_rmsnorm_check_params(p, "v1_vec16");
    if (rc != cudaSuccess || p->num_tokens == 0) return rc;
    const int width = 16 / (int)kl_dtype_size(p->dtype); /* elements per 16 bytes */
    const bool vector = p->hidden % width == 0 && aligned16(p->x) && aligned16(p->weight) && aligned16(p->out) &&
                        (!p->residual || (aligned16(p->residual) && aligned16(p->residual_out)));
    KL_DISPATCH_FLOAT(p->dtype, T,
                      return vector ? launch_w<T, 16 / sizeof(T)>(p, stream) : launch_w<T, 1>(p, stream));
}

KL_VARIANT(rmsnorm, v1_vec16, launch, .min_cc = 70,
           .summary = "16-byte loads, row in registers, one pass, warp-shuffle reduction");
