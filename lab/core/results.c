/* Results lines (lab/CONTRACTS.md section 7). Keys are written in the contract's order. */
#include "results.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <time.h>

#ifndef KL_GIT_COMMIT
#define KL_GIT_COMMIT "unknown"
#endif

const char *kl_build_commit(void) { return KL_GIT_COMMIT; }

const char *kl_today(char *buf, size_t len)
{
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(buf, len, "%Y-%m-%d", &tm);
    return buf;
}

/* NaN and Inf are not JSON: they are written as null. */
static void num(cJSON *o, const char *key, double v)
{
    if (isfinite(v))
        cJSON_AddNumberToObject(o, key, v);
    else
        cJSON_AddNullToObject(o, key);
}

int kl_result_write(FILE *f, const struct kl_result *r)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "module", r->module);
    cJSON_AddStringToObject(o, "variant", r->variant);
    cJSON_AddStringToObject(o, "workload", r->workload);
    cJSON_AddItemToObject(o, "params", r->params ? cJSON_Duplicate(r->params, 1) : cJSON_CreateObject());
    cJSON *d = cJSON_AddObjectToObject(o, "device");
    cJSON_AddStringToObject(d, "name", r->device.name);
    cJSON_AddNumberToObject(d, "cc", r->device.cc);
    cJSON_AddNumberToObject(d, "sms", r->device.sms);
    cJSON_AddNumberToObject(d, "l2_bytes", (double)r->device.l2_bytes);
    num(d, "copy_gbs", r->device.copy_gbs);
    num(d, "gemm_tflops", r->device.gemm_tflops);
    if (r->device.read_gbs > 0) num(d, "read_gbs", r->device.read_gbs);
    cJSON *t = cJSON_AddObjectToObject(o, "time_us");
    num(t, "min", r->time_us_min);
    num(t, "median", r->time_us_median);
    num(t, "max", r->time_us_max);
    num(o, "bytes", r->bytes);
    num(o, "flops", r->flops);
    num(o, "gbs", r->gbs);
    num(o, "bw_frac", r->bw_frac);
    num(o, "tflops", r->tflops);
    num(o, "tc_frac", r->tc_frac);
    cJSON_AddItemToObject(o, "counters", r->counters ? cJSON_Duplicate(r->counters, 1) : cJSON_CreateObject());
    cJSON *c = cJSON_AddObjectToObject(o, "check");
    if (r->checked) {
        num(c, "rel_l2", r->rel_l2);
        num(c, "max_abs", r->max_abs);
        cJSON_AddBoolToObject(c, "pass", r->check_pass);
    }
    if (r->gate_metric) {
        cJSON *g = cJSON_AddObjectToObject(o, "gate");
        cJSON_AddStringToObject(g, "metric", r->gate_metric);
        num(g, "target", r->gate_target);
        cJSON_AddBoolToObject(g, "pass", r->gate_pass);
        num(g, "value", r->gate_value);
    } else if (r->gate_ungated) {
        cJSON *g = cJSON_AddObjectToObject(o, "gate");
        cJSON_AddNullToObject(g, "metric");
        cJSON_AddNullToObject(g, "target");
        cJSON_AddNullToObject(g, "pass");
        cJSON_AddTrueToObject(g, "ungated");
    } else {
        cJSON_AddNullToObject(o, "gate");
    }
    cJSON_AddBoolToObject(o, "throttled", r->throttled);
    cJSON_AddStringToObject(o, "commit", r->commit ? r->commit : kl_build_commit());
    char today[16];
    cJSON_AddStringToObject(o, "date", r->date ? r->date : kl_today(today, sizeof today));
    if (r->extra)
        for (cJSON *e = r->extra->child; e; e = e->next) cJSON_AddItemToObject(o, e->string, cJSON_Duplicate(e, 1));
    char *s = cJSON_PrintUnformatted(o);
    int rc = fprintf(f, "%s\n", s) < 0 ? -1 : 0;
    free(s);
    cJSON_Delete(o);
    return rc;
}
