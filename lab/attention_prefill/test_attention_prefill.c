/* attention_prefill tests. Suite `attention_prefill` runs anywhere (the reference against the
 * goldens, hand-worked cases, its two forms against each other, malformed cases, the models);
 * suite `attention_prefill_gpu` runs every variant on the device and skips without one.
 * Parameterized over variant INDICES (pointers as parameters crash Criterion's workers). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lab/attention_prefill/attention_prefill_module.h"
#include "lab/attention_prefill/mutants_reference.h"
#include "lab/core/device.h"
#include "lab/core/golden.h"
#include "lab/core/testing.h"
#include "perf/bench.h"

static const struct kl_module *module(void) { return kl_module_find("attention_prefill"); }

Test(attention_prefill, reference_matches_every_golden_case)
{
    int failures = kl_test_goldens("attention_prefill", NULL, stderr);
    cr_assert(failures >= 0, "no golden cases found under golden/attention_prefill");
    cr_assert_eq(failures, 0, "%d golden cases failed (lines above)", failures);
}

/* One page of 2 keys, head_dim 2, sm_scale 1: q = (1, 0), k0 = (1, 0), k1 = (0, 1), v0 = (1, 2), v1 = (3, 4). */
static void two_keys(int64_t q_len, bool causal, double *out, double *lse)
{
    const int32_t qo[2] = {0, (int32_t)q_len}, kv[2] = {0, 1}, idx[1] = {0}, last[1] = {2};
    const double q[4] = {1, 0, 1, 0}, k[4] = {1, 0, 0, 1}, v[4] = {1, 2, 3, 4};
    struct kl_attention_prefill_shape s = {.batch = 1, .total_q = q_len, .num_qo_heads = 1, .num_kv_heads = 1,
                                           .head_dim = 2, .page_size = 2, .num_pages = 1, .qo_indptr = qo,
                                           .kv_indptr = kv, .kv_indices = idx, .kv_last_page_len = last,
                                           .sm_scale = 1.0, .causal = causal};
    cr_assert_eq(kl_attention_prefill_reference(&s, q, k, v, out, lse), 0);
}

Test(attention_prefill, reference_matches_a_hand_worked_softmax)
{
    /* Both queries non-causal, or the last query causal: logits (1, 0), weights (e, 1) / (e + 1). */
    double out[4], lse[2];
    const double e = exp(1.0);
    two_keys(1, true, out, lse);
    cr_assert_float_eq(out[0], (e * 1 + 3) / (e + 1), 1e-14);
    cr_assert_float_eq(out[1], (e * 2 + 4) / (e + 1), 1e-14);
    cr_assert_float_eq(lse[0], log(e + 1), 1e-14);
    /* Two causal queries over two keys: query 0 sees key 0 only, so its output is v0 and its lse
     * is its single logit. */
    two_keys(2, true, out, lse);
    cr_assert_float_eq(out[0], 1.0, 1e-15);
    cr_assert_float_eq(out[1], 2.0, 1e-15);
    cr_assert_float_eq(lse[0], 1.0, 1e-15);
    cr_assert_float_eq(out[2], (e * 1 + 3) / (e + 1), 1e-14);
    two_keys(2, false, out, lse);
    cr_assert_float_eq(out[0], (e * 1 + 3) / (e + 1), 1e-14);
}

Test(attention_prefill, causal_mask_is_bottom_right_aligned)
{
    /* An extend: 3 queries over 10 keys. Query i sees 10 - 3 + i + 1 keys: 8, 9, 10. */
    cr_assert_eq(kl_attention_prefill_visible(true, 3, 10, 0), 8);
    cr_assert_eq(kl_attention_prefill_visible(true, 3, 10, 2), 10);
    cr_assert_eq(kl_attention_prefill_visible(false, 3, 10, 0), 10);
    cr_assert_eq(kl_attention_prefill_visible(true, 5, 5, 0), 1);
}

/* Every row of every catalogue problem: the dgemm form and the plain-loop form of the reference
 * are two implementations of the same function, and must agree to float64 rounding. */
Test(attention_prefill, reference_blocked_dgemm_and_plain_loops_agree_on_the_catalogue)
{
    char label[200];
    int checked = 0;
    for (int i = 0;; i++) {
        struct kl_attention_prefill_problem *p = module()->tensor->make(i, 7, label, sizeof label);
        if (!p) break;
        struct kl_outputs o = {0};
        struct kl_err err;
        cr_assert_eq(kl_attention_prefill_expected(p, &o, &err), 0, "%s", err.msg);
        const int64_t n = p->shape.total_q * p->shape.num_qo_heads, d = p->shape.head_dim;
        int64_t *rows = malloc(sizeof(int64_t) * (size_t)(n + 1));
        double *out = malloc(sizeof(double) * (size_t)(n * d + 1)), *lse = malloc(sizeof(double) * (size_t)(n + 1));
        for (int64_t r = 0; r < n; r++) rows[r] = r;
        double *q = kl_tensor_to_f64(&p->q), *k = kl_tensor_to_f64(&p->k_cache), *v = kl_tensor_to_f64(&p->v_cache);
        kl_attention_prefill_reference_rows(&p->shape, q, k, v, rows, n, out, lse);
        for (int64_t r = 0; r < n; r++) {
            cr_assert(fabs(lse[r] - o.o[1].v[r]) <= 1e-12 * (1 + fabs(lse[r])) || lse[r] == o.o[1].v[r],
                      "%s: lse[%lld] %.17g vs %.17g", label, (long long)r, lse[r], o.o[1].v[r]);
            for (int64_t c = 0; c < d; c++)
                cr_assert(fabs(out[r * d + c] - o.o[0].v[r * d + c]) <= 1e-12, "%s: out[%lld] %.17g vs %.17g", label,
                          (long long)(r * d + c), out[r * d + c], o.o[0].v[r * d + c]);
        }
        free(q), free(k), free(v), free(rows), free(out), free(lse);
        kl_outputs_free(&o);
        module()->tensor->free(p);
        checked++;
    }
    cr_assert_gt(checked, 20);
}

/* A long row's outputs are averages over many keys, far smaller than a short row's, so the whole
 * output's rel_l2 is the short rows'. An error of a quarter of the long row's own size passes the
 * whole-output check beside twelve short requests; the policy the module sets (rel_l2 for each query
 * row too) fails it. */
Test(attention_prefill, a_long_rows_error_does_not_hide_under_short_rows)
{
    const int64_t q_lens[13] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    const int64_t kv_lens[13] = {6000, 3, 5, 2, 4, 3, 6, 2, 3, 4, 2, 5, 3};
    const struct kl_attention_prefill_spec spec = {13, q_lens, kv_lens, 4, 1, 64, 16, 0, false, KL_BF16, 1};
    struct kl_attention_prefill_problem *p = kl_attention_prefill_problem_random(&spec, 29);
    struct kl_outputs want = {0};
    struct kl_err err;
    cr_assert_eq(kl_attention_prefill_expected(p, &want, &err), 0, "%s", err.msg);
    const int64_t row = p->shape.num_qo_heads * p->shape.head_dim; /* request 0's one query row */
    cr_assert_eq(want.o[0].policy.rel_l2_group, row, "the module's out policy does not check each query row");
    bool with, without;
    kl_test_scaled_part(&want, row, 1.25, &with, &without);
    cr_expect(!with, "a long row 25%% off passed");
    cr_expect(without, "the whole-output check alone caught it: the case no longer shows the hiding");
    kl_outputs_free(&want);
    kl_attention_prefill_problem_free(p);
}

Test(attention_prefill, catalogue_is_valid_and_covers_the_edges)
{
    char label[200];
    bool page1 = false, odd_page = false, empty = false, q1 = false, extend = false, noncausal = false;
    bool gqa[9] = {false}, dims[3] = {false}, types[3] = {false}, partial = false, large = false;
    for (int i = 0;; i++) {
        struct kl_attention_prefill_problem *p = module()->tensor->make(i, 3, label, sizeof label);
        if (!p) break;
        const struct kl_attention_prefill_shape *s = &p->shape;
        struct kl_err err;
        cr_assert_eq(kl_attention_prefill_validate(p, label, &err), 0, "%s", err.msg);
        page1 |= s->page_size == 1, odd_page |= s->page_size > 1 && s->page_size % 2 == 1;
        noncausal |= !s->causal;
        const int64_t g = s->num_qo_heads / s->num_kv_heads;
        if (g <= 8) gqa[g] = true;
        dims[0] |= s->head_dim == 64, dims[1] |= s->head_dim == 128, dims[2] |= s->head_dim == 256;
        types[0] |= p->dtype == KL_F32, types[1] |= p->dtype == KL_F16, types[2] |= p->dtype == KL_BF16;
        large |= strstr(label, "large_logits") != NULL;
        for (int64_t b = 0; b < s->batch; b++) {
            const int64_t q_len = s->qo_indptr[b + 1] - s->qo_indptr[b], kv_len = kl_attention_prefill_kv_len(s, b);
            empty |= q_len == 0, q1 |= q_len == 1, extend |= q_len > 1 && q_len < kv_len;
            partial |= kv_len % s->page_size != 0;
        }
        module()->tensor->free(p);
    }
    cr_assert(page1 && odd_page && empty && q1 && extend && noncausal && partial && large,
              "page1 %d odd page %d empty %d q_len 1 %d extend %d noncausal %d partial %d large %d", page1, odd_page,
              empty, q1, extend, noncausal, partial, large);
    cr_assert(gqa[1] && gqa[4] && gqa[8], "GQA 1/4/8");
    cr_assert(dims[0] && dims[1] && dims[2], "head_dim 64/128/256");
    cr_assert(types[0] && types[1] && types[2], "fp32/fp16/bf16");
}

/* ---- the tolerance's claims, each a mutant caught on a golden (lab/core/compare.c) ---- */

static void view(const void *problem, struct kl_attention_view *v)
{
    const struct kl_attention_prefill_problem *p = problem;
    *v = (struct kl_attention_view){.shape = p->shape, .dtype = p->dtype, .q = kl_tensor_to_f64(&p->q),
                                    .k_cache = kl_tensor_to_f64(&p->k_cache), .v_cache = kl_tensor_to_f64(&p->v_cache)};
}

/* Goldens by what they hold. */
#define CAUSAL_MULTI_QUERY                                                                                          \
    "causal_prefill_gqa4_bf16", "extend_q37_kv300", "head_dim_128_extend", "head_dim_256_page8", "large_logits_bf16", \
        "page1_fp32_custom_scale", "ragged_empty_requests_page5_gqa8", "causal_offsets_0_127_bf16",                  \
        "gqa8_extend_kv520_bf16", "mha_causal_q140_page1_fp32", "gqa8_ragged_page7_bf16"
#define LONG_16BIT "extend_q37_kv300", "gqa8_extend_kv520_bf16", "gqa4_noncausal_kv600_fp16", "gqa8_ragged_page7_bf16"
#define SEVERAL_KV_HEADS "gqa8_extend_kv520_bf16", "gqa4_noncausal_kv600_fp16", "gqa8_ragged_page7_bf16"
#define MASK_ROW_LATE(tq, tk) KL_ATTN_TILED(MASK_FROM_NEXT_ROW, "mask test one row late " #tq "x" #tk, tq, tk)

/* The query x key tiles whose first row the variants' mask test is made from: v1 32x32; mainloop_sm80.cuh
 * 128x64 (64x32 at head_dim 256); the wgmma variants decide per warpgroup, 64 rows, over key
 * tiles of 128 (64 at head_dim 256). */
static const struct kl_attention_mutant mask_late[] = {MASK_ROW_LATE(32, 32), MASK_ROW_LATE(128, 64),
                                                       MASK_ROW_LATE(64, 32), MASK_ROW_LATE(64, 128),
                                                       MASK_ROW_LATE(64, 64)};

static const struct kl_attention_claim claims[] = {
    {KL_ATTN_MUTANT(EXACT, "float64, no bug"), KL_CLAIM_PASSES, {0}},
    {KL_ATTN_MUTANT(FLOAT32_KERNEL, "float32 kernel, no bug"), KL_CLAIM_PASSES, {0}},
    {KL_ATTN_MUTANT(O_IN_DTYPE, "P.V rounded every 16 keys"), KL_CLAIM_OUT, {LONG_16BIT}},
    {KL_ATTN_MUTANT(LAST_KEY_DROPPED, "last key dropped"),
     KL_CLAIM_OUT,
     {"gqa4_noncausal_kv600_fp16", "noncausal_ragged_fp16", "partial_last_page_noncausal_fp32", "q_len_1_batch_fp16",
      "gqa8_extend_kv520_bf16", "gqa8_ragged_page7_bf16"}},
    {KL_ATTN_MUTANT(LAST_KEY_DROPPED, "last key dropped"),
     KL_CLAIM_LSE,
     {"causal_prefill_gqa4_bf16", "extend_q37_kv300", "head_dim_128_extend", "head_dim_256_page8",
      "noncausal_ragged_fp16", "page1_fp32_custom_scale", "partial_last_page_noncausal_fp32", "q_len_1_batch_fp16",
      "ragged_empty_requests_page5_gqa8", "causal_offsets_0_127_bf16", "gqa8_extend_kv520_bf16",
      "gqa4_noncausal_kv600_fp16", "mha_causal_q140_page1_fp32", "gqa8_ragged_page7_bf16"}},
    {KL_ATTN_MUTANT(DIAGONAL_PLUS_ONE, "one key past the diagonal"), KL_CLAIM_OUT, {CAUSAL_MULTI_QUERY}},
    {KL_ATTN_MUTANT(DIAGONAL_MINUS_ONE, "the diagonal key missed"), KL_CLAIM_OUT, {CAUSAL_MULTI_QUERY}},
    {KL_ATTN_MUTANT(LSE_LOG2, "lse in log2"), KL_CLAIM_LSE, {"*"}},
    {KL_ATTN_MUTANT(NO_MAX, "no max subtracted"), KL_CLAIM_OUT, {"large_logits_bf16"}},
    {KL_ATTN_MUTANT(NO_SM_SCALE, "sm_scale missing"), KL_CLAIM_OUT, {"*"}},
    {KL_ATTN_MUTANT(NO_SM_SCALE, "sm_scale missing"), KL_CLAIM_LSE, {"*"}},
    {KL_ATTN_TILED(NO_RESCALE, "no rescale, 64-key tiles", 0, 64),
     KL_CLAIM_OUT,
     {LONG_16BIT, "mha_causal_q140_page1_fp32", "causal_offsets_0_127_bf16"}},
    {KL_ATTN_TILED(NO_RESCALE, "no rescale, 128-key tiles", 0, 128),
     KL_CLAIM_OUT,
     {LONG_16BIT, "mha_causal_q140_page1_fp32"}},
    {KL_ATTN_MUTANT(KV_HEAD_0, "kv head 0 for every head"),
     KL_CLAIM_OUT,
     {SEVERAL_KV_HEADS, "mha_causal_q140_page1_fp32"}},
    {KL_ATTN_MUTANT(KV_HEAD_MOD, "kv head h % kv_heads"), KL_CLAIM_OUT, {SEVERAL_KV_HEADS}},
    {MASK_ROW_LATE(32, 32), KL_CLAIM_LSE, {"causal_offsets_0_127_bf16"}},
    {MASK_ROW_LATE(128, 64), KL_CLAIM_LSE, {"causal_offsets_0_127_bf16"}},
    {MASK_ROW_LATE(64, 32), KL_CLAIM_LSE, {"causal_offsets_0_127_bf16"}},
    {MASK_ROW_LATE(64, 64), KL_CLAIM_LSE, {"causal_offsets_0_127_bf16"}},
    {MASK_ROW_LATE(64, 128), KL_CLAIM_LSE, {"causal_offsets_0_127_bf16"}},
    {MASK_ROW_LATE(32, 32), KL_CLAIM_OUT, {"causal_offsets_0_127_bf16"}},
    {MASK_ROW_LATE(128, 64), KL_CLAIM_OUT, {"causal_offsets_0_127_bf16"}},
    {MASK_ROW_LATE(64, 32), KL_CLAIM_OUT, {"causal_offsets_0_127_bf16"}},
    {MASK_ROW_LATE(64, 64), KL_CLAIM_OUT, {"causal_offsets_0_127_bf16"}},
    {KL_ATTN_MUTANT(SCORES_IN_DTYPE, "logits rounded to the dtype"),
     KL_CLAIM_LSE,
     {"causal_prefill_gqa4_bf16", "extend_q37_kv300", "head_dim_128_extend", "head_dim_256_page8", "large_logits_bf16",
      "noncausal_ragged_fp16", "q_len_1_batch_fp16", "ragged_empty_requests_page5_gqa8", "causal_offsets_0_127_bf16",
      "gqa8_extend_kv520_bf16", "gqa4_noncausal_kv600_fp16", "gqa8_ragged_page7_bf16"}},
};

Test(attention_prefill, every_tolerance_claim_is_a_mutant_caught_on_a_golden)
{
    /* Also: the reference and a correct float32 kernel pass every golden under the same policy. */
    int broken = kl_attention_check_claims("attention_prefill", view, claims, sizeof claims / sizeof claims[0], stderr);
    cr_assert(broken >= 0, "no golden cases");
    cr_assert_eq(broken, 0, "%d claims of compare.c's attention rationale do not hold (CLAIM BROKEN lines above)",
                 broken);
}

Test(attention_prefill, a_correct_float32_kernel_passes_the_whole_catalogue)
{
    const struct kl_attention_mutant m = KL_ATTN_MUTANT(FLOAT32_KERNEL, "float32 kernel, no bug");
    cr_assert_eq(kl_attention_mutant_catalogue(module(), view, &m, 7, false, stderr), 0,
                 "the bound fails a correct computation (lines above)");
}

Test(attention_prefill, a_mask_test_one_row_late_is_caught_by_the_fixed_catalogue_at_every_tile_size)
{
    for (size_t i = 0; i < sizeof mask_late / sizeof mask_late[0]; i++)
        cr_expect_gt(kl_attention_mutant_catalogue(module(), view, &mask_late[i], 7, true, stderr), 0,
                     "%s passes every edge case of the catalogue", mask_late[i].name);
}

Test(attention_prefill, catalogue_puts_the_causal_diagonal_at_every_offset_of_every_key_tile)
{
    /* Covered: causal requests of q_len >= 2 (the first row of a query tile has a next row) whose
     * kv_len - q_len takes every value modulo the key tile. 16-bit inputs run every variant; fp32
     * only v0 and v1 (32-key tiles). */
    enum { kTiles = 3 };
    static const int tiles[kTiles] = {32, 64, 128};
    bool seen[2][kTiles][128] = {{{false}}}; /* [head_dim 256?][tile][offset] */
    bool fp32_seen[32] = {false};
    char label[200];
    for (int i = 0;; i++) {
        struct kl_attention_prefill_problem *p = module()->tensor->make(i, 3, label, sizeof label);
        if (!p) break;
        const struct kl_attention_prefill_shape *s = &p->shape;
        for (int64_t b = 0; b < s->batch && s->causal && strncmp(label, "random", 6) != 0; b++) {
            const int64_t q_len = s->qo_indptr[b + 1] - s->qo_indptr[b];
            const int64_t gap = kl_attention_prefill_kv_len(s, b) - q_len;
            if (q_len < 2) continue;
            for (int t = 0; t < kTiles; t++)
                if (p->dtype != KL_F32) seen[s->head_dim == 256][t][gap % tiles[t]] = true;
            if (p->dtype == KL_F32) fp32_seen[gap % 32] = true;
        }
        module()->tensor->free(p);
    }
    for (int big = 0; big < 2; big++)
        for (int t = 0; t < kTiles - big; t++) /* head_dim 256 runs tiles of 32 and 64 only */
            for (int r = 0; r < tiles[t]; r++)
                cr_expect(seen[big][t][r], "no fixed causal request with kv_len - q_len = %d mod %d at head_dim %s", r,
                          tiles[t], big ? "256" : "<= 128");
    for (int r = 0; r < 32; r++)
        cr_expect(fp32_seen[r], "no fixed fp32 causal request with kv_len - q_len = %d mod 32", r);
}

Test(attention_prefill, catalogue_inputs_replay_from_their_seed)
{
    /* `kernlab check --seed N` and KL_SEED=N print and take the same seed: problem i drawn from it
     * twice is the same problem, bit for bit; another seed draws other values. */
    cr_assert_eq(kl_attention_catalogue_replays(module(), view, 12345, stderr), 0, "(lines above)");
}

Test(attention_prefill, flop_and_byte_models_count_exactly)
{
    const struct kl_perf_ops *perf = module()->perf;
    const struct kl_workload *w8k = NULL, *ext = NULL;
    for (int i = 0; i < perf->n_workloads; i++) {
        if (strcmp(perf->workloads[i].name, "causal-8k") == 0) w8k = &perf->workloads[i];
        if (strcmp(perf->workloads[i].name, "extend-b4-q512-kv4k") == 0) ext = &perf->workloads[i];
    }
    cr_assert(w8k && ext);
    /* causal 8192: 8192 * 8193 / 2 pairs per head, 32 heads, 4 * 128 FLOPs each */
    cr_assert_float_eq(perf->flops(w8k), 4.0 * 128 * 32 * (8192.0 * 8193 / 2), 1);
    /* extend: query i of 512 sees 3584 + i + 1 keys */
    cr_assert_float_eq(perf->flops(ext), 4.0 * 128 * 32 * 4 * (512.0 * 3584 + 512.0 * 513 / 2), 1);
    /* bytes: q + out (bf16, 32 heads), K + V attended (8 heads), lse f32, indices */
    double expect = 8192.0 * 32 * 128 * 2 * 2 + 8192.0 * 8 * 128 * 2 * 2 + 8192.0 * 32 * 4 + 4.0 * (2 * 2 + 1 + 512);
    cr_assert_float_eq(perf->bytes(w8k), expect, 1);
}

/* ---- malformed cases: one clean FAIL naming the file ---- */

static void copy_file(const char *from, const char *to)
{
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    cr_assert(a && b, "copy %s -> %s", from, to);
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, a)) > 0) fwrite(buf, 1, n, b);
    fclose(a), fclose(b);
}

/* A copy of a golden case in a fresh temporary directory. */
static void copy_case(const char *name, char *dir, size_t len)
{
    char src[1024], tmpl[] = "/tmp/kl_prefill_XXXXXX";
    cr_assert(mkdtemp(tmpl), "mkdtemp");
    snprintf(dir, len, "%s/%s", tmpl, name);
    cr_assert_eq(mkdir(dir, 0755), 0);
    snprintf(src, sizeof src, KL_SOURCE_DIR "/golden/attention_prefill/%s", name);
    DIR *d = opendir(src);
    cr_assert(d, "%s", src);
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char a[1400], b[1400];
        snprintf(a, sizeof a, "%s/%s", src, e->d_name);
        snprintf(b, sizeof b, "%s/%s", dir, e->d_name);
        copy_file(a, b);
    }
    closedir(d);
}

/* Sets element i of an int32 array of the case. */
static void poke(const char *dir, const char *array, int64_t i, int32_t value)
{
    char path[1400];
    struct kl_tensor t;
    struct kl_err err;
    snprintf(path, sizeof path, "%s/%s.npy", dir, array);
    cr_assert_eq(kl_npy_read(path, &t, &err), 0, "%s", err.msg);
    ((int32_t *)t.data)[i] = value;
    cr_assert_eq(kl_npy_write(path, &t, &err), 0, "%s", err.msg);
    kl_tensor_free(&t);
}

/* Replaces an array of the case by a float32 one of the given shape (values 0.5, representable everywhere). */
static void replace(const char *dir, const char *array, int ndim, const int64_t *dims)
{
    char path[1400];
    struct kl_tensor t;
    struct kl_err err;
    snprintf(path, sizeof path, "%s/%s.npy", dir, array);
    kl_tensor_alloc(&t, KL_F32, ndim, dims);
    for (int64_t i = 0; i < kl_numel(&t); i++) ((float *)t.data)[i] = 0.5f;
    cr_assert_eq(kl_npy_write(path, &t, &err), 0, "%s", err.msg);
    kl_tensor_free(&t);
}

/* Removes the copy made by copy_case (its files, it, and the temporary directory above it). */
static void remove_case(const char *dir)
{
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (e->d_name[0] != '.') unlink(path);
    }
    if (d) closedir(d);
    rmdir(dir);
    char parent[1200];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (slash) *slash = 0, rmdir(parent);
}

static void expect_clean_fail(const char *dir, const char *file, const char *words)
{
    struct kl_case c;
    struct kl_err err = {{0}};
    struct kl_verdict vd;
    cr_assert_eq(kl_case_open(&c, dir, &err), 0, "%s", err.msg);
    kl_verify_case(module(), &c, NULL, &vd);
    kl_case_close(&c);
    cr_log_info("%s: %s", file, vd.why);
    cr_expect_eq(vd.status, KL_FAIL, "%s: malformed case passed", dir);
    char where[1500];
    snprintf(where, sizeof where, "%s/%s", dir, file);
    cr_expect(strstr(vd.why, strchr(file, '{') ? dir : where) != NULL, "message does not name %s: %s", where, vd.why);
    cr_expect(strstr(vd.why, words) != NULL, "message lacks \"%s\": %s", words, vd.why);
    remove_case(dir);
}

#define BASE "ragged_empty_requests_page5_gqa8" /* q_lens 3/0/11/0, kv_lens 3/7/19/0, page 5, 9 pages */
#define INDEX_FILES "{qo_indptr,kv_indptr,kv_indices,kv_last_page_len}.npy"

Test(attention_prefill, malformed_cases_fail_cleanly_naming_the_file)
{
    char dir[1200];
    copy_case(BASE, dir, sizeof dir), poke(dir, "qo_indptr", 1, 5); /* 0 5 3 14 14 */
    expect_clean_fail(dir, INDEX_FILES, "qo_indptr decreases");
    copy_case(BASE, dir, sizeof dir), poke(dir, "kv_indptr", 2, 0); /* 0 1 0 7 7 */
    expect_clean_fail(dir, INDEX_FILES, "kv_indptr decreases");
    copy_case(BASE, dir, sizeof dir), poke(dir, "kv_last_page_len", 0, 2); /* kv_len 2 < q_len 3 */
    expect_clean_fail(dir, INDEX_FILES, "q_len 3 > kv_len 2");
    copy_case(BASE, dir, sizeof dir), poke(dir, "kv_indices", 0, 9); /* the cache has pages 0..8 */
    expect_clean_fail(dir, INDEX_FILES, "outside the 9 pages");
    copy_case(BASE, dir, sizeof dir), poke(dir, "kv_last_page_len", 2, 0);
    expect_clean_fail(dir, INDEX_FILES, "kv_last_page_len[2] = 0");
    copy_case(BASE, dir, sizeof dir), poke(dir, "kv_last_page_len", 2, 6);
    expect_clean_fail(dir, INDEX_FILES, "kv_last_page_len[2] = 6");
    copy_case(BASE, dir, sizeof dir), poke(dir, "qo_indptr", 3, 13), poke(dir, "qo_indptr", 4, 13);
    expect_clean_fail(dir, INDEX_FILES, "but q has 14 rows");
    copy_case(BASE, dir, sizeof dir), replace(dir, "v_cache", 4, (int64_t[]){8, 5, 1, 64});
    expect_clean_fail(dir, "v_cache.npy", "shape");
    copy_case(BASE, dir, sizeof dir), replace(dir, "k_cache", 4, (int64_t[]){9, 5, 3, 64});
    replace(dir, "v_cache", 4, (int64_t[]){9, 5, 3, 64});
    expect_clean_fail(dir, "k_cache.npy", "do not divide");
    copy_case(BASE, dir, sizeof dir), replace(dir, "kv_indices", 1, (int64_t[]){7});
    expect_clean_fail(dir, "kv_indices.npy", "expected <i4");
    copy_case(BASE, dir, sizeof dir), replace(dir, "lse", 2, (int64_t[]){14, 7});
    expect_clean_fail(dir, "lse.npy", "shape");
}

/* ---- GPU ---- */

KL_GPU_TESTS(attention_prefill_gpu, attention_prefill, five, 5, KL_FLAGGED_BY_EACH, NULL)

Test(attention_prefill_gpu, launchers_reject_bad_shapes_without_launching)
{
    if (!kl_have_gpu()) cr_skip_test("no CUDA device");
    const struct kl_attention_prefill_params good = {
        .batch = 1, .total_q = 4, .num_qo_heads = 8, .num_kv_heads = 2, .head_dim = 128, .page_size = 16,
        .num_pages = 1, .max_q_len = 4, .sm_scale = 0.088f, .causal = true, .dtype = KL_BF16};
    struct {
        const char *what;
        struct kl_attention_prefill_params p;
    } bad[] = {{"qo heads not a multiple of kv heads", good}, {"head_dim 0", good}, {"page_size 0", good},
               {"max_q_len past total_q", good}, {"null pointers", good}, {"sm_scale NaN", good}};
    bad[0].p.num_qo_heads = 6, bad[0].p.num_kv_heads = 4;
    bad[1].p.head_dim = 0;
    bad[2].p.page_size = 0;
    bad[3].p.max_q_len = 5;
    /* bad[4]: the pointers of `good` are all NULL with total_q 4 */
    bad[5].p.sm_scale = NAN;
    int dummy[16];
    for (int k = 0; k < 4; k++) { /* give the others valid-looking pointers so only the named field is wrong */
        bad[k].p.q = bad[k].p.k_cache = bad[k].p.v_cache = dummy;
        bad[k].p.qo_indptr = bad[k].p.kv_indptr = bad[k].p.kv_indices = bad[k].p.kv_last_page_len = dummy;
        bad[k].p.out = dummy, bad[k].p.lse = (float *)dummy;
    }
    bad[5].p = bad[0].p, bad[5].p.num_qo_heads = 8, bad[5].p.num_kv_heads = 2, bad[5].p.sm_scale = NAN;
    for (int i = 0; i < kl_variant_count("attention_prefill", false); i++) {
        const struct kl_variant *v = kl_variant_at("attention_prefill", i, false);
        for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
            cr_expect_eq(((kl_attention_prefill_launch_fn)v->launch)(&bad[k].p, 0), cudaErrorInvalidValue,
                         "%s accepted %s", v->name, bad[k].what);
    }
    cr_assert_eq(kl_dev_sync(), 0, "the device is in error after the rejected launches");
}
