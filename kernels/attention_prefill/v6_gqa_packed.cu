/* v6_gqa_packed: v5 with the query heads that share a kv head packed into one tile. What changed:
 * a CTA owns a kv head and 128 consecutive "rows" of a request, row = query * g + (qo head within
 * the group of g), so the 4 qo heads of a Llama-3 group share every K/V tile the CTA copies: a
 * quarter of v5's L2 -> shared-memory traffic and cp.async issue for the same MMAs (v5 copies each
 * K/V tile once per qo head and counts on the L2 to serve the repeats). The g heads of one token are
 * contiguous in q and out, so a packed row is still one contiguous row; a row's causal limit is that
 * of its query, row / g (a multiply-high division), and a tile spans 128 / g queries, so fewer key
 * tiles straddle the diagonal. Rows past q_len * g are zeros and never written.
 * Work mapping: grid (kv heads, requests, packed tiles, the last first as in v5); 4 warps, 32 packed
 * rows a warp; two cp.async K/V stages.
 * Bound: mma.sync issue and the softmax's exponentials (FlashAttention-2's bound on Hopper);
 * predicted ~300-340 TFLOP/s (0.38-0.43 of an H100's cuBLAS rate) on causal-8k.
 * Run alone: build/kernlab bench attention_prefill --variant v6_gqa_packed */
#include "kernels/attention_prefill/mainloop_sm80.cuh"
#include "kernels/variant.h"

namespace {

using namespace kl::mma;
using kl::prefill::visible_keys;

template <typename T, int D>
__global__ void __launch_bounds__(kCtaThreads)
    prefill_v6(const kl_attention_prefill_params p, kl::prefill::fast_div page, kl::prefill::fast_div group)
{
    using S = tile_shape<D>;
    using L = xor_rows<D>;
    constexpr int MT = S::kMT, NT = S::kNT, DT = S::kDT, BM = S::kBM, BN = S::kBN;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    /* Q, then stage 0 (K, V), then stage 1 (K, V): key tile t uses stage t % 2. */
    T *q_tile = reinterpret_cast<T *>(smem_raw), *stages = q_tile + BM * D;
    auto k_stage = [&](int st) { return stages + st * 2 * BN * D; };
    auto v_stage = [&](int st) { return stages + st * 2 * BN * D + BN * D; };
    /* Then two slots of BN page numbers: key tile t's in slot t % 2. */
    int32_t *page_slots = reinterpret_cast<int32_t *>(stages + 4 * BN * D);

    /* A CTA: kv head blockIdx.x of request blockIdx.y, packed rows tile_r0 .. tile_r0 + BM - 1 where
     * row pr is query pr / g, qo head kv_head * g + pr % g; the last tiles start first (v5). */
    const kl::prefill::request r = kl::prefill::load_request(p, blockIdx.y);
    const int g = (int)group.d, rows = r.q_len * g;
    const int tile_r0 = (gridDim.z - 1 - blockIdx.z) * BM;
    if (tile_r0 >= rows) return; /* the grid covers the longest request */
    const int kv_head = blockIdx.x;
    const int lane = threadIdx.x % 32, warp_row0 = threadIdx.x / 32 * 16 * MT;
    const int64_t token_stride = p.num_qo_heads * D;
    auto query_of = [&](int pr) { return (int)group.div((uint32_t)pr); };

    /* Keys: the tile's last query sees the most (the loop bound), its first the fewest (no mask below). */
    const int n_keys = visible_keys(p.causal, r.q_len, r.kv_len, query_of(min(tile_r0 + BM, rows) - 1));
    const int mask_from = visible_keys(p.causal, r.q_len, r.kv_len, query_of(tile_r0));
    const int row0 = tile_r0 + warp_row0 + lane / 4; /* this thread's first row; the others are + 16 mt + 8 h */
    auto limit = [&](int mt, int h) {
        return visible_keys(p.causal, r.q_len, r.kv_len, query_of(row0 + 16 * mt + 8 * h));
    };

    /* Row pr lives at q_group + (pr / g) * token_stride + (pr % g) * D: the group's heads are adjacent. */
    const T *q_group = (const T *)p.q + (int64_t)r.q0 * token_stride + (int64_t)kv_head * g * D;
    const T *kc = (const T *)p.k_cache, *vc = (const T *)p.v_cache;
    load_tile<L, BM, D, kCtaThreads>(q_tile, (const T *)p.q, [&](int row) -> const T * {
        const int pr = tile_r0 + row, i = query_of(pr);
        return pr < rows ? q_group + i * token_stride + (pr - i * g) * D : nullptr;
    });
    float o[MT][DT][4], m[MT][2], l[MT][2];
    init_rows(o, m, l);
    const float scale_log2 = p.sm_scale * kl::prefill::kLog2e;

    /* Copies key tile j into stage st; page_of(i) is the cache page number of the request's page i. */
    auto copy_tile = [&](int j, int st, auto page_of) {
        load_kv_tile<L, BN, D, kCtaThreads>(k_stage(st), v_stage(st), kc, vc, [&](int row) -> int64_t {
            const int key = j * BN + row;
            if (key >= r.kv_len) return -1;
            uint32_t i, slot;
            page.divmod((uint32_t)key, i, slot);
            return kl::prefill::slot_offset(p, page_of((int)i), slot, kv_head);
        });
    };
    const int n_tiles = (n_keys + BN - 1) / BN;
    /* Tile 0 looks its pages up in global memory (once per CTA); tile 1's page numbers follow it. */
    copy_tile(0, 0, [&](int i) { return p.kv_indices[r.first_page + i]; });
    load_page_numbers<BN, kCtaThreads>(page_slots + BN, p.kv_indices, r, BN, page);
    cp_async_commit(); /* group 0: Q, key tile 0, tile 1's page numbers */
    for (int j = 0; j < n_tiles; j++) {
        const int st = j & 1;
        cp_async_wait<0>(); /* this thread's copies of tile j (and of tile j + 1's page numbers) landed ... */
        __syncthreads();    /* ... and everyone's; and every warp is done with tile j - 1: its stage is free */
        if (j + 1 < n_tiles) {
            /* Tile j + 1 into the free stage, its page numbers read from shared memory; tile j + 2's page
             * numbers into the slot tile j's used. Both fly while tile j is computed. */
            const int32_t *slot = page_slots + (st ^ 1) * BN;
            const int p0 = (int)page.div((uint32_t)((j + 1) * BN));
            copy_tile(j + 1, st ^ 1, [&](int i) { return slot[i - p0]; });
            load_page_numbers<BN, kCtaThreads>(page_slots + st * BN, p.kv_indices, r, (j + 2) * BN, page);
            cp_async_commit();
        }
        attend_tile<T, L, D, MT, NT>(o, m, l, smem_addr(q_tile), smem_addr(k_stage(st)), smem_addr(v_stage(st)), j * BN,
                                     (j + 1) * BN > mask_from, limit, warp_row0, lane, scale_log2);
    }

    store_rows<T, MT, DT>(o, m, l, scale_log2, lane, [&](int mt, int h, T *&out, float *&lse) {
        const int pr = row0 + 16 * mt + 8 * h, i = query_of(pr), head = kv_head * g + (pr - i * g);
        out = (T *)p.out + (r.q0 + i) * token_stride + (int64_t)head * D;
        lse = p.lse + (int64_t)(r.q0 + i) * p.num_qo_heads + head;
        return pr < rows;
    });
}

cudaError_t launch(const struct kl_attention_prefill_params *p, cudaStream_t stream)
{
    bool go;
    cudaError_t rc = launch_checks(p, "v6_gqa_packed", &go);
    if (!go) return rc;
    return dispatch(p, [&](auto t, auto d) {
        using T = decltype(t);
        constexpr int D = decltype(d)::value;
        using S = tile_shape<D>;
        const int64_t group = p->num_qo_heads / p->num_kv_heads;
        dim3 grid;
        cudaError_t grc = packed_grid(p, S::kBM, "v6_gqa_packed", &grid);
        if (grc != cudaSuccess) return grc;
        const size_t smem = (size_t)(S::kBM + 4 * S::kBN) * D * sizeof(T) + 2 * S::kBN * sizeof(int32_t);
        return launch_kernel<prefill_v6<T, D>>(grid, smem, stream, *p,
                                               kl::prefill::make_fast_div((uint32_t)p->page_size),
                                               kl::prefill::make_fast_div((uint32_t)group));
    });
}

} // namespace

KL_VARIANT(attention_prefill, v6_gqa_packed, launch, .min_cc = 80,
           .summary = "v5 with the qo heads of a GQA group packed into one tile: each K/V tile copied once per group");
