/* The helpers of lab/core/guide.h: formatting, a row's derived figures, a guide's rows. */
#include "lab/core/guide.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lab/core/json_path.h"
#include "perf/bench.h"
#include "perf/figures.h"

bool kl_row_is_peer(const cJSON *r) { return cJSON_IsTrue(kl_json_get(r, "peer")); }

const char *kl_fmt(char *buf, size_t len, const char *f, double v)
{
    if (!isfinite(v)) snprintf(buf, len, "-");
    else snprintf(buf, len, f, v);
    return buf;
}

const char *kl_human_bytes(char *buf, size_t len, double b)
{
    if (!isfinite(b)) return snprintf(buf, len, "-"), buf;
    if (b >= 1e9) snprintf(buf, len, "%.2f GB", b / 1e9);
    else if (b >= 1e6) snprintf(buf, len, "%.2f MB", b / 1e6);
    else if (b >= 1e3) snprintf(buf, len, "%.1f KB", b / 1e3);
    else snprintf(buf, len, "%.0f B", b);
    return buf;
}

/* ---- figures derived from a row (perf/figures.h: one formula each) ---- */

double kl_row_gbs(const cJSON *r)
{
    return kl_fig_gbs(kl_json_num(r, "bytes"), kl_json_num(r, "time_us.median"));
}
double kl_row_tflops(const cJSON *r)
{
    return kl_fig_tflops(kl_json_num(r, "flops"), kl_json_num(r, "time_us.median"));
}
/* Of the copy bandwidth the row's own run measured. */
double kl_row_bw_frac(const cJSON *r)
{
    return kl_fig_frac(kl_row_gbs(r), kl_json_num(r, "device.copy_gbs"));
}
double kl_row_dram_bytes(const cJSON *r)
{
    return kl_json_num(r, "counters.dram_read_bytes") + kl_json_num(r, "counters.dram_write_bytes");
}
/* DRAM bytes the counters saw over the model's bytes. */
double kl_row_dram_ratio(const cJSON *r)
{
    return kl_fig_frac(kl_row_dram_bytes(r), kl_json_num(r, "bytes"));
}
double kl_row_dram_pct(const cJSON *r)
{
    return kl_fig_dram_pct(kl_json_num(r, "counters.dram_read_bytes"), kl_json_num(r, "counters.dram_write_bytes"),
                           kl_json_num(r, "time_us.median"), kl_json_num(r, "device.copy_gbs"));
}
/* "memory" or "compute": the roof the byte and FLOP models put the workload under. */
const char *kl_row_bound(const cJSON *r)
{
    return kl_fig_model_bound(kl_json_num(r, "flops"), kl_json_num(r, "bytes"), kl_json_num(r, "device.copy_gbs"),
                              kl_json_num(r, "device.gemm_tflops"));
}
double kl_row_ridge(const cJSON *r)
{
    return kl_fig_ridge(kl_json_num(r, "device.copy_gbs"), kl_json_num(r, "device.gemm_tflops"));
}

/* The L2 hit rate as a cell: the rate, "n/a (X%)" where the counter read outside 0-100%, "-"
 * where there is no counter. */
const char *kl_l2_hit_cell(char *buf, size_t len, const cJSON *r, const char *pct_sign)
{
    const double c = kl_json_num(r, "counters.l2_hit_rate_pct"), h = kl_fig_l2_hit_pct(c);
    if (isfinite(h))
        snprintf(buf, len, "%.0f%s", h, pct_sign);
    else if (isfinite(c))
        snprintf(buf, len, "n/a (counter %.0f%%)", c);
    else
        snprintf(buf, len, "-");
    return buf;
}

/* How the row's median was timed: "graph" (CUDA-graph replays, back to back) or "events" (each
 * launch alone between two events); "not recorded" for rows from before the field. */
const char *kl_row_timed_as(const cJSON *r)
{
    const char *t = kl_json_str(r, "timing", NULL);
    return !t ? "not recorded" : strcmp(t, "graph") == 0 ? "graph" : strcmp(t, "events") == 0 ? "events" : t;
}

/* The re-check the bench made of the timed launches' outputs, from the row's "recheck" object:
 * which replay, whole output or a sample (its reason is said under the table). Rows from before
 * the object (or with the older free-text note) say "not recorded". */
const char *kl_recheck_cell(char *buf, size_t len, const cJSON *r)
{
    const cJSON *c = kl_json_get(r, "recheck");
    if (!cJSON_IsObject(c)) return snprintf(buf, len, "not recorded"), buf;
    const char *replay = kl_json_str(c, "replay", "?"), *outputs = kl_json_str(c, "outputs", "?");
    if (strcmp(outputs, "all") == 0)
        snprintf(buf, len, "%s replay, whole output", replay);
    else
        snprintf(buf, len, "%s replay, %s of %s sampled", replay, KL_F("%.0f", kl_json_num(c, "checked")),
                 KL_F("%.0f", kl_json_num(c, "of")));
    return buf;
}

/* " (throttled)" for a row whose clocks dropped while it was timed. */
const char *kl_row_throttled(const cJSON *r)
{
    return cJSON_IsTrue(kl_json_get(r, "throttled")) ? " (throttled)" : "";
}

bool kl_guide_multi(const struct kl_guide *md) { return md->n_devices > 1; }

const char *kl_row_device(const cJSON *r) { return kl_json_str(r, "device.name", "?"); }

bool kl_guide_on_dev(const struct kl_guide *md, const cJSON *r) { return !md->dev || strcmp(kl_row_device(r), md->dev) == 0; }

int kl_index_of(const char **list, int n, const char *s)
{
    for (int i = 0; i < n; i++)
        if (strcmp(list[i], s) == 0) return i;
    return -1;
}

/* The row of (variant, workload) on the current device; the first one when a file repeats it. */
const cJSON *kl_guide_row(const struct kl_guide *md, const char *variant, const char *workload)
{
    for (int j = 0; j < md->rows.n; j++)
        if (strcmp(kl_json_str(md->rows.r[j], "variant", ""), variant) == 0 &&
            strcmp(kl_json_str(md->rows.r[j], "workload", ""), workload) == 0 && kl_guide_on_dev(md, md->rows.r[j]))
            return md->rows.r[j];
    return NULL;
}

/* The first variant's row of a workload on the current device (the shape and the byte model are
 * the same in every row of a workload). */
const cJSON *kl_guide_first_row(const struct kl_guide *md, const char *workload)
{
    const cJSON *r = NULL;
    for (int i = 0; i < md->n_variants && !r; i++) r = kl_guide_row(md, md->variants[i], workload);
    return r;
}

bool kl_guide_has_row(const struct kl_guide *md, const char *workload)
{
    for (int i = 0; i < md->n_variants; i++)
        if (kl_guide_row(md, md->variants[i], workload)) return true;
    return false;
}


/* The fraction a row is judged by: of its roofline bound on a GPU; for a CPU module (cc 0),
 * its own gated metric (radix: memcmp_frac, the share of memcmp's rate over the same bytes). */
double kl_row_frac_of_bound(const cJSON *r)
{
    if (kl_json_num(r, "device.cc") == 0) {
        const char *metric = kl_json_str(r, "gate.metric", NULL);
        return metric ? kl_json_num(r, metric) : NAN;
    }
    return strcmp(kl_row_bound(r), "compute") == 0 ? kl_fig_frac(kl_row_tflops(r), kl_json_num(r, "device.gemm_tflops"))
                                                : kl_row_bw_frac(r);
}

/* Our best variant on a workload: the highest fraction of its bound. */
const char *kl_guide_best_variant(const struct kl_guide *md, const char *workload)
{
    const char *best = NULL;
    double top = -1;
    for (int i = 0; i < md->n_variants; i++) {
        const cJSON *r = kl_guide_row(md, md->variants[i], workload);
        double f = r && !kl_row_is_peer(r) ? kl_row_frac_of_bound(r) : NAN;
        if (isfinite(f) && f > top) top = f, best = md->variants[i];
    }
    if (!best)
        for (int i = 0; i < md->n_variants && !best; i++)
            if (kl_guide_row(md, md->variants[i], workload) && !kl_row_is_peer(kl_guide_row(md, md->variants[i], workload)))
                best = md->variants[i];
    return best;
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

const char *kl_stall_meaning(const char *name)
{
    for (size_t i = 0; i < sizeof kstalls / sizeof kstalls[0]; i++)
        if (strcmp(kstalls[i].name, name) == 0) return kstalls[i].meaning;
    return "";
}

/* Stalls as "name pct" pairs, largest first (the counters object keeps them as an object). */
int kl_row_stalls(const cJSON *r, const char **names, double *pct, int max)
{
    const cJSON *s = kl_json_get(r, "counters.stalls");
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
const char *kl_series_color(char *buf, size_t len, int i, int n)
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

/* Opens an output, saying which and why when it cannot. */
FILE *kl_guide_create(const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) fprintf(stderr, "kernlab report: cannot write %s: %s\n", path, strerror(errno));
    return f;
}

/* Closes an output; a failed write (a full disk) is an error naming the file. */
int kl_guide_finish(FILE *f, const char *path)
{
    const bool bad = ferror(f) != 0;
    if (fclose(f) != 0 || bad) return fprintf(stderr, "kernlab report: writing %s failed: %s\n", path, strerror(errno)), -1;
    return 0;
}


/* ---- one guide ---- */

void kl_guide_stamp(FILE *f, const struct kl_guide *md)
{
    /* Every distinct (device, date, commit) of the rows, in first-seen order. */
    char seen[8][200];
    int n = 0;
    for (int j = 0; j < md->rows.n && n < 8; j++) {
        char s[200];
        double cc = kl_json_num(md->rows.r[j], "device.cc");
        char arch[16] = "CPU";
        if (cc > 0) snprintf(arch, sizeof arch, "sm_%.0f", cc);
        snprintf(s, sizeof s, "%s (%s) on %s at commit %s", kl_json_str(md->rows.r[j], "device.name", "?"), arch,
                 kl_json_str(md->rows.r[j], "date", "?"), kl_json_str(md->rows.r[j], "commit", "?"));
        int k = 0;
        while (k < n && strcmp(seen[k], s) != 0) k++;
        if (k == n) snprintf(seen[n++], sizeof seen[0], "%s", s);
    }
    fprintf(f, "> Generated by `kernlab report` from ");
    for (int k = 0; k < md->n_files; k++)
        fprintf(f, "%s`reports/data/%s`", k == 0 ? "" : k + 1 == md->n_files ? " and " : ", ", md->files[k]);
    fprintf(f, " (%d results", md->rows.n);
    if (kl_guide_multi(md)) /* how many rows each device contributed */
        for (int d = 0; d < md->n_devices; d++) {
            int rows = 0;
            for (int j = 0; j < md->rows.n; j++) rows += strcmp(kl_row_device(md->rows.r[j]), md->devices[d]) == 0;
            fprintf(f, "%s%d on %s", d ? ", " : ": ", rows, md->devices[d]);
        }
    fprintf(f, "). Measured on ");
    for (int k = 0; k < n; k++) fprintf(f, "%s%s", k ? "; " : "", seen[k]);
    fprintf(f, ". Do not edit by hand: rerun the commands under *Reproduce*.\n\n");
    if (kl_guide_multi(md)) {
        fprintf(f, "> Results from %d devices, named in every table by their short names (", md->n_devices);
        for (int d = 0; d < md->n_devices; d++)
            fprintf(f, "%s%s = %s", d ? ", " : "", md->labels[d], md->devices[d]);
        fprintf(f, "). The execution models, the execution story, the counter notes and the roofline are told on "
                   "%s, with the other%s key figures beside them; each device's figures are fractions of its own "
                   "measured ceilings.\n\n", md->labels[0], md->n_devices > 2 ? "s'" : "'s");
    }
}

/* 2-D grids: a block per token and part of its row. */
struct kl_shape kl_launch_shape(const cJSON *k)
{
    const cJSON *g = kl_json_get(k, "grid"), *b = kl_json_get(k, "block");
    int gd[3], bd[3];
    for (int i = 0; i < 3; i++) {
        gd[i] = cJSON_GetArrayItem(g, i) ? cJSON_GetArrayItem(g, i)->valueint : i ? 1 : 0;
        bd[i] = cJSON_GetArrayItem(b, i) ? cJSON_GetArrayItem(b, i)->valueint : i ? 1 : 0;
    }
    struct kl_shape s = {"", (long long)gd[0] * gd[1] * gd[2], bd[0] * bd[1] * bd[2]};
    if (gd[2] > 1) snprintf(s.grid, sizeof s.grid, "%dx%dx%d", gd[0], gd[1], gd[2]);
    else if (gd[1] > 1) snprintf(s.grid, sizeof s.grid, "%dx%d", gd[0], gd[1]);
    else snprintf(s.grid, sizeof s.grid, "%d", gd[0]);
    return s;
}


bool kl_row_compute_bound(const cJSON *r)
{
    return r && strcmp(kl_row_bound(r), "compute") == 0;
}


/* The value a target's metric takes in a row, as the bench judges it: latency_us is the median;
 * the fractions of a ceiling come from the row's bytes, FLOPs and time; the module-specific ones
 * (copy_same_bytes_frac, read_frac, latency_vs_nccl, busbw_frac, memcmp_frac ...) are the row's own. */
double kl_row_metric(const cJSON *r, const char *metric)
{
    if (!r) return NAN;
    if (strcmp(metric, "latency_us") == 0) return kl_json_num(r, "time_us.median");
    if (strcmp(metric, "bw_frac") == 0 && !isfinite(kl_json_num(r, "busbw_gbs"))) return kl_row_bw_frac(r);
    if (strcmp(metric, "tc_frac") == 0) return kl_fig_frac(kl_row_tflops(r), kl_json_num(r, "device.gemm_tflops"));
    return kl_json_num(r, metric);
}

bool kl_target_passes(const struct kl_target *x, double v)
{
    return isfinite(v) && (kl_metric_lower_is_better(x->metric) ? v <= x->target : v >= x->target);
}


/* "Golden cases (...): `a`, `b`." for the module's golden directory, when it has one. */
void kl_guide_golden_cases(FILE *f, const struct kl_guide *md)
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


/* The results folder of a device, as ./lab.sh run names it: the device name without "NVIDIA ", up
 * to its first space, in lower case ("NVIDIA H100 80GB HBM3" -> "h100"). */
const char *kl_device_folder(const char *device, char *out, size_t len)
{
    if (strncmp(device, "NVIDIA ", 7) == 0) device += 7;
    size_t n = 0;
    for (; device[n] && device[n] != ' ' && n + 1 < len; n++)
        out[n] = (char)tolower((unsigned char)device[n]);
    out[n] = 0;
    return out;
}

/* The linker bounds the section (weak: a binary without texts finds none). */
extern const struct kl_guide_text *__start_kl_guide_texts[] __attribute__((weak));
extern const struct kl_guide_text *__stop_kl_guide_texts[] __attribute__((weak));

const char *kl_guide_text(const char *module, const char *section)
{
    for (const struct kl_guide_text **p = __start_kl_guide_texts; p < __stop_kl_guide_texts; p++)
        if (strcmp((*p)->module, module) == 0 && strcmp((*p)->section, section) == 0) return (*p)->text;
    return NULL;
}
