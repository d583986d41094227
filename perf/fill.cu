/* Random tensor contents made on the device: the big perf workloads (gigabytes of KV cache)
 * would spend seconds drawing them on the host and copying them over. Values are a hash of
 * (seed, index), uniform in [-sqrt(3), sqrt(3)) * scale (unit variance at scale 1), rounded
 * to the dtype: never zeros, which run faster than real data. KL_FP8_E4M3: the codes of those
 * values (saturating at 448), one byte each. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include "kernels/common.cuh"
#include "perf/bench.h"

/* Element i's value: a hash of (seed, i), uniform in [-sqrt(3), sqrt(3)) * scale. */
static __device__ float hash_value(size_t i, uint64_t seed, float scale)
{
    uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    h ^= h >> 31, h *= 0xBF58476D1CE4E5B9ull, h ^= h >> 29, h *= 0x94D049BB133111EBull, h ^= h >> 32;
    const float u = (float)(h & 0xffffff) * (1.f / 16777216.f); /* [0, 1) */
    return (2.f * u - 1.f) * 1.7320508f * scale;
}

template <typename T>
static __global__ void fill_hash(T *p, size_t n, uint64_t seed, float scale)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = kl::from_f32<T>(hash_value(i, seed, scale));
}

/* fill_hash's values as e4m3 codes (round to nearest even, saturated at 448). */
static __global__ void fill_hash_e4m3(unsigned char *p, size_t n, uint64_t seed, float scale)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = __nv_cvt_float_to_fp8(hash_value(i, seed, scale), __NV_SATFINITE, __NV_E4M3);
}

extern "C" int kl_dev_fill_random(void *p, enum kl_dtype dtype, size_t n, uint64_t seed, float scale)
{
    if (dtype == KL_FP8_E4M3) {
        fill_hash_e4m3<<<1024, 256>>>(static_cast<unsigned char *>(p), n, seed, scale);
        return (int)cudaGetLastError();
    }
    KL_DISPATCH_FLOAT(dtype, T, fill_hash<T><<<1024, 256>>>(static_cast<T *>(p), n, seed, scale));
    return (int)cudaGetLastError();
}
