/* Relation metrics (perf/bench.h): a row's time against other rows of the same run, which the
 * results file being written already holds: the peers' rows (bench runs a module's peers before
 * its variants), this variant's earlier workloads and, where a target row names one
 * (time_vs:<workload>@<variant>), another variant's. Stored in the row's extra fields, so the gate
 * and the guides read them like any other metric. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "lab/core/json_path.h"
#include "perf/bench.h"

/* The median time of the fastest row of module on workload that is a peer's (peer) or this
 * variant's (variant != NULL), and that row's variant name; NAN when the file has none. */
static double fastest(const char *path, const char *module, const char *workload, const char *variant, char *name,
                      size_t len)
{
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f) return NAN;
    double best = NAN;
    size_t cap = 1 << 16;
    char *line = malloc(cap);
    ssize_t got;
    while (line && (got = getline(&line, &cap, f)) > 0) {
        cJSON *r = cJSON_Parse(line);
        const bool peer = cJSON_IsTrue(kl_json_get(r, "peer"));
        const double t = kl_json_num(r, "time_us.median");
        if (r && strcmp(kl_json_str(r, "module", ""), module) == 0 && strcmp(kl_json_str(r, "workload", ""), workload) == 0 &&
            (variant ? !peer && strcmp(kl_json_str(r, "variant", ""), variant) == 0 : peer) && isfinite(t) &&
            !(t >= best)) {
            best = t;
            snprintf(name, len, "%s", kl_json_str(r, "variant", "?"));
        }
        cJSON_Delete(r);
    }
    free(line);
    fclose(f);
    return best;
}

void kl_bench_relations(const char *path, const struct kl_targets *t, struct kl_result *r)
{
    if (!path || !r->extra || cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(r->extra, "peer"))) return;
    char name[128] = "";
    const double peer = fastest(path, r->module, r->workload, NULL, name, sizeof name);
    if (isfinite(peer)) {
        cJSON_AddNumberToObject(r->extra, "time_vs_peer", r->time_us_median / peer);
        cJSON_AddNumberToObject(r->extra, "peer_time_us", peer);
        cJSON_AddStringToObject(r->extra, "peer_fastest", name);
    }
    const struct kl_target *rows[KL_MAX_TARGETS_PER_WORKLOAD];
    const int n = kl_targets_for(t, r->module, r->workload, rows, KL_MAX_TARGETS_PER_WORKLOAD);
    for (int k = 0; k < n; k++) {
        char other[128]; /* time_vs:<workload>[@<variant>]: that variant's row, else this one's */
        const char *by = kl_metric_relation_parts(rows[k]->metric, other, sizeof other);
        if (!other[0] || cJSON_GetObjectItemCaseSensitive(r->extra, rows[k]->metric)) continue;
        const double base = fastest(path, r->module, other, by ? by : r->variant, name, sizeof name);
        if (isfinite(base)) cJSON_AddNumberToObject(r->extra, rows[k]->metric, r->time_us_median / base);
    }
}
