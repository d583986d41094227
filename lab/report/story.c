/* The story's guide (and, through story_trace.c, its trace), from the results document alone (story.h gives its format), so
 * `kernlab report` regenerates reports/story.md and reports/story-trace.json byte for byte.
 *
 * story.md tells the run in the study notes' style: a timeline of what happens to each request
 * with the hardware state of every kernel (from the Range Profiler's one instance of each), then
 * per-phase summaries, the prefill -> decode transition, decode time against the KV length, the
 * radix hit, the gaps between kernels and what a CUDA graph saves, and every distinct kernel's
 * counters. story-trace.json is Chrome's trace-event format (Perfetto, chrome://tracing). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/core/compare.h"
#include "lab/core/guide.h"
#include "lab/core/json_path.h"
#include "lab/report/story_doc.h"
#include "lab/story/story.h"
#include "perf/figures.h"


static const char *ms(char *buf, size_t len, double us)
{
    if (!isfinite(us))
        snprintf(buf, len, "-");
    else if (us >= 1000)
        snprintf(buf, len, "%.2f ms", us / 1000);
    else if (us >= 100)
        snprintf(buf, len, "%.3f ms", us / 1000);
    else
        snprintf(buf, len, "%.1f us", us);
    return buf;
}
#define MS(v) ms((char[32]){0}, 32, v)

static const char *gb(char *buf, size_t len, double bytes)
{
    if (bytes >= 1e9)
        snprintf(buf, len, "%.2f GB", bytes / 1e9);
    else if (bytes >= 1e6)
        snprintf(buf, len, "%.1f MB", bytes / 1e6);
    else
        snprintf(buf, len, "%.0f KB", bytes / 1e3);
    return buf;
}
#define GB(v) gb((char[32]){0}, 32, v)


/* A figure of an op by name: "dram_pct" and "l2_hit_pct" derived as above and by kl_fig_l2_hit_pct,
 * any other name the counter itself. */
static double op_figure(const struct kl_story_doc *d, const char *ph, int op, const char *name)
{
    if (strcmp(name, "dram_pct") == 0) return kl_sd_dram_pct(d, ph, op);
    if (strcmp(name, "l2_hit_pct") == 0) return kl_fig_l2_hit_pct(kl_sd_counter(d, ph, op, "l2_hit_rate_pct"));
    return kl_sd_counter(d, ph, op, name);
}

/* "85%" of the copy bandwidth, or "2600 GB/s" when the results hold no ceilings for the device. */
static const char *hbm(const struct kl_story_doc *d, const char *ph, int op, char *buf, size_t len)
{
    if (isfinite(d->copy_gbs)) return kl_fmt(buf, len, "%.0f%%", kl_sd_dram_pct(d, ph, op));
    return kl_fmt(buf, len, "%.0f GB/s", kl_sd_dram_gbs(d, ph, op));
}
#define HBM(d, ph, op) hbm(d, ph, op, (char[48]){0}, 48)

/* "HBM 85%, SM 25%, TC 0% (memory-bound)": the hardware state of one op, from its profile; the
 * roof named by kl_fig_roof from the DRAM share and the tensor pipe. */
static const char *hw(const struct kl_story_doc *d, const char *ph, int op, char *buf, size_t len)
{
    const cJSON *p = kl_sd_profile(d, ph, op);
    const cJSON *c = p ? kl_json_get(p, "counters") : NULL;
    const double sm = kl_json_num(c, "sm_throughput_pct"), tc = kl_json_num(c, "tensor_pipe_pct");
    if (!c || !isfinite(kl_sd_dram_gbs(d, ph, op))) {
        snprintf(buf, len, "(no counters)");
        return buf;
    }
    const char *roof = kl_fig_roof(kl_sd_dram_pct(d, ph, op), tc);
    snprintf(buf, len, "HBM %s, SM %.0f%%, TC %.0f%% (%s%s)", HBM(d, ph, op), sm, tc, roof,
             strcmp(roof, "neither roof") == 0 ? ": too little work to fill the GPU, or latency" : "");
    return buf;
}
#define HW(d, ph, op) hw(d, ph, op, (char[200]){0}, 200)

/* ---- sums over a phase ---- */

/* Per-op time of a phase: by_op summed over its steps (or the phase itself). */
static void phase_by_op(const struct kl_story_doc *d, const cJSON *p, double *by_op, int *steps)
{
    for (int i = 0; i < d->n_ops; i++)
        by_op[i] = 0;
    const cJSON *st = kl_json_get(p, "steps");
    *steps = 0;
    if (st) {
        for (const cJSON *s = st->child; s; s = s->next, ++*steps)
            for (int i = 0; i < d->n_ops; i++)
                by_op[i] += kl_sd_at(kl_json_get(s, "by_op"), i);
    } else if (p) {
        *steps = 1;
        for (int i = 0; i < d->n_ops; i++)
            by_op[i] = kl_sd_at(kl_json_get(p, "by_op"), i);
    }
}

/* A figure (op_figure) averaged over a phase's ops, weighted by their time (ops without it left out). */
static double weighted(const struct kl_story_doc *d, const char *ph, const double *by_op, const char *name)
{
    double w = 0, s = 0;
    for (int i = 0; i < d->n_ops; i++) {
        const double c = op_figure(d, ph, i, name);
        if (isfinite(c) && by_op[i] > 0) w += by_op[i], s += by_op[i] * c;
    }
    return w > 0 ? s / w : NAN;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}
static double median(double *v, int n)
{
    if (n == 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* The median over a stepped phase's steps of a field (or of t1 - t0 with "span"). */
static double steps_median(const cJSON *p, const char *field)
{
    const cJSON *st = kl_json_get(p, "steps");
    const int n = cJSON_GetArraySize(st);
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    int k = 0;
    for (const cJSON *s = st ? st->child : NULL; v && s; s = s->next)
        v[k++] = strcmp(field, "span") == 0     ? kl_json_num(s, "t1_us") - kl_json_num(s, "t0_us")
                 : strcmp(field, "period") == 0 ? (s->next ? kl_json_num(s->next, "t0_us") - kl_json_num(s, "t0_us") : NAN)
                                                : kl_json_num(s, field);
    int m = 0; /* drop NaN (the last step has no period) */
    for (int i = 0; v && i < k; i++)
        if (isfinite(v[i])) v[m++] = v[i];
    const double r = v ? median(v, m) : NAN;
    free(v);
    return r;
}

static double span(const cJSON *p)
{
    return kl_json_num(p, "t1_us") - kl_json_num(p, "t0_us");
}

/* ---- the timeline ---- */

/* A detail array [[op, layer, [[kernel, start, dur, ...], ...]], ...] as the study notes tell it:
 * the ops outside the layers, layer 0 in full, the other layers summarised. */

static void tell_op(FILE *f, const struct kl_story_doc *d, const char *ph, const cJSON *e, const char *indent, double total)
{
    const int op = (int)kl_sd_at(e, 0);
    const struct kl_sd_span s = kl_sd_op_span(e);
    char name[96] = "";
    const cJSON *k0 = cJSON_GetArrayItem(e, 2) ? cJSON_GetArrayItem(e, 2)->child : NULL;
    if (k0) kl_sd_kernel_name(d, (int)kl_sd_at(k0, 0), name, sizeof name);
    fprintf(f, "%s├── %s %s", indent, kl_sd_op_name(d, op), MS(s.us));
    if (s.kernels > 1) fprintf(f, " (%d kernels)", s.kernels);
    fprintf(f, " <- %s", HW(d, ph, op));
    if (total > 0 && s.us / total >= 0.25) fprintf(f, " <- HOTSPOT (%.0f%% of the layer)", 100 * s.us / total);
    fprintf(f, "\n%s│   └── %s\n", indent, name);
}

static void tell_detail(FILE *f, const struct kl_story_doc *d, const char *ph, const cJSON *detail, const char *indent)
{
    /* layer spans: from a layer's first kernel to its last */
    int max_layer = -1;
    for (const cJSON *e = detail ? detail->child : NULL; e; e = e->next)
        if (kl_sd_at(e, 1) > max_layer) max_layer = (int)kl_sd_at(e, 1);
    double *lt0 = calloc((size_t)max_layer + 2, sizeof(double)), *lt1 = calloc((size_t)max_layer + 2, sizeof(double));
    double *lus = calloc((size_t)max_layer + 2, sizeof(double));
    for (int l = 0; lt0 && lt1 && lus && l <= max_layer; l++)
        lt0[l] = INFINITY, lt1[l] = -INFINITY;
    for (const cJSON *e = detail ? detail->child : NULL; lt0 && lt1 && lus && e; e = e->next) {
        const int l = (int)kl_sd_at(e, 1);
        if (l < 0) continue;
        const struct kl_sd_span s = kl_sd_op_span(e);
        lt0[l] = fmin(lt0[l], s.t0), lt1[l] = fmax(lt1[l], s.t1), lus[l] += s.us;
    }
    bool layer0_told = false, layers_told = false;
    for (const cJSON *e = detail ? detail->child : NULL; e; e = e->next) {
        const int l = (int)kl_sd_at(e, 1);
        if (l < 0) {
            if (kl_sd_at(e, 0) == kl_sd_op_index(d, "add_rms_norm")) fprintf(f, "%s├── (final norm)\n", indent);
            tell_op(f, d, ph, e, indent, 0);
            continue;
        }
        if (l == 0) {
            if (!layer0_told)
                fprintf(f, "%s├── LAYER 0 (%s, first kernel to last; %s of kernels):\n", indent, MS(lt1[0] - lt0[0]),
                        MS(lus[0]));
            layer0_told = true;
            char deeper[64];
            snprintf(deeper, sizeof deeper, "%s│   ", indent);
            tell_op(f, d, ph, e, deeper, lus[0]);
            continue;
        }
        if (!layers_told && max_layer >= 1) {
            double *sp = malloc(sizeof(double) * (size_t)max_layer), lo = INFINITY, hi = 0;
            for (int k = 1; sp && k <= max_layer; k++)
                sp[k - 1] = lt1[k] - lt0[k], lo = fmin(lo, sp[k - 1]), hi = fmax(hi, sp[k - 1]);
            fprintf(f, "%s├── LAYER%s 1%s%s: %s each (median; %s to %s), the same kernels as layer 0\n", indent,
                    max_layer > 1 ? "S" : "", max_layer > 1 ? "-" : "", max_layer > 1 ? KL_F("%.0f", max_layer) : "",
                    MS(sp ? median(sp, max_layer) : NAN), MS(lo), MS(hi));
            free(sp);
            layers_told = true;
        }
    }
    free(lt0), free(lt1), free(lus);
}

static const cJSON *event_at(const cJSON *events, int i)
{
    return cJSON_GetArrayItem(events, i);
}

/* Host events up to time t (from *next on), as "CPU:" lines. */
static void tell_events(FILE *f, const cJSON *events, int *next, double t, bool with_time)
{
    for (const cJSON *e; (e = event_at(events, *next)) && kl_json_num(e, "t_us") <= t; ++*next) {
        const char *what = kl_json_str(e, "what", "");
        if (strstr(what, "arrives") || strstr(what, "first token") || with_time)
            fprintf(f, "Time %.3f ms: %s (%s)\n", kl_json_num(e, "t_us") / 1000, what, kl_json_str(e, "detail", ""));
        else
            fprintf(f, "├── CPU: %s: %s\n", what, kl_json_str(e, "detail", ""));
    }
}

/* What the HBM figures are a share of, in words. */
static const char *ceiling_words(const struct kl_story_doc *d)
{
    static char buf[320];
    if (isfinite(d->copy_gbs))
        snprintf(buf, sizeof buf,
                 "as a share of the copy bandwidth `kernlab ceilings` measured on this device (%.0f GB/s, %s)",
                 d->copy_gbs, d->copy_from ? d->copy_from : "environment.md");
    else
        snprintf(buf, sizeof buf, "in GB/s (the results hold no ceilings measured on this device to take a share of)");
    return buf;
}

static void section_timeline(FILE *f, const struct kl_story_doc *d)
{
    const cJSON *events = kl_json_get(d->root, "events");
    int next = 0;
    fprintf(f,
            "## Timeline\n\nWhat happens to the two requests, in the order it happened. `Time` is from request 1's "
            "arrival on the host; GPU lines give the span from the phase's first kernel to its last; each op "
            "shows its measured time and, after `<-`, the hardware state the Range Profiler measured on one "
            "instance of it: HBM is that instance's DRAM bytes (read + written) over its time, %s; SM and TC are "
            "the counters' SM throughput and tensor-pipe activity, %% of peak; the roof is named where the DRAM "
            "share or the tensor pipe reaches %.0f%%. Layer 0 is told in full, the other layers are the same kernels "
            "on the same shapes.\n\n```\n",
            ceiling_words(d), 100 * KL_FIG_ROOF_SHARE);
    const char *story_phases[] = {"prefill", "extend"};
    for (int i = 0; i < 2; i++) {
        const cJSON *p = kl_sd_phase(d, story_phases[i]);
        if (!p) continue;
        tell_events(f, events, &next, kl_json_num(p, "t0_us"), false);
        fprintf(f, "Time %.3f ms: GPU: %s: %s new tokens over %s keys (%s)\n", kl_json_num(p, "t0_us") / 1000,
                kl_json_str(p, "title", ""), KL_F("%.0f", kl_json_num(p, "q_tokens")), KL_F("%.0f", kl_sd_at(kl_json_get(p, "kv_len"), 0)), MS(span(p)));
        tell_detail(f, d, story_phases[i], kl_json_get(p, "detail"), "");
        fprintf(f, "│\n");
    }
    const cJSON *dec = kl_sd_phase(d, "decode");
    if (dec) {
        const cJSON *st = kl_json_get(dec, "steps"), *first = cJSON_GetArrayItem(st, 0);
        tell_events(f, events, &next, kl_json_num(first, "t0_us"), false);
        const int n = cJSON_GetArraySize(st);
        for (const cJSON *s = st ? st->child : NULL; s; s = s->next) {
            const int step = (int)kl_json_num(s, "step");
            char key[16];
            snprintf(key, sizeof key, "%d", step);
            const cJSON *det = kl_json_get(kl_json_get(dec, "detail_steps"), key);
            if (!det) continue;
            fprintf(f, "Time %.3f ms: GPU: decode step %d of %d, batch 2, KV %s + %s (%s)\n", kl_json_num(s, "t0_us") / 1000,
                    step, n, KL_F("%.0f", kl_sd_at(kl_json_get(s, "kv_len"), 0)), KL_F("%.0f", kl_sd_at(kl_json_get(s, "kv_len"), 1)), MS(span(s)));
            tell_detail(f, d, "decode", det, "");
            if (step == 1 && n > 2)
                fprintf(f, "│\n├── ... steps 2-%d: %s each (median), one token per request per step\n│\n", n - 1,
                        MS(steps_median(dec, "span")));
        }
        fprintf(f, "│\n");
    }
    const cJSON *gr = kl_sd_phase(d, "decode_graph"), *ctl = kl_sd_phase(d, "control");
    if (gr) {
        const cJSON *first = cJSON_GetArrayItem(kl_json_get(gr, "steps"), 0);
        tell_events(f, events, &next, kl_json_num(first, "t0_us"), true);
        fprintf(f, "Time %.3f ms: GPU: %s: %d steps, %s each (median; eager %s)\n", kl_json_num(first, "t0_us") / 1000,
                kl_json_str(gr, "title", ""), cJSON_GetArraySize(kl_json_get(gr, "steps")), MS(steps_median(gr, "span")),
                MS(dec ? steps_median(dec, "span") : NAN));
    }
    if (ctl) {
        tell_events(f, events, &next, kl_json_num(ctl, "t0_us"), true);
        fprintf(f, "Time %.3f ms: GPU: %s: %s tokens (%s)\n", kl_json_num(ctl, "t0_us") / 1000, kl_json_str(ctl, "title", ""),
                KL_F("%.0f", kl_json_num(ctl, "q_tokens")), MS(span(ctl)));
    }
    tell_events(f, events, &next, INFINITY, true);
    fprintf(f, "```\n\n");
}

/* ---- summaries ---- */

/* A phase's HBM figure weighted by its ops' time: a percentage of the copy bandwidth, or GB/s. */
static const char *hbm_weighted(const struct kl_story_doc *d, const char *ph, const double *by_op, char *buf, size_t len)
{
    if (isfinite(d->copy_gbs)) return kl_fmt(buf, len, "%.0f%%", weighted(d, ph, by_op, "dram_pct"));
    double w = 0, s = 0;
    for (int i = 0; i < d->n_ops; i++) {
        const double g = kl_sd_dram_gbs(d, ph, i);
        if (isfinite(g) && by_op[i] > 0) w += by_op[i], s += by_op[i] * g;
    }
    return kl_fmt(buf, len, "%.0f GB/s", w > 0 ? s / w : NAN);
}
#define hbm_share(d, ph, by_op) hbm_weighted(d, ph, by_op, (char[48]){0}, 48)

static void section_phases(FILE *f, const struct kl_story_doc *d)
{
    fprintf(f,
            "## Per-phase summaries\n\nTime per kind of op as a share of the phase's kernel time; tensor-pipe (TC) and "
            "HBM are each op's profiled figure weighted by the op's time in the phase (HBM %s). Decode figures are per "
            "step (the median over the steps), its shares over all steps. GPU time runs from the phase's first kernel "
            "to its last; kernel time is the sum of its kernels' times (request 1's prefill is the run's first forward "
            "pass: its GPU time also holds the first launch of every kernel).\n\n",
            ceiling_words(d));
    fprintf(f, "| phase | new tokens | GPU time | kernel time | kernels | ");
    for (int k = 0; k < d->n_kinds; k++)
        fprintf(f, "%s | ", kl_json_str(cJSON_GetArrayItem(d->kinds, k), "", "?"));
    fprintf(f, "TC | HBM | hotspot |\n|---|---|---|---|---|");
    for (int k = 0; k < d->n_kinds; k++)
        fprintf(f, "---|");
    fprintf(f, "---|---|---|\n");
    static const char *const order[] = {"prefill", "extend", "decode", "decode_graph", "control"};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        const cJSON *p = kl_sd_phase(d, order[i]);
        if (!p) continue;
        double by_op[64] = {0}, by_kind[16] = {0}, total = 0;
        int steps;
        phase_by_op(d, p, by_op, &steps);
        int hot = 0;
        for (int o = 0; o < d->n_ops && o < 64; o++) {
            by_kind[kl_sd_op_kind(d, o) & 15] += by_op[o], total += by_op[o];
            if (by_op[o] > by_op[hot]) hot = o;
        }
        const bool stepped = kl_json_get(p, "steps") != NULL;
        const double gpu = stepped ? steps_median(p, "span") : span(p);
        const double kernels = stepped ? steps_median(p, "kernels") : kl_json_num(p, "kernels");
        fprintf(f, "| %s | %s | %s%s | %s%s | %s | ", order[i], stepped ? "2 per step" : KL_F("%.0f", kl_json_num(p, "q_tokens")),
                MS(gpu), stepped ? " per step" : "", MS(stepped ? steps_median(p, "kernel_us") : kl_json_num(p, "kernel_us")),
                stepped ? " per step" : "", KL_F("%.0f", kernels));
        for (int k = 0; k < d->n_kinds; k++)
            fprintf(f, "%s | ", KL_F("%.1f%%", total > 0 ? 100 * by_kind[k] / total : NAN));
        fprintf(f, "%s | %s | %s (%s) |\n", KL_F("%.0f%%", weighted(d, order[i], by_op, "tensor_pipe_pct")),
                hbm_share(d, order[i], by_op), kl_sd_op_name(d, hot),
                KL_F("%.0f%%", total > 0 ? 100 * by_op[hot] / total : NAN));
    }
    fprintf(f, "\n");
}

static void section_transition(FILE *f, const struct kl_story_doc *d)
{
    const cJSON *pre = kl_sd_phase(d, "prefill"), *dec = kl_sd_phase(d, "decode");
    if (!pre || !dec) return;
    double bp[64], bd[64];
    int sp, sd;
    phase_by_op(d, pre, bp, &sp);
    phase_by_op(d, dec, bd, &sd);
    const int att = kl_sd_op_index(d, "attention"), qkv = kl_sd_op_index(d, "qkv_gemm"), up = kl_sd_op_index(d, "gate_up_gemm");
    const cJSON *pa = kl_sd_profile(d, "prefill", att), *da = kl_sd_profile(d, "decode", att);
    char kp[96] = "-", kd[96] = "-";
    const cJSON *l = pa ? cJSON_GetArrayItem(kl_json_get(pa, "launches"), 0) : NULL;
    if (l) kl_sd_kernel_name(d, (int)kl_json_num(l, "kernel"), kp, sizeof kp);
    l = da ? cJSON_GetArrayItem(kl_json_get(da, "launches"), 0) : NULL;
    if (l) kl_sd_kernel_name(d, (int)kl_json_num(l, "kernel"), kd, sizeof kd);
    fprintf(
        f,
        "## The transition: prefill -> decode\n\nThe same weights and the same kinds of kernels, but the work "
        "per weight byte collapses: a prefill GEMM multiplies %s tokens by each weight it reads, a decode GEMM 2.\n\n",
        KL_F("%.0f", kl_json_num(pre, "q_tokens")));
    fprintf(f, "| | prefill | decode | change |\n|---|---|---|---|\n");
    const double tp = weighted(d, "prefill", bp, "tensor_pipe_pct"), td = weighted(d, "decode", bd, "tensor_pipe_pct");
    const double hp = weighted(d, "prefill", bp, "dram_pct"), hd = weighted(d, "decode", bd, "dram_pct");
    fprintf(f, "| tensor pipe (time-weighted) | %s | %s | %s points |\n", KL_F("%.0f%%", tp), KL_F("%.0f%%", td),
            KL_F("%+.0f", td - tp));
    fprintf(f, "| HBM, of the copy bandwidth (time-weighted) | %s | %s | %s points |\n", KL_F("%.0f%%", hp),
            KL_F("%.0f%%", hd), KL_F("%+.0f", hd - hp));
    fprintf(f, "| attention kernel | `%s` | `%s` | attention_prefill's kernel -> attention_decode's |\n", kp, kd);
    const int shown[3] = {att, qkv, up};
    for (int i = 0; i < 3; i++)
        fprintf(f, "| %s: TC / HBM | %s / %s (%s) | %s / %s (%s) | |\n", kl_sd_op_name(d, shown[i]),
                KL_F("%.0f%%", kl_sd_counter(d, "prefill", shown[i], "tensor_pipe_pct")), HBM(d, "prefill", shown[i]),
                kl_fig_roof(kl_sd_dram_pct(d, "prefill", shown[i]), kl_sd_counter(d, "prefill", shown[i], "tensor_pipe_pct")),
                KL_F("%.0f%%", kl_sd_counter(d, "decode", shown[i], "tensor_pipe_pct")), HBM(d, "decode", shown[i]),
                kl_fig_roof(kl_sd_dram_pct(d, "decode", shown[i]), kl_sd_counter(d, "decode", shown[i], "tensor_pipe_pct")));
    /* Rates without the warm-up: request 1's prefill is the run's first forward pass, whose span holds
     * the first launch of every kernel; the control (the same prompt length, prefilled later) is the
     * warm instance. Without a control, the prefill's kernel time is the honest figure. */
    const cJSON *ctl = kl_sd_phase(d, "control");
    const double tok_pre =
        ctl ? kl_json_num(ctl, "q_tokens") / span(ctl) * 1e6 : kl_json_num(pre, "q_tokens") / kl_json_num(pre, "kernel_us") * 1e6;
    const double tok_dec = 2 / steps_median(dec, "period") * 1e6;
    fprintf(f, "| tokens per second | %s (prompt%s) | %s (generated, 2 requests: the median step period) | |\n\n",
            KL_F("%.0f", tok_pre),
            ctl ? ", from the control prefill: request 1's prefill, the run's first forward pass, also loads every "
                  "kernel"
                : ", from the prefill's kernel time: this run has no warm prefill (no control phase), and the "
                  "prefill's span holds the first launch of every kernel",
            KL_F("%.0f", tok_dec));
    fprintf(f,
            "Why: a GEMM of M tokens reads its weight matrix once and does 2M FLOPs per weight element. At M = %s "
            "that is far above the ridge point of the GPU, so the tensor pipe is the limit; at M = 2 every weight "
            "byte feeds 2 FLOPs and the same kernels wait on HBM. Attention goes the same way: the prefill kernel "
            "reuses each K/V tile for a whole tile of queries, the decode kernel reads the whole KV cache for one "
            "query per request.\n\n",
            KL_F("%.0f", kl_json_num(pre, "q_tokens")));
}

/* Least squares of y against x: slope, intercept and the slope's standard error. */
struct fit {
    double slope, icpt, se;
};
static struct fit least_squares(const double *x, const double *y, int n)
{
    double sx = 0, sy = 0;
    for (int i = 0; i < n; i++)
        sx += x[i], sy += y[i];
    const double mx = n ? sx / n : NAN, my = n ? sy / n : NAN;
    double sxx = 0, sxy = 0, rss = 0;
    for (int i = 0; i < n; i++)
        sxx += (x[i] - mx) * (x[i] - mx), sxy += (x[i] - mx) * (y[i] - my);
    struct fit f = {sxx > 0 ? sxy / sxx : NAN, NAN, NAN};
    f.icpt = my - f.slope * mx;
    for (int i = 0; i < n; i++)
        rss += (y[i] - f.icpt - f.slope * x[i]) * (y[i] - f.icpt - f.slope * x[i]);
    f.se = n > 2 && sxx > 0 ? sqrt(rss / (n - 2) / sxx) : NAN;
    return f;
}

static void section_decode_trend(FILE *f, const struct kl_story_doc *d)
{
    const cJSON *dec = kl_sd_phase(d, "decode");
    if (!dec) return;
    const cJSON *st = kl_json_get(dec, "steps");
    const int n = cJSON_GetArraySize(st), att = kl_sd_op_index(d, "attention");
    /* The step's GPU time split into attention, the other kernels and what is between kernels (gaps
     * less PDL overlap): span = attention + others + between, step by step, so the slopes of the
     * three least-squares fits against the KV length add up to the step's, exactly. Steps 2..n:
     * step 1 is the first run of the decode-shaped kernels, whose first launches load them. */
    double *x = calloc((size_t)(n ? n : 1) * 4, sizeof(double));
    if (!x) return;
    double *y = x + n, *ya = y + n, *yo = ya + n;
    int m = 0;
    for (const cJSON *s = st ? st->child : NULL; s; s = s->next) {
        if (n > 2 && kl_json_num(s, "step") == 1) continue;
        double kernels = 0;
        for (int i = 0; i < d->n_ops; i++)
            kernels += isfinite(kl_sd_at(kl_json_get(s, "by_op"), i)) ? kl_sd_at(kl_json_get(s, "by_op"), i) : 0;
        x[m] = kl_sd_at(kl_json_get(s, "kv_len"), 0), y[m] = span(s), ya[m] = kl_sd_at(kl_json_get(s, "by_op"), att), yo[m] = kernels - ya[m];
        m++;
    }
    const struct fit all = least_squares(x, y, m), fa = least_squares(x, ya, m), fo = least_squares(x, yo, m);
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < m; i++)
        lo = fmin(lo, x[i]), hi = fmax(hi, x[i]);
    free(x);
    /* Per 1000 tokens, in us to one decimal; "between" is printed as what is left of the rounded
     * total, so the printed parts add up to the printed total. */
    const double total = round(all.slope * 1e4) / 10, pa = round(fa.slope * 1e4) / 10, po = round(fo.slope * 1e4) / 10;
    fprintf(f,
            "## Decode: time per step against the KV length\n\nEvery step adds one key per request to what attention "
            "reads, while the weights read per step stay the same. Over steps %d-%d (step 1 also pays the first launch "
            "of every decode-shaped kernel, so the fit leaves it out) the KV length per request runs from %s to %s "
            "tokens, so a figure per 1000 tokens extrapolates a fit over %s. Least squares of the step's GPU time "
            "against the KV length: %s + %s x kv/1000 (the slope's standard error: %s us per 1000 tokens). Split the "
            "same way, step by step, into its parts:\n\n"
            "| part of a step | us per 1000 tokens of context |\n|---|---|\n"
            "| attention (reads the KV cache) | %s |\n| the other kernels (read no KV) | %s |\n"
            "| between kernels (gaps less PDL overlap) | %s |\n| **the step** | **%s** |\n\n",
            n > 2 ? 2 : 1, n, KL_F("%.0f", lo), KL_F("%.0f", hi), KL_F("%.0f tokens", hi - lo), MS(all.icpt),
            MS(all.slope * 1000), KL_F("%.1f", all.se * 1000), KL_F("%+.1f", pa), KL_F("%+.1f", po), KL_F("%+.1f", total - pa - po),
            KL_F("%+.1f", total));
    fprintf(f,
            "Attention's slope is the part the context explains: it reads every key of every request each step. The "
            "other kernels read nothing that grows with the context, so a trend of theirs is drift over the run "
            "(here they got %s as the steps went on), which the fit books against the KV length because both "
            "advance with the step. %s\n\n",
            po < 0 ? "faster" : "slower",
            fabs(all.slope) < 2 * all.se
                ? "The step's own slope is within two standard errors of zero: over this short range the growth of the "
                  "step time is not resolved from its step-to-step noise; attention's slope is the figure to carry to "
                  "longer contexts."
                : "The step's slope is more than two standard errors from zero: the inter-token latency grows with the "
                  "context, and attention is why.");
    fprintf(f, "| step | KV per request | step (first kernel to last) | attention | period (start to next start) |\n"
               "|---|---|---|---|---|\n");
    const int every = n > 8 ? n / 8 : 1;
    for (const cJSON *s = st ? st->child : NULL; s; s = s->next) {
        const int step = (int)kl_json_num(s, "step");
        if (!(step == 1 || step % every == 0 || step == n)) continue;
        fprintf(f, "| %d | %s | %s | %s | %s |\n", step, KL_F("%.0f", kl_sd_at(kl_json_get(s, "kv_len"), 0)),
                MS(kl_json_num(s, "t1_us") - kl_json_num(s, "t0_us")), MS(kl_sd_at(kl_json_get(s, "by_op"), att)),
                MS(s->next ? kl_json_num(s->next, "t0_us") - kl_json_num(s, "t0_us") : NAN));
    }
    fprintf(f, "\n");
}

static void section_radix(FILE *f, const struct kl_story_doc *d)
{
    const cJSON *rx = kl_json_get(d->root, "radix"), *pre = kl_sd_phase(d, "prefill"), *ext = kl_sd_phase(d, "extend");
    const cJSON *ctl = kl_sd_phase(d, "control");
    if (!rx || !pre || !ext) return;
    const double miss = span(pre), hit = span(ext), scratch = ctl ? span(ctl) : NAN;
    const double q = kl_json_num(ext, "q_tokens"), kv = kl_sd_at(kl_json_get(ext, "kv_len"), 0);
    const double pairs_full = kv * (kv + 1) / 2, pairs_ext = q * (kv - q) + q * (q + 1) / 2;
    fprintf(f,
            "## The radix hit\n\nRequest 2 shares its first %s tokens with request 1. The radix tree (the lab's own, "
            "[radix.md](radix.md); pages of %s tokens) matched %s tokens = %s pages in %s us on the CPU, and request 2 "
            "prefilled only its last %s tokens: an extend, whose queries attend the %s cached keys and their own "
            "(bottom-right causal).\n\n",
            KL_F("%.0f", kl_json_num(d->root, "run.shared")), KL_F("%.0f", kl_json_num(rx, "page_size")),
            KL_F("%.0f", kl_json_num(rx, "matched_tokens")), KL_F("%.0f", kl_json_num(rx, "matched_pages")), KL_F("%.1f", kl_json_num(rx, "match_us")),
            KL_F("%.0f", q), KL_F("%.0f", kl_json_num(rx, "matched_tokens")));
    fprintf(f, "| | tokens computed | GPU time | attention pairs |\n|---|---|---|---|\n");
    fprintf(f, "| request 1, miss (prefill) | %s | %s | %s |\n", KL_F("%.0f", kl_json_num(pre, "q_tokens")), MS(miss),
            KL_F("%.3g", pairs_full));
    fprintf(f, "| request 2, hit (extend) | %s | %s | %s |\n", KL_F("%.0f", q), MS(hit), KL_F("%.3g", pairs_ext));
    if (ctl)
        fprintf(f, "| request 2 from scratch (control) | %s | %s | %s |\n", KL_F("%.0f", kl_json_num(ctl, "q_tokens")),
                MS(scratch), KL_F("%.3g", pairs_full));
    fprintf(f, "\n");
    if (ctl)
        fprintf(f,
                "The miss is the run's first forward pass: its time includes the first launch of every kernel "
                "(loading it), which is why the control, the same %s-token prefill run later, is the figure to "
                "compare the hit with. The hit saved %s of GPU time (%s of the prefill from scratch) and %s%% of the "
                "attention work. The cache is only an optimisation: the first-token logits of the hit and of the "
                "control differ by at most %s (relative L2 %s), and both pick %s token.\n\n",
                KL_F("%.0f", kl_json_num(ctl, "q_tokens")), MS(scratch - hit), KL_F("%.0f%%", 100 * (scratch - hit) / scratch),
                KL_F("%.0f", 100 * (1 - pairs_ext / pairs_full)), KL_F("%.3g", kl_json_num(rx, "logits_max_abs_diff")),
                KL_F("%.2g", kl_json_num(rx, "logits_rel_l2")), cJSON_IsTrue(kl_json_get(rx, "same_token")) ? "the same" : "a DIFFERENT");
    fprintf(f, "At the end the tree holds %s tokens in %s nodes (%s evictable once both requests finished).\n\n",
            KL_F("%.0f", kl_json_num(rx, "tree.total")), KL_F("%.0f", kl_json_num(rx, "tree.nodes")), KL_F("%.0f", kl_json_num(rx, "tree.evictable")));
}

static void section_gaps(FILE *f, const struct kl_story_doc *d)
{
    fprintf(f, "## Gaps between kernels, and what a CUDA graph saves\n\nA gap is the time between one kernel's end and "
               "the next one's start on the stream: launch latency the GPU sits idle for (negative when a PDL kernel "
               "starts under its predecessor: counted as overlapped). Host is the CPU time from the phase's first "
               "launch call to its last.\n\n| phase | kernels | gaps | gap total | median gap | largest | overlapped "
               "(PDL) | host issue time | GPU time |\n|---|---|---|---|---|---|---|---|---|\n");
    static const char *const order[] = {"prefill", "extend", "decode", "decode_graph", "control"};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        const cJSON *p = kl_sd_phase(d, order[i]);
        if (!p) continue;
        if (!kl_json_get(p, "steps")) {
            fprintf(f, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", order[i], KL_F("%.0f", kl_json_num(p, "kernels")),
                    KL_F("%.0f", kl_json_num(p, "gaps.count")), MS(kl_json_num(p, "gaps.sum_us")), MS(kl_json_num(p, "gaps.median_us")),
                    MS(kl_json_num(p, "gaps.max_us")), KL_F("%.0f", kl_json_num(p, "gaps.overlapped")), MS(kl_json_num(p, "host_us")),
                    MS(span(p)));
            continue;
        }
        fprintf(f, "| %s (per step, median) | %s | %s | %s | %s | %s | %s | %s | %s |\n", order[i],
                KL_F("%.0f", steps_median(p, "kernels")), KL_F("%.0f", steps_median(p, "gaps.count")),
                MS(steps_median(p, "gaps.sum_us")), MS(steps_median(p, "gaps.median_us")),
                MS(steps_median(p, "gaps.max_us")), KL_F("%.0f", steps_median(p, "gaps.overlapped")),
                MS(steps_median(p, "host_us")), MS(steps_median(p, "span")));
    }
    const cJSON *dec = kl_sd_phase(d, "decode"), *gr = kl_sd_phase(d, "decode_graph");
    fprintf(f, "\n");
    if (dec) {
        const double host = steps_median(dec, "host_us"), gpu = steps_median(dec, "span");
        fprintf(f, "Eager decode: the host issues a step's %s launches in %s and the GPU runs them in %s, so the %s: ",
                KL_F("%.0f", steps_median(dec, "kernels")), MS(host), MS(gpu),
                host < gpu ? "host stays ahead and the GPU never waits for a launch" : "GPU waits for the host");
        fprintf(f, "the gaps that remain (%s per step) are the GPU's own launch latency between dependent kernels.\n\n",
                MS(steps_median(dec, "gaps.sum_us")));
    }
    if (dec && gr) {
        const double pe = steps_median(dec, "period"), pg = steps_median(gr, "period");
        const double se = steps_median(dec, "span"), sg = steps_median(gr, "span");
        fprintf(f,
                "The same %d steps replayed as one captured CUDA graph per step: a step takes %s from its first kernel "
                "to its last (eager %s) and %s from one step's start to the next (eager %s): the graph saves %s per "
                "step (%s), and the host issues a step with one call in %s. Tokens: %s.\n\n",
                cJSON_GetArraySize(kl_json_get(gr, "steps")), MS(sg), MS(se), MS(pg), MS(pe), MS(pe - pg),
                KL_F("%.1f%%", 100 * (pe - pg) / pe), MS(steps_median(gr, "host_us")),
                cJSON_IsTrue(kl_json_get(d->root, "tokens.graph_identical")) ? "identical to the eager run, bit for bit"
                                                                     : "NOT identical to the eager run");
    }
}

static void section_kernels(FILE *f, const struct kl_story_doc *d)
{
    fprintf(
        f,
        "## Every distinct kernel, profiled once\n\nOne instance of each op of each phase, replayed alone under the "
        "Range Profiler (cold L2, as Nsight Compute does; one replay per counter pass). Time is the instance "
        "in the run; achieved is the FLOP rate or the bandwidth of its byte model at that time; occupancy is "
        "theoretical (resources) / achieved (counters); HBM is the DRAM bytes the counters saw over that time, %s. "
        "L2 hit is the counter's hits over lookups; n/a where it read outside 0-100%%: it counts every L2 client in "
        "the profiled range (stores as hits), and the profiler may take hits and lookups from different replays, "
        "so for a kernel that moves a few kilobytes the ratio says nothing about the kernel.\n\n",
        ceiling_words(d));
    fprintf(
        f, "| phase | op | shape | kernel | grid x block | regs | occupancy | time | achieved | HBM | SM | TC | L2 hit "
           "| top stalls |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (const cJSON *p = d->profiles ? d->profiles->child : NULL; p; p = p->next) {
        const cJSON *c = kl_json_get(p, "counters"), *l = cJSON_GetArrayItem(kl_json_get(p, "launches"), 0);
        char name[96] = "-", grid[64] = "-", stalls[160] = "";
        if (l) {
            kl_sd_kernel_name(d, (int)kl_json_num(l, "kernel"), name, sizeof name);
            snprintf(grid, sizeof grid, "%.0fx%.0fx%.0f x %.0f", kl_sd_at(kl_json_get(l, "grid"), 0), kl_sd_at(kl_json_get(l, "grid"), 1),
                     kl_sd_at(kl_json_get(l, "grid"), 2), kl_sd_at(kl_json_get(l, "block"), 0) * kl_sd_at(kl_json_get(l, "block"), 1) * kl_sd_at(kl_json_get(l, "block"), 2));
        }
        const int nl = cJSON_GetArraySize(kl_json_get(p, "launches"));
        if (nl > 1) snprintf(name + strlen(name), sizeof name - strlen(name), " (+%d)", nl - 1);
        size_t off = 0;
        int k = 0;
        for (const cJSON *s = kl_json_get(c, "stalls") ? kl_json_get(c, "stalls")->child : NULL; s && k < 3; s = s->next, k++)
            off += (size_t)snprintf(stalls + off, off < sizeof stalls ? sizeof stalls - off : 0, "%s%s %.0f%%",
                                    k ? ", " : "", s->string, s->valuedouble);
        const double us = kl_json_num(p, "us"), flops = kl_json_num(p, "flops"), bytes = kl_json_num(p, "bytes"),
                     l2 = kl_json_num(c, "l2_hit_rate_pct");
        const int op = (int)kl_json_num(p, "op");
        char ach[48], l2hit[48];
        if (flops / bytes > 10)
            kl_fmt(ach, sizeof ach, "%.0f TFLOP/s", kl_fig_tflops(flops, us));
        else
            kl_fmt(ach, sizeof ach, "%.0f GB/s", kl_fig_gbs(bytes, us));
        if (isfinite(kl_fig_l2_hit_pct(l2)))
            kl_fmt(l2hit, sizeof l2hit, "%.0f%%", l2);
        else if (isfinite(l2))
            snprintf(l2hit, sizeof l2hit, "n/a (counter %.0f%%)", l2);
        else
            snprintf(l2hit, sizeof l2hit, "-");
        fprintf(f, "| %s | %s | %s | `%s` | %s | %s | %s / %s | %s | %s | %s | %s | %s | %s | %s |\n",
                kl_json_str(p, "phase", "?"), kl_sd_op_name(d, (int)kl_json_num(p, "op")), kl_json_str(p, "shape", ""), name, grid,
                KL_F("%.0f", l ? kl_json_num(l, "registers") : NAN), KL_F("%.0f%%", l ? kl_json_num(l, "theoretical_occupancy_pct") : NAN),
                KL_F("%.0f%%", kl_json_num(c, "achieved_occupancy_pct")), MS(us), isfinite(us) && us > 0 ? ach : "-",
                HBM(d, kl_json_str(p, "phase", "?"), op), KL_F("%.0f%%", kl_json_num(c, "sm_throughput_pct")),
                KL_F("%.0f%%", kl_json_num(c, "tensor_pipe_pct")), l2hit, stalls[0] ? stalls : kl_json_str(c, "why", "-"));
    }
    fprintf(
        f,
        "\nStall names are Nsight Compute's: long_scoreboard waits on global memory, barrier on __syncthreads, "
        "math_pipe_throttle on a busy pipe, wait on fixed-latency dependencies, gmma on Hopper's warpgroup MMA.\n\n");
}

/* How far inside the bound a correct pipeline stays and how far outside each planted fault lands,
 * as the CPU tests measured them (reports/data/story-check.json), or, without that file, what the
 * tests check and where to read their figures. */
static void section_check_figures(FILE *f, const struct kl_story_doc *d)
{
    const cJSON *c = kl_json_get(d->root, "error_model_check");
    const char *tests = "(`story/the_error_model_covers_a_bf16_emulation_of_the_pipeline`, "
                        "`story/the_end_to_end_check_catches_dropped_keys_page_slips_and_decode_positions`)";
    if (!c) {
        fprintf(f,
                "The CPU tests check that a bf16 emulation of the pipeline stays inside the bound and that planted "
                "faults leave it %s; their figures are not in these results (reports/data/story-check.json).\n\n",
                tests);
        return;
    }
    const double limit = kl_json_num(c, "limit_sigma");
    double lo = INFINITY, hi = -INFINITY;
    int seeds = 0;
    for (const cJSON *e = kl_json_get(c, "emulation") ? kl_json_get(c, "emulation")->child : NULL; e; e = e->next, seeds++)
        lo = fmin(lo, kl_json_num(e, "worst_sigma")), hi = fmax(hi, kl_json_num(e, "worst_sigma"));
    fprintf(f,
            "The CPU tests measure how loose or tight the bound is %s, on the tiny configuration "
            "(reports/data/story-check.json): a bf16 emulation of the pipeline stays inside it, its worst logit "
            "%s to %s sigma from the float64 one over %d seeds against the limit of %s; planted faults land outside "
            "it:",
            tests, KL_F("%.2f", lo), KL_F("%.2f", hi), seeds, KL_F("%.0f", limit));
    int k = 0;
    for (const cJSON *e = kl_json_get(c, "faults") ? kl_json_get(c, "faults")->child : NULL; e; e = e->next, k++)
        fprintf(f, "%s %s at %s sigma (%sx the limit%s)", k ? ";" : "", kl_json_str(e, "what", "?"),
                KL_F("%.1f", kl_json_num(e, "worst_sigma")), KL_F("%.1f", kl_json_num(e, "worst_sigma") / limit),
                cJSON_IsTrue(kl_json_get(e, "caught")) ? "" : ", yet NOT caught");
    fprintf(f, ".\n\n");
}

static void section_rest(FILE *f, const struct kl_story_doc *d)
{
    fprintf(
        f,
        "## The trace\n\n[story-trace.json](story-trace.json) is the same run in Chrome's trace-event format: open it "
        "in [ui.perfetto.dev](https://ui.perfetto.dev) or chrome://tracing. Tracks: phases, decode steps and "
        "layers as enclosing slices; every kernel as a slice on its stream's track (kernels that a PDL launch "
        "started under their predecessor go on a second track of that stream, so every track nests); the host's "
        "scheduler events as instants; HBM and tensor-pipe figures of each op as counter tracks. To keep it a "
        "reasonable size it has every kernel of the prefill, the extend and the first and last decode step of "
        "both decode runs, and one slice per other step. A phase or step slice spans its recorded times, widened "
        "to hold all of its kernels; every time is a multiple of 1/256 us, written exactly, so that a viewer adding "
        "a slice's duration to its start finds the end this file meant and the nesting holds.\n\n");
    fprintf(f,
            "## How the story is checked\n\n`ctest -L gpu -R story` runs the same decoder in a tiny configuration "
            "(2 layers, hidden 256, 4/2 heads, head_dim 64, vocab 512) on the GPU and as a float64 forward pass "
            "built from the lab's references (reference/story.c), request by request with the GPU's tokens fed to "
            "both, and compares the logits of every step. The tolerance is derived, not tuned: every activation the "
            "GPU stores between kernels is rounded to bf16 (variance ulp^2/12), GEMMs accumulate in float32 (and may "
            "round split-K partials once more), attention rounds P to bf16 (the model of lab/core/compare.c); these "
            "variances are propagated to first order through every op to a sigma per logit. %s Greedy tokens must "
            "agree wherever the float64 top two logits are further apart than their bounds, and request 2's logits "
            "after the radix hit must equal those of prefilling it from scratch within the same bound. ",
            kl_story_tolerance_text); /* lab/core/compare.c writes it from the check's constants */
    section_check_figures(f, d);
    const cJSON *r = d->root;
    fprintf(
        f,
        "## Reproduce\n\n```\ncmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build build\n"
        "build/kernlab story --layers %s --prompt %s --shared %s --steps %s --seed %s%s --out /tmp/story\n"
        "cp /tmp/story/story.json reports/data/ && build/kernlab report --results reports/data --out reports\n"
        "KL_UPDATE_FIXTURE=1 build/test_story --filter 'story/the_error_model_figures*'   # reports/data/story-check.json\n"
        "```\n",
        KL_F("%.0f", kl_json_num(r, "model.layers")), KL_F("%.0f", kl_json_num(r, "run.prompt")), KL_F("%.0f", kl_json_num(r, "run.shared")),
        KL_F("%.0f", kl_json_num(r, "run.steps")), KL_F("%.0f", kl_json_num(r, "model.seed")),
        strcmp(kl_json_str(r, "model.name", ""), "tiny") == 0 ? " --tiny" : "");
}

static void section_intro(FILE *f, const struct kl_story_doc *d)
{
    const cJSON *r = d->root;
    fprintf(f, "# The execution story: one forward pass, prefill to decode, radix miss to hit\n\n");
    fprintf(f,
            "> Generated by `kernlab report` from reports/data/story.json: %s, %s, commit %s. Every number below comes "
            "from that one run of `kernlab story`.\n\n",
            kl_json_str(r, "device.name", "?"), kl_json_str(r, "date", "?"), kl_json_str(r, "commit", "?"));
    fprintf(f,
            "The last step of the learning path puts the lab's kernels together. A %s decoder (%s layers, hidden %s, "
            "%s query / %s KV heads of %s, MLP %s, vocabulary %s, bf16, random weights from seed %s: %s generated on "
            "the device) serves two requests: request 1 sends a %s-token prompt, request 2 a prompt whose first %s "
            "tokens are request 1's; both then generate %s tokens together.\n\n",
            kl_json_str(r, "model.name", "?"), KL_F("%.0f", kl_json_num(r, "model.layers")), KL_F("%.0f", kl_json_num(r, "model.hidden")),
            KL_F("%.0f", kl_json_num(r, "model.qo_heads")), KL_F("%.0f", kl_json_num(r, "model.kv_heads")),
            KL_F("%.0f", kl_json_num(r, "model.head_dim")), KL_F("%.0f", kl_json_num(r, "model.mlp")), KL_F("%.0f", kl_json_num(r, "model.vocab")),
            KL_F("%.0f", kl_json_num(r, "model.seed")), GB(kl_json_num(r, "memory.weights_bytes")), KL_F("%.0f", kl_json_num(r, "run.prompt")),
            KL_F("%.0f", kl_json_num(r, "run.shared")), KL_F("%.0f", kl_json_num(r, "run.steps")));
    fprintf(f, "| what | how |\n|---|---|\n");
    fprintf(f, "| embedding | [index](index.md) `%s` |\n", kl_json_str(r, "variants.index", "?"));
    fprintf(f, "| RMSNorm, fused add + RMSNorm | [rmsnorm](rmsnorm.md) `%s` |\n", kl_json_str(r, "variants.rmsnorm", "?"));
    fprintf(f, "| RoPE | [rope](rope.md) `%s` |\n", kl_json_str(r, "variants.rope", "?"));
    fprintf(f, "| K/V into the paged cache | [store](store.md) `%s` |\n", kl_json_str(r, "variants.store", "?"));
    fprintf(f, "| prefill and extend attention | [attention_prefill](attention_prefill.md) `%s` |\n",
            kl_json_str(r, "variants.attention_prefill", "?"));
    fprintf(f, "| decode attention | [attention_decode](attention_decode.md) `%s` |\n",
            kl_json_str(r, "variants.attention_decode", "?"));
    fprintf(f, "| q/k/v, o, gate/up, down, LM head | %s |\n", kl_json_str(r, "variants.gemm", "?"));
    fprintf(f, "| SiLU x mul, greedy argmax | the story's own (lab/story/kernels.cu) |\n");
    fprintf(f, "| prefix cache | [radix](radix.md) tree, pages of %s from a free list |\n",
            KL_F("%.0f", kl_json_num(r, "model.page_size")));
    fprintf(f,
            "| memory | weights %s, KV cache %s (%s pages), activations %s; %s free before the run (%s layers would "
            "fit) |\n",
            GB(kl_json_num(r, "memory.weights_bytes")), GB(kl_json_num(r, "memory.kv_bytes")), KL_F("%.0f", kl_json_num(r, "memory.kv_pages")),
            GB(kl_json_num(r, "memory.activation_bytes")), GB(kl_json_num(r, "memory.free_bytes")),
            KL_F("%.0f", kl_json_num(r, "memory.layers_fit")));
    fprintf(f, "| device | %s, sm_%s, %s SMs, L2 %s; clocks SM %s MHz, memory %s MHz at the start |\n\n",
            kl_json_str(r, "device.name", "?"), KL_F("%.0f", kl_json_num(r, "device.cc")), KL_F("%.0f", kl_json_num(r, "device.sms")),
            GB(kl_json_num(r, "device.l2_bytes")), KL_F("%.0f", kl_json_num(r, "device.sm_clock_mhz")),
            KL_F("%.0f", kl_json_num(r, "device.mem_clock_mhz")));
    fprintf(f,
            "Each layer is rms_norm (or add_rms_norm: the previous block's output added to the residual stream and "
            "normalised in one kernel, so no separate residual add runs) -> qkv_gemm -> rope -> kv_store -> attention "
            "-> o_gemm -> add_rms_norm -> gate_up_gemm -> silu_mul -> down_gemm; the LM head runs on each request's "
            "last token only (float32 logits), then greedy argmax. qkv_gemm is two cuBLAS calls (Q, then K and V as a "
            "batch of two) because the lab's rope, store and attention take q, k and v as contiguous tensors.\n\n");
}

int kl_sd_write_md(const struct kl_story_doc *d, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) return fprintf(stderr, "kernlab: %s: %s\n", path, strerror(errno)), -1;
    section_intro(f, d);
    section_timeline(f, d);
    section_phases(f, d);
    section_transition(f, d);
    section_decode_trend(f, d);
    kl_sd_section_fp8(f, d);
    section_radix(f, d);
    section_gaps(f, d);
    section_kernels(f, d);
    section_rest(f, d);
    return fclose(f) ? -1 : 0;
}

/* ---- the trace ---- */

/* ---- entry points (lab/story/story.h) ---- */

int kl_story_write(const cJSON *root, const cJSON *ceilings, const char *ceilings_from, const char *out_dir)
{
    struct kl_story_doc d = {.root = root,
                    .ops = kl_json_get(root, "ops"),
                    .kinds = kl_json_get(root, "kinds"),
                    .op_kind = kl_json_get(root, "op_kind"),
                    .kernels = kl_json_get(root, "kernels"),
                    .profiles = kl_json_get(root, "profiles"),
                    .phases = kl_json_get(root, "phases"),
                    .copy_gbs = kl_json_num(ceilings, "copy_gbs"),
                    .copy_from = ceilings_from};
    const char *why = kl_story_format_error(root);
    if (why) return fprintf(stderr, "kernlab: story.json: %s\n", why), -1;
    d.n_ops = cJSON_GetArraySize(d.ops), d.n_kinds = cJSON_GetArraySize(d.kinds);
    d.layers = (int)kl_json_num(root, "model.layers");
    char md[1200], tr[1200];
    snprintf(md, sizeof md, "%s/story.md", out_dir);
    snprintf(tr, sizeof tr, "%s/story-trace.json", out_dir);
    return kl_sd_write_md(&d, md) || kl_sd_write_trace(&d, tr) ? -1 : 0;
}

int kl_story_report(const cJSON *root, const char *out_dir)
{
    return kl_story_write(root, NULL, NULL, out_dir);
}

int kl_story_report_dir(const char *results_dir, const char *out_dir)
{
    cJSON *root;
    const int found = kl_story_load(results_dir, &root);
    if (found <= 0) return found;
    const int rc = kl_story_write(root, NULL, NULL, out_dir);
    cJSON_Delete(root);
    return rc ? -1 : 1;
}
