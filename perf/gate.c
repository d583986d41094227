/* The gate (lab/CONTRACTS.md section 6): which variant a gated run judges, the value of a
 * target's metric in a result, pass or miss, the workloads no target covers, throttled rows, and
 * what a re-check compared. Functions of results and targets alone, so perf/test_bench.c checks
 * them without a GPU; perf/bench.c, lab/allreduce/perf.c and lab/radix/module.c all judge
 * through them. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lab/core/args.h"
#include "perf/bench.h"

/* Metrics measured against variants of the same run (the faster of the two NCCL baselines), and
 * those variants: they cannot be judged by them (NCCL's latency over NCCL's is 1 whatever NCCL does). */
static const struct {
    const char *metric, *yardstick;
} kyardsticks[] = {{"latency_vs_nccl", "v0_nccl"},
                   {"busbw_frac", "v0_nccl"},
                   {"latency_vs_nccl", "v0_nccl_symmetric"},
                   {"busbw_frac", "v0_nccl_symmetric"}};

double kl_metric_value(const char *metric, const struct kl_result *r)
{
    if (!kl_metric_known(metric)) return NAN;
    if (strcmp(metric, "bw_frac") == 0) return r->bw_frac;
    if (strcmp(metric, "tc_frac") == 0) return r->tc_frac;
    if (strcmp(metric, "latency_us") == 0) return r->time_us_median;
    const cJSON *x = r->extra ? cJSON_GetObjectItemCaseSensitive(r->extra, metric) : NULL;
    return cJSON_IsNumber(x) ? x->valuedouble : NAN;
}

static bool module_has_rows(const struct kl_targets *t, const char *module)
{
    for (int i = 0; t && i < t->count; i++)
        if (strcmp(t->rows[i].module, module) == 0) return true;
    return false;
}

const char *kl_gate_variant(const struct kl_targets *t, const char *module, const char *asked, char *why, size_t len)
{
    if (!t) return snprintf(why, len, "no targets loaded"), NULL;
    if (!module_has_rows(t, module)) return snprintf(why, len, "%s has no targets in %s", module, t->path), NULL;
    const char *v = asked ? asked : kl_targets_gated(t, module);
    if (!v) return snprintf(why, len, "%s names no gated_variant for %s", t->path, module), NULL;
    for (int i = 0; i < t->count; i++) {
        if (strcmp(t->rows[i].module, module) != 0) continue;
        for (size_t k = 0; k < sizeof kyardsticks / sizeof kyardsticks[0]; k++)
            if (strcmp(t->rows[i].metric, kyardsticks[k].metric) == 0 && strcmp(v, kyardsticks[k].yardstick) == 0) {
                snprintf(why, len, "%s is the yardstick of %s's %s targets: it is never judged against itself", v,
                         module, kyardsticks[k].metric);
                return NULL;
            }
    }
    return v;
}

const char *kl_gate_variant_on(const struct kl_targets *t, const char *module, const char *judged, const char *asked,
                               const char *workload)
{
    return judged && !asked ? kl_targets_gated_for(t, module, workload) : judged;
}

static bool target_met(const struct kl_target *tg, double v)
{
    return isfinite(v) && (kl_metric_lower_is_better(tg->metric) ? v <= tg->target : v >= tg->target);
}

const struct kl_target *kl_gate_judge(const struct kl_targets *t, struct kl_result *r)
{
    r->gate_metric = NULL, r->gate_ungated = false, r->gate_pass = false;
    r->gate_target = r->gate_value = NAN;
    if (cJSON_IsTrue(r->extra ? cJSON_GetObjectItemCaseSensitive(r->extra, "peer") : NULL)) return NULL;
    const struct kl_target *rows[KL_MAX_TARGETS_PER_WORKLOAD];
    const int n = kl_targets_for(t, r->module, r->workload, rows, KL_MAX_TARGETS_PER_WORKLOAD);
    if (!n) {
        r->gate_ungated = t != NULL;
        return NULL;
    }
    /* Every row must pass; the row shows the first that failed, else the last. */
    const struct kl_target *shown = rows[n - 1];
    bool all = true;
    for (int k = 0; k < n; k++)
        if (!target_met(rows[k], kl_metric_value(rows[k]->metric, r)) && all) all = false, shown = rows[k];
    r->gate_metric = shown->metric, r->gate_target = shown->target, r->gate_value = kl_metric_value(shown->metric, r);
    r->gate_pass = r->checked && r->check_pass && all;
    return shown;
}

const char *kl_gate_cell(char *buf, size_t len, const struct kl_result *r)
{
    const char *thr = r->throttled ? " throttled" : "";
    if (r->gate_metric)
        snprintf(buf, len, "%s %s %.3f%s%.2f%s", r->gate_pass ? "pass" : "MISS", r->gate_metric, r->gate_value,
                 kl_metric_lower_is_better(r->gate_metric) ? "<=" : ">=", r->gate_target, thr);
    else snprintf(buf, len, "%s%s", r->gate_ungated ? "ungated" : "-", thr);
    return buf;
}

/* A targets file's path as the repository names it (perf/targets/sm_90.csv). */
static const char *repo_path(const struct kl_targets *t)
{
    const size_t n = strlen(KL_SOURCE_DIR);
    if (!t) return "the targets";
    return strncmp(t->path, KL_SOURCE_DIR "/", n + 1) == 0 ? t->path + n + 1 : t->path;
}

void kl_gate_record(struct kl_gate_log *log, const struct kl_targets *t, const struct kl_result *r, FILE *err)
{
    if (r->gate_ungated && log->n_ungated < KL_GATE_MAX_UNGATED)
        snprintf(log->ungated[log->n_ungated++], sizeof log->ungated[0], "%s %s (%s): no target row in %.64s",
                 r->module, r->workload, r->variant, repo_path(t));
    if (!r->gate_metric) return;
    log->judged++;
    log->throttled += r->throttled;
    if (r->gate_pass) return;
    log->missed++;
    const cJSON *why = r->extra ? cJSON_GetObjectItemCaseSensitive(r->extra, "throttle_why") : NULL;
    const struct kl_target *rows[KL_MAX_TARGETS_PER_WORKLOAD];
    const int n = kl_targets_for(t, r->module, r->workload, rows, KL_MAX_TARGETS_PER_WORKLOAD);
    for (int k = 0; k < n; k++) { /* a line per target missed (all of them when the re-check failed) */
        const double v = kl_metric_value(rows[k]->metric, r);
        if (target_met(rows[k], v) && r->checked && r->check_pass) continue;
        fprintf(err, "gate: MISS %s %s %s: %s %.3f, target %s %.3f%s%s%s%s (%s)\n", r->module, r->variant, r->workload,
                rows[k]->metric, v, kl_metric_lower_is_better(rows[k]->metric) ? "<=" : ">=", rows[k]->target,
                r->checked && r->check_pass ? "" : ", output re-check failed", r->throttled ? ", throttled: " : "",
                r->throttled && cJSON_IsString(why) ? why->valuestring : "",
                isfinite(v) ? "" : ", the row has no value for this metric", rows[k]->source);
    }
}

int kl_gate_finish(const struct kl_gate_log *log, FILE *err)
{
    for (int i = 0; i < log->n_ungated; i++) fprintf(err, "gate: ungated %s\n", log->ungated[i]);
    if (!log->judged) {
        fprintf(err, "gate: nothing judged\n");
        return 1;
    }
    fprintf(err, "gate: %d row%s judged, %d missed, %d throttled, %d ungated\n", log->judged,
            log->judged == 1 ? "" : "s", log->missed, log->throttled, log->n_ungated);
    return log->missed ? KL_EXIT_TARGET_MISSED : 0;
}

bool kl_throttled(const struct kl_clocks *before, const struct kl_clocks *after, char *why, size_t len)
{
    if (len) why[0] = 0;
    if (!before->valid || !after->valid) return false;
    static const struct {
        unsigned long long bit;
        const char *name;
    } kreasons[] = {{0x4, "power cap"}, {0x8, "HW slowdown"}, {0x20, "SW thermal"}, {0x40, "HW thermal"},
                    {0x80, "power brake"}};
    const bool fell = after->sm_mhz < 0.95 * before->sm_mhz;
    const unsigned long long reasons = after->throttle_reasons & KL_THROTTLE_REASONS;
    if (!fell && !reasons) return false;
    size_t n = (size_t)snprintf(why, len, "SM clock %d -> %d MHz", before->sm_mhz, after->sm_mhz);
    for (size_t k = 0; k < sizeof kreasons / sizeof kreasons[0]; k++)
        if ((reasons & kreasons[k].bit) && n < len) n += (size_t)snprintf(why + n, len - n, ", %s", kreasons[k].name);
    return true;
}

void kl_clocks_json(cJSON *extra, const struct kl_clocks *before, const struct kl_clocks *after)
{
    if (!before->valid || !after->valid) return;
    cJSON_AddNumberToObject(extra, "sm_clock_mhz_before", before->sm_mhz);
    cJSON_AddNumberToObject(extra, "sm_clock_mhz_after", after->sm_mhz);
    cJSON_AddNumberToObject(extra, "clock_event_reasons", (double)after->throttle_reasons);
    char why[160];
    if (kl_throttled(before, after, why, sizeof why)) cJSON_AddStringToObject(extra, "throttle_why", why);
}

void kl_recheck_json(cJSON *extra, const struct kl_recheck *what, const struct kl_timing *t)
{
    cJSON *o = cJSON_AddObjectToObject(extra, "recheck");
    cJSON_AddStringToObject(o, "replay", t->graph ? "graph" : "events");
    cJSON_AddStringToObject(o, "outputs", what->sample ? "sample" : "all");
    cJSON_AddNumberToObject(o, "checked", what->checked);
    cJSON_AddNumberToObject(o, "of", what->of);
    cJSON_AddStringToObject(o, "reason", what->reason);
    cJSON_AddNumberToObject(o, "launches_in_replay", t->launches);
}
