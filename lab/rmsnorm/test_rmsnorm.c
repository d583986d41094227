/* rmsnorm tests. Suite `rmsnorm` runs anywhere (the reference against the goldens and hand
 * arithmetic); suite `rmsnorm_gpu` runs every variant on the device and skips without one.
 * Parameterized over variant INDICES (pointers as parameters crash Criterion's workers). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>

#include "lab/core/device.h"
#include "lab/core/testing.h"
#include "lab/rmsnorm/rmsnorm_module.h"
#include "reference/rmsnorm.h"

static const struct kl_module *module(void) { return kl_module_find("rmsnorm"); }

Test(rmsnorm, reference_matches_every_golden_case)
{
    int failures = kl_test_goldens("rmsnorm", NULL, stderr);
    cr_assert(failures >= 0, "no golden cases found under golden/rmsnorm");
    cr_assert_eq(failures, 0, "%d golden cases failed (lines above)", failures);
}

Test(rmsnorm, reference_matches_a_hand_worked_row)
{
    /* x = [3, 4]: mean square 12.5; eps 0; weight [1, 2]. */
    double x[2] = {3, 4}, w[2] = {1, 2}, out[2];
    kl_rmsnorm_reference(x, NULL, w, 1, 2, 0.0, out, NULL);
    cr_assert_float_eq(out[0], 3 / sqrt(12.5), 1e-15);
    cr_assert_float_eq(out[1], 8 / sqrt(12.5), 1e-15);
}

Test(rmsnorm, eps_enters_the_reference_under_the_square_root)
{
    double x[2] = {3, 4}, w[2] = {1, 1}, out[2];
    kl_rmsnorm_reference(x, NULL, w, 1, 2, 12.5, out, NULL);
    cr_assert_float_eq(out[0], 3 / sqrt(25.0), 1e-15);
}

Test(rmsnorm, fused_reference_normalises_the_sum_and_returns_it)
{
    double x[3] = {1, -2, 0.5}, res[3] = {2, 6, -0.5}, w[3] = {1, 1, 1}, out[3], rout[3], plain[3], sum[3];
    for (int i = 0; i < 3; i++) sum[i] = x[i] + res[i];
    kl_rmsnorm_reference(x, res, w, 1, 3, 1e-6, out, rout);
    kl_rmsnorm_reference(sum, NULL, w, 1, 3, 1e-6, plain, NULL);
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(rout[i], sum[i]);
        cr_assert_float_eq(out[i], plain[i], 1e-15);
    }
}

Test(rmsnorm, reference_agrees_with_itself_on_the_check_catalogue_through_the_module)
{
    /* The module's reference path (dtype conversion, output naming) against a direct call. */
    char label[160];
    struct kl_rmsnorm_problem *p = module()->tensor->make(1, 42, label, sizeof label);
    cr_assert(p, "catalogue is empty");
    struct kl_outputs out = {0};
    struct kl_err err;
    cr_assert_eq(module()->tensor->reference(p, &out, &err), 0, "%s", err.msg);
    double *x = kl_tensor_to_f64(&p->x), *w = kl_tensor_to_f64(&p->weight);
    double *direct = malloc(sizeof(double) * (size_t)(p->num_tokens * p->hidden));
    kl_rmsnorm_reference(x, NULL, w, p->num_tokens, p->hidden, p->eps, direct, NULL);
    for (int64_t i = 0; i < out.o[0].n; i++) cr_assert_eq(out.o[0].v[i], direct[i], "%s index %lld", label, (long long)i);
    free(x), free(w), free(direct);
    kl_outputs_free(&out);
    module()->tensor->free(p);
}

/* ---- the policy on CPU stand-ins of kernels (lab/core/compare.c: each claim, its mutant) ---- */

/* How a stand-in computes. CORRECT is what v0 does on the GPU: float32, 256 threads' partial sums
 * of squares (thread i takes elements i, i + 256, ...) and a float tree over them, each output
 * rounded once. The others are that with one bug. */
enum sim {
    CORRECT,
    EPS_IGNORED,       /* rsqrt(mean) with no eps */
    LAST_NOT_WRITTEN,  /* the last element of each row keeps its poison (NaN) */
    TAIL_DROPPED,      /* a 16-byte vector loop that forgets the remainder of the row in the sum of squares */
    BF16_ACCUMULATE,   /* the partial sums of squares kept in bf16 */
    FP16_ACCUMULATE,   /* ... in fp16 */
    TRUNCATED_OUTPUT,  /* the output rounded toward zero instead of to nearest */
    BF16_ROUNDED_FP32, /* an fp32 output that went through bf16 */
};

static int simulate(const struct kl_rmsnorm_problem *p, struct kl_outputs *o, enum sim sim)
{
    enum { kThreads = 256 };
    const int64_t h = p->hidden, width = 16 / (int64_t)kl_dtype_size(p->dtype);
    const int64_t sum_end = sim == TAIL_DROPPED ? h - h % width : h;
    const enum kl_dtype acc = sim == BF16_ACCUMULATE ? KL_BF16 : KL_F16;
    kl_outputs_set(o, 0, "out", p->dtype, false, p->num_tokens * h);
    if (p->has_residual) kl_outputs_set(o, 1, "residual_out", p->dtype, false, p->num_tokens * h);
    float *r = malloc(sizeof(float) * (size_t)(h ? h : 1));
    for (int64_t t = 0; t < p->num_tokens; t++) {
        float part[kThreads] = {0};
        for (int64_t i = 0; i < h; i++) {
            const size_t e = (size_t)(t * h + i);
            r[i] = (float)kl_load_elem(p->dtype, p->x.data, e);
            if (p->has_residual) {
                r[i] += (float)kl_load_elem(p->dtype, p->residual.data, e);
                o->o[1].v[e] = kl_round_to(p->dtype, r[i]);
            }
            if (i >= sum_end) continue;
            if (sim == BF16_ACCUMULATE || sim == FP16_ACCUMULATE)
                part[i % kThreads] = (float)kl_round_to(acc, part[i % kThreads] + kl_round_to(acc, r[i] * r[i]));
            else part[i % kThreads] += r[i] * r[i];
        }
        for (int s = kThreads / 2; s > 0; s /= 2)
            for (int j = 0; j < s; j++) part[j] += part[j + s];
        const float mean = part[0] / (float)h;
        const float inv_rms = 1.0f / sqrtf(sim == EPS_IGNORED ? mean : mean + (float)p->eps);
        for (int64_t i = 0; i < h; i++) {
            const float v = r[i] * inv_rms * (float)kl_load_elem(p->dtype, p->weight.data, (size_t)i);
            double *out = &o->o[0].v[t * h + i];
            *out = sim == TRUNCATED_OUTPUT    ? kl_test_round_toward_zero(p->dtype, v)
                   : sim == BF16_ROUNDED_FP32 ? kl_round_to(KL_BF16, v)
                                              : kl_round_to(p->dtype, v);
            if (sim == LAST_NOT_WRITTEN && i == h - 1) *out = NAN;
        }
    }
    free(r);
    return 0;
}

#define STAND_IN(fn, sim)                                                              \
    static int fn(const void *p, struct kl_outputs *o, struct kl_err *err)              \
    {                                                                                  \
        (void)err;                                                                     \
        return simulate(p, o, sim);                                                    \
    }
STAND_IN(correct, CORRECT)
STAND_IN(eps_ignored, EPS_IGNORED)
STAND_IN(last_not_written, LAST_NOT_WRITTEN)
STAND_IN(tail_dropped, TAIL_DROPPED)
STAND_IN(bf16_accumulate, BF16_ACCUMULATE)
STAND_IN(fp16_accumulate, FP16_ACCUMULATE)
STAND_IN(truncated_output, TRUNCATED_OUTPUT)
STAND_IN(bf16_rounded_fp32, BF16_ROUNDED_FP32)

/* The reference with one change: its sum of squares accumulated in float32. */
static int reference_fp32_sum_of_squares(const void *prob, struct kl_outputs *o, struct kl_err *err)
{
    (void)err;
    const struct kl_rmsnorm_problem *p = prob;
    const int64_t h = p->hidden;
    kl_outputs_set(o, 0, "out", p->dtype, false, p->num_tokens * h);
    if (p->has_residual) kl_outputs_set(o, 1, "residual_out", p->dtype, false, p->num_tokens * h);
    for (int64_t t = 0; t < p->num_tokens; t++) {
        float sum_sq = 0;
        for (int64_t i = 0; i < h; i++) {
            const size_t e = (size_t)(t * h + i);
            double r = kl_load_elem(p->dtype, p->x.data, e);
            if (p->has_residual) r += kl_load_elem(p->dtype, p->residual.data, e), o->o[1].v[e] = r;
            sum_sq += (float)(r * r);
        }
        const double inv_rms = 1.0 / sqrt(sum_sq / (double)h + p->eps);
        for (int64_t i = 0; i < h; i++) {
            const size_t e = (size_t)(t * h + i);
            const double r = p->has_residual ? o->o[1].v[e] : kl_load_elem(p->dtype, p->x.data, e);
            o->o[0].v[e] = r * inv_rms * kl_load_elem(p->dtype, p->weight.data, (size_t)i);
        }
    }
    return 0;
}

/* Runs fn on golden case `name` and compares output "out" with the variant policy; prints the three
 * statistics against their limits. */
static struct kl_cmp judge_golden(const char *name, kl_stand_in_fn fn, const char *what)
{
    char dir[1024];
    snprintf(dir, sizeof dir, KL_SOURCE_DIR "/golden/rmsnorm/%s", name);
    struct kl_case c;
    struct kl_err err = {{0}};
    cr_assert_eq(kl_case_open(&c, dir, &err), 0, "%s", err.msg);
    struct kl_outputs want = {0}, got = {0};
    void *prob = module()->tensor->load(&c, &want, &err);
    cr_assert(prob, "%s", err.msg);
    cr_assert_eq(fn(prob, &got, &err), 0);
    const struct kl_policy pol = kl_policy_for(c.dtype, false);
    struct kl_cmp cmp;
    kl_compare(got.o[0].v, want.o[0].v, want.o[0].n, pol, &cmp);
    fprintf(stderr, "%s on %s (%s): %lld elements out of bounds, rel_l2 %.3g (limit %.3g), bias %.3g (limit %.3g)\n",
            what, name, kl_dtype_name(c.dtype), (long long)cmp.n_bad, cmp.rel_l2, pol.rel_l2, cmp.bias, cmp.bias_limit);
    module()->tensor->free(prob);
    kl_outputs_free(&want), kl_outputs_free(&got);
    kl_case_close(&c);
    return cmp;
}

Test(rmsnorm, a_float32_kernel_passes_every_golden_and_fresh_inputs_many_times)
{
    cr_assert_eq(kl_test_stand_in_passes("rmsnorm", correct, "float32 stand-in", 20, stderr), 0,
                 "a correct kernel failed goldens or fresh inputs (lines above)");
}

Test(rmsnorm, a_reference_accumulating_in_float32_fails_the_goldens)
{
    int failures = kl_test_goldens_with("rmsnorm", reference_fp32_sum_of_squares, "reference, float32 sum of squares",
                                        true, stderr);
    cr_assert_gt(failures, 0, "judged as the reference is, it passed every golden");
}

Test(rmsnorm, every_rationale_mutant_fails_a_golden)
{
    static const struct {
        kl_stand_in_fn fn;
        const char *name;
    } kmutants[] = {{eps_ignored, "eps_ignored"},         {last_not_written, "last_not_written"},
                    {tail_dropped, "tail_dropped"},       {bf16_accumulate, "bf16_accumulate"},
                    {fp16_accumulate, "fp16_accumulate"}, {truncated_output, "truncated_output"},
                    {bf16_rounded_fp32, "bf16_rounded_fp32"}};
    for (size_t i = 0; i < sizeof kmutants / sizeof kmutants[0]; i++)
        cr_expect_gt(kl_test_goldens_with("rmsnorm", kmutants[i].fn, kmutants[i].name, false, stderr), 0,
                     "%s passed every golden", kmutants[i].name);
}

/* The claims of compare.c, each on the golden made for it, by the check that is said to catch it. */
Test(rmsnorm, the_bias_check_catches_what_the_element_and_rel_l2_checks_let_through)
{
    static const struct {
        kl_stand_in_fn fn;
        const char *what, *golden;
    } kcases[] = {{tail_dropped, "tail_dropped", "tail_4100_bf16"},
                  {bf16_accumulate, "bf16_accumulate", "hidden_16384"},
                  {fp16_accumulate, "fp16_accumulate", "hidden_32768_fp16"},
                  {truncated_output, "truncated_output", "bf16_one_row"},
                  {truncated_output, "truncated_output", "fp16_rows"}};
    for (size_t i = 0; i < sizeof kcases / sizeof kcases[0]; i++) {
        const struct kl_cmp c = judge_golden(kcases[i].golden, kcases[i].fn, kcases[i].what);
        cr_expect_eq(c.n_bad, 0, "%s: the element bound alone caught it on %s", kcases[i].what, kcases[i].golden);
        cr_expect(!c.pass && fabs(c.bias) > c.bias_limit, "%s: not caught by the bias on %s", kcases[i].what,
                  kcases[i].golden);
        const struct kl_cmp ok = judge_golden(kcases[i].golden, correct, "float32 stand-in");
        cr_expect(ok.pass, "the correct stand-in fails %s", kcases[i].golden);
    }
}

Test(rmsnorm, the_element_bound_catches_a_wrong_value_and_a_poisoned_element)
{
    struct kl_cmp c = judge_golden("eps_matters_fp32", eps_ignored, "eps_ignored");
    cr_expect_gt(c.n_bad, 0);
    c = judge_golden("fused_residual_fp32", bf16_rounded_fp32, "bf16_rounded_fp32");
    cr_expect_gt(c.n_bad, 0);
    c = judge_golden("odd_hidden_111", last_not_written, "last_not_written");
    cr_expect_eq(c.n_bad, 5, "one poisoned element a row, 5 rows");
}

/* ---- GPU ---- */

static int producer_order_failures(const struct kl_variant *v, FILE *log);

/* A mutant is flagged by the goldens, the catalogue or a late producer (the PDL mutants). */
KL_GPU_TESTS(rmsnorm_gpu, rmsnorm, three, 7, KL_FLAGGED_BY_EITHER, producer_order_failures)

/* A variant after a kernel that writes its input late (lab/rmsnorm/mutants_pdl.cu): x poisoned,
 * the producer copies the real x in after a spin, the variant launched right behind it on the
 * same stream, as the lab launches it (v2 and v3 with programmatic stream serialization on sm_90,
 * for fewer rows than 2 per SM). Returns the problems whose output is wrong. */
static int producer_order_failures(const struct kl_variant *v, FILE *log)
{
    int failures = 0;
    for (int fused = 0; fused < 2; fused++) {
        struct kl_rmsnorm_problem *p = kl_rmsnorm_problem_random(64, 4096, KL_BF16, fused, 1, 1e-6, 17 + fused);
        struct kl_rmsnorm_params k;
        struct kl_err err = {{0}};
        struct kl_outputs want = {0}, got = {0};
        struct kl_verdict vd = {.status = KL_FAIL};
        void *src = NULL;
        cudaStream_t stream = NULL;
        const size_t bytes = kl_nbytes(&p->x);
        if (kl_tensor_upload(&kl_rmsnorm_ops, p, &k, &err) == 0) {
            /* x's real values go to src; x itself holds NaN until the producer copies them in. */
            const bool ready = !kl_dev_alloc(&src, bytes) && !kl_dev_upload(src, p->x.data, bytes) &&
                               !kl_dev_fill_bytes((void *)k.x, 0xff, bytes) && !kl_dev_sync();
            int rc = ready ? (int)cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) : -1;
            if (!rc) rc = (int)kl_test_late_write((void *)k.x, src, bytes, stream);
            if (!rc) rc = (int)((kl_rmsnorm_launch_fn)v->launch)(&k, stream);
            if (!rc) rc = (int)cudaStreamSynchronize(stream);
            if (rc) snprintf(vd.why, sizeof vd.why, "%s", ready ? kl_cuda_error_string(rc) : "device set-up failed");
            else if (kl_tensor_download(&kl_rmsnorm_ops, p, &k, &got, &err) == 0 &&
                     module()->tensor->reference(p, &want, &err) == 0)
                kl_compare_outputs(&got, &want, false, &vd);
            else snprintf(vd.why, sizeof vd.why, "%s", err.msg);
            if (stream) cudaStreamDestroy(stream);
            kl_dev_free(src);
            kl_tensor_release(&kl_rmsnorm_ops, &k);
        } else {
            snprintf(vd.why, sizeof vd.why, "%s", err.msg);
        }
        fprintf(log, "%s %s after a late producer, 64x4096 bf16%s: rel_l2=%.3g %s\n",
                vd.status == KL_PASS ? "PASS" : "FAIL", v->name, fused ? " fused" : "", vd.rel_l2, vd.why);
        failures += vd.status != KL_PASS;
        kl_outputs_free(&want), kl_outputs_free(&got);
        kl_rmsnorm_problem_free(p);
    }
    return failures;
}

ParameterizedTestParameters(rmsnorm_gpu, every_variant_reads_its_input_only_after_its_producer_wrote_it)
{
    return kl_test_variants(false);
}

ParameterizedTest(int *i, rmsnorm_gpu, every_variant_reads_its_input_only_after_its_producer_wrote_it)
{
    const struct kl_variant *v = kl_variant_at("rmsnorm", *i, false);
    cr_log_info("variant %s", v->name);
    if (kl_test_skip_reason(v)) cr_skip_test("%s: %s", v->name, kl_test_skip_reason(v));
    cr_assert_eq(producer_order_failures(v, stderr), 0, "%s read x before the kernel that writes it had (lines above)",
                 v->name);
}

Test(rmsnorm_gpu, a_consumer_reading_before_griddepcontrol_wait_is_caught)
{
    const struct kl_variant *v = kl_variant_find("rmsnorm", "mutant_pdl_reads_before_wait");
    cr_assert(v, "the PDL mutant is not linked");
    if (kl_test_skip_reason(v)) cr_skip_test("%s: %s", v->name, kl_test_skip_reason(v));
    cr_assert_gt(producer_order_failures(v, stderr), 0, "x read before the wait, and the output was still right");
}

Test(rmsnorm_gpu, launchers_reject_bad_shapes_without_launching)
{
    if (!kl_have_gpu()) cr_skip_test("no CUDA device");
    for (int i = 0; i < kl_variant_count("rmsnorm", false); i++) {
        const struct kl_variant *v = kl_variant_at("rmsnorm", i, false);
        struct kl_rmsnorm_params bad = {.num_tokens = 4, .hidden = 0, .dtype = KL_BF16, .eps = 1e-6f};
        cr_expect_eq(((kl_rmsnorm_launch_fn)v->launch)(&bad, 0), cudaErrorInvalidValue, "%s accepted hidden=0",
                     v->name);
    }
}
