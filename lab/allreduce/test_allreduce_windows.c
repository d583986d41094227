/* The NCCL variant on symmetric windows: which jobs it is given. NCCL's symmetric kernels sum
 * wrongly when x and out start one element into their windows, so a misaligned job is marked
 * skipped for it (no rank runs it, verify reports SKIP) and runs for every other variant. */
#include <criterion/criterion.h>

#include "lab/allreduce/allreduce_module.h"

static int skipped_for(const char *variant, int misaligned)
{
    const struct kl_variant *v = kl_variant_find("allreduce", variant);
    cr_assert_not_null(v, "no variant %s", variant);
    struct kl_ar_run run;
    struct kl_err err = {{0}};
    const struct kl_ar_job job = {.scenario = KL_AR_REPEAT, .dtype = KL_BF16, .n = 1031, .calls = 4,
                                  .misaligned = misaligned};
    cr_assert_eq(kl_ar_run_begin(&run, v, 2, kl_ar_job_bytes(&job, 2), &err), 0, "%s", err.msg);
    cr_assert_eq(kl_ar_run_add(&run, &job, NULL), 0);
    const int skipped = run.b->job[0].skipped;
    kl_ar_run_end(&run);
    return skipped;
}

Test(allreduce_windows, a_misaligned_job_skips_only_the_variant_on_symmetric_windows)
{
    for (int m = 1; m <= 2; m++) { /* every rank one element off; only the last rank off */
        cr_expect_eq(skipped_for("v0_nccl_symmetric", m), 1, "misaligned=%d ran on symmetric windows", m);
        cr_expect_eq(skipped_for("v0_nccl", m), 0, "misaligned=%d skipped plain NCCL", m);
        cr_expect_eq(skipped_for("v8_lamport_pdl", m), 0, "misaligned=%d skipped v8", m);
    }
    cr_expect_eq(skipped_for("v0_nccl_symmetric", 0), 0, "an aligned job skipped the symmetric variant");
}
