/* attention_decode tests. Suite `attention_decode` runs anywhere (the reference against the
 * goldens and worked examples, the page-table checks, the split plan); suite
 * `attention_decode_gpu` runs every variant on the device and skips without one.
 * Parameterized over variant INDICES (pointers as parameters crash Criterion's workers). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lab/attention_decode/attention_decode_module.h"
#include "lab/attention_prefill/mutants_reference.h"
#include "lab/core/device.h"
#include "lab/core/json_path.h"
#include "lab/core/testing.h"
#include "reference/attention_decode.h"

static const struct kl_module *module(void) { return kl_module_find("attention_decode"); }

Test(attention_decode, reference_matches_every_golden_case)
{
    int failures = kl_test_goldens("attention_decode", NULL, stderr);
    cr_assert(failures >= 0, "no golden cases found under golden/attention_decode");
    cr_assert_eq(failures, 0, "%d golden cases failed (lines above)", failures);
}

Test(attention_decode, reference_softmax_of_two_keys_worked_by_hand)
{
    /* One request, one head, head_dim 2, page_size 1, sm_scale 1: q = (1, 0), keys (1, 0) and
     * (0, 1) give scores 1 and 0, so p = (e, 1) / (e + 1); values (1, 2) and (3, 4). */
    const double q[2] = {1, 0}, k[4] = {1, 0, 0, 1}, v[4] = {1, 2, 3, 4};
    const int32_t indptr[2] = {0, 2}, indices[2] = {0, 1}, last[1] = {1};
    double out[2], lse;
    kl_attention_decode_reference(q, k, v, indptr, indices, last, 1, 1, 1, 2, 1, 1.0, out, &lse);
    const double e = exp(1.0), p0 = e / (e + 1), p1 = 1 / (e + 1);
    cr_assert_float_eq(out[0], p0 * 1 + p1 * 3, 1e-14);
    cr_assert_float_eq(out[1], p0 * 2 + p1 * 4, 1e-14);
    cr_assert_float_eq(lse, log(e + 1), 1e-14);
}

Test(attention_decode, reference_gives_zero_and_minus_infinity_for_an_empty_request)
{
    const double q[4] = {1, 2, 3, 4}, k[2] = {1, 1}, v[2] = {5, 5};
    const int32_t indptr[3] = {0, 0, 1}, indices[1] = {0}, last[2] = {0, 1};
    double out[4] = {9, 9, 9, 9}, lse[2] = {9, 9};
    kl_attention_decode_reference(q, k, v, indptr, indices, last, 2, 1, 1, 2, 1, 1.0, out, lse);
    cr_assert(out[0] == 0 && out[1] == 0 && isinf(lse[0]) && lse[0] < 0, "empty request: out %g %g, lse %g", out[0],
              out[1], lse[0]);
    cr_assert(out[2] == 5 && out[3] == 5, "one key: out is its value");
}

Test(attention_decode, reference_draft_tokens_see_only_the_keys_up_to_their_own_worked_by_hand)
{
    /* One request of two keys, both new: two query rows (q_len 2 = kv_len), one head, head_dim 2,
     * page_size 1, sm_scale 1, both queries (1, 0). Query 0 sees key 0 alone: out = v_0 = (1, 2)
     * and lse = s_0 = 1. Query 1 sees both: scores 1 and 0, as in the two-key example above. */
    const double q[4] = {1, 0, 1, 0}, k[4] = {1, 0, 0, 1}, v[4] = {1, 2, 3, 4};
    const int32_t qo[2] = {0, 2}, indptr[2] = {0, 2}, indices[2] = {0, 1}, last[1] = {1};
    double out[4], lse[2];
    kl_attention_decode_reference_multi(q, k, v, qo, indptr, indices, last, 1, 1, 1, 2, 1, 1.0, out, lse);
    const double e = exp(1.0), p0 = e / (e + 1), p1 = 1 / (e + 1);
    cr_assert(out[0] == 1 && out[1] == 2 && lse[0] == 1, "query 0: out %g %g, lse %g; expected 1 2, 1", out[0], out[1],
              lse[0]);
    cr_assert_float_eq(out[2], p0 * 1 + p1 * 3, 1e-14);
    cr_assert_float_eq(out[3], p0 * 2 + p1 * 4, 1e-14);
    cr_assert_float_eq(lse[1], log(e + 1), 1e-14);
}

Test(attention_decode, reference_with_one_query_row_per_request_is_the_plain_reference)
{
    /* qo_indptr = 0, 1, .., batch names the same rows as NULL: the same numbers, bit for bit. */
    const int64_t lens[3] = {40, 1, 17}, q_lens[3] = {1, 1, 1};
    struct kl_attention_decode_problem *p = kl_attention_decode_problem_random(3, 8, 2, 64, 16, lens, KL_F32, 1, 5);
    struct kl_attention_decode_problem *m =
        kl_attention_decode_problem_random_multi(3, 8, 2, 64, 16, lens, q_lens, KL_F32, 1, 5);
    struct kl_outputs a = {0}, b = {0};
    struct kl_err err;
    cr_assert_eq(m->rows, 3);
    cr_assert_eq(memcmp(p->q.data, m->q.data, (size_t)kl_numel(&p->q) * sizeof(float)), 0, "not the same draw");
    kl_attention_decode_run_reference(p, &a, &err), kl_attention_decode_run_reference(m, &b, &err);
    for (int o = 0; o < 2; o++)
        for (int64_t j = 0; j < a.o[o].n; j++)
            cr_assert(a.o[o].v[j] == b.o[o].v[j], "%s[%lld]: %.17g without qo_indptr, %.17g with", a.o[o].name,
                      (long long)j, a.o[o].v[j], b.o[o].v[j]);
    kl_outputs_free(&a), kl_outputs_free(&b);
    kl_attention_decode_problem_free(p), kl_attention_decode_problem_free(m);
}

Test(attention_decode, malformed_qo_indptr_is_refused_naming_the_array)
{
    const int64_t lens[3] = {5, 9, 3}, q_lens[3] = {2, 8, 3};
    struct kl_attention_decode_problem *p =
        kl_attention_decode_problem_random_multi(3, 4, 2, 8, 4, lens, q_lens, KL_F32, 1, 9);
    int32_t *qo = p->qo_indptr.data;
    struct kl_err err;
    cr_assert_eq(kl_attention_decode_check_table(p, "", &err), 0, "%s", err.msg);
    cr_assert(p->rows == 13 && p->max_q_len == 8, "rows %lld, max_q_len %lld", (long long)p->rows,
              (long long)p->max_q_len);
    const struct {
        int at, value;
        const char *says;
    } bad[] = {{0, 1, "qo_indptr[0]"}, {2, 1, "decreases"}, {1, 6, "q_len <= kv_len"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const int32_t keep = qo[bad[i].at];
        qo[bad[i].at] = bad[i].value;
        cr_assert_neq(kl_attention_decode_check_table(p, "", &err), 0, "qo_indptr[%d] = %d accepted", bad[i].at,
                      bad[i].value);
        cr_assert(strstr(err.msg, "qo_indptr.npy") && strstr(err.msg, bad[i].says), "%s", err.msg);
        qo[bad[i].at] = keep;
    }
    /* More than KL_DECODE_MAX_Q_LEN tokens in a request with the keys for them. */
    char why[200];
    const int32_t nine[2] = {0, 9};
    const int64_t kv[1] = {20};
    cr_assert_neq(kl_attention_decode_check_qo(nine, kv, 1, KL_DECODE_MAX_Q_LEN, why, sizeof why), 0);
    cr_assert(strstr(why, "max_q_len"), "%s", why);
    kl_attention_decode_problem_free(p);
}

Test(attention_decode, launch_checks_take_qo_indptr_only_from_variants_that_declare_it)
{
    /* Host-side checks only (no launch): pointers are placeholders never read. */
    static int32_t dummy[16];
    struct kl_attention_decode_params p = {.q = dummy, .k_cache = dummy, .v_cache = dummy, .kv_indptr = dummy,
                                           .kv_indices = dummy, .kv_last_page_len = dummy, .out = dummy,
                                           .lse = (float *)dummy, .batch = 2, .num_qo_heads = 8, .num_kv_heads = 2,
                                           .head_dim = 128, .page_size = 16, .num_pages = 4, .max_kv_len = 40,
                                           .sm_scale = 0.1f, .dtype = KL_BF16, .qo_indptr = dummy, .max_q_len = 4};
    cr_assert_eq(kl_attention_decode_check_params(&p, "test"), cudaErrorNotSupported,
                 "a variant that never declared several query tokens must skip them");
    cr_assert_eq(kl_attention_decode_check_params_multi(&p, "test"), cudaSuccess);
    p.max_q_len = 0;
    cr_assert_eq(kl_attention_decode_check_params_multi(&p, "test"), cudaErrorInvalidValue, "max_q_len 0 accepted");
    p.max_q_len = KL_DECODE_MAX_Q_LEN + 1;
    cr_assert_eq(kl_attention_decode_check_params_multi(&p, "test"), cudaErrorInvalidValue, "max_q_len 9 accepted");
    p.max_q_len = 8, p.max_kv_len = 3; /* a loose bound is still a bound (q_len <= kv_len <= 3) */
    cr_assert_eq(kl_attention_decode_check_params_multi(&p, "test"), cudaSuccess);
    p.qo_indptr = NULL, p.max_q_len = 0, p.max_kv_len = 40; /* one token per request: both checks agree */
    cr_assert_eq(kl_attention_decode_check_params(&p, "test"), cudaSuccess);
    cr_assert_eq(kl_attention_decode_check_params_multi(&p, "test"), cudaSuccess);
}

Test(attention_decode, launch_checks_take_an_fp8_cache_only_from_variants_that_declare_it)
{
    /* Host-side checks only (no launch): pointers are placeholders never read. */
    static int32_t dummy[16];
    static const float scale[2] = {1, 1};
    struct kl_attention_decode_params p = {.q = dummy, .k_cache = dummy, .v_cache = dummy, .kv_indptr = dummy,
                                           .kv_indices = dummy, .kv_last_page_len = dummy, .out = dummy,
                                           .lse = (float *)dummy, .batch = 2, .num_qo_heads = 8, .num_kv_heads = 2,
                                           .head_dim = 128, .page_size = 16, .num_pages = 4, .max_kv_len = 40,
                                           .sm_scale = 0.1f, .dtype = KL_BF16, .k_scale = scale, .v_scale = scale};
    cr_assert_eq(kl_attention_decode_check_params(&p, "test"), cudaErrorNotSupported,
                 "a 16-bit variant must skip an FP8 cache, never read its codes");
    cr_assert_eq(kl_attention_decode_check_params_multi(&p, "test"), cudaErrorNotSupported);
    cr_assert_eq(kl_attention_decode_check_params_fp8(&p, "test"), cudaSuccess);
    /* Half an FP8 call is an error for every variant: a 16-bit one must not take it as its own. */
    p.k_scale = NULL;
    cr_assert_eq(kl_attention_decode_check_params(&p, "test"), cudaErrorInvalidValue, "v_scale alone accepted");
    cr_assert_eq(kl_attention_decode_check_params_multi(&p, "test"), cudaErrorInvalidValue);
    cr_assert_eq(kl_attention_decode_check_params_fp8(&p, "test"), cudaErrorInvalidValue);
    p.k_scale = scale, p.v_scale = NULL;
    cr_assert_eq(kl_attention_decode_check_params(&p, "test"), cudaErrorInvalidValue, "k_scale alone accepted");
    cr_assert_eq(kl_attention_decode_check_params_fp8(&p, "test"), cudaErrorInvalidValue);
    p.v_scale = scale, p.dtype = KL_F32;
    cr_assert_eq(kl_attention_decode_check_params_fp8(&p, "test"), cudaErrorInvalidValue, "float32 q accepted");
    p.dtype = KL_BF16, p.k_scale = p.v_scale = NULL;
    cr_assert_eq(kl_attention_decode_check_params_fp8(&p, "test"), cudaErrorNotSupported,
                 "an FP8 variant must skip 16-bit caches");
    cr_assert_eq(kl_attention_decode_check_params(&p, "test"), cudaSuccess);
}

/* v11_by_shape's order of rungs for each kind of call, and every rung it names is registered (a
 * renamed rung would otherwise leave it declining what it should run). */
Test(attention_decode, by_shape_sends_each_kind_of_call_to_its_rung)
{
    /* Llama's 32 query and 8 kv heads: a request is 8 (request, kv head) pairs, and on 132 SMs
     * (an H100) 49 requests or fewer cannot fill three CTAs an SM, so their keys are split: into 4 by
     * v8's plan for 1 or 8 requests of 512 keys, 2 for 49 requests of 512, one cluster's worth or fewer,
     * and into 47 for one request of 32768. */
    struct kl_attention_decode_params p = {.page_size = 16, .num_qo_heads = 32, .num_kv_heads = 8};
    const int32_t qo[2] = {0, 4};
    const float scale[1] = {1};
    const int sms = 132;
    const struct {
        int64_t page, batch, kv;
        bool draft, fp8;
        const char *order[5];
    } cases[] = {
        {16, 64, 8192, false, false, {"v31_shrinking_items", "v8_tma_pages", "v4_tensor_cores"}},
        {32, 64, 8192, false, false, {"v31_shrinking_items", "v8_tma_pages", "v4_tensor_cores"}},
        {16, 50, 512, false, false, {"v31_shrinking_items", "v8_tma_pages", "v4_tensor_cores"}},
        {16, 49, 512, false, false, {"v13_cluster_merge", "v8_tma_pages", "v4_tensor_cores"}},
        {16, 8, 512, false, false, {"v13_cluster_merge", "v8_tma_pages", "v4_tensor_cores"}},
        {16, 1, 512, false, false, {"v13_cluster_merge", "v8_tma_pages", "v4_tensor_cores"}},
        {16, 1, 32768, false, false, {"v32_cluster_tail", "v13_cluster_merge", "v8_tma_pages", "v4_tensor_cores"}},
        {1, 1, 512, false, false, {"v32_cluster_tail", "v19_one_gatherer", "v12_cp_async_gather", "v4_tensor_cores"}},
        {8, 64, 512, false, false, {"v32_cluster_tail", "v19_one_gatherer", "v12_cp_async_gather", "v4_tensor_cores"}},
        {1, 1, 512, true, false, {"v28_draft_tile_gatherers", "v4_tensor_cores"}},
        {16, 1, 512, true, false, {"v28_draft_tile_gatherers", "v4_tensor_cores"}},
        {16, 64, 512, true, false, {"v28_draft_tile_gatherers", "v4_tensor_cores"}},
        {16, 1, 512, false, true, {"v27_fp8_tile_gatherers", "v10_fp8_page_heads", "v7_fp8_f16_mma"}},
        {1, 64, 512, false, true, {"v27_fp8_tile_gatherers", "v10_fp8_page_heads", "v7_fp8_f16_mma"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        p.page_size = cases[i].page, p.batch = cases[i].batch, p.max_kv_len = cases[i].kv;
        p.qo_indptr = cases[i].draft ? qo : NULL;
        p.k_scale = p.v_scale = cases[i].fp8 ? scale : NULL;
        const char *const *order = kl_attention_decode_by_shape(&p, sms);
        int k = 0;
        for (; cases[i].order[k]; k++)
            cr_assert(order[k] && strcmp(order[k], cases[i].order[k]) == 0,
                      "page %lld, batch %lld, %lld keys%s%s: rung %d is %s, not %s", (long long)cases[i].page,
                      (long long)cases[i].batch, (long long)cases[i].kv, cases[i].draft ? ", draft tokens" : "",
                      cases[i].fp8 ? ", e4m3" : "", k, order[k] ? order[k] : "(none)", cases[i].order[k]);
        cr_assert_null(order[k], "case %zu names more rungs than expected", i);
        for (const char *const *n = order; *n; n++)
            cr_assert(kl_variant_find("attention_decode", *n), "%s is not a registered variant", *n);
    }
}

/* The whole-wave split (v10, v12) on the shapes it was made for, worked by hand: 256 CTAs a split on
 * 396 slots (b32-kv4k: 3 splits of 1408 tokens, 768 CTAs in 2 waves of 1408 + 64, where 2 splits of
 * 2048 take 2 longer waves and 32 of 128 take 21 waves of 128 + 64), one long request (8 CTAs a
 * split: the most splits that fit one wave), and the bounds: 100 tokens in two chunks of 64 (one
 * wave either way, shorter CTAs), never more than KL_DECODE_MAX_SPLITS. */
Test(attention_decode, the_wave_split_fills_whole_waves)
{
    struct kl_attention_decode_params p = {.max_kv_len = 4096};
    struct kl_decode_split s = kl_attention_decode_split_waves(&p, 256, 396);
    cr_assert(s.splits == 3 && s.chunk == 1408, "b32-kv4k: %d splits of %lld", s.splits, (long long)s.chunk);
    p.max_kv_len = 32768;
    s = kl_attention_decode_split_waves(&p, 8, 396);
    cr_assert(s.splits == 47 && s.chunk == 704, "b1-kv32k: %d splits of %lld", s.splits, (long long)s.chunk);
    p.max_kv_len = 100;
    s = kl_attention_decode_split_waves(&p, 4, 396);
    cr_assert(s.splits == 2 && s.chunk == 64, "short: %d splits of %lld", s.splits, (long long)s.chunk);
    p.max_kv_len = 1 << 20;
    s = kl_attention_decode_split_waves(&p, 1, 1000);
    cr_assert(s.splits == KL_DECODE_MAX_SPLITS && s.chunk == 4096, "long: %d splits of %lld", s.splits,
              (long long)s.chunk);
}

Test(attention_decode, a_plan_knob_is_its_fallback_unless_set_to_a_whole_number_in_range)
{
    const char *name = "KL_DECODE_TEST_KNOB";
    unsetenv(name);
    cr_assert_eq(kl_attention_decode_knob(name, 0, 4, 2), 2, "unset: the fallback, though 0 is in range");
    const char *set[] = {"0", "4", "3", "", "5", "-1", "3x", "x", " "};
    const int want[] = {0, 4, 3, 2, 2, 2, 2, 2, 2};
    for (int i = 0; i < 9; i++) {
        setenv(name, set[i], 1);
        cr_assert_eq(kl_attention_decode_knob(name, 0, 4, 2), want[i], "set to \"%s\"", set[i]);
    }
    unsetenv(name);
}

Test(attention_decode, the_workspace_holds_a_partial_for_every_draft_row)
{
    /* With qo_indptr the partials are per (split, request x max_q_len slot, head) and the merge
     * counters per block of 8 of the group x max_q_len rows; without, what it always was. The
     * scheduler words follow the counters either way. */
    struct kl_attention_decode_params p = {.batch = 64, .num_qo_heads = 32, .num_kv_heads = 8, .head_dim = 128,
                                           .page_size = 16, .max_kv_len = 8192};
    const size_t one = kl_attention_decode_workspace_for(&p, 4);
    cr_assert_eq(one, ((64 * 8 + KL_DECODE_SCHEDULER_WORDS) * 4 + 255) / 256 * 256 + (size_t)4 * 64 * 32 * 130 * 4);
    static int32_t dummy[1];
    p.qo_indptr = dummy, p.max_q_len = 4;
    cr_assert_eq(kl_attention_decode_workspace_for(&p, 4),
                 ((64 * 8 * 2 + KL_DECODE_SCHEDULER_WORDS) * 4 + 255) / 256 * 256 + (size_t)4 * 64 * 4 * 32 * 130 * 4);
    cr_assert_eq(kl_attention_decode_q_rows(&p), 4);
}

/* A problem built by hand: batch 1, `qo` heads over `kv` kv heads, head_dim 2, page_size 2,
 * kv_len 3 (two pages, the second holding 1 token). */
static struct kl_attention_decode_problem *tiny(int64_t qo, int64_t kv)
{
    const int64_t lens[1] = {3};
    return kl_attention_decode_problem_random(1, qo, kv, 2, 2, lens, KL_F32, 1, 7);
}

Test(attention_decode, reference_reads_the_kv_head_of_each_gqa_group)
{
    /* 4 qo heads over 2 kv heads: heads 0, 1 read kv head 0 and heads 2, 3 kv head 1. Making the
     * two kv heads' values differ by a constant must move exactly heads 2 and 3 by it. */
    struct kl_attention_decode_problem *p = tiny(4, 2);
    struct kl_outputs a = {0}, b = {0};
    struct kl_err err;
    kl_attention_decode_run_reference(p, &a, &err);
    float *v = p->v_cache.data;
    for (int64_t i = 0; i < kl_numel(&p->v_cache); i++)
        if ((i / 2) % 2 == 1) v[i] += 10; /* element i belongs to kv head (i / head_dim) % kv_heads */
    kl_attention_decode_run_reference(p, &b, &err);
    for (int h = 0; h < 4; h++)
        for (int d = 0; d < 2; d++) {
            const double moved = b.o[0].v[h * 2 + d] - a.o[0].v[h * 2 + d], want = h < 2 ? 0 : 10;
            cr_assert(fabs(moved - want) < 1e-5, "head %d dim %d moved by %.9g, expected %g (v in float32)", h, d, moved, want);
        }
    kl_outputs_free(&a), kl_outputs_free(&b);
    kl_attention_decode_problem_free(p);
}

Test(attention_decode, reference_never_reads_past_the_last_page_len)
{
    /* The row after the last token (page 2, row 1) holds poison; changing it changes nothing. */
    struct kl_attention_decode_problem *p = tiny(2, 1);
    struct kl_outputs a = {0}, b = {0};
    struct kl_err err;
    kl_attention_decode_run_reference(p, &a, &err);
    const int32_t last_page = ((int32_t *)p->kv_indices.data)[1];
    float *k = p->k_cache.data, *v = p->v_cache.data;
    const int64_t at = (last_page * 2 + 1) * 2;
    k[at] = 1e6f, v[at] = -1e6f;
    kl_attention_decode_run_reference(p, &b, &err);
    for (int i = 0; i < 4; i++) cr_assert_eq(a.o[0].v[i], b.o[0].v[i], "out[%d] changed", i);
    kl_outputs_free(&a), kl_outputs_free(&b);
    kl_attention_decode_problem_free(p);
}

Test(attention_decode, malformed_page_tables_are_refused_naming_the_array)
{
    struct kl_err err;
    struct kl_attention_decode_problem *p = tiny(2, 1);
    int32_t *indptr = p->kv_indptr.data, *idx = p->kv_indices.data, *last = p->kv_last_page_len.data;
    cr_assert_eq(kl_attention_decode_check_table(p, "", &err), 0, "%s", err.msg);
    cr_assert_eq(p->max_kv_len, 3);
    idx[1] = (int32_t)p->num_pages;
    cr_assert_neq(kl_attention_decode_check_table(p, "", &err), 0);
    cr_assert(strstr(err.msg, "kv_indices.npy"), "%s", err.msg);
    idx[1] = -1;
    cr_assert_neq(kl_attention_decode_check_table(p, "", &err), 0);
    idx[1] = 0;
    last[0] = 0;
    cr_assert_neq(kl_attention_decode_check_table(p, "", &err), 0);
    cr_assert(strstr(err.msg, "kv_last_page_len.npy"), "%s", err.msg);
    last[0] = 3; /* page_size 2 */
    cr_assert_neq(kl_attention_decode_check_table(p, "", &err), 0);
    last[0] = 1;
    indptr[1] = 3; /* more pages than kv_indices holds */
    cr_assert_neq(kl_attention_decode_check_table(p, "", &err), 0);
    cr_assert(strstr(err.msg, "kv_indptr.npy"), "%s", err.msg);
    indptr[0] = 1;
    cr_assert_neq(kl_attention_decode_check_table(p, "", &err), 0);
    kl_attention_decode_problem_free(p);
}

Test(attention_decode, catalogue_covers_the_edges_and_keeps_poison_outside_requests)
{
    char label[200];
    bool page1 = false, odd_page = false, empty = false, partial = false, gqa8 = false, mha = false;
    bool draft8 = false, all_new = false, draft_page1 = false, mixed = false; /* several query tokens */
    bool fp8 = false;
    for (int i = 0;; i++) {
        struct kl_attention_decode_problem *p = module()->tensor->make(i, 3, label, sizeof label);
        if (!p) break;
        struct kl_err err;
        cr_assert_eq(kl_attention_decode_check_table(p, "", &err), 0, "%s: %s", label, err.msg);
        const int32_t *indptr = p->kv_indptr.data, *last = p->kv_last_page_len.data;
        for (int64_t b = 0; b < p->batch; b++) {
            empty |= indptr[b + 1] == indptr[b];
            partial |= indptr[b + 1] > indptr[b] && last[b] < p->page_size;
        }
        if (p->qo_indptr.data) {
            const int32_t *qo = p->qo_indptr.data;
            bool one = false, more = false;
            for (int64_t b = 0; b < p->batch; b++) {
                const int64_t n = qo[b + 1] - qo[b];
                draft8 |= n == 8, all_new |= n > 1 && n == kl_attention_decode_problem_kv_len(p, b);
                one |= n == 1, more |= n > 1;
            }
            draft_page1 |= p->page_size == 1 && more, mixed |= one && more;
        }
        page1 |= p->page_size == 1, odd_page |= p->page_size % 2 == 1 && p->page_size > 1;
        gqa8 |= p->num_qo_heads / p->num_kv_heads == 8, mha |= p->num_qo_heads == p->num_kv_heads;
        /* The pool's spare pages are never handed out, and hold poison. */
        const int64_t n_idx = kl_numel(&p->kv_indices), page_elems = kl_numel(&p->k_cache) / p->num_pages;
        int64_t spare = -1;
        for (int64_t page = 0; page < p->num_pages && spare < 0; page++) {
            bool used = false;
            for (int64_t j = 0; j < n_idx; j++) used |= ((const int32_t *)p->kv_indices.data)[j] == page;
            if (!used) spare = page;
        }
        cr_assert_geq(spare, 0, "%s: no spare page", label);
        const double poison = kl_load_elem(p->k_cache.dtype, p->k_cache.data, (size_t)(spare * page_elems));
        if (p->k_scale.data) /* an FP8 cache: NaN codes */
            cr_assert(isnan(poison), "%s: a spare page is not poison (NaN codes)", label);
        else
            cr_assert_eq(poison, KL_DECODE_POISON, "%s: a spare page is not poison", label);
        fp8 |= p->k_scale.data != NULL;
        module()->tensor->free(p);
    }
    cr_assert(page1 && odd_page && empty && partial && gqa8 && mha);
    cr_assert(draft8 && all_new && draft_page1 && mixed, "draft tokens: 8 %d, every key new %d, page 1 %d, mixed %d",
              draft8, all_new, draft_page1, mixed);
    cr_assert(fp8, "no problem on an FP8 cache");
}

Test(attention_decode, split_plans_cover_every_token_and_fit_the_workspace)
{
    const int64_t batches[4] = {1, 8, 64, 128}, lens[4] = {1, 512, 8192, 1 << 20};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            struct kl_attention_decode_params p = {.batch = batches[i], .num_qo_heads = 32, .num_kv_heads = 8,
                                                   .head_dim = 128, .page_size = 16, .max_kv_len = lens[j]};
            const size_t ws = kl_attention_decode_workspace_bytes(&p, 132);
            const struct kl_decode_split plans[3] = {kl_attention_decode_split(&p, 132, 16, 16, 256, 1 << 30),
                                                     kl_attention_decode_split(&p, 132, 4, 64, 128, 2048),
                                                     kl_attention_decode_split(&p, 132, 64, 64, 64, 64)};
            for (int k = 0; k < 3; k++) {
                cr_assert_leq(plans[k].splits, KL_DECODE_MAX_SPLITS);
                cr_assert_geq(plans[k].chunk * plans[k].splits, lens[j]);
                cr_assert_lt(plans[k].chunk * (plans[k].splits - 1), lens[j], "an empty split");
                cr_assert_leq(kl_attention_decode_workspace_for(&p, plans[k].splits), ws);
            }
        }
}

/* ---- the tolerance's claims, each a mutant caught on a golden (lab/core/compare.c) ---- */

/* A decode batch as the mutants read it: a prefill batch of one query per request, not causal;
 * with qo_indptr, its draft tokens as prefill queries, causal (the same alignment: the last
 * query sees every key). */
/* A cache as float64 values: an FP8 cache's codes times their kv head's scale. */
static double *cache_values(const struct kl_attention_decode_problem *p, const struct kl_tensor *cache,
                            const struct kl_tensor *scale)
{
    double *x = kl_tensor_to_f64(cache);
    const int64_t n = kl_numel(cache);
    for (int64_t i = 0; scale->data && i < n; i++) x[i] *= ((const float *)scale->data)[i / p->head_dim % p->num_kv_heads];
    return x;
}

static void view(const void *problem, struct kl_attention_view *v)
{
    const struct kl_attention_decode_problem *p = problem;
    const int32_t *own = p->qo_indptr.data;
    int32_t *qo = malloc(sizeof(int32_t) * (size_t)(p->batch + 1));
    for (int64_t b = 0; b <= p->batch; b++) qo[b] = own ? own[b] : (int32_t)b;
    *v = (struct kl_attention_view){
        .shape = {.batch = p->batch, .total_q = p->rows, .num_qo_heads = p->num_qo_heads,
                  .num_kv_heads = p->num_kv_heads, .head_dim = p->head_dim, .page_size = p->page_size,
                  .num_pages = p->num_pages, .qo_indptr = qo, .kv_indptr = p->kv_indptr.data,
                  .kv_indices = p->kv_indices.data, .kv_last_page_len = p->kv_last_page_len.data,
                  .sm_scale = p->sm_scale, .causal = own != NULL},
        .dtype = p->dtype, .q = kl_tensor_to_f64(&p->q), .k_cache = cache_values(p, &p->k_cache, &p->k_scale),
        .v_cache = cache_values(p, &p->v_cache, &p->v_scale), .qo_indptr = qo};
}

#define LONG_16BIT "long_8k_repeated_pages", "gqa4_split_kv1500_bf16", "gqa8_split_page5_fp16"
#define LONG "gqa4_split_kv1500_bf16", "gqa8_split_page5_fp16", "mha_split_page1_fp32", "long_8k_repeated_pages"
/* The goldens with several query tokens per request (causal within the request's new tokens). */
#define DRAFTS                                                                                                    \
    "multi_q1to8_gqa4_page16_bf16", "multi_page1_gqa8_fp16", "multi_mha_page16_fp32", "multi_gqa8_q8_page16_bf16", \
        "multi_gqa4_split_bf16"
#define SEVERAL_KV_HEADS                                                                                          \
    "bf16_gqa4_page16_partial", "gqa4_split_kv1500_bf16", "gqa8_split_page5_fp16", "page1_gqa8", "ragged_odd_page3", \
        "kv_len_0_in_batch", "fp32_gqa4_large_logits"

static const struct kl_attention_claim claims[] = {
    {KL_ATTN_MUTANT(EXACT, "float64, no bug"), KL_CLAIM_PASSES, {0}},
    {KL_ATTN_MUTANT(FLOAT32_KERNEL, "float32 kernel, no bug"), KL_CLAIM_PASSES, {0}},
    {KL_ATTN_MUTANT(O_IN_DTYPE, "P.V rounded every 16 keys"), KL_CLAIM_OUT, {LONG_16BIT}},
    {KL_ATTN_MUTANT(LAST_KEY_DROPPED, "last key dropped"),
     KL_CLAIM_OUT,
     {"gqa4_split_kv1500_bf16", "gqa8_split_page5_fp16", "bf16_gqa4_page16_partial", "fp16_gqa8_page5",
      "fp16_mha_page16", "fp32_mha_page1", "head_dim_256", "kv_len_0_in_batch", "page1_gqa8", "ragged_odd_page3"}},
    {KL_ATTN_MUTANT(LAST_KEY_DROPPED, "last key dropped"),
     KL_CLAIM_LSE,
     {"gqa4_split_kv1500_bf16", "gqa8_split_page5_fp16", "bf16_gqa4_page16_partial", "fp16_gqa8_page5",
      "fp16_mha_page16", "fp32_mha_page1", "head_dim_256", "kv_len_0_in_batch", "page1_gqa8", "ragged_odd_page3",
      "mha_split_page1_fp32"}},
    {KL_ATTN_MUTANT(LSE_LOG2, "lse in log2"), KL_CLAIM_LSE, {"*"}},
    {KL_ATTN_MUTANT(DIAGONAL_PLUS_ONE, "a draft token sees its successor"), KL_CLAIM_OUT, {DRAFTS}},
    {KL_ATTN_MUTANT(DIAGONAL_PLUS_ONE, "a draft token sees its successor"), KL_CLAIM_LSE, {DRAFTS}},
    {KL_ATTN_MUTANT(DIAGONAL_MINUS_ONE, "a draft token misses its own key"), KL_CLAIM_OUT, {DRAFTS}},
    {KL_ATTN_MUTANT(DIAGONAL_MINUS_ONE, "a draft token misses its own key"), KL_CLAIM_LSE, {DRAFTS}},
    {KL_ATTN_MUTANT(NO_MAX, "no max subtracted"), KL_CLAIM_OUT, {"large_logits"}},
    {KL_ATTN_MUTANT(NO_SM_SCALE, "sm_scale missing"), KL_CLAIM_OUT, {"*", "!kv_len_1"}}, /* 1 key: softmax is 1 */
    {KL_ATTN_MUTANT(NO_SM_SCALE, "sm_scale missing"), KL_CLAIM_LSE, {"*"}},
    {KL_ATTN_TILED(NO_RESCALE, "no rescale, 64-key tiles", 0, 64), KL_CLAIM_OUT, {LONG}},
    {KL_ATTN_TILED(NO_RESCALE, "no rescale, 16-key tiles", 0, 16), KL_CLAIM_OUT, {LONG}},
    {KL_ATTN_MUTANT(KV_HEAD_0, "kv head 0 for every head"),
     KL_CLAIM_OUT,
     {SEVERAL_KV_HEADS, "mha_split_page1_fp32", "fp32_mha_page1", "fp16_mha_page16"}},
    {KL_ATTN_MUTANT(KV_HEAD_MOD, "kv head h % kv_heads"), KL_CLAIM_OUT, {SEVERAL_KV_HEADS}},
    {KL_ATTN_MUTANT(SCORES_IN_DTYPE, "logits rounded to the dtype"),
     KL_CLAIM_LSE,
     {"gqa4_split_kv1500_bf16", "gqa8_split_page5_fp16", "bf16_gqa4_page16_partial", "fp16_gqa8_page5",
      "fp16_mha_page16", "head_dim_256", "kv_len_0_in_batch", "kv_len_1", "large_logits", "page1_gqa8",
      "ragged_odd_page3"}},
};

Test(attention_decode, every_tolerance_claim_is_a_mutant_caught_on_a_golden)
{
    /* Also: the reference and a correct float32 kernel pass every golden under the same policy. */
    int broken = kl_attention_check_claims("attention_decode", view, claims, sizeof claims / sizeof claims[0], stderr);
    cr_assert(broken >= 0, "no golden cases");
    cr_assert_eq(broken, 0, "%d claims of compare.c's attention rationale do not hold (CLAIM BROKEN lines above)",
                 broken);
}

/* A long request's outputs are averages over many keys, far smaller than a short request's, so the
 * batch's rel_l2 is the short requests'. An error of a quarter of the long request's own size (a
 * split its merge left out) passes the batch-wide check beside eight short requests; the policy
 * the module sets (rel_l2 for each query row too) fails it. */
Test(attention_decode, a_long_requests_error_does_not_hide_under_short_requests)
{
    const int64_t lens[9] = {4000, 3, 5, 2, 4, 3, 6, 2, 3};
    struct kl_attention_decode_problem *p = kl_attention_decode_problem_random(9, 4, 1, 64, 16, lens, KL_BF16, 1, 23);
    struct kl_outputs want = {0};
    struct kl_err err;
    cr_assert_eq(kl_attention_decode_run_reference(p, &want, &err), 0, "%s", err.msg);
    const int64_t row = p->num_qo_heads * p->head_dim; /* request 0's outputs: its one query row */
    cr_assert_eq(want.o[0].policy.rel_l2_group, row, "the module's out policy does not check each query row");
    bool with, without;
    kl_test_scaled_part(&want, row, 1.25, &with, &without);
    cr_expect(!with, "a long request 25%% off passed");
    cr_expect(without, "the batch-wide check alone caught it: the case no longer shows the hiding");
    kl_outputs_free(&want);
    kl_attention_decode_problem_free(p);
}

/* ---- FP8 caches: the scales, each dropped or misplaced in the float64 reference, caught on every
 * FP8 golden (lab/core/compare.c: the 16-bit bound on decoded values stays tight) ---- */

enum fp8_bug { FP8_NONE, FP8_NO_K_SCALE, FP8_HEAD0_K_SCALE, FP8_NO_V_SCALE, FP8_HEAD0_V_SCALE, FP8_BUGS };

static const char *const kfp8_goldens[] = {"fp8_bf16_gqa4_page16_partial", "fp8_bf16_mha_page1",
                                           "fp8_bf16_gqa8_page16_split", "fp8_fp16_gqa4_page5",
                                           "fp8_bf16_saturated_negzero_subnormal", "fp8_bf16_head_dim64_gqa4"};

Test(attention_decode, fp8_goldens_catch_a_dropped_or_misplaced_scale)
{
    static const char *what[FP8_BUGS] = {"no bug", "k_scale dropped", "kv head 0's k_scale for every head",
                                         "v_scale dropped", "kv head 0's v_scale for every head"};
    for (size_t i = 0; i < sizeof kfp8_goldens / sizeof kfp8_goldens[0]; i++) {
        char dir[1200];
        snprintf(dir, sizeof dir, "%s/golden/attention_decode/%s", KL_SOURCE_DIR, kfp8_goldens[i]);
        struct kl_case c;
        struct kl_err err;
        struct kl_outputs want = {0};
        cr_assert_eq(kl_case_open(&c, dir, &err), 0, "%s", err.msg);
        struct kl_attention_decode_problem *p = module()->tensor->load(&c, &want, &err);
        kl_case_close(&c);
        cr_assert(p && p->k_scale.data, "%s: %s", kfp8_goldens[i], p ? "not an FP8 case" : err.msg);
        const int64_t kv = p->num_kv_heads;
        float *ks = malloc(sizeof(float) * (size_t)kv), *vs = malloc(sizeof(float) * (size_t)kv);
        double *q = kl_tensor_to_f64(&p->q);
        for (int bug = FP8_NONE; bug < FP8_BUGS; bug++) {
            for (int64_t g = 0; g < kv; g++) {
                const float *k0 = p->k_scale.data, *v0 = p->v_scale.data;
                ks[g] = bug == FP8_NO_K_SCALE ? 1.f : k0[bug == FP8_HEAD0_K_SCALE ? 0 : g];
                vs[g] = bug == FP8_NO_V_SCALE ? 1.f : v0[bug == FP8_HEAD0_V_SCALE ? 0 : g];
            }
            struct kl_outputs got = {0};
            kl_attention_decode_run_reference(p, &got, &err); /* sized; overwritten below */
            kl_attention_decode_reference_fp8(q, p->k_cache.data, p->v_cache.data, ks, vs, p->num_pages,
                                              p->kv_indptr.data, p->kv_indices.data, p->kv_last_page_len.data,
                                              p->batch, p->num_qo_heads, p->num_kv_heads, p->head_dim, p->page_size,
                                              p->sm_scale, got.o[0].v, got.o[1].v);
            bool pass = true;
            for (int o = 0; o < 2; o++) {
                struct kl_cmp cmp;
                kl_compare(got.o[o].v, want.o[o].v, want.o[o].n, want.o[o].policy, &cmp);
                pass &= cmp.pass;
                cr_log_info("%s, %s: %s rel_l2 %.3g", kfp8_goldens[i], what[bug], want.o[o].name, cmp.rel_l2);
            }
            if (bug == FP8_NONE) cr_expect(pass, "%s: the reference fails its own golden", kfp8_goldens[i]);
            else cr_expect(!pass, "%s: %s passes", kfp8_goldens[i], what[bug]);
            kl_outputs_free(&got);
        }
        free(ks), free(vs), free(q);
        kl_outputs_free(&want);
        kl_attention_decode_problem_free(p);
    }
}

Test(attention_decode, a_correct_float32_kernel_passes_the_whole_catalogue)
{
    const struct kl_attention_mutant m = KL_ATTN_MUTANT(FLOAT32_KERNEL, "float32 kernel, no bug");
    cr_assert_eq(kl_attention_mutant_catalogue(module(), view, &m, 7, false, stderr), 0,
                 "the bound fails a correct computation (lines above)");
}

Test(attention_decode, catalogue_inputs_replay_from_their_seed)
{
    /* `kernlab check --seed N` and KL_SEED=N print and take the same seed: problem i drawn from it
     * twice is the same problem, bit for bit; another seed draws other values. */
    cr_assert_eq(kl_attention_catalogue_replays(module(), view, 12345, stderr), 0, "(lines above)");
}

/* ---- GPU ---- */

KL_GPU_TESTS(attention_decode_gpu, attention_decode, five, 5, KL_FLAGGED_BY_EACH, NULL)

/* The bench's timeline of a traced launch: quantiles per event over the CTAs that stamped it, in
 * microseconds from the earliest release; a CTA with no keys counts for its start and release alone;
 * an empty trace adds nothing. */
Test(attention_decode, timeline_quantiles_count_only_the_ctas_that_stamped)
{
    struct kl_decode_trace *t = calloc(1, sizeof *t);
    cr_assert(t);
    cJSON *row = cJSON_CreateObject();
    kl_attention_decode_timeline_json(t, row);
    cr_assert_null(cJSON_GetObjectItem(row, "timeline"), "an empty trace gives no timeline");
    const unsigned long long a[3][KL_DECODE_EVENTS] = {
        {1000, 2000, 3000, 10000, 12000},
        {1500, 2000, 3500, 9000, 9500},
        {500, 2500, 0, 0, 0}, /* no keys */
    };
    memcpy(t->at[0], a[0], sizeof a[0]), memcpy(t->at[7], a[1], sizeof a[1]), memcpy(t->at[4095], a[2], sizeof a[2]);
    kl_attention_decode_timeline_json(t, row);
    cr_assert_eq(kl_json_num(row, "timeline.ctas"), 3);
    cr_assert_float_eq(kl_json_num(row, "timeline.events.start.min"), -1.5, 1e-12, "from the earliest release");
    cr_assert_float_eq(kl_json_num(row, "timeline.events.released.max"), 0.5, 1e-12);
    cr_assert_float_eq(kl_json_num(row, "timeline.events.first_tile.min"), 1.0, 1e-12, "the keyless CTA is not a 0");
    cr_assert_float_eq(kl_json_num(row, "timeline.events.first_tile.max"), 1.5, 1e-12);
    cr_assert_float_eq(kl_json_num(row, "timeline.events.loop_done.p50"), 7.0, 1e-12, "the lower of two middles");
    cr_assert_float_eq(kl_json_num(row, "timeline.events.end.max"), 10.0, 1e-12);
    cJSON_Delete(row);
    free(t);
}

ParameterizedTestParameters(attention_decode_gpu, repeated_launches_give_identical_results) { return kl_test_variants(false); }

ParameterizedTest(int *i, attention_decode_gpu, repeated_launches_give_identical_results)
{
    /* Split variants keep merge counters in the workspace and must leave them as they found them:
     * a second launch (a CUDA-graph replay, the next decode step) must not see stale counts. */
    const struct kl_variant *v = kl_variant_at("attention_decode", *i, false);
    cr_log_info("variant %s", v->name);
    if (kl_test_skip_reason(v)) cr_skip_test("%s: %s", v->name, kl_test_skip_reason(v));
    /* Once with one query per request, once with draft tokens (their own counters and partials), once
     * on an FP8 cache; a variant runs those it takes, at least one. */
    const int64_t lens[3] = {3000, 1, 700}, q_lens[3] = {8, 1, 5};
    int ran = 0;
    for (int pass = 0; pass < 3; pass++) {
        const int multi = pass == 1;
        struct kl_attention_decode_problem *p =
            kl_attention_decode_problem_random_multi(3, 8, 2, 128, 16, lens, multi ? q_lens : NULL, KL_BF16, 1, 11);
        if (pass == 2) kl_attention_decode_problem_to_fp8(p);
        struct kl_attention_decode_params k;
        struct kl_err err;
        struct kl_outputs first = {0}, again = {0};
        cr_assert_eq(kl_tensor_upload(&kl_attention_decode_ops, p, &k, &err), 0, "%s", err.msg);
        kl_attention_decode_launch_fn f = (kl_attention_decode_launch_fn)v->launch;
        const cudaError_t rc = f(&k, 0);
        if (rc == cudaErrorNotSupported) { /* the variant does not take draft tokens, or this cache */
            kl_tensor_release(&kl_attention_decode_ops, &k);
            kl_attention_decode_problem_free(p);
            continue;
        }
        ran++;
        cr_assert_eq(rc, cudaSuccess, "%s: %s", v->name, cudaGetErrorString(rc));
        cr_assert_eq(kl_dev_sync(), 0);
        cr_assert_eq(kl_tensor_download(&kl_attention_decode_ops, p, &k, &first, &err), 0, "%s", err.msg);
        for (int r = 0; r < 5; r++) cr_assert_eq(f(&k, 0), cudaSuccess);
        cr_assert_eq(kl_dev_sync(), 0);
        cr_assert_eq(kl_tensor_download(&kl_attention_decode_ops, p, &k, &again, &err), 0, "%s", err.msg);
        for (int o = 0; o < 2; o++)
            for (int64_t j = 0; j < first.o[o].n; j++)
                cr_assert(first.o[o].v[j] == again.o[o].v[j] || (isnan(first.o[o].v[j]) && isnan(again.o[o].v[j])),
                          "%s: %s[%lld] %g then %g", v->name, first.o[o].name, (long long)j, first.o[o].v[j],
                          again.o[o].v[j]);
        kl_outputs_free(&first), kl_outputs_free(&again);
        kl_tensor_release(&kl_attention_decode_ops, &k);
        kl_attention_decode_problem_free(p);
    }
    cr_assert_gt(ran, 0, "%s declined every problem", v->name);
}

Test(attention_decode_gpu, the_draft_token_variants_take_draft_tokens)
{
    /* v0_naive, v4_tensor_cores and v28_draft_tile_gatherers declare several query tokens per request,
     * and v11_by_shape hands them to v28 (v4 below sm_90): on such a problem they must run (and match the
     * reference), not decline it as the others do. */
    if (!kl_have_gpu()) cr_skip_test("no CUDA device");
    const char *takes[4] = {"v0_naive", "v4_tensor_cores", "v28_draft_tile_gatherers", "v11_by_shape"};
    const int64_t lens[4] = {37, 8, 300, 5}, q_lens[4] = {3, 8, 1, 5};
    struct kl_attention_decode_problem *p =
        kl_attention_decode_problem_random_multi(4, 32, 8, 128, 16, lens, q_lens, KL_BF16, 1, 13);
    struct kl_outputs want = {0};
    struct kl_err err;
    kl_attention_decode_run_reference(p, &want, &err);
    for (int i = 0; i < 4; i++) {
        const struct kl_variant *v = kl_variant_find("attention_decode", takes[i]);
        cr_assert(v, "%s is not registered", takes[i]);
        if (kl_test_skip_reason(v)) continue;
        struct kl_outputs got = {0};
        const int rc = kl_tensor_run_variant(&kl_attention_decode_ops, v, p, &got, &err);
        cr_assert_eq(rc, 0, "%s: %s%s", v->name, rc > 0 ? "declined: " : "", err.msg);
        for (int o = 0; o < 2; o++) {
            struct kl_cmp c;
            kl_compare(got.o[o].v, want.o[o].v, want.o[o].n, want.o[o].policy, &c);
            cr_expect(c.pass, "%s: %s rel_l2 %g", v->name, want.o[o].name, c.rel_l2);
        }
        kl_outputs_free(&got);
    }
    kl_outputs_free(&want);
    kl_attention_decode_problem_free(p);
}

Test(attention_decode_gpu, launchers_reject_bad_shapes_without_launching)
{
    if (!kl_have_gpu()) cr_skip_test("no CUDA device");
    for (int i = 0; i < kl_variant_count("attention_decode", false); i++) {
        const struct kl_variant *v = kl_variant_at("attention_decode", i, false);
        kl_attention_decode_launch_fn f = (kl_attention_decode_launch_fn)v->launch;
        struct kl_attention_decode_params bad = {.batch = 2, .num_qo_heads = 6, .num_kv_heads = 4, .head_dim = 128,
                                                 .page_size = 16, .num_pages = 4, .dtype = KL_BF16, .sm_scale = 0.1f};
        cr_expect_eq(f(&bad, 0), cudaErrorInvalidValue, "%s accepted 6 qo heads over 4 kv heads", v->name);
        bad.num_qo_heads = 8, bad.head_dim = 12;
        cr_expect_eq(f(&bad, 0), cudaErrorInvalidValue, "%s accepted head_dim 12", v->name);
        bad.head_dim = 128, bad.page_size = 0;
        cr_expect_eq(f(&bad, 0), cudaErrorInvalidValue, "%s accepted page_size 0", v->name);
        bad.page_size = 16; /* pointers unset with requests to attend */
        cr_expect_eq(f(&bad, 0), cudaErrorInvalidValue, "%s accepted NULL pointers", v->name);
    }
}
