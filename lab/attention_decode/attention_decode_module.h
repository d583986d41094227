/* What the attention_decode module shares with its tests and perf workloads. */
#ifndef KL_ATTENTION_DECODE_MODULE_H
#define KL_ATTENTION_DECODE_MODULE_H

#include <stdbool.h>

#include "kernels/attention_decode/attention_decode.h"
#include "lab/core/registry.h"
#include "lab/core/tensor.h"

/* Cache rows no request attends hold this value (goldens and random problems alike), so a kernel
 * that reads past a request's last token, or a wrong page, gets a visibly wrong answer. */
#define KL_DECODE_POISON 1000.0

struct kl_attention_decode_problem {
    int64_t batch, num_qo_heads, num_kv_heads, head_dim, page_size, num_pages, max_kv_len;
    int64_t rows, max_q_len; /* query rows (batch without qo_indptr) and the longest q_len (1 without) */
    double sm_scale;
    enum kl_dtype dtype;
    struct kl_tensor q;                                      /* host, [rows, qo_heads, head_dim] in dtype */
    struct kl_tensor qo_indptr;                              /* host, KL_I32 [batch + 1]; data NULL: one query
                                                              * row per request (the ABI's qo_indptr NULL) */
    struct kl_tensor k_cache, v_cache;                       /* host, [pages, page_size, kv_heads, head_dim] */
    struct kl_tensor kv_indptr, kv_indices, kv_last_page_len; /* host, KL_I32 */
    struct kl_tensor k_scale, v_scale;                       /* host, KL_F32 [kv_heads]; data NULL: the caches
                                                              * are in dtype. Set: an FP8 cache, k_cache and
                                                              * v_cache KL_FP8_E4M3 codes (the ABI's k_scale) */
    double logit_bound, v_abs_max;                           /* what the tolerance needs (compare.h) */
};

/* A random problem: kv_lens[b] tokens for request b in scattered pages (a shuffled pool with
 * spare pages), q and the attended K/V rows N(0,1) (q times q_scale), every other row poison.
 * One query row per request (qo_indptr unset); _multi takes q_lens[b] <= kv_lens[b] query rows
 * per request instead (q_lens NULL: the same problem as the plain call, draw for draw). */
struct kl_attention_decode_problem *kl_attention_decode_problem_random(int64_t batch, int64_t num_qo_heads,
                                                                       int64_t num_kv_heads, int64_t head_dim,
                                                                       int64_t page_size, const int64_t *kv_lens,
                                                                       enum kl_dtype dtype, double q_scale,
                                                                       uint64_t seed);
struct kl_attention_decode_problem *kl_attention_decode_problem_random_multi(
    int64_t batch, int64_t num_qo_heads, int64_t num_kv_heads, int64_t head_dim, int64_t page_size,
    const int64_t *kv_lens, const int64_t *q_lens, enum kl_dtype dtype, double q_scale, uint64_t seed);
void kl_attention_decode_problem_free(struct kl_attention_decode_problem *p);
/* Turns a random problem (one query row per request, dtype fp16 or bf16) into one on an FP8 cache:
 * every attended cache value x becomes the code e4m3(24 x), poison rows NaN codes, and kv head g's
 * scales are kl_attention_decode_fp8_scale(g) times 1/24, so a decoded value is about x times that
 * scale (0.003 .. 0.05 x): the logits are small and the softmax nearly flat unless q is scaled up. */
void kl_attention_decode_problem_to_fp8(struct kl_attention_decode_problem *p);
/* A factor of ten between neighbouring kv heads, so another head's scale is visibly wrong: k_scale
 * 0.03 (1 + 0.37 g) / 10^(g % 2), v_scale 0.05 (1 + 0.61 g) / 10^((g + 1) % 2) (the goldens' too). */
double kl_attention_decode_fp8_scale(int64_t g, bool v);
/* 0, or a message naming `what` and the array at fault: kv_indptr must start at 0, never
 * decrease and end at the number of indices; indices must be < num_pages; kv_last_page_len must
 * be 1..page_size for a request with pages and 0 for one without; qo_indptr, when set, as
 * kl_attention_decode_check_qo says (q_len <= kv_len, at most KL_DECODE_MAX_Q_LEN) and ending at
 * the rows of q. Sets max_kv_len, max_q_len and rows. */
int kl_attention_decode_check_table(struct kl_attention_decode_problem *p, const char *what, struct kl_err *err);
/* kv_len of request b: (pages - 1) * page_size + its last page's tokens, 0 without pages. */
int64_t kl_attention_decode_problem_kv_len(const struct kl_attention_decode_problem *p, int64_t b);
/* logit_bound and v_abs_max over the attended rows. */
void kl_attention_decode_bounds(struct kl_attention_decode_problem *p);

/* The device side, for kl_tensor_upload/download/release (lab/core/registry.h) and the
 * generic run: its buffers and outputs (module.c). */
extern const struct kl_tensor_ops kl_attention_decode_ops;
/* Runs the float64 reference: out and lse, policies set. */
int kl_attention_decode_run_reference(const struct kl_attention_decode_problem *p, struct kl_outputs *o,
                                      struct kl_err *err);

extern const struct kl_perf_ops kl_attention_decode_perf;

/* The timeline of one traced launch (attention_decode.h's struct kl_decode_trace) as row_extra's
 * "timeline": per event, min / p10 / p50 / p90 / max over the CTAs that recorded it, in microseconds
 * from the earliest release from the PDL wait, and how many CTAs recorded their start. Nothing when
 * no CTA recorded. */
struct cJSON;
void kl_attention_decode_timeline_json(const struct kl_decode_trace *t, struct cJSON *row_extra);

#endif
