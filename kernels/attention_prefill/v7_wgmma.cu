/* v7_wgmma: v6 with its matrix products on Hopper's warpgroup MMA. What changed: a CTA is 2
 * warpgroups, each owning 64 of the tile's 128 packed rows; S = Q K^T is one chain of wgmma
 * m64n128k16 per warpgroup reading Q and K straight from shared memory (no ldmatrix, no fragments in
 * registers), and O += P V another chain with P from the registers S was computed in (its m16n8 C
 * fragments are the A fragments wgmma takes, as with mma.sync) and V from shared memory, read
 * transposed by the tensor cores. Tiles are 128-byte swizzled (kernels/ptx_sm90.cuh) so the tensor cores read
 * them without bank conflicts; keys go 128 at a time (64 for head_dim 256).
 * Unchanged from v6, on purpose, to measure what wgmma alone gives: the GQA packing, the cp.async
 * copies by every thread into two stages, __syncthreads between tiles, and each warpgroup waiting
 * for its products before the softmax (no overlap of the exponentials with the tensor cores).
 * Why faster: mma.sync m16n8k16 issues 4096 MACs a warp instruction and feeds the tensor cores from
 * registers loaded by ldmatrix; wgmma issues 64 x 128 x 16 per warpgroup instruction from shared
 * memory, the rate Hopper's tensor cores were built for (FlashAttention-3's paper: ~1.5x FA2).
 * Predicted: ~380-450 TFLOP/s (0.48-0.57 of the cuBLAS rate) on causal-8k; bound by the softmax
 * running while the tensor cores idle, and by the copies every thread still issues.
 * Run alone: build/kernlab bench attention_prefill --variant v7_wgmma */
#include "kernels/attention_prefill/mainloop_sm90.cuh"
#include "kernels/variant.h"

namespace {

using namespace kl::mma;
using namespace kl::hopper;

constexpr int kThreads = 256; /* 2 warpgroups */

/* mainloop_sm90.cuh's tiles; shared memory: Q, two stages of K and V, two slots of page numbers. */
template <int D> struct shape : wg_tiles<D> {
    using QTile = typename wg_tiles<D>::QTile;
    using KvTile = typename wg_tiles<D>::KvTile;
    static constexpr size_t kSmem =
        1024 /* alignment slack */ + QTile::kBytes + 4 * KvTile::kBytes + 2 * wg_tiles<D>::kBN * sizeof(int32_t);
};

template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    prefill_v7(const kl_attention_prefill_params p, kl::prefill::fast_div page, kl::prefill::fast_div group)
{
#if KL_SM90A
    using S = shape<D>;
    using QL = typename S::QTile;
    using KL = typename S::KvTile;
    constexpr int BM = S::kBM, BN = S::kBN, NT = BN / 8, DT = D / 8;
    extern __shared__ unsigned char smem_raw[];
    /* Q, then stage 0 (K, V), then stage 1 (K, V), 1024-byte aligned; then two slots of page numbers. */
    T *q_tile = reinterpret_cast<T *>(align_1024(smem_raw)), *stages = q_tile + BM * D;
    auto k_stage = [&](int st) { return stages + st * 2 * BN * D; };
    auto v_stage = [&](int st) { return stages + st * 2 * BN * D + BN * D; };
    int32_t *page_slots = reinterpret_cast<int32_t *>(stages + 4 * BN * D);

    /* The work of a CTA is v6's: kv head blockIdx.x of request blockIdx.y, 128 packed rows (tile_scheduler.cuh). */
    const packed_tile w = packed_tile_at(p, group, blockIdx.x, blockIdx.y, blockIdx.z, gridDim.z, BM);
    if (w.row0 >= w.rows) return; /* the grid covers the longest request */
    const kl::prefill::request &r = w.r;
    const int lane = threadIdx.x % 32, wg = threadIdx.x / 128;
    const int wg_row0 = w.row0 + 64 * wg, row = wg_row0 + 16 * (threadIdx.x / 32 % 4) + lane / 4;

    /* The CTA's last row bounds the key loop; a warpgroup needs the mask from where its first row stops seeing. */
    const int n_keys = w.keys_of(p, w.row0 + BM - 1), mask_from = w.keys_of(p, wg_row0);
    auto limit = [&](int, int h) { return w.keys_of(p, row + 8 * h); };

    const T *kc = (const T *)p.k_cache, *vc = (const T *)p.v_cache;
    load_tile<QL, BM, D, kThreads>(q_tile, (const T *)p.q, [&](int i) -> const T * {
        return w.row0 + i < w.rows ? (const T *)p.q + w.row_offset(p, w.row0 + i) : nullptr;
    });
    auto copy_tile = [&](int j, int st, auto page_of) {
        load_kv_tile<KL, BN, D, kThreads>(k_stage(st), v_stage(st), kc, vc, [&](int i) -> int64_t {
            const int key = j * BN + i;
            if (key >= r.kv_len) return -1;
            uint32_t pi, slot;
            page.divmod((uint32_t)key, pi, slot);
            return kl::prefill::slot_offset(p, page_of((int)pi), slot, w.kv_head);
        });
    };
    float o[1][DT][4], m[1][2], l[1][2];
    init_rows(o, m, l);
    const float scale_log2 = p.sm_scale * kl::prefill::kLog2e;
    const uint32_t q_wg = smem_addr(q_tile) + 64 * wg * 128; /* this warpgroup's 64 rows in block 0 */

    const int n_tiles = (n_keys + BN - 1) / BN;
    copy_tile(0, 0, [&](int i) { return p.kv_indices[r.first_page + i]; });
    load_page_numbers<BN, kThreads>(page_slots + BN, p.kv_indices, r, BN, page);
    cp_async_commit();
    for (int j = 0; j < n_tiles; j++) {
        const int st = j & 1;
        cp_async_wait<0>();
        fence_async_smem(); /* this thread's copies are read next by the tensor cores */
        __syncthreads();    /* everyone's; and both warpgroups' products of tile j - 1 are complete */
        if (j + 1 < n_tiles) {
            const int32_t *slot = page_slots + (st ^ 1) * BN;
            const int p0 = (int)page.div((uint32_t)((j + 1) * BN));
            copy_tile(j + 1, st ^ 1, [&](int i) { return slot[i - p0]; });
            load_page_numbers<BN, kThreads>(page_slots + st * BN, p.kv_indices, r, (j + 2) * BN, page);
            cp_async_commit();
        }

        /* S = Q K^T: D / 16 products of 64 x BN x 16, the first overwriting s. */
        float s[1][NT][4];
        wgmma_begin(s[0]);
        issue_qk<T, D, QL, KL>(s[0], q_wg, smem_addr(k_stage(st)));
        wgmma_wait<0>();
        pin(s[0]);

        if ((j + 1) * BN > mask_from) mask_tile(s, j * BN, lane, limit);
        online_softmax(s, m, l, o, scale_log2);

        /* O += P V: BN / 16 products of 64 x D x 16, P's A fragments straight from S's registers. */
        uint32_t a[BN / 16][4];
        pack_p<T>(a, s[0]);
        wgmma_begin(a, o[0]);
        issue_pv<T, KL>(o[0], a, smem_addr(v_stage(st)));
        wgmma_wait<0>();
        pin(o[0]);
    }

    store_packed_rows<T, DT>(o, m, l, scale_log2, lane, p, w, row);
#else
    __trap(); /* built without sm_90a: the launcher is only reached on sm_90 (min_cc) */
#endif
}

cudaError_t launch(const struct kl_attention_prefill_params *p, cudaStream_t stream)
{
    bool go;
    cudaError_t rc = launch_checks(p, "v7_wgmma", &go);
    if (!go) return rc;
    return dispatch(p, [&](auto t, auto d) {
        using T = decltype(t);
        constexpr int D = decltype(d)::value;
        using S = shape<D>;
        dim3 grid;
        cudaError_t grc = packed_grid(p, S::kBM, "v7_wgmma", &grid);
        if (grc != cudaSuccess) return grc;
        return launch_kernel_with<prefill_v7<T, D>>(grid, kThreads, S::kSmem, stream, *p,
                                                    kl::prefill::make_fast_div((uint32_t)p->page_size),
                                                    kl::prefill::make_fast_div((uint32_t)(p->num_qo_heads / p->num_kv_heads)));
    });
}

} // namespace

KL_VARIANT(attention_prefill, v7_wgmma, launch, .min_cc = 90,
           .summary = "v6 on warpgroup MMA (wgmma): S and O products per 64-row warpgroup, operands from shared memory");
