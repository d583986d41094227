/* rmsnorm workloads for `kernlab bench`: Llama-3-8B's hidden size, bf16, decode and prefill
 * batch sizes, plain and fused add. Byte model: every input read once, every output written
 * once. FLOP model: x^2 and its sum (2), the scale x * inv_rms * w (2); fused: +1 add.
 * Re-check: set 0's out (and residual_out) are poisoned before the last timed repetition and
 * compared whole with the float64 reference after it. */
#include <cjson/cJSON.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#include "lab/rmsnorm/rmsnorm_module.h"
#include "perf/bench.h"

enum { FUSED = 1 };

static const struct kl_workload kworkloads[] = {
    {"decode-64", "64 x 4096 bf16", {64, 4096}, 0},
    {"prefill-16k", "16384 x 4096 bf16", {16384, 4096}, 0},
    {"decode-64-add", "64 x 4096 bf16, fused residual add", {64, 4096}, FUSED},
    {"prefill-16k-add", "16384 x 4096 bf16, fused residual add", {16384, 4096}, FUSED},
};

static double bytes(const struct kl_workload *w)
{
    double row = (double)w->shape[0] * (double)w->shape[1] * 2, weight = (double)w->shape[1] * 2;
    return (w->flags & FUSED ? 4 : 2) * row + weight;
}

static double flops(const struct kl_workload *w)
{
    return (w->flags & FUSED ? 5.0 : 4.0) * (double)w->shape[0] * (double)w->shape[1];
}

static size_t set_bytes(const struct kl_workload *w) { return (size_t)bytes(w); }

struct state {
    struct kl_rmsnorm_problem *host; /* set 0's inputs, for the re-check */
    int sets;
    struct kl_rmsnorm_params *k;     /* one device copy per set */
};

static void teardown(void *p)
{
    struct state *s = p;
    if (!s) return;
    for (int i = 0; i < s->sets; i++)
        if (s->k[i].x) kl_tensor_release(&kl_rmsnorm_ops, &s->k[i]);
    kl_rmsnorm_problem_free(s->host);
    free(s->k);
    free(s);
}

static void *setup(const struct kl_workload *w, int sets, uint64_t seed, struct kl_err *err)
{
    struct state *s = calloc(1, sizeof *s);
    s->sets = sets;
    s->k = calloc((size_t)sets, sizeof *s->k);
    s->host = kl_rmsnorm_problem_random(w->shape[0], w->shape[1], KL_BF16, w->flags & FUSED, 1.0,
                                        KL_RMSNORM_DEFAULT_EPS, seed);
    /* Every set holds the same values at different addresses: as cold for the L2 as fresh
     * data, and one host upload instead of `sets`. */
    for (int i = 0; i < sets; i++)
        if (kl_tensor_upload(&kl_rmsnorm_ops, s->host, &s->k[i], err)) {
            teardown(s);
            return NULL;
        }
    return s;
}

static int launch(const struct kl_variant *v, void *p, int set, cudaStream_t stream)
{
    struct state *s = p;
    return (int)((kl_rmsnorm_launch_fn)v->launch)(&s->k[set], stream);
}

static int poison(void *p, cudaStream_t stream)
{
    struct state *s = p;
    const size_t bytes = (size_t)(s->host->num_tokens * s->host->hidden) * kl_dtype_size(KL_BF16);
    int rc = (int)cudaMemsetAsync(s->k[0].out, 0xff, bytes, stream);
    if (!rc && s->k[0].residual_out) rc = (int)cudaMemsetAsync(s->k[0].residual_out, 0xff, bytes, stream);
    return rc;
}

static int check(const struct kl_variant *v, void *p, struct kl_cmp *out, struct kl_recheck *what, struct kl_err *err)
{
    struct state *s = p;
    const struct kl_tensor_ops *ops = kl_module_find("rmsnorm")->tensor;
    struct kl_outputs got = {0}, want = {0};
    int rc = kl_tensor_download(&kl_rmsnorm_ops, s->host, &s->k[0], &got, err);
    if (!rc) rc = ops->reference(s->host, &want, err);
    for (int i = 0; !rc && i < want.count; i++) {
        struct kl_cmp c;
        kl_compare(got.o[i].v, want.o[i].v, want.o[i].n, kl_policy_for(KL_BF16, false), &c);
        if (i == 0) *out = c;
        else kl_cmp_merge(out, &c);
        what->checked += (double)want.o[i].n;
    }
    what->of = what->checked;
    snprintf(what->reason, sizeof what->reason, "%s of input set 0, poisoned before the replay, against the float64 "
             "reference", want.count > 1 ? "out and residual_out" : "out");
    kl_outputs_free(&got);
    kl_outputs_free(&want);
    return rc;
}

static cJSON *params(const struct kl_workload *w)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "num_tokens", (double)w->shape[0]);
    cJSON_AddNumberToObject(o, "hidden", (double)w->shape[1]);
    cJSON_AddStringToObject(o, "dtype", "bf16");
    cJSON_AddBoolToObject(o, "fused_add", w->flags & FUSED);
    return o;
}

const struct kl_perf_ops kl_rmsnorm_perf = {
    .n_workloads = sizeof kworkloads / sizeof kworkloads[0],
    .workloads = kworkloads,
    .metric = KL_METRIC_BW,
    .bytes = bytes,
    .flops = flops,
    .set_bytes = set_bytes,
    .setup = setup,
    .launch = launch,
    .poison = poison,
    .check = check,
    .teardown = teardown,
    .params = params,
};
