/* v15_balanced_slices: v8_tma_pages with the work cut into equal slices of pages instead of one chunk a CTA:
 * every CTA of a one-wave grid takes the same number of pages, whatever request, kv head and page they
 * belong to, and a request's pieces cut by the slices meet as v8's splits do.
 *
 * What changed from v8, and why: v8 gives each (request, kv head) a number of chunks planned from
 * max_kv_len, and a grid of more CTAs than the SMs hold at once runs in waves, the last one part-full
 * (b128-kv1k-p16: 1024 CTAs of one chunk for 396 places on 132 SMs); in a ragged batch a CTA of a short
 * request ends long before one of a long request. Here the pages of all (request, kv head block) pairs
 * are laid end to end (request by request, each request's pairs in turn, a pair's pages in order: U units
 * in all, read from kv_indptr on the device) and CTA c takes units [c S, (c + 1) S) with S = ceil(U / G):
 * G is the CTAs the SMs hold at once (three an SM with v8's ring, two at head_dim 256), so the grid is
 * one wave and every CTA the same number of pages (to one, the last ones fewer). A slice that crosses
 * pairs is one piece a pair: the CTA finds its first request by binary search in kv_indptr and walks its
 * pieces in order, each piece v8's key loop over its tokens (v8's ring, producer and consumers, the ring's
 * position carried from piece to piece) followed by v8's finish: a pair whose pages all fall in one slice
 * writes its output; a pair cut into n pieces files piece k (k = c minus the CTA of the pair's first page:
 * every CTA computes the same n and k from S) as split k of n, and the CTA that counts last merges them.
 * Between pieces the ring is the merge area, as in v8's one finish, so a CTA's next piece starts after
 * its finish: the bubble every v8 CTA has at its start, a few times a CTA. The workspace files at most
 * splits_room splits a pair (what it was sized for: kl_attention_decode_workspace_for), so S is widened
 * where a long request would otherwise be cut into more (warp 0 finds the longest request's pages first).
 * Requests with no keys are written by CTA b mod G. The slices come from the device's own kv_indptr, and
 * G from the SMs alone: the call is safe to replay in a CUDA graph whatever the lengths.
 * Bound: the read bandwidth. bf16/fp16, head_dim 64/128/256, sm_90a (fp32: cudaErrorNotSupported); a
 * workspace of fewer than three splits (or the params v8 declines): v8_tma_pages's launcher.
 * Run alone: build/kernlab bench attention_decode --variant v15_balanced_slices */
#include <stdint.h>
#include <stdio.h>

#include "kernels/attention_decode/bf16_ring_tile.cuh"
#include "kernels/attention_decode/decode.cuh"
#include "kernels/attention_decode/page_ring.cuh"
#include "kernels/ptx_sm80.cuh"
#include "kernels/ptx_sm90.cuh"
#include "kernels/variant.h"

namespace {

/* CTAs an SM: three with v8's ring of 64 KB; two at head_dim 256, whose registers do not fit three. */
template <int HD> constexpr int kCtasPerSm = HD == 256 ? 2 : 3;

/* Slices of `per` units: CTA c takes [first(c), first(c + 1)); the last ones may be shorter, or empty. */
struct slices {
    int64_t units, per;
    __device__ int64_t first(int c) const { return (int64_t)c * per < units ? (int64_t)c * per : units; }
    __device__ int cta_of(int64_t u) const { return (int)(u / per); } /* the CTA whose slice holds unit u */
};

/* k_box / v_box: boxes of 64 columns x 1 head x 16 slots (zeros, and boxes 0, where the page size is not a
 * multiple of 16); k_row / v_row: 64 columns x 1 head x 1 slot. */
template <typename T, int HD, int CW, int STAGES>
__global__ void __launch_bounds__(32 * (CW + 1), kCtasPerSm<HD>)
    decode_v15(const __grid_constant__ CUtensorMap k_box, const __grid_constant__ CUtensorMap v_box,
               const __grid_constant__ CUtensorMap k_row, const __grid_constant__ CUtensorMap v_row,
               const kl_attention_decode_params p, int boxes, int splits_room)
{
#if KL_SM90A
    using S = kl::decode::bf16_ring::ring_shape<T, HD, CW, STAGES>;
    static_assert(STAGES % CW == 0, "stage st is always consumed by warp st % CW");
    extern __shared__ unsigned char smem_raw[];
    uint4 *ring = reinterpret_cast<uint4 *>(kl::ptx::align_1024(smem_raw));                     /* the swizzle's atom */
    uint64_t *full = reinterpret_cast<uint64_t *>(ring + S::RING / 16), *empty = full + STAGES; /* after the ring */
    const uint32_t ring_at = kl::ptx::smem_addr(ring);
    __shared__ bool last;                                        /* this CTA merges a pair's pieces */
    __shared__ int most_pages;                                   /* the longest request's pages */
    kl::decode::init_ring_then_wait<STAGES>(full, empty, 1, 32); /* overlaps the previous kernel's tail */

    const int group = (int)(p.num_qo_heads / p.num_kv_heads), blocks = (group + 7) / 8;
    const int pairs = (int)p.num_kv_heads * blocks, batch = (int)p.batch, ps = (int)p.page_size;
    const int c = blockIdx.x, warp = threadIdx.x / 32;
    const int32_t *indptr = p.kv_indptr;
    auto pages = [&](int b) { return indptr[b + 1] - indptr[b]; };
    auto start = [&](int b) { return (int64_t)(indptr[b] - indptr[0]) * pairs; }; /* request b's first unit */
    /* Equal slices for the grid, but no pair in more pieces than the workspace files (splits_room - 1). */
    if (warp == 0) {
        int most = 0;
        for (int b = threadIdx.x; b < batch; b += 32)
            most = max(most, pages(b));
        for (int off = 16; off > 0; off >>= 1)
            most = max(most, __shfl_sync(0xffffffffu, most, threadIdx.x ^ off));
        if (threadIdx.x == 0) most_pages = most;
    }
    __syncthreads();
    const int64_t units = (int64_t)(indptr[batch] - indptr[0]) * pairs;
    const int64_t even = (units + gridDim.x - 1) / gridDim.x, room = (most_pages + splits_room - 3) / (splits_room - 2);
    const slices sl = {units, even > room ? even : room};

    /* Requests with no keys: out = 0, lse = -inf (no slice holds them). */
    for (int b = c; b < batch; b += gridDim.x)
        if (pages(b) == 0)
            for (int h = 0; h < (int)p.num_qo_heads; h++)
                kl::decode::write_empty<T>(p, b, h, threadIdx.x, blockDim.x);
    if (sl.units == 0) return;

    int64_t u = sl.first(c);
    const int64_t u_end = sl.first(c + 1);
    /* The request holding unit u: the largest b with start(b) <= u (a request with no pages starts where
     * the next one does, so it is never the answer while u < units). */
    int lo = 0, hi = batch - 1;
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (start(mid) <= u)
            lo = mid;
        else
            hi = mid - 1;
    }
    int b = lo;
    uint32_t ring_pos = 0; /* tiles through the ring so far: stage and phase of the next one */
    while (u < u_end) {
        while (pages(b) == 0)
            b++;
        const int np = pages(b);
        const int64_t off = u - start(b);
        const int y = (int)(off / np), j0 = (int)(off % np); /* the pair (kv head block y) and its first page */
        const int64_t pair_first = start(b) + (int64_t)y * np, pair_end = pair_first + np;
        const int64_t piece_end = u_end < pair_end ? u_end : pair_end;
        const int j1 = j0 + (int)(piece_end - u);
        const int n = kl::decode::kv_len(p, b), t0 = j0 * ps, t1 = min(n, j1 * ps);
        const int split = c - sl.cta_of(pair_first), splits = sl.cta_of(pair_end - 1) - sl.cta_of(pair_first) + 1;
        const int g = y / blocks, hb = y % blocks, h0 = g * group + hb * 8, nh = min(8, g * group + group - h0);
        const int tiles = (t1 - t0 + 15) / 16;

        float o[S::KSTEPS][4] = {};                         /* the online softmax: O^T, m, l (bf16_ring_tile.cuh) */
        float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0}; /* heads 2 tq and 2 tq + 1 */
        if (warp == S::PRODUCER) {
            kl::decode::produce_page_tiles<STAGES, S::BLOCKS, 64>(&k_box, &v_box, &k_row, &v_row, boxes, p, b, g, t0,
                                                                  t1, ring_at, full, empty, ring_pos);
        } else {
            uint32_t qf[S::KSTEPS][2]; /* Q^T as the B operand of every k-step; scores in log2 units */
            kl::decode::bf16_ring::q_operand<T, HD>(p, b, h0, nh, qf);
            const float scale = p.sm_scale * 1.44269504089f;
            /* Tile i is the ring's tile ring_pos + i, consumed by warp (ring_pos + i) % CW. */
            for (int i = (warp - (int)(ring_pos % CW) + CW) % CW; i < tiles; i += CW) {
                const uint32_t r = ring_pos + i;
                const int st = (int)(r % STAGES);
                kl::ptx::mbar_wait(&full[st], (int)(r / STAGES & 1));
                const uint32_t ks = ring_at + st * S::STAGE_BYTES, vs = ks + S::TILE_HALF;
                kl::decode::bf16_ring::tile_update<T, HD, true>(ks, vs, qf, scale, t0 + 16 * i, t1, o, m, l);
                kl::ptx::mbar_arrive(&empty[st]); /* every lane: v8's rule */
            }
        }
        /* The piece's tiles are all consumed, so no copy is in flight: the ring becomes the merge area. */
        __syncthreads();
        float *mrg = reinterpret_cast<float *>(ring);
        if (warp < CW) kl::decode::bf16_ring::write_state<HD>(mrg + warp * 8 * S::ROW, o, m, l);
        kl::decode::finish_cta<T, HD, CW>(p, mrg, last, b, g, hb, h0, nh, split, splits);
        /* The merge area is the ring again: this thread's plain accesses ordered before the next piece's
         * copies (the async proxy) write the same bytes, then every thread's. */
        kl::ptx::fence_async_smem();
        __syncthreads();
        ring_pos += tiles;
        u = piece_end;
        if (u == start(b) + (int64_t)pairs * np) b++; /* the request's last pair is done */
    }
#else
    __trap(); /* built without sm_90a: the launcher is only reached on sm_90 (min_cc) */
#endif
}

/* ---- host ---- */

template <typename T, int HD, int CW, int STAGES>
cudaError_t launch_shape(const struct kl_attention_decode_params *p, int ctas, int splits_room,
                         const kl::decode::page_maps &m, cudaStream_t stream)
{
    using S = kl::decode::bf16_ring::ring_shape<T, HD, CW, STAGES>;
    static bool configured = false; /* once per instantiation: more than 48 KB of shared memory */
    if (!configured) {
        cudaError_t rc =
            cudaFuncSetAttribute(decode_v15<T, HD, CW, STAGES>, cudaFuncAttributeMaxDynamicSharedMemorySize, S::SMEM);
        if (rc != cudaSuccess) return rc;
        configured = true;
    }
    cudaLaunchAttribute attr[1]; /* a programmatic dependent launch, as v8's */
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {dim3((unsigned)ctas), dim3(S::THREADS), (size_t)S::SMEM, stream, attr, 1};
    return cudaLaunchKernelEx(&cfg, decode_v15<T, HD, CW, STAGES>, m.k_box, m.v_box, m.k_row, m.v_row, *p, m.boxes,
                              splits_room);
}

/* v8's ring: eight stages of 16 tokens, four at head_dim 256. */
template <typename T, int HD>
cudaError_t launch_hd(const struct kl_attention_decode_params *p, int splits_room, const kl::decode::page_maps &m,
                      cudaStream_t stream)
{
    const int ctas = kCtasPerSm<HD> * kl_attention_decode_sms(); /* one wave */
    if constexpr (HD == 256)
        return launch_shape<T, HD, 4, 4>(p, ctas, splits_room, m, stream);
    else
        return launch_shape<T, HD, 4, 8>(p, ctas, splits_room, m, stream);
}

cudaError_t launch(const struct kl_attention_decode_params *p, cudaStream_t stream)
{
    cudaError_t rc = kl_attention_decode_check_params(p, "v15_balanced_slices");
    if (rc != cudaSuccess || p->batch == 0) return rc;
    if (p->dtype == KL_F32) return cudaErrorNotSupported;
    /* The splits the workspace files (kl_attention_decode_workspace_for): the kernel cuts no pair into more
     * than splits_room - 1 pieces, widening the slices where a long request would need more. */
    int splits_room = 0;
    while (splits_room < KL_DECODE_MAX_SPLITS &&
           kl_attention_decode_workspace_for(p, splits_room + 1) <= p->workspace_bytes)
        splits_room++;
    const bool v8_takes = splits_room < 3 || p->num_pages * p->page_size > INT32_MAX ||
                          (((uintptr_t)p->k_cache | (uintptr_t)p->v_cache) & 15);
    if (v8_takes) {
        const auto v8 = (kl_attention_decode_launch_fn)kl_variant_launcher("attention_decode", "v8_tma_pages",
                                                                            "v15_balanced_slices");
        return v8 ? v8(p, stream) : cudaErrorInvalidValue;
    }
    kl::decode::page_maps maps;
    rc = kl::decode::make_page_maps(p, p->dtype == KL_BF16 ? kl::cache_elem::bf16 : kl::cache_elem::f16,
                                    "attention_decode v15_balanced_slices", &maps);
    if (rc != cudaSuccess) return rc;
    if (p->dtype == KL_BF16) {
        KL_DISPATCH_HEAD_DIM(p->head_dim, HD, return launch_hd<__nv_bfloat16, HD>(p, splits_room, maps, stream));
    } else {
        KL_DISPATCH_HEAD_DIM(p->head_dim, HD, return launch_hd<__half, HD>(p, splits_room, maps, stream));
    }
    return cudaErrorNotSupported;
}

} // namespace

KL_VARIANT(attention_decode, v15_balanced_slices, launch, .min_cc = 90,
           .summary = "v8's TMA ring over equal slices of all pages (a one-wave grid, pieces of a request merged as "
                      "splits), sliced on the device from kv_indptr");
