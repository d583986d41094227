/* v4_rope_quant_store: the fused family's first rung: RoPE, FP8 (e4m3) quantization and the paged store in one
 * kernel, where a decoder otherwise runs rope (q and k rotated in place) and then store (k and v copied to the
 * cache): one launch instead of two, k read once instead of twice (rope, then store) and never written back,
 * and K/V stored at one byte an element instead of two; q is read and written once either way.
 * Work mapping: a thread owns one chunk of 8 elements (16 bytes of bf16/fp16) of one head of one token:
 * grid tokens x (heads x chunks a head, in blocks of <= 128), heads = q heads, then k, then v, as the qkv row
 * holds them, so a warp reads 512 contiguous bytes. A q or k chunk inside rotary_dim is rotated in float32
 * (neox: the partner chunk half a rotary span away is loaded too, from L1: its owner loads the same bytes;
 * interleaved: the partners sit in the chunk); q goes back to q_out (16-byte store), k and v are multiplied
 * by the reciprocal of their head's scale and converted two at a time with saturation (cvt.rn.satfinite
 * e4m3x2, through cuda_fp8.h: fused_pairs.cuh's quant8) into one 8-byte store of the cache row. Odd shapes or
 * alignments: one element a thread, the same arithmetic. A decode batch is launched as a programmatic dependent (sm_90,
 * as store's v3_pdl_one_trip): slot, position, cos/sin and scales are loaded before griddepcontrol.wait, qkv after it.
 * Each block releases the next kernel at its first instruction: the next launch waits for all of this grid's releases,
 * and a release placed after those loads would wait for a memory trip (the cos/sin loads are addressed by the position;
 * the scale's reciprocal is computed before the wait).
 * Many tokens: no PDL, and qkv is loaded first, so its trip overlaps the position -> cos/sin chain.
 * Bound: DRAM bandwidth on qkv read + q written + K/V bytes written (lab/store/perf.c's fused model).
 * Run alone: build/kernlab bench store --variant v4_rope_quant_store --workload fused-prefill-8k */
#include <cuda_fp8.h>
#include <stdio.h>

#include "kernels/common.cuh"
#include "kernels/store/fused_pairs.cuh"
#include "kernels/store/store.h"
#include "kernels/variant.h"

constexpr int kThreads = 128;       /* at most, per block; a token's chunks take ceil(chunks / 128) blocks */
constexpr int kThreadsPerSm = 1024; /* few tokens: the grid fits beside the previous kernel's blocks (PDL) */

static __device__ unsigned bad_slot; /* see store.h: set when a slot >= num_slots is skipped */

/* VEC consecutive elements at x as floats: one 16-byte load, or one element. */
template <typename T, int VEC> __device__ __forceinline__ void load_chunk(const T *x, float (&out)[VEC])
{
    if constexpr (VEC > 1) {
        const uint4 a = *reinterpret_cast<const uint4 *>(x);
#pragma unroll
        for (int r = 0; r < VEC; r++) out[r] = kl::elem_f32<T>(a, r);
    } else {
        out[0] = kl::to_f32(x[0]);
    }
}

/* A chunk's elements xv and, where it lies inside the rotary span, each element's partner p: neox's half a
 * span away (a second load, from L1: its owner loads the same bytes), interleaved's beside it. */
template <typename T, bool NEOX, int VEC>
__device__ __forceinline__ void load_operands(const T *x, int e0, int half, bool rotary_chunk, bool first_half,
                                              float (&xv)[VEC], float (&p)[VEC])
{
    load_chunk<T, VEC>(x + e0, xv);
    if (!rotary_chunk) return;
    if constexpr (NEOX) {
        load_chunk<T, VEC>(x + (first_half ? e0 + half : e0 - half), p);
    } else if constexpr (VEC > 1) {
#pragma unroll
        for (int r = 0; r < VEC; r++) p[r] = xv[r ^ 1];
    } else {
        p[0] = kl::to_f32(x[e0 ^ 1]);
    }
}

/* VEC elements (8, or 1 for odd shapes) of head h of token blockIdx.x, starting at element e0. PDL: launched
 * as a programmatic dependent, qkv read after the wait; else qkv read first, beside the position's trip. */
template <typename T, bool NEOX, int VEC, bool PDL>
static __global__ void __launch_bounds__(kThreads)
    rope_quant_store_v4(const T *__restrict__ qkv, T *q_out, const int64_t *__restrict__ positions,
                        const int64_t *__restrict__ slots, const float *__restrict__ cos_sin,
                        const float *__restrict__ k_scale, const float *__restrict__ v_scale, uint8_t *k_cache,
                        uint8_t *v_cache, int q_heads, int kv_heads, int head_dim, int rotary_dim, int64_t max_pos,
                        int64_t num_slots)
{
    static_assert(VEC == 1 || VEC == 16 / sizeof(T), "a chunk is one element or one 16-byte word");
    if constexpr (PDL) kl::pdl_release(); /* first: see the header */
    const int64_t t = blockIdx.x;
    const int heads = q_heads + 2 * kv_heads, chunks = head_dim / VEC;
    const int j = blockIdx.y * blockDim.x + threadIdx.x, h = j / chunks, e0 = (j - h * chunks) * VEC;
    const bool is_q = h < q_heads, is_v = h >= q_heads + kv_heads, live = h < heads;
    const int kh = is_v ? h - q_heads - kv_heads : h - q_heads; /* the kv head of a k or v chunk */
    const int half = rotary_dim / 2;
    /* Neox pairs element i < half with i + half (cos/sin column i); interleaved pairs 2i, 2i + 1 (column i). */
    const bool first_half = NEOX ? e0 < half : true;
    const int col = NEOX ? (first_half ? e0 : e0 - half) : e0 / 2;
    constexpr int NCOL = NEOX ? VEC : (VEC + 1) / 2; /* cos/sin columns a chunk uses */
    const bool rotary_chunk = live && !is_v && e0 < rotary_dim;
    const T *x = qkv + (t * heads + h) * (int64_t)head_dim;
    float xv[VEC], p[VEC], o[VEC];
    /* Many tokens (no PDL): qkv is no pending output of a kernel still running, so its loads are issued
     * first and overlap the position -> cos/sin chain (two dependent trips, not three). */
    if constexpr (!PDL)
        if (live) load_operands<T, NEOX, VEC>(x, e0, half, rotary_chunk, first_half, xv, p);

    /* Before the wait: the scheduler's slot and position (copied in before the forward pass), the
     * cos/sin table and the scales (constants): nothing a kernel of this step writes. */
    const int64_t pos = __ldg(positions + t), slot = is_q ? 0 : __ldg(slots + t);
    const bool rotate = rotary_chunk && pos >= 0 && pos < max_pos; /* else left as it is */
    float c[NCOL], s[NCOL];
    if (rotate) { /* vector chunks: the launcher checked the table is 16-byte aligned, rotary_dim % 8 == 0 */
        kl::load_f32(cos_sin + pos * rotary_dim + col, c);
        kl::load_f32(cos_sin + pos * rotary_dim + half + col, s);
    }
    const float inv_scale = is_q || !live ? 1.0f : __frcp_rn(__ldg((is_v ? v_scale : k_scale) + kh));
    if constexpr (PDL) {
        kl::pdl_wait(); /* qkv comes from the kernel before us (the QKV GEMM) */
        if (live) load_operands<T, NEOX, VEC>(x, e0, half, rotary_chunk, first_half, xv, p);
    }
    if (!live || (!is_q && slot < 0)) return; /* a skipped token's q is still rotated and written */
    if (!is_q && slot >= num_slots) {
        if (e0 == 0) bad_slot = 1;
        return;
    }

#pragma unroll
    for (int r = 0; r < VEC; r++) o[r] = xv[r];
    if (rotate) {
        /* x1' = x1 c - x2 s and x2' = x2 c + x1 s: the first of a pair subtracts its partner's share. */
#pragma unroll
        for (int r = 0; r < VEC; r++) {
            const int k = NEOX ? r : r / 2;
            const bool sub = NEOX ? first_half : ((e0 + r) & 1) == 0;
            o[r] = fmaf(xv[r], c[k], sub ? -(p[r] * s[k]) : p[r] * s[k]);
        }
    }

    if (is_q) {
        T *dst = q_out + (t * q_heads + h) * (int64_t)head_dim + e0;
        if constexpr (VEC > 1) *reinterpret_cast<uint4 *>(dst) = kl::pack<T>(o);
        else *dst = kl::from_f32<T>(o[0]);
        return;
    }
    uint8_t *dst = (is_v ? v_cache : k_cache) + (slot * kv_heads + kh) * (int64_t)head_dim + e0;
    if constexpr (VEC > 1) { /* plain store: attention reads the cache rows back soon */
        *reinterpret_cast<uint2 *>(dst) = kl::store_fused::quant8(o, inv_scale);
    } else {
        *dst = (uint8_t)__nv_cvt_float_to_fp8(o[0] * inv_scale, __NV_SATFINITE, __NV_E4M3);
    }
}

template <typename T, bool NEOX, int VEC>
static cudaError_t launch_k(const struct kl_store_params *p, int cc, cudaStream_t stream)
{
    unsigned per_token, threads;
    kl::split_even((p->num_qo_heads + 2 * p->num_kv_heads) * (p->head_dim / VEC), kThreads, &per_token, &threads);
    /* PDL where the grid is small enough to start beside the previous kernel's blocks (a decode batch). */
    const bool pdl = cc >= 90 && p->num_tokens * per_token * threads <= (int64_t)kl::this_device().sms * kThreadsPerSm;
    auto kernel = pdl ? rope_quant_store_v4<T, NEOX, VEC, true> : rope_quant_store_v4<T, NEOX, VEC, false>;
    return kl::launch_pdl(kernel, dim3((unsigned)p->num_tokens, per_token), dim3(threads), pdl, stream,
                          (const T *)p->qkv, (T *)p->q_out, p->positions, p->slots, p->cos_sin_cache, p->k_scale,
                          p->v_scale, (uint8_t *)p->k_cache, (uint8_t *)p->v_cache, (int)p->num_qo_heads,
                          (int)p->num_kv_heads, (int)p->head_dim, (int)p->rotary_dim, p->max_pos, p->num_slots);
}

template <typename T>
static cudaError_t launch_t(const struct kl_store_params *p, bool vec, int cc, cudaStream_t stream)
{
    constexpr int V = 16 / sizeof(T);
    if (p->is_neox) return vec ? launch_k<T, true, V>(p, cc, stream) : launch_k<T, true, 1>(p, cc, stream);
    return vec ? launch_k<T, false, V>(p, cc, stream) : launch_k<T, false, 1>(p, cc, stream);
}

static cudaError_t launch(const struct kl_store_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_store_check_fused_params(p, "v4_rope_quant_store");
    if (rc != cudaSuccess || p->num_tokens == 0) return rc;
    /* 8-element chunks, each inside one half of the rotary span or outside it, every access aligned */
    const bool vec = kl_store_fused_chunks(p);
    unsigned *flag;
    if ((rc = cudaGetSymbolAddress((void **)&flag, bad_slot)) != cudaSuccess) return rc;
    if ((rc = kl_store_validate_begin(p, flag, stream)) != cudaSuccess) return rc;
    const int cc = kl::this_device().cc;
    if (p->dtype == KL_BF16) rc = launch_t<__nv_bfloat16>(p, vec, cc, stream);
    else rc = launch_t<__half>(p, vec, cc, stream);
    if (rc != cudaSuccess) return rc;
    return kl_store_validate_end(p, flag, stream, "v4_rope_quant_store");
}

KL_VARIANT(store, v4_rope_quant_store, launch, .min_cc = 80,
           .summary = "fused: RoPE + e4m3 quantize + paged store, one 16 B chunk a thread, PDL on sm_90");
