/* The report's inputs: results rows read from the results folder into one struct kl_guide per
 * module, the registry as the report sees it (hidden variants left out), what the guides quote of
 * the variant files (taken at build time), and which workload and variant a guide follows. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lab/core/files.h"
#include "lab/core/json_path.h"
#include "lab/report/internal.h"
#include "perf/bench.h"

/* perf/targets/cpu.csv: the targets of modules whose work runs on the CPU (cc 0). */
struct kl_targets kl_rep_cpu_targets;

/* The targets file that judges a row: cpu.csv for a CPU row, else the one given. */
const struct kl_targets *kl_rep_targets_of(const cJSON *r, const struct kl_targets *gpu)
{
    return r && kl_json_num(r, "device.cc") == 0 ? &kl_rep_cpu_targets : gpu;
}

/* The source path relative to the repository, for links that work on GitHub and locally.
 * __FILE__ is absolute, or relative to the build directory when a compiler cache rewrote the
 * paths (ccache's base_dir: "../kernels/..."); every source lies under the repository. */
const char *kl_rep_rel_path(const char *file)
{
    size_t n = strlen(KL_SOURCE_DIR);
    if (strncmp(file, KL_SOURCE_DIR, n) == 0 && file[n] == '/') return file + n + 1;
    while (strncmp(file, "../", 3) == 0 || strncmp(file, "./", 2) == 0) file += file[1] == '/' ? 2 : 3;
    return file;
}

/* What the guide quotes of a variant's file, as lab/report/tools/variant_notes.c wrote it at build
 * time (the binary reads no source): its kernel's line and its opening comment. */
extern const struct kl_variant_note *__start_kl_variant_notes[] __attribute__((weak));
extern const struct kl_variant_note *__stop_kl_variant_notes[] __attribute__((weak));

int kl_rep_read_source(const char *file, char *comment, size_t len)
{
    const char *rel = kl_rep_rel_path(file);
    comment[0] = 0;
    for (const struct kl_variant_note **p = __start_kl_variant_notes; p < __stop_kl_variant_notes; p++)
        if (strcmp((*p)->file, rel) == 0) {
            snprintf(comment, len, "%s", (*p)->comment);
            return (*p)->kernel_line;
        }
    return 0;
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
int kl_rep_variant_count(const char *module)
{
    int n = 0;
    for (int i = 0; i < kl_variant_count(module, false); i++)
        n += !hidden_variant(module, kl_variant_at(module, i, false)->name);
    return n;
}

const struct kl_variant *kl_rep_variant_at(const char *module, int i)
{
    for (int k = 0; k < kl_variant_count(module, false); k++) {
        const struct kl_variant *v = kl_variant_at(module, k, false);
        if (!hidden_variant(module, v->name) && i-- == 0) return v;
    }
    return NULL;
}


/* Devices sorted by name, each with a short label: the name without "NVIDIA ", cut at its first
 * space unless that would make two labels equal. */
static void find_devices(struct kl_guide *md)
{
    for (int j = 0; j < md->rows.n; j++) {
        const char *d = kl_row_device(md->rows.r[j]);
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


/* Variants in registry order (the ladder), peers after them; workloads in the module's order. */
static void order(struct kl_guide *md)
{
    if (md->m)
        for (int i = 0; i < kl_rep_variant_count(md->name); i++) {
            const char *v = kl_rep_variant_at(md->name, i)->name;
            for (int j = 0; j < md->rows.n; j++)
                if (strcmp(kl_json_str(md->rows.r[j], "variant", ""), v) == 0 && kl_index_of(md->variants, md->n_variants, v) < 0)
                    md->variants[md->n_variants++] = v;
        }
    for (int pass = 0; pass < 2; pass++)
        for (int j = 0; j < md->rows.n && md->n_variants < 64; j++) {
            const char *v = kl_json_str(md->rows.r[j], "variant", "");
            if (kl_row_is_peer(md->rows.r[j]) == (pass == 1) && kl_index_of(md->variants, md->n_variants, v) < 0)
                md->variants[md->n_variants++] = v;
        }
    if (md->m && md->m->perf)
        for (int i = 0; i < md->m->perf->n_workloads; i++) md->workloads[md->n_workloads++] = md->m->perf->workloads[i].name;
    for (int j = 0; j < md->rows.n && md->n_workloads < 64; j++) {
        const char *w = kl_json_str(md->rows.r[j], "workload", "");
        if (kl_index_of(md->workloads, md->n_workloads, w) < 0) md->workloads[md->n_workloads++] = w;
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
static int load_rows(const char *results, const char *rel, struct kl_guide *mods, int *nm)
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
        if (!r || !cJSON_IsString(kl_json_get(r, "module")) || !cJSON_IsString(kl_json_get(r, "variant")) ||
            !cJSON_IsString(kl_json_get(r, "workload")))
            why = "not a results line (module, variant, workload)";
        else if (!kl_module_find(kl_json_str(r, "module", "")))
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
        const char *module = kl_json_str(r, "module", "?");
        int k = 0;
        while (k < *nm && strcmp(mods[k].name, module) != 0) k++;
        struct kl_guide *md = &mods[k]; /* every module is registered, so there are at most kl_module_count() */
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
int kl_rep_load(const char *results, struct kl_guide *mods, int *nm)
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
 * old flat file), a device folder's row wins over a flat file's, else the first loaded; the loser is
 * dropped with a note, so a fresh run never hides behind a stale one. Repeats within one file (runs
 * appended to it: a bench run of one variant brings its own peer rows) keep the file's first row, and
 * are noted once for the file with their count. */
static void drop_repeats(struct kl_guide *md)
{
    int kept = 0, within[KL_MAX_FILES] = {0}; /* repeats within each file */
    for (int j = 0; j < md->rows.n; j++) {
        const cJSON *r = md->rows.r[j];
        int k = 0;
        while (k < kept && !(strcmp(kl_json_str(md->rows.r[k], "variant", ""), kl_json_str(r, "variant", "")) == 0 &&
                             strcmp(kl_json_str(md->rows.r[k], "workload", ""), kl_json_str(r, "workload", "")) == 0 &&
                             strcmp(kl_row_device(md->rows.r[k]), kl_row_device(r)) == 0))
            k++;
        if (k == kept) {
            md->rows.r[kept] = md->rows.r[j], md->rows.file[kept++] = md->rows.file[j];
            continue;
        }
        const bool newer = strchr(md->files[md->rows.file[j]], '/') && !strchr(md->files[md->rows.file[k]], '/');
        if (md->rows.file[j] == md->rows.file[k]) {
            within[md->rows.file[j]]++;
        } else {
            fprintf(stderr, "kernlab report: %s %s %s on %s is in reports/data/%s and reports/data/%s: using the latter's\n",
                    md->name, kl_json_str(r, "variant", ""), kl_json_str(r, "workload", ""), kl_row_device(r),
                    md->files[md->rows.file[newer ? k : j]], md->files[md->rows.file[newer ? j : k]]);
        }
        if (newer) {
            cJSON_Delete(md->rows.r[k]);
            md->rows.r[k] = md->rows.r[j], md->rows.file[k] = md->rows.file[j];
        } else {
            cJSON_Delete(md->rows.r[j]);
        }
    }
    md->rows.n = kept;
    for (int f = 0; f < md->n_files; f++)
        if (within[f])
            fprintf(stderr,
                    "kernlab report: reports/data/%s: %d rows repeat the variant, workload and device of an earlier row "
                    "of the file (runs appended to it): the earlier rows are the ones shown\n",
                    md->files[f], within[f]);
}

static int mod_by_name(const void *a, const void *b)
{
    return strcmp(((const struct kl_guide *)a)->name, ((const struct kl_guide *)b)->name);
}


/* The workload the story and the headline figures use: the first with a fraction target,
 * else the one moving the most bytes. */
const char *kl_rep_main_workload(const struct kl_guide *md, const struct kl_targets *t90)
{
    const char *best = NULL;
    double most = -1;
    for (int i = 0; i < md->n_workloads; i++) {
        const struct kl_target *t = kl_target_find(t90, md->name, md->workloads[i]);
        if (t && (strcmp(t->metric, "bw_frac") == 0 || strcmp(t->metric, "tc_frac") == 0 || strcmp(t->metric, "read_frac") == 0) &&
            kl_guide_has_row(md, md->workloads[i]))
            return md->workloads[i];
    }
    for (int j = 0; j < md->rows.n; j++)
        if (kl_guide_on_dev(md, md->rows.r[j]) && cJSON_IsString(kl_json_get(md->rows.r[j], "gate.metric")))
            return kl_json_str(md->rows.r[j], "workload", NULL);
    for (int j = 0; j < md->rows.n; j++)
        if (kl_guide_on_dev(md, md->rows.r[j]) && kl_json_num(md->rows.r[j], "bytes") > most)
            most = kl_json_num(md->rows.r[j], "bytes"), best = kl_json_str(md->rows.r[j], "workload", NULL);
    return best;
}


/* The variant a guide's story and headline figures follow on a workload: the gated one (the
 * targets file names it) where it was measured there, else our best measured. */
const char *kl_rep_story_variant(const struct kl_guide *md, const char *workload, const struct kl_targets *t90)
{
    const cJSON *any = kl_guide_first_row(md, workload);
    const char *gated = kl_targets_gated_for(kl_rep_targets_of(any, t90), md->name, workload);
    return gated && kl_guide_row(md, gated, workload) ? gated : kl_guide_best_variant(md, workload);
}

void kl_rep_prepare(struct kl_guide *mods, int nm)
{
    qsort(mods, (size_t)nm, sizeof mods[0], mod_by_name);
    for (int k = 0; k < nm; k++) {
        mods[k].m = kl_module_find(mods[k].name);
        drop_repeats(&mods[k]);
        find_devices(&mods[k]);
        order(&mods[k]);
    }
}
