/* Helpers the module test suites share. The functions use no Criterion (the suites assert);
 * KL_GPU_TESTS expands to Criterion tests in the file that states it. */
#ifndef KL_TESTING_H
#define KL_TESTING_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "registry.h"

/* Why v cannot run on this machine ("no CUDA device: ...", "needs sm_90"), or is left out of this
 * run (not named in KL_TEST_ONLY, below), or NULL. */
const char *kl_test_skip_reason(const struct kl_variant *v);
/* Whether the tests run the variant or mutant `name`: every one, or with KL_TEST_ONLY=TEXT[,TEXT...]
 * in the environment those whose names contain one of the texts ("v17_,mutant_v6_": v17 and v6's
 * mutants). A long GPU suite then runs in parts; what a part leaves out is a skip with the reason
 * (kl_test_skip_reason), never a pass. */
bool kl_test_wanted(const char *name);
/* Runs every case under golden/<module>/ through v (NULL: the reference), a line per case to
 * log; returns the number of failing cases, or -1 when there are no cases at all. */
int kl_test_goldens(const char *module, const struct kl_variant *v, FILE *log);
/* A CPU stand-in for a kernel: outputs computed from a module's problem the way a kernel would
 * (float32 arithmetic and one rounding to the output dtype, or that with a deliberate bug), so a
 * test can show without a GPU that the policy passes the one and catches the other. Returns 0,
 * or -1 with err saying why. */
typedef int (*kl_stand_in_fn)(const void *prob, struct kl_outputs *out, struct kl_err *err);
/* Every golden case of module through fn, judged as a variant's outputs are (as the reference's
 * when as_reference); a line per case to log, labelled name; returns the number of failing
 * cases, or -1 when there are no cases at all. */
int kl_test_goldens_with(const char *module, kl_stand_in_fn fn, const char *name, bool as_reference, FILE *log);
/* The module's check catalogue for seed through fn, each problem judged against the reference as
 * a variant is; a line per failing problem to log; returns the number of failures. */
int kl_test_catalogue_with(const char *module, kl_stand_in_fn fn, const char *name, uint64_t seed, FILE *log);
/* A stand-in of a correct kernel on every golden and on the catalogue drawn from `seeds`
 * consecutive seeds (the first from kl_test_seed, printed); returns the failures (-1: no goldens). */
int kl_test_stand_in_passes(const char *module, kl_stand_in_fn fn, const char *name, int seeds, FILE *log);
/* v rounded toward zero to t (f32, f16, bf16): the rounding of a kernel that truncates. */
double kl_test_round_toward_zero(enum kl_dtype t, double v);
/* Output 0 of want (its policy as the module sets it) against a copy whose first `scaled` elements
 * are multiplied by `by`: whether the policy passes it as set (*with) and with its rel_l2 groups
 * taken out (*without). Shows a part's error hiding under the rest of the output, or not. */
void kl_test_scaled_part(const struct kl_outputs *want, int64_t scaled, double by, bool *with, bool *without);
/* The seed for fresh random inputs: $KL_SEED if set (replay), else the clock; printed to log. */
uint64_t kl_test_seed(FILE *log);

/* Indices i of kl_variant_at(module, i, mutants) that are variants (mutants false) or mutants
 * (true), at most cap: what variant tests are parameterized over (indices, not pointers: pointers
 * as Criterion parameters crash its workers). Returns how many. */
size_t kl_test_variant_indices(const char *module, bool mutants, int *idx, size_t cap);

/* How the standard tests require a mutant to be flagged. */
enum kl_flagged_by {
    KL_FLAGGED_BY_EITHER, /* by the goldens, the catalogue or the module's extra check: their failures summed */
    KL_FLAGGED_BY_EACH,   /* by the goldens and by the catalogue, each on its own (attention: the goldens
                           * carry the tolerance's claims, and the catalogue's fixed edges must cover the
                           * same classes whatever the seed draws) */
};
/* A module's own further way to flag a mutant: the problems v got wrong, a line each to log. */
typedef int (*kl_flag_fn)(const struct kl_variant *v, FILE *log);

/* The four standard GPU tests of tensor module `mod`, in Criterion suite `suite`; a test file
 * states them once (after criterion/parameterized.h):
 *   every_variant_matches_the_goldens
 *   every_variant_matches_the_reference_on_fresh_inputs_and_edges  (the check catalogue, fresh seed)
 *   every_mutant_is_flagged                                          (as `by` says; `extra`, or NULL,
 *                                                                     adds to the sum of KL_FLAGGED_BY_EITHER)
 *   there_are_at_least_<least_words>_mutants                         (asserts at least `least`)
 * A variant this machine cannot run is a skip (kl_test_skip_reason). Also defines
 * kl_test_variants(mutants), the parameters of the file's other tests over variants. */
#define KL_GPU_TESTS(suite, mod, least_words, least, by, extra)                                                   \
    static int kl_test_indices_[2][64];                                                                            \
    static struct criterion_test_params kl_test_variants(bool mutants)                                             \
    {                                                                                                               \
        size_t n = kl_test_variant_indices(#mod, mutants, kl_test_indices_[mutants], 64);                          \
        return cr_make_param_array(int, kl_test_indices_[mutants], n);                                              \
    }                                                                                                               \
                                                                                                                    \
    ParameterizedTestParameters(suite, every_variant_matches_the_goldens) { return kl_test_variants(false); }      \
    ParameterizedTest(int *i, suite, every_variant_matches_the_goldens)                                            \
    {                                                                                                               \
        const struct kl_variant *v = kl_variant_at(#mod, *i, false);                                               \
        cr_log_info("variant %s", v->name);                                                                         \
        if (kl_test_skip_reason(v)) cr_skip_test("%s: %s", v->name, kl_test_skip_reason(v));                      \
        int failures = kl_test_goldens(#mod, v, stderr);                                                            \
        cr_assert_eq(failures, 0, "%s: %d golden cases failed (lines above)", v->name, failures);                  \
    }                                                                                                               \
                                                                                                                    \
    ParameterizedTestParameters(suite, every_variant_matches_the_reference_on_fresh_inputs_and_edges)              \
    {                                                                                                               \
        return kl_test_variants(false);                                                                             \
    }                                                                                                               \
    ParameterizedTest(int *i, suite, every_variant_matches_the_reference_on_fresh_inputs_and_edges)                \
    {                                                                                                               \
        const struct kl_variant *v = kl_variant_at(#mod, *i, false);                                               \
        cr_log_info("variant %s", v->name);                                                                         \
        if (kl_test_skip_reason(v)) cr_skip_test("%s: %s", v->name, kl_test_skip_reason(v));                      \
        int failures = kl_check_module(kl_module_find(#mod), v, kl_test_seed(stderr), stderr);                     \
        cr_assert_eq(failures, 0, "%s: %d problems failed (lines above)", v->name, failures);                      \
    }                                                                                                               \
                                                                                                                    \
    ParameterizedTestParameters(suite, every_mutant_is_flagged) { return kl_test_variants(true); }                 \
    ParameterizedTest(int *i, suite, every_mutant_is_flagged)                                                      \
    {                                                                                                               \
        const struct kl_variant *v = kl_variant_at(#mod, *i, true);                                                \
        const kl_flag_fn extra_ = (extra);                                                                          \
        cr_log_info("mutant %s", v->name);                                                                          \
        if (kl_test_skip_reason(v)) cr_skip_test("%s: %s", v->name, kl_test_skip_reason(v));                       \
        const int by_goldens = kl_test_goldens(#mod, v, stderr);                                                    \
        const int by_catalogue = kl_check_module(kl_module_find(#mod), v, kl_test_seed(stderr), stderr);           \
        if ((by) == KL_FLAGGED_BY_EACH) {                                                                           \
            cr_expect_gt(by_goldens, 0, "mutant %s passed every golden case", v->name);                            \
            cr_expect_gt(by_catalogue, 0, "mutant %s passed the whole check catalogue", v->name);                  \
        } else {                                                                                                    \
            const int flagged = by_goldens + by_catalogue + (extra_ ? extra_(v, stderr) : 0);                       \
            cr_assert_gt(flagged, 0, "mutant %s passed every golden case and the whole check catalogue", v->name); \
        }                                                                                                           \
    }                                                                                                               \
                                                                                                                    \
    Test(suite, there_are_at_least_##least_words##_mutants)                                                        \
    {                                                                                                               \
        cr_assert_geq(kl_variant_count(#mod, true) - kl_variant_count(#mod, false), least);                        \
    }

#endif
