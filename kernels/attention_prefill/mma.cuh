/* Tensor-core building blocks of the attention_prefill variants v2 and up: PTX wrappers
 * (ldmatrix, mma.sync m16n8k16, cp.async), shared-memory tile layouts, and the warp-level steps
 * of the FlashAttention-2 loop (S = Q K^T, mask, online softmax, O += P V, the epilogue). Each
 * variant file composes these with its own loads, pipeline and schedule.
 *
 * Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16", 16-bit A/B, f32 C/D). In a
 * warp, lane = 4 g + t (g = lane / 4, the "group", t = lane % 4, the thread in the group):
 *   A (16 x 16, row-major), 4 registers of 2 elements (the lower column in the low half):
 *     a0: (row g,     cols 2t, 2t+1)      a1: (row g + 8, cols 2t, 2t+1)
 *     a2: (row g,     cols 2t+8, 2t+9)    a3: (row g + 8, cols 2t+8, 2t+9)
 *   B (16 x 8, "col": k down, n across), 2 registers:
 *     b0: (k 2t, 2t+1; n g)               b1: (k 2t+8, 2t+9; n g)
 *   C/D (16 x 8, float32), 4 registers:
 *     c0, c1: (row g, cols 2t, 2t+1)      c2, c3: (row g + 8, cols 2t, 2t+1)
 * ldmatrix .x4 loads four 8 x 8 matrices of 16-bit elements; lane l gives the shared-memory
 * address of row l % 8 of matrix l / 8 (16 contiguous bytes), and register i of lane l receives
 * matrix i's elements (row l / 4, cols 2 (l % 4), +1); with .trans, (rows 2 (l % 4), +1; col l / 4).
 * So a row-major 8 x 8 block read plainly is an A quarter (rows = M) or a B half whose stored rows
 * are n (K stored [key][d]); read with .trans it is a B half whose stored rows are k (V stored
 * [key][d]). And the C fragment of S for keys 16kk..16kk+15 (n-tiles 2kk, 2kk+1) has exactly the
 * elements the A fragment of P needs for the k-step kk of P V: P never leaves the registers. */
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <type_traits>

#include "kernels/attention_prefill/paged.cuh"

namespace kl {
namespace mma {

/* ---- PTX wrappers ---- */

__device__ __forceinline__ uint32_t smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

/* d += a b for one 16 x 8 x 16 product, float32 accumulators; T is __nv_bfloat16 or __half. */
template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    if constexpr (std::is_same<T, __nv_bfloat16>::value)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%0, %1, %2, %3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* 16 bytes global -> shared without passing through registers (sm_80's LDGSTS), cached in L2
 * only (.cg: K/V tiles are read once per CTA). valid == false writes 16 zero bytes and reads
 * nothing (src-size 0); src must still be a mapped address, so callers pass the tensor's base. */
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void *src, bool valid)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 16 : 0));
}
/* 4 bytes (a page number), through L1 (.ca: .cg takes 16-byte copies only). */
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void *src, bool valid)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
/* Waits until at most N of this thread's committed groups are still in flight. */
template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* Two floats rounded to T and packed in one register, the first in the low half. */
template <typename T> __device__ __forceinline__ uint32_t pack2(float lo, float hi)
{
    uint32_t r;
    if constexpr (std::is_same<T, __nv_bfloat16>::value) {
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        memcpy(&r, &v, 4);
    } else {
        __half2 v = __floats2half2_rn(lo, hi);
        memcpy(&r, &v, 4);
    }
    return r;
}

/* 2^x on the special-function unit: one MUFU.EX2 (relative error ~2^-22, tiny results flushed to
 * zero, which a probability below 2^-126 of the row max can afford). ex2(-inf) = 0. */
__device__ __forceinline__ float exp2_fast(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* ---- shared-memory tile layouts: element offset of 16-byte chunk `chunk` of row `row` ---- */

/* Rows of D 16-bit elements back to back. The 8 rows an ldmatrix phase reads sit D * 2 bytes
 * apart, a multiple of 128 for D >= 64: all in the same 4 banks, an 8-way conflict. */
template <int D> struct plain_rows {
    static __device__ __forceinline__ int offset(int row, int chunk) { return row * D + chunk * 8; }
};

/* The same rows with chunk c of row r stored at chunk c ^ (r % 8): the 8 rows an ldmatrix phase
 * (or 8 threads of a cp.async) touch at one logical chunk land on 8 different 16-byte bank groups,
 * so no conflict; the XOR only permutes chunks inside a row (D / 8 >= 8 chunks). */
template <int D> struct xor_rows {
    static_assert(D / 8 >= 8, "the swizzle permutes 8 chunks within a row");
    static __device__ __forceinline__ int offset(int row, int chunk) { return row * D + ((chunk ^ (row & 7)) << 3); }
};

/* ---- the tile shape of the FlashAttention-2 structure ---- */

/* 4 warps; each owns kMT m16 row blocks of the query tile (32 rows for head_dim <= 128, 16 for 256
 * where 32 rows of float32 output would not fit in registers), so every K/V fragment it loads
 * feeds kMT MMAs. Keys go kBN at a time. */
constexpr int kCtaThreads = 128; /* every tensor-core variant: 4 warps */

template <int D> struct tile_shape {
    static constexpr int kWarps = kCtaThreads / 32, kThreads = kCtaThreads;
    static constexpr int kMT = D <= 128 ? 2 : 1;
    static constexpr int kBM = 16 * kMT * kWarps; /* query rows per CTA: 128, or 64 for head_dim 256 */
    static constexpr int kBN = D <= 128 ? 64 : 32;
    static constexpr int kNT = kBN / 8; /* n8 tiles of S */
    static constexpr int kDT = D / 8;   /* n8 tiles of O */
};

/* ---- block-level tile copies (cp.async: the caller commits, waits and synchronises) ---- */

/* How THREADS threads copy a tile of rows of D 16-bit elements: 8 threads per row, thread t of the
 * 8 taking the 16-byte chunks t, t + 8, ... (D / 64 of them), THREADS / 8 rows per pass; `tid` is
 * this thread's index among them (unsigned: / 8 and % 8 are then a shift and a mask). A warp's copy instruction then covers 4 rows x 128 contiguous
 * bytes (coalesced), each thread does one page lookup per row it copies, and its shared-memory
 * offsets differ by constants: rows per pass is a multiple of 8, so a row's swizzle term (row % 8)
 * is the same in every pass, and chunk + 8k XOR (row % 8) = (chunk XOR (row % 8)) + 8k.
 * ROWS rows into a tile laid out by L; row_src(r) is the global row, or nullptr for zeros. No data
 * passes through registers. */
template <class L, int ROWS, int D, int THREADS, typename T, class RowSrc>
__device__ __forceinline__ void copy_rows(T *tile, unsigned tid, const T *base, RowSrc row_src)
{
    static_assert(D % 64 == 0 && THREADS % 64 == 0 && ROWS % (THREADS / 8) == 0, "8 threads a row, whole passes");
    const uint32_t dst = smem_addr(tile);
#pragma unroll
    for (int i = 0; i < ROWS / (THREADS / 8); i++) {
        const int row = (int)(tid / 8) + i * (THREADS / 8);
        const T *src = row_src(row);
#pragma unroll
        for (int k = 0; k < D / 64; k++) {
            const int chunk = (int)(tid % 8) + 8 * k;
            cp_async_16(dst + 2 * L::offset(row, chunk), src ? src + chunk * 8 : base, src != nullptr);
        }
    }
}

/* The K and V rows of one key tile, as copy_rows: the same rows of both caches, so one page lookup
 * serves both. row_offset(r) is the element offset of key row r in the caches, or -1 past kv_len
 * (zeros: a zero V row times P = 0 is 0, where stale shared memory could hold a NaN and make 0 * NaN). */
template <class L, int ROWS, int D, int THREADS, typename T, class RowOffset>
__device__ __forceinline__ void copy_kv_rows(T *k_tile, T *v_tile, unsigned tid, const T *kc, const T *vc,
                                             RowOffset row_offset)
{
    static_assert(D % 64 == 0 && THREADS % 64 == 0 && ROWS % (THREADS / 8) == 0, "8 threads a row, whole passes");
    const uint32_t kdst = smem_addr(k_tile), vdst = smem_addr(v_tile);
#pragma unroll
    for (int i = 0; i < ROWS / (THREADS / 8); i++) {
        const int row = (int)(tid / 8) + i * (THREADS / 8);
        const int64_t off = row_offset(row);
#pragma unroll
        for (int k = 0; k < D / 64; k++) {
            const int chunk = (int)(tid % 8) + 8 * k, so = 2 * L::offset(row, chunk);
            cp_async_16(kdst + so, off >= 0 ? kc + off + chunk * 8 : kc, off >= 0);
            cp_async_16(vdst + so, off >= 0 ? vc + off + chunk * 8 : vc, off >= 0);
        }
    }
}

/* The same by the whole CTA of THREADS threads. */
template <class L, int ROWS, int D, int THREADS, typename T, class RowSrc>
__device__ __forceinline__ void load_tile(T *tile, const T *base, RowSrc row_src)
{
    copy_rows<L, ROWS, D, THREADS>(tile, threadIdx.x, base, row_src);
}
template <class L, int ROWS, int D, int THREADS, typename T, class RowOffset>
__device__ __forceinline__ void load_kv_tile(T *k_tile, T *v_tile, const T *kc, const T *vc, RowOffset row_offset)
{
    copy_kv_rows<L, ROWS, D, THREADS>(k_tile, v_tile, threadIdx.x, kc, vc, row_offset);
}

/* The page numbers of the BN keys from k0 of request r into slot[0 .. BN): at most BN pages hold BN
 * consecutive keys when k0 is a multiple of BN (one per key with 1-slot pages). Copied with cp.async
 * a tile ahead of the K/V copies that read them, so issuing those never waits on a global load;
 * entries past the request's pages are zeros. */
template <int BN, int THREADS>
__device__ __forceinline__ void load_page_numbers(int32_t *slot, const int32_t *kv_indices, const prefill::request &r,
                                                  int k0, const prefill::fast_div &page)
{
    const int p0 = (int)page.div((uint32_t)k0);
    for (int i = threadIdx.x; i < BN; i += THREADS) {
        const bool valid = p0 + i < r.pages;
        cp_async_4(smem_addr(slot + i), valid ? kv_indices + r.first_page + p0 + i : kv_indices, valid);
    }
}

/* ---- warp-level steps of one key tile ---- */

/* s = Q K^T for this warp's rows warp_row0 .. warp_row0 + 16 MT - 1 of the query tile and the
 * tile's NT * 8 keys. Per 16-wide slice kd of head_dim: MT ldmatrix.x4 for the A fragments of Q,
 * then per pair of key n-tiles one ldmatrix.x4 of K giving both B fragments, each used by MT MMAs. */
template <typename T, class L, int D, int MT, int NT>
__device__ __forceinline__ void qk_tile(float (&s)[MT][NT][4], uint32_t q_tile, uint32_t k_tile, int warp_row0,
                                        int lane)
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                s[mt][nt][e] = 0.f;
    /* Q: matrices (rows 0-7, cols 0-7), (rows 8-15, cols 0-7), (rows 0-7, cols 8-15), (rows 8-15,
     * cols 8-15) of the 16 x 16 block = a0..a3. K: (keys 0-7, d 0-7), (keys 0-7, d 8-15), (keys 8-15,
     * d 0-7), (keys 8-15, d 8-15) = b0, b1 of n-tile 2np and b0, b1 of n-tile 2np + 1. */
    const int q_row = lane % 8 + 8 * ((lane / 8) % 2), q_half = lane / 16;
    const int k_row = lane % 8 + 8 * (lane / 16), k_half = (lane / 8) % 2;
    /* kd only moves shared-memory addresses (no register array is indexed by it), so the loop stays
     * rolled: unrolled, the compiler hoists the fragments of later slices and, beside the 128 + 64
     * accumulator registers of head_dim 128, spills. Other warps cover the ldmatrix latency. */
#pragma unroll 1
    for (int kd = 0; kd < D / 16; kd++) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
            ldmatrix_x4(a[mt], q_tile + 2 * L::offset(warp_row0 + 16 * mt + q_row, 2 * kd + q_half));
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            uint32_t b[4];
            ldmatrix_x4(b, k_tile + 2 * L::offset(16 * np + k_row, 2 * kd + k_half));
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                mma_16816<T>(s[mt][2 * np], a[mt], b[0], b[1]);
                mma_16816<T>(s[mt][2 * np + 1], a[mt], b[2], b[3]);
            }
        }
    }
}

/* Keys a row does not see become -inf. Element e of n-tile nt of row block mt is row
 * 16 mt + g + 8 (e / 2) of the warp, key k0 + 8 nt + 2 t + e % 2; limit(mt, h) is how many keys (a
 * prefix) this thread's row g + 8 h of block mt sees. Called only on the tiles that need it. */
template <int MT, int NT, class Limit>
__device__ __forceinline__ void mask_tile(float (&s)[MT][NT][4], int k0, int lane, Limit limit)
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int n = limit(mt, h);
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 2 * h; e < 2 * h + 2; e++)
                    if (k0 + 8 * nt + 2 * (lane % 4) + e % 2 >= n) s[mt][nt][e] = -INFINITY;
        }
}

/* The online softmax for one key tile, in place, for this thread's row g + 8h of block mt: s (raw
 * logits) becomes p = 2^(s c - m c) with c = sm_scale log2(e) folded into one FFMA; m (raw running
 * max) and l (this thread's share of the running sum) are updated, and the return value alpha =
 * 2^((m_old - m) c) is what the row's output must be scaled by before this tile's P V is added. The
 * row max is over the 4 threads of a group (two shuffles); l stays a per-thread partial sum until
 * the epilogue, since all 4 threads of a row rescale alike. Requires sm_scale > 0 (the max of raw
 * logits is then the max of scaled ones). A row that has seen no key yet has m = -inf; it subtracts
 * 0 instead, so 2^(-inf) = 0 and never -inf - -inf. */
template <int MT, int NT>
__device__ __forceinline__ float softmax_row(float (&s)[MT][NT][4], float (&m)[MT][2], float (&l)[MT][2], int mt,
                                             int h, float scale_log2)
{
    float mx = m[mt][h];
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
        mx = fmaxf(mx, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float ref = mx == -INFINITY ? 0.f : mx * scale_log2;
    const float alpha = exp2_fast(fmaf(m[mt][h], scale_log2, -ref));
    m[mt][h] = mx;
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; e++) {
            const float pe = exp2_fast(fmaf(s[mt][nt][e], scale_log2, -ref));
            s[mt][nt][e] = pe;
            sum += pe;
        }
    l[mt][h] = l[mt][h] * alpha + sum;
    return alpha;
}

/* Every row of the tile, the output rescaled at once (the FlashAttention-2 step). */
template <int MT, int NT, int DT>
__device__ __forceinline__ void online_softmax(float (&s)[MT][NT][4], float (&m)[MT][2], float (&l)[MT][2],
                                               float (&o)[MT][DT][4], float scale_log2)
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const float alpha = softmax_row(s, m, l, mt, h, scale_log2);
#pragma unroll
            for (int dt = 0; dt < DT; dt++)
                o[mt][dt][2 * h] *= alpha, o[mt][dt][2 * h + 1] *= alpha;
        }
}

/* Every row of the tile, the output's scale factors returned for later (rescale_rows): a kernel
 * whose previous P V is still running may not touch o yet. */
template <int MT, int NT>
__device__ __forceinline__ void softmax_rows(float (&s)[MT][NT][4], float (&m)[MT][2], float (&l)[MT][2],
                                             float (&alpha)[MT][2], float scale_log2)
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) alpha[mt][h] = softmax_row(s, m, l, mt, h, scale_log2);
}

/* o *= alpha, row by row (alpha from softmax_rows). */
template <int MT, int DT>
__device__ __forceinline__ void rescale_rows(float (&o)[MT][DT][4], const float (&alpha)[MT][2])
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int dt = 0; dt < DT; dt++)
            o[mt][dt][0] *= alpha[mt][0], o[mt][dt][1] *= alpha[mt][0], o[mt][dt][2] *= alpha[mt][1],
                o[mt][dt][3] *= alpha[mt][1];
}

/* o += P V with P from the registers of s (after online_softmax) rounded to T, and V's B fragments
 * by ldmatrix.trans: per k-step kk of 16 keys (the C fragments of S's n-tiles 2kk and 2kk + 1,
 * whose elements sit exactly where P's A fragment wants them), per pair of head_dim n-tiles one
 * ldmatrix.x4.trans (keys 0-7 / 8-15 x d 0-7 / 8-15: b0, b1 of n-tile 2dp, then of 2dp + 1), each
 * used by MT MMAs. */
template <typename T, class L, int D, int MT, int NT>
__device__ __forceinline__ void pv_tile(float (&o)[MT][D / 8][4], const float (&p)[MT][NT][4], uint32_t v_tile,
                                        int lane)
{
    const int v_row = lane % 8 + 8 * ((lane / 8) % 2), v_half = lane / 16;
#pragma unroll
    for (int kk = 0; kk < NT / 2; kk++) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            a[mt][0] = pack2<T>(p[mt][2 * kk][0], p[mt][2 * kk][1]);         /* row g,     keys 2t, 2t+1 */
            a[mt][1] = pack2<T>(p[mt][2 * kk][2], p[mt][2 * kk][3]);         /* row g + 8, keys 2t, 2t+1 */
            a[mt][2] = pack2<T>(p[mt][2 * kk + 1][0], p[mt][2 * kk + 1][1]); /* row g,     keys 2t+8, 2t+9 */
            a[mt][3] = pack2<T>(p[mt][2 * kk + 1][2], p[mt][2 * kk + 1][3]); /* row g + 8, keys 2t+8, 2t+9 */
        }
#pragma unroll
        for (int dp = 0; dp < D / 16; dp++) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, v_tile + 2 * L::offset(16 * kk + v_row, 2 * dp + v_half));
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                mma_16816<T>(o[mt][2 * dp], a[mt], b[0], b[1]);
                mma_16816<T>(o[mt][2 * dp + 1], a[mt], b[2], b[3]);
            }
        }
    }
}

/* The running state of a warp's rows: o = 0, m = -inf (no key seen), l = 0. */
template <int MT, int DT>
__device__ __forceinline__ void init_rows(float (&o)[MT][DT][4], float (&m)[MT][2], float (&l)[MT][2])
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int dt = 0; dt < DT; dt++)
            o[mt][dt][0] = o[mt][dt][1] = o[mt][dt][2] = o[mt][dt][3] = 0.f;
        m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.f;
    }
}

/* One key tile for a warp's rows, once K and V are in shared memory: S = Q K^T, the mask where
 * some row does not see every key of the tile (limit as in mask_tile), the online-softmax step,
 * O += P V. k0 is the tile's first key. */
template <typename T, class L, int D, int MT, int NT, class Limit>
__device__ __forceinline__ void attend_tile(float (&o)[MT][D / 8][4], float (&m)[MT][2], float (&l)[MT][2],
                                            uint32_t q_tile, uint32_t k_tile, uint32_t v_tile, int k0, bool masked,
                                            Limit limit, int warp_row0, int lane, float scale_log2)
{
    float s[MT][NT][4];
    qk_tile<T, L, D, MT, NT>(s, q_tile, k_tile, warp_row0, lane);
    if (masked) mask_tile(s, k0, lane, limit);
    online_softmax(s, m, l, o, scale_log2);
    pv_tile<T, L, D, MT, NT>(o, s, v_tile, lane);
}

/* The epilogue: the row sums are completed over the 4 threads of each group, out = o / l rounded
 * to T (a 4-byte store of 2 elements per n-tile: columns 8 dt + 2t, +1), lse = (m c + log2 l) ln 2.
 * row_of(mt, h, out, lse) points out / lse at the output of this thread's row g + 8h of block mt,
 * or returns false for a row past the request (nothing written). */
template <typename T, int MT, int DT, class RowOf>
__device__ __forceinline__ void store_rows(const float (&o)[MT][DT][4], const float (&m)[MT][2],
                                           const float (&l)[MT][2], float scale_log2, int lane, RowOf row_of)
{
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float sum = l[mt][h];
            sum += __shfl_xor_sync(0xffffffffu, sum, 1);
            sum += __shfl_xor_sync(0xffffffffu, sum, 2);
            T *out;
            float *lse;
            if (!row_of(mt, h, out, lse)) continue;
            const float inv = sum > 0.f ? 1.f / sum : 0.f; /* a row that saw no key: out 0, lse -inf */
#pragma unroll
            for (int dt = 0; dt < DT; dt++)
                *reinterpret_cast<uint32_t *>(out + 8 * dt + 2 * (lane % 4)) =
                    pack2<T>(o[mt][dt][2 * h] * inv, o[mt][dt][2 * h + 1] * inv);
            if (lane % 4 == 0) *lse = sum > 0.f ? (m[mt][h] * scale_log2 + log2f(sum)) * prefill::kLn2 : -INFINITY;
        }
}

/* Whether a variant can take these params: 16-bit inputs, head_dim 64/128/256, and 16-byte aligned
 * rows (every copy is 16 bytes). cudaErrorNotSupported otherwise (the module's SKIP). */
inline cudaError_t supports(const kl_attention_prefill_params *p)
{
    const bool dtype = p->dtype == KL_F16 || p->dtype == KL_BF16;
    const bool dim = p->head_dim == 64 || p->head_dim == 128 || p->head_dim == 256;
    const bool aligned = (((uintptr_t)p->q | (uintptr_t)p->k_cache | (uintptr_t)p->v_cache) & 15) == 0;
    return dtype && dim && aligned ? cudaSuccess : cudaErrorNotSupported;
}

/* Calls f(T{}, std::integral_constant<int, D>{}) for the params' 16-bit dtype and head_dim, so a
 * launcher instantiates its kernel for each (T, D) in one line. Call supports() first. */
template <class F> cudaError_t dispatch(const kl_attention_prefill_params *p, F &&f)
{
    using bf16 = __nv_bfloat16;
    const bool b = p->dtype == KL_BF16;
    switch (p->head_dim) {
    case 64:
        return b ? f(bf16{}, std::integral_constant<int, 64>{}) : f(__half{}, std::integral_constant<int, 64>{});
    case 128:
        return b ? f(bf16{}, std::integral_constant<int, 128>{}) : f(__half{}, std::integral_constant<int, 128>{});
    case 256:
        return b ? f(bf16{}, std::integral_constant<int, 256>{}) : f(__half{}, std::integral_constant<int, 256>{});
    default:
        return cudaErrorNotSupported;
    }
}

/* Raises a kernel's dynamic shared-memory limit past the default 48 KB, once per kernel (the
 * kernel's address is the template argument, so each kernel has its own flag). */
template <auto Kernel> cudaError_t allow_smem(size_t bytes)
{
    static bool done = false;
    if (done) return cudaSuccess;
    cudaError_t rc = cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    done = rc == cudaSuccess;
    return rc;
}

/* The front of every tensor-core launcher: the argument checks, the dtypes and head_dims these
 * kernels take (cudaErrorNotSupported otherwise), and the grid's batch dimension. *go is false when
 * there is nothing to launch (no queries). */
inline cudaError_t launch_checks(const kl_attention_prefill_params *p, const char *variant, bool *go)
{
    *go = false;
    cudaError_t rc = kl_attention_prefill_check_params(p, variant);
    if (rc != cudaSuccess || p->total_q == 0 || p->max_q_len == 0) return rc;
    if ((rc = supports(p)) != cudaSuccess) return rc;
    if (p->batch > 65535) {
        fprintf(stderr, "attention_prefill %s: batch %lld > 65535 (a grid dimension)\n", variant, (long long)p->batch);
        return cudaErrorInvalidValue;
    }
    *go = true;
    return cudaSuccess;
}

/* The grid of the GQA-packed variants (v6 and up): (kv heads, requests, tiles of bm packed rows), or
 * cudaErrorInvalidValue with the reason printed when the tiles overflow grid z. */
inline cudaError_t packed_grid(const kl_attention_prefill_params *p, int bm, const char *variant, dim3 *grid)
{
    const int64_t rows = p->max_q_len * (p->num_qo_heads / p->num_kv_heads), tiles = (rows + bm - 1) / bm;
    if (tiles > 65535 || rows > INT32_MAX) {
        fprintf(stderr, "attention_prefill %s: %lld packed rows, %lld tiles > 65535 (grid z)\n", variant,
                (long long)rows, (long long)tiles);
        return cudaErrorInvalidValue;
    }
    *grid = dim3((unsigned)p->num_kv_heads, (unsigned)p->batch, (unsigned)tiles);
    return cudaSuccess;
}

/* Kernel<<<grid, threads, smem>>>(args...) with its shared-memory limit raised first. */
template <auto Kernel, class... Args>
cudaError_t launch_kernel_with(dim3 grid, int threads, size_t smem, cudaStream_t stream, Args... args)
{
    cudaError_t rc = allow_smem<Kernel>(smem);
    if (rc != cudaSuccess) return rc;
    Kernel<<<grid, threads, smem, stream>>>(args...);
    return cudaGetLastError();
}
/* The same with the FlashAttention-2 ladder's kCtaThreads (v2..v6). */
template <auto Kernel, class... Args>
cudaError_t launch_kernel(dim3 grid, size_t smem, cudaStream_t stream, Args... args)
{
    return launch_kernel_with<Kernel>(grid, kCtaThreads, smem, stream, args...);
}

} // namespace mma
} // namespace kl
