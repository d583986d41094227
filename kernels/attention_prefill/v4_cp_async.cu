/* v4_cp_async: v3 with every copy asynchronous and overlapped with the MMAs. What changed: two K/V
 * stages in shared memory; right after the one barrier of trip j, cp.async starts copying key tile
 * j + 1 into the stage tile j - 1 used, and tile j + 2's page numbers into a small slot, then the
 * warps compute tile j; trip j + 1 only waits for copies that had a whole tile of MMAs to land.
 * The page numbers travel a tile ahead of the rows they locate, so issuing a K/V copy reads shared
 * memory, never waits on a global load. Why faster: in v3 each trip copied, waited (L2 or DRAM
 * latency, the paged gather's index loads first) and synchronised twice with the tensor cores idle;
 * two CTAs per SM hid part of that, the pipeline hides the rest, with one barrier per tile.
 * Work mapping: as v2/v3 (grid (query tiles, qo heads, requests), 4 warps, 32 query rows a warp);
 * 96.5 KB of shared memory per CTA for head_dim 128 (Q 32 KB + 2 x (K 16 KB + V 16 KB) + page
 * numbers): 2 CTAs per SM on an H100 (228 KB), 1 on an A100 (164 KB).
 * Bound: mma.sync issue and the softmax's exponentials; expected ~280-320 TFLOP/s on causal-8k on
 * an H100. Run alone: build/kernlab bench attention_prefill --variant v4_cp_async */
#include "kernels/attention_prefill/mainloop_sm80.cuh"
#include "kernels/variant.h"

namespace {

using namespace kl::mma;
using kl::prefill::visible_keys;

template <typename T, int D>
__global__ void __launch_bounds__(kCtaThreads)
    prefill_v4(const kl_attention_prefill_params p, kl::prefill::fast_div page)
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

    const kl::prefill::request r = kl::prefill::load_request(p, blockIdx.z);
    const int tile_q0 = blockIdx.x * BM; /* first query of the tile, within its request */
    if (tile_q0 >= r.q_len) return;      /* the grid covers the longest request */
    const int head = blockIdx.y, kv_head = head / (int)(p.num_qo_heads / p.num_kv_heads);
    const int lane = threadIdx.x % 32, warp_row0 = threadIdx.x / 32 * 16 * MT;
    const int64_t token_stride = p.num_qo_heads * D;

    /* The tile's last query sees the most keys (the loop bound: tiles above the causal diagonal are
     * never loaded); its first sees the fewest (below that every row sees every key: no mask). */
    const int n_keys = visible_keys(p.causal, r.q_len, r.kv_len, min(tile_q0 + BM, r.q_len) - 1);
    const int mask_from = visible_keys(p.causal, r.q_len, r.kv_len, tile_q0);
    /* Keys seen by this thread's rows (16 mt + lane / 4 + 8 h of the warp's): causal, a step down
     * the diagonal from limit0, the first row's; otherwise every key. */
    const int limit0 = r.kv_len - r.q_len + tile_q0 + warp_row0 + lane / 4 + 1;
    auto limit = [&](int mt, int h) { return p.causal ? min(limit0 + 16 * mt + 8 * h, r.kv_len) : r.kv_len; };

    const T *q = (const T *)p.q, *kc = (const T *)p.k_cache, *vc = (const T *)p.v_cache;
    load_tile<L, BM, D, kCtaThreads>(q_tile, q, [&](int row) -> const T * {
        const int i = tile_q0 + row;
        return i < r.q_len ? q + (r.q0 + i) * token_stride + (int64_t)head * D : nullptr;
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
        const int i = tile_q0 + warp_row0 + 16 * mt + lane / 4 + 8 * h;
        out = (T *)p.out + (r.q0 + i) * token_stride + (int64_t)head * D;
        lse = p.lse + (int64_t)(r.q0 + i) * p.num_qo_heads + head;
        return i < r.q_len;
    });
}

cudaError_t launch(const struct kl_attention_prefill_params *p, cudaStream_t stream)
{
    bool go;
    cudaError_t rc = launch_checks(p, "v4_cp_async", &go);
    if (!go) return rc;
    return dispatch(p, [&](auto t, auto d) {
        using T = decltype(t);
        constexpr int D = decltype(d)::value;
        using S = tile_shape<D>;
        const dim3 grid((unsigned)((p->max_q_len + S::kBM - 1) / S::kBM), (unsigned)p->num_qo_heads,
                        (unsigned)p->batch);
        const size_t smem = (size_t)(S::kBM + 4 * S::kBN) * D * sizeof(T) + 2 * S::kBN * sizeof(int32_t);
        return launch_kernel<prefill_v4<T, D>>(grid, smem, stream, *p,
                                               kl::prefill::make_fast_div((uint32_t)p->page_size));
    });
}

} // namespace

KL_VARIANT(attention_prefill, v4_cp_async, launch, .min_cc = 80,
           .summary = "two K/V stages: the next key tile and its page numbers copied (cp.async) under the MMAs");
