/* sm_90a PTX, one named inline wrapper per instruction: warpgroup MMA (wgmma) and the shared-memory
 * descriptors of its operands, the 128-byte-swizzled tile those descriptors name, the async-proxy
 * fence, named barriers, mbarriers, bulk copies and bulk tensor copies (TMA), clusters, register reallocation
 * (setmaxnreg) and Programmatic Dependent Launch (griddepcontrol). lab/emulate/ shadows each wrapper
 * that holds PTX with an emulated one of the same name and signature. Inline device code only.
 *
 * wgmma, in one paragraph (PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate"):
 * the 4 warps of a warpgroup (128 consecutive threads, the first warp's index a multiple of 4)
 * issue one m64nNk16 product together: D (64 x N, float32, in registers) += A (64 x 16) B (16 x N).
 * B is read from shared memory through a 64-bit descriptor; A from shared memory too, or from
 * registers. Warp w of the group owns rows 16w .. 16w + 15 of A and D; its D registers are N / 8
 * m16n8 C fragments (sm80.cuh's layout), its A registers one m16n8k16 A fragment. The product is
 * asynchronous: wgmma.fence before the first one (the registers it reads were written by ordinary
 * code), commit_group after a batch, wait_group N before the accumulators are read again.
 *
 * Tiles (swizzled_tile): ROWS rows of D 16-bit elements stored as D / 64 blocks of ROWS x 64, each
 * row of a block 128 bytes, and 16-byte chunk c of row r stored at chunk c ^ (r % 8): the layout the
 * tensor cores call "128-byte swizzle" and the one a TMA with CU_TENSOR_MAP_SWIZZLE_128B writes, as
 * both apply the XOR to address bits 4-6 from bits 7-9 (so blocks start 1024-byte aligned). A
 * descriptor then names 8-row x 128-byte atoms:
 *   K-major (Q as A and K as B of S = Q K^T: each row contiguous along the reduction dimension d):
 *     rows 8 apart are 1024 bytes apart (the stride byte offset); k-step kk of 16 columns starts
 *     at block kk / 4, byte 32 (kk % 4) of the row, and the hardware applies the swizzle.
 *   MN-major (V as B of O = P V, "transposed": each key's row contiguous along the output column):
 *     keys 8 apart are 1024 bytes apart (stride byte offset), 64-column blocks ROWS x 128 bytes
 *     apart (leading byte offset); k-step kk of 16 keys starts 2048 kk bytes in. */
#pragma once

#include <cuda.h> /* CUtensorMap and the driver's enums: types only, nothing links libcuda */
#include <stdint.h>
#include <type_traits>

#include "kernels/ptx_sm80.cuh"

/* The device pass for another architecture (sm_80 of the default build) compiles the Hopper
 * kernels empty: their launchers are never reached there (min_cc 90), and wgmma, setmaxnreg and
 * the bulk copies do not assemble for it. */
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define KL_SM90A 0
#else
#define KL_SM90A 1
#endif

namespace kl {
namespace ptx {

/* ---- the swizzled tile ---- */

template <int ROWS, int D> struct swizzled_tile {
    static_assert(D % 64 == 0 && ROWS % 8 == 0, "64-column blocks of whole 8-row atoms");
    static constexpr int kBlockBytes = ROWS * 128; /* one 64-column block */
    static constexpr int kBytes = ROWS * D * 2;
    /* Element offset of 16-byte chunk `chunk` (0 .. D / 8 - 1) of row `row`. */
    static __device__ __forceinline__ int offset(int row, int chunk)
    {
        return (chunk / 8) * ROWS * 64 + row * 64 + (((chunk % 8) ^ (row % 8)) << 3);
    }
};

/* The first 1024-byte aligned address at or after p (the 128-byte swizzle's atom). */
__device__ __forceinline__ unsigned char *align_1024(unsigned char *p)
{
    const uint32_t a = smem_addr(p);
    return p + (((a + 1023u) & ~1023u) - a);
}

/* ---- Programmatic Dependent Launch (griddepcontrol): kernels/common.cuh says how launch_pdl uses
 * them. Below sm_90 both are no-ops (their kernels launch without PDL there). ---- */
__device__ __forceinline__ void pdl_release()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#endif
}

__device__ __forceinline__ void pdl_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* ---- FP8 (sm_89+) ---- */
/* Two E4M3 codes (the low byte first) as two fp16 (the low one in the low half), exact: every e4m3
 * value is an fp16 normal or a zero. The device pass of an older architecture (sm_80 of the default
 * build, where the FP8 variants' launchers are never reached: min_cc 89) decodes the bits instead. */
__device__ __forceinline__ uint32_t cvt_e4m3x2_f16x2(uint16_t x)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
    uint32_t r = 0;
    for (int i = 0; i < 2; i++) {
        const uint32_t c = (x >> (8 * i)) & 0xFFu, e = (c >> 3) & 0xFu, m = c & 7u;
        const float v = e ? ldexpf((float)(8 + m), (int)e - 10) : ldexpf((float)m, -9);
        r |= (uint32_t)__half_as_ushort(__float2half_rn(c & 0x80u ? -v : v)) << (16 * i);
    }
    return r;
#else
    uint32_t y;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(y) : "h"(x));
    return y;
#endif
}

#if KL_SM90A

/* ---- shared-memory matrix descriptors (PTX "Matrix Descriptor Format") ----
 * bits 0-13 start address >> 4, 16-29 leading byte offset >> 4, 32-45 stride byte offset >> 4,
 * 62-63 swizzle mode (1 = 128-byte). */
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr, uint32_t leading_bytes, uint32_t stride_bytes)
{
    return (uint64_t)((addr & 0x3FFFFu) >> 4) | (uint64_t)((leading_bytes & 0x3FFFFu) >> 4) << 16 |
           (uint64_t)((stride_bytes & 0x3FFFFu) >> 4) << 32 | 1ull << 62;
}
/* K-major operand, k-step kk (16 columns of d); tile = the rows' first byte in block 0. */
template <class L> __device__ __forceinline__ uint64_t kmajor_desc(uint32_t tile, int kk)
{
    return smem_desc(tile + (kk / 4) * L::kBlockBytes + (kk % 4) * 32, 16, 1024);
}
/* MN-major operand (V), k-step kk (16 keys). */
template <class L> __device__ __forceinline__ uint64_t mnmajor_desc(uint32_t tile, int kk)
{
    return smem_desc(tile + kk * 2048, L::kBlockBytes, 1024);
}
/* A descriptor moved `bytes` further into shared memory (a multiple of 16): the start address field
 * alone changes, and it cannot carry into the next field, as shared addresses stay below 2^18. So a
 * tile's descriptor is built once and each k-step's is one add of a constant, not a fresh mask and
 * shift of its address. */
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes)
{
    return (desc & ~0xFFFFFFFFull) | (uint32_t)((uint32_t)desc + (bytes >> 4));
}

/* ---- wgmma ---- */

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
/* Waits until at most N of this warpgroup's committed batches are in flight. */
template <int N> __device__ __forceinline__ void wgmma_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Pins a product's register operands (accumulators, or P's A fragments) in their registers: the
 * compiler must finish the ordinary code that writes them before this point, and may not copy them
 * elsewhere between a product's issue and its wait (it would read values the tensor cores have not
 * written, or feed them stale ones). */
template <typename R, int C> __device__ __forceinline__ void pin(R (&d)[C][4])
{
#pragma unroll
    for (int i = 0; i < C; i++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            if constexpr (std::is_same<R, float>::value) asm volatile("" : "+f"(d[i][e])::"memory");
            else asm volatile("" : "+r"(d[i][e])::"memory");
        }
}
/* The start of a batch of products: the register operands they read or write pinned, then
 * wgmma.fence (PTX: registers written by ordinary code before a wgmma reads them need the fence,
 * and the pins keep that code from sinking past it). */
template <class... Regs> __device__ __forceinline__ void wgmma_begin(Regs &...regs)
{
    (pin(regs), ...);
    wgmma_fence();
}

/* Register lists of the asm statements below: N / 2 accumulators, then the other operands. */
#define KL_WGMMA_D64 "{" "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31" "}"
#define KL_WGMMA_D128 "{" "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63" "}"
#define KL_WGMMA_D256 "{" "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127" "}"
#define KL_ACC4(i) "+f"(d[i][0]), "+f"(d[i][1]), "+f"(d[i][2]), "+f"(d[i][3])
#define KL_ACC32(i) KL_ACC4(i), KL_ACC4(i + 1), KL_ACC4(i + 2), KL_ACC4(i + 3), KL_ACC4(i + 4), KL_ACC4(i + 5), \
                    KL_ACC4(i + 6), KL_ACC4(i + 7)
#define KL_ACC_64 KL_ACC32(0)
#define KL_ACC_128 KL_ACC32(0), KL_ACC32(8)
#define KL_ACC_256 KL_ACC32(0), KL_ACC32(8), KL_ACC32(16), KL_ACC32(24)

/* d (+)= A B, A and B from shared memory, both K-major. n0, n1, n2: the operand numbers after the
 * N / 2 accumulators (A's descriptor, B's, whether to accumulate). */
#define KL_WGMMA_SS(N, TY, n0, n1, n2)                                                                        \
    asm volatile("{\n.reg .pred acc;\nsetp.ne.b32 acc, %" #n2 ", 0;\n"                                       \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32" TY TY " " KL_WGMMA_D##N ", %" #n0 ", %" #n1 \
                 ", acc, 1, 1, 0, 0;\n}\n"                                                                    \
                 : KL_ACC_##N                                                                                 \
                 : "l"(a), "l"(b), "r"(accumulate))
/* d (+)= A B, A from registers (an m16n8k16 A fragment per warp), B from shared memory MN-major. */
#define KL_WGMMA_RS(N, TY, n0, n1, n2, n3, n4, n5)                                                            \
    asm volatile("{\n.reg .pred acc;\nsetp.ne.b32 acc, %" #n5 ", 0;\n"                                       \
                 "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32" TY TY " " KL_WGMMA_D##N ", {%" #n0 ", %" #n1 \
                 ", %" #n2 ", %" #n3 "}, %" #n4 ", acc, 1, 1, 1;\n}\n"                                         \
                 : KL_ACC_##N                                                                                 \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(accumulate))

/* One m64nNk16 product, T = __nv_bfloat16 or __half, N = 64, 128 or 256: S = Q K^T (ss) and
 * O += P V (rs, V transposed). accumulate == false overwrites d (the first k-step). */
template <typename T, int N>
__device__ __forceinline__ void wgmma_ss(float (&d)[N / 8][4], uint64_t a, uint64_t b, int accumulate)
{
    constexpr bool bf16 = std::is_same<T, __nv_bfloat16>::value;
    if constexpr (N == 64) {
        if constexpr (bf16) KL_WGMMA_SS(64, ".bf16", 32, 33, 34);
        else KL_WGMMA_SS(64, ".f16", 32, 33, 34);
    } else if constexpr (N == 128) {
        if constexpr (bf16) KL_WGMMA_SS(128, ".bf16", 64, 65, 66);
        else KL_WGMMA_SS(128, ".f16", 64, 65, 66);
    } else {
        static_assert(N == 256, "N = 64, 128 or 256");
        if constexpr (bf16) KL_WGMMA_SS(256, ".bf16", 128, 129, 130);
        else KL_WGMMA_SS(256, ".f16", 128, 129, 130);
    }
}
template <typename T, int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 8][4], const uint32_t (&a)[4], uint64_t b, int accumulate)
{
    constexpr bool bf16 = std::is_same<T, __nv_bfloat16>::value;
    if constexpr (N == 64) {
        if constexpr (bf16) KL_WGMMA_RS(64, ".bf16", 32, 33, 34, 35, 36, 37);
        else KL_WGMMA_RS(64, ".f16", 32, 33, 34, 35, 36, 37);
    } else if constexpr (N == 128) {
        if constexpr (bf16) KL_WGMMA_RS(128, ".bf16", 64, 65, 66, 67, 68, 69);
        else KL_WGMMA_RS(128, ".f16", 64, 65, 66, 67, 68, 69);
    } else {
        static_assert(N == 256, "N = 64, 128 or 256");
        if constexpr (bf16) KL_WGMMA_RS(256, ".bf16", 128, 129, 130, 131, 132, 133);
        else KL_WGMMA_RS(256, ".f16", 128, 129, 130, 131, 132, 133);
    }
}

/* ---- ordering ---- */

/* Shared memory written by ordinary stores or cp.async and read next by the tensor cores or the
 * copy engine (the "async proxy"): each writing thread fences after its writes are complete and
 * before the barrier or mbarrier arrival that publishes them. */
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
/* Global memory written by ordinary stores (this or another CTA's, ordered before this thread by a
 * fence and an atomic or a barrier) and read next by a bulk copy this thread issues. */
__device__ __forceinline__ void fence_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }

/* Named barriers 1.. (0 is __syncthreads): `threads` threads, a multiple of 32, meet at barrier id. */
__device__ __forceinline__ void named_sync(int id, int threads)
{
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads)
{
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

/* ---- mbarriers: a 64-bit shared-memory word counting arrivals and, for copies, bytes ----
 * A phase completes when `count` threads have arrived and every byte announced by expect_tx has
 * landed; waiting on parity P returns once the phase of that parity has completed (a fresh
 * barrier counts its phase "-1", parity 1, as completed). */
__device__ __forceinline__ void mbar_init(uint64_t *bar, int count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
/* After the inits, before the __syncthreads that publishes them to the other threads and the copy engine. */
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
__device__ __forceinline__ void mbar_arrive(uint64_t *bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
/* Arrives and announces `bytes` more to come from bulk copies completing on this barrier. */
__device__ __forceinline__ void mbar_arrive_expect(uint64_t *bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(bytes)
                 : "memory");
}
/* An arrival on `bar` made once every cp.async this thread issued before it has landed (.noinc: the
 * barrier's count includes these arrivals). The copies' bytes are then visible to whoever waits on
 * the phase. */
__device__ __forceinline__ void cp_async_mbar_arrive(uint64_t *bar)
{
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t *bar, int parity)
{
    const uint32_t addr = smem_addr(bar);
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred done;\nmbarrier.try_wait.parity.shared::cta.b64 done, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, done;\n}\n"
                     : "=r"(done)
                     : "r"(addr), "r"(parity)
                     : "memory");
    } while (!done);
}

/* ---- bulk copies (cp.async.bulk, no tensor map) ---- */

/* `bytes` contiguous bytes of global memory at src into shared memory at dst, counted in bytes on
 * `bar` (the copy's complete_tx). bytes a multiple of 16, src and dst 16-byte aligned. */
__device__ __forceinline__ void bulk_load(uint32_t dst, const void *src, uint32_t bytes, uint64_t *bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(smem_addr(bar))
                 : "memory");
}

/* bulk_load whose lines enter L2 under `policy` (l2_evict_first_policy, below): for bytes read once. */
__device__ __forceinline__ void bulk_load_hint(uint32_t dst, const void *src, uint32_t bytes, uint64_t *bar,
                                               uint64_t policy)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, "
                 "[%3], %4;\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(smem_addr(bar)), "l"(policy)
                 : "memory");
}

/* `bytes` of shared memory at src (16-byte aligned, a multiple of 16) to global memory at dst, in this thread's
 * current bulk group (bulk_commit closes it). The copy reads the async proxy's view: fence_async_smem first,
 * after plain stores to src. */
__device__ __forceinline__ void bulk_store(void *dst, uint32_t src, uint32_t bytes)
{
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst), "r"(src), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
/* Until at most N of this thread's committed bulk groups still read their shared memory (it may be reused). */
template <int N> __device__ __forceinline__ void bulk_wait_read()
{
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}
/* Until every bulk group this thread committed has completed (its writes are done). */
__device__ __forceinline__ void bulk_wait_all() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }

/* ---- bulk tensor copies (TMA) ---- */

/* The box at (c0, c1, c2) of the 3-D tensor `map` describes, into shared memory at dst, counted in
 * bytes on `bar`. `map` must live in kernel-parameter, constant or global memory (a __grid_constant__
 * parameter here). */
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap *map, int c0, int c1, int c2, uint64_t *bar)
{
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, "
                 "%4}], [%5];\n" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar))
                 : "memory");
}

/* An L2 cache policy under which the lines a copy brings in are the first to be evicted: for bytes a
 * kernel reads once (createpolicy; pass it to tma_load_3d_hint). */
__device__ __forceinline__ uint64_t l2_evict_first_policy()
{
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
    return policy;
}
/* cp_async_16 (16 bytes, every one valid) whose lines enter L2 under `policy` (l2_evict_first_policy). */
__device__ __forceinline__ void cp_async_16_hint(uint32_t dst, const void *src, uint64_t policy)
{
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "l"(policy));
}
/* tma_load_3d whose lines enter L2 under `policy` (l2_evict_first_policy). */
__device__ __forceinline__ void tma_load_3d_hint(uint32_t dst, const CUtensorMap *map, int c0, int c1, int c2,
                                                 uint64_t *bar, uint64_t policy)
{
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint "
                 "[%0], [%1, {%2, %3, %4}], [%5], %6;\n" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar)), "l"(policy)
                 : "memory");
}
/* The box at (c0, c1, c2) of `map` asked of memory into L2 only, with nothing to count and nothing to wait for:
 * a later tma_load_3d of the same box finds its lines in L2. A hint: the hardware may drop it, and a box past the
 * tensor's bounds is not fetched. */
__device__ __forceinline__ void tma_prefetch_3d(const CUtensorMap *map, int c0, int c1, int c2)
{
    asm volatile("cp.async.bulk.prefetch.tensor.3d.L2.global.tile [%0, {%1, %2, %3}];\n" ::"l"(
                     reinterpret_cast<uint64_t>(map)),
                 "r"(c0), "r"(c1), "r"(c2)
                 : "memory");
}

/* ---- clusters: CTAs launched together on one GPC, each reaching the others' shared memory ---- */

/* This CTA's rank in its cluster. */
__device__ __forceinline__ uint32_t cluster_rank()
{
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
/* Every thread of every CTA of the cluster meets here: what each wrote before (barrier inits
 * included) is visible to all after, and no CTA leaves while another may still write into it. */
__device__ __forceinline__ void cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
/* An arrival on the mbarrier at bar's offset in the shared memory of CTA `rank` of the cluster. */
__device__ __forceinline__ void mbar_arrive_cluster(uint64_t *bar, uint32_t rank)
{
    uint32_t remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(smem_addr(bar)), "r"(rank));
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];\n" ::"r"(remote) : "memory");
}
/* The float at shared address addr of CTA `rank` of the cluster (distributed shared memory): that
 * CTA must not have exited, and what it wrote there is seen after a cluster_sync both passed. */
__device__ __forceinline__ float ld_cluster_f32(uint32_t addr, uint32_t rank)
{
    uint32_t remote;
    float v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(addr), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(remote) : "memory");
    return v;
}
/* tma_load_3d into dst of every CTA of the cluster whose bit is set in cta_mask, each counting the
 * bytes on the mbarrier at bar's offset in its own shared memory: one read of global memory (and of
 * L2) for several CTAs. */
__device__ __forceinline__ void tma_load_3d_multicast(uint32_t dst, const CUtensorMap *map, int c0, int c1, int c2,
                                                      uint64_t *bar, uint16_t cta_mask)
{
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 ".multicast::cluster [%0], [%1, {%2, %3, %4}], [%5], %6;\n" ::"r"(dst),
                 "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(smem_addr(bar)), "h"(cta_mask)
                 : "memory");
}

/* ---- register reallocation between warpgroups (setmaxnreg): the whole warpgroup executes it ---- */
template <int R> __device__ __forceinline__ void release_registers_to()
{
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(R));
}
template <int R> __device__ __forceinline__ void claim_registers_to()
{
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(R));
}

#endif /* KL_SM90A */

} // namespace ptx
} // namespace kl
