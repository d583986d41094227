/* allreduce tests of the fused all-reduce + residual add + RMSNorm (part of test_allreduce).
 * Suite `allreduce` (label cpu): plain and fused variants told apart and each skipping the other's
 * cases, the fused launcher's refusals, the fused catalogue, and a float32 model of the fused
 * kernel's arithmetic inside the fused bound. Suite `allreduce_multigpu` (labels multigpu and, with
 * every rank on GPU 0, gpu: ctest allreduce_shared_device): every fused variant on the fused
 * goldens, the fused catalogue, back-to-back calls and graph replays with a late rank, a second
 * stream; and every fused mutant (lab/allreduce/mutants_fused.cu) flagged. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "lab/allreduce/allreduce_module.h"
#include "lab/allreduce/fixed_sums.h"
#include "lab/core/testing.h"
#include "perf/bench.h"

/* ---- without a GPU ---- */

Test(allreduce, fused_and_plain_variants_are_told_apart)
{
    int fused = 0;
    for (int i = 0; i < kl_variant_count("allreduce", true); i++) {
        const struct kl_variant *v = kl_variant_at("allreduce", i, true);
        const struct kl_allreduce_ops *o = kl_ar_ops(v);
        cr_expect((o->launch != NULL) != (o->add_rmsnorm != NULL), "%s: exactly one of launch and add_rmsnorm", v->name);
        fused += !v->mutant && kl_ar_is_fused(v);
    }
    cr_assert(kl_ar_is_fused(kl_variant_find("allreduce", "v10_lamport_add_rmsnorm")));
    cr_assert(!kl_ar_is_fused(kl_variant_find("allreduce", "v8_lamport_pdl")));
    cr_assert_geq(fused, 1);
}

Test(allreduce, a_plain_variant_skips_fused_cases_and_a_fused_variant_skips_plain_ones)
{
    static const char *const kcases[2] = {"add_rmsnorm_bf16_world2_t4_h4096", "rand_bf16_world2_20000"};
    static const char *const kvariants[2] = {"v8_lamport_pdl", "v10_lamport_add_rmsnorm"};
    for (int k = 0; k < 2; k++) {
        char dir[1024];
        snprintf(dir, sizeof dir, KL_SOURCE_DIR "/golden/allreduce/%s", kcases[k]);
        struct kl_case c;
        struct kl_err err = {{0}};
        cr_assert_eq(kl_case_open(&c, dir, &err), 0, "%s", err.msg);
        struct kl_verdict vd;
        kl_verify_case(kl_module_find("allreduce"), &c, kl_variant_find("allreduce", kvariants[k]), &vd);
        cr_expect_eq(vd.status, KL_SKIP, "%s on %s: status %d (%s)", kvariants[k], kcases[k], vd.status, vd.why);
        cr_expect_str_eq(vd.why, k ? KL_AR_ONLY_FUSED : KL_AR_NOT_FUSED);
        kl_case_close(&c);
    }
}

Test(allreduce, the_fused_launcher_rejects_bad_params_without_launching)
{
    struct kl_allreduce_comm c = {.rank = 0, .world = 2, .blocks = 8, .capacity = 1 << 20};
    char buf[64];
    for (int i = 0; i < kl_variant_count("allreduce", true); i++) {
        const struct kl_variant *v = kl_variant_at("allreduce", i, true);
        if (!kl_ar_is_fused(v)) continue;
        kl_allreduce_add_rmsnorm_fn f = kl_ar_ops(v)->add_rmsnorm;
        const struct kl_allreduce_add_rmsnorm_params good = {{buf, buf, 8, KL_BF16, &c, NULL}, buf, buf, buf, 2, 4, 1e-6f};
        struct kl_allreduce_add_rmsnorm_params p = good;
        p.ar.comm = NULL;
        cr_expect_eq(f(&p, 0), cudaErrorInvalidValue, "%s accepted comm = NULL", v->name);
        p = good, p.hidden = 0, p.ar.n = 0;
        cr_expect_eq(f(&p, 0), cudaErrorInvalidValue, "%s accepted hidden = 0", v->name);
        p = good, p.ar.n = 9;
        cr_expect_eq(f(&p, 0), cudaErrorInvalidValue, "%s accepted n != num_tokens * hidden", v->name);
        p = good, p.residual = NULL;
        cr_expect_eq(f(&p, 0), cudaErrorInvalidValue, "%s accepted residual = NULL", v->name);
        p = good, p.eps = -1;
        cr_expect_eq(f(&p, 0), cudaErrorInvalidValue, "%s accepted eps < 0", v->name);
        p = good; /* staging and Lamport buffers are missing: refused, not dereferenced */
        cr_expect_eq(f(&p, 0), cudaErrorInvalidValue, "%s launched without a set-up communicator", v->name);
    }
}

Test(allreduce, fused_catalogue_covers_odd_rows_many_tokens_zero_rows_in_place_and_misalignment)
{
    int odd = 0, many = 0, in_place = 0, misaligned = 0, dtypes = 0, count = 0;
    for (int wi = 0; wi < 4; wi++) {
        char label[200];
        struct kl_ar_problem *p;
        for (int i = 0; (p = kl_ar_fused_catalogue(kl_ar_catalogue_worlds[wi], i, 3, label, sizeof label)); i++) {
            cr_assert(p->add_rmsnorm && p->n == p->num_tokens * p->hidden, "%s", label);
            odd += p->hidden % (int64_t)(16 / kl_dtype_size(p->dtype)) != 0, many += p->num_tokens > 160;
            in_place += p->in_place, misaligned += p->misaligned != 0, dtypes |= 1 << p->dtype, count++;
            kl_ar_problem_free(p);
        }
    }
    cr_assert(odd >= 12 && many >= 4 && in_place >= 4 && misaligned >= 4 && count >= 40, "%d odd, %d many", odd, many);
    cr_assert_eq(dtypes, (1 << KL_F32) | (1 << KL_F16) | (1 << KL_BF16));
}

/* The fused kernels' arithmetic in C (float32 throughout): the ranks' sum in rank order, rounded to
 * the dtype first when round_sum (our all-reduce then our add + RMSNorm, the composite the bench
 * compares with) or not (v10), plus the residual, rounded once for residual_out; out from the
 * float32 row through 1 / sqrtf(mean + eps), as rmsnorm's kernels. */
static void float32_model(const struct kl_ar_problem *p, bool round_sum, struct kl_outputs *got)
{
    kl_ar_reference(p, got); /* the shapes */
    const int64_t H = p->hidden, n = p->n;
    float *r = malloc(sizeof(float) * (size_t)H);
    for (int64_t t = 0; t < p->num_tokens; t++) {
        float sum_sq = 0;
        for (int64_t i = 0; i < H; i++) {
            const int64_t e = t * H + i;
            float acc = (float)kl_load_elem(p->dtype, p->x.data, (size_t)e);
            for (int s = 1; s < p->world; s++) acc += (float)kl_load_elem(p->dtype, p->x.data, (size_t)(s * n + e));
            if (round_sum) acc = (float)kl_round_to(p->dtype, acc);
            r[i] = acc + (float)kl_load_elem(p->dtype, p->residual.data, (size_t)e);
            got->o[1].v[e] = kl_round_to(p->dtype, r[i]);
            sum_sq += r[i] * r[i];
        }
        const float inv = 1.0f / sqrtf(sum_sq / (float)H + (float)p->eps);
        for (int64_t i = 0; i < H; i++)
            got->o[0].v[t * H + i] = kl_round_to(p->dtype, r[i] * inv * (float)kl_load_elem(p->dtype, p->weight.data, (size_t)i));
    }
    free(r);
}

Test(allreduce, a_float32_fused_kernel_passes_the_fused_bound_on_the_catalogue_and_a_lost_residual_fails_it)
{
    const uint64_t seed = kl_test_seed(stderr);
    for (int wi = 0; wi < 4; wi++) {
        char label[200];
        struct kl_ar_problem *p;
        for (int i = 0; (p = kl_ar_fused_catalogue(kl_ar_catalogue_worlds[wi], i, seed, label, sizeof label)); i++) {
            struct kl_outputs want = {0}, got = {0};
            kl_ar_reference(p, &want);
            for (int round_sum = 0; round_sum < 2; round_sum++) {
                float32_model(p, round_sum, &got);
                struct kl_cmp co, cr;
                kl_ar_fused_compare(p, &got, &want, false, &co, &cr);
                cr_expect(co.pass && cr.pass, "%s (sum %s): out %lld bad, residual_out %lld bad", label,
                          round_sum ? "rounded first" : "kept in float32", (long long)co.n_bad, (long long)cr.n_bad);
                kl_outputs_free(&got);
            }
            /* The residual forgotten in residual_out: both outputs move by about |residual|. */
            float32_model(p, false, &got);
            for (int64_t e = 0; e < p->n; e++) got.o[1].v[e] -= kl_load_elem(p->dtype, p->residual.data, (size_t)e);
            struct kl_cmp co, cr;
            kl_ar_fused_compare(p, &got, &want, false, &co, &cr);
            if (p->n >= 64) /* one element can be near zero; 64 of them are not all */
                cr_expect(!cr.pass, "%s: residual_out without the residual passed", label);
            kl_outputs_free(&got), kl_outputs_free(&want);
            kl_ar_problem_free(p);
        }
    }
}

/* The fused target (perf/targets/sm_90.csv): over_allreduce_us, the fused row's time minus the plain
 * all-reduce's of the same run, at most 0.5 us up to 512 KB; 1 MB is left ungated. */
Test(allreduce, the_fused_target_judges_the_time_over_the_plain_allreduce_and_smaller_passes)
{
    struct kl_targets t = {0};
    struct kl_err err = {{0}};
    cr_assert_eq(kl_targets_load(&t, KL_SOURCE_DIR "/perf/targets", 90, &err), 0, "%s", err.msg);
    cr_assert_eq(kl_targets_check(&t, &err), 0, "%s", err.msg);
    static const char *const kgated[] = {"add-rmsnorm-t1-h4096-world2", "add-rmsnorm-t16-h8192-world2",
                                         "add-rmsnorm-t64-h4096-world2"};
    for (size_t k = 0; k < sizeof kgated / sizeof *kgated; k++) {
        const struct kl_target *x = kl_target_find(&t, "allreduce", kgated[k]);
        cr_assert(x && strcmp(x->metric, "over_allreduce_us") == 0 && x->target == 0.5, "%s: no 0.5 us target", kgated[k]);
    }
    cr_assert_null(kl_target_find(&t, "allreduce", "add-rmsnorm-t64-h8192-world2"), "1 MB is over the issue's 512 KB");
    /* The gate judges one fused variant on the fused workloads (the plain gated one cannot run them). */
    for (size_t k = 0; k < sizeof kgated / sizeof *kgated; k++) {
        const char *g = kl_targets_gated_for(&t, "allreduce", kgated[k]);
        cr_assert(g && kl_ar_is_fused(kl_variant_find("allreduce", g)), "%s: judged on %s, not a fused variant", kgated[k],
                  g ? g : "nothing");
    }
    cr_assert_str_eq(kl_targets_gated_for(&t, "allreduce", "8KB-world2"), kl_targets_gated(&t, "allreduce"));
    struct kl_result r = {.module = "allreduce", .variant = "v12_lamport_add_rmsnorm_early", .workload = kgated[0],
                          .checked = true, .check_pass = true};
    r.extra = cJSON_CreateObject();
    cJSON_AddNumberToObject(r.extra, "over_allreduce_us", 0.7);
    kl_gate_judge(&t, &r);
    cr_assert(r.gate_metric && !r.gate_pass, "0.7 us over the plain all-reduce passed a 0.5 us target");
    cJSON_ReplaceItemInObject(r.extra, "over_allreduce_us", cJSON_CreateNumber(0.3));
    kl_gate_judge(&t, &r);
    cr_assert(r.gate_pass, "0.3 us over the plain all-reduce missed a 0.5 us target");
    cJSON_Delete(r.extra);
    kl_targets_free(&t);
}

/* v21's warp sum of a row's sum of squares (kernels/allreduce/fixed_sums.cuh, run on the host): the
 * same bits whatever the order of the 32 parts, within its bound of the exact sum (2^-21 for the
 * fixed point, 2^-24 for the one rounding, and what a subnormal result rounds), and a float sum's
 * infinities and NaN. Parts span exponents from subnormal to 2^40, zeros among them. */
static uint32_t xorshift(uint32_t *s)
{
    *s ^= *s << 13, *s ^= *s >> 17, *s ^= *s << 5;
    return *s;
}

Test(allreduce, fixed_point_warp_sums_are_order_free_and_within_their_bound)
{
    uint32_t seed = 12345;
    for (int set = 0; set < 2000; set++) {
        float v[32], shuffled[32];
        const int span = 1 + (int)(xorshift(&seed) % 180); /* binades between the largest and smallest */
        const int high = -140 + span + (int)(xorshift(&seed) % 40);
        double exact = 0;
        for (int i = 0; i < 32; i++) {
            const uint32_t r = xorshift(&seed);
            v[i] = r % 17 == 0 ? 0.f : ldexpf(1.f + (float)(r >> 9) * 0x1p-23f, high - (int)(r % (uint32_t)span));
            exact += v[i];
        }
        const float got = kl_ar_fixed_sum32(v);
        cr_assert(fabs(got - exact) <= (0x1p-21 + 0x1p-24) * exact + 0x1p-149, "set %d: %.9g, exact %.9g", set, got,
                  exact);
        for (int i = 0; i < 32; i++) /* another order: a rotation, then pairs swapped */
            shuffled[i] = v[((i + set) % 32) ^ 1];
        const float again = kl_ar_fixed_sum32(shuffled);
        cr_assert(memcmp(&got, &again, sizeof got) == 0, "set %d: %a in one order, %a in another", set, got, again);
    }
    float v[32] = {0};
    cr_assert(kl_ar_fixed_sum32(v) == 0.f && !signbit(kl_ar_fixed_sum32(v)), "32 zeros");
    v[3] = 0x1p-149f, v[9] = 0x1p-149f; /* subnormals add exactly */
    cr_assert_eq(kl_ar_fixed_sum32(v), 0x1p-148f);
    v[7] = 3.f;
    cr_assert_eq(kl_ar_fixed_sum32(v), 3.f, "2^-148 is below 3's scale");
    v[5] = INFINITY;
    cr_assert(isinf(kl_ar_fixed_sum32(v)));
    v[6] = NAN;
    cr_assert(isnan(kl_ar_fixed_sum32(v)));
    for (int i = 0; i < 32; i++)
        v[i] = 0x1.fffffep127f; /* the float sum overflows: so does this one */
    cr_assert(isinf(kl_ar_fixed_sum32(v)));
}

Test(allreduce, there_are_at_least_two_fused_mutants)
{
    int mutants = 0;
    for (int i = 0; i < kl_variant_count("allreduce", true); i++) {
        const struct kl_variant *v = kl_variant_at("allreduce", i, true);
        mutants += v->mutant && kl_ar_is_fused(v);
    }
    cr_assert_geq(mutants, 2);
}

/* ---- across GPUs (or every rank on GPU 0) ---- */

static int findices[32];

/* The fused variants (mutants: the fused mutants); KL_TEST_ONLY=TEXT[,TEXT...] narrows them by name. */
static struct criterion_test_params fused_variants(bool mutants)
{
    int m = 0;
    for (int i = 0; i < kl_variant_count("allreduce", mutants) && m < 32; i++) {
        const struct kl_variant *v = kl_variant_at("allreduce", i, mutants);
        if (v->mutant == (int)mutants && kl_ar_is_fused(v) && kl_test_wanted(v->name)) findices[m++] = i;
    }
    return cr_make_param_array(int, findices, (size_t)m);
}

static const struct kl_variant *fused_or_skip(int i, bool mutant, int world)
{
    const struct kl_variant *v = kl_variant_at("allreduce", i, mutant);
    cr_log_info("%s %s", mutant ? "mutant" : "variant", v->name);
    char why[256];
    if (kl_ar_skip_reason(v, world, why, sizeof why)) cr_skip_test("%s: %s", v->name, why);
    return v;
}

/* Fused multi-call jobs at world 2 through v: the problems found (bad elements, ranks disagreeing,
 * the run failing), the first described in msg. */
static int fused_jobs(const struct kl_variant *v, const struct kl_ar_job *jobs, int count, char *msg, size_t len)
{
    struct kl_ar_run run;
    struct kl_err err = {{0}};
    size_t bytes = 0;
    for (int k = 0; k < count; k++) bytes += kl_ar_job_bytes(&jobs[k], 2);
    cr_assert_eq(kl_ar_run_begin(&run, v, 2, bytes, &err), 0, "%s", err.msg);
    for (int k = 0; k < count; k++) cr_assert_geq(kl_ar_run_add(&run, &jobs[k], NULL), 0);
    int problems = 0;
    msg[0] = 0;
    if (kl_ar_run_go(&run, 240, &err)) snprintf(msg, len, "%s", err.msg), problems = 1;
    for (int k = 0; !problems && k < count; k++) {
        for (int r = 0; r < 2; r++)
            if (run.b->job[k].n_bad[r] && !problems++)
                snprintf(msg, len, "job %d, rank %d: %lld bad: %s", k, r, (long long)run.b->job[k].n_bad[r], run.b->job[k].note[r]);
        char why[256];
        if (!problems && kl_ar_run_identical(&run, k, why, sizeof why)) snprintf(msg, len, "job %d: %s", k, why), problems++;
    }
    kl_ar_run_end(&run);
    return problems;
}

/* The graph job first: its capture comes before any eager call on the communicator. */
static const struct kl_ar_job kfused_jobs[] = {
    {.scenario = KL_AR_GRAPH, .dtype = KL_BF16, .n = 4 * 4096, .hidden = 4096, .eps = 1e-6, .calls = 300, .per_graph = 10, .late = 1, .seed = 51},
    {.scenario = KL_AR_REPEAT, .dtype = KL_BF16, .n = 4096, .hidden = 4096, .eps = 1e-6, .calls = 500, .late = 1, .seed = 52},
    {.scenario = KL_AR_REPEAT, .dtype = KL_F16, .n = 3 * 4100, .hidden = 4100, .eps = 1e-6, .calls = 100, .late = 1, .seed = 53},
    {.scenario = KL_AR_REPEAT, .dtype = KL_F32, .n = 5 * 999, .hidden = 999, .eps = 1e-6, .calls = 100, .late = 1, .seed = 54, .in_place = 1},
    {.scenario = KL_AR_REPEAT, .dtype = KL_BF16, .n = 2 * 1024, .hidden = 1024, .eps = 1e-6, .calls = 100, .late = 1, .seed = 55, .misaligned = 2},
    /* rows cut over a cluster of blocks (v18), several rows a cluster: its per-row sums' mbarriers reused */
    {.scenario = KL_AR_REPEAT, .dtype = KL_BF16, .n = 200 * 8192, .hidden = 8192, .eps = 1e-6, .calls = 100, .late = 1, .seed = 57},
    {.scenario = KL_AR_STREAMS, .dtype = KL_BF16, .n = 2 * 512, .hidden = 512, .eps = 1e-6, .seed = 56},
};
#define N_FUSED_JOBS ((int)(sizeof kfused_jobs / sizeof kfused_jobs[0]))

ParameterizedTestParameters(allreduce_multigpu, every_fused_variant_matches_the_fused_goldens) { return fused_variants(false); }

ParameterizedTest(int *i, allreduce_multigpu, every_fused_variant_matches_the_fused_goldens)
{
    const struct kl_variant *v = fused_or_skip(*i, false, 2);
    int skipped = 0, failures = kl_ar_goldens(v, stderr, &skipped);
    cr_assert(failures >= 0, "no golden cases");
    cr_assert_eq(failures, 0, "%s: %d golden cases failed (lines above)", v->name, failures);
    cr_log_info("%d cases skipped: plain all-reduce cases, or more ranks than this machine runs", skipped);
}

ParameterizedTestParameters(allreduce_multigpu, every_fused_variant_matches_the_reference_on_the_fused_catalogue)
{
    return fused_variants(false);
}

ParameterizedTest(int *i, allreduce_multigpu, every_fused_variant_matches_the_reference_on_the_fused_catalogue)
{
    const struct kl_variant *v = fused_or_skip(*i, false, 2);
    int failures = kl_check_module(kl_module_find("allreduce"), v, kl_test_seed(stderr), stderr);
    cr_assert_eq(failures, 0, "%s: %d problems failed (lines above)", v->name, failures);
}

ParameterizedTestParameters(allreduce_multigpu, every_fused_variant_survives_back_to_back_calls_and_graph_replays_with_a_late_rank)
{
    return fused_variants(false);
}

ParameterizedTest(int *i, allreduce_multigpu, every_fused_variant_survives_back_to_back_calls_and_graph_replays_with_a_late_rank)
{
    const struct kl_variant *v = fused_or_skip(*i, false, 2);
    char msg[768];
    cr_assert_eq(fused_jobs(v, kfused_jobs, N_FUSED_JOBS, msg, sizeof msg), 0, "%s: %s", v->name, msg);
}

ParameterizedTestParameters(allreduce_multigpu, a_pdl_consumer_reads_the_finished_fused_outputs) { return fused_variants(false); }

ParameterizedTest(int *i, allreduce_multigpu, a_pdl_consumer_reads_the_finished_fused_outputs)
{
    const struct kl_variant *v = fused_or_skip(*i, false, 2);
    if (kl_ar_machine()->dev[0].cc < 90) cr_skip_test("programmatic dependent launch needs sm_90");
    const struct kl_ar_job job = {.scenario = KL_AR_PDL, .dtype = KL_BF16, .n = 16 * 4096, .hidden = 4096, .eps = 1e-6,
                                  .calls = 200, .late = 1, .seed = 57};
    char msg[768];
    cr_assert_eq(fused_jobs(v, &job, 1, msg, sizeof msg), 0, "%s: %s", v->name, msg);
}

ParameterizedTestParameters(allreduce_multigpu, every_fused_mutant_is_flagged) { return fused_variants(true); }

ParameterizedTest(int *i, allreduce_multigpu, every_fused_mutant_is_flagged)
{
    const struct kl_variant *v = fused_or_skip(*i, true, 2);
    setenv("KL_AR_SPIN_TIMEOUT_S", "10", 1); /* a mutant that hangs is caught by the device-side wait */
    int skipped = 0, flagged = kl_ar_goldens(v, stderr, &skipped);
    cr_log_info("fused goldens: %d flagged", flagged);
    const int by_catalogue = kl_check_module(kl_module_find("allreduce"), v, kl_test_seed(stderr), stderr);
    cr_log_info("fused catalogue: %d flagged", by_catalogue);
    char msg[768];
    const int by_calls = fused_jobs(v, kfused_jobs + 1, 2, msg, sizeof msg);
    cr_log_info("back to back: %s", msg);
    cr_assert_gt(flagged + by_catalogue + by_calls, 0,
                 "mutant %s passed the fused goldens, the fused catalogue and back-to-back calls", v->name);
}
