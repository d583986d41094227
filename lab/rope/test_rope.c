/* rope tests. Suite `rope` runs anywhere (the reference against the goldens and hand-worked
 * rotations); suite `rope_gpu` runs every variant on the device and skips without one.
 * Parameterized over variant INDICES (pointers as parameters crash Criterion's workers). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <dirent.h>
#include <math.h>
#include <stdlib.h>

#include "lab/core/device.h"
#include "lab/core/testing.h"
#include "lab/rope/rope_module.h"
#include "reference/rope.h"

Test(rope, reference_matches_every_golden_case)
{
    int failures = kl_test_goldens("rope", NULL, stderr);
    cr_assert(failures >= 0, "no golden cases found under golden/rope");
    cr_assert_eq(failures, 0, "%d golden cases failed (lines above)", failures);
}

Test(rope, neox_rotates_halves_and_leaves_dims_past_rotary_dim_alone)
{
    /* head_dim 6, rotary_dim 4: pairs (0, 2) and (1, 3); dims 4, 5 untouched. Angle 90 degrees
     * for pair 0 (cos 0, sin 1), 180 for pair 1 (cos -1, sin 0). */
    double x[6] = {1, 2, 3, 4, 5, 6};
    const double cs[4] = {0, -1, 1, 0};
    const int64_t pos[1] = {0};
    kl_rope_reference(x, pos, cs, 1, 1, 6, 4, 1, true);
    const double want[6] = {-3, -2, 1, -4, 5, 6}; /* (1,3) -> (1*0 - 3*1, 3*0 + 1*1); (2,4) -> (-2, -4) */
    for (int i = 0; i < 6; i++) cr_assert_float_eq(x[i], want[i], 1e-15, "x[%d] = %g, expected %g", i, x[i], want[i]);
}

Test(rope, interleaved_rotates_neighbouring_pairs)
{
    double x[4] = {1, 2, 3, 4};
    const double cs[4] = {0, -1, 1, 0};
    const int64_t pos[1] = {0};
    kl_rope_reference(x, pos, cs, 1, 1, 4, 4, 1, false);
    const double want[4] = {-2, 1, -3, -4}; /* (1,2) by 90 degrees; (3,4) by 180 */
    for (int i = 0; i < 4; i++) cr_assert_float_eq(x[i], want[i], 1e-15, "x[%d] = %g, expected %g", i, x[i], want[i]);
}

Test(rope, positions_pick_their_own_cache_row)
{
    /* Two tokens in decreasing order of position; row 0 is the identity, row 1 negates. */
    double x[4] = {1, 2, 3, 4};
    const double cs[4] = {1, 0, -1, 0};
    const int64_t pos[2] = {1, 0};
    cr_assert_eq(kl_rope_reference(x, pos, cs, 2, 1, 2, 2, 2, true), 0);
    cr_assert(x[0] == -1 && x[1] == -2 && x[2] == 3 && x[3] == 4);
}

Test(rope, rotation_preserves_the_norm_of_each_pair)
{
    double cs[2 * 64];
    float csf[2 * 64];
    kl_rope_cos_sin_cache(csf, 2, 64, KL_ROPE_BASE);
    for (int i = 0; i < 128; i++) cs[i] = csf[i];
    double x[64], y[64];
    for (int i = 0; i < 64; i++) x[i] = y[i] = sin(i + 1.0);
    const int64_t pos[1] = {1};
    kl_rope_reference(y, pos, cs, 1, 1, 64, 64, 2, true);
    for (int i = 0; i < 32; i++)
        cr_assert_float_eq(x[i] * x[i] + x[i + 32] * x[i + 32], y[i] * y[i] + y[i + 32] * y[i + 32], 1e-6);
}

/* ---- GPU ---- */

/* ---- the policy on CPU stand-ins of kernels (lab/core/compare.c) ---- */

/* What every variant computes: each pair rotated in float32 with the cache's float32 cos and sin,
 * each output rounded once; a token whose position is outside the cache left as it is.
 * flip_sin: the rotation the other way (sin's sign lost), a wrong value on most elements. */
static int simulate(const struct kl_rope_problem *p, struct kl_outputs *o, bool flip_sin)
{
    kl_outputs_set(o, 0, "q_out", p->dtype, false, kl_numel(&p->q));
    kl_outputs_set(o, 1, "k_out", p->dtype, false, kl_numel(&p->k));
    const int64_t half = p->rotary_dim / 2, d = p->head_dim, *pos = p->positions.data;
    const float *cs = p->cos_sin_cache.data;
    for (int w = 0; w < 2; w++) {
        const struct kl_tensor *x = w ? &p->k : &p->q;
        const int64_t heads = w ? p->num_kv_heads : p->num_q_heads;
        double *out = o->o[w].v;
        for (int64_t t = 0; t < p->num_tokens; t++) {
            for (int64_t e = t * heads * d; e < (t + 1) * heads * d; e++)
                out[e] = kl_load_elem(p->dtype, x->data, (size_t)e);
            if (pos[t] < 0 || pos[t] >= p->max_pos) continue;
            for (int64_t h = 0; h < heads; h++)
                for (int64_t i = 0; i < half; i++) {
                    const int64_t base = (t * heads + h) * d, i1 = base + (p->is_neox ? i : 2 * i),
                                  i2 = p->is_neox ? i1 + half : i1 + 1;
                    const float c = cs[pos[t] * p->rotary_dim + i], s = cs[pos[t] * p->rotary_dim + half + i];
                    const float x1 = (float)out[i1], x2 = (float)out[i2], sn = flip_sin ? -s : s;
                    out[i1] = kl_round_to(p->dtype, x1 * c - x2 * sn);
                    out[i2] = kl_round_to(p->dtype, x2 * c + x1 * sn);
                }
        }
    }
    return 0;
}

static int correct(const void *p, struct kl_outputs *o, struct kl_err *err)
{
    return (void)err, simulate(p, o, false);
}
static int sin_sign_flipped(const void *p, struct kl_outputs *o, struct kl_err *err)
{
    return (void)err, simulate(p, o, true);
}

Test(rope, a_float32_kernel_passes_every_golden_and_fresh_inputs_many_times)
{
    cr_assert_eq(kl_test_stand_in_passes("rope", correct, "float32 stand-in", 10, stderr), 0,
                 "a correct kernel failed goldens or fresh inputs (lines above)");
}

/* compare.c's claim for the element bound: a rotation the wrong way is caught on every golden
 * (each holds a token at position max_pos - 1, so none rotates by 0 alone). */
Test(rope, a_rotation_the_wrong_way_fails_every_golden)
{
    char dir[1024];
    snprintf(dir, sizeof dir, KL_SOURCE_DIR "/golden/rope");
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort), cases = 0;
    for (int i = 0; i < n; i++) cases += names[i]->d_name[0] != '.', free(names[i]);
    if (n >= 0) free(names);
    cr_assert_eq(kl_test_goldens_with("rope", sin_sign_flipped, "sin_sign_flipped", false, stderr), cases);
}

KL_GPU_TESTS(rope_gpu, rope, three, 3, KL_FLAGGED_BY_EITHER, NULL)

Test(rope_gpu, launchers_reject_bad_shapes_without_launching)
{
    if (!kl_have_gpu()) cr_skip_test("no CUDA device");
    for (int i = 0; i < kl_variant_count("rope", false); i++) {
        const struct kl_variant *v = kl_variant_at("rope", i, false);
        kl_rope_launch_fn f = (kl_rope_launch_fn)v->launch;
        struct kl_rope_params bad = {.num_tokens = 4, .num_q_heads = 8, .num_kv_heads = 2, .head_dim = 128,
                                     .rotary_dim = 130, .max_pos = 10, .is_neox = true, .dtype = KL_BF16};
        cr_expect_eq(f(&bad, 0), cudaErrorInvalidValue, "%s accepted rotary_dim > head_dim", v->name);
        bad.rotary_dim = 63;
        cr_expect_eq(f(&bad, 0), cudaErrorInvalidValue, "%s accepted an odd rotary_dim", v->name);
        bad.rotary_dim = 64; /* pointers unset with tokens to rotate */
        cr_expect_eq(f(&bad, 0), cudaErrorInvalidValue, "%s accepted NULL pointers", v->name);
    }
}

ParameterizedTestParameters(rope_gpu, positions_outside_the_cache_leave_the_token_unrotated)
{
    return kl_test_variants(false);
}

ParameterizedTest(int *i, rope_gpu, positions_outside_the_cache_leave_the_token_unrotated)
{
    const struct kl_variant *v = kl_variant_at("rope", *i, false);
    cr_log_info("variant %s", v->name);
    if (kl_test_skip_reason(v)) cr_skip_test("%s: %s", v->name, kl_test_skip_reason(v));
    struct kl_rope_problem *p = kl_rope_problem_random(4, 4, 2, 128, 128, 16, true, KL_BF16, 3);
    int64_t *pos = p->positions.data;
    pos[1] = 16, pos[3] = -1;
    struct kl_rope_params k;
    struct kl_err err;
    struct kl_outputs got = {0}, want = {0};
    cr_assert_eq(kl_tensor_upload(&kl_rope_ops, p, &k, &err), 0, "%s", err.msg);
    cr_assert_eq(((kl_rope_launch_fn)v->launch)(&k, 0), cudaSuccess);
    cr_assert_eq(kl_dev_sync(), 0, "%s: the device is in error after an out-of-range position", v->name);
    cr_assert_eq(kl_tensor_download(&kl_rope_ops, p, &k, &got, &err), 0, "%s", err.msg);
    kl_rope_expected(p, &want); /* the reference leaves those tokens alone too */
    for (int o = 0; o < 2; o++) {
        struct kl_cmp c;
        kl_compare(got.o[o].v, want.o[o].v, want.o[o].n, kl_policy_for(KL_BF16, false), &c);
        kl_cmp_print(stderr, want.o[o].name, &c);
        cr_expect(c.pass, "%s: %s differs from the reference", v->name, want.o[o].name);
    }
    kl_outputs_free(&got), kl_outputs_free(&want);
    kl_tensor_release(&kl_rope_ops, &k);
    kl_rope_problem_free(p);
}
