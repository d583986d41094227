/* Host emulation of the CUDA pieces the attention_prefill tensor-core kernels use, so their exact
 * source (mma.cuh and the kernels of v2..v6, gen.py copies them) runs on a machine without a GPU:
 * one std::thread per CUDA thread of a CTA, std::barrier for __syncthreads and for the exchanges a
 * warp-wide instruction needs (shuffles, ldmatrix, mma.sync). gen.py swaps the PTX wrappers of
 * mma.cuh for emulated ones: ldmatrix and mma.sync by the PTX ISA's fragment tables, cp.async as an
 * immediate copy (the order of copies and barriers is then still checked: a tile read before its
 * copy was issued reads stale bytes, which the driver fills with garbage). What it cannot see: races
 * that need real asynchrony (compute-sanitizer's racecheck does), timing, and register limits. */
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <type_traits>
#include <vector>

#undef __global__
#undef __device__
#undef __forceinline__
#undef __launch_bounds__
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
using std::max;
using std::min;

struct emu_dim3 {
    unsigned x = 0, y = 0, z = 0;
};
extern thread_local emu_dim3 emu_threadIdx, emu_blockIdx;
extern emu_dim3 emu_gridDim;
inline emu_dim3 emu_blockDim = {128, 1, 1};
#define threadIdx emu_threadIdx
#define blockIdx emu_blockIdx
#define gridDim emu_gridDim
#define blockDim emu_blockDim

namespace emu {
/* One CTA being run: its shared memory, its barriers, and a word exchange per warp lane. */
struct cta {
    std::vector<unsigned char> smem;
    std::barrier<> *block;
    std::barrier<> *warp[4];
    uint32_t xchg[4][32][8];
};
extern cta *g_cta;
inline int lane() { return threadIdx.x % 32; }
inline int wid() { return threadIdx.x / 32; }
inline void warp_sync() { g_cta->warp[wid()]->arrive_and_wait(); }
} // namespace emu

inline void __syncthreads() { emu::g_cta->block->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::warp_sync(); }
inline float __shfl_xor_sync(unsigned, float v, int off)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    emu::g_cta->xchg[emu::wid()][emu::lane()][0] = u;
    emu::warp_sync();
    const uint32_t o = emu::g_cta->xchg[emu::wid()][emu::lane() ^ off][0];
    emu::warp_sync();
    float r;
    memcpy(&r, &o, 4);
    return r;
}
template <typename T> inline T __ldg(const T *p) { return *p; } /* the read-only path is a plain load here */
inline unsigned __umulhi(unsigned a, unsigned b) { return (unsigned)(((uint64_t)a * b) >> 32); }
inline float __uint_as_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline uint32_t __float_as_uint(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
