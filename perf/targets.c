/* perf/targets/<arch>.csv: module,workload,metric,target,source (one header line); a
 * `gated_variant` row names the variant the gate judges for its module (workload `*`), or for the
 * workloads its pattern matches (a workload the `*` variant cannot run). A metric the gate does
 * not know is an error when the file is loaded; kl_targets_check also holds every row against
 * the workloads of the modules in this binary, so a row that can never judge anything (a
 * renamed workload, a typo) fails `kernlab bench --gate` and the CPU tests. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf/bench.h"

int kl_targets_load(struct kl_targets *t, const char *dir, int cc, struct kl_err *err)
{
    memset(t, 0, sizeof *t);
    const char *file = cc == 0                ? "cpu.csv"
                       : cc >= 90 && cc < 100 ? "sm_90.csv"
                       : cc >= 80 && cc < 90  ? "sm_80_a100.csv"
                                              : NULL;
    if (!file) return kl_fail(err, "no targets for sm_%d (perf/targets has cpu.csv, sm_80_a100.csv and sm_90.csv)", cc);
    snprintf(t->path, sizeof t->path, "%s/%s", dir, file);
    FILE *f = fopen(t->path, "r");
    if (!f) return kl_fail(err, "%s: %s", t->path, strerror(errno));
    char line[1024];
    int lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        line[strcspn(line, "\r\n")] = 0;
        if (lineno == 1 || !line[0] || line[0] == '#') continue;
        struct kl_target r = {0};
        char target[64];
        /* The source is the rest of the line and may hold commas. */
        if (sscanf(line, "%31[^,],%63[^,],%95[^,],%63[^,],%255[^\n]", r.module, r.workload, r.metric, target,
                   r.source) < 4) {
            fclose(f);
            kl_targets_free(t);
            return kl_fail(err, "%s:%d: expected module,workload,metric,target,source", t->path, lineno);
        }
        if (strcmp(r.metric, "gated_variant") == 0) {
            struct kl_gated g;
            memset(&g, 0, sizeof g);
            snprintf(g.module, sizeof g.module, "%s", r.module);
            snprintf(g.workload, sizeof g.workload, "%s", r.workload);
            snprintf(g.variant, sizeof g.variant, "%s", target);
            bool twice = false;
            for (int i = 0; i < t->n_gated; i++)
                twice |= strcmp(t->gated[i].module, g.module) == 0 && strcmp(t->gated[i].workload, g.workload) == 0;
            if (twice) {
                fclose(f);
                kl_targets_free(t);
                return kl_fail(err, "%s:%d: a second gated_variant row for %s workload '%s' (one per module and workload)",
                               t->path, lineno, g.module, g.workload);
            }
            t->gated = realloc(t->gated, sizeof *t->gated * (size_t)(t->n_gated + 1));
            t->gated[t->n_gated++] = g;
            continue;
        }
        if (!kl_metric_known(r.metric)) {
            fclose(f);
            kl_targets_free(t);
            return kl_fail(err, "%s:%d: unknown metric '%s' (bw_frac, tc_frac, read_frac, copy_same_bytes_frac, "
                                "floor_frac, latency_us, latency_vs_nccl, busbw_frac, memcmp_frac, over_allreduce_us, "
                                "time_vs_composite, time_vs_peer, time_vs:<workload> or gated_variant)",
                           t->path, lineno, r.metric);
        }
        char *end;
        r.target = strtod(target, &end);
        if (*end) {
            fclose(f);
            kl_targets_free(t);
            return kl_fail(err, "%s:%d: target '%s' is not a number", t->path, lineno, target);
        }
        t->rows = realloc(t->rows, sizeof *t->rows * (size_t)(t->count + 1));
        t->rows[t->count++] = r;
    }
    fclose(f);
    return 0;
}

/* A workload ending in '*' matches every workload with that prefix ("8KB-world*": any world);
 * an exact row wins over a pattern of the same metric. */
static bool workload_matches(const char *pattern, const char *workload)
{
    const size_t n = strlen(pattern);
    return n && pattern[n - 1] == '*' ? strncmp(pattern, workload, n - 1) == 0 : strcmp(pattern, workload) == 0;
}

int kl_targets_for(const struct kl_targets *t, const char *module, const char *workload, const struct kl_target **rows,
                   int max)
{
    int n = 0;
    for (int pass = 0; pass < 2; pass++) /* exact rows, then patterns for the metrics they leave out */
        for (int i = 0; t && i < t->count && n < max; i++) {
            const struct kl_target *x = &t->rows[i];
            if (strcmp(x->module, module) != 0 || !(pass ? workload_matches(x->workload, workload) && strcmp(x->workload, workload) != 0
                                                          : strcmp(x->workload, workload) == 0))
                continue;
            bool shadowed = false;
            for (int k = 0; pass && k < n; k++) shadowed |= strcmp(rows[k]->metric, x->metric) == 0;
            if (!shadowed) rows[n++] = x;
        }
    return n;
}

const struct kl_target *kl_target_find(const struct kl_targets *t, const char *module, const char *workload)
{
    const struct kl_target *first = NULL;
    return kl_targets_for(t, module, workload, &first, 1) ? first : NULL;
}

const char *kl_targets_gated(const struct kl_targets *t, const char *module)
{
    for (int i = 0; t && i < t->n_gated; i++)
        if (strcmp(t->gated[i].module, module) == 0 && strcmp(t->gated[i].workload, "*") == 0) return t->gated[i].variant;
    return NULL;
}

const char *kl_targets_gated_for(const struct kl_targets *t, const char *module, const char *workload)
{
    for (int pass = 0; pass < 2; pass++) /* an exact row, then a pattern other than "*" */
        for (int i = 0; t && i < t->n_gated; i++) {
            const struct kl_gated *g = &t->gated[i];
            if (strcmp(g->module, module) != 0 || strcmp(g->workload, "*") == 0) continue;
            if (pass ? workload_matches(g->workload, workload) : strcmp(g->workload, workload) == 0) return g->variant;
        }
    return kl_targets_gated(t, module);
}

const struct kl_variant *kl_gated_variant(const char *module, int cc, struct kl_err *err)
{
    struct kl_targets t;
    if (kl_targets_load(&t, KL_SOURCE_DIR "/perf/targets", cc, err)) return NULL;
    const char *name = kl_targets_gated(&t, module);
    const struct kl_variant *v = name ? kl_variant_find(module, name) : NULL;
    if (!name) kl_fail(err, "%s names no gated_variant for %s", t.path, module);
    else if (!v) kl_fail(err, "%s: gated_variant %s of %s is not a registered variant", t.path, name, module);
    kl_targets_free(&t);
    return v;
}

const char *kl_metric_relation_workload(const char *metric)
{
    return strncmp(metric, "time_vs:", 8) == 0 && metric[8] ? metric + 8 : NULL;
}

const char *kl_metric_relation_parts(const char *metric, char *buf, size_t len)
{
    const char *w = kl_metric_relation_workload(metric), *at = w ? strchr(w, '@') : NULL;
    snprintf(buf, len, "%.*s", w ? (int)(at ? (size_t)(at - w) : strlen(w)) : 0, w ? w : "");
    return at && at[1] ? at + 1 : NULL;
}

bool kl_metric_lower_is_better(const char *metric)
{
    return strcmp(metric, "latency_us") == 0 || strcmp(metric, "latency_vs_nccl") == 0 ||
           strcmp(metric, "over_allreduce_us") == 0 || strcmp(metric, "time_vs_composite") == 0 ||
           strcmp(metric, "time_vs_peer") == 0 || kl_metric_relation_workload(metric);
}

bool kl_metric_known(const char *metric)
{
    static const char *known[] = {"bw_frac",     "tc_frac",           "read_frac",         "copy_same_bytes_frac",
                                  "floor_frac",  "latency_us",        "latency_vs_nccl",   "busbw_frac",
                                  "memcmp_frac", "over_allreduce_us", "time_vs_composite", "time_vs_peer"};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(metric, known[i]) == 0) return true;
    return kl_metric_relation_workload(metric) != NULL;
}

/* The section KL_BENCH_WORKLOADS fills; weak, so a binary in which no module registers links. */
extern const struct kl_bench_workloads *const __start_kl_bench_workloads[] __attribute__((weak));
extern const struct kl_bench_workloads *const __stop_kl_bench_workloads[] __attribute__((weak));

const char *kl_bench_workload(const struct kl_module *m, int i)
{
    if (i < 0) return NULL;
    if (m->perf) return i < m->perf->n_workloads ? m->perf->workloads[i].name : NULL;
    const struct kl_bench_workloads *const *p = __start_kl_bench_workloads;
    for (; p && p < __stop_kl_bench_workloads; p++)
        if (strcmp((*p)->module, m->name) == 0) return (*p)->name(i);
    return NULL;
}

int kl_targets_check(const struct kl_targets *t, struct kl_err *err)
{
    int bad = 0;
    for (int r = 0; r < t->count; r++) {
        const struct kl_target *x = &t->rows[r];
        const struct kl_module *m = kl_module_find(x->module);
        char other[128]; /* time_vs:<workload>[@<variant>] names a second workload, and maybe a variant */
        const char *by = kl_metric_relation_parts(x->metric, other, sizeof other);
        bool found = false, found_other = !other[0];
        for (int i = 0; m; i++) {
            const char *w = kl_bench_workload(m, i);
            if (!w) break;
            found |= workload_matches(x->workload, w);
            found_other |= other[0] && strcmp(other, w) == 0;
        }
        const bool found_by = !by || (m && kl_variant_find(x->module, by));
        if (found && found_other && found_by) continue;
        if (!bad++)
            kl_fail(err, "%s: %s,%s,%s: %s", t->path, x->module, x->workload, x->metric,
                    !m ? "no such module" : !found ? "matches none of the module's workloads"
                    : !found_other ? "its time_vs: names none of the module's workloads"
                                   : "its time_vs: names a variant the module does not register");
    }
    for (int g = 0; g < t->n_gated; g++) {
        const struct kl_gated *x = &t->gated[g];
        const struct kl_module *m = kl_module_find(x->module);
        bool found = strcmp(x->workload, "*") == 0;
        for (int i = 0; m && !found; i++) {
            const char *w = kl_bench_workload(m, i);
            if (!w) break;
            found = workload_matches(x->workload, w);
        }
        const bool registered = kl_variant_find(x->module, x->variant) != NULL;
        if (registered && found) continue;
        if (!bad++)
            kl_fail(err, "%s: gated_variant %s of %s: %s%s%s", t->path, x->variant, x->module,
                    !registered ? "is not a registered variant" : "workload '", registered ? x->workload : "",
                    registered ? "' matches none of the module's workloads" : "");
    }
    return bad;
}

void kl_targets_free(struct kl_targets *t)
{
    free(t->rows);
    free(t->gated);
    t->rows = NULL, t->gated = NULL;
    t->count = t->n_gated = 0;
}
