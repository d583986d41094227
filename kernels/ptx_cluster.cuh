/* The PTX layer for the blocks of a cluster writing into each other's shared memory (sm_90), beyond
 * what kernels/ptx_sm90.cuh holds: the cluster barrier in two halves, st.async into another block's
 * shared memory counted on its mbarrier, and the wait on such an mbarrier. One wrapper per instruction;
 * the fused all-reduce exchanges its rows' partial sums with these (kernels/allreduce/fused_rows.cuh).
 * Not emulated: no module the emulator runs includes it. */
#pragma once

#include <stdint.h>

namespace kl {
namespace ptx {

/* cluster_sync's first half: what this thread wrote before (an mbarrier's init included) is seen by
 * every thread of the cluster that has passed the matching cluster_wait. */
__device__ __forceinline__ void cluster_arrive_release()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
/* cluster_sync's second half: returns once every thread of the cluster has arrived. */
__device__ __forceinline__ void cluster_wait()
{
    asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
/* Stores v into block `rank`'s copy of *slot (distributed shared memory) and counts its 4 bytes on that
 * block's copy of the mbarrier *bar (complete_tx). The block must have started and initialized bar. */
__device__ __forceinline__ void st_async_f32(float *slot, uint64_t *bar, uint32_t rank, float v)
{
    uint32_t remote_slot, remote_bar;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n"
                 : "=r"(remote_slot)
                 : "r"((uint32_t)__cvta_generic_to_shared(slot)), "r"(rank));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n"
                 : "=r"(remote_bar)
                 : "r"((uint32_t)__cvta_generic_to_shared(bar)), "r"(rank));
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];\n" ::"r"(remote_slot),
                 "r"(__float_as_uint(v)), "r"(remote_bar)
                 : "memory");
}
/* mbar_wait (kernels/ptx_sm90.cuh) with acquire at cluster scope: what other blocks' st.async counted on
 * the phase of that parity is seen once it returns. */
__device__ __forceinline__ void mbar_wait_cluster(uint64_t *bar, int parity)
{
    const uint32_t addr = (uint32_t)__cvta_generic_to_shared(bar);
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred done;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 done, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, done;\n}\n"
                     : "=r"(done)
                     : "r"(addr), "r"(parity)
                     : "memory");
    } while (!done);
}

} // namespace ptx
} // namespace kl
