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

#include "kernels/attention_prefill/hopper.cuh"

namespace kl {
namespace hopper {

constexpr int kRingStages = 2;

/* A CTA of the warp-specialized variants: hopper.cuh's tiles, and the ring's shared memory. */
template <int D> struct ws_shape : wg_tiles<D> {
    using QTile = typename wg_tiles<D>::QTile;
    using KvTile = typename wg_tiles<D>::KvTile;
    static constexpr size_t kBarriers = (4 * kRingStages + 1) * 8;
    static constexpr size_t kSmem = 1024 + QTile::kBytes + 2 * kRingStages * KvTile::kBytes + kBarriers;
};

/* The shared memory of a CTA: Q, the K ring, the V ring (1024-byte aligned tiles), then the barriers. */
template <typename T, int D> struct kv_ring {
    static constexpr int BM = ws_shape<D>::kBM, BN = ws_shape<D>::kBN;
    T *q, *k, *v;
    uint64_t *full_k, *full_v, *empty_k, *empty_v, *tail;
    __device__ explicit kv_ring(unsigned char *raw)
    {
        q = reinterpret_cast<T *>(align_1024(raw));
        k = q + BM * D;
        v = k + kRingStages * BN * D;
        full_k = reinterpret_cast<uint64_t *>(v + kRingStages * BN * D);
        full_v = full_k + kRingStages, empty_k = full_v + kRingStages, empty_v = empty_k + kRingStages;
        tail = empty_v + kRingStages;
    }
    __device__ T *k_stage(int st) const { return k + st * BN * D; }
    __device__ T *v_stage(int st) const { return v + st * BN * D; }
#if KL_SM90A
    /* By one thread, then a __syncthreads before any use. */
    __device__ void init(bool by_tma) const
    {
        for (int st = 0; st < kRingStages; st++) {
            mbar_init(&full_k[st], by_tma ? 1 : 128);
            mbar_init(&full_v[st], by_tma ? 1 : 128);
            mbar_init(&empty_k[st], 8);
            mbar_init(&empty_v[st], 8);
        }
        mbar_init(tail, 1);
        mbar_init_fence();
    }
#endif
};

/* Where tile `it` of a CTA's life lives and which round of its stage it is. */
struct ring_slot {
    int stage, phase;
    __device__ explicit ring_slot(uint32_t it) : stage((int)(it % kRingStages)), phase((int)(it / kRingStages) & 1) {}
};

#if KL_SM90A

/* The producer warpgroup's work for one work tile: key tiles 0 .. n_tiles - 1 of request r, kv head
 * kv_head, into the ring as the CTA's tiles it0, it0 + 1, ... (the caller advances its count by
 * n_tiles); `tails` counts the CTA's uses of the tail barrier (its parity). box_rows > 0: one warp
 * issues a TMA per box_rows keys and 64-column block (the other warps return); 0: all 128 threads
 * gather rows with cp.async. Called by every producer thread. issued: the trace's per-tile times the
 * copies were issued, or nullptr. */
template <typename T, int D>
__device__ __forceinline__ void produce_kv(const kv_ring<T, D> &sm, const CUtensorMap *k_map, const CUtensorMap *v_map,
                                           const kl_attention_prefill_params &p, const prefill::request &r,
                                           const prefill::fast_div &page, int kv_head, int box_rows, int n_tiles,
                                           uint32_t it0, uint32_t &tails, unsigned long long *issued)
{
    constexpr int BN = kv_ring<T, D>::BN;
    using KL = swizzled_tile<BN, D>;
    const int lane = threadIdx.x % 32;
    auto issued_at = [&](int j) { return issued && threadIdx.x == 0 && j < KL_PREFILL_TRACE_TILES ? issued + j : nullptr; };
    if (box_rows > 0) {
        if (threadIdx.x >= 32) return;
        const uint32_t box_bytes = (uint32_t)box_rows * D * 2; /* all 64-column blocks of box_rows keys */
        for (int j = 0; j < n_tiles; j++) {
            const ring_slot at(it0 + j);
            const int k0 = j * BN, valid = min(BN, r.kv_len - k0);
            const int boxes = (valid + box_rows - 1) / box_rows;
            /* lane b copies box b: keys k0 + b box_rows .., from its page (box_rows divides the page or the page the tile) */
            int slot0 = 0;
            if (lane < boxes) {
                uint32_t pi, off;
                page.divmod((uint32_t)(k0 + lane * box_rows), pi, off);
                slot0 = p.kv_indices[r.first_page + (int)pi] * (int)p.page_size + (int)off;
            }
            auto issue = [&](const CUtensorMap *map, T *tile, uint64_t *bar) {
                if (lane == 0) mbar_arrive_expect(bar, (uint32_t)boxes * box_bytes);
                __syncwarp();
                if (lane < boxes)
#pragma unroll
                    for (int blk = 0; blk < D / 64; blk++)
                        tma_load_3d(smem_addr(tile) + blk * KL::kBlockBytes + lane * box_rows * 128, map, blk * 64,
                                    kv_head, slot0, bar);
            };
            mbar_wait(&sm.empty_k[at.stage], at.phase ^ 1);
            issue(k_map, sm.k_stage(at.stage), &sm.full_k[at.stage]);
            mbar_wait(&sm.empty_v[at.stage], at.phase ^ 1);
            if (valid == BN) {
                issue(v_map, sm.v_stage(at.stage), &sm.full_v[at.stage]);
                mark(issued_at(j));
                continue;
            }
            /* The request's last tile: V lands on the tail barrier, its rows valid .. BN - 1 (a page's unused
             * slots, or stale rows of an earlier tile) are zeroed, and only then is the stage full. K's
             * stale rows need nothing: the mask overwrites their logits. */
            issue(v_map, sm.v_stage(at.stage), sm.tail);
            mbar_wait(sm.tail, (int)(tails++ & 1));
            uint4 *v16 = reinterpret_cast<uint4 *>(sm.v_stage(at.stage));
            for (int i = lane; i < (BN - valid) * (D / 8); i += 32)
                v16[KL::offset(valid + i / (D / 8), i % (D / 8)) / 8] = make_uint4(0, 0, 0, 0);
            fence_async_smem();
            __syncwarp();
            if (lane == 0) mbar_arrive(&sm.full_v[at.stage]);
            mark(issued_at(j));
        }
        return;
    }
    /* Gather: every producer thread copies its rows (zeros past the keys) and arrives a tile later, once
     * they landed, so that one tile's copies are in flight while the next is issued. */
    const T *kc = (const T *)p.k_cache, *vc = (const T *)p.v_cache;
    auto publish = [&](int j) {
        const ring_slot at(it0 + j);
        fence_async_smem();
        mbar_arrive(&sm.full_k[at.stage]);
        mbar_arrive(&sm.full_v[at.stage]);
    };
    for (int j = 0; j < n_tiles; j++) {
        const ring_slot at(it0 + j);
        mbar_wait(&sm.empty_k[at.stage], at.phase ^ 1);
        mbar_wait(&sm.empty_v[at.stage], at.phase ^ 1);
        copy_kv_rows<KL, BN, D, 128>(sm.k_stage(at.stage), sm.v_stage(at.stage), threadIdx.x % 128, kc, vc,
                                     [&](int row) -> int64_t {
                                         const int key = j * BN + row;
                                         if (key >= r.kv_len) return -1;
                                         return prefill::cache_offset(p, p.kv_indices, r, page, key, kv_head);
                                     });
        mma::cp_async_commit();
        mark(issued_at(j));
        if (j > 0) {
            mma::cp_async_wait<1>(); /* tile j - 1's copies landed */
            publish(j - 1);
        }
    }
    if (n_tiles > 0) {
        mma::cp_async_wait<0>();
        publish(n_tiles - 1);
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

} // namespace hopper
} // namespace kl
