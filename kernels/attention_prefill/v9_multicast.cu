/* v9_multicast: v8 with each K/V tile read from L2 once for two CTAs. What changed: CTAs run in
 * clusters of two along the packed tiles. The two are neighbouring 128-row tiles of one kv head and
 * request, so they read the same keys (give or take the last tile under a causal mask). Each CTA's
 * producer issues half of every tile's TMA boxes with .multicast::cluster: a box lands in both CTAs'
 * shared memory at the same offset and is counted on both CTAs' full barriers. A stage may be
 * overwritten only once the consumers of both CTAs have read it, so each consumer warp hands a stage
 * back to its own empty barrier and to its partner's (16 arrivals a phase). The pair walks the larger
 * of its two key-tile counts; a CTA past its own keys, or without rows, only waits for the extra
 * tiles and hands them back. A request's last V tile, whose rows past the keys are zeroed in place,
 * each CTA loads for itself; pages the TMA cannot take are gathered by each CTA (kv_ring.cuh).
 * Why faster: v8's consumers can wait for K and V (the guide's CTA timeline shows whether they do);
 * a tile at page 16 takes 16 boxes of 16 rows per 32 KB. Multicast halves both the boxes each SM's
 * copy engine issues and the bytes read from L2 per FLOP. Predicted: ~520-580 TFLOP/s (0.65-0.72 of
 * the cuBLAS rate) on causal-8k if the copies' issue or L2 is what binds; v8's rate if it is the rate
 * at which an SM's shared memory is filled (each SM still receives every byte).
 * What it costs: each consumer warp's hand-back to the partner is a release at cluster scope, which
 * waits for the warp's earlier memory operations (barrier and membar stalls in the guide), and the
 * pair moves in lock step: a stage is free only once both CTAs' consumers are done with it, so at
 * every tile each CTA waits for the slower of the two. This variant splits K and V between two warps,
 * like kv_ring.cuh, but with its own loop, which looks a tile's pages up after the stage wait where
 * kv_ring.cuh loads them during it.
 * Run alone: build/kernlab bench attention_prefill --variant v9_multicast */
#include "kernels/attention_prefill/kv_ring.cuh"
#include "kernels/variant.h"

namespace {

using namespace kl::mma;
using namespace kl::hopper;

constexpr int kThreads = 384;    /* producer warpgroup + 2 consumer warpgroups, as v8 */
constexpr unsigned kPair = 2;    /* CTAs of a cluster: grid z 2i and 2i + 1 */
[[maybe_unused]] constexpr uint16_t kBoth = 0b11; /* the multicast's CTA mask */
[[maybe_unused]] constexpr int kProducerRegs = 40, kConsumerRegs = 232, kLaunchRegs = 65536 / kThreads / 8 * 8;
static_assert(128 * (kProducerRegs + 2 * kConsumerRegs) <= kThreads * kLaunchRegs, "more registers than the CTA has");

template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    prefill_v9(const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map,
               const kl_attention_prefill_params p, kl::prefill::fast_div page, kl::prefill::fast_div group,
               int box_rows, int tiles)
{
#if KL_SM90A
    using S = ws_shape<D>;
    using QL = typename S::QTile;
    using KL = typename S::KvTile;
    constexpr int BM = S::kBM, BN = S::kBN, NT = BN / 8, DT = D / 8;
    extern __shared__ unsigned char smem_raw[];
    const kv_ring<T, D> sm(smem_raw);
    const uint32_t rank = cluster_rank(), partner = rank ^ 1;

    /* The key tiles packed tile z needs (none past the last tile, where the grid pads to whole pairs,
     * or past a shorter request's rows); the pair walks the larger count. */
    auto tile_at = [&](int z) {
        return packed_tile_at(p, group, blockIdx.x, blockIdx.y, min(z, tiles - 1), tiles, BM);
    };
    auto key_tiles = [&](int z) {
        const packed_tile t = tile_at(z);
        return z < tiles && t.row0 < t.rows ? (t.keys_of(p, t.row0 + BM - 1) + BN - 1) / BN : 0;
    };
    const int z = (int)blockIdx.z, n_mine = key_tiles(z), n = max(n_mine, key_tiles(z ^ 1));
    const packed_tile w = tile_at(z); /* its request and kv head serve a CTA without rows too */
    const int wg = threadIdx.x / 128, lane = threadIdx.x % 32;

    kl_prefill_trace *const trace = traced_cta(p);
    if (threadIdx.x == 0) {
        if (trace) trace->tiles = n_mine, mark(&trace->start);
        sm.init(box_rows > 0, 2 * 8);
    }
    cluster_sync(); /* both CTAs' barriers are ready before a copy or an arrival reaches them */

    if (wg == 0) {
        /* ---- producer: half of every tile's boxes, into both CTAs ---- */
        release_registers_to<kProducerRegs>();
        uint32_t tails = 0;
        if (box_rows == 0) {
            produce_kv(sm, &k_map, &v_map, p, w.r, page, w.kv_head, 0, n, /*v_lag=*/0, 0, tails,
                       trace ? trace->issued : nullptr);
        } else if (threadIdx.x < 64) { /* warp 0 issues the K tiles, warp 1 the V tiles (kv_ring.cuh) */
            const bool v_warp = threadIdx.x >= 32;
            const uint32_t box_bytes = (uint32_t)box_rows * D * 2;
            /* Tile j of one cache: every box announced on this CTA's `bar`; lane b issues box b when it is
             * this CTA's half (b % 2 == rank) of a shared tile, or every box of a tile of its own. */
            auto issue = [&](int j, const CUtensorMap *map, T *tile, uint64_t *bar, bool shared) {
                const int k0 = j * BN, valid = min(BN, w.r.kv_len - k0);
                const int boxes = (valid + box_rows - 1) / box_rows;
                int slot0 = 0;
                if (lane < boxes) {
                    uint32_t pi, off;
                    page.divmod((uint32_t)(k0 + lane * box_rows), pi, off);
                    slot0 = p.kv_indices[w.r.first_page + (int)pi] * (int)p.page_size + (int)off;
                }
                if (lane == 0) mbar_arrive_expect(bar, (uint32_t)boxes * box_bytes);
                __syncwarp();
                if (lane < boxes && (!shared || (uint32_t)lane % kPair == rank))
#pragma unroll
                    for (int blk = 0; blk < D / 64; blk++) {
                        const uint32_t dst = smem_addr(tile) + blk * KL::kBlockBytes + lane * box_rows * 128;
                        if (shared) tma_load_3d_multicast(dst, map, blk * 64, w.kv_head, slot0, bar, kBoth);
                        else tma_load_3d(dst, map, blk * 64, w.kv_head, slot0, bar);
                    }
                return valid;
            };
            for (int j = 0; j < n; j++) {
                const ring_slot at = sm.slot(j);
                if (!v_warp) {
                    mbar_wait(&sm.empty_k[at.stage], at.phase ^ 1); /* both CTAs' consumers are done with it */
                    issue(j, &k_map, sm.k_stage(at.stage), &sm.full_k[at.stage], true);
                    continue;
                }
                mbar_wait(&sm.empty_v[at.stage], at.phase ^ 1);
                if ((j + 1) * BN <= w.r.kv_len) {
                    issue(j, &v_map, sm.v_stage(at.stage), &sm.full_v[at.stage], true);
                } else { /* the request's last tile: each CTA's own, made whole in place (kv_ring.cuh) */
                    publish_last_v(sm, at.stage, issue(j, &v_map, sm.v_stage(at.stage), sm.tail, false), tails);
                }
                if (trace && lane == 0 && j < KL_PREFILL_TRACE_TILES) mark(&trace->issued[j]);
            }
        }
    } else {
        /* ---- consumers: v8's, handing each stage back to both CTAs ---- */
        claim_registers_to<kConsumerRegs>();
        const int c = wg - 1, wg_row0 = w.row0 + 64 * c, row = wg_row0 + 16 * (threadIdx.x / 32 % 4) + lane / 4;
        auto hand_back = [&](uint64_t *bar) {
            if (lane == 0) mbar_arrive(bar), mbar_arrive_cluster(bar, partner);
        };
        auto at = [&](trace_event e, int j) { return threadIdx.x % 128 == 0 ? trace_slot(trace, e, c, j) : nullptr; };
        if (n_mine > 0)
            load_q_rows<T, D>(sm.q, 64 * c, 1 + c, (const T *)p.q, [&](int i) -> const T * {
                return wg_row0 + i < w.rows ? (const T *)p.q + w.row_offset(p, wg_row0 + i) : nullptr;
            });
        const int mask_from = n_mine > 0 ? w.keys_of(p, wg_row0) : 0;
        auto limit = [&](int, int h) { return w.keys_of(p, row + 8 * h); };
        float o[1][DT][4], m[1][2], l[1][2];
        init_rows(o, m, l);
        const float scale_log2 = p.sm_scale * kl::prefill::kLog2e;
        const uint32_t q_wg = smem_addr(sm.q) + 64 * c * 128;
        for (int j = 0; j < n; j++) {
            const ring_slot slot = sm.slot(j);
            mbar_wait(&sm.full_k[slot.stage], slot.phase);
            if (j >= n_mine) { /* the partner's tile: let it land here, then hand it back */
                hand_back(&sm.empty_k[slot.stage]);
                mbar_wait(&sm.full_v[slot.stage], slot.phase);
                hand_back(&sm.empty_v[slot.stage]);
                continue;
            }
            float s[1][NT][4];
            mark(at(kKReady, j));
            wgmma_begin(s[0]);
            issue_qk<T, D, QL, KL>(s[0], q_wg, smem_addr(sm.k_stage(slot.stage)));
            wgmma_wait<0>();
            pin(s[0]);
            mark(at(kSDone, j));
            hand_back(&sm.empty_k[slot.stage]);

            if ((j + 1) * BN > mask_from) mask_tile(s, j * BN, lane, limit);
            online_softmax(s, m, l, o, scale_log2);
            mark(at(kSoftmaxDone, j));

            uint32_t a[BN / 16][4];
            pack_p<T>(a, s[0]);
            mbar_wait(&sm.full_v[slot.stage], slot.phase);
            wgmma_begin(a, o[0]);
            issue_pv<T, KL>(o[0], a, smem_addr(sm.v_stage(slot.stage)));
            wgmma_wait<0>();
            pin(o[0]);
            mark(at(kPvDone, j));
            hand_back(&sm.empty_v[slot.stage]);
        }
        if (n_mine > 0) store_packed_rows<T, DT>(o, m, l, scale_log2, lane, p, w, row);
        if (trace && threadIdx.x % 128 == 0) mark(&trace->end[c]);
    }
    cluster_sync(); /* no CTA leaves while its partner may still copy into it or arrive on its barriers */
#else
    __trap(); /* built without sm_90a: the launcher is only reached on sm_90 (min_cc) */
#endif
}

cudaError_t launch(const struct kl_attention_prefill_params *p, cudaStream_t stream)
{
    bool go;
    cudaError_t rc = launch_checks(p, "v9_multicast", &go);
    if (!go) return rc;
    return dispatch(p, [&](auto t, auto d) {
        using T = decltype(t);
        constexpr int D = decltype(d)::value;
        ws_launch l;
        cudaError_t prc = plan_ws_launch<D>(p, "v9_multicast", &l);
        if (prc != cudaSuccess) return prc;
        const int tiles = (int)l.grid.z;
        l.grid.z = (l.grid.z + kPair - 1) / kPair * kPair; /* whole pairs */
        if (l.grid.z > 65535) {
            fprintf(stderr, "attention_prefill v9_multicast: %u tiles in pairs > 65535 (grid z)\n", l.grid.z);
            return cudaErrorInvalidValue;
        }
        return launch_cluster_kernel_with<prefill_v9<T, D>>(l.grid, kPair, kThreads, ws_shape<D>::kSmem, stream,
                                                            l.k_map, l.v_map, *p, l.page, l.group, l.box_rows, tiles);
    });
}

} // namespace

KL_VARIANT(attention_prefill, v9_multicast, launch, .min_cc = 90,
           .summary = "v8 in clusters of two CTAs sharing K/V: each issues half the TMA boxes, multicast to both",
           .producer_regs = kProducerRegs, .consumer_regs = kConsumerRegs);
