/* One module's guide, OUT/<module>.md: the generic sections in order, with the module's own hooks
 * (struct kl_guide_hooks) where it has them; a module with a guide of its own writes it whole. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/core/json_path.h"
#include "lab/report/internal.h"
#include "perf/bench.h"
#include "perf/figures.h"

int kl_rep_write_guide(const char *out, struct kl_guide *md, const struct kl_targets *t90, const struct kl_targets *t80)
{
    const struct kl_guide_hooks *own = md->m ? md->m->guide : NULL;
    if (own && own->write) { /* a guide of the module's own (allreduce: multi-GPU rows) */
        const struct kl_guide_room room = {.out = out, .t90 = t90, .t80 = t80, .variants = kl_rep_section_variants,
                                           .exercises = kl_rep_section_exercises};
        return own->write(&room, md);
    }
    char path[1200], svg[1200];
    int status = 0;
    /* A cut path would write somewhere else: refused. */
    if (snprintf(svg, sizeof svg, "%s/img/%s-roofline.svg", out, md->name) >= (int)sizeof svg ||
        snprintf(path, sizeof path, "%s/%s.md", out, md->name) >= (int)sizeof path)
        return fprintf(stderr, "kernlab report: --out %s: path too long\n", out), -1;
    FILE *f = kl_guide_create(path);
    if (!f) return -1;
    const char *w = kl_rep_main_workload(md, t90), *best = w ? kl_rep_story_variant(md, w, t90) : NULL;
    fprintf(f, "# %s: %s\n\n", md->name, md->m ? md->m->summary : "");
    kl_guide_stamp(f, md);
    kl_rep_section_semantics(f, md);
    kl_rep_section_variants(f, md, w);
    kl_rep_section_story(f, md, w, best);
    kl_rep_section_hardware(f, md, w);
    if (own && own->compute_hardware) own->compute_hardware(f, md, w);
    const cJSON *any = NULL; /* the primary device's first row */
    for (int j = 0; j < md->rows.n && !any; j++)
        if (kl_guide_on_dev(md, md->rows.r[j])) any = md->rows.r[j];
    double copy = kl_json_num(any, "device.copy_gbs"), gemm = kl_json_num(any, "device.gemm_tflops");
    if (copy > 0 && gemm > 0 && !kl_rep_has_flops(md)) {
        status = kl_rep_write_svg(svg, md, copy, gemm);
        const cJSON *b = w && best ? kl_guide_row(md, best, w) : NULL;
        fprintf(f,
                "## Bandwidth\n\n![%s bandwidth](img/%s-roofline.svg)\n\nThe kernels of this module do no "
                "arithmetic (0 FLOPs in every workload's model), so they have no place on a roofline: the picture "
                "gives each variant's GB/s of the byte model per workload, against %s measured copy bandwidth (%s "
                "GB/s, the line across).",
                md->name, md->name, kl_guide_multi(md) ? "the primary device's" : "this run's", KL_F("%.0f", copy));
        if (kl_guide_multi(md)) fprintf(f, " The bars are %s's measurements (%s).", md->labels[0], md->devices[0]);
        if (b) fprintf(f, " `%s` on `%s` reaches %s of the copy bandwidth.", best, w, KL_F("%.2f", kl_row_bw_frac(b)));
        fprintf(f, " Solid bars are our variants, pale outlined bars the peers; each workload is labelled once below "
                   "its group.\n\n");
    } else if (copy > 0 && gemm > 0) {
        status = kl_rep_write_svg(svg, md, copy, gemm);
        const cJSON *b = w && best ? kl_guide_row(md, best, w) : NULL;
        fprintf(f,
                "## Roofline\n\n![%s roofline](img/%s-roofline.svg)\n\nThe roofs are %s measured copy "
                "bandwidth (%s GB/s) and cuBLAS bf16 GEMM rate (%s TFLOP/s); they meet at %s FLOP/byte.",
                md->name, md->name, kl_guide_multi(md) ? "the primary device's" : "this run's", KL_F("%.0f", copy), KL_F("%.0f", gemm),
                KL_F("%.0f", kl_fig_ridge(copy, gemm)));
        if (kl_guide_multi(md)) fprintf(f, " The points are %s's measurements (%s).", md->labels[0], md->devices[0]);
        if (b)
            fprintf(f,
                    " `%s` on `%s` does %s FLOP per byte it must move: %s-bound, so its bound is %s, and it "
                    "reaches %s of it.",
                    best, w, KL_F("%.3f", kl_json_num(b, "flops") / kl_json_num(b, "bytes")), kl_row_bound(b),
                    strcmp(kl_row_bound(b), "memory") == 0 ? "the copy bandwidth" : "the GEMM rate",
                    KL_F("%.2f", kl_row_frac_of_bound(b)));
        fprintf(f, " Each workload is a dashed line at its intensity (the models give every variant the same), "
                   "labelled once; circles on it are our variants, squares the peers, one colour per variant.\n\n");
    }
    kl_rep_section_targets(f, md, t90, t80);
    kl_rep_section_ladder(f, md);
    kl_rep_section_launch_timelines(f, md);
    const char *analysis = md->m ? kl_guide_text(md->name, "analysis") : NULL;
    if (analysis) fprintf(f, "## Analysis\n\n%s\n\n", analysis);
    kl_rep_section_extra_fields(f, md);
    kl_rep_section_correctness(f, md);
    kl_rep_section_exercises(f, md);
    kl_rep_section_reproduce(f, md);
    return kl_guide_finish(f, path) || status ? -1 : 0;
}

