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

/* ---- GPU ---- */

static int indices[64];

ParameterizedTestParameters(rmsnorm_gpu, every_variant_matches_the_goldens)
{
    int n = kl_variant_count("rmsnorm", false);
    for (int i = 0; i < n; i++) indices[i] = i;
    return cr_make_param_array(int, indices, (size_t)n);
}

ParameterizedTest(int *i, rmsnorm_gpu, every_variant_matches_the_goldens)
{
    const struct kl_variant *v = kl_variant_at("rmsnorm", *i, false);
    cr_log_info("variant %s", v->name);
    if (kl_test_skip_reason(v)) cr_skip_test("%s: %s", v->name, kl_test_skip_reason(v));
    int failures = kl_test_goldens("rmsnorm", v, stderr);
    cr_assert_eq(failures, 0, "%s: %d golden cases failed (lines above)", v->name, failures);
}

ParameterizedTestParameters(rmsnorm_gpu, every_variant_matches_the_reference_on_fresh_inputs_and_edges)
{
    int n = kl_variant_count("rmsnorm", false);
    for (int i = 0; i < n; i++) indices[i] = i;
    return cr_make_param_array(int, indices, (size_t)n);
}

ParameterizedTest(int *i, rmsnorm_gpu, every_variant_matches_the_reference_on_fresh_inputs_and_edges)
{
    const struct kl_variant *v = kl_variant_at("rmsnorm", *i, false);
    cr_log_info("variant %s", v->name);
    if (kl_test_skip_reason(v)) cr_skip_test("%s: %s", v->name, kl_test_skip_reason(v));
    int failures = kl_check_module(module(), v, kl_test_seed(stderr), stderr);
    cr_assert_eq(failures, 0, "%s: %d problems failed (lines above)", v->name, failures);
}

/* Mutants are the variants that only the test binary links: indices past the real ones. */
ParameterizedTestParameters(rmsnorm_gpu, every_mutant_is_flagged)
{
    int n = kl_variant_count("rmsnorm", true), m = 0;
    for (int i = 0; i < n; i++)
        if (kl_variant_at("rmsnorm", i, true)->mutant) indices[m++] = i;
    return cr_make_param_array(int, indices, (size_t)m);
}

ParameterizedTest(int *i, rmsnorm_gpu, every_mutant_is_flagged)
{
    const struct kl_variant *v = kl_variant_at("rmsnorm", *i, true);
    cr_log_info("mutant %s", v->name);
    if (kl_test_skip_reason(v)) cr_skip_test("%s: %s", v->name, kl_test_skip_reason(v));
    int flagged = kl_test_goldens("rmsnorm", v, stderr) + kl_check_module(module(), v, kl_test_seed(stderr), stderr);
    cr_assert_gt(flagged, 0, "mutant %s passed every golden case and the whole check catalogue", v->name);
}

Test(rmsnorm_gpu, there_are_at_least_three_mutants)
{
    cr_assert_geq(kl_variant_count("rmsnorm", true) - kl_variant_count("rmsnorm", false), 3);
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
