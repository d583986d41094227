/* The index lab module: golden-case loading, the check catalogue, running a variant. Tests,
 * `kernlab verify/check/bench` all come through here; the perf workloads are in perf.c. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/index/index.h"
#include "lab/core/registry.h"
#include "lab/index/index_module.h"
#include "reference/index.h"

void kl_index_problem_free(struct kl_index_problem *p)
{
    if (!p) return;
    kl_tensor_free(&p->table);
    kl_tensor_free(&p->ids);
    free(p);
}

static void free_problem(void *p) { kl_index_problem_free(p); }


/* Data movement: the output is compared bit-exactly. */
static void set_outputs(const void *prob, struct kl_outputs *o)
{
    const struct kl_index_problem *p = prob;
    kl_outputs_set(o, 0, "out", p->dtype, true, p->num_tokens * p->hidden);
}

static void *load(const struct kl_case *c, struct kl_outputs *expected, struct kl_err *err)
{
    struct kl_index_problem *p = calloc(1, sizeof *p);
    struct kl_tensor table = {0}, out = {0};
    char path[1200];
    long long vocab_start;
    p->dtype = c->dtype;
    if (kl_case_param_int(c, "vocab_start", 0, &vocab_start, err)) goto fail;
    p->vocab_start = vocab_start;
    if (c->dtype != KL_F32 && c->dtype != KL_F16 && c->dtype != KL_BF16) {
        kl_fail(err, "%s/meta.json: index needs dtype fp32, fp16 or bf16", c->dir);
        goto fail;
    }
    if (kl_case_array(c, "table", &table, false, err) || kl_case_array(c, "ids", &p->ids, false, err) ||
        kl_case_array(c, "out", &out, false, err))
        goto fail;
    if (kl_tensor_expect(&table, kl_case_path(c, "table.npy", path, sizeof path), 2, (int64_t[]){-1, -1}, err))
        goto fail;
    p->vocab = table.dims[0];
    p->hidden = table.dims[1];
    if (p->hidden < 1) {
        kl_fail(err, "%s: hidden must be >= 1", path);
        goto fail;
    }
    kl_case_path(c, "ids.npy", path, sizeof path);
    if (p->ids.dtype != KL_I32) {
        kl_fail(err, "%s: dtype %s, expected <i4", path, kl_dtype_name(p->ids.dtype));
        goto fail;
    }
    if (kl_tensor_expect(&p->ids, path, 1, (int64_t[]){-1}, err)) goto fail;
    p->num_tokens = p->ids.dims[0];
    if (kl_tensor_expect(&out, kl_case_path(c, "out.npy", path, sizeof path), 2,
                         (int64_t[]){p->num_tokens, p->hidden}, err))
        goto fail;
    if (kl_tensor_convert_exact(&p->table, &table, p->dtype, kl_case_path(c, "table.npy", path, sizeof path), err)) goto fail;

    set_outputs(p, expected);
    for (int64_t i = 0; i < expected->o[0].n; i++) expected->o[0].v[i] = kl_load_elem(out.dtype, out.data, (size_t)i);
    kl_tensor_free(&table), kl_tensor_free(&out);
    return p;
fail:
    kl_tensor_free(&table), kl_tensor_free(&out);
    kl_outputs_free(expected);
    kl_index_problem_free(p);
    return NULL;
}

struct kl_index_problem *kl_index_problem_random(int64_t num_tokens, int64_t vocab, int64_t hidden,
                                                 int64_t vocab_start, enum kl_dtype dtype, int outside,
                                                 uint64_t seed)
{
    struct kl_index_problem *p = calloc(1, sizeof *p);
    struct kl_rng rng;
    kl_rng_seed(&rng, seed);
    *p = (struct kl_index_problem){.num_tokens = num_tokens, .vocab = vocab, .hidden = hidden,
                                   .vocab_start = vocab_start, .dtype = dtype};
    kl_tensor_alloc(&p->table, dtype, 2, (int64_t[]){vocab, hidden});
    kl_tensor_alloc(&p->ids, KL_I32, 1, &num_tokens);
    kl_rng_fill_normal(&rng, &p->table, 1.0);
    int32_t *ids = p->ids.data;
    for (int64_t t = 0; t < num_tokens; t++) {
        int64_t id;
        if (vocab == 0 || (int64_t)kl_rng_range(&rng, 8) < outside) {
            /* Outside the shard: just below it, just past it, or far away (negative too). */
            switch (kl_rng_range(&rng, 4)) {
            case 0: id = vocab_start - 1; break;
            case 1: id = vocab_start + vocab; break;
            case 2: id = vocab_start + vocab + kl_rng_range(&rng, 100000); break;
            default: id = -1 - kl_rng_range(&rng, 1000);
            }
        } else {
            id = vocab_start + kl_rng_range(&rng, vocab);
        }
        if (vocab > 0 && t == 0) id = vocab_start;             /* the shard's first row */
        if (vocab > 0 && t == 1) id = vocab_start + vocab - 1; /* and its last */
        ids[t] = (int32_t)id;
    }
    return p;
}

/* The check catalogue: edge cases first, then random shapes. */
static const struct edge {
    int64_t num_tokens, vocab, hidden, vocab_start;
    enum kl_dtype dtype;
    int outside;
    const char *what;
} kedges[] = {
    {1, 1000, 4096, 0, KL_BF16, 0, "one token"},
    {64, 5000, 4096, 0, KL_BF16, 0, "decode batch"},
    {33, 300, 7, 0, KL_BF16, 1, "hidden 7"},
    {40, 300, 264, 0, KL_BF16, 1, "hidden 264"},
    {50, 3, 128, 0, KL_F16, 0, "three rows: repeated ids"},
    {70, 1000, 512, 1000, KL_BF16, 4, "second shard: ids below and above"},
    {30, 200, 100, 5000, KL_F32, 8, "every id outside the shard"},
    {20, 1, 33, 7, KL_F32, 2, "a shard of one row"},
    {17, 0, 64, 0, KL_BF16, 8, "empty shard"},
    {5, 100, 1, 0, KL_F16, 2, "hidden 1"},
    {300, 2000, 1000, 0, KL_F32, 1, "fp32 rows not whole 16-byte vectors"},
    {0, 100, 4096, 0, KL_BF16, 0, "no tokens"},
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
        e = (struct edge){1 + kl_rng_range(&rng, 500), 1 + kl_rng_range(&rng, 3000), 1 + kl_rng_range(&rng, 3000),
                          kl_rng_range(&rng, 2) ? 0 : kl_rng_range(&rng, 100000), types[kl_rng_range(&rng, 3)],
                          (int)kl_rng_range(&rng, 4), "random"};
    }
    snprintf(label, len, "%s:tokens=%lld,vocab=%lld,hidden=%lld,vocab_start=%lld,%s", e.what, (long long)e.num_tokens,
             (long long)e.vocab, (long long)e.hidden, (long long)e.vocab_start, kl_dtype_name(e.dtype));
    for (char *c = label; *c; c++)
        if (*c == ' ') *c = '_';
    return kl_index_problem_random(e.num_tokens, e.vocab, e.hidden, e.vocab_start, e.dtype, e.outside,
                                   kl_rng_u64(&rng));
}

static int reference(const void *prob, struct kl_outputs *out, struct kl_err *err)
{
    const struct kl_index_problem *p = prob;
    double *table = kl_tensor_to_f64(&p->table);
    set_outputs(p, out);
    kl_index_reference(table, p->ids.data, p->num_tokens, p->vocab, p->hidden, p->vocab_start, out->o[0].v);
    free(table);
    return 0;
}

/* The device side (lab/core/tensor_ops.c does the work): table and ids uploaded, out poisoned with
 * 0xFF bytes (NaN in every float type) so an unwritten element fails; 16 bytes where a tensor is
 * empty, so no pointer is NULL. */
static void device(const void *prob, void *params, struct kl_dev_buf *b)
{
    const struct kl_index_problem *p = prob;
    const size_t out_bytes = (size_t)(p->num_tokens * p->hidden) * kl_dtype_size(p->dtype);
    *(struct kl_index_params *)params = (struct kl_index_params){
        .num_tokens = p->num_tokens, .vocab = p->vocab, .hidden = p->hidden, .vocab_start = p->vocab_start,
        .dtype = p->dtype};
    b[0] = kl_buf_tensor(&p->table, true), b[1] = kl_buf_tensor(&p->ids, true);
    b[2] = kl_buf_fill(out_bytes, 0xff, true);
}

#define B(field) offsetof(struct kl_index_params, field)
KL_TENSOR_OPS(kl_index_ops, struct kl_index_params, kl_index_launch_fn, .load = load, .make = make,
              .reference = reference, .free = free_problem, .n_bufs = 3, .buf_field = {B(table), B(ids), B(out)},
              .out_field = {B(out)}, .device = device, .outputs = set_outputs);
#undef B

KL_MODULE(index, .summary = "embedding-row gather from a (sharded) vocabulary table", .learning_step = 2, .min_cc = 70,
          .tensor = &kl_index_ops, .perf = &kl_index_perf);
