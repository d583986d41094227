/* v18_lamport_add_rmsnorm_early_done: v16 counted done with the call as soon as its sends are out, and
 * its rows wider than a block spread over a cluster of blocks.
 *
 * What changed from v16, and why.
 * - The count (v17's change to the plain one-shot): a grid of several blocks publishes the next call
 *   number when its last block counts itself done, a returning atomic to L2. v16 counts after its
 *   row's RMSNorm, behind the block barrier that waits for the row's last unit, so at 16 tokens and
 *   more every call ends with that round trip. Here each block counts right after its sends, while the
 *   peers' data is in flight (peer.cuh, count_call_done).
 * - Wide rows: v16 takes rows of at most kThreads units and hands wider ones to v15, which still moves
 *   every unit through chunk descriptors. Here a row of more units is cut over a cluster of K blocks,
 *   slice k of the row to the cluster's block k, a unit a thread as in v16. Each block reduces its
 *   slice's sum of squares as v16 does; its thread k stores that sum into block k's shared memory with
 *   st.async, which counts the 4 bytes on block k's mbarrier for the row; each block waits on its own
 *   mbarrier until the K sums have landed and adds them in slice order (the same bits in every block).
 *   No cluster barrier stands in a row: it would hold every thread until every block arrived, and its
 *   release would first make the blocks' earlier global stores visible. The sums' slots and mbarriers
 *   alternate by row: a block re-arms a row's mbarrier for the row two on as soon as it has the row's
 *   sums, and no block sends that later row's sum before this block has sent the row between, which
 *   it does only after reading the row's sums. Every block initializes its mbarriers and arrives at a
 *   cluster barrier as it starts, and waits for it before its first st.async (whose target must have
 *   started, its mbarriers initialized); a block leaves once its last row's sums have all landed, so
 *   no st.async targets a block that has left. K is v15's choice: the most blocks, up to 8, that keep
 *   128 threads a block and fit the communicator's blocks.
 * Other rows (an odd hidden) go to v15, with the same slots, sets and call number; the shape alone
 * decides, so every rank decides alike.
 * Grid: a block (or a cluster of K) per token up to the communicator's co-resident blocks, then rows by
 * the grid's stride; a block of one thread a unit of its slice, in whole warps.
 * Precision and bound: v16's sums; with K > 1 the row's sum of squares adds the slices' sums in slice
 * order, which the fused bound admits. Every rank computes the same bits.
 * Expect: v16 less one L2 round trip at 16 tokens and more (one token of a row that fits a block runs
 * one block, which counts nothing); at hidden 8192, v16 (which ran v15) less v15's chunk branches,
 * plus one exchange of the slices' sums through distributed shared memory.
 * The kernel and its launcher are in kernels/allreduce/fused_early_done.cuh, which v20 shares: this
 * file gives them the row's sum of squares, fused_rows.cuh's block_row_sum.
 * Run alone: build/kernlab bench allreduce --variant v18_lamport_add_rmsnorm_early_done */
#include "kernels/allreduce/fused_early_done.cuh"

using namespace kl_ar;

/* The row's sum (fused_rows.cuh's block_row_sum): each warp's part by five shuffles, one barrier, then
 * every warp adds the parts across its lanes by five more. */
struct shuffled_row_sum {
    static __device__ __forceinline__ float sum(float v, int parity)
    {
        __shared__ float parts[2][32];
        return block_row_sum(v, parts, parity);
    }
};

static cudaError_t launch(const struct kl_allreduce_add_rmsnorm_params *p, cudaStream_t stream)
{
    return launch_early_done<shuffled_row_sum>(p, stream, "v18_lamport_add_rmsnorm_early_done");
}

KL_AR_FUSED_OPS(ops, launch, KL_AR_NEEDS_PEERS | KL_AR_NEEDS_LAMPORT)

KL_VARIANT(allreduce, v18_lamport_add_rmsnorm_early_done, ops, .min_cc = 90,
           .summary = "v16 counted done right after its sends, its rows wider than a block cut over a cluster of up to "
                      "8 blocks (the slices' sums of squares exchanged by st.async): no v15 fallback for wide rows");
