/* `kernlab story`: a Llama-shaped decoder built from the lab's best variants plus cuBLAS, run
 * through a radix-cached prefill, an extend and a batched decode, with every kernel recorded and
 * each distinct one profiled (lab/CONTRACTS.md section 9). The pieces, read top to bottom:
 *   lab/story/model.c      the decoder: weights, buffers, one forward pass (every launch an "op")
 *   lab/story/cache.c      pages: a free-list allocator and the radix tree's prefix -> page map
 *   lab/story/scheduler.c  the requests: miss, hit, decode, CUDA graph, control; the results file
 *   lab/story/timeline.c   CUPTI Activity records -> ops, phases, steps; Range Profiler per op
 *   lab/story/document.c   the results file read back and checked
 *   lab/report/story*.c    (the guide generator) the results file -> reports/story.md and
 *                          reports/story-trace.json; story_command.c there is the command line
 *   reference/story.c      the same decoder in float64, with the tolerance of the end-to-end check
 *
 * The results file, story.json (one JSON document, "format": "kernlab-story-1"):
 *   commit, date                      the build's commit, the run's UTC date
 *   device {name, cc, sms, l2_bytes, memory_bytes, sm_clock_mhz, mem_clock_mhz}
 *   model {name, layers, hidden, qo_heads, kv_heads, head_dim, mlp, vocab, dtype, page_size,
 *          rope_theta, seed}           with kv_fp8 also kv ("fp8") and kv_scale (how, in words)
 *   run {prompt, shared, steps}        request 1's prompt; request 2 shares its first `shared` tokens
 *   variants {index, rmsnorm, rope, store, attention_prefill, attention_decode, gemm}  with kv_fp8
 *                                      also store_fused; attention_decode is then the FP8 decode
 *   memory {weights_bytes, kv_bytes, kv_pages, activation_bytes, free_bytes, total_bytes, layers_fit}
 *   setup {weights_ms}                 generating the weights on the device
 *   ops ["embed", "rms_norm", ...]     op names; records below name ops by index into this list
 *   kinds ["embed", "norm", "gemm", ...] and op_kind [...]: the kind of each op (for shares)
 *   kernels ["void rmsnorm_v2<...>(...)", ...]   distinct kernel names (demangled)
 *   recording {kernels, unattributed, ops, copies, api_calls}   what CUPTI delivered and how much
 *                                      of it could be joined to an op
 *   events [{t_us, what, detail}]      host-side steps (arrivals, radix match/insert, allocations,
 *                                      first tokens), t_us from request 1's arrival
 *   phases [{name, title, requests, q_tokens, kv_tokens, t0_us, t1_us, host_us, kernels,
 *            kernel_us, gaps {count, sum_us, median_us, max_us, overlapped},
 *            by_op [us per op, indexed like ops], detail: [[op, layer, [[kernel, start_us, dur_us,
 *            gx, gy, gz, bx, by, bz, stream], ...]], ...]}]
 *       prefill (request 1, radix miss) and extend (request 2, radix hit) in full detail; decode
 *       and decode_graph as steps [{step, kv_len [..], t0_us, gpu_us, kernel_us, gaps {..},
 *       host_us, kernels, by_op [..]}] with full detail for the first and last step only
 *       (detail_steps); control (request 2 from scratch) as a summary.
 *   profiles [{phase, op, shape, flops, bytes, us, launch {kernel, grid, block, registers, ...},
 *              counters {dram_throughput_pct, sm_throughput_pct, tensor_pipe_pct,
 *              achieved_occupancy_pct, l2_hit_rate_pct, dram_read_bytes, dram_write_bytes,
 *              stalls {..}, passes}}]   one replayed instance of each distinct (phase, op)
 *   radix {page_size, matched_tokens, matched_pages, extend_tokens, match_us, insert_us,
 *          miss_us, hit_us, scratch_us, logits_max_abs_diff, logits_rel_l2, same_token,
 *          tree {total, evictable, nodes}}
 *   tokens {request1 [..], request2 [..], graph_identical}
 * Times are microseconds on CUPTI's clock, from request 1's arrival. */
#ifndef KL_STORY_H
#define KL_STORY_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "lab/core/check.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cJSON;


/* A decoder's shape. */
struct kl_story_config {
    const char *name;
    int layers, hidden, qo_heads, kv_heads, head_dim, mlp, vocab;
    double rope_theta;
    float eps;
};
/* Llama-3.1-8B's shapes (layers: as many as fit, 32 at most) and the check's tiny one. */
extern const struct kl_story_config kl_story_llama8b, kl_story_tiny;

#define KL_STORY_PAGE_SIZE 16

struct kl_story_options {
    struct kl_story_config model; /* layers >= 1 */
    int prompt, shared, steps;    /* request 1's prompt; request 2's shared prefix; decode steps */
    uint64_t seed;
    bool trace;       /* CUPTI Activity over the run, summarised into the results document */
    bool counters;    /* after the run, replay one instance of each distinct op under the Range Profiler */
    bool graph;       /* decode again as a captured CUDA graph */
    bool control;     /* prefill request 2 from scratch as well (the radix hit's control) */
    bool keep_logits; /* keep every forward's logits on the host (the tests) */
    bool kv_fp8;      /* decode from an FP8 (e4m3) KV cache (model.h), not the bf16 one */
    FILE *progress;   /* a line per long phase, or NULL */
};

/* What a run leaves for its caller. Logits are float32 [vocab] rows. */
struct kl_story_result {
    struct cJSON *doc; /* the results document (story.json); with trace only */
    int vocab, steps;
    int32_t *prompt[2]; /* the two requests' prompts */
    int prompt_len[2];
    int32_t *tokens[2];     /* generated: [0] from the prefill, [s] from decode step s (steps + 1) */
    float *logits_first[2]; /* request 1's prefill and request 2's extend (the radix hit) */
    float *logits_scratch;  /* request 2 prefilled from scratch (control) */
    float *logits_decode;   /* [steps][2][vocab] */
    float *logits_graph;    /* [steps][2][vocab], with graph */
    bool graph_identical;   /* the graph's tokens and logits equal the eager run's bit for bit */
};

/* The layer count that fits `free_bytes` (at most cfg's layers), the bytes it needs, and the parts. */
struct kl_story_memory {
    double weights_bytes, kv_bytes, activation_bytes, workspace_bytes, total_bytes;
    int kv_pages, layers_fit;
};
void kl_story_memory_plan(const struct kl_story_options *o, double free_bytes, struct kl_story_memory *m);

/* The variants an FP8 cache (kv_fp8) needs, looked up by name: the fused RoPE + quantize + store
 * and the decode that reads e4m3 pages. */
#define KL_STORY_FP8_STORE "v4_rope_quant_store"
#define KL_STORY_FP8_DECODE "v7_fp8_f16_mma"
/* NULL, or why an FP8 cache cannot run on a device of compute capability cc (a variant missing
 * from this build, or needing a newer device), naming the variant (lab/story/model.c). */
const char *kl_story_fp8_missing(int cc, char *why, size_t len);

/* Runs the story. Returns 0, or -1 with err (a CUDA or cuBLAS failure, memory). */
int kl_story_run(const struct kl_story_options *o, struct kl_story_result *r, struct kl_err *err);
void kl_story_result_free(struct kl_story_result *r);

/* Writes the results document: one line per top-level key and per element of its long arrays. */
int kl_story_write_json(const struct cJSON *doc, const char *path);

/* NULL when doc is a story document its guide can be written from (format kernlab-story-1, with
 * its ops and phases), else what is wrong with it (lab/story/document.c, as the two below). */
const char *kl_story_format_error(const struct cJSON *doc);
/* A JSON file as a document; NULL when it cannot be read or is not JSON. */
struct cJSON *kl_story_read_json(const char *path);
/* dir/story.json, checked to be a story document (format kernlab-story-1, with its ops and
 * phases): 1 with *doc set (the caller deletes it), 0 when there is none, -1 (said on stderr)
 * when it cannot be read or is not one. Nothing is written. */
int kl_story_load(const char *results_dir, struct cJSON **doc);

#ifdef __cplusplus
}
#endif
#endif
