/* Device helpers shared by the variants: element conversions, 16-byte vectors, reductions.
 * Only inline device code lives here (no globals), so every variant file stays one file
 * that reads top to bottom with these few named building blocks. */
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <type_traits>

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

/* Element r (a compile-time constant after unrolling) of a 16-byte word holding 16/sizeof(T)
 * elements, as float; and the reverse packing. Working on the packed uint4 keeps 8 bf16 in 4
 * registers, where a struct of 8 bf16 assigned element by element takes 8. */
template <typename T> __device__ __forceinline__ float elem_f32(const uint4 &v, int r)
{
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
    if constexpr (sizeof(T) == 4) {
        return __uint_as_float(w[r]);
    } else {
        const unsigned short bits = (unsigned short)(w[r / 2] >> (16 * (r & 1)));
        if constexpr (std::is_same<T, __half>::value) return __half2float(__ushort_as_half(bits));
        else return __bfloat162float(__ushort_as_bfloat16(bits));
    }
}

template <typename T> __device__ __forceinline__ uint32_t bits_of(float f)
{
    if constexpr (sizeof(T) == 4) return __float_as_uint(f);
    else if constexpr (std::is_same<T, __half>::value) return __half_as_ushort(__float2half_rn(f));
    else return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

template <typename T> __device__ __forceinline__ uint4 pack(const float (&o)[16 / sizeof(T)])
{
    uint32_t w[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        if constexpr (sizeof(T) == 4) w[i] = bits_of<T>(o[i]);
        else w[i] = bits_of<T>(o[2 * i]) | bits_of<T>(o[2 * i + 1]) << 16;
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
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
