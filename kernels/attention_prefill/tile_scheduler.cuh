/* Which work a CTA of the GQA-packed Hopper variants of attention_prefill (v7 and up) takes: a tile of
 * packed rows of one kv head of one request, and its place in the grid. Inline device code only. */
#pragma once

#include <stdint.h>

#include "kernels/attention_prefill/paged.cuh"

namespace kl {
namespace hopper {

/* ---- the work of a CTA: v6's packed rows ----
 * kv head `kv_head` of request r and its packed rows row0 .. row0 + 127, packed row pr being query
 * pr / g and qo head kv_head g + pr % g (the g heads that share the kv head: one contiguous row of q). */
struct packed_tile {
    prefill::request r;
    int kv_head, g, rows, row0; /* rows = q_len g: packed rows past it are zeros, never written */
    prefill::fast_div group;
    __device__ int query_of(int pr) const { return (int)group.div((uint32_t)pr); }
    /* The global row of packed row pr in q and out (token r.q0 + query, head kv_head g + pr % g). */
    __device__ int64_t row_offset(const kl_attention_prefill_params &p, int pr) const
    {
        const int i = query_of(pr);
        return ((int64_t)(r.q0 + i) * p.num_qo_heads + (int64_t)kv_head * g + (pr - i * g)) * p.head_dim;
    }
    /* How many keys packed row pr sees (a prefix). */
    __device__ int keys_of(const kl_attention_prefill_params &p, int pr) const
    {
        return prefill::visible_keys(p.causal, r.q_len, r.kv_len, query_of(min(pr, rows - 1)));
    }
};
/* The tile of the grid's block (x, y, z) = (kv head, request, packed tiles with the last first): the
 * first tiles to start are the longest under a causal mask (v5). */
__device__ __forceinline__ packed_tile packed_tile_at(const kl_attention_prefill_params &p, prefill::fast_div group,
                                                      int kv_head, int b, int reversed_tile, int tiles, int bm)
{
    packed_tile t;
    t.r = prefill::load_request(p, b);
    t.kv_head = kv_head, t.g = (int)group.d, t.rows = t.r.q_len * t.g, t.group = group;
    t.row0 = (tiles - 1 - reversed_tile) * bm;
    return t;
}

} // namespace hopper
} // namespace kl
