/* store tests. Suite `store` runs anywhere (the reference against the goldens and hand-worked
 * stores); suite `store_gpu` runs every variant on the device and skips without one.
 * Parameterized over variant INDICES (pointers as parameters crash Criterion's workers). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lab/core/device.h"
#include "lab/core/testing.h"
#include "lab/store/store_module.h"
#include "reference/store.h"

static const struct kl_module *module(void) { return kl_module_find("store"); }

Test(store, reference_matches_every_golden_case)
{
    int failures = kl_test_goldens("store", NULL, stderr);
    cr_assert(failures >= 0, "no golden cases found under golden/store");
    cr_assert_eq(failures, 0, "%d golden cases failed (lines above)", failures);
}

/* ---- exact compares compare bits (lab/core/compare.c), on CPU stand-ins of a copy ---- */

enum copy { BITS, NEGATIVE_ZERO_AS_POSITIVE, NAN_CANONICALISED };

/* The cache as it was, then each token's rows at its slot: the bits moved as they are (BITS), or
 * through arithmetic that loses them: a + 0 (-0 becomes +0), a NaN rebuilt as the default one. */
int kl_store_test_fused_f32(const void *prob, struct kl_outputs *o, struct kl_err *err); /* test_store_fp8.c */

/* A fused case is no copy: these stand-ins hand it to a correct float32 model of the fused kernel. */
static int copy_rows(const struct kl_store_problem *p, struct kl_outputs *o, enum copy how)
{
    if (p->fused) return kl_store_test_fused_f32(p, o, NULL);
    const int64_t row = p->num_kv_heads * p->head_dim, n = p->num_slots * row;
    const int64_t *slots = p->slots.data;
    kl_outputs_set(o, 0, "k_cache_out", p->dtype, true, n);
    kl_outputs_set(o, 1, "v_cache_out", p->dtype, true, n);
    for (int w = 0; w < 2; w++) {
        const struct kl_tensor *src = w ? &p->v : &p->k, *cache = w ? &p->v_cache : &p->k_cache;
        for (int64_t e = 0; e < n; e++) o->o[w].v[e] = kl_load_elem(p->dtype, cache->data, (size_t)e);
        for (int64_t t = 0; t < p->num_tokens; t++)
            for (int64_t j = 0; slots[t] >= 0 && j < row; j++) {
                double x = kl_load_elem(p->dtype, src->data, (size_t)(t * row + j));
                if (how == NEGATIVE_ZERO_AS_POSITIVE) x = x + 0.0;
                if (how == NAN_CANONICALISED && isnan(x)) x = NAN;
                o->o[w].v[slots[t] * row + j] = x;
            }
    }
    return 0;
}

static int bits(const void *p, struct kl_outputs *o, struct kl_err *err) { return (void)err, copy_rows(p, o, BITS); }
static int negative_zero_as_positive(const void *p, struct kl_outputs *o, struct kl_err *err)
{
    return (void)err, copy_rows(p, o, NEGATIVE_ZERO_AS_POSITIVE);
}
static int nan_canonicalised(const void *p, struct kl_outputs *o, struct kl_err *err)
{
    return (void)err, copy_rows(p, o, NAN_CANONICALISED);
}

Test(store, a_copy_of_the_bits_passes_every_golden_and_fresh_inputs)
{
    cr_assert_eq(kl_test_stand_in_passes("store", bits, "bit copy", 1, stderr), 0, "lines above");
}

/* Both mutants are equal to the copy in value (-0 == +0; NaN against NaN), so only a comparison
 * of bits sees them: golden one_token_bit_patterns holds both zeros and NaNs with payloads. */
Test(store, a_copy_that_loses_the_sign_of_zero_or_a_nan_payload_fails)
{
    cr_assert_eq(kl_test_goldens_with("store", negative_zero_as_positive, "negative_zero_as_positive", false, stderr),
                 1, "only one_token_bit_patterns holds -0 (lines above)");
    cr_assert_eq(kl_test_goldens_with("store", nan_canonicalised, "nan_canonicalised", false, stderr), 1,
                 "only one_token_bit_patterns holds NaNs (lines above)");
}

Test(store, reference_writes_rows_to_their_slots_and_skips_negative_ones)
{
    /* 3 tokens, row 2, 4 slots: token 0 -> slot 3, token 1 skipped, token 2 -> slot 0. */
    const double k[6] = {1, 2, 3, 4, 5, 6}, v[6] = {-1, -2, -3, -4, -5, -6};
    const int64_t slots[3] = {3, -1, 0};
    double kc[8] = {9, 9, 9, 9, 9, 9, 9, 9}, vc[8] = {8, 8, 8, 8, 8, 8, 8, 8};
    const double kw[8] = {5, 6, 9, 9, 9, 9, 1, 2}, vw[8] = {-5, -6, 8, 8, 8, 8, -1, -2};
    cr_assert_eq(kl_store_reference(k, v, slots, 3, 2, 4, kc, vc), 0);
    for (int i = 0; i < 8; i++) {
        cr_assert_eq(kc[i], kw[i], "k_cache[%d] = %g, expected %g", i, kc[i], kw[i]);
        cr_assert_eq(vc[i], vw[i], "v_cache[%d] = %g, expected %g", i, vc[i], vw[i]);
    }
}

Test(store, reference_counts_slots_past_the_cache_and_leaves_it_alone)
{
    const double k[2] = {1, 2}, v[2] = {3, 4};
    const int64_t slots[2] = {2, 7};
    double kc[2] = {0, 0}, vc[2] = {0, 0};
    cr_assert_eq(kl_store_reference(k, v, slots, 2, 1, 2, kc, vc), 2);
    cr_assert(kc[0] == 0 && kc[1] == 0 && vc[0] == 0 && vc[1] == 0);
}

Test(store, catalogue_slots_are_distinct_and_inside_the_cache)
{
    char label[200];
    int last = 0, skipped = 0;
    for (int i = 0;; i++) {
        struct kl_store_problem *p = module()->tensor->make(i, 11, label, sizeof label);
        if (!p) break;
        unsigned char *used = calloc((size_t)p->num_slots + 1, 1);
        const int64_t *s = p->slots.data;
        for (int64_t t = 0; t < p->num_tokens; t++) {
            if (s[t] < 0) {
                skipped++;
                continue;
            }
            cr_assert_lt(s[t], p->num_slots, "%s: slot %lld past the cache", label, (long long)s[t]);
            cr_assert_eq(used[s[t]]++, 0, "%s: slot %lld repeats", label, (long long)s[t]);
            last += s[t] == p->num_slots - 1;
        }
        free(used);
        module()->tensor->free(p);
    }
    cr_assert_gt(last, 0, "no token goes to the last slot of a cache");
    cr_assert_gt(skipped, 0, "no token is skipped with slot -1");
}

/* The fused launchers' 16-byte path (v4, v5, v6 share kl_store_fused_chunks): taken only where every
 * chunk is 8 whole elements on one side of the rotary halves and every pointer is aligned. */
Test(store, fused_16_byte_path_only_for_whole_aligned_chunks)
{
    _Alignas(16) static unsigned char buf[64];
    struct kl_store_params ok = {.head_dim = 128, .rotary_dim = 64, .is_neox = true, .qkv = buf, .q_out = buf,
                                 .cos_sin_cache = (const float *)buf, .k_cache = buf + 8, .v_cache = buf + 8};
    cr_assert(kl_store_fused_chunks(&ok));
    struct kl_store_params p = ok;
    p.head_dim = 132;
    cr_assert_not(kl_store_fused_chunks(&p), "head_dim 132: chunks of 4 at a head's end");
    p = ok, p.rotary_dim = 56;
    cr_assert_not(kl_store_fused_chunks(&p), "neox rotary 56: a chunk across the two halves");
    p.is_neox = false;
    cr_assert(kl_store_fused_chunks(&p), "interleaved rotary 56: pairs inside each chunk");
    p = ok, p.q_out = buf + 8;
    cr_assert_not(kl_store_fused_chunks(&p), "q_out 8-byte aligned");
    p = ok, p.cos_sin_cache = (const float *)(buf + 4);
    cr_assert_not(kl_store_fused_chunks(&p), "cos/sin table 4-byte aligned");
    p = ok, p.v_cache = buf + 4;
    cr_assert_not(kl_store_fused_chunks(&p), "v cache 4-byte aligned");
}

/* ---- GPU ---- */

KL_GPU_TESTS(store_gpu, store, three, 3, KL_FLAGGED_BY_EITHER, NULL)

ParameterizedTestParameters(store_gpu, slots_past_the_cache_are_reported_and_never_written)
{
    return kl_test_variants(false);
}

/* The fused family: the same two bad slots in a fused problem; the stored tokens' codes under the e4m3
 * policy, the rest of both caches unchanged (the reference skips bad slots too), q_out for every token. */
static void fused_slots_past_the_cache(const struct kl_variant *v)
{
    const struct kl_store_fused_shape sh = {6, 4, 2, 64, 64, 32, 16, true, KL_BF16, KL_SLOTS_RANDOM, 0, 0.01};
    struct kl_store_problem *p = kl_store_fused_random(&sh, 5);
    int64_t *slots = p->slots.data;
    slots[2] = 16, slots[4] = (int64_t)1 << 40;
    struct kl_store_params k;
    struct kl_err err;
    struct kl_outputs got = {0}, want = {0};
    struct kl_verdict vd;
    cr_assert_eq(kl_tensor_upload(&kl_store_ops, p, &k, &err), 0, "%s", err.msg);
    cr_expect_eq(((kl_store_launch_fn)v->launch)(&k, 0), cudaErrorInvalidValue, "%s did not report slot 16 of 16",
                 v->name);
    cr_assert_eq(kl_dev_sync(), 0, "%s: the device is in error after an out-of-range slot", v->name);
    cr_assert_neq(kl_store_ops.reference(p, &want, &err), 0, "the reference did not count the bad slots");
    cr_assert_eq(kl_tensor_download(&kl_store_ops, p, &k, &got, &err), 0, "%s", err.msg);
    kl_compare_outputs(&got, &want, false, &vd);
    cr_expect_eq(vd.status, KL_PASS, "%s: %s", v->name, vd.why);
    kl_outputs_free(&got), kl_outputs_free(&want);
    kl_tensor_release(&kl_store_ops, &k);
    kl_store_problem_free(p);
}

ParameterizedTest(int *i, store_gpu, slots_past_the_cache_are_reported_and_never_written)
{
    const struct kl_variant *v = kl_variant_at("store", *i, false);
    cr_log_info("variant %s", v->name);
    if (kl_test_skip_reason(v)) cr_skip_test("%s: %s", v->name, kl_test_skip_reason(v));
    const struct kl_store_params plain = {.num_kv_heads = 2, .head_dim = 64, .dtype = KL_BF16};
    if (((kl_store_launch_fn)v->launch)(&plain, 0) == cudaErrorNotSupported) return fused_slots_past_the_cache(v);
    /* 6 tokens into 16 slots; tokens 2 and 4 point past the cache (num_slots, and far past). */
    struct kl_store_problem *p = kl_store_problem_random(6, 2, 64, 16, KL_BF16, KL_SLOTS_RANDOM, 0, false, 5);
    int64_t *slots = p->slots.data;
    slots[2] = 16, slots[4] = (int64_t)1 << 40;
    struct kl_store_params k;
    struct kl_err err;
    cr_assert_eq(kl_tensor_upload(&kl_store_ops, p, &k, &err), 0, "%s", err.msg);
    cr_expect_eq(((kl_store_launch_fn)v->launch)(&k, 0), cudaErrorInvalidValue, "%s did not report slot 16 of 16",
                 v->name);
    cr_assert_eq(kl_dev_sync(), 0, "%s: the device is in error after an out-of-range slot", v->name);
    /* The valid tokens are stored and nothing else changed: the reference skips bad slots too. */
    struct kl_outputs got = {0}, want = {0};
    cr_assert_eq(kl_tensor_download(&kl_store_ops, p, &k, &got, &err), 0, "%s", err.msg);
    double *kk = kl_tensor_to_f64(&p->k), *vv = kl_tensor_to_f64(&p->v);
    double *kc = kl_tensor_to_f64(&p->k_cache), *vc = kl_tensor_to_f64(&p->v_cache);
    cr_assert_eq(kl_store_reference(kk, vv, slots, 6, 128, 16, kc, vc), 2);
    for (int64_t j = 0; j < got.o[0].n; j++) {
        cr_assert_eq(got.o[0].v[j], kc[j], "%s: k_cache[%lld] changed", v->name, (long long)j);
        cr_assert_eq(got.o[1].v[j], vc[j], "%s: v_cache[%lld] changed", v->name, (long long)j);
    }
    /* Without validate the launch reports nothing (no sync), and still writes nothing wrong. */
    k.validate = false;
    cr_expect_eq(((kl_store_launch_fn)v->launch)(&k, 0), cudaSuccess);
    cr_assert_eq(kl_dev_sync(), 0);
    free(kk), free(vv), free(kc), free(vc);
    kl_outputs_free(&got), kl_outputs_free(&want);
    kl_tensor_release(&kl_store_ops, &k);
    kl_store_problem_free(p);
}

Test(store_gpu, launchers_reject_bad_shapes_without_launching)
{
    if (!kl_have_gpu()) cr_skip_test("no CUDA device");
    for (int i = 0; i < kl_variant_count("store", false); i++) {
        const struct kl_variant *v = kl_variant_at("store", i, false);
        kl_store_launch_fn f = (kl_store_launch_fn)v->launch;
        /* Each family rejects its own bad calls and declines the other family's (a SKIP): exactly one
         * of the two kinds of call is declined, so a launcher that declines everything fails here. */
        int declined = 0;
        for (int fused = 0; fused < 2; fused++) {
            struct kl_store_params bad = {.num_tokens = 4, .num_kv_heads = 0, .head_dim = 128, .num_slots = 8,
                                          .dtype = KL_BF16, .fused = fused, .num_qo_heads = 8, .rotary_dim = 128,
                                          .max_pos = 16};
            cudaError_t rc = f(&bad, 0);
            const bool declines = rc == cudaErrorNotSupported;
            declined += declines;
            cr_expect(rc == cudaErrorInvalidValue || declines, "%s accepted num_kv_heads=0", v->name);
            bad.num_kv_heads = 8, bad.head_dim = 0;
            cr_expect_eq(f(&bad, 0), declines ? cudaErrorNotSupported : cudaErrorInvalidValue,
                         "%s accepted head_dim=0", v->name);
            bad.head_dim = 128; /* pointers unset with tokens to store */
            cr_expect_eq(f(&bad, 0), declines ? cudaErrorNotSupported : cudaErrorInvalidValue,
                         "%s accepted NULL pointers", v->name);
        }
        cr_expect_eq(declined, 1, "%s declined %d of the two families' calls, not one", v->name, declined);
    }
}
