/* The generic sections of a module's guide: what it computes, the variants (their header comments,
 * predicted against measured, execution models), the execution story of one launch and the
 * hardware analysis table. A compute-bound story is the module's own (struct kl_guide_hooks). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/core/json_path.h"
#include "lab/report/internal.h"
#include "perf/bench.h"
#include "perf/figures.h"

void kl_rep_section_semantics(FILE *f, const struct kl_guide *md)
{
    const char *semantics = md->m ? kl_guide_text(md->name, "semantics") : NULL;
    fprintf(f, "## What it computes\n\n%s\n\n", semantics ? semantics : "(module not in this build)");
    fprintf(f, "| workload | shape | bytes a correct kernel must move | FLOPs | FLOP/byte | at the copy bandwidth |\n"
               "|---|---|---|---|---|---|\n");
    for (int w = 0; w < md->n_workloads; w++) {
        const cJSON *r = kl_guide_first_row(md, md->workloads[w]);
        if (!r) continue;
        char shape[256] = "";
        size_t off = 0;
        const cJSON *p = kl_json_get(r, "params");
        for (const cJSON *e = p ? p->child : NULL; e && off < sizeof shape; e = e->next) {
            if (cJSON_IsNumber(e)) off += (size_t)snprintf(shape + off, sizeof shape - off, "%s%s=%g", off ? ", " : "", e->string, e->valuedouble);
            else if (cJSON_IsString(e)) off += (size_t)snprintf(shape + off, sizeof shape - off, "%s%s", off ? ", " : "", e->valuestring);
            else if (cJSON_IsTrue(e)) off += (size_t)snprintf(shape + off, sizeof shape - off, "%s%s", off ? ", " : "", e->string);
        }
        double b = kl_json_num(r, "bytes"), fl = kl_json_num(r, "flops"), copy = kl_json_num(r, "device.copy_gbs");
        fprintf(f, "| %s | %s | %s | %s | %s | ", md->workloads[w], shape, KL_HB(b), KL_F("%.3g", fl),
                KL_F("%.3f", b > 0 ? fl / b : NAN));
        if (!kl_guide_multi(md)) fprintf(f, "%s us |\n", KL_F("%.2f", b / (copy * 1e3)));
        else /* each device at its own copy bandwidth */
            for (int d = 0; d < md->n_devices; d++) {
                struct kl_guide on = *md;
                on.dev = md->devices[d];
                const cJSON *rd = kl_guide_first_row(&on, md->workloads[w]);
                fprintf(f, "%s%s us (%s)%s", d ? ", " : "", KL_F("%.2f", rd ? b / (kl_json_num(rd, "device.copy_gbs") * 1e3) : NAN),
                        md->labels[d], d + 1 == md->n_devices ? " |\n" : "");
            }
    }
    fprintf(f, "\n");
}


/* What follows "predicted" in a variant's header comment, its wrapped lines joined (up to the first
 * full stop, or a semicolon outside brackets), or "" when the header predicts nothing. */
static void predicted_sentence(const char *comment, char *out, size_t len)
{
    size_t n = 0;
    int depth = 0;
    const char *s = strcasestr(comment, "predicted");
    if (s) s += strlen("predicted"), s += strspn(s, ": ");
    for (; s && *s && n + 1 < len; s++) {
        depth += *s == '(' ? 1 : *s == ')' ? -1 : 0;
        if ((*s == ';' && depth <= 0) || (*s == '.' && (s[1] == 0 || s[1] == ' ' || s[1] == '\n'))) break;
        const char c = *s == '\n' ? ' ' : *s;
        if (c == ' ' && n > 0 && out[n - 1] == ' ') continue;
        out[n++] = c;
    }
    out[n] = 0;
}


/* Predicted against measured: the header's prediction, then what each device measured on the workload
 * the prediction names (the longest workload name found in it), else on the guide's workload. */
static void predicted_vs_measured(FILE *f, const struct kl_guide *md, const struct kl_variant *v, const char *comment,
                                  const char *workload)
{
    char pred[512];
    predicted_sentence(comment, pred, sizeof pred);
    if (!pred[0]) return;
    const char *named = NULL;
    for (int w = 0; w < md->n_workloads; w++)
        if (strstr(pred, md->workloads[w]) && (!named || strlen(md->workloads[w]) > strlen(named)))
            named = md->workloads[w];
    if (named) workload = named;
    if (!workload) return;
    fprintf(f, "**Predicted** (the file's header): %s. **Measured** on `%s`: ", pred, workload);
    for (int d = 0; d < md->n_devices; d++) {
        struct kl_guide on = *md;
        on.dev = md->devices[d];
        const cJSON *r = kl_guide_row(&on, v->name, workload);
        fprintf(f, "%s%s ", d ? "; " : "", md->labels[d]);
        if (!r) {
            fprintf(f, "not measured yet");
            continue;
        }
        fprintf(f, "%s us", KL_F("%.2f", kl_json_num(r, "time_us.median")));
        if (kl_row_compute_bound(r)) fprintf(f, ", %s TFLOP/s", KL_F("%.0f", kl_row_tflops(r)));
        const char *metric = kl_json_str(r, "gate.metric", NULL);
        if (metric) fprintf(f, ", %s %s (target %s)", metric, KL_F("%.3f", kl_json_num(r, metric)), KL_F("%.2f", kl_json_num(r, "gate.target")));
    }
    fprintf(f, ".\n\n");
}

/* Whether any device measured the variant (a peer's rows count as its own "variant"). */
bool kl_rep_measured(const struct kl_guide *md, const char *variant)
{
    for (int j = 0; j < md->rows.n; j++)
        if (strcmp(kl_json_str(md->rows.r[j], "variant", ""), variant) == 0) return true;
    return false;
}

/* A link to a variant's file at its kernel's line, or to the file alone when it has no
 * __global__ function (a host-side variant: NCCL's, the CPU's). */
static const char *source_link(char *buf, size_t len, const char *file, int line)
{
    if (line > 0)
        snprintf(buf, len, "[%s:%d](../%s#L%d)", kl_rep_rel_path(file), line, kl_rep_rel_path(file), line);
    else
        snprintf(buf, len, "[%s](../%s)", kl_rep_rel_path(file), kl_rep_rel_path(file));
    return buf;
}

void kl_rep_section_variants(FILE *f, const struct kl_guide *md, const char *workload)
{
    if (!md->m) return;
    fprintf(f, "## The variants\n\nEach variant is one file and one idea on top of the previous one; `ls kernels/%s/` "
               "shows the ladder.\n\n| variant | kernel code | summary |\n|---|---|---|\n", md->name);
    char comment[4096], link[1200];
    for (int i = 0; i < kl_rep_variant_count(md->name); i++) {
        const struct kl_variant *v = kl_rep_variant_at(md->name, i);
        int line = kl_rep_read_source(v->file, comment, sizeof comment);
        fprintf(f, "| %s | %s | %s", v->name, source_link(link, sizeof link, v->file, line), v->summary);
        if (!kl_rep_measured(md, v->name)) fprintf(f, " (not measured yet) " KL_UNMEASURED, md->name, v->name);
        fprintf(f, " |\n");
    }
    fprintf(f, "\n");
    for (int i = 0; i < kl_rep_variant_count(md->name); i++) {
        const struct kl_variant *v = kl_rep_variant_at(md->name, i);
        const bool unmeasured = !kl_rep_measured(md, v->name);
        kl_rep_read_source(v->file, comment, sizeof comment);
        if (unmeasured) fprintf(f, KL_UNMEASURED_BEGIN "\n", md->name, v->name);
        fprintf(f, "### %s\n\n", v->name);
        if (comment[0]) {
            fprintf(f, "```text\n%s\n```\n\n", comment);
        }
        if (unmeasured) {
            fprintf(f,
                    "Not measured yet: no results row names `%s`. `build/kernlab bench %s --variant %s --counters "
                    "--json reports/data/<device>/%s.jsonl`, then `build/kernlab report`, puts it in the "
                    "tables.\n\n" KL_UNMEASURED_END "\n",
                    v->name, md->name, v->name, md->name);
            continue;
        }
        predicted_vs_measured(f, md, v, comment, workload);
        const cJSON *r = workload ? kl_guide_row(md, v->name, workload) : NULL;
        const cJSON *k = r ? kl_json_get(r, "counters.launch") : NULL;
        if (k) {
            const struct kl_shape sh = kl_launch_shape(k);
            fprintf(
                f,
                "Execution model on `%s`, as the %s recorded the launch: kernel `%s`, grid %s x block %d "
                "(%lld threads, %s blocks per SM across %s SMs), %s registers per thread, %s B static + %s B dynamic "
                "shared memory per block, %s B local memory per thread reserved at launch (CUPTI's figure, which can "
                "miss a stack frame: ptxas -v reports those), theoretical occupancy %s%% (limited by %s).\n\n",
                workload, kl_guide_multi(md) ? md->labels[0] : "device", kl_json_str(k, "kernel", "?"), sh.grid,
                sh.threads, sh.blocks * sh.threads, KL_F("%.1f", (double)sh.blocks / kl_json_num(r, "device.sms")),
                KL_F("%.0f", kl_json_num(r, "device.sms")), KL_F("%.0f", kl_json_num(k, "registers")),
                KL_F("%.0f", kl_json_num(k, "static_smem")), KL_F("%.0f", kl_json_num(k, "dynamic_smem")),
                KL_F("%.0f", kl_json_num(k, "local_bytes")), KL_F("%.1f", kl_json_num(k, "theoretical_occupancy_pct")),
                kl_json_str(k, "occupancy_limiter", "?"));
        }
    }
}

/* A CPU module's story: one lookup walking the structure, from the fields its bench records
 * (radix: nodes visited, bytes compared, cache lines touched, against memcmp on the same bytes). */
static void section_cpu_story(FILE *f, const cJSON *r, const char *workload, const char *variant)
{
    fprintf(f, "## Execution story: `%s` on `%s`\n\nOne lookup on the CPU (%s), averaged over the run's queries.\n\n"
               "```text\n", variant, workload, kl_json_str(r, "device.name", "?"));
    fprintf(f, "Time 0 ns        a request's key arrives (%s tokens); the walk starts at the root\n",
            KL_F("%.0f", kl_json_num(r, "params.key_tokens")));
    fprintf(f, "├── Nodes visited: %s per match; child lookups (hash probes): %s per match\n",
            KL_F("%.2f", kl_json_num(r, "nodes_per_match")), KL_F("%.2f", kl_json_num(r, "probes_per_match")));
    fprintf(f, "├── Key bytes compared: %s per match, %s cache lines (%s per node visited)\n",
            KL_HB(kl_json_num(r, "bytes_per_match")), KL_F("%.0f", kl_json_num(r, "lines_per_match")), KL_F("%.1f", kl_json_num(r, "lines_per_node")));
    fprintf(f, "├── memcmp over the same bytes alone: %s ns (%s GB/s)\n", KL_F("%.0f", kl_json_num(r, "memcmp_ns_per_match")),
            KL_F("%.1f", kl_json_num(r, "memcmp_gbs")));
    fprintf(f, "├── Latency: p50 %s ns, p99 %s ns\n", KL_F("%.0f", kl_json_num(r, "p50_match_ns")), KL_F("%.0f", kl_json_num(r, "p99_match_ns")));
    fprintf(f, "└── Interpretation: the walk runs at %s of memcmp's rate over the same bytes; the rest is the pointer "
               "chase between nodes (a cache miss per node) and the page-granular comparison\n",
            KL_F("%.2f", kl_json_num(r, "memcmp_frac")));
    fprintf(f, "Time %s ns     the longest cached prefix is known: %s GB/s of key matched\n```\n\n",
            KL_F("%.0f", kl_json_num(r, "ns_per_match")), KL_F("%.2f", kl_json_num(r, "gbs")));
}

void kl_rep_section_story(FILE *f, const struct kl_guide *md, const char *workload, const char *variant)
{
    const cJSON *r = workload && variant ? kl_guide_row(md, variant, workload) : NULL;
    if (!r) return;
    if (kl_json_num(r, "device.cc") == 0) return section_cpu_story(f, r, workload, variant);
    if (kl_row_compute_bound(r) && md->m && md->m->guide && md->m->guide->compute_story)
        return md->m->guide->compute_story(f, md, r, workload, variant); /* the module's own */
    double t = kl_json_num(r, "time_us.median"), floor_us = kl_json_num(r, "ceilings.launch_us_graph");
    double rd = kl_json_num(r, "counters.dram_read_bytes"), wr = kl_json_num(r, "counters.dram_write_bytes"), b = kl_json_num(r, "bytes");
    fprintf(f, "## Execution story: `%s` on `%s`\n\nOne launch, from the host's call to the last byte written, with "
               "the hardware state the counters measured (CUPTI Range Profiler over the same launch, L2 flushed "
               "first).\n\n```text\n", variant, workload);
    fprintf(f,
            "Time 0.00 us     the launch (timed as %s: %s us%s; with events around each launch: %s us; launch "
            "floor on this GPU: %s us in a graph, %s us on a stream)\n",
            strcmp(kl_row_timed_as(r), "graph") == 0 ? "CUDA-graph replays" : kl_row_timed_as(r), KL_F("%.2f", t), kl_row_throttled(r),
            KL_F("%.2f", kl_json_num(r, "time_us_events.median")), KL_F("%.2f", floor_us),
            KL_F("%.2f", kl_json_num(r, "ceilings.launch_us_stream")));
    const cJSON *k = kl_json_get(r, "counters.launch");
    fprintf(f, "Kernel: %s\n", k ? kl_json_str(k, "kernel", "?") : variant);
    if (k) {
        const struct kl_shape sh = kl_launch_shape(k);
        fprintf(f, "├── Launch: %lld blocks%s%s%s x %d threads over %s SMs (%s blocks per SM)\n", sh.blocks,
                strchr(sh.grid, 'x') ? " (" : "", strchr(sh.grid, 'x') ? sh.grid : "", strchr(sh.grid, 'x') ? ")" : "",
                sh.threads, KL_F("%.0f", kl_json_num(r, "device.sms")), KL_F("%.1f", sh.blocks / kl_json_num(r, "device.sms")));
        fprintf(f, "├── Resources: %s registers/thread, %s B shared/block, %s B local/thread\n",
                KL_F("%.0f", kl_json_num(k, "registers")), KL_F("%.0f", kl_json_num(k, "static_smem") + kl_json_num(k, "dynamic_smem")),
                KL_F("%.0f", kl_json_num(k, "local_bytes")));
        fprintf(f, "├── Occupancy: %s%% achieved of %s%% theoretical (limited by %s)\n",
                KL_F("%.1f", kl_json_num(r, "counters.achieved_occupancy_pct")), KL_F("%.1f", kl_json_num(k, "theoretical_occupancy_pct")),
                kl_json_str(k, "occupancy_limiter", "?"));
    }
    const double ratio = kl_row_dram_ratio(r);
    fprintf(f, "├── DRAM: read %s + wrote %s = %s of the %s the model needs (%s)\n", KL_HB(rd), KL_HB(wr), KL_F("%.3fx", ratio),
            KL_HB(b),
            !isfinite(ratio) ? "no counters"
            : ratio > 1.15   ? "re-reads or uncoalesced access"
            : ratio < 0.85 ? "outputs still dirty in L2 when the range ended are not yet DRAM writes, and any input L2 "
                             "served is no DRAM read"
                           : "every byte once, nothing more");
    fprintf(
        f,
        "├── DRAM busy: %s%% (those bytes over the %s us, against the measured copy bandwidth of %s GB/s); SM %s%%, "
        "L2 hit rate %s, tensor pipe %s%% (the counters)\n",
        KL_F("%.1f", kl_row_dram_pct(r)), KL_F("%.2f", t), KL_F("%.0f", kl_json_num(r, "device.copy_gbs")),
        KL_F("%.1f", kl_json_num(r, "counters.sm_throughput_pct")), KL_L2HIT(r, "%"), KL_F("%.1f", kl_json_num(r, "counters.tensor_pipe_pct")));
    const char *names[32];
    double pct[32];
    int n = kl_row_stalls(r, names, pct, 32);
    for (int i = 0; i < n && i < 4; i++)
        fprintf(f, "%s %-18s %5.1f%%  <- %s\n", i == 0 ? "├── Warp stalls:" : "│                ", names[i], pct[i],
                kl_stall_meaning(names[i]));
    fprintf(f, "└── Interpretation: %s-bound by the roofline (%s FLOP/B against a ridge of %s); ", kl_row_bound(r),
            KL_F("%.3f", kl_json_num(r, "flops") / b), KL_F("%.0f", kl_row_ridge(r)));
    if (strcmp(kl_row_bound(r), "memory") == 0)
        fprintf(f, "DRAM %s%% busy and %s of the copy bandwidth reached\n", KL_F("%.0f", kl_row_dram_pct(r)),
                KL_F("%.2f", kl_row_bw_frac(r)));
    else
        fprintf(f, "%s of the GEMM rate reached\n",
                KL_F("%.2f", kl_fig_frac(kl_row_tflops(r), kl_json_num(r, "device.gemm_tflops"))));
    fprintf(f, "Time %s us    last block retires: %s GB/s = %s of the measured copy bandwidth", KL_F("%.2f", t),
            KL_F("%.0f", kl_row_gbs(r)), KL_F("%.3f", kl_row_bw_frac(r)));
    if (isfinite(kl_json_num(r, "copy_same_bytes_us")))
        fprintf(f,
                "; a plain copy of the same %s takes %s us (%s of the long-copy rate), so this kernel is at %s of "
                "what its size allows",
                KL_HB(b), KL_F("%.2f", kl_json_num(r, "copy_same_bytes_us")),
                KL_F("%.3f", kl_fig_frac(kl_fig_gbs(b, kl_json_num(r, "copy_same_bytes_us")), kl_json_num(r, "device.copy_gbs"))),
                KL_F("%.3f", kl_json_num(r, "copy_same_bytes_frac")));
    if (t < 5 * floor_us) fprintf(f, "; %s x the graph launch floor", KL_F("%.1f", t / floor_us));
    if (isfinite(kl_json_num(r, "read_frac"))) /* read-dominated kernels (decode): the streaming read is their bound */
        fprintf(f, "; a pure streaming read runs at %s GB/s on this GPU, and this kernel reads at %s of that",
                KL_F("%.0f", kl_json_num(r, "device.read_gbs")), KL_F("%.3f", kl_json_num(r, "read_frac")));
    fprintf(f, "\n```\n\n");
    for (int d = 1; d < md->n_devices; d++) { /* the same launch on the other memory systems, in brief */
        struct kl_guide on = *md;
        on.dev = md->devices[d];
        const cJSON *o = kl_guide_row(&on, variant, workload);
        if (!o) continue;
        const char *names_o[32];
        double pct_o[32];
        int no = kl_row_stalls(o, names_o, pct_o, 32);
        fprintf(f,
                "The same launch on %s (%s: copy %s GB/s, graph launch floor %s us): %s us (timed as %s%s; events %s "
                "us), %s GB/s = %s of its copy bandwidth and %s of a same-size copy (%s us); DRAM read %s + wrote %s = "
                "%s of the model, DRAM %s%% busy, achieved occupancy %s%%",
                md->labels[d], md->devices[d], KL_F("%.0f", kl_json_num(o, "device.copy_gbs")),
                KL_F("%.2f", kl_json_num(o, "ceilings.launch_us_graph")), KL_F("%.2f", kl_json_num(o, "time_us.median")), kl_row_timed_as(o),
                kl_row_throttled(o), KL_F("%.2f", kl_json_num(o, "time_us_events.median")), KL_F("%.0f", kl_row_gbs(o)),
                KL_F("%.3f", kl_row_bw_frac(o)), KL_F("%.3f", kl_json_num(o, "copy_same_bytes_frac")),
                KL_F("%.2f", kl_json_num(o, "copy_same_bytes_us")), KL_HB(kl_json_num(o, "counters.dram_read_bytes")),
                KL_HB(kl_json_num(o, "counters.dram_write_bytes")), KL_F("%.3fx", kl_row_dram_ratio(o)), KL_F("%.0f", kl_row_dram_pct(o)),
                KL_F("%.0f", kl_json_num(o, "counters.achieved_occupancy_pct")));
        if (no) fprintf(f, ", top stall %s %.0f%%", names_o[0], pct_o[0]);
        fprintf(f, ".\n\n");
    }
}


/* Under the hardware table: why an L2 hit rate reads n/a, and what a sampled re-check left out. */
static void notes_after_hardware_table(FILE *f, const struct kl_guide *md)
{
    bool odd_l2 = false;
    for (int j = 0; j < md->rows.n; j++) {
        const double c = kl_json_num(md->rows.r[j], "counters.l2_hit_rate_pct");
        odd_l2 |= isfinite(c) && !isfinite(kl_fig_l2_hit_pct(c));
    }
    if (odd_l2)
        fprintf(f, "\n%s\n", kl_guide_text("report", "l2_note"));
    const char *reasons[16];
    int nr = 0;
    for (int j = 0; j < md->rows.n && nr < 16; j++) {
        const cJSON *c = kl_json_get(md->rows.r[j], "recheck");
        const char *why =
            cJSON_IsObject(c) && strcmp(kl_json_str(c, "outputs", ""), "all") != 0 ? kl_json_str(c, "reason", NULL) : NULL;
        if (why && kl_index_of(reasons, nr, why) < 0) reasons[nr++] = why;
    }
    for (int k = 0; k < nr; k++)
        fprintf(f, "%s%s\n", k ? "- " : "\nSampled re-checks, and why not the whole output:\n\n- ", reasons[k]);
}

void kl_rep_section_hardware(FILE *f, const struct kl_guide *md, const char *main_w)
{
    if (md->rows.n && kl_json_num(md->rows.r[0], "device.cc") == 0) return; /* CPU: see "Module measurements" */
    /* How the guides time and what the DRAM column means: said once before each table of times. */
    fprintf(f, "## Hardware analysis\n\n%s %s\n\n", kl_guide_text("report", "timing_note"),
            kl_guide_text("report", "dram_note"));
    fprintf(
        f,
        "| variant | workload |%s median us "
        "(min-max) | timed | events us | GB/s | of copy | DRAM bytes / model | DRAM %% | SM %% | occupancy | L2 hit %% "
        "| "
        "top stalls | re-check of the timed launches |\n|---|---|%s---|---|---|---|---|---|---|---|---|---|---|---|\n",
        kl_guide_multi(md) ? " device |" : "", kl_guide_multi(md) ? "---|" : "");
    for (int i = 0; i < md->n_variants; i++)
        for (int w = 0; w < md->n_workloads; w++)
            for (int d = 0; d < md->n_devices; d++) { /* each device under the other: one kernel, two memories */
                struct kl_guide on = *md;
                on.dev = md->devices[d];
                const cJSON *r = kl_guide_row(&on, md->variants[i], md->workloads[w]);
                if (!r) continue;
                char dev_cell[80] = "";
                if (kl_guide_multi(md)) snprintf(dev_cell, sizeof dev_cell, " %s |", md->labels[d]);
                const char *names[32];
                double pct[32];
                int n = kl_row_stalls(r, names, pct, 32);
                char stall[96] = "-"; /* the two largest: a second stall can be the one a change moved */
                if (n == 1) snprintf(stall, sizeof stall, "%s %.0f%%", names[0], pct[0]);
                if (n > 1) snprintf(stall, sizeof stall, "%s %.0f%%, %s %.0f%%", names[0], pct[0], names[1], pct[1]);
                fprintf(f, "| %s%s | %s |%s %s (%s-%s)%s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
                        md->variants[i], kl_row_is_peer(r) ? " (peer)" : "", md->workloads[w], dev_cell,
                        KL_F("%.2f", kl_json_num(r, "time_us.median")), KL_F("%.2f", kl_json_num(r, "time_us.min")),
                        KL_F("%.2f", kl_json_num(r, "time_us.max")), kl_row_throttled(r), kl_row_timed_as(r),
                        KL_F("%.2f", kl_json_num(r, "time_us_events.median")), KL_F("%.0f", kl_row_gbs(r)), KL_F("%.3f", kl_row_bw_frac(r)),
                        KL_F("%.3f", kl_row_dram_ratio(r)), KL_F("%.0f", kl_row_dram_pct(r)),
                        KL_F("%.0f", kl_json_num(r, "counters.sm_throughput_pct")),
                        KL_F("%.0f%%", kl_json_num(r, "counters.achieved_occupancy_pct")), KL_L2HIT(r, ""), stall, KL_RECHECK(r));
            }
    notes_after_hardware_table(f, md);
    const cJSON *main_row = main_w && md->n_variants ? kl_guide_row(md, md->variants[0], main_w) : NULL;
    if (!kl_row_compute_bound(main_row))
        fprintf(f, "\nWhat the counters say, variant by variant, on `%s`%s%s:\n\n", main_w ? main_w : "-",
                kl_guide_multi(md) ? " on " : "", kl_guide_multi(md) ? md->labels[0] : "");
    for (int i = 0; main_w && i < md->n_variants; i++) {
        const cJSON *r = kl_guide_row(md, md->variants[i], main_w);
        if (!r || kl_row_is_peer(r) || kl_row_compute_bound(r)) continue; /* compute-bound rows: the module's compute_hardware */
        const char *names[32];
        double pct[32];
        int n = kl_row_stalls(r, names, pct, 32);
        double ratio = kl_row_dram_ratio(r), occ = kl_json_num(r, "counters.achieved_occupancy_pct");
        fprintf(f, "- **%s** reaches %s of the copy bandwidth (%s GB/s).", md->variants[i], KL_F("%.2f", kl_row_bw_frac(r)),
                KL_F("%.0f", kl_row_gbs(r)));
        if (isfinite(ratio))
            fprintf(f, " It moves %s the modelled bytes%s.", KL_F("%.2fx", ratio),
                    ratio > 1.15 ? ": extra traffic, from re-reads or partial sectors"
                    : ratio < 0.85 ? ": outputs written late in the kernel were still in L2 when the profiled range ended (an output smaller than the L2 is not written back at all within it), so the counters undercount writes"
                                   : ", so DRAM traffic is as low as it can be");
        if (n) fprintf(f, " Its warps mostly stall on %s (%.0f%%): %s.", names[0], pct[0], kl_stall_meaning(names[0]));
        if (n > 1) fprintf(f, " Next: %s (%.0f%%).", names[1], pct[1]);
        if (isfinite(occ)) fprintf(f, " Achieved occupancy %.0f%%.", occ);
        double fr = kl_row_bw_frac(r);
        if (strcmp(kl_row_bound(r), "memory") == 0 && isfinite(fr))
            fprintf(f, " %s", fr >= 0.9 ? "Within 10% of the copy ceiling: what is left shows in the other stalls (a reduction's barriers) and in the launch's ramp-up and tail."
                                : fr >= 0.6 ? "The gap to the copy ceiling is latency not covered: too few bytes in flight per SM, or a serial phase (a reduction barrier) with the memory system idle."
                                            : "Far from the ceiling: the narrow loads, the extra pass or the launch itself dominate.");
        for (int d = 1; d < md->n_devices; d++) {
            struct kl_guide on = *md;
            on.dev = md->devices[d];
            const cJSON *o = kl_guide_row(&on, md->variants[i], main_w);
            if (!o) continue;
            const char *names_o[32];
            double pct_o[32];
            int no = kl_row_stalls(o, names_o, pct_o, 32);
            fprintf(f, " On %s: %s of its copy bandwidth, %s the modelled bytes", md->labels[d],
                    KL_F("%.2f", kl_row_bw_frac(o)), KL_F("%.2fx", kl_row_dram_ratio(o)));
            if (no) fprintf(f, ", mostly %s (%.0f%%)", names_o[0], pct_o[0]);
            fprintf(f, ".");
        }
        fprintf(f, "\n");
    }
    fprintf(f, "\n");
}

