/* The closing sections of a module's guide: the targets and the peers, module measurements,
 * correctness (tolerances, edge catalogue, golden cases), exercises and the commands that
 * reproduce the guide. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "lab/core/compare.h"
#include "lab/core/json_path.h"
#include "lab/report/internal.h"
#include "perf/bench.h"
#include "perf/figures.h"

static const char *target_cell(char *buf, size_t len, const struct kl_targets *t, const char *module, const char *workload,
                               const cJSON *r)
{
    const struct kl_target *rows[KL_MAX_TARGETS_PER_WORKLOAD];
    const int n = kl_targets_for(kl_rep_targets_of(r, t), module, workload, rows, KL_MAX_TARGETS_PER_WORKLOAD);
    size_t o = 0;
    buf[0] = 0;
    for (int k = 0; k < n; k++) { /* every target of the workload, "; " between them */
        const struct kl_target *x = rows[k];
        const double v = kl_row_metric(r, x->metric);
        o += (size_t)snprintf(buf + o, o < len ? len - o : 0, "%s%s %s %s %.2f: %s%s", k ? "; " : "", x->metric,
                              KL_F("%.3f", v), kl_metric_lower_is_better(x->metric) ? "<=" : ">=", x->target,
                              !isfinite(v)              ? "not measured"
                              : kl_target_passes(x, v) ? "**pass**"
                                                       : "**miss**",
                              kl_row_throttled(r));
    }
    if (!n) snprintf(buf, len, "-");
    return buf;
}

/* One device's cells of a targets-table row (from its leading " | "): median, GB/s (single device
 * only), of copy, of same-size copy, floor_frac and the sm_90 target; dashes where that device has no row. */
static void target_row_cells(FILE *f, const struct kl_guide *md, const char *variant, const char *workload,
                             const struct kl_targets *t90, bool with_gbs)
{
    const cJSON *r = kl_guide_row(md, variant, workload);
    if (!r) {
        fprintf(f, with_gbs ? " | - | - | - | - | - | -" : " | - | - | - | - | -");
        return;
    }
    char c90[128];
    const cJSON *own = kl_guide_row(md, md->variants[0], workload); /* peers: ours' copy figure */
    double copy_us = kl_json_num(r, "copy_same_bytes_us");
    if (!isfinite(copy_us) && own) copy_us = kl_json_num(own, "copy_same_bytes_us");
    fprintf(f, " | %s%s", KL_F("%.2f", kl_json_num(r, "time_us.median")), kl_row_throttled(r));
    if (with_gbs) fprintf(f, " | %s", KL_F("%.0f", kl_row_gbs(r)));
    fprintf(f, " | %s | %s | %s | %s", KL_F("%.3f", kl_row_bw_frac(r)), KL_F("%.3f", copy_us / kl_json_num(r, "time_us.median")),
            KL_F("%.2f", kl_json_num(r, "floor_frac")),
            kl_row_is_peer(r) ? "-" : target_cell(c90, sizeof c90, t90, md->name, workload, r));
}

/* What the target's metric means, for a workload that can only be launch-bound. */
static const char *small_workload_gate(const struct kl_target *x)
{
    if (x && strcmp(x->metric, "copy_same_bytes_frac") == 0)
        return "we gate it on `copy_same_bytes_frac` instead: a plain copy of the same bytes, timed the same way in the "
               "same run, over the kernel's time. 1.0 is what moving those bytes costs at this size, launch included; "
               "only overlapping the launch with the previous kernel (Programmatic Dependent Launch) goes past it. "
               "`floor_frac` (launch floor / kernel time) is shown beside it";
    return "we gate it on `floor_frac` (launch floor / kernel time) instead";
}

/* A CPU module's targets (perf/targets/cpu.csv): every row against its workload's target. */
static void section_cpu_targets(FILE *f, const struct kl_guide *md)
{
    const char *gated = kl_targets_gated(&kl_rep_cpu_targets, md->name);
    fprintf(f,
            "## Against the targets\n\nTargets of modules that run on the CPU are in perf/targets/cpu.csv; the gate "
            "(`kernlab bench %s --gate`) judges `%s`, the variant that file names; the other variants are shown "
            "against the same targets.\n\n| workload | variant | median us | target |\n|---|---|---|---|\n",
            md->name, gated ? gated : "(none named)");
    char cell[160];
    for (int w = 0; w < md->n_workloads; w++)
        for (int i = 0; i < md->n_variants; i++) {
            const cJSON *r = kl_guide_row(md, md->variants[i], md->workloads[w]);
            if (r)
                fprintf(f, "| %s | %s%s | %s | %s |\n", md->workloads[w], md->variants[i], kl_row_is_peer(r) ? " (peer)" : "",
                        KL_F("%.2f", kl_json_num(r, "time_us.median")),
                        target_cell(cell, sizeof cell, NULL, md->name, md->workloads[w], r));
        }
    fprintf(f, "\n");
}

void kl_rep_section_targets(FILE *f, const struct kl_guide *md, const struct kl_targets *t90, const struct kl_targets *t80)
{
    if (md->rows.n && kl_json_num(md->rows.r[0], "device.cc") == 0) return section_cpu_targets(f, md);
    const char *gated = kl_targets_gated(t90, md->name);
    fprintf(f,
            "## Against the targets and the peers\n\nsm_90 targets are ours (perf/targets/sm_90.csv); the gate "
            "(`kernlab bench %s --gate`) judges `%s`, the variant that file names, and the other variants are shown "
            "against the same targets. sm_80 targets are the study notes' A100 expectations "
            "(perf/targets/sm_80_a100.csv), shown against these sm_90 measurements as a fraction of this GPU's "
            "ceilings: a reference point, not a gate here. Peers are timed the same way in the same run. *Same-size "
            "copy* is a plain copy of the workload's bytes, timed the same way: above 0.9 of it, what remains is the "
            "size (launch ramp-up and tail), not the kernel. A median marked (throttled) was timed while the SM clock "
            "dropped.",
            md->name, gated ? gated : "(none named)");
    if (!kl_guide_multi(md)) {
        fprintf(f, "\n\n| workload | variant | median us | GB/s | of copy | of same-size copy | floor_frac | sm_90 target | "
                   "sm_80 (A100 notes) |\n|---|---|---|---|---|---|---|---|---|\n");
    } else {
        /* Side by side: one group of columns per device, the same kernel on each memory system. */
        fprintf(f, " Each device's columns come from its own run and are fractions of its own ceilings (environment.md)."
                   "\n\n| workload | variant |");
        for (int d = 0; d < md->n_devices; d++)
            fprintf(f, " %s us | %s of copy | %s of same-size copy | %s floor_frac | %s sm_90 target |", md->labels[d],
                    md->labels[d], md->labels[d], md->labels[d], md->labels[d]);
        fprintf(f, " sm_80 (A100 notes), on %s |\n|---|---|", md->labels[0]);
        for (int d = 0; d < md->n_devices; d++) fprintf(f, "---|---|---|---|---|");
        fprintf(f, "---|\n");
    }
    for (int w = 0; w < md->n_workloads; w++)
        for (int i = 0; i < md->n_variants; i++) {
            const char *wl = md->workloads[w], *v = md->variants[i];
            const cJSON *r = NULL, *any = NULL;
            struct kl_guide on = *md;
            for (int d = 0; d < md->n_devices && !any; d++) on.dev = md->devices[d], any = kl_guide_row(&on, v, wl);
            if (!any) continue;
            r = kl_guide_row(md, v, wl); /* the primary device's, for the sm_80 column */
            fprintf(f, "| %s | %s%s", wl, v, kl_row_is_peer(any) ? " (peer)" : "");
            for (int d = 0; d < md->n_devices; d++) on.dev = md->devices[d], target_row_cells(f, &on, v, wl, t90, !kl_guide_multi(md));
            char c80[128];
            fprintf(f, " | %s |\n", !r || kl_row_is_peer(r) ? "-" : target_cell(c80, sizeof c80, t80, md->name, wl, r));
        }
    fprintf(f, "\n### Where the study notes and the measurements disagree\n\n");
    int said = 0;
    for (int d = 0; d < md->n_devices; d++) {
        struct kl_guide on = *md;
        on.dev = md->devices[d];
        char on_label[96] = "";
        if (kl_guide_multi(md)) snprintf(on_label, sizeof on_label, "On %s: ", md->labels[d]);
        for (int w = 0; w < md->n_workloads; w++) {
            const cJSON *r = NULL;
            for (int i = 0; i < md->n_variants && !r; i++) r = kl_guide_row(&on, md->variants[i], md->workloads[w]);
            if (!r) continue;
            double model_us = kl_json_num(r, "bytes") / (kl_json_num(r, "device.copy_gbs") * 1e3), floor_us = kl_json_num(r, "ceilings.launch_us_graph");
            /* model_us: the time the copy bandwidth needs for the model's bytes (the inverse of kl_fig_gbs) */
            if (model_us < floor_us && d > 0) { /* said in full for the first device */
                fprintf(f, "- %s`%s`: %s us at its copy bandwidth, under its %s us launch floor: the same holds.\n",
                        on_label, md->workloads[w], KL_F("%.2f", model_us), KL_F("%.2f", floor_us));
                said++;
            } else if (model_us < floor_us) {
                fprintf(f, "- %s`%s` moves %s: %s us at the copy bandwidth, under the %s us launch floor. It can only be "
                           "launch-bound, so a bandwidth percentage for it measures launch overhead, not memory; %s. "
                           "Claims like \"~100 GB/s = 70-80%% of peak\" for such a workload cannot both hold.\n",
                        on_label, md->workloads[w], KL_HB(kl_json_num(r, "bytes")), KL_F("%.2f", model_us), KL_F("%.2f", floor_us),
                        small_workload_gate(kl_target_find(t90, md->name, md->workloads[w])));
                said++;
            }
        }
        /* Our own targets, held against what a plain copy of the same bytes achieved in the run. */
        for (int w = 0; w < md->n_workloads; w++) {
            const struct kl_target *x = kl_target_find(t90, md->name, md->workloads[w]);
            const cJSON *r = NULL;
            for (int i = 0; i < md->n_variants && !(r && isfinite(kl_json_num(r, "copy_same_bytes_us"))); i++)
                r = kl_guide_row(&on, md->variants[i], md->workloads[w]);
            double copy_us = r ? kl_json_num(r, "copy_same_bytes_us") : NAN;
            if (!x || !isfinite(copy_us)) continue;
            double copy_value = strcmp(x->metric, "floor_frac") == 0 ? kl_json_num(r, "ceilings.launch_us_graph") / copy_us
                                : strcmp(x->metric, "bw_frac") == 0
                                    ? kl_fig_frac(kl_fig_gbs(kl_json_num(r, "bytes"), copy_us), kl_json_num(r, "device.copy_gbs"))
                                : strcmp(x->metric, "copy_same_bytes_frac") == 0 ? 1.0 /* the copy itself */
                                                                                 : NAN;
            if (isfinite(copy_value) && copy_value < x->target) {
                fprintf(f, "- %sOur sm_90 target for `%s` (%s >= %.2f) is above what a plain copy of the same %s reached "
                           "in this run (%s, %s us, timed the same way): the target asks more than a copy of those bytes "
                           "does on this GPU, so read the variants against the same-size copy column as well.\n",
                        on_label, md->workloads[w], x->metric, x->target, KL_HB(kl_json_num(r, "bytes")), KL_F("%.3f", copy_value),
                        KL_F("%.2f", copy_us));
                said++;
            }
        }
    }
    for (int k = 0; t80 && k < t80->count; k++)
        if (strcmp(t80->rows[k].module, md->name) == 0 && strstr(t80->rows[k].source, "unreachable")) {
            fprintf(f, "- `%s` on the A100: %s.\n", t80->rows[k].workload, t80->rows[k].source);
            said++;
        }
    if (!said) fprintf(f, "- No disagreement in kind for this module's workloads.\n");
    fprintf(f, "\n");
}

void kl_rep_section_extra_fields(FILE *f, const struct kl_guide *md)
{
    /* Module-specific numbers (radix: ns_per_match, memcmp_frac, ...): any top-level number the
     * contract does not name. */
    static const char *known[] = {"bytes", "flops", "gbs", "bw_frac", "tflops", "tc_frac", "floor_frac", "input_sets",
                                  "sm_clock_mhz_before", "sm_clock_mhz_after", "clock_event_reasons"};
    const char *keys[32];
    int nk = 0;
    for (int j = 0; j < md->rows.n; j++)
        for (const cJSON *e = md->rows.r[j]->child; e; e = e->next) {
            bool skip = !cJSON_IsNumber(e);
            for (size_t q = 0; !skip && q < sizeof known / sizeof known[0]; q++) skip = strcmp(known[q], e->string) == 0;
            if (!skip && kl_index_of(keys, nk, e->string) < 0 && nk < 32) keys[nk++] = e->string;
        }
    if (!nk) return;
    fprintf(f, "## Module measurements\n\n| variant | workload |%s", kl_guide_multi(md) ? " device |" : "");
    for (int k = 0; k < nk; k++) fprintf(f, " %s |", keys[k]);
    fprintf(f, "\n|---|---|%s", kl_guide_multi(md) ? "---|" : "");
    for (int k = 0; k < nk; k++) fprintf(f, "---|");
    fprintf(f, "\n");
    for (int i = 0; i < md->n_variants; i++)
        for (int w = 0; w < md->n_workloads; w++)
            for (int d = 0; d < md->n_devices; d++) {
                struct kl_guide on = *md;
                on.dev = md->devices[d];
                const cJSON *r = kl_guide_row(&on, md->variants[i], md->workloads[w]);
                if (!r) continue;
                fprintf(f, "| %s | %s |", md->variants[i], md->workloads[w]);
                if (kl_guide_multi(md)) fprintf(f, " %s |", md->labels[d]);
                for (int k = 0; k < nk; k++) fprintf(f, " %s |", KL_F("%.4g", kl_json_num(r, keys[k])));
                fprintf(f, "\n");
            }
    fprintf(f, "\n");
}

void kl_rep_section_correctness(FILE *f, const struct kl_guide *md)
{
    if (md->m && !md->m->tensor) {
        fprintf(f, "## Correctness: traces and properties\n\nEvery implementation (`reference/%s.c` and each "
                   "variant) replays the golden traces, where every operation carries its exact expected result, and "
                   "`kernlab check %s` replays seeded random operation sequences against the reference after every "
                   "operation. There is no tolerance: results are integers and must match exactly.\n\n", md->name, md->name);
    } else {
        fprintf(f,
                "## Correctness: tolerances and edge cases\n\nEvery variant is checked against the float64 reference "
                "(`reference/%s.c`) on the golden cases, on fresh random inputs (seed printed, `KL_SEED` replays) and "
                "on the edge catalogue below; ",
                md->name);
        if (md->m && md->m->in_place) /* those outputs start as inputs: nothing to poison */
            fprintf(
                f,
                "what the kernel updates in place (%s) is not poisoned: it starts as its input, so an element the "
                "kernel should change but leaves unwritten keeps its old value, which fails wherever the change is not "
                "zero; any other output is poisoned before each run, so an unwritten element fails. ",
                md->m->in_place);
        else
            fprintf(f, "outputs are poisoned before each run so an unwritten element fails. ");
        fprintf(f, "The tolerance rows (lab/core/compare.c):\n\n| output dtype | rtol | atol (x max abs ref) | rel_l2 "
                   "| why |\n"
                   "|---|---|---|---|---|\n");
        enum kl_dtype types[] = {KL_F32, KL_F16, KL_BF16};
        for (int i = 0; i < 3; i++) {
            struct kl_policy p = kl_policy_for(types[i], false);
            fprintf(f, "| %s | 2^%.0f | 2^%.0f | 2^%.0f | %s |\n", kl_dtype_name(types[i]), log2(p.rtol),
                    log2(p.atol_frac), log2(p.rel_l2), p.why);
    }
    fprintf(f, "| data movement | 0 | 0 | 0 | %s |\n\n", kl_policy_for(KL_BF16, true).why);
    if (md->m && md->m->tolerance) fprintf(f, "%s\n\n", md->m->tolerance);
    }
    if (md->m && md->m->tensor) {
        fprintf(f, "Edge catalogue (`kernlab check %s`), then random shapes:\n\n", md->name);
        for (int i = 0;; i++) {
            char label[160];
            void *p = md->m->tensor->make(i, 1, label, sizeof label);
            if (!p) break;
            md->m->tensor->free(p);
            if (strncmp(label, "random", 6) != 0) fprintf(f, "- %s\n", label);
        }
        fprintf(f, "\n");
    }
    kl_guide_golden_cases(f, md);
}

void kl_rep_section_exercises(FILE *f, const struct kl_guide *md)
{
    fprintf(f, "## Exercises\n\n");
    const char *exercises = md->m ? kl_guide_text(md->name, "exercises") : NULL;
    if (exercises) fprintf(f, "%s\n\n", exercises);
    fprintf(f,
            "Start any of them with `build/kernlab new-variant %s vN_your_idea` (README.md, *Add a variant*): the new "
            "file is a working copy of an existing variant, tested at once by ctest, and it appears in this guide as "
            "not measured until a results row names it. Write down the predicted time before measuring; if the result "
            "misses the prediction in either direction, find out why (the counters above) before the next change.\n\n",
            md->name);
}

void kl_rep_section_reproduce(FILE *f, const struct kl_guide *md)
{
    fprintf(f, "## Reproduce\n\n```sh\n./lab.sh test                                  # build + every test\n"
               "build/kernlab verify golden/%s/\nbuild/kernlab check %s --seed 1\nbuild/kernlab ceilings\n", md->name, md->name);
    /* One file per device kind (the folder `./lab.sh run` names after the GPU: h100, h200, ...), so a
     * run on one device never replaces another device's rows. */
    if (md->m && md->m->perf)
        for (int d = 0; d < md->n_devices; d++) {
            char folder[64];
            fprintf(f, "build/kernlab bench %s --counters --peers --gate --json reports/data/%s/%s.jsonl   # on %s\n",
                    md->name, kl_device_folder(md->devices[d], folder, sizeof folder), md->name, md->devices[d]);
        }
    else
        fprintf(f,
                "build/kernlab bench %s --gate --json reports/data/<device>/%s.jsonl   # <device>: the folder "
                "./lab.sh run writes into (h100, h200, ...)\n",
                md->name, md->name);
    fprintf(f, "build/kernlab report --results reports/data --out reports\n```\n");
}



static int by_rung(const void *a, const void *b) { return kl_variant_name_cmp(*(const char *const *)a, *(const char *const *)b); }

void kl_rep_section_ladder(FILE *f, const struct kl_guide *md)
{
    if (md->rows.n && kl_json_num(md->rows.r[0], "device.cc") == 0) return; /* no SM clock on the CPU */
    const char *rungs[64];
    int n = 0;
    for (int i = 0; i < md->n_variants; i++)
        if (kl_variant_number(md->variants[i], &(unsigned long long){0})) rungs[n++] = md->variants[i];
    qsort(rungs, (size_t)n, sizeof rungs[0], by_rung);
    if (n < 2) return;
    fprintf(f,
            "## The ladder, step by step\n\nEach numbered variant on each workload against the step before it "
            "(the previous variant measured on that workload) and against the fastest peer, all timed in the same "
            "run. *Speed-up* is the previous step's median over this one's: above 1 the step made the kernel faster. "
            "*Over the fastest peer* is this median over the fastest peer's (the row's `time_vs_peer`; that peer "
            "named beside it); \"-\" where the workload has no peer row. *SM clock* is the clock read right after the "
            "timing; (throttled) marks a row whose clock fell or whose clock-event reasons named a power or thermal "
            "limit while it was timed, so a slower step may be a slower clock. *Mcycles* is the launch's length in "
            "millions of SM clock cycles, the busiest SM's cycles with work resident as the counters measured them "
            "(`--counters`: one launch after an L2 flush, `counters.active_cycles`), and *cycle speed-up* the "
            "previous step's cycles over this one's: where the SMs set the pace, a lower clock does not change the "
            "cycles, so on a throttling card this is the step's own effect. \"-\" where a row has no counters.\n\n"
            "| workload | step |%s median us | speed-up (previous / this) | over the fastest peer (this / peer) | SM "
            "clock after the timing | Mcycles | cycle speed-up (previous / this) |\n"
            "|---|---|%s---|---|---|---|---|---|\n",
            kl_guide_multi(md) ? " device |" : "", kl_guide_multi(md) ? "---|" : "");
    for (int w = 0; w < md->n_workloads; w++)
        for (int d = 0; d < md->n_devices; d++) {
            struct kl_guide on = *md;
            on.dev = md->devices[d];
            const cJSON *prev = NULL;
            for (int i = 0; i < n; i++) {
                const cJSON *r = kl_guide_row(&on, rungs[i], md->workloads[w]);
                if (!r) continue;
                const double t = kl_json_num(r, "time_us.median"), vs = kl_json_num(r, "time_vs_peer");
                char dev_cell[80] = "", peer[192] = "-";
                if (kl_guide_multi(md)) snprintf(dev_cell, sizeof dev_cell, " %s |", md->labels[d]);
                if (isfinite(vs)) snprintf(peer, sizeof peer, "%s (%s)", KL_F("%.3f", vs), kl_json_str(r, "peer_fastest", "?"));
                const double mhz = kl_json_num(r, "sm_clock_mhz_after");
                const double cyc = kl_json_num(r, "counters.active_cycles");
                const double prev_cyc = prev ? kl_json_num(prev, "counters.active_cycles") : NAN;
                fprintf(f, "| %s | %s |%s %s | %s | %s | %s%s%s | %s | %s |\n", md->workloads[w], rungs[i], dev_cell,
                        KL_F("%.2f", t), prev ? KL_F("%.2f", kl_json_num(prev, "time_us.median") / t) : "-", peer,
                        KL_F("%.0f", mhz), isfinite(mhz) ? " MHz" : "", kl_row_throttled(r), KL_F("%.3f", cyc / 1e6),
                        KL_F("%.3f", prev_cyc / cyc));
                prev = r;
            }
        }
    fprintf(f, "\n");
}
