/* The correctness policy (lab/CONTRACTS.md section 5): compare an output with its float64 reference.
 *
 * Three measures, all must pass:
 *   every element: |out - ref| <= atol * max|ref| + rtol * |ref|
 *   rel_l2 = ||out - ref|| / ||ref||                        <= policy.rel_l2
 *   bias = sum (out - ref) ref / sum ref^2 (the least-squares scale of the error onto the
 *   reference): |bias| <= KL_BIAS_SIGMAS * bias_u * sqrt(sum ref^4) / sum ref^2 + bias_floor,
 *   where the policy has a bias_u (bf16 and fp16 rows): it sees a shift of every element by a
 *   fraction of a rounding, which the other two cannot.
 * The numbers come from one table per output dtype (compare.c, with the rationale next to each
 * row). compare.c is the one home of every bound the lab judges by: the rows, the attention
 * policies, the all-reduce bound and the story's end-to-end bound; each text a guide prints about a
 * bound (a policy's `why`, the *_tolerance_text arrays) is written there from the same constants
 * the check uses, before main. NaN or Inf where the reference is finite always fails; that is how poisoned (never
 * written) elements are caught. Exact policies (data movement) compare the bits of every value:
 * -0 is not +0, and NaNs must carry the same payload. The first ten mismatches are kept for
 * printing. */
#ifndef KL_COMPARE_H
#define KL_COMPARE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "kernels/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

struct kl_policy {
    double rtol;       /* per element, relative to |ref| */
    double atol_frac;  /* per element, absolute, as a fraction of atol_scale */
    double rel_l2;     /* whole output, and each group of rel_l2_group elements when that is > 0 */
    const char *why;   /* the rationale, printed by guides */
    double atol_scale; /* > 0: the scale atol_frac multiplies (attention: max |v|); 0: max|ref| of the output */
    double bias_u;     /* > 0: the bias check's unit (the largest relative error of one element); 0: no check */
    double bias_floor; /* the bias a correct kernel may carry whatever the size (its float32 arithmetic's) */
    bool exact;        /* bit for bit (data movement); the numbers above are then unused */
    /* e4m3 codes (kl_policy_e4m3): got and want hold decoded codes; pre and slack, per element, the
     * float64 reference's value before its rounding and the float32 kernel's allowance on it. */
    const double *e4m3_pre, *e4m3_slack;
    /* > 0: rel_l2 holds for every run of this many consecutive elements too (attention: one query
     * row's heads), so a part whose outputs are small (a long request's averages) cannot hide its
     * error under the others' (a short request's). */
    int64_t rel_l2_group;
};

/* How many spreads of a correct kernel's bias the bias check allows (compare.c says why 8). */
#define KL_BIAS_SIGMAS 8.0

/* The policy for an output of kernel dtype t; bit-exact for data movement. */
struct kl_policy kl_policy_for(enum kl_dtype t, bool exact);
/* The float64 reference against a golden's stored outputs (float64 results rounded once to <f4):
 * one float32 rounding plus float64 noise; bit-exact for data movement. */
struct kl_policy kl_policy_reference(bool exact);

/* Attention (decode and prefill): the bound of a kernel that computes scores in float32, rounds
 * the probabilities P to the input dtype t before P.V (as every fast attention kernel does) and
 * accumulates in float32. The bound depends on the problem, so the module passes what it knows:
 *   head_dim       the length of each score's dot product
 *   max_kv_len     the most keys any query attends
 *   logit_bound    an upper bound on sm_scale * sum_i |q_i| |k_i| over every (query, key) pair
 *                  (kl_attention_logit_bound: sm_scale * max ||q|| * max ||k||)
 *   v_abs_max      max |v| over the values attended
 *   row_elems      the elements of one query row of out (qo heads x head_dim): rel_l2 holds for each
 *                  row too (kl_policy.rel_l2_group), so a long row's small outputs cannot hide their
 *                  error under a short row's; 0: over the whole output only
 * The derivation is in compare.c. */
struct kl_policy kl_policy_attention_out(enum kl_dtype t, int64_t head_dim, int64_t max_kv_len, double logit_bound,
                                         double v_abs_max, int64_t row_elems);
struct kl_policy kl_policy_attention_lse(int64_t head_dim, int64_t max_kv_len, double logit_bound);
/* out on an FP8 (e4m3) cache: the same bound, logit_bound and v_abs_max taken on the decoded values
 * (code x its kv head's scale); compare.c says why nothing else changes. */
struct kl_policy kl_policy_attention_out_fp8(enum kl_dtype t, int64_t head_dim, int64_t max_kv_len,
                                             double logit_bound, double v_abs_max, int64_t row_elems);
/* The rationale of both rows, for the guides (arrays: usable in static initializers, KL_MODULE). */
extern char kl_attention_tolerance_text[];

/* All-reduce: element i the sum of `world` addends exact in dtype t, S_i = sum_r |x_r[i]|.
 * The bound on |out - ref| for an element with S_i = s; golden_ref: |ref| when judged against a
 * golden's <f4 value (its own rounding allowed), 0 against the float64 sum. */
double kl_allreduce_bound(int world, enum kl_dtype t, double s, double golden_ref);
/* The bias check's limit over a whole output: s2r2 = sum S_i^2 ref_i^2, sr = sum S_i |ref_i|,
 * ref2 = sum ref_i^2; golden: judged against a golden's <f4 values. */
double kl_allreduce_bias_limit(int world, enum kl_dtype t, bool golden, double s2r2, double sr, double ref2);
/* Integer sums up to 2^bits are exact in t (8 bf16, 11 fp16, 24 fp32): compared bit for bit. */
int kl_allreduce_exact_bits(enum kl_dtype t);
extern char kl_allreduce_tolerance_text[];

/* The fused all-reduce + residual add + RMSNorm (compare.c derives both):
 * residual_out: kl_allreduce_bound for the sum plus one rounding of the add (ro_abs = |ref|);
 * out: rmsnorm's row for t applied to an input error of b_i per element (b_rms = sqrt(mean b^2)
 * over the token's row, rho = the token's sqrt(mean r^2 + eps), ref_max = max |out| of the row). */
double kl_allreduce_residual_bound(int world, enum kl_dtype t, double s, double ro_abs, double golden_ref);
double kl_allreduce_rmsnorm_bound(enum kl_dtype t, double ref_abs, double ref_max, double w_abs, double b_i,
                                  double b_rms, double rho);
extern char kl_allreduce_rmsnorm_tolerance_text[];

/* FP8 E4M3 outputs (the fused store's caches), in units of the scale. pre[i]: the float64 value
 * before its rounding; slack[i] = kl_e4m3_slack(terms[i]), terms[i] the sum of the magnitudes of
 * the terms that make it. An element passes when its code is one that rounding some value within
 * slack[i] of pre[i] gives: the reference's own code, or its neighbour across a tie that close.
 * NaN must stay NaN; a zero's sign must be the reference's unless |pre| <= slack. compare.c derives
 * the slack and what the value error then is. The policy points into the arrays: they must
 * outlive the comparison. */
double kl_e4m3_slack(double terms);
struct kl_policy kl_policy_e4m3(const double *pre, const double *slack);
extern char kl_e4m3_tolerance_text[];

/* The story's end-to-end check (sigma per logit: reference/story.c): |gpu - ref| <= this x sigma
 * per logit; ||gpu - ref|| <= kl_story_norm_ratio x ||sigma|| per step. */
extern const double kl_story_logit_sigmas;
extern const double kl_story_norm_ratio;
extern char kl_story_tolerance_text[]; /* the guide's sentence */

#define KL_MAX_REPORTED 10

struct kl_mismatch {
    int64_t index;
    double got, want;
};

struct kl_cmp {
    double rel_l2, max_abs;
    double bias, bias_limit; /* the bias statistic and its limit (limit 0: the policy has no bias check) */
    int64_t n_bad; /* elements outside the bound (NaN/Inf included) */
    bool pass;
    int n_reported;
    struct kl_mismatch first[KL_MAX_REPORTED];
};

/* Compares n values. An empty output (n == 0) passes with zeros. */
void kl_compare(const double *got, const double *want, int64_t n, struct kl_policy p,
                struct kl_cmp *out);
/* Folds b into a (worst of both): used to report one verdict for several outputs. */
void kl_cmp_merge(struct kl_cmp *a, const struct kl_cmp *b);
/* Prints "name[index]: got G, expected W" lines for the kept mismatches. */
void kl_cmp_print(FILE *f, const char *name, const struct kl_cmp *c);

#ifdef __cplusplus
}
#endif
#endif
