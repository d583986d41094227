/* The fused all-reduce + residual add + RMSNorm in the lab: which variants are fused, its check
 * catalogue, and fused problems through a variant's rank group, judged on out and residual_out by
 * the fused bounds of lab/core/compare.c (kl_ar_fused_compare). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lab/allreduce/allreduce_module.h"

bool kl_ar_is_fused(const struct kl_variant *v) { return v && kl_ar_ops(v)->add_rmsnorm != NULL; }

struct kl_ar_problem *kl_ar_fused_problem_new(int world, int64_t tokens, int64_t hidden, enum kl_dtype dtype)
{
    struct kl_ar_problem *p = kl_ar_problem_new(world, tokens * hidden, dtype);
    p->add_rmsnorm = true, p->num_tokens = tokens, p->hidden = hidden, p->eps = 1e-6;
    kl_tensor_alloc(&p->residual, dtype, 2, (int64_t[]){tokens, hidden});
    kl_tensor_alloc(&p->weight, dtype, 1, (int64_t[]){hidden});
    return p;
}

/* The edges of the fused op: decode shapes, hidden sizes off the 16-byte chunk (rows that travel
 * element by element, rows alternating between units and elements), more tokens than a grid has
 * blocks (of narrow rows, and of rows cut over several blocks), a token whose row is all zeros
 * (out = 0 only through eps), in place, and x and out off 16-byte alignment on one rank. */
static const struct fused_edge {
    int64_t tokens, hidden;
    enum kl_dtype dtype;
    bool in_place, zero_row;
    int misaligned;
    const char *what;
} kfused[] = {
    {1, 4096, KL_BF16, false, false, 0, "decode, one token"},
    {64, 4096, KL_BF16, false, false, 0, "decode, 64 tokens"},
    {3, 4100, KL_F16, false, false, 0, "hidden 4100 (odd rows travel element by element)"},
    {5, 4099, KL_BF16, false, false, 0, "hidden 4099 (no row starts on a 16-byte unit but the first)"},
    {2, 7, KL_F32, false, false, 0, "hidden 7 (less than two chunks)"},
    {1, 1, KL_BF16, false, false, 0, "one element"},
    {300, 64, KL_F16, false, false, 0, "300 tokens (more than a grid's blocks)"},
    {2, 16384, KL_BF16, false, false, 0, "hidden 16384 (two chunks a thread)"},
    {200, 8192, KL_BF16, false, false, 0, "200 tokens of hidden 8192 (rows cut over blocks, several rows a block)"},
    {1, 8192, KL_F32, false, false, 0, "hidden 8192 fp32 (two chunks a thread)"},
    {3, 512, KL_BF16, false, true, 0, "a token whose row sums to zero"},
    {4, 4096, KL_BF16, true, false, 0, "in place (out = x, residual_out = residual)"},
    {3, 1000, KL_F16, false, false, 2, "x and out off 16-byte alignment on the last rank"},
};
#define N_FUSED_EDGES ((int)(sizeof kfused / sizeof kfused[0]))
#define N_FUSED_RANDOM 3

struct kl_ar_problem *kl_ar_fused_catalogue(int world, int i, uint64_t seed, char *label, size_t len)
{
    if (i >= N_FUSED_EDGES + N_FUSED_RANDOM) return NULL;
    struct kl_rng rng;
    kl_rng_seed(&rng, seed * 1000033u + (uint64_t)i * 37u + (uint64_t)world);
    struct fused_edge e;
    if (i < N_FUSED_EDGES) {
        e = kfused[i];
    } else {
        static const enum kl_dtype types[3] = {KL_F32, KL_F16, KL_BF16};
        /* One draw per statement: the order of draws inside an initializer is unspecified in C. */
        e.tokens = 1 + kl_rng_range(&rng, 70);
        e.hidden = 1 + kl_rng_range(&rng, 6000);
        e.dtype = types[kl_rng_range(&rng, 3)];
        e.in_place = kl_rng_range(&rng, 4) == 0;
        e.misaligned = kl_rng_range(&rng, 4) == 0 ? 1 + (int)kl_rng_range(&rng, 2) : 0;
        e.zero_row = false;
        e.what = "random";
    }
    snprintf(label, len, "add_rmsnorm %s:world=%d,tokens=%lld,hidden=%lld,%s%s%s", e.what, world, (long long)e.tokens,
             (long long)e.hidden, kl_dtype_name(e.dtype), e.in_place ? ",in_place" : "",
             e.misaligned == 1 ? ",misaligned" : e.misaligned ? ",misaligned_on_last_rank" : "");
    for (char *c = label; *c; c++)
        if (*c == ' ') *c = '_';
    struct kl_ar_problem *p = kl_ar_fused_problem_new(world, e.tokens, e.hidden, e.dtype);
    p->in_place = e.in_place, p->misaligned = e.misaligned;
    const int64_t n = p->n;
    for (int64_t k = 0; k < world * n; k++) kl_store_elem(e.dtype, p->x.data, (size_t)k, kl_rng_normal(&rng));
    for (int64_t k = 0; k < n; k++) kl_store_elem(e.dtype, p->residual.data, (size_t)k, kl_rng_normal(&rng));
    for (int64_t k = 0; k < e.hidden; k++) kl_store_elem(e.dtype, p->weight.data, (size_t)k, 1 + 0.25 * kl_rng_normal(&rng));
    if (e.zero_row) /* token 1: every rank's x and the residual 0, so r = 0 and out = 0 / sqrt(eps) */
        for (int64_t k = 0; k < e.hidden; k++) {
            for (int r = 0; r < world; r++) kl_store_elem(e.dtype, p->x.data, (size_t)(r * n + e.hidden + k), 0.0);
            kl_store_elem(e.dtype, p->residual.data, (size_t)(e.hidden + k), 0.0);
        }
    return p;
}

void kl_ar_run_fused_problems(const struct kl_variant *v, struct kl_ar_problem *const *probs,
                              const struct kl_outputs *const *want, int count, struct kl_verdict *vd)
{
    struct kl_err err = {{0}};
    struct kl_ar_run run;
    size_t bytes = 0;
    for (int k = 0; k < count; k++) {
        memset(&vd[k], 0, sizeof vd[k]);
        vd[k].status = KL_FAIL, vd[k].rel_l2 = vd[k].max_abs = NAN;
        struct kl_ar_job job = {.scenario = KL_AR_ONCE, .dtype = probs[k]->dtype, .n = probs[k]->n, .hidden = probs[k]->hidden};
        bytes += kl_ar_job_bytes(&job, probs[0]->world);
    }
    int rc = kl_ar_run_begin(&run, v, probs[0]->world, bytes, &err);
    for (int k = 0; !rc && k < count; k++) {
        const struct kl_ar_problem *p = probs[k];
        struct kl_ar_job job = {.scenario = KL_AR_ONCE, .dtype = p->dtype, .n = p->n, .in_place = p->in_place,
                                .misaligned = p->misaligned, .hidden = p->hidden, .eps = p->eps};
        if (kl_ar_run_add(&run, &job, p) < 0) rc = kl_fail(&err, "the batch has no room for job %d", k);
    }
    if (!rc) rc = kl_ar_run_go(&run, 300, &err);
    for (int k = 0; k < count; k++) {
        const struct kl_ar_problem *p = probs[k];
        if (rc) {
            snprintf(vd[k].why, sizeof vd[k].why, "%s", err.msg);
            continue;
        }
        if (kl_ar_run_identical(&run, k, vd[k].why, sizeof vd[k].why)) continue;
        struct kl_outputs got = {0}, ref = {0};
        kl_ar_reference(p, &got); /* the shapes; the values are rank 0's */
        kl_ar_run_fused_output(&run, k, 0, got.o[0].v, got.o[1].v);
        if (!want) kl_ar_reference(p, &ref);
        struct kl_cmp co, cr;
        kl_ar_fused_compare(p, &got, want ? want[k] : &ref, want != NULL, &co, &cr);
        if (!cr.pass) kl_ar_verdict_of(&cr, false, "residual_out", &vd[k]);
        else kl_ar_verdict_of(&co, false, "out", &vd[k]);
        if (co.pass && cr.pass) vd[k].rel_l2 = fmax(co.rel_l2, cr.rel_l2), vd[k].max_abs = fmax(co.max_abs, cr.max_abs);
        kl_outputs_free(&got), kl_outputs_free(&ref);
    }
    if (run.b) kl_ar_run_end(&run);
}

int kl_ar_fused_check(const struct kl_variant *v, uint64_t seed, FILE *log)
{
    static const char *const kstatus[] = {"PASS", "FAIL", "SKIP"};
    int failures = 0;
    for (int wi = 0; wi < 4; wi++) {
        const int world = kl_ar_catalogue_worlds[wi];
        struct kl_ar_problem *probs[N_FUSED_EDGES + N_FUSED_RANDOM];
        char labels[N_FUSED_EDGES + N_FUSED_RANDOM][200], why[256];
        struct kl_verdict vd[N_FUSED_EDGES + N_FUSED_RANDOM];
        int count = 0;
        while ((probs[count] = kl_ar_fused_catalogue(world, count, seed, labels[count], sizeof labels[0]))) count++;
        if (kl_ar_skip_reason(v, world, why, sizeof why)) {
            for (int k = 0; k < count; k++) {
                vd[k] = (struct kl_verdict){.status = KL_SKIP, .rel_l2 = NAN, .max_abs = NAN};
                snprintf(vd[k].why, sizeof vd[k].why, "%s", why);
            }
        } else {
            kl_ar_run_fused_problems(v, probs, NULL, count, vd);
        }
        for (int k = 0; k < count; k++) {
            fprintf(log, "%s allreduce %s %s rel_l2=%.3g max_abs=%.3g%s%s\n", kstatus[vd[k].status], labels[k], v->name,
                    vd[k].rel_l2, vd[k].max_abs, vd[k].why[0] ? " " : "", vd[k].why);
            failures += vd[k].status == KL_FAIL;
            kl_ar_problem_free(probs[k]);
        }
    }
    return failures;
}
