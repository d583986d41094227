/* allreduce tests. Suite `allreduce` runs anywhere (label cpu): the reference against the goldens,
 * the tolerance, and the rank machinery (processes that succeed, exit early, crash or hang).
 * Suite `allreduce_multigpu` runs every variant across GPUs (label multigpu; ctest skips it
 * below 2 GPUs, and each test skips itself when this machine has too few).
 *
 * This binary has its own main: the ranks a test starts are copies of this binary (the mutants
 * live only here), entered through kl_rank_main before Criterion sees the arguments. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "lab/allreduce/allreduce_module.h"
#include "lab/core/testing.h"
#include "reference/allreduce.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the reference and the goldens ---- */

Test(allreduce, reference_matches_every_golden_case)
{
    int failures = kl_test_goldens("allreduce", NULL, stderr);
    cr_assert(failures >= 0, "no golden cases found under golden/allreduce");
    cr_assert_eq(failures, 0, "%d golden cases failed (lines above)", failures);
}

Test(allreduce, reference_sums_rows_in_rank_order_and_keeps_negative_zero)
{
    /* world 3, n 3: columns 1+2+3, -0-0-0 (IEEE: -0), 0.5-0.5+0 (+0) */
    const double x[9] = {1, -0.0, 0.5, 2, -0.0, -0.5, 3, -0.0, 0.0};
    double out[3];
    kl_allreduce_reference(x, 3, 3, out);
    cr_assert_eq(out[0], 6.0);
    cr_assert(out[1] == 0 && signbit(out[1]), "-0 + -0 + -0 gave %g (sign %d)", out[1], signbit(out[1]));
    cr_assert(out[2] == 0 && !signbit(out[2]), "0.5 - 0.5 + 0 gave -0");
}

/* Golden case `name` of golden/allreduce through the module's loader (c stays open: close it). */
static struct kl_ar_problem *load_golden(const char *name, struct kl_case *c, struct kl_outputs *want)
{
    char dir[1024];
    snprintf(dir, sizeof dir, KL_SOURCE_DIR "/golden/allreduce/%s", name);
    struct kl_err err = {{0}};
    cr_assert_eq(kl_case_open(c, dir, &err), 0, "%s", err.msg);
    struct kl_ar_problem *p = kl_module_find("allreduce")->tensor->load(c, want, &err);
    cr_assert(p, "%s: %s", name, err.msg);
    return p;
}

Test(allreduce, goldens_cover_the_worlds_dtypes_and_sizes_the_issue_asks_for)
{
    const struct kl_module *m = kl_module_find("allreduce");
    int worlds = 0, dtypes = 0, one = 0, odd = 0, large = 0, exact = 0, random = 0, cases = 0;
    const char *names[] = {"int_bf16_world2_n1", "int_fp16_world3_signed_zeros", "rand_fp32_world8_n7",
                           "rand_bf16_world2_20000", "rand_fp16_world4_odd_2047", "int_fp32_world4_odd_777",
                           "rand_bf16_world3_odd_1031", "int_bf16_world8_odd_33"};
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
        struct kl_case c;
        struct kl_outputs want = {0};
        struct kl_ar_problem *p = load_golden(names[k], &c, &want);
        worlds |= 1 << p->world, dtypes |= 1 << p->dtype;
        one += p->n == 1, odd += p->n % 2 == 1, large += p->n >= 10000;
        exact += want.o[0].exact, random += !want.o[0].exact, cases++;
        m->tensor->free(p);
        kl_outputs_free(&want);
        kl_case_close(&c);
    }
    cr_assert_eq(worlds, (1 << 2) | (1 << 3) | (1 << 4) | (1 << 8), "worlds 2, 3, 4 and 8 (got mask %#x)", worlds);
    cr_assert_eq(dtypes, (1 << KL_F32) | (1 << KL_F16) | (1 << KL_BF16));
    cr_assert(one && odd >= 3 && large && exact >= 2 && random >= 2 && cases >= 6);
}

/* ---- the fused all-reduce + residual add + RMSNorm ---- */

/* Reference mutants, each a mistake a fused kernel could make, planted in a copy of the
 * reference (the rank sum, then reference/rmsnorm's math with the mistake). */
enum fused_mutant { F_NONE, F_NO_RESIDUAL, F_NO_WEIGHT, F_EPS_OUTSIDE_SQRT, F_SUM_IN_DTYPE, F_LAST_RANK_DROPPED, F_COUNT };
static const char *const kfused_mutant[F_COUNT] = {"none", "residual not added", "weight not applied",
                                                   "eps added outside the sqrt", "rank sum accumulated in the dtype",
                                                   "last rank dropped"};

static void fused_mutant(enum fused_mutant m, const struct kl_ar_problem *p, struct kl_outputs *got)
{
    kl_ar_reference(p, got); /* shapes and names; the values are recomputed below */
    const int64_t H = p->hidden, n = p->n;
    double *x = kl_tensor_to_f64(&p->x), *res = kl_tensor_to_f64(&p->residual), *w = kl_tensor_to_f64(&p->weight);
    double *out = got->o[0].v, *ro = got->o[1].v;
    for (int64_t t = 0; t < p->num_tokens; t++) {
        double sum_sq = 0;
        for (int64_t i = 0; i < H; i++) {
            const int64_t e = t * H + i;
            double s = x[e];
            for (int r = 1; r < p->world - (m == F_LAST_RANK_DROPPED); r++)
                s = m == F_SUM_IN_DTYPE ? kl_round_to(p->dtype, s + x[r * n + e]) : s + x[r * n + e];
            ro[e] = m == F_NO_RESIDUAL ? s : s + res[e];
            sum_sq += ro[e] * ro[e];
        }
        const double ms = sum_sq / (double)H;
        const double inv = m == F_EPS_OUTSIDE_SQRT ? 1 / (sqrt(ms) + p->eps) : 1 / sqrt(ms + p->eps);
        for (int64_t i = 0; i < H; i++) out[t * H + i] = ro[t * H + i] * inv * (m == F_NO_WEIGHT ? 1 : w[i]);
    }
    free(x), free(res), free(w);
}

/* Every fused golden through mutant m: how many cases it fails, under the reference's policy
 * (as `kernlab verify --reference` judges) or under the fused bound a variant gets. */
static int fused_failures(enum fused_mutant m, bool variant_bound, int *cases, int *worlds, int *dtypes, int *odd)
{
    const char *names[] = {"add_rmsnorm_bf16_world2_t4_h4096", "add_rmsnorm_fp16_world4_t3_odd_h4100",
                           "add_rmsnorm_fp32_world8_t1_h4096", "add_rmsnorm_bf16_world8_t64_h64",
                           "add_rmsnorm_fp16_world2_t17_h256"};
    int failed = 0;
    *cases = *worlds = *dtypes = *odd = 0;
    for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
        struct kl_case c;
        struct kl_outputs want = {0}, got = {0};
        struct kl_ar_problem *p = load_golden(names[k], &c, &want);
        cr_assert(p->add_rmsnorm && want.count == 2, "%s: not a fused case with out and residual_out", names[k]);
        fused_mutant(m, p, &got);
        struct kl_verdict vd;
        struct kl_cmp co, cr;
        if (variant_bound) kl_ar_fused_compare(p, &got, &want, true, &co, &cr);
        else kl_compare_outputs(&got, &want, true, &vd);
        const bool pass = variant_bound ? co.pass && cr.pass : vd.status == KL_PASS;
        if (!pass && m != F_NONE && k == 0)
            cr_log_info("%s on %s: %s", kfused_mutant[m], names[k], variant_bound ? "out of the fused bound" : vd.why);
        if (!pass && m == F_NONE) fprintf(stderr, "%s: %s\n", names[k], variant_bound ? "fused bound" : vd.why);
        failed += !pass, (*cases)++;
        *worlds |= 1 << p->world, *dtypes |= 1 << p->dtype, *odd += p->hidden % 8 != 0;
        kl_outputs_free(&got), kl_outputs_free(&want), kl_ar_problem_free(p);
        kl_case_close(&c);
    }
    return failed;
}

Test(allreduce, fused_goldens_cover_worlds_2_4_8_every_dtype_and_an_odd_hidden)
{
    int cases, worlds, dtypes, odd;
    cr_assert_eq(fused_failures(F_NONE, false, &cases, &worlds, &dtypes, &odd), 0, "the reference fails (lines above)");
    cr_assert_eq(worlds, (1 << 2) | (1 << 4) | (1 << 8), "worlds 2, 4 and 8 (got mask %#x)", worlds);
    cr_assert_eq(dtypes, (1 << KL_F32) | (1 << KL_F16) | (1 << KL_BF16));
    cr_assert(odd >= 1 && cases >= 5);
}

Test(allreduce, fused_reference_matches_its_goldens_and_every_reference_mutant_fails_them)
{
    int cases, worlds, dtypes, odd;
    cr_assert_eq(fused_failures(F_NONE, false, &cases, &worlds, &dtypes, &odd), 0, "the reference fails (lines above)");
    for (int m = 1; m < F_COUNT; m++) {
        const int failed = fused_failures(m, false, &cases, &worlds, &dtypes, &odd);
        cr_assert_eq(failed, cases, "mutant '%s' passes %d of %d fused goldens", kfused_mutant[m], cases - failed, cases);
    }
}

/* A fused case whose params disagree with its arrays, or name an unknown op, fails to load with a
 * message naming what is wrong (kernlab verify prints it as one FAIL line). */
Test(allreduce, a_malformed_fused_case_is_refused_with_the_reason)
{
    static const char *const metas[2][2] = {
        {"\"op\": \"add_rmsnorm\", \"world\": 2, \"tokens\": 5, \"hidden\": 4096", "tokens 5"},
        {"\"op\": \"add_layernorm\", \"world\": 2", "params.op"}};
    for (int k = 0; k < 2; k++) {
        char dir[] = "/tmp/kl_fused_XXXXXX", cmd[2048], path[64];
        cr_assert(mkdtemp(dir));
        snprintf(cmd, sizeof cmd, "cp %s/golden/allreduce/add_rmsnorm_bf16_world2_t4_h4096/*.npy %s", KL_SOURCE_DIR, dir);
        cr_assert_eq(system(cmd), 0);
        snprintf(path, sizeof path, "%s/meta.json", dir);
        FILE *f = fopen(path, "w");
        fprintf(f, "{\"module\": \"allreduce\", \"dtype\": \"bf16\", \"params\": {%s}}\n", metas[k][0]);
        fclose(f);
        struct kl_case c;
        struct kl_err err = {{0}};
        struct kl_outputs want = {0};
        cr_assert_eq(kl_case_open(&c, dir, &err), 0, "%s", err.msg);
        cr_assert_null(kl_module_find("allreduce")->tensor->load(&c, &want, &err), "%s loaded", metas[k][0]);
        cr_assert(strstr(err.msg, metas[k][1]), "the message '%s' does not name '%s'", err.msg, metas[k][1]);
        kl_case_close(&c);
        snprintf(cmd, sizeof cmd, "rm -r %s", dir);
        cr_assert_eq(system(cmd), 0);
    }
}

/* The fused bound a variant will get: it admits the reference and a sum rounded to the dtype at
 * every step (NCCL's way, legal as for the plain all-reduce) and rejects the gross mistakes. */
Test(allreduce, fused_bound_admits_a_sum_kept_in_the_dtype_and_rejects_lost_terms)
{
    int cases, worlds, dtypes, odd;
    cr_assert_eq(fused_failures(F_NONE, true, &cases, &worlds, &dtypes, &odd), 0);
    cr_assert_eq(fused_failures(F_SUM_IN_DTYPE, true, &cases, &worlds, &dtypes, &odd), 0);
    const enum fused_mutant gross[] = {F_NO_RESIDUAL, F_NO_WEIGHT, F_LAST_RANK_DROPPED};
    for (int k = 0; k < 3; k++)
        cr_assert_eq(fused_failures(gross[k], true, &cases, &worlds, &dtypes, &odd), cases, "mutant '%s'",
                     kfused_mutant[gross[k]]);
}

/* ---- the tolerance ---- */

/* Rounds like NCCL's ring: each partial sum rounded to the dtype, starting at rank `start`. */
static double ring_sum(const double *x, int world, int64_t n, int64_t i, int start, enum kl_dtype t)
{
    double acc = x[start * n + i];
    for (int k = 1; k < world; k++) acc = kl_round_to(t, (double)(float)(acc + x[((start + k) % world) * n + i]));
    return acc;
}

Test(allreduce, bound_admits_a_ring_that_rounds_every_partial_sum)
{
    const enum kl_dtype types[3] = {KL_BF16, KL_F16, KL_F32};
    struct kl_rng rng;
    kl_rng_seed(&rng, 42);
    for (int ti = 0; ti < 3; ti++)
        for (int world = 2; world <= 8; world++) {
            const int64_t n = 5000;
            double *x = malloc(sizeof(double) * (size_t)(world * n)), *got = malloc(sizeof(double) * (size_t)n);
            for (int64_t k = 0; k < world * n; k++) x[k] = kl_round_to(types[ti], kl_rng_normal(&rng) * 3);
            for (int start = 0; start < world; start++) {
                for (int64_t i = 0; i < n; i++) got[i] = ring_sum(x, world, n, i, start, types[ti]);
                struct kl_cmp c;
                kl_ar_compare(got, NULL, x, world, n, types[ti], false, &c);
                cr_assert(c.pass, "%s world %d: a ring from rank %d fails the bound at element %lld (%g vs %g)",
                          kl_dtype_name(types[ti]), world, start, (long long)c.first[0].index, c.first[0].got,
                          c.first[0].want);
            }
            free(x), free(got);
        }
}

/* Element i summed over the ranks in rank order and rounded once to t: in float32 then to nearest
 * (a correct kernel), or exactly then toward zero (the mutant the bias check is for). */
static double rank_sum(const double *x, int world, int64_t n, int64_t i, enum kl_dtype t, bool toward_zero)
{
    float acc = (float)x[i];
    double exact = x[i];
    for (int r = 1; r < world; r++) acc += (float)x[r * n + i], exact += x[r * n + i];
    return toward_zero ? kl_test_round_toward_zero(t, exact) : kl_round_to(t, acc);
}

/* A sum rounded toward zero errs by up to one unit in the last place, always the same way: inside
 * the element bound from world 3 on, but not inside the bias check's limit, at any world size. */
Test(allreduce, a_sum_rounded_toward_zero_fails_at_every_world_size)
{
    const uint64_t seed = kl_test_seed(stderr);
    for (int wi = 0; wi < 4; wi++) {
        const int world = kl_ar_catalogue_worlds[wi];
        char label[200];
        struct kl_ar_problem *p = kl_ar_catalogue(world, 12, seed, label, sizeof label); /* 64k + 3, random bf16 */
        cr_assert(p && strstr(label, "65539"), "catalogue entry 12 is %s", label);
        double *x = kl_tensor_to_f64(&p->x), *got = malloc(sizeof(double) * (size_t)p->n);
        struct kl_cmp c;
        for (int64_t i = 0; i < p->n; i++) got[i] = rank_sum(x, world, p->n, i, p->dtype, false);
        kl_ar_compare(got, NULL, x, world, p->n, p->dtype, false, &c);
        cr_expect(c.pass, "world %d: a correct sum fails: bias %.3g (limit %.3g)", world, c.bias, c.bias_limit);
        for (int64_t i = 0; i < p->n; i++) got[i] = rank_sum(x, world, p->n, i, p->dtype, true);
        kl_ar_compare(got, NULL, x, world, p->n, p->dtype, false, &c);
        fprintf(stderr, "round_toward_zero world %d (%s): %lld elements out of bounds, bias %.3g (limit %.3g)\n", world,
                label, (long long)c.n_bad, c.bias, c.bias_limit);
        cr_expect(!c.pass && fabs(c.bias) > c.bias_limit, "world %d: a sum rounded toward zero passed", world);
        free(x), free(got);
        kl_ar_problem_free(p);
    }
    /* And on the one golden of random sums big enough for it (world 2, 20000 sums); a correct sum
     * passes every random golden. */
    const char *kgoldens[] = {"rand_bf16_world2_20000", "rand_bf16_world3_odd_1031", "rand_fp16_world4_odd_2047",
                              "rand_fp32_world8_n7"};
    for (size_t k = 0; k < sizeof kgoldens / sizeof *kgoldens; k++) {
        char dir[1024];
        snprintf(dir, sizeof dir, KL_SOURCE_DIR "/golden/allreduce/%s", kgoldens[k]);
        struct kl_case c;
        struct kl_err err = {{0}};
        struct kl_outputs want = {0};
        cr_assert_eq(kl_case_open(&c, dir, &err), 0, "%s", err.msg);
        struct kl_ar_problem *p = kl_module_find("allreduce")->tensor->load(&c, &want, &err);
        cr_assert(p, "%s", err.msg);
        double *x = kl_tensor_to_f64(&p->x), *got = malloc(sizeof(double) * (size_t)p->n);
        struct kl_cmp c1;
        for (int64_t i = 0; i < p->n; i++) got[i] = rank_sum(x, p->world, p->n, i, p->dtype, true);
        kl_ar_compare(got, want.o[0].v, x, p->world, p->n, p->dtype, false, &c1);
        fprintf(stderr, "round_toward_zero on golden %s: %lld elements out of bounds, bias %.3g (limit %.3g)\n",
                kgoldens[k], (long long)c1.n_bad, c1.bias, c1.bias_limit);
        if (k == 0) cr_expect(!c1.pass, "%s: a sum rounded toward zero passed", kgoldens[k]);
        for (int64_t i = 0; i < p->n; i++) got[i] = rank_sum(x, p->world, p->n, i, p->dtype, false);
        kl_ar_compare(got, want.o[0].v, x, p->world, p->n, p->dtype, false, &c1);
        cr_expect(c1.pass, "%s: a correct sum fails: bias %.3g (limit %.3g)", kgoldens[k], c1.bias, c1.bias_limit);
        free(x), free(got);
        kl_ar_problem_free(p);
        kl_outputs_free(&want);
        kl_case_close(&c);
    }
}

Test(allreduce, bound_rejects_a_missing_contribution_and_a_nan)
{
    struct kl_rng rng;
    kl_rng_seed(&rng, 7);
    const int world = 2;
    const int64_t n = 1000;
    double x[2000], got[1000];
    for (int k = 0; k < world * n; k++) x[k] = kl_round_to(KL_BF16, kl_rng_normal(&rng));
    for (int64_t i = 0; i < n; i++) got[i] = kl_round_to(KL_BF16, x[i]); /* rank 1 forgotten */
    struct kl_cmp c;
    kl_ar_compare(got, NULL, x, world, n, KL_BF16, false, &c);
    cr_assert(!c.pass && c.n_bad > n * 9 / 10, "only %lld of %lld elements flagged", (long long)c.n_bad, (long long)n);
    for (int64_t i = 0; i < n; i++) got[i] = kl_round_to(KL_BF16, x[i] + x[n + i]);
    got[17] = NAN;
    kl_ar_compare(got, NULL, x, world, n, KL_BF16, false, &c);
    cr_assert(!c.pass && c.n_bad == 1 && c.first[0].index == 17);
}

Test(allreduce, integer_inputs_are_exact_and_the_sign_of_zero_counts)
{
    const double x[4] = {-0.0, 3, -0.0, -3}; /* world 2, n 2: sums -0 and 0 */
    cr_assert(kl_ar_exact_inputs(x, 2, 2, KL_BF16));
    const double good[2] = {-0.0, 0.0}, bad[2] = {0.0, 0.0};
    struct kl_cmp c;
    kl_ar_compare(good, NULL, x, 2, 2, KL_BF16, true, &c);
    cr_assert(c.pass);
    kl_ar_compare(bad, NULL, x, 2, 2, KL_BF16, true, &c);
    cr_assert(!c.pass && c.first[0].index == 0, "+0 where the sum is -0 must fail an exact check");
    const double big[2] = {200, 100}; /* 300 > 256: bf16 cannot hold every partial sum exactly */
    cr_assert(!kl_ar_exact_inputs(big, 2, 1, KL_BF16));
    cr_assert(kl_ar_exact_inputs(big, 2, 1, KL_F16));
    const double half[2] = {0.5, 1};
    cr_assert(!kl_ar_exact_inputs(half, 2, 1, KL_F32));
}

Test(allreduce, catalogue_covers_every_world_and_the_edges)
{
    int in_place = 0, misaligned = 0, one_rank_misaligned = 0, ones = 0, tails = 0;
    for (int wi = 0; wi < 4; wi++) {
        char label[160];
        struct kl_ar_problem *p;
        for (int i = 0; (p = kl_ar_catalogue(kl_ar_catalogue_worlds[wi], i, 5, label, sizeof label)); i++) {
            cr_assert_eq(p->world, kl_ar_catalogue_worlds[wi], "%s", label);
            in_place += p->in_place, misaligned += p->misaligned != 0, ones += p->n == 1;
            one_rank_misaligned += p->misaligned == 2;
            tails += p->n % (int64_t)(16 / kl_dtype_size(p->dtype)) != 0;
            kl_ar_problem_free(p);
        }
    }
    cr_assert(in_place >= 8 && misaligned >= 8 && one_rank_misaligned >= 4 && ones >= 4 && tails >= 8);
}

/* ---- the rank machinery (no GPU) ---- */

enum { ST_OK, ST_EXIT, ST_HANG, ST_CRASH };

struct selftest {
    int mode[KL_RANKS_MAX];
    int result[KL_RANKS_MAX], total[KL_RANKS_MAX];
    char nvls[KL_RANKS_MAX][16];
};

static int selftest_main(struct kl_rank *r)
{
    struct selftest *t = r->payload;
    const char *nvls = getenv("NCCL_NVLS_ENABLE");
    snprintf(t->nvls[r->rank], sizeof t->nvls[0], "%s", nvls ? nvls : "(unset)");
    if (kl_rank_barrier(r, "start")) return -1;
    switch (t->mode[r->rank]) {
    case ST_EXIT: kl_rank_step(r, "about to exit early"); exit(3);
    case ST_HANG:
        kl_rank_step(r, "hanging on purpose");
        for (;;) pause();
    case ST_CRASH: kl_rank_step(r, "about to crash"); raise(SIGSEGV); break;
    default: break;
    }
    t->result[r->rank] = r->rank * r->rank + 1;
    if (kl_rank_barrier(r, "after the work")) return -1;
    for (int k = 0; k < r->world; k++) t->total[r->rank] += t->result[k]; /* everyone's, via the mapping */
    return 0;
}

KL_RANK_PROGRAM("selftest", selftest_main);

static int run_selftest(int world, const int *modes, double timeout, struct selftest *out, char *msg, double *took)
{
    struct kl_ranks g;
    struct kl_err err = {{0}};
    cr_assert_eq(kl_ranks_create(&g, world, sizeof(struct selftest), &err), 0, "%s", err.msg);
    struct selftest *t = g.payload;
    for (int r = 0; r < world; r++) t->mode[r] = modes ? modes[r] : ST_OK;
    const double t0 = now_s();
    int rc = kl_ranks_run(&g, "selftest", timeout, &err);
    *took = now_s() - t0;
    *out = *t;
    snprintf(msg, 512, "%s", err.msg);
    kl_ranks_destroy(&g);
    return rc;
}

Test(allreduce, ranks_that_succeed_pass_results_through_the_mapping)
{
    setenv("NCCL_NVLS_ENABLE", "1", 1); /* the ranks must run with it off whatever the parent has */
    struct selftest t;
    char msg[512];
    double took;
    int rc = run_selftest(4, NULL, 20, &t, msg, &took);
    cr_assert_eq(rc, 0, "%s", msg);
    for (int r = 0; r < 4; r++) {
        cr_assert_eq(t.result[r], r * r + 1);
        cr_assert_eq(t.total[r], 1 + 2 + 5 + 10, "rank %d saw %d", r, t.total[r]);
        cr_assert_str_eq(t.nvls[r], "0", "rank %d ran with NCCL_NVLS_ENABLE=%s", r, t.nvls[r]);
    }
    /* A second run on the same mapping starts clean. */
    rc = run_selftest(2, NULL, 20, &t, msg, &took);
    cr_assert_eq(rc, 0, "%s", msg);
}

Test(allreduce, a_rank_that_exits_early_fails_the_run_and_is_named)
{
    const int modes[3] = {ST_OK, ST_EXIT, ST_OK};
    struct selftest t;
    char msg[512];
    double took;
    /* 300 s: the others' barrier would give up after 240; they must stop long before, on the
     * abort flag, however loaded the machine (no verdict on seconds). */
    cr_assert_neq(run_selftest(3, modes, 300, &t, msg, &took), 0);
    cr_log_info("%s", msg);
    cr_assert(strstr(msg, "rank 1 exited with status 3 at step 'about to exit early'"), "message: %s", msg);
    cr_assert_lt(took, 240, "the other ranks waited %.1f s, their barrier's whole limit, for a rank that was gone",
                 took);
}

Test(allreduce, a_rank_that_hangs_is_killed_and_named_at_its_step)
{
    const int modes[3] = {ST_OK, ST_OK, ST_HANG};
    struct selftest t;
    char msg[512];
    double took;
    cr_assert_neq(run_selftest(3, modes, 2, &t, msg, &took), 0);
    cr_log_info("%s", msg);
    cr_assert(strstr(msg, "rank 2") && strstr(msg, "hanging on purpose"), "message: %s", msg);
    cr_assert_geq(took, 1.5, "the run took %.1f s with a 2 s timeout", took); /* it did wait */
}

Test(allreduce, a_rank_that_crashes_is_named_with_its_signal)
{
    const int modes[2] = {ST_CRASH, ST_OK};
    struct selftest t;
    char msg[512];
    double took;
    cr_assert_neq(run_selftest(2, modes, 300, &t, msg, &took), 0);
    cr_assert(strstr(msg, "rank 0 was killed by signal 11") && strstr(msg, "about to crash"), "message: %s", msg);
    cr_assert_lt(took, 240, "rank 1 waited out its barrier's limit (%.1f s)", took);
}

Test(allreduce, an_unknown_rank_program_is_reported)
{
    struct kl_ranks g;
    struct kl_err err = {{0}};
    cr_assert_eq(kl_ranks_create(&g, 2, 64, &err), 0);
    cr_assert_neq(kl_ranks_run(&g, "no_such_program", 20, &err), 0);
    cr_assert(strstr(err.msg, "no rank program 'no_such_program'"), "message: %s", err.msg);
    kl_ranks_destroy(&g);
}

/* ---- checks that need no GPU ---- */

Test(allreduce, the_ranks_bits_are_compared_and_one_differing_bit_fails)
{
    const struct kl_variant *v = kl_variant_at("allreduce", 0, false);
    struct kl_ar_problem *p = kl_ar_problem_new(2, 5, KL_BF16);
    struct kl_ar_run run;
    struct kl_err err = {{0}};
    struct kl_ar_job job = {.scenario = KL_AR_ONCE, .dtype = KL_BF16, .n = 5};
    cr_assert_eq(kl_ar_run_begin(&run, v, 2, kl_ar_job_bytes(&job, 2), &err), 0, "%s", err.msg);
    cr_assert_eq(kl_ar_run_add(&run, &job, p), 0);
    /* Pretend both ranks wrote the same output... */
    uint16_t *out = (uint16_t *)(run.data + run.b->job[0].out_off);
    for (int k = 0; k < 10; k++) out[k] = (uint16_t)(0x3f80 + k % 5);
    char why[256];
    cr_assert_eq(kl_ar_run_identical(&run, 0, why, sizeof why), 0, "%s", why);
    out[5 + 3] ^= 1; /* ...then rank 1's element 3 differs in its last bit */
    cr_assert_neq(kl_ar_run_identical(&run, 0, why, sizeof why), 0);
    cr_assert(strstr(why, "rank 1's out[3]"), "%s", why);
    kl_ar_run_end(&run);
    kl_ar_problem_free(p);
}

Test(allreduce, launchers_reject_bad_params_without_launching)
{
    struct kl_allreduce_comm c = {.rank = 0, .world = 2, .blocks = 8, .capacity = 1024};
    char buf[64];
    for (int i = 0; i < kl_variant_count("allreduce", false); i++) {
        const struct kl_variant *v = kl_variant_at("allreduce", i, false);
        kl_allreduce_launch_fn f = kl_ar_ops(v)->launch;
        if (!f) continue; /* a fused variant: test_allreduce_fused.c */
        struct kl_allreduce_params p = {buf, buf, 4, KL_BF16, NULL, NULL};
        cr_expect_eq(f(&p, 0), cudaErrorInvalidValue, "%s accepted comm = NULL", v->name);
        p.comm = &c, p.n = -1;
        cr_expect_eq(f(&p, 0), cudaErrorInvalidValue, "%s accepted n = -1", v->name);
        p.n = 4, p.dtype = KL_I32;
        cr_expect_eq(f(&p, 0), cudaErrorInvalidValue, "%s accepted dtype i32", v->name);
        p.dtype = KL_BF16, p.x = NULL;
        cr_expect_eq(f(&p, 0), cudaErrorInvalidValue, "%s accepted x = NULL", v->name);
        p.x = buf; /* staging pointers and the NCCL communicator are missing: refused, not dereferenced */
        cr_expect_eq(f(&p, 0), cudaErrorInvalidValue, "%s launched without a set-up communicator", v->name);
    }
}

Test(allreduce, with_too_few_gpus_variants_skip_and_say_why)
{
    char why[256];
    const int gpus = kl_ar_gpu_count(why, sizeof why);
    if (gpus >= 8) cr_skip_test("this machine has %d GPUs: every golden world runs", gpus);
    struct kl_case c;
    struct kl_err err = {{0}};
    cr_assert_eq(kl_case_open(&c, KL_SOURCE_DIR "/golden/allreduce/rand_fp32_world8_n7", &err), 0, "%s", err.msg);
    struct kl_verdict vd;
    kl_verify_case(kl_module_find("allreduce"), &c, kl_variant_at("allreduce", 0, false), &vd);
    cr_assert_eq(vd.status, KL_SKIP, "status %d: %s", vd.status, vd.why);
    cr_assert(strstr(vd.why, "needs 8 GPUs"), "%s", vd.why);
    kl_verify_case(kl_module_find("allreduce"), &c, NULL, &vd);
    cr_assert_eq(vd.status, KL_PASS, "the reference must verify anywhere: %s", vd.why);
    kl_case_close(&c);
}

/* ---- across GPUs ---- */

static int gpus(void)
{
    char why[256];
    return kl_ar_gpu_count(why, sizeof why);
}

static int indices[64];

/* The plain variants (or mutants) the suite runs: all, or with KL_TEST_ONLY=TEXT[,TEXT...] those whose name
 * holds a TEXT (kl_test_wanted: a suite in parts). Fused ones: test_allreduce_fused.c. */
static struct criterion_test_params variants(bool mutants)
{
    int n = kl_variant_count("allreduce", mutants), m = 0;
    for (int i = 0; i < n; i++) {
        const struct kl_variant *v = kl_variant_at("allreduce", i, mutants);
        if (v->mutant == (int)mutants && !kl_ar_is_fused(v) && kl_test_wanted(v->name)) indices[m++] = i;
    }
    return cr_make_param_array(int, indices, (size_t)m);
}

static const struct kl_variant *variant_or_skip(int i, bool mutant, int world)
{
    const struct kl_variant *v = kl_variant_at("allreduce", i, mutant);
    cr_log_info("%s %s", mutant ? "mutant" : "variant", v->name);
    char why[256];
    if (kl_ar_skip_reason(v, world, why, sizeof why)) cr_skip_test("%s: %s", v->name, why);
    return v;
}

/* Runs jobs through v at `world` ranks; returns the number of problems found (bad elements,
 * ranks disagreeing, or the run failing), describing the first in msg. */
static int run_jobs(const struct kl_variant *v, int world, const struct kl_ar_job *jobs, int count, char *msg, size_t len)
{
    struct kl_ar_run run;
    struct kl_err err = {{0}};
    size_t bytes = 0;
    for (int k = 0; k < count; k++) bytes += kl_ar_job_bytes(&jobs[k], world);
    cr_assert_eq(kl_ar_run_begin(&run, v, world, bytes, &err), 0, "%s", err.msg);
    for (int k = 0; k < count; k++) cr_assert_geq(kl_ar_run_add(&run, &jobs[k], NULL), 0);
    int problems = 0;
    msg[0] = 0;
    if (kl_ar_run_go(&run, 240, &err)) {
        snprintf(msg, len, "%s", err.msg);
        problems = 1;
    }
    for (int k = 0; !problems && k < count; k++) {
        const struct kl_ar_job *j = &run.b->job[k];
        if (j->skipped) continue; /* KL_AR_WINDOW_ALIGNED: no rank ran it */
        for (int r = 0; r < world; r++)
            if (j->n_bad[r]) {
                if (!problems) snprintf(msg, len, "job %d, rank %d: %lld bad: %s", k, r, (long long)j->n_bad[r], j->note[r]);
                problems++;
            }
        char why[256];
        if (!problems && kl_ar_run_identical(&run, k, why, sizeof why)) snprintf(msg, len, "job %d: %s", k, why), problems++;
    }
    kl_ar_run_end(&run);
    return problems;
}

static const struct kl_ar_job krepeat[] = {
    {.scenario = KL_AR_REPEAT, .dtype = KL_BF16, .n = 4099, .calls = 1000, .late = 1, .seed = 11},
    {.scenario = KL_AR_REPEAT, .dtype = KL_F16, .n = 777, .calls = 200, .late = 1, .seed = 12, .in_place = 1},
    {.scenario = KL_AR_REPEAT, .dtype = KL_F32, .n = 65541, .calls = 50, .late = 1, .seed = 13},
    {.scenario = KL_AR_REPEAT, .dtype = KL_BF16, .n = 1031, .calls = 100, .late = 1, .seed = 14, .misaligned = 1},
    /* Ranks whose buffers are aligned differently must still split the work the same way. */
    {.scenario = KL_AR_REPEAT, .dtype = KL_F16, .n = 8195, .calls = 100, .late = 1, .seed = 15, .misaligned = 2},
};
/* The graph job first: its capture comes before any eager call on the communicator. */
static const struct kl_ar_job kgraph[] = {
    {.scenario = KL_AR_GRAPH, .dtype = KL_BF16, .n = 4099, .calls = 600, .per_graph = 10, .late = 1, .seed = 21},
    {.scenario = KL_AR_GRAPH, .dtype = KL_F32, .n = 33, .calls = 200, .per_graph = 7, .late = 1, .seed = 22},
};

ParameterizedTestParameters(allreduce_multigpu, every_variant_matches_the_goldens) { return variants(false); }

ParameterizedTest(int *i, allreduce_multigpu, every_variant_matches_the_goldens)
{
    const struct kl_variant *v = variant_or_skip(*i, false, 2);
    int skipped = 0, failures = kl_ar_goldens(v, stderr, &skipped);
    cr_assert(failures >= 0, "no golden cases");
    cr_assert_eq(failures, 0, "%s: %d golden cases failed (lines above)", v->name, failures);
    if (skipped) cr_log_info("%d cases need more GPUs than this machine has", skipped);
}

ParameterizedTestParameters(allreduce_multigpu, every_variant_matches_the_reference_on_fresh_inputs_and_edges)
{
    return variants(false);
}

ParameterizedTest(int *i, allreduce_multigpu, every_variant_matches_the_reference_on_fresh_inputs_and_edges)
{
    const struct kl_variant *v = variant_or_skip(*i, false, 2);
    int failures = kl_check_module(kl_module_find("allreduce"), v, kl_test_seed(stderr), stderr);
    cr_assert_eq(failures, 0, "%s: %d problems failed (lines above)", v->name, failures);
}

ParameterizedTestParameters(allreduce_multigpu, every_rank_ends_with_bit_identical_outputs) { return variants(false); }

ParameterizedTest(int *i, allreduce_multigpu, every_rank_ends_with_bit_identical_outputs)
{
    /* Random inputs (exact sums would hide a rank-dependent order) at every world this machine has. */
    const struct kl_variant *v = variant_or_skip(*i, false, 2);
    for (int world = 2; world <= gpus() && world <= KL_AR_MAX_RANKS; world++) {
        const uint64_t seed = kl_test_seed(stderr);
        struct kl_ar_problem *probs[3];
        const int64_t sizes[3] = {4096 + 3, 1 << 15, 300001};
        struct kl_rng rng;
        kl_rng_seed(&rng, seed);
        for (int k = 0; k < 3; k++) {
            probs[k] = kl_ar_problem_new(world, sizes[k], k == 1 ? KL_F16 : KL_BF16);
            kl_rng_fill_normal(&rng, &probs[k]->x, 1.0);
        }
        struct kl_verdict vd[3];
        kl_ar_run_problems(v, probs, NULL, 3, vd);
        for (int k = 0; k < 3; k++) {
            cr_expect_eq(vd[k].status, KL_PASS, "%s world %d n=%lld: %s", v->name, world, (long long)sizes[k], vd[k].why);
            kl_ar_problem_free(probs[k]);
        }
    }
}

ParameterizedTestParameters(allreduce_multigpu, every_variant_survives_1000_back_to_back_calls_with_a_late_rank)
{
    return variants(false);
}

ParameterizedTest(int *i, allreduce_multigpu, every_variant_survives_1000_back_to_back_calls_with_a_late_rank)
{
    const struct kl_variant *v = variant_or_skip(*i, false, 2);
    char msg[768];
    int problems = run_jobs(v, 2, krepeat, sizeof krepeat / sizeof *krepeat, msg, sizeof msg);
    cr_assert_eq(problems, 0, "%s: %s", v->name, msg);
}

ParameterizedTestParameters(allreduce_multigpu, every_variant_replays_in_cuda_graphs_between_eager_calls)
{
    return variants(false);
}

ParameterizedTest(int *i, allreduce_multigpu, every_variant_replays_in_cuda_graphs_between_eager_calls)
{
    const struct kl_variant *v = variant_or_skip(*i, false, 2);
    char msg[768];
    int problems = run_jobs(v, 2, kgraph, 2, msg, sizeof msg);
    cr_assert_eq(problems, 0, "%s: %s", v->name, msg);
}

ParameterizedTestParameters(allreduce_multigpu, a_second_stream_on_one_communicator_is_refused)
{
    return variants(false);
}

ParameterizedTest(int *i, allreduce_multigpu, a_second_stream_on_one_communicator_is_refused)
{
    const struct kl_variant *v = variant_or_skip(*i, false, 2);
    const struct kl_ar_job job = {.scenario = KL_AR_STREAMS, .dtype = KL_BF16, .n = 1000, .seed = 31};
    char msg[768];
    cr_assert_eq(run_jobs(v, 2, &job, 1, msg, sizeof msg), 0, "%s: %s", v->name, msg);
}

ParameterizedTestParameters(allreduce_multigpu, a_pdl_consumer_reads_the_finished_output) { return variants(false); }

ParameterizedTest(int *i, allreduce_multigpu, a_pdl_consumer_reads_the_finished_output)
{
    const struct kl_variant *v = variant_or_skip(*i, false, 2);
    const struct kl_ar_topology *m = kl_ar_machine();
    if (m->dev[0].cc < 90) cr_skip_test("programmatic dependent launch needs sm_90");
    const struct kl_ar_job job = {.scenario = KL_AR_PDL, .dtype = KL_BF16, .n = 65536 + 5, .calls = 200, .late = 1,
                                  .seed = 41};
    char msg[768];
    cr_assert_eq(run_jobs(v, 2, &job, 1, msg, sizeof msg), 0, "%s: %s", v->name, msg);
}

/* Inputs whose bits equal the Lamport sentinel (kernels/allreduce/allreduce.h) at every 97th
 * element, on one rank in turn, in each float type, at world 2: the outputs there must be NaN,
 * the others within the bound, the ranks' bits equal, and nothing may hang. Returns the problems
 * found, the first described in msg. */
static int sentinel_inputs(const struct kl_variant *v, char *msg, size_t len)
{
    const int world = 2;
    const int64_t n = 4099; /* 16-byte units and a tail */
    const enum kl_dtype types[3] = {KL_BF16, KL_F16, KL_F32};
    struct kl_ar_problem *probs[3];
    struct kl_rng rng;
    kl_rng_seed(&rng, 97);
    struct kl_ar_run run;
    struct kl_err err = {{0}};
    size_t bytes = 0;
    for (int k = 0; k < 3; k++) {
        probs[k] = kl_ar_problem_new(world, n, types[k]);
        kl_rng_fill_normal(&rng, &probs[k]->x, 1.0);
        for (int64_t i = 5; i < n; i += 97) {
            unsigned char *row = (unsigned char *)probs[k]->x.data + (size_t)((i / 97) % world) * n * kl_dtype_size(types[k]);
            if (types[k] == KL_F32) ((uint32_t *)row)[i] = KL_AR_LAMPORT_EMPTY32;
            else ((uint16_t *)row)[i] = KL_AR_LAMPORT_EMPTY16;
        }
        bytes += kl_ar_job_bytes(&(struct kl_ar_job){.scenario = KL_AR_ONCE, .dtype = types[k], .n = n}, world);
    }
    int problems = 0;
    msg[0] = 0;
    cr_assert_eq(kl_ar_run_begin(&run, v, world, bytes, &err), 0, "%s", err.msg);
    for (int k = 0; k < 3; k++)
        cr_assert_geq(kl_ar_run_add(&run, &(struct kl_ar_job){.scenario = KL_AR_ONCE, .dtype = types[k], .n = n}, probs[k]), 0);
    if (kl_ar_run_go(&run, 240, &err)) snprintf(msg, len, "%s", err.msg), problems++;
    double *got = malloc(sizeof(double) * (size_t)n), *x = malloc(sizeof(double) * (size_t)(world * n));
    for (int k = 0; !problems && k < 3; k++) {
        for (int64_t i = 0; i < world * n; i++) x[i] = kl_load_elem(types[k], probs[k]->x.data, (size_t)i);
        for (int r = 0; r < world && !problems; r++) {
            kl_ar_run_output(&run, k, r, got);
            for (int64_t i = 0; i < n && !problems; i++) {
                const bool sentinel = i % 97 == 5;
                const double want = x[i] + x[n + i], s = fabs(x[i]) + fabs(x[n + i]);
                if (sentinel ? !isnan(got[i]) : !(fabs(got[i] - want) <= kl_allreduce_bound(world, types[k], s, 0)))
                    snprintf(msg, len, "%s rank %d: out[%lld] = %.9g, want %s%.9g", kl_dtype_name(types[k]), r,
                             (long long)i, got[i], sentinel ? "NaN, not " : "", want),
                        problems++;
            }
        }
        char why[256];
        if (!problems && kl_ar_run_identical(&run, k, why, sizeof why)) snprintf(msg, len, "%s", why), problems++;
    }
    free(got), free(x);
    kl_ar_run_end(&run);
    for (int k = 0; k < 3; k++) kl_ar_problem_free(probs[k]);
    return problems;
}

ParameterizedTestParameters(allreduce_multigpu, an_input_equal_to_the_lamport_sentinel_sums_to_nan)
{
    return variants(false);
}

ParameterizedTest(int *i, allreduce_multigpu, an_input_equal_to_the_lamport_sentinel_sums_to_nan)
{
    const struct kl_variant *v = variant_or_skip(*i, false, 2);
    char msg[768];
    cr_assert_eq(sentinel_inputs(v, msg, sizeof msg), 0, "%s: %s", v->name, msg);
}

ParameterizedTestParameters(allreduce_multigpu, every_mutant_is_flagged) { return variants(true); }

ParameterizedTest(int *i, allreduce_multigpu, every_mutant_is_flagged)
{
    const struct kl_variant *v = kl_variant_at("allreduce", *i, true);
    /* The two-set race needs the ranks to run at once: under time slicing the slow rank's stall
     * holds the GPU, and the fast rank cannot write meanwhile. */
    if (kl_ar_shared_device() && strstr(v->name, "lamport_two_sets"))
        cr_skip_test("%s: its race needs two GPUs running at once (shared-device mode time-slices the ranks)", v->name);
    /* A mutant that hangs is caught by the device-side wait: 10 s, not the harness's minutes. */
    setenv("KL_AR_SPIN_TIMEOUT_S", "10", 1);
    /* With two ranks a + b = b + a: a rank-dependent order changes no bit until world 3. */
    const int world = strstr(v->name, "own_rank_first") ? 3 : 2;
    variant_or_skip(*i, true, world);
    int skipped = 0, flagged = world == 2 ? kl_ar_goldens(v, stderr, &skipped) : 0;
    flagged += kl_check_module(kl_module_find("allreduce"), v, kl_test_seed(stderr), stderr);
    char msg[768];
    flagged += run_jobs(v, world, krepeat, 1, msg, sizeof msg);
    cr_log_info("back to back: %s", msg);
    flagged += run_jobs(v, world, kgraph, 1, msg, sizeof msg);
    cr_log_info("graphs: %s", msg);
    flagged += sentinel_inputs(v, msg, sizeof msg);
    cr_log_info("sentinel-valued inputs: %s", msg);
    cr_assert_gt(flagged, 0,
                 "mutant %s passed the goldens, the catalogue, back-to-back calls, graph replays and sentinel-valued inputs",
                 v->name);
}

Test(allreduce_multigpu, there_are_at_least_three_mutants)
{
    cr_assert_geq(kl_variant_count("allreduce", true) - kl_variant_count("allreduce", false), 3);
}

/* A rank that dies while its peer's kernel waits for it at the barrier. */
enum { DEAD_EXIT, DEAD_SLEEP };
struct dead {
    int mode;
    struct kl_ar_exchange ex;
};

static int dead_peer_main(struct kl_rank *r)
{
    struct dead *d = r->payload;
    const struct kl_variant *v = kl_variant_find("allreduce", "v4_oneshot_one_barrier");
    struct kl_allreduce_comm c;
    /* A 2 s spin timeout: the waiting rank's kernel gives up long before the run's 60 s. */
    if (kl_ar_comm_init(r, &d->ex, KL_AR_NEEDS_PEERS, 4096, 2.0, &c)) return -1;
    if (r->rank == 1) {
        if (d->mode == DEAD_EXIT) {
            kl_rank_step(r, "leaving before the all-reduce");
            exit(5);
        }
        kl_rank_step(r, "alive but never calling the all-reduce");
        sleep(30); /* the peer's kernel times out and traps meanwhile */
        return 0;
    }
    void *x = NULL;
    cudaMalloc(&x, 4096);
    struct kl_allreduce_params p = {x, x, 1024, KL_BF16, &c, NULL};
    kl_rank_step(r, "in the all-reduce, waiting for rank 1");
    cudaError_t rc = kl_ar_ops(v)->launch(&p, c.stream);
    if (rc == cudaSuccess) rc = cudaStreamSynchronize(c.stream);
    return rc == cudaSuccess ? kl_rank_fail(r, "the all-reduce finished without its peer")
                             : kl_ar_cuda_fail(r, &c, rc, "the all-reduce");
}

KL_RANK_PROGRAM("test_dead_peer", dead_peer_main);

static void run_dead_peer(int mode, char *msg, double *took)
{
    struct kl_ranks g;
    struct kl_err err = {{0}};
    cr_assert_eq(kl_ranks_create(&g, 2, sizeof(struct dead), &err), 0);
    ((struct dead *)g.payload)->mode = mode;
    const double t0 = now_s();
    /* 300 s a step: the host barrier would give up after 240, so a run that ends before is ended
     * by the device-side wait (2 s), however loaded the machine. */
    cr_assert_neq(kl_ranks_run(&g, "test_dead_peer", 300, &err), 0, "the run succeeded without rank 1");
    *took = now_s() - t0;
    snprintf(msg, 512, "%s", err.msg);
    kl_ranks_destroy(&g);
}

Test(allreduce_multigpu, a_peer_that_exits_fails_the_run_and_is_named)
{
    if (gpus() < 2) cr_skip_test("needs 2 GPUs");
    char msg[512];
    double took;
    run_dead_peer(DEAD_EXIT, msg, &took);
    cr_log_info("%s", msg);
    cr_assert(strstr(msg, "rank 1 exited with status 5 at step 'leaving before the all-reduce'"), "%s", msg);
    cr_assert_lt(took, 240, "%.1f s: not ended by the device-side wait", took);
}

Test(allreduce_multigpu, a_barrier_wait_times_out_on_the_device_and_names_the_peer)
{
    if (gpus() < 2) cr_skip_test("needs 2 GPUs");
    char msg[512];
    double took;
    run_dead_peer(DEAD_SLEEP, msg, &took);
    cr_log_info("%s", msg);
    cr_assert(strstr(msg, "rank 0") && strstr(msg, "start barrier") && strstr(msg, "waiting for rank 1"), "%s", msg);
    cr_assert_lt(took, 240, "%.1f s: not ended by the device-side wait", took);
}

int main(int argc, char *argv[])
{
    if (kl_rank_argv(argc, argv)) return kl_rank_main(argc - 2, argv + 2);
    struct criterion_test_set *tests = criterion_initialize();
    int result = 0;
    if (criterion_handle_args(argc, argv, true)) result = !criterion_run_all_tests(tests);
    criterion_finalize(tests);
    return result;
}
