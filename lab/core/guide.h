/* What a guide is written from, and the helpers every writer of one uses: the report room
 * (lab/report/) for the generic sections, a module's own guide hooks (lab/<module>/guide.c) for
 * the sections only it has. It sits below the modules, so a module's hook never includes the
 * report room: the room lends the hook its generic sections through struct kl_guide_room.
 *
 * Every number comes from a results row (lab/CONTRACTS.md section 7), every figure derived from
 * one from perf/figures.h, so the same rows give the same bytes in every guide. */
#ifndef KL_GUIDE_H
#define KL_GUIDE_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "lab/core/registry.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KL_MAX_DEVICES 8 /* GPUs (or CPUs) one module's results may come from */
#define KL_MAX_FILES 16  /* results files one module's rows may come from */

/* Markers of what describes a variant no results row measured (printf formats: module, variant).
 * HTML comments: invisible where the Markdown is rendered. lab/tests/report_compare.py leaves
 * these lines out when it compares guides. */
#define KL_UNMEASURED "<!-- not measured: %s %s -->"
#define KL_UNMEASURED_BEGIN "<!-- not measured: %s %s { -->"
#define KL_UNMEASURED_END "<!-- } not measured -->"

/* ---- results rows of one module ---- */

struct kl_guide_rows {
    int n;
    cJSON **r;
    int *file; /* which of the module's results files each row came from */
};

struct kl_guide {
    char name[64]; /* a copy: the row it came from may be dropped as a repeat */
    const struct kl_module *m; /* NULL: rows for a module this build does not have */
    struct kl_guide_rows rows;
    int n_variants, n_workloads;
    const char *variants[64], *workloads[64];
    /* Results from several GPUs: rows are told apart by device.name. Devices are sorted by name
     * and the first is the primary (its story, execution models and roofline are told in full);
     * `dev` is the device the sections read at a time (kl_guide_row sees only its rows). */
    int n_devices;
    const char *devices[KL_MAX_DEVICES], *dev;
    char labels[KL_MAX_DEVICES][64]; /* short names for table headers: "H100", "H200" */
    int n_files;
    char files[KL_MAX_FILES][256]; /* results files, relative to the results folder */
};

struct kl_targets; /* perf/bench.h */
struct kl_target;

/* What the report room lends a module's hook: where the guides go, the targets, and the generic
 * sections a guide of the module's own may place between its own. */
struct kl_guide_room {
    const char *out; /* the folder the guides are written into (img/ beside them) */
    const struct kl_targets *t90, *t80;
    void (*variants)(FILE *f, const struct kl_guide *g, const char *workload); /* "The variants" */
    void (*exercises)(FILE *f, const struct kl_guide *g);                     /* "Exercises" */
};

/* A module's own guide sections (struct kl_module's .guide; NULL: the generic guide alone). */
struct kl_guide_hooks {
    /* The module's whole guide, OUT/<module>.md, in place of the generic one: 0, or -1 after
     * saying on stderr what could not be written. */
    int (*write)(const struct kl_guide_room *room, struct kl_guide *g);
    /* README.md's figure cell for the gated variant on device g->dev (buf holds the generic one);
     * a module with its own figure shows no fraction of a roofline bound beside it. */
    void (*index_figure)(char *buf, size_t len, const struct kl_guide *g, const char *gated);
    /* The execution story of a compute-bound row, in place of the generic memory-bound one. */
    void (*compute_story)(FILE *f, const struct kl_guide *g, const cJSON *r, const char *workload,
                          const char *variant);
    /* After the hardware table: what the module's compute-bound rows say. */
    void (*compute_hardware)(FILE *f, const struct kl_guide *g, const char *main_workload);
};

/* The guides' prose, as text files: lab/<module>/guide/<section>.md ("semantics", "exercises",
 * "analysis", "learning"; lab/story/guide/ for the story's line, lab/report/guide/ for the notes
 * every guide shares), each the text less the file's last newline. lab/report/embed.cmake turns every such file into one of these at build time, placed
 * in the linker section "kl_guide_texts" as variants are, so the binary needs no source tree. */
struct kl_guide_text {
    const char *module, *section, *text;
};
/* The text of module's `section`; NULL when it has none. */
const char *kl_guide_text(const char *module, const char *section);

/* ---- formatting: "-" for a value that is not finite ---- */

const char *kl_fmt(char *buf, size_t len, const char *f, double v);
#define KL_F(f, v) kl_fmt((char[48]){0}, 48, f, v)
/* 12.34 GB, 5.67 MB, 8.9 KB, 12 B */
const char *kl_human_bytes(char *buf, size_t len, double b);
#define KL_HB(v) kl_human_bytes((char[32]){0}, 32, v)

/* ---- figures derived from a row (perf/figures.h: one formula each) ---- */

bool kl_row_is_peer(const cJSON *r);
const char *kl_row_device(const cJSON *r); /* device.name */
double kl_row_gbs(const cJSON *r);
double kl_row_tflops(const cJSON *r);
double kl_row_bw_frac(const cJSON *r);
double kl_row_dram_bytes(const cJSON *r);
double kl_row_dram_ratio(const cJSON *r);
double kl_row_dram_pct(const cJSON *r);
const char *kl_row_bound(const cJSON *r);
double kl_row_ridge(const cJSON *r);
bool kl_row_compute_bound(const cJSON *r);
double kl_row_frac_of_bound(const cJSON *r);
const char *kl_l2_hit_cell(char *buf, size_t len, const cJSON *r, const char *pct_sign);
#define KL_L2HIT(r, pct) kl_l2_hit_cell((char[48]){0}, 48, r, pct)
const char *kl_row_timed_as(const cJSON *r);
const char *kl_recheck_cell(char *buf, size_t len, const cJSON *r);
#define KL_RECHECK(r) kl_recheck_cell((char[160]){0}, 160, r)
const char *kl_row_throttled(const cJSON *r);
int kl_row_stalls(const cJSON *r, const char **names, double *pct, int max);
const char *kl_stall_meaning(const char *name);
double kl_row_metric(const cJSON *r, const char *metric);
bool kl_target_passes(const struct kl_target *x, double v);

/* A kernel record's launch: the grid as "64" or "64x2", threads per block, blocks in all. */
struct kl_shape {
    char grid[48];
    long long blocks;
    int threads;
};
struct kl_shape kl_launch_shape(const cJSON *k);

/* ---- rows of a guide ---- */

bool kl_guide_multi(const struct kl_guide *md);
bool kl_guide_on_dev(const struct kl_guide *md, const cJSON *r);
const cJSON *kl_guide_row(const struct kl_guide *md, const char *variant, const char *workload);
const cJSON *kl_guide_first_row(const struct kl_guide *md, const char *workload);
bool kl_guide_has_row(const struct kl_guide *md, const char *workload);
const char *kl_guide_best_variant(const struct kl_guide *md, const char *workload);
int kl_index_of(const char **list, int n, const char *s);

/* ---- writing ---- */

FILE *kl_guide_create(const char *path);
int kl_guide_finish(FILE *f, const char *path);
const char *kl_series_color(char *buf, size_t len, int i, int n);
#define KL_COLOR(i, n) kl_series_color((char[8]){0}, 8, i, n)
/* The guide's opening quote: the results files, devices, dates and commits. */
void kl_guide_stamp(FILE *f, const struct kl_guide *md);
void kl_guide_golden_cases(FILE *f, const struct kl_guide *md);
const char *kl_device_folder(const char *device, char *out, size_t len);

#ifdef __cplusplus
}
#endif
#endif
