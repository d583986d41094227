/* The generic checker for tensor modules: golden cases (`kernlab verify`) and the check
 * catalogue (`kernlab check`), both comparing with the policy of lab/core/compare.c. */
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "check.h"
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

/* Appends to a message buffer of cap bytes filled up to *off: whatever the pieces hold, it never
 * writes past the buffer, and once it is full the rest is dropped (snprintf returns the length it
 * would have written, so *off alone could run past cap). */
static void appendf(char *buf, size_t cap, size_t *off, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void appendf(char *buf, size_t cap, size_t *off, const char *fmt, ...)
{
    if (*off >= cap - 1) return;
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(buf + *off, cap - *off, fmt, ap);
    va_end(ap);
    if (n > 0) *off = *off + (size_t)n < cap - 1 ? *off + (size_t)n : cap - 1;
}

/* Compares every output by name; the worst figures and the first mismatches go to verdict. */
static void compare_outputs(const struct kl_outputs *got, const struct kl_outputs *want, bool reference,
                            struct kl_verdict *out)
{
    out->status = KL_PASS;
    size_t off = 0;
    const size_t cap = sizeof out->why;
    for (int i = 0; i < want->count; i++) {
        const struct kl_out *w = &want->o[i], *g = NULL;
        for (int j = 0; j < got->count; j++)
            if (strcmp(got->o[j].name, w->name) == 0) g = &got->o[j];
        if (!g || g->n != w->n) {
            out->status = KL_FAIL;
            appendf(out->why, cap, &off, "%s: %s; ", w->name, g ? "wrong element count" : "not produced");
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
        if (!c.pass) {
            out->status = KL_FAIL;
            appendf(out->why, cap, &off, "%s: %lld elements out of bounds, rel_l2 %.3g (limit %.3g)", w->name,
                    (long long)c.n_bad, c.rel_l2, p.rel_l2);
            if (c.bias_limit > 0) appendf(out->why, cap, &off, ", bias %.3g (limit %.3g)", c.bias, c.bias_limit);
            for (int k = 0; k < c.n_reported && k < 3; k++)
                appendf(out->why, cap, &off, "%s %s[%lld] got %.6g want %.6g", k ? "," : ":", w->name,
                        (long long)c.first[k].index, c.first[k].got, c.first[k].want);
            appendf(out->why, cap, &off, "; ");
        }
    }
}

void kl_verify_case(const struct kl_module *m, const struct kl_case *c, const struct kl_variant *v,
                    struct kl_verdict *out)
{
    memset(out, 0, sizeof *out);
    if (m->verify) return m->verify(c, v, out);
    if (!m->tensor) { /* a module must say how it is checked: a case nobody can judge is not a pass */
        out->status = KL_FAIL;
        out->rel_l2 = out->max_abs = NAN;
        snprintf(out->why, sizeof out->why, "module %s has no checker", m->name);
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
    int rc = !prob ? -1
             : v   ? kl_tensor_run_variant(m->tensor, v, prob, &got, &err)
                   : m->tensor->reference(prob, &got, &err);
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

/* One line per problem: PASS|FAIL|SKIP <module> <label> <impl> rel_l2=... max_abs=... A variant
 * this machine cannot run is one SKIP line, its reason kept in t. */
static int check_one(const struct kl_module *m, const struct kl_variant *v, uint64_t seed, FILE *log,
                     struct kl_check_tally *t)
{
    int failures = 0;
    char why[256];
    if (cannot_run(v, why, sizeof why)) {
        if (!t->why[0]) snprintf(t->why, sizeof t->why, "%s", why);
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
        if (!rc) rc = kl_tensor_run_variant(m->tensor, v, prob, &got, &err);
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

/* A stream that passes every byte on to another and counts the lines of variant runs written
 * through it by their first word, the checkers' one contract (registry.h): PASS and FAIL were
 * judged, SKIP was not; the first SKIP line's text is kept as the reason. Modules' own checkers
 * (radix, allreduce) write through it unchanged, so their runs are counted like the generic ones. */
struct line_counter {
    FILE *to;
    struct kl_check_tally *t;
    char head[5];
    int nhead;    /* characters of the current line seen, up to 5 */
    size_t kept;  /* characters of the current SKIP line kept in t->why, while keeping */
    bool keeping;
};

static ssize_t counter_write(void *cookie, const char *buf, size_t n)
{
    struct line_counter *c = cookie;
    for (size_t i = 0; i < n; i++) {
        if (buf[i] == '\n') {
            c->nhead = 0, c->keeping = false;
        } else if (c->nhead < 5) {
            c->head[c->nhead++] = buf[i];
            if (c->nhead < 5) continue;
            if (memcmp(c->head, "PASS ", 5) == 0 || memcmp(c->head, "FAIL ", 5) == 0) c->t->judged++;
            if (memcmp(c->head, "SKIP ", 5) == 0) {
                c->t->skipped++;
                if (!c->t->why[0]) c->keeping = true, c->kept = 0;
            }
        } else if (c->keeping && c->kept + 1 < sizeof c->t->why) {
            c->t->why[c->kept++] = buf[i];
            c->t->why[c->kept] = 0;
        }
    }
    return fwrite(buf, 1, n, c->to) == n ? (ssize_t)n : -1;
}

void kl_check_run(const struct kl_module *m, const struct kl_variant *v, uint64_t seed, FILE *log,
                  struct kl_check_tally *t)
{
    memset(t, 0, sizeof *t);
    if (!m->check && !m->tensor) {
        t->failures = 1;
        snprintf(t->why, sizeof t->why, "module %s has no checker", m->name);
        fprintf(log, "FAIL %s all %s %s\n", m->name, v ? v->name : "all", t->why);
        return;
    }
    fflush(log);
    struct line_counter lc = {.to = log, .t = t};
    FILE *counted = fopencookie(&lc, "w", (cookie_io_functions_t){.write = counter_write});
    KL_CHECK(counted, "out of memory");
    setvbuf(counted, NULL, _IOLBF, 0); /* each line in order with whatever else writes to log */
    if (m->check) {
        t->failures = m->check(v, seed, counted);
    } else {
        if (!v) t->failures += check_reference(m, seed, log);
        const int n = v ? 1 : kl_variant_count(m->name, false);
        for (int i = 0; i < n; i++) t->failures += check_one(m, v ? v : kl_variant_at(m->name, i, false), seed, counted, t);
    }
    fclose(counted);
    if (t->judged) return;
    char first[256]; /* the first skip's reason, cut to leave room for the sentence around it */
    snprintf(first, sizeof first, "%.255s", t->why);
    if (v) snprintf(t->why, sizeof t->why, "%s/%s could not run here: %s", m->name, v->name, first);
    else if (!t->skipped && !kl_variant_count(m->name, false)) snprintf(t->why, sizeof t->why, "%s has no variant", m->name);
    else snprintf(t->why, sizeof t->why, "no variant of %s could run here (the first: %s)", m->name, first);
}

int kl_check_module(const struct kl_module *m, const struct kl_variant *v, uint64_t seed, FILE *log)
{
    struct kl_check_tally t;
    kl_check_run(m, v, seed, log, &t);
    if (!t.judged) fprintf(log, "nothing checked: %s\n", t.why);
    return t.failures;
}

void kl_compare_outputs(const struct kl_outputs *got, const struct kl_outputs *want, bool reference,
                        struct kl_verdict *out)
{
    memset(out, 0, sizeof *out);
    compare_outputs(got, want, reference, out);
}
