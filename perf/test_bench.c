/* Tests of `kernlab bench`'s instruments. Suite bench (CPU, every machine): the targets files
 * against the registered workloads and the known metrics; the gate on synthetic results (which
 * variant it judges, the metric's value, pass and miss, ungated workloads, throttled rows, peers
 * never judged, the exit status it asks for); the re-check's plumbing (which launch of the last
 * replay is checked, what the results line says). Suite bench_gpu: the re-check of the last timed
 * replay catches a decode kernel that leaves its split counters dirty (perf/test_bench_mutants.cu),
 * which every single-launch check passes; a row timed on a power-capped GPU (played through this
 * binary's kl_clocks_read) is marked throttled in the gate line and the results. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/attention_decode/attention_decode.h"
#include "lab/core/args.h"
#include "lab/core/device.h"
#include "lab/core/registry.h"
#include "lab/core/results.h"
#include "perf/bench.h"

/* ---- the targets files ---- */

Test(bench, every_targets_file_matches_the_registered_workloads_and_metrics)
{
    const int ccs[] = {0, 80, 90};
    for (int i = 0; i < 3; i++) {
        struct kl_targets t;
        struct kl_err err = {{0}};
        cr_assert_eq(kl_targets_load(&t, KL_SOURCE_DIR "/perf/targets", ccs[i], &err), 0, "%s", err.msg);
        cr_assert_gt(t.count, 0, "%s has no targets", t.path);
        cr_expect_eq(kl_targets_check(&t, &err), 0, "%s", err.msg);
        kl_targets_free(&t);
    }
}

/* Loads `rows` (after the header) as a sm_90 targets file; returns 0 when it loads and checks. */
static int load_and_check(const char *rows, struct kl_err *err)
{
    char dir[] = "/tmp/kl_bench_targets_XXXXXX", path[64];
    cr_assert(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/sm_90.csv", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "module,workload,metric,target,source\n%s", rows);
    fclose(f);
    struct kl_targets t;
    int rc = kl_targets_load(&t, dir, 90, err);
    if (!rc) rc = kl_targets_check(&t, err), kl_targets_free(&t);
    remove(path);
    rmdir(dir);
    return rc;
}

Test(bench, a_target_row_that_matches_no_workload_or_metric_is_an_error)
{
    struct kl_err err = {{0}};
    cr_assert_eq(load_and_check("rmsnorm,prefill-16k,bw_frac,0.9,x\nallreduce,8KB-world*,latency_vs_nccl,0.5,x\n"
                                "radix,match_hot_p1,memcmp_frac,0.5,x\nrope,*,gated_variant,v5_pdl_one_trip,x\n"
                                "allreduce,add-rmsnorm-*,gated_variant,v12_lamport_add_rmsnorm_early,x\n",
                                &err),
                 0, "%s", err.msg);
    static const struct {
        const char *row, *says;
    } kbad[] = {
        {"rmsnorm,prefill-16x,bw_frac,0.9,a typo\n", "rmsnorm,prefill-16x"},
        {"allreduce,nccl-256m,busbw_frac,0.85,the sm_80 row that matched nothing\n", "allreduce,nccl-256m"},
        {"allreduce,8KB-world9*,latency_vs_nccl,0.5,no such world\n", "8KB-world9*"},
        {"nosuch,w,bw_frac,0.5,x\n", "no such module"},
        {"rmsnorm,prefill-16k,bw_fraction,0.9,x\n", "unknown metric 'bw_fraction'"},
        {"rope,*,gated_variant,v9_nosuch,x\n", "v9_nosuch"},
        {"allreduce,add-rmsnrom-*,gated_variant,v12_lamport_add_rmsnorm_early,a typo\n", "add-rmsnrom-*"},
    };
    for (size_t i = 0; i < sizeof kbad / sizeof kbad[0]; i++) {
        memset(&err, 0, sizeof err);
        cr_expect_neq(load_and_check(kbad[i].row, &err), 0, "accepted: %s", kbad[i].row);
        cr_expect(strstr(err.msg, kbad[i].says), "'%s': the error does not say '%s': %s", kbad[i].row, kbad[i].says,
                  err.msg);
    }
}

/* ---- the gate on synthetic results ---- */

static struct kl_targets cpu_targets(void)
{
    struct kl_targets t;
    struct kl_err err = {{0}};
    cr_assert_eq(kl_targets_load(&t, KL_SOURCE_DIR "/perf/targets", 0, &err), 0, "%s", err.msg);
    return t;
}

/* A radix row of variant v on workload w, re-checked and passing, memcmp_frac `frac`. */
static struct kl_result radix_row(const char *v, const char *w, double frac)
{
    struct kl_result r = {.module = "radix", .variant = v, .workload = w, .checked = true, .check_pass = true};
    r.time_us_median = 1;
    r.extra = cJSON_CreateObject();
    if (isfinite(frac)) cJSON_AddNumberToObject(r.extra, "memcmp_frac", frac);
    return r;
}

Test(bench, the_gate_judges_the_variant_asked_for_else_the_one_the_targets_name)
{
    struct kl_targets t = cpu_targets();
    char why[640];
    const char *v = kl_gate_variant(&t, "radix", NULL, why, sizeof why);
    cr_assert(v, "%s", why);
    cr_assert_str_eq(v, kl_targets_gated(&t, "radix"));
    v = kl_gate_variant(&t, "radix", "v0_scalar", why, sizeof why);
    cr_assert(v && strcmp(v, "v0_scalar") == 0, "--variant v0_scalar --gate judges v0_scalar");
    cr_assert_null(kl_gate_variant(&t, "rmsnorm", "v0_naive", why, sizeof why), "cpu.csv has no rmsnorm targets");
    cr_assert(strstr(why, "rmsnorm has no targets"), "%s", why);
    cr_assert_null(kl_gate_variant(NULL, "radix", NULL, why, sizeof why));
    kl_targets_free(&t);
}

/* Per workload: a fused family's workloads are judged on the variant their gated_variant row names,
 * the others on the module's; --variant judges what it names everywhere; nothing judged stays so. */
Test(bench, each_workload_is_judged_on_the_variant_the_targets_name_for_it)
{
    struct kl_targets t;
    struct kl_err err = {{0}};
    cr_assert_eq(kl_targets_load(&t, KL_SOURCE_DIR "/perf/targets", 90, &err), 0, "%s", err.msg);
    const char *ar = kl_targets_gated(&t, "allreduce"), *st = kl_targets_gated(&t, "store");
    cr_assert(ar && st);
    const char *fused_ar = kl_gate_variant_on(&t, "allreduce", ar, NULL, "add-rmsnorm-t1-h4096-world2");
    cr_assert(fused_ar && strcmp(fused_ar, ar) != 0, "the fused all-reduce workload is judged on %s", fused_ar);
    cr_assert_str_eq(kl_gate_variant_on(&t, "allreduce", ar, NULL, "8KB-world2"), ar);
    const char *fused_st = kl_gate_variant_on(&t, "store", st, NULL, "fused-decode-64");
    cr_assert(fused_st && strcmp(fused_st, st) != 0, "the fused store workload is judged on %s", fused_st);
    cr_assert_str_eq(kl_gate_variant_on(&t, "store", st, NULL, "decode-64-random"), st);
    cr_assert_str_eq(kl_gate_variant_on(&t, "allreduce", "v10_lamport_add_rmsnorm", "v10_lamport_add_rmsnorm",
                                        "add-rmsnorm-t1-h4096-world2"),
                     "v10_lamport_add_rmsnorm", "--variant is judged where it runs");
    cr_assert_null(kl_gate_variant_on(&t, "allreduce", NULL, NULL, "add-rmsnorm-t1-h4096-world2"),
                   "a run that judges nothing judges no workload");
    kl_targets_free(&t);
}

Test(bench, radix_v0_scalar_below_its_target_misses_and_the_run_says_so)
{
    struct kl_targets t = cpu_targets();
    struct kl_result r = radix_row("v0_scalar", "match_hot_p1", 0.07);
    const struct kl_target *tg = kl_gate_judge(&t, &r);
    cr_assert(tg, "match_hot_p1 has a target in cpu.csv");
    cr_assert_str_eq(r.gate_metric, "memcmp_frac");
    cr_assert_float_eq(r.gate_value, 0.07, 1e-12);
    cr_assert_float_eq(r.gate_target, tg->target, 0);
    cr_assert_not(r.gate_pass, "memcmp_frac 0.07 against %.2f passed", tg->target);
    static struct kl_gate_log log;
    memset(&log, 0, sizeof log);
    FILE *err = tmpfile();
    kl_gate_record(&log, &t, &r, err);
    cr_assert_eq(kl_gate_finish(&log, err), KL_EXIT_TARGET_MISSED, "a miss must fail the run");
    char line[512] = "";
    rewind(err);
    cr_assert(fgets(line, sizeof line, err));
    cr_assert(strstr(line, "gate: MISS radix v0_scalar match_hot_p1: memcmp_frac 0.070, target >= 0.500"), "%s", line);
    fclose(err);
    cJSON_Delete(r.extra);

    r = radix_row("v1_simd", "match_hot_p1", 0.8);
    kl_gate_judge(&t, &r);
    cr_assert(r.gate_pass);
    memset(&log, 0, sizeof log);
    kl_gate_record(&log, &t, &r, stderr);
    cr_assert_eq(kl_gate_finish(&log, stderr), 0);
    cJSON_Delete(r.extra);
    kl_targets_free(&t);
}

Test(bench, a_row_whose_recheck_failed_or_that_lacks_the_metric_never_passes)
{
    struct kl_targets t = cpu_targets();
    struct kl_result r = radix_row("v1_simd", "match_hot_p1", 0.9);
    r.check_pass = false;
    kl_gate_judge(&t, &r);
    cr_assert_not(r.gate_pass, "a wrong output passed the gate");
    r.check_pass = true, r.checked = false;
    kl_gate_judge(&t, &r);
    cr_assert_not(r.gate_pass, "an output never re-checked passed the gate");
    cJSON_Delete(r.extra);
    r = radix_row("v1_simd", "match_hot_p1", NAN);
    kl_gate_judge(&t, &r);
    cr_assert(r.gate_metric && !r.gate_pass && isnan(r.gate_value), "a row without memcmp_frac passed");
    cJSON_Delete(r.extra);
    kl_targets_free(&t);
}

/* The results line of r, parsed. */
static cJSON *written(const struct kl_result *r)
{
    char buf[8192] = "";
    FILE *f = tmpfile();
    cr_assert_eq(kl_result_write(f, r), 0);
    rewind(f);
    cr_assert(fgets(buf, sizeof buf, f));
    fclose(f);
    cJSON *o = cJSON_Parse(buf);
    cr_assert(o, "not JSON: %s", buf);
    return o;
}

Test(bench, a_workload_without_a_target_is_ungated_in_the_results_and_listed_at_the_end)
{
    struct kl_targets t = cpu_targets();
    struct kl_result r = radix_row("v1_simd", "churn_p1", NAN);
    cr_assert_null(kl_gate_judge(&t, &r), "churn_p1 has no target row in cpu.csv");
    cr_assert(r.gate_ungated);
    char cell[96];
    cr_assert_str_eq(kl_gate_cell(cell, sizeof cell, &r), "ungated");
    cJSON *o = written(&r);
    const cJSON *g = cJSON_GetObjectItem(o, "gate");
    cr_assert(cJSON_IsObject(g), "an ungated row writes a gate object");
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(g, "metric")) && cJSON_IsNull(cJSON_GetObjectItem(g, "target")) &&
              cJSON_IsNull(cJSON_GetObjectItem(g, "pass")) && cJSON_IsTrue(cJSON_GetObjectItem(g, "ungated")));
    cJSON_Delete(o);
    static struct kl_gate_log log;
    memset(&log, 0, sizeof log);
    FILE *err = tmpfile();
    kl_gate_record(&log, &t, &r, err);
    cr_assert_eq(kl_gate_finish(&log, err), 1, "a gate that judged nothing passed nothing");
    char text[1024] = "";
    rewind(err);
    fread(text, 1, sizeof text - 1, err);
    fclose(err);
    cr_assert(strstr(text, "gate: ungated radix churn_p1 (v1_simd): no target row in"), "%s", text);
    cr_assert(strstr(text, "gate: nothing judged"), "%s", text);
    cJSON_Delete(r.extra);
    kl_targets_free(&t);
}

Test(bench, a_peer_or_the_yardstick_never_carries_a_pass)
{
    struct kl_targets t = cpu_targets();
    struct kl_result r = radix_row("memcmp", "match_hot_p1", 5.0);
    cJSON_AddTrueToObject(r.extra, "peer");
    cr_assert_null(kl_gate_judge(&t, &r));
    cr_assert(!r.gate_metric && !r.gate_ungated && !r.gate_pass, "a peer's row was judged");
    cJSON *o = written(&r);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItem(o, "gate")), "a peer's row writes \"gate\": null");
    cJSON_Delete(o);
    cJSON_Delete(r.extra);
    kl_targets_free(&t);

    /* allreduce: NCCL is what latency_vs_nccl and busbw_frac divide by, on every architecture. */
    for (int cc = 80; cc <= 90; cc += 10) {
        struct kl_err err = {{0}};
        cr_assert_eq(kl_targets_load(&t, KL_SOURCE_DIR "/perf/targets", cc, &err), 0, "%s", err.msg);
        char why[640];
        const char *v = kl_gate_variant(&t, "allreduce", NULL, why, sizeof why);
        cr_assert(v && strcmp(v, "v0_nccl") != 0, "sm_%d: allreduce gates %s", cc, v ? v : why);
        if (cc == 90) {
            for (int y = 0; y < 2; y++) {
                const char *nccl = y ? "v0_nccl_symmetric" : "v0_nccl";
                cr_assert_null(kl_gate_variant(&t, "allreduce", nccl, why, sizeof why), "%s judged against itself", nccl);
                cr_assert(strstr(why, "yardstick"), "%s", why);
            }
        }
        kl_targets_free(&t);
    }
}

Test(bench, metric_values_come_from_the_row_and_smaller_wins_for_latencies)
{
    struct kl_result r = {.module = "allreduce", .variant = "v6_switch", .workload = "8KB-world2",
                          .checked = true, .check_pass = true};
    r.bw_frac = 0.8, r.tc_frac = 0.3, r.time_us_median = 12;
    r.extra = cJSON_CreateObject();
    cJSON_AddNumberToObject(r.extra, "read_frac", 0.9);
    cJSON_AddNumberToObject(r.extra, "latency_vs_nccl", 0.6);
    cr_assert_float_eq(kl_metric_value("bw_frac", &r), 0.8, 0);
    cr_assert_float_eq(kl_metric_value("tc_frac", &r), 0.3, 0);
    cr_assert_float_eq(kl_metric_value("latency_us", &r), 12, 0);
    cr_assert_float_eq(kl_metric_value("read_frac", &r), 0.9, 0);
    cr_assert(isnan(kl_metric_value("busbw_frac", &r)), "a metric the row lacks is NaN");
    cr_assert(isnan(kl_metric_value("check", &r)), "an unknown metric is NaN");
    struct kl_target row = {"allreduce", "8KB-world*", "latency_vs_nccl", 0.5, "x"};
    struct kl_targets t = {.count = 1, .rows = &row};
    kl_gate_judge(&t, &r);
    cr_assert_not(r.gate_pass, "0.6 of NCCL's time against <= 0.5 passed");
    cJSON_ReplaceItemInObject(r.extra, "latency_vs_nccl", cJSON_CreateNumber(0.4));
    kl_gate_judge(&t, &r);
    cr_assert(r.gate_pass, "0.4 of NCCL's time against <= 0.5 missed");
    char cell[96];
    cr_assert_str_eq(kl_gate_cell(cell, sizeof cell, &r), "pass latency_vs_nccl 0.400<=0.50");
    cJSON_Delete(r.extra);
}

Test(bench, throttled_rows_are_marked_in_the_gate_line_and_the_results)
{
    const struct kl_clocks before = {.valid = true, .sm_mhz = 1980};
    struct kl_clocks after = {.valid = true, .sm_mhz = 1980};
    char why[160];
    cr_assert_not(kl_throttled(&before, &after, why, sizeof why));
    after.throttle_reasons = 0x1; /* GPU idle: not a slowdown */
    cr_assert_not(kl_throttled(&before, &after, why, sizeof why));
    after.sm_mhz = 1890; /* within 5% */
    cr_assert_not(kl_throttled(&before, &after, why, sizeof why));
    after.sm_mhz = 1700;
    cr_assert(kl_throttled(&before, &after, why, sizeof why));
    cr_assert_str_eq(why, "SM clock 1980 -> 1700 MHz");
    after.sm_mhz = 1980, after.throttle_reasons = 0x4 | 0x40;
    cr_assert(kl_throttled(&before, &after, why, sizeof why));
    cr_assert_str_eq(why, "SM clock 1980 -> 1980 MHz, power cap, HW thermal");
    const struct kl_clocks none = {0};
    cr_assert_not(kl_throttled(&none, &after, why, sizeof why), "no NVML: nothing to mark");

    struct kl_targets t = cpu_targets();
    struct kl_result r = radix_row("v1_simd", "match_hot_p1", 0.4);
    kl_clocks_json(r.extra, &before, &after);
    r.throttled = kl_throttled(&before, &after, why, sizeof why);
    kl_gate_judge(&t, &r);
    char cell[96];
    cr_assert(strstr(kl_gate_cell(cell, sizeof cell, &r), "MISS memcmp_frac 0.400>=0.50 throttled"), "%s", cell);
    static struct kl_gate_log log;
    memset(&log, 0, sizeof log);
    FILE *err = tmpfile();
    kl_gate_record(&log, &t, &r, err);
    char line[512] = "";
    rewind(err);
    cr_assert(fgets(line, sizeof line, err));
    fclose(err);
    cr_assert(strstr(line, "throttled: SM clock 1980 -> 1980 MHz, power cap, HW thermal"), "%s", line);
    cr_assert_eq(log.throttled, 1);
    cJSON *o = written(&r);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(o, "throttled")));
    cr_assert_str_eq(cJSON_GetObjectItem(o, "throttle_why")->valuestring, why);
    cr_assert_eq(cJSON_GetObjectItem(o, "clock_event_reasons")->valueint, 0x44);
    cJSON_Delete(o);
    cJSON_Delete(r.extra);
    kl_targets_free(&t);
}

/* perf/peers/clocks.py marks the peers' rows by the same rule, with the same words. */
Test(bench, the_peers_mark_throttled_rows_by_the_same_rule)
{
    static const struct {
        bool valid;
        int before, after;
        unsigned long long reasons;
    } kcases[] = {{true, 1980, 1980, 0},    {true, 1980, 1700, 0},   {true, 1980, 1890, 0},
                  {true, 1980, 1980, 0x1},  {true, 1980, 1850, 0},   {true, 1980, 1980, 0x44},
                  {true, 1755, 1980, 0x8},  {false, 1980, 1200, 0x4}, {true, 1980, 1980, 0x2}};
    const int n = (int)(sizeof kcases / sizeof kcases[0]);
    char cmd[4096];
    int len = snprintf(cmd, sizeof cmd,
                       "python3 -c 'import sys; sys.path.insert(0, \"%s/perf/peers\"); import clocks\n"
                       "for v, b, a, r in [",
                       KL_SOURCE_DIR);
    for (int i = 0; i < n; i++)
        len += snprintf(cmd + len, sizeof cmd - (size_t)len, "(%s, %d, %d, %llu),", kcases[i].valid ? "True" : "False",
                        kcases[i].before, kcases[i].after, kcases[i].reasons);
    snprintf(cmd + len, sizeof cmd - (size_t)len,
             "]:\n    t, why = clocks.throttled({\"valid\": v, \"sm_mhz\": b}, "
             "{\"valid\": v, \"sm_mhz\": a, \"reasons\": r})\n    print(int(t), why)' 2>&1");
    FILE *p = popen(cmd, "r");
    if (!p) cr_skip_test("no shell to run python3");
    char line[256];
    for (int i = 0; i < n; i++) {
        if (!fgets(line, sizeof line, p)) {
            pclose(p);
            if (i == 0) cr_skip_test("python3 did not run perf/peers/clocks.py");
            cr_assert_fail("clocks.py stopped after %d cases", i);
        }
        line[strcspn(line, "\n")] = 0;
        const struct kl_clocks b = {.valid = kcases[i].valid, .sm_mhz = kcases[i].before};
        const struct kl_clocks a = {.valid = kcases[i].valid, .sm_mhz = kcases[i].after,
                                    .throttle_reasons = kcases[i].reasons};
        char why[160], want[200];
        const bool t = kl_throttled(&b, &a, why, sizeof why);
        snprintf(want, sizeof want, "%d %s", t, why);
        cr_expect_str_eq(line, want, "case %d: clocks.py says '%s', kl_throttled '%s'", i, line, want);
    }
    pclose(p);
}

/* ---- the re-check's plumbing ---- */

/* The re-check reads input set 0 after the last repetition: set 0 must be that repetition's last
 * launch (no other set overwrites a shared output after it: store's cache) and, with two sets or
 * more, its only one (an in-place kernel's output is one application: rope). */
Test(bench, the_checked_launch_is_the_last_and_only_one_of_set_0_in_the_replay)
{
    for (int sets = 1; sets <= 64; sets++)
        for (int n = 1; n <= 80; n++) {
            int zeros = 0, seen[64] = {0};
            for (int i = 0; i < n; i++) {
                const int s = kl_time_set(i, n, sets);
                cr_assert(s >= 0 && s < sets, "launch %d of %d, %d sets: set %d", i, n, sets, s);
                zeros += s == 0;
                seen[s] = 1;
            }
            cr_assert_eq(kl_time_set(n - 1, n, sets), 0, "the last of %d launches (%d sets) is not set 0", n, sets);
            if (sets >= 2) cr_assert_eq(zeros, 1, "%d launches over %d sets run set 0 %d times", n, sets, zeros);
            if (n >= sets)
                for (int s = 0; s < sets; s++) cr_assert(seen[s], "%d launches never run set %d of %d", n, s, sets);
        }
}

Test(bench, every_benched_module_poisons_and_rechecks_its_outputs)
{
    int n = 0;
    for (int i = 0; i < kl_module_count(); i++) {
        const struct kl_module *m = kl_module_at(i);
        if (!m->perf) continue;
        n++;
        cr_expect(m->perf->poison, "%s: no poison: its re-check could read a stale output", m->name);
        cr_expect(m->perf->check, "%s: no re-check", m->name);
    }
    cr_assert_gt(n, 0);
    cr_assert(kl_module_find("rope")->perf->in_place, "rope rotates q and k in place");
}

Test(bench, the_results_say_which_replay_was_rechecked_and_what_it_covered)
{
    const struct kl_recheck what = {.sample = false, .checked = 1024, .of = 1024, .reason = "out of set 0"};
    const struct kl_timing t = {.graph = true, .launches = 20};
    struct kl_result r = {.module = "rmsnorm", .variant = "v0", .workload = "w", .checked = true, .check_pass = true};
    r.extra = cJSON_CreateObject();
    kl_recheck_json(r.extra, &what, &t);
    cJSON *o = written(&r);
    const cJSON *rc = cJSON_GetObjectItem(o, "recheck");
    cr_assert(cJSON_IsObject(rc));
    cr_assert_str_eq(cJSON_GetObjectItem(rc, "replay")->valuestring, "graph");
    cr_assert_str_eq(cJSON_GetObjectItem(rc, "outputs")->valuestring, "all");
    cr_assert_eq(cJSON_GetObjectItem(rc, "checked")->valuedouble, 1024);
    cr_assert_eq(cJSON_GetObjectItem(rc, "of")->valuedouble, 1024);
    cr_assert_str_eq(cJSON_GetObjectItem(rc, "reason")->valuestring, "out of set 0");
    cr_assert_eq(cJSON_GetObjectItem(rc, "launches_in_replay")->valueint, 20);
    cJSON_Delete(o);
    cJSON_Delete(r.extra);
}

/* ---- on the device ---- */

/* This binary's clock readings (kl_clocks_read is weak in perf/clocks.c): none, as on a machine
 * without NVML, unless a test plays a GPU held at 1500 MHz by its power cap. */
static bool play_throttled;
void kl_clocks_read(struct kl_clocks *c)
{
    memset(c, 0, sizeof *c);
    if (play_throttled)
        *c = (struct kl_clocks){.valid = true, .sm_mhz = 1500, .mem_mhz = 2619, .throttle_reasons = 0x4};
}

static struct kl_ceilings gpu_ceilings(void)
{
    struct kl_ceilings c;
    struct kl_err err = {{0}};
    if (!kl_have_gpu()) cr_skip_test("no CUDA device");
    cr_assert_eq(kl_ceilings_measure(&c, NULL, &err), 0, "%s", err.msg);
    if (c.dev.cc < 80) cr_skip_test("needs sm_80");
    return c;
}

/* One row of variant v on attention_decode's small workload: its failures count and results line. */
static int bench_decode(const struct kl_ceilings *c, const char *v, cJSON **row)
{
    FILE *json = tmpfile();
    int failures = 0;
    const struct kl_bench_args a = {.module = kl_module_find("attention_decode"), .variant = v,
                                    .workload = "b8-kv512-p16", .json = json, .ceil = c, .failures = &failures,
                                    .table = stdout, .seed = 1234};
    cr_assert_eq(kl_bench_module(&a), 1, "%s did not run", v);
    char buf[1 << 16] = "";
    rewind(json);
    cr_assert(fgets(buf, sizeof buf, json), "%s wrote no results line", v);
    fclose(json);
    *row = cJSON_Parse(buf);
    return failures;
}

Test(bench_gpu, a_decode_that_never_resets_its_split_counter_fails_the_recheck)
{
    const struct kl_ceilings c = gpu_ceilings();
    /* The mutant differs from v4 only where the keys are split (b8-kv512-p16: a few splits per
     * request on any GPU of tens of SMs). */
    const struct kl_attention_decode_params p = {.batch = 8, .num_qo_heads = 32, .num_kv_heads = 8, .head_dim = 128,
                                                 .page_size = 16, .max_kv_len = 512, .dtype = KL_BF16};
    if (kl_attention_decode_split(&p, kl_attention_decode_sms(), 4, 64, 128, 2048).splits <= 1)
        cr_skip_test("b8-kv512-p16 is not split on this GPU: the mutant is v4 here");
    cJSON *row = NULL;
    cr_assert_eq(bench_decode(&c, "v4_tensor_cores", &row), 0, "v4_tensor_cores failed its re-check");
    const cJSON *rc = cJSON_GetObjectItem(row, "recheck");
    cr_assert_str_eq(cJSON_GetObjectItem(rc, "replay")->valuestring, "graph");
    cr_assert_str_eq(cJSON_GetObjectItem(rc, "outputs")->valuestring, "all");
    cJSON_Delete(row);
    cr_assert_eq(bench_decode(&c, "mutant_split_counter_never_reset", &row), 1,
                 "a decode that writes its output on its first launch only passed the bench re-check");
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(cJSON_GetObjectItem(row, "check"), "pass")));
    cJSON_Delete(row);
}

/* The gated variant's row of a run whose GPU stayed power-capped: marked throttled in the table's
 * gate column, in the results, and counted in the gate's closing line. */
Test(bench_gpu, a_throttled_row_is_marked_in_the_gate_line_and_the_results)
{
    const struct kl_ceilings c = gpu_ceilings();
    struct kl_targets t;
    struct kl_err err = {{0}};
    cr_assert_eq(kl_targets_load(&t, KL_SOURCE_DIR "/perf/targets", c.dev.cc, &err), 0, "%s", err.msg);
    static struct kl_gate_log log;
    memset(&log, 0, sizeof log);
    FILE *json = tmpfile(), *table = tmpfile();
    int failures = 0;
    const char *gated = kl_targets_gated(&t, "rmsnorm");
    const struct kl_bench_args a = {.module = kl_module_find("rmsnorm"), .variant = gated, .workload = "decode-64",
                                    .json = json, .gate = true, .ceil = &c, .targets = &t, .gate_log = &log,
                                    .failures = &failures, .table = table, .seed = 1234};
    play_throttled = true;
    const int ran = kl_bench_module(&a);
    play_throttled = false;
    cr_assert_eq(ran, 1);
    char line[512] = "", buf[1 << 16] = "";
    rewind(table);
    cr_assert(fgets(line, sizeof line, table));
    printf("%s", line); /* the table line, for whoever runs this */
    cr_assert(strstr(line, " throttled"), "the gate column does not say throttled: %s", line);
    rewind(json);
    cr_assert(fgets(buf, sizeof buf, json));
    cJSON *row = cJSON_Parse(buf);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(row, "throttled")));
    cr_assert_str_eq(cJSON_GetObjectItem(row, "throttle_why")->valuestring, "SM clock 1500 -> 1500 MHz, power cap");
    cr_assert_eq(log.throttled, cJSON_IsString(cJSON_GetObjectItem(cJSON_GetObjectItem(row, "gate"), "metric")));
    cJSON_Delete(row);
    fclose(json), fclose(table);
    kl_gate_finish(&log, stdout);
    kl_targets_free(&t);
}
