/* The story's tests. Suite `story` runs anywhere: the page allocator and the radix bookkeeping, the
 * metadata of each kind of forward pass, the float64 decoder's error model against a bf16
 * emulation (and the faults it must catch), the recorder driven by made-up CUPTI records through
 * the real forward pass, the results writer against its committed fixture, and the trace. Suite
 * `story_gpu` runs the story's kernels and the tiny decoder on the device against the float64
 * forward pass (skipped without a GPU). */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lab/core/device.h"
#include "kernels/dtype.h"
#include "lab/kernlab.h"
#include "lab/story/cache.h"
#include "lab/story/kernels.h"
#include "lab/story/model.h"
#include "lab/story/scheduler.h"
#include "lab/story/story.h"
#include "lab/story/timeline.h"
#include "lab/story/weights.h"
#include "reference/rope.h"
#include "reference/story.h"

/* ---- pages and the radix bookkeeping ---- */

Test(story, pages_come_from_the_free_list_and_go_back)
{
    struct kl_story_pages p;
    cr_assert_eq(kl_story_pages_init(&p, 8), 0);
    int32_t a[8];
    cr_assert_eq(kl_story_pages_alloc(&p, 3, a), 0);
    cr_assert(a[0] == 0 && a[1] == 1 && a[2] == 2, "pages are handed out from 0 up: %d %d %d", a[0], a[1], a[2]);
    cr_assert_eq(kl_story_pages_alloc(&p, 6, a + 3), -1, "6 of the 5 free pages were handed out");
    cr_assert_eq(p.n_free, 5, "a refused allocation took pages");
    cr_assert_eq(kl_story_pages_free(&p, a + 1, 1), 0);
    cr_assert_eq(kl_story_pages_free(&p, a + 1, 1), -1, "a double free went unnoticed");
    const int32_t foreign = 42;
    cr_assert_eq(kl_story_pages_free(&p, &foreign, 1), -1, "a page number outside the pool was accepted");
    int32_t b;
    cr_assert_eq(kl_story_pages_alloc(&p, 1, &b), 0);
    cr_assert_eq(b, 1, "the most recently freed page is reused first (got %d)", b);
    kl_story_pages_release(&p);
}

static void fill_tokens(int32_t *t, int n, int seed)
{
    for (int i = 0; i < n; i++)
        t[i] = (int32_t)((i * 7919 + seed * 104729) % 1000);
}

static void assert_valid(const struct kl_story_cache *c)
{
    char msg[256];
    cr_assert_eq(kl_story_cache_validate(c, msg, sizeof msg), 0, "cache bookkeeping: %s", msg);
}

Test(story, a_hit_returns_the_pages_of_the_miss)
{
    struct kl_story_cache c;
    cr_assert_eq(kl_story_cache_init(&c, 16, 64), 0);
    int32_t p1[64], p2[64], pages1[4], pages2[4];
    fill_tokens(p1, 64, 1);
    memcpy(p2, p1, sizeof p1);
    fill_tokens(p2 + 48, 16, 2); /* shares 48 tokens = 3 pages */
    cr_assert_eq(kl_story_cache_match(&c, p1, 64, pages1), 0, "an empty cache matched something");
    cr_assert_eq(kl_story_pages_alloc(&c.pages, 4, pages1), 0);
    int freed;
    cr_assert_eq(kl_story_cache_insert(&c, p1, 64, pages1, &freed), 0);
    cr_assert_eq(freed, 0);
    assert_valid(&c);
    cr_assert_eq(kl_story_cache_match(&c, p2, 64, pages2), 48);
    for (int k = 0; k < 3; k++)
        cr_assert_eq(pages2[k], pages1[k], "page %d of the hit is %d, the miss wrote %d", k, pages2[k], pages1[k]);
    /* a prefix that ends inside a page counts whole pages only */
    p2[40] ^= 1;
    cr_assert_eq(kl_story_cache_match(&c, p2, 64, pages2), 32);
    assert_valid(&c);
    kl_story_cache_release(&c);
}

Test(story, a_prefix_computed_twice_keeps_the_cached_pages_and_frees_the_copy)
{
    struct kl_story_cache c;
    cr_assert_eq(kl_story_cache_init(&c, 16, 16), 0);
    int32_t key[40], a[2], b[2];
    fill_tokens(key, 40, 3);
    cr_assert_eq(kl_story_pages_alloc(&c.pages, 2, a), 0);
    cr_assert_eq(kl_story_pages_alloc(&c.pages, 2, b), 0);
    int freed;
    kl_story_cache_insert(&c, key, 40, a, &freed); /* 40 tokens: 2 whole pages, 8 left out */
    cr_assert_eq(kl_story_cache_pages_held(&c), 2);
    const int before = c.pages.n_free;
    cr_assert_eq(kl_story_cache_insert(&c, key, 40, b, &freed), 32);
    cr_assert_eq(freed, 2, "the duplicate pages were not freed");
    cr_assert_eq(c.pages.n_free, before + 2);
    int32_t got[2];
    cr_assert_eq(kl_story_cache_match(&c, key, 40, got), 32);
    cr_assert(got[0] == a[0] && got[1] == a[1], "the cached copy was replaced");
    assert_valid(&c);
    kl_story_cache_release(&c);
}

Test(story, locked_prefixes_survive_eviction_and_evicted_pages_are_free_again)
{
    struct kl_story_cache c;
    cr_assert_eq(kl_story_cache_init(&c, 16, 32), 0);
    int32_t k1[64], k2[64], p1[4], p2[4], got[4];
    fill_tokens(k1, 64, 4);
    memcpy(k2, k1, sizeof k1);
    fill_tokens(k2 + 32, 32, 5); /* shares 2 pages */
    int freed;
    cr_assert_eq(kl_story_pages_alloc(&c.pages, 4, p1), 0);
    kl_story_cache_insert(&c, k1, 64, p1, &freed);
    cr_assert_eq(kl_story_cache_match(&c, k2, 64, p2), 32);
    cr_assert_eq(kl_story_pages_alloc(&c.pages, 2, p2 + 2), 0);
    kl_story_cache_insert(&c, k2, 64, p2, &freed);
    kl_story_cache_lock(&c, k2, 64); /* request 2 runs */
    assert_valid(&c);
    const int free_before = c.pages.n_free;
    cr_assert_eq(kl_story_cache_evict(&c, 1000), 32, "only request 1's own 2 pages are evictable");
    cr_assert_eq(c.pages.n_free, free_before + 2, "evicted pages did not return to the free list");
    cr_assert_eq(kl_story_cache_match(&c, k2, 64, got), 64, "the locked request lost its prefix");
    for (int i = 0; i < 4; i++)
        cr_assert_eq(got[i], p2[i]);
    assert_valid(&c);
    cr_assert_geq(kl_story_cache_unlock(&c, k2, 64), 0);
    cr_assert_eq(kl_story_cache_evict(&c, 1000), 64);
    cr_assert_eq(c.pages.n_free, 32, "every page is free once everything is evicted");
    assert_valid(&c);
    kl_story_cache_release(&c);
}

/* ---- forward-pass metadata ---- */

Test(story, metadata_of_a_prefill_an_extend_and_a_decode_step)
{
    int32_t t1[40], t2[40], pg1[3] = {7, 3, 9}, pg2[3] = {7, 3, 5};
    fill_tokens(t1, 40, 6);
    fill_tokens(t2, 40, 7);
    struct kl_story_req r1 = {.id = 1, .tokens = t1, .len = 40, .cached = 0, .pages = pg1, .n_pages = 3};
    struct kl_story_req r2 = {.id = 2, .tokens = t2, .len = 40, .cached = 32, .pages = pg2, .n_pages = 3};
    struct kl_story_meta m;
    kl_story_meta_layout(40, 2, 8, &m);
    char *img = calloc(1, m.bytes);
    struct kl_story_req *one[1] = {&r1};
    int q = 40;
    cr_assert_eq(kl_story_meta_build(one, &q, 1, 16, true, img, &m), 40);
    const int64_t *pos = (int64_t *)(img + m.positions), *slots = (int64_t *)(img + m.slots);
    const int32_t *ids = (int32_t *)(img + m.ids), *qo = (int32_t *)(img + m.qo_indptr);
    const int32_t *kvp = (int32_t *)(img + m.kv_indptr), *last = (int32_t *)(img + m.kv_last_page_len);
    const int32_t *idx = (int32_t *)(img + m.kv_indices);
    cr_assert(pos[17] == 17 && slots[17] == 3 * 16 + 1 && ids[17] == t1[17], "prefill token 17: page 3, row 1");
    cr_assert(qo[1] == 40 && kvp[1] == 3 && last[0] == 8 && idx[2] == 9, "prefill indptrs / last page");
    /* request 2's extend: 8 new tokens over 40 keys, its first 2 pages shared with request 1 */
    one[0] = &r2, q = 8;
    cr_assert_eq(kl_story_meta_build(one, &q, 1, 16, true, img, &m), 40);
    cr_assert(pos[0] == 32 && slots[0] == 5 * 16 && ids[0] == t2[32], "extend starts at position 32 in page 5");
    cr_assert(qo[1] == 8 && kvp[1] == 3 && idx[0] == 7 && idx[1] == 3 && last[0] == 8, "extend sees all 3 pages");
    /* a decode step of both: one token each; request 1 at position 40 needs a 4th page */
    int32_t pg1b[4] = {7, 3, 9, 11};
    r1.pages = pg1b, r1.n_pages = 4, r1.cached = 40, r1.len = 41, r2.cached = 40, r2.len = 41;
    struct kl_story_req *both[2] = {&r1, &r2};
    const int ones[2] = {1, 1};
    cr_assert_eq(kl_story_meta_build(both, ones, 2, 16, false, img, &m), 41);
    cr_assert(pos[0] == 40 && pos[1] == 40 && slots[0] == 9 * 16 + 8 && slots[1] == 5 * 16 + 8, "decode slots");
    cr_assert(qo[1] == 1 && qo[2] == 2 && kvp[1] == 3 && kvp[2] == 6 && last[0] == 9 && last[1] == 9, "decode indptrs");
    /* pages that do not cover the tokens are refused */
    r1.n_pages = 2;
    cr_assert_eq(kl_story_meta_build(both, ones, 2, 16, false, img, &m), -1);
    free(img);
}

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

/* The end-to-end bound (reference/story.c derives it): |got - ref| <= 12 sigma per logit, and
 * ||got - ref|| <= 3 ||sigma|| per step; `widen` scales both (sqrt 2 for two GPU results). */
#define KL_STORY_Z 6.0
#define KL_STORY_C 2.0
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
        if (!(d <= KL_STORY_Z * KL_STORY_C * sigma)) v.bad++;
        v.worst_ratio = fmax(v.worst_ratio, d / sigma);
        e2 += d * d, s2 += sigma * sigma;
    }
    v.l2_ratio = sqrt(e2 / s2);
    if (!(v.l2_ratio <= 1.5 * KL_STORY_C)) v.bad++;
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
    const double bound = KL_STORY_Z * KL_STORY_C * (sqrt(var[a]) + sqrt(var[b]));
    return ref[a] - ref[b] > bound && pick != a;
}

/* Runs request tokens (a prompt, then one fed token per step) through the EXACT reference and the
 * BF16 emulation with `faults`; the worst verdict over the steps. */
static struct verdict emulation_against_exact(struct host_model *h, int faults, int prompt, int steps, int seed,
                                              int *wrong_picks)
{
    const int V = h->d.vocab;
    struct kl_story_ref_seq *se = kl_story_ref_seq_new(&h->d, prompt + steps),
                            *sb = kl_story_ref_seq_new(&h->d, prompt + steps);
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)(prompt + steps));
    double *le = malloc(sizeof(double) * V), *lv = malloc(sizeof(double) * V), *lb = malloc(sizeof(double) * V);
    cr_assert(se && sb && toks && le && lv && lb);
    fill_tokens(toks, prompt, seed);
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
        const struct verdict v = emulation_against_exact(&h, 0, 80, 24, seed, &wrong);
        cr_log_info("seed %d: worst |err| / sigma %.2f, worst step norm ratio %.2f (limits %.0f and %.1f)", seed,
                    v.worst_ratio, v.l2_ratio, KL_STORY_Z * KL_STORY_C, 1.5 * KL_STORY_C);
        cr_assert_eq(v.bad, 0, "seed %d: the bf16 emulation left the bound: worst ratio %.2f, norm ratio %.2f", seed,
                     v.worst_ratio, v.l2_ratio);
        cr_assert_eq(wrong, 0, "seed %d: %d greedy picks disagreed outside the bound", seed, wrong);
        /* the model must not be loose either: a real error uses a fair part of it */
        cr_assert(v.l2_ratio > 0.3, "seed %d: errors are %.2f of the predicted norm: the model overestimates", seed,
                  v.l2_ratio);
    }
    host_model_free(&h);
}

Test(story, the_end_to_end_check_catches_dropped_keys_page_slips_and_decode_positions)
{
    struct host_model h;
    host_model(&h, &kl_story_tiny, 11, 256);
    static const struct {
        int fault;
        bool caught;
        const char *what;
    } cases[] = {
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
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int wrong;
        const struct verdict v = emulation_against_exact(&h, cases[i].fault, 48, 8, 1, &wrong);
        cr_log_info("%s: worst ratio %.1f, norm ratio %.1f: %s", cases[i].what, v.worst_ratio, v.l2_ratio,
                    v.bad ? "caught" : "passes");
        cr_assert_eq(v.bad > 0, cases[i].caught, "%s: expected %s, worst ratio %.1f", cases[i].what,
                     cases[i].caught ? "caught" : "to pass", v.worst_ratio);
    }
    host_model_free(&h);
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
    cJSON_AddNumberToObject(doc, "limit_sigma", KL_STORY_Z * KL_STORY_C);
    cJSON_AddNumberToObject(doc, "norm_limit", 1.5 * KL_STORY_C);
    for (int seed = 1; seed <= 3; seed++) { /* as the_error_model_covers_a_bf16_emulation_of_the_pipeline */
        int wrong;
        const struct verdict v = emulation_against_exact(&h, 0, 80, 24, seed, &wrong);
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
        const struct verdict v = emulation_against_exact(&h, caught[i].fault, 48, 8, 1, &wrong);
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

/* ---- the recorder, driven through the real forward pass with made-up CUPTI records ---- */

static uint64_t fake_now;
static uint64_t fake_clock(void)
{
    return fake_now;
}

/* Made-up GPU: kernels run back to back after the launch that queued them, each for a time that
 * depends on its op (so summaries have something to sum); one correlation id per launch. */
struct fake_gpu {
    struct kl_story_timeline *t;
    struct kl_activity_sink sink;
    uint64_t gpu_now;
    uint32_t corr;
    int layers;
};

static const char *fake_kernel_name(int op)
{
    static const char *const names[KL_OP_COUNT] = {
        "void index_v4_pdl_one_trip<8>(kl_index_params)",
        "void rmsnorm_v3<__nv_bfloat16, 8, 1>(...)",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__"
        "5x_cublas",
        "void kl::rope_v5<__nv_bfloat16>(kl_rope_params)",
        "void store_v3<16>(kl_store_params)",
        "void (anonymous namespace)::prefill_v1<128>(kl_attention_prefill_params)",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__"
        "5x_cublas",
        "void rmsnorm_v3<__nv_bfloat16, 8, 1>(...)",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize256x128x64_warpgroupsize2x1x1_execute_segment_k_off_kernel__"
        "5x_cublas",
        "void silu_mul_kernel<8>(const __nv_bfloat16 *, __nv_bfloat16 *, long)",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x64x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__"
        "5x_cublas",
        "gemv2T_kernel_val<int, int, __nv_bfloat16, __nv_bfloat16, float, float, 128, 16, 4, 4, false, false>(...)",
        "argmax_kernel(const float *, long, int *)"};
    return names[op];
}

static void fake_launch(struct fake_gpu *g, int op, bool decode, int count)
{
    for (int i = 0; i < count; i++) {
        const uint32_t corr = ++g->corr;
        fake_now += 3000; /* 3 us per launch call */
        g->sink.api(g->sink.user, corr, fake_now - 2500, fake_now - 500);
        struct kl_kernel_record r = {0};
        snprintf(r.name, sizeof r.name, "%s",
                 op == KL_OP_ATTENTION && decode
                     ? "void decode_v4<__nv_bfloat16, 128, 4, 2>(kl_attention_decode_params, int)"
                     : fake_kernel_name(op));
        const uint64_t dur = (uint64_t)(decode ? 4000 + 500 * op : 20000 + 9000 * op);
        if (g->gpu_now < fake_now) g->gpu_now = fake_now + 1000;
        r.start_ns = g->gpu_now - (op == KL_OP_ROPE ? 2000 : 0); /* rope starts under its predecessor (PDL) */
        r.end_ns = r.start_ns + dur;
        g->gpu_now = r.end_ns + 1500;
        r.correlation = corr, r.stream = 7, r.grid[0] = 132, r.grid[1] = r.grid[2] = 1, r.block[0] = 256;
        r.block[1] = r.block[2] = 1, r.registers = 64, r.theoretical_occupancy_pct = 50;
        g->sink.kernel(g->sink.user, &r);
    }
}

static void fake_hook(void *ctx, const struct kl_story_op *op, int begin)
{
    struct fake_gpu *g = ctx;
    kl_story_timeline_hook(g->t, op, begin);
    const bool decode = g->t->seg[g->t->cur_segment].phase == KL_PHASE_DECODE;
    if (begin)
        fake_launch(g, op->name, decode, op->how == KL_LAUNCH_GEMM ? op->u.gemm.count : 1);
    else
        fake_now += 200;
}

static void fake_copy(struct fake_gpu *g, uint64_t bytes)
{
    const uint32_t corr = ++g->corr;
    fake_now += 4000;
    g->sink.api(g->sink.user, corr, fake_now - 3000, fake_now - 1000);
    g->sink.copy(g->sink.user, corr, 7, g->gpu_now, g->gpu_now + 2000, bytes, 1);
    g->gpu_now += 2500;
}

/* The story of kl_story_run, on the tiny model, with every CUDA call replaced by made-up records:
 * the recorder, the document and the report see what a real run would give them. */
static cJSON *synthetic_run(int layers, int prompt, int shared, int steps)
{
    static struct kl_story_timeline t;
    kl_story_timeline_init(&t);
    t.clock = fake_clock;
    fake_now = 1000000000;
    t.t_zero = fake_now;
    struct fake_gpu g = {.t = &t, .sink = kl_story_timeline_sink(&t), .gpu_now = fake_now, .layers = layers};
    static char arena[1 << 22];
    struct kl_story_model m = {.cfg = kl_story_tiny,
                               .max_tokens = prompt,
                               .max_batch = 2,
                               .kv_pages = 64,
                               .max_pos = prompt + steps + 32,
                               .decode_kv_bound = prompt + steps,
                               .dry = true,
                               .hook = fake_hook,
                               .hook_ctx = &g};
    m.cfg.layers = layers;
    struct kl_story_layer_weights lw[4] = {{0}};
    void *kcache[4] = {0}, *vcache[4] = {0};
    m.layer = lw, m.k_cache = kcache, m.v_cache = vcache;
    void **bufs[] = {&m.x, &m.res[0], &m.res[1], &m.hn, &m.q, &m.k, &m.v, &m.attn, &m.o, &m.gu, &m.act, &m.mo};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        *bufs[i] = arena + i * (1 << 18);
    struct kl_story_batch b = {
        .decode = false, .tokens = prompt, .batch = 1, .max_q_len = prompt, .max_kv_len = prompt};

    kl_story_timeline_event(&t, "request 1 arrives", "%d prompt tokens", prompt);
    fake_now += 2000;
    kl_story_timeline_event(&t, "radix match", "0 tokens (0 pages) cached: a miss, in 0.4 us");
    const int64_t kv1[2] = {prompt, 0};
    kl_story_timeline_segment(&t, KL_PHASE_PREFILL, 0, 1, prompt, kv1, true);
    fake_copy(&g, 4096);
    cr_assert_eq(kl_story_forward(&m, &b), cudaSuccess);
    kl_story_timeline_end_segment(&t);
    fake_now = g.gpu_now + 5000;
    kl_story_timeline_event(&t, "first token", "request 1 picks token 17");
    kl_story_timeline_event(&t, "request 2 arrives", "%d prompt tokens", prompt);
    kl_story_timeline_event(&t, "radix match", "%d tokens (%d pages) cached, locked, in 1.1 us", shared / 16 * 16,
                            shared / 16);
    const int q2 = prompt - shared / 16 * 16;
    b.tokens = b.max_q_len = q2;
    kl_story_timeline_segment(&t, KL_PHASE_EXTEND, 0, 1, q2, kv1, true);
    fake_copy(&g, 2048);
    cr_assert_eq(kl_story_forward(&m, &b), cudaSuccess);
    kl_story_timeline_end_segment(&t);
    fake_now = g.gpu_now + 5000;
    kl_story_timeline_event(&t, "first token", "request 2 picks token 23");
    struct kl_story_batch dec = {.decode = true, .tokens = 2, .batch = 2, .max_q_len = 1};
    for (int graph = 0; graph < 2; graph++)
        for (int s = 1; s <= steps; s++) {
            const int64_t kv[2] = {prompt + s, prompt + s};
            dec.max_kv_len = prompt + s;
            kl_story_timeline_segment(&t, graph ? KL_PHASE_DECODE_GRAPH : KL_PHASE_DECODE, s, 2, 2, kv,
                                      s == 1 || s == steps);
            fake_copy(&g, 200);
            if (!graph) {
                cr_assert_eq(kl_story_forward(&m, &dec), cudaSuccess);
            } else { /* one launch call; every kernel of the step carries its correlation id */
                kl_story_timeline_graph(&t, 1);
                fake_now += 5000;
                g.sink.api(g.sink.user, ++g.corr, fake_now - 4000, fake_now - 1000);
                /* emit the eager step's kernels, all under the graph launch's correlation id */
                static const int per_layer[] = {KL_OP_RMS_NORM,     KL_OP_QKV_GEMM,  KL_OP_QKV_GEMM, KL_OP_ROPE,
                                                KL_OP_KV_STORE,     KL_OP_ATTENTION, KL_OP_O_GEMM,   KL_OP_ADD_RMS_NORM,
                                                KL_OP_GATE_UP_GEMM, KL_OP_SILU_MUL,  KL_OP_DOWN_GEMM};
                int seq[256], n = 0;
                seq[n++] = KL_OP_EMBED;
                for (int l = 0; l < layers; l++)
                    for (size_t k = 0; k < sizeof per_layer / sizeof per_layer[0]; k++)
                        seq[n++] = k == 0 && l > 0 ? KL_OP_ADD_RMS_NORM : per_layer[k];
                seq[n++] = KL_OP_ADD_RMS_NORM, seq[n++] = KL_OP_LM_HEAD, seq[n++] = KL_OP_ARGMAX;
                for (int i = 0; i < n; i++) {
                    struct kl_kernel_record r = {0};
                    snprintf(r.name, sizeof r.name, "%s",
                             seq[i] == KL_OP_ATTENTION
                                 ? "void decode_v4<__nv_bfloat16, 128, 4, 2>(kl_attention_decode_params, int)"
                                 : fake_kernel_name(seq[i]));
                    if (g.gpu_now < fake_now) g.gpu_now = fake_now + 1000;
                    r.start_ns = g.gpu_now, r.end_ns = g.gpu_now + 4000 + 500 * (uint64_t)seq[i] + 30 * (uint64_t)s;
                    g.gpu_now = r.end_ns + 300;
                    r.correlation = g.corr, r.stream = 7, r.graph = 1, r.grid[0] = 66, r.grid[1] = r.grid[2] = 1;
                    r.block[0] = 128, r.block[1] = r.block[2] = 1;
                    g.sink.kernel(g.sink.user, &r);
                }
                kl_story_timeline_graph(&t, 0);
            }
            kl_story_timeline_end_segment(&t);
        }
    kl_story_timeline_event(&t, "decode done", "%d steps, 2 tokens each", steps);
    kl_story_timeline_segment(&t, KL_PHASE_CONTROL, 0, 1, prompt, kv1, false);
    b.tokens = b.max_q_len = prompt;
    fake_copy(&g, 4096);
    cr_assert_eq(kl_story_forward(&m, &b), cudaSuccess);
    kl_story_timeline_end_segment(&t);
    kl_story_timeline_join(&t);
    /* made-up counters for each profiled op: memory-bound norms, tensor-bound GEMMs in prefill */
    for (int i = 0; i < t.n_prof; i++) {
        struct kl_story_profile *p = &t.prof[i];
        const bool gemm = kl_story_op_kind[p->op.name] == KL_KIND_GEMM, dec = p->phase == KL_PHASE_DECODE;
        p->measured = p->counters.valid = true;
        p->counters.dram_throughput_pct = gemm && !dec ? 20 + p->op.name : 70 + p->op.name;
        p->counters.sm_throughput_pct = gemm && !dec ? 85 : 30 + p->op.name;
        p->counters.tensor_pipe_pct = gemm && !dec ? 60 + p->op.name : gemm ? 8 : 0;
        p->counters.achieved_occupancy_pct = 40 + p->op.name;
        p->counters.l2_hit_rate_pct = 50;
        p->counters.dram_read_bytes = p->op.bytes, p->counters.dram_write_bytes = p->op.bytes / 4;
        p->counters.n_stalls = 2, p->counters.n_passes = 14;
        snprintf(p->counters.stalls[0].name, sizeof p->counters.stalls[0].name, "long_scoreboard");
        snprintf(p->counters.stalls[1].name, sizeof p->counters.stalls[1].name, "wait");
        p->counters.stalls[0].pct = 60, p->counters.stalls[1].pct = 25;
    }
    struct kl_story_options o = {
        .model = m.cfg, .prompt = prompt, .shared = shared, .steps = steps, .seed = 5, .graph = true, .control = true};
    int32_t *tokens = calloc((size_t)2 * (steps + 1), sizeof(int32_t));
    for (int i = 0; i < 2 * (steps + 1); i++)
        tokens[i] = (i * 37) % 512;
    struct kl_story_doc_info in = {
        .commit = "fixture",
        .date = "2026-01-01",
        .o = &o,
        .model = &m.cfg,
        .device = {.name = "Fixture GPU",
                   .cc = 90,
                   .sms = 132,
                   .sm_mhz = 1980,
                   .mem_mhz = 2619,
                   .l2_bytes = 52428800,
                   .memory_bytes = 85e9},
        .variants = {"v4_pdl_one_trip", "v3_pdl_residual_early", "v5_pdl_one_trip", "v3_pdl_one_trip", "v1_tiled",
                     "v4_tensor_cores"},
        .gemm = "cuBLAS 13.0.0 cublasGemmEx, bf16 in, float32 accumulate",
        .mem = {.kv_bytes = 1e6, .kv_pages = 64, .activation_bytes = 2e6, .total_bytes = 9e6, .layers_fit = 32},
        .weights_bytes = 6e6,
        .free_bytes = 80e9,
        .weights_ms = 12.5,
        .matched = shared / 16 * 16,
        .match_us = 1.1,
        .insert_us = 2.3,
        .control = true,
        .logits_max_abs_diff = 0.0123,
        .logits_rel_l2 = 0.0021,
        .same_token = true,
        .tree_total = 2 * prompt,
        .tree_evictable = 2 * prompt,
        .tree_nodes = 3,
        .tokens = tokens,
        .graph = true,
        .graph_identical = true};
    cJSON *doc = kl_story_document(&in, &t);
    free(tokens);
    kl_story_timeline_release(&t);
    return doc;
}

Test(story, the_recorder_joins_every_kernel_to_the_op_that_launched_it)
{
    cJSON *doc = synthetic_run(2, 64, 48, 8);
    const cJSON *rec = cJSON_GetObjectItem(doc, "recording");
    cr_assert_eq(cJSON_GetObjectItem(rec, "unattributed")->valueint, 0, "kernels left without an op");
    const cJSON *phases = cJSON_GetObjectItem(doc, "phases");
    cr_assert_eq(cJSON_GetArraySize(phases), 5, "prefill, extend, decode, decode_graph, control");
    const cJSON *pre = cJSON_GetArrayItem(phases, 0), *detail = cJSON_GetObjectItem(pre, "detail");
    /* embed + 2 layers x 10 ops + final norm + lm_head + argmax */
    cr_assert_eq(cJSON_GetArraySize(detail), 1 + 2 * 10 + 3);
    const cJSON *qkv = cJSON_GetArrayItem(detail, 2);
    cr_assert_eq(cJSON_GetArrayItem(qkv, 0)->valueint, KL_OP_QKV_GEMM);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetArrayItem(qkv, 2)), 2, "qkv_gemm is two cuBLAS launches");
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(pre, "gaps"), "overlapped")->valueint, 2,
                 "each layer's rope started under the GEMM before it");
    /* the graph steps' kernels carry one correlation id; their ops come from the eager step's order */
    const cJSON *gr = cJSON_GetArrayItem(phases, 3), *gsteps = cJSON_GetObjectItem(gr, "steps");
    const cJSON *by_op = cJSON_GetObjectItem(cJSON_GetArrayItem(gsteps, 0), "by_op");
    cr_assert_gt(cJSON_GetArrayItem(by_op, KL_OP_ATTENTION)->valuedouble, 0, "graph step without attention time");
    const cJSON *gdet = cJSON_GetObjectItem(cJSON_GetObjectItem(gr, "detail_steps"), "1");
    cr_assert_eq(cJSON_GetArraySize(gdet), 1 + 2 * 10 + 3, "a graph step's kernels grouped into its ops");
    cr_assert_eq(cJSON_GetArrayItem(cJSON_GetArrayItem(gdet, 1 + 10), 1)->valueint, 1, "layer 1 starts after 10 ops");
    cr_assert_eq(cJSON_GetArrayItem(cJSON_GetArrayItem(gdet, 21), 1)->valueint, -1,
                 "the final norm is outside the layers");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(doc, "profiles")), 3 * KL_OP_COUNT,
                 "every op of prefill, extend and decode, profiled once each");
    const cJSON *copies = cJSON_GetObjectItem(pre, "copies");
    cr_assert_eq(cJSON_GetObjectItem(copies, "count")->valueint, 1, "the prefill's metadata copy");
    cJSON_Delete(doc);
}

static void remove_dir(const char *dir)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

/* The committed fixture of the report test (lab/tests/report_fixture/data/story.json) is this
 * synthetic run, written by the story command's writer: KL_UPDATE_FIXTURE=1 rewrites it. */
Test(story, a_synthetic_run_writes_the_committed_fixture)
{
    cJSON *doc = synthetic_run(2, 64, 48, 8);
    const char *fixture = KL_SOURCE_DIR "/lab/tests/report_fixture/data/story.json";
    char tmp[] = "/tmp/kl_story_XXXXXX";
    cr_assert(mkdtemp(tmp));
    char path[256];
    snprintf(path, sizeof path, "%s/story.json", tmp);
    cr_assert_eq(kl_story_write_json(doc, path), 0);
    if (getenv("KL_UPDATE_FIXTURE")) cr_assert_eq(kl_story_write_json(doc, fixture), 0);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "cmp -s %s %s", path, fixture);
    cr_assert_eq(system(cmd), 0, "the writer's output differs from %s (KL_UPDATE_FIXTURE=1 rewrites it)", fixture);
    /* and what it wrote reads back as the same document */
    cJSON *back = kl_story_read_json(path);
    cr_assert(back, "story.json is not JSON");
    cr_assert(cJSON_Compare(doc, back, true), "story.json does not read back as the document written");
    cJSON_Delete(back);
    cJSON_Delete(doc);
    remove_dir(tmp);
}

/* X slices per (pid, tid): sorted by start (the longer first on a tie, as viewers nest them), each
 * either nested in or after the one before. */
static int cmp_ts(const void *a, const void *b)
{
    const cJSON *p = *(cJSON *const *)a, *q = *(cJSON *const *)b;
    const double x = cJSON_GetObjectItem(p, "ts")->valuedouble, y = cJSON_GetObjectItem(q, "ts")->valuedouble;
    if (x != y) return (x > y) - (x < y);
    const double dx = cJSON_GetObjectItem(p, "dur")->valuedouble, dy = cJSON_GetObjectItem(q, "dur")->valuedouble;
    return (dx < dy) - (dx > dy);
}

/* A trace file's slices: every track nests exactly as a reader computes ends (ts + dur, in
 * doubles, no tolerance), and every kernel of layer L on its stream's own track lies inside a
 * "layer L" slice (one that a PDL launch started under its predecessor sits on the stream's
 * overlap track, and may start before its layer's first kernel on the main one). Returns the
 * number of kernel slices. */
static int check_trace_nests(const char *path)
{
    cJSON *trace = kl_story_read_json(path);
    cr_assert(trace, "%s is not JSON", path);
    const cJSON *evs = cJSON_GetObjectItem(trace, "traceEvents");
    cr_assert(cJSON_IsArray(evs));
    const int ne = cJSON_GetArraySize(evs);
    cJSON **x = malloc(sizeof(cJSON *) * (size_t)ne);
    int nx = 0, kernels = 0, max_tid = 0, overlap_tids[64], n_overlap = 0;
    for (cJSON *e = evs->child; e; e = e->next) {
        const char *ph = cJSON_GetObjectItem(e, "ph")->valuestring;
        cr_assert(cJSON_GetObjectItem(e, "pid"), "an event without pid");
        const cJSON *args = cJSON_GetObjectItem(e, "args"), *tname = args ? cJSON_GetObjectItem(args, "name") : NULL;
        if (strcmp(ph, "M") == 0 && cJSON_IsString(tname) && strstr(tname->valuestring, "(PDL overlap)") &&
            n_overlap < 64)
            overlap_tids[n_overlap++] = cJSON_GetObjectItem(e, "tid")->valueint;
        if (strcmp(ph, "X") == 0) {
            cr_assert(cJSON_IsNumber(cJSON_GetObjectItem(e, "ts")) && cJSON_IsNumber(cJSON_GetObjectItem(e, "dur")));
            x[nx++] = e;
            if (cJSON_GetObjectItem(e, "tid")->valueint > max_tid) max_tid = cJSON_GetObjectItem(e, "tid")->valueint;
            kernels += strcmp(cJSON_GetObjectItem(e, "cat")->valuestring, "layer") != 0 &&
                       strcmp(cJSON_GetObjectItem(e, "cat")->valuestring, "phase") != 0 &&
                       cJSON_GetObjectItem(e, "args") && cJSON_GetObjectItem(cJSON_GetObjectItem(e, "args"), "op");
        }
    }
    qsort(x, (size_t)nx, sizeof *x, cmp_ts);
    int bad = 0;
    for (int tid = 0; tid <= max_tid; tid++) {
        double stack[16];
        const char *names[16];
        int depth = 0;
        for (int i = 0; i < nx; i++) {
            if (cJSON_GetObjectItem(x[i], "tid")->valueint != tid) continue;
            const double ts = cJSON_GetObjectItem(x[i], "ts")->valuedouble;
            const double end = ts + cJSON_GetObjectItem(x[i], "dur")->valuedouble;
            while (depth && ts >= stack[depth - 1])
                depth--;
            if (depth && end > stack[depth - 1] && bad++ < 5)
                cr_log_error("%s: track %d: slice '%s' at %.3f ends at %.17g, after its parent '%s' (%.17g)", path, tid,
                             cJSON_GetObjectItem(x[i], "name")->valuestring, ts, end, names[depth - 1],
                             stack[depth - 1]);
            if (depth < 16) names[depth] = cJSON_GetObjectItem(x[i], "name")->valuestring, stack[depth++] = end;
        }
    }
    cr_assert_eq(bad, 0, "%s: %d slices end after their parent slice", path, bad);
    /* every kernel of layer L lies inside a "layer L" slice */
    for (int i = 0; i < nx; i++) {
        const cJSON *args = cJSON_GetObjectItem(x[i], "args"), *l = args ? cJSON_GetObjectItem(args, "layer") : NULL;
        bool on_overlap_track = false;
        for (int k = 0; k < n_overlap; k++)
            on_overlap_track |= cJSON_GetObjectItem(x[i], "tid")->valueint == overlap_tids[k];
        if (!l || l->valueint < 0 || on_overlap_track) continue;
        char want[32];
        snprintf(want, sizeof want, "layer %d", l->valueint);
        const double ts = cJSON_GetObjectItem(x[i], "ts")->valuedouble;
        const double end = ts + cJSON_GetObjectItem(x[i], "dur")->valuedouble;
        bool inside = false;
        for (int j = 0; j < nx && !inside; j++) {
            const double lt = cJSON_GetObjectItem(x[j], "ts")->valuedouble;
            inside = strcmp(cJSON_GetObjectItem(x[j], "name")->valuestring, want) == 0 && lt <= ts &&
                     end <= lt + cJSON_GetObjectItem(x[j], "dur")->valuedouble;
        }
        cr_assert(inside, "%s: kernel at %.3f of %s is in no such slice", path, ts, want);
    }
    free(x);
    cJSON_Delete(trace);
    return kernels;
}

Test(story, the_trace_is_json_whose_tracks_nest_and_whose_layers_hold_their_kernels)
{
    cJSON *doc = synthetic_run(2, 64, 48, 8);
    char tmp[] = "/tmp/kl_story_XXXXXX";
    cr_assert(mkdtemp(tmp));
    cr_assert_eq(kl_story_report(doc, tmp), 0);
    char path[256];
    snprintf(path, sizeof path, "%s/story-trace.json", tmp);
    cr_assert_gt(check_trace_nests(path), 4 * 23, "too few kernel slices");
    cJSON_Delete(doc);
    remove_dir(tmp);
}

/* The same on the committed trace of a real run (kernlab report writes it from reports/data/story.json). */
Test(story, the_committed_trace_nests)
{
    cr_assert_gt(check_trace_nests(KL_SOURCE_DIR "/reports/story-trace.json"), 0, "no kernel slices");
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
 * are fed to both), with the bound reference/story.c derives. */
Test(story_gpu, tiny_decoder_matches_the_float64_forward_and_the_radix_hit_equals_a_prefill_from_scratch,
     .timeout = 600)
{
    need_gpu();
    struct kl_story_options o = {.model = kl_story_tiny,
                                 .prompt = 96,
                                 .shared = 64,
                                 .steps = 16,
                                 .seed = 7,
                                 .graph = true,
                                 .control = true,
                                 .keep_logits = true};
    struct kl_story_result r;
    struct kl_err err = {{0}};
    cr_assert_eq(kl_story_run(&o, &r, &err), 0, "%s", err.msg);
    struct host_model h;
    host_model(&h, &o.model, o.seed, o.prompt + o.steps + 32);
    const int V = o.model.vocab;
    double *got = malloc(sizeof(double) * V), *ref = malloc(sizeof(double) * V), *var = malloc(sizeof(double) * V);
    double worst = 0, worst_l2 = 0;
    int picks = 0;
    for (int b = 0; b < 2; b++) {
        struct kl_story_ref_seq *s = kl_story_ref_seq_new(&h.d, o.prompt + o.steps);
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
    cr_log_info("tiny decoder: worst |gpu - float64| %.2f sigma, worst step norm %.2f x predicted; graph %s", worst,
                worst_l2, r.graph_identical ? "bit-identical" : "within the bound");
    cr_assert_eq(picks, 0, "%d greedy picks differ from float64 where the top two are clearly apart", picks);
    free(got), free(ref), free(var);
    host_model_free(&h);
    kl_story_result_free(&r);
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
    remove_dir(tmp);
}
