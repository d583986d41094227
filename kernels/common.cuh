/* Device helpers shared by the variants: element conversions, 16-byte vectors, reductions.
 * Only inline device code lives here (no globals), so every variant file stays one file
 * that reads top to bottom with these few named building blocks. */
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "lab/core/dtype.h"

namespace kl {

/* float <-> storage type, rounding to nearest even like the host's kl_f32_to_bf16. */
template <typename T> __device__ __forceinline__ float to_f32(T v);
template <> __device__ __forceinline__ float to_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ float to_f32<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

/* W elements of T moved as one access: 16 bytes when W * sizeof(T) == 16 (LDG.E.128). */
template <typename T, int W> struct alignas(sizeof(T) * W) vec {
    T v[W];
};

/* Sum over the 32 lanes of a warp; every lane gets the total (butterfly). */
__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

/* Sum over the block; every thread gets the total. blockDim.x must be a multiple of 32.
 * Two barriers: one so every warp's partial is in shared memory before warp 0 reads them,
 * one so no warp overwrites `partial` in a later call before warp 0 has read it. */
__device__ __forceinline__ float block_sum(float v)
{
    __shared__ float partial[32];
    __shared__ float total;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_sum(v);
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < (int)(blockDim.x / 32) ? partial[lane] : 0.f;
        v = warp_sum(v);
        if (lane == 0) total = v;
    }
    __syncthreads();
    return total;
}

} // namespace kl

/* Calls body with T bound to the storage type of a kl_dtype (fp32, fp16, bf16). */
#define KL_DISPATCH_FLOAT(dtype, T, ...)                              \
    switch (dtype) {                                                  \
    case KL_F32: { using T = float; __VA_ARGS__; } break;             \
    case KL_F16: { using T = __half; __VA_ARGS__; } break;            \
    case KL_BF16: { using T = __nv_bfloat16; __VA_ARGS__; } break;    \
    default: return cudaErrorInvalidValue;                            \
    }
