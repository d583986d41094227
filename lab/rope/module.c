/* The rope lab module: golden-case loading, the check catalogue, running a variant. Tests,
 * `kernlab verify/check/bench` all come through here; the perf workloads are in perf.c. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/rope/rope.h"
#include "lab/core/registry.h"
#include "lab/rope/rope_module.h"
#include "reference/rope.h"

void kl_rope_problem_free(struct kl_rope_problem *p)
{
    if (!p) return;
    kl_tensor_free(&p->q), kl_tensor_free(&p->k), kl_tensor_free(&p->positions), kl_tensor_free(&p->cos_sin_cache);
    free(p);
}

static void free_problem(void *p) { kl_rope_problem_free(p); }


static void set_outputs(const void *prob, struct kl_outputs *o)
{
    const struct kl_rope_problem *p = prob;
    kl_outputs_set(o, 0, "q_out", p->dtype, false, kl_numel(&p->q));
    kl_outputs_set(o, 1, "k_out", p->dtype, false, kl_numel(&p->k));
}

static void *load(const struct kl_case *c, struct kl_outputs *expected, struct kl_err *err)
{
    struct kl_rope_problem *p = calloc(1, sizeof *p);
    struct kl_tensor q = {0}, k = {0}, cs = {0}, qo = {0}, ko = {0};
    char path[1200];
    long long rotary_dim;
    p->dtype = c->dtype;
    if (c->dtype != KL_F32 && c->dtype != KL_F16 && c->dtype != KL_BF16) {
        kl_fail(err, "%s/meta.json: rope needs dtype fp32, fp16 or bf16", c->dir);
        goto fail;
    }
    if (kl_case_param_bool(c, "is_neox", true, &p->is_neox, err)) goto fail;
    if (kl_case_array(c, "q", &q, false, err) || kl_case_array(c, "k", &k, false, err) ||
        kl_case_array(c, "positions", &p->positions, false, err) ||
        kl_case_array(c, "cos_sin_cache", &cs, false, err) || kl_case_array(c, "q_out", &qo, false, err) ||
        kl_case_array(c, "k_out", &ko, false, err))
        goto fail;
    if (kl_tensor_expect(&q, kl_case_path(c, "q.npy", path, sizeof path), 3, (int64_t[]){-1, -1, -1}, err)) goto fail;
    p->num_tokens = q.dims[0], p->num_q_heads = q.dims[1], p->head_dim = q.dims[2];
    if (kl_tensor_expect(&k, kl_case_path(c, "k.npy", path, sizeof path), 3,
                         (int64_t[]){p->num_tokens, -1, p->head_dim}, err))
        goto fail;
    p->num_kv_heads = k.dims[1];
    if (kl_tensor_expect(&cs, kl_case_path(c, "cos_sin_cache.npy", path, sizeof path), 2, (int64_t[]){-1, -1}, err))
        goto fail;
    if (cs.dtype != KL_F32) {
        kl_fail(err, "%s: dtype %s, expected <f4", path, kl_dtype_name(cs.dtype));
        goto fail;
    }
    p->max_pos = cs.dims[0];
    if (kl_case_param_int(c, "rotary_dim", cs.dims[1], &rotary_dim, err)) goto fail;
    p->rotary_dim = rotary_dim;
    if (p->rotary_dim != cs.dims[1] || p->rotary_dim < 2 || p->rotary_dim % 2 || p->rotary_dim > p->head_dim ||
        p->num_q_heads < 1 || p->max_pos < 1) {
        kl_fail(err, "%s: shape [%lld, %lld] does not fit rotary_dim %lld (even, 2..head_dim %lld), q heads %lld", path,
                (long long)cs.dims[0], (long long)cs.dims[1], (long long)p->rotary_dim, (long long)p->head_dim,
                (long long)p->num_q_heads);
        goto fail;
    }
    kl_case_path(c, "positions.npy", path, sizeof path);
    if (p->positions.dtype != KL_I64) {
        kl_fail(err, "%s: dtype %s, expected <i8", path, kl_dtype_name(p->positions.dtype));
        goto fail;
    }
    if (kl_tensor_expect(&p->positions, path, 1, &p->num_tokens, err)) goto fail;
    for (int64_t t = 0; t < p->num_tokens; t++) {
        int64_t pos = ((const int64_t *)p->positions.data)[t];
        if (pos < 0 || pos >= p->max_pos) {
            kl_fail(err, "%s: positions[%lld] = %lld is outside [0, %lld)", path, (long long)t, (long long)pos,
                    (long long)p->max_pos);
            goto fail;
        }
    }
    if (kl_tensor_expect(&qo, kl_case_path(c, "q_out.npy", path, sizeof path), 3, q.dims, err) ||
        kl_tensor_expect(&ko, kl_case_path(c, "k_out.npy", path, sizeof path), 3, k.dims, err))
        goto fail;
    if (kl_tensor_convert_exact(&p->q, &q, p->dtype, kl_case_path(c, "q.npy", path, sizeof path), err) ||
        kl_tensor_convert_exact(&p->k, &k, p->dtype, kl_case_path(c, "k.npy", path, sizeof path), err))
        goto fail;
    p->cos_sin_cache = cs;
    cs = (struct kl_tensor){0};

    set_outputs(p, expected);
    for (int64_t i = 0; i < expected->o[0].n; i++) expected->o[0].v[i] = kl_load_elem(qo.dtype, qo.data, (size_t)i);
    for (int64_t i = 0; i < expected->o[1].n; i++) expected->o[1].v[i] = kl_load_elem(ko.dtype, ko.data, (size_t)i);
    kl_tensor_free(&q), kl_tensor_free(&k), kl_tensor_free(&qo), kl_tensor_free(&ko);
    return p;
fail:
    kl_tensor_free(&q), kl_tensor_free(&k), kl_tensor_free(&cs), kl_tensor_free(&qo), kl_tensor_free(&ko);
    kl_outputs_free(expected);
    kl_rope_problem_free(p);
    return NULL;
}

struct kl_rope_problem *kl_rope_problem_random(int64_t num_tokens, int64_t num_q_heads, int64_t num_kv_heads,
                                               int64_t head_dim, int64_t rotary_dim, int64_t max_pos, bool is_neox,
                                               enum kl_dtype dtype, uint64_t seed)
{
    struct kl_rope_problem *p = calloc(1, sizeof *p);
    struct kl_rng rng;
    kl_rng_seed(&rng, seed);
    *p = (struct kl_rope_problem){.num_tokens = num_tokens, .num_q_heads = num_q_heads, .num_kv_heads = num_kv_heads,
                                  .head_dim = head_dim, .rotary_dim = rotary_dim, .max_pos = max_pos,
                                  .is_neox = is_neox, .dtype = dtype};
    kl_tensor_alloc(&p->q, dtype, 3, (int64_t[]){num_tokens, num_q_heads, head_dim});
    kl_tensor_alloc(&p->k, dtype, 3, (int64_t[]){num_tokens, num_kv_heads, head_dim});
    kl_tensor_alloc(&p->positions, KL_I64, 1, &num_tokens);
    kl_tensor_alloc(&p->cos_sin_cache, KL_F32, 2, (int64_t[]){max_pos, rotary_dim});
    kl_rng_fill_normal(&rng, &p->q, 1.0), kl_rng_fill_normal(&rng, &p->k, 1.0);
    int64_t *pos = p->positions.data;
    for (int64_t t = 0; t < num_tokens; t++) pos[t] = kl_rng_range(&rng, max_pos);
    if (num_tokens > 0) pos[0] = max_pos - 1;
    if (num_tokens > 1) pos[1] = 0;
    kl_rope_cos_sin_cache(p->cos_sin_cache.data, max_pos, rotary_dim, KL_ROPE_BASE);
    return p;
}

/* The check catalogue: edge cases first, then random shapes. */
static const struct edge {
    int64_t num_tokens, q_heads, kv_heads, head_dim, rotary_dim, max_pos;
    bool is_neox;
    enum kl_dtype dtype;
    const char *what;
} kedges[] = {
    {1, 32, 8, 128, 128, 4096, true, KL_BF16, "one token"},
    {64, 32, 8, 128, 128, 8192, true, KL_BF16, "decode batch, neox"},
    {64, 32, 8, 128, 128, 8192, false, KL_BF16, "decode batch, interleaved"},
    /* Many tokens: v5 hands Llama's heads over to v4 from sms x 1024 / 320 tokens on (422 on a
     * 132-SM H100), and v4's groups walk several tokens each, prefetching the next one's cos/sin,
     * once there are more tokens than resident groups (at most 12 a SM of 160 threads: 1584). */
    {512, 32, 8, 128, 128, 8192, true, KL_BF16, "512 tokens"},
    {2048, 32, 8, 128, 128, 8192, false, KL_BF16, "2048 tokens, interleaved"},
    {20, 8, 8, 128, 64, 2048, true, KL_BF16, "partial rotary, neox (GQA 1)"},
    {20, 8, 2, 128, 64, 2048, false, KL_BF16, "partial rotary, interleaved (GQA 4)"},
    {15, 16, 2, 64, 64, 1024, true, KL_F16, "head_dim 64 (GQA 8)"},
    {10, 4, 1, 256, 256, 1024, false, KL_BF16, "head_dim 256"},
    {12, 4, 2, 80, 80, 512, true, KL_BF16, "head_dim 80"},
    {9, 3, 1, 64, 24, 300, true, KL_BF16, "rotary_dim 24: halves not whole vectors"},
    {9, 3, 1, 66, 30, 300, false, KL_F16, "head_dim 66, rotary_dim 30, interleaved"},
    {7, 2, 2, 33, 16, 50, false, KL_F32, "odd head_dim 33"},
    {30, 4, 0, 128, 128, 1000, true, KL_F32, "no kv heads, fp32"},
    {2, 1, 1, 8, 8, 1, true, KL_BF16, "max_pos 1: every position 0"},
    {0, 32, 8, 128, 128, 4096, true, KL_BF16, "no tokens"},
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
        static const int64_t dims[4] = {64, 80, 128, 256};
        const int64_t kv = 1 + kl_rng_range(&rng, 8), d = dims[kl_rng_range(&rng, 4)];
        e = (struct edge){1 + kl_rng_range(&rng, 200), kv * (1 + kl_rng_range(&rng, 4)), kv, d,
                          kl_rng_range(&rng, 2) ? d : 2 * (1 + kl_rng_range(&rng, d / 2)), 1 + kl_rng_range(&rng, 5000),
                          kl_rng_range(&rng, 2) == 1, types[kl_rng_range(&rng, 3)], "random"};
    }
    snprintf(label, len, "%s:tokens=%lld,heads=%lld/%lld,head_dim=%lld,rotary_dim=%lld,max_pos=%lld,%s,%s", e.what,
             (long long)e.num_tokens, (long long)e.q_heads, (long long)e.kv_heads, (long long)e.head_dim,
             (long long)e.rotary_dim, (long long)e.max_pos, e.is_neox ? "neox" : "interleaved", kl_dtype_name(e.dtype));
    for (char *c = label; *c; c++)
        if (*c == ' ') *c = '_';
    return kl_rope_problem_random(e.num_tokens, e.q_heads, e.kv_heads, e.head_dim, e.rotary_dim, e.max_pos, e.is_neox,
                                  e.dtype, kl_rng_u64(&rng));
}

void kl_rope_expected(const struct kl_rope_problem *p, struct kl_outputs *o)
{
    set_outputs(p, o);
    double *cs = kl_tensor_to_f64(&p->cos_sin_cache);
    const struct kl_tensor *in[2] = {&p->q, &p->k};
    const int64_t heads[2] = {p->num_q_heads, p->num_kv_heads};
    for (int i = 0; i < 2; i++) {
        double *x = kl_tensor_to_f64(in[i]);
        kl_rope_reference(x, p->positions.data, cs, p->num_tokens, heads[i], p->head_dim, p->rotary_dim, p->max_pos,
                          p->is_neox);
        memcpy(o->o[i].v, x, sizeof(double) * (size_t)o->o[i].n);
        free(x);
    }
    free(cs);
}

static int reference(const void *prob, struct kl_outputs *out, struct kl_err *err)
{
    kl_rope_expected(prob, out);
    return 0;
}

/* The device side (lab/core/tensor_ops.c does the work): everything uploaded, q and k rotated in
 * place (nothing to poison); 16 bytes where a tensor is empty. */
static void device(const void *prob, void *params, struct kl_dev_buf *b)
{
    const struct kl_rope_problem *p = prob;
    *(struct kl_rope_params *)params = (struct kl_rope_params){
        .num_tokens = p->num_tokens, .num_q_heads = p->num_q_heads, .num_kv_heads = p->num_kv_heads,
        .head_dim = p->head_dim, .rotary_dim = p->rotary_dim, .max_pos = p->max_pos, .is_neox = p->is_neox,
        .dtype = p->dtype};
    const struct kl_tensor *src[4] = {&p->q, &p->k, &p->positions, &p->cos_sin_cache};
    for (int i = 0; i < 4; i++) b[i] = kl_buf_tensor(src[i], true);
}

#define B(field) offsetof(struct kl_rope_params, field)
KL_TENSOR_OPS(kl_rope_ops, struct kl_rope_params, kl_rope_launch_fn, .load = load, .make = make, .reference = reference,
              .free = free_problem, .n_bufs = 4, .buf_field = {B(q), B(k), B(positions), B(cos_sin_cache)},
              .out_field = {B(q), B(k)}, .device = device, .outputs = set_outputs);
#undef B

KL_MODULE(rope, .summary = "rotary position embedding, in place on Q and K (neox or interleaved, partial)",
          .learning_step = 4, .min_cc = 70, .in_place = "q, k",
          .tensor = &kl_rope_ops, .perf = &kl_rope_perf);
