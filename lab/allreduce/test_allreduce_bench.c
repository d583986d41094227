/* The bench's own bookkeeping, on the CPU: it holds every variant, traces the stories' sizes, and the
 * story's call inside a graph is told phase by phase from the stamps of consecutive calls. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "lab/allreduce/allreduce_module.h"
#include "lab/allreduce/timeline.h"
#include "lab/allreduce/workloads.h"

/* Five calls of a graph, 1000 ns apart, each stamped at entry, copied, reduced, exit, the last block's
 * exit and (when released) the release from griddepcontrol.wait; call 3 lost its copied stamp. */
static void graph_rows(unsigned long long rows[5][KL_AR_TRACE_STAMPS], bool released)
{
    memset(rows, 0, sizeof(unsigned long long) * 5 * KL_AR_TRACE_STAMPS);
    for (int i = 0; i < 5; i++) {
        const unsigned long long t = 1000ull * i + 100;
        rows[i][KL_AR_T_ENTRY] = t, rows[i][KL_AR_T_COPIED] = t + 150, rows[i][KL_AR_T_REDUCED] = t + 500;
        rows[i][KL_AR_T_EXIT] = t + 530, rows[i][KL_AR_T_LAST_EXIT] = t + 600;
        if (released) rows[i][KL_AR_T_RELEASED] = t - 40;
    }
    rows[3][KL_AR_T_COPIED] = 0;
}

Test(allreduce, a_graph_call_is_told_phase_by_phase_from_consecutive_calls)
{
    unsigned long long rows[5][KL_AR_TRACE_STAMPS];
    double ns[KL_AR_GRAPH_PHASES];
    graph_rows(rows, true);
    cr_assert_eq(kl_ar_graph_phases(&rows[0][0], 5, ns, NULL), 4, "four calls have a previous one");
    /* boundary: exit 630 -> release 1060; tail: block 0's exit to the last block's, within a call */
    const double want[KL_AR_GRAPH_PHASES] = {430, 40, 150, 350, 30, 70, 1000};
    for (int q = 0; q < KL_AR_GRAPH_PHASES; q++)
        cr_expect_float_eq(ns[q], want[q], 1e-9, "%s: %g, not %g", kl_ar_graph_names[q], ns[q], want[q]);
    graph_rows(rows, false); /* no release stamp: the boundary runs to the entry, no start is told */
    kl_ar_graph_phases(&rows[0][0], 5, ns, NULL);
    cr_expect_float_eq(ns[KL_AR_GRAPH_BOUNDARY], 470, 1e-9, "boundary without a release: %g", ns[KL_AR_GRAPH_BOUNDARY]);
    cr_expect(isnan(ns[KL_AR_GRAPH_START]), "a start told without a release stamp: %g", ns[KL_AR_GRAPH_START]);
    cr_expect_eq(kl_ar_graph_phases(&rows[0][0], 1, ns, NULL), 0, "one call has no previous one");
}

Test(allreduce, the_phases_means_add_up_to_the_period_where_their_medians_do_not)
{
    /* Seven calls whose phases are those above, but two calls wait 600 ns longer for the data and two
     * others start 600 ns later after the previous call's exit: four periods of six are 600 ns longer, so
     * the median period is, while the median of every phase is not. The means tell where the time went. */
    enum { CALLS = 7 };
    const unsigned long long more_wait[CALLS] = {0, 600, 0, 600, 0, 0, 0};
    const unsigned long long later_start[CALLS] = {0, 600, 0, 0, 0, 600, 0};
    unsigned long long rows[CALLS][KL_AR_TRACE_STAMPS];
    memset(rows, 0, sizeof rows);
    unsigned long long t = 100;
    for (int i = 0; i < CALLS; i++) {
        if (i) t = rows[i - 1][KL_AR_T_EXIT] + 430 + later_start[i] + 40; /* boundary, then the start */
        rows[i][KL_AR_T_RELEASED] = t - 40, rows[i][KL_AR_T_ENTRY] = t, rows[i][KL_AR_T_COPIED] = t + 150;
        rows[i][KL_AR_T_REDUCED] = t + 500 + more_wait[i], rows[i][KL_AR_T_EXIT] = rows[i][KL_AR_T_REDUCED] + 30;
        rows[i][KL_AR_T_LAST_EXIT] = rows[i][KL_AR_T_EXIT] + 70;
    }
    double median[KL_AR_GRAPH_PHASES], mean[KL_AR_GRAPH_PHASES];
    cr_assert_eq(kl_ar_graph_phases(&rows[0][0], CALLS, median, mean), CALLS - 1);
    const double want_median[KL_AR_GRAPH_PHASES] = {430, 40, 150, 350, 30, 70, 1600};
    const double want_mean[KL_AR_GRAPH_PHASES] = {630, 40, 150, 550, 30, 70, 1400};
    double sum = 0.;
    for (int q = 0; q < KL_AR_GRAPH_PHASES; q++) {
        cr_expect_float_eq(median[q], want_median[q], 1e-9, "median %s: %g, not %g", kl_ar_graph_names[q], median[q],
                           want_median[q]);
        cr_expect_float_eq(mean[q], want_mean[q], 1e-9, "mean %s: %g, not %g", kl_ar_graph_names[q], mean[q],
                           want_mean[q]);
        if (q != KL_AR_GRAPH_TAIL && q != KL_AR_GRAPH_PERIOD) sum += mean[q];
    }
    cr_expect_float_eq(sum, mean[KL_AR_GRAPH_PERIOD], 1e-9, "the means add up to %g, the mean period is %g", sum,
                       mean[KL_AR_GRAPH_PERIOD]);
}

Test(allreduce, the_bench_holds_every_variant_and_the_composite)
{
    /* One bench process times every variant beside NCCL and, for the fused workloads, the composite; a
     * registry past its room would drop the last variants from the results without a word. */
    cr_assert_leq(kl_variant_count("allreduce", false) + 1, KL_AR_BENCH_MAX_VARIANTS,
                  "%d variants and the composite: raise KL_AR_BENCH_MAX_VARIANTS",
                  kl_variant_count("allreduce", false));
}

Test(allreduce, the_traced_sizes_are_the_stories_and_every_fused_shape_with_its_plain_twin)
{
    /* The guide sets the fused story's phases under the plain call of the same bytes: both must be traced,
     * and the twin must be that size, or the table compares calls of different bytes. */
    char a[48], b[48], c[48];
    cr_assert_str_eq(kl_ar_workload_name(a, sizeof a, kl_ar_story_size(), 2), "64KB-world2");
    cr_assert_str_eq(kl_ar_workload_name(b, sizeof b, kl_ar_fused_story_size(), 2), "add-rmsnorm-t1-h4096-world2");
    cr_assert_str_eq(kl_ar_workload_name(c, sizeof c, kl_ar_fused_story_plain_size(), 2), "8KB-world2");
    cr_assert_eq(kl_ar_size_bytes(kl_ar_fused_story_plain_size()), kl_ar_size_bytes(kl_ar_fused_story_size()));
    /* Every fused shape is traced with the plain size of its bytes, where the catalogue has one, so the fused
     * phase table sets each under its plain call: 512KB for 64 tokens of 4096, none for 16 of 4096 (128 KB). */
    char t64[48], t16[48];
    int t64s = -1, t16s = -1, traced = 0;
    for (int s = 0; s < KL_AR_SIZES; s++) {
        traced += kl_ar_size_traced(s);
        if (!strcmp(kl_ar_workload_name(t64, sizeof t64, s, 2), "add-rmsnorm-t64-h4096-world2")) t64s = s;
        if (!strcmp(kl_ar_workload_name(t16, sizeof t16, s, 2), "add-rmsnorm-t16-h4096-world2")) t16s = s;
    }
    cr_assert(t64s >= 0 && t16s >= 0, "the catalogue lacks the fused shapes this test names");
    cr_assert_str_eq(kl_ar_workload_name(a, sizeof a, kl_ar_plain_size_of_fused(t64s), 2), "512KB-world2");
    cr_assert_eq(kl_ar_plain_size_of_fused(t16s), -1, "a plain size for 128 KB");
    cr_assert_eq(kl_ar_plain_size_of_fused(kl_ar_story_size()), -1, "a plain size is no fused shape");
    cr_assert(kl_ar_size_traced(t64s) && kl_ar_size_traced(kl_ar_plain_size_of_fused(t64s)) && kl_ar_size_traced(t16s));
    /* 64KB; the six fused shapes; 8KB, 256KB, 512KB and 1MB (the bytes of t1-h4096, t16-h8192, t64-h4096, t64-h8192) */
    cr_assert_eq(traced, 11, "%d sizes traced, expected 11", traced);
}
