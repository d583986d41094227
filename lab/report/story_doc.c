/* The story document as the story's guide and trace read it (lab/report/story_doc.h). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/core/guide.h"
#include "lab/core/json_path.h"
#include "lab/report/story_doc.h"
#include "perf/figures.h"

double kl_sd_at(const cJSON *arr, int i)
{
    const cJSON *v = cJSON_GetArrayItem(arr, i);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}


const cJSON *kl_sd_phase(const struct kl_story_doc *d, const char *name)
{
    for (const cJSON *p = d->phases ? d->phases->child : NULL; p; p = p->next)
        if (strcmp(kl_json_str(p, "name", ""), name) == 0) return p;
    return NULL;
}
const char *kl_sd_op_name(const struct kl_story_doc *d, int op)
{
    const cJSON *v = cJSON_GetArrayItem(d->ops, op);
    return cJSON_IsString(v) ? v->valuestring : "?";
}
int kl_sd_op_kind(const struct kl_story_doc *d, int op)
{
    return (int)kl_sd_at(d->op_kind, op);
}
int kl_sd_op_index(const struct kl_story_doc *d, const char *name)
{
    for (int i = 0; i < d->n_ops; i++)
        if (strcmp(kl_sd_op_name(d, i), name) == 0) return i;
    return -1;
}

/* The profile that describes an op of a phase: control runs prefill's shapes, the graph decode's. */
const cJSON *kl_sd_profile(const struct kl_story_doc *d, const char *ph, int op)
{
    if (strcmp(ph, "control") == 0) ph = "prefill";
    if (strcmp(ph, "decode_graph") == 0) ph = "decode";
    for (const cJSON *p = d->profiles ? d->profiles->child : NULL; p; p = p->next)
        if (strcmp(kl_json_str(p, "phase", ""), ph) == 0 && (int)kl_json_num(p, "op") == op) return p;
    return NULL;
}
double kl_sd_counter(const struct kl_story_doc *d, const char *ph, int op, const char *name)
{
    const cJSON *p = kl_sd_profile(d, ph, op);
    return p ? kl_json_num(kl_json_get(p, "counters"), name) : NAN;
}

/* "void kl::foo_v2<__nv_bfloat16, 8>(...)" -> "foo_v2"; cuBLAS's C names stay whole; a generic
 * wrapper ("cutlass::Kernel2<cutlass_80_tensorop_..._tn_align8>") is named by its first argument. */
static void short_kernel(const char *full, char *out, size_t len)
{
    char clean[512];
    size_t o = 0;
    for (const char *c = full; *c && o + 1 < sizeof clean;) { /* drop "(anonymous namespace)::" */
        if (strncmp(c, "(anonymous namespace)::", 23) == 0)
            c += 23;
        else
            clean[o++] = *c++;
    }
    clean[o] = 0;
    const char *s = strncmp(clean, "void ", 5) == 0 ? clean + 5 : clean;
    for (int pass = 0; pass < 2; pass++) {
        size_t n = strcspn(s, "(<,>");
        const char *q = s;
        for (const char *c = s; c < s + n; c++)
            if (c[0] == ':' && c[1] == ':') q = c + 2;
        n -= (size_t)(q - s);
        const bool wrapper = (strncmp(q, "Kernel", 6) == 0 || strncmp(q, "device_kernel", 13) == 0) && q[n] == '<';
        if (pass == 0 && wrapper) {
            s = q + n + 1;
            continue;
        }
        if (n > 72)
            snprintf(out, len, "%.69s...", q);
        else
            snprintf(out, len, "%.*s", (int)n, q);
        return;
    }
}

const char *kl_sd_kernel_name(const struct kl_story_doc *d, int k, char *buf, size_t len)
{
    const cJSON *v = cJSON_GetArrayItem(d->kernels, k);
    short_kernel(cJSON_IsString(v) ? v->valuestring : "?", buf, len);
    return buf;
}

/* ---- formatting ---- */
/* ---- figures of one op's profiled instance (perf/figures.h: the formulas every guide uses) ---- */

/* Its DRAM traffic: the counters' bytes (read + written) over the instance's time, in GB/s. */
double kl_sd_dram_gbs(const struct kl_story_doc *d, const char *ph, int op)
{
    const cJSON *p = kl_sd_profile(d, ph, op);
    return p ? kl_fig_gbs(kl_json_num(p, "counters.dram_read_bytes") + kl_json_num(p, "counters.dram_write_bytes"), kl_json_num(p, "us")) : NAN;
}

/* The same as a share of the device's measured copy bandwidth, in percent; NAN without ceilings. */
double kl_sd_dram_pct(const struct kl_story_doc *d, const char *ph, int op)
{
    const cJSON *p = kl_sd_profile(d, ph, op);
    return p ? kl_fig_dram_pct(kl_json_num(p, "counters.dram_read_bytes"), kl_json_num(p, "counters.dram_write_bytes"), kl_json_num(p, "us"),
                               d->copy_gbs)
             : NAN;
}

struct kl_sd_span kl_sd_op_span(const cJSON *e)
{
    struct kl_sd_span s = {INFINITY, -INFINITY, 0, 0};
    for (const cJSON *k = cJSON_GetArrayItem(e, 2) ? cJSON_GetArrayItem(e, 2)->child : NULL; k; k = k->next) {
        const double st = kl_sd_at(k, 1), du = kl_sd_at(k, 2);
        s.t0 = fmin(s.t0, st), s.t1 = fmax(s.t1, st + du), s.us += du, s.kernels++;
    }
    return s;
}
