/* attention_prefill's own guide sections (struct kl_guide_hooks): the story and the table of its
 * compute-bound rows. The memory-bound story of the report room follows bytes; a compute-bound
 * kernel's follows one CTA's work through the pipes: what it loads, its matrix products on the
 * tensor pipe, what runs beside them, and the counters that say where the time goes (tensor-pipe
 * share, stall reasons, shared-memory bank conflicts, occupancy and its limiter). Rows that report
 * the attention work ("work": rows, pairs, head_dim) get the attention tile's steps by name; the
 * warp-specialized variants' rows carry one CTA's timeline. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "lab/core/guide.h"
#include "lab/core/json_path.h"
#include "perf/figures.h"

/* Extra shared-memory wavefronts caused by bank conflicts, as a share of all shared wavefronts. */
static double conflict_share(const cJSON *r)
{
    double c = kl_json_num(r, "counters.smem_bank_conflicts"), w = kl_json_num(r, "counters.smem_wavefronts");
    return w > 0 ? c / w : NAN;
}

static int setmaxnreg_split(const char *variant, const char *module, int *producer, int *consumer);

/* What the top stall of a compute-bound kernel usually means there (the generic table speaks of
 * memory-bound kernels). A warp-specialized variant (a setmaxnreg split in its source) has no
 * __syncthreads in its loop and its warps wait on mbarriers: two readings differ there. */
static const char *compute_stall_meaning(const char *name, const char *variant, const char *module)
{
    int producer, consumer;
    if (variant && setmaxnreg_split(variant, module, &producer, &consumer)) {
        if (strcmp(name, "barrier") == 0)
            return "waiting at a barrier, not a per-tile __syncthreads (this kernel has none in its loop): the named "
                   "barriers of the Q copy or of v10's turns, or the cluster barrier; the CTA timeline shows where a "
                   "tile's time goes";
        if (strcmp(name, "long_scoreboard") == 0)
            return "waiting on a global- or local-memory access (page-table reads, spilled registers); set it beside "
                   "the CTA timeline, which shows whether the consumers wait for K and V";
    }
    static const struct {
        const char *name, *meaning;
    } k[] = {
        {"math_pipe_throttle", "the tensor (or FMA) pipe is busy: the compute-bound signature, where the time should go"},
        {"short_scoreboard", "waiting on shared memory (ldmatrix) or the special-function unit (the softmax's exp2)"},
        {"mio_throttle", "the shared-memory / special-function queue is full: ldmatrix and MUFU traffic outpace the pipe"},
        {"long_scoreboard", "waiting on global memory: the page lookups and copies are not hidden"},
        {"barrier", "waiting at the per-tile __syncthreads for the slowest warp of the CTA"},
        {"wait", "fixed-latency dependencies: an MMA waiting on the previous one's accumulators"},
        {"not_selected", "ready but another warp issued: the scheduler has spare work"},
        {"dispatch_stall", "the dispatcher could not issue to a busy pipe"},
    };
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++)
        if (strcmp(k[i].name, name) == 0) return k[i].meaning;
    return kl_stall_meaning(name);
}

/* A warp-specialized kernel's register split after setmaxnreg, as its registration declares it:
 * the launch record only knows the cap at entry. 0 if none. */
static int setmaxnreg_split(const char *variant, const char *module, int *producer, int *consumer)
{
    const struct kl_variant *v = kl_variant_find(module, variant);
    *producer = v ? v->producer_regs : 0, *consumer = v ? v->consumer_regs : 0;
    return *producer > 0 && *consumer > 0;
}

/* element j of the number array at path in r, or NaN */
static double at_index(const cJSON *r, const char *path, int j)
{
    const cJSON *a = kl_json_get(r, path), *x = a ? cJSON_GetArrayItem(a, j) : NULL;
    return cJSON_IsNumber(x) ? x->valuedouble : NAN;
}

/* The warp-specialized variants' trace of one CTA (lab/attention_prefill/perf.c's "timeline"): when the
 * producer issued each key tile and when each consumer warpgroup had K, S, the softmax and P V, then
 * the average phase lengths and what they say. Where the trace goes on into the CTA's second work tile
 * (next_tiles), its rows follow a line for the boundary, and a sentence says what the boundary cost. */
static void section_cta_timeline(FILE *f, const cJSON *r)
{
    const cJSON *tl = kl_json_get(r, "timeline");
    if (!tl) return;
    const int tiles = (int)kl_json_num(tl, "tiles"), n = cJSON_GetArraySize(kl_json_get(tl, "issued"));
    const int next = cJSON_IsNumber(kl_json_get(tl, "next_tiles")) ? (int)kl_json_num(tl, "next_tiles") : 0;
    const int first = tiles < n ? tiles : n;             /* the first work tile's rows */
    const int boundary = next > 0 && tiles < n ? tiles : 0; /* the second's first row, 0: none */
    const double mhz = kl_json_num(r, "sm_clock_mhz_before");
    fprintf(f, "One CTA's producer and consumers, key tile by key tile (CTA 0: the longest work tile, %d key tiles",
            tiles);
    if (boundary) fprintf(f, ", then its second work tile, %d key tiles, after the line", next);
    fprintf(f, "; a separate, untimed launch with params.trace set; SM clock cycles from the CTA's start%s%s%s):\n\n"
               "```text\n      producer |        consumer warpgroup 0         |        consumer warpgroup 1\n"
               " tile   issued |  K ready   S done  softmax P V done |  K ready   S done  softmax P V done\n",
            isfinite(mhz) ? ", 1 us = " : "", isfinite(mhz) ? KL_F("%.0f", mhz) : "", isfinite(mhz) ? " cycles" : "");
    const char *ev[4] = {"k_ready", "s_done", "softmax_done", "pv_done"};
    char path[64];
    bool skipped = false;
    for (int j = 0; j < n; j++) {
        const bool shown = n <= 10 || j < 6 || j >= n - 3 || (boundary && j >= boundary - 3 && j < boundary + 3);
        if (!shown) {
            if (!skipped) fprintf(f, "  ...\n");
            skipped = true;
            continue;
        }
        skipped = false;
        if (boundary && j == boundary)
            fprintf(f, "  -- rows stored at %.0f | %.0f; the second work tile taken up at %.0f | %.0f --\n",
                    kl_json_num(tl, "consumers.0.end"), kl_json_num(tl, "consumers.1.end"),
                    kl_json_num(tl, "consumers.0.next_begin"), kl_json_num(tl, "consumers.1.next_begin"));
        fprintf(f, "%5d %8.0f |", j, at_index(tl, "issued", j));
        for (int c = 0; c < 2; c++) {
            for (int e = 0; e < 4; e++) {
                snprintf(path, sizeof path, "consumers.%d.%s", c, ev[e]);
                fprintf(f, " %8.0f", at_index(tl, path, j));
            }
            fprintf(f, "%s", c == 0 ? " |" : "\n");
        }
    }
    /* Average phases of warpgroup 0 over the first work tile: S (K ready -> S done), softmax, P V finishing
     * after the softmax, and the period between K tiles; the producer's lead is how long before a consumer
     * took a tile it was issued. */
    double s_len = 0, sm_len = 0, pv_len = 0, period = 0, lead = 0;
    for (int j = 0; j < first; j++) {
        s_len += at_index(tl, "consumers.0.s_done", j) - at_index(tl, "consumers.0.k_ready", j);
        sm_len += at_index(tl, "consumers.0.softmax_done", j) - at_index(tl, "consumers.0.s_done", j);
        pv_len += at_index(tl, "consumers.0.pv_done", j) - at_index(tl, "consumers.0.softmax_done", j);
        lead += at_index(tl, "consumers.0.k_ready", j) - at_index(tl, "issued", j);
        if (j > 0) period += at_index(tl, "consumers.0.k_ready", j) - at_index(tl, "consumers.0.k_ready", j - 1);
    }
    const double tile_period = first > 1 ? period / (first - 1) : NAN;
    fprintf(f, "```\n\nPer key tile, warpgroup 0 on average: %s cycles from K ready to S done, %s in the softmax, %s "
               "from the softmax's end to its P V done, one tile every %s cycles; K was taken %s cycles after the "
               "producer had issued the tile's V",
            KL_F("%.0f", s_len / first), KL_F("%.0f", sm_len / first), KL_F("%.0f", pv_len / first),
            KL_F("%.0f", tile_period), KL_F("%.0f", lead / first));
    if (first > 0 && sm_len >= s_len)
        fprintf(f, ". The softmax takes as long as the product it follows: hiding it (v10's overlap and ping-pong) is "
                   "worth more than faster copies");
    else if (first > 0 && lead / first < s_len / first)
        fprintf(f, ". The consumers take tiles soon after they were issued: the copies, not the math, set the pace");
    fprintf(f, ".\n\n");
    if (boundary) {
        /* Warpgroup 0 from its last P V of the first work tile to its first S of the second, against the period. */
        const double last_pv = at_index(tl, "consumers.0.pv_done", boundary - 1);
        const double end = kl_json_num(tl, "consumers.0.end"), begin = kl_json_num(tl, "consumers.0.next_begin");
        const double k0 = at_index(tl, "consumers.0.k_ready", boundary);
        const double s0 = at_index(tl, "consumers.0.s_done", boundary);
        fprintf(f, "Between the two work tiles, warpgroup 0 took %s cycles from its last P V done to the next tile's "
                   "first S done, %s key-tile periods: %s to store its rows, %s to take the next tile up, %s to its Q "
                   "and first K, %s to its first S.\n\n",
                KL_F("%.0f", s0 - last_pv), KL_F("%.1f", (s0 - last_pv) / tile_period), KL_F("%.0f", end - last_pv),
                KL_F("%.0f", begin - end), KL_F("%.0f", k0 - begin), KL_F("%.0f", s0 - k0));
    }
}

static void section_compute_story(FILE *f, const struct kl_guide *md, const cJSON *r, const char *workload,
                                  const char *variant)
{
    const double t = kl_json_num(r, "time_us.median"), sms = kl_json_num(r, "device.sms"), flops = kl_json_num(r, "flops");
    const cJSON *k = kl_json_get(r, "counters.launch");
    const int blocks = k ? kl_launch_shape(k).blocks : 0;
    const int threads = k && cJSON_GetArrayItem(kl_json_get(k, "block"), 0) ? cJSON_GetArrayItem(kl_json_get(k, "block"), 0)->valueint : 0;
    const double occ = k ? kl_json_num(k, "theoretical_occupancy_pct") : NAN;
    /* CTAs resident per SM: theoretical occupancy x the SM's warp slots (64) / warps per CTA. */
    const double per_sm = threads > 0 ? floor(occ / 100.0 * 64 / (threads / 32.0) + 1e-9) : NAN;
    fprintf(f,
            "## Execution story: `%s` on `%s`\n\nOne launch, then the life of one CTA (the average over the launch's "
            "CTAs, counting those of a ragged batch that find no rows and exit at once) through the pipes, with what "
            "the counters measured over the same launch (CUPTI Range Profiler, L2 "
            "flushed first). The workload does %s FLOP per byte it must move against a ridge of %s: compute-bound, "
            "so the question is how busy the tensor pipe is and what keeps it waiting.\n\n```text\n",
            variant, workload, KL_F("%.0f", flops / kl_json_num(r, "bytes")), KL_F("%.0f", kl_row_ridge(r)));
    fprintf(f, "Time 0.00 us     the launch (timed as %s: %s us%s; events around each launch: %s us)\n",
            strcmp(kl_row_timed_as(r), "graph") == 0 ? "CUDA-graph replays" : kl_row_timed_as(r), KL_F("%.2f", t), kl_row_throttled(r),
            KL_F("%.2f", kl_json_num(r, "time_us_events.median")));
    fprintf(f, "Kernel: %s\n", k ? kl_json_str(k, "kernel", "?") : variant);
    if (k) {
        fprintf(f, "├── Launch: %d CTAs x %d threads over %s SMs; %s resident per SM (theoretical occupancy %s%%, limited "
                   "by %s), so %s waves\n",
                blocks, threads, KL_F("%.0f", sms), KL_F("%.0f", per_sm), KL_F("%.1f", occ), kl_json_str(k, "occupancy_limiter", "?"),
                KL_F("%.1f", blocks / (sms * per_sm)));
        fprintf(f,
                "├── Resources: %s registers/thread, %s B shared memory/CTA, %s B local/thread reserved for the "
                "launch (CUPTI; a stack frame may not show here, ptxas -v reports it)\n",
                KL_F("%.0f", kl_json_num(k, "registers")),
                KL_F("%.0f", kl_json_num(k, "static_smem") + kl_json_num(k, "dynamic_smem")),
                KL_F("%.0f", kl_json_num(k, "local_bytes")));
        int producer, consumer;
        if (setmaxnreg_split(variant, md->name, &producer, &consumer))
            fprintf(f, "│   └── after setmaxnreg: the producer warpgroup %d registers/thread, each consumer warpgroup %d "
                       "(the %s above is the cap every warp starts with)\n",
                    producer, consumer, KL_F("%.0f", kl_json_num(k, "registers")));
    }
    const double rows = kl_json_num(r, "work.rows"), pairs = kl_json_num(r, "work.pairs"), d = kl_json_num(r, "params.head_dim");
    if (blocks > 0 && isfinite(rows) && isfinite(pairs) && isfinite(d)) {
        /* Attention: rows are (query, qo head) pairs, pairs the unmasked (query, key) pairs of all heads. */
        const double cta_rows = rows / blocks, keys = pairs / rows, cta_us = t * sms * per_sm / blocks;
        fprintf(f, "├── One CTA: %s rows (query, head) of the %s, each seeing %s keys on average: %s FLOPs, %s us of its "
                   "SM slot at the measured rate\n",
                KL_F("%.0f", cta_rows), KL_F("%.0f", rows), KL_F("%.0f", keys), KL_F("%.3g", flops / blocks), KL_F("%.1f", cta_us));
        fprintf(f,
                "│   ├── load:     its q rows once (%s), then its keys' K and V rows tile by tile into shared memory "
                "(about %s: every tile once per CTA); the whole launch read %s from DRAM for a %s model, L2 hit rate "
                "%s\n",
                KL_HB(cta_rows * d * 2), KL_HB(keys * d * 2 * 2), KL_HB(kl_json_num(r, "counters.dram_read_bytes")), KL_HB(kl_json_num(r, "bytes")),
                KL_L2HIT(r, "%"));
        fprintf(f, "│   ├── GEMM 1:   S = Q K^T, %s FLOPs per CTA on the tensor pipe (2 x head_dim per pair)\n",
                KL_F("%.3g", flops / blocks / 2));
        fprintf(f, "│   ├── softmax:  per key tile, each row's max (a shuffle over the 4 threads holding it), one exp2 per "
                   "pair (%s per CTA, on the 16-per-clock special-function unit) and the row sum\n",
                KL_F("%.3g", pairs / blocks));
        fprintf(f, "│   ├── rescale:  when a row's max grows (from v13 on, only by more than 2^8 in the exponent), its "
                   "running sum and its %s output columns are multiplied by 2^(m_old - m_new): at most once per key "
                   "tile, on the FMA pipe\n",
                KL_F("%.0f", d));
        fprintf(f, "│   ├── GEMM 2:   O += P V with P rounded to 16 bits in registers, another %s FLOPs per CTA\n",
                KL_F("%.3g", flops / blocks / 2));
        fprintf(f, "│   └── epilogue: O / l and lse written once (%s per CTA)\n", KL_HB(cta_rows * (d * 2 + 4)));
    }
    fprintf(f, "├── Tensor pipe: active %s%% of the cycles (the GEMMs' share of the SMs' time); SM throughput %s%%\n",
            KL_F("%.1f", kl_json_num(r, "counters.tensor_pipe_pct")), KL_F("%.1f", kl_json_num(r, "counters.sm_throughput_pct")));
    const double cs = conflict_share(r);
    fprintf(f, "├── Shared memory: %s bank-conflict wavefronts of %s (%s%% of the shared-memory work was conflicts)\n",
            KL_F("%.3g", kl_json_num(r, "counters.smem_bank_conflicts")), KL_F("%.3g", kl_json_num(r, "counters.smem_wavefronts")),
            KL_F("%.1f", 100 * cs));
    fprintf(f, "├── Occupancy: %s%% achieved of %s%% theoretical\n", KL_F("%.1f", kl_json_num(r, "counters.achieved_occupancy_pct")),
            KL_F("%.1f", occ));
    const char *names[32];
    double pct[32];
    int n = kl_row_stalls(r, names, pct, 32);
    for (int i = 0; i < n && i < 4; i++)
        fprintf(f, "%s %-18s %5.1f%%  <- %s\n", i == 0 ? "├── Warp stalls:" : "│                ", names[i], pct[i],
                compute_stall_meaning(names[i], variant, md->name));
    const double tc_frac = kl_fig_frac(kl_row_tflops(r), kl_json_num(r, "device.gemm_tflops"));
    fprintf(f, "└── Interpretation: %s of the GEMM rate", KL_F("%.2f", tc_frac));
    if (n) fprintf(f, "; the warps wait mostly on %s", names[0]);
    if (isfinite(cs) && cs > 0.05) fprintf(f, "; bank conflicts are a visible share of the shared-memory work");
    fprintf(f, "\nTime %s us    last CTA retires: %s TFLOP/s = %s of the measured GEMM rate\n```\n\n", KL_F("%.2f", t),
            KL_F("%.1f", kl_row_tflops(r)), KL_F("%.3f", tc_frac));
    section_cta_timeline(f, r);
    /* The peers on the same workload, for scale. */
    int peers = 0;
    for (int i = 0; i < md->n_variants; i++) {
        const cJSON *p = kl_guide_row(md, md->variants[i], workload);
        if (!p || !kl_row_is_peer(p)) continue;
        fprintf(f, "%s `%s` %s TFLOP/s (%s)", peers++ ? "," : "Peers on this workload, same run:", md->variants[i],
                KL_F("%.1f", kl_row_tflops(p)), KL_F("%.3f", kl_fig_frac(kl_row_tflops(p), kl_json_num(p, "device.gemm_tflops"))));
    }
    if (peers) fprintf(f, ".\n\n");
}

/* The compute side of every row: rate, tensor pipe, conflicts, occupancy, registers, top stalls. */
static void section_compute_hardware(FILE *f, const struct kl_guide *md, const char *main_w)
{
    const cJSON *any = NULL;
    for (int j = 0; j < md->rows.n && !any; j++)
        if (kl_row_compute_bound(md->rows.r[j])) any = md->rows.r[j];
    if (!any) return;
    fprintf(f, "### The compute side\n\nFor compute-bound rows: the rate against the measured GEMM ceiling, how busy the "
               "tensor pipe was, the share of shared-memory wavefronts that bank conflicts added, occupancy (achieved / "
               "theoretical, and what limits it) and registers per thread.\n\n| variant | workload | TFLOP/s | tc_frac | "
               "tensor pipe %% | smem conflicts | occupancy | limiter | registers | local B | top stalls |\n"
               "|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < md->n_variants; i++)
        for (int w = 0; w < md->n_workloads; w++) {
            const cJSON *r = kl_guide_row(md, md->variants[i], md->workloads[w]);
            if (!r || !kl_row_compute_bound(r)) continue;
            const cJSON *k = kl_json_get(r, "counters.launch");
            const char *names[32];
            double pct[32];
            int n = kl_row_stalls(r, names, pct, 32);
            char stalls[160] = "-";
            size_t off = 0;
            for (int s = 0; s < n && s < 3 && off < sizeof stalls; s++)
                off += (size_t)snprintf(stalls + off, sizeof stalls - off, "%s%s %.0f%%", s ? ", " : "", names[s], pct[s]);
            fprintf(f, "| %s%s | %s | %s | %s | %s | %s | %s / %s | %s | %s | %s | %s |\n", md->variants[i],
                    kl_row_is_peer(r) ? " (peer)" : "", md->workloads[w], KL_F("%.1f", kl_row_tflops(r)),
                    KL_F("%.3f", kl_row_frac_of_bound(r)), KL_F("%.1f", kl_json_num(r, "counters.tensor_pipe_pct")),
                    KL_F("%.1f%%", 100 * conflict_share(r)), KL_F("%.0f%%", kl_json_num(r, "counters.achieved_occupancy_pct")),
                    KL_F("%.0f%%", k ? kl_json_num(k, "theoretical_occupancy_pct") : NAN),
                    k ? kl_json_str(k, "occupancy_limiter", "-") : "-", KL_F("%.0f", k ? kl_json_num(k, "registers") : NAN),
                    KL_F("%.0f", k ? kl_json_num(k, "local_bytes") : NAN), stalls);
        }
    fprintf(f, "\nOn `%s`, variant by variant:\n\n", main_w ? main_w : "-");
    for (int i = 0; main_w && i < md->n_variants; i++) {
        const cJSON *r = kl_guide_row(md, md->variants[i], main_w);
        if (!r || kl_row_is_peer(r) || !kl_row_compute_bound(r)) continue;
        const char *names[32];
        double pct[32];
        int n = kl_row_stalls(r, names, pct, 32);
        fprintf(f, "- **%s**: %s TFLOP/s, %s of the GEMM rate, tensor pipe %s%% active.", md->variants[i],
                KL_F("%.1f", kl_row_tflops(r)), KL_F("%.3f", kl_row_frac_of_bound(r)), KL_F("%.0f", kl_json_num(r, "counters.tensor_pipe_pct")));
        if (n) fprintf(f, " Its warps mostly stall on %s (%.0f%%): %s.", names[0], pct[0], compute_stall_meaning(names[0], md->variants[i], md->name));
        double cs = conflict_share(r);
        if (isfinite(cs)) fprintf(f, " Bank conflicts: %.1f%% of its shared-memory wavefronts.", 100 * cs);
        fprintf(f, "\n");
    }
    fprintf(f, "\n");
}

const struct kl_guide_hooks kl_attention_prefill_guide = {.compute_story = section_compute_story,
                                                           .compute_hardware = section_compute_hardware};
