#include "testing.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device.h"

/* Whether `list`, texts separated by commas, names `name`: one of its texts occurs in name. A NULL
 * or empty list names every name. */
static bool listed(const char *list, const char *name)
{
    if (!list || !*list) return true;
    for (const char *t = list; *t; t += *t == ',') {
        const size_t len = strcspn(t, ",");
        char text[64];
        snprintf(text, sizeof text, "%.*s", (int)len, t);
        if (len && strstr(name, text)) return true;
        t += len;
    }
    return false;
}

bool kl_test_wanted(const char *name) { return listed(getenv("KL_TEST_ONLY"), name); }

const char *kl_test_skip_reason(const struct kl_variant *v)
{
    static char why[256];
    if (v && !kl_test_wanted(v->name)) {
        snprintf(why, sizeof why, "not named in KL_TEST_ONLY=%s", getenv("KL_TEST_ONLY"));
        return why;
    }
    if (!v || v->min_cc == 0) return NULL;
    int cc = kl_device_cc(why, sizeof why);
    if (!cc) return why;
    if (cc < v->min_cc) {
        snprintf(why, sizeof why, "needs sm_%d", v->min_cc);
        return why;
    }
    return NULL;
}

size_t kl_test_variant_indices(const char *module, bool mutants, int *idx, size_t cap)
{
    const int n = kl_variant_count(module, mutants);
    size_t m = 0;
    for (int i = 0; i < n && m < cap; i++)
        if (kl_variant_at(module, i, mutants)->mutant == (int)mutants) idx[m++] = i;
    return m;
}

static int by_name(const struct dirent **a, const struct dirent **b) { return strcmp((*a)->d_name, (*b)->d_name); }

/* How one golden case is judged: through a variant (or the reference), or through a stand-in. */
struct judge {
    const struct kl_variant *v;
    kl_stand_in_fn fn;
    bool as_reference;
};

static void judge_case(const struct kl_module *m, const struct kl_case *c, const struct judge *j,
                       struct kl_verdict *vd)
{
    if (!j->fn) return kl_verify_case(m, c, j->v, vd);
    struct kl_err err = {{0}};
    struct kl_outputs want = {0}, got = {0};
    void *prob = m->tensor->load(c, &want, &err);
    if (prob && j->fn(prob, &got, &err) == 0) {
        kl_compare_outputs(&got, &want, j->as_reference, vd);
    } else {
        memset(vd, 0, sizeof *vd);
        vd->status = KL_FAIL;
        snprintf(vd->why, sizeof vd->why, "%s", err.msg);
    }
    if (prob) m->tensor->free(prob);
    kl_outputs_free(&want);
    kl_outputs_free(&got);
}

static int run_goldens(const char *module, const struct judge *j, const char *name, FILE *log)
{
    const struct kl_module *m = kl_module_find(module);
    char dir[1024];
    snprintf(dir, sizeof dir, KL_SOURCE_DIR "/golden/%s", module);
    struct dirent **names;
    int n = m && (m->tensor || !j->fn) ? scandir(dir, &names, NULL, by_name) : -1;
    if (n < 0) return -1;
    int cases = 0, failures = 0;
    for (int i = 0; i < n; i++) {
        char path[1300];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
        if (names[i]->d_name[0] != '.') {
            struct kl_case c;
            struct kl_err err = {{0}};
            struct kl_verdict vd = {0};
            if (kl_case_open(&c, path, &err) == 0) {
                judge_case(m, &c, j, &vd);
                kl_case_close(&c);
            } else {
                vd.status = KL_FAIL;
                snprintf(vd.why, sizeof vd.why, "%s", err.msg);
            }
            cases++;
            failures += vd.status == KL_FAIL;
            fprintf(log, "%s %s %s rel_l2=%.3g max_abs=%.3g %s\n", (const char *[]){"PASS", "FAIL", "SKIP"}[vd.status],
                    names[i]->d_name, name, vd.rel_l2, vd.max_abs, vd.why);
        }
        free(names[i]);
    }
    free(names);
    return cases ? failures : -1;
}

int kl_test_goldens(const char *module, const struct kl_variant *v, FILE *log)
{
    return run_goldens(module, &(struct judge){.v = v}, v ? v->name : "reference", log);
}

int kl_test_goldens_with(const char *module, kl_stand_in_fn fn, const char *name, bool as_reference, FILE *log)
{
    return run_goldens(module, &(struct judge){.fn = fn, .as_reference = as_reference}, name, log);
}

int kl_test_catalogue_with(const char *module, kl_stand_in_fn fn, const char *name, uint64_t seed, FILE *log)
{
    const struct kl_module *m = kl_module_find(module);
    if (!m || !m->tensor) return 1;
    int failures = 0;
    for (int i = 0;; i++) {
        char label[160];
        void *prob = m->tensor->make(i, seed, label, sizeof label);
        if (!prob) break;
        struct kl_err err = {{0}};
        struct kl_outputs ref = {0}, got = {0};
        struct kl_verdict vd = {.status = KL_FAIL};
        if (m->tensor->reference(prob, &ref, &err) == 0 && fn(prob, &got, &err) == 0)
            kl_compare_outputs(&got, &ref, false, &vd);
        else snprintf(vd.why, sizeof vd.why, "%s", err.msg);
        if (vd.status == KL_FAIL) {
            failures++;
            fprintf(log, "FAIL %s %s %s seed %llu rel_l2=%.3g max_abs=%.3g %s\n", module, label, name,
                    (unsigned long long)seed, vd.rel_l2, vd.max_abs, vd.why);
        }
        m->tensor->free(prob);
        kl_outputs_free(&ref);
        kl_outputs_free(&got);
    }
    return failures;
}

int kl_test_stand_in_passes(const char *module, kl_stand_in_fn fn, const char *name, int seeds, FILE *log)
{
    int failures = kl_test_goldens_with(module, fn, name, false, log);
    if (failures < 0) return -1;
    const uint64_t seed = kl_test_seed(log);
    for (int k = 0; k < seeds; k++) failures += kl_test_catalogue_with(module, fn, name, seed + (uint64_t)k, log);
    return failures;
}

double kl_test_round_toward_zero(enum kl_dtype t, double v)
{
    float f = (float)v;
    if (fabsf(f) > fabs(v)) f = nextafterf(f, 0.0f);
    if (t == KL_F32 || !isfinite(f)) return f;
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    if (t == KL_BF16) return kl_bf16_to_f32((uint16_t)(bits >> 16)); /* dropping bits truncates */
    uint16_t h = kl_f32_to_f16(f);
    if (fabsf(kl_f16_to_f32(h)) > fabsf(f)) h--; /* sign and magnitude: one step toward zero */
    return kl_f16_to_f32(h);
}

uint64_t kl_test_seed(FILE *log)
{
    const char *env = getenv("KL_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL);
    fprintf(log, "seed %llu (replay: KL_SEED=%llu)\n", (unsigned long long)seed, (unsigned long long)seed);
    return seed;
}

void kl_test_scaled_part(const struct kl_outputs *want, int64_t scaled, double by, bool *with, bool *without)
{
    const struct kl_out *o = &want->o[0];
    double *got = malloc(sizeof(double) * (size_t)(o->n ? o->n : 1));
    for (int64_t i = 0; i < o->n; i++) got[i] = i < scaled ? o->v[i] * by : o->v[i];
    struct kl_policy p = o->policy;
    struct kl_cmp c;
    kl_compare(got, o->v, o->n, p, &c);
    *with = c.pass;
    p.rel_l2_group = 0;
    kl_compare(got, o->v, o->n, p, &c);
    *without = c.pass;
    free(got);
}
