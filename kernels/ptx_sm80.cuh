/* sm_80 PTX, one named inline wrapper per instruction, so a kernel reads as "ldmatrix, mma,
 * cp.async" rather than as asm: mma.sync m16n8k16, ldmatrix, movmatrix, cp.async, ex2.approx, the
 * shared-memory address of a pointer, the packing of two floats into one 16-bit pair and the global
 * nanosecond timer. Used by the tensor-core variants of every module; lab/emulate/ shadows each wrapper
 * that holds PTX with an emulated one of the same name and signature. Inline device code only.
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
 * [key][d]). movmatrix .trans transposes one 8 x 8 matrix held in that same register layout. */
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>
#include <string.h>
#include <type_traits>

namespace kl {
namespace ptx {

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

__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x)
{
    uint32_t y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
    return y;
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

/* %globaltimer: nanoseconds, the same clock on every SM (and every GPU of the machine), so stamps
 * taken by different CTAs lie on one timeline. */
__device__ __forceinline__ unsigned long long globaltimer()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

} // namespace ptx
} // namespace kl
