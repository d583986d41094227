/* v20_lamport_add_rmsnorm_stored_sums: v18 whose block adds up its row's sum of squares through shared
 * memory alone, with no warp shuffle.
 *
 * What changed from v18, and why. v18 reduces a row's sum of squares with fused_rows.cuh's
 * block_row_sum: five shuffles in each warp, a barrier, five more shuffles over the warps' parts. Taken
 * apart on two GPUs (v18's kernel with its epilogue changed one piece at a time, the rest kept), the
 * barrier alone cost next to nothing over leaving the norm out, a warp vote before it little more, a
 * shared store and load around it more, and the five shuffles of one warp_sum most of what v18 pays
 * over the plain all-reduce at 64 tokens of 4096. Every step of that chain waits for the row's last
 * unit, so whatever it costs is added to the call. Here the sum takes no shuffle:
 * - each thread stores its part at [lane][warp] of a table with rows of 17 floats, so a warp's 32
 *   stores fall in 32 banks, and the block meets at a barrier;
 * - the first 16 threads of warp 0 (leaders) each load one warp's 32 parts, a leader's 16 loads of a
 *   lane also in 16 banks, and add them pairwise in a fixed tree (a leader past the block's warps
 *   gives 0), then store the warp's sum; a second barrier;
 * - every thread loads the 16 sums as four float4 words (the same address in every thread: one
 *   broadcast each) and adds them in a fixed tree.
 * The order of the additions is fixed by the code, not by which warp arrives first, so every thread
 * and every rank gets the same bits. The tables alternate by row parity, as block_row_sum's parts do.
 * Everything else, the K blocks a row of a cluster and their exchange of the slices' sums included, is
 * v18's (kernels/allreduce/fused_early_done.cuh holds the kernel both rungs run).
 * Precision and bound: v18's, with the row's squares added in another fixed order, which the fused
 * bound admits. Every rank computes the same bits.
 * Expect: v18 less most of its row reduction's cost after the row's last unit lands, at every shape:
 * two barriers and a few shared loads where v18 has one barrier and ten dependent shuffles.
 * Run alone: build/kernlab bench allreduce --variant v20_lamport_add_rmsnorm_stored_sums */
#include "kernels/allreduce/fused_early_done.cuh"

using namespace kl_ar;

/* The block's sum of v, without shuffles (the opening comment tells the order); at most 16 warps. */
struct stored_row_sum {
    static __device__ __forceinline__ float sum(float v, int parity)
    {
        constexpr int kPitch = 17; /* floats a lane's row of the table: an odd count, so no bank twice */
        __shared__ float part[2][32 * kPitch];
        __shared__ __align__(16) float warp_total[2][16];
        static_assert(kThreads / 32 <= 16, "a leader a warp, in warp 0");
        const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (int)(blockDim.x / 32);
        part[parity][lane * kPitch + warp] = v;
        __syncthreads();
        if (threadIdx.x < 16) {
            const float *mine = &part[parity][threadIdx.x];
            const bool live = (int)threadIdx.x < warps;
            float s16[16], s8[8], s4[4];
#pragma unroll
            for (int l = 0; l < 16; l++)
                s16[l] = live ? mine[2 * l * kPitch] + mine[(2 * l + 1) * kPitch] : 0.f;
#pragma unroll
            for (int l = 0; l < 8; l++)
                s8[l] = s16[2 * l] + s16[2 * l + 1];
#pragma unroll
            for (int l = 0; l < 4; l++)
                s4[l] = s8[2 * l] + s8[2 * l + 1];
            warp_total[parity][threadIdx.x] = (s4[0] + s4[1]) + (s4[2] + s4[3]);
        }
        __syncthreads();
        return sum16_in_tree(warp_total[parity]);
    }
};

static cudaError_t launch(const struct kl_allreduce_add_rmsnorm_params *p, cudaStream_t stream)
{
    return launch_early_done<stored_row_sum>(p, stream, "v20_lamport_add_rmsnorm_stored_sums");
}

KL_AR_FUSED_OPS(ops, launch, KL_AR_NEEDS_PEERS | KL_AR_NEEDS_LAMPORT)

KL_VARIANT(allreduce, v20_lamport_add_rmsnorm_stored_sums, ops, .min_cc = 90,
           .summary = "v18 whose block adds its row's sum of squares through shared memory in a fixed tree (each "
                      "thread's part stored, 16 leaders add a warp's 32, every thread the 16): no warp shuffle");
