/* The PTX layer for memory shared across GPUs (sm_70 and up): stores and loads at system scope and the
 * volatile 16-byte load a poller uses (the global nanosecond timer, kl::ptx::globaltimer, is
 * ptx_sm80.cuh's). One wrapper per instruction; the all-reduce variants build their barriers and
 * Lamport waits from these (kernels/allreduce/peer.cuh, lamport.cuh say why each is the one needed). */
#pragma once

#include <stdint.h>

#include "kernels/ptx_sm80.cuh" /* globaltimer */

namespace kl {
namespace ptx {

/* st.release.sys: this thread's earlier writes (and, after a barrier, its block's) are visible to
 * any GPU that sees this store. */
__device__ __forceinline__ void st_release_sys(uint32_t *p, uint32_t v)
{
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

/* ld.acquire.sys: loads after it see what was written before the release it reads from. */
__device__ __forceinline__ uint32_t ld_acquire_sys(const uint32_t *p)
{
    uint32_t v;
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* ld.acquire.gpu: nothing this thread does after it (a later atomic included) is performed before
 * the load; for memory only this GPU writes. */
__device__ __forceinline__ uint32_t ld_acquire_gpu(const uint32_t *p)
{
    uint32_t v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* ld.volatile.global.v4: 16 bytes read afresh from L2 on every call (not kept in L1), for polling
 * memory that other GPUs write. */
__device__ __forceinline__ uint4 ld_volatile_v4(const uint4 *p)
{
    uint4 v;
    asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p)
                 : "memory");
    return v;
}

} // namespace ptx
} // namespace kl
