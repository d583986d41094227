/* The allreduce lab module: golden cases, the check catalogue, the tolerance, and verify/check
 * through rank groups (lab/allreduce/run.c). The reference runs anywhere; a variant runs only
 * with at least `world` GPUs, else every line it would print says SKIP and why. */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "lab/allreduce/allreduce_module.h"
#include "reference/allreduce.h"

/* ---- the tolerance: lab/core/compare.c holds the bound and writes its rationale ---- */

const char *kl_ar_tolerance_rationale(void) { return kl_allreduce_tolerance_text; }

bool kl_ar_exact_inputs(const double *x, int world, int64_t n, enum kl_dtype t)
{
    const double limit = ldexp(1.0, kl_allreduce_exact_bits(t));
    for (int64_t i = 0; i < n; i++) {
        double s = 0;
        for (int r = 0; r < world; r++) {
            const double v = x[r * n + i];
            if (v != floor(v)) return false;
            s += fabs(v);
        }
        if (s > limit) return false;
    }
    return true;
}

void kl_ar_compare(const double *got, const double *want, const double *x, int world, int64_t n, enum kl_dtype t,
                   bool exact, struct kl_cmp *out)
{
    memset(out, 0, sizeof *out);
    double err2 = 0, ref2 = 0, err_ref = 0, s2r2 = 0, sr = 0;
    for (int64_t i = 0; i < n; i++) {
        double ref = x[i], s = fabs(x[i]);
        for (int r = 1; r < world; r++) ref += x[r * n + i], s += fabs(x[r * n + i]);
        const double w = want ? want[i] : ref, g = got[i];
        double d = fabs(g - w);
        bool bad;
        if (!isfinite(g)) bad = true, d = INFINITY;
        else if (exact) bad = g != w || signbit(g) != signbit(w);
        else bad = d > kl_allreduce_bound(world, t, s, want ? fabs(w) : 0);
        if (isfinite(d)) err2 += d * d, ref2 += w * w, err_ref += (g - w) * w, s2r2 += s * s * w * w, sr += s * fabs(w);
        if (d > out->max_abs) out->max_abs = d;
        if (bad) {
            if (out->n_reported < KL_MAX_REPORTED) out->first[out->n_reported++] = (struct kl_mismatch){i, g, w};
            out->n_bad++;
        }
    }
    out->rel_l2 = ref2 > 0 ? sqrt(err2 / ref2) : sqrt(err2);
    if (isinf(out->max_abs)) out->rel_l2 = INFINITY;
    out->pass = out->n_bad == 0;
    if (!exact && world > 1 && ref2 > 0) { /* the bias check (compare.c derives it) */
        out->bias = err_ref / ref2;
        out->bias_limit = kl_allreduce_bias_limit(world, t, want != NULL, s2r2, sr, ref2);
        out->pass = out->pass && fabs(out->bias) <= out->bias_limit;
    }
}

/* The fused case: per token, b_i bounds residual_out's error and b_rms = sqrt(mean b^2) carries
 * it into out (compare.c: kl_allreduce_residual_bound, kl_allreduce_rmsnorm_bound). */
void kl_ar_fused_compare(const struct kl_ar_problem *p, const struct kl_outputs *got, const struct kl_outputs *want,
                         bool want_is_golden, struct kl_cmp *out, struct kl_cmp *residual_out)
{
    const int64_t H = p->hidden, n = p->n;
    double *x = kl_tensor_to_f64(&p->x), *w = kl_tensor_to_f64(&p->weight), *b = malloc(sizeof(double) * (size_t)(H ? H : 1));
    struct kl_cmp *c[2] = {out, residual_out};
    double err2[2] = {0}, ref2[2] = {0};
    memset(out, 0, sizeof *out), memset(residual_out, 0, sizeof *residual_out);
    for (int64_t t = 0; t < p->num_tokens; t++) {
        double b2 = 0, r2 = 0, omax = 0;
        for (int64_t i = 0; i < H; i++) {
            const int64_t e = t * H + i;
            double s = 0;
            for (int r = 0; r < p->world; r++) s += fabs(x[r * n + e]);
            const double ro = want->o[1].v[e];
            b[i] = kl_allreduce_residual_bound(p->world, p->dtype, s, fabs(ro), want_is_golden ? fabs(ro) : 0);
            b2 += b[i] * b[i], r2 += ro * ro, omax = fmax(omax, fabs(want->o[0].v[e]));
        }
        const double b_rms = H ? sqrt(b2 / (double)H) : 0, rho = sqrt((H ? r2 / (double)H : 0) + p->eps);
        for (int64_t i = 0; i < H; i++) {
            const int64_t e = t * H + i;
            for (int k = 0; k < 2; k++) {
                const double g = got->o[k].v[e], want_e = want->o[k].v[e];
                const double bound = k ? b[i] : kl_allreduce_rmsnorm_bound(p->dtype, fabs(want_e), omax, fabs(w[i]), b[i], b_rms, rho);
                double d = isfinite(g) ? fabs(g - want_e) : INFINITY;
                if (isfinite(d)) err2[k] += d * d, ref2[k] += want_e * want_e;
                if (d > c[k]->max_abs) c[k]->max_abs = d;
                if (!(d <= bound)) {
                    if (c[k]->n_reported < KL_MAX_REPORTED) c[k]->first[c[k]->n_reported++] = (struct kl_mismatch){e, g, want_e};
                    c[k]->n_bad++;
                }
            }
        }
    }
    for (int k = 0; k < 2; k++) {
        c[k]->rel_l2 = isinf(c[k]->max_abs) ? INFINITY : ref2[k] > 0 ? sqrt(err2[k] / ref2[k]) : sqrt(err2[k]);
        c[k]->pass = c[k]->n_bad == 0;
    }
    free(x), free(w), free(b);
}

/* ---- problems and the catalogue ---- */

struct kl_ar_problem *kl_ar_problem_new(int world, int64_t n, enum kl_dtype dtype)
{
    struct kl_ar_problem *p = calloc(1, sizeof *p);
    p->world = world, p->n = n, p->dtype = dtype;
    kl_tensor_alloc(&p->x, dtype, 2, (int64_t[]){world, n});
    return p;
}

void kl_ar_problem_free(struct kl_ar_problem *p)
{
    if (!p) return;
    kl_tensor_free(&p->x), kl_tensor_free(&p->residual), kl_tensor_free(&p->weight);
    free(p);
}

enum kind { RANDOM, INTS, ZEROS, LARGE };

/* Inputs of one kind: normal(0, 1); integers whose sums stay exact; integers with columns of
 * signed zeros (all -0: the sum is -0; -0 and +0: +0; v and -v: +0); values near the dtype's
 * largest finite sum (fp16: |S_i| <= 65000 < 65504). */
static void fill(struct kl_ar_problem *p, int kind, struct kl_rng *rng)
{
    const int64_t n = p->n, w = p->world;
    const int64_t R = ((int64_t)1 << kl_allreduce_exact_bits(p->dtype)) / w > 1024 ? 1024 : ((int64_t)1 << kl_allreduce_exact_bits(p->dtype)) / w;
    for (int64_t r = 0; r < w; r++)
        for (int64_t i = 0; i < n; i++) {
            double v;
            if (kind == RANDOM) v = kl_rng_normal(rng);
            else if (kind == LARGE) v = (kl_rng_uniform(rng) * 2 - 1) * 65000.0 / (double)w;
            else v = (double)(kl_rng_range(rng, 2 * R + 1) - R);
            if (kind == ZEROS && i % 4 == 0) v = -0.0;
            if (kind == ZEROS && i % 4 == 1) v = r == 0 ? -0.0 : 0.0;
            if (kind == ZEROS && i % 4 == 2) v = r == 0 ? 17 : r == 1 ? -17 : 0.0;
            kl_store_elem(p->dtype, p->x.data, (size_t)(r * n + i), v);
        }
}

static const struct edge {
    int64_t n;
    enum kl_dtype dtype;
    int kind;
    bool in_place;
    int misaligned;
    const char *what;
} kedges[] = {
    {1, KL_BF16, INTS, false, 0, "one element"},
    {7, KL_F16, RANDOM, false, 0, "7 elements (less than one 16-byte unit)"},
    {8, KL_BF16, RANDOM, false, 0, "exactly one 16-byte unit"},
    {9, KL_F32, RANDOM, false, 0, "two 16-byte units and one element"},
    {4099, KL_BF16, RANDOM, false, 0, "odd size (a tail after the last 16-byte unit)"},
    {4096, KL_BF16, ZEROS, false, 0, "integers and signed zeros, bit for bit"},
    {1001, KL_F16, LARGE, false, 0, "fp16 sums near the largest finite value"},
    {12345, KL_F16, INTS, false, 0, "fp16 integers, odd size"},
    {2049, KL_F32, RANDOM, true, 0, "in place (out = x), odd size"},
    {333, KL_BF16, INTS, true, 0, "in place, integers"},
    {1027, KL_BF16, RANDOM, false, 1, "x and out one element off 16-byte alignment"},
    {2051, KL_F16, RANDOM, false, 2, "one rank's x and out off 16-byte alignment, the others aligned"},
    {65539, KL_BF16, RANDOM, false, 0, "64k + 3 elements"},
};
#define N_EDGES ((int)(sizeof kedges / sizeof kedges[0]))
#define N_RANDOM 3

const int kl_ar_catalogue_worlds[4] = {2, 3, 4, 8};

struct kl_ar_problem *kl_ar_catalogue(int world, int i, uint64_t seed, char *label, size_t len)
{
    if (i >= N_EDGES + N_RANDOM) return NULL;
    struct kl_rng rng;
    kl_rng_seed(&rng, seed * 1000003u + (uint64_t)i * 31u + (uint64_t)world);
    struct edge e;
    if (i < N_EDGES) {
        e = kedges[i];
    } else {
        static const enum kl_dtype types[3] = {KL_F32, KL_F16, KL_BF16};
        /* One draw per statement: the order of draws inside an initializer is unspecified in C. */
        e.n = 1 + kl_rng_range(&rng, 200000);
        e.dtype = types[kl_rng_range(&rng, 3)];
        e.kind = (int)kl_rng_range(&rng, 2);
        e.in_place = kl_rng_range(&rng, 4) == 0;
        e.misaligned = kl_rng_range(&rng, 4) == 0 ? 1 + (int)kl_rng_range(&rng, 2) : 0;
        e.what = "random";
    }
    snprintf(label, len, "%s:world=%d,n=%lld,%s%s%s", e.what, world, (long long)e.n, kl_dtype_name(e.dtype),
             e.in_place ? ",in_place" : "", e.misaligned == 1 ? ",misaligned" : e.misaligned ? ",misaligned_on_last_rank" : "");
    for (char *c = label; *c; c++)
        if (*c == ' ') *c = '_';
    struct kl_ar_problem *p = kl_ar_problem_new(world, e.n, e.dtype);
    p->in_place = e.in_place, p->misaligned = e.misaligned;
    fill(p, e.kind, &rng);
    return p;
}

/* ---- golden cases (tensor ops) ---- */

/* A fused case: x [world, tokens, hidden], residual [tokens, hidden], weight [hidden] -> out,
 * residual_out [tokens, hidden]. */
static void *load_add_rmsnorm(const struct kl_case *c, struct kl_outputs *expected, struct kl_err *err)
{
    static const char *const names[5] = {"x", "residual", "weight", "out", "residual_out"};
    struct kl_tensor a[5] = {{0}};
    char path[1200];
    struct kl_ar_problem *p = NULL;
    long long world = 0, tokens = 0, hidden = 0;
    double eps = 0;
    for (int k = 0; k < 5; k++)
        if (kl_case_array(c, names[k], &a[k], false, err)) goto fail;
    if (kl_tensor_expect(&a[0], kl_case_path(c, "x.npy", path, sizeof path), 3, (int64_t[]){-1, -1, -1}, err)) goto fail;
    if (kl_case_param_int(c, "world", a[0].dims[0], &world, err) || kl_case_param_int(c, "tokens", a[0].dims[1], &tokens, err) ||
        kl_case_param_int(c, "hidden", a[0].dims[2], &hidden, err) || kl_case_param_double(c, "eps", 1e-6, &eps, err))
        goto fail;
    if (world < 1 || world > KL_AR_MAX_RANKS || world != a[0].dims[0] || tokens != a[0].dims[1] || hidden != a[0].dims[2]) {
        kl_fail(err, "%s: shape [%lld, %lld, %lld], but params say world %lld (1..%d), tokens %lld, hidden %lld", path,
                (long long)a[0].dims[0], (long long)a[0].dims[1], (long long)a[0].dims[2], world, KL_AR_MAX_RANKS, tokens, hidden);
        goto fail;
    }
    if (!(eps >= 0)) {
        kl_fail(err, "%s/meta.json: params.eps must be >= 0", c->dir);
        goto fail;
    }
    for (int k = 1; k < 5; k++) {
        char file[32];
        snprintf(file, sizeof file, "%s.npy", names[k]);
        if (kl_tensor_expect(&a[k], kl_case_path(c, file, path, sizeof path), k == 2 ? 1 : 2,
                             k == 2 ? (int64_t[]){hidden} : (int64_t[]){tokens, hidden}, err))
            goto fail;
    }
    p = calloc(1, sizeof *p);
    p->world = (int)world, p->n = tokens * hidden, p->dtype = c->dtype;
    p->add_rmsnorm = true, p->num_tokens = tokens, p->hidden = hidden, p->eps = eps;
    struct kl_tensor *dst[3] = {&p->x, &p->residual, &p->weight};
    for (int k = 0; k < 3; k++)
        if (kl_tensor_convert_exact(dst[k], &a[k], c->dtype, kl_case_path(c, k ? (k == 1 ? "residual.npy" : "weight.npy") : "x.npy", path, sizeof path), err))
            goto fail;
    for (int k = 0; k < 2; k++) {
        kl_outputs_set(expected, k, names[3 + k], c->dtype, false, p->n);
        for (int64_t i = 0; i < p->n; i++) expected->o[k].v[i] = kl_load_elem(a[3 + k].dtype, a[3 + k].data, (size_t)i);
    }
    for (int k = 0; k < 5; k++) kl_tensor_free(&a[k]);
    return p;
fail:
    for (int k = 0; k < 5; k++) kl_tensor_free(&a[k]);
    kl_outputs_free(expected);
    kl_ar_problem_free(p);
    return NULL;
}

static void *load(const struct kl_case *c, struct kl_outputs *expected, struct kl_err *err)
{
    struct kl_tensor x = {0}, out = {0};
    char path[1200];
    struct kl_ar_problem *p = NULL;
    long long world = 0;
    if (c->dtype != KL_F32 && c->dtype != KL_F16 && c->dtype != KL_BF16) {
        kl_fail(err, "%s/meta.json: allreduce needs dtype fp32, fp16 or bf16", c->dir);
        goto fail;
    }
    const cJSON *op = c->params ? cJSON_GetObjectItemCaseSensitive(c->params, "op") : NULL;
    if (op && !(cJSON_IsString(op) && !strcmp(op->valuestring, "add_rmsnorm"))) {
        kl_fail(err, "%s/meta.json: params.op must be \"add_rmsnorm\" (or absent: the plain all-reduce)", c->dir);
        goto fail;
    }
    if (op) return load_add_rmsnorm(c, expected, err);
    if (kl_case_array(c, "x", &x, false, err) || kl_case_array(c, "out", &out, false, err)) goto fail;
    if (kl_tensor_expect(&x, kl_case_path(c, "x.npy", path, sizeof path), 2, (int64_t[]){-1, -1}, err)) goto fail;
    if (kl_case_param_int(c, "world", x.dims[0], &world, err)) goto fail;
    if (world < 1 || world > KL_AR_MAX_RANKS || world != x.dims[0]) {
        kl_fail(err, "%s: %lld rows, but params.world is %lld (1..%d)", path, (long long)x.dims[0], world, KL_AR_MAX_RANKS);
        goto fail;
    }
    if (kl_tensor_expect(&out, kl_case_path(c, "out.npy", path, sizeof path), 1, &x.dims[1], err)) goto fail;
    p = calloc(1, sizeof *p);
    p->world = (int)world, p->n = x.dims[1], p->dtype = c->dtype;
    if (kl_tensor_convert_exact(&p->x, &x, c->dtype, kl_case_path(c, "x.npy", path, sizeof path), err)) goto fail;
    kl_outputs_set(expected, 0, "out", c->dtype, false, p->n);
    double *xd = kl_tensor_to_f64(&p->x);
    expected->o[0].exact = kl_ar_exact_inputs(xd, p->world, p->n, p->dtype);
    free(xd);
    for (int64_t i = 0; i < p->n; i++) expected->o[0].v[i] = kl_load_elem(out.dtype, out.data, (size_t)i);
    kl_tensor_free(&x), kl_tensor_free(&out);
    return p;
fail:
    kl_tensor_free(&x), kl_tensor_free(&out);
    kl_outputs_free(expected);
    kl_ar_problem_free(p);
    return NULL;
}

static void *make(int i, uint64_t seed, char *label, size_t len)
{
    const int per = N_EDGES + N_RANDOM;
    if (i >= 4 * per) return NULL;
    return kl_ar_catalogue(kl_ar_catalogue_worlds[i / per], i % per, seed, label, len);
}

void kl_ar_reference(const struct kl_ar_problem *p, struct kl_outputs *out)
{
    double *x = kl_tensor_to_f64(&p->x);
    kl_outputs_set(out, 0, "out", p->dtype, false, p->n);
    if (p->add_rmsnorm) {
        double *res = kl_tensor_to_f64(&p->residual), *w = kl_tensor_to_f64(&p->weight);
        kl_outputs_set(out, 1, "residual_out", p->dtype, false, p->n);
        kl_allreduce_add_rmsnorm_reference(x, p->world, res, w, p->num_tokens, p->hidden, p->eps, out->o[0].v,
                                           out->o[1].v);
        free(res), free(w);
    } else {
        kl_allreduce_reference(x, p->world, p->n, out->o[0].v);
    }
    free(x);
}

static int reference(const void *prob, struct kl_outputs *out, struct kl_err *err)
{
    (void)err;
    kl_ar_reference(prob, out);
    return 0;
}

static void free_problem(void *p) { kl_ar_problem_free(p); }

/* ---- running variants ---- */

/* The longest a rank may stay at one step of a verify or check run before it counts as hung. The
 * kernels' own barrier waits give up sooner (run.c: 120 s) and the ranks' host barriers at 0.8 of
 * this: every wait guards a real hang only, with minutes to spare on a loaded machine. */
#define KL_AR_STEP_TIMEOUT_S 300

const char *kl_ar_skip_reason(const struct kl_variant *v, int world, char *buf, size_t len)
{
    const struct kl_ar_topology *m = kl_ar_machine();
    if (m->count == 0) return snprintf(buf, len, "needs %d GPUs: %s", world, m->why), buf;
    if (kl_ar_shared_device()) {
        if (world > m->count)
            return snprintf(buf, len, "needs %d GPUs (shared-device mode runs worlds up to %d on one)", world, m->count), buf;
        if (v && (kl_ar_ops(v)->needs & KL_AR_NEEDS_NCCL))
            return snprintf(buf, len, "uses NCCL, which takes one GPU per rank (shared-device mode)"), buf;
    }
    if (m->count < world) return snprintf(buf, len, "needs %d GPUs, this machine has %d", world, m->count), buf;
    for (int d = 0; v && d < world; d++)
        if (m->dev[d].cc < v->min_cc) return snprintf(buf, len, "needs sm_%d, GPU %d is sm_%d", v->min_cc, d, m->dev[d].cc), buf;
    return NULL;
}

void kl_ar_verdict_of(const struct kl_cmp *c, bool exact, const char *output, struct kl_verdict *vd)
{
    vd->status = c->pass ? KL_PASS : KL_FAIL;
    vd->rel_l2 = c->rel_l2, vd->max_abs = c->max_abs;
    if (c->pass) return;
    size_t off = (size_t)snprintf(vd->why, sizeof vd->why, "%s: %lld elements %s", output, (long long)c->n_bad,
                                  exact ? "not bit-exact (integer inputs)" : "out of bounds");
    for (int k = 0; k < c->n_reported && k < 3 && off < sizeof vd->why; k++)
        off += (size_t)snprintf(vd->why + off, sizeof vd->why - off, "%s %s[%lld] got %.9g want %.9g", k ? "," : ":",
                                output, (long long)c->first[k].index, c->first[k].got, c->first[k].want);
    if (c->bias_limit > 0 && off < sizeof vd->why)
        snprintf(vd->why + off, sizeof vd->why - off, "; bias %.3g (limit %.3g)", c->bias, c->bias_limit);
}

void kl_ar_run_problems(const struct kl_variant *v, struct kl_ar_problem *const *probs, const double *const *want,
                        int count, struct kl_verdict *vd)
{
    struct kl_err err = {{0}};
    struct kl_ar_run run;
    size_t bytes = 0;
    for (int k = 0; k < count; k++) {
        memset(&vd[k], 0, sizeof vd[k]);
        vd[k].status = KL_FAIL, vd[k].rel_l2 = vd[k].max_abs = NAN;
        struct kl_ar_job job = {.scenario = KL_AR_ONCE, .dtype = probs[k]->dtype, .n = probs[k]->n};
        bytes += kl_ar_job_bytes(&job, probs[0]->world);
    }
    int rc = kl_ar_run_begin(&run, v, probs[0]->world, bytes, &err);
    for (int k = 0; !rc && k < count; k++) {
        const struct kl_ar_problem *p = probs[k];
        struct kl_ar_job job = {.scenario = KL_AR_ONCE, .dtype = p->dtype, .n = p->n, .in_place = p->in_place,
                                .misaligned = p->misaligned};
        if (kl_ar_run_add(&run, &job, p) < 0) rc = kl_fail(&err, "the batch has no room for job %d", k);
    }
    if (!rc) rc = kl_ar_run_go(&run, KL_AR_STEP_TIMEOUT_S, &err);
    for (int k = 0; k < count; k++) {
        const struct kl_ar_problem *p = probs[k];
        if (rc) {
            snprintf(vd[k].why, sizeof vd[k].why, "%s", err.msg);
            continue;
        }
        if (run.b->job[k].skipped) {
            vd[k].status = KL_SKIP;
            snprintf(vd[k].why, sizeof vd[k].why, "%s", KL_AR_WINDOW_ALIGNED);
            continue;
        }
        if (kl_ar_run_identical(&run, k, vd[k].why, sizeof vd[k].why)) continue;
        double *got = malloc(sizeof(double) * (size_t)(p->n ? p->n : 1)), *x = kl_tensor_to_f64(&p->x);
        kl_ar_run_output(&run, k, 0, got);
        const bool exact = kl_ar_exact_inputs(x, p->world, p->n, p->dtype);
        struct kl_cmp c;
        kl_ar_compare(got, want ? want[k] : NULL, x, p->world, p->n, p->dtype, exact, &c);
        kl_ar_verdict_of(&c, exact, "out", &vd[k]);
        free(got), free(x);
    }
    if (run.b) kl_ar_run_end(&run);
}

static void ar_verify(const struct kl_case *c, const struct kl_variant *v, struct kl_verdict *out)
{
    struct kl_err err = {{0}};
    struct kl_outputs want = {0};
    memset(out, 0, sizeof *out);
    struct kl_ar_problem *p = load(c, &want, &err);
    if (!p) {
        out->status = KL_FAIL, out->rel_l2 = out->max_abs = NAN;
        snprintf(out->why, sizeof out->why, "%s", err.msg);
        return;
    }
    char why[256];
    if (p->add_rmsnorm && !v) { /* both outputs, under the reference's policy */
        struct kl_outputs got = {0};
        kl_ar_reference(p, &got);
        kl_compare_outputs(&got, &want, true, out);
        kl_outputs_free(&got);
    } else if (v && p->add_rmsnorm != kl_ar_is_fused(v)) {
        out->status = KL_SKIP, out->rel_l2 = out->max_abs = NAN;
        snprintf(out->why, sizeof out->why, "%s", p->add_rmsnorm ? KL_AR_NOT_FUSED : KL_AR_ONLY_FUSED);
    } else if (!v) { /* the reference, against the stored float32 outputs */
        struct kl_outputs got = {0};
        reference(p, &got, &err);
        struct kl_cmp cmp;
        kl_compare(got.o[0].v, want.o[0].v, p->n, kl_policy_reference(want.o[0].exact), &cmp);
        kl_ar_verdict_of(&cmp, false, "out", out);
        kl_outputs_free(&got);
    } else if (kl_ar_skip_reason(v, p->world, why, sizeof why)) {
        out->status = KL_SKIP, out->rel_l2 = out->max_abs = NAN;
        snprintf(out->why, sizeof out->why, "%s", why);
    } else if (p->add_rmsnorm) {
        const struct kl_outputs *w = &want;
        kl_ar_run_fused_problems(v, &p, &w, 1, out);
    } else {
        const double *w = want.o[0].v;
        kl_ar_run_problems(v, &p, &w, 1, out);
    }
    kl_outputs_free(&want);
    kl_ar_problem_free(p);
}

static void print_line(FILE *log, const struct kl_verdict *vd, const char *label, const char *impl)
{
    static const char *kstatus[] = {"PASS", "FAIL", "SKIP"};
    fprintf(log, "%s allreduce %s %s rel_l2=%.3g max_abs=%.3g%s%s\n", kstatus[vd->status], label, impl, vd->rel_l2,
            vd->max_abs, vd->why[0] ? " " : "", vd->why);
}

/* The catalogue of every world, one rank group per world; worlds beyond this machine SKIP. */
static int check_variant(const struct kl_variant *v, uint64_t seed, FILE *log)
{
    int failures = 0;
    for (int wi = 0; wi < 4; wi++) {
        const int world = kl_ar_catalogue_worlds[wi];
        struct kl_ar_problem *probs[N_EDGES + N_RANDOM];
        char labels[N_EDGES + N_RANDOM][160], why[256];
        int count = 0;
        while ((probs[count] = kl_ar_catalogue(world, count, seed, labels[count], sizeof labels[0]))) count++;
        struct kl_verdict vd[N_EDGES + N_RANDOM];
        if (kl_ar_skip_reason(v, world, why, sizeof why)) {
            for (int k = 0; k < count; k++) {
                vd[k] = (struct kl_verdict){.status = KL_SKIP, .rel_l2 = NAN, .max_abs = NAN};
                snprintf(vd[k].why, sizeof vd[k].why, "%s", why);
            }
        } else {
            kl_ar_run_problems(v, probs, NULL, count, vd);
        }
        for (int k = 0; k < count; k++) {
            print_line(log, &vd[k], labels[k], v->name);
            failures += vd[k].status == KL_FAIL;
            kl_ar_problem_free(probs[k]);
        }
    }
    return failures;
}

static int ar_check(const struct kl_variant *v, uint64_t seed, FILE *log)
{
    if (v) return kl_ar_is_fused(v) ? kl_ar_fused_check(v, seed, log) : check_variant(v, seed, log);
    int failures = 0;
    for (int i = 0; i < kl_variant_count("allreduce", false); i++) {
        const struct kl_variant *u = kl_variant_at("allreduce", i, false);
        failures += kl_ar_is_fused(u) ? kl_ar_fused_check(u, seed, log) : check_variant(u, seed, log);
    }
    return failures;
}

int kl_ar_goldens(const struct kl_variant *v, FILE *log, int *skipped)
{
    char dir[1024];
    snprintf(dir, sizeof dir, KL_SOURCE_DIR "/golden/allreduce");
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort), cases = 0, failures = 0;
    if (n < 0) return -1;
    *skipped = 0;
    struct kl_ar_problem **probs = calloc((size_t)n, sizeof *probs);
    struct kl_outputs *wants = calloc((size_t)n, sizeof *wants);
    char (*case_names)[128] = calloc((size_t)n, sizeof *case_names);
    for (int i = 0; i < n; i++) {
        char path[1300];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
        if (names[i]->d_name[0] != '.') {
            struct kl_case c;
            struct kl_err err = {{0}};
            if (kl_case_open(&c, path, &err) == 0) {
                probs[cases] = load(&c, &wants[cases], &err);
                kl_case_close(&c);
            }
            snprintf(case_names[cases], sizeof case_names[0], "%.127s", names[i]->d_name);
            if (probs[cases] && probs[cases]->add_rmsnorm != kl_ar_is_fused(v)) {
                fprintf(log, "SKIP %s %s %s\n", names[i]->d_name, v->name,
                        probs[cases]->add_rmsnorm ? KL_AR_NOT_FUSED : KL_AR_ONLY_FUSED),
                    (*skipped)++;
                kl_ar_problem_free(probs[cases]), kl_outputs_free(&wants[cases]), probs[cases] = NULL;
            } else if (!probs[cases]) fprintf(log, "FAIL %s %s %s\n", names[i]->d_name, v->name, err.msg), failures++;
            cases++;
        }
        free(names[i]);
    }
    free(names);
    /* One rank group per world: every case of that world in one batch. */
    for (int w = 1; w <= KL_AR_MAX_RANKS; w++) {
        struct kl_ar_problem *group[64];
        const double *want[64];
        const struct kl_outputs *wantf[64];
        int idx[64], count = 0;
        for (int k = 0; k < cases && count < 64; k++)
            if (probs[k] && probs[k]->world == w)
                group[count] = probs[k], want[count] = wants[k].o[0].v, wantf[count] = &wants[k], idx[count++] = k;
        if (!count) continue;
        struct kl_verdict vd[64];
        char why[256];
        if (kl_ar_skip_reason(v, w, why, sizeof why)) {
            for (int k = 0; k < count; k++) fprintf(log, "SKIP %s %s %s\n", case_names[idx[k]], v->name, why);
            *skipped += count;
            continue;
        }
        if (kl_ar_is_fused(v)) kl_ar_run_fused_problems(v, group, wantf, count, vd);
        else kl_ar_run_problems(v, group, want, count, vd);
        for (int k = 0; k < count; k++) {
            fprintf(log, "%s %s %s rel_l2=%.3g max_abs=%.3g %s\n", vd[k].status == KL_PASS ? "PASS" : "FAIL",
                    case_names[idx[k]], v->name, vd[k].rel_l2, vd[k].max_abs, vd[k].why);
            failures += vd[k].status != KL_PASS;
        }
    }
    for (int k = 0; k < cases; k++) kl_ar_problem_free(probs[k]), kl_outputs_free(&wants[k]);
    free(probs), free(wants), free(case_names);
    return cases ? failures : -1;
}

/* One problem through v (tensor ops' run): rank 0's output, once every rank holds the same bits. */
static int run_one(const struct kl_variant *v, const void *prob, struct kl_outputs *out, struct kl_err *err)
{
    const struct kl_ar_problem *p = prob;
    char why[768];
    if (p->add_rmsnorm != kl_ar_is_fused(v))
        return kl_fail(err, "%s: %s", v->name, p->add_rmsnorm ? KL_AR_NOT_FUSED : KL_AR_ONLY_FUSED);
    if (p->add_rmsnorm) /* two outputs under bounds of their own: ar_verify and ar_check judge them */
        return kl_fail(err, "%s: fused cases run through kernlab verify and check (kl_ar_run_fused_problems)", v->name);
    if (kl_ar_skip_reason(v, p->world, why, sizeof why)) return kl_fail(err, "%s", why);
    struct kl_ar_run run;
    struct kl_ar_job job = {.scenario = KL_AR_ONCE, .dtype = p->dtype, .n = p->n, .in_place = p->in_place,
                            .misaligned = p->misaligned};
    if (kl_ar_run_begin(&run, v, p->world, kl_ar_job_bytes(&job, p->world), err)) return -1;
    int rc = kl_ar_run_add(&run, &job, p) < 0 ? kl_fail(err, "no room for the job")
                                               : kl_ar_run_go(&run, KL_AR_STEP_TIMEOUT_S, err);
    if (!rc && run.b->job[0].skipped) rc = kl_fail(err, "%s: %s", v->name, KL_AR_WINDOW_ALIGNED);
    if (!rc && kl_ar_run_identical(&run, 0, why, sizeof why)) rc = kl_fail(err, "%s", why);
    if (!rc) {
        kl_outputs_set(out, 0, "out", p->dtype, false, p->n);
        kl_ar_run_output(&run, 0, 0, out->o[0].v);
    }
    kl_ar_run_end(&run);
    return rc;
}

static const struct kl_tensor_ops ops = {.load = load, .make = make, .reference = reference, .run = run_one,
                                        .free = free_problem};

KL_MODULE(allreduce, .summary = "sum across GPUs (tensor-parallel all-reduce): NCCL, one-shot and two-shot over NVLink",
          .learning_step = 8, .min_cc = 70, .tensor = &ops, .verify = ar_verify, .check = ar_check,
          .bench = kl_ar_bench, .guide = &kl_allreduce_guide);
