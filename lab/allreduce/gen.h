/* The input generator the multi-call tests and the benchmark share between host and device:
 * element i of rank r's input in call c, from a hash, the same bits in C on the host and in a
 * kernel (lab/allreduce/tools.cu). The device writes fresh inputs before every call without the
 * host (inside CUDA graphs too); the host recomputes any element to check the result.
 * Values are multiples of 2^-13 in [-4, 4): exact in float32, then rounded to the dtype (to
 * nearest even on both sides: kl_round_to on the host, __float2bfloat16_rn / __float2half_rn on
 * the device). */
#ifndef KL_ALLREDUCE_GEN_H
#define KL_ALLREDUCE_GEN_H

#include <stdint.h>

#ifdef __CUDACC__
#define KL_AR_HD __host__ __device__ __forceinline__
#else
#define KL_AR_HD static inline
#endif

KL_AR_HD float kl_ar_gen(uint64_t seed, uint32_t call, uint32_t rank, uint64_t i)
{
    uint64_t h = seed ^ (0x9e3779b97f4a7c15ull * ((uint64_t)call + 1)) ^ ((uint64_t)(rank + 1) << 40) ^
                 (i * 0xd1b54a32d192ed03ull);
    h ^= h >> 31, h *= 0xbf58476d1ce4e5b9ull; /* splitmix64's finaliser */
    h ^= h >> 27, h *= 0x94d049bb133111ebull;
    h ^= h >> 33;
    return (float)((int32_t)(h & 0xffff) - 32768) * 0x1p-13f;
}

#endif
