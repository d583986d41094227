/* Deliberately wrong store variants, linked into the tests only: the checker must flag every
 * one. Each is a one-warp-per-token scatter (v1's shape, element-wide) with one realistic bug:
 *   negative_slots_wrap   slot < 0 indexes from the end, Python-style (slot + num_slots): padding
 *                         tokens overwrite the last slots of the cache
 *   v_gets_k              the V cache receives the K rows (a copy-paste of the K line)
 *   last_head_dropped     the head loop stops at num_kv_heads - 1
 *   slot_stride_head_dim  the slot offset uses head_dim as the slot stride, forgetting kv heads
 * and of the fused RoPE + e4m3 quantize + store, one thread an element (the arithmetic of
 * v4_rope_quant_store's one-element path) with one bug:
 *   fused_head0_scale     every kv head quantized with head 0's scale (a per-tensor scale read as if
 *                         per head)
 *   fused_no_saturation   the conversion without saturation: past 464 a value becomes NaN
 *   fused_tile_tail_dropped  the last token of an odd count never processed, as a variant carrying
 *                         tokens in tiles of two (v5_tile_inflight) would with its grid rounded down
 * and v6_bulk_ring built with KL_STORE_V6_BUG 1:
 *   v6_last_round_dropped a persistent block's steps rounded down: tokens past the last whole round of
 *                         the grid never stored (only the catalogue's problems past a decode batch reach it) */
#include <cuda_fp8.h>

#include "kernels/common.cuh"
#include "kernels/ptx_sm90.cuh"
#include "kernels/store/fused_pairs.cuh" /* before v6's namespace below, so its code is not compiled into it */
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

enum fused_bug { HEAD0_SCALE, NO_SATURATION, TILE_TAIL_DROPPED };

template <typename T, int BUG>
static __global__ void fused_mutant(const struct kl_store_params p)
{
    const int64_t heads = p.num_qo_heads + 2 * p.num_kv_heads, row = heads * p.head_dim;
    const int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, t = e / row;
    if (t >= (BUG == TILE_TAIL_DROPPED ? p.num_tokens / 2 * 2 : p.num_tokens)) return;
    const int64_t h = e % row / p.head_dim, i = e % p.head_dim, pos = p.positions[t], slot = p.slots[t];
    const bool is_q = h < p.num_qo_heads, is_v = h >= p.num_qo_heads + p.num_kv_heads;
    const int64_t kh = is_v ? h - p.num_qo_heads - p.num_kv_heads : h - p.num_qo_heads, half = p.rotary_dim / 2;
    const T *x = (const T *)p.qkv + t * row + h * p.head_dim;
    float y = kl::to_f32(x[i]);
    if (!is_v && i < p.rotary_dim) {
        const bool first = p.is_neox ? i < half : (i & 1) == 0;
        const int64_t col = p.is_neox ? (first ? i : i - half) : i / 2;
        const int64_t partner = p.is_neox ? (first ? i + half : i - half) : i ^ 1;
        const float c = p.cos_sin_cache[pos * p.rotary_dim + col], s = p.cos_sin_cache[pos * p.rotary_dim + half + col];
        const float xp = kl::to_f32(x[partner]);
        y = fmaf(y, c, first ? -(xp * s) : xp * s);
    }
    if (is_q) {
        ((T *)p.q_out)[(t * p.num_qo_heads + h) * p.head_dim + i] = kl::from_f32<T>(y);
        return;
    }
    if (slot < 0 || slot >= p.num_slots) return;
    const float scale = (is_v ? p.v_scale : p.k_scale)[BUG == HEAD0_SCALE ? 0 : kh];
    uint8_t *cache = (uint8_t *)(is_v ? p.v_cache : p.k_cache);
    cache[(slot * p.num_kv_heads + kh) * p.head_dim + i] = (uint8_t)__nv_cvt_float_to_fp8(
        y * __frcp_rn(scale), BUG == NO_SATURATION ? __NV_NOSAT : __NV_SATFINITE, __NV_E4M3);
}

template <int BUG>
static cudaError_t launch_fused(const struct kl_store_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_store_check_fused_params(p, "mutant");
    if (rc != cudaSuccess || p->num_tokens == 0) return rc;
    const int64_t n = p->num_tokens * (p->num_qo_heads + 2 * p->num_kv_heads) * p->head_dim;
    const unsigned blocks = (unsigned)((n + 255) / 256);
    if (p->dtype == KL_BF16) fused_mutant<__nv_bfloat16, BUG><<<blocks, 256, 0, stream>>>(*p);
    else fused_mutant<__half, BUG><<<blocks, 256, 0, stream>>>(*p);
    return cudaGetLastError();
}

KL_VARIANT(store, mutant_fused_head0_scale, launch_fused<HEAD0_SCALE>, .min_cc = 80,
           .summary = "fused: every kv head quantized with head 0's scale", .mutant = 1);
KL_VARIANT(store, mutant_fused_no_saturation, launch_fused<NO_SATURATION>, .min_cc = 80,
           .summary = "fused: e4m3 conversion without saturation (NaN past 464)", .mutant = 1);
KL_VARIANT(store, mutant_fused_tile_tail_dropped, launch_fused<TILE_TAIL_DROPPED>, .min_cc = 80,
           .summary = "fused: the last token of an odd count is never rotated, quantized or stored", .mutant = 1);

/* v6_bulk_ring with its step count rounded down (KL_STORE_V6_BUG 1), in a namespace of its own and
 * registered under the mutant's name (v6_bulk_ring is registered once, by its own object). */
#pragma push_macro("KL_VARIANT")
#undef KL_VARIANT
#define KL_VARIANT(...) static_assert(true, "registered below under the mutant's name")
#define KL_STORE_V6_BUG 1
namespace v6_last_round_dropped {
#include "kernels/store/v6_bulk_ring.cu"
}
#undef KL_STORE_V6_BUG
#pragma pop_macro("KL_VARIANT")

KL_VARIANT(store, mutant_v6_last_round_dropped, v6_last_round_dropped::launch, .min_cc = 90,
           .summary = "v6_bulk_ring with each block's last round of tokens dropped", .mutant = 1);
