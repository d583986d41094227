/* The rmsnorm lab module: golden-case loading, the check catalogue, running a variant, and
 * (further down) the perf workloads. Tests, `kernlab verify/check/bench` all come through here. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/rmsnorm/rmsnorm.h"
#include "lab/core/registry.h"
#include "lab/rmsnorm/rmsnorm_module.h"
#include "reference/rmsnorm.h"

void kl_rmsnorm_problem_free(struct kl_rmsnorm_problem *p)
{
    if (!p) return;
    kl_tensor_free(&p->x);
    kl_tensor_free(&p->residual);
    kl_tensor_free(&p->weight);
    free(p);
}

static void free_problem(void *p) { kl_rmsnorm_problem_free(p); }


static void set_outputs(const void *prob, struct kl_outputs *o)
{
    const struct kl_rmsnorm_problem *p = prob;
    int64_t n = p->num_tokens * p->hidden;
    kl_outputs_set(o, 0, "out", p->dtype, false, n);
    if (p->has_residual) kl_outputs_set(o, 1, "residual_out", p->dtype, false, n);
}

static void *load(const struct kl_case *c, struct kl_outputs *expected, struct kl_err *err)
{
    struct kl_rmsnorm_problem *p = calloc(1, sizeof *p);
    struct kl_tensor x = {0}, w = {0}, r = {0}, out = {0}, rout = {0};
    char path[1200];
    double eps;
    p->dtype = c->dtype;
    if (kl_case_param_double(c, "eps", KL_RMSNORM_DEFAULT_EPS, &eps, err)) goto fail;
    p->eps = eps;
    if (!(eps >= 0)) {
        kl_fail(err, "%s/meta.json: param \"eps\" must be >= 0", c->dir);
        goto fail;
    }
    if (c->dtype == KL_I32) {
        kl_fail(err, "%s/meta.json: rmsnorm needs dtype fp32, fp16 or bf16", c->dir);
        goto fail;
    }
    if (kl_case_array(c, "x", &x, false, err) || kl_case_array(c, "weight", &w, false, err)) goto fail;
    int rc = kl_case_array(c, "residual", &r, true, err);
    if (rc < 0) goto fail;
    p->has_residual = rc == 0;
    if (kl_case_array(c, "out", &out, false, err)) goto fail;
    if (p->has_residual && kl_case_array(c, "residual_out", &rout, false, err)) goto fail;

    if (kl_tensor_expect(&x, kl_case_path(c, "x.npy", path, sizeof path), 2, (int64_t[]){-1, -1}, err)) goto fail;
    p->num_tokens = x.dims[0];
    p->hidden = x.dims[1];
    if (p->hidden < 1) {
        kl_fail(err, "%s: hidden must be >= 1", path);
        goto fail;
    }
    int64_t row[2] = {p->num_tokens, p->hidden};
    if (kl_tensor_expect(&w, kl_case_path(c, "weight.npy", path, sizeof path), 1, &p->hidden, err)) goto fail;
    if (kl_tensor_expect(&out, kl_case_path(c, "out.npy", path, sizeof path), 2, row, err)) goto fail;
    if (p->has_residual &&
        (kl_tensor_expect(&r, kl_case_path(c, "residual.npy", path, sizeof path), 2, row, err) ||
         kl_tensor_expect(&rout, kl_case_path(c, "residual_out.npy", path, sizeof path), 2, row, err)))
        goto fail;
    if (kl_tensor_convert_exact(&p->x, &x, p->dtype, kl_case_path(c, "x.npy", path, sizeof path), err) ||
        kl_tensor_convert_exact(&p->weight, &w, p->dtype, kl_case_path(c, "weight.npy", path, sizeof path), err) ||
        (p->has_residual &&
         kl_tensor_convert_exact(&p->residual, &r, p->dtype, kl_case_path(c, "residual.npy", path, sizeof path), err)))
        goto fail;

    set_outputs(p, expected);
    for (int64_t i = 0; i < expected->o[0].n; i++) {
        expected->o[0].v[i] = kl_load_elem(out.dtype, out.data, (size_t)i);
        if (p->has_residual) expected->o[1].v[i] = kl_load_elem(rout.dtype, rout.data, (size_t)i);
    }
    kl_tensor_free(&x), kl_tensor_free(&w), kl_tensor_free(&r), kl_tensor_free(&out), kl_tensor_free(&rout);
    return p;
fail:
    kl_tensor_free(&x), kl_tensor_free(&w), kl_tensor_free(&r), kl_tensor_free(&out), kl_tensor_free(&rout);
    kl_outputs_free(expected);
    kl_rmsnorm_problem_free(p);
    return NULL;
}

struct kl_rmsnorm_problem *kl_rmsnorm_problem_random(int64_t num_tokens, int64_t hidden, enum kl_dtype dtype,
                                                     bool residual, double scale, double eps, uint64_t seed)
{
    struct kl_rmsnorm_problem *p = calloc(1, sizeof *p);
    struct kl_rng rng;
    kl_rng_seed(&rng, seed);
    p->num_tokens = num_tokens;
    p->hidden = hidden;
    p->dtype = dtype;
    p->eps = eps;
    p->has_residual = residual;
    int64_t dims[2] = {num_tokens, hidden};
    kl_tensor_alloc(&p->x, dtype, 2, dims);
    kl_tensor_alloc(&p->weight, dtype, 1, &hidden);
    kl_rng_fill_normal(&rng, &p->x, scale);
    /* Weights around 1 with spread, as trained RMSNorm gains are; never all ones, which would
     * hide a variant that forgets the weight. */
    int64_t nw = kl_numel(&p->weight);
    for (int64_t i = 0; i < nw; i++) kl_store_elem(dtype, p->weight.data, (size_t)i, 1.0 + 0.5 * kl_rng_normal(&rng));
    if (residual) {
        kl_tensor_alloc(&p->residual, dtype, 2, dims);
        kl_rng_fill_normal(&rng, &p->residual, scale);
    }
    return p;
}

/* The check catalogue: edge cases first (one token, odd and long rows, extreme magnitudes,
 * eps that matters, the fused form in every dtype, no tokens at all), then random shapes. */
static const struct edge {
    int64_t num_tokens, hidden;
    enum kl_dtype dtype;
    bool residual;
    double scale, eps;
    const char *what;
} kedges[] = {
    {1, 4096, KL_BF16, false, 1, 1e-6, "one token"},
    {3, 111, KL_BF16, false, 1, 1e-6, "odd hidden"},
    {2, 16384, KL_BF16, false, 1, 1e-6, "long row"},
    {4, 7, KL_F16, false, 1, 1e-6, "hidden 7"},
    {5, 1, KL_F32, false, 1, 1e-6, "hidden 1"},
    {2, 512, KL_BF16, false, 3000, 1e-6, "large magnitude"},
    {2, 256, KL_F32, false, 1e-3, 1e-5, "eps comparable to mean square"},
    {7, 4096, KL_BF16, true, 1, 1e-6, "fused add"},
    {3, 111, KL_F16, true, 1, 1e-6, "fused add, odd hidden"},
    {4, 1024, KL_F32, true, 1, 1e-6, "fused add, fp32"},
    {2, 4100, KL_BF16, true, 1, 1e-6, "fused, row not whole 16-byte vectors"},
    /* v2 and v3 take their many-rows path from 2 rows per SM on (264 on a 132-SM H100); 512 rows
     * reach it on any GPU up to 256 SMs. */
    {512, 4096, KL_BF16, false, 1, 1e-6, "many rows"},
    {512, 4096, KL_BF16, true, 1, 1e-6, "many rows, fused"},
    {0, 4096, KL_BF16, false, 1, 1e-6, "no tokens"},
};
#define N_EDGES ((int)(sizeof kedges / sizeof kedges[0]))
#define N_RANDOM 6

static void *make(int i, uint64_t seed, char *label, size_t len)
{
    if (i >= N_EDGES + N_RANDOM) return NULL;
    struct kl_rng rng;
    kl_rng_seed(&rng, seed * 1000003u + (uint64_t)i);
    struct edge e;
    if (i < N_EDGES) {
        e = kedges[i];
    } else {
        static const enum kl_dtype types[3] = {KL_F32, KL_F16, KL_BF16};
        e = (struct edge){1 + kl_rng_range(&rng, 64), 1 + kl_rng_range(&rng, 9000), types[kl_rng_range(&rng, 3)],
                          kl_rng_range(&rng, 2) == 1, 1, 1e-6, "random"};
    }
    snprintf(label, len, "%s:tokens=%lld,hidden=%lld,%s%s", e.what, (long long)e.num_tokens, (long long)e.hidden,
             kl_dtype_name(e.dtype), e.residual ? ",fused" : "");
    for (char *c = label; *c; c++)
        if (*c == ' ') *c = '_';
    return kl_rmsnorm_problem_random(e.num_tokens, e.hidden, e.dtype, e.residual, e.scale, e.eps,
                                     kl_rng_u64(&rng));
}

static int reference(const void *prob, struct kl_outputs *out, struct kl_err *err)
{
    const struct kl_rmsnorm_problem *p = prob;
    double *x = kl_tensor_to_f64(&p->x), *w = kl_tensor_to_f64(&p->weight);
    double *r = p->has_residual ? kl_tensor_to_f64(&p->residual) : NULL;
    set_outputs(p, out);
    kl_rmsnorm_reference(x, r, w, p->num_tokens, p->hidden, p->eps, out->o[0].v,
                         p->has_residual ? out->o[1].v : NULL);
    free(x), free(w), free(r);
    return 0;
}

/* The device side (lab/core/tensor_ops.c does the work): inputs uploaded, outputs poisoned with
 * 0xFF bytes (NaN in every float type), so an element the kernel never writes fails the comparison;
 * the residual pair only for the fused form (NULL selects plain RMSNorm). */
static void device(const void *prob, void *params, struct kl_dev_buf *b)
{
    const struct kl_rmsnorm_problem *p = prob;
    struct kl_rmsnorm_params *k = params;
    *k = (struct kl_rmsnorm_params){.num_tokens = p->num_tokens, .hidden = p->hidden, .eps = (float)p->eps,
                                    .dtype = p->dtype};
    b[0] = kl_buf_tensor(&p->x, false), b[1] = kl_buf_tensor(&p->weight, false);
    b[2] = kl_buf_fill(kl_nbytes(&p->x), 0xff, false);
    if (p->has_residual) b[3] = kl_buf_tensor(&p->residual, false), b[4] = kl_buf_fill(kl_nbytes(&p->x), 0xff, false);
}

#define B(field) offsetof(struct kl_rmsnorm_params, field)
KL_TENSOR_OPS(kl_rmsnorm_ops, struct kl_rmsnorm_params, kl_rmsnorm_launch_fn, .load = load, .make = make,
              .reference = reference, .free = free_problem, .n_bufs = 5,
              .buf_field = {B(x), B(weight), B(out), B(residual), B(residual_out)},
              .out_field = {B(out), B(residual_out)}, .device = device, .outputs = set_outputs);
#undef B

KL_MODULE(rmsnorm, .summary = "RMSNorm and fused residual add + RMSNorm", .learning_step = 1, .min_cc = 70,
          .tensor = &kl_rmsnorm_ops, .perf = &kl_rmsnorm_perf);
