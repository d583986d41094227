/* Helpers shared by the variants: element conversions, 16-byte vectors, reductions, and the
 * Programmatic Dependent Launch pieces of the decode-size variants. Only inline code lives here
 * (no global variables but this_device()'s cache), so every variant file stays one file that
 * reads top to bottom with these few named building blocks. */
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <type_traits>
#include <utility>

#include "kernels/dtype.h"
#include "kernels/ptx_sm90.cuh"

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

/* W consecutive floats into registers: as float4s where W is a multiple of 4 (p then 16-byte
 * aligned: the caller checks), else one by one; read-only path (a table such as cos/sin). */
template <int W> __device__ __forceinline__ void load_f32(const float *p, float (&out)[W])
{
    if constexpr (W % 4 == 0) {
#pragma unroll
        for (int r = 0; r < W; r += 4) {
            const float4 v = __ldg(reinterpret_cast<const float4 *>(p + r));
            out[r] = v.x, out[r + 1] = v.y, out[r + 2] = v.z, out[r + 3] = v.w;
        }
    } else {
#pragma unroll
        for (int r = 0; r < W; r++) out[r] = __ldg(p + r);
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

/* ---- Programmatic Dependent Launch (PDL, sm_90) ----
 * A kernel launched with launch_pdl(..., pdl = true) may start while the stream's previous kernel
 * still runs. Before pdl_wait() it may read only what no kernel still running can write: weights,
 * and per-step metadata the scheduler copied in before the forward pass (ids, positions, slots).
 * pdl_wait() returns once the previous grid has completed and its writes are visible; every read
 * of its outputs and every store (the previous kernel may still read the buffer we overwrite)
 * comes after it. pdl_release() lets the next kernel begin launching; a block that exits counts
 * as released. Below sm_90 both are no-ops and launchers pass pdl = false: plain stream order. */
using ptx::pdl_release; /* griddepcontrol.launch_dependents (kernels/ptx_sm90.cuh) */
using ptx::pdl_wait;    /* griddepcontrol.wait */

/* kernel<<<grid, block, 0, stream>>>(args...), as a programmatic dependent of the previous kernel
 * on the stream when pdl (only where the device is sm_90 or newer). */
template <typename... KArgs, typename... Args>
inline cudaError_t launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, bool pdl, cudaStream_t stream,
                              Args &&...args)
{
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    /* Positional (grid, block, shared bytes, stream, attributes, count): the fields are not named,
     * so the attention_prefill emulator, which renames gridDim and blockDim, compiles this too. */
    cudaLaunchConfig_t cfg = {grid, block, 0, stream, attr, pdl ? 1u : 0u};
    return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

/* The current device's compute capability (x10) and SM count, asked once per device: the
 * decode launchers run every layer of every step, and these never change. */
struct device_caps {
    int cc, sms;
};
inline device_caps this_device()
{
    static device_caps seen[16]; /* by device ordinal; a benign race: every writer stores the same */
    int dev = 0;
    cudaGetDevice(&dev);
    if (dev >= 0 && dev < 16 && seen[dev].cc) return seen[dev];
    int major = 0, sms = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    const device_caps c = {major * 10, sms};
    if (dev >= 0 && dev < 16) seen[dev] = c;
    return c;
}

/* n threads' worth of work per token, cut into blocks of at most cap threads (a multiple of 32)
 * of near-equal size: 320 becomes 2 x 160, not 256 + 64. */
inline void split_even(int64_t n, int cap, unsigned *blocks, unsigned *threads)
{
    const int64_t b = (n + cap - 1) / cap, t = (n + b - 1) / b;
    *blocks = (unsigned)b;
    *threads = (unsigned)((t + 31) / 32 * 32);
}

} // namespace kl

/* Calls body with U bound to an unsigned type of `bytes` bytes (16: uint4, 8: uint2, 4: uint32_t,
 * else uint16_t): the access unit of a data-movement kernel, which only moves bytes. */
#define KL_DISPATCH_UNIT(bytes, U, ...)                               \
    switch (bytes) {                                                  \
    case 16: { using U = uint4; __VA_ARGS__; } break;                 \
    case 8: { using U = uint2; __VA_ARGS__; } break;                  \
    case 4: { using U = uint32_t; __VA_ARGS__; } break;               \
    default: { using U = uint16_t; __VA_ARGS__; } break;              \
    }

/* Calls body with T bound to the storage type of a kl_dtype (fp32, fp16, bf16). */
#define KL_DISPATCH_FLOAT(dtype, T, ...)                              \
    switch (dtype) {                                                  \
    case KL_F32: { using T = float; __VA_ARGS__; } break;             \
    case KL_F16: { using T = __half; __VA_ARGS__; } break;            \
    case KL_BF16: { using T = __nv_bfloat16; __VA_ARGS__; } break;    \
    default: return cudaErrorInvalidValue;                            \
    }
