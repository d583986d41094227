/* `kernlab report [--results DIR] [--out DIR]`: the guides (lab/CONTRACTS.md section 8).
 *
 * Reads every DIR/<module>.jsonl and DIR/<device>/<module>.jsonl (results lines, section 7) and
 * the registry (semantics, variants, their source files), and writes OUT/<module>.md,
 * OUT/README.md (the way in), OUT/environment.md and OUT/img/<module>-roofline.svg. Every number
 * comes from a results row, and every figure derived from one (GB/s, DRAM %, L2 hit rate, the
 * roof) from perf/figures.h; nothing depends on the clock or the machine the report runs on, so
 * the same inputs give byte-identical files.
 *
 * Inputs are read and checked before anything is written, and the files are written into a
 * folder beside OUT and renamed into place at the end: a failed run leaves OUT as it was.
 *
 * A registered variant that no results row measured is told as "not measured", and every line
 * about it carries the marker KL_UNMEASURED (or sits between KL_UNMEASURED_BEGIN and
 * KL_UNMEASURED_END): the tests that compare guides with committed ones leave those lines out, so
 * adding a variant never requires regenerating the guides. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lab/core/args.h"
#include "lab/core/files.h"
#include "lab/core/json_path.h"
#include "lab/allreduce/allreduce_module.h"
#include "lab/core/registry.h"
#include "lab/kernlab.h"
#include "lab/story/story.h"
#include "perf/bench.h"
#include "perf/figures.h"

#define KL_MAX_DEVICES 8 /* GPUs (or CPUs) one module's results may come from */
#define KL_MAX_FILES 16  /* results files one module's rows may come from */

/* Markers of what describes a variant no results row measured (printf formats: module, variant).
 * HTML comments: invisible where the Markdown is rendered. lab/tests/report_compare.py leaves
 * these lines out when it compares guides. */
#define KL_UNMEASURED "<!-- not measured: %s %s -->"
#define KL_UNMEASURED_BEGIN "<!-- not measured: %s %s { -->"
#define KL_UNMEASURED_END "<!-- } not measured -->"

/* ---- results rows ---- */

struct rows {
    int n;
    cJSON **r;
    int *file; /* which of the module's results files each row came from */
};

static const cJSON *get(const cJSON *o, const char *path) { return kl_json_get(o, path); }
static double num(const cJSON *o, const char *path) { return kl_json_num(o, path); }
static const char *str(const cJSON *o, const char *path, const char *def) { return kl_json_str(o, path, def); }

static bool is_peer(const cJSON *r) { return cJSON_IsTrue(get(r, "peer")); }

/* ---- formatting ---- */

static const char *fmt(char *buf, size_t len, const char *f, double v)
{
    if (!isfinite(v)) snprintf(buf, len, "-");
    else snprintf(buf, len, f, v);
    return buf;
}
#define F(f, v) fmt((char[32]){0}, 32, f, v)

static const char *human_bytes(char *buf, size_t len, double b)
{
    if (!isfinite(b)) return snprintf(buf, len, "-"), buf;
    if (b >= 1e9) snprintf(buf, len, "%.2f GB", b / 1e9);
    else if (b >= 1e6) snprintf(buf, len, "%.2f MB", b / 1e6);
    else if (b >= 1e3) snprintf(buf, len, "%.1f KB", b / 1e3);
    else snprintf(buf, len, "%.0f B", b);
    return buf;
}
#define HB(v) human_bytes((char[32]){0}, 32, v)

/* perf/targets/cpu.csv: the targets of modules whose work runs on the CPU (cc 0). */
static struct kl_targets kcpu_targets;

/* The targets file that judges a row: cpu.csv for a CPU row, else the one given. */
static const struct kl_targets *targets_of(const cJSON *r, const struct kl_targets *gpu)
{
    return r && num(r, "device.cc") == 0 ? &kcpu_targets : gpu;
}

/* ---- figures derived from a row (perf/figures.h: one formula each) ---- */

static double row_gbs(const cJSON *r)
{
    return kl_fig_gbs(num(r, "bytes"), num(r, "time_us.median"));
}
static double row_tflops(const cJSON *r)
{
    return kl_fig_tflops(num(r, "flops"), num(r, "time_us.median"));
}
/* Of the copy bandwidth the row's own run measured. */
static double row_bw_frac(const cJSON *r)
{
    return kl_fig_frac(row_gbs(r), num(r, "device.copy_gbs"));
}
static double row_dram_bytes(const cJSON *r)
{
    return num(r, "counters.dram_read_bytes") + num(r, "counters.dram_write_bytes");
}
/* DRAM bytes the counters saw over the model's bytes. */
static double row_dram_ratio(const cJSON *r)
{
    return kl_fig_frac(row_dram_bytes(r), num(r, "bytes"));
}
static double row_dram_pct(const cJSON *r)
{
    return kl_fig_dram_pct(num(r, "counters.dram_read_bytes"), num(r, "counters.dram_write_bytes"),
                           num(r, "time_us.median"), num(r, "device.copy_gbs"));
}
/* "memory" or "compute": the roof the byte and FLOP models put the workload under. */
static const char *row_bound(const cJSON *r)
{
    return kl_fig_model_bound(num(r, "flops"), num(r, "bytes"), num(r, "device.copy_gbs"),
                              num(r, "device.gemm_tflops"));
}
static double row_ridge(const cJSON *r)
{
    return kl_fig_ridge(num(r, "device.copy_gbs"), num(r, "device.gemm_tflops"));
}

/* The L2 hit rate as a cell: the rate, "n/a (X%)" where the counter read outside 0-100%, "-"
 * where there is no counter. */
static const char *l2_hit_cell(char *buf, size_t len, const cJSON *r, const char *pct_sign)
{
    const double c = num(r, "counters.l2_hit_rate_pct"), h = kl_fig_l2_hit_pct(c);
    if (isfinite(h))
        snprintf(buf, len, "%.0f%s", h, pct_sign);
    else if (isfinite(c))
        snprintf(buf, len, "n/a (counter %.0f%%)", c);
    else
        snprintf(buf, len, "-");
    return buf;
}
#define L2HIT(r, pct) l2_hit_cell((char[48]){0}, 48, r, pct)

/* How the row's median was timed: "graph" (CUDA-graph replays, back to back) or "events" (each
 * launch alone between two events); "not recorded" for rows from before the field. */
static const char *timed_as(const cJSON *r)
{
    const char *t = str(r, "timing", NULL);
    return !t ? "not recorded" : strcmp(t, "graph") == 0 ? "graph" : strcmp(t, "events") == 0 ? "events" : t;
}

/* The re-check the bench made of the timed launches' outputs, from the row's "recheck" object:
 * which replay, whole output or a sample (its reason is said under the table). Rows from before
 * the object (or with the older free-text note) say "not recorded". */
static const char *recheck_cell(char *buf, size_t len, const cJSON *r)
{
    const cJSON *c = get(r, "recheck");
    if (!cJSON_IsObject(c)) return snprintf(buf, len, "not recorded"), buf;
    const char *replay = str(c, "replay", "?"), *outputs = str(c, "outputs", "?");
    if (strcmp(outputs, "all") == 0)
        snprintf(buf, len, "%s replay, whole output", replay);
    else
        snprintf(buf, len, "%s replay, %s of %s sampled", replay, F("%.0f", num(c, "checked")),
                 F("%.0f", num(c, "of")));
    return buf;
}
#define RECHECK(r) recheck_cell((char[160]){0}, 160, r)

/* " (throttled)" for a row whose clocks dropped while it was timed. */
static const char *throttled_mark(const cJSON *r)
{
    return cJSON_IsTrue(get(r, "throttled")) ? " (throttled)" : "";
}

/* The source path relative to the repository, for links that work on GitHub and locally. */
static const char *rel_path(const char *file)
{
    size_t n = strlen(KL_SOURCE_DIR);
    return strncmp(file, KL_SOURCE_DIR, n) == 0 && file[n] == '/' ? file + n + 1 : file;
}

/* The line of the variant's first __global__ function (its kernel), and the file's opening
 * comment (what changed, work mapping, bound) with the comment markers removed. */
static int read_source(const char *file, char *comment, size_t len)
{
    char path[1200];
    snprintf(path, sizeof path, KL_SOURCE_DIR "/%s", rel_path(file));
    FILE *f = fopen(path, "r");
    comment[0] = 0;
    if (!f) return 0;
    char line[1024];
    int lineno = 0, kernel_line = 0;
    bool in_comment = false, first_done = false;
    size_t off = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (!first_done) {
            char *s = line;
            if (!in_comment && strncmp(s, "/*", 2) == 0) in_comment = true, s += 2;
            if (in_comment) {
                char *end = strstr(s, "*/");
                if (end) *end = 0, in_comment = false, first_done = true;
                while (*s == ' ') s++;
                if (*s == '*' && s[1] != '/') s++;
                if (*s == ' ') s++;
                off += (size_t)snprintf(comment + off, off < len ? len - off : 0, "%s", s);
                if (first_done && off < len && (off == 0 || comment[off - 1] != '\n'))
                    off += (size_t)snprintf(comment + off, len - off, "\n");
            } else {
                first_done = true;
            }
        }
        if (!kernel_line && strstr(line, "__global__")) kernel_line = lineno;
    }
    fclose(f);
    while (off > 0 && off <= len && (comment[off - 1] == '\n' || comment[off - 1] == ' ')) comment[--off] = 0;
    return kernel_line;
}

/* ---- the registry, as the report sees it ---- */

/* KL_REPORT_HIDE_VARIANTS=module/variant[,module/variant...]: the report runs as if those variants
 * were not registered. For the tests: it shows that a registered variant nobody measured changes
 * nothing in the guides but the lines marked KL_UNMEASURED (lab/tests/report.sh). */
static bool hidden_variant(const char *module, const char *variant)
{
    const char *list = getenv("KL_REPORT_HIDE_VARIANTS");
    const size_t lm = strlen(module), lv = strlen(variant);
    for (const char *p = list; p && *p; p += strcspn(p, ","), p += *p == ',') {
        const size_t n = strcspn(p, ",");
        if (n == lm + 1 + lv && strncmp(p, module, lm) == 0 && p[lm] == '/' && strncmp(p + lm + 1, variant, lv) == 0)
            return true;
    }
    return false;
}

/* The module's variants in ladder order (no mutants), less the hidden ones. */
static int variant_count(const char *module)
{
    int n = 0;
    for (int i = 0; i < kl_variant_count(module, false); i++)
        n += !hidden_variant(module, kl_variant_at(module, i, false)->name);
    return n;
}

static const struct kl_variant *variant_at(const char *module, int i)
{
    for (int k = 0; k < kl_variant_count(module, false); k++) {
        const struct kl_variant *v = kl_variant_at(module, k, false);
        if (!hidden_variant(module, v->name) && i-- == 0) return v;
    }
    return NULL;
}

/* ---- rows of one module ---- */

struct mod {
    char name[64]; /* a copy: the row it came from may be dropped as a repeat */
    const struct kl_module *m; /* NULL: rows for a module this build does not have */
    struct rows rows;
    int n_variants, n_workloads;
    const char *variants[64], *workloads[64];
    /* Results from several GPUs: rows are told apart by device.name. Devices are sorted by name
     * and the first is the primary (its story, execution models and roofline are told in full);
     * `dev` is the device the sections read at a time (find_row sees only its rows). */
    int n_devices;
    const char *devices[KL_MAX_DEVICES], *dev;
    char labels[KL_MAX_DEVICES][64]; /* short names for table headers: "H100", "H200" */
    int n_files;
    char files[KL_MAX_FILES][256]; /* results files, relative to the results folder */
};

static bool multi(const struct mod *md) { return md->n_devices > 1; }

static const char *dev_name(const cJSON *r) { return str(r, "device.name", "?"); }

static bool on_dev(const struct mod *md, const cJSON *r) { return !md->dev || strcmp(dev_name(r), md->dev) == 0; }

/* Devices sorted by name, each with a short label: the name without "NVIDIA ", cut at its first
 * space unless that would make two labels equal. */
static void find_devices(struct mod *md)
{
    for (int j = 0; j < md->rows.n; j++) {
        const char *d = dev_name(md->rows.r[j]);
        int k = 0;
        while (k < md->n_devices && strcmp(md->devices[k], d) != 0) k++;
        if (k == md->n_devices && k < KL_MAX_DEVICES) md->devices[md->n_devices++] = d;
    }
    for (int i = 1; i < md->n_devices; i++) /* insertion sort: a handful of names */
        for (int j = i; j > 0 && strcmp(md->devices[j], md->devices[j - 1]) < 0; j--) {
            const char *t = md->devices[j];
            md->devices[j] = md->devices[j - 1], md->devices[j - 1] = t;
        }
    bool clash = false;
    for (int pass = 0; pass < 2; pass++) {
        for (int d = 0; d < md->n_devices; d++) {
            const char *n = md->devices[d];
            if (strncmp(n, "NVIDIA ", 7) == 0) n += 7;
            snprintf(md->labels[d], sizeof md->labels[d], "%.*s", clash ? 63 : (int)strcspn(n, " "), n);
        }
        for (int a = 0; a < md->n_devices; a++)
            for (int b = a + 1; b < md->n_devices; b++) clash |= strcmp(md->labels[a], md->labels[b]) == 0;
        if (!clash) break;
    }
    md->dev = md->n_devices ? md->devices[0] : NULL;
}

static int index_of(const char **list, int n, const char *s)
{
    for (int i = 0; i < n; i++)
        if (strcmp(list[i], s) == 0) return i;
    return -1;
}

/* Variants in registry order (the ladder), peers after them; workloads in the module's order. */
static void order(struct mod *md)
{
    if (md->m)
        for (int i = 0; i < variant_count(md->name); i++) {
            const char *v = variant_at(md->name, i)->name;
            for (int j = 0; j < md->rows.n; j++)
                if (strcmp(str(md->rows.r[j], "variant", ""), v) == 0 && index_of(md->variants, md->n_variants, v) < 0)
                    md->variants[md->n_variants++] = v;
        }
    for (int pass = 0; pass < 2; pass++)
        for (int j = 0; j < md->rows.n && md->n_variants < 64; j++) {
            const char *v = str(md->rows.r[j], "variant", "");
            if (is_peer(md->rows.r[j]) == (pass == 1) && index_of(md->variants, md->n_variants, v) < 0)
                md->variants[md->n_variants++] = v;
        }
    if (md->m && md->m->perf)
        for (int i = 0; i < md->m->perf->n_workloads; i++) md->workloads[md->n_workloads++] = md->m->perf->workloads[i].name;
    for (int j = 0; j < md->rows.n && md->n_workloads < 64; j++) {
        const char *w = str(md->rows.r[j], "workload", "");
        if (index_of(md->workloads, md->n_workloads, w) < 0) md->workloads[md->n_workloads++] = w;
    }
}

/* A results file is read whole into cJSON rows; past this size it is not one of ours. */
#define KL_RESULTS_MAX_BYTES (1ll << 30)

/* Reads one results file (rel: its path under the results folder), adding each row to the entry
 * of its own module, created on first sight: a module's rows may come from several files, one
 * per device (reports/data/<device>/<module>.jsonl) or all in one. A file that is not a regular
 * file, holds a line that is not a results row, or names a module this build does not register
 * (the name becomes a file name under --out, so it must be one of ours, never a path) is skipped
 * whole, and stderr says which and why: -1 for those, 0 otherwise (an empty file too). */
static int load_rows(const char *results, const char *rel, struct mod *mods, int *nm)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", results, rel);
    struct kl_err err = {{0}};
    FILE *f = kl_open_regular(path, KL_RESULTS_MAX_BYTES, NULL, &err);
    if (!f) return fprintf(stderr, "kernlab report: skipped %s\n", err.msg), -1;
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0, rc = 0, n = 0;
    cJSON **got = NULL;
    while (!rc && getline(&line, &cap, f) > 0) {
        lineno++;
        if (line[0] == '\n') continue;
        cJSON *r = cJSON_Parse(line);
        const char *why = NULL;
        if (!r || !cJSON_IsString(get(r, "module")) || !cJSON_IsString(get(r, "variant")) ||
            !cJSON_IsString(get(r, "workload")))
            why = "not a results line (module, variant, workload)";
        else if (!kl_module_find(str(r, "module", "")))
            why = "\"module\" is not a module of this build (kernlab list shows them)";
        if (why) {
            fprintf(stderr, "kernlab report: %s:%d: %s; skipped the file\n", path, lineno, why);
            cJSON_Delete(r);
            rc = -1;
            break;
        }
        got = realloc(got, sizeof *got * (size_t)(n + 1));
        KL_CHECK(got, "out of memory");
        got[n++] = r;
    }
    if (!rc && ferror(f)) rc = -1, fprintf(stderr, "kernlab report: skipped %s: read error\n", path);
    free(line);
    fclose(f);
    if (!rc && n == 0) fprintf(stderr, "kernlab report: skipped %s: empty (no results lines)\n", path);
    for (int j = 0; j < n; j++) {
        cJSON *r = got[j];
        if (rc) { /* the whole file is skipped */
            cJSON_Delete(r);
            continue;
        }
        const char *module = str(r, "module", "?");
        int k = 0;
        while (k < *nm && strcmp(mods[k].name, module) != 0) k++;
        struct mod *md = &mods[k]; /* every module is registered, so there are at most kl_module_count() */
        if (k == *nm) snprintf(md->name, sizeof md->name, "%s", module), ++*nm;
        int fi = 0;
        while (fi < md->n_files && strcmp(md->files[fi], rel) != 0) fi++;
        if (fi == md->n_files && fi < KL_MAX_FILES) snprintf(md->files[md->n_files++], sizeof md->files[0], "%s", rel);
        md->rows.r = realloc(md->rows.r, sizeof *md->rows.r * (size_t)(md->rows.n + 1));
        md->rows.file = realloc(md->rows.file, sizeof *md->rows.file * (size_t)(md->rows.n + 1));
        KL_CHECK(md->rows.r && md->rows.file, "out of memory");
        md->rows.file[md->rows.n] = fi < KL_MAX_FILES ? fi : KL_MAX_FILES - 1;
        md->rows.r[md->rows.n++] = r;
    }
    free(got);
    return rc;
}

static int by_name(const struct dirent **a, const struct dirent **b) { return strcmp((*a)->d_name, (*b)->d_name); }

static bool is_jsonl(const char *d)
{
    size_t len = strlen(d);
    return len > 6 && strcmp(d + len - 6, ".jsonl") == 0;
}

/* Every DIR/<x>.jsonl and DIR/<sub>/<x>.jsonl, in name order (so the output never depends on the
 * order the file system lists them in). */
static int load_results(const char *results, struct mod *mods, int *nm)
{
    struct dirent **names;
    int n = scandir(results, &names, NULL, by_name), status = 0;
    if (n < 0) return fprintf(stderr, "kernlab report: %s: %s\n", results, strerror(errno)), -1;
    for (int i = 0; i < n; i++) {
        const char *d = names[i]->d_name;
        char sub[1200];
        struct stat st;
        snprintf(sub, sizeof sub, "%s/%s", results, d);
        if (d[0] == '.') continue;
        if (is_jsonl(d)) {
            if (load_rows(results, d, mods, nm)) status = -1;
        } else if (stat(sub, &st) == 0 && S_ISDIR(st.st_mode)) {
            struct dirent **inner;
            int m = scandir(sub, &inner, NULL, by_name);
            for (int k = 0; k < m; k++) {
                char rel[600];
                snprintf(rel, sizeof rel, "%s/%s", d, inner[k]->d_name);
                if (is_jsonl(inner[k]->d_name) && load_rows(results, rel, mods, nm)) status = -1;
                free(inner[k]);
            }
            if (m > 0) free(inner);
        }
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    return status;
}

/* One row per (variant, workload, device): where two files both hold it (a device's folder and an
 * old flat file, or a run appended twice), a device folder's row wins over a flat file's, else the
 * first loaded; the loser is dropped with a note, so a fresh run never hides behind a stale one. */
static void drop_repeats(struct mod *md)
{
    int kept = 0;
    for (int j = 0; j < md->rows.n; j++) {
        const cJSON *r = md->rows.r[j];
        int k = 0;
        while (k < kept && !(strcmp(str(md->rows.r[k], "variant", ""), str(r, "variant", "")) == 0 &&
                             strcmp(str(md->rows.r[k], "workload", ""), str(r, "workload", "")) == 0 &&
                             strcmp(dev_name(md->rows.r[k]), dev_name(r)) == 0))
            k++;
        if (k == kept) {
            md->rows.r[kept] = md->rows.r[j], md->rows.file[kept++] = md->rows.file[j];
            continue;
        }
        const bool newer = strchr(md->files[md->rows.file[j]], '/') && !strchr(md->files[md->rows.file[k]], '/');
        fprintf(stderr, "kernlab report: %s %s %s on %s is in reports/data/%s and reports/data/%s: using the latter's\n",
                md->name, str(r, "variant", ""), str(r, "workload", ""), dev_name(r),
                md->files[md->rows.file[newer ? k : j]], md->files[md->rows.file[newer ? j : k]]);
        if (newer) {
            cJSON_Delete(md->rows.r[k]);
            md->rows.r[k] = md->rows.r[j], md->rows.file[k] = md->rows.file[j];
        } else {
            cJSON_Delete(md->rows.r[j]);
        }
    }
    md->rows.n = kept;
}

static int mod_by_name(const void *a, const void *b)
{
    return strcmp(((const struct mod *)a)->name, ((const struct mod *)b)->name);
}

/* The row of (variant, workload) on the current device; the first one when a file repeats it. */
static const cJSON *find_row(const struct mod *md, const char *variant, const char *workload)
{
    for (int j = 0; j < md->rows.n; j++)
        if (strcmp(str(md->rows.r[j], "variant", ""), variant) == 0 &&
            strcmp(str(md->rows.r[j], "workload", ""), workload) == 0 && on_dev(md, md->rows.r[j]))
            return md->rows.r[j];
    return NULL;
}

/* The first variant's row of a workload on the current device (the shape and the byte model are
 * the same in every row of a workload). */
static const cJSON *first_row(const struct mod *md, const char *workload)
{
    const cJSON *r = NULL;
    for (int i = 0; i < md->n_variants && !r; i++) r = find_row(md, md->variants[i], workload);
    return r;
}

static bool has_row(const struct mod *md, const char *workload)
{
    for (int i = 0; i < md->n_variants; i++)
        if (find_row(md, md->variants[i], workload)) return true;
    return false;
}

/* The workload the story and the headline figures use: the first with a fraction target,
 * else the one moving the most bytes. */
static const char *main_workload(const struct mod *md, const struct kl_targets *t90)
{
    const char *best = NULL;
    double most = -1;
    for (int i = 0; i < md->n_workloads; i++) {
        const struct kl_target *t = kl_target_find(t90, md->name, md->workloads[i]);
        if (t && (strcmp(t->metric, "bw_frac") == 0 || strcmp(t->metric, "tc_frac") == 0 || strcmp(t->metric, "read_frac") == 0) &&
            has_row(md, md->workloads[i]))
            return md->workloads[i];
    }
    for (int j = 0; j < md->rows.n; j++)
        if (on_dev(md, md->rows.r[j]) && cJSON_IsString(get(md->rows.r[j], "gate.metric")))
            return str(md->rows.r[j], "workload", NULL);
    for (int j = 0; j < md->rows.n; j++)
        if (on_dev(md, md->rows.r[j]) && num(md->rows.r[j], "bytes") > most)
            most = num(md->rows.r[j], "bytes"), best = str(md->rows.r[j], "workload", NULL);
    return best;
}

/* The fraction a row is judged by: of its roofline bound on a GPU; for a CPU module (cc 0),
 * its own gated metric (radix: memcmp_frac, the share of memcmp's rate over the same bytes). */
static double frac_of_bound(const cJSON *r)
{
    if (num(r, "device.cc") == 0) {
        const char *metric = str(r, "gate.metric", NULL);
        return metric ? num(r, metric) : NAN;
    }
    return strcmp(row_bound(r), "compute") == 0 ? kl_fig_frac(row_tflops(r), num(r, "device.gemm_tflops"))
                                                : row_bw_frac(r);
}

/* Our best variant on a workload: the highest fraction of its bound. */
static const char *best_variant(const struct mod *md, const char *workload)
{
    const char *best = NULL;
    double top = -1;
    for (int i = 0; i < md->n_variants; i++) {
        const cJSON *r = find_row(md, md->variants[i], workload);
        double f = r && !is_peer(r) ? frac_of_bound(r) : NAN;
        if (isfinite(f) && f > top) top = f, best = md->variants[i];
    }
    if (!best)
        for (int i = 0; i < md->n_variants && !best; i++)
            if (find_row(md, md->variants[i], workload) && !is_peer(find_row(md, md->variants[i], workload)))
                best = md->variants[i];
    return best;
}

/* The variant a guide's story and headline figures follow on a workload: the gated one (the
 * targets file names it) where it was measured there, else our best measured. */
static const char *story_variant(const struct mod *md, const char *workload, const struct kl_targets *t90)
{
    const cJSON *any = first_row(md, workload);
    const char *gated = kl_targets_gated(targets_of(any, t90), md->name);
    return gated && find_row(md, gated, workload) ? gated : best_variant(md, workload);
}

/* ---- interpretation ---- */

static const struct {
    const char *name, *meaning;
} kstalls[] = {
    {"long_scoreboard", "waiting for a global-memory load (L2/HBM): the memory-bound signature"},
    {"short_scoreboard", "waiting for shared memory or a special-function result (rsqrt, exp)"},
    {"barrier", "waiting at __syncthreads for the rest of the block (a reduction step)"},
    {"wait", "a fixed-latency dependency between two instructions"},
    {"not_selected", "ready, but another warp issued: there is spare parallelism"},
    {"selected", "issuing"},
    {"math_pipe_throttle", "a math pipe is saturated: compute pressure"},
    {"lg_throttle", "the load/store queue is full: too many memory instructions per SM"},
    {"mio_throttle", "the shared-memory / special-function queue is full"},
    {"drain", "waiting for stores to drain before the warp exits"},
    {"dispatch_stall", "the dispatcher could not issue (pipeline conflict)"},
    {"no_instruction", "instruction-cache miss or a jump target not fetched yet"},
    {"membar", "waiting at a memory fence"},
    {"branch_resolving", "waiting for a branch target to resolve"},
    {"imc_miss", "constant-cache miss"},
    {"tex_throttle", "texture/L1 queue full"},
    {"sleeping", "the warp is sleeping (nanosleep or a yield)"},
    {"misc", "other reasons"},
    {"gmma", "waiting for warpgroup MMA (wgmma) to complete"},
};

static const char *stall_meaning(const char *name)
{
    for (size_t i = 0; i < sizeof kstalls / sizeof kstalls[0]; i++)
        if (strcmp(kstalls[i].name, name) == 0) return kstalls[i].meaning;
    return "";
}

/* Stalls as "name pct" pairs, largest first (the counters object keeps them as an object). */
static int stalls_of(const cJSON *r, const char **names, double *pct, int max)
{
    const cJSON *s = get(r, "counters.stalls");
    int n = 0;
    for (const cJSON *e = s ? s->child : NULL; e && n < max; e = e->next)
        if (cJSON_IsNumber(e)) names[n] = e->string, pct[n++] = e->valuedouble;
    for (int i = 1; i < n; i++) /* insertion sort: a handful of entries */
        for (int j = i; j > 0 && pct[j] > pct[j - 1]; j--) {
            double tp = pct[j];
            const char *tn = names[j];
            pct[j] = pct[j - 1], names[j] = names[j - 1];
            pct[j - 1] = tp, names[j - 1] = tn;
        }
    return n;
}

/* ---- the roofline picture ---- */

/* Colour i of a chart's n series. Up to 20, Kelly's colours of maximum contrast (darkest first, the
 * pale ones last, white and black left out); past 20, hues evenly around the wheel, alternate series
 * darker: n distinct colours either way. */
static const char *series_color(char *buf, size_t len, int i, int n)
{
    static const char *kkelly[] = {"#0067a5", "#f38400", "#008856", "#be0032", "#875692", "#882d17", "#e68fac",
                                   "#848482", "#8db600", "#2b3d26", "#604e97", "#f6a600", "#b3446c", "#654522",
                                   "#e25822", "#a1caf1", "#c2b280", "#f99379", "#dcd300", "#f3c300"};
    if (n <= (int)(sizeof kkelly / sizeof *kkelly)) return snprintf(buf, len, "%s", kkelly[i]), buf;
    const double h = fmod(360.0 * i / n + 210, 360), sat = 0.70, light = i % 2 ? 0.36 : 0.52;
    const double c = (1 - fabs(2 * light - 1)) * sat, x = c * (1 - fabs(fmod(h / 60, 2) - 1)), m = light - c / 2;
    double rgb[3] = {0, 0, 0};
    const int sector = (int)(h / 60) % 6;
    static const int kslot[6][3] = {{0, 1, 2}, {1, 0, 2}, {2, 0, 1}, {2, 1, 0}, {1, 2, 0}, {0, 2, 1}}; /* c, x, 0 */
    const double val[3] = {c, x, 0};
    for (int k = 0; k < 3; k++)
        rgb[k] = val[kslot[sector][k]];
    snprintf(buf, len, "#%02x%02x%02x", (int)lround((rgb[0] + m) * 255), (int)lround((rgb[1] + m) * 255),
             (int)lround((rgb[2] + m) * 255));
    return buf;
}
#define COLOR(i, n) series_color((char[8]){0}, 8, i, n)

static double sx(double intensity) { return 70 + (log10(intensity) + 2) / 6.0 * 520; } /* 1e-2 .. 1e4 FLOP/B */
static double sy(double tflops) { return 370 - (log10(tflops) + 3) / 7.0 * 340; }    /* 1e-3 .. 1e4 TFLOP/s */

/* Opens an output, saying which and why when it cannot. */
static FILE *create(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) fprintf(stderr, "kernlab report: cannot write %s: %s\n", path, strerror(errno));
    return f;
}

/* Closes an output; a failed write (a full disk) is an error naming the file. */
static int finish(FILE *f, const char *path)
{
    const bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad) return fprintf(stderr, "kernlab report: writing %s failed: %s\n", path, strerror(errno)), -1;
    return 0;
}

/* Whether any row of the primary device does floating-point work: a module whose kernels only
 * move bytes (index, store) has no place on a roofline's FLOP axis and is drawn as bandwidth bars. */
static bool has_flops(const struct mod *md)
{
    for (int j = 0; j < md->rows.n; j++)
        if (on_dev(md, md->rows.r[j]) && num(md->rows.r[j], "flops") > 0) return true;
    return false;
}

/* Workload labels, one each, in as many rows as it takes for no two to overlap (9-px text is about
 * 5.5 px per character), the rows stepping by `step` px from y0 (negative: upwards). x[w] is the
 * label's centre, NAN to skip. */
static void workload_labels(FILE *f, const struct mod *md, const double *x, double y0, double step)
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
static void legend(FILE *f, const struct mod *md, const bool *drawn, const char *key)
{
    int line = 0;
    for (int i = 0; i < md->n_variants; i++) {
        if (!drawn[i]) continue;
        const cJSON *r = NULL;
        for (int w = 0; w < md->n_workloads && !r; w++)
            r = find_row(md, md->variants[i], md->workloads[w]);
        fprintf(f, "<text x=\"622\" y=\"%d\" fill=\"%s\">%s %s</text>\n", 44 + 14 * line++, COLOR(i, md->n_variants),
                r && is_peer(r) ? "&#9632;" : "&#9679;", md->variants[i]);
    }
    fprintf(f, "<text x=\"622\" y=\"%d\" fill=\"#555\">%s</text>\n", 50 + 14 * line, key);
}

/* Bandwidth bars for a module without FLOPs: per workload a group of bars, one per variant, the
 * height its GB/s; the measured copy bandwidth as a line across. */
static void svg_bars(FILE *f, const struct mod *md, double copy_gbs)
{
    double top = copy_gbs;
    for (int j = 0; j < md->rows.n; j++)
        if (on_dev(md, md->rows.r[j]) && row_gbs(md->rows.r[j]) > top) top = row_gbs(md->rows.r[j]);
    top = ceil(top / 500) * 500;
    const double x0 = 70, W = 520, y0 = 360, H = 320;
    fprintf(f,
            "<text x=\"70\" y=\"18\" font-size=\"13\">%s bandwidth%s%s: GB/s of the byte model per variant; no FLOPs, "
            "so no roofline</text>\n",
            md->name, multi(md) ? " on " : "", multi(md) ? md->labels[0] : "");
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
        nw += has_row(md, md->workloads[w]);
    double label_x[64];
    bool drawn[64] = {false};
    const double group = nw ? W / nw : W, bar = fmax(1.0, (group - 8) / (md->n_variants ? md->n_variants : 1));
    int slot = 0;
    for (int w = 0; w < md->n_workloads; w++) {
        label_x[w] = NAN;
        if (!has_row(md, md->workloads[w])) continue;
        const double gx = x0 + group * slot++ + 4;
        label_x[w] = gx + (group - 8) / 2;
        for (int i = 0; i < md->n_variants; i++) {
            const cJSON *r = find_row(md, md->variants[i], md->workloads[w]);
            const double g = r ? row_gbs(r) : NAN;
            if (!isfinite(g)) continue;
            drawn[i] = true;
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"%s/>\n", gx + bar * i,
                    y0 - H * g / top, bar, H * g / top, COLOR(i, md->n_variants),
                    is_peer(r) ? " fill-opacity=\"0.55\" stroke=\"black\" stroke-width=\"0.5\"" : "");
        }
    }
    workload_labels(f, md, label_x, y0 + 14, 11);
    legend(f, md, drawn, "solid: ours, pale: peer");
}

/* The roofline: the copy-bandwidth and GEMM-rate roofs; each workload's intensity (the same for
 * every variant: it comes from the models) as a dashed line labelled once; the variants as points
 * on it, our circles and the peers' squares, one colour per variant. */
static void svg_roofline(FILE *f, const struct mod *md, double copy_gbs, double gemm_tflops)
{
    fprintf(f, "<text x=\"70\" y=\"18\" font-size=\"13\">%s roofline%s%s: measured copy %.0f GB/s, bf16 GEMM %.0f "
               "TFLOP/s</text>\n", md->name, multi(md) ? " on " : "", multi(md) ? md->labels[0] : "", copy_gbs, gemm_tflops);
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
        const cJSON *r = first_row(md, md->workloads[w]);
        const double b = r ? num(r, "bytes") : NAN, fl = r ? num(r, "flops") : NAN;
        label_x[w] = b > 0 && fl > 0 ? sx(fmin(fmax(fl / b, 1e-2), 1e4)) : NAN;
        if (isfinite(label_x[w]))
            fprintf(f,
                    "<line x1=\"%.1f\" y1=\"30\" x2=\"%.1f\" y2=\"370\" stroke=\"#bbb\" stroke-dasharray=\"3,3\"/>\n",
                    label_x[w], label_x[w]);
    }
    for (int i = 0; i < md->n_variants; i++)
        for (int w = 0; w < md->n_workloads; w++) {
            const cJSON *r = find_row(md, md->variants[i], md->workloads[w]);
            const double t = r ? row_tflops(r) : NAN;
            if (!isfinite(label_x[w]) || !(t > 0)) continue;
            /* side by side along the workload's line, 2 px apart, so equal rates stay visible */
            const double x = label_x[w] + 2.0 * (i - (md->n_variants - 1) / 2.0), y = sy(fmin(fmax(t, 1e-3), 1e4));
            drawn[i] = true;
            if (is_peer(r))
                fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"8\" height=\"8\" fill=\"%s\"/>\n", x - 4, y - 4,
                        COLOR(i, md->n_variants));
            else
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4.5\" fill=\"%s\"/>\n", x, y, COLOR(i, md->n_variants));
        }
    workload_labels(f, md, label_x, 364, -11);
    legend(f, md, drawn, "&#9679; ours  &#9632; peer");
}

static int write_svg(const char *path, const struct mod *md, double copy_gbs, double gemm_tflops)
{
    FILE *f = create(path);
    if (!f) return -1;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"820\" height=\"420\" font-family=\"sans-serif\" "
               "font-size=\"11\">\n<rect width=\"820\" height=\"420\" fill=\"white\"/>\n");
    if (has_flops(md))
        svg_roofline(f, md, copy_gbs, gemm_tflops);
    else
        svg_bars(f, md, copy_gbs);
    fprintf(f, "</svg>\n");
    return finish(f, path);
}

/* ---- one guide ---- */

static void stamp(FILE *f, const struct mod *md)
{
    /* Every distinct (device, date, commit) of the rows, in first-seen order. */
    char seen[8][200];
    int n = 0;
    for (int j = 0; j < md->rows.n && n < 8; j++) {
        char s[200];
        double cc = num(md->rows.r[j], "device.cc");
        char arch[16] = "CPU";
        if (cc > 0) snprintf(arch, sizeof arch, "sm_%.0f", cc);
        snprintf(s, sizeof s, "%s (%s) on %s at commit %s", str(md->rows.r[j], "device.name", "?"), arch,
                 str(md->rows.r[j], "date", "?"), str(md->rows.r[j], "commit", "?"));
        int k = 0;
        while (k < n && strcmp(seen[k], s) != 0) k++;
        if (k == n) snprintf(seen[n++], sizeof seen[0], "%s", s);
    }
    fprintf(f, "> Generated by `kernlab report` from ");
    for (int k = 0; k < md->n_files; k++)
        fprintf(f, "%s`reports/data/%s`", k == 0 ? "" : k + 1 == md->n_files ? " and " : ", ", md->files[k]);
    fprintf(f, " (%d results", md->rows.n);
    if (multi(md)) /* how many rows each device contributed */
        for (int d = 0; d < md->n_devices; d++) {
            int rows = 0;
            for (int j = 0; j < md->rows.n; j++) rows += strcmp(dev_name(md->rows.r[j]), md->devices[d]) == 0;
            fprintf(f, "%s%d on %s", d ? ", " : ": ", rows, md->devices[d]);
        }
    fprintf(f, "). Measured on ");
    for (int k = 0; k < n; k++) fprintf(f, "%s%s", k ? "; " : "", seen[k]);
    fprintf(f, ". Do not edit by hand: rerun the commands under *Reproduce*.\n\n");
    if (multi(md)) {
        fprintf(f, "> Results from %d devices, named in every table by their short names (", md->n_devices);
        for (int d = 0; d < md->n_devices; d++)
            fprintf(f, "%s%s = %s", d ? ", " : "", md->labels[d], md->devices[d]);
        fprintf(f, "). The execution models, the execution story, the counter notes and the roofline are told on "
                   "%s, with the other%s key figures beside them; each device's figures are fractions of its own "
                   "measured ceilings.\n\n", md->labels[0], md->n_devices > 2 ? "s'" : "'s");
    }
}

static void section_semantics(FILE *f, const struct mod *md)
{
    fprintf(f, "## What it computes\n\n%s\n\n", md->m && md->m->semantics ? md->m->semantics : "(module not in this build)");
    fprintf(f, "| workload | shape | bytes a correct kernel must move | FLOPs | FLOP/byte | at the copy bandwidth |\n"
               "|---|---|---|---|---|---|\n");
    for (int w = 0; w < md->n_workloads; w++) {
        const cJSON *r = first_row(md, md->workloads[w]);
        if (!r) continue;
        char shape[256] = "";
        size_t off = 0;
        const cJSON *p = get(r, "params");
        for (const cJSON *e = p ? p->child : NULL; e && off < sizeof shape; e = e->next) {
            if (cJSON_IsNumber(e)) off += (size_t)snprintf(shape + off, sizeof shape - off, "%s%s=%g", off ? ", " : "", e->string, e->valuedouble);
            else if (cJSON_IsString(e)) off += (size_t)snprintf(shape + off, sizeof shape - off, "%s%s", off ? ", " : "", e->valuestring);
            else if (cJSON_IsTrue(e)) off += (size_t)snprintf(shape + off, sizeof shape - off, "%s%s", off ? ", " : "", e->string);
        }
        double b = num(r, "bytes"), fl = num(r, "flops"), copy = num(r, "device.copy_gbs");
        fprintf(f, "| %s | %s | %s | %s | %s | ", md->workloads[w], shape, HB(b), F("%.3g", fl),
                F("%.3f", b > 0 ? fl / b : NAN));
        if (!multi(md)) fprintf(f, "%s us |\n", F("%.2f", b / (copy * 1e3)));
        else /* each device at its own copy bandwidth */
            for (int d = 0; d < md->n_devices; d++) {
                struct mod on = *md;
                on.dev = md->devices[d];
                const cJSON *rd = first_row(&on, md->workloads[w]);
                fprintf(f, "%s%s us (%s)%s", d ? ", " : "", F("%.2f", rd ? b / (num(rd, "device.copy_gbs") * 1e3) : NAN),
                        md->labels[d], d + 1 == md->n_devices ? " |\n" : "");
            }
    }
    fprintf(f, "\n");
}

/* A kernel record's launch: the grid as "64" or "64x2" (2-D grids: a block per token and part of
 * its row), the threads per block, and the blocks in all. */
struct shape {
    char grid[48];
    long long blocks;
    int threads;
};
static struct shape launch_shape(const cJSON *k)
{
    const cJSON *g = get(k, "grid"), *b = get(k, "block");
    int gd[3], bd[3];
    for (int i = 0; i < 3; i++) {
        gd[i] = cJSON_GetArrayItem(g, i) ? cJSON_GetArrayItem(g, i)->valueint : i ? 1 : 0;
        bd[i] = cJSON_GetArrayItem(b, i) ? cJSON_GetArrayItem(b, i)->valueint : i ? 1 : 0;
    }
    struct shape s = {"", (long long)gd[0] * gd[1] * gd[2], bd[0] * bd[1] * bd[2]};
    if (gd[2] > 1) snprintf(s.grid, sizeof s.grid, "%dx%dx%d", gd[0], gd[1], gd[2]);
    else if (gd[1] > 1) snprintf(s.grid, sizeof s.grid, "%dx%d", gd[0], gd[1]);
    else snprintf(s.grid, sizeof s.grid, "%d", gd[0]);
    return s;
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

static bool compute_bound(const cJSON *r);

/* Predicted against measured: the header's prediction, then what each device measured on the workload
 * the prediction names (the longest workload name found in it), else on the guide's workload. */
static void predicted_vs_measured(FILE *f, const struct mod *md, const struct kl_variant *v, const char *comment,
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
        struct mod on = *md;
        on.dev = md->devices[d];
        const cJSON *r = find_row(&on, v->name, workload);
        fprintf(f, "%s%s ", d ? "; " : "", md->labels[d]);
        if (!r) {
            fprintf(f, "not measured yet");
            continue;
        }
        fprintf(f, "%s us", F("%.2f", num(r, "time_us.median")));
        if (compute_bound(r)) fprintf(f, ", %s TFLOP/s", F("%.0f", row_tflops(r)));
        const char *metric = str(r, "gate.metric", NULL);
        if (metric) fprintf(f, ", %s %s (target %s)", metric, F("%.3f", num(r, metric)), F("%.2f", num(r, "gate.target")));
    }
    fprintf(f, ".\n\n");
}

/* Whether any device measured the variant (a peer's rows count as its own "variant"). */
static bool measured(const struct mod *md, const char *variant)
{
    for (int j = 0; j < md->rows.n; j++)
        if (strcmp(str(md->rows.r[j], "variant", ""), variant) == 0) return true;
    return false;
}

/* A link to a variant's file at its kernel's line, or to the file alone when it has no
 * __global__ function (a host-side variant: NCCL's, the CPU's). */
static const char *source_link(char *buf, size_t len, const char *file, int line)
{
    if (line > 0)
        snprintf(buf, len, "[%s:%d](../%s#L%d)", rel_path(file), line, rel_path(file), line);
    else
        snprintf(buf, len, "[%s](../%s)", rel_path(file), rel_path(file));
    return buf;
}

static void section_variants(FILE *f, const struct mod *md, const char *workload)
{
    if (!md->m) return;
    fprintf(f, "## The variants\n\nEach variant is one file and one idea on top of the previous one; `ls kernels/%s/` "
               "shows the ladder.\n\n| variant | kernel code | summary |\n|---|---|---|\n", md->name);
    char comment[4096], link[1200];
    for (int i = 0; i < variant_count(md->name); i++) {
        const struct kl_variant *v = variant_at(md->name, i);
        int line = read_source(v->file, comment, sizeof comment);
        fprintf(f, "| %s | %s | %s", v->name, source_link(link, sizeof link, v->file, line), v->summary);
        if (!measured(md, v->name)) fprintf(f, " (not measured yet) " KL_UNMEASURED, md->name, v->name);
        fprintf(f, " |\n");
    }
    fprintf(f, "\n");
    for (int i = 0; i < variant_count(md->name); i++) {
        const struct kl_variant *v = variant_at(md->name, i);
        const bool unmeasured = !measured(md, v->name);
        read_source(v->file, comment, sizeof comment);
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
        const cJSON *r = workload ? find_row(md, v->name, workload) : NULL;
        const cJSON *k = r ? get(r, "counters.launch") : NULL;
        if (k) {
            const struct shape sh = launch_shape(k);
            double local = num(k, "local_bytes");
            fprintf(f, "Execution model on `%s`, as the %s recorded the launch: kernel `%s`, grid %s x block %d "
                       "(%lld threads, %s blocks per SM across %s SMs), %s registers per thread, %s B static + %s B dynamic "
                       "shared memory per block, %s B local memory per thread (%s), theoretical occupancy %s%% "
                       "(limited by %s).\n\n",
                    workload, multi(md) ? md->labels[0] : "device", str(k, "kernel", "?"), sh.grid, sh.threads,
                    sh.blocks * sh.threads, F("%.1f", (double)sh.blocks / num(r, "device.sms")),
                    F("%.0f", num(r, "device.sms")), F("%.0f", num(k, "registers")), F("%.0f", num(k, "static_smem")),
                    F("%.0f", num(k, "dynamic_smem")), F("%.0f", local), local > 0 ? "spills or a stack frame" : "no spills",
                    F("%.1f", num(k, "theoretical_occupancy_pct")), str(k, "occupancy_limiter", "?"));
        }
    }
}

/* A CPU module's story: one lookup walking the structure, from the fields its bench records
 * (radix: nodes visited, bytes compared, cache lines touched, against memcmp on the same bytes). */
static void section_cpu_story(FILE *f, const cJSON *r, const char *workload, const char *variant)
{
    fprintf(f, "## Execution story: `%s` on `%s`\n\nOne lookup on the CPU (%s), averaged over the run's queries.\n\n"
               "```text\n", variant, workload, str(r, "device.name", "?"));
    fprintf(f, "Time 0 ns        a request's key arrives (%s tokens); the walk starts at the root\n",
            F("%.0f", num(r, "params.key_tokens")));
    fprintf(f, "├── Nodes visited: %s per match; child lookups (hash probes): %s per match\n",
            F("%.2f", num(r, "nodes_per_match")), F("%.2f", num(r, "probes_per_match")));
    fprintf(f, "├── Key bytes compared: %s per match, %s cache lines (%s per node visited)\n",
            HB(num(r, "bytes_per_match")), F("%.0f", num(r, "lines_per_match")), F("%.1f", num(r, "lines_per_node")));
    fprintf(f, "├── memcmp over the same bytes alone: %s ns (%s GB/s)\n", F("%.0f", num(r, "memcmp_ns_per_match")),
            F("%.1f", num(r, "memcmp_gbs")));
    fprintf(f, "├── Latency: p50 %s ns, p99 %s ns\n", F("%.0f", num(r, "p50_match_ns")), F("%.0f", num(r, "p99_match_ns")));
    fprintf(f, "└── Interpretation: the walk runs at %s of memcmp's rate over the same bytes; the rest is the pointer "
               "chase between nodes (a cache miss per node) and the page-granular comparison\n",
            F("%.2f", num(r, "memcmp_frac")));
    fprintf(f, "Time %s ns     the longest cached prefix is known: %s GB/s of key matched\n```\n\n",
            F("%.0f", num(r, "ns_per_match")), F("%.2f", num(r, "gbs")));
}

static void section_compute_story(FILE *f, const struct mod *md, const cJSON *r, const char *workload,
                                  const char *variant);

static void section_story(FILE *f, const struct mod *md, const char *workload, const char *variant)
{
    const cJSON *r = workload && variant ? find_row(md, variant, workload) : NULL;
    if (!r) return;
    if (num(r, "device.cc") == 0) return section_cpu_story(f, r, workload, variant);
    if (compute_bound(r)) return section_compute_story(f, md, r, workload, variant);
    double t = num(r, "time_us.median"), floor_us = num(r, "ceilings.launch_us_graph");
    double rd = num(r, "counters.dram_read_bytes"), wr = num(r, "counters.dram_write_bytes"), b = num(r, "bytes");
    fprintf(f, "## Execution story: `%s` on `%s`\n\nOne launch, from the host's call to the last byte written, with "
               "the hardware state the counters measured (CUPTI Range Profiler over the same launch, L2 flushed "
               "first).\n\n```text\n", variant, workload);
    fprintf(f,
            "Time 0.00 us     the launch (timed as %s: %s us%s; with events around each launch: %s us; launch "
            "floor on this GPU: %s us in a graph, %s us on a stream)\n",
            strcmp(timed_as(r), "graph") == 0 ? "CUDA-graph replays" : timed_as(r), F("%.2f", t), throttled_mark(r),
            F("%.2f", num(r, "time_us_events.median")), F("%.2f", floor_us),
            F("%.2f", num(r, "ceilings.launch_us_stream")));
    const cJSON *k = get(r, "counters.launch");
    fprintf(f, "Kernel: %s\n", k ? str(k, "kernel", "?") : variant);
    if (k) {
        const struct shape sh = launch_shape(k);
        fprintf(f, "├── Launch: %lld blocks%s%s%s x %d threads over %s SMs (%s blocks per SM)\n", sh.blocks,
                strchr(sh.grid, 'x') ? " (" : "", strchr(sh.grid, 'x') ? sh.grid : "", strchr(sh.grid, 'x') ? ")" : "",
                sh.threads, F("%.0f", num(r, "device.sms")), F("%.1f", sh.blocks / num(r, "device.sms")));
        fprintf(f, "├── Resources: %s registers/thread, %s B shared/block, %s B local/thread\n",
                F("%.0f", num(k, "registers")), F("%.0f", num(k, "static_smem") + num(k, "dynamic_smem")),
                F("%.0f", num(k, "local_bytes")));
        fprintf(f, "├── Occupancy: %s%% achieved of %s%% theoretical (limited by %s)\n",
                F("%.1f", num(r, "counters.achieved_occupancy_pct")), F("%.1f", num(k, "theoretical_occupancy_pct")),
                str(k, "occupancy_limiter", "?"));
    }
    const double ratio = row_dram_ratio(r);
    fprintf(f, "├── DRAM: read %s + wrote %s = %s of the %s the model needs (%s)\n", HB(rd), HB(wr), F("%.3fx", ratio),
            HB(b),
            !isfinite(ratio) ? "no counters"
            : ratio > 1.15   ? "re-reads or uncoalesced access"
            : ratio < 0.85 ? "outputs still dirty in L2 when the range ended are not yet DRAM writes, and any input L2 "
                             "served is no DRAM read"
                           : "every byte once, nothing more");
    fprintf(
        f,
        "├── DRAM busy: %s%% (those bytes over the %s us, against the measured copy bandwidth of %s GB/s); SM %s%%, "
        "L2 hit rate %s, tensor pipe %s%% (the counters)\n",
        F("%.1f", row_dram_pct(r)), F("%.2f", t), F("%.0f", num(r, "device.copy_gbs")),
        F("%.1f", num(r, "counters.sm_throughput_pct")), L2HIT(r, "%"), F("%.1f", num(r, "counters.tensor_pipe_pct")));
    const char *names[32];
    double pct[32];
    int n = stalls_of(r, names, pct, 32);
    for (int i = 0; i < n && i < 4; i++)
        fprintf(f, "%s %-18s %5.1f%%  <- %s\n", i == 0 ? "├── Warp stalls:" : "│                ", names[i], pct[i],
                stall_meaning(names[i]));
    fprintf(f, "└── Interpretation: %s-bound by the roofline (%s FLOP/B against a ridge of %s); ", row_bound(r),
            F("%.3f", num(r, "flops") / b), F("%.0f", row_ridge(r)));
    if (strcmp(row_bound(r), "memory") == 0)
        fprintf(f, "DRAM %s%% busy and %s of the copy bandwidth reached\n", F("%.0f", row_dram_pct(r)),
                F("%.2f", row_bw_frac(r)));
    else
        fprintf(f, "%s of the GEMM rate reached\n",
                F("%.2f", kl_fig_frac(row_tflops(r), num(r, "device.gemm_tflops"))));
    fprintf(f, "Time %s us    last block retires: %s GB/s = %s of the measured copy bandwidth", F("%.2f", t),
            F("%.0f", row_gbs(r)), F("%.3f", row_bw_frac(r)));
    if (isfinite(num(r, "copy_same_bytes_us")))
        fprintf(f,
                "; a plain copy of the same %s takes %s us (%s of the long-copy rate), so this kernel is at %s of "
                "what its size allows",
                HB(b), F("%.2f", num(r, "copy_same_bytes_us")),
                F("%.3f", kl_fig_frac(kl_fig_gbs(b, num(r, "copy_same_bytes_us")), num(r, "device.copy_gbs"))),
                F("%.3f", num(r, "copy_same_bytes_frac")));
    if (t < 5 * floor_us) fprintf(f, "; %s x the graph launch floor", F("%.1f", t / floor_us));
    if (isfinite(num(r, "read_frac"))) /* read-dominated kernels (decode): the streaming read is their bound */
        fprintf(f, "; a pure streaming read runs at %s GB/s on this GPU, and this kernel reads at %s of that",
                F("%.0f", num(r, "device.read_gbs")), F("%.3f", num(r, "read_frac")));
    fprintf(f, "\n```\n\n");
    for (int d = 1; d < md->n_devices; d++) { /* the same launch on the other memory systems, in brief */
        struct mod on = *md;
        on.dev = md->devices[d];
        const cJSON *o = find_row(&on, variant, workload);
        if (!o) continue;
        const char *names_o[32];
        double pct_o[32];
        int no = stalls_of(o, names_o, pct_o, 32);
        fprintf(f,
                "The same launch on %s (%s: copy %s GB/s, graph launch floor %s us): %s us (timed as %s%s; events %s "
                "us), %s GB/s = %s of its copy bandwidth and %s of a same-size copy (%s us); DRAM read %s + wrote %s = "
                "%s of the model, DRAM %s%% busy, achieved occupancy %s%%",
                md->labels[d], md->devices[d], F("%.0f", num(o, "device.copy_gbs")),
                F("%.2f", num(o, "ceilings.launch_us_graph")), F("%.2f", num(o, "time_us.median")), timed_as(o),
                throttled_mark(o), F("%.2f", num(o, "time_us_events.median")), F("%.0f", row_gbs(o)),
                F("%.3f", row_bw_frac(o)), F("%.3f", num(o, "copy_same_bytes_frac")),
                F("%.2f", num(o, "copy_same_bytes_us")), HB(num(o, "counters.dram_read_bytes")),
                HB(num(o, "counters.dram_write_bytes")), F("%.3fx", row_dram_ratio(o)), F("%.0f", row_dram_pct(o)),
                F("%.0f", num(o, "counters.achieved_occupancy_pct")));
        if (no) fprintf(f, ", top stall %s %.0f%%", names_o[0], pct_o[0]);
        fprintf(f, ".\n\n");
    }
}

/* ---- compute-bound modules (roofline bound "compute", e.g. attention_prefill) ----
 * The memory-bound story above follows bytes; a compute-bound kernel's follows one CTA's work
 * through the pipes: what it loads, its matrix products on the tensor pipe, what runs beside them,
 * and the counters that say where the time goes (tensor-pipe share, stall reasons, shared-memory
 * bank conflicts, occupancy and its limiter). Rows whose module reports the attention work
 * ("work": rows, pairs, head_dim) get the attention tile's steps by name. */

static bool compute_bound(const cJSON *r)
{
    return r && strcmp(row_bound(r), "compute") == 0;
}

/* Extra shared-memory wavefronts caused by bank conflicts, as a share of all shared wavefronts. */
static double conflict_share(const cJSON *r)
{
    double c = num(r, "counters.smem_bank_conflicts"), w = num(r, "counters.smem_wavefronts");
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
    return stall_meaning(name);
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
    const cJSON *a = get(r, path), *x = a ? cJSON_GetArrayItem(a, j) : NULL;
    return cJSON_IsNumber(x) ? x->valuedouble : NAN;
}

/* The warp-specialized variants' trace of one CTA (lab/attention_prefill/perf.c's "timeline"): when the
 * producer issued each key tile and when each consumer warpgroup had K, S, the softmax and P V, then
 * the average phase lengths and what they say. */
static void section_cta_timeline(FILE *f, const cJSON *r)
{
    const cJSON *tl = get(r, "timeline");
    if (!tl) return;
    const int tiles = (int)num(tl, "tiles"), n = cJSON_GetArraySize(get(tl, "issued"));
    const double mhz = num(r, "sm_clock_mhz_before");
    fprintf(f, "One CTA's producer and consumers, key tile by key tile (CTA 0: the longest work tile, %d key tiles; "
               "a separate, untimed launch with params.trace set; SM clock cycles from the CTA's start%s%s%s):\n\n"
               "```text\n      producer |        consumer warpgroup 0         |        consumer warpgroup 1\n"
               " tile   issued |  K ready   S done  softmax P V done |  K ready   S done  softmax P V done\n",
            tiles, isfinite(mhz) ? ", 1 us = " : "", isfinite(mhz) ? F("%.0f", mhz) : "", isfinite(mhz) ? " cycles" : "");
    const char *ev[4] = {"k_ready", "s_done", "softmax_done", "pv_done"};
    char path[64];
    for (int j = 0; j < n; j++) {
        if (n > 10 && j == 6) fprintf(f, "  ...\n");
        if (n > 10 && j >= 6 && j < n - 3) continue;
        fprintf(f, "%5d %8.0f |", j, at_index(tl, "issued", j));
        for (int c = 0; c < 2; c++) {
            for (int e = 0; e < 4; e++) {
                snprintf(path, sizeof path, "consumers.%d.%s", c, ev[e]);
                fprintf(f, " %8.0f", at_index(tl, path, j));
            }
            fprintf(f, "%s", c == 0 ? " |" : "\n");
        }
    }
    /* Average phases of warpgroup 0: S (K ready -> S done), softmax, P V finishing after the softmax, and
     * the period between K tiles; the producer's lead is how long before a consumer took a tile it was issued. */
    double s_len = 0, sm_len = 0, pv_len = 0, period = 0, lead = 0;
    for (int j = 0; j < n; j++) {
        s_len += at_index(tl, "consumers.0.s_done", j) - at_index(tl, "consumers.0.k_ready", j);
        sm_len += at_index(tl, "consumers.0.softmax_done", j) - at_index(tl, "consumers.0.s_done", j);
        pv_len += at_index(tl, "consumers.0.pv_done", j) - at_index(tl, "consumers.0.softmax_done", j);
        lead += at_index(tl, "consumers.0.k_ready", j) - at_index(tl, "issued", j);
        if (j > 0) period += at_index(tl, "consumers.0.k_ready", j) - at_index(tl, "consumers.0.k_ready", j - 1);
    }
    fprintf(f, "```\n\nPer key tile, warpgroup 0 on average: %s cycles from K ready to S done, %s in the softmax, %s "
               "from the softmax's end to its P V done, one tile every %s cycles; K was taken %s cycles after the "
               "producer had issued the tile's V",
            F("%.0f", s_len / n), F("%.0f", sm_len / n), F("%.0f", pv_len / n), F("%.0f", n > 1 ? period / (n - 1) : NAN),
            F("%.0f", lead / n));
    if (n > 0 && sm_len >= s_len) fprintf(f, ". The softmax takes as long as the product it follows: hiding it (v10's "
                                             "overlap and ping-pong) is worth more than faster copies");
    else if (n > 0 && lead / n < s_len / n) fprintf(f, ". The consumers take tiles soon after they were issued: the copies, "
                                                       "not the math, set the pace");
    fprintf(f, ".\n\n");
}

static void section_compute_story(FILE *f, const struct mod *md, const cJSON *r, const char *workload,
                                  const char *variant)
{
    const double t = num(r, "time_us.median"), sms = num(r, "device.sms"), flops = num(r, "flops");
    const cJSON *k = get(r, "counters.launch");
    const int blocks = k ? launch_shape(k).blocks : 0;
    const int threads = k && cJSON_GetArrayItem(get(k, "block"), 0) ? cJSON_GetArrayItem(get(k, "block"), 0)->valueint : 0;
    const double occ = k ? num(k, "theoretical_occupancy_pct") : NAN;
    /* CTAs resident per SM: theoretical occupancy x the SM's warp slots (64) / warps per CTA. */
    const double per_sm = threads > 0 ? floor(occ / 100.0 * 64 / (threads / 32.0) + 1e-9) : NAN;
    fprintf(f,
            "## Execution story: `%s` on `%s`\n\nOne launch, then the life of one CTA (the average over the launch's "
            "CTAs, counting those of a ragged batch that find no rows and exit at once) through the pipes, with what "
            "the counters measured over the same launch (CUPTI Range Profiler, L2 "
            "flushed first). The workload does %s FLOP per byte it must move against a ridge of %s: compute-bound, "
            "so the question is how busy the tensor pipe is and what keeps it waiting.\n\n```text\n",
            variant, workload, F("%.0f", flops / num(r, "bytes")), F("%.0f", row_ridge(r)));
    fprintf(f, "Time 0.00 us     the launch (timed as %s: %s us%s; events around each launch: %s us)\n",
            strcmp(timed_as(r), "graph") == 0 ? "CUDA-graph replays" : timed_as(r), F("%.2f", t), throttled_mark(r),
            F("%.2f", num(r, "time_us_events.median")));
    fprintf(f, "Kernel: %s\n", k ? str(k, "kernel", "?") : variant);
    if (k) {
        fprintf(f, "├── Launch: %d CTAs x %d threads over %s SMs; %s resident per SM (theoretical occupancy %s%%, limited "
                   "by %s), so %s waves\n",
                blocks, threads, F("%.0f", sms), F("%.0f", per_sm), F("%.1f", occ), str(k, "occupancy_limiter", "?"),
                F("%.1f", blocks / (sms * per_sm)));
        fprintf(f, "├── Resources: %s registers/thread, %s B shared memory/CTA, %s B local/thread (%s)\n",
                F("%.0f", num(k, "registers")), F("%.0f", num(k, "static_smem") + num(k, "dynamic_smem")),
                F("%.0f", num(k, "local_bytes")), num(k, "local_bytes") > 0 ? "spills or a stack frame" : "no spills");
        int producer, consumer;
        if (setmaxnreg_split(variant, md->name, &producer, &consumer))
            fprintf(f, "│   └── after setmaxnreg: the producer warpgroup %d registers/thread, each consumer warpgroup %d "
                       "(the %s above is the cap every warp starts with)\n",
                    producer, consumer, F("%.0f", num(k, "registers")));
    }
    const double rows = num(r, "work.rows"), pairs = num(r, "work.pairs"), d = num(r, "params.head_dim");
    if (blocks > 0 && isfinite(rows) && isfinite(pairs) && isfinite(d)) {
        /* Attention: rows are (query, qo head) pairs, pairs the unmasked (query, key) pairs of all heads. */
        const double cta_rows = rows / blocks, keys = pairs / rows, cta_us = t * sms * per_sm / blocks;
        fprintf(f, "├── One CTA: %s rows (query, head) of the %s, each seeing %s keys on average: %s FLOPs, %s us of its "
                   "SM slot at the measured rate\n",
                F("%.0f", cta_rows), F("%.0f", rows), F("%.0f", keys), F("%.3g", flops / blocks), F("%.1f", cta_us));
        fprintf(f,
                "│   ├── load:     its q rows once (%s), then its keys' K and V rows tile by tile into shared memory "
                "(about %s: every tile once per CTA); the whole launch read %s from DRAM for a %s model, L2 hit rate "
                "%s\n",
                HB(cta_rows * d * 2), HB(keys * d * 2 * 2), HB(num(r, "counters.dram_read_bytes")), HB(num(r, "bytes")),
                L2HIT(r, "%"));
        fprintf(f, "│   ├── GEMM 1:   S = Q K^T, %s FLOPs per CTA on the tensor pipe (2 x head_dim per pair)\n",
                F("%.3g", flops / blocks / 2));
        fprintf(f, "│   ├── softmax:  per key tile, each row's max (a shuffle over the 4 threads holding it), one exp2 per "
                   "pair (%s per CTA, on the 16-per-clock special-function unit) and the row sum\n",
                F("%.3g", pairs / blocks));
        fprintf(f, "│   ├── rescale:  when a row's max grows, its running sum and its %s output columns are multiplied by "
                   "2^(m_old - m_new): once per key tile, on the FMA pipe\n",
                F("%.0f", d));
        fprintf(f, "│   ├── GEMM 2:   O += P V with P rounded to 16 bits in registers, another %s FLOPs per CTA\n",
                F("%.3g", flops / blocks / 2));
        fprintf(f, "│   └── epilogue: O / l and lse written once (%s per CTA)\n", HB(cta_rows * (d * 2 + 4)));
    }
    fprintf(f, "├── Tensor pipe: active %s%% of the cycles (the GEMMs' share of the SMs' time); SM throughput %s%%\n",
            F("%.1f", num(r, "counters.tensor_pipe_pct")), F("%.1f", num(r, "counters.sm_throughput_pct")));
    const double cs = conflict_share(r);
    fprintf(f, "├── Shared memory: %s bank-conflict wavefronts of %s (%s%% of the shared-memory work was conflicts)\n",
            F("%.3g", num(r, "counters.smem_bank_conflicts")), F("%.3g", num(r, "counters.smem_wavefronts")),
            F("%.1f", 100 * cs));
    fprintf(f, "├── Occupancy: %s%% achieved of %s%% theoretical\n", F("%.1f", num(r, "counters.achieved_occupancy_pct")),
            F("%.1f", occ));
    const char *names[32];
    double pct[32];
    int n = stalls_of(r, names, pct, 32);
    for (int i = 0; i < n && i < 4; i++)
        fprintf(f, "%s %-18s %5.1f%%  <- %s\n", i == 0 ? "├── Warp stalls:" : "│                ", names[i], pct[i],
                compute_stall_meaning(names[i], variant, md->name));
    const double tc_frac = kl_fig_frac(row_tflops(r), num(r, "device.gemm_tflops"));
    fprintf(f, "└── Interpretation: %s of the GEMM rate", F("%.2f", tc_frac));
    if (n) fprintf(f, "; the warps wait mostly on %s", names[0]);
    if (isfinite(cs) && cs > 0.05) fprintf(f, "; bank conflicts are a visible share of the shared-memory work");
    fprintf(f, "\nTime %s us    last CTA retires: %s TFLOP/s = %s of the measured GEMM rate\n```\n\n", F("%.2f", t),
            F("%.1f", row_tflops(r)), F("%.3f", tc_frac));
    section_cta_timeline(f, r);
    /* The peers on the same workload, for scale. */
    int peers = 0;
    for (int i = 0; i < md->n_variants; i++) {
        const cJSON *p = find_row(md, md->variants[i], workload);
        if (!p || !is_peer(p)) continue;
        fprintf(f, "%s `%s` %s TFLOP/s (%s)", peers++ ? "," : "Peers on this workload, same run:", md->variants[i],
                F("%.1f", row_tflops(p)), F("%.3f", kl_fig_frac(row_tflops(p), num(p, "device.gemm_tflops"))));
    }
    if (peers) fprintf(f, ".\n\n");
}

/* The compute side of every row: rate, tensor pipe, conflicts, occupancy, registers, top stalls. */
static void section_compute_hardware(FILE *f, const struct mod *md, const char *main_w)
{
    const cJSON *any = NULL;
    for (int j = 0; j < md->rows.n && !any; j++)
        if (compute_bound(md->rows.r[j])) any = md->rows.r[j];
    if (!any) return;
    fprintf(f, "### The compute side\n\nFor compute-bound rows: the rate against the measured GEMM ceiling, how busy the "
               "tensor pipe was, the share of shared-memory wavefronts that bank conflicts added, occupancy (achieved / "
               "theoretical, and what limits it) and registers per thread.\n\n| variant | workload | TFLOP/s | tc_frac | "
               "tensor pipe %% | smem conflicts | occupancy | limiter | registers | local B | top stalls |\n"
               "|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < md->n_variants; i++)
        for (int w = 0; w < md->n_workloads; w++) {
            const cJSON *r = find_row(md, md->variants[i], md->workloads[w]);
            if (!r || !compute_bound(r)) continue;
            const cJSON *k = get(r, "counters.launch");
            const char *names[32];
            double pct[32];
            int n = stalls_of(r, names, pct, 32);
            char stalls[160] = "-";
            size_t off = 0;
            for (int s = 0; s < n && s < 3 && off < sizeof stalls; s++)
                off += (size_t)snprintf(stalls + off, sizeof stalls - off, "%s%s %.0f%%", s ? ", " : "", names[s], pct[s]);
            fprintf(f, "| %s%s | %s | %s | %s | %s | %s | %s / %s | %s | %s | %s | %s |\n", md->variants[i],
                    is_peer(r) ? " (peer)" : "", md->workloads[w], F("%.1f", row_tflops(r)),
                    F("%.3f", frac_of_bound(r)), F("%.1f", num(r, "counters.tensor_pipe_pct")),
                    F("%.1f%%", 100 * conflict_share(r)), F("%.0f%%", num(r, "counters.achieved_occupancy_pct")),
                    F("%.0f%%", k ? num(k, "theoretical_occupancy_pct") : NAN),
                    k ? str(k, "occupancy_limiter", "-") : "-", F("%.0f", k ? num(k, "registers") : NAN),
                    F("%.0f", k ? num(k, "local_bytes") : NAN), stalls);
        }
    fprintf(f, "\nOn `%s`, variant by variant:\n\n", main_w ? main_w : "-");
    for (int i = 0; main_w && i < md->n_variants; i++) {
        const cJSON *r = find_row(md, md->variants[i], main_w);
        if (!r || is_peer(r) || !compute_bound(r)) continue;
        const char *names[32];
        double pct[32];
        int n = stalls_of(r, names, pct, 32);
        fprintf(f, "- **%s**: %s TFLOP/s, %s of the GEMM rate, tensor pipe %s%% active.", md->variants[i],
                F("%.1f", row_tflops(r)), F("%.3f", frac_of_bound(r)), F("%.0f", num(r, "counters.tensor_pipe_pct")));
        if (n) fprintf(f, " Its warps mostly stall on %s (%.0f%%): %s.", names[0], pct[0], compute_stall_meaning(names[0], md->variants[i], md->name));
        double cs = conflict_share(r);
        if (isfinite(cs)) fprintf(f, " Bank conflicts: %.1f%% of its shared-memory wavefronts.", 100 * cs);
        fprintf(f, "\n");
    }
    fprintf(f, "\n");
}

/* How the guides time and what the DRAM column means: said once before each table of times. */
#define KL_TIMING_NOTE                                                                                                 \
    "Each median is timed as its `timed` column says: `graph`, CUDA-graph replays (back-to-back launches, as a "       \
    "serving engine runs them), or `events`, each launch alone between two events (what the bench falls back to for "  \
    "long kernels, and which adds the GPU's launch processing); the events column gives the event timing of every "    \
    "row. A median marked (throttled) was timed while the SM clock dropped."
#define KL_DRAM_NOTE                                                                                                   \
    "DRAM %% is the DRAM bytes the counters saw (one launch, L2 flushed first: the bytes-over-model column) over the " \
    "median time, as a share of the copy bandwidth measured in the same run (environment.md): the counter's own "      \
    "throughput figure is averaged over the whole profiled range, tens of microseconds longer than a short kernel. "   \
    "L2 hit %% is the counter's hits over lookups."

/* Under the hardware table: why an L2 hit rate reads n/a, and what a sampled re-check left out. */
static void notes_after_hardware_table(FILE *f, const struct mod *md)
{
    bool odd_l2 = false;
    for (int j = 0; j < md->rows.n; j++) {
        const double c = num(md->rows.r[j], "counters.l2_hit_rate_pct");
        odd_l2 |= isfinite(c) && !isfinite(kl_fig_l2_hit_pct(c));
    }
    if (odd_l2)
        fprintf(f,
                "\nn/a in the L2 column: the counter read outside 0-100%%. It is the hits over the lookups of every L2 "
                "client in the profiled range (stores count as hits), and the profiler may count the two in different "
                "replays; for a kernel that moves a few kilobytes those are not the same lookups, so the ratio says "
                "nothing about the kernel's reuse.\n");
    const char *reasons[16];
    int nr = 0;
    for (int j = 0; j < md->rows.n && nr < 16; j++) {
        const cJSON *c = get(md->rows.r[j], "recheck");
        const char *why =
            cJSON_IsObject(c) && strcmp(str(c, "outputs", ""), "all") != 0 ? str(c, "reason", NULL) : NULL;
        if (why && index_of(reasons, nr, why) < 0) reasons[nr++] = why;
    }
    for (int k = 0; k < nr; k++)
        fprintf(f, "%s%s\n", k ? "- " : "\nSampled re-checks, and why not the whole output:\n\n- ", reasons[k]);
}

static void section_hardware(FILE *f, const struct mod *md, const char *main_w)
{
    if (md->rows.n && num(md->rows.r[0], "device.cc") == 0) return; /* CPU: see "Module measurements" */
    fprintf(
        f,
        "## Hardware analysis\n\n" KL_TIMING_NOTE " " KL_DRAM_NOTE "\n\n| variant | workload |%s median us "
        "(min-max) | timed | events us | GB/s | of copy | DRAM bytes / model | DRAM %% | SM %% | occupancy | L2 hit %% "
        "| "
        "top stall | re-check of the timed launches |\n|---|---|%s---|---|---|---|---|---|---|---|---|---|---|---|\n",
        multi(md) ? " device |" : "", multi(md) ? "---|" : "");
    for (int i = 0; i < md->n_variants; i++)
        for (int w = 0; w < md->n_workloads; w++)
            for (int d = 0; d < md->n_devices; d++) { /* each device under the other: one kernel, two memories */
                struct mod on = *md;
                on.dev = md->devices[d];
                const cJSON *r = find_row(&on, md->variants[i], md->workloads[w]);
                if (!r) continue;
                char dev_cell[80] = "";
                if (multi(md)) snprintf(dev_cell, sizeof dev_cell, " %s |", md->labels[d]);
                const char *names[32];
                double pct[32];
                int n = stalls_of(r, names, pct, 32);
                char stall[96] = "-";
                if (n) snprintf(stall, sizeof stall, "%s %.0f%%", names[0], pct[0]);
                fprintf(f, "| %s%s | %s |%s %s (%s-%s)%s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
                        md->variants[i], is_peer(r) ? " (peer)" : "", md->workloads[w], dev_cell,
                        F("%.2f", num(r, "time_us.median")), F("%.2f", num(r, "time_us.min")),
                        F("%.2f", num(r, "time_us.max")), throttled_mark(r), timed_as(r),
                        F("%.2f", num(r, "time_us_events.median")), F("%.0f", row_gbs(r)), F("%.3f", row_bw_frac(r)),
                        F("%.3f", row_dram_ratio(r)), F("%.0f", row_dram_pct(r)),
                        F("%.0f", num(r, "counters.sm_throughput_pct")),
                        F("%.0f%%", num(r, "counters.achieved_occupancy_pct")), L2HIT(r, ""), stall, RECHECK(r));
            }
    notes_after_hardware_table(f, md);
    const cJSON *main_row = main_w && md->n_variants ? find_row(md, md->variants[0], main_w) : NULL;
    if (!compute_bound(main_row))
        fprintf(f, "\nWhat the counters say, variant by variant, on `%s`%s%s:\n\n", main_w ? main_w : "-",
                multi(md) ? " on " : "", multi(md) ? md->labels[0] : "");
    for (int i = 0; main_w && i < md->n_variants; i++) {
        const cJSON *r = find_row(md, md->variants[i], main_w);
        if (!r || is_peer(r) || compute_bound(r)) continue; /* compute-bound rows: section_compute_hardware */
        const char *names[32];
        double pct[32];
        int n = stalls_of(r, names, pct, 32);
        double ratio = row_dram_ratio(r), occ = num(r, "counters.achieved_occupancy_pct");
        fprintf(f, "- **%s** reaches %s of the copy bandwidth (%s GB/s).", md->variants[i], F("%.2f", row_bw_frac(r)),
                F("%.0f", row_gbs(r)));
        if (isfinite(ratio))
            fprintf(f, " It moves %s the modelled bytes%s.", F("%.2fx", ratio),
                    ratio > 1.15 ? ": extra traffic, from re-reads or partial sectors"
                    : ratio < 0.85 ? ": outputs written late in the kernel were still in L2 when the profiled range ended (an output smaller than the L2 is not written back at all within it), so the counters undercount writes"
                                   : ", so DRAM traffic is as low as it can be");
        if (n) fprintf(f, " Its warps mostly stall on %s (%.0f%%): %s.", names[0], pct[0], stall_meaning(names[0]));
        if (n > 1) fprintf(f, " Next: %s (%.0f%%).", names[1], pct[1]);
        if (isfinite(occ)) fprintf(f, " Achieved occupancy %.0f%%.", occ);
        double fr = row_bw_frac(r);
        if (strcmp(row_bound(r), "memory") == 0 && isfinite(fr))
            fprintf(f, " %s", fr >= 0.9 ? "Within 10% of the copy ceiling: what is left shows in the other stalls (a reduction's barriers) and in the launch's ramp-up and tail."
                                : fr >= 0.6 ? "The gap to the copy ceiling is latency not covered: too few bytes in flight per SM, or a serial phase (a reduction barrier) with the memory system idle."
                                            : "Far from the ceiling: the narrow loads, the extra pass or the launch itself dominate.");
        for (int d = 1; d < md->n_devices; d++) {
            struct mod on = *md;
            on.dev = md->devices[d];
            const cJSON *o = find_row(&on, md->variants[i], main_w);
            if (!o) continue;
            const char *names_o[32];
            double pct_o[32];
            int no = stalls_of(o, names_o, pct_o, 32);
            fprintf(f, " On %s: %s of its copy bandwidth, %s the modelled bytes", md->labels[d],
                    F("%.2f", row_bw_frac(o)), F("%.2fx", row_dram_ratio(o)));
            if (no) fprintf(f, ", mostly %s (%.0f%%)", names_o[0], pct_o[0]);
            fprintf(f, ".");
        }
        fprintf(f, "\n");
    }
    fprintf(f, "\n");
}

/* The value a target's metric takes in a row, as the bench judges it: latency_us is the median;
 * the fractions of a ceiling come from the row's bytes, FLOPs and time; the module-specific ones
 * (copy_same_bytes_frac, read_frac, latency_vs_nccl, busbw_frac, memcmp_frac ...) are the row's own. */
static double metric_value(const cJSON *r, const char *metric)
{
    if (!r) return NAN;
    if (strcmp(metric, "latency_us") == 0) return num(r, "time_us.median");
    if (strcmp(metric, "bw_frac") == 0 && !isfinite(num(r, "busbw_gbs"))) return row_bw_frac(r);
    if (strcmp(metric, "tc_frac") == 0) return kl_fig_frac(row_tflops(r), num(r, "device.gemm_tflops"));
    return num(r, metric);
}

static bool metric_passes(const struct kl_target *x, double v)
{
    return isfinite(v) && (kl_metric_lower_is_better(x->metric) ? v <= x->target : v >= x->target);
}

static const char *target_cell(char *buf, size_t len, const struct kl_targets *t, const char *module, const char *workload,
                               const cJSON *r)
{
    const struct kl_target *x = kl_target_find(targets_of(r, t), module, workload);
    if (!x) return snprintf(buf, len, "-"), buf;
    const double v = metric_value(r, x->metric);
    snprintf(buf, len, "%s %s %s %.2f: %s%s", x->metric, F("%.3f", v),
             kl_metric_lower_is_better(x->metric) ? "<=" : ">=", x->target,
             !isfinite(v)          ? "not measured"
             : metric_passes(x, v) ? "**pass**"
                                   : "**miss**",
             throttled_mark(r));
    return buf;
}

/* One device's cells of a targets-table row (from its leading " | "): median, GB/s (single device
 * only), of copy, of same-size copy, floor_frac and the sm_90 target; dashes where that device has no row. */
static void target_row_cells(FILE *f, const struct mod *md, const char *variant, const char *workload,
                             const struct kl_targets *t90, bool with_gbs)
{
    const cJSON *r = find_row(md, variant, workload);
    if (!r) {
        fprintf(f, with_gbs ? " | - | - | - | - | - | -" : " | - | - | - | - | -");
        return;
    }
    char c90[128];
    const cJSON *own = find_row(md, md->variants[0], workload); /* peers: ours' copy figure */
    double copy_us = num(r, "copy_same_bytes_us");
    if (!isfinite(copy_us) && own) copy_us = num(own, "copy_same_bytes_us");
    fprintf(f, " | %s%s", F("%.2f", num(r, "time_us.median")), throttled_mark(r));
    if (with_gbs) fprintf(f, " | %s", F("%.0f", row_gbs(r)));
    fprintf(f, " | %s | %s | %s | %s", F("%.3f", row_bw_frac(r)), F("%.3f", copy_us / num(r, "time_us.median")),
            F("%.2f", num(r, "floor_frac")),
            is_peer(r) ? "-" : target_cell(c90, sizeof c90, t90, md->name, workload, r));
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
static void section_cpu_targets(FILE *f, const struct mod *md)
{
    const char *gated = kl_targets_gated(&kcpu_targets, md->name);
    fprintf(f,
            "## Against the targets\n\nTargets of modules that run on the CPU are in perf/targets/cpu.csv; the gate "
            "(`kernlab bench %s --gate`) judges `%s`, the variant that file names; the other variants are shown "
            "against the same targets.\n\n| workload | variant | median us | target |\n|---|---|---|---|\n",
            md->name, gated ? gated : "(none named)");
    char cell[160];
    for (int w = 0; w < md->n_workloads; w++)
        for (int i = 0; i < md->n_variants; i++) {
            const cJSON *r = find_row(md, md->variants[i], md->workloads[w]);
            if (r)
                fprintf(f, "| %s | %s%s | %s | %s |\n", md->workloads[w], md->variants[i], is_peer(r) ? " (peer)" : "",
                        F("%.2f", num(r, "time_us.median")),
                        target_cell(cell, sizeof cell, NULL, md->name, md->workloads[w], r));
        }
    fprintf(f, "\n");
}

static void section_targets(FILE *f, const struct mod *md, const struct kl_targets *t90, const struct kl_targets *t80)
{
    if (md->rows.n && num(md->rows.r[0], "device.cc") == 0) return section_cpu_targets(f, md);
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
    if (!multi(md)) {
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
            struct mod on = *md;
            for (int d = 0; d < md->n_devices && !any; d++) on.dev = md->devices[d], any = find_row(&on, v, wl);
            if (!any) continue;
            r = find_row(md, v, wl); /* the primary device's, for the sm_80 column */
            fprintf(f, "| %s | %s%s", wl, v, is_peer(any) ? " (peer)" : "");
            for (int d = 0; d < md->n_devices; d++) on.dev = md->devices[d], target_row_cells(f, &on, v, wl, t90, !multi(md));
            char c80[128];
            fprintf(f, " | %s |\n", !r || is_peer(r) ? "-" : target_cell(c80, sizeof c80, t80, md->name, wl, r));
        }
    fprintf(f, "\n### Where the study notes and the measurements disagree\n\n");
    int said = 0;
    for (int d = 0; d < md->n_devices; d++) {
        struct mod on = *md;
        on.dev = md->devices[d];
        char on_label[96] = "";
        if (multi(md)) snprintf(on_label, sizeof on_label, "On %s: ", md->labels[d]);
        for (int w = 0; w < md->n_workloads; w++) {
            const cJSON *r = NULL;
            for (int i = 0; i < md->n_variants && !r; i++) r = find_row(&on, md->variants[i], md->workloads[w]);
            if (!r) continue;
            double model_us = num(r, "bytes") / (num(r, "device.copy_gbs") * 1e3), floor_us = num(r, "ceilings.launch_us_graph");
            /* model_us: the time the copy bandwidth needs for the model's bytes (the inverse of kl_fig_gbs) */
            if (model_us < floor_us && d > 0) { /* said in full for the first device */
                fprintf(f, "- %s`%s`: %s us at its copy bandwidth, under its %s us launch floor: the same holds.\n",
                        on_label, md->workloads[w], F("%.2f", model_us), F("%.2f", floor_us));
                said++;
            } else if (model_us < floor_us) {
                fprintf(f, "- %s`%s` moves %s: %s us at the copy bandwidth, under the %s us launch floor. It can only be "
                           "launch-bound, so a bandwidth percentage for it measures launch overhead, not memory; %s. "
                           "Claims like \"~100 GB/s = 70-80%% of peak\" for such a workload cannot both hold.\n",
                        on_label, md->workloads[w], HB(num(r, "bytes")), F("%.2f", model_us), F("%.2f", floor_us),
                        small_workload_gate(kl_target_find(t90, md->name, md->workloads[w])));
                said++;
            }
        }
        /* Our own targets, held against what a plain copy of the same bytes achieved in the run. */
        for (int w = 0; w < md->n_workloads; w++) {
            const struct kl_target *x = kl_target_find(t90, md->name, md->workloads[w]);
            const cJSON *r = NULL;
            for (int i = 0; i < md->n_variants && !(r && isfinite(num(r, "copy_same_bytes_us"))); i++)
                r = find_row(&on, md->variants[i], md->workloads[w]);
            double copy_us = r ? num(r, "copy_same_bytes_us") : NAN;
            if (!x || !isfinite(copy_us)) continue;
            double copy_value = strcmp(x->metric, "floor_frac") == 0 ? num(r, "ceilings.launch_us_graph") / copy_us
                                : strcmp(x->metric, "bw_frac") == 0
                                    ? kl_fig_frac(kl_fig_gbs(num(r, "bytes"), copy_us), num(r, "device.copy_gbs"))
                                : strcmp(x->metric, "copy_same_bytes_frac") == 0 ? 1.0 /* the copy itself */
                                                                                 : NAN;
            if (isfinite(copy_value) && copy_value < x->target) {
                fprintf(f, "- %sOur sm_90 target for `%s` (%s >= %.2f) is above what a plain copy of the same %s reached "
                           "in this run (%s, %s us, timed the same way): the target asks more than a copy of those bytes "
                           "does on this GPU, so read the variants against the same-size copy column as well.\n",
                        on_label, md->workloads[w], x->metric, x->target, HB(num(r, "bytes")), F("%.3f", copy_value),
                        F("%.2f", copy_us));
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

static void section_extra_fields(FILE *f, const struct mod *md)
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
            if (!skip && index_of(keys, nk, e->string) < 0 && nk < 32) keys[nk++] = e->string;
        }
    if (!nk) return;
    fprintf(f, "## Module measurements\n\n| variant | workload |%s", multi(md) ? " device |" : "");
    for (int k = 0; k < nk; k++) fprintf(f, " %s |", keys[k]);
    fprintf(f, "\n|---|---|%s", multi(md) ? "---|" : "");
    for (int k = 0; k < nk; k++) fprintf(f, "---|");
    fprintf(f, "\n");
    for (int i = 0; i < md->n_variants; i++)
        for (int w = 0; w < md->n_workloads; w++)
            for (int d = 0; d < md->n_devices; d++) {
                struct mod on = *md;
                on.dev = md->devices[d];
                const cJSON *r = find_row(&on, md->variants[i], md->workloads[w]);
                if (!r) continue;
                fprintf(f, "| %s | %s |", md->variants[i], md->workloads[w]);
                if (multi(md)) fprintf(f, " %s |", md->labels[d]);
                for (int k = 0; k < nk; k++) fprintf(f, " %s |", F("%.4g", num(r, keys[k])));
                fprintf(f, "\n");
            }
    fprintf(f, "\n");
}

/* "Golden cases (...): `a`, `b`." for the module's golden directory, when it has one. */
static void golden_cases_line(FILE *f, const struct mod *md)
{
    char dir[1100];
    snprintf(dir, sizeof dir, KL_SOURCE_DIR "/golden/%s", md->name);
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort);
    if (n > 0) {
        fprintf(f, "Golden cases (`golden/%s/`, generated by numpy in float64, independent of the C reference):", md->name);
        int shown = 0;
        for (int i = 0; i < n; i++) {
            if (names[i]->d_name[0] != '.') fprintf(f, "%s `%s`", shown++ ? "," : "", names[i]->d_name);
            free(names[i]);
        }
        free(names);
        fprintf(f, ".\n\n");
    }
}

static void section_correctness(FILE *f, const struct mod *md)
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
    golden_cases_line(f, md);
}

static void section_exercises(FILE *f, const struct mod *md)
{
    fprintf(f, "## Exercises\n\n");
    if (md->m && md->m->exercises) fprintf(f, "%s\n\n", md->m->exercises);
    fprintf(f,
            "Start any of them with `build/kernlab new-variant %s vN_your_idea` (README.md, *Add a variant*): the new "
            "file is a working copy of an existing variant, tested at once by ctest, and it appears in this guide as "
            "not measured until a results row names it. Write down the predicted time before measuring; if the result "
            "misses the prediction in either direction, find out why (the counters above) before the next change.\n\n",
            md->name);
}

/* The results folder of a device, as ./lab.sh run names it: the device name without "NVIDIA ", up
 * to its first space, in lower case ("NVIDIA H100 80GB HBM3" -> "h100"). */
static const char *device_folder(const char *device, char *out, size_t len)
{
    if (strncmp(device, "NVIDIA ", 7) == 0) device += 7;
    size_t n = 0;
    for (; device[n] && device[n] != ' ' && n + 1 < len; n++)
        out[n] = (char)tolower((unsigned char)device[n]);
    out[n] = 0;
    return out;
}

static void section_reproduce(FILE *f, const struct mod *md)
{
    fprintf(f, "## Reproduce\n\n```sh\n./lab.sh test                                  # build + every test\n"
               "build/kernlab verify golden/%s/\nbuild/kernlab check %s --seed 1\nbuild/kernlab ceilings\n", md->name, md->name);
    /* One file per device kind (the folder `./lab.sh run` names after the GPU: h100, h200, ...), so a
     * run on one device never replaces another device's rows. */
    if (md->m && md->m->perf)
        for (int d = 0; d < md->n_devices; d++) {
            char folder[64];
            fprintf(f, "build/kernlab bench %s --counters --peers --gate --json reports/data/%s/%s.jsonl   # on %s\n",
                    md->name, device_folder(md->devices[d], folder, sizeof folder), md->name, md->devices[d]);
        }
    else
        fprintf(f,
                "build/kernlab bench %s --gate --json reports/data/<device>/%s.jsonl   # <device>: the folder "
                "./lab.sh run writes into (h100, h200, ...)\n",
                md->name, md->name);
    fprintf(f, "build/kernlab report --results reports/data --out reports\n```\n");
}

/* ---- allreduce: a guide of its own (multi-GPU rows: world, algbw, busbw, NCCL in the same run) ---- */

/* Rows of one world in workload order (sizes ascending, as bench writes them). */
static int ar_sizes(const struct mod *md, int world, const char **sizes, int max)
{
    int n = 0;
    char suffix[32];
    snprintf(suffix, sizeof suffix, "-world%d", world);
    for (int w = 0; w < md->n_workloads && n < max; w++) {
        const char *name = md->workloads[w];
        size_t l = strlen(name), ls = strlen(suffix);
        if (l > ls && strcmp(name + l - ls, suffix) == 0) sizes[n++] = name;
    }
    return n;
}

static int ar_worlds(const struct mod *md, int *worlds, int max)
{
    int n = 0;
    for (int j = 0; j < md->rows.n; j++) {
        int w = (int)num(md->rows.r[j], "params.world"), k = 0;
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

static const cJSON *ar_any_row_with(const struct mod *md, const char *key)
{
    for (int j = 0; j < md->rows.n; j++)
        if (get(md->rows.r[j], key)) return md->rows.r[j];
    return NULL;
}

/* What the switch launched, from the kernel the activity record saw. */
static const char *ar_picked(const cJSON *r)
{
    const char *k = str(r, "counters.launch.kernel", "");
    if (strstr(k, "oneshot_v4")) return "one-shot (v4)";
    if (strstr(k, "twoshot_v5")) return "two-shot (v5)";
    if (strstr(k, "nccl") || strstr(k, "Nccl")) return "NCCL";
    return k[0] ? k : "-";
}

static void ar_topology(FILE *f, const struct mod *md)
{
    const cJSON *r = ar_any_row_with(md, "topology"), *t = r ? get(r, "topology") : NULL;
    fprintf(f, "## The machine: GPUs and NVLink\n\n");
    if (!t) {
        fprintf(f, "No topology in these results.\n\n");
        return;
    }
    fprintf(f, "| GPU | name | PCI | sm | SMs | active NVLinks |\n|---|---|---|---|---|---|\n");
    const cJSON *d;
    int i = 0;
    cJSON_ArrayForEach(d, get(t, "devices"))
    {
        fprintf(f, "| %d | %s | %s | %s | %s | %s |\n", i++, str(d, "name", "?"), str(d, "pci", "?"),
                F("%.0f", num(d, "cc")), F("%.0f", num(d, "sms")), F("%.0f", num(d, "nvlinks")));
    }
    fprintf(f, "\n| from | to | P2P access | performance rank (0 = best) | native atomics |\n|---|---|---|---|---|\n");
    cJSON_ArrayForEach(d, get(t, "pairs"))
    {
        fprintf(f, "| %s | %s | %s | %s | %s |\n", F("%.0f", num(d, "from")), F("%.0f", num(d, "to")),
                cJSON_IsTrue(get(d, "p2p")) ? "yes" : "no", F("%.0f", num(d, "perf_rank")),
                cJSON_IsTrue(get(d, "native_atomics")) ? "yes" : "no");
    }
    const char *smi = str(t, "nvidia_smi_topo", NULL);
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
                F("%.0f", num(p, "peer_copy.a")), F("%.0f", num(p, "peer_copy.b")), F("%.0f", num(p, "peer_copy.read_gbs")),
                F("%.0f", num(p, "peer_copy.read_both_gbs")), F("%.0f", num(p, "peer_copy.write_gbs")),
                F("%.0f", num(p, "peer_copy.copy_engine_gbs")));
    } else {
        fprintf(f, "\n");
    }
}

static void ar_story(FILE *f, const struct mod *md, const char *workload, const char *variant)
{
    const cJSON *r = workload && variant ? find_row(md, variant, workload) : NULL;
    if (!r || !get(r, "story")) return;
    const cJSON *s = get(r, "story");
    const double entry = num(s, "stamps_ns.entry"), copied = num(s, "stamps_ns.copied"),
                 started = num(s, "stamps_ns.started"), reduced = num(s, "stamps_ns.reduced"),
                 mid = num(s, "stamps_ns.mid"), gathered = num(s, "stamps_ns.gathered"), exit_ = num(s, "stamps_ns.exit");
    const double kernel = num(s, "kernel_us"), eager = num(s, "eager_us"), world = num(r, "params.world");
    fprintf(f, "## Execution story: one decode-size all-reduce\n\n`%s` on `%s` (%s per rank, %s ranks), rank 0, one eager "
               "call between two events, block 0 stamping `%%globaltimer` at each phase (KL_AR_T_* in "
               "kernels/allreduce/allreduce.h). The same call inside a CUDA graph, as a decode step replays it, takes "
               "%s us (slowest rank, median).\n\n```text\n",
            variant, workload, HB(num(r, "bytes")), F("%.0f", world), F("%.2f", num(s, "graph_us")));
    fprintf(f, "Time 0.00 us     the host enqueues the call (event before it)\n");
    fprintf(f, "Time %5s us     block 0 starts: the launch took ~%s us (event-timed call %s us minus %s us inside the "
               "kernel)\n", F("%.2f", eager - kernel), F("%.2f", eager - kernel), F("%.2f", eager), F("%.2f", kernel));
    fprintf(f, "├── copy-in      %6s us   x into this rank's staging half (local HBM), so the peers can read it\n",
            F("%.2f", (copied - entry) * 1e-3));
    fprintf(f, "├── flag barrier %6s us   st.release.sys of the call number into each peer's flags, spin on ours "
               "(ld.acquire.sys) until every peer's block 0 arrived: one NVLink round trip plus the peers' skew\n",
            F("%.2f", (started - copied) * 1e-3));
    fprintf(f, "├── peer reads   %6s us   16-byte loads of every rank's staging (%s over NVLink), summed in rank order in "
               "float32, rounded once, written to out\n",
            F("%.2f", (reduced - started) * 1e-3), isfinite(mid) ? "this rank's chunk" : "all of it");
    if (isfinite(mid))
        fprintf(f, "├── mid barrier  %6s us   every owner has published its reduced chunk\n"
                   "├── gather       %6s us   the other chunks copied from their owners\n",
                F("%.2f", (mid - reduced) * 1e-3), F("%.2f", (gathered - mid) * 1e-3));
    const double last = isfinite(gathered) ? gathered : reduced;
    fprintf(f, "└── exit         %6s us   %s; the last block publishes the call number\n",
            F("%.2f", (exit_ - last) * 1e-3),
            strstr(variant, "v1") || strstr(variant, "v2") || strstr(variant, "v3") ? "end barrier" : "no end barrier");
    fprintf(f, "Time %5s us     the event after the call: the call as the host sees it\n```\n\n", F("%.2f", eager));
    double barrier = (started - copied) * 1e-3 + (isfinite(mid) ? (mid - reduced) * 1e-3 : 0);
    fprintf(f, "Inside the kernel, %s of %s us is waiting at barriers and %s us moving data; the rest of the eager "
               "call is the launch. In a graph the launch overlaps the previous call, which is why the replayed time "
               "(%s us) is what a serving engine pays and what the gate judges.\n\n",
            F("%.2f us", barrier), F("%.2f", kernel), F("%.2f", kernel - barrier), F("%.2f", num(s, "graph_us")));
}

static void ar_svg(const char *path, const struct mod *md)
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
                const cJSON *r = find_row(md, md->variants[i], sizes[s]);
                double b = r ? num(r, "busbw_gbs") : NAN;
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
            const char *color = COLOR(i, md->n_variants);
            bool any = false, peer = false;
            fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\"%s points=\"", color, "");
            for (int s = 0; s < ns; s++) {
                const cJSON *r = find_row(md, md->variants[i], sizes[s]);
                double b = r ? num(r, "busbw_gbs") : NAN;
                if (!isfinite(b)) continue;
                peer |= is_peer(r);
                fprintf(f, "%.1f,%.1f ", ns > 1 ? x0 + W * s / (ns - 1.0) : x0, y0 - 240 * b / top);
                any = true;
            }
            fprintf(f, "\"/>\n");
            if (!any) continue;
            for (int s = 0; s < ns; s++) {
                const cJSON *r = find_row(md, md->variants[i], sizes[s]);
                double b = r ? num(r, "busbw_gbs") : NAN;
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

static void ar_curves(FILE *f, const struct mod *md)
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
                const cJSON *r = find_row(md, md->variants[i], sizes[s]);
                if (!r) continue;
                const cJSON *nccl = find_row(md, "v0_nccl", sizes[s]);
                double vs = num(r, "latency_vs_nccl"), frac = num(r, "busbw_frac");
                if (!isfinite(vs) && nccl) vs = num(r, "time_us.median") / num(nccl, "time_us.median");
                if (!isfinite(frac) && nccl) frac = num(r, "busbw_gbs") / num(nccl, "busbw_gbs");
                fprintf(f, "| %s%s | %s | %s%s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", md->variants[i],
                        is_peer(r) ? " (peer)" : "", sizes[s], F("%.2f", num(r, "time_us.median")), throttled_mark(r),
                        timed_as(r), F("%.2f", num(r, "time_us_eager")), F("%.1f", num(r, "algbw_gbs")),
                        F("%.1f", num(r, "busbw_gbs")), F("%.2f", vs), F("%.3f", frac),
                        F("%.0f", num(r, "slowest_rank")), cJSON_IsTrue(get(r, "check.pass")) ? "ok" : "FAIL",
                        RECHECK(r));
            }
        fprintf(f, "\n");
    }
}

static void ar_switch(FILE *f, const struct mod *md)
{
    int worlds[8], nw = ar_worlds(md, worlds, 8);
    static const char *kcand[] = {"v0_nccl", "v4_oneshot_one_barrier", "v5_twoshot_vec16"};
    static const char *klabel[] = {"NCCL", "one-shot (v4)", "two-shot (v5)"};
    fprintf(f, "## The size switch\n\n`v6_switch` picks one-shot, two-shot or NCCL by size and world with thresholds "
               "fixed in kernels/allreduce/v6_switch.cu. The table puts what it launched (the kernel the activity "
               "record saw) beside the fastest of the three in this run; where they differ, move the threshold.\n\n");
    for (int k = 0; k < nw; k++) {
        const char *sizes[32];
        int ns = ar_sizes(md, worlds[k], sizes, 32);
        fprintf(f, "| world %d | NCCL us | one-shot us | two-shot us | fastest | v6 launched | v6 us |\n|---|---|---|---|---|---|---|\n",
                worlds[k]);
        for (int s = 0; s < ns; s++) {
            double t[3];
            int best = -1;
            for (int c = 0; c < 3; c++) {
                const cJSON *r = find_row(md, kcand[c], sizes[s]);
                t[c] = r ? num(r, "time_us.median") : NAN;
                if (isfinite(t[c]) && (best < 0 || t[c] < t[best])) best = c;
            }
            const cJSON *v6 = find_row(md, "v6_switch", sizes[s]);
            fprintf(f, "| %s | %s | %s | %s | %s | %s | %s |\n", sizes[s], F("%.2f", t[0]), F("%.2f", t[1]), F("%.2f", t[2]),
                    best >= 0 ? klabel[best] : "-", v6 ? ar_picked(v6) : "-", v6 ? F("%.2f", num(v6, "time_us.median")) : "-");
        }
        fprintf(f, "\n");
    }
}

static void ar_targets(FILE *f, const struct mod *md, const struct kl_targets *t90)
{
    fprintf(f,
            "## Against the targets\n\nsm_90 targets (perf/targets/sm_90.csv) are judged on the variant that file "
            "names for the module (its gated_variant row; `kernlab bench allreduce --gate` judges it), against NCCL "
            "in the same run: `latency_vs_nccl` = our time / NCCL's (pass at or below the target), `busbw_frac` = our "
            "busbw / NCCL's. Sizes without a target row are listed after the table as ungated.\n\n| workload | "
            "variant | metric | value | target | result | source |\n|---|---|---|---|---|---|---|\n");
    /* Judged here from the targets file, as the other guides judge their rows: a results file
     * written without --gate (or before the gate knew these metrics) is judged the same way. */
    const struct kl_variant *gated = md->rows.n ? kl_gated_variant(md->name, (int)num(md->rows.r[0], "device.cc"), NULL) : NULL;
    const char *best = gated ? gated->name : NULL; /* the variant `kernlab bench --gate` judges */
    int said = 0;
    for (int j = 0; best && j < md->rows.n; j++) {
        const cJSON *r = md->rows.r[j];
        const struct kl_target *x = kl_target_find(t90, md->name, str(r, "workload", ""));
        if (!x || strcmp(str(r, "variant", ""), best) != 0 || is_peer(r)) continue;
        const double v = metric_value(r, x->metric);
        const bool pass = metric_passes(x, v);
        fprintf(f, "| %s | %s | %s | %s | %s %s | %s%s | %s |\n", str(r, "workload", "?"), best, x->metric,
                F("%.3f", v), kl_metric_lower_is_better(x->metric) ? "<=" : ">=", F("%.2f", x->target),
                pass ? "**pass**" : "**miss**", throttled_mark(r), x->source);
        said++;
    }
    if (!said) fprintf(f, "| - | - | - | - | - | not gated in these results | - |\n");
    int ungated = 0;
    for (int w = 0; w < md->n_workloads; w++)
        if (!kl_target_find(t90, md->name, md->workloads[w]) && has_row(md, md->workloads[w]))
            fprintf(f, "%s`%s`", ungated++ ? ", " : "\nUngated (no target row): ", md->workloads[w]);
    fprintf(f, "%s\n", ungated ? ".\n" : "");
}

static void ar_counters(FILE *f, const struct mod *md)
{
    if (!ar_any_row_with(md, "counters.launch")) return;
    fprintf(f, "## Kernels and counters\n\nRank 0's view of one call (CUPTI activity records; with `--counters`, the Range "
               "Profiler, every rank replaying the call in lockstep).\n\n| variant | workload | kernel | grid x block | "
               "registers | DRAM read + write | SM %% | top stall |\n|---|---|---|---|---|---|---|---|\n");
    for (int i = 0; i < md->n_variants; i++)
        for (int w = 0; w < md->n_workloads; w++) {
            const cJSON *r = find_row(md, md->variants[i], md->workloads[w]);
            const cJSON *k = r ? get(r, "counters.launch") : NULL;
            if (!k) continue;
            const char *names[32];
            double pct[32];
            int n = stalls_of(r, names, pct, 32);
            char stall[96] = "-", kname[64];
            if (n) snprintf(stall, sizeof stall, "%s %.0f%%", names[0], pct[0]);
            snprintf(kname, sizeof kname, "%.60s", str(k, "kernel", "?"));
            fprintf(f, "| %s | %s | `%s` | %s x %s | %s | %s | %s | %s |\n", md->variants[i], md->workloads[w], kname,
                    F("%.0f", cJSON_GetArrayItem(get(k, "grid"), 0) ? cJSON_GetArrayItem(get(k, "grid"), 0)->valuedouble : NAN),
                    F("%.0f", cJSON_GetArrayItem(get(k, "block"), 0) ? cJSON_GetArrayItem(get(k, "block"), 0)->valuedouble : NAN),
                    F("%.0f", num(k, "registers")),
                    HB(num(r, "counters.dram_read_bytes") + num(r, "counters.dram_write_bytes")),
                    F("%.0f", num(r, "counters.sm_throughput_pct")), stall);
        }
    fprintf(f, "\n");
}

static void ar_correctness(FILE *f, const struct mod *md)
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
    golden_cases_line(f, md);
}

static int write_guide_allreduce(const char *out, struct mod *md, const struct kl_targets *t90)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/allreduce.md", out);
    FILE *f = create(path);
    if (!f) return -1;
    fprintf(f, "# %s: %s\n\n", md->name, md->m ? md->m->summary : "");
    stamp(f, md);
    fprintf(f, "## What it computes\n\n%s\n\n", md->m && md->m->semantics ? md->m->semantics : "");
    int worlds[8];
    const int nw = ar_worlds(md, worlds, 8);
    /* The story: the decode-size call of the smallest world, by the best custom variant that was traced. */
    char story_w[48] = "";
    const char *story_v = NULL;
    if (nw) snprintf(story_w, sizeof story_w, "64KB-world%d", worlds[0]);
    static const char *kpref[] = {"v6_switch", "v4_oneshot_one_barrier", "v3_oneshot_vec16", "v1_oneshot"};
    for (size_t i = 0; i < sizeof kpref / sizeof *kpref && !story_v; i++) {
        const cJSON *r = find_row(md, kpref[i], story_w);
        if (r && get(r, "story")) story_v = kpref[i];
    }
    for (int i = 0; i < md->n_variants && !story_v; i++) {
        const cJSON *r = find_row(md, md->variants[i], story_w);
        if (r && get(r, "story")) story_v = md->variants[i];
    }
    ar_topology(f, md);
    section_variants(f, md, story_w[0] ? story_w : NULL);
    ar_story(f, md, story_w, story_v);
    ar_curves(f, md);
    snprintf(path, sizeof path, "%s/img/allreduce-busbw.svg", out);
    ar_svg(path, md);
    ar_switch(f, md);
    ar_targets(f, md, t90);
    ar_counters(f, md);
    ar_correctness(f, md);
    section_exercises(f, md);
    fprintf(f,
            "## Reproduce\n\n```sh\n./lab.sh test                                  # build + every test (multigpu ones "
            "skip below 2 GPUs)\nbuild/kernlab verify golden/allreduce/\nbuild/kernlab check allreduce --seed 1\n"
            "build/kernlab ceilings                         # with 2+ GPUs: the peer copy ceiling too\n");
    for (int d = 0; d < md->n_devices; d++) {
        char folder[64];
        fprintf(f,
                "build/kernlab bench allreduce --counters --peers --gate --json reports/data/%s/allreduce.jsonl   # on "
                "%s GPUs\n",
                device_folder(md->devices[d], folder, sizeof folder), md->devices[d]);
    }
    fprintf(f, "build/kernlab report --results reports/data --out reports\n```\n");
    return finish(f, path);
}

/* README.md's figure for allreduce: the gated variant's decode-size latency against NCCL. */
static void allreduce_index_figure(char *buf, size_t len, const struct mod *md, const char *gated)
{
    int worlds[8];
    if (!gated || !ar_worlds(md, worlds, 8)) return;
    char w8[48], w256[48];
    snprintf(w8, sizeof w8, "8KB-world%d", worlds[0]);
    snprintf(w256, sizeof w256, "256MB-world%d", worlds[0]);
    const cJSON *a = find_row(md, gated, w8), *b = find_row(md, gated, w256);
    if (a)
        snprintf(buf, len, "%s %s: %s us = %s x NCCL; 256MB: busbw %s x NCCL", gated, w8,
                 F("%.2f", num(a, "time_us.median")), F("%.2f", num(a, "latency_vs_nccl")),
                 b ? F("%.2f", num(b, "busbw_frac")) : "-");
}

static int write_guide(const char *out, struct mod *md, const struct kl_targets *t90, const struct kl_targets *t80)
{
    if (strcmp(md->name, "allreduce") == 0) return write_guide_allreduce(out, md, t90); /* multi-GPU rows */
    char path[1200], svg[1200];
    int status = 0;
    /* A cut path would write somewhere else: refused. */
    if (snprintf(svg, sizeof svg, "%s/img/%s-roofline.svg", out, md->name) >= (int)sizeof svg ||
        snprintf(path, sizeof path, "%s/%s.md", out, md->name) >= (int)sizeof path)
        return fprintf(stderr, "kernlab report: --out %s: path too long\n", out), -1;
    FILE *f = create(path);
    if (!f) return -1;
    const char *w = main_workload(md, t90), *best = w ? story_variant(md, w, t90) : NULL;
    fprintf(f, "# %s: %s\n\n", md->name, md->m ? md->m->summary : "");
    stamp(f, md);
    section_semantics(f, md);
    section_variants(f, md, w);
    section_story(f, md, w, best);
    section_hardware(f, md, w);
    section_compute_hardware(f, md, w);
    const cJSON *any = NULL; /* the primary device's first row */
    for (int j = 0; j < md->rows.n && !any; j++)
        if (on_dev(md, md->rows.r[j])) any = md->rows.r[j];
    double copy = num(any, "device.copy_gbs"), gemm = num(any, "device.gemm_tflops");
    if (copy > 0 && gemm > 0 && !has_flops(md)) {
        status = write_svg(svg, md, copy, gemm);
        const cJSON *b = w && best ? find_row(md, best, w) : NULL;
        fprintf(f,
                "## Bandwidth\n\n![%s bandwidth](img/%s-roofline.svg)\n\nThe kernels of this module do no "
                "arithmetic (0 FLOPs in every workload's model), so they have no place on a roofline: the picture "
                "gives each variant's GB/s of the byte model per workload, against %s measured copy bandwidth (%s "
                "GB/s, the line across).",
                md->name, md->name, multi(md) ? "the primary device's" : "this run's", F("%.0f", copy));
        if (multi(md)) fprintf(f, " The bars are %s's measurements (%s).", md->labels[0], md->devices[0]);
        if (b) fprintf(f, " `%s` on `%s` reaches %s of the copy bandwidth.", best, w, F("%.2f", row_bw_frac(b)));
        fprintf(f, " Solid bars are our variants, pale outlined bars the peers; each workload is labelled once below "
                   "its group.\n\n");
    } else if (copy > 0 && gemm > 0) {
        status = write_svg(svg, md, copy, gemm);
        const cJSON *b = w && best ? find_row(md, best, w) : NULL;
        fprintf(f,
                "## Roofline\n\n![%s roofline](img/%s-roofline.svg)\n\nThe roofs are %s measured copy "
                "bandwidth (%s GB/s) and cuBLAS bf16 GEMM rate (%s TFLOP/s); they meet at %s FLOP/byte.",
                md->name, md->name, multi(md) ? "the primary device's" : "this run's", F("%.0f", copy), F("%.0f", gemm),
                F("%.0f", kl_fig_ridge(copy, gemm)));
        if (multi(md)) fprintf(f, " The points are %s's measurements (%s).", md->labels[0], md->devices[0]);
        if (b)
            fprintf(f,
                    " `%s` on `%s` does %s FLOP per byte it must move: %s-bound, so its bound is %s, and it "
                    "reaches %s of it.",
                    best, w, F("%.3f", num(b, "flops") / num(b, "bytes")), row_bound(b),
                    strcmp(row_bound(b), "memory") == 0 ? "the copy bandwidth" : "the GEMM rate",
                    F("%.2f", frac_of_bound(b)));
        fprintf(f, " Each workload is a dashed line at its intensity (the models give every variant the same), "
                   "labelled once; circles on it are our variants, squares the peers, one colour per variant.\n\n");
    }
    section_targets(f, md, t90, t80);
    if (md->m && md->m->analysis) fprintf(f, "## Analysis\n\n%s\n\n", md->m->analysis);
    section_extra_fields(f, md);
    section_correctness(f, md);
    section_exercises(f, md);
    section_reproduce(f, md);
    return finish(f, path) || status ? -1 : 0;
}

/* ---- README.md (the way in) and environment.md ---- */

static const char *klearning[][2] = {
    {"rmsnorm", "a row reduction: vector loads, warp shuffles, one pass held in registers"},
    {"index", "a pure gather: how close a copy of scattered rows gets to the copy ceiling"},
    {"store", "a scatter into a paged cache: sequential vs random destinations"},
    {"rope", "in-place elementwise work with a table lookup per token"},
    {"radix", "the CPU side: the prefix match that decides what KV the GPU can skip"},
    {"attention_decode", "memory-bound attention over a paged KV cache"},
    {"attention_prefill", "compute-bound attention: tensor cores, tiling, causal masking"},
    {"allreduce", "communication: NCCL and a hand-written all-reduce"},
};

/* The story is not a module: it comes last, once every module it is built from has been read. */
static const char kstory_line[] = "the whole forward pass: every kernel above in a Llama-shaped decoder, prefill to "
                                  "decode, radix miss to hit, with the hardware state at each step";

/* One device's gate for the way-in page: the gated variant (named by the targets file of the
 * device's architecture) judged on every workload that has a target, as `kernlab bench --gate`
 * would: "v3_x: 4 of 4 targets met", then every miss, every target the variant has no row for,
 * throttled rows, and the workloads without a target row (ungated). Never a peer, never another
 * variant in the gated one's place. */
static void gate_summary(char *buf, size_t len, const struct mod *on, const struct kl_targets *t90)
{
    const cJSON *any = NULL;
    for (int j = 0; j < on->rows.n && !any; j++)
        if (on_dev(on, on->rows.r[j])) any = on->rows.r[j];
    const struct kl_targets *t = targets_of(any, t90);
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
        const struct kl_target *x = kl_target_find(t, on->name, wl);
        if (!x) {
            if (has_row(on, wl))
                ou += (size_t)snprintf(ungated + ou, ou < sizeof ungated ? sizeof ungated - ou : 0, "%s%s",
                                       ou ? ", " : "", wl);
            continue;
        }
        if (!has_row(on, wl)) continue; /* a workload this device did not run at all */
        targets++;
        const cJSON *r = find_row(on, gated, wl);
        const double v = metric_value(r, x->metric);
        if (r && metric_passes(x, v) && !cJSON_IsTrue(get(r, "throttled"))) {
            met++;
            continue;
        }
        if (r && metric_passes(x, v)) { /* met, but on a throttled clock: said, and counted as met */
            met++;
            om += (size_t)snprintf(misses + om, om < sizeof misses ? sizeof misses - om : 0,
                                   "%s%s %s %s met, throttled", om ? "; " : "", wl, x->metric, F("%.3f", v));
            continue;
        }
        om += (size_t)snprintf(misses + om, om < sizeof misses ? sizeof misses - om : 0, "%s%s %s %s %s %.2f: %s%s",
                               om ? "; " : "", wl, x->metric, r ? F("%.3f", v) : "-",
                               kl_metric_lower_is_better(x->metric) ? "<=" : ">=", x->target,
                               r ? "**miss**" : "not measured", throttled_mark(r));
    }
    o += (size_t)snprintf(buf + o, o < len ? len - o : 0, "`%s`: %d of %d targets met", gated, met, targets);
    if (misses[0]) o += (size_t)snprintf(buf + o, o < len ? len - o : 0, " (%s)", misses);
    if (ungated[0]) o += (size_t)snprintf(buf + o, o < len ? len - o : 0, "; ungated: %s", ungated);
}

static int write_index(const char *out, struct mod *mods, int n, const struct kl_targets *t90, bool story)
{
    char path[1300];
    snprintf(path, sizeof path, "%s/README.md", out);
    FILE *f = create(path);
    if (!f) return -1;
    /* The GPUs the figures come from, named once here; with several, every cell names its own. */
    const char *gpus[KL_MAX_DEVICES], *gpu_labels[KL_MAX_DEVICES];
    int ngpu = 0;
    for (int k = 0; k < n; k++)
        for (int d = 0; d < mods[k].n_devices; d++) {
            struct mod on = mods[k];
            on.dev = mods[k].devices[d];
            const cJSON *r = first_row(&on, on.n_workloads ? on.workloads[0] : "");
            for (int w = 1; !r && w < on.n_workloads; w++) r = first_row(&on, on.workloads[w]);
            if (!r || !(num(r, "device.cc") > 0) || index_of(gpus, ngpu, on.dev) >= 0 || ngpu == KL_MAX_DEVICES) continue;
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
               "--gate` does: how many targets it met, then every miss and every workload without a target row "
               "(ungated). The figure column is the same variant on the module's headline workload.\n\n"
               "| module | what | variants measured | gated variant's figure | of its bound | gate |\n"
               "|---|---|---|---|---|---|\n");
    int unmeasured = 0;
    for (int i = 0; i < kl_module_count(); i++) {
        const struct kl_module *m = kl_module_at(i);
        struct mod *md = NULL;
        for (int k = 0; k < n; k++)
            if (strcmp(mods[k].name, m->name) == 0) md = &mods[k];
        int nv = variant_count(m->name), measured_nv = 0;
        for (int v = 0; md && v < nv; v++)
            measured_nv += measured(md, variant_at(m->name, v)->name);
        unmeasured += nv - measured_nv;
        if (!md) {
            fprintf(f, "| %s | %s | 0 | not measured yet | - | - |\n", m->name, m->summary);
            continue;
        }
        char fig[512] = "", bound[256] = "", gate[4096] = "";
        size_t of = 0, ob = 0, og = 0;
        for (int d = 0; d < md->n_devices; d++) { /* one figure per device, each after its label */
            struct mod on = *md;
            on.dev = md->devices[d];
            const char *w = main_workload(&on, t90);
            const cJSON *r0 = w ? first_row(&on, w) : NULL;
            const char *gated = kl_targets_gated(targets_of(r0, t90), m->name);
            const cJSON *r = gated && w ? find_row(&on, gated, w) : NULL;
            char one[200] = "-", pre[80] = "", g[2048];
            if (multi(md)) snprintf(pre, sizeof pre, "%s%s: ", d ? "; " : "", md->labels[d]);
            if (!r)
                snprintf(one, sizeof one, "%s on %s: not measured", gated ? gated : "(no gated variant)", w ? w : "-");
            else if (num(r, "device.cc") == 0)
                snprintf(one, sizeof one, "%s on %s: %s ns per match (CPU)", gated, w,
                         F("%.0f", num(r, "ns_per_match")));
            else if (compute_bound(r))
                snprintf(one, sizeof one, "%s on %s: %s TFLOP/s%s", gated, w, F("%.0f", row_tflops(r)),
                         throttled_mark(r));
            else
                snprintf(one, sizeof one, "%s on %s: %s GB/s%s", gated, w, F("%.0f", row_gbs(r)), throttled_mark(r));
            if (strcmp(m->name, "allreduce") == 0) allreduce_index_figure(one, sizeof one, &on, gated);
            gate_summary(g, sizeof g, &on, t90);
            of += (size_t)snprintf(fig + of, of < sizeof fig ? sizeof fig - of : 0, "%s%s", pre, one);
            ob += (size_t)snprintf(bound + ob, ob < sizeof bound ? sizeof bound - ob : 0, "%s%s", pre,
                                   r && strcmp(m->name, "allreduce") != 0 ? F("%.2f", frac_of_bound(r)) : "-");
            og += (size_t)snprintf(gate + og, og < sizeof gate ? sizeof gate - og : 0, "%s%s", pre, g);
        }
        fprintf(f, "| [%s](%s.md) | %s | %d | %s | %s | %s |\n", m->name, m->name, m->summary, measured_nv, fig, bound,
                gate);
    }
    if (unmeasured) { /* each on its own marked line, so that a new variant adds lines and changes none */
        fprintf(f, "\nNot measured yet " KL_UNMEASURED "\n\n", "*", "*");
        for (int i = 0; i < kl_module_count(); i++) {
            const struct kl_module *m = kl_module_at(i);
            struct mod *md = NULL;
            for (int k = 0; k < n; k++)
                if (strcmp(mods[k].name, m->name) == 0) md = &mods[k];
            for (int v = 0; v < variant_count(m->name); v++) {
                const char *name = variant_at(m->name, v)->name;
                if (!md || !measured(md, name))
                    fprintf(f, "- %s `%s` " KL_UNMEASURED "\n", m->name, name, m->name, name);
            }
        }
    }
    fprintf(f, "\n## Learning path\n\nRead the guides in this order; each adds one idea to the previous.\n\n");
    int step = 1;
    for (size_t i = 0; i < sizeof klearning / sizeof klearning[0]; i++)
        if (kl_module_find(klearning[i][0]))
            fprintf(f, "%d. [%s](%s.md): %s\n", step++, klearning[i][0], klearning[i][0], klearning[i][1]);
    if (story) fprintf(f, "%d. [story](story.md): %s\n", step, kstory_line);
    else fprintf(f, "%d. story: %s (not generated yet: `kernlab story`, then its story.json in the results)\n", step,
                 kstory_line);
    fprintf(f, "\nTo write your own variant: `build/kernlab new-variant MODULE my_idea` (a copy of the gated variant, numbered next; the repository's README.md, "
               "*Add a variant*).\n");
    return finish(f, path);
}

/* How many GPUs the machine of `device` had: what a multi-GPU module's rows measured on it recorded
 * in their topology (allreduce's), else unknown: a single-GPU run does not count its machine's GPUs. */
static const char *environment_gpus(struct mod *mods, int n, const char *device, char *buf, size_t len)
{
    for (int k = 0; k < n; k++)
        for (int j = 0; j < mods[k].rows.n; j++) {
            const cJSON *r = mods[k].rows.r[j];
            if (!get(r, "topology") || strcmp(dev_name(r), device) != 0) continue;
            snprintf(buf, len, "%s (the [allreduce guide](%s.md) shows how they connect)",
                     F("%.0f", num(r, "topology.gpus")), mods[k].name);
            return buf;
        }
    snprintf(buf, len, "not recorded: no multi-GPU run on this machine in the results, and a single-GPU run uses one");
    return buf;
}

/* One machine's ceilings, as `kernlab ceilings` measured them at the start of a bench run. */
static void ceilings_table(FILE *f, const cJSON *c, const char *gpus)
{
    double copy = num(c, "copy_gbs"), gemm = num(c, "gemm_tflops");
    fprintf(f,
            "| | |\n|---|---|\n| GPU | %s (sm_%s), %s SMs, L2 %s |\n| driver / CUDA runtime | %s / %s |\n"
            "| copy bandwidth | %s GB/s (read + write of a 1 GiB copy; clock-derived DRAM peak %s GB/s, so the "
            "copy reaches %s of it) |\n| bf16 GEMM | %s TFLOP/s (cuBLAS, 8192^3, random data) |\n| ridge point | "
            "%s FLOP/byte |\n| launch floor | %s us per launch on a stream, %s us inside a CUDA graph |\n| clocks "
            "| SM %s MHz (max %s), memory %s MHz, read through NVML after the ceilings |\n",
            str(c, "name", "?"), F("%.0f", num(c, "cc")), F("%.0f", num(c, "sms")), HB(num(c, "l2_bytes")),
            str(c, "driver", "?"), str(c, "runtime", "?"), F("%.0f", copy), F("%.0f", num(c, "dram_peak_gbs")),
            F("%.2f", kl_fig_frac(copy, num(c, "dram_peak_gbs"))), F("%.0f", gemm), F("%.0f", kl_fig_ridge(copy, gemm)),
            F("%.2f", num(c, "launch_us_stream")), F("%.2f", num(c, "launch_us_graph")),
            F("%.0f", num(c, "sm_clock_mhz")), F("%.0f", num(c, "max_sm_clock_mhz")),
            F("%.0f", num(c, "mem_clock_mhz")));
    if (num(c, "read_gbs") > 0) /* measured since the decode module: the bound of read-dominated kernels */
        fprintf(f, "| read bandwidth | %s GB/s (a streaming read of 2 GiB: %s of the clock-derived DRAM peak) |\n",
                F("%.0f", num(c, "read_gbs")), F("%.2f", kl_fig_frac(num(c, "read_gbs"), num(c, "dram_peak_gbs"))));
    fprintf(f, "| GPUs | %s |\n\n", gpus);
}

static int write_environment(const char *out, struct mod *mods, int n)
{
    char path[1300];
    snprintf(path, sizeof path, "%s/environment.md", out);
    FILE *f = create(path);
    if (!f) return -1;
    /* Every device whose rows carry ceilings (the GPUs), in name order, with the first module's. */
    const cJSON *ceil[KL_MAX_DEVICES];
    const char *names[KL_MAX_DEVICES], *from[KL_MAX_DEVICES];
    int nc = 0;
    for (int k = 0; k < n; k++)
        for (int j = 0; j < mods[k].rows.n; j++) {
            const cJSON *c = get(mods[k].rows.r[j], "ceilings");
            const char *d = dev_name(mods[k].rows.r[j]);
            if (c && index_of(names, nc, d) < 0 && nc < KL_MAX_DEVICES) ceil[nc] = c, names[nc] = d, from[nc++] = mods[k].name;
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
    for (int k = 0; k < n; k++) /* a line per file and device: first and last row of each */
        for (int fi = 0; fi < mods[k].n_files; fi++)
            for (int d = 0; d < mods[k].n_devices; d++) {
                const cJSON *r0 = NULL, *rl = NULL;
                int rows = 0;
                for (int j = 0; j < mods[k].rows.n; j++)
                    if (mods[k].rows.file[j] == fi && strcmp(dev_name(mods[k].rows.r[j]), mods[k].devices[d]) == 0)
                        rl = mods[k].rows.r[j], r0 = r0 ? r0 : rl, rows++;
                if (!rows) continue;
                fprintf(f, "| reports/data/%s | %d | %s | %s .. %s | %s .. %s |\n", mods[k].files[fi], rows,
                        mods[k].devices[d], str(r0, "date", "?"), str(rl, "date", "?"), str(r0, "commit", "?"),
                        str(rl, "commit", "?"));
            }
    return finish(f, path);
}

/* mkdir -p: every missing folder on the way is made; one that cannot be is an error with
 * its errno (a regular file in the way reads "Not a directory"). */
static int make_dirs(const char *dir)
{
    char *p = strdup(dir);
    KL_CHECK(p, "out of memory");
    int rc = 0;
    for (char *s = p + (p[0] != 0); rc == 0; s++) {
        if (*s != '/' && *s != 0) continue;
        const char c = *s;
        *s = 0;
        struct stat st;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) rc = -1;
        else if (stat(p, &st) != 0) rc = -1;
        else if (!S_ISDIR(st.st_mode)) rc = -1, errno = ENOTDIR;
        if (rc) fprintf(stderr, "kernlab report: cannot make folder %s: %s\n", p, strerror(errno));
        *s = c;
        if (!c) break;
    }
    free(p);
    return rc;
}

/* The ceilings measured on `device` in the first module's run that recorded them (as environment.md
 * shows them); NULL when no results row from that device carries ceilings. */
static const cJSON *device_ceilings(struct mod *mods, int n, const char *device)
{
    for (int k = 0; k < n; k++)
        for (int j = 0; j < mods[k].rows.n; j++)
            if (strcmp(dev_name(mods[k].rows.r[j]), device) == 0 && get(mods[k].rows.r[j], "ceilings"))
                return get(mods[k].rows.r[j], "ceilings");
    return NULL;
}

/* Every regular file of staging/sub moved to out/sub (sub "" or "img"), made first; -1 naming the
 * file at fault. */
static int move_files(const char *staging, const char *out, const char *sub)
{
    char from_dir[1200], to_dir[1200];
    snprintf(from_dir, sizeof from_dir, "%s%s%s", staging, sub[0] ? "/" : "", sub);
    snprintf(to_dir, sizeof to_dir, "%s%s%s", out, sub[0] ? "/" : "", sub);
    struct dirent **names;
    int n = scandir(from_dir, &names, NULL, alphasort), rc = n < 0 || make_dirs(to_dir) ? -1 : 0;
    for (int i = 0; i < n; i++) {
        char from[2400], to[2400];
        struct stat st;
        snprintf(from, sizeof from, "%s/%s", from_dir, names[i]->d_name);
        snprintf(to, sizeof to, "%s/%s", to_dir, names[i]->d_name);
        if (!rc && names[i]->d_name[0] != '.' && stat(from, &st) == 0 && S_ISREG(st.st_mode) && rename(from, to) != 0)
            rc = -1, fprintf(stderr, "kernlab report: cannot move %s to %s: %s\n", from, to, strerror(errno));
        free(names[i]);
    }
    if (n >= 0) free(names);
    return rc;
}

/* Removes the staging folder and what is left in it (after a failure: everything). */
static void remove_staging(const char *staging)
{
    const char *subs[] = {"/img", ""};
    for (int s = 0; s < 2; s++) {
        char dir[1200];
        snprintf(dir, sizeof dir, "%s%s", staging, subs[s]);
        struct dirent **names;
        int n = scandir(dir, &names, NULL, alphasort);
        for (int i = 0; i < n; i++) {
            char path[2400];
            snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
            if (strcmp(names[i]->d_name, ".") && strcmp(names[i]->d_name, "..") && strcmp(names[i]->d_name, "img"))
                unlink(path);
            free(names[i]);
        }
        if (n >= 0) free(names);
        rmdir(dir);
    }
}

enum { REPORT_RESULTS, REPORT_OUT };
static const struct kl_opt report_opts[] = {
    [REPORT_RESULTS] = {"--results", KL_OPT_VALUE, "DIR", "results to read: DIR/*.jsonl and DIR/<device>/*.jsonl (default reports/data)"},
    [REPORT_OUT] = {"--out", KL_OPT_VALUE, "DIR", "where the guides go (default reports)"},
    {0},
};
const struct kl_command kl_report_command = {
    .name = "report",
    .summary = "write the guides (DIR/<module>.md, README.md, environment.md, img/) from results",
    .details = "The results line: lab/CONTRACTS.md section 7; the guides: section 8.\n"
               "exit: 0, 1 a results file or a guide that could not be read or written, 2 usage\n",
    .opts = report_opts,
    .run = kl_cmd_report,
};

int kl_cmd_report(int argc, char **argv)
{
    struct kl_optval opt[2];
    int n, rc = kl_args_parse(&kl_report_command, argc, argv, opt, NULL, &n);
    if (rc >= 0) return rc;
    const char *results = opt[REPORT_RESULTS].set ? opt[REPORT_RESULTS].value : "reports/data";
    const char *out = opt[REPORT_OUT].set ? opt[REPORT_OUT].value : "reports";
    /* Everything is read and checked before anything is written: a mistyped --results leaves
     * --out as it was. */
    struct stat st;
    if (stat(results, &st) != 0 || !S_ISDIR(st.st_mode))
        return fprintf(stderr, "kernlab report: --results %s: %s\n", results,
                       stat(results, &st) != 0 ? strerror(errno) : "not a folder"),
               2;
    static struct mod mods[32];
    memset(mods, 0, sizeof mods);
    int nm = 0, status = 0;
    /* A file that cannot be read is skipped (said on stderr) and the rest still written: exit 1. */
    if (load_results(results, mods, &nm)) status = 1;
    cJSON *story = NULL;
    const int story_found = kl_story_load(results, &story);
    if (story_found < 0) status = 1;
    if (nm == 0 && story_found <= 0) {
        fprintf(stderr,
                "kernlab report: no results in %s (neither <module>.jsonl, <device>/<module>.jsonl nor a valid "
                "story.json): nothing written\n",
                results);
        return 1;
    }
    qsort(mods, (size_t)nm, sizeof mods[0], mod_by_name);
    for (int k = 0; k < nm; k++) {
        mods[k].m = kl_module_find(mods[k].name);
        drop_repeats(&mods[k]);
        find_devices(&mods[k]);
        order(&mods[k]);
    }
    struct kl_targets t90 = {0}, t80 = {0};
    struct kl_err err;
    kl_targets_load(&t90, KL_SOURCE_DIR "/perf/targets", 90, &err);
    kl_targets_load(&t80, KL_SOURCE_DIR "/perf/targets", 80, &err);
    kl_targets_load(&kcpu_targets, KL_SOURCE_DIR "/perf/targets", 0, &err);
    /* Written into a folder beside the guides, then renamed into place: all or nothing. */
    char staging[1200], img[1300];
    bool wrote = false;
    if (snprintf(staging, sizeof staging, "%s/.report-XXXXXX", out) >= (int)sizeof staging) {
        fprintf(stderr, "kernlab report: --out %s: path too long\n", out);
    } else if (make_dirs(out) || !mkdtemp(staging)) {
        fprintf(stderr, "kernlab report: cannot write into %s: %s\n", out, strerror(errno));
    } else {
        snprintf(img, sizeof img, "%s/img", staging);
        int bad = make_dirs(img);
        for (int k = 0; k < nm && !bad; k++)
            bad = write_guide(staging, &mods[k], &t90, &t80);
        if (!bad && story)
            bad = kl_story_write(story, device_ceilings(mods, nm, kl_json_str(story, "device.name", "")), staging);
        if (!bad) bad = write_index(staging, mods, nm, &t90, story != NULL) || write_environment(staging, mods, nm);
        if (!bad) bad = move_files(staging, out, "img") || move_files(staging, out, "");
        wrote = !bad;
        remove_staging(staging);
    }
    if (wrote) {
        for (int k = 0; k < nm; k++)
            printf("wrote %s/%s.md\n", out, mods[k].name);
        if (story) printf("wrote %s/story.md, %s/story-trace.json\n", out, out);
        printf("wrote %s/README.md, %s/environment.md\n", out, out);
    } else {
        status = 1;
    }
    for (int k = 0; k < nm; k++) {
        for (int j = 0; j < mods[k].rows.n; j++) cJSON_Delete(mods[k].rows.r[j]);
        free(mods[k].rows.r), free(mods[k].rows.file);
    }
    cJSON_Delete(story);
    kl_targets_free(&t90), kl_targets_free(&t80), kl_targets_free(&kcpu_targets);
    return status;
}
