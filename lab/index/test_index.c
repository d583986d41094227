/* index tests. Suite `index` runs anywhere (the reference against the goldens and hand-worked
 * gathers); suite `index_gpu` runs every variant on the device and skips without one.
 * Parameterized over variant INDICES (pointers as parameters crash Criterion's workers). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdlib.h>

#include "lab/core/device.h"
#include "lab/core/testing.h"
#include "lab/index/index_module.h"
#include "reference/index.h"

static const struct kl_module *module(void) { return kl_module_find("index"); }

Test(index, reference_matches_every_golden_case)
{
    int failures = kl_test_goldens("index", NULL, stderr);
    cr_assert(failures >= 0, "no golden cases found under golden/index");
    cr_assert_eq(failures, 0, "%d golden cases failed (lines above)", failures);
}

Test(index, reference_gathers_rows_of_the_shard_and_zeroes_the_rest)
{
    /* Shard holds ids 10, 11, 12 (vocab_start 10, vocab 3), hidden 2. */
    const double table[6] = {1, 2, 3, 4, 5, 6};
    const int32_t ids[6] = {10, 12, 9, 13, 11, -5};
    const double want[12] = {1, 2, 5, 6, 0, 0, 0, 0, 3, 4, 0, 0};
    double out[12];
    kl_index_reference(table, ids, 6, 3, 2, 10, out);
    for (int i = 0; i < 12; i++) cr_assert_eq(out[i], want[i], "out[%d] = %g, expected %g", i, out[i], want[i]);
}

Test(index, extreme_ids_do_not_overflow_the_shard_test)
{
    /* INT32_MIN - vocab_start would wrap in 32-bit arithmetic; the reference works in 64 bits. */
    const double table[2] = {7, 8};
    const int32_t ids[3] = {INT32_MIN, INT32_MAX, 5};
    double out[6];
    kl_index_reference(table, ids, 3, 1, 2, 5, out);
    cr_assert(out[0] == 0 && out[1] == 0 && out[2] == 0 && out[3] == 0 && out[4] == 7 && out[5] == 8);
}

Test(index, the_check_catalogue_hits_both_ends_of_the_shard_and_ids_outside_it)
{
    char label[160];
    int outside_seen = 0;
    for (int i = 0;; i++) {
        struct kl_index_problem *p = module()->tensor->make(i, 7, label, sizeof label);
        if (!p) break;
        const int32_t *ids = p->ids.data;
        if (p->num_tokens >= 2 && p->vocab > 0) {
            cr_expect_eq(ids[0], p->vocab_start, "%s: first id is not the shard's first row", label);
            cr_expect_eq(ids[1], p->vocab_start + p->vocab - 1, "%s: second id is not the shard's last row", label);
        }
        for (int64_t t = 0; t < p->num_tokens; t++)
            outside_seen += ids[t] < p->vocab_start || ids[t] >= p->vocab_start + p->vocab;
        module()->tensor->free(p);
    }
    cr_assert_gt(outside_seen, 0, "no id outside a shard in the whole catalogue");
}

/* ---- GPU ---- */

KL_GPU_TESTS(index_gpu, index, three, 3, KL_FLAGGED_BY_EITHER, NULL)

Test(index_gpu, launchers_reject_bad_shapes_without_launching)
{
    if (!kl_have_gpu()) cr_skip_test("no CUDA device");
    for (int i = 0; i < kl_variant_count("index", false); i++) {
        const struct kl_variant *v = kl_variant_at("index", i, false);
        kl_index_launch_fn f = (kl_index_launch_fn)v->launch;
        struct kl_index_params bad = {.num_tokens = 4, .vocab = 10, .hidden = 0, .dtype = KL_BF16};
        cr_expect_eq(f(&bad, 0), cudaErrorInvalidValue, "%s accepted hidden=0", v->name);
        bad.hidden = 8, bad.vocab = -1;
        cr_expect_eq(f(&bad, 0), cudaErrorInvalidValue, "%s accepted vocab=-1", v->name);
        bad.vocab = 10; /* pointers unset with tokens to gather */
        cr_expect_eq(f(&bad, 0), cudaErrorInvalidValue, "%s accepted NULL pointers", v->name);
    }
}
