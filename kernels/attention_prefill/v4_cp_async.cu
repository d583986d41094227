/* v4_cp_async: v3 with the K/V copies overlapped with the MMAs. What changed: two K/V stages in
 * shared memory; while a CTA computes key tile j from one stage, cp.async copies tile j + 1 into the
 * other (issued first thing in the trip, waited for only at the start of the next), so after the
 * first tile the copies cost only their issue slots. Why faster: in v3 every trip waited for its
 * copy (L2 or DRAM latency, the paged gather's index loads included) with the tensor cores idle;
 * two CTAs per SM hid part of that, the pipeline hides the rest.
 * Work mapping: as v2/v3 (grid (query tiles, qo heads, requests), 4 warps, 32 query rows a warp);
 * 96 KB of shared memory per CTA for head_dim 128 (Q 32 KB + 2 x (K 16 KB + V 16 KB)): 2 CTAs per
 * SM on an H100 (228 KB), 1 on an A100 (164 KB).
 * Bound: mma.sync issue and the softmax's exponentials; expected ~280-320 TFLOP/s on causal-8k on
 * an H100. Run alone: build/kernlab bench attention_prefill --variant v4_cp_async */
#include "kernels/attention_prefill/mma.cuh"
#include "lab/core/registry.h"

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
    /* Q, then stage 0 (K, V), then stage 1 (K, V). */
    T *q_tile = reinterpret_cast<T *>(smem_raw), *stages = q_tile + BM * D;
    auto k_stage = [&](int st) { return stages + st * 2 * BN * D; };
    auto v_stage = [&](int st) { return stages + st * 2 * BN * D + BN * D; };

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

    /* Copies key tile j into stage st (one page lookup per key row serves K and V). */
    auto copy_tile = [&](int j, int st) {
        load_kv_tile<L, BN, D, kCtaThreads>(k_stage(st), v_stage(st), kc, vc, [&](int row) -> int64_t {
            const int key = j * BN + row;
            return key < r.kv_len ? kl::prefill::cache_offset(p, p.kv_indices, r, page, key, kv_head) : -1;
        });
    };
    const int n_tiles = (n_keys + BN - 1) / BN;
    copy_tile(0, 0);
    cp_async_commit(); /* group 0: Q and key tile 0 */
    for (int j = 0; j < n_tiles; j++) {
        const int st = j & 1;
        if (j + 1 < n_tiles) {
            copy_tile(j + 1, st ^ 1); /* stage st ^ 1 was freed by the barrier ending trip j - 1 */
            cp_async_commit();
            cp_async_wait<1>(); /* every group but the newest has landed: tile j (and Q) */
        } else {
            cp_async_wait<0>();
        }
        __syncthreads(); /* ... for every thread's copies, not only this thread's */
        attend_tile<T, L, D, MT, NT>(o, m, l, smem_addr(q_tile), smem_addr(k_stage(st)), smem_addr(v_stage(st)), j * BN,
                                     (j + 1) * BN > mask_from, limit, warp_row0, lane, scale_log2);
        __syncthreads(); /* every warp is done with stage st before trip j + 1 copies tile j + 2 into it */
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
        const size_t smem = (size_t)(S::kBM + 4 * S::kBN) * D * sizeof(T); /* Q, 2 x (K, V) */
        return launch_kernel<prefill_v4<T, D>>(grid, smem, stream, *p,
                                               kl::prefill::make_fast_div((uint32_t)p->page_size));
    });
}

} // namespace

KL_VARIANT(attention_prefill, v4_cp_async, launch, .min_cc = 80,
           .summary = "v3 with two K/V stages: cp.async copies of the next key tile overlap this tile's MMAs");
