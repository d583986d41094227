/* v7_token_walk: the fused RoPE + e4m3 quantize + store by resident thread groups that walk the tokens, each
 * token's qkv, position and cos/sin asked for one token before it is used.
 * From v5: a v5 block lives one tile of two tokens and pays its chain in full: qkv loads, then the position,
 * then the cos/sin row it addresses, a barrier, the arithmetic, the stores, and a new block. Its qkv bytes are
 * in flight during the first trip only. Here a group of threads stays resident and takes tokens g, g + G,
 * g + 2G, ... (G groups in all, as many as fit the SMs at once); while it rotates, quantizes and stores token
 * t, the loads of token t + G are already out: its qkv chunks, its cos/sin columns (in registers: every
 * thread of a pair column reads the same 64 bytes, which L1 serves) and its slot, with the position of
 * t + 2G behind them. So no load is waited on by the token that issues it, and the dependent position ->
 * cos/sin trip is taken a token ahead, off the chain; no shared memory, no barrier.
 * Mapping: a group is pairs x slices threads, pair column j (fused_pairs.cuh's cut of a head, the same for
 * every head) by slice s; slice s owns heads s and s + slices (kHeads = 2 heads a thread, slices = half the
 * heads, rounded up), so consecutive lanes take consecutive pairs of a head and the next head's pairs after
 * them, and every access instruction of a warp stays coalesced. A group's threads share nothing, so groups
 * need not align with blocks: blocks are small, for the registers of a thread that holds two tokens of its
 * heads' chunks and cos/sin.
 * The arithmetic is v5's, operation for operation (fused_pairs.cuh's write_pair): RoPE in float32, K/V times
 * __frcp_rn(scale), cvt.rn.satfinite e4m3x2; q_out one 16-byte store a chunk, a cache row 8 bytes.
 * A small grid (a decode batch) on sm_90, shapes v4 runs one element a thread and rotary spans past 256:
 * v4's own launcher, as v5 does.
 * Bound: DRAM bandwidth on qkv read + q written + K/V bytes written (lab/store/perf.c's fused model).
 * Run alone: build/kernlab bench store --variant v7_token_walk --workload fused-prefill-8k */
#include <stdio.h>

#include "kernels/common.cuh"
#include "kernels/store/fused_pairs.cuh"
#include "kernels/store/store.h"
#include "kernels/variant.h"

constexpr int kThreads = 128;       /* a block's: small, so the registers a thread needs leave room for blocks */
constexpr int kHeads = 2;           /* heads a thread takes per token: 2 x 2 x 16 B of qkv a token */
constexpr int kThreadsPerSm = 1024; /* few tokens (the grid fits beside the previous kernel's blocks): v4 */
constexpr int kMaxRotary = 256;     /* as v5; a longer rotary span: v4 */

static __device__ unsigned bad_slot; /* see store.h: set when a slot >= num_slots is skipped */

/* qkv is read once: evict-first, as v5 */
__device__ __forceinline__ uint4 load16(const void *p) { return __ldcs(reinterpret_cast<const uint4 *>(p)); }

/* What a thread holds of one token: its heads' chunks a and b, the pair's cos/sin, the slot. */
struct token_loads {
    uint4 a[kHeads], b[kHeads];
    float c[8], s[8];
    int64_t slot;
    bool rotate; /* the position is inside the table */
};

/* The shape every thread of a launch shares. */
struct walk_shape {
    int q_heads, kv_heads, head_dim, rotary_dim, m, rest, pairs, slices;
    int64_t num_tokens, max_pos, num_slots, groups;
};

/* Token t's loads for the thread of pair column pc and heads s, s + slices, ...: position pos (already
 * loaded), its slot where the thread has a k or v head. Nothing here is waited on. */
template <typename T, bool NEOX>
__device__ __forceinline__ void issue_token(const T *qkv, const int64_t *slots, const float *cos_sin,
                                            const walk_shape &w, int64_t t, int64_t pos, int s,
                                            const kl::store_fused::pair_chunks &pc, bool needs_slot,
                                            token_loads &L)
{
    const int heads = w.q_heads + 2 * w.kv_heads;
    const T *row = qkv + t * heads * (int64_t)w.head_dim;
#pragma unroll
    for (int u = 0; u < kHeads; u++) {
        const int h = s + u * w.slices;
        if (h >= heads) break;
        L.a[u] = load16(row + (int64_t)h * w.head_dim + 8 * pc.a);
        if (pc.has_b) L.b[u] = load16(row + (int64_t)h * w.head_dim + 8 * pc.b);
    }
    L.slot = needs_slot ? __ldg(slots + t) : -1;
    L.rotate = pc.rot_a && pos >= 0 && pos < w.max_pos;
    if (L.rotate) kl::store_fused::cos_sin_of<NEOX>(cos_sin + pos * w.rotary_dim, w.rotary_dim / 2, pc, L.c, L.s);
}

/* Thread n of the grid is thread i = n % per_token of group g = n / per_token (a group may span blocks: its
 * threads share nothing); group g walks tokens g, g + G, ..., its thread i takes pair column i % pairs of the
 * heads of slice i / pairs. */
template <typename T, bool NEOX>
static __global__ void __launch_bounds__(kThreads)
    rope_quant_store_v7(const T *__restrict__ qkv, T *q_out, const int64_t *__restrict__ positions,
                        const int64_t *__restrict__ slots, const float *__restrict__ cos_sin,
                        const float *__restrict__ k_scale, const float *__restrict__ v_scale, uint8_t *k_cache,
                        uint8_t *v_cache, walk_shape w)
{
    static_assert(sizeof(T) == 2, "a chunk is 8 elements of 16 bits: one 16-byte word");
    const int per_token = w.pairs * w.slices;
    const int64_t n = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, g = n / per_token;
    const int i = (int)(n - g * per_token);
    if (g >= w.groups) return;
    const int j = i % w.pairs, s = i / w.pairs, heads = w.q_heads + 2 * w.kv_heads;
    const int chunks = w.head_dim / 8;
    /* The pair's chunks as a rotated head sees them (q and k); a v head takes the same chunks unrotated. */
    const kl::store_fused::pair_chunks pc =
        kl::store_fused::chunks_of<NEOX>(j, w.m, w.rest, chunks, w.rotary_dim, true);
    bool needs_slot = false;
    float inv_scale[kHeads];
#pragma unroll
    for (int u = 0; u < kHeads; u++) {
        const int h = s + u * w.slices;
        const bool kv = h >= w.q_heads && h < heads, is_v = h >= w.q_heads + w.kv_heads;
        needs_slot |= kv;
        const int kh = is_v ? h - w.q_heads - w.kv_heads : h - w.q_heads;
        inv_scale[u] = kv ? __frcp_rn(__ldg((is_v ? v_scale : k_scale) + kh)) : 1.0f;
    }

    /* The pipeline: `now` holds token t's loads (in flight or landed), pos_next the position of t + G. */
    int64_t t = g;
    token_loads now, next;
    issue_token<T, NEOX>(qkv, slots, cos_sin, w, t, __ldg(positions + t), s, pc, needs_slot, now);
    int64_t pos_next = t + w.groups < w.num_tokens ? __ldg(positions + t + w.groups) : -1;
    for (; t < w.num_tokens; t += w.groups) {
        const int64_t t_next = t + w.groups;
        if (t_next < w.num_tokens) { /* token t + G's loads, then the position after it */
            issue_token<T, NEOX>(qkv, slots, cos_sin, w, t_next, pos_next, s, pc, needs_slot, next);
            pos_next = t_next + w.groups < w.num_tokens ? __ldg(positions + t_next + w.groups) : -1;
        }
        /* Token t: rotate, quantize and store each of the thread's heads. */
        const bool bad = now.slot >= w.num_slots;
        if (bad && j == 0) bad_slot = 1;
#pragma unroll
        for (int u = 0; u < kHeads; u++) {
            const int h = s + u * w.slices;
            if (h >= heads) break;
            const bool is_q = h < w.q_heads, is_v = h >= w.q_heads + w.kv_heads;
            if (!is_q && (now.slot < 0 || bad)) continue; /* a skipped token's q is still rotated and written */
            const int kh = is_v ? h - w.q_heads - w.kv_heads : h - w.q_heads;
            T *q_row = is_q ? q_out + (t * w.q_heads + h) * (int64_t)w.head_dim : nullptr;
            uint8_t *cache_row =
                is_q ? nullptr : (is_v ? v_cache : k_cache) + (now.slot * w.kv_heads + kh) * (int64_t)w.head_dim;
            const uint4 wa = now.a[u], wb = pc.has_b ? now.b[u] : wa; /* values: a pick of references spills */
            kl::store_fused::write_pair<T, NEOX>(wa, wb, pc, now.rotate && !is_v, now.c, now.s, q_row, cache_row,
                                                 inv_scale[u]);
        }
        now = next;
    }
}

/* The shape of p's groups: pair columns x slices (the grid's size is the launcher's). */
static walk_shape shape_of(const struct kl_store_params *p)
{
    walk_shape w;
    const int chunks = (int)(p->head_dim / 8), heads = (int)(p->num_qo_heads + 2 * p->num_kv_heads);
    w.q_heads = (int)p->num_qo_heads, w.kv_heads = (int)p->num_kv_heads, w.head_dim = (int)p->head_dim;
    w.rotary_dim = (int)p->rotary_dim, w.max_pos = p->max_pos, w.num_slots = p->num_slots;
    w.num_tokens = p->num_tokens;
    w.m = p->is_neox ? w.rotary_dim / 16 : 0;
    w.rest = (chunks - 2 * w.m + 1) / 2, w.pairs = w.m + w.rest;
    w.slices = (heads + kHeads - 1) / kHeads;
    w.groups = 0; /* set by the launcher: as many as the SMs hold at once, each walking the same token count */
    return w;
}

template <typename T, bool NEOX>
static cudaError_t launch_k(const struct kl_store_params *p, walk_shape w, cudaStream_t stream)
{
    const int per_token = w.pairs * w.slices;
    auto kernel = rope_quant_store_v7<T, NEOX>;
    int per_sm = 0;
    cudaError_t rc = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0);
    if (rc != cudaSuccess) return rc;
    const int64_t threads = (int64_t)kl::this_device().sms * (per_sm > 0 ? per_sm : 1) * kThreads;
    const int64_t resident = threads / per_token > 0 ? threads / per_token : 1; /* groups the SMs hold at once */
    const int64_t trips = (w.num_tokens + resident - 1) / resident;
    w.groups = (w.num_tokens + trips - 1) / trips;
    const int64_t blocks = (w.groups * per_token + kThreads - 1) / kThreads;
    kernel<<<(unsigned)blocks, kThreads, 0, stream>>>(
        (const T *)p->qkv, (T *)p->q_out, p->positions, p->slots, p->cos_sin_cache, p->k_scale, p->v_scale,
        (uint8_t *)p->k_cache, (uint8_t *)p->v_cache, w);
    return cudaGetLastError();
}

/* v4's launcher, for the calls v7 hands on. */
static cudaError_t launch_v4(const struct kl_store_params *p, cudaStream_t stream)
{
    const auto v4 = (kl_store_launch_fn)kl_variant_launcher("store", "v4_rope_quant_store", "v7_token_walk");
    return v4 ? v4(p, stream) : cudaErrorInvalidValue;
}

static cudaError_t launch(const struct kl_store_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_store_check_fused_params(p, "v7_token_walk");
    if (rc != cudaSuccess || p->num_tokens == 0) return rc;
    /* v4's vector condition (store.h) and a rotary span v5 would take; a decode batch on sm_90: v4 */
    if (!kl_store_fused_chunks(p) || p->rotary_dim > kMaxRotary) return launch_v4(p, stream);
    const walk_shape w = shape_of(p);
    const kl::device_caps dev = kl::this_device();
    if (dev.cc >= 90 && p->num_tokens * w.pairs * w.slices <= (int64_t)dev.sms * kThreadsPerSm)
        return launch_v4(p, stream);
    unsigned *flag;
    if ((rc = cudaGetSymbolAddress((void **)&flag, bad_slot)) != cudaSuccess) return rc;
    if ((rc = kl_store_validate_begin(p, flag, stream)) != cudaSuccess) return rc;
    if (p->dtype == KL_BF16)
        rc = p->is_neox ? launch_k<__nv_bfloat16, true>(p, w, stream) : launch_k<__nv_bfloat16, false>(p, w, stream);
    else rc = p->is_neox ? launch_k<__half, true>(p, w, stream) : launch_k<__half, false>(p, w, stream);
    if (rc != cudaSuccess) return rc;
    return kl_store_validate_end(p, flag, stream, "v7_token_walk");
}

KL_VARIANT(store, v7_token_walk, launch, .min_cc = 80,
           .summary = "fused: resident thread groups walk the tokens, each token's qkv, slot and cos/sin loaded while "
                      "the token before it is rotated and stored; a decode batch: v4");
