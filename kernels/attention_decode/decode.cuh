/* Device helpers the attention_decode variants share: the page table walk, the split-KV
 * workspace and the merge of partial results. Inline device code only. */
#pragma once

#include <math.h>
#include <stdio.h> /* the launchers say which argument is wrong */

#include "kernels/attention_decode/attention_decode.h"
#include "kernels/common.cuh"

namespace kl::decode {

/* kv_len of request b: (pages - 1) * page_size + tokens in the last page. */
__device__ __forceinline__ int kv_len(const kl_attention_decode_params &p, int b)
{
    const int pages = p.kv_indptr[b + 1] - p.kv_indptr[b];
    return pages ? (pages - 1) * (int)p.page_size + p.kv_last_page_len[b] : 0;
}

/* Element offset of token t of request b, kv head g, dim 0 in either cache. */
__device__ __forceinline__ int64_t kv_offset(const kl_attention_decode_params &p, int b, int t, int g)
{
    const int64_t page = p.kv_indices[p.kv_indptr[b] + t / (int)p.page_size];
    return ((page * p.page_size + t % (int)p.page_size) * p.num_kv_heads + g) * p.head_dim;
}

/* The threads that run a finish (the merges below): the whole block, or a team of its warps (v30_item_pipeline:
 * the consumer warps, meeting at a named barrier, while the producer warps go on gathering). rank() counts
 * from 0 at thread 0 of the block, which is in every team; unsigned, as threadIdx.x and blockDim.x are. */
struct whole_block {
    __device__ __forceinline__ unsigned rank() const { return threadIdx.x; }
    __device__ __forceinline__ unsigned size() const { return blockDim.x; }
    __device__ __forceinline__ void sync() const { __syncthreads(); }
};

/* The split-KV workspace (sized by kl_attention_decode_workspace_bytes): first one merge counter
 * per (request, kv head, block of 8 of its group x q_rows rows) and KL_DECODE_SCHEDULER_WORDS words
 * for a persistent variant's work items, then per (split, query row, qo head) a partial row: the
 * unnormalised output acc[head_dim], the running max m (log2 units) and the sum l. Query rows are
 * numbered as in out; q_rows (kl_attention_decode_q_rows: max_q_len with several query tokens, else
 * 1) bounds them at batch x q_rows. */
__device__ __forceinline__ unsigned *counters(const kl_attention_decode_params &p)
{
    return static_cast<unsigned *>(p.workspace);
}

__device__ __forceinline__ int64_t merge_counters(const kl_attention_decode_params &p, int64_t q_rows = 1)
{
    return p.batch * p.num_kv_heads * ((p.num_qo_heads / p.num_kv_heads * q_rows + 7) / 8);
}

/* The scheduler words, after the merge counters. */
__device__ __forceinline__ unsigned *scheduler(const kl_attention_decode_params &p, int64_t q_rows = 1)
{
    return counters(p) + merge_counters(p, q_rows);
}

__device__ __forceinline__ float *partial(const kl_attention_decode_params &p, int split, int row, int h,
                                          int64_t q_rows = 1)
{
    const int64_t words = merge_counters(p, q_rows) + KL_DECODE_SCHEDULER_WORDS;
    float *base =
        reinterpret_cast<float *>(static_cast<char *>(p.workspace) + (words * sizeof(unsigned) + 255) / 256 * 256);
    return base + ((split * p.batch * q_rows + row) * p.num_qo_heads + h) * (p.head_dim + 2);
}

/* Floats from a split's partial row to the next split's for the same query row and head. */
__device__ __forceinline__ int64_t partial_split_stride(const kl_attention_decode_params &p, int64_t q_rows = 1)
{
    return p.batch * q_rows * p.num_qo_heads * (p.head_dim + 2);
}

/* Row r of what a block merges: query row `row` (of out), qo head h0 + h. */
struct out_row {
    int row, h0, h;
};

/* The final outputs of nr (query row, qo head) pairs, at(r) for r < nr, from the partials of
 * `splits` splits s0, s0 + every, s0 + 2 every, ..., computed by the whole block (every thread must
 * call it; it synchronises once), or by `team` alone; TO_PARTIAL: their merge as one partial, written over split s0's
 * rows (acc unnormalised, m = M, l = L), for a merge of merges to take up. With
 * M = max m_s, the weights w_s = 2^(m_s - M) put every partial on one scale: out = sum acc_s w_s
 * / L and lse = ln 2 (M + log2 L), L = sum l_s w_s. Phase 1: one warp per pair computes its
 * weights into w (shared, nr * (splits + 2) floats) with shuffles only; phase 2: every thread
 * sums two adjacent dims of a pair over the splits (a partial row is head_dim + 2 floats, so a dim
 * pair is 8-byte aligned), MERGE_LOADS splits' loads issued before their sums: a merge of many
 * splits is a chain of L2 round trips, each as long for 8 loads as for one (more would raise the
 * register count of the kernels this merge is inlined into: v9 loses a CTA an SM at 16). The sums
 * run in split order, as a one-at-a-time loop would. Partials were written by other blocks: read
 * through L2 (__ldcg), never from a stale L1 line. */
template <typename T, bool TO_PARTIAL, typename At, typename Team = whole_block>
__device__ __forceinline__ void merge_split_rows(const kl_attention_decode_params &p, int nr, int s0, int splits,
                                                 int every, float *w, int64_t q_rows, At at, Team team = {})
{
    const int hd = (int)p.head_dim, lane = threadIdx.x % 32, stride = splits + 2;
    const int64_t step = partial_split_stride(p, q_rows) * every;
    for (int h = team.rank() / 32; h < nr; h += team.size() / 32) {
        const out_row o = at(h);
        const float *first = partial(p, s0, o.row, o.h0 + o.h, q_rows); /* split s0's row; the s-th is s steps on */
        float *wh = w + h * stride, m = -INFINITY, l = 0;
        for (int s = lane; s < splits; s += 32) {
            wh[s] = __ldcg(first + s * step + hd); /* m_s, until it becomes the weight */
            m = fmaxf(m, wh[s]);
        }
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
        for (int s = lane; s < splits; s += 32) {
            wh[s] = exp2f(wh[s] - m);
            l += __ldcg(first + s * step + hd + 1) * wh[s];
        }
        l = kl::warp_sum(l);
        if (lane == 0) wh[splits] = m, wh[splits + 1] = l;
    }
    team.sync();
    constexpr int MERGE_LOADS = 8;
    for (int i = team.rank(); i < nr * hd / 2; i += team.size()) {
        const int h = i / (hd / 2), d = 2 * (i % (hd / 2));
        const out_row o = at(h);
        const float *wh = w + h * stride, *first = partial(p, s0, o.row, o.h0 + o.h, q_rows) + d;
        float acc0 = 0, acc1 = 0;
        for (int s = 0; s < splits; s += MERGE_LOADS) {
            const int n = min(MERGE_LOADS, splits - s);
            float2 v[MERGE_LOADS];
#pragma unroll
            for (int k = 0; k < MERGE_LOADS; k++)
                v[k] = k < n ? __ldcg(reinterpret_cast<const float2 *>(first + (s + k) * step)) : make_float2(0.f, 0.f);
#pragma unroll
            for (int k = 0; k < MERGE_LOADS; k++)
                if (k < n) acc0 += v[k].x * wh[s + k], acc1 += v[k].y * wh[s + k];
        }
        if constexpr (TO_PARTIAL) { /* this thread read these dims of split s0 above; m and l before the barrier */
            float *row = partial(p, s0, o.row, o.h0 + o.h, q_rows);
            row[d] = acc0, row[d + 1] = acc1;
            if (d == 0) row[hd] = wh[splits], row[hd + 1] = wh[splits + 1];
            continue;
        }
        T *out = static_cast<T *>(p.out) + ((int64_t)o.row * p.num_qo_heads + o.h0 + o.h) * hd + d;
        out[0] = kl::from_f32<T>(acc0 / wh[splits + 1]), out[1] = kl::from_f32<T>(acc1 / wh[splits + 1]);
        if (d == 0)
            p.lse[(int64_t)o.row * p.num_qo_heads + o.h0 + o.h] = (wh[splits] + log2f(wh[splits + 1])) * 0.69314718056f;
    }
}

/* merge_split_rows over every split of a request, to the output. */
template <typename T, typename At, typename Team = whole_block>
__device__ __forceinline__ void merge_partials_at(const kl_attention_decode_params &p, int nr, int splits, float *w,
                                                  int64_t q_rows, At at, Team team = {})
{
    merge_split_rows<T, false>(p, nr, 0, splits, 1, w, q_rows, at, team);
}

/* merge_partials_at for one query per request: heads h0 .. h0 + nh - 1 of request b. */
template <typename T, typename Team = whole_block>
__device__ __forceinline__ void merge_partials(const kl_attention_decode_params &p, int b, int h0, int nh, int splits,
                                               float *w, Team team = {})
{
    merge_partials_at<T>(p, nh, splits, w, 1, [=](int h) { return out_row{b, h0, h}; }, team);
}

/* The end of a variant whose WARPS warps each kept an online softmax over part of a chunk for up to COLS
 * columns (v4_tensor_cores, v28_draft_tile_gatherers): column c < nh is query row at(c), and warp w has
 * written its state for column c as row w * COLS + c of mrg (HD + 2 floats: the unnormalised acc, the
 * running max m in log2 units, the sum l). The warps' rows are merged on their common max (a warp with
 * no tile has m = -inf and weighs 0) into the nh rows after them; a request in one split then writes
 * out and lse; a split files its partials under its query rows (q_rows: the workspace's query slots a
 * request) and counts them on `counter`, and the block that brings the count to `splits` merges them
 * all (merge_partials_at: v4's scheme). Every thread of the block calls it; `last` is a flag in the
 * kernel's shared memory; mrg needs room for (WARPS + 1) x COLS rows and for the merge's weights. */
template <typename T, int HD, int WARPS, int COLS, typename At>
__device__ __forceinline__ void finish_rows(const kl_attention_decode_params &p, float *mrg, bool &last, int nh, At at,
                                            unsigned *counter, int split, int splits, int64_t q_rows)
{
    constexpr int ROW = HD + 2;
    float *res = mrg + WARPS * COLS * ROW;
    __syncthreads();
    for (int i = threadIdx.x; i < nh * ROW; i += blockDim.x) {
        const int h = i / ROW, d = i % ROW;
        float mx = -INFINITY, sum = 0;
        for (int w = 0; w < WARPS; w++)
            mx = fmaxf(mx, mrg[(w * COLS + h) * ROW + HD]);
        for (int w = 0; w < WARPS; w++) {
            const float *row = mrg + (w * COLS + h) * ROW;
            sum += (d == HD ? 0.f : row[d]) * (mx == -INFINITY ? 0.f : exp2f(row[HD] - mx));
        }
        res[i] = d == HD ? mx : sum;
    }
    __syncthreads();

    if (splits == 1) { /* the whole request in this block: write the output */
        for (int i = threadIdx.x; i < nh * HD; i += blockDim.x) {
            const int h = i / HD, d = i % HD;
            const out_row o = at(h);
            const float *r = res + h * ROW;
            static_cast<T *>(p.out)[((int64_t)o.row * p.num_qo_heads + o.h0 + o.h) * HD + d] =
                kl::from_f32<T>(r[d] / r[HD + 1]);
            if (d == 0)
                p.lse[(int64_t)o.row * p.num_qo_heads + o.h0 + o.h] = (r[HD] + log2f(r[HD + 1])) * 0.69314718056f;
        }
        return;
    }
    for (int i = threadIdx.x; i < nh * ROW; i += blockDim.x) {
        const out_row o = at(i / ROW);
        partial(p, split, o.row, o.h0 + o.h, q_rows)[i % ROW] = res[i];
    }
    /* Publish the partials, then count them: the fence makes this thread's partial stores visible
     * device-wide before the barrier lets thread 0 increment the counter; the block that brings the
     * count to `splits` reads every partial after its own fence, through L2. */
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(counter, 1u) == (unsigned)splits - 1;
        if (last) *counter = 0; /* every other block of this request has counted: reset for the next launch */
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    merge_partials_at<T>(p, nh, splits, mrg, q_rows, at);
}

/* out = 0 and lse = -inf for a request with no keys (the empty sum). */
template <typename T>
__device__ __forceinline__ void write_empty(const kl_attention_decode_params &p, int b, int h, int lane, int lanes)
{
    T *out = static_cast<T *>(p.out) + ((int64_t)b * p.num_qo_heads + h) * p.head_dim;
    for (int d = lane; d < p.head_dim; d += lanes) out[d] = kl::from_f32<T>(0.f);
    if (lane == 0) p.lse[(int64_t)b * p.num_qo_heads + h] = -INFINITY;
}

} // namespace kl::decode

namespace kl::decode {

/* ---- the CUDA-core path shared by v1, v2 and v3 ----
 * A block of 4 warps attends one kv head g for `nh` (<= GMAX) consecutive qo heads h0.. over the
 * tokens [t0, t1) of request b. Each token's K (and V) row is split into 16-byte vectors: LANES
 * lanes cover a row (VPL vectors each), so a warp holds TPW tokens at once and the block GROUPS
 * = 4 * TPW token streams; stream i takes tokens t0 + i, t0 + i + GROUPS, ... Every stream keeps
 * an online softmax per head (running max m in log2 units, sum l, unnormalised acc), rescaling
 * acc whenever the max grows. At the end the streams are merged through shared memory. */
template <typename T, int HD> struct cuda_core_shape {
    static constexpr int VEC = 16 / sizeof(T);                 /* elements per 16-byte vector */
    static constexpr int NV = HD / VEC;                        /* vectors per row */
    static constexpr int LANES = NV < 32 ? NV : 32;            /* lanes sharing one row */
    static constexpr int VPL = NV / LANES;                     /* vectors per lane */
    static constexpr int E = VPL * VEC;                        /* elements per lane */
    static constexpr int TPW = 32 / LANES;                     /* tokens a warp holds at once */
    static constexpr int WARPS = 4, THREADS = 32 * WARPS, GROUPS = WARPS * TPW;
    /* shared floats: every stream's (acc, m, l) per head, then the merged (acc, m, l) per head */
    template <int GMAX> static constexpr int smem_floats() { return (GROUPS + 1) * GMAX * (HD + 2); }
};

/* Loads this lane's E elements of a row as floats (VPL 16-byte loads). */
template <typename T, int HD>
__device__ __forceinline__ void load_row(const T *row, int li, float (&x)[cuda_core_shape<T, HD>::E])
{
    using S = cuda_core_shape<T, HD>;
#pragma unroll
    for (int j = 0; j < S::VPL; j++) {
        const uint4 w = reinterpret_cast<const uint4 *>(row)[li + j * S::LANES];
#pragma unroll
        for (int e = 0; e < S::VEC; e++) x[j * S::VEC + e] = kl::elem_f32<T>(w, e);
    }
}

/* Attends [t0, t1) for heads h0..h0+nh-1; leaves in shared memory, per head h < nh, the merged
 * unnormalised acc[HD] at sm + (GROUPS * GMAX + h) * (HD + 2), its max m at [HD] and sum l at
 * [HD + 1] (m = -inf, l = 0 when the range is empty). Ends with a barrier. */
template <typename T, int HD, int GMAX>
__device__ __forceinline__ void attend_cuda_cores(const kl_attention_decode_params &p, int b, int g, int h0, int nh,
                                                  int t0, int t1, float *sm)
{
    using S = cuda_core_shape<T, HD>;
    constexpr int E = S::E, ROW = HD + 2;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, li = lane % S::LANES;
    const int stream = warp * S::TPW + lane / S::LANES;
    const float scale = p.sm_scale * 1.44269504089f; /* scores in log2 units: exp(x) = exp2(x log2 e) */

    float q[GMAX][E], m[GMAX], l[GMAX], acc[GMAX][E];
#pragma unroll
    for (int h = 0; h < GMAX; h++) {
        if (h < nh) load_row<T, HD>(static_cast<const T *>(p.q) + ((int64_t)b * p.num_qo_heads + h0 + h) * HD, li, q[h]);
        else
#pragma unroll
            for (int e = 0; e < E; e++) q[h][e] = 0;
        m[h] = -INFINITY, l[h] = 0;
#pragma unroll
        for (int e = 0; e < E; e++) acc[h][e] = 0;
    }

    /* The trip count is the same for the whole warp (the shuffles below need every lane); a
     * stream past t1 computes with zeros and masks its score to -inf. */
    for (int base = t0; base < t1; base += S::GROUPS) {
        const int t = base + stream;
        const bool valid = t < t1;
        float k[E], v[E];
        if (valid) {
            const int64_t at = kv_offset(p, b, t, g);
            load_row<T, HD>(static_cast<const T *>(p.k_cache) + at, li, k); /* K and V loads both issued */
            load_row<T, HD>(static_cast<const T *>(p.v_cache) + at, li, v); /* before the first use */
        } else {
#pragma unroll
            for (int e = 0; e < E; e++) k[e] = v[e] = 0;
        }
#pragma unroll
        for (int h = 0; h < GMAX; h++) {
            float s = 0;
#pragma unroll
            for (int e = 0; e < E; e++) s += q[h][e] * k[e];
#pragma unroll
            for (int off = S::LANES / 2; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
            s = valid ? s * scale : -INFINITY;
            const float m_new = fmaxf(m[h], s);
            if (m_new == -INFINITY) continue; /* nothing seen yet: exp2(-inf - -inf) would be NaN */
            const float alpha = exp2f(m[h] - m_new), prob = exp2f(s - m_new);
            l[h] = l[h] * alpha + prob;
#pragma unroll
            for (int e = 0; e < E; e++) acc[h][e] = acc[h][e] * alpha + prob * v[e];
            m[h] = m_new;
        }
    }

    /* Merge the streams: each writes its rows, then thread i computes merged dims. */
#pragma unroll
    for (int h = 0; h < GMAX; h++) {
        float *row = sm + (stream * GMAX + h) * ROW;
#pragma unroll
        for (int j = 0; j < S::VPL; j++)
#pragma unroll
            for (int e = 0; e < S::VEC; e++) row[(li + j * S::LANES) * S::VEC + e] = acc[h][j * S::VEC + e];
        if (li == 0) row[HD] = m[h], row[HD + 1] = l[h];
    }
    __syncthreads();
    for (int i = threadIdx.x; i < nh * (HD + 2); i += S::THREADS) {
        const int h = i / (HD + 2), d = i % (HD + 2);
        float mx = -INFINITY;
        for (int s = 0; s < S::GROUPS; s++) mx = fmaxf(mx, sm[(s * GMAX + h) * ROW + HD]);
        float sum = 0;
        for (int s = 0; s < S::GROUPS; s++) {
            const float *row = sm + (s * GMAX + h) * ROW;
            const float w = mx == -INFINITY ? 0.f : exp2f(row[HD] - mx); /* an empty stream weighs 0 */
            sum += (d == HD ? 0.f : d == HD + 1 ? row[HD + 1] : row[d]) * w;
        }
        sm[(S::GROUPS * GMAX + h) * ROW + d] = d == HD ? mx : sum;
    }
    __syncthreads();
}

/* Writes the merged result of attend_cuda_cores as the final out and lse of (b, h0 + h). */
template <typename T, int HD, int GMAX>
__device__ __forceinline__ void write_output(const kl_attention_decode_params &p, int b, int h0, int nh, const float *sm)
{
    using S = cuda_core_shape<T, HD>;
    for (int i = threadIdx.x; i < nh * HD; i += S::THREADS) {
        const int h = i / HD, d = i % HD;
        const float *res = sm + (S::GROUPS * GMAX + h) * (HD + 2);
        static_cast<T *>(p.out)[((int64_t)b * p.num_qo_heads + h0 + h) * HD + d] = kl::from_f32<T>(res[d] / res[HD + 1]);
        if (d == 0) p.lse[(int64_t)b * p.num_qo_heads + h0 + h] = (res[HD] + log2f(res[HD + 1])) * 0.69314718056f;
    }
}

/* The first step of finish_cta_heads (below), and of v13_cluster_merge's finish: the CW warps' rows
 * of each head merged on their common max into res, the row after the CW * 8 rows of the head's
 * area (a warp with no tile has m = -inf and weighs 0). Every thread of `team` calls it; it synchronises
 * the team before and after. */
template <int HD, int CW, int HEADS, typename Team = whole_block>
__device__ __forceinline__ void merge_warp_states(float *mrg, int stride, int nh, Team team = {})
{
    constexpr int ROW = HD + 2;
    team.sync();
    for (int i = team.rank(); i < HEADS * nh * ROW; i += team.size()) {
        const int k = i / (nh * ROW), h = i / ROW % nh, d = i % ROW;
        float *rows = mrg + k * stride;
        float mx = -INFINITY, sum = 0;
        for (int w = 0; w < CW; w++) mx = fmaxf(mx, rows[(w * 8 + h) * ROW + HD]);
        for (int w = 0; w < CW; w++) {
            const float *row = rows + (w * 8 + h) * ROW;
            sum += (d == HD ? 0.f : row[d]) * (mx == -INFINITY ? 0.f : exp2f(row[HD] - mx));
        }
        rows[CW * 8 * ROW + i % (nh * ROW)] = d == HD ? mx : sum;
    }
    team.sync();
}

/* The merge counter of block hb (of 8 qo heads) of kv head g of request b. */
__device__ __forceinline__ unsigned *counter_of(const kl_attention_decode_params &p, int b, int g, int hb)
{
    const int blocks = (int)((p.num_qo_heads / p.num_kv_heads + 7) / 8);
    return counters(p) + ((int64_t)b * p.num_kv_heads + g) * blocks + hb;
}

/* v4's count: the block that brings the count to `splits` merges, and resets the counter for the next
 * launch (every other block of the request has counted). */
struct count_last {
    int splits;
    __device__ __forceinline__ bool operator()(unsigned *counter) const
    {
        const bool last = atomicAdd(counter, 1u) == (unsigned)splits - 1;
        if (last) *counter = 0;
        return last;
    }
};

/* After the key loop of a variant whose CW warps each kept an online softmax over part of a chunk,
 * the whole block (every thread calls it), for HEADS consecutive kv heads g + k (k < HEADS) whose
 * merge areas lie `stride` floats apart from mrg: in head k's area warp w < CW has written its
 * state for each of the nh heads h of the block (qo heads h0 + k * nh + h, block hb of 8 heads of
 * kv head g + k's group) as the row (w * 8 + h) * (HD + 2): the unnormalised acc[HD], the running
 * max m (log2 units), the sum l. merge_warp_states merges them into res; a request in one split
 * writes out and lse, a split files its partials and counts them once on the counter of kv head g
 * (v4's scheme; every block of the request covers the same HEADS heads, so one count stands for all
 * of them: thread 0 calls count(counter), which says whether this block merges, count_last below
 * unless the variant merges otherwise). Returns true in the block that merges (`last`: a flag in the
 * kernel's shared memory): the partials counted before it are visible to it, and its merge areas
 * are free. One fence publishes every head's partials: the fence waits for the block's stores to
 * reach the whole device, so a block over eight heads pays for it once instead of eight times.
 * `team`: the threads that run it, where they are not the whole block (v30_item_pipeline). */
template <typename T, int HD, int CW, int HEADS, typename Count, typename Team = whole_block>
__device__ __forceinline__ bool file_cta_heads(const kl_attention_decode_params &p, float *mrg, int stride,
                                               bool &last, int b, int g, int hb, int h0, int nh, int split,
                                               int splits, Count count, Team team = {})
{
    constexpr int ROW = HD + 2;
    auto res = [&](int k) { return mrg + k * stride + CW * 8 * ROW; };
    merge_warp_states<HD, CW, HEADS>(mrg, stride, nh, team);

    if (splits == 1) { /* the whole request in this block: write the output */
        for (int i = team.rank(); i < HEADS * nh * HD; i += team.size()) {
            const int k = i / (nh * HD), h = i / HD % nh, d = i % HD;
            const float *r = res(k) + h * ROW;
            const int64_t row = (int64_t)b * p.num_qo_heads + h0 + k * nh + h;
            static_cast<T *>(p.out)[row * HD + d] = kl::from_f32<T>(r[d] / r[HD + 1]);
            if (d == 0) p.lse[row] = (r[HD] + log2f(r[HD + 1])) * 0.69314718056f;
        }
        return false;
    }
    for (int i = team.rank(); i < HEADS * nh * ROW; i += team.size()) {
        const int k = i / (nh * ROW), j = i % (nh * ROW);
        kl::decode::partial(p, split, b, h0 + k * nh + j / ROW)[j % ROW] = res(k)[j];
    }
    /* Publish the partials, then count them: the fence makes this thread's partial stores visible
     * device-wide before the barrier lets thread 0 increment the counter; the block that brings the
     * count to `splits` merges, reading the partials through L2. */
    __threadfence();
    team.sync();
    if (team.rank() == 0) last = count(counter_of(p, b, g, hb));
    team.sync();
    if (!last) return false;
    __threadfence();
    return true;
}

/* file_cta_heads, then the final merge where this block counted last. */
template <typename T, int HD, int CW, int HEADS, typename Team = whole_block>
__device__ __forceinline__ void finish_cta_heads(const kl_attention_decode_params &p, float *mrg, int stride,
                                                 bool &last, int b, int g, int hb, int h0, int nh, int split,
                                                 int splits, Team team = {})
{
    if (!file_cta_heads<T, HD, CW, HEADS>(p, mrg, stride, last, b, g, hb, h0, nh, split, splits, count_last{splits},
                                          team))
        return;
    for (int k = 0; k < HEADS; k++) /* each merge uses its own head's area: no barrier between them */
        kl::decode::merge_partials<T>(p, b, h0 + k * nh, nh, splits, mrg + k * stride, team);
}

/* finish_cta_heads for the one kv head g of a block. */
template <typename T, int HD, int CW, typename Team = whole_block>
__device__ __forceinline__ void finish_cta(const kl_attention_decode_params &p, float *mrg, bool &last, int b,
                                           int g, int hb, int h0, int nh, int split, int splits, Team team = {})
{
    finish_cta_heads<T, HD, CW, 1>(p, mrg, 0, last, b, g, hb, h0, nh, split, splits, team);
}

/* The online softmax of one 16-token tile in the mma.sync layout the ring consumers share
 * (bf16_ring_tile.cuh, fp8_ring_tile.cuh): lane (gq, tq) holds x[0], x[1] (token gq, head columns 2 tq, 2 tq + 1) and x[2], x[3] (token
 * gq + 8), scores in log2 units, -inf where masked. Each column's max over the tile (the 8 lanes of
 * one tq) updates its running max m; l and the unnormalised O^T (MT m-tiles, columns as the scores')
 * are rescaled to it, and the tile's weights, returned in w, are added to l before any rounding. */
template <int MT>
__device__ __forceinline__ void softmax_tile(const float (&x)[4], float (&m)[2], float (&l)[2], float (&o)[MT][4],
                                             float (&w)[4])
{
    float mx0 = fmaxf(x[0], x[2]), mx1 = fmaxf(x[1], x[3]);
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) {
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
    }
    const float mn0 = fmaxf(m[0], mx0), mn1 = fmaxf(m[1], mx1);
    const float base0 = mn0 == -INFINITY ? 0.f : mn0, base1 = mn1 == -INFINITY ? 0.f : mn1;
    const float al0 = exp2f(m[0] - base0), al1 = exp2f(m[1] - base1);
    w[0] = exp2f(x[0] - base0), w[1] = exp2f(x[1] - base1), w[2] = exp2f(x[2] - base0), w[3] = exp2f(x[3] - base1);
    l[0] = l[0] * al0 + w[0] + w[2], l[1] = l[1] * al1 + w[1] + w[3];
    m[0] = mn0, m[1] = mn1;
#pragma unroll
    for (int mt = 0; mt < MT; mt++) o[mt][0] *= al0, o[mt][1] *= al1, o[mt][2] *= al0, o[mt][3] *= al1;
}

/* A column's l summed over the 8 lanes that hold its tokens (the lanes of one tq), before the state
 * is written for finish_cta. */
__device__ __forceinline__ void sum_column_l(float (&l)[2])
{
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) {
        l[0] += __shfl_xor_sync(0xffffffffu, l[0], off);
        l[1] += __shfl_xor_sync(0xffffffffu, l[1], off);
    }
}

} // namespace kl::decode

/* Calls body with HD bound to head_dim (64, 128 or 256); other sizes: cudaErrorNotSupported. */
#define KL_DISPATCH_HEAD_DIM(head_dim, HD, ...)                          \
    switch (head_dim) {                                                  \
    case 64: { constexpr int HD = 64; __VA_ARGS__; } break;              \
    case 128: { constexpr int HD = 128; __VA_ARGS__; } break;            \
    case 256: { constexpr int HD = 256; __VA_ARGS__; } break;            \
    default: return cudaErrorNotSupported;                               \
    }
