/* The story's tests, in three files by topic, one binary (test_story), suites `story` (runs
 * anywhere) and `story_gpu` (skipped without a GPU):
 *   test_story.c           the float64 decoder's error model against a bf16 emulation (and the
 *                          faults it must catch); on the device, the story's kernels and the tiny
 *                          decoder against the float64 forward pass
 *   test_story_cache.c     the page allocator, the radix bookkeeping, the metadata of each kind of
 *                          forward pass
 *   test_story_recorder.c  the recorder driven by made-up CUPTI records through the real forward
 *                          pass, the results writer against its committed fixture, and the trace */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/dtype.h"
#include "lab/core/compare.h"
#include "lab/core/device.h"
#include "lab/core/json_path.h"
#include "lab/report/report.h" /* kernlab story and its guide: a test may use every floor but the command */
#include "lab/story/kernels.h"
#include "lab/story/model.h"
#include "lab/story/scheduler.h"
#include "lab/story/story.h"
#include "lab/story/test_story.h"
#include "lab/story/weights.h"
#include "reference/rope.h"
#include "reference/story.h"

/* ---- the float64 decoder and its error model ---- */

/* The tiny model's weights on the host, from the formula the device uses (lab/story/weights.h). */
struct host_model {
    struct kl_story_dims d;
    struct kl_story_ref_weights w;
    double *arrays[8 * KL_STORY_MAX_LAYERS + 4];
    int n;
};

static const double *gen(struct host_model *h, const struct kl_story_config *c, uint64_t seed, int base, int tensor,
                         size_t n)
{
    double *p = malloc(n * sizeof(double));
    cr_assert(p);
    const float off = kl_story_weight_offset(tensor), hw = kl_story_weight_half_width(c, tensor);
    for (size_t i = 0; i < n; i++)
        p[i] = kl_bf16_to_f32(kl_f32_to_bf16(kl_story_weight_f32(seed, (uint32_t)(base + tensor), i, off, hw)));
    return h->arrays[h->n++] = p;
}

static void host_model(struct host_model *h, const struct kl_story_config *c, uint64_t seed, int max_pos)
{
    memset(h, 0, sizeof *h);
    h->d = (struct kl_story_dims){.layers = c->layers,
                                  .hidden = c->hidden,
                                  .qo_heads = c->qo_heads,
                                  .kv_heads = c->kv_heads,
                                  .head_dim = c->head_dim,
                                  .mlp = c->mlp,
                                  .vocab = c->vocab,
                                  .eps = c->eps,
                                  .max_pos = max_pos};
    const size_t H = c->hidden, Q = (size_t)c->qo_heads * c->head_dim, KV = (size_t)c->kv_heads * c->head_dim;
    const size_t M = c->mlp, V = c->vocab;
    h->w.embed = gen(h, c, seed, 0, KL_W_EMBED, V * H);
    h->w.lm_head = gen(h, c, seed, 0, KL_W_LM_HEAD, V * H);
    h->w.final_norm = gen(h, c, seed, 0, KL_W_FINAL_NORM, H);
    for (int l = 0; l < c->layers; l++) {
        const int b = l * KL_STORY_TENSORS_PER_LAYER;
        struct kl_story_ref_layer *L = &h->w.layer[l];
        L->attn_norm = gen(h, c, seed, b, KL_W_ATTN_NORM, H);
        L->wq = gen(h, c, seed, b, KL_W_Q, Q * H);
        L->wk = gen(h, c, seed, b, KL_W_K, KV * H);
        L->wv = gen(h, c, seed, b, KL_W_V, KV * H);
        L->wo = gen(h, c, seed, b, KL_W_O, H * Q);
        L->mlp_norm = gen(h, c, seed, b, KL_W_MLP_NORM, H);
        L->w_gate_up = gen(h, c, seed, b, KL_W_GATE_UP, 2 * M * H);
        L->w_down = gen(h, c, seed, b, KL_W_DOWN, H * M);
    }
    float *table = malloc(sizeof(float) * (size_t)max_pos * c->head_dim);
    double *cs = malloc(sizeof(double) * (size_t)max_pos * c->head_dim);
    cr_assert(table && cs);
    kl_rope_cos_sin_cache(table, max_pos, c->head_dim, c->rope_theta);
    for (size_t i = 0; i < (size_t)max_pos * c->head_dim; i++)
        cs[i] = table[i];
    free(table);
    h->w.cos_sin = h->arrays[h->n++] = cs;
}

static void host_model_free(struct host_model *h)
{
    for (int i = 0; i < h->n; i++)
        free(h->arrays[i]);
}

/* The end-to-end bound (lab/core/compare.c, from reference/story.c's sigma): |got - ref| <=
 * kl_story_logit_sigmas sigma per logit, and ||got - ref|| <= kl_story_norm_ratio ||sigma|| per step;
 * `widen` scales both (sqrt 2 for two GPU results). */
struct verdict {
    double worst_ratio, l2_ratio;
    int bad;
};

static struct verdict compare_logits(const double *got, const double *ref, const double *var, int n, double widen)
{
    struct verdict v = {0, 0, 0};
    double e2 = 0, s2 = 0;
    for (int i = 0; i < n; i++) {
        const double d = fabs(got[i] - ref[i]), sigma = sqrt(var[i]) * widen;
        if (!(d <= kl_story_logit_sigmas * sigma)) v.bad++;
        v.worst_ratio = fmax(v.worst_ratio, d / sigma);
        e2 += d * d, s2 += sigma * sigma;
    }
    v.l2_ratio = sqrt(e2 / s2);
    if (!(v.l2_ratio <= kl_story_norm_ratio)) v.bad++;
    return v;
}

/* Greedy agreement: where the float64 top two are further apart than their two bounds, the pick
 * must be the float64 argmax. Returns 1 when the pick is wrong. */
static int pick_disagrees(int32_t pick, const double *ref, const double *var, int n)
{
    int a = 0, b = -1;
    for (int i = 1; i < n; i++)
        if (ref[i] > ref[a]) a = i;
    for (int i = 0; i < n; i++)
        if (i != a && (b < 0 || ref[i] > ref[b])) b = i;
    const double bound = kl_story_logit_sigmas * (sqrt(var[a]) + sqrt(var[b]));
    return ref[a] - ref[b] > bound && pick != a;
}

/* The model's FP8 scales, [layers * kv_heads] for K and for V: kl_story_kv_scales on the host
 * weights, the floats the device model computes from its copy of the same weights. */
static void host_scales(const struct host_model *h, float *ks, float *vs)
{
    for (int l = 0; l < h->d.layers; l++) {
        const struct kl_story_ref_layer *L = &h->w.layer[l];
        kl_story_kv_scales(&h->d, L->attn_norm, L->wk, L->wv, ks + l * h->d.kv_heads, vs + l * h->d.kv_heads);
    }
}

/* Runs request tokens (a prompt, then one fed token per step) through the EXACT reference and the
 * BF16 emulation with `faults`, both decoding from an FP8 cache when fp8 is set; the worst verdict
 * over the steps. */
static struct verdict emulation_against_exact(struct host_model *h, int faults, int prompt, int steps, int seed,
                                              bool fp8, int *wrong_picks)
{
    const int V = h->d.vocab;
    struct kl_story_ref_seq *se = kl_story_ref_seq_new(&h->d, prompt + steps),
                            *sb = kl_story_ref_seq_new(&h->d, prompt + steps);
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)(prompt + steps));
    double *le = malloc(sizeof(double) * V), *lv = malloc(sizeof(double) * V), *lb = malloc(sizeof(double) * V);
    cr_assert(se && sb && toks && le && lv && lb);
    float ks[KL_STORY_MAX_LAYERS * 8], vs[KL_STORY_MAX_LAYERS * 8];
    if (fp8) {
        cr_assert_leq(h->d.kv_heads, 8);
        host_scales(h, ks, vs);
        cr_assert_eq(kl_story_ref_seq_fp8(se, &h->d, ks, vs) | kl_story_ref_seq_fp8(sb, &h->d, ks, vs), 0);
    }
    kl_story_test_fill_tokens(toks, prompt, seed);
    for (int i = 0; i < prompt; i++)
        toks[i] %= V;
    struct verdict worst = {0, 0, 0};
    *wrong_picks = 0;
    for (int s = 0; s <= steps; s++) {
        const int32_t *in = s ? &toks[prompt + s - 1] : toks;
        const int n = s ? 1 : prompt;
        cr_assert_eq(kl_story_ref_forward(&h->d, &h->w, se, in, n, KL_STORY_REF_EXACT, 0, le, lv), 0);
        cr_assert_eq(kl_story_ref_forward(&h->d, &h->w, sb, in, n, KL_STORY_REF_BF16, faults, lb, NULL), 0);
        const struct verdict v = compare_logits(lb, le, lv, V, 1);
        worst.bad += v.bad;
        worst.worst_ratio = fmax(worst.worst_ratio, v.worst_ratio), worst.l2_ratio = fmax(worst.l2_ratio, v.l2_ratio);
        int32_t pick;
        kl_story_argmax_reference(lb, 1, V, &pick);
        *wrong_picks += pick_disagrees(pick, le, lv, V);
        if (s < steps) toks[prompt + s] = pick; /* the emulation's pick is fed back, as the GPU's is */
    }
    kl_story_ref_seq_free(se, &h->d), kl_story_ref_seq_free(sb, &h->d);
    free(toks), free(le), free(lv), free(lb);
    return worst;
}

Test(story, the_error_model_covers_a_bf16_emulation_of_the_pipeline)
{
    struct host_model h;
    host_model(&h, &kl_story_tiny, 11, 256);
    for (int seed = 1; seed <= 3; seed++) {
        int wrong;
        const struct verdict v = emulation_against_exact(&h, 0, 80, 24, seed, false, &wrong);
        cr_log_info("seed %d: worst |err| / sigma %.2f, worst step norm ratio %.2f (limits %.0f and %.1f)", seed,
                    v.worst_ratio, v.l2_ratio, kl_story_logit_sigmas, kl_story_norm_ratio);
        cr_assert_eq(v.bad, 0, "seed %d: the bf16 emulation left the bound: worst ratio %.2f, norm ratio %.2f", seed,
                     v.worst_ratio, v.l2_ratio);
        cr_assert_eq(wrong, 0, "seed %d: %d greedy picks disagreed outside the bound", seed, wrong);
        /* the model must not be loose either: a real error uses a fair part of it */
        cr_assert(v.l2_ratio > 0.3, "seed %d: errors are %.2f of the predicted norm: the model overestimates", seed,
                  v.l2_ratio);
    }
    host_model_free(&h);
}

/* A planted fault, whether the end-to-end check must catch it, and what it is. */
struct fault_case {
    int fault;
    bool caught;
    const char *what;
};

/* Each fault through the emulated pipeline (48 prompt tokens, 8 decode steps, bf16 or FP8 cache)
 * against the float64 pass: caught exactly when the case says. */
static void expect_faults(struct host_model *h, const struct fault_case *cases, size_t n, bool fp8)
{
    for (size_t i = 0; i < n; i++) {
        int wrong;
        const struct verdict v = emulation_against_exact(h, cases[i].fault, 48, 8, 1, fp8, &wrong);
        cr_log_info("%s%s: worst ratio %.1f, norm ratio %.1f: %s", fp8 ? "fp8, " : "", cases[i].what, v.worst_ratio,
                    v.l2_ratio, v.bad ? "caught" : "passes");
        cr_assert_eq(v.bad > 0, cases[i].caught, "%s: expected %s, worst ratio %.1f", cases[i].what,
                     cases[i].caught ? "caught" : "to pass", v.worst_ratio);
    }
}

Test(story, the_end_to_end_check_catches_dropped_keys_page_slips_and_decode_positions)
{
    struct host_model h;
    host_model(&h, &kl_story_tiny, 11, 256);
    static const struct fault_case cases[] = {
        {KL_STORY_FAULT_DROP_NEWEST_KEY, true, "attention misses the newest key"},
        {KL_STORY_FAULT_WRONG_PAGE, true, "keys 16..31 read from page 0"},
        {KL_STORY_FAULT_DECODE_POS, true, "decode steps rotate one position too far"},
        /* let through, and why: RoPE only sees relative positions, so shifting every position
         * changes nothing; eps is 1e-5 against a mean square near 1, ten times it moves the norm by
         * 5e-5 relative, below one bf16 rounding (4e-3) */
        {KL_STORY_FAULT_ROPE_SHIFT, false, "every position one too high"},
        {KL_STORY_FAULT_EPS_X10, false, "rmsnorm eps ten times too large"},
        /* not a fault: a kernel that keeps P in float32 is more accurate than the model assumes */
        {KL_STORY_FAULT_NO_P_ROUNDING, false, "P kept in float32"},
    };
    expect_faults(&h, cases, sizeof cases / sizeof cases[0], false);
    host_model_free(&h);
}

/* `--kv fp8`: the float64 pass quantizes K and V as the GPU does, so the same bound holds for an
 * emulation of the fused store and an FP8 decode, with the code-flip variance reference/story.c
 * derives, and the model is not loose (the error norm is near its prediction). */
Test(story, the_fp8_error_model_covers_an_emulation_of_the_fused_store_and_fp8_decode)
{
    struct host_model h;
    host_model(&h, &kl_story_tiny, 11, 256);
    for (int seed = 1; seed <= 3; seed++) {
        int wrong;
        const struct verdict v = emulation_against_exact(&h, 0, 80, 24, seed, true, &wrong);
        cr_log_info("fp8, seed %d: worst |err| / sigma %.2f, worst step norm ratio %.2f", seed, v.worst_ratio,
                    v.l2_ratio);
        cr_assert_eq(v.bad, 0, "seed %d: the fp8 emulation left the bound: worst ratio %.2f, norm ratio %.2f", seed,
                     v.worst_ratio, v.l2_ratio);
        cr_assert_eq(wrong, 0, "seed %d: %d greedy picks disagreed outside the bound", seed, wrong);
        cr_assert(v.l2_ratio > 0.3, "seed %d: errors are %.2f of the predicted norm: the model overestimates", seed,
                  v.l2_ratio);
        /* nor short: the code-flip variance (reference/story.c) is what keeps the norm under the bound */
        cr_assert(v.l2_ratio < 1.3, "seed %d: errors are %.2f of the predicted norm: the model underestimates", seed,
                  v.l2_ratio);
    }
    host_model_free(&h);
}

/* What the end-to-end check catches of an FP8 cache gone wrong, and what it lets through. */
Test(story, the_fp8_check_catches_a_dropped_scale_and_lets_an_unquantized_cache_through)
{
    struct host_model h;
    host_model(&h, &kl_story_tiny, 11, 256);
    static const struct fault_case cases[] = {
        {KL_STORY_FAULT_NO_SCALE, true, "codes read without their scale"},
        /* let through, and why: e4m3's rounding moves the logits by about the GPU's own predicted
         * error (cr_log_info prints the ratio), under the check's limits; an FP8 decode that reads
         * bf16 values is caught by attention_decode's FP8 goldens, whose bound is e4m3's */
        {KL_STORY_FAULT_NO_QUANT, false, "decode reads K/V that were never quantized"},
    };
    expect_faults(&h, cases, sizeof cases / sizeof cases[0], true);
    host_model_free(&h);
}

/* The float64 pass with an FP8 cache differs from the one with a bf16 cache at every decode step by
 * more than the GPU's whole predicted error (a step norm ratio above 1.1), prefill not at all (it reads bf16 K/V either way); no code saturates under the
 * weights' scales, and they are not absurdly loose. */
Test(story, the_fp8_reference_differs_from_bf16_only_where_decode_reads_the_cache)
{
    struct host_model h;
    host_model(&h, &kl_story_tiny, 11, 256);
    const int V = h.d.vocab, prompt = 40, steps = 6, KV = h.d.kv_heads, D = h.d.head_dim;
    float ks[KL_STORY_MAX_LAYERS * 8], vs[KL_STORY_MAX_LAYERS * 8];
    cr_assert_leq(KV, 8);
    host_scales(&h, ks, vs);
    struct kl_story_ref_seq *a = kl_story_ref_seq_new(&h.d, prompt + steps),
                            *b = kl_story_ref_seq_new(&h.d, prompt + steps);
    cr_assert(a && b && kl_story_ref_seq_fp8(b, &h.d, ks, vs) == 0);
    int32_t toks[64];
    kl_story_test_fill_tokens(toks, prompt + steps, 3);
    for (int i = 0; i < prompt + steps; i++)
        toks[i] %= V;
    double *la = malloc(sizeof(double) * V), *lb = malloc(sizeof(double) * V), *var = malloc(sizeof(double) * V);
    double norm_sum = 0;
    for (int s = 0; s <= steps; s++) {
        const int n = s ? 1 : prompt;
        const int32_t *in = s ? &toks[prompt + s - 1] : toks;
        cr_assert_eq(kl_story_ref_forward(&h.d, &h.w, a, in, n, KL_STORY_REF_EXACT, 0, la, NULL), 0);
        cr_assert_eq(kl_story_ref_forward(&h.d, &h.w, b, in, n, KL_STORY_REF_EXACT, 0, lb, var), 0);
        if (s == 0)
            cr_assert_eq(memcmp(la, lb, sizeof(double) * V), 0, "the prefill read the FP8 cache");
        else {
            const struct verdict v = compare_logits(la, lb, var, V, 1);
            cr_log_info("step %d: fp8 - bf16 worst %.2f sigma, norm %.2f", s, v.worst_ratio, v.l2_ratio);
            cr_assert_gt(v.l2_ratio, 1.1, "decode step %d: the FP8 cache moves the logits by %.2f of sigma's norm", s,
                         v.l2_ratio);
            norm_sum += v.l2_ratio;
        }
    }
    cr_log_info("an FP8 cache against a bf16 one: %.2f of the predicted error norm on average", norm_sum / steps);
    double worst = 0;
    for (int l = 0; l < h.d.layers; l++)
        for (int t = 0; t < prompt + steps; t++)
            for (int i = 0; i < KV * D; i++) {
                const double *kv[2] = {a->k[l], a->v[l]};
                const float *sc[2] = {ks, vs};
                for (int e = 0; e < 2; e++)
                    worst = fmax(worst, fabs(kv[e][(size_t)t * KV * D + i]) / sc[e][l * KV + i / D] / 448);
            }
    cr_log_info("fp8 scales: the largest K/V element is %.3f of its scale's range", worst);
    cr_assert(worst <= 1 && worst > 1.0 / 64, "the largest K/V is %.4f of the e4m3 range", worst);
    kl_story_ref_seq_free(a, &h.d), kl_story_ref_seq_free(b, &h.d);
    free(la), free(lb), free(var);
    host_model_free(&h);
}

/* ---- the ops of an FP8 forward pass (dry: no device) ---- */

struct op_log {
    struct kl_story_op ops[64];
    int n;
};

static void log_op(void *ctx, const struct kl_story_op *op, int begin)
{
    struct op_log *g = ctx;
    if (begin && g->n < 64) g->ops[g->n++] = *op;
}

/* One layer of the tiny model, one pass (a 40-token prefill or a decode step of 2), ops logged. */
static void dry_pass(bool fp8, bool decode, struct kl_story_model *m, struct op_log *log)
{
    static char arena[1 << 22];
    static void *caches[4];
    static float scales[4];
    memset(log, 0, sizeof *log);
    *m = (struct kl_story_model){.cfg = kl_story_tiny,
                                 .max_tokens = 64,
                                 .max_batch = 2,
                                 .kv_pages = 16,
                                 .max_pos = 128,
                                 .decode_kv_bound = 100,
                                 .dry = true,
                                 .hook = log_op,
                                 .hook_ctx = log,
                                 .kv_fp8 = fp8};
    m->cfg.layers = 1;
    static struct kl_story_layer_weights lw;
    m->layer = &lw, m->k_cache = &caches[0], m->v_cache = &caches[1], m->k_fp8 = &caches[2], m->v_fp8 = &caches[3];
    for (int i = 0; i < 4; i++)
        caches[i] = arena + (1 << 21) + i * 1024;
    m->kv_scale = scales;
    void **bufs[] = {&m->x,    &m->res[0], &m->res[1], &m->hn,  &m->q,  &m->k,  &m->v,
                     &m->attn, &m->o,      &m->gu,     &m->act, &m->mo, &m->qkv};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        *bufs[i] = arena + i * (1 << 16);
    const struct kl_story_batch b = {.decode = decode,
                                     .tokens = decode ? 2 : 40,
                                     .batch = decode ? 2 : 1,
                                     .max_q_len = decode ? 1 : 40,
                                     .max_kv_len = decode ? 60 : 40};
    cr_assert_eq(kl_story_forward(m, &b), cudaSuccess);
}

static const struct kl_story_op *find_op(const struct op_log *log, enum kl_story_op_name name, int nth)
{
    for (int i = 0; i < log->n; i++)
        if (log->ops[i].name == name && nth-- == 0) return &log->ops[i];
    return NULL;
}

Test(story, an_fp8_decode_step_runs_the_fused_store_and_reads_the_e4m3_cache_with_its_scales)
{
    struct kl_story_model m;
    struct op_log log;
    const int kvh = kl_story_tiny.kv_heads, Q = kl_story_tiny.qo_heads * kl_story_tiny.head_dim,
              KV = kvh * kl_story_tiny.head_dim;
    dry_pass(true, true, &m, &log);
    cr_assert_null(find_op(&log, KL_OP_ROPE, 0), "a decode step with an FP8 cache runs no separate rope");
    const struct kl_story_op *g = find_op(&log, KL_OP_QKV_GEMM, 0), *st = find_op(&log, KL_OP_KV_STORE, 0),
                             *at = find_op(&log, KL_OP_ATTENTION, 0);
    cr_assert(g && st && at && !find_op(&log, KL_OP_KV_STORE, 1), "one kv_store (the fused one)");
    cr_assert_eq(g->u.gemm.count, 2, "no bf16 K/V projection in a decode step");
    cr_assert(g->u.gemm.g[0].y == m.qkv && g->u.gemm.g[0].ldy == Q + 2 * KV, "Q into the qkv rows");
    cr_assert(g->u.gemm.g[1].y == (char *)m.qkv + 2 * Q && g->u.gemm.g[1].ldy == Q + 2 * KV &&
                  g->u.gemm.g[1].stride_y == KV && g->u.gemm.g[1].batch == 2,
              "K then V into the qkv rows");
    const struct kl_store_params *sp = &st->u.store;
    cr_assert(sp->fused && sp->qkv == m.qkv && sp->q_out == m.q && sp->k_cache == m.k_fp8[0] &&
                  sp->v_cache == m.v_fp8[0] && sp->k_scale == m.kv_scale && sp->v_scale == m.kv_scale + kvh,
              "the fused store writes q and the layer's e4m3 pages with its scales");
    const struct kl_attention_decode_params *dp = &at->u.decode;
    cr_assert_eq(at->how, KL_LAUNCH_DECODE);
    cr_assert(dp->k_cache == m.k_fp8[0] && dp->v_cache == m.v_fp8[0] && dp->k_scale == m.kv_scale &&
                  dp->v_scale == m.kv_scale + kvh && dp->q == m.q,
              "decode reads the e4m3 pages with the layer's scales");
    /* the bf16 decode step as before: rope, the plain store, no scales */
    dry_pass(false, true, &m, &log);
    cr_assert(find_op(&log, KL_OP_ROPE, 0) && !find_op(&log, KL_OP_KV_STORE, 0)->u.store.fused);
    at = find_op(&log, KL_OP_ATTENTION, 0);
    cr_assert(at->u.decode.k_scale == NULL && at->u.decode.k_cache == m.k_cache[0]);
}

Test(story, an_fp8_prefill_fills_both_caches_and_attends_over_bf16)
{
    struct kl_story_model m;
    struct op_log log;
    dry_pass(true, false, &m, &log);
    const struct kl_story_op *g = find_op(&log, KL_OP_QKV_GEMM, 0), *fused = find_op(&log, KL_OP_KV_STORE, 0),
                             *rope = find_op(&log, KL_OP_ROPE, 0), *plain = find_op(&log, KL_OP_KV_STORE, 1),
                             *at = find_op(&log, KL_OP_ATTENTION, 0);
    cr_assert(g && fused && rope && plain && at);
    cr_assert(fused < rope && rope < plain && plain < at, "fused store, rope of K, bf16 store, attention");
    cr_assert(g->u.gemm.count == 3 && g->u.gemm.g[2].y == m.k && g->u.gemm.g[2].batch == 2,
              "K and V projected once more, packed, for the bf16 cache");
    cr_assert(fused->u.store.fused && fused->u.store.k_cache == m.k_fp8[0] && fused->u.store.q_out == m.q);
    cr_assert(rope->u.rope.q == m.k && rope->u.rope.num_kv_heads == 0 &&
                  rope->u.rope.num_q_heads == kl_story_tiny.kv_heads,
              "rope rotates K alone (q came rotated from the fused store)");
    cr_assert(!plain->u.store.fused && plain->u.store.k == m.k && plain->u.store.k_cache == m.k_cache[0]);
    cr_assert(at->how == KL_LAUNCH_PREFILL && at->u.prefill.k_cache == m.k_cache[0] && at->u.prefill.q == m.q);
}

/* The error model's figures that story.md quotes (how far inside the bound a correct bf16 pipeline
 * stays, how far outside each planted fault lands) are these tests' own measurements, committed as
 * reports/data/story-check.json: this test recomputes them (the emulation is deterministic) and
 * fails when the committed file says otherwise. KL_UPDATE_FIXTURE=1 rewrites it. */
static double one_decimal(double x)
{
    return round(x * 10) / 10;
}
static double two_decimals(double x)
{
    return round(x * 100) / 100;
}

Test(story, the_error_model_figures_in_the_results_are_what_the_emulation_measures)
{
    struct host_model h;
    host_model(&h, &kl_story_tiny, 11, 256);
    cJSON *doc = cJSON_CreateObject(), *em = cJSON_CreateArray(), *faults = cJSON_CreateArray();
    cJSON_AddStringToObject(doc, "format", "kernlab-story-check-1");
    cJSON_AddStringToObject(doc, "measured_by", "lab/story/test_story.c (the tiny configuration, on the CPU)");
    cJSON_AddNumberToObject(doc, "limit_sigma", kl_story_logit_sigmas);
    cJSON_AddNumberToObject(doc, "norm_limit", kl_story_norm_ratio);
    for (int seed = 1; seed <= 3; seed++) { /* as the_error_model_covers_a_bf16_emulation_of_the_pipeline */
        int wrong;
        const struct verdict v = emulation_against_exact(&h, 0, 80, 24, seed, false, &wrong);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "seed", seed);
        cJSON_AddNumberToObject(o, "worst_sigma", two_decimals(v.worst_ratio));
        cJSON_AddNumberToObject(o, "norm_ratio", two_decimals(v.l2_ratio));
        cJSON_AddItemToArray(em, o);
    }
    static const struct {
        int fault;
        const char *what;
    } caught[] = {
        {KL_STORY_FAULT_DROP_NEWEST_KEY, "an attention that drops its newest key"},
        {KL_STORY_FAULT_WRONG_PAGE, "a page-table slip (keys 16..31 read from page 0)"},
        {KL_STORY_FAULT_DECODE_POS, "decode positions one too far"},
    };
    for (size_t i = 0; i < sizeof caught / sizeof caught[0]; i++) { /* as the end-to-end test */
        int wrong;
        const struct verdict v = emulation_against_exact(&h, caught[i].fault, 48, 8, 1, false, &wrong);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "what", caught[i].what);
        cJSON_AddBoolToObject(o, "caught", v.bad > 0);
        cJSON_AddNumberToObject(o, "worst_sigma", one_decimal(v.worst_ratio));
        cJSON_AddNumberToObject(o, "norm_ratio", one_decimal(v.l2_ratio));
        cJSON_AddItemToArray(faults, o);
    }
    cJSON_AddItemToObject(doc, "emulation", em);
    cJSON_AddItemToObject(doc, "faults", faults);
    host_model_free(&h);
    const char *path = KL_SOURCE_DIR "/reports/data/story-check.json";
    if (getenv("KL_UPDATE_FIXTURE")) {
        char *text = cJSON_Print(doc);
        FILE *f = fopen(path, "w");
        cr_assert(f && text && fprintf(f, "%s\n", text) > 0 && fclose(f) == 0, "cannot write %s", path);
        free(text);
    }
    cJSON *committed = kl_story_read_json(path);
    cr_assert(committed, "%s is missing or not JSON (KL_UPDATE_FIXTURE=1 writes it)", path);
    char *want = cJSON_PrintUnformatted(doc), *got = cJSON_PrintUnformatted(committed);
    cr_assert(cJSON_Compare(doc, committed, true), "%s says\n%s\nthe emulation measures\n%s", path, got, want);
    free(want), free(got);
    cJSON_Delete(committed);
    cJSON_Delete(doc);
}

Test(story, silu_mul_and_argmax_references_by_hand)
{
    const double gu[4] = {0, 2, 3, -1}; /* one row, mlp 2: gate {0, 2}, up {3, -1} */
    double out[2];
    kl_story_silu_mul_reference(gu, 1, 2, out);
    cr_assert_float_eq(out[0], 0.0, 1e-15);
    cr_assert_float_eq(out[1], -2 / (1 + exp(-2.0)), 1e-15);
    const double l[8] = {1, 5, 5, -INFINITY, NAN, 2, 0, 3};
    int32_t id;
    kl_story_argmax_reference(l, 1, 8, &id);
    cr_assert_eq(id, 1, "ties go to the first index");
    const double nan_first[3] = {NAN, -1, -2};
    kl_story_argmax_reference(nan_first, 1, 3, &id);
    cr_assert_eq(id, 1, "NaN is never the largest");
    const double all_nan[2] = {NAN, NAN};
    kl_story_argmax_reference(all_nan, 1, 2, &id);
    cr_assert_eq(id, 0);
}

/* ---- on the device ---- */

static void need_gpu(void)
{
    char why[256];
    if (!kl_device_cc(why, sizeof why)) cr_skip_test("%s", why);
    if (kl_device_cc(NULL, 0) < 80) cr_skip_test("needs sm_80 (bf16)");
}

#define CHECK_CUDA(expr)                                                                                               \
    do {                                                                                                               \
        cudaError_t e_ = (expr);                                                                                       \
        cr_assert_eq(e_, cudaSuccess, "%s: %s", #expr, cudaGetErrorString(e_));                                        \
    } while (0)

Test(story_gpu, silu_mul_matches_the_reference)
{
    need_gpu();
    static const int64_t shapes[][2] = {{1, 8}, {3, 14336 / 8}, {5, 13}, {2, 512}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t n = shapes[s][0], mlp = shapes[s][1];
        uint16_t *gu = malloc(sizeof(uint16_t) * (size_t)(n * 2 * mlp)),
                 *out = malloc(sizeof(uint16_t) * (size_t)(n * mlp));
        double *gud = malloc(sizeof(double) * (size_t)(n * 2 * mlp)), *ref = malloc(sizeof(double) * (size_t)(n * mlp));
        for (int64_t i = 0; i < n * 2 * mlp; i++) {
            gu[i] = kl_f32_to_bf16(kl_story_weight_f32(9, 1, (uint64_t)i, 0, 6));
            gud[i] = kl_bf16_to_f32(gu[i]);
        }
        kl_story_silu_mul_reference(gud, n, mlp, ref);
        void *dgu, *dout;
        CHECK_CUDA(cudaMalloc(&dgu, sizeof(uint16_t) * (size_t)(n * 2 * mlp)));
        CHECK_CUDA(cudaMalloc(&dout, sizeof(uint16_t) * (size_t)(n * mlp)));
        CHECK_CUDA(cudaMemcpy(dgu, gu, sizeof(uint16_t) * (size_t)(n * 2 * mlp), cudaMemcpyHostToDevice));
        CHECK_CUDA(cudaMemset(dout, 0xff, sizeof(uint16_t) * (size_t)(n * mlp)));
        CHECK_CUDA(kl_story_silu_mul(dgu, dout, n, mlp, 0));
        CHECK_CUDA(cudaMemcpy(out, dout, sizeof(uint16_t) * (size_t)(n * mlp), cudaMemcpyDeviceToHost));
        double *got = malloc(sizeof(double) * (size_t)(n * mlp));
        for (int64_t i = 0; i < n * mlp; i++)
            got[i] = kl_bf16_to_f32(out[i]);
        struct kl_cmp c;
        kl_compare(got, ref, n * mlp, kl_policy_for(KL_BF16, false), &c);
        if (!c.pass) kl_cmp_print(stderr, "silu_mul", &c);
        cr_assert(c.pass, "silu_mul %lld x %lld: rel_l2 %.3g max_abs %.3g", (long long)n, (long long)mlp, c.rel_l2,
                  c.max_abs);
        cudaFree(dgu), cudaFree(dout);
        free(gu), free(out), free(gud), free(ref), free(got);
    }
}

Test(story_gpu, argmax_matches_the_reference_with_ties_nan_and_a_full_vocabulary)
{
    need_gpu();
    const int64_t batch = 3, vocab = 128256;
    float *l = malloc(sizeof(float) * (size_t)(batch * vocab));
    double *ld = malloc(sizeof(double) * (size_t)(batch * vocab));
    for (int64_t i = 0; i < batch * vocab; i++)
        l[i] = kl_story_weight_f32(3, 2, (uint64_t)i, 0, 4);
    l[0 * vocab + 77777] = 9, l[0 * vocab + 88888] = 9; /* a tie: the first wins */
    l[1 * vocab + 5] = NAN, l[1 * vocab + 100000] = 8;  /* NaN is never the largest */
    for (int64_t i = 0; i < vocab; i++)
        l[2 * vocab + i] = -INFINITY;
    l[2 * vocab + vocab - 1] = -1e30f; /* the very last element */
    for (int64_t i = 0; i < batch * vocab; i++)
        ld[i] = l[i];
    int32_t want[3], got[3];
    kl_story_argmax_reference(ld, batch, vocab, want);
    float *dl;
    int32_t *dids;
    CHECK_CUDA(cudaMalloc((void **)&dl, sizeof(float) * (size_t)(batch * vocab)));
    CHECK_CUDA(cudaMalloc((void **)&dids, sizeof(int32_t) * 3));
    CHECK_CUDA(cudaMemcpy(dl, l, sizeof(float) * (size_t)(batch * vocab), cudaMemcpyHostToDevice));
    CHECK_CUDA(kl_story_argmax(dl, batch, vocab, dids, 0));
    CHECK_CUDA(cudaMemcpy(got, dids, sizeof got, cudaMemcpyDeviceToHost));
    for (int b = 0; b < 3; b++)
        cr_assert_eq(got[b], want[b], "row %d: argmax %d, expected %d", b, got[b], want[b]);
    cr_assert_eq(want[0], 77777);
    cudaFree(dl), cudaFree(dids);
    free(l), free(ld);
}

Test(story_gpu, weights_made_on_the_device_equal_the_host_formula)
{
    need_gpu();
    const size_t n = 1 << 20;
    void *d;
    CHECK_CUDA(cudaMalloc(&d, n * 2));
    CHECK_CUDA(kl_story_fill_weights(d, n, 12345, 42, 1.f, 0.2f, 0));
    uint16_t *h = malloc(n * 2);
    CHECK_CUDA(cudaMemcpy(h, d, n * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) {
        const uint16_t want = kl_f32_to_bf16(kl_story_weight_f32(12345, 42, i, 1.f, 0.2f));
        cr_assert_eq(h[i], want, "element %zu: device 0x%04x, host 0x%04x", i, h[i], want);
    }
    cudaFree(d);
    free(h);
}

/* The tiny decoder on the GPU against the float64 forward pass, step by step (the GPU's tokens
 * are fed to both), with the bound reference/story.c derives; with fp8, both decode from an FP8
 * cache quantized with the same scales. */
static void tiny_decoder_check(bool fp8)
{
    need_gpu();
    if (fp8) {
        char why[200];
        if (kl_story_fp8_missing(kl_device_cc(NULL, 0), why, sizeof why)) cr_skip_test("%s", why);
    }
    struct kl_story_options o = {.model = kl_story_tiny,
                                 .prompt = 96,
                                 .shared = 64,
                                 .steps = 16,
                                 .seed = 7,
                                 .graph = true,
                                 .control = true,
                                 .keep_logits = true,
                                 .kv_fp8 = fp8};
    struct kl_story_result r;
    struct kl_err err = {{0}};
    cr_assert_eq(kl_story_run(&o, &r, &err), 0, "%s", err.msg);
    struct host_model h;
    host_model(&h, &o.model, o.seed, o.prompt + o.steps + 32);
    const int V = o.model.vocab;
    double *got = malloc(sizeof(double) * V), *ref = malloc(sizeof(double) * V), *var = malloc(sizeof(double) * V);
    double worst = 0, worst_l2 = 0;
    int picks = 0;
    float ks[KL_STORY_MAX_LAYERS * 8], vs[KL_STORY_MAX_LAYERS * 8];
    if (fp8) host_scales(&h, ks, vs);
    for (int b = 0; b < 2; b++) {
        struct kl_story_ref_seq *s = kl_story_ref_seq_new(&h.d, o.prompt + o.steps);
        cr_assert(s && (!fp8 || kl_story_ref_seq_fp8(s, &h.d, ks, vs) == 0));
        for (int step = 0; step <= o.steps; step++) {
            const int32_t *in = step ? &r.tokens[b][step - 1] : r.prompt[b];
            cr_assert_eq(kl_story_ref_forward(&h.d, &h.w, s, in, step ? 1 : o.prompt, KL_STORY_REF_EXACT, 0, ref, var),
                         0);
            const float *g = step ? r.logits_decode + ((size_t)(step - 1) * 2 + b) * V : r.logits_first[b];
            for (int i = 0; i < V; i++)
                got[i] = g[i];
            const struct verdict v = compare_logits(got, ref, var, V, 1);
            worst = fmax(worst, v.worst_ratio), worst_l2 = fmax(worst_l2, v.l2_ratio);
            cr_assert_eq(v.bad, 0,
                         "request %d, %s %d: logits outside the bound (worst %.1f sigma, norm %.2f x predicted)", b + 1,
                         step ? "decode step" : "prefill", step, v.worst_ratio, v.l2_ratio);
            picks += pick_disagrees(r.tokens[b][step], ref, var, V);
            if (step == 0 && b == 1) {
                /* the radix hit (an extend over cached pages) against the same prompt from scratch */
                for (int i = 0; i < V; i++)
                    got[i] = r.logits_scratch[i];
                const struct verdict c = compare_logits(got, ref, var, V, 1);
                cr_assert_eq(c.bad, 0, "the control prefill is outside the bound (worst %.1f sigma)", c.worst_ratio);
                double *hit = malloc(sizeof(double) * V);
                for (int i = 0; i < V; i++)
                    hit[i] = r.logits_first[1][i];
                const struct verdict hs = compare_logits(hit, got, var, V, sqrt(2));
                cr_assert_eq(hs.bad, 0, "the radix hit's logits differ from a prefill from scratch (worst %.1f sigma)",
                             hs.worst_ratio);
                free(hit);
            }
            if (step > 0) { /* the graph replay ran the same steps */
                const float *gg = r.logits_graph + ((size_t)(step - 1) * 2 + b) * V;
                double *gr = malloc(sizeof(double) * V);
                for (int i = 0; i < V; i++)
                    gr[i] = gg[i];
                const struct verdict gv = compare_logits(gr, got, var, V, sqrt(2));
                cr_assert_eq(gv.bad, 0, "the graph replay's step %d differs from the eager one", step);
                free(gr);
            }
        }
        kl_story_ref_seq_free(s, &h.d);
    }
    cr_log_info("tiny decoder (%s KV): worst |gpu - float64| %.2f sigma, worst step norm %.2f x predicted; graph %s",
                fp8 ? "fp8" : "bf16", worst, worst_l2, r.graph_identical ? "bit-identical" : "within the bound");
    cr_assert_eq(picks, 0, "%d greedy picks differ from float64 where the top two are clearly apart", picks);
    free(got), free(ref), free(var);
    host_model_free(&h);
    kl_story_result_free(&r);
}

Test(story_gpu, tiny_decoder_matches_the_float64_forward_and_the_radix_hit_equals_a_prefill_from_scratch,
     .timeout = 600)
{
    tiny_decoder_check(false);
}

Test(story_gpu, tiny_fp8_decoder_matches_the_float64_forward_that_quantizes_the_same_way, .timeout = 600)
{
    tiny_decoder_check(true);
}

/* The whole command on the tiny model: CUPTI records, the Range Profiler, the files. */
Test(story_gpu, the_tiny_story_records_every_kernel_and_writes_its_files, .timeout = 600)
{
    need_gpu();
    char tmp[] = "/tmp/kl_story_XXXXXX";
    cr_assert(mkdtemp(tmp));
    char *argv[] = {"--tiny", "--prompt", "64", "--shared", "48", "--steps", "64", "--out", tmp};
    cr_assert_eq(kl_cmd_story(9, argv), 0, "kernlab story --tiny failed (stderr says why)");
    char path[300];
    snprintf(path, sizeof path, "%s/story.json", tmp);
    cJSON *doc = kl_story_read_json(path);
    cr_assert(doc, "no story.json, or not JSON");
    const cJSON *rec = cJSON_GetObjectItem(doc, "recording");
    cr_assert_gt(cJSON_GetObjectItem(rec, "kernels")->valueint, 100, "CUPTI recorded too few kernels");
    cr_assert_eq(cJSON_GetObjectItem(rec, "unattributed")->valueint, 0, "kernels CUPTI recorded but no op claimed");
    const cJSON *phases = cJSON_GetObjectItem(doc, "phases");
    cr_assert_eq(cJSON_GetArraySize(phases), 5);
    for (const cJSON *p = phases->child; p; p = p->next) {
        const cJSON *steps = cJSON_GetObjectItem(p, "steps");
        const cJSON *one = steps ? steps->child : p;
        cr_assert_gt(cJSON_GetObjectItem(one, "kernels")->valueint, 20, "phase %s has no kernels",
                     cJSON_GetObjectItem(p, "name")->valuestring);
    }
    cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "radix"), "logits_max_abs_diff")),
              "the radix hit was not compared with the control");
    snprintf(path, sizeof path, "%s/story-trace.json", tmp);
    cr_assert_eq(access(path, R_OK), 0, "no story-trace.json");
    snprintf(path, sizeof path, "%s/story.md", tmp);
    cr_assert_eq(access(path, R_OK), 0, "no story.md");
    cJSON_Delete(doc);
    kl_story_test_remove_dir(tmp);
}

/* `--kv fp8` on the tiny model: story-fp8.json alone (no story.json, no guide), decode steps with
 * no rope and the FP8 variants named; then a story.json beside it (this document as a bf16 one: one
 * CUPTI session per process) gives the guide both columns. */
Test(story_gpu, the_tiny_fp8_story_writes_its_column_of_the_guide, .timeout = 600)
{
    need_gpu();
    char why[200];
    if (kl_story_fp8_missing(kl_device_cc(NULL, 0), why, sizeof why)) cr_skip_test("%s", why);
    char tmp[] = "/tmp/kl_story_XXXXXX";
    cr_assert(mkdtemp(tmp));
    char *argv[] = {"--tiny", "--prompt", "64", "--shared", "48", "--steps", "64", "--kv", "fp8", "--out", tmp};
    cr_assert_eq(kl_cmd_story(11, argv), 0, "kernlab story --tiny --kv fp8 failed (stderr says why)");
    char path[300];
    snprintf(path, sizeof path, "%s/story.json", tmp);
    cr_assert_neq(access(path, F_OK), 0, "an fp8 run wrote story.json");
    snprintf(path, sizeof path, "%s/story-fp8.json", tmp);
    cJSON *doc = kl_story_read_json(path);
    cr_assert(doc, "no story-fp8.json, or not JSON");
    cr_assert_str_eq(kl_json_str(doc, "model.kv", ""), "fp8");
    cr_assert_str_eq(kl_json_str(doc, "variants.attention_decode", ""), KL_STORY_FP8_DECODE);
    cr_assert_str_eq(kl_json_str(doc, "variants.store_fused", ""), KL_STORY_FP8_STORE);
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "recording"), "unattributed")->valueint, 0);
    const cJSON *ops = cJSON_GetObjectItem(doc, "ops");
    int rope = -1;
    for (int i = 0; i < cJSON_GetArraySize(ops); i++)
        if (strcmp(cJSON_GetArrayItem(ops, i)->valuestring, "rope") == 0) rope = i;
    for (const cJSON *p = cJSON_GetObjectItem(doc, "phases")->child; p; p = p->next)
        if (strcmp(kl_json_str(p, "name", ""), "decode") == 0)
            for (const cJSON *st = cJSON_GetObjectItem(p, "steps")->child; st; st = st->next)
                cr_assert_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(st, "by_op"), rope)->valuedouble, 0,
                             "a decode step with an FP8 cache ran rope");
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(doc, "model"), "kv");
    snprintf(path, sizeof path, "%s/story.json", tmp);
    cr_assert_eq(kl_story_write_json(doc, path), 0);
    cJSON_Delete(doc);
    cr_assert_eq(kl_story_report_dir(tmp, tmp), 1, "no guide from story.json and story-fp8.json");
    snprintf(path, sizeof path, "%s/story.md", tmp);
    FILE *f = fopen(path, "r");
    cr_assert(f, "no story.md");
    char line[4096];
    bool both = false;
    while (fgets(line, sizeof line, f))
        both |= strstr(line, "| eager decode, per step (2 requests) | bf16 KV | fp8 KV |") != NULL;
    fclose(f);
    cr_assert(both, "story.md has no bf16 and fp8 columns");
    kl_story_test_remove_dir(tmp);
}
