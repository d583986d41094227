/* store tests, the FP8 half: the e4m3 converter against ml_dtypes, the e4m3 policy, a float32
 * stand-in of the fused kernel passing every golden and catalogue problem, and the reference
 * mutants the issue names, each failing the fused goldens. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lab/core/testing.h"
#include "lab/store/store_module.h"
#include "reference/rope.h"
#include "reference/store.h"

/* ---- the converter (kernels/dtype.c) against ml_dtypes' table (golden/gen/store_fp8.py) ---- */

static bool same_float_bits(float a, float b) { return memcmp(&a, &b, sizeof a) == 0; }

Test(store, e4m3_converter_matches_ml_dtypes_on_every_code_and_a_sweep_of_floats)
{
    struct kl_tensor values = {0}, x = {0}, codes = {0};
    struct kl_err err = {{0}};
    cr_assert_eq(kl_npy_read(KL_SOURCE_DIR "/golden/dtype/fp8_e4m3/values.npy", &values, &err), 0, "%s", err.msg);
    cr_assert_eq(kl_npy_read(KL_SOURCE_DIR "/golden/dtype/fp8_e4m3/sweep_x.npy", &x, &err), 0, "%s", err.msg);
    cr_assert_eq(kl_npy_read(KL_SOURCE_DIR "/golden/dtype/fp8_e4m3/sweep_codes.npy", &codes, &err), 0, "%s", err.msg);
    cr_assert(values.dtype == KL_F32 && kl_numel(&values) == 256 && x.dtype == KL_F32 && codes.dtype == KL_U8 &&
              kl_numel(&x) == kl_numel(&codes), "golden/dtype/fp8_e4m3: unexpected arrays");
    const float *val = values.data, *xs = x.data;
    const uint8_t *want = codes.data;
    int ties = 0, saturated = 0, subnormal = 0, nans = 0;
    for (int c = 0; c < 256; c++) {
        const float got = kl_e4m3_to_f32((uint8_t)c);
        cr_expect(same_float_bits(got, val[c]) || (isnan(got) && isnan(val[c])), "code 0x%02x: %g, ml_dtypes %g", c,
                  got, val[c]);
        if (!isnan(val[c])) cr_expect_eq(kl_f32_to_e4m3(val[c]), c, "%g does not encode back to 0x%02x", val[c], c);
        else {
            nans++;
            cr_expect((c & 0x7f) == 0x7f, "NaN at code 0x%02x", c);
        }
    }
    for (int64_t i = 0; i < kl_numel(&x); i++) {
        const uint8_t got = kl_f32_to_e4m3(xs[i]);
        cr_expect_eq(got, want[i], "%.9g (0x%08x) -> 0x%02x, ml_dtypes 0x%02x", xs[i],
                     (unsigned)(*(const uint32_t *)&xs[i]), got, want[i]);
        const float a = fabsf(xs[i]);
        saturated += a > 448;
        subnormal += a > 0 && a < 0x1p-6f;
        /* a tie: a float exactly halfway between the code it rounds to and that code's neighbour */
        const uint8_t c = kl_f32_to_e4m3(a);
        const double r = kl_e4m3_to_f32(c), other = r > a ? kl_e4m3_to_f32((uint8_t)(c - 1)) : kl_e4m3_to_f32((uint8_t)(c + 1));
        ties += c > 0 && c < 0x7e && (double)a == (r + other) / 2;
    }
    cr_assert_eq(nans, 2, "e4m3 has one NaN of each sign");
    cr_assert(ties > 200 && saturated > 10 && subnormal > 100, "the sweep holds %d ties, %d saturating and %d "
              "subnormal floats", ties, saturated, subnormal);
    kl_tensor_free(&values), kl_tensor_free(&x), kl_tensor_free(&codes);
}

/* ---- the e4m3 policy (lab/core/compare.c) on hand-made elements ---- */

static bool one_passes(double got, double want, double pre, double slack)
{
    struct kl_cmp c;
    kl_compare(&got, &want, 1, kl_policy_e4m3(&pre, &slack), &c);
    return c.pass;
}

Test(store, e4m3_policy_allows_a_neighbour_code_only_within_the_slack_of_a_tie)
{
    const double s = kl_e4m3_slack(1.07); /* the allowance of a value near 1.07 */
    cr_assert(one_passes(1.0, 1.0, 1.02, s), "the reference's own code");
    cr_assert(!one_passes(1.125, 1.0, 1.02, s), "a neighbour far from the tie (1.0625) must fail");
    cr_assert(one_passes(1.125, 1.0, 1.0625 - s / 2, s), "within slack of the tie: either code");
    cr_assert(!one_passes(1.125, 1.0, 1.0625 - 2 * s, s), "past the slack: the reference's code only");
    cr_assert(!one_passes(1.25, 1.0, 1.0625 - s / 2, s), "two codes away never passes");
    cr_assert(!one_passes(0.0, -0.0, -0.0, 0), "-0 in stays -0");
    cr_assert(one_passes(0.0, -0.0, -1e-12, kl_e4m3_slack(1)), "a zero of the other sign, when y is within slack of 0");
    cr_assert(!one_passes(NAN, 448, 500, kl_e4m3_slack(500)), "no saturation: NaN where 448 is due");
    cr_assert(one_passes(-NAN, NAN, NAN, 0), "NaN stays NaN (either sign)");
    cr_assert(!one_passes(448, NAN, NAN, 0), "NaN stays NaN");
    cr_assert(one_passes(448, 448, 1e6, kl_e4m3_slack(1e6)), "saturated");
}

/* ---- the fused computation on the CPU: a float32 stand-in and mutants of the reference ---- */

enum fused_model {
    F32_KERNEL,        /* what a kernel does: float32 RoPE and scaling, one rounding to e4m3 (correct) */
    NO_SATURATION,     /* past 464 an unsaturated conversion gives NaN (e4m3 has no infinity) */
    SCALE_TWICE,       /* x / scale / scale */
    ROPE_AFTER_QUANT,  /* K quantized, dequantized, then rotated and quantized again */
    WRONG_HEAD_SCALE,  /* head 0's scale for every head */
    N_MODELS,
};
static const char *const kmodel[N_MODELS] = {"float32 kernel", "no saturation", "scale applied twice",
                                             "RoPE after quantization", "head 0's scale for every head"};

static uint8_t quant(enum fused_model m, double y)
{
    if (m == NO_SATURATION && fabs((double)(float)y) >= 464) return signbit(y) ? 0xff : 0x7f;
    return kl_f32_to_e4m3((float)y);
}

/* Runs model m of the fused store on p into o (outputs as the module sets them). F32_KERNEL works
 * in float32 as the GPU variants do; the mutants are the float64 reference with one bug. */
static void fused_model(enum fused_model m, const struct kl_store_problem *p, struct kl_outputs *o)
{
    struct kl_store_rope_quant a;
    kl_store_fused_args(p, &a);
    const int64_t d = p->head_dim, hq = p->num_qo_heads, hk = p->num_kv_heads, half = p->rotary_dim / 2;
    const int64_t width = (hq + 2 * hk) * d, row = hk * d, n = p->num_slots * row;
    kl_store_fused_outputs(p, o);
    for (int64_t i = 0; i < n; i++)
        o->o[0].v[i] = kl_load_elem(KL_FP8_E4M3, p->k_cache.data, (size_t)i),
        o->o[1].v[i] = kl_load_elem(KL_FP8_E4M3, p->v_cache.data, (size_t)i);
    double *x = malloc(sizeof(double) * (size_t)d);
    for (int64_t t = 0; t < p->num_tokens; t++) {
        const int64_t pos = a.positions[t], slot = a.slots[t];
        const float *cs = (const float *)p->cos_sin_cache.data + pos * p->rotary_dim;
        for (int64_t h = 0; h < hq + hk; h++) {
            const bool is_k = h >= hq;
            const int64_t kh = h - hq;
            const double scale = !is_k ? 1 : a.k_scale[m == WRONG_HEAD_SCALE ? 0 : kh];
            if (is_k && slot < 0) continue;
            for (int64_t i = 0; i < d; i++) {
                x[i] = a.qkv[t * width + h * d + i];
                if (is_k && m == ROPE_AFTER_QUANT) x[i] = kl_e4m3_to_f32(quant(m, x[i] / scale)) * scale;
            }
            if (m == F32_KERNEL) {
                for (int64_t i = 0; i < half; i++) {
                    const int64_t i1 = p->is_neox ? i : 2 * i, i2 = p->is_neox ? i + half : 2 * i + 1;
                    const float x1 = (float)x[i1], x2 = (float)x[i2], c = cs[i], s = cs[half + i];
                    x[i1] = fmaf(x1, c, -(x2 * s)), x[i2] = fmaf(x2, c, x1 * s);
                }
            } else {
                kl_rope_reference(x, &pos, a.cos_sin_cache, 1, 1, d, p->rotary_dim, p->max_pos, p->is_neox);
            }
            for (int64_t i = 0; i < d; i++) {
                if (!is_k) {
                    o->o[2].v[(t * hq + h) * d + i] = kl_round_to(p->dtype, x[i]);
                    continue;
                }
                const double y = m == F32_KERNEL  ? (double)((float)x[i] * (1.0f / (float)scale))
                                 : m == SCALE_TWICE ? x[i] / scale / scale
                                                    : x[i] / scale;
                o->o[0].v[slot * row + kh * d + i] = kl_e4m3_to_f32(quant(m, y));
            }
        }
        for (int64_t h = 0; slot >= 0 && h < hk; h++) {
            const double scale = a.v_scale[m == WRONG_HEAD_SCALE ? 0 : h];
            for (int64_t i = 0; i < d; i++) {
                const double v = a.qkv[t * width + (hq + hk + h) * d + i];
                const double y = m == F32_KERNEL    ? (double)((float)v * (1.0f / (float)scale))
                                 : m == SCALE_TWICE ? v / scale / scale
                                                    : v / scale;
                o->o[1].v[slot * row + h * d + i] = kl_e4m3_to_f32(quant(m, y));
            }
        }
    }
    free(x);
    kl_store_fused_args_free(&a);
}

/* The plain stand-ins of test_store.c hand fused problems here: a correct float32 kernel. */
int kl_store_test_fused_f32(const void *prob, struct kl_outputs *o, struct kl_err *err)
{
    const struct kl_store_problem *p = prob;
    if (!p->fused) return kl_fail(err, "a plain store case");
    fused_model(F32_KERNEL, p, o);
    return 0;
}

/* The fused goldens (golden/store/fp8_*). */
static const char *const fused_goldens[] = {"fp8_page1_bf16_gqa4", "fp8_page16_fp16_interleaved",
                                            "fp8_prefill_256_bf16", "fp8_saturate_negzero_ties_bf16",
                                            "fp8_all_skipped_fp16"};

/* The fused goldens through model m, judged as a variant is: the names of those that fail. */
static int fused_failures(enum fused_model m, char *failed, size_t len)
{
    const struct kl_module *mod = kl_module_find("store");
    int failures = 0;
    size_t off = 0;
    failed[0] = 0;
    for (size_t k = 0; k < sizeof fused_goldens / sizeof fused_goldens[0]; k++) {
        char dir[1200];
        struct kl_case c;
        struct kl_err err = {{0}};
        struct kl_outputs want = {0}, got = {0};
        struct kl_verdict vd;
        snprintf(dir, sizeof dir, KL_SOURCE_DIR "/golden/store/%s", fused_goldens[k]);
        cr_assert_eq(kl_case_open(&c, dir, &err), 0, "%s", err.msg);
        struct kl_store_problem *p = mod->tensor->load(&c, &want, &err);
        cr_assert(p && p->fused, "%s: %s", fused_goldens[k], err.msg);
        fused_model(m, p, &got);
        kl_compare_outputs(&got, &want, false, &vd);
        if (vd.status == KL_FAIL) {
            failures++;
            off += (size_t)snprintf(failed + off, off < len ? len - off : 0, "%s ", fused_goldens[k]);
            cr_log_info("%s on %s: %s", kmodel[m], fused_goldens[k], vd.why);
        }
        mod->tensor->free(p);
        kl_outputs_free(&want), kl_outputs_free(&got);
        kl_case_close(&c);
    }
    return failures;
}

Test(store, a_float32_fused_kernel_passes_every_golden_and_catalogue_problem)
{
    char failed[512];
    cr_assert_eq(fused_failures(F32_KERNEL, failed, sizeof failed), 0, "fails %s", failed);
    /* The fused problems of the check catalogue, two seeds, judged against the reference as a variant is. */
    const struct kl_module *mod = kl_module_find("store");
    const uint64_t seed = kl_test_seed(stderr);
    int fused = 0, failures = 0;
    for (int k = 0; k < 2; k++)
        for (int i = 0;; i++) {
            char label[200];
            struct kl_err err = {{0}};
            struct kl_outputs ref = {0}, got = {0};
            struct kl_verdict vd;
            struct kl_store_problem *p = mod->tensor->make(i, seed + (uint64_t)k, label, sizeof label);
            if (!p) break;
            if (p->fused) {
                fused++;
                cr_assert_eq(mod->tensor->reference(p, &ref, &err), 0, "%s: %s", label, err.msg);
                fused_model(F32_KERNEL, p, &got);
                kl_compare_outputs(&got, &ref, false, &vd);
                if (vd.status == KL_FAIL) failures++, fprintf(stderr, "FAIL %s: %s\n", label, vd.why);
            }
            mod->tensor->free(p);
            kl_outputs_free(&ref), kl_outputs_free(&got);
        }
    cr_assert_gt(fused, 0, "the catalogue has no fused problem");
    cr_assert_eq(failures, 0, "the float32 fused kernel fails %d catalogue problems (lines above)", failures);
}

Test(store, every_fused_reference_mutant_fails_the_fused_goldens)
{
    char failed[512];
    /* Every fused golden that stores a token; the saturating one for the missing saturation. */
    cr_assert_eq(fused_failures(SCALE_TWICE, failed, sizeof failed), 4, "scale applied twice fails only %s", failed);
    cr_assert_eq(fused_failures(ROPE_AFTER_QUANT, failed, sizeof failed), 4, "RoPE after quantization fails only %s",
                 failed);
    cr_assert_geq(fused_failures(NO_SATURATION, failed, sizeof failed), 1, "no saturation passes every golden");
    cr_assert(strstr(failed, "fp8_saturate_negzero_ties_bf16"), "no saturation passes the saturating golden");
    cr_assert_eq(fused_failures(WRONG_HEAD_SCALE, failed, sizeof failed), 4, "head 0's scale everywhere fails only %s",
                 failed);
}

Test(store, fused_goldens_cover_pages_1_and_16_gqa_both_dtypes_skips_and_a_prefill)
{
    const struct kl_module *mod = kl_module_find("store");
    bool page1 = false, page16 = false, gqa = false, bf16 = false, fp16 = false, skip = false, prefill = false;
    bool negzero = false;
    for (size_t k = 0; k < sizeof fused_goldens / sizeof fused_goldens[0]; k++) {
        char dir[1200];
        struct kl_case c;
        struct kl_err err = {{0}};
        struct kl_outputs want = {0};
        long long page = 0;
        snprintf(dir, sizeof dir, KL_SOURCE_DIR "/golden/store/%s", fused_goldens[k]);
        cr_assert_eq(kl_case_open(&c, dir, &err), 0, "%s", err.msg);
        cr_assert_eq(kl_case_param_int(&c, "page_size", 1, &page, &err), 0);
        struct kl_store_problem *p = mod->tensor->load(&c, &want, &err);
        cr_assert(p, "%s", err.msg);
        page1 |= page == 1, page16 |= page == 16, gqa |= p->num_qo_heads > p->num_kv_heads;
        bf16 |= p->dtype == KL_BF16, fp16 |= p->dtype == KL_F16, prefill |= p->num_tokens >= 256;
        for (int64_t t = 0; t < p->num_tokens; t++) skip |= ((const int64_t *)p->slots.data)[t] < 0;
        for (int64_t i = 0; i < want.o[1].n; i++) negzero |= want.o[1].v[i] == 0 && signbit(want.o[1].v[i]);
        mod->tensor->free(p);
        kl_outputs_free(&want);
        kl_case_close(&c);
    }
    cr_assert(page1 && page16 && gqa && bf16 && fp16 && skip && prefill && negzero);
}
