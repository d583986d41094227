/* v17_sum_check: v16 whose consumers check the speculative exponentials by their row sums, not by a
 * row max. v14's speculation forms tile j's exponentials against the max a row already has and keeps
 * it while no logit of the tile exceeds it by more than 2^8 in the exponent; to know that, each thread
 * took the max of its 64 logits (an FMNMX each) and two shuffles a row. But the exponentials are
 * positive and summed anyway for l: a thread whose two partial row sums are at most 2^8 holds no
 * exponential above 2^8, which is the same rule read from the values the softmax already made. So the
 * common path is the exponentials, the sums, two compares and a warp vote; the max is formed (over the
 * exponentials, no shuffle) only where a sum exceeds the bound, and the recomputation of S only where
 * the exact rule fails too, as in v14. P, l and O are v16's wherever a row keeps its max.
 * Why faster (the prediction): the softmax of one warpgroup runs while the other warpgroup's products
 * occupy the tensor cores, and under that load each instruction of the softmax costs more than alone;
 * the turn of a warpgroup is the softmax plus its own products, so fewer softmax instructions shorten
 * every key tile's period. Expect every page-16 workload and page 1 alike to gain, in cycles.
 * Bound: the tensor pipe (two products a warpgroup a tile) once the softmax fits under the other
 * warpgroup's products; the MUFU's exponentials (16 a clock an SM) are the floor of the softmax.
 * Everything else is v16's: the gather of slots at page 1, the TMA boxes at page 16, the turns, the
 * recomputation path, the work walk. The workload that judges it: noncausal-4k, the longest run of
 * whole key tiles.
 * Run alone: build/kernlab bench attention_prefill --variant v17_sum_check */
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
/* Named barriers: 1, 2 publish a warpgroup's Q; 3 + c is consumer warpgroup c's turn to issue products;
 * 5 publishes a slot list to the gathering producer warpgroup. */
enum { kQBarrier = 1, kTurnBarrier = 3, kSlotsBarrier = 5 };

/* The gather's slot lists, after the ring's barriers: the lists of the tiles whose K and whose
 * V are being issued, and the next one being stored. */
constexpr int kSlotLists = 3;
template <int D> constexpr size_t smem_bytes()
{
    return ws_shape<D>::kSmem + kSlotLists * ws_shape<D>::kBN * sizeof(int32_t);
}
static_assert(smem_bytes<64>() <= 227 * 1024 && smem_bytes<128>() <= 227 * 1024 && smem_bytes<256>() <= 227 * 1024,
              "more shared memory than an sm_90 CTA may have");

#if KL_SM90A
/* The gather of one work tile's key tiles 0 .. n_tiles - 1 (request r, kv head kv_head) into the ring
 * as the CTA's tiles it0, it0 + 1, ... by all 128 producer threads: K_j, then V_{j-1} (V trails K by
 * one tile, as the consumers issue S_j beside P_{j-1} V_{j-1}); keys past kv_len are zeros. lists:
 * kSlotLists x BN slots in shared memory, a tile's list holding each of its keys' slot (page number x
 * page_size + position in the page), or -1 past kv_len. issued: as in produce_kv. Each thread's copies
 * of a tile arrive on its full barrier by themselves once landed (cp.async.mbarrier.arrive.noinc), and
 * the consumers fence the bytes for the tensor cores. A thread copies the same 16-byte chunk of its
 * rows in every tile, so its shared-memory addresses are one register plus constants, and a row's
 * source is one multiply-add from its slot. */
template <typename T, int D>
__device__ __forceinline__ void gather_kv(const kv_ring<T, D> &sm, int32_t *lists, const kl_attention_prefill_params &p,
                                          const kl::prefill::request &r, const kl::prefill::fast_div &page, int kv_head,
                                          int n_tiles, uint32_t it0, unsigned long long *issued)
{
    constexpr int BN = kv_ring<T, D>::BN, kRows = BN / 16; /* a thread's rows of a tile: 8 threads a row, 16 a pass */
    using KL = swizzled_tile<BN, D>;
    const unsigned tid = threadIdx.x % 128;
    auto list = [&](int j) { return lists + j % kSlotLists * BN; };
    /* Key tid of tile j: its page number, loaded a tile before its slot is stored, and its position. */
    struct lookup {
        int32_t page_number, position; /* page_number -1: past kv_len */
    };
    auto look_up = [&](int j) {
        const int key = j * BN + (int)tid;
        if (j >= n_tiles || (int)tid >= BN || key >= r.kv_len) return lookup{-1, 0};
        uint32_t pi, position;
        page.divmod((uint32_t)key, pi, position);
        return lookup{p.kv_indices[r.first_page + (int)pi], (int)position};
    };
    auto store_list = [&](int j, lookup k) {
        if ((int)tid < BN) list(j)[tid] = k.page_number < 0 ? -1 : k.page_number * (int32_t)p.page_size + k.position;
    };

    /* this thread's chunk tid % 8 of row tid / 8; its other rows are 16 rows (2048 bytes) apart, its
     * other chunks 64 columns (one BN x 128-byte block) apart */
    const uint32_t slot_bytes = (uint32_t)(p.num_kv_heads * D * sizeof(T));
    const uint32_t chunk_at = 2 * KL::offset((int)(tid / 8), (int)(tid % 8));
    auto gather = [&](int j, const T *cache, T *tile, uint64_t *empty, uint64_t *full) {
        const int32_t *slots = list(j);
        int32_t slot[kRows];
#pragma unroll
        for (int i = 0; i < kRows; i++) slot[i] = slots[tid / 8 + 16 * i];
        const char *chunk = reinterpret_cast<const char *>(cache + kv_head * D) + 16 * (tid % 8);
        const uint32_t dst = smem_addr(tile) + chunk_at;
        mbar_wait(empty, sm.slot(it0 + j).phase ^ 1);
        if ((j + 1) * BN <= r.kv_len) { /* every key of the tile: no row to zero */
#pragma unroll
            for (int i = 0; i < kRows; i++) {
                const char *src = chunk + (uint64_t)(uint32_t)slot[i] * slot_bytes;
#pragma unroll
                for (int k = 0; k < D / 64; k++) cp_async_16(dst + 2048 * i + BN * 128 * k, src + 128 * k, true);
            }
        } else {
#pragma unroll
            for (int i = 0; i < kRows; i++) {
                const bool valid = slot[i] >= 0;
                const char *src = valid ? chunk + (uint64_t)(uint32_t)slot[i] * slot_bytes : chunk;
#pragma unroll
                for (int k = 0; k < D / 64; k++) cp_async_16(dst + 2048 * i + BN * 128 * k, src + 128 * k, valid);
            }
        }
        cp_async_mbar_arrive(full); /* arrives when this thread's copies of the tile have landed */
    };

    /* Tile 0's list, stored once every producer thread is done with the previous work tile's lists;
     * tile 1's page numbers in flight under tile 0's copies. */
    lookup next = look_up(0);
    named_sync(kSlotsBarrier, 128);
    store_list(0, next);
    next = look_up(1);
    named_sync(kSlotsBarrier, 128);
    const T *kc = (const T *)p.k_cache, *vc = (const T *)p.v_cache;
    for (int step = 0; step <= n_tiles; step++) {
        if (step < n_tiles) {
            const ring_slot at = sm.slot(it0 + step);
            gather(step, kc, sm.k_stage(at.stage), &sm.empty_k[at.stage], &sm.full_k[at.stage]);
        }
        if (step >= 1) {
            const ring_slot at = sm.slot(it0 + step - 1);
            gather(step - 1, vc, sm.v_stage(at.stage), &sm.empty_v[at.stage], &sm.full_v[at.stage]);
            if (threadIdx.x == 0 && issued && step - 1 < KL_PREFILL_TRACE_TILES) mark(issued + step - 1);
        }
        if (step + 1 < n_tiles) {
            /* tile step + 1's list replaces tile step - 2's, whose V was issued before the last barrier */
            store_list(step + 1, next);
            next = look_up(step + 2); /* in flight under the next step's waits and copies */
            named_sync(kSlotsBarrier, 128);
        }
    }
}
#endif

/* The online softmax of softmax.cuh's softmax_rows, with the max kept while the tile raises it by at
 * most kLazyLog2 (in units of the exponent, after the scale): alpha is then exactly 1. The 4 threads
 * of a row hold the same m and the same reduced max, so they decide alike. A row that has seen no
 * key (m = -inf) never keeps it: inf - -inf compares false, and -inf - -inf is NaN, also false. */
constexpr float kLazyLog2 = 8.f;
template <bool kWhole, int NT>
__device__ __forceinline__ void lazy_softmax_rows(float (&s)[1][NT][4], float (&m)[1][2], float (&l)[1][2],
                                                  float (&alpha)[1][2], float scale_log2)
{
#pragma unroll
    for (int h = 0; h < 2; h++) {
        float mx = m[0][h];
#pragma unroll
        for (int nt = 0; nt < NT; nt++) mx = fmaxf(mx, fmaxf(s[0][nt][2 * h], s[0][nt][2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const bool keep = (mx - m[0][h]) * scale_log2 <= kLazyLog2;
        const float m_new = keep ? m[0][h] : mx;
        const float ref = !kWhole && m_new == -INFINITY ? 0.f : m_new * scale_log2;
        alpha[0][h] = keep ? 1.f : exp2_fast(fmaf(m[0][h], scale_log2, -ref));
        m[0][h] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 2 * h; e < 2 * h + 2; e++) {
                const float pe = exp2_fast(fmaf(s[0][nt][e], scale_log2, -ref));
                s[0][nt][e] = pe;
                sum += pe;
            }
        l[0][h] = keep ? l[0][h] + sum : l[0][h] * alpha[0][h] + sum;
    }
}

/* Tile j's exponentials against the rows' current max m, formed before the tile's own max is known,
 * and checked after by their sums: a row may keep m while none of its exponentials exceeds 2^kLazyLog2
 * (v13's rule), and the exponentials are positive, so a thread whose two partial row sums are within
 * that bound holds none above it. When every thread of the warp passes, p and l are what
 * lazy_softmax_rows gives and true is returned (alpha is 1), with no max formed at all. When one does
 * not (a row's sum of many large but keepable exponentials, or a row whose max moved), the rule is
 * applied exactly, to the largest exponential each thread holds; if that fails too, false, and s holds
 * nothing usable: the caller recomputes S and runs lazy_softmax_rows. A row that has seen no key
 * (m = -inf) takes 0 for the reference, so that a masked logit (-inf) gives 0 and no -inf - -inf is
 * formed; it may keep its max, as a row sees a prefix of the keys: one that saw none in tile 0 sees
 * none after, and its exponentials stay 0 (kWhole: finite logits, so the guard is left out).
 * Warp-uniform result. */
template <bool kWhole, int NT>
__device__ __forceinline__ bool speculative_softmax_rows(float (&s)[1][NT][4], const float (&m)[1][2],
                                                         float (&l)[1][2], float scale_log2)
{
    constexpr float kBound = (float)(1 << (int)kLazyLog2);
    float ref[2], sum[2] = {0.f, 0.f};
#pragma unroll
    for (int h = 0; h < 2; h++) ref[h] = !kWhole && m[0][h] == -INFINITY ? 0.f : m[0][h] * scale_log2;
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const float pe = exp2_fast(fmaf(s[0][nt][e], scale_log2, -ref[e / 2]));
            s[0][nt][e] = pe;
            sum[e / 2] += pe;
        }
    if (!__all_sync(0xffffffffu, sum[0] <= kBound && sum[1] <= kBound)) {
        float largest = 0.f;
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) largest = fmaxf(largest, s[0][nt][e]);
        if (!__all_sync(0xffffffffu, largest <= kBound)) return false;
    }
    l[0][0] += sum[0], l[0][1] += sum[1];
    return true;
}

/* The work tiles: v6's grid (kv heads fastest, then requests, then packed tiles with the last first)
 * flattened, so that w in order is the longest tiles first. A CTA takes one from each round of
 * gridDim.x, from the front of even rounds and the back of odd ones (a snake): a plain stride would
 * give CTA 0 the longest tile of every round, some 6% more keys than the mean on causal-8k. */
struct walk {
    int kv_heads, batch, tiles;
};

/* kGathered: the K/V come by the cp.async gather (box_rows 0), which the consumers fence; a compile-time
 * choice, so that the TMA's instantiation holds no register for it (the consumers' registers are all
 * taken: one more and ptxas serializes their wgmmas). */
template <typename T, int D, bool kGathered>
__global__ void __launch_bounds__(kThreads, 1)
    prefill_v17(const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map,
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
    /* the warpgroup from a shuffle of lane 0's: a value the compiler knows is warp-uniform */
    const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0), lane = threadIdx.x % 32;
    const int n_works = works.kv_heads * works.batch * works.tiles;
    auto work_at = [&](int round) {
        return round * (int)gridDim.x + (round % 2 ? (int)(gridDim.x - 1 - blockIdx.x) : (int)blockIdx.x);
    };
    auto tile_of = [&](int w) {
        return packed_tile_at(p, group, w % works.kv_heads, w / works.kv_heads % works.batch,
                              w / (works.kv_heads * works.batch), works.tiles, BM);
    };
    auto key_tiles = [&](const packed_tile &t) { return (t.keys_of(p, t.row0 + BM - 1) + BN - 1) / BN; };

    /* The trace (when asked for) follows CTA 0's first work tile with rows and, in the slots after it,
     * its second where all of that one's key tiles fit (traced_work). */
    kl_prefill_trace *const trace = traced_cta(p);
    if (threadIdx.x == 0) {
        if (trace) mark(&trace->start);
        sm.init(!kGathered);
    }
    __syncthreads();

    if (wg == 0) {
        /* ---- producer: every work tile's K/V into the ring, its count running on ---- */
        release_registers_to<kProducerRegs>();
        if (!kGathered && threadIdx.x >= 64) return; /* TMA: warps 0 and 1 issue the copies */
        int32_t *const lists = reinterpret_cast<int32_t *>(sm.tail + 1); /* gather only */
        uint32_t produced = 0, tails = 0;
        int nth_work = 0; /* work tiles with rows so far */
        for (int round = 0; round * (int)gridDim.x < n_works; round++) {
            const int w = work_at(round);
            if (w >= n_works) continue;
            const packed_tile t = tile_of(w);
            if (t.row0 >= t.rows) continue; /* past a shorter request's rows */
            const int n = key_tiles(t);
            kl_prefill_trace *const traced = traced_work(trace, nth_work++, produced, n);
            unsigned long long *const issued = traced ? traced->issued + produced : nullptr;
            if constexpr (kGathered) gather_kv(sm, lists, p, t.r, page, t.kv_head, n, produced, issued);
            else
                produce_kv(sm, &k_map, &v_map, p, t.r, page, t.kv_head, box_rows, n, /*v_lag=*/1, produced, tails,
                           issued);
            produced += n;
        }
        if constexpr (kGathered) {
            cp_async_commit();
            cp_async_wait<0>(); /* the last copies land before their thread leaves */
        }
        return;
    }

    /* ---- consumers ---- */
    claim_registers_to<kConsumerRegs>();
    const int c = wg - 1;
    const float scale_log2 = p.sm_scale * kl::prefill::kLog2e;
    const uint32_t q_tile = smem_addr(sm.q), q_wg = q_tile + 64 * c * 128; /* this warpgroup's 64 rows in block 0 */
    /* Turns: wait for mine before issuing products, then hand the tensor cores to the other warpgroup. */
    auto my_turn = [&] { named_sync(kTurnBarrier + c, 256); };
    auto their_turn = [&] { named_arrive(kTurnBarrier + (1 - c), 256); };
    uint32_t consumed = 0;
    int nth_work = 0; /* work tiles with rows so far */
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
        kl_prefill_trace *const traced = traced_work(threadIdx.x % 128 == 0 ? trace : nullptr, nth_work, consumed, n);
        if (traced && nth_work == 1) mark(&traced->next_begin[c]);
        auto at = [&](trace_event e, int j) { return trace_slot(traced, e, c, (int)consumed + j); };
        if (traced && c == 0) (nth_work == 0 ? traced->tiles : traced->next_tiles) = n;
        load_q_rows<T, D>(sm.q, 64 * c, kQBarrier + c, (const T *)p.q, [&](int i) -> const T * {
            return wg_row0 + i < t.rows ? (const T *)p.q + t.row_offset(p, wg_row0 + i) : nullptr;
        });

        float o[1][DT][4], m[1][2], l[1][2], alpha[1][2], s[1][NT][4];
        uint32_t a[BN / 16][4]; /* P of the tile whose P V is next */
        bool rescale = false;   /* O must be multiplied by alpha before the next P V (warp-uniform) */
        init_rows(o, m, l);
        auto stage = [&](int j) { return sm.slot(consumed + j).stage; };
        auto qk = [&](int j) { issue_qk_advanced<T, D, QL, KL>(s[0], q_wg, smem_addr(sm.k_stage(stage(j)))); };
        auto pv = [&](int j) { issue_pv_advanced<T, KL>(o[0], a, smem_addr(sm.v_stage(stage(j)))); };
        /* tile j's S, once its product is waited for: mask (kMasked tiles only), the speculative
         * exponentials (not on a work tile's first key tile: no row has a max yet), and where the warp's
         * check fails S again, by this warp from shared memory, and v13's softmax; then K handed back */
        auto softmax = [&]<bool kMasked>(int j) {
            pin(s[0]);
            mark(at(kSDone, j));
            constexpr bool kWhole = D <= 128 && !kMasked;
            const bool masked = D > 128 ? j >= whole : kMasked;
            if (masked) mask_tile(s, j * BN, lane, limit);
            rescale = j == 0 || !speculative_softmax_rows<kWhole>(s, m, l, scale_log2);
            if (rescale) {
                if (j > 0) {
                    qk_tile<T, QL, D, 1, NT, KL>(s, q_tile, smem_addr(sm.k_stage(stage(j))),
                                                 64 * c + 16 * (threadIdx.x / 32 % 4), lane);
                    if (masked) mask_tile(s, j * BN, lane, limit);
                }
                lazy_softmax_rows<kWhole>(s, m, l, alpha, scale_log2);
            }
            __syncwarp();
            if (lane == 0) mbar_arrive(&sm.empty_k[stage(j)]);
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
        /* A gathered stage was written by cp.async, through the generic proxy, and no producer thread
         * fenced it: each reader does, once its waits have ordered the copies before it, and before the
         * products that read the stage through the async proxy. The TMA writes through that proxy. */
        auto fence_gathered = [&] {
            if constexpr (kGathered) fence_async_smem();
        };

        /* Key tile j's turn: S_j with P_{j-1} V_{j-1}, tile j's softmax under the latter, then (only after
         * a recomputation) O rescaled by tile j's factors, outside the turn. */
        auto step = [&]<bool kMasked>(int j) {
            wait_k(j);
            wait_v(j - 1);
            fence_gathered();
            my_turn();
            wgmma_begin(s[0]);
            qk(j);
            wgmma_begin(a, o[0]);
            pv(j - 1);
            their_turn();
            wgmma_wait<1>(); /* S_j; P_{j-1} V_{j-1} may still run under the softmax */
            softmax.template operator()<kMasked>(j);
            wgmma_wait<0>();
            pv_done(j - 1);
            if (rescale) rescale_rows(o, alpha); /* O holds tiles < j */
            pack_p<T>(a, s[0]);
        };
        if (n > 0) {
            /* n + 1 turns a warpgroup: S_0; then S_j with P_{j-1} V_{j-1}; then P_{n-1} V_{n-1}. Warpgroup 1
             * gives warpgroup 0 the first turn and skips its last hand-over: n + 1 of each per work tile.
             * O is 0 until the first P V: tile 0's factors need no rescale. */
            if (c == 1) their_turn();
            wait_k(0);
            fence_gathered();
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
            fence_gathered();
            my_turn();
            wgmma_begin(a, o[0]);
            pv(n - 1);
            if (c == 0) their_turn();
            wgmma_wait<0>();
            pv_done(n - 1);
        }
        store_packed_rows<T, DT>(o, m, l, scale_log2, lane, p, t, row);
        if (traced) mark(nth_work == 0 ? &traced->end[c] : &traced->next_end[c]);
        consumed += n;
        nth_work++;
    }
#else
    __trap(); /* built without sm_90a: the launcher is only reached on sm_90 (min_cc) */
#endif
}

cudaError_t launch(const struct kl_attention_prefill_params *p, cudaStream_t stream)
{
    bool go;
    cudaError_t rc = launch_checks(p, "v17_sum_check", &go);
    if (!go) return rc;
    return dispatch(p, [&](auto t, auto d) {
        using T = decltype(t);
        constexpr int D = decltype(d)::value;
        ws_launch l;
        cudaError_t prc = plan_ws_launch<D>(p, "v17_sum_check", &l);
        if (prc != cudaSuccess) return prc;
        const int64_t n_works = (int64_t)l.grid.x * l.grid.y * l.grid.z;
        if (n_works > INT32_MAX) {
            fprintf(stderr, "attention_prefill v17_sum_check: %lld work tiles > 2^31 - 1\n",
                    (long long)n_works);
            return cudaErrorInvalidValue;
        }
        if (l.box_rows == 0 && p->num_pages * p->page_size > INT32_MAX) {
            fprintf(stderr, "attention_prefill v17_sum_check: %lld slots > 2^31 - 1 (the gather lists a slot in 32 bits)\n",
                    (long long)(p->num_pages * p->page_size));
            return cudaErrorInvalidValue;
        }
        const walk works = {(int)l.grid.x, (int)l.grid.y, (int)l.grid.z};
        const int ctas = n_works < sm_count() ? (int)n_works : sm_count(); /* persistent: one CTA per SM at most */
        const dim3 grid((unsigned)ctas);
        if (l.box_rows > 0)
            return launch_kernel_with<prefill_v17<T, D, false>>(grid, kThreads, smem_bytes<D>(), stream, l.k_map,
                                                                l.v_map, *p, l.page, l.group, l.box_rows, works);
        return launch_kernel_with<prefill_v17<T, D, true>>(grid, kThreads, smem_bytes<D>(), stream, l.k_map, l.v_map,
                                                           *p, l.page, l.group, 0, works);
    });
}

} // namespace

KL_VARIANT(attention_prefill, v17_sum_check, launch, .min_cc = 90,
           .summary = "v16 whose speculative softmax is checked by its row sums, with no row max",
           .producer_regs = kProducerRegs, .consumer_regs = kConsumerRegs);
