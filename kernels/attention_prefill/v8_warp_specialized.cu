/* v8_warp_specialized: v7 with the copies taken off the math warps. What changed: a CTA is 3
 * warpgroups. The first is the producer: two of its warps move the K and the V tiles with bulk tensor
 * copies (TMA, one per page and 64-column block, 128-byte swizzled on the way in) into a ring of shared-
 * memory stages; each stage's K and V have a "full" mbarrier the copy engine completes by bytes and
 * an "empty" one the consumers arrive on when their products have read it. The other two warpgroups
 * are consumers: each waits for a stage, computes its 64 rows (v7's wgmma chains and softmax) and
 * hands the stage back; no __syncthreads in the loop, so one warpgroup's softmax can run under the
 * other's products. setmaxnreg then moves registers from the producer (40 a thread: it only issues
 * copies) to the consumers (232), which hold S, O and P.
 * Pages: page_size a multiple of 16 that divides the tile (or that the tile divides) goes by TMA; any
 * other (page 1: one page a key) is gathered by the whole producer warpgroup with cp.async, each
 * thread fencing its copies for the tensor cores and arriving on the full barrier one copy later.
 * The last tile's V rows past the keys are zeroed by the producer before the consumers see them
 * (a page's unused slots may hold anything, and NaN times a zero probability is NaN).
 * Why faster: the consumers issue no copies and wait on no barrier but their stage's, and the tensor
 * cores see two independent warpgroups. Predicted: ~480-540 TFLOP/s (0.61-0.68 of the cuBLAS rate)
 * on causal-8k; still bound by each warpgroup's softmax running between its own products.
 * Run alone: build/kernlab bench attention_prefill --variant v8_warp_specialized */
#include "kernels/attention_prefill/kv_ring.cuh"
#include "kernels/variant.h"

namespace {

using namespace kl::mma;
using namespace kl::hopper;

constexpr int kThreads = 384; /* producer warpgroup + 2 consumer warpgroups */
/* setmaxnreg only moves registers within what the CTA got at launch: 384 threads x 168 (the most
 * __launch_bounds__(384, 1) allows, 65536 / 384 rounded down to 8). 40 + 2 x 232 = 3 x 168. */
[[maybe_unused]] constexpr int kProducerRegs = 40, kConsumerRegs = 232, kLaunchRegs = 65536 / kThreads / 8 * 8;
static_assert(128 * (kProducerRegs + 2 * kConsumerRegs) <= kThreads * kLaunchRegs, "more registers than the CTA has");

template <typename T, int D>
__global__ void __launch_bounds__(kThreads, 1)
    prefill_v8(const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map,
               const kl_attention_prefill_params p, kl::prefill::fast_div page, kl::prefill::fast_div group,
               int box_rows)
{
#if KL_SM90A
    using S = ws_shape<D>;
    using QL = typename S::QTile;
    using KL = typename S::KvTile;
    constexpr int BM = S::kBM, BN = S::kBN, NT = BN / 8, DT = D / 8;
    extern __shared__ unsigned char smem_raw[];
    const kv_ring<T, D> sm(smem_raw);

    /* The work of a CTA is v6's: kv head blockIdx.x of request blockIdx.y, 128 packed rows (tile_scheduler.cuh). */
    const packed_tile w = packed_tile_at(p, group, blockIdx.x, blockIdx.y, blockIdx.z, gridDim.z, BM);
    if (w.row0 >= w.rows) return; /* the grid covers the longest request */
    const int wg = threadIdx.x / 128, lane = threadIdx.x % 32;
    const int n_tiles = (w.keys_of(p, w.row0 + BM - 1) + BN - 1) / BN;

    kl_prefill_trace *const trace = traced_cta(p);
    if (threadIdx.x == 0) {
        if (trace) trace->tiles = n_tiles, mark(&trace->start);
        sm.init(box_rows > 0);
    }
    __syncthreads();

    if (wg == 0) {
        /* ---- producer: fills the ring (kv_ring.cuh) ---- */
        release_registers_to<kProducerRegs>();
        uint32_t tails = 0;
        produce_kv(sm, &k_map, &v_map, p, w.r, page, w.kv_head, box_rows, n_tiles, /*v_lag=*/0, 0, tails,
                   trace ? trace->issued : nullptr);
        return;
    }

    /* ---- consumers: warpgroup c owns packed rows w.row0 + 64 c .. + 63 ---- */
    claim_registers_to<kConsumerRegs>();
    const int c = wg - 1, wg_row0 = w.row0 + 64 * c, row = wg_row0 + 16 * (threadIdx.x / 32 % 4) + lane / 4;
    const int mask_from = w.keys_of(p, wg_row0);
    auto limit = [&](int, int h) { return w.keys_of(p, row + 8 * h); };
    /* the trace's slot of an event of tile j, kept by the warpgroup's first thread */
    auto at = [&](trace_event e, int j) { return threadIdx.x % 128 == 0 ? trace_slot(trace, e, c, j) : nullptr; };
    load_q_rows<T, D>(sm.q, 64 * c, 1 + c, (const T *)p.q, [&](int i) -> const T * {
        return wg_row0 + i < w.rows ? (const T *)p.q + w.row_offset(p, wg_row0 + i) : nullptr;
    });

    float o[1][DT][4], m[1][2], l[1][2];
    init_rows(o, m, l);
    const float scale_log2 = p.sm_scale * kl::prefill::kLog2e;
    const uint32_t q_wg = smem_addr(sm.q) + 64 * c * 128; /* this warpgroup's 64 rows in block 0 */
    for (int j = 0; j < n_tiles; j++) {
        const ring_slot slot = sm.slot(j);
        float s[1][NT][4];
        mbar_wait(&sm.full_k[slot.stage], slot.phase);
        mark(at(kKReady, j));
        wgmma_begin(s[0]);
        issue_qk<T, D, QL, KL>(s[0], q_wg, smem_addr(sm.k_stage(slot.stage)));
        wgmma_wait<0>();
        pin(s[0]);
        mark(at(kSDone, j));
        if (lane == 0) mbar_arrive(&sm.empty_k[slot.stage]); /* this warp is done reading K */

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
        if (lane == 0) mbar_arrive(&sm.empty_v[slot.stage]);
    }

    store_packed_rows<T, DT>(o, m, l, scale_log2, lane, p, w, row);
    if (trace && threadIdx.x % 128 == 0) mark(&trace->end[c]);
#else
    __trap(); /* built without sm_90a: the launcher is only reached on sm_90 (min_cc) */
#endif
}

cudaError_t launch(const struct kl_attention_prefill_params *p, cudaStream_t stream)
{
    bool go;
    cudaError_t rc = launch_checks(p, "v8_warp_specialized", &go);
    if (!go) return rc;
    return dispatch(p, [&](auto t, auto d) {
        using T = decltype(t);
        constexpr int D = decltype(d)::value;
        ws_launch l;
        cudaError_t prc = plan_ws_launch<D>(p, "v8_warp_specialized", &l);
        if (prc != cudaSuccess) return prc;
        return launch_kernel_with<prefill_v8<T, D>>(l.grid, kThreads, ws_shape<D>::kSmem, stream, l.k_map, l.v_map,
                                                    *p, l.page, l.group, l.box_rows);
    });
}

} // namespace

KL_VARIANT(attention_prefill, v8_warp_specialized, launch, .min_cc = 90,
           .summary = "v7 warp-specialized: a TMA producer warp fills an mbarrier ring, 2 consumer warpgroups compute",
           .producer_regs = kProducerRegs, .consumer_regs = kConsumerRegs);
