/* The producer side of the warp-specialized attention_prefill variants (v8 and up): the shared-memory
 * ring of K/V stages with their mbarriers, the producer warpgroup's loop that fills it (bulk tensor
 * copies per page, or a cp.async gather for pages the TMA cannot take), and the host's choice
 * between the two. The consumer side lives in each variant: it is what they differ in.
 *
 * The protocol, per stage st of kStages: full_k[st] / full_v[st] complete when the stage's K / V
 * tile has landed (the TMA-issuing thread's arrival plus the bytes, or every gathering thread's
 * arrival after its copies landed); empty_k[st] / empty_v[st] complete when the 8 consumer warps
 * have read it (each warp's lane 0 arrives after its products' wait). Tiles are numbered across the
 * whole life of a CTA (a persistent CTA goes on counting over its work tiles): tile `it` uses stage
 * it % kStages in its (it / kStages)-th round, whose phase parity the waits name. */
#pragma once

#include <cudaTypedefs.h>
#include <stdio.h>

#include "kernels/attention_prefill/mainloop_sm90.cuh"
#include "kernels/tma_map.cuh"

namespace kl {
namespace hopper {

/* A CTA of the warp-specialized variants: mainloop_sm90.cuh's tiles, and the ring's shared memory. Three
 * stages where they fit, two for head_dim 256 (3 x 64 KB would not fit): a third stage covers a copy
 * whose landing takes longer than a stage's compute; where the copies' rate rather than their latency
 * is what the consumers wait for, two stages run as fast (the guide's CTA timeline shows which). */
template <int D> struct ws_shape : wg_tiles<D> {
    using QTile = typename wg_tiles<D>::QTile;
    using KvTile = typename wg_tiles<D>::KvTile;
    static constexpr int kStages = D <= 128 ? 3 : 2;
    static constexpr size_t kBarriers = (4 * kStages + 1) * 8;
    static constexpr size_t kSmem = 1024 + QTile::kBytes + 2 * kStages * KvTile::kBytes + kBarriers;
    static_assert(kSmem <= 227 * 1024, "more shared memory than an sm_90 CTA may have");
};

/* Where tile `it` of a CTA's life lives and which round of its stage it is. */
struct ring_slot {
    int stage, phase;
};

/* The shared memory of a CTA: Q, the K ring, the V ring (1024-byte aligned tiles), then the barriers. */
template <typename T, int D> struct kv_ring {
    static constexpr int BM = ws_shape<D>::kBM, BN = ws_shape<D>::kBN, kStages = ws_shape<D>::kStages;
    T *q, *k, *v;
    uint64_t *full_k, *full_v, *empty_k, *empty_v, *tail;
    __device__ explicit kv_ring(unsigned char *raw)
    {
        q = reinterpret_cast<T *>(align_1024(raw));
        k = q + BM * D;
        v = k + kStages * BN * D;
        full_k = reinterpret_cast<uint64_t *>(v + kStages * BN * D);
        full_v = full_k + kStages, empty_k = full_v + kStages, empty_v = empty_k + kStages;
        tail = empty_v + kStages;
    }
    __device__ T *k_stage(int st) const { return k + st * BN * D; }
    __device__ T *v_stage(int st) const { return v + st * BN * D; }
    __device__ static ring_slot slot(uint32_t it) { return {(int)(it % kStages), (int)(it / kStages) & 1}; }
#if KL_SM90A
    /* By one thread, then a __syncthreads (or a cluster_sync) before any use. readers: the consumer warps
     * that hand each stage back (16 where the two CTAs of a cluster both read it). */
    __device__ void init(bool by_tma, int readers = 8) const
    {
        for (int st = 0; st < kStages; st++) {
            mbar_init(&full_k[st], by_tma ? 1 : 128);
            mbar_init(&full_v[st], by_tma ? 1 : 128);
            mbar_init(&empty_k[st], readers);
            mbar_init(&empty_v[st], readers);
        }
        mbar_init(tail, 1);
        mbar_init_fence();
    }
#endif
};

#if KL_SM90A

/* Rows from .. BN - 1 of a K or V tile zeroed by the calling warp (its lanes' stores fenced for the
 * tensor cores): the caller's arrival, after a __syncwarp, publishes them. */
template <typename T, int D> __device__ __forceinline__ void zero_rows_from(T *tile, int from)
{
    constexpr int BN = ws_shape<D>::kBN;
    using KL = swizzled_tile<BN, D>;
    uint4 *t16 = reinterpret_cast<uint4 *>(tile);
    for (int i = threadIdx.x % 32; i < (BN - from) * (D / 8); i += 32)
        t16[KL::offset(from + i / (D / 8), i % (D / 8)) / 8] = make_uint4(0, 0, 0, 0);
    fence_async_smem();
}

/* The request's last V tile, by the warp that issued its copy on the tail barrier (tails: the CTA's
 * uses of it so far): the rows valid .. BN - 1 (a page's unused slots, or stale rows of an
 * earlier tile) are zeroed when it has landed, and only then is the stage full. K's rows past its
 * boxes are zeroed before its copy (produce_kv); its rows within the last box past kv_len need nothing:
 * the mask overwrites their logits. */
template <typename T, int D>
__device__ __forceinline__ void publish_last_v(const kv_ring<T, D> &sm, int stage, int valid, uint32_t &tails)
{
    mbar_wait(sm.tail, (int)(tails++ & 1));
    zero_rows_from<T, D>(sm.v_stage(stage), valid);
    __syncwarp();
    if (threadIdx.x % 32 == 0) mbar_arrive(&sm.full_v[stage]);
}

/* The producer warpgroup's work for one work tile: key tiles 0 .. n_tiles - 1 of request r, kv head
 * kv_head, into the ring as the CTA's tiles it0, it0 + 1, ... (the caller advances its count by
 * n_tiles); `tails` counts the CTA's uses of the tail barrier (its parity).
 * box_rows > 0: TMA, a box per box_rows keys and 64-column block. Warp 0 issues the K tiles and warp 1
 * the V tiles, each as soon as its stage is free, with the next tile's page numbers already loaded
 * (the other warps return): one warp issuing both, looking each page up once its stage was free, can
 * fall behind the consumers at page 16 (32 boxes of 2 KB a tile).
 * box_rows 0: all 128 threads gather rows with cp.async, one copy after another, in the order the
 * consumers need them: V trails K by v_lag tiles (0: K_j then V_j, for consumers that multiply
 * P_j V_j right after S_j; 1: K_j then V_{j-1}, for consumers that issue S_j together with
 * P_{j-1} V_{j-1}), so that a copy never waits for a stage that is freed only after a later one.
 * Called by every producer thread. issued: the trace's per-tile times tile j's V copies were all
 * issued, or nullptr. */
template <typename T, int D>
__device__ __forceinline__ void produce_kv(const kv_ring<T, D> &sm, const CUtensorMap *k_map, const CUtensorMap *v_map,
                                           const kl_attention_prefill_params &p, const prefill::request &r,
                                           const prefill::fast_div &page, int kv_head, int box_rows, int n_tiles,
                                           int v_lag, uint32_t it0, uint32_t &tails, unsigned long long *issued)
{
    constexpr int BN = kv_ring<T, D>::BN;
    using KL = swizzled_tile<BN, D>;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    auto issued_at = [&](int j) { return issued && j < KL_PREFILL_TRACE_TILES ? issued + j : nullptr; };
    if (box_rows > 0) {
        if (warp >= 2) return;
        const bool v_warp = warp == 1;
        const uint32_t box_bytes = (uint32_t)box_rows * D * 2; /* all 64-column blocks of box_rows keys */
        /* Lane b's box of tile j: its first slot in the cache (keys j BN + b box_rows .. from their page;
         * box_rows divides the page, or the page the tile), 0 for a lane without a box. */
        auto box_slot = [&](int j) {
            const int key = j * BN + lane * box_rows;
            if (j >= n_tiles || key >= r.kv_len) return 0;
            uint32_t pi, off;
            page.divmod((uint32_t)key, pi, off);
            return p.kv_indices[r.first_page + (int)pi] * (int)p.page_size + (int)off;
        };
        const CUtensorMap *map = v_warp ? v_map : k_map;
        int slot0 = box_slot(0);
        for (int j = 0; j < n_tiles; j++) {
            const int next = box_slot(j + 1); /* its load runs under the wait below */
            const ring_slot at = sm.slot(it0 + j);
            mbar_wait(v_warp ? &sm.empty_v[at.stage] : &sm.empty_k[at.stage], at.phase ^ 1);
            const int valid = min(BN, r.kv_len - j * BN), boxes = (valid + box_rows - 1) / box_rows;
            /* the request's last V tile goes on the tail barrier, then is made whole (publish_last_v) */
            const bool last_v = v_warp && valid < BN;
            T *tile = v_warp ? sm.v_stage(at.stage) : sm.k_stage(at.stage);
            uint64_t *bar = last_v ? sm.tail : v_warp ? &sm.full_v[at.stage] : &sm.full_k[at.stage];
            /* K rows no box writes (a request's last tile) are zeroed before the arrival publishes the
             * stage: a consumer that reads K by ldmatrix (v14's recomputation of S) must not read rows
             * an earlier tile left, handed back; the boxes write the rows below, so no wait is needed */
            if (!v_warp && boxes * box_rows < BN) {
                zero_rows_from<T, D>(tile, boxes * box_rows);
                __syncwarp();
            }
            if (lane == 0) mbar_arrive_expect(bar, (uint32_t)boxes * box_bytes);
            __syncwarp();
            if (lane < boxes)
#pragma unroll
                for (int blk = 0; blk < D / 64; blk++)
                    tma_load_3d(smem_addr(tile) + blk * KL::kBlockBytes + lane * box_rows * 128, map, blk * 64,
                                kv_head, slot0, bar);
            if (last_v) publish_last_v(sm, at.stage, valid, tails);
            if (v_warp && lane == 0) mark(issued_at(j));
            slot0 = next;
        }
        return;
    }
    /* Gather: every producer thread copies its rows of one tile of one cache (zeros past the keys), and
     * publishes that copy once it has issued the next one and the first has landed, so that one copy is
     * in flight while the next is issued. */
    uint64_t *pending = nullptr; /* the full barrier of the copy issued last, not yet published */
    auto gather = [&](int j, const T *cache, T *tile, uint64_t *empty, uint64_t *full) {
        mbar_wait(empty, sm.slot(it0 + j).phase ^ 1);
        copy_rows<KL, BN, D, 128>(tile, threadIdx.x % 128, cache, [&](int row) -> const T * {
            const int key = j * BN + row;
            return key < r.kv_len ? cache + prefill::cache_offset(p, p.kv_indices, r, page, key, kv_head) : nullptr;
        });
        mma::cp_async_commit();
        if (pending) {
            mma::cp_async_wait<1>(); /* the previous copy landed */
            fence_async_smem();
            mbar_arrive(pending);
        }
        pending = full;
    };
    const T *kc = (const T *)p.k_cache, *vc = (const T *)p.v_cache;
    for (int step = 0; step < n_tiles + v_lag; step++) {
        if (step < n_tiles) {
            const ring_slot at = sm.slot(it0 + step);
            gather(step, kc, sm.k_stage(at.stage), &sm.empty_k[at.stage], &sm.full_k[at.stage]);
        }
        if (step >= v_lag) {
            const int j = step - v_lag;
            const ring_slot at = sm.slot(it0 + j);
            gather(j, vc, sm.v_stage(at.stage), &sm.empty_v[at.stage], &sm.full_v[at.stage]);
            if (threadIdx.x == 0) mark(issued_at(j));
        }
    }
    if (pending) {
        mma::cp_async_wait<0>();
        fence_async_smem();
        mbar_arrive(pending);
    }
}

/* A consumer warpgroup's 64 packed rows of Q into its part of the Q tile (row_src(i): row i's source,
 * nullptr for zeros), once every warp of the warpgroup is past the products that read the previous Q
 * (a persistent CTA's next work tile), then published to the tensor cores and the whole warpgroup. */
template <typename T, int D, class RowSrc>
__device__ __forceinline__ void load_q_rows(T *q_tile, int wg_row0, int bar_id, const T *base, RowSrc row_src)
{
    named_sync(bar_id, 128);
    copy_rows<swizzled_tile<ws_shape<D>::kBM, D>, 64, D, 128>(q_tile + wg_row0 * 64, threadIdx.x % 128, base, row_src);
    mma::cp_async_commit();
    mma::cp_async_wait<0>();
    fence_async_smem();
    named_sync(bar_id, 128);
}

#endif /* KL_SM90A */

/* ---- host: the tensor map of a K or V cache ----
 * A box of box_rows slots is one page's rows of one 64-column block (or box_rows rows of a longer
 * page), a block of a swizzled_tile once in shared memory; kernels/tma_map.cuh encodes it. */
inline cudaError_t make_cache_map(CUtensorMap *map, const void *cache, bool bf16, int64_t head_dim,
                                  int64_t kv_heads, int64_t slots, int box_rows)
{
    return kl::encode_cache_map(map, cache, bf16 ? kl::cache_elem::bf16 : kl::cache_elem::f16, head_dim, kv_heads,
                                slots, box_rows, "attention_prefill");
}

/* Host: TMA per page when a page is whole 16-row boxes that tile the key tile (or the tile tiles the
 * page), with the tensor maps of both caches; box_rows 0 (and zeroed maps) otherwise: the gather. */
inline cudaError_t plan_kv_copies(const kl_attention_prefill_params *p, int bn, CUtensorMap *k_map,
                                  CUtensorMap *v_map, int *box_rows)
{
    const int64_t ps = p->page_size, slots = p->num_pages * ps;
    const bool tma = ps % 16 == 0 && (bn % ps == 0 || ps % bn == 0) && slots > 0 && slots <= INT32_MAX;
    *box_rows = tma ? (int)(ps < bn ? ps : bn) : 0;
    memset(k_map, 0, sizeof *k_map), memset(v_map, 0, sizeof *v_map);
    if (!tma) return cudaSuccess;
    const bool bf16 = p->dtype == KL_BF16;
    cudaError_t rc = make_cache_map(k_map, p->k_cache, bf16, p->head_dim, p->num_kv_heads, slots, *box_rows);
    if (rc == cudaSuccess) rc = make_cache_map(v_map, p->v_cache, bf16, p->head_dim, p->num_kv_heads, slots, *box_rows);
    return rc;
}

/* Host: what a warp-specialized launch needs besides its kernel: v6's packed grid, the copies' plan
 * with its tensor maps (plan_kv_copies), and the divisors by the page size and the GQA group. */
struct ws_launch {
    CUtensorMap k_map, v_map;
    dim3 grid;
    int box_rows;
    prefill::fast_div page, group;
};
template <int D> cudaError_t plan_ws_launch(const kl_attention_prefill_params *p, const char *variant, ws_launch *l)
{
    cudaError_t rc = mma::packed_grid(p, ws_shape<D>::kBM, variant, &l->grid);
    if (rc == cudaSuccess) rc = plan_kv_copies(p, ws_shape<D>::kBN, &l->k_map, &l->v_map, &l->box_rows);
    l->page = prefill::make_fast_div((uint32_t)p->page_size);
    l->group = prefill::make_fast_div((uint32_t)(p->num_qo_heads / p->num_kv_heads));
    return rc;
}

} // namespace hopper
} // namespace kl
