/* Deliberately wrong attention_prefill variants, linked into the tests only: the checker must
 * flag every one. Each is one warp per (query row, qo head) walking the keys one at a time with
 * the online softmax (the recurrence every flash kernel runs), with one realistic bug:
 *   causal_top_left     the mask aligned top-left (query i sees keys j <= i), torch's is_causal:
 *                       wrong for every extend (q_len < kv_len)
 *   diagonal_plus_one   each query sees one key past the diagonal (j <= kv_len - q_len + i + 1)
 *   no_rescale          the running output is not rescaled when the max grows (l still is)
 *   last_page_dropped   kv_len = (pages - 1) * page_size: the partly full last page is never read
 *   wrong_kv_head       qo head h reads kv head h % num_kv_heads instead of h / group
 *   lse_base2           lse returned in base 2 (FlashInfer's convention) instead of natural log */
#include <math.h>

#include "kernels/attention_prefill/paged.cuh"
#include "lab/core/registry.h"

namespace {

enum bug { CAUSAL_TOP_LEFT, DIAGONAL_PLUS_ONE, NO_RESCALE, LAST_PAGE_DROPPED, WRONG_KV_HEAD, LSE_BASE2 };
constexpr int kPerLane = 8; /* head_dim <= 256 */

template <typename T, int BUG>
__global__ void __launch_bounds__(32) prefill_mutant(const kl_attention_prefill_params p, kl::prefill::fast_div page)
{
    using namespace kl::prefill;
    const int token = blockIdx.x, head = blockIdx.y, lane = threadIdx.x, d = (int)p.head_dim;
    const int group = (int)(p.num_qo_heads / p.num_kv_heads);
    const int kv_head = BUG == WRONG_KV_HEAD ? head % (int)p.num_kv_heads : head / group;
    request r = load_request(p, find_request(p.qo_indptr, (int)p.batch, token));
    if (BUG == LAST_PAGE_DROPPED) {
        const int pages = (int)(r.kv_len + p.page_size - 1) / (int)p.page_size;
        r.kv_len = max(0, pages - 1) * (int)p.page_size;
    }
    const int i = token - r.q0;
    const int n = BUG == CAUSAL_TOP_LEFT     ? (p.causal ? min(i + 1, r.kv_len) : r.kv_len)
            : BUG == DIAGONAL_PLUS_ONE ? (p.causal ? min(r.kv_len, r.kv_len - r.q_len + i + 2) : r.kv_len)
                                       : visible_keys(p.causal, r.q_len, r.kv_len, i);
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
        const float s = kl::warp_sum(dot) * p.sm_scale;
        const float m_new = fmaxf(m, s), alpha = expf(m - m_new), w = expf(s - m_new);
        l = l * alpha + w;
#pragma unroll
        for (int c = 0; c < kPerLane; c++)
            if (lane + 32 * c < d)
                acc[c] = (BUG == NO_RESCALE ? acc[c] : acc[c] * alpha) + w * kl::to_f32(v[lane + 32 * c]);
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
