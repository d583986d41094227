/* What every attention_prefill variant needs to find its work in a ragged batch and its keys in
 * the paged cache (kernels/attention_prefill/attention_prefill.h has the layout). Inline device
 * code only, so each variant stays one file that reads top to bottom with these named pieces. */
#pragma once

#include <stdint.h>

#include "kernels/attention_prefill/attention_prefill.h"
#include "kernels/common.cuh"

namespace kl {
namespace prefill {

/* One request of the batch, as a kernel sees it. */
struct request {
    int q0;         /* its first row in q / out / lse */
    int q_len;      /* its queries */
    int kv_len;     /* its keys: (pages - 1) * page_size + last_page_len, 0 without pages */
    int first_page; /* its pages are kv_indices[first_page ..] */
};

__device__ __forceinline__ request load_request(const kl_attention_prefill_params &p, int b)
{
    request r;
    r.q0 = p.qo_indptr[b];
    r.q_len = p.qo_indptr[b + 1] - r.q0;
    r.first_page = p.kv_indptr[b];
    const int pages = p.kv_indptr[b + 1] - r.first_page;
    r.kv_len = pages > 0 ? (pages - 1) * (int)p.page_size + p.kv_last_page_len[b] : 0;
    return r;
}

/* The request owning query row `token`: the last b with qo_indptr[b] <= token (empty requests,
 * whose qo_indptr[b] == qo_indptr[b + 1], are skipped by taking the last). */
__device__ __forceinline__ int find_request(const int32_t *__restrict__ qo_indptr, int batch, int token)
{
    int lo = 0, hi = batch - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (qo_indptr[mid] <= token) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* How many keys (a prefix 0..n-1) query i of a request sees. Causal is bottom-right aligned: the
 * last query sees every key, query i the first kv_len - q_len + i + 1. */
__device__ __forceinline__ int visible_keys(bool causal, int q_len, int kv_len, int i)
{
    if (!causal) return kv_len;
    return max(0, min(kv_len, kv_len - q_len + i + 1));
}

/* Unsigned division by a divisor fixed for the launch (the page size) with a multiply-high and a
 * shift instead of the ~20-instruction integer division: for n < 2^31 and d >= 1,
 *   n / d = umulhi(n, magic) >> shift   with shift = ceil(log2 d), magic = floor(2^32 (2^shift - d) / d) + 1
 *   (then + n, the round-down method of Granlund and Montgomery, as CUTLASS's FastDivmod does).
 * Built on the host by make_fast_div. */
struct fast_div {
    uint32_t d, magic, shift;
    __device__ __forceinline__ uint32_t div(uint32_t n) const { return (__umulhi(n, magic) + n) >> shift; }
    __device__ __forceinline__ void divmod(uint32_t n, uint32_t &q, uint32_t &r) const
    {
        q = div(n);
        r = n - q * d;
    }
};

inline fast_div make_fast_div(uint32_t d)
{
    fast_div f{d, 0, 0};
    while ((1ull << f.shift) < d) f.shift++;
    f.magic = (uint32_t)(((1ull << 32) * ((1ull << f.shift) - d)) / d + 1);
    if (d == 1) f.magic = 0, f.shift = 0; /* umulhi(n, 0) + n = n */
    return f;
}

/* Element offset of key `key` of a request, kv head h, in k_cache / v_cache:
 *   ((page * page_size + slot) * num_kv_heads + h) * head_dim. */
__device__ __forceinline__ int64_t cache_offset(const kl_attention_prefill_params &p, const int32_t *__restrict__ kv_indices,
                                                const request &r, const fast_div &page, int key, int h)
{
    uint32_t page_index, slot;
    page.divmod((uint32_t)key, page_index, slot);
    const int64_t pg = kv_indices[r.first_page + (int)page_index];
    return ((pg * p.page_size + slot) * p.num_kv_heads + h) * p.head_dim;
}

/* log2(e): softmax in base 2, exp2f(x * log2e) = expf(x), one FFMA for scale and max together. */
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

} // namespace prefill
} // namespace kl
