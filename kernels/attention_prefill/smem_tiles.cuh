/* The shared-memory tiles of the FlashAttention-2 variants of attention_prefill (v2 and up): their
 * layouts (rows back to back, or XOR-swizzled), the tile shape, and the block-level cp.async copies
 * that fill them from the paged cache, page numbers included. Inline device code only. */
#pragma once

#include <stdint.h>

#include "kernels/attention_prefill/paged.cuh"
#include "kernels/ptx_sm80.cuh"

namespace kl {
namespace mma {

using namespace ::kl::ptx; /* the sm_80 PTX wrappers (kernels/ptx_sm80.cuh) */

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

} // namespace mma
} // namespace kl
