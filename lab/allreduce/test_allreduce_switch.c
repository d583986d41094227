/* Calls whose size changes the size switch's pick, back to back on one communicator: v6_switch must
 * stay correct (it chooses among barrier-free variants and NCCL only), and a switch that puts a
 * barrier variant between Lamport calls (mutant_switch_through_v4) must be caught. Both run in the
 * allreduce_multigpu suite: v6 on two GPUs (it needs NCCL, which shared-device mode cannot run), the
 * mutant on two GPUs or on one in shared-device mode. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "lab/allreduce/allreduce_module.h"
#include "lab/core/testing.h"

/* Sizes across both thresholds set below: 2 KB (Lamport one-shot), 12 KB (Lamport two-shot), 40 KB
 * (NCCL), in an order where every pick follows every other. Job k makes 1 + k % 3 calls, so a run of
 * calls of one pick leaves the Lamport set rotation (three sets) at every offset: with 3 calls a job
 * a run of barrier calls put the rotation back where it found it, and the stale set
 * mutant_switch_through_v4 leaves behind was never the one read next (it passed on 2 x H200). */
static const int64_t ksizes[] = {1024, 6000, 1024, 20000, 1024, 1024, 6000, 6000, 20000, 1024, 6000, 1024, 1024};

static int mixed_sizes(const char *variant, char *msg, size_t len)
{
    const struct kl_variant *v = kl_variant_find("allreduce", variant);
    cr_assert_not_null(v, "no variant %s", variant);
    setenv("KL_AR_ONESHOT_MAX", "4096", 1); /* read by the ranks this batch starts */
    setenv("KL_AR_TWOSHOT_MAX", "16384", 1);
    setenv("KL_AR_SPIN_TIMEOUT_S", "10", 1);
    enum { N = sizeof ksizes / sizeof *ksizes };
    struct kl_ar_job jobs[N];
    size_t bytes = 0;
    for (int k = 0; k < N; k++) {
        jobs[k] = (struct kl_ar_job){.scenario = KL_AR_REPEAT, .dtype = KL_BF16, .n = ksizes[k], .calls = 1 + k % 3,
                                     .late = 1, .seed = 40 + (uint64_t)k};
        bytes += kl_ar_job_bytes(&jobs[k], 2);
    }
    struct kl_ar_run run;
    struct kl_err err = {{0}};
    cr_assert_eq(kl_ar_run_begin(&run, v, 2, bytes, &err), 0, "%s", err.msg);
    for (int k = 0; k < N; k++) cr_assert_geq(kl_ar_run_add(&run, &jobs[k], NULL), 0);
    int problems = 0;
    msg[0] = 0;
    if (kl_ar_run_go(&run, 240, &err)) snprintf(msg, len, "%s", err.msg), problems++;
    for (int k = 0; !problems && k < N; k++)
        for (int r = 0; r < 2; r++)
            if (run.b->job[k].n_bad[r] && !problems++)
                snprintf(msg, len, "job %d (n=%lld), rank %d: %s", k, (long long)ksizes[k], r, run.b->job[k].note[r]);
    kl_ar_run_end(&run);
    unsetenv("KL_AR_ONESHOT_MAX"), unsetenv("KL_AR_TWOSHOT_MAX"), unsetenv("KL_AR_SPIN_TIMEOUT_S");
    return problems;
}

Test(allreduce_multigpu, the_size_switch_survives_sizes_that_change_its_pick)
{
    char msg[768];
    if (kl_ar_skip_reason(kl_variant_find("allreduce", "v6_switch"), 2, msg, sizeof msg)) cr_skip_test("%s", msg);
    cr_assert_eq(mixed_sizes("v6_switch", msg, sizeof msg), 0, "v6_switch: %s", msg);
}

/* The same calls through a switch that puts v4 between Lamport calls: a set left full must be read
 * as stale data and fail. v4 and v8 need no NCCL, so this runs on one GPU too (shared-device mode). */
Test(allreduce_multigpu, a_switch_through_a_barrier_variant_fails_on_the_same_sizes)
{
    char msg[768];
    const struct kl_variant *m = kl_variant_find("allreduce", "mutant_switch_through_v4");
    if (kl_ar_skip_reason(m, 2, msg, sizeof msg)) cr_skip_test("%s", msg);
    cr_assert_gt(mixed_sizes("mutant_switch_through_v4", msg, sizeof msg), 0,
                 "a switch through v4 between Lamport calls passed sizes that change its pick");
    cr_log_info("mutant_switch_through_v4: %s", msg);
}
