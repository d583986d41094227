/* v5_bulk_ring: a producer warp streams K/V rows with bulk copies into an mbarrier ring, four
 * consumer warps compute as v4 does, and nothing waits on a block-wide barrier while keys stream.
 *
 * What changed from v4, and why: v4's threads both copy and compute, so each stage ends in a
 * __syncthreads (the copies must have landed for every warp, and every warp must be done with the
 * buffer refilled next) and only two stages fit beside the occupancy it wants: a warp that finishes
 * early waits for the slowest, and the bytes in flight per SM are few against HBM's latency. Here
 * warp 4 of the CTA only copies: for each tile of 16 tokens it issues 32 cp.async.bulk of one row
 * each (lanes 0-15 a K row, lanes 16-31 a V row: a row of one kv head is head_dim contiguous
 * elements, rows of a page num_kv_heads * head_dim apart), counted in bytes on the tile's "full"
 * mbarrier. Tile i lives in ring stage i % STAGES and belongs to consumer warp i % 4; that warp
 * waits on the full barrier, computes S^T = K Q^T and O^T += V^T P^T with mma.sync exactly as v4,
 * and hands the stage back on its "empty" mbarrier (every lane arrives: an arrival releases only
 * its own thread's reads), which the producer waits on before refilling it. So no block-wide
 * barrier runs in the key loop, each warp runs at its own pace, and STAGES (8, or 4
 * for head_dim 256) tiles of every CTA are in flight. The row pages are looked up 4 x 32 tokens
 * ahead into the producer's registers, so no copy waits on a page-table load. Rows are stored
 * head_dim + 8 elements apart (a bulk copy cannot swizzle): the 8 rows one ldmatrix reads then
 * start in 8 different 16-byte bank groups. Rows past the chunk's end copy its last token again
 * (real, finite data whose score is masked), so every tile carries the same byte count.
 * Split-KV as v4 (the plan from the shape alone, so any lengths replay under a CUDA graph; the
 * last CTA of a request merges), and the launch is a programmatic dependent of the previous kernel
 * (PDL): the CTAs start and set up their barriers while that kernel drains.
 * Bound: the read bandwidth. bf16/fp16, head_dim 64/128/256, sm_90a (fp32: cudaErrorNotSupported).
 * Run alone: build/kernlab bench attention_decode --variant v5_bulk_ring */
#include <stdint.h>
#include <stdio.h>

#include "kernels/attention_decode/decode.cuh"
#include "kernels/ptx_sm80.cuh"
#include "kernels/ptx_sm90.cuh"
#include "kernels/variant.h"

/* A CTA: CW consumer warps and one producer warp; a ring of STAGES tiles of 16 tokens. */
template <typename T, int HD, int CW, int STAGES_> struct ring_shape {
    static constexpr int STAGES = STAGES_, THREADS = 32 * (CW + 1), PRODUCER = CW;
    static constexpr int KSTEPS = HD / 16;           /* k-steps of Q.K, m-tiles of V^T */
    static constexpr int PITCH = HD / 8 + 1;         /* 16-byte chunks from one row to the next */
    static constexpr int SLOT = 2 * 16 * PITCH;      /* chunks per stage: 16 K rows, then 16 V rows */
    static constexpr uint32_t ROW_BYTES = HD * sizeof(T);
    static constexpr uint32_t TILE_BYTES = 32 * ROW_BYTES; /* what one stage's 32 copies bring */
    static constexpr int ROW = HD + 2;               /* merged rows: acc, m, l */
    static constexpr int RING = STAGES * SLOT * 16;          /* bytes of the ring */
    static constexpr int SMEM = RING + 2 * STAGES * 8;       /* the ring, then its full and empty barriers */
    static constexpr int AHEAD = 4;                  /* groups of 32 tokens whose pages are looked up early */
    /* Stage s is always consumed by warp s % CW, so its empty barrier counts that warp's 32 lanes. */
    static_assert(STAGES % CW == 0, "each stage belongs to one consumer warp");
    static_assert((CW + 1) * 8 * ROW * 4 <= RING, "the merge reuses the ring");
};

template <typename T, int HD, int CW, int STAGES>
static __global__ void __launch_bounds__(32 * (CW + 1)) decode_v5(const kl_attention_decode_params p, int chunk)
{
#if KL_SM90A
    using S = ring_shape<T, HD, CW, STAGES>;
    extern __shared__ uint4 ring[];
    uint64_t *full = reinterpret_cast<uint64_t *>(ring + S::RING / 16), *empty = full + STAGES; /* after the ring */
    __shared__ bool last;
    /* Set up before waiting on the previous kernel: this overlaps its tail. */
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) kl::ptx::mbar_init(&full[s], 1), kl::ptx::mbar_init(&empty[s], 32);
        kl::ptx::mbar_init_fence();
    }
    __syncthreads(); /* the barriers are initialised before any thread or copy uses them */
    kl::pdl_release(); /* the next kernel may launch; its pdl_wait waits for this grid to end */
    kl::pdl_wait();    /* q, the page table and the workspace may be the previous kernel's output */

    const int group = (int)(p.num_qo_heads / p.num_kv_heads), blocks = (group + 7) / 8;
    const int b = blockIdx.x, g = blockIdx.y / blocks, h0 = g * group + blockIdx.y % blocks * 8;
    const int nh = min(8, g * group + group - h0), n = kl::decode::kv_len(p, b), split = blockIdx.z;
    const int splits = (n + chunk - 1) / chunk;
    if (n == 0) {
        if (split == 0)
            for (int h = 0; h < nh; h++) kl::decode::write_empty<T>(p, b, h0 + h, threadIdx.x, blockDim.x);
        return;
    }
    if (split >= splits) return;
    const int t0 = split * chunk, t1 = min(n, t0 + chunk), tiles = (t1 - t0 + 15) / 16;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, tq = lane % 4;

    float o[S::KSTEPS][4] = {}; /* O^T: m-tile mt holds (d 16 mt + gq (+8), heads 2 tq, 2 tq + 1) */
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0}; /* heads 2 tq and 2 tq + 1 */

    if (warp == S::PRODUCER) {
        /* Lane j of the producer looks up where token t0 + 32 k + j lives (group k: tiles 2k and
         * 2k + 1); a token past t1 takes t1 - 1's row. ahead[k % AHEAD] holds group k's rows from
         * AHEAD groups before its copies, so the page-table loads overlap the ring's waits. */
        const int32_t *pages = p.kv_indices + p.kv_indptr[b];
        const int ps = (int)p.page_size, groups = (tiles + 1) / 2;
        auto row_of = [&](int k) {
            if (32 * k >= t1 - t0) return 0; /* past the chunk: never copied */
            const int t = min(t0 + 32 * k + lane, t1 - 1);
            return pages[t / ps] * ps + t % ps;
        };
        int ahead[S::AHEAD];
#pragma unroll
        for (int k = 0; k < S::AHEAD; k++) ahead[k] = row_of(k);
        /* Lanes 0-15 copy row lane % 16 of the tile's K, lanes 16-31 the same row of its V. */
        const T *cache = static_cast<const T *>(lane < 16 ? p.k_cache : p.v_cache);
        const uint32_t dst = kl::ptx::smem_addr(ring + (lane / 16) * 16 * S::PITCH + (lane % 16) * S::PITCH);
        for (int k0 = 0; k0 < groups; k0 += S::AHEAD) {
#pragma unroll
            for (int kk = 0; kk < S::AHEAD; kk++) {
                const int k = k0 + kk;
                if (k >= groups) break;
                const int rows = ahead[kk];
                ahead[kk] = row_of(k + S::AHEAD);
#pragma unroll
                for (int half = 0; half < 2; half++) {
                    const int i = 2 * k + half, st = i % STAGES;
                    if (i >= tiles) break;
                    const int row = __shfl_sync(0xffffffffu, rows, 16 * half + lane % 16);
                    /* Round i / STAGES of stage st: wait until its consumer handed back round
                     * i / STAGES - 1 (round 0 passes: a fresh barrier's parity-1 phase counts as done). */
                    kl::ptx::mbar_wait(&empty[st], (i / STAGES & 1) ^ 1);
                    if (lane == 0) kl::ptx::mbar_arrive_expect(&full[st], S::TILE_BYTES);
                    __syncwarp();
                    kl::ptx::bulk_load(dst + st * S::SLOT * 16, cache + ((int64_t)row * p.num_kv_heads + g) * HD,
                                       S::ROW_BYTES, &full[st]);
                }
            }
        }
    } else {
        /* Q^T as the B operand of every k-step (d = 16 ks + 2 tq .. , head gq), loaded once. */
        uint32_t qf[S::KSTEPS][2];
        const T *q = static_cast<const T *>(p.q) + ((int64_t)b * p.num_qo_heads + h0 + min(gq, nh - 1)) * HD;
#pragma unroll
        for (int ks = 0; ks < S::KSTEPS; ks++) {
            qf[ks][0] = gq < nh ? *reinterpret_cast<const uint32_t *>(q + 16 * ks + 2 * tq) : 0u;
            qf[ks][1] = gq < nh ? *reinterpret_cast<const uint32_t *>(q + 16 * ks + 8 + 2 * tq) : 0u;
        }
        const float scale = p.sm_scale * 1.44269504089f; /* scores in log2 units */
        const int i8 = lane % 8, mat = lane / 8;
        for (int i = warp; i < tiles; i += CW) {
            const int st = i % STAGES;
            kl::ptx::mbar_wait(&full[st], i / STAGES & 1); /* round i / STAGES of the stage has landed */
            const uint4 *ks = ring + st * S::SLOT, *vs = ks + 16 * S::PITCH;

            /* S^T = K Q^T over the tile's 16 tokens: A = K rows (matrices: tokens 0-7 / 8-15 x
             * dims 0-7 / 8-15 of the k-step, in a0..a3 order). */
            float s[4] = {0, 0, 0, 0}, s_odd[4] = {0, 0, 0, 0}; /* two chains: half the dependent mma latency */
#pragma unroll
            for (int kk = 0; kk < S::KSTEPS; kk++) {
                uint32_t a[4];
                kl::ptx::ldmatrix_x4(a, kl::ptx::smem_addr(ks + (i8 + 8 * (mat & 1)) * S::PITCH + 2 * kk + (mat >> 1)));
                kl::ptx::mma_16816<T>(kk % 2 ? s_odd : s, a, qf[kk][0], qf[kk][1]);
            }
#pragma unroll
            for (int e = 0; e < 4; e++) s[e] += s_odd[e];

            /* Online softmax per head column, as v4: s[0], s[1] are token gq, heads 2tq, 2tq+1;
             * s[2], s[3] token gq + 8. Tokens past t1 (copies of the last one) score -inf. */
            const int tok = t0 + 16 * i + gq;
            const float x0 = tok < t1 ? s[0] * scale : -INFINITY, x1 = tok < t1 ? s[1] * scale : -INFINITY;
            const float x2 = tok + 8 < t1 ? s[2] * scale : -INFINITY, x3 = tok + 8 < t1 ? s[3] * scale : -INFINITY;
            float w[4]; /* the tile's weights p0..p3, from the unrounded scores (decode.cuh) */
            kl::decode::softmax_tile<S::KSTEPS>({x0, x1, x2, x3}, m, l, o, w);
            const float p0 = w[0], p1 = w[1], p2 = w[2], p3 = w[3];

            /* P^T as the B operand (v4 says how movmatrix transposes it), then O^T += V^T P^T with
             * A = V^T by ldmatrix.trans of V rows. */
            const uint32_t pb[2] = {kl::ptx::movmatrix_trans(kl::ptx::pack2<T>(p0, p1)),
                                    kl::ptx::movmatrix_trans(kl::ptx::pack2<T>(p2, p3))};
#pragma unroll
            for (int mt = 0; mt < S::KSTEPS; mt++) {
                uint32_t a[4];
                kl::ptx::ldmatrix_x4_trans(
                    a, kl::ptx::smem_addr(vs + (i8 + 8 * (mat >> 1)) * S::PITCH + 2 * mt + (mat & 1)));
                kl::ptx::mma_16816<T>(o[mt], a, pb[0], pb[1]);
            }
            /* This lane's reads of the stage are done (ldmatrix wrote registers the mmas read).
             * Every lane arrives: an arrival releases only the arriving thread's own reads, so
             * the 32nd arrival, which lets the producer overwrite the stage, comes after all of
             * them. */
            kl::ptx::mbar_arrive(&empty[st]);
        }
    }
    /* Every tile issued was waited for by its consumer, so no copy is in flight: the ring becomes
     * the merge area. The one block-wide barrier of the key loop's lifetime. */
    __syncthreads();

    float *mrg = reinterpret_cast<float *>(ring);
    if (warp < CW) { /* each consumer's state: l summed over the lanes sharing a head first */
        kl::decode::sum_column_l(l);
        float *w0 = mrg + (warp * 8 + 2 * tq) * S::ROW, *w1 = w0 + S::ROW;
#pragma unroll
        for (int mt = 0; mt < S::KSTEPS; mt++) {
            w0[16 * mt + gq] = o[mt][0], w1[16 * mt + gq] = o[mt][1];
            w0[16 * mt + gq + 8] = o[mt][2], w1[16 * mt + gq + 8] = o[mt][3];
        }
        if (gq == 0) w0[HD] = m[0], w0[HD + 1] = l[0], w1[HD] = m[1], w1[HD + 1] = l[1];
    }
    kl::decode::finish_cta<T, HD, CW>(p, mrg, last, b, g, blockIdx.y % blocks, h0, nh, split, splits);
#else
    __trap(); /* built without sm_90a: the launcher is only reached on sm_90 (min_cc) */
#endif
}

template <typename T, int HD, int CW, int STAGES>
static cudaError_t launch_shape(const struct kl_attention_decode_params *p, struct kl_decode_split plan,
                                cudaStream_t stream)
{
    using S = ring_shape<T, HD, CW, STAGES>;
    static bool configured = false; /* once per instantiation: more than 48 KB of shared memory */
    if (!configured) {
        cudaError_t rc =
            cudaFuncSetAttribute(decode_v5<T, HD, CW, STAGES>, cudaFuncAttributeMaxDynamicSharedMemorySize, S::SMEM);
        if (rc != cudaSuccess) return rc;
        configured = true;
    }
    const int64_t blocks = (p->num_qo_heads / p->num_kv_heads + 7) / 8;
    const dim3 grid((unsigned)p->batch, (unsigned)(p->num_kv_heads * blocks), (unsigned)plan.splits);
    /* kl::launch_pdl with the ring's dynamic shared memory: a programmatic dependent launch. */
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {grid, dim3(S::THREADS), (size_t)S::SMEM, stream, attr, 1};
    return cudaLaunchKernelEx(&cfg, decode_v5<T, HD, CW, STAGES>, *p, (int)plan.chunk);
}

/* Eight stages of 16 tokens (two per consumer warp); head_dim 256 rows are twice as long, so four
 * keep the ring near the same bytes and three CTAs per SM. */
template <typename T, int HD>
static cudaError_t launch_hd(const struct kl_attention_decode_params *p, struct kl_decode_split plan, cudaStream_t stream)
{
    if constexpr (HD == 256) return launch_shape<T, HD, 4, 4>(p, plan, stream);
    else return launch_shape<T, HD, 4, 8>(p, plan, stream);
}

static cudaError_t launch(const struct kl_attention_decode_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_attention_decode_check_params(p, "v5_bulk_ring");
    if (rc != cudaSuccess || p->batch == 0) return rc;
    if (p->dtype == KL_F32) return cudaErrorNotSupported;
    if (p->num_pages * p->page_size > INT32_MAX) return cudaErrorNotSupported; /* cache rows are 32-bit */
    /* About three CTAs fit per SM (a ring of ~70 KB each): the plan asks for that many. */
    const struct kl_decode_split plan = kl_attention_decode_split(p, kl_attention_decode_sms(), 3, 64, 128, 2048);
    if (plan.splits > 1 && p->workspace_bytes < kl_attention_decode_workspace_for(p, plan.splits)) {
        fprintf(stderr, "attention_decode v5_bulk_ring: workspace of %zu bytes, %zu needed\n", p->workspace_bytes,
                kl_attention_decode_workspace_for(p, plan.splits));
        return cudaErrorInvalidValue;
    }
    if (p->dtype == KL_BF16) {
        KL_DISPATCH_HEAD_DIM(p->head_dim, HD, return launch_hd<__nv_bfloat16, HD>(p, plan, stream));
    } else {
        KL_DISPATCH_HEAD_DIM(p->head_dim, HD, return launch_hd<__half, HD>(p, plan, stream));
    }
    return cudaErrorNotSupported;
}

KL_VARIANT(attention_decode, v5_bulk_ring, launch, .min_cc = 90,
           .summary = "producer warp of per-row bulk copies into a deep mbarrier ring, consumer warps on mma.sync, "
                      "no block barrier per stage, PDL");
