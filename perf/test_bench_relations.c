/* Several targets on one workload, and the relation metrics (time_vs_peer, time_vs:<workload>):
 * computed from the rows a run has written, judged all together. Part of test_bench (suite bench). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lab/core/json_path.h"
#include "perf/bench.h"

/* A targets directory whose sm_90.csv holds `rows` (the header added). */
static struct kl_targets targets_of(const char *rows, char *dir)
{
    strcpy(dir, "/tmp/kl-targets-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    char path[128];
    snprintf(path, sizeof path, "%s/sm_90.csv", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "module,workload,metric,target,source\n%s", rows);
    fclose(f);
    struct kl_targets t;
    struct kl_err err = {{0}};
    cr_assert_eq(kl_targets_load(&t, dir, 90, &err), 0, "%s", err.msg);
    return t;
}

static void remove_targets(struct kl_targets *t, const char *dir)
{
    char path[128];
    snprintf(path, sizeof path, "%s/sm_90.csv", dir);
    remove(path), rmdir(dir);
    kl_targets_free(t);
}

static struct kl_result row(const char *variant, const char *workload, double us, double memcmp_frac)
{
    struct kl_result r = {.module = "radix", .variant = variant, .workload = workload, .checked = true, .check_pass = true};
    r.time_us_median = us;
    r.extra = cJSON_CreateObject();
    cJSON_AddNumberToObject(r.extra, "memcmp_frac", memcmp_frac);
    return r;
}

/* A results file holding a peer row and one of ours, as a run writes them. */
static void write_run(const char *path)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "{\"module\":\"radix\",\"variant\":\"torch_peer\",\"workload\":\"match_hot_p1\",\"peer\":true,"
               "\"time_us\":{\"median\":8}}\n");
    fprintf(f, "{\"module\":\"radix\",\"variant\":\"torch_slower\",\"workload\":\"match_hot_p1\",\"peer\":true,"
               "\"time_us\":{\"median\":20}}\n");
    fprintf(f, "{\"module\":\"radix\",\"variant\":\"v1_simd\",\"workload\":\"match_cold_p1\",\"time_us\":{\"median\":5}}\n");
    fprintf(f, "{\"module\":\"radix\",\"variant\":\"v0_naive\",\"workload\":\"match_cold_p1\",\"time_us\":{\"median\":1}}\n");
    fclose(f);
}

Test(bench, every_target_of_a_workload_must_pass_and_each_miss_is_named)
{
    char dir[32];
    struct kl_targets t = targets_of("radix,match_hot_p1,memcmp_frac,0.50,a\nradix,match_hot_p1,latency_us,10,b\n", dir);
    const struct kl_target *rows[KL_MAX_TARGETS_PER_WORKLOAD];
    cr_assert_eq(kl_targets_for(&t, "radix", "match_hot_p1", rows, KL_MAX_TARGETS_PER_WORKLOAD), 2);
    struct kl_result ok = row("v1_simd", "match_hot_p1", 0.6, 0.6);
    kl_gate_judge(&t, &ok);
    cr_assert(ok.gate_pass, "both met, judged a miss");
    struct kl_result slow = row("v1_simd", "match_hot_p1", 12, 0.6); /* bandwidth met, time missed */
    kl_gate_judge(&t, &slow);
    cr_assert_not(slow.gate_pass, "a row that missed its second target passed");
    cr_assert_str_eq(slow.gate_metric, "latency_us", "the row shows the target it missed");
    static struct kl_gate_log log;
    FILE *err = tmpfile();
    kl_gate_record(&log, &t, &slow, err);
    char text[1024] = "";
    rewind(err);
    text[fread(text, 1, sizeof text - 1, err)] = 0;
    fclose(err);
    cr_assert(strstr(text, "MISS radix v1_simd match_hot_p1: latency_us 12.000") && !strstr(text, "memcmp_frac"), "%s", text);
    cr_assert_eq(log.missed, 1);
    cJSON_Delete(ok.extra), cJSON_Delete(slow.extra);
    remove_targets(&t, dir);
}

Test(bench, relation_metrics_come_from_the_rows_of_the_same_run)
{
    char dir[32], path[] = "/tmp/kl-run-XXXXXX";
    struct kl_targets t = targets_of("radix,match_hot_p1,time_vs_peer,1.0,a\n"
                                     "radix,match_hot_p1,time_vs:match_cold_p1,1.3,b\n",
                                     dir);
    close(mkstemp(path));
    write_run(path);
    struct kl_result r = row("v1_simd", "match_hot_p1", 6, 0.6);
    kl_bench_relations(path, &t, &r);
    const cJSON *vs = cJSON_GetObjectItem(r.extra, "time_vs_peer"), *rel = cJSON_GetObjectItem(r.extra, "time_vs:match_cold_p1");
    cr_assert(vs && rel, "relations not computed");
    cr_assert_float_eq(vs->valuedouble, 6.0 / 8, 1e-12, "against the fastest peer, not the slower one");
    cr_assert_str_eq(cJSON_GetObjectItem(r.extra, "peer_fastest")->valuestring, "torch_peer");
    cr_assert_float_eq(rel->valuedouble, 6.0 / 5, 1e-12, "against the same variant's row, not another variant's");
    kl_gate_judge(&t, &r);
    cr_assert(r.gate_pass, "0.75 <= 1.0 and 1.2 <= 1.3 judged a miss");
    struct kl_result slow = row("v1_simd", "match_hot_p1", 7, 0.6); /* 0.875 of the peer, 1.4 of the cold row */
    kl_bench_relations(path, &t, &slow);
    kl_gate_judge(&t, &slow);
    cr_assert_not(slow.gate_pass);
    cr_assert_str_eq(slow.gate_metric, "time_vs:match_cold_p1");
    struct kl_result alone = row("v1_simd", "match_cold_p16", 7, 0.6); /* no peer row for it */
    kl_bench_relations(path, &t, &alone);
    cr_assert_null(cJSON_GetObjectItem(alone.extra, "time_vs_peer"));
    cJSON_Delete(r.extra), cJSON_Delete(slow.extra), cJSON_Delete(alone.extra);
    remove(path);
    remove_targets(&t, dir);
}

Test(bench, a_relation_may_name_the_other_variant)
{
    /* time_vs:<workload>@<variant>: the named variant's row of that workload (v0_scalar's 2 us), not
     * the row's own variant's (v1_simd's 5 us) nor the fastest of the workload's. */
    char dir[32], path[] = "/tmp/kl-run-XXXXXX";
    struct kl_targets t = targets_of("radix,match_hot_p1,time_vs:match_cold_p1@v0_scalar,2.5,a\n", dir);
    close(mkstemp(path));
    write_run(path);
    FILE *f = fopen(path, "a");
    fprintf(f, "{\"module\":\"radix\",\"variant\":\"v0_scalar\",\"workload\":\"match_cold_p1\",\"time_us\":{\"median\":2}}\n");
    fclose(f);
    struct kl_result r = row("v1_simd", "match_hot_p1", 6, 0.6);
    kl_bench_relations(path, &t, &r);
    const cJSON *rel = cJSON_GetObjectItem(r.extra, "time_vs:match_cold_p1@v0_scalar");
    cr_assert(rel, "relation not computed");
    cr_assert_float_eq(rel->valuedouble, 6.0 / 2, 1e-12, "against v0_scalar's row");
    kl_gate_judge(&t, &r);
    cr_assert_not(r.gate_pass, "3 > 2.5 judged a pass");
    struct kl_err err = {{0}};
    cr_assert_eq(kl_targets_check(&t, &err), 0, "%s", err.msg);
    cJSON_Delete(r.extra);
    remove(path);
    remove_targets(&t, dir);
    t = targets_of("radix,match_hot_p1,time_vs:match_cold_p1@v9_none,1.0,a\n", dir);
    cr_assert_eq(kl_targets_check(&t, &err), 1);
    cr_assert(strstr(err.msg, "names a variant the module does not register"), "%s", err.msg);
    remove_targets(&t, dir);
}

Test(bench, an_exact_row_overrides_a_pattern_of_its_metric_only)
{
    char dir[32];
    struct kl_targets t = targets_of("radix,match_*,memcmp_frac,0.50,pattern\nradix,match_*,latency_us,10,pattern\n"
                                     "radix,match_hot_p1,memcmp_frac,0.70,exact\n",
                                     dir);
    const struct kl_target *rows[KL_MAX_TARGETS_PER_WORKLOAD];
    cr_assert_eq(kl_targets_for(&t, "radix", "match_hot_p1", rows, KL_MAX_TARGETS_PER_WORKLOAD), 2);
    cr_assert(!strcmp(rows[0]->source, "exact") && rows[0]->target == 0.70, "the exact memcmp_frac row comes first");
    cr_assert(!strcmp(rows[1]->metric, "latency_us"), "the pattern's latency_us still applies");
    cr_assert_eq(kl_targets_for(&t, "radix", "match_cold_p1", rows, KL_MAX_TARGETS_PER_WORKLOAD), 2, "both patterns");
    remove_targets(&t, dir);
}

Test(bench, a_relation_to_a_workload_the_module_lacks_is_refused)
{
    char dir[32];
    struct kl_targets t = targets_of("radix,match_hot_p1,time_vs:no_such_workload,1.0,a\n", dir);
    struct kl_err err = {{0}};
    cr_assert_eq(kl_targets_check(&t, &err), 1);
    cr_assert(strstr(err.msg, "time_vs: names none"), "%s", err.msg);
    remove_targets(&t, dir);
}
