/* v2_mma: the FlashAttention-2 structure on tensor cores. What changed from v1: both products run
 * as mma.sync m16n8k16 (16-bit inputs, float32 accumulators) with operands loaded from shared
 * memory by ldmatrix; the scores S and the probabilities P never leave the registers (S's
 * accumulator fragment is P's A fragment, mainloop_sm80.cuh), and each warp owns whole query rows, so the
 * online softmax needs no shared memory and no barrier.
 * Work mapping: grid (query tiles, qo heads, requests); 4 warps; a CTA owns 128 query rows (64 for
 * head_dim 256), a warp 32 of them (16), and streams the request's keys 64 (32) at a time: one K
 * tile and one V tile in shared memory, copied (cp.async, 16 bytes a thread) and waited for before
 * any MMA, then S = Q K^T, the mask on the tiles that need it, the softmax step, O += P V.
 * Left for the next rungs: rows of 128-512 bytes put the 8 rows an ldmatrix phase reads in the same
 * banks (8-way conflicts, v3), and every copy is exposed (no overlap with the MMAs, v4).
 * Bound: shared-memory bank conflicts (every ldmatrix replayed 8 times: ~1.3 KB of shared traffic per
 * MMA where 160 B suffice); expected ~60-100 TFLOP/s on causal-8k on an H100.
 * Run alone: build/kernlab bench attention_prefill --variant v2_mma */
#include "kernels/attention_prefill/mainloop_sm80.cuh"
#include "kernels/variant.h"

namespace {

using namespace kl::mma;
using kl::prefill::visible_keys;

template <typename T, int D>
__global__ void __launch_bounds__(kCtaThreads)
    prefill_v2(const kl_attention_prefill_params p, kl::prefill::fast_div page)
{
    using S = tile_shape<D>;
    using L = plain_rows<D>;
    constexpr int MT = S::kMT, NT = S::kNT, DT = S::kDT, BM = S::kBM, BN = S::kBN;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    T *q_tile = reinterpret_cast<T *>(smem_raw), *k_tile = q_tile + BM * D, *v_tile = k_tile + BN * D;

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

    for (int k0 = 0; k0 < n_keys; k0 += BN) {
        load_kv_tile<L, BN, D, kCtaThreads>(k_tile, v_tile, kc, vc, [&](int row) -> int64_t {
            const int key = k0 + row;
            return key < r.kv_len ? kl::prefill::cache_offset(p, p.kv_indices, r, page, key, kv_head) : -1;
        });
        cp_async_commit();
        cp_async_wait<0>(); /* this thread's copies have landed ... */
        __syncthreads();    /* ... and everyone's: the K/V tile (and, on the first trip, Q) is there */
        attend_tile<T, L, D, MT, NT>(o, m, l, smem_addr(q_tile), smem_addr(k_tile), smem_addr(v_tile), k0,
                                     k0 + BN > mask_from, limit, warp_row0, lane, scale_log2);
        __syncthreads(); /* every warp is done with K and V before the next trip overwrites them */
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
    cudaError_t rc = launch_checks(p, "v2_mma", &go);
    if (!go) return rc;
    return dispatch(p, [&](auto t, auto d) {
        using T = decltype(t);
        constexpr int D = decltype(d)::value;
        using S = tile_shape<D>;
        const dim3 grid((unsigned)((p->max_q_len + S::kBM - 1) / S::kBM), (unsigned)p->num_qo_heads,
                        (unsigned)p->batch);
        const size_t smem = (size_t)(S::kBM + 2 * S::kBN) * D * sizeof(T); /* Q, K, V */
        return launch_kernel<prefill_v2<T, D>>(grid, smem, stream, *p,
                                               kl::prefill::make_fast_div((uint32_t)p->page_size));
    });
}

} // namespace

KL_VARIANT(
    attention_prefill, v2_mma, launch, .min_cc = 80,
    .summary = "mma.sync m16n8k16 + ldmatrix, P kept in registers (FlashAttention-2); plain smem rows, copy then wait");
