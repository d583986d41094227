/* The story's own kernels (kernels.h says what each computes). */
#include <cuda_bf16.h>
#include <math.h>

#include "kernels/common.cuh"
#include "lab/story/kernels.h"
#include "lab/story/weights.h"

/* SiLU x mul: a thread owns 8 consecutive outputs of one row (one 16-byte vector of gate, one of
 * up, one out) when mlp is a multiple of 8, else one element; rows on blockIdx.y. Pure streaming:
 * 6 bytes per output, the bound is the copy bandwidth. __expf is within 2 ulp of float32, far
 * below the bf16 rounding of the result. */
template <int W>
static __global__ void silu_mul_kernel(const __nv_bfloat16 *__restrict__ gu, __nv_bfloat16 *__restrict__ out,
                                       int64_t mlp)
{
    const int64_t row = blockIdx.y, i = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * W;
    if (i >= mlp) return;
    const __nv_bfloat16 *g = gu + row * 2 * mlp + i, *u = g + mlp;
    __nv_bfloat16 *o = out + row * mlp + i;
    if constexpr (W == 8) {
        const uint4 gv = *reinterpret_cast<const uint4 *>(g), uv = *reinterpret_cast<const uint4 *>(u);
        float r[8];
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const float x = kl::elem_f32<__nv_bfloat16>(gv, k);
            r[k] = x / (1.f + __expf(-x)) * kl::elem_f32<__nv_bfloat16>(uv, k);
        }
        *reinterpret_cast<uint4 *>(o) = kl::pack<__nv_bfloat16>(r);
    } else {
        const float x = __bfloat162float(*g);
        *o = __float2bfloat16_rn(x / (1.f + __expf(-x)) * __bfloat162float(*u));
    }
}

extern "C" cudaError_t kl_story_silu_mul(const void *gu, void *out, int64_t n, int64_t mlp, cudaStream_t stream)
{
    if (n < 0 || mlp < 1 || (n > 0 && (!gu || !out)) || n > 65535) return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;
    const bool vec = mlp % 8 == 0 && (uintptr_t)gu % 16 == 0 && (uintptr_t)out % 16 == 0;
    const int64_t per_row = vec ? mlp / 8 : mlp, threads = 256;
    const dim3 grid((unsigned)((per_row + threads - 1) / threads), (unsigned)n);
    if (vec)
        silu_mul_kernel<8><<<grid, threads, 0, stream>>>(static_cast<const __nv_bfloat16 *>(gu),
                                                         static_cast<__nv_bfloat16 *>(out), mlp);
    else
        silu_mul_kernel<1><<<grid, threads, 0, stream>>>(static_cast<const __nv_bfloat16 *>(gu),
                                                         static_cast<__nv_bfloat16 *>(out), mlp);
    return cudaGetLastError();
}

/* Argmax: (value, index) pairs reduced by `better`, which orders NaN below every number and ties
 * by the lower index, so the result does not depend on how the threads split the row. */
struct vi {
    float v;
    int i;
};

__device__ __forceinline__ bool better(vi a, vi b)
{
    const bool an = isnan(a.v), bn = isnan(b.v);
    if (an != bn) return bn;
    if (an) return a.i < b.i;
    return a.v > b.v || (a.v == b.v && a.i < b.i);
}

__device__ __forceinline__ vi warp_best(vi x)
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        const vi y = {__shfl_xor_sync(0xffffffffu, x.v, off), __shfl_xor_sync(0xffffffffu, x.i, off)};
        if (better(y, x)) x = y;
    }
    return x;
}

/* One block of 1024 threads per row: each thread scans a strided share (coalesced), then the
 * warps reduce with shuffles and warp 0 reduces the 32 warp results. */
static __global__ void __launch_bounds__(1024)
    argmax_kernel(const float *__restrict__ logits, int64_t vocab, int32_t *ids)
{
    __shared__ vi part[32];
    const float *row = logits + blockIdx.x * vocab;
    vi best = {NAN, INT_MAX};
    for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
        const vi c = {row[i], (int)i};
        if (better(c, best)) best = c;
    }
    best = warp_best(best);
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = best;
    __syncthreads(); /* every warp's result is in part[] before warp 0 reads them */
    if (threadIdx.x < 32) {
        best = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : vi{NAN, INT_MAX};
        best = warp_best(best);
        if (threadIdx.x == 0) ids[blockIdx.x] = best.i == INT_MAX ? 0 : best.i;
    }
}

extern "C" cudaError_t kl_story_argmax(const float *logits, int64_t batch, int64_t vocab, int32_t *ids,
                                       cudaStream_t stream)
{
    if (batch < 0 || vocab < 1 || vocab > INT_MAX - 1 || (batch > 0 && (!logits || !ids))) return cudaErrorInvalidValue;
    if (batch == 0) return cudaSuccess;
    argmax_kernel<<<(unsigned)batch, 1024, 0, stream>>>(logits, vocab, ids);
    return cudaGetLastError();
}

static __global__ void fill_kernel(__nv_bfloat16 *p, size_t n, uint64_t seed, uint32_t tensor, float offset,
                                   float half_width)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = __float2bfloat16_rn(kl_story_weight_f32(seed, tensor, i, offset, half_width));
}

extern "C" cudaError_t kl_story_fill_weights(void *p, size_t n, uint64_t seed, uint32_t tensor, float offset,
                                             float half_width, cudaStream_t stream)
{
    if (n == 0) return cudaSuccess;
    const size_t blocks = (n + 255) / 256 < 4096 ? (n + 255) / 256 : 4096;
    fill_kernel<<<(unsigned)blocks, 256, 0, stream>>>(static_cast<__nv_bfloat16 *>(p), n, seed, tensor, offset,
                                                      half_width);
    return cudaGetLastError();
}
