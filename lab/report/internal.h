/* What the files of the report room (lab/report/) share; modules never include it (their hooks
 * see lab/core/guide.h alone).
 *   load.c      results rows into one struct kl_guide per module; the registry as the report sees it
 *   sections.c  the generic sections: semantics, variants, execution story, hardware analysis
 *   targets.c   targets and peers, the ladder step by step, module measurements, correctness, exercises, reproduce
 *   timelines.c the launch timelines of the rows that carry one (CTA quantiles per event)
 *   svg.c       the roofline / bandwidth picture
 *   guide.c     one module's guide, section by section, or its module's own (struct kl_guide_hooks)
 *   index.c     README.md (the way in) and environment.md
 *   story.c, story_trace.c, story_doc.c  the story's guide and trace (story_doc.h)
 *   report.c    the command
 *   built.c     whether the binary's copies of the guide texts and variant comments match the tree
 *   embed.cmake, tools/variant_notes.c  build time: the prose (lab/<module>/guide/<section>.md) and
 *               what the guides quote of each variant file, compiled into the binary */
#ifndef KL_REPORT_INTERNAL_H
#define KL_REPORT_INTERNAL_H

#include <stdbool.h>
#include <stdio.h>

#include "lab/core/guide.h"

struct kl_targets;

/* perf/targets/cpu.csv: the targets of modules whose work runs on the CPU (cc 0). */
extern struct kl_targets kl_rep_cpu_targets;

/* What the guide quotes of a variant's file (lab/report/tools/variant_notes.c writes them at build
 * time): the path under the source tree, the line of its first __global__ function (0: none, a
 * host-side variant), its opening comment without the comment markers. */
struct kl_variant_note {
    const char *file;
    int kernel_line;
    const char *comment;
};

/* built.c: each guide text or variant file whose copy in this binary differs from the source tree
 * (or that the binary lacks), a line each on err; 0 when none, or when no tree is there. */
int kl_rep_check_built(FILE *err);

/* load.c */
int kl_rep_load(const char *results, struct kl_guide *mods, int *nm);
void kl_rep_prepare(struct kl_guide *mods, int nm); /* sorted by name, repeats dropped, ordered */
const struct kl_targets *kl_rep_targets_of(const cJSON *r, const struct kl_targets *gpu);
const char *kl_rep_rel_path(const char *file);
/* A variant file's kernel line (0: none, or a file the build did not see), its opening comment. */
int kl_rep_read_source(const char *file, char *comment, size_t len);
int kl_rep_variant_count(const char *module);
const struct kl_variant *kl_rep_variant_at(const char *module, int i);
const char *kl_rep_main_workload(const struct kl_guide *md, const struct kl_targets *t90);
const char *kl_rep_story_variant(const struct kl_guide *md, const char *workload, const struct kl_targets *t90);

/* sections.c */
bool kl_rep_measured(const struct kl_guide *md, const char *variant);
void kl_rep_section_semantics(FILE *f, const struct kl_guide *md);
void kl_rep_section_variants(FILE *f, const struct kl_guide *md, const char *workload);
void kl_rep_section_story(FILE *f, const struct kl_guide *md, const char *workload, const char *variant);
void kl_rep_section_hardware(FILE *f, const struct kl_guide *md, const char *main_w);

/* targets.c */
void kl_rep_section_targets(FILE *f, const struct kl_guide *md, const struct kl_targets *t90,
                            const struct kl_targets *t80);
/* Each numbered variant against the previous one and the fastest peer, with its SM clock. */
void kl_rep_section_ladder(FILE *f, const struct kl_guide *md);
void kl_rep_section_extra_fields(FILE *f, const struct kl_guide *md);
void kl_rep_section_launch_timelines(FILE *f, const struct kl_guide *md); /* timelines.c */
void kl_rep_section_correctness(FILE *f, const struct kl_guide *md);
void kl_rep_section_exercises(FILE *f, const struct kl_guide *md);
void kl_rep_section_reproduce(FILE *f, const struct kl_guide *md);

/* svg.c */
bool kl_rep_has_flops(const struct kl_guide *md);
int kl_rep_write_svg(const char *path, const struct kl_guide *md, double copy_gbs, double gemm_tflops);

/* guide.c */
int kl_rep_write_guide(const char *out, struct kl_guide *md, const struct kl_targets *t90,
                       const struct kl_targets *t80);

/* index.c */
int kl_rep_write_index(const char *out, struct kl_guide *mods, int n, const struct kl_targets *t90, bool story);
int kl_rep_write_environment(const char *out, struct kl_guide *mods, int n);
/* The ceilings a results row measured on device: a row of the given commit first (the story's own
 * run), else the first module's; *module names the module it came from, *same_run which it was. */
const cJSON *kl_rep_device_ceilings(struct kl_guide *mods, int n, const char *device, const char *commit,
                                    const char **module, bool *same_run);

#endif
