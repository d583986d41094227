/* The picture of a guide: a roofline (variants' TFLOP/s against each workload's intensity, under the
 * measured copy-bandwidth and GEMM roofs), or bandwidth bars for a module whose kernels do no
 * arithmetic. Deterministic: the same rows draw the same bytes. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/core/json_path.h"
#include "lab/report/internal.h"
#include "perf/bench.h"
#include "perf/figures.h"

static double sx(double intensity) { return 70 + (log10(intensity) + 2) / 6.0 * 520; } /* 1e-2 .. 1e4 FLOP/B */
static double sy(double tflops) { return 370 - (log10(tflops) + 3) / 7.0 * 340; }    /* 1e-3 .. 1e4 TFLOP/s */

/* Whether any row of the primary device does floating-point work: a module whose kernels only
 * move bytes (index, store) has no place on a roofline's FLOP axis and is drawn as bandwidth bars. */
bool kl_rep_has_flops(const struct kl_guide *md)
{
    for (int j = 0; j < md->rows.n; j++)
        if (kl_guide_on_dev(md, md->rows.r[j]) && kl_json_num(md->rows.r[j], "flops") > 0) return true;
    return false;
}

/* Workload labels, one each, in as many rows as it takes for no two to overlap (9-px text is about
 * 5.5 px per character), the rows stepping by `step` px from y0 (negative: upwards). x[w] is the
 * label's centre, NAN to skip. */
static void workload_labels(FILE *f, const struct kl_guide *md, const double *x, double y0, double step)
{
    double row_end[8];
    for (int k = 0; k < 8; k++)
        row_end[k] = -1e9;
    for (int w = 0; w < md->n_workloads; w++) {
        if (!isfinite(x[w])) continue;
        const double half = 2.75 * strlen(md->workloads[w]) + 3;
        int k = 0;
        while (k < 7 && x[w] - half < row_end[k])
            k++;
        row_end[k] = x[w] + half;
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"9\" text-anchor=\"middle\" fill=\"#333\">%s</text>\n", x[w],
                y0 + step * k, md->workloads[w]);
    }
}

/* The legend: one line per variant drawn, in its colour, peers marked; then what tells them apart. */
static void legend(FILE *f, const struct kl_guide *md, const bool *drawn, const char *key)
{
    int line = 0;
    for (int i = 0; i < md->n_variants; i++) {
        if (!drawn[i]) continue;
        const cJSON *r = NULL;
        for (int w = 0; w < md->n_workloads && !r; w++)
            r = kl_guide_row(md, md->variants[i], md->workloads[w]);
        fprintf(f, "<text x=\"622\" y=\"%d\" fill=\"%s\">%s %s</text>\n", 44 + 14 * line++, KL_COLOR(i, md->n_variants),
                r && kl_row_is_peer(r) ? "&#9632;" : "&#9679;", md->variants[i]);
    }
    fprintf(f, "<text x=\"622\" y=\"%d\" fill=\"#555\">%s</text>\n", 50 + 14 * line, key);
}

/* Bandwidth bars for a module without FLOPs: per workload a group of bars, one per variant, the
 * height its GB/s; the measured copy bandwidth as a line across. */
static void svg_bars(FILE *f, const struct kl_guide *md, double copy_gbs)
{
    double top = copy_gbs;
    for (int j = 0; j < md->rows.n; j++)
        if (kl_guide_on_dev(md, md->rows.r[j]) && kl_row_gbs(md->rows.r[j]) > top) top = kl_row_gbs(md->rows.r[j]);
    top = ceil(top / 500) * 500;
    const double x0 = 70, W = 520, y0 = 360, H = 320;
    fprintf(f,
            "<text x=\"70\" y=\"18\" font-size=\"13\">%s bandwidth%s%s: GB/s of the byte model per variant; no FLOPs, "
            "so no roofline</text>\n",
            md->name, kl_guide_multi(md) ? " on " : "", kl_guide_multi(md) ? md->labels[0] : "");
    for (int g = 0; g <= 5; g++) {
        const double y = y0 - H * g / 5.0;
        fprintf(f,
                "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"#eee\"/><text x=\"%g\" y=\"%.1f\" "
                "text-anchor=\"end\">%.0f</text>\n",
                x0, y, x0 + W, y, x0 - 6, y + 4, top * g / 5);
    }
    const double yc = y0 - H * copy_gbs / top;
    fprintf(f,
            "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"black\" stroke-width=\"2\"/><text x=\"%g\" "
            "y=\"%.1f\">copy %.0f GB/s</text>\n",
            x0, yc, x0 + W, yc, x0 + 4, yc - 4, copy_gbs);
    fprintf(f, "<text x=\"16\" y=\"200\" transform=\"rotate(-90 16 200)\" text-anchor=\"middle\">GB/s</text>\n");
    int nw = 0;
    for (int w = 0; w < md->n_workloads; w++)
        nw += kl_guide_has_row(md, md->workloads[w]);
    double label_x[64];
    bool drawn[64] = {false};
    const double group = nw ? W / nw : W, bar = fmax(1.0, (group - 8) / (md->n_variants ? md->n_variants : 1));
    int slot = 0;
    for (int w = 0; w < md->n_workloads; w++) {
        label_x[w] = NAN;
        if (!kl_guide_has_row(md, md->workloads[w])) continue;
        const double gx = x0 + group * slot++ + 4;
        label_x[w] = gx + (group - 8) / 2;
        for (int i = 0; i < md->n_variants; i++) {
            const cJSON *r = kl_guide_row(md, md->variants[i], md->workloads[w]);
            const double g = r ? kl_row_gbs(r) : NAN;
            if (!isfinite(g)) continue;
            drawn[i] = true;
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"%s/>\n", gx + bar * i,
                    y0 - H * g / top, bar, H * g / top, KL_COLOR(i, md->n_variants),
                    kl_row_is_peer(r) ? " fill-opacity=\"0.55\" stroke=\"black\" stroke-width=\"0.5\"" : "");
        }
    }
    workload_labels(f, md, label_x, y0 + 14, 11);
    legend(f, md, drawn, "solid: ours, pale: peer");
}

/* The roofline: the copy-bandwidth and GEMM-rate roofs; each workload's intensity (the same for
 * every variant: it comes from the models) as a dashed line labelled once; the variants as points
 * on it, our circles and the peers' squares, one colour per variant. */
static void svg_roofline(FILE *f, const struct kl_guide *md, double copy_gbs, double gemm_tflops)
{
    fprintf(f, "<text x=\"70\" y=\"18\" font-size=\"13\">%s roofline%s%s: measured copy %.0f GB/s, bf16 GEMM %.0f "
               "TFLOP/s</text>\n", md->name, kl_guide_multi(md) ? " on " : "", kl_guide_multi(md) ? md->labels[0] : "", copy_gbs, gemm_tflops);
    for (int e = -2; e <= 4; e++)
        fprintf(f, "<line x1=\"%.1f\" y1=\"30\" x2=\"%.1f\" y2=\"370\" stroke=\"#eee\"/><text x=\"%.1f\" y=\"386\" "
                   "text-anchor=\"middle\">1e%d</text>\n", sx(pow(10, e)), sx(pow(10, e)), sx(pow(10, e)), e);
    for (int e = -3; e <= 4; e++)
        fprintf(f, "<line x1=\"70\" y1=\"%.1f\" x2=\"590\" y2=\"%.1f\" stroke=\"#eee\"/><text x=\"64\" y=\"%.1f\" "
                   "text-anchor=\"end\">1e%d</text>\n", sy(pow(10, e)), sy(pow(10, e)), sy(pow(10, e)) + 4, e);
    fprintf(f, "<text x=\"330\" y=\"405\" text-anchor=\"middle\">arithmetic intensity (FLOP / byte of the model)</text>\n"
               "<text x=\"16\" y=\"200\" transform=\"rotate(-90 16 200)\" text-anchor=\"middle\">TFLOP/s</text>\n");
    /* roofs: bandwidth x intensity up to the ridge, then the GEMM rate */
    double ridge = kl_fig_ridge(copy_gbs, gemm_tflops), i0 = 1e-2, y0 = copy_gbs * 1e9 * i0 / 1e12;
    fprintf(f, "<polyline fill=\"none\" stroke=\"black\" stroke-width=\"2\" points=\"%.1f,%.1f %.1f,%.1f %.1f,%.1f\"/>\n",
            sx(i0), sy(y0), sx(ridge), sy(gemm_tflops), sx(1e4), sy(gemm_tflops));
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">ridge %.0f FLOP/B</text>\n", sx(ridge) - 4,
            sy(gemm_tflops) - 6, ridge);
    double label_x[64];
    bool drawn[64] = {false};
    for (int w = 0; w < md->n_workloads; w++) {
        const cJSON *r = kl_guide_first_row(md, md->workloads[w]);
        const double b = r ? kl_json_num(r, "bytes") : NAN, fl = r ? kl_json_num(r, "flops") : NAN;
        label_x[w] = b > 0 && fl > 0 ? sx(fmin(fmax(fl / b, 1e-2), 1e4)) : NAN;
        if (isfinite(label_x[w]))
            fprintf(f,
                    "<line x1=\"%.1f\" y1=\"30\" x2=\"%.1f\" y2=\"370\" stroke=\"#bbb\" stroke-dasharray=\"3,3\"/>\n",
                    label_x[w], label_x[w]);
    }
    for (int i = 0; i < md->n_variants; i++)
        for (int w = 0; w < md->n_workloads; w++) {
            const cJSON *r = kl_guide_row(md, md->variants[i], md->workloads[w]);
            const double t = r ? kl_row_tflops(r) : NAN;
            if (!isfinite(label_x[w]) || !(t > 0)) continue;
            /* side by side along the workload's line, 2 px apart, so equal rates stay visible */
            const double x = label_x[w] + 2.0 * (i - (md->n_variants - 1) / 2.0), y = sy(fmin(fmax(t, 1e-3), 1e4));
            drawn[i] = true;
            if (kl_row_is_peer(r))
                fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"8\" height=\"8\" fill=\"%s\"/>\n", x - 4, y - 4,
                        KL_COLOR(i, md->n_variants));
            else
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4.5\" fill=\"%s\"/>\n", x, y, KL_COLOR(i, md->n_variants));
        }
    workload_labels(f, md, label_x, 364, -11);
    legend(f, md, drawn, "&#9679; ours  &#9632; peer");
}

int kl_rep_write_svg(const char *path, const struct kl_guide *md, double copy_gbs, double gemm_tflops)
{
    FILE *f = kl_guide_create(path);
    if (!f) return -1;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"820\" height=\"420\" font-family=\"sans-serif\" "
               "font-size=\"11\">\n<rect width=\"820\" height=\"420\" fill=\"white\"/>\n");
    if (kl_rep_has_flops(md))
        svg_roofline(f, md, copy_gbs, gemm_tflops);
    else
        svg_bars(f, md, copy_gbs);
    fprintf(f, "</svg>\n");
    return kl_guide_finish(f, path);
}

