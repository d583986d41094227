/* v10_pingpong: v8 with the softmax hidden under the tensor cores, and one CTA per SM (v9's multicast
 * is not carried over: it ran slower than v8). What changed:
 * - Inside a warpgroup (FlashAttention-3's "intra-warpgroup overlap"): tile j's S = Q K_j^T and the
 *   previous tile's O += P_{j-1} V_{j-1} are issued back to back, O rescaled by tile j - 1's factors
 *   in between (while S_j is on the tensor cores); the warpgroup waits for S alone, runs tile j's
 *   softmax while P V is still on the tensor cores, and only then waits for P V. The exponentials of
 *   one tile overlap the other tile's product.
 * - Between the two consumer warpgroups ("ping-pong"): a pair of named barriers lets them issue
 *   their products in turn, so that one's softmax runs while the other's products occupy the tensor
 *   cores, instead of both fighting for them at once and then both idling in their softmax.
 * - Persistent: as many CTAs as SMs, each walking the work tiles (v6's packed tiles, the longest
 *   under a causal mask first) in a snake over rounds of the grid; the producer goes straight on to
 *   the next tile's K/V while the consumers finish a tile, the ring's stages and phases counting on.
 * Why faster: v8 leaves the tensor cores idle while both warpgroups compute exponentials (an H100
 * has 16 MUFU ops a clock per SM for 1024 dense FLOPs of bf16 MMA: the softmax of a 128-key tile
 * costs about half of its two products). Predicted: ~560-620 TFLOP/s (0.71-0.79 of the cuBLAS rate)
 * on causal-8k, FlashAttention-3's figure; bound by issue slots around the products and the register
 * budget (S, P and O live at once).
 * The overlap only pays if K and V are in shared memory when the consumers want them: with one
 * producer warp issuing both, the consumers reach a tile before its V is issued, so kv_ring.cuh
 * issues K and V from two warps. The guide's CTA timeline shows, tile by tile, whether the consumers
 * still wait for copies and how long the softmax phase takes against its exponentials.
 * Run alone: build/kernlab bench attention_prefill --variant v10_pingpong */
#include "kernels/attention_prefill/kv_ring.cuh"
#include "kernels/variant.h"

namespace {

using namespace kl::mma;
using namespace kl::hopper;

constexpr int kThreads = 384; /* producer warpgroup + 2 consumer warpgroups */
/* 72 for the producer (its TMA and gather paths spill below that), 216 hold S, P and O without a
 * spill. setmaxnreg only moves registers within what the CTA got at launch: 384 threads x 168 (v8's
 * kLaunchRegs). */
[[maybe_unused]] constexpr int kProducerRegs = 72, kConsumerRegs = 216, kLaunchRegs = 65536 / kThreads / 8 * 8;
static_assert(128 * (kProducerRegs + 2 * kConsumerRegs) <= kThreads * kLaunchRegs, "more registers than the CTA has");
/* Named barriers: 1, 2 publish a warpgroup's Q; 3 + c is consumer warpgroup c's turn to issue products. */
enum { kQBarrier = 1, kTurnBarrier = 3 };

/* The work tiles: v6's grid (kv heads fastest, then requests, then packed tiles with the last first)
 * flattened, so that w in order is the longest tiles first. A CTA takes one from each round of
 * gridDim.x, from the front of even rounds and the back of odd ones (a snake): a plain stride would
 * give CTA 0 the longest tile of every round, some 6% more keys than the mean on causal-8k. */
struct walk {
    int kv_heads, batch, tiles;
};

template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    prefill_v10(const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map,
                const kl_attention_prefill_params p, kl::prefill::fast_div page, kl::prefill::fast_div group,
                int box_rows, walk works)
{
#if KL_SM90A
    using S = ws_shape<D>;
    using QL = typename S::QTile;
    using KL = typename S::KvTile;
    constexpr int BM = S::kBM, BN = S::kBN, NT = BN / 8, DT = D / 8;
    extern __shared__ unsigned char smem_raw[];
    const kv_ring<T, D> sm(smem_raw);
    const int wg = threadIdx.x / 128, lane = threadIdx.x % 32;
    const int n_works = works.kv_heads * works.batch * works.tiles;
    auto work_at = [&](int round) {
        return round * (int)gridDim.x + (round % 2 ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x);
    };
    auto tile_of = [&](int w) {
        return packed_tile_at(p, group, w % works.kv_heads, w / works.kv_heads % works.batch,
                              w / (works.kv_heads * works.batch), works.tiles, BM);
    };
    auto key_tiles = [&](const packed_tile &t) { return (t.keys_of(p, t.row0 + BM - 1) + BN - 1) / BN; };

    /* The trace (when asked for) follows CTA 0's first work tile with rows. */
    kl_prefill_trace *const trace = traced_cta(p);
    if (threadIdx.x == 0) {
        if (trace) mark(&trace->start);
        sm.init(box_rows > 0);
    }
    __syncthreads();

    if (wg == 0) {
        /* ---- producer: every work tile's K/V into the ring, its count running on ---- */
        release_registers_to<kProducerRegs>();
        if (box_rows > 0 && threadIdx.x >= 64) return; /* TMA: warps 0 and 1 issue the copies */
        uint32_t produced = 0, tails = 0;
        for (int round = 0; round * (int)gridDim.x < n_works; round++) {
            const int w = work_at(round);
            if (w >= n_works) continue;
            const packed_tile t = tile_of(w);
            if (t.row0 >= t.rows) continue; /* past a shorter request's rows */
            const int n = key_tiles(t);
            produce_kv(sm, &k_map, &v_map, p, t.r, page, t.kv_head, box_rows, n, /*v_lag=*/1, produced, tails,
                       trace && produced == 0 ? trace->issued : nullptr);
            produced += n;
        }
        return;
    }

    /* ---- consumers ---- */
    claim_registers_to<kConsumerRegs>();
    const int c = wg - 1;
    const float scale_log2 = p.sm_scale * kl::prefill::kLog2e;
    const uint32_t q_wg = smem_addr(sm.q) + 64 * c * 128; /* this warpgroup's 64 rows in block 0 */
    /* Turns: wait for mine before issuing products, then hand the tensor cores to the other warpgroup. */
    auto my_turn = [&] { named_sync(kTurnBarrier + c, 256); };
    auto their_turn = [&] { named_arrive(kTurnBarrier + (1 - c), 256); };
    uint32_t consumed = 0;
    for (int round = 0; round * (int)gridDim.x < n_works; round++) {
        const int w = work_at(round);
        if (w >= n_works) continue;
        const packed_tile t = tile_of(w);
        if (t.row0 >= t.rows) continue;
        const int n = key_tiles(t);
        const int wg_row0 = t.row0 + 64 * c, row = wg_row0 + 16 * (threadIdx.x / 32 % 4) + lane / 4;
        const int mask_from = t.keys_of(p, wg_row0);
        auto limit = [&](int, int h) { return t.keys_of(p, row + 8 * h); };
        kl_prefill_trace *const traced = consumed == 0 && threadIdx.x % 128 == 0 ? trace : nullptr;
        auto at = [&](trace_event e, int j) { return trace_slot(traced, e, c, j); };
        if (traced && c == 0) traced->tiles = n;
        load_q_rows<T, D>(sm.q, 64 * c, kQBarrier + c, (const T *)p.q, [&](int i) -> const T * {
            return wg_row0 + i < t.rows ? (const T *)p.q + t.row_offset(p, wg_row0 + i) : nullptr;
        });

        float o[1][DT][4], m[1][2], l[1][2], alpha[1][2], s[1][NT][4];
        uint32_t a[BN / 16][4]; /* P of the tile whose P V is next */
        init_rows(o, m, l);
        auto stage = [&](int j) { return sm.slot(consumed + j).stage; };
        auto qk = [&](int j) { issue_qk<T, D, QL, KL>(s[0], q_wg, smem_addr(sm.k_stage(stage(j)))); };
        auto pv = [&](int j) { issue_pv<T, KL>(o[0], a, smem_addr(sm.v_stage(stage(j)))); };
        auto softmax = [&](int j) { /* tile j's S, once its product is waited for: mask, exponentials, K handed back */
            pin(s[0]);
            mark(at(kSDone, j));
            if (lane == 0) mbar_arrive(&sm.empty_k[stage(j)]);
            if ((j + 1) * BN > mask_from) mask_tile(s, j * BN, lane, limit);
            softmax_rows(s, m, l, alpha, scale_log2);
            mark(at(kSoftmaxDone, j));
        };
        auto pv_done = [&](int j) { /* tile j's P V waited for: V handed back */
            pin(o[0]);
            mark(at(kPvDone, j));
            if (lane == 0) mbar_arrive(&sm.empty_v[stage(j)]);
        };
        auto wait_k = [&](int j) {
            const ring_slot slot = sm.slot(consumed + j);
            mbar_wait(&sm.full_k[slot.stage], slot.phase);
            mark(at(kKReady, j));
        };
        auto wait_v = [&](int j) {
            const ring_slot slot = sm.slot(consumed + j);
            mbar_wait(&sm.full_v[slot.stage], slot.phase);
        };

        if (n > 0) {
            /* n + 1 turns a warpgroup: S_0; then S_j with P_{j-1} V_{j-1}; then P_{n-1} V_{n-1}. Warpgroup 1
             * gives warpgroup 0 the first turn and skips its last hand-over: n + 1 of each per work tile. */
            if (c == 1) their_turn();
            wait_k(0);
            my_turn();
            wgmma_begin(s[0]);
            qk(0);
            their_turn();
            wgmma_wait<0>();
            softmax(0);
            pack_p<T>(a, s[0]);
            for (int j = 1; j < n; j++) {
                wait_k(j);
                wait_v(j - 1);
                my_turn();
                wgmma_begin(s[0]);
                qk(j);
                rescale_rows(o, alpha); /* by tile j - 1's softmax, while S_j runs */
                wgmma_begin(a, o[0]);
                pv(j - 1);
                their_turn();
                wgmma_wait<1>(); /* S_j; P_{j-1} V_{j-1} may still run under the softmax */
                softmax(j);
                wgmma_wait<0>();
                pv_done(j - 1);
                pack_p<T>(a, s[0]);
            }
            wait_v(n - 1);
            my_turn();
            rescale_rows(o, alpha);
            wgmma_begin(a, o[0]);
            pv(n - 1);
            if (c == 0) their_turn();
            wgmma_wait<0>();
            pv_done(n - 1);
        }
        store_packed_rows<T, DT>(o, m, l, scale_log2, lane, p, t, row);
        if (traced) mark(&traced->end[c]);
        consumed += n;
    }
#else
    __trap(); /* built without sm_90a: the launcher is only reached on sm_90 (min_cc) */
#endif
}

cudaError_t launch(const struct kl_attention_prefill_params *p, cudaStream_t stream)
{
    bool go;
    cudaError_t rc = launch_checks(p, "v10_pingpong", &go);
    if (!go) return rc;
    return dispatch(p, [&](auto t, auto d) {
        using T = decltype(t);
        constexpr int D = decltype(d)::value;
        ws_launch l;
        cudaError_t prc = plan_ws_launch<D>(p, "v10_pingpong", &l);
        if (prc != cudaSuccess) return prc;
        const int64_t n_works = (int64_t)l.grid.x * l.grid.y * l.grid.z;
        if (n_works > INT32_MAX) {
            fprintf(stderr, "attention_prefill v10_pingpong: %lld work tiles > 2^31 - 1\n", (long long)n_works);
            return cudaErrorInvalidValue;
        }
        const walk works = {(int)l.grid.x, (int)l.grid.y, (int)l.grid.z};
        const int ctas = n_works < sm_count() ? (int)n_works : sm_count(); /* persistent: one CTA per SM at most */
        return launch_kernel_with<prefill_v10<T, D>>(dim3((unsigned)ctas), kThreads, ws_shape<D>::kSmem, stream,
                                                     l.k_map, l.v_map, *p, l.page, l.group, l.box_rows, works);
    });
}

} // namespace

KL_VARIANT(attention_prefill, v10_pingpong, launch, .min_cc = 90,
           .summary = "v8 with each tile's softmax under the previous P V, two warpgroups taking turns, one CTA per SM",
           .producer_regs = kProducerRegs, .consumer_regs = kConsumerRegs);
