/* v6_bulk_ring: the fused RoPE + e4m3 quantize + store moved by bulk copies: a producer warp brings each token's
 * whole qkv row, and its cos/sin row, into a ring of shared-memory stages; consumer warps rotate q in place and
 * send it back out with one bulk copy, and quantize and store k and v.
 * From v5: a v5 block issues its loads, then waits for two dependent trips (the position, then the cos/sin
 * row it addresses) and a barrier before it computes and exits, so an SM has one round of loads in flight
 * part of the time, and its q stores (most of the bytes written) are 16 bytes a thread. A token's inputs are two
 * contiguous runs (its qkv row: q, k and v of every head, and its table row), and its q out is one more
 * (q_out's row), so one thread can move each with a single cp.async.bulk, as far ahead as the ring is deep.
 * Work mapping: one persistent block an SM (more where the ring is small), block b taking tokens b, b + grid,
 * b + 2 grid, ... one a stage. The producer (the last warp) holds in its lanes the positions and slots of the
 * next 32 tokens, loaded 32 tokens before their copies; for each token it waits for the stage to come back
 * (empty barrier), writes the token's slot and whether it rotates beside the stage, and lane 0 issues the qkv
 * row (L2 evict-first: read once) and, where the position is inside the table, the cos/sin row, counted in
 * bytes on the stage's full barrier. Consumer warp w takes the block's tokens w, w + 8, ... (stages w and
 * w + 8 in turn, so one is in flight while it works on the other), each token's pairs 32 at a time
 * (fused_pairs.cuh: a lane owns two chunks of a head), with v5's arithmetic operation for operation: q
 * written back over its own chunks in the stage, k and v as e4m3 to their cache rows (8-byte stores). Then
 * the warp fences its stores to the async proxy, lane 0 copies the token's q (the first q_heads x head_dim
 * elements of the stage) to q_out with one bulk store and waits until the copy has read the stage, and every
 * lane arrives on the empty barrier. The scales' reciprocals are computed once a block into shared memory.
 * Few tokens (a decode batch, up to kSmallBatch) or shapes v5 takes on another path (rows not whole 16-byte
 * chunks, unaligned, a rotary span past v5's table), a ring that does not fit, and below sm_90: v5's launcher.
 * Bound: DRAM bandwidth on qkv read + q written + K/V bytes written (lab/store/perf.c's fused model).
 * Run alone: build/kernlab bench store --variant v6_bulk_ring --workload fused-prefill-8k */
#include <stdio.h>

#include "kernels/common.cuh"
#include "kernels/ptx_sm90.cuh"
#include "kernels/store/fused_pairs.cuh"
#include "kernels/store/store.h"
#include "kernels/variant.h"

constexpr int kConsumerWarps = 8;                   /* each takes every 8th token of the block, all its pairs */
constexpr int kThreads = 32 * (kConsumerWarps + 1); /* the last warp produces */
constexpr int kMaxStages = 2 * kConsumerWarps;      /* warp w owns stages w and w + 8 (or w alone: 8 stages) */
constexpr int kMaxSmem = 220 * 1024;                /* a ring of 8 stages past this: v5 */
constexpr int64_t kSmallBatch = 256;  /* tokens up to which v5 (and v4's decode path) run the call */
constexpr int kMaxRotary = 256;       /* v5's table row: longer spans take v5's launcher, which hands them on */

static __device__ unsigned bad_slot; /* see store.h: set when a slot >= num_slots is skipped */

/* The tests' mutants (lab/store/mutants.cu on a GPU, lab/store/emulate/mutants.py on the CPU emulator) build
 * this file with KL_STORE_V6_BUG 1: a block's step count rounded down, so the last round of tokens is dropped
 * wherever the count is not a multiple of the grid. 0 here. */
#ifndef KL_STORE_V6_BUG
#define KL_STORE_V6_BUG 0
#endif

/* Shared memory: `stages` stages of stage_bytes (a token's qkv row, row_bytes, then its cos/sin row), then the
 * reciprocals of the k scales and of the v scales (2 x kv_heads floats). */
template <typename T, bool NEOX>
static __global__ void __launch_bounds__(kThreads)
    rope_quant_store_v6(const T *__restrict__ qkv, T *q_out, const int64_t *__restrict__ positions,
                        const int64_t *__restrict__ slots, const float *__restrict__ cos_sin,
                        const float *__restrict__ k_scale, const float *__restrict__ v_scale, uint8_t *k_cache,
                        uint8_t *v_cache, int64_t num_tokens, int q_heads, int kv_heads, int head_dim, int rotary_dim,
                        int64_t max_pos, int64_t num_slots, int m, int rest, int pairs, int stages, uint32_t row_bytes,
                        uint32_t stage_bytes)
{
#if KL_SM90A
    static_assert(sizeof(T) == 2, "a chunk is 8 elements of 16 bits: one 16-byte word");
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ uint64_t full[kMaxStages], empty[kMaxStages];
    __shared__ int64_t stage_slot[kMaxStages];
    __shared__ bool stage_rotates[kMaxStages];
    float *inv_scale = reinterpret_cast<float *>(smem + (size_t)stages * stage_bytes); /* k heads, then v heads */
    const int heads = q_heads + 2 * kv_heads, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t steps = blockIdx.x >= num_tokens ? 0
                          : KL_STORE_V6_BUG == 1   ? (num_tokens - blockIdx.x) / gridDim.x
                                                   : (num_tokens - 1 - blockIdx.x) / gridDim.x + 1;
    auto token = [&](int64_t k) { return (int64_t)blockIdx.x + k * gridDim.x; }; /* the token of step k */

    for (int e = threadIdx.x; e < 2 * kv_heads; e += blockDim.x)
        inv_scale[e] = __frcp_rn(e < kv_heads ? __ldg(k_scale + e) : __ldg(v_scale + e - kv_heads));
    if (threadIdx.x == 0) {
        for (int s = 0; s < stages; s++)
            kl::ptx::mbar_init(&full[s], 1), kl::ptx::mbar_init(&empty[s], 32);
        kl::ptx::mbar_init_fence();
    }
    __syncthreads(); /* the barriers and scales are set before any thread or copy uses them */
    const uint32_t ring = kl::ptx::smem_addr(smem);

    if (warp == kConsumerWarps) {
        /* ---- producer: lane j holds step k0 + j's position and slot, loaded a group of 32 ahead ---- */
        const uint64_t policy = kl::ptx::l2_evict_first_policy();
        int64_t pos_next = -1, slot_next = -1;
        auto fetch = [&](int64_t k) {
            pos_next = k < steps ? __ldg(positions + token(k)) : -1;
            slot_next = k < steps ? __ldg(slots + token(k)) : -1;
        };
        fetch(lane);
        for (int64_t k0 = 0; k0 < steps; k0 += 32) {
            const int64_t pos_group = pos_next, slot_group = slot_next;
            fetch(k0 + 32 + lane); /* under this group's copies */
            const int n = (int)(steps - k0 < 32 ? steps - k0 : 32);
            for (int kk = 0; kk < n; kk++) {
                const int64_t k = k0 + kk, pos = __shfl_sync(0xffffffffu, pos_group, kk);
                const int64_t slot = __shfl_sync(0xffffffffu, slot_group, kk);
                const int st = (int)(k % stages);
                /* Round k / stages of stage st: wait until the consumers handed back the round before
                 * (round 0 passes: a fresh barrier's parity-1 phase counts as done). */
                kl::ptx::mbar_wait(&empty[st], (int)(k / stages & 1) ^ 1);
                if (lane == 0) {
                    const bool rotates = rotary_dim > 0 && pos >= 0 && pos < max_pos; /* else left as it is */
                    stage_slot[st] = slot, stage_rotates[st] = rotates; /* published by the arrival below */
                    const uint32_t at = ring + (uint32_t)st * stage_bytes;
                    kl::ptx::mbar_arrive_expect(&full[st], row_bytes + (rotates ? 4u * rotary_dim : 0u));
                    kl::ptx::bulk_load_hint(at, qkv + token(k) * heads * head_dim, row_bytes, &full[st], policy);
                    if (rotates)
                        kl::ptx::bulk_load(at + row_bytes, cos_sin + pos * rotary_dim, 4u * rotary_dim, &full[st]);
                }
                __syncwarp();
            }
        }
        return;
    }

    /* ---- consumers: pair j of a token is pair j % pairs of head j / pairs ---- */
    const int chunks = head_dim / 8, half = rotary_dim / 2, total = heads * pairs;
    for (int64_t k = warp; k < steps; k += kConsumerWarps) {
        const int st = (int)(k % stages);
        kl::ptx::mbar_wait(&full[st], (int)(k / stages & 1));
        const int64_t t = token(k), slot = stage_slot[st];
        const bool rotates = stage_rotates[st], stores_kv = slot >= 0 && slot < num_slots;
        if (slot >= num_slots && lane == 0) bad_slot = 1; /* skipped, as a negative slot is */
        T *row = reinterpret_cast<T *>(smem + (size_t)st * stage_bytes);
        const float *table = reinterpret_cast<const float *>(smem + (size_t)st * stage_bytes + row_bytes);
        for (int j = lane; j < total; j += 32) {
            const int h = j / pairs, i = j - h * pairs;
            const bool is_q = h < q_heads, is_v = h >= q_heads + kv_heads;
            if (!is_q && !stores_kv) continue; /* a skipped token's q is still rotated and written */
            const int kh = is_v ? h - q_heads - kv_heads : h - q_heads; /* the kv head of a k or v pair */
            const kl::store_fused::pair_chunks pc =
                kl::store_fused::chunks_of<NEOX>(i, m, rest, chunks, rotary_dim, !is_v);
            const bool rot = rotates && pc.rot_a;
            T *x = row + h * head_dim;
            const uint4 wa = *reinterpret_cast<const uint4 *>(x + 8 * pc.a);
            const uint4 wb = pc.has_b ? *reinterpret_cast<const uint4 *>(x + 8 * pc.b) : wa;
            float c[8], s[8];
            if (rot) kl::store_fused::cos_sin_of<NEOX>(table, half, pc, c, s);
            /* q rotated in place, then stored from the stage with one bulk copy (below) */
            T *q_row = is_q ? x : nullptr;
            uint8_t *cache_row =
                is_q ? nullptr : (is_v ? v_cache : k_cache) + (slot * kv_heads + kh) * (int64_t)head_dim;
            kl::store_fused::write_pair<T, NEOX>(wa, wb, pc, rot, c, s, q_row, cache_row,
                                                 is_q ? 1.0f : inv_scale[is_v ? kv_heads + kh : kh]);
        }
        /* The token's rotated q, in place at the start of the stage, to q_out with one bulk copy: each lane's
         * stores made visible to the copy (fence), the warp met, lane 0 issues it and waits until it has read
         * the stage. */
        kl::ptx::fence_async_smem();
        __syncwarp();
        if (lane == 0) {
            kl::ptx::bulk_store(q_out + t * q_heads * (int64_t)head_dim, ring + (uint32_t)st * stage_bytes,
                                2u * q_heads * head_dim);
            kl::ptx::bulk_commit();
            kl::ptx::bulk_wait_read<0>();
        }
        __syncwarp();
        /* This lane's reads of the stage are done: every lane arrives, so the last arrival, which hands the
         * stage to the next copy, comes after all of them. */
        kl::ptx::mbar_arrive(&empty[st]);
    }
    if (lane == 0) kl::ptx::bulk_wait_all(); /* q_out written before the block ends */
#else
    __trap(); /* built without sm_90a: the launcher only runs this kernel on sm_90 */
#endif
}

/* The ring for p: a stage is the qkv row and the table row; two stages a consumer warp where they fit kMaxSmem,
 * else one (each warp then waits for its next copy), else smem 0 (v5 runs the call). */
struct ring_plan {
    uint32_t row_bytes, stage_bytes;
    int stages;
    size_t smem;
};
static ring_plan plan_of(const struct kl_store_params *p)
{
    ring_plan r;
    const int64_t row = (p->num_qo_heads + 2 * p->num_kv_heads) * p->head_dim * 2, stage = row + 4 * p->rotary_dim;
    r.row_bytes = (uint32_t)row, r.stage_bytes = (uint32_t)stage;
    r.stages = 2 * kConsumerWarps * stage + 8 * p->num_kv_heads <= kMaxSmem ? 2 * kConsumerWarps : kConsumerWarps;
    const int64_t smem = r.stages * stage + 8 * p->num_kv_heads;
    r.smem = smem <= kMaxSmem ? (size_t)smem : 0;
    return r;
}

template <typename T, bool NEOX>
static cudaError_t launch_k(const struct kl_store_params *p, const ring_plan &r, int sms, cudaStream_t stream)
{
    auto kernel = rope_quant_store_v6<T, NEOX>;
    static size_t allowed = 0; /* per instantiation: the dynamic shared memory the function may take */
    cudaError_t rc;
    if (r.smem > allowed) {
        if ((rc = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)r.smem)) !=
            cudaSuccess)
            return rc;
        allowed = r.smem;
    }
    int per_sm = 0;
    if ((rc = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, r.smem)) != cudaSuccess)
        return rc;
    const int64_t cap = (int64_t)(per_sm > 0 ? per_sm : 1) * sms;
    const unsigned blocks = (unsigned)(p->num_tokens < cap ? p->num_tokens : cap);
    const int chunks = (int)(p->head_dim / 8), m = p->is_neox ? (int)(p->rotary_dim / 16) : 0;
    const int rest = (chunks - 2 * m + 1) / 2;
    kernel<<<blocks, kThreads, r.smem, stream>>>((const T *)p->qkv, (T *)p->q_out, p->positions, p->slots,
                                                 p->cos_sin_cache, p->k_scale, p->v_scale, (uint8_t *)p->k_cache,
                                                 (uint8_t *)p->v_cache, p->num_tokens, (int)p->num_qo_heads,
                                                 (int)p->num_kv_heads, (int)p->head_dim, (int)p->rotary_dim, p->max_pos,
                                                 p->num_slots, m, rest, m + rest, r.stages, r.row_bytes, r.stage_bytes);
    return cudaGetLastError();
}

static cudaError_t launch(const struct kl_store_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_store_check_fused_params(p, "v6_bulk_ring");
    if (rc != cudaSuccess || p->num_tokens == 0) return rc;
    /* v5's condition (store.h's kl_store_fused_chunks and v5's table span): the qkv and cos/sin rows are then
     * whole 16-byte runs for the bulk copies */
    const bool vec = kl_store_fused_chunks(p) && p->rotary_dim <= kMaxRotary;
    const kl::device_caps dev = kl::this_device();
    const ring_plan r = vec ? plan_of(p) : ring_plan{};
    if (!vec || dev.cc < 90 || p->num_tokens <= kSmallBatch || r.smem == 0) {
        const auto v5 = (kl_store_launch_fn)kl_variant_launcher("store", "v5_tile_inflight", "v6_bulk_ring");
        return v5 ? v5(p, stream) : cudaErrorInvalidValue;
    }
    unsigned *flag;
    if ((rc = cudaGetSymbolAddress((void **)&flag, bad_slot)) != cudaSuccess) return rc;
    if ((rc = kl_store_validate_begin(p, flag, stream)) != cudaSuccess) return rc;
    if (p->dtype == KL_BF16)
        rc = p->is_neox ? launch_k<__nv_bfloat16, true>(p, r, dev.sms, stream)
                        : launch_k<__nv_bfloat16, false>(p, r, dev.sms, stream);
    else
        rc =
            p->is_neox ? launch_k<__half, true>(p, r, dev.sms, stream) : launch_k<__half, false>(p, r, dev.sms, stream);
    if (rc != cudaSuccess) return rc;
    return kl_store_validate_end(p, flag, stream, "v6_bulk_ring");
}

KL_VARIANT(store, v6_bulk_ring, launch, .min_cc = 80,
           .summary = "fused: a producer warp bulk-copies each token's qkv and cos/sin rows into a ring of stages "
                      "(persistent blocks); consumers rotate, quantize, store; a decode batch: v5");
