/* Deliberately wrong store variants, linked into the tests only: the checker must flag every
 * one. Each is a one-warp-per-token scatter (v1's shape, element-wide) with one realistic bug:
 *   negative_slots_wrap   slot < 0 indexes from the end, Python-style (slot + num_slots): padding
 *                         tokens overwrite the last slots of the cache
 *   v_gets_k              the V cache receives the K rows (a copy-paste of the K line)
 *   last_head_dropped     the head loop stops at num_kv_heads - 1
 *   slot_stride_head_dim  the slot offset uses head_dim as the slot stride, forgetting kv heads */
#include "kernels/common.cuh"
#include "kernels/store/store.h"
#include "lab/core/registry.h"

enum bug { NEGATIVE_SLOTS_WRAP, V_GETS_K, LAST_HEAD_DROPPED, SLOT_STRIDE_HEAD_DIM };

template <typename T, int BUG>
static __global__ void store_mutant(const T *__restrict__ k, const T *__restrict__ v,
                                    const int64_t *__restrict__ slots, T *k_cache, T *v_cache, int64_t num_tokens,
                                    int64_t heads, int64_t head_dim, int64_t num_slots)
{
    const int64_t t = blockIdx.x * 8ll + threadIdx.x / 32, row = heads * head_dim;
    const int lane = threadIdx.x % 32;
    if (t >= num_tokens) return;
    int64_t slot = slots[t];
    if (BUG == NEGATIVE_SLOTS_WRAP && slot < 0) slot += num_slots;
    if (slot < 0 || slot >= num_slots) return;
    const int64_t end = BUG == LAST_HEAD_DROPPED ? (heads - 1) * head_dim : row;
    const int64_t base = BUG == SLOT_STRIDE_HEAD_DIM ? slot * head_dim : slot * row;
    for (int64_t i = lane; i < end; i += 32) {
        k_cache[base + i] = k[t * row + i];
        v_cache[base + i] = BUG == V_GETS_K ? k[t * row + i] : v[t * row + i];
    }
}

template <int BUG>
static cudaError_t launch(const struct kl_store_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_store_check_params(p, "mutant");
    if (rc != cudaSuccess || p->num_tokens == 0) return rc;
    const unsigned blocks = (unsigned)((p->num_tokens + 7) / 8);
    if (kl_dtype_size(p->dtype) == 2)
        store_mutant<uint16_t, BUG><<<blocks, 256, 0, stream>>>(
            (const uint16_t *)p->k, (const uint16_t *)p->v, p->slots, (uint16_t *)p->k_cache, (uint16_t *)p->v_cache,
            p->num_tokens, p->num_kv_heads, p->head_dim, p->num_slots);
    else
        store_mutant<uint32_t, BUG><<<blocks, 256, 0, stream>>>(
            (const uint32_t *)p->k, (const uint32_t *)p->v, p->slots, (uint32_t *)p->k_cache, (uint32_t *)p->v_cache,
            p->num_tokens, p->num_kv_heads, p->head_dim, p->num_slots);
    return cudaGetLastError();
}

KL_VARIANT(store, mutant_negative_slots_wrap, launch<NEGATIVE_SLOTS_WRAP>, .min_cc = 70,
           .summary = "slot -1 wraps to the last slot instead of skipping the token", .mutant = 1);
KL_VARIANT(store, mutant_v_gets_k, launch<V_GETS_K>, .min_cc = 70, .summary = "V cache receives the K rows",
           .mutant = 1);
KL_VARIANT(store, mutant_last_head_dropped, launch<LAST_HEAD_DROPPED>, .min_cc = 70,
           .summary = "the last kv head of every token is never stored", .mutant = 1);
KL_VARIANT(store, mutant_slot_stride_head_dim, launch<SLOT_STRIDE_HEAD_DIM>, .min_cc = 70,
           .summary = "slot stride head_dim instead of num_kv_heads * head_dim", .mutant = 1);
