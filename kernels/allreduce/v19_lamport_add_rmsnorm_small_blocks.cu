/* v19_lamport_add_rmsnorm_small_blocks: v18 with a row on one block of at most 256 threads, each thread
 * owning up to four units of it.
 *
 * What changed from v18, and why. v18 keeps v16's mapping, one unit a thread, so a row of hidden 4096
 * (bf16: 512 units) is a block of 16 warps, and a row of 8192 is a cluster of eight blocks whose sums
 * of squares meet through distributed shared memory. Taken apart on two GPUs, v18's row reduction
 * (the barrier the row's last warp releases, the parts added after it, and at hidden 8192 the
 * cluster's exchange) was its largest single cost over the plain all-reduce. Here thread k owns units
 * k, k + B, k + 2B, k + 3B of the row (B the block's threads, U units a thread: 4 where the row has 512
 * units or more, so that B is at least 128; 2 from 256; else 1), which keeps each warp's accesses
 * contiguous and brings a row of 4096 to 4 warps and a row of 8192 to 8, one block and no cluster.
 * Each thread sends its U units to the peer, then issues its polls of all U units before the first
 * wait, adds, stores residual_out, and sums its squares unit by unit. The block's sum: each
 * warp's sum (five shuffles) into shared memory, one barrier, then every thread reads the at most 8
 * parts as float4 words and adds them in warp order: no shuffles after the barrier. The call is
 * counted done right after the sends (v17, v18).
 * Two ranks only: a thread polls one peer's U units, and its sums have two addends, the same bits in
 * either order. Other calls go elsewhere by name, so this file stays one file: an odd hidden to v15,
 * other worlds and rows of more than 1024 units (more than 256 threads at U = 4) to v18. The shape and
 * the world alone decide, so every rank decides alike.
 * Grid: a block per token up to the communicator's co-resident blocks, then rows by the grid's stride.
 * Precision and bound: v18's sums; the squares are added unit by unit in each thread, then warp by
 * warp, an order the fused bound admits. Every rank computes the same bits.
 * Expect: v18 less the part of its row reduction that grows with the block's warps, and at hidden 8192
 * less the cluster's exchange, if fewer threads a row still keep enough of the row's bytes in flight.
 * Run alone: build/kernlab bench allreduce --variant v19_lamport_add_rmsnorm_small_blocks */
#include "kernels/allreduce/fused_rows.cuh"
#include "kernels/variant.h"

using namespace kl_ar;

constexpr int kMaxThreads = 256; /* the widest block; a row of more than 4 x 256 units goes to v18 */
constexpr int kMinThreads = 128; /* the fewest threads a row gets while it has units to spare */

/* The block's sum of v, the same bits in every thread: each warp's sum into parts[parity], one
 * barrier, then every thread adds the parts in warp order from float4 words (broadcast loads). Callers
 * alternate parity by row, as block_row_sum's do. */
__device__ __forceinline__ float block_sum_in_order(float v, float (*parts)[kMaxThreads / 32], int parity)
{
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (int)(blockDim.x / 32);
    v = kl::warp_sum(v);
    if (lane == 0) parts[parity][warp] = v;
    __syncthreads();
    float total = 0.f;
#pragma unroll
    for (int q = 0; q < kMaxThreads / 32 / 4; q++)
        if (4 * q < warps) {
            const float4 p = reinterpret_cast<const float4 *>(parts[parity])[q];
            total += p.x;
            if (4 * q + 1 < warps) total += p.y;
            if (4 * q + 2 < warps) total += p.z;
            if (4 * q + 3 < warps) total += p.w;
        }
    return total;
}

/* This thread's unit i of row t, in the flat [tokens, hidden] buffer. */
__device__ __forceinline__ int64_t unit_of(int64_t t, int i, int64_t row_units)
{
    return t * row_units + threadIdx.x + (int64_t)i * blockDim.x;
}

/* At most one block of a call an SM (a block a token, the grid within the communicator's blocks): the
 * bound's 1 lets ptxas use the registers that allows, and it spills none. */
template <typename T, bool ALIGNED, int U>
static __global__ void __launch_bounds__(kMaxThreads, 1)
    fused_v19(const T *x, const T *residual, const T *weight, T *out, T *residual_out, int64_t tokens, int64_t hidden,
              float eps, peers P, lamport_bufs L, char *own)
{
    constexpr int V = 16 / sizeof(T); /* elements per unit */
    __shared__ __align__(16) float parts[2][kMaxThreads / 32];
    const int64_t row_units = hidden / V;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    bool mine[U]; /* whether this thread's i-th unit is in the row */
#pragma unroll
    for (int i = 0; i < U; i++)
        mine[i] = threadIdx.x + (int64_t)i * blockDim.x < row_units;
    kl::pdl_release(); /* the next call may launch now; it waits for this grid in its pdl_wait */
    uint4 wt[U];       /* no kernel writes the weight */
#pragma unroll
    for (int i = 0; i < U; i++)
        wt[i] = mine[i] ? chunk_bits(weight + (threadIdx.x + (int64_t)i * blockDim.x) * V, V, ALIGNED) : zero;
    kl::pdl_wait(); /* the previous kernel has ended: x, residual, the epoch and the bookkeeping are final */
    stamp(P, KL_AR_T_RELEASED);
    /* This block's first row, asked for before the call number (it does not depend on it). */
    uint4 xb[U], res[U];
#pragma unroll
    for (int i = 0; i < U; i++) {
        xb[i] = mine[i] ? chunk_bits(x + unit_of(blockIdx.x, i, row_units) * V, V, ALIGNED) : zero;
        res[i] = mine[i] ? chunk_bits(residual + unit_of(blockIdx.x, i, row_units) * V, V, ALIGNED) : zero;
    }
    const uint32_t e = begin_call_unfenced(P);
    const int peer = 1 - P.rank; /* world 2 */
    const uint32_t set = e % KL_AR_LAMPORT_SETS, previous = (e + KL_AR_LAMPORT_SETS - 1) % KL_AR_LAMPORT_SETS;
    kl_ar_signal *me = P.signal[P.rank];
    const uint64_t previous_bytes = me->lamport_dirty[previous]; /* read before block 0 records this call's */

    /* Send: our rows into our slot of this call's set in every peer's buffer. */
    for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x)
#pragma unroll
        for (int i = 0; i < U; i++)
            if (mine[i]) {
                const int64_t j = unit_of(t, i, row_units);
                send_to_peers<uint4>(L, P, set, j,
                                     unit_sendable<T>(t == blockIdx.x ? xb[i] : chunk_bits(x + j * V, V, ALIGNED)));
            }
    stamp(P, KL_AR_T_COPIED);
    count_call_done(P, e); /* this block has read the call number: count it done now, not at the end */

    /* Off the critical path, while the peers' data travels: empty the set the previous call used. */
    empty_own_set(own, P, previous, previous_bytes);
    if (blockIdx.x == 0 && threadIdx.x == 0) me->lamport_dirty[set] = (uint64_t)(tokens * hidden) * sizeof(T);

    /* Receive, add, normalize, a row at a time; every thread runs every row (the barrier needs them all). */
    int parity = 0;
    for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x, parity ^= 1) {
        if (t != blockIdx.x)
#pragma unroll
            for (int i = 0; i < U; i++)
                if (mine[i]) {
                    xb[i] = chunk_bits(x + unit_of(t, i, row_units) * V, V, ALIGNED);
                    res[i] = chunk_bits(residual + unit_of(t, i, row_units) * V, V, ALIGNED);
                }
        uint4 w[U]; /* the peer's units, every poll issued before the first wait */
#pragma unroll
        for (int i = 0; i < U; i++)
            if (mine[i]) w[i] = ld_volatile_v4(own_slot<uint4>(own, P, set, peer) + unit_of(t, i, row_units));
        float r[U][V], sum_sq = 0.f;
#pragma unroll
        for (int i = 0; i < U; i++) {
            if (!mine[i]) continue;
            if (unit_empty<T>(w[i]))
                w[i] = wait_unit<T>(P, own_slot<uint4>(own, P, set, peer) + unit_of(t, i, row_units), e, peer);
            const uint4 ours = unit_sendable<T>(xb[i]);
#pragma unroll
            for (int k = 0; k < V; k++) { /* two addends: the same bits in either order, so on every rank */
                r[i][k] = (kl::elem_f32<T>(ours, k) + kl::elem_f32<T>(w[i], k)) + kl::elem_f32<T>(res[i], k);
                sum_sq += r[i][k] * r[i][k];
            }
            store_chunk<T>(residual_out + unit_of(t, i, row_units) * V, r[i], V, ALIGNED);
        }
        const float inv_rms = rsqrtf(block_sum_in_order(sum_sq, parts, parity) / (float)hidden + eps);
#pragma unroll
        for (int i = 0; i < U; i++)
            if (mine[i]) store_normed<T>(out + unit_of(t, i, row_units) * V, r[i], inv_rms, wt[i], V, ALIGNED);
    }
    stamp(P, KL_AR_T_REDUCED);
    stamp_exit(P);
}

template <typename T, bool ALIGNED, int U>
static cudaError_t launch_u(const struct kl_allreduce_add_rmsnorm_params *p, unsigned grid, unsigned threads,
                            cudaStream_t stream)
{
    const bool pdl = kl::this_device().cc >= 90;
    return kl::launch_pdl(fused_v19<T, ALIGNED, U>, grid, threads, pdl, stream, (const T *)p->ar.x,
                          (const T *)p->residual, (const T *)p->weight, (T *)p->ar.out, (T *)p->residual_out,
                          p->num_tokens, p->hidden, p->eps, make_peers(&p->ar), make_lamport(&p->ar),
                          (char *)p->ar.comm->lamport[p->ar.comm->rank]);
}

template <typename T, bool ALIGNED>
static cudaError_t launch_t(const struct kl_allreduce_add_rmsnorm_params *p, int U, unsigned grid, unsigned threads,
                            cudaStream_t stream)
{
    return U == 1   ? launch_u<T, ALIGNED, 1>(p, grid, threads, stream)
           : U == 2 ? launch_u<T, ALIGNED, 2>(p, grid, threads, stream)
                    : launch_u<T, ALIGNED, 4>(p, grid, threads, stream);
}

static cudaError_t launch(const struct kl_allreduce_add_rmsnorm_params *p, cudaStream_t stream)
{
    /* The checks, the grid (a block a token, up to the communicator's blocks) and the alignment; the
     * widest row checked is v18's, which takes the rows too wide for this variant. */
    fused_shape sh;
    cudaError_t rc = fused_launch_shape(p, stream, kThreads, 8, "v19_lamport_add_rmsnorm_small_blocks", &sh);
    if (rc != cudaSuccess || sh.grid == 0) return rc;
    const int64_t V = 16 / (int64_t)kl_dtype_size(p->ar.dtype), units = p->hidden / V;
    const char *other = p->hidden % V != 0 ? "v15_lamport_add_rmsnorm_in_registers"
                        : p->ar.comm->world != 2 || units > 4 * (int64_t)kMaxThreads
                            ? "v18_lamport_add_rmsnorm_early_done"
                            : NULL;
    if (other) { /* not this variant's rows: found by name, so this file stays one file */
        const auto v =
            (kl_allreduce_ops_fn)kl_variant_launcher("allreduce", other, "v19_lamport_add_rmsnorm_small_blocks");
        return v ? v()->add_rmsnorm(p, stream) : cudaErrorInvalidValue;
    }
    const int U = units >= 4 * kMinThreads ? 4 : units >= 2 * kMinThreads ? 2 : 1;
    const unsigned threads = (unsigned)(((units + U - 1) / U + 31) / 32 * 32);
    KL_DISPATCH_FLOAT(p->ar.dtype, T, {
        rc = sh.aligned ? launch_t<T, true>(p, U, sh.grid, threads, stream)
                        : launch_t<T, false>(p, U, sh.grid, threads, stream);
    });
    return rc;
}

KL_AR_FUSED_OPS(ops, launch, KL_AR_NEEDS_PEERS | KL_AR_NEEDS_LAMPORT)

KL_VARIANT(allreduce, v19_lamport_add_rmsnorm_small_blocks, ops, .min_cc = 90,
           .summary = "v18 with a row on one block of at most 256 threads, up to four units a thread, and the block's "
                      "sum added in warp order from float4 words: no cluster at hidden 8192");
