/* The generic checker for tensor modules: golden cases (`kernlab verify`) and the check
 * catalogue (`kernlab check`), both comparing with the policy of lab/core/compare.c. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "device.h"
#include "registry.h"

/* Why v cannot run here, or NULL when it can. */
static const char *cannot_run(const struct kl_variant *v, char *why, size_t len)
{
    if (!v || v->min_cc == 0) return NULL;
    int cc = kl_device_cc(why, len);
    if (!cc) return why;
    if (cc < v->min_cc) {
        snprintf(why, len, "needs sm_%d, this device is sm_%d", v->min_cc, cc);
        return why;
    }
    return NULL;
}

/* Compares every output by name; the worst figures and the first mismatches go to verdict. */
static void compare_outputs(const struct kl_outputs *got, const struct kl_outputs *want, bool reference,
                            struct kl_verdict *out)
{
    out->status = KL_PASS;
    size_t off = 0;
    for (int i = 0; i < want->count; i++) {
        const struct kl_out *w = &want->o[i], *g = NULL;
        for (int j = 0; j < got->count; j++)
            if (strcmp(got->o[j].name, w->name) == 0) g = &got->o[j];
        if (!g || g->n != w->n) {
            out->status = KL_FAIL;
            off += (size_t)snprintf(out->why + off, sizeof out->why - off, "%s: %s; ", w->name,
                                    g ? "wrong element count" : "not produced");
            continue;
        }
        /* The reference is float64, held to one float32 rounding of the goldens' <f4 values.
         * A variant is held to its output's own policy where the module gives one. */
        struct kl_policy p = reference      ? kl_policy_reference(w->exact)
                             : g->own_policy ? g->policy
                                             : kl_policy_for(g->dtype, w->exact);
        struct kl_cmp c;
        kl_compare(g->v, w->v, w->n, p, &c);
        if (c.rel_l2 > out->rel_l2 || isnan(c.rel_l2)) out->rel_l2 = c.rel_l2;
        if (c.max_abs > out->max_abs || isnan(c.max_abs)) out->max_abs = c.max_abs;
        if (!c.pass && off < sizeof out->why) {
            out->status = KL_FAIL;
            off += (size_t)snprintf(out->why + off, sizeof out->why - off,
                                    "%s: %lld elements out of bounds, rel_l2 %.3g (limit %.3g)", w->name,
                                    (long long)c.n_bad, c.rel_l2, p.rel_l2);
            if (c.bias_limit > 0 && off < sizeof out->why)
                off += (size_t)snprintf(out->why + off, sizeof out->why - off, ", bias %.3g (limit %.3g)", c.bias,
                                        c.bias_limit);
            for (int k = 0; k < c.n_reported && k < 3 && off < sizeof out->why; k++)
                off += (size_t)snprintf(out->why + off, sizeof out->why - off, "%s %s[%lld] got %.6g want %.6g",
                                        k ? "," : ":", w->name, (long long)c.first[k].index, c.first[k].got,
                                        c.first[k].want);
            if (off < sizeof out->why) off += (size_t)snprintf(out->why + off, sizeof out->why - off, "; ");
        }
    }
}

void kl_verify_case(const struct kl_module *m, const struct kl_case *c, const struct kl_variant *v,
                    struct kl_verdict *out)
{
    memset(out, 0, sizeof *out);
    if (m->verify) return m->verify(c, v, out);
    if (!m->tensor) {
        out->status = KL_SKIP;
        snprintf(out->why, sizeof out->why, "module %s has no checker yet", m->name);
        return;
    }
    char why[256];
    if (cannot_run(v, why, sizeof why)) {
        out->status = KL_SKIP;
        snprintf(out->why, sizeof out->why, "%s", why);
        return;
    }
    struct kl_err err = {{0}};
    struct kl_outputs want = {0}, got = {0};
    void *prob = m->tensor->load(c, &want, &err);
    int rc = prob ? (v ? m->tensor->run(v, prob, &got, &err) : m->tensor->reference(prob, &got, &err)) : -1;
    if (rc > 0) { /* the variant does not handle this dtype or shape: said, not failed */
        out->status = KL_SKIP;
        out->rel_l2 = out->max_abs = NAN;
        snprintf(out->why, sizeof out->why, "%s", err.msg);
    } else if (rc) {
        out->status = KL_FAIL;
        out->rel_l2 = out->max_abs = NAN;
        snprintf(out->why, sizeof out->why, "%s", err.msg);
    } else {
        compare_outputs(&got, &want, v == NULL, out);
    }
    if (prob) m->tensor->free(prob);
    kl_outputs_free(&want);
    kl_outputs_free(&got);
}

/* One line per problem: PASS|FAIL|SKIP <module> <label> <impl> rel_l2=... max_abs=... */
static int check_one(const struct kl_module *m, const struct kl_variant *v, uint64_t seed, FILE *log)
{
    int failures = 0;
    char why[256];
    if (cannot_run(v, why, sizeof why)) {
        fprintf(log, "SKIP %s all %s %s\n", m->name, v->name, why);
        return 0;
    }
    for (int i = 0;; i++) {
        char label[160];
        void *prob = m->tensor->make(i, seed, label, sizeof label);
        if (!prob) break;
        struct kl_err err = {{0}};
        struct kl_outputs ref = {0}, got = {0};
        struct kl_verdict vd = {0};
        int rc = m->tensor->reference(prob, &ref, &err);
        if (!rc) rc = m->tensor->run(v, prob, &got, &err);
        if (rc) {
            vd.status = rc > 0 ? KL_SKIP : KL_FAIL;
            vd.rel_l2 = vd.max_abs = NAN;
            snprintf(vd.why, sizeof vd.why, "%s", err.msg);
        } else {
            compare_outputs(&got, &ref, false, &vd);
        }
        failures += vd.status == KL_FAIL;
        static const char *kstatus[] = {"PASS", "FAIL", "SKIP"};
        fprintf(log, "%s %s %s %s rel_l2=%.3g max_abs=%.3g%s%s\n", kstatus[vd.status], m->name, label, v->name,
                vd.rel_l2, vd.max_abs, vd.status != KL_PASS ? " " : "", vd.status != KL_PASS ? vd.why : "");
        m->tensor->free(prob);
        kl_outputs_free(&ref);
        kl_outputs_free(&got);
    }
    return failures;
}

/* Why a reference output is not a plausible result, or NULL: NaN and +Inf never are. -Inf is
 * (the log of an empty sum: the lse of a request with no keys). */
static const char *implausible(const struct kl_outputs *o, char *why, size_t len)
{
    if (o->count == 0) return snprintf(why, len, "produced no outputs"), why;
    for (int i = 0; i < o->count; i++)
        for (int64_t k = 0; k < o->o[i].n; k++)
            if (isnan(o->o[i].v[k]) || o->o[i].v[k] == INFINITY)
                return snprintf(why, len, "%s[%lld] = %g", o->o[i].name, (long long)k, o->o[i].v[k]), why;
    return NULL;
}

/* The reference on its own, so `kernlab check` checks something on any machine: every golden
 * case of the module (the reference against numpy's float64 outputs), then every catalogue
 * problem (the reference must run and give finite values). One line each. */
static int check_reference(const struct kl_module *m, uint64_t seed, FILE *log)
{
    int failures = 0;
    char dir[1100];
    snprintf(dir, sizeof dir, KL_SOURCE_DIR "/golden/%s", m->name);
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort);
    for (int i = 0; i < n; i++) {
        const char *name = names[i]->d_name;
        char path[1400], label[300];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        snprintf(label, sizeof label, "golden/%s/%s", m->name, name);
        struct stat st;
        struct kl_case c;
        struct kl_err err = {{0}};
        struct kl_verdict vd = {.status = KL_FAIL, .rel_l2 = NAN, .max_abs = NAN};
        if (name[0] == '.' || stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
            free(names[i]);
            continue;
        }
        if (kl_case_open(&c, path, &err) == 0 && strcmp(c.module, m->name) != 0)
            kl_fail(&err, "%s/meta.json: module \"%s\", in the folder of %s", path, c.module, m->name);
        if (err.msg[0]) snprintf(vd.why, sizeof vd.why, "%s", err.msg);
        else kl_verify_case(m, &c, NULL, &vd);
        failures += vd.status == KL_FAIL;
        fprintf(log, "%s %s %s reference rel_l2=%.3g max_abs=%.3g%s%s\n", vd.status == KL_PASS ? "PASS" : "FAIL",
                m->name, label, vd.rel_l2, vd.max_abs, vd.status == KL_FAIL ? " " : "", vd.status == KL_FAIL ? vd.why : "");
        kl_case_close(&c);
        free(names[i]);
    }
    if (n >= 0) free(names);
    for (int i = 0;; i++) {
        char label[160], why[256];
        void *prob = m->tensor->make(i, seed, label, sizeof label);
        if (!prob) break;
        struct kl_err err = {{0}};
        struct kl_outputs ref = {0};
        const char *bad = m->tensor->reference(prob, &ref, &err) ? err.msg : implausible(&ref, why, sizeof why);
        int64_t values = 0;
        for (int k = 0; k < ref.count; k++) values += ref.o[k].n;
        failures += bad != NULL;
        if (bad) fprintf(log, "FAIL %s %s reference %s\n", m->name, label, bad);
        else fprintf(log, "PASS %s %s reference %lld values, all finite\n", m->name, label, (long long)values);
        m->tensor->free(prob);
        kl_outputs_free(&ref);
    }
    return failures;
}

int kl_check_module(const struct kl_module *m, const struct kl_variant *v, uint64_t seed, FILE *log)
{
    if (m->check) return m->check(v, seed, log);
    if (!m->tensor) return 0;
    if (v) return check_one(m, v, seed, log);
    int failures = check_reference(m, seed, log);
    for (int i = 0; i < kl_variant_count(m->name, false); i++)
        failures += check_one(m, kl_variant_at(m->name, i, false), seed, log);
    return failures;
}

void kl_compare_outputs(const struct kl_outputs *got, const struct kl_outputs *want, bool reference,
                        struct kl_verdict *out)
{
    memset(out, 0, sizeof *out);
    compare_outputs(got, want, reference, out);
}
