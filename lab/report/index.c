/* README.md, the way in (every module's gated figure and gate, the learning path), and
 * environment.md (the machines and their ceilings, the results files). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/core/json_path.h"
#include "lab/report/internal.h"
#include "perf/bench.h"
#include "perf/figures.h"

/* ---- README.md (the way in) and environment.md ---- */

/* Whether the gated row r meets target x; a miss, or a pass on a throttled clock, is added to misses. */
static int target_met(const cJSON *r, const char *wl, const struct kl_target *x, char *misses, size_t size, size_t *om)
{
    const double v = kl_row_metric(r, x->metric);
    const bool met = r && kl_target_passes(x, v);
    if (met && !cJSON_IsTrue(kl_json_get(r, "throttled"))) return 1;
    if (met) /* met, but on a throttled clock: said, and counted as met */
        *om += (size_t)snprintf(misses + *om, *om < size ? size - *om : 0, "%s%s %s %s met, throttled", *om ? "; " : "",
                                wl, x->metric, KL_F("%.3f", v));
    else
        *om += (size_t)snprintf(misses + *om, *om < size ? size - *om : 0, "%s%s %s %s %s %.2f: %s%s", *om ? "; " : "",
                                wl, x->metric, r ? KL_F("%.3f", v) : "-",
                                kl_metric_lower_is_better(x->metric) ? "<=" : ">=", x->target,
                                r && isfinite(v) ? "**miss**" : "not measured", kl_row_throttled(r));
    return met;
}

/* One device's gate for the way-in page: the gated variant (named by the targets file of the
 * device's architecture) judged on every workload that has a target, as `kernlab bench --gate`
 * would: "v3_x: 4 of 4 targets met", then every miss, every target the variant has no row for,
 * throttled rows, and the workloads without a target row (ungated). A workload the file names
 * another gated variant for (a gated_variant row with a pattern) is judged on that one, and the
 * line names it. Never a peer, never another variant in the gated one's place. The workloads are
 * those with a row from this device, then those a target row names exactly (no pattern) that have
 * none: their targets count, each "not measured", so results missing a workload never read as a
 * shorter list of targets. */
static void gate_summary(char *buf, size_t len, const struct kl_guide *on, const struct kl_targets *t90)
{
    const cJSON *any = NULL;
    for (int j = 0; j < on->rows.n && !any; j++)
        if (kl_guide_on_dev(on, on->rows.r[j])) any = on->rows.r[j];
    const struct kl_targets *t = kl_rep_targets_of(any, t90);
    const char *gated = kl_targets_gated(t, on->name);
    if (!gated) {
        snprintf(buf, len, "no gated variant named in the targets file");
        return;
    }
    int targets = 0, met = 0;
    size_t o = 0;
    char misses[1024] = "", ungated[1024] = "";
    size_t om = 0, ou = 0;
    for (int w = 0; w < on->n_workloads; w++) {
        const char *wl = on->workloads[w];
        const struct kl_target *rows[KL_MAX_TARGETS_PER_WORKLOAD];
        const int n = kl_targets_for(t, on->name, wl, rows, KL_MAX_TARGETS_PER_WORKLOAD);
        if (!n) {
            if (kl_guide_has_row(on, wl))
                ou += (size_t)snprintf(ungated + ou, ou < sizeof ungated ? sizeof ungated - ou : 0, "%s%s",
                                       ou ? ", " : "", wl);
            continue;
        }
        if (!kl_guide_has_row(on, wl)) continue; /* counted below, if a target names it */
        const char *judged = kl_targets_gated_for(t, on->name, wl);
        for (int k = 0; k < n; k++) /* each target of the workload counts */
            met += target_met(kl_guide_row(on, judged, wl), wl, rows[k], misses, sizeof misses, &om), targets++;
    }
    for (int i = 0; t && i < t->count; i++) { /* the named workloads this device has no row for */
        const char *wl = t->rows[i].workload;
        if (strcmp(t->rows[i].module, on->name) != 0 || strpbrk(wl, "*?[") || kl_guide_has_row(on, wl)) continue;
        bool seen = false; /* another target row of the same workload came first */
        for (int k = 0; k < i && !seen; k++)
            seen = strcmp(t->rows[k].module, on->name) == 0 && strcmp(t->rows[k].workload, wl) == 0;
        if (seen) continue;
        const struct kl_target *rows[KL_MAX_TARGETS_PER_WORKLOAD];
        const int n = kl_targets_for(t, on->name, wl, rows, KL_MAX_TARGETS_PER_WORKLOAD);
        for (int k = 0; k < n; k++) target_met(NULL, wl, rows[k], misses, sizeof misses, &om), targets++;
    }
    o += (size_t)snprintf(buf + o, o < len ? len - o : 0, "`%s`", gated);
    for (int i = 0; t && i < t->n_gated; i++)
        if (strcmp(t->gated[i].module, on->name) == 0 && strcmp(t->gated[i].workload, "*") != 0)
            o += (size_t)snprintf(buf + o, o < len ? len - o : 0, " (`%s` on %s)", t->gated[i].variant, t->gated[i].workload);
    o += (size_t)snprintf(buf + o, o < len ? len - o : 0, ": %d of %d targets met", met, targets);
    if (misses[0]) o += (size_t)snprintf(buf + o, o < len ? len - o : 0, " (%s)", misses);
    if (ungated[0]) o += (size_t)snprintf(buf + o, o < len ? len - o : 0, "; ungated: %s", ungated);
}

/* The gated figure r over the ceiling its module is judged on, the ceiling named: the streaming read
 * where a target of the workload is read_frac (a kernel that reads and writes almost nothing, as decode
 * attention), the GEMM rate for a compute-bound row, else the copy. */
static void bound_cell(char *buf, size_t len, const cJSON *r, const struct kl_targets *t, const char *module,
                       const char *workload)
{
    if (kl_json_num(r, "device.cc") == 0) { /* the CPU: the gate's own metric */
        snprintf(buf, len, "%s", KL_F("%.2f", kl_row_frac_of_bound(r)));
        return;
    }
    const struct kl_target *rows[KL_MAX_TARGETS_PER_WORKLOAD];
    const int n = t ? kl_targets_for(t, module, workload, rows, KL_MAX_TARGETS_PER_WORKLOAD) : 0;
    bool read = false;
    for (int k = 0; k < n; k++)
        read |= strcmp(rows[k]->metric, "read_frac") == 0;
    if (read)
        snprintf(buf, len, "%s of read", KL_F("%.2f", kl_json_num(r, "read_frac")));
    else
        snprintf(buf, len, "%s of %s", KL_F("%.2f", kl_row_frac_of_bound(r)),
                 kl_row_compute_bound(r) ? "GEMM" : "copy");
}

int kl_rep_write_index(const char *out, struct kl_guide *mods, int n, const struct kl_targets *t90, bool story)
{
    char path[1300];
    snprintf(path, sizeof path, "%s/README.md", out);
    FILE *f = kl_guide_create(path);
    if (!f) return -1;
    /* The GPUs the figures come from, named once here; with several, every cell names its own. */
    const char *gpus[KL_MAX_DEVICES], *gpu_labels[KL_MAX_DEVICES];
    int ngpu = 0;
    for (int k = 0; k < n; k++)
        for (int d = 0; d < mods[k].n_devices; d++) {
            struct kl_guide on = mods[k];
            on.dev = mods[k].devices[d];
            const cJSON *r = kl_guide_first_row(&on, on.n_workloads ? on.workloads[0] : "");
            for (int w = 1; !r && w < on.n_workloads; w++) r = kl_guide_first_row(&on, on.workloads[w]);
            if (!r || !(kl_json_num(r, "device.cc") > 0) || kl_index_of(gpus, ngpu, on.dev) >= 0 || ngpu == KL_MAX_DEVICES) continue;
            gpu_labels[ngpu] = mods[k].labels[d];
            gpus[ngpu++] = on.dev;
        }
    fprintf(f, "# kernlab guides\n\nGenerated by `kernlab report` from `reports/data/`. Each guide explains one "
               "kernel on real hardware: what it computes, each variant's execution model, an execution story with "
               "the counters, the roofline, the targets and the peers, and exercises. The machine and its ceilings: "
               "[environment.md](environment.md).");
    if (ngpu == 1) fprintf(f, " GPU figures come from %s.", gpus[0]);
    for (int g = 0; ngpu > 1 && g < ngpu; g++)
        fprintf(f, "%s%s (%s)%s", g ? g + 1 == ngpu ? " and " : ", " : " GPU figures come from ", gpus[g], gpu_labels[g],
                g + 1 == ngpu ? ", each run on its own; a cell names the device its figure came from." : "");
    fprintf(f, "\n\nThe gate column judges the variant the targets file names for each module (perf/targets/sm_90.csv; "
               "cpu.csv for modules that run on the CPU), on every workload with a target, as `kernlab bench MODULE "
               "--gate` does: how many targets it met, then every miss, every target with no results row (not "
               "measured: a workload the targets file names that this device's results lack counts too) and every "
               "workload without a target row (ungated). The figure column is the same variant on the module's "
               "headline workload, and the bound column that figure "
               "over the ceiling it is judged against, named: the streaming read where the workload's target is "
               "read_frac, the GEMM rate for compute-bound work, the copy for other memory-bound work (environment.md "
               "gives each).\n\n"
               "| module | what | variants measured | gated variant's figure | of its bound | gate |\n"
               "|---|---|---|---|---|---|\n");
    int unmeasured = 0;
    for (int i = 0; i < kl_module_count(); i++) {
        const struct kl_module *m = kl_module_at(i);
        struct kl_guide *md = NULL;
        for (int k = 0; k < n; k++)
            if (strcmp(mods[k].name, m->name) == 0) md = &mods[k];
        int nv = kl_rep_variant_count(m->name), measured_nv = 0;
        for (int v = 0; md && v < nv; v++)
            measured_nv += kl_rep_measured(md, kl_rep_variant_at(m->name, v)->name);
        unmeasured += nv - measured_nv;
        if (!md) {
            fprintf(f, "| %s | %s | 0 | not measured yet | - | - |\n", m->name, m->summary);
            continue;
        }
        const bool own_figure = m->guide && m->guide->index_figure; /* allreduce: latency against NCCL */
        char fig[512] = "", bound[256] = "", gate[4096] = "";
        size_t of = 0, ob = 0, og = 0;
        for (int d = 0; d < md->n_devices; d++) { /* one figure per device, each after its label */
            struct kl_guide on = *md;
            on.dev = md->devices[d];
            const char *w = kl_rep_main_workload(&on, t90);
            const cJSON *r0 = w ? kl_guide_first_row(&on, w) : NULL;
            const char *gated = kl_targets_gated(kl_rep_targets_of(r0, t90), m->name);
            const cJSON *r = gated && w ? kl_guide_row(&on, gated, w) : NULL;
            char one[200] = "-", pre[80] = "", g[2048], of_bound[64] = "-";
            if (kl_guide_multi(md)) snprintf(pre, sizeof pre, "%s%s: ", d ? "; " : "", md->labels[d]);
            if (!r)
                snprintf(one, sizeof one, "%s on %s: not measured", gated ? gated : "(no gated variant)", w ? w : "-");
            else if (kl_json_num(r, "device.cc") == 0)
                snprintf(one, sizeof one, "%s on %s: %s ns per match (CPU)", gated, w,
                         KL_F("%.0f", kl_json_num(r, "ns_per_match")));
            else if (kl_row_compute_bound(r))
                snprintf(one, sizeof one, "%s on %s: %s TFLOP/s%s", gated, w, KL_F("%.0f", kl_row_tflops(r)),
                         kl_row_throttled(r));
            else
                snprintf(one, sizeof one, "%s on %s: %s GB/s%s", gated, w, KL_F("%.0f", kl_row_gbs(r)), kl_row_throttled(r));
            if (own_figure) m->guide->index_figure(one, sizeof one, &on, gated);
            if (r && !own_figure) bound_cell(of_bound, sizeof of_bound, r, kl_rep_targets_of(r, t90), m->name, w);
            gate_summary(g, sizeof g, &on, t90);
            of += (size_t)snprintf(fig + of, of < sizeof fig ? sizeof fig - of : 0, "%s%s", pre, one);
            ob += (size_t)snprintf(bound + ob, ob < sizeof bound ? sizeof bound - ob : 0, "%s%s", pre, of_bound);
            og += (size_t)snprintf(gate + og, og < sizeof gate ? sizeof gate - og : 0, "%s%s", pre, g);
        }
        fprintf(f, "| [%s](%s.md) | %s | %d | %s | %s | %s |\n", m->name, m->name, m->summary, measured_nv, fig, bound,
                gate);
    }
    if (unmeasured) { /* each on its own marked line, so that a new variant adds lines and changes none */
        fprintf(f, "\nNot measured yet " KL_UNMEASURED "\n\n", "*", "*");
        for (int i = 0; i < kl_module_count(); i++) {
            const struct kl_module *m = kl_module_at(i);
            struct kl_guide *md = NULL;
            for (int k = 0; k < n; k++)
                if (strcmp(mods[k].name, m->name) == 0) md = &mods[k];
            for (int v = 0; v < kl_rep_variant_count(m->name); v++) {
                const char *name = kl_rep_variant_at(m->name, v)->name;
                if (!md || !kl_rep_measured(md, name))
                    fprintf(f, "- %s `%s` " KL_UNMEASURED "\n", m->name, name, m->name, name);
            }
        }
    }
    fprintf(f, "\n## Learning path\n\nRead the guides in this order; each adds one idea to the previous.\n\n");
    /* Each module names its step (struct kl_module's learning_step) and its line (guide/learning.md);
     * the story is not a module: it comes last, once every module it is built from has been read. */
    int step = 1;
    for (int want = 1; want <= kl_module_count(); want++)
        for (int i = 0; i < kl_module_count(); i++) {
            const struct kl_module *m = kl_module_at(i);
            const char *line = kl_guide_text(m->name, "learning");
            if (m->learning_step == want && line) fprintf(f, "%d. [%s](%s.md): %s\n", step++, m->name, m->name, line);
        }
    const char *story_line = kl_guide_text("story", "learning");
    if (story) fprintf(f, "%d. [story](story.md): %s\n", step, story_line);
    else fprintf(f, "%d. story: %s (not generated yet: `kernlab story`, then its story.json in the results)\n", step,
                 story_line);
    fprintf(f, "\nTo write your own variant: `build/kernlab new-variant MODULE my_idea` (a copy of the gated variant, numbered next; the repository's README.md, "
               "*Add a variant*).\n");
    return kl_guide_finish(f, path);
}

/* How many GPUs the machine of `device` had: what a multi-GPU module's rows measured on it recorded
 * in their topology (allreduce's today), else unknown: a single-GPU run does not count its GPUs. */
/* environment.md names the commits of one results file in the order its rows first carry them: the
 * first KL_COMMITS_LISTED, then how many others (counted up to KL_COMMITS_COUNTED distinct ones). */
#define KL_COMMITS_LISTED 8
#define KL_COMMITS_COUNTED 256

static const char *environment_gpus(struct kl_guide *mods, int n, const char *device, char *buf, size_t len)
{
    for (int k = 0; k < n; k++)
        for (int j = 0; j < mods[k].rows.n; j++) {
            const cJSON *r = mods[k].rows.r[j];
            if (!kl_json_get(r, "topology") || strcmp(kl_row_device(r), device) != 0) continue;
            snprintf(buf, len, "%s (the [%s guide](%s.md) shows how they connect)",
                     KL_F("%.0f", kl_json_num(r, "topology.gpus")), mods[k].name, mods[k].name);
            return buf;
        }
    snprintf(buf, len, "not recorded: no multi-GPU run on this machine in the results, and a single-GPU run uses one");
    return buf;
}

/* One machine's ceilings, as `kernlab ceilings` measured them at the start of a bench run. */
static void ceilings_table(FILE *f, const cJSON *c, const char *gpus)
{
    double copy = kl_json_num(c, "copy_gbs"), gemm = kl_json_num(c, "gemm_tflops");
    fprintf(f,
            "| | |\n|---|---|\n| GPU | %s (sm_%s), %s SMs, L2 %s |\n| driver / CUDA runtime | %s / %s |\n"
            "| copy bandwidth | %s GB/s (read + write of a 1 GiB copy; clock-derived DRAM peak %s GB/s, so the "
            "copy reaches %s of it) |\n| bf16 GEMM | %s TFLOP/s (cuBLAS, 8192^3, random data) |\n| ridge point | "
            "%s FLOP/byte |\n| launch floor | %s us per launch on a stream, %s us inside a CUDA graph |\n| clocks "
            "| SM %s MHz (max %s), memory %s MHz, read through NVML after the ceilings |\n",
            kl_json_str(c, "name", "?"), KL_F("%.0f", kl_json_num(c, "cc")), KL_F("%.0f", kl_json_num(c, "sms")), KL_HB(kl_json_num(c, "l2_bytes")),
            kl_json_str(c, "driver", "?"), kl_json_str(c, "runtime", "?"), KL_F("%.0f", copy), KL_F("%.0f", kl_json_num(c, "dram_peak_gbs")),
            KL_F("%.2f", kl_fig_frac(copy, kl_json_num(c, "dram_peak_gbs"))), KL_F("%.0f", gemm), KL_F("%.0f", kl_fig_ridge(copy, gemm)),
            KL_F("%.2f", kl_json_num(c, "launch_us_stream")), KL_F("%.2f", kl_json_num(c, "launch_us_graph")),
            KL_F("%.0f", kl_json_num(c, "sm_clock_mhz")), KL_F("%.0f", kl_json_num(c, "max_sm_clock_mhz")),
            KL_F("%.0f", kl_json_num(c, "mem_clock_mhz")));
    if (kl_json_num(c, "read_gbs") > 0) /* measured since the decode module: the bound of read-dominated kernels */
        fprintf(f, "| read bandwidth | %s GB/s (a streaming read of 2 GiB: %s of the clock-derived DRAM peak) |\n",
                KL_F("%.0f", kl_json_num(c, "read_gbs")), KL_F("%.2f", kl_fig_frac(kl_json_num(c, "read_gbs"), kl_json_num(c, "dram_peak_gbs"))));
    fprintf(f, "| GPUs | %s |\n\n", gpus);
}

int kl_rep_write_environment(const char *out, struct kl_guide *mods, int n)
{
    char path[1300];
    snprintf(path, sizeof path, "%s/environment.md", out);
    FILE *f = kl_guide_create(path);
    if (!f) return -1;
    /* Every device whose rows carry ceilings (the GPUs), in name order, with the first module's. */
    const cJSON *ceil[KL_MAX_DEVICES];
    const char *names[KL_MAX_DEVICES], *from[KL_MAX_DEVICES];
    int nc = 0;
    for (int k = 0; k < n; k++)
        for (int j = 0; j < mods[k].rows.n; j++) {
            const cJSON *c = kl_json_get(mods[k].rows.r[j], "ceilings");
            const char *d = kl_row_device(mods[k].rows.r[j]);
            if (c && kl_index_of(names, nc, d) < 0 && nc < KL_MAX_DEVICES) ceil[nc] = c, names[nc] = d, from[nc++] = mods[k].name;
        }
    for (int i = 1; i < nc; i++)
        for (int j = i; j > 0 && strcmp(names[j], names[j - 1]) < 0; j--) {
            const cJSON *tc = ceil[j];
            const char *tn = names[j], *tf = from[j];
            ceil[j] = ceil[j - 1], names[j] = names[j - 1], from[j] = from[j - 1];
            ceil[j - 1] = tc, names[j - 1] = tn, from[j - 1] = tf;
        }
    if (nc <= 1) {
        fprintf(f, "# Environment\n\nThe machine the committed guides were measured on, and its ceilings (`kernlab "
                   "ceilings`). Every `kernlab bench` call measures them again at its start and each guide uses its own "
                   "call's figures; the table shows those of `%s`. Targets are fractions of these, not of a "
                   "datasheet.\n\n", nc ? from[0] : "-");
        char gpus[256];
        if (nc)
            ceilings_table(f, ceil[0], environment_gpus(mods, n, names[0], gpus, sizeof gpus));
        else fprintf(f, "No GPU results: no ceilings were measured.\n\n");
    } else {
        fprintf(f, "# Environment\n\nThe %d machines the committed guides were measured on, and their ceilings (`kernlab "
                   "ceilings`), one run on each. Every `kernlab bench` call measures them again at its start and each "
                   "guide uses its own call's figures; each table shows those of the first module's run on that "
                   "machine. Targets are fractions of these, not of a datasheet, so the same fraction on two devices "
                   "means a different speed.\n\n", nc);
        for (int i = 0; i < nc; i++) {
            fprintf(f, "## %s (the `%s` run)\n\n", names[i], from[i]);
            char gpus[256];
            ceilings_table(f, ceil[i], environment_gpus(mods, n, names[i], gpus, sizeof gpus));
        }
    }
    fprintf(f, "| results file | rows | device | dates | commits |\n|---|---|---|---|---|\n");
    for (int k = 0; k < n; k++) /* a line per file and device: its rows' first and last date, every commit */
        for (int fi = 0; fi < mods[k].n_files; fi++)
            for (int d = 0; d < mods[k].n_devices; d++) {
                const char *first = NULL, *last = NULL, *commits[KL_COMMITS_COUNTED];
                int rows = 0, nc = 0;
                for (int j = 0; j < mods[k].rows.n; j++) {
                    const cJSON *r = mods[k].rows.r[j];
                    if (mods[k].rows.file[j] != fi || strcmp(kl_row_device(r), mods[k].devices[d]) != 0) continue;
                    const char *date = kl_json_str(r, "date", "?"), *commit = kl_json_str(r, "commit", "?");
                    if (!first || strcmp(date, first) < 0) first = date; /* ISO dates: text order is time order */
                    if (!last || strcmp(date, last) > 0) last = date;
                    bool seen = false;
                    for (int c = 0; c < nc && !seen; c++) seen = strcmp(commits[c], commit) == 0;
                    if (!seen && nc < KL_COMMITS_COUNTED) commits[nc++] = commit;
                    rows++;
                }
                if (!rows) continue;
                fprintf(f, "| reports/data/%s | %d | %s | %s .. %s | ", mods[k].files[fi], rows, mods[k].devices[d],
                        first, last);
                for (int c = 0; c < nc && c < KL_COMMITS_LISTED; c++) fprintf(f, "%s%s", c ? ", " : "", commits[c]);
                if (nc > KL_COMMITS_LISTED) fprintf(f, " and %d more", nc - KL_COMMITS_LISTED);
                fprintf(f, " |\n");
            }
    return kl_guide_finish(f, path);
}

/* Two commits name the same one when the shorter is a prefix of the longer (7 characters or more). */
static bool same_commit(const char *a, const char *b)
{
    const size_t n = a && b ? (strlen(a) < strlen(b) ? strlen(a) : strlen(b)) : 0;
    return n >= 7 && strncmp(a, b, n) == 0;
}

/* The ceilings measured on `device`: a row of `commit` first, else the first module's run that recorded
 * them (as environment.md shows them); NULL when no results row from that device carries ceilings. */
const cJSON *kl_rep_device_ceilings(struct kl_guide *mods, int n, const char *device, const char *commit,
                                    const char **module, bool *same_run)
{
    for (int pass = 0; pass < 2; pass++) /* a row of the same commit (the same run's machine), then any */
        for (int k = 0; k < n; k++)
            for (int j = 0; j < mods[k].rows.n; j++) {
                const cJSON *r = mods[k].rows.r[j];
                if (strcmp(kl_row_device(r), device) != 0 || !kl_json_get(r, "ceilings")) continue;
                if (!pass && !same_commit(kl_json_str(r, "commit", ""), commit)) continue;
                if (module) *module = mods[k].name;
                if (same_run) *same_run = !pass;
                return kl_json_get(r, "ceilings");
            }
    return NULL;
}

