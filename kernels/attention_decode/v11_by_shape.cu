/* v11_by_shape: for each call, the rung this lab measured fastest on that kind of call, as a serving
 * engine picks its decode kernel by the batch's shape: no new kernel, a choice among v4, v7, v8, v10
 * and the later rungs built for the calls v8 serves worst: v12 and v19 (the page sizes v8 gathers) and
 * v13 (batches so small that their keys are split), v26 (gathering warps that each copy whole tiles
 * into a six-stage ring), v27 (v26's gathering on FP8 pages), v28 (v26's ring for draft tokens), v31
 * (v26's CTA made persistent, taking its chunks from a queue, so ragged batches end together, the
 * queue's last items the smallest) and v32 (v26's CTA whose splits meet in clusters, the clusters'
 * partials in one batch of loads).
 *
 * What changed from v10, and why: no single rung runs every workload at its best. v8_tma_pages reads a
 * 16-bit cache fastest where every tile is 16 slots of one page, but it declines draft tokens and
 * gathers other page sizes one 128-byte box per row, below v4's cp.async gather; v4_tensor_cores takes
 * every 16-bit call, and v28 every 16-bit call with draft tokens on sm_90; the FP8 rungs take only
 * e4m3 caches, v27 at head_dim 128, v10 at 128 and 256, v7 at 64 too.
 * Here the call goes, in order of preference (kl_attention_decode_by_shape, params.c), to
 *   an e4m3 cache:                                      v27_fp8_tile_gatherers, else v10, else v7
 *   one query a request, page size a multiple of 16,
 *     too few (request, kv head) pairs for 3 CTAs an SM,
 *       a request in 8 splits or fewer by v8's plan:    v13_cluster_merge, else v8, else v4
 *       a request in more:                              v32_cluster_tail, else v13, else v8, else v4
 *     enough pairs:                                     v31_shrinking_items, else v8, else v4
 *   one query a request, any other page size (page 1):  v32_cluster_tail, else v19, else v12, else v4
 *   draft tokens (qo_indptr):                           v28_draft_tile_gatherers, else v4
 * "else": the next one where a rung is not built, needs a newer device, or declines the shape
 * (cudaErrorNotSupported, before it launches anything). The choice reads only the params and the SM
 * count, never the lengths on the device, so a graph captured for one batch replays with any lengths.
 * The tables of the rungs it names show where it sits; the gate judges it on every workload.
 * Bound: that of the rung it picks. sm_80 and up (v4 alone below sm_90, no FP8 below sm_89).
 * Run alone: build/kernlab bench attention_decode --variant v11_by_shape */
#include <stdio.h>

#include "kernels/attention_decode/attention_decode.h"
#include "kernels/common.cuh"
#include "kernels/variant.h"

static cudaError_t launch(const struct kl_attention_decode_params *p, cudaStream_t stream)
{
    const int cc = kl::this_device().cc;
    for (const char *const *order = kl_attention_decode_by_shape(p, kl_attention_decode_sms()); *order; order++) {
        const struct kl_variant *v = kl_variant_find("attention_decode", *order);
        if (!v || v->min_cc > cc) continue;
        const cudaError_t rc = ((kl_attention_decode_launch_fn)v->launch)(p, stream);
        if (rc != cudaErrorNotSupported) return rc;
    }
    return cudaErrorNotSupported;
}

KL_VARIANT(attention_decode, v11_by_shape, launch, .min_cc = 80,
           .summary = "by shape: v31 on whole 16-slot pages with one query (v13 where the batch is too small to "
                      "fill the SMs, v32 where its requests are also long), v32 on other pages, v28 (else v4) for "
                      "draft tokens, v27 (else v10, v7) on e4m3 caches");
