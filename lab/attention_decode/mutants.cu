/* Deliberately wrong attention_decode variants, linked into the tests only: the checker must
 * flag every one. Each is a one-pass online softmax, one block per (request, qo head), thread i
 * owning output dims i and i + 128, with one realistic bug:
 *   no_max_subtraction    p = exp(s) instead of exp(s - m): overflows to Inf/NaN on large logits
 *   last_partial_page_dropped  kv_len counts whole pages only: a partly filled last page is skipped
 *   wrong_kv_head         qo head h reads kv head h % kv_heads (interleaved) instead of h / group
 *   pv_accumulated_in_dtype  the P.V accumulator is rounded to bf16/fp16 after every key
 *   lse_in_log2           lse = log2(sum exp(s)), FlashInfer's convention, where ours is ln
 *   o_in_dtype_every_16   the accumulator rounded to bf16/fp16 every 16 keys only (the weaker form of
 *                         pv_accumulated_in_dtype: what a tile-wise kernel storing O in bf16 does)
 *   last_key_dropped      keys stop at kv_len - 1
 *   no_rescale            the accumulator is not rescaled when the running max grows (l is)
 *   kv_head_zero          every qo head reads kv head 0
 *   no_sm_scale           the logits are q.k, sm_scale never applied
 *   tail_rows_unmasked    keys padded to a multiple of 16 with copies of the last key, whose scores are
 *                         not masked: what v5_bulk_ring computes if it drops the mask on the rows past a
 *                         chunk's end (its copies repeat the last token so every tile has one byte count)
 * lab/core/compare.c's attention rationale claims to catch each class; their float64 twins
 * (lab/attention_prefill/mutants_reference.c) show on the CPU which goldens catch them.
 * These read one query token per request and skip problems with several (qo_indptr). One more
 * is v4_tensor_cores itself, recompiled with its draft tokens' causal limit one key late:
 *   v4_draft_sees_its_successor  query i of q_len sees kv_len - q_len + 2 + i keys (tensor-core
 *                         path, the mask applied on the score tile); one token per request unchanged
 * and v28_draft_tile_gatherers the same way (its consumers' per-column limits, on sm_90):
 *   v28_draft_sees_its_successor
 * and v6_fp8_tensor_cores (FP8 caches only) recompiled with one scale wrong:
 *   v6_no_k_scale         the score scale is sm_scale alone: the logits off by 1 / k_scale
 *   v6_head0_k_scale      kv head 0's k_scale for every kv head (a factor of ten on the goldens)
 *   v6_no_v_scale         the accumulators leave without v_scale: out off by 1 / v_scale
 * then v8_tma_pages recompiled with its ldmatrix addresses unswizzled:
 *   v8_no_swizzle         the consumers read the tiles as if the TMA had not swizzled them
 * and v7_fp8_f16_mma recompiled with a bf16 q's per-head power of two left in the scores:
 *   v7_q_scale_kept       the logits 2^14 .. 2^15 / max|q| times too large (bf16 q only)
 * and v9_fp8_tma_pages recompiled with its code reads unswizzled:
 *   v9_no_swizzle         the consumers read the codes as if the TMA had not swizzled them */
#include <cudaTypedefs.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <type_traits>

#include "kernels/attention_decode/bf16_ring_tile.cuh" /* these three outside the namespaces v8 and v9 */
#include "kernels/attention_decode/decode.cuh"
#include "kernels/attention_decode/fp8_ring_tile.cuh"  /* are compiled into */
#include "kernels/attention_decode/page_ring.cuh"
#include "kernels/ptx_sm80.cuh"
#include "kernels/ptx_sm90.cuh"
#include "kernels/tma_map.cuh"
#include "kernels/variant.h"
#include "lab/core/registry.h"

enum bug {
    NO_MAX,
    PARTIAL_PAGE_DROPPED,
    WRONG_KV_HEAD,
    ACC_IN_DTYPE,
    LSE_LOG2,
    ACC_IN_DTYPE_EVERY_16,
    LAST_KEY_DROPPED,
    NO_RESCALE,
    KV_HEAD_ZERO,
    NO_SM_SCALE,
    TAIL_UNMASKED
};

template <typename T, int BUG>
static __global__ void decode_mutant(const kl_attention_decode_params p)
{
    const int b = blockIdx.x, h = blockIdx.y, group = (int)(p.num_qo_heads / p.num_kv_heads), d = (int)p.head_dim;
    const int g = BUG == WRONG_KV_HEAD ? h % (int)p.num_kv_heads : BUG == KV_HEAD_ZERO ? 0 : h / group;
    int n = kl::decode::kv_len(p, b);
    if (BUG == PARTIAL_PAGE_DROPPED) n -= n % (int)p.page_size;
    if (BUG == LAST_KEY_DROPPED) n = max(0, n - 1);
    if (n == 0) return kl::decode::write_empty<T>(p, b, h, threadIdx.x, blockDim.x);
    const T *q = static_cast<const T *>(p.q) + ((int64_t)b * p.num_qo_heads + h) * d;
    float m = BUG == NO_MAX ? 0.f : -INFINITY, l = 0, acc[2] = {0, 0};
    const int keys = BUG == TAIL_UNMASKED ? (n + 15) / 16 * 16 : n;
    for (int t = 0; t < keys; t++) {
        const int64_t at = kl::decode::kv_offset(p, b, min(t, n - 1), g);
        const T *k = static_cast<const T *>(p.k_cache) + at, *v = static_cast<const T *>(p.v_cache) + at;
        float part = 0;
        for (int i = threadIdx.x; i < d; i += blockDim.x) part += kl::to_f32(q[i]) * kl::to_f32(k[i]);
        const float s = (BUG == NO_SM_SCALE ? 1.f : p.sm_scale) * kl::block_sum(part);
        const float m_new = BUG == NO_MAX ? 0.f : fmaxf(m, s), alpha = expf(m - m_new), prob = expf(s - m_new);
        l = l * alpha + prob;
        for (int j = 0; j < 2; j++) {
            const int i = threadIdx.x + j * blockDim.x;
            if (i < d) acc[j] = (BUG == NO_RESCALE ? acc[j] : acc[j] * alpha) + prob * kl::to_f32(v[i]);
            if (BUG == ACC_IN_DTYPE || (BUG == ACC_IN_DTYPE_EVERY_16 && t % 16 == 15))
                acc[j] = kl::to_f32(kl::from_f32<T>(acc[j]));
        }
        m = m_new;
    }
    T *out = static_cast<T *>(p.out) + ((int64_t)b * p.num_qo_heads + h) * d;
    for (int j = 0; j < 2; j++) {
        const int i = threadIdx.x + j * blockDim.x;
        if (i < d) out[i] = kl::from_f32<T>(acc[j] / l);
    }
    if (threadIdx.x == 0)
        p.lse[(int64_t)b * p.num_qo_heads + h] = BUG == LSE_LOG2 ? (m + logf(l)) * 1.44269504089f : m + logf(l);
}

template <int BUG>
static cudaError_t launch(const struct kl_attention_decode_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_attention_decode_check_params(p, "mutant");
    if (rc != cudaSuccess || p->batch == 0) return rc;
    const dim3 grid((unsigned)p->batch, (unsigned)p->num_qo_heads);
    KL_DISPATCH_FLOAT(p->dtype, T, decode_mutant<T, BUG><<<grid, 128, 0, stream>>>(*p));
    return cudaGetLastError();
}

KL_VARIANT(attention_decode, mutant_no_max_subtraction, launch<NO_MAX>, .min_cc = 70,
           .summary = "p = exp(s) without subtracting the max", .mutant = 1);
KL_VARIANT(attention_decode, mutant_last_partial_page_dropped, launch<PARTIAL_PAGE_DROPPED>, .min_cc = 70,
           .summary = "a partly filled last page is skipped", .mutant = 1);
KL_VARIANT(attention_decode, mutant_wrong_kv_head, launch<WRONG_KV_HEAD>, .min_cc = 70,
           .summary = "qo head h reads kv head h % kv_heads", .mutant = 1);
KL_VARIANT(attention_decode, mutant_pv_accumulated_in_dtype, launch<ACC_IN_DTYPE>, .min_cc = 70,
           .summary = "P.V accumulated in the input dtype", .mutant = 1);
KL_VARIANT(attention_decode, mutant_lse_in_log2, launch<LSE_LOG2>, .min_cc = 70, .summary = "lse in base 2",
           .mutant = 1);
KL_VARIANT(attention_decode, mutant_o_in_dtype_every_16, launch<ACC_IN_DTYPE_EVERY_16>, .min_cc = 70,
           .summary = "P.V accumulator rounded to the input dtype every 16 keys", .mutant = 1);
KL_VARIANT(attention_decode, mutant_last_key_dropped, launch<LAST_KEY_DROPPED>, .min_cc = 70,
           .summary = "the request's last key never attended", .mutant = 1);
KL_VARIANT(attention_decode, mutant_no_rescale, launch<NO_RESCALE>, .min_cc = 70,
           .summary = "accumulator not rescaled when the max grows", .mutant = 1);
KL_VARIANT(attention_decode, mutant_kv_head_zero, launch<KV_HEAD_ZERO>, .min_cc = 70,
           .summary = "every qo head reads kv head 0", .mutant = 1);
KL_VARIANT(attention_decode, mutant_no_sm_scale, launch<NO_SM_SCALE>, .min_cc = 70,
           .summary = "sm_scale never applied", .mutant = 1);
KL_VARIANT(attention_decode, mutant_tail_rows_unmasked, launch<TAIL_UNMASKED>, .min_cc = 70,
           .summary = "keys padded to 16 with unmasked copies of the last key", .mutant = 1);

/* v4 in a namespace of its own (its headers are already in, so only its code lands there), with
 * its registration left out: v4_tensor_cores is registered once, by its own object. */
#pragma push_macro("KL_VARIANT")
#undef KL_VARIANT
#define KL_VARIANT(...) static_assert(true, "registered below under the mutant's name")
#define KL_DECODE_V4_CAUSAL_SHIFT 1
namespace v4_shifted {
#include "kernels/attention_decode/v4_tensor_cores.cu"
}
#pragma pop_macro("KL_VARIANT")

KL_VARIANT(attention_decode, mutant_v4_draft_sees_its_successor, v4_shifted::launch, .min_cc = 80,
           .summary = "v4_tensor_cores with each draft token's causal limit one key late", .mutant = 1);

/* v28 the same way (KL_DECODE_V28_CAUSAL_SHIFT 1). */
#pragma push_macro("KL_VARIANT")
#undef KL_VARIANT
#define KL_VARIANT(...) static_assert(true, "registered below under the mutant's name")
#define KL_DECODE_V28_CAUSAL_SHIFT 1
namespace v28_shifted {
#include "kernels/attention_decode/v28_draft_tile_gatherers.cu"
}
#pragma pop_macro("KL_VARIANT")

KL_VARIANT(attention_decode, mutant_v28_draft_sees_its_successor, v28_shifted::launch, .min_cc = 90,
           .summary = "v28_draft_tile_gatherers with each draft token's causal limit one key late", .mutant = 1);

/* v6 three times, each with one scale wrong (KL_DECODE_V6_BUG), and v8 with its reads unswizzled
 * (KL_DECODE_V8_BUG 1), registered under the mutants' names. */
#pragma push_macro("KL_VARIANT")
#undef KL_VARIANT
#define KL_VARIANT(...) static_assert(true, "registered below under the mutant's name")
#define KL_DECODE_V6_BUG 1
namespace v6_no_k_scale {
#include "kernels/attention_decode/v6_fp8_tensor_cores.cu"
}
#undef KL_DECODE_V6_BUG
#define KL_DECODE_V6_BUG 2
namespace v6_head0_k_scale {
#include "kernels/attention_decode/v6_fp8_tensor_cores.cu"
}
#undef KL_DECODE_V6_BUG
#define KL_DECODE_V6_BUG 3
namespace v6_no_v_scale {
#include "kernels/attention_decode/v6_fp8_tensor_cores.cu"
}
#undef KL_DECODE_V6_BUG
#define KL_DECODE_V8_BUG 1
namespace v8_no_swizzle {
#include "kernels/attention_decode/v8_tma_pages.cu"
}
#undef KL_DECODE_V8_BUG
#pragma pop_macro("KL_VARIANT")

KL_VARIANT(attention_decode, mutant_v6_no_k_scale, v6_no_k_scale::launch, .min_cc = 89,
           .summary = "v6_fp8_tensor_cores with k_scale left out of the score scale", .mutant = 1);
KL_VARIANT(attention_decode, mutant_v6_head0_k_scale, v6_head0_k_scale::launch, .min_cc = 89,
           .summary = "v6_fp8_tensor_cores with kv head 0's k_scale for every head", .mutant = 1);
KL_VARIANT(attention_decode, mutant_v6_no_v_scale, v6_no_v_scale::launch, .min_cc = 89,
           .summary = "v6_fp8_tensor_cores with v_scale left out", .mutant = 1);
KL_VARIANT(attention_decode, mutant_v8_no_swizzle, v8_no_swizzle::launch, .min_cc = 90,
           .summary = "v8_tma_pages with its ldmatrix addresses unswizzled", .mutant = 1);

/* v7 with q's power of two kept in the scores (KL_DECODE_V7_BUG 1). */
#pragma push_macro("KL_VARIANT")
#undef KL_VARIANT
#define KL_VARIANT(...) static_assert(true, "registered below under the mutant's name")
#define KL_DECODE_V7_BUG 1
namespace v7_q_scale_kept {
#include "kernels/attention_decode/v7_fp8_f16_mma.cu"
}
#undef KL_DECODE_V7_BUG
#pragma pop_macro("KL_VARIANT")

KL_VARIANT(attention_decode, mutant_v7_q_scale_kept, v7_q_scale_kept::launch, .min_cc = 89,
           .summary = "v7_fp8_f16_mma with a bf16 q's power of two left in the scores", .mutant = 1);

/* v9 reading its codes without the TMA's swizzle (KL_DECODE_V9_BUG 1). */
#pragma push_macro("KL_VARIANT")
#undef KL_VARIANT
#define KL_VARIANT(...) static_assert(true, "registered below under the mutant's name")
#define KL_DECODE_V9_BUG 1
namespace v9_no_swizzle {
#include "kernels/attention_decode/v9_fp8_tma_pages.cu"
}
#undef KL_DECODE_V9_BUG
#pragma pop_macro("KL_VARIANT")

KL_VARIANT(attention_decode, mutant_v9_no_swizzle, v9_no_swizzle::launch, .min_cc = 90,
           .summary = "v9_fp8_tma_pages with its code reads unswizzled", .mutant = 1);
