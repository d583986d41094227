/* Attention computed the way a kernel with one bug computes it, on the CPU: the tests of
 * attention_prefill and attention_decode (a decode batch is a prefill batch of one query per
 * request, not causal) judge these outputs on the goldens with the policies of
 * lab/core/compare.c, so that every "catches X" of its attention rationale is a mutant shown
 * caught, and a correct low-precision computation is shown to pass. Linked into the tests only. */
#ifndef KL_ATTENTION_MUTANTS_REFERENCE_H
#define KL_ATTENTION_MUTANTS_REFERENCE_H

#include <stdint.h>
#include <stdio.h>

#include "lab/core/registry.h"
#include "reference/attention_prefill.h"

enum kl_attention_bug {
    KL_ATTN_EXACT,              /* no bug, float64 throughout (the reference's function) */
    KL_ATTN_FLOAT32_KERNEL,     /* no bug: float32 scores, exp and sums, P rounded to the input dtype before
                                 * P.V, out rounded once: what a correct fast kernel does */
    KL_ATTN_O_IN_DTYPE,         /* the P.V accumulator rounded to the input dtype after every 16 keys */
    KL_ATTN_LAST_KEY_DROPPED,   /* the request's last key is never attended (a kv_len - 1 loop bound) */
    KL_ATTN_DIAGONAL_PLUS_ONE,  /* causal: each query sees one key past the diagonal */
    KL_ATTN_DIAGONAL_MINUS_ONE, /* causal: each query misses its last key (the one on the diagonal) */
    KL_ATTN_LSE_LOG2,           /* lse in base 2 */
    KL_ATTN_NO_MAX,             /* p = exp(s) in float32, no max subtracted: Inf once a logit passes ~88.7 */
    KL_ATTN_NO_SM_SCALE,        /* the logits are q.k, sm_scale never applied */
    KL_ATTN_NO_RESCALE,         /* online softmax over tiles of tile_k keys; the output accumulator is not
                                 * rescaled when a tile raises the running max (the sum l is) */
    KL_ATTN_KV_HEAD_0,          /* every qo head reads kv head 0 */
    KL_ATTN_KV_HEAD_MOD,        /* qo head h reads kv head h % kv_heads instead of h / group */
    KL_ATTN_MASK_FROM_NEXT_ROW, /* causal, tiled: a key tile is left unmasked when it ends at or before what
                                 * row tile_q0 + 1 sees, instead of row tile_q0 (the tile's first row) */
    KL_ATTN_SCORES_IN_DTYPE,    /* the logits rounded to the input dtype before the softmax */
};

struct kl_attention_mutant {
    enum kl_attention_bug bug;
    const char *name;
    int tile_q, tile_k; /* query rows sharing one mask test, keys per tile (NO_RESCALE, MASK_FROM_NEXT_ROW) */
};
/* KL_ATTN_MUTANT(NO_MAX, "no max subtracted"); KL_ATTN_TILED(NO_RESCALE, "...", 0, 64) */
#define KL_ATTN_MUTANT(bug_, name_) {.bug = KL_ATTN_##bug_, .name = name_}
#define KL_ATTN_TILED(bug_, name_, tq, tk) {.bug = KL_ATTN_##bug_, .name = name_, .tile_q = tq, .tile_k = tk}

/* out [total_q, qo_heads, head_dim] and lse [total_q, qo_heads] as reference/attention_prefill.h
 * lays them out; dtype is the kernel's input dtype (what the roundings round to). A row that
 * sees no key gets out 0 and lse -inf, as in the reference. q_len > kv_len is allowed (a decode
 * request with no keys). */
void kl_attention_mutant_run(const struct kl_attention_mutant *m, enum kl_dtype dtype,
                             const struct kl_attention_prefill_shape *s, const double *q, const double *k_cache,
                             const double *v_cache, double *out, double *lse);

/* ---- judging mutants on the goldens and the catalogue ---- */

/* A module's problem seen as a prefill batch in float64: what the mutants read. */
struct kl_attention_view {
    struct kl_attention_prefill_shape shape;
    enum kl_dtype dtype;
    double *q, *k_cache, *v_cache; /* owned */
    int32_t *qo_indptr;            /* owned, when the module has none (decode: query b is request b) */
};
typedef void (*kl_attention_view_fn)(const void *problem, struct kl_attention_view *v);
void kl_attention_view_free(struct kl_attention_view *v);

/* Runs m on the problem and compares its out and lse with `expected` under expected's own
 * policies (the ones module.c gives a variant): cmp[0] out, cmp[1] lse. */
void kl_attention_mutant_judge(const struct kl_attention_mutant *m, const struct kl_attention_view *v,
                               const struct kl_outputs *expected, struct kl_cmp cmp[2]);

/* A claim of compare.c's attention rationale: mutant m is caught by output `by` on each case of
 * `goldens` ("*": every case of the module; "!name": but that one), or, for by == KL_CLAIM_PASSES
 * (a correct computation), passes both outputs of every case. */
enum { KL_CLAIM_PASSES = -1, KL_CLAIM_OUT = 0, KL_CLAIM_LSE = 1 };
#define KL_CLAIM_MAX_GOLDENS 16
struct kl_attention_claim {
    struct kl_attention_mutant m;
    int by;
    const char *goldens[KL_CLAIM_MAX_GOLDENS];
};

/* Judges the module's reference and then every claim on every golden case of the module, one line
 * per (claim, case) to log with both outputs' rel_l2 against its limit and the elements out of
 * bounds. A broken claim (a listed case that does not catch it, a listed case that does not exist,
 * a correct computation failing; the reference failing counts as one) adds a "CLAIM BROKEN" line.
 * Returns the number of broken claims, -1 without golden cases. */
int kl_attention_check_claims(const char *module, kl_attention_view_fn view, const struct kl_attention_claim *claims,
                              int n_claims, FILE *log);

/* Judges m on the module's check catalogue drawn from seed (the fixed edge cases only, when
 * edges_only: their labels do not start with "random"), against the module's reference; a line
 * per problem to log. Returns how many problems caught it. */
int kl_attention_mutant_catalogue(const struct kl_module *module, kl_attention_view_fn view,
                                  const struct kl_attention_mutant *m, uint64_t seed, bool edges_only, FILE *log);

/* Draws every catalogue problem twice from seed and once from seed + 1: the two draws must be
 * the same problem bit for bit (labels, index arrays, q, k, v), the other seed must draw another
 * q. Returns the number of problems that break this, a line each to log. */
int kl_attention_catalogue_replays(const struct kl_module *module, kl_attention_view_fn view, uint64_t seed, FILE *log);

#endif
