/* allreduce's guide, a guide of its own (struct kl_guide_hooks .write): its rows are multi-GPU
 * (world, algbw, busbw, NCCL in the same run), so the generic roofline sections do not apply. It
 * takes "The variants" and "Exercises" from the report room (struct kl_guide_room) and writes the
 * rest: topology, the story of one call, busbw curves against NCCL, the switch, targets, counters
 * and correctness. README.md's figure for it is the gated variant's latency against NCCL. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/allreduce/allreduce_module.h"
#include "lab/allreduce/workloads.h"
#include "lab/core/guide.h"
#include "lab/core/json_path.h"
#include "perf/bench.h"

#define FUSED_PREFIX "add-rmsnorm-" /* the fused add + RMSNorm workloads (lab/allreduce/perf.c) */

/* Rows of one world in workload order (sizes ascending, as bench writes them): the plain
 * all-reduce's, or (fused) the fused add + RMSNorm workloads'. */
static int ar_workloads(const struct kl_guide *md, int world, bool fused, const char **sizes, int max)
{
    int n = 0;
    char suffix[32];
    snprintf(suffix, sizeof suffix, "-world%d", world);
    for (int w = 0; w < md->n_workloads && n < max; w++) {
        const char *name = md->workloads[w];
        size_t l = strlen(name), ls = strlen(suffix);
        if (l > ls && strcmp(name + l - ls, suffix) == 0 && (strncmp(name, FUSED_PREFIX, strlen(FUSED_PREFIX)) == 0) == fused)
            sizes[n++] = name;
    }
    return n;
}

static int ar_sizes(const struct kl_guide *md, int world, const char **sizes, int max)
{
    return ar_workloads(md, world, false, sizes, max);
}

static int ar_worlds(const struct kl_guide *md, int *worlds, int max)
{
    int n = 0;
    for (int j = 0; j < md->rows.n; j++) {
        int w = (int)kl_json_num(md->rows.r[j], "params.world"), k = 0;
        while (k < n && worlds[k] != w) k++;
        if (k == n && w > 0 && n < max) worlds[n++] = w;
    }
    for (int i = 1; i < n; i++) /* insertion sort: a handful */
        for (int k = i; k > 0 && worlds[k] < worlds[k - 1]; k--) {
            int t = worlds[k];
            worlds[k] = worlds[k - 1], worlds[k - 1] = t;
        }
    return n;
}

static const cJSON *ar_any_row_with(const struct kl_guide *md, const char *key)
{
    for (int j = 0; j < md->rows.n; j++)
        if (kl_json_get(md->rows.r[j], key)) return md->rows.r[j];
    return NULL;
}

static bool ar_any_row_of(const struct kl_guide *md, const char *variant)
{
    for (int j = 0; j < md->rows.n; j++)
        if (strcmp(kl_json_str(md->rows.r[j], "variant", ""), variant) == 0) return true;
    return false;
}

/* What the switch launched, from the kernel the activity record saw. */
static const char *ar_picked(const cJSON *r)
{
    const char *k = kl_json_str(r, "counters.launch.kernel", "");
    if (strstr(k, "lamport_v8")) return "Lamport one-shot (v8)";
    if (strstr(k, "lamport_v11")) return "Lamport one-shot (v11)";
    if (strstr(k, "lamport_v14")) return "Lamport one-shot (v14)";
    if (strstr(k, "lamport_v17")) return "Lamport one-shot (v17)";
    if (strstr(k, "lamport_v9")) return "Lamport two-shot (v9)";
    if (strstr(k, "oneshot_v4")) return "one-shot (v4)";
    if (strstr(k, "twoshot_v5")) return "two-shot (v5)";
    if (strstr(k, "nccl") || strstr(k, "Nccl")) return "NCCL";
    return k[0] ? k : "-";
}

static void ar_topology(FILE *f, const struct kl_guide *md)
{
    const cJSON *r = ar_any_row_with(md, "topology"), *t = r ? kl_json_get(r, "topology") : NULL;
    fprintf(f, "## The machine: GPUs and NVLink\n\n");
    if (!t) {
        fprintf(f, "No topology in these results.\n\n");
        return;
    }
    fprintf(f, "| GPU | name | PCI | sm | SMs | active NVLinks |\n|---|---|---|---|---|---|\n");
    const cJSON *d;
    int i = 0;
    cJSON_ArrayForEach(d, kl_json_get(t, "devices"))
    {
        fprintf(f, "| %d | %s | %s | %s | %s | %s |\n", i++, kl_json_str(d, "name", "?"), kl_json_str(d, "pci", "?"),
                KL_F("%.0f", kl_json_num(d, "cc")), KL_F("%.0f", kl_json_num(d, "sms")), KL_F("%.0f", kl_json_num(d, "nvlinks")));
    }
    fprintf(f, "\n| from | to | P2P access | performance rank (0 = best) | native atomics |\n|---|---|---|---|---|\n");
    cJSON_ArrayForEach(d, kl_json_get(t, "pairs"))
    {
        fprintf(f, "| %s | %s | %s | %s | %s |\n", KL_F("%.0f", kl_json_num(d, "from")), KL_F("%.0f", kl_json_num(d, "to")),
                cJSON_IsTrue(kl_json_get(d, "p2p")) ? "yes" : "no", KL_F("%.0f", kl_json_num(d, "perf_rank")),
                cJSON_IsTrue(kl_json_get(d, "native_atomics")) ? "yes" : "no");
    }
    const char *smi = kl_json_str(t, "nvidia_smi_topo", NULL);
    if (smi) {
        fprintf(f, "\n`nvidia-smi topo -m` on the same machine:\n\n```text\n");
        for (const char *c = smi; *c; c++) { /* without its terminal escapes (an underlined header) */
            if (*c == '\x1b' && c[1] == '[') {
                c += 2;
                while (*c && !(*c >= '@' && *c <= '~'))
                    c++;
                if (!*c) break;
                continue;
            }
            fputc(*c, f);
        }
        fprintf(f, "%s```\n", smi[0] && smi[strlen(smi) - 1] == '\n' ? "" : "\n");
    }
    const cJSON *p = ar_any_row_with(md, "peer_copy");
    if (p) {
        fprintf(f, "\nThe peer copy ceiling (`kernlab ceilings`, perf/peer.cu), GPU %s reading GPU %s's memory with its SMs "
                   "(256 MB copies): **%s GB/s** one way alone, **%s GB/s per direction with both ways busy** (what an "
                   "all-reduce does, and what busbw is judged against: `bw_frac` below is busbw over it); writing into the "
                   "peer %s GB/s; the copy engines (cudaMemcpyPeer) %s GB/s.\n\n",
                KL_F("%.0f", kl_json_num(p, "peer_copy.a")), KL_F("%.0f", kl_json_num(p, "peer_copy.b")), KL_F("%.0f", kl_json_num(p, "peer_copy.read_gbs")),
                KL_F("%.0f", kl_json_num(p, "peer_copy.read_both_gbs")), KL_F("%.0f", kl_json_num(p, "peer_copy.write_gbs")),
                KL_F("%.0f", kl_json_num(p, "peer_copy.copy_engine_gbs")));
    } else {
        fprintf(f, "\n");
    }
}

/* The story's call inside a CUDA graph (story.graph, when the bench traced one): rank 0's block 0, each
 * phase the median over the graph's calls, as a decode step replays them. */
static void ar_graph_story(FILE *f, const cJSON *s)
{
    const cJSON *g = kl_json_get(s, "graph");
    if (!g) return;
    const bool released = isfinite(kl_json_num(g, "start_ns"));
    fprintf(f,
            "The same call inside a CUDA graph, call after call as the bench replays them (rank 0, block 0, the median "
            "of each phase over %s calls; a traced replay, not the timed one):\n\n```text\n",
            KL_F("%.0f", kl_json_num(g, "calls")));
    if (released) {
        fprintf(f,
                "├── boundary     %6s us   the previous call's exit stamp to this call's griddepcontrol.wait "
                "returning: the previous grid ends, its writes become visible, this grid is let through\n",
                KL_F("%.2f", kl_json_num(g, "boundary_ns") * 1e-3));
        fprintf(f, "├── start        %6s us   x's first unit and the call number read, one block barrier\n",
                KL_F("%.2f", kl_json_num(g, "start_ns") * 1e-3));
    } else {
        fprintf(f,
                "├── boundary     %6s us   the previous call's exit stamp to this call's entry (the previous grid "
                "ends, this one is let through, reads x and the call number)\n",
                KL_F("%.2f", kl_json_num(g, "boundary_ns") * 1e-3));
    }
    fprintf(f, "├── send         %6s us   x stored into every peer's Lamport slots\n",
            KL_F("%.2f", kl_json_num(g, "send_ns") * 1e-3));
    fprintf(f,
            "├── data wait    %6s us   the previous set emptied, our slots polled until the peers' stores have "
            "landed, summed and written\n",
            KL_F("%.2f", kl_json_num(g, "wait_ns") * 1e-3));
    const bool tail = isfinite(kl_json_num(g, "tail_ns")); /* runs from before the last block's exit was stamped: none */
    fprintf(f, "%s exit         %6s us   block 0's last thread done\n", tail ? "├──" : "└──",
            KL_F("%.2f", kl_json_num(g, "exit_ns") * 1e-3));
    if (tail)
        fprintf(f, "└── last block   %6s us   block 0's exit to the last block's: the grid ends with its last block\n",
                KL_F("%.2f", kl_json_num(g, "tail_ns") * 1e-3));
    fprintf(
        f,
        "period           %6s us   one call's entry stamp to the next one's (the timed replays: %s us a call)\n```\n\n",
        KL_F("%.2f", kl_json_num(g, "period_ns") * 1e-3), KL_F("%.2f", kl_json_num(s, "graph_us")));
}

static void ar_story(FILE *f, const struct kl_guide *md, const char *workload, const char *variant)
{
    const cJSON *r = workload && variant ? kl_guide_row(md, variant, workload) : NULL;
    if (!r || !kl_json_get(r, "story")) return;
    const cJSON *s = kl_json_get(r, "story");
    const double entry = kl_json_num(s, "stamps_ns.entry"), copied = kl_json_num(s, "stamps_ns.copied"),
                 started = kl_json_num(s, "stamps_ns.started"), reduced = kl_json_num(s, "stamps_ns.reduced"),
                 mid = kl_json_num(s, "stamps_ns.mid"), gathered = kl_json_num(s, "stamps_ns.gathered"), exit_ = kl_json_num(s, "stamps_ns.exit");
    const double kernel = kl_json_num(s, "kernel_us"), eager = kl_json_num(s, "eager_us"), world = kl_json_num(r, "params.world");
    fprintf(f, "## Execution story: one decode-size all-reduce, %s\n\n`%s` on `%s` (%s per rank, %s ranks), rank 0, one eager "
               "call between two events, block 0 stamping `%%globaltimer` at each phase (KL_AR_T_* in "
               "kernels/allreduce/allreduce.h). The same call inside a CUDA graph, as a decode step replays it, takes "
               "%s us (slowest rank, median).\n\n```text\n",
            variant, variant, workload, KL_HB(kl_json_num(r, "bytes")), KL_F("%.0f", world),
            KL_F("%.2f", kl_json_num(s, "graph_us")));
    fprintf(f, "Time 0.00 us     the host enqueues the call (event before it)\n");
    fprintf(f, "Time %5s us     block 0 starts: the launch took ~%s us (event-timed call %s us minus %s us inside the "
               "kernel)\n", KL_F("%.2f", eager - kernel), KL_F("%.2f", eager - kernel), KL_F("%.2f", eager), KL_F("%.2f", kernel));
    if (!isfinite(started) && isfinite(copied) && isfinite(reduced)) { /* a Lamport call: no barrier stamp */
        fprintf(f, "├── send         %6s us   x stored into this rank's slot of every peer's Lamport buffer (16-byte stores "
                   "over NVLink; the kernel does not wait for them)\n",
                KL_F("%.2f", (copied - entry) * 1e-3));
        fprintf(f, "├── data wait    %6s us   empty the set the previous call used, then poll our own slots until no "
                   "element holds the sentinel: the peers' stores landing, plus the peers' skew; sum in rank order in "
                   "float32, write out\n",
                KL_F("%.2f", (reduced - copied) * 1e-3));
        fprintf(f, "└── exit         %6s us   no barrier at all; the last block publishes the call number\n",
                KL_F("%.2f", (exit_ - reduced) * 1e-3));
        fprintf(f, "Time %5s us     the event after the call: the call as the host sees it\n```\n\n", KL_F("%.2f", eager));
        fprintf(f, "No flag round trip comes before the data: the wait ends when the peers' data itself arrives. Of %s "
                   "us inside the kernel, %s us is that wait (in an eager call it holds the peers' launch skew too); "
                   "in a graph the launch overlaps the previous call and the replayed time (%s us) is what a decode "
                   "step pays.\n\n",
                KL_F("%.2f", kernel), KL_F("%.2f", (reduced - copied) * 1e-3), KL_F("%.2f", kl_json_num(s, "graph_us")));
        ar_graph_story(f, s);
        return;
    }
    fprintf(f, "├── copy-in      %6s us   x into this rank's staging half (local HBM), so the peers can read it\n",
            KL_F("%.2f", (copied - entry) * 1e-3));
    fprintf(f, "├── flag barrier %6s us   st.release.sys of the call number into each peer's flags, spin on ours "
               "(ld.acquire.sys) until every peer's block 0 arrived: one NVLink round trip plus the peers' skew\n",
            KL_F("%.2f", (started - copied) * 1e-3));
    fprintf(f, "├── peer reads   %6s us   16-byte loads of every rank's staging (%s over NVLink), summed in rank order in "
               "float32, rounded once, written to out\n",
            KL_F("%.2f", (reduced - started) * 1e-3), isfinite(mid) ? "this rank's chunk" : "all of it");
    if (isfinite(mid))
        fprintf(f, "├── mid barrier  %6s us   every owner has published its reduced chunk\n"
                   "├── gather       %6s us   the other chunks copied from their owners\n",
                KL_F("%.2f", (mid - reduced) * 1e-3), KL_F("%.2f", (gathered - mid) * 1e-3));
    const double last = isfinite(gathered) ? gathered : reduced;
    fprintf(f, "└── exit         %6s us   %s; the last block publishes the call number\n",
            KL_F("%.2f", (exit_ - last) * 1e-3),
            strstr(variant, "v1") || strstr(variant, "v2") || strstr(variant, "v3") ? "end barrier" : "no end barrier");
    fprintf(f, "Time %5s us     the event after the call: the call as the host sees it\n```\n\n", KL_F("%.2f", eager));
    double barrier = (started - copied) * 1e-3 + (isfinite(mid) ? (mid - reduced) * 1e-3 : 0);
    fprintf(f, "Inside the kernel, %s of %s us is waiting at barriers and %s us moving data; the rest of the eager "
               "call is the launch. In a graph the launch overlaps the previous call, which is why the replayed time "
               "(%s us) is what a serving engine pays and what the gate judges.\n\n",
            KL_F("%.2f us", barrier), KL_F("%.2f", kernel), KL_F("%.2f", kernel - barrier), KL_F("%.2f", kl_json_num(s, "graph_us")));
}

static void ar_svg(const char *path, const struct kl_guide *md)
{
    int worlds[8], nw = ar_worlds(md, worlds, 8);
    FILE *f = fopen(path, "w");
    if (!f) return;
    const int panel = 320, H = 40 + nw * panel;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"820\" height=\"%d\" font-family=\"sans-serif\" "
               "font-size=\"11\">\n<rect width=\"820\" height=\"%d\" fill=\"white\"/>\n", H, H);
    fprintf(f, "<text x=\"70\" y=\"20\" font-size=\"13\">allreduce busbw (GB/s) by message size per rank, bf16: ours "
               "(circles) against NCCL and torch.distributed (squares)</text>\n");
    for (int k = 0; k < nw; k++) {
        const char *sizes[32];
        int ns = ar_sizes(md, worlds[k], sizes, 32);
        double top = 50;
        for (int i = 0; i < md->n_variants; i++)
            for (int s = 0; s < ns; s++) {
                const cJSON *r = kl_guide_row(md, md->variants[i], sizes[s]);
                double b = r ? kl_json_num(r, "busbw_gbs") : NAN;
                if (isfinite(b) && b > top) top = b;
            }
        top = ceil(top / 50) * 50;
        const double y0 = 40 + k * panel + 250, x0 = 70, W = 520;
        fprintf(f, "<text x=\"%g\" y=\"%g\" font-size=\"12\">world %d</text>\n", x0, y0 - 255, worlds[k]);
        for (int g = 0; g <= 5; g++) {
            double y = y0 - 240 * g / 5.0;
            fprintf(f, "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"#eee\"/><text x=\"%g\" y=\"%.1f\" "
                       "text-anchor=\"end\">%.0f</text>\n", x0, y, x0 + W, y, x0 - 6, y + 4, top * g / 5);
        }
        for (int s = 0; s < ns; s++) {
            double x = ns > 1 ? x0 + W * s / (ns - 1.0) : x0;
            const char *label = sizes[s];
            fprintf(f, "<text x=\"%.1f\" y=\"%g\" text-anchor=\"middle\">%.*s</text>\n", x, y0 + 16,
                    (int)(strchr(label, '-') ? strchr(label, '-') - label : (long)strlen(label)), label);
        }
        int legend = 0;
        for (int i = 0; i < md->n_variants; i++) {
            const char *color = KL_COLOR(i, md->n_variants);
            bool any = false, peer = false;
            fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\"%s points=\"", color, "");
            for (int s = 0; s < ns; s++) {
                const cJSON *r = kl_guide_row(md, md->variants[i], sizes[s]);
                double b = r ? kl_json_num(r, "busbw_gbs") : NAN;
                if (!isfinite(b)) continue;
                peer |= kl_row_is_peer(r);
                fprintf(f, "%.1f,%.1f ", ns > 1 ? x0 + W * s / (ns - 1.0) : x0, y0 - 240 * b / top);
                any = true;
            }
            fprintf(f, "\"/>\n");
            if (!any) continue;
            for (int s = 0; s < ns; s++) {
                const cJSON *r = kl_guide_row(md, md->variants[i], sizes[s]);
                double b = r ? kl_json_num(r, "busbw_gbs") : NAN;
                if (!isfinite(b)) continue;
                double x = ns > 1 ? x0 + W * s / (ns - 1.0) : x0, y = y0 - 240 * b / top;
                if (peer) fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"7\" height=\"7\" fill=\"%s\"/>\n", x - 3.5, y - 3.5, color);
                else fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n", x, y, color);
            }
            fprintf(f, "<text x=\"610\" y=\"%.0f\" fill=\"%s\">%s %s</text>\n", y0 - 240 + 14.0 * legend, color,
                    peer ? "&#9632;" : "&#9679;", md->variants[i]);
            legend++;
        }
    }
    fprintf(f, "</svg>\n");
    fclose(f);
}

static void ar_curves(FILE *f, const struct kl_guide *md)
{
    int worlds[8], nw = ar_worlds(md, worlds, 8);
    fprintf(f,
            "## algbw and busbw against NCCL\n\n![allreduce busbw](img/allreduce-busbw.svg)\n\nAs nccl-tests reports "
            "them: algbw = bytes of one rank's buffer / time of the slowest rank; busbw = algbw x 2(world-1)/world, "
            "the rate each GPU's link carries in a ring, so it compares across worlds and with the peer copy "
            "ceiling. Times are medians in microseconds per call, timed as the `timed` column says (`graph`: "
            "CUDA-graph replays, as a decode step replays them; `events`: each call alone between two events); *vs "
            "NCCL* is our time over NCCL's in the same run (below 1 is faster); eager is one call between two "
            "events.\n\n");
    for (int k = 0; k < nw; k++) {
        const char *sizes[32];
        int ns = ar_sizes(md, worlds[k], sizes, 32);
        fprintf(
            f,
            "### world %d\n\n| variant | size | us | timed | us (eager) | algbw GB/s | busbw GB/s | vs NCCL | busbw "
            "of NCCL's | slowest rank | check | re-check of the timed calls |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|\n",
            worlds[k]);
        for (int s = 0; s < ns; s++)
            for (int i = 0; i < md->n_variants; i++) {
                const cJSON *r = kl_guide_row(md, md->variants[i], sizes[s]);
                if (!r) continue;
                /* A row without the bench's ratios (a peer's): against the faster NCCL, as the bench does. */
                const cJSON *nccl = kl_guide_row(md, "v0_nccl", sizes[s]), *sym = kl_guide_row(md, "v0_nccl_symmetric", sizes[s]);
                if (sym && (!nccl || kl_json_num(sym, "time_us.median") < kl_json_num(nccl, "time_us.median"))) nccl = sym;
                double vs = kl_json_num(r, "latency_vs_nccl"), frac = kl_json_num(r, "busbw_frac");
                if (!isfinite(vs) && nccl) vs = kl_json_num(r, "time_us.median") / kl_json_num(nccl, "time_us.median");
                if (!isfinite(frac) && nccl) frac = kl_json_num(r, "busbw_gbs") / kl_json_num(nccl, "busbw_gbs");
                fprintf(f, "| %s%s | %s | %s%s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", md->variants[i],
                        kl_row_is_peer(r) ? " (peer)" : "", sizes[s], KL_F("%.2f", kl_json_num(r, "time_us.median")), kl_row_throttled(r),
                        kl_row_timed_as(r), KL_F("%.2f", kl_json_num(r, "time_us_eager")), KL_F("%.1f", kl_json_num(r, "algbw_gbs")),
                        KL_F("%.1f", kl_json_num(r, "busbw_gbs")), KL_F("%.2f", vs), KL_F("%.3f", frac),
                        KL_F("%.0f", kl_json_num(r, "slowest_rank")), cJSON_IsTrue(kl_json_get(r, "check.pass")) ? "ok" : "FAIL",
                        KL_RECHECK(r));
            }
        fprintf(f, "\n");
    }
}

static void ar_switch(FILE *f, const struct kl_guide *md)
{
    int worlds[8], nw = ar_worlds(md, worlds, 8);
    /* The one-shot: v6's (v17), or in results from before it, the one v6 ran then (v14). */
    const bool v17 = ar_any_row_of(md, "v17_lamport_early_done");
    const char *kcand[] = {"v0_nccl", v17 ? "v17_lamport_early_done" : "v14_lamport_in_registers", "v9_lamport_twoshot"};
    const char *klabel[] = {"NCCL", v17 ? "Lamport one-shot (v17)" : "Lamport one-shot (v14)", "Lamport two-shot (v9)"};
    enum { NC = sizeof kcand / sizeof *kcand };
    fprintf(f, "## The size switch\n\n`v6_switch` picks the Lamport one-shot, the Lamport two-shot or NCCL by size and "
               "world with thresholds fixed in kernels/allreduce/v6_switch.cu (only barrier-free variants and NCCL may "
               "share a communicator: its opening comment says why). The table puts what it launched (the kernel the "
               "activity record saw) beside the fastest of the three in this run; where they differ, move the "
               "threshold.\n\n");
    for (int k = 0; k < nw; k++) {
        const char *sizes[32];
        int ns = ar_sizes(md, worlds[k], sizes, 32);
        fprintf(f, "| world %d | NCCL us | Lamport one-shot us | Lamport two-shot us | fastest | v6 launched | v6 us "
                   "|\n|---|---|---|---|---|---|---|\n",
                worlds[k]);
        for (int s = 0; s < ns; s++) {
            double t[NC];
            int best = -1;
            for (int c = 0; c < NC; c++) {
                const cJSON *r = kl_guide_row(md, kcand[c], sizes[s]);
                t[c] = r ? kl_json_num(r, "time_us.median") : NAN;
                if (isfinite(t[c]) && (best < 0 || t[c] < t[best])) best = c;
            }
            const cJSON *v6 = kl_guide_row(md, "v6_switch", sizes[s]);
            fprintf(f, "| %s | %s | %s | %s | %s | %s | %s |\n", sizes[s], KL_F("%.2f", t[0]), KL_F("%.2f", t[1]),
                    KL_F("%.2f", t[2]),
                    best >= 0 ? klabel[best] : "-", v6 ? ar_picked(v6) : "-", v6 ? KL_F("%.2f", kl_json_num(v6, "time_us.median")) : "-");
        }
        fprintf(f, "\n");
    }
}

static void ar_targets(FILE *f, const struct kl_guide *md, const struct kl_targets *t90)
{
    fprintf(f,
            "## Against the targets\n\nsm_90 targets (perf/targets/sm_90.csv) are judged on the variant that file "
            "names for the module (its gated_variant row; `kernlab bench allreduce --gate` judges it), against NCCL "
            "in the same run: `latency_vs_nccl` = our time / NCCL's (pass at or below the target), `busbw_frac` = our "
            "busbw / NCCL's. Sizes without a target row are listed after the table as ungated.\n\n| workload | "
            "variant | metric | value | target | result | source |\n|---|---|---|---|---|---|---|\n");
    /* Judged here from the targets file, as the other guides judge their rows: a results file
     * written without --gate (or before the gate knew these metrics) is judged the same way. */
    const struct kl_variant *gated = md->rows.n ? kl_gated_variant(md->name, (int)kl_json_num(md->rows.r[0], "device.cc"), NULL) : NULL;
    const char *best = gated ? gated->name : NULL; /* the variant `kernlab bench --gate` judges */
    int said = 0;
    for (int j = 0; best && j < md->rows.n; j++) {
        const cJSON *r = md->rows.r[j];
        if (strcmp(kl_json_str(r, "variant", ""), best) != 0 || kl_row_is_peer(r)) continue;
        const struct kl_target *rows[KL_MAX_TARGETS_PER_WORKLOAD];
        const int n = kl_targets_for(t90, md->name, kl_json_str(r, "workload", ""), rows, KL_MAX_TARGETS_PER_WORKLOAD);
        for (int k = 0; k < n; k++, said++) { /* a line per target of the workload */
            const struct kl_target *x = rows[k];
            const double v = kl_row_metric(r, x->metric);
            fprintf(f, "| %s | %s | %s | %s | %s %s | %s%s | %s |\n", kl_json_str(r, "workload", "?"), best, x->metric,
                    KL_F("%.3f", v), kl_metric_lower_is_better(x->metric) ? "<=" : ">=", KL_F("%.2f", x->target),
                    kl_target_passes(x, v) ? "**pass**" : "**miss**", kl_row_throttled(r), x->source);
        }
    }
    if (!said) fprintf(f, "| - | - | - | - | - | not gated in these results | - |\n");
    int ungated = 0;
    for (int w = 0; w < md->n_workloads; w++)
        if (!kl_target_find(t90, md->name, md->workloads[w]) && kl_guide_has_row(md, md->workloads[w]))
            fprintf(f, "%s`%s`", ungated++ ? ", " : "\nUngated (no target row): ", md->workloads[w]);
    fprintf(f, "%s\n", ungated ? ".\n" : "");
}

/* The exchange floor (perf/peer.cu, measured by the bench beside the peer copy ceiling) against the gated
 * variant at world 2: how much of each call the floor already takes, and what is left to cut. */
static void ar_floor(FILE *f, const struct kl_guide *md, const struct kl_targets *t90)
{
    const cJSON *p = ar_any_row_with(md, "peer_copy.exchange_floor");
    const cJSON *floor = p ? kl_json_get(p, "peer_copy.exchange_floor") : NULL;
    if (!cJSON_IsArray(floor)) return;
    const struct kl_variant *gated = kl_gated_variant(md->name, (int)kl_json_num(p, "device.cc"), NULL);
    const char *best = gated ? gated->name : "-";
    fprintf(
        f,
        "## Against the exchange floor\n\nThe exchange floor (`kernlab ceilings` with two GPUs, perf/peer.cu): GPU "
        "%s and GPU %s each store n bytes into the other's memory and poll their own until the other's have "
        "landed, one launch a call, 20 calls a CUDA graph as programmatic dependents, timed as the calls above "
        "(slower GPU's median). It is the part of a barrier-free one-shot that no variant can leave out: no input "
        "read, no sum, no output, no sets to empty. What the gated variant (%s) takes over it is what its own "
        "steps cost; where a target sits at or under the floor, no variant that moves every byte across the link once, "
        "one launch a call, can meet it. The last column is the latency_vs_nccl target as a time: its ratio "
        "times the faster NCCL's time in the same run.\n\n"
        "| size | floor us | %s us | over the floor us | latency target us | latency_vs_nccl target, in us |\n"
        "|---|---|---|---|---|---|\n",
        KL_F("%.0f", kl_json_num(p, "peer_copy.a")), KL_F("%.0f", kl_json_num(p, "peer_copy.b")), best, best);
    const cJSON *x;
    cJSON_ArrayForEach(x, floor)
    {
        const double bytes = kl_json_num(x, "bytes"), us = kl_json_num(x, "us");
        char size[32], workload[48] = ""; /* the catalogue's name for a size the bench runs, else the bytes */
        snprintf(size, sizeof size, "%.0fB", bytes);
        for (int k = 0; k < KL_AR_PLAIN_SIZES; k++)
            if (kl_ar_size_bytes(k) == (int64_t)bytes) {
                snprintf(size, sizeof size, "%s", kl_ar_plain_size_name(k));
                kl_ar_workload_name(workload, sizeof workload, k, 2);
            }
        const cJSON *r = gated ? kl_guide_row(md, best, workload) : NULL;
        const double ours = r ? kl_json_num(r, "time_us.median") : NAN;
        const struct kl_target *rows[KL_MAX_TARGETS_PER_WORKLOAD];
        const int n = kl_targets_for(t90, md->name, workload, rows, KL_MAX_TARGETS_PER_WORKLOAD);
        /* The target in us: latency_us as it stands; latency_vs_nccl times the faster NCCL's time of the row. */
        double target = NAN, vs_nccl = NAN;
        const double ratio = r ? kl_json_num(r, "latency_vs_nccl") : NAN;
        for (int k = 0; k < n; k++) {
            if (strcmp(rows[k]->metric, "latency_us") == 0) target = rows[k]->target;
            if (strcmp(rows[k]->metric, "latency_vs_nccl") == 0 && ratio > 0) vs_nccl = rows[k]->target * ours / ratio;
        }
        fprintf(f, "| %s | %s | %s | %s | %s | %s |\n", size, KL_F("%.2f", us), KL_F("%.2f", ours),
                KL_F("%.2f", ours - us), KL_F("%.2f", target), KL_F("%.2f", vs_nccl));
    }
    fprintf(f, "\n");
}

static void ar_counters(FILE *f, const struct kl_guide *md)
{
    if (!ar_any_row_with(md, "counters.launch")) return;
    fprintf(f, "## Kernels and counters\n\nRank 0's view of one call (CUPTI activity records; with `--counters`, the Range "
               "Profiler, every rank replaying the call in lockstep).\n\n| variant | workload | kernel | grid x block | "
               "registers | DRAM read + write | SM %% | top stall |\n|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < md->n_variants; i++)
        for (int w = 0; w < md->n_workloads; w++) {
            const cJSON *r = kl_guide_row(md, md->variants[i], md->workloads[w]);
            const cJSON *k = r ? kl_json_get(r, "counters.launch") : NULL;
            if (!k) continue;
            const char *names[32];
            double pct[32];
            int n = kl_row_stalls(r, names, pct, 32);
            char stall[96] = "-", kname[64];
            if (n) snprintf(stall, sizeof stall, "%s %.0f%%", names[0], pct[0]);
            snprintf(kname, sizeof kname, "%.60s", kl_json_str(k, "kernel", "?"));
            fprintf(f, "| %s | %s | `%s` | %s x %s | %s | %s | %s | %s |\n", md->variants[i], md->workloads[w], kname,
                    KL_F("%.0f", cJSON_GetArrayItem(kl_json_get(k, "grid"), 0) ? cJSON_GetArrayItem(kl_json_get(k, "grid"), 0)->valuedouble : NAN),
                    KL_F("%.0f", cJSON_GetArrayItem(kl_json_get(k, "block"), 0) ? cJSON_GetArrayItem(kl_json_get(k, "block"), 0)->valuedouble : NAN),
                    KL_F("%.0f", kl_json_num(k, "registers")),
                    KL_HB(kl_json_num(r, "counters.dram_read_bytes") + kl_json_num(r, "counters.dram_write_bytes")),
                    KL_F("%.0f", kl_json_num(r, "counters.sm_throughput_pct")), stall);
        }
    fprintf(f, "\n");
}

static void ar_correctness(FILE *f, const struct kl_guide *md)
{
    fprintf(f, "## Correctness: tolerance, bit-identity, the bugs engines shipped\n\n%s\n\n", kl_ar_tolerance_rationale());
    fprintf(f, "Every rank's output is compared with every other rank's, bit for bit, in every test and in the bench's "
               "re-check. The check catalogue (`kernlab check allreduce`) runs at worlds 2, 3, 4 and 8 (SKIP where the "
               "machine has fewer GPUs):\n\n");
    char label[160];
    struct kl_ar_problem *p;
    for (int i = 0; (p = kl_ar_catalogue(2, i, 1, label, sizeof label)); i++) {
        if (strncmp(label, "random", 6) != 0) fprintf(f, "- %s\n", label);
        kl_ar_problem_free(p);
    }
    fprintf(
        f,
        "\nThe tests across GPUs (lab/allreduce/test_allreduce.c, suite `allreduce_multigpu`) add, for every "
        "variant: 1000 back-to-back calls with fresh inputs each call and one rank late by 5-40 us (a device-side "
        "sleep), calls captured in CUDA graphs replayed between eager calls (the graph captured before any eager "
        "call), a consumer launched with programmatic dependent launch, a second stream refused, a dead peer and "
        "a barrier timeout that name the rank and the step. Bugs custom all-reduces in serving engines shipped "
        "(lab/CONTRACTS.md section 10), and what here stands against each:\n\n"
        "- byte flags sharing one 8-byte word: one 4-byte flag per (barrier, block, rank), one writer each "
        "(kernels/allreduce/allreduce.h);\n"
        "- a race when flags are reset between calls: flags are never reset, they hold the call number "
        "(the late-rank back-to-back test);\n"
        "- a -0.0 arrival sentinel compared with ==: no sentinel here; the signed-zero cases (and mutant_zero_start) "
        "are ready for a Lamport variant;\n"
        "- completion signalled (PDL) before the output was written: the PDL consumer test;\n"
        "- one communicator used from two streams: refused by every launcher (the second-stream test);\n"
        "- CUDA-graph warm-up that skipped the real all-reduce: the call number lives on the device, the graph "
        "test captures before any eager call, and mutant_host_epoch (a host-side call number) is flagged.\n\n");
    kl_guide_golden_cases(f, md);
}

/* Every traced fused workload (kl_ar_size_traced) in world w, each fused variant's call inside a CUDA graph
 * phase by phase (story.graph), under the plain all-reduce of the same bytes the gate judges there (where the
 * catalogue has that size), traced in the same run: the phases' medians, or (means) their means, story.graph's
 * mean, with their sum (a run that predates the means has no such table). */
static void ar_fused_story(FILE *f, const struct kl_guide *md, const struct kl_targets *t90, int w, bool means)
{
    static const char medians_header[] =
        "Each fused workload's call inside a CUDA graph, call after call, for each fused variant that "
        "was traced, under the plain all-reduce of the same bytes (the gated plain variant, where the "
        "catalogue has that size) traced in the same run: rank 0, block 0, the median of each phase "
        "over a traced replay, in us (the phases of the execution story above). For a fused variant "
        "the data wait ends once block 0's row is normalized and written: the residual add, the row's "
        "sum of squares across the block and both stores are in it, and a block barrier makes it wait "
        "for the block's slowest warp, where a plain call's block 0 stamps for its own thread. A "
        "variant that stamps no release shows no start: its boundary runs to its entry. The last "
        "block is block 0's exit to the grid's last exit (every block stamps its own): what the other "
        "blocks take past block 0 (a dash: the run predates that stamp). The period, one call's entry "
        "to the next, is the figure to compare.\n\n"
        "| variant | workload | boundary | start | send | data wait | exit | last block | period | "
        "timed replays, us |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n";
    static const char means_header[] =
        "The same calls' phases as means over the replay's calls, in us. Where the calls vary, the "
        "medians above need not add up to the median period; the means of boundary, start, send, data "
        "wait and exit add up to the mean time from one call's exit to the next's, which is the mean "
        "period but for the first and last calls' difference in length spread over the calls. A phase "
        "whose mean stands well above its median is one that some calls pay much longer.\n\n"
        "| variant | workload | boundary | start | send | data wait | exit | sum of the five | period | "
        "last block |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n";
    static const char *const phases[] = {"boundary_ns", "start_ns", "send_ns", "wait_ns", "exit_ns"};
    int said = 0;
    for (int fs = KL_AR_PLAIN_SIZES; fs < KL_AR_SIZES; fs++) {
        char fused_w[64], plain_w[48] = "";
        kl_ar_workload_name(fused_w, sizeof fused_w, fs, w);
        const int ps = kl_ar_plain_size_of_fused(fs);
        if (ps >= 0) kl_ar_workload_name(plain_w, sizeof plain_w, ps, w);
        const char *plain = ps >= 0 ? kl_targets_gated_for(t90, md->name, plain_w) : NULL;
        for (int i = -1; i < md->n_variants; i++) { /* -1: the plain all-reduce, first */
            const char *v = i < 0 ? plain : md->variants[i];
            const cJSON *r = v ? kl_guide_row(md, v, i < 0 ? plain_w : fused_w) : NULL;
            const cJSON *s = r ? kl_json_get(r, "story") : NULL, *g = s ? kl_json_get(s, "graph") : NULL;
            if (g && means) g = kl_json_get(g, "mean");
            if (!g || (i >= 0 && plain && strcmp(v, plain) == 0)) continue;
            if (!said++) fprintf(f, "%s", means ? means_header : medians_header);
            /* the five phases (their sum in the means: a phase not stamped, no start without a release, adds
             * nothing, its boundary holding it), then the medians' last block, period and timed replays, or the
             * means' sum, period and last block */
            double sum = 0.;
            fprintf(f, "| %s | %s |", v, i < 0 ? plain_w : fused_w);
            for (size_t q = 0; q < sizeof phases / sizeof *phases; q++) {
                const double ns = kl_json_num(g, phases[q]);
                if (isfinite(ns)) sum += ns;
                fprintf(f, " %s |", KL_F("%.2f", ns * 1e-3));
            }
            const double tail = kl_json_num(g, "tail_ns") * 1e-3, period = kl_json_num(g, "period_ns") * 1e-3;
            if (means)
                fprintf(f, " %s | %s | %s |\n", KL_F("%.2f", sum * 1e-3), KL_F("%.2f", period), KL_F("%.2f", tail));
            else
                fprintf(f, " %s | %s | %s |\n", KL_F("%.2f", tail), KL_F("%.2f", period),
                        KL_F("%.2f", kl_json_num(s, "graph_us")));
        }
    }
    if (said) fprintf(f, "\n");
}

/* The fused all-reduce + add + RMSNorm: what it does (guide/fused.md), its bound, and each fused
 * workload's rows side by side: the fused variant, the composite, and the plain all-reduce's time;
 * then the fused story's phase table. */
static void ar_fused(FILE *f, const struct kl_guide *md, const struct kl_targets *t90)
{
    const char *text = kl_guide_text(md->name, "fused");
    fprintf(f, "## Fused all-reduce + residual add + RMSNorm\n\n%s\n\n%s\n\n", text ? text : "",
            kl_allreduce_rmsnorm_tolerance_text);
    int worlds[8], said = 0;
    const int nw = ar_worlds(md, worlds, 8);
    for (int wi = 0; wi < nw; wi++) {
        const char *wl[32];
        const int n = ar_workloads(md, worlds[wi], true, wl, 32);
        for (int k = 0; k < n; k++)
            for (int i = 0; i < md->n_variants; i++) {
                const cJSON *r = kl_guide_row(md, md->variants[i], wl[k]);
                if (!r || kl_row_is_peer(r)) continue;
                if (!said++)
                    fprintf(f, "| workload | variant | time us | plain all-reduce us | over it, us | target | result |\n"
                               "|---|---|---|---|---|---|---|\n");
                /* The target and its result on the row of the fused variant the gate judges there. */
                const char *judged = kl_targets_gated_for(t90, md->name, wl[k]);
                const struct kl_target *x = kl_target_find(t90, md->name, wl[k]);
                const bool fused = judged && strcmp(judged, md->variants[i]) == 0;
                const double over = kl_json_num(r, "over_allreduce_us");
                fprintf(f, "| %s | %s | %s | %s | %s | %s | %s%s |\n", wl[k], md->variants[i],
                        KL_F("%.2f", kl_json_num(r, "time_us.median")), KL_F("%.2f", kl_json_num(r, "plain_allreduce_us")),
                        KL_F("%.2f", over), x && fused ? KL_F("<= %.2f", x->target) : "-",
                        !x || !fused ? "-" : kl_target_passes(x, over) ? "**pass**" : "**miss**", kl_row_throttled(r));
            }
    }
    fprintf(f, "%s\n",
            said ? ""
                 : "Not measured yet: `build/kernlab bench allreduce` on two GPUs writes these rows (with "
                   "`--variant` and the gated fused variant, perf/targets/sm_90.csv, only its own).\n");
    for (int wi = 0; wi < nw; wi++)
        ar_fused_story(f, md, t90, worlds[wi], false), ar_fused_story(f, md, t90, worlds[wi], true);
}

static int write_guide(const struct kl_guide_room *room, struct kl_guide *md)
{
    const char *out = room->out;
    char path[1200];
    snprintf(path, sizeof path, "%s/allreduce.md", out);
    FILE *f = kl_guide_create(path);
    if (!f) return -1;
    fprintf(f, "# %s: %s\n\n", md->name, md->m ? md->m->summary : "");
    kl_guide_stamp(f, md);
    const char *semantics = kl_guide_text(md->name, "semantics");
    fprintf(f, "## What it computes\n\n%s\n\n", semantics ? semantics : "");
    int worlds[8];
    const int nw = ar_worlds(md, worlds, 8);
    /* The stories: the decode-size call of the smallest world, by the barrier-free variant (the
     * newest rung) and by the best one with a barrier, where they were traced; else any traced one. */
    char story_w[48] = "";
    const char *story_v[2] = {NULL, NULL};
    if (nw) kl_ar_workload_name(story_w, sizeof story_w, kl_ar_story_size(), worlds[0]);
    static const char *kpref[2][5] = {
        {"v17_lamport_early_done", "v14_lamport_in_registers", "v11_lamport_unfenced", "v8_lamport_pdl",
         "v7_lamport_oneshot"},
        {"v4_oneshot_one_barrier", "v6_switch", "v3_oneshot_vec16", "v1_oneshot"}};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < 5 && kpref[k][i] && !story_v[k]; i++) {
            const cJSON *r = kl_guide_row(md, kpref[k][i], story_w);
            if (r && kl_json_get(r, "story")) story_v[k] = kpref[k][i];
        }
    for (int i = 0; i < md->n_variants && !story_v[0] && !story_v[1]; i++) {
        const cJSON *r = kl_guide_row(md, md->variants[i], story_w);
        if (r && kl_json_get(r, "story")) story_v[1] = md->variants[i];
    }
    ar_topology(f, md);
    room->variants(f, md, story_w[0] ? story_w : NULL);
    for (int k = 0; k < 2; k++) ar_story(f, md, story_w, story_v[k]);
    const char *twoshot = kl_guide_text(md->name, "lamport_twoshot"); /* the Lamport two-shot's call, in words */
    if (twoshot) fprintf(f, "%s\n\n", twoshot);
    ar_curves(f, md);
    snprintf(path, sizeof path, "%s/img/allreduce-busbw.svg", out);
    ar_svg(path, md);
    ar_switch(f, md);
    ar_targets(f, md, room->t90);
    ar_floor(f, md, room->t90);
    ar_counters(f, md);
    ar_correctness(f, md);
    ar_fused(f, md, room->t90); /* after the all-reduce's bound, which its bound's text builds on */
    room->exercises(f, md);
    fprintf(f,
            "## Reproduce\n\n```sh\n./lab.sh test                                  # build + every test (multigpu ones "
            "skip below 2 GPUs)\nbuild/kernlab verify golden/allreduce/\nbuild/kernlab check allreduce --seed 1\n"
            "build/kernlab ceilings                         # with 2+ GPUs: the peer copy ceiling and exchange floor "
            "too\n");
    for (int d = 0; d < md->n_devices; d++) {
        char folder[64];
        fprintf(f,
                "build/kernlab bench allreduce --counters --peers --gate --json reports/data/%s/allreduce.jsonl   # on "
                "%s GPUs\n",
                kl_device_folder(md->devices[d], folder, sizeof folder), md->devices[d]);
    }
    fprintf(f, "build/kernlab report --results reports/data --out reports\n```\n");
    return kl_guide_finish(f, path);
}

/* README.md's figure for allreduce: the gated variant's decode-size latency against NCCL. */
static void index_figure(char *buf, size_t len, const struct kl_guide *md, const char *gated)
{
    int worlds[8];
    if (!gated || !ar_worlds(md, worlds, 8)) return;
    char w8[48], w256[48];
    snprintf(w8, sizeof w8, "8KB-world%d", worlds[0]);
    snprintf(w256, sizeof w256, "256MB-world%d", worlds[0]);
    const cJSON *a = kl_guide_row(md, gated, w8), *b = kl_guide_row(md, gated, w256);
    if (a)
        snprintf(buf, len, "%s %s: %s us = %s x NCCL; 256MB: busbw %s x NCCL", gated, w8,
                 KL_F("%.2f", kl_json_num(a, "time_us.median")), KL_F("%.2f", kl_json_num(a, "latency_vs_nccl")),
                 b ? KL_F("%.2f", kl_json_num(b, "busbw_frac")) : "-");
}

const struct kl_guide_hooks kl_allreduce_guide = {.write = write_guide, .index_figure = index_figure};
