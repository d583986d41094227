/* v11_diag_mask_exp2: v10 with the causal mask and the kv_len tail compiled only into the key tiles that
 * need them. What changed:
 * - A warpgroup's key tiles split, at launch-uniform boundaries, into the whole tiles (every one of its
 *   64 rows sees every key: tiles 0 .. keys_of(first row) / BN - 1) and the masked rest (the tiles
 *   the diagonal, or the end of the request's keys, crosses). The main loop runs twice, each copy
 *   compiled for one kind: the whole tiles carry no mask code, no per-tile test, and no guard for a
 *   row that has seen no key (their max is finite, softmax.cuh's kWhole); only the masked copy has
 *   the compare-and-select per element. FlashAttention-3 splits its n_block loop the same way.
 *   Head_dim 256 keeps v10's single loop with its per-tile test: O alone holds 128 registers there,
 *   and a second copy of the loop or of the softmax makes ptxas spill.
 * - The scale stays folded into the exponent as in v10 (softmax.cuh): the logits are kept raw, the
 *   max is tracked on them, and p = 2^(s c - m c) with c = sm_scale log2(e) is one FFMA and one
 *   MUFU.EX2 per element; the max of scaled logits is never formed.
 * Why faster: the card throttles its clock under these kernels, so the instructions around the
 * products, not the products, set the pace; on causal-8k a warpgroup's masked tiles are 1 or 2 of
 * its ~32 a work tile on average, and v10 paid a test and a branch around the softmax of every tile
 * and the empty-row guard on every row. The per-element work of the whole tiles (FMNMX, FFMA, MUFU,
 * FADD, half an F2FP) does not change: the gain is in the loop's control and per-row instructions,
 * a few percent of the softmax phase at most. Same bound as v10: issue slots around the products.
 * Run alone: build/kernlab bench attention_prefill --variant v11_diag_mask_exp2 */
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
    prefill_v11(const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map,
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
        /* Tiles 0 .. whole - 1 are seen whole by every row of this warpgroup (mask_from is the fewest
         * keys any of them sees, the kv_len tail included); the rest need the mask. */
        const int whole = min(n, mask_from / BN);
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
        /* tile j's S, once its product is waited for: mask (kMasked tiles only), exponentials, K handed back */
        auto softmax = [&]<bool kMasked>(int j) {
            pin(s[0]);
            mark(at(kSDone, j));
            if (lane == 0) mbar_arrive(&sm.empty_k[stage(j)]);
            if constexpr (D > 128) { /* see the loop below */
                if (j >= whole) mask_tile(s, j * BN, lane, limit);
                softmax_rows(s, m, l, alpha, scale_log2);
            } else if constexpr (kMasked) {
                mask_tile(s, j * BN, lane, limit);
                softmax_rows(s, m, l, alpha, scale_log2);
            } else softmax_rows</*kWhole=*/true>(s, m, l, alpha, scale_log2);
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

        /* Key tile j's turn: S_j with P_{j-1} V_{j-1}, tile j's softmax under the latter. */
        auto step = [&]<bool kMasked>(int j) {
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
            softmax.template operator()<kMasked>(j);
            wgmma_wait<0>();
            pv_done(j - 1);
            pack_p<T>(a, s[0]);
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
            if (D <= 128 && whole > 0) softmax.template operator()<false>(0);
            else softmax.template operator()<true>(0);
            pack_p<T>(a, s[0]);
            if constexpr (D <= 128) {
                for (int j = 1; j < whole; j++) step.template operator()<false>(j);
                for (int j = max(1, whole); j < n; j++) step.template operator()<true>(j);
            } else {
                /* head_dim 256: O alone holds 128 registers, and two copies of the loop (or of the
                 * softmax) spill: one loop that tests each tile, v10's shape. */
                for (int j = 1; j < n; j++) step.template operator()<true>(j);
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
    cudaError_t rc = launch_checks(p, "v11_diag_mask_exp2", &go);
    if (!go) return rc;
    return dispatch(p, [&](auto t, auto d) {
        using T = decltype(t);
        constexpr int D = decltype(d)::value;
        ws_launch l;
        cudaError_t prc = plan_ws_launch<D>(p, "v11_diag_mask_exp2", &l);
        if (prc != cudaSuccess) return prc;
        const int64_t n_works = (int64_t)l.grid.x * l.grid.y * l.grid.z;
        if (n_works > INT32_MAX) {
            fprintf(stderr, "attention_prefill v11_diag_mask_exp2: %lld work tiles > 2^31 - 1\n", (long long)n_works);
            return cudaErrorInvalidValue;
        }
        const walk works = {(int)l.grid.x, (int)l.grid.y, (int)l.grid.z};
        const int ctas = n_works < sm_count() ? (int)n_works : sm_count(); /* persistent: one CTA per SM at most */
        return launch_kernel_with<prefill_v11<T, D>>(dim3((unsigned)ctas), kThreads, ws_shape<D>::kSmem, stream,
                                                     l.k_map, l.v_map, *p, l.page, l.group, l.box_rows, works);
    });
}

} // namespace

KL_VARIANT(attention_prefill, v11_diag_mask_exp2, launch, .min_cc = 90,
           .summary = "v10 with the mask compiled only into the key tiles the diagonal or the kv_len tail crosses",
           .producer_regs = kProducerRegs, .consumer_regs = kConsumerRegs);
