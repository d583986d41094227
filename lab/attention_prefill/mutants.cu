/* Deliberately wrong attention_prefill variants, linked into the tests only: the checker must
 * flag every one. Each is one warp per (query row, qo head) walking the keys one at a time with
 * the online softmax (the recurrence every flash kernel runs), with one realistic bug:
 *   causal_top_left     the mask aligned top-left (query i sees keys j <= i), torch's is_causal:
 *                       wrong for every extend (q_len < kv_len)
 *   diagonal_plus_one   each query sees one key past the diagonal (j <= kv_len - q_len + i + 1)
 *   no_rescale          the running output is not rescaled when the max grows (l still is)
 *   last_page_dropped   kv_len = (pages - 1) * page_size: the partly full last page is never read
 *   wrong_kv_head       qo head h reads kv head h % num_kv_heads instead of h / group
 *   lse_base2           lse returned in base 2 (FlashInfer's convention) instead of natural log
 *   mask_row_late       the mask decision of a tiled kernel (128 query rows x 64 keys, as mainloop_sm80.cuh's at
 *                       head_dim <= 128) made from the tile's second row: its first row sees one key
 *                       past the diagonal where kv_len - q_len + tile_q0 + 2 is a multiple of 64
 *   kv_head_zero        every qo head reads kv head 0
 *   o_in_dtype          the running output rounded to the input dtype every 16 keys (P.V accumulated in
 *                       bf16/fp16)
 *   last_key_dropped    keys stop at kv_len - 1: the request's last key is never attended
 *   no_max              p = exp(s) with no max subtracted: Inf, then NaN, once a logit passes ~88.7
 *   no_sm_scale         the logits are q.k, sm_scale never applied
 * The later six are the bug classes lab/core/compare.c's attention rationale claims to catch; their
 * float64 twins (lab/attention_prefill/mutants_reference.c) show on the CPU which goldens catch
 * them. */
#include <math.h>

#include "kernels/attention_prefill/paged.cuh"
#include "lab/core/registry.h"

namespace {

enum bug {
    CAUSAL_TOP_LEFT,
    DIAGONAL_PLUS_ONE,
    NO_RESCALE,
    LAST_PAGE_DROPPED,
    WRONG_KV_HEAD,
    LSE_BASE2,
    MASK_ROW_LATE,
    KV_HEAD_ZERO,
    O_IN_DTYPE,
    LAST_KEY_DROPPED,
    NO_MAX,
    NO_SM_SCALE
};
constexpr int kPerLane = 8;              /* head_dim <= 256 */
constexpr int kTileQ = 128, kTileK = 64; /* MASK_ROW_LATE's tiles */

template <typename T, int BUG>
__global__ void __launch_bounds__(32) prefill_mutant(const kl_attention_prefill_params p, kl::prefill::fast_div page)
{
    using namespace kl::prefill;
    const int token = blockIdx.x, head = blockIdx.y, lane = threadIdx.x, d = (int)p.head_dim;
    const int group = (int)(p.num_qo_heads / p.num_kv_heads);
    const int kv_head = BUG == WRONG_KV_HEAD ? head % (int)p.num_kv_heads : BUG == KV_HEAD_ZERO ? 0 : head / group;
    request r = load_request(p, find_request(p.qo_indptr, (int)p.batch, token));
    if (BUG == LAST_PAGE_DROPPED) {
        const int pages = (int)(r.kv_len + p.page_size - 1) / (int)p.page_size;
        r.kv_len = max(0, pages - 1) * (int)p.page_size;
    }
    const int i = token - r.q0;
    int n = BUG == CAUSAL_TOP_LEFT     ? (p.causal ? min(i + 1, r.kv_len) : r.kv_len)
            : BUG == DIAGONAL_PLUS_ONE ? (p.causal ? min(r.kv_len, r.kv_len - r.q_len + i + 2) : r.kv_len)
                                       : visible_keys(p.causal, r.q_len, r.kv_len, i);
    if (BUG == LAST_KEY_DROPPED) n = min(n, max(0, r.kv_len - 1));
    if (BUG == MASK_ROW_LATE && p.causal && n > 0) {
        /* A tiled kernel masks only the key tiles reaching past what its first row sees, and every
         * row sees all of an unmasked tile; here that test is made from the row after the first. */
        const int tile_q0 = i - i % kTileQ, last = min(tile_q0 + kTileQ, r.q_len) - 1;
        const int n_keys = visible_keys(true, r.q_len, r.kv_len, last);
        const int tile_end = ((n - 1) / kTileK + 1) * kTileK;
        if (tile_end <= visible_keys(true, r.q_len, r.kv_len, tile_q0 + 1)) n = min(tile_end, n_keys);
    }
    const float sm_scale = BUG == NO_SM_SCALE ? 1.f : p.sm_scale;
    const T *q = (const T *)p.q + ((int64_t)token * p.num_qo_heads + head) * d;
    float qv[kPerLane], acc[kPerLane];
#pragma unroll
    for (int c = 0; c < kPerLane; c++) {
        qv[c] = lane + 32 * c < d ? kl::to_f32(q[lane + 32 * c]) : 0.f;
        acc[c] = 0.f;
    }
    float m = -INFINITY, l = 0.f;
    for (int j = 0; j < n; j++) {
        const int64_t off = cache_offset(p, p.kv_indices, r, page, j, kv_head);
        const T *k = (const T *)p.k_cache + off, *v = (const T *)p.v_cache + off;
        float dot = 0.f;
#pragma unroll
        for (int c = 0; c < kPerLane; c++)
            if (lane + 32 * c < d) dot += qv[c] * kl::to_f32(k[lane + 32 * c]);
        const float s = kl::warp_sum(dot) * sm_scale;
        const float m_new = BUG == NO_MAX ? 0.f : fmaxf(m, s), alpha = expf(m - m_new), w = expf(s - m_new);
        l = l * alpha + w;
#pragma unroll
        for (int c = 0; c < kPerLane; c++)
            if (lane + 32 * c < d)
                acc[c] = (BUG == NO_RESCALE ? acc[c] : acc[c] * alpha) + w * kl::to_f32(v[lane + 32 * c]);
        if (BUG == O_IN_DTYPE && j % 16 == 15) {
#pragma unroll
            for (int c = 0; c < kPerLane; c++) acc[c] = kl::to_f32(kl::from_f32<T>(acc[c]));
        }
        m = m_new;
    }
    T *out = (T *)p.out + ((int64_t)token * p.num_qo_heads + head) * d;
#pragma unroll
    for (int c = 0; c < kPerLane; c++)
        if (lane + 32 * c < d) out[lane + 32 * c] = kl::from_f32<T>(n > 0 ? acc[c] / l : 0.f);
    if (lane == 0)
        p.lse[(int64_t)token * p.num_qo_heads + head] =
            n == 0 ? -INFINITY : BUG == LSE_BASE2 ? (m + logf(l)) * kLog2e : m + logf(l);
}

template <int BUG>
cudaError_t launch(const struct kl_attention_prefill_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_attention_prefill_check_params(p, "mutant");
    if (rc != cudaSuccess || p->total_q == 0) return rc;
    if (p->head_dim > 32 * kPerLane) return cudaErrorNotSupported;
    const dim3 grid((unsigned)p->total_q, (unsigned)p->num_qo_heads);
    KL_DISPATCH_FLOAT(p->dtype, T,
                      prefill_mutant<T, BUG><<<grid, 32, 0, stream>>>(
                          *p, kl::prefill::make_fast_div((uint32_t)p->page_size)));
    return cudaGetLastError();
}

} // namespace

KL_VARIANT(attention_prefill, mutant_causal_top_left, launch<CAUSAL_TOP_LEFT>, .min_cc = 80,
           .summary = "causal mask aligned top-left (torch's is_causal) instead of bottom-right", .mutant = 1);
KL_VARIANT(attention_prefill, mutant_diagonal_plus_one, launch<DIAGONAL_PLUS_ONE>, .min_cc = 80,
           .summary = "one key too many on the causal diagonal", .mutant = 1);
KL_VARIANT(attention_prefill, mutant_no_rescale, launch<NO_RESCALE>, .min_cc = 80,
           .summary = "running output not rescaled when the max grows", .mutant = 1);
KL_VARIANT(attention_prefill, mutant_last_page_dropped, launch<LAST_PAGE_DROPPED>, .min_cc = 80,
           .summary = "the last page of every request is never read", .mutant = 1);
KL_VARIANT(attention_prefill, mutant_wrong_kv_head, launch<WRONG_KV_HEAD>, .min_cc = 80,
           .summary = "qo head h reads kv head h % kv_heads instead of h / group", .mutant = 1);
KL_VARIANT(attention_prefill, mutant_lse_base2, launch<LSE_BASE2>, .min_cc = 80,
           .summary = "lse in base 2 instead of the natural log", .mutant = 1);
KL_VARIANT(attention_prefill, mutant_mask_row_late, launch<MASK_ROW_LATE>, .min_cc = 80,
           .summary = "a 128x64 tile's mask test made from its second row", .mutant = 1);
KL_VARIANT(attention_prefill, mutant_kv_head_zero, launch<KV_HEAD_ZERO>, .min_cc = 80,
           .summary = "every qo head reads kv head 0", .mutant = 1);
KL_VARIANT(attention_prefill, mutant_o_in_dtype, launch<O_IN_DTYPE>, .min_cc = 80,
           .summary = "running output rounded to the input dtype every 16 keys", .mutant = 1);
KL_VARIANT(attention_prefill, mutant_last_key_dropped, launch<LAST_KEY_DROPPED>, .min_cc = 80,
           .summary = "the request's last key never attended", .mutant = 1);
KL_VARIANT(attention_prefill, mutant_no_max, launch<NO_MAX>, .min_cc = 80,
           .summary = "p = exp(s) without subtracting the max", .mutant = 1);
KL_VARIANT(attention_prefill, mutant_no_sm_scale, launch<NO_SM_SCALE>, .min_cc = 80,
           .summary = "sm_scale never applied", .mutant = 1);
