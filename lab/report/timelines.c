/* The launch timelines of the rows that carry one in the CTA-quantile form (attention_decode's
 * `timeline`, lab/CONTRACTS.md section 7: "events", each event's quantiles over the CTAs that stamped
 * it, "ctas" and "unit"): a table per device, a row per (variant, workload), each event's p10 / p50 /
 * p90 / max, and the last CTA's tail: the latest end less the latest end of a key loop (on a split
 * request, the filing of the last partials and the final merge). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>

#include "lab/core/guide.h"
#include "lab/core/json_path.h"
#include "lab/report/internal.h"

/* A row's timeline in the quantile form, or NULL (none, or another module's form). */
static const cJSON *quantile_timeline(const cJSON *r)
{
    const cJSON *tl = kl_json_get(r, "timeline");
    return tl && cJSON_IsObject(kl_json_get(tl, "events")) && cJSON_IsNumber(kl_json_get(tl, "ctas")) ? tl : NULL;
}

void kl_rep_section_launch_timelines(FILE *f, const struct kl_guide *md)
{
    static const char *events[] = {"released", "first_tile", "loop_done", "end"};
    enum { N_EVENTS = sizeof events / sizeof events[0] };
    const cJSON *unit = NULL;
    for (int j = 0; j < md->rows.n && !unit; j++) {
        const cJSON *tl = quantile_timeline(md->rows.r[j]);
        if (tl) unit = kl_json_get(tl, "unit");
    }
    if (!unit) return;
    fprintf(f, "## Launch timelines\n\nFor the variants that record one: a separate, untimed launch of the row's "
               "workload with params.trace set, in which thread 0 of each CTA stamps the GPU's clock when the CTA "
               "starts, when it is released from its PDL wait, when its first tile of keys has landed, when its key "
               "loop is done and when it ends (after its merge, if it merged). The table gives each event's quantiles "
               "over the CTAs in %s; `last CTA's tail` is the latest end less the latest end of a key loop, the time "
               "the call runs on after its last key has been read.\n\n",
            cJSON_IsString(unit) ? unit->valuestring : "microseconds");
    fprintf(f, "| variant | workload |%s CTAs |", kl_guide_multi(md) ? " device |" : "");
    for (int e = 0; e < N_EVENTS; e++) fprintf(f, " %s p10 / p50 / p90 / max |", events[e]);
    fprintf(f, " last CTA's tail |\n|---|---|%s---|", kl_guide_multi(md) ? "---|" : "");
    for (int e = 0; e <= N_EVENTS; e++) fprintf(f, "---|");
    fprintf(f, "\n");
    char path[64];
    for (int i = 0; i < md->n_variants; i++)
        for (int w = 0; w < md->n_workloads; w++)
            for (int d = 0; d < md->n_devices; d++) {
                struct kl_guide on = *md;
                on.dev = md->devices[d];
                const cJSON *r = kl_guide_row(&on, md->variants[i], md->workloads[w]);
                const cJSON *tl = r ? quantile_timeline(r) : NULL;
                if (!tl) continue;
                fprintf(f, "| %s | %s |", md->variants[i], md->workloads[w]);
                if (kl_guide_multi(md)) fprintf(f, " %s |", md->labels[d]);
                fprintf(f, " %s |", KL_F("%.0f", kl_json_num(tl, "ctas")));
                for (int e = 0; e < N_EVENTS; e++) {
                    fprintf(f, " ");
                    static const char *q[] = {"p10", "p50", "p90", "max"};
                    for (int k = 0; k < 4; k++) {
                        snprintf(path, sizeof path, "events.%s.%s", events[e], q[k]);
                        fprintf(f, "%s%s", k ? " / " : "", KL_F("%.1f", kl_json_num(tl, path)));
                    }
                    fprintf(f, " |");
                }
                const double tail = kl_json_num(tl, "events.end.max") - kl_json_num(tl, "events.loop_done.max");
                fprintf(f, " %s |\n", KL_F("%.1f", tail));
            }
    fprintf(f, "\n");
}
