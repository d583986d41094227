/* rope workloads for `kernlab bench`: Llama-3.1-8B's attention shape (32 q + 8 kv heads,
 * head_dim 128, bf16, neox, full rotary), cos/sin cache of 131072 positions (64 MB f32),
 * positions uniform random in [0, 131072); a 16k-token prefill and a 64-token decode batch.
 * Byte model (the fewest bytes a correct kernel moves): q and k read once and written once in
 * place (2 x 2 B per element), positions read (8 B a token), and one cos/sin row (rotary_dim x
 * 4 B = 512 B) per DISTINCT position: a kernel that reads a row once per token reads repeats
 * from L2. The positions come from a fixed per-workload seed (not the bench seed), so bytes()
 * counts the distinct ones exactly: for 16384 draws out of 131072, ~15.4k are distinct
 * (131072 x (1 - e^-0.125)), 7.9 MB next to 335 MB of q and k. FLOP model: 6 per rotated
 * pair (4 multiplies, 2 adds).
 * In place and timed repeatedly, the sets drift (each launch rotates them again). The re-check
 * reads the last timed repetition itself: before it, set 0's q and k are restored from pristine
 * device copies (on the stream, before the repetition's start event); in it, set 0 is launched
 * exactly once (in_place: at least two sets, kl_time_set), so q and k after it are one rotation
 * of the pristine inputs, compared whole with the reference. In place, there is nothing to
 * poison: an element the kernel leaves unwritten keeps its input value, which differs from the
 * rotated one unless its angle is 0 (position 0, or a frequency too low to turn it). */
#include <cjson/cJSON.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/rope/rope_module.h"
#include "perf/bench.h"
#include "reference/rope.h"

static const struct kl_workload kworkloads[] = {
    /* shape: tokens, q heads, kv heads, head_dim, rotary_dim, max_pos */
    {"decode-64", "64 tokens, 32 q + 8 kv heads x 128 bf16, neox, random positions < 131072",
     {64, 32, 8, 128, 128, 131072}, 0},
    {"prefill-16k", "16384 tokens, 32 q + 8 kv heads x 128 bf16, neox, random positions < 131072",
     {16384, 32, 8, 128, 128, 131072}, 0},
};

/* The workload's positions: a fixed seed per workload, so bytes() and setup() agree. */
static void positions_of(const struct kl_workload *w, int64_t *pos)
{
    struct kl_rng rng;
    kl_rng_seed(&rng, 0x0e0f + (uint64_t)w->shape[0]);
    for (int64_t t = 0; t < w->shape[0]; t++) pos[t] = kl_rng_range(&rng, w->shape[5]);
}

static int64_t distinct_positions(const struct kl_workload *w)
{
    int64_t *pos = malloc(sizeof(int64_t) * (size_t)w->shape[0]), distinct = 0;
    unsigned char *seen = calloc((size_t)w->shape[5], 1);
    positions_of(w, pos);
    for (int64_t t = 0; t < w->shape[0]; t++) distinct += !seen[pos[t]]++;
    free(pos), free(seen);
    return distinct;
}

static double bytes(const struct kl_workload *w)
{
    const double n = (double)w->shape[0], heads = (double)(w->shape[1] + w->shape[2]), d = (double)w->shape[3];
    return 2 * n * heads * d * 2 + n * 8 + (double)distinct_positions(w) * (double)w->shape[4] * 4;
}

static double flops(const struct kl_workload *w)
{
    return 6.0 * (double)w->shape[0] * (double)(w->shape[1] + w->shape[2]) * (double)(w->shape[4] / 2);
}

static size_t set_bytes(const struct kl_workload *w) { return (size_t)bytes(w); }

struct state {
    struct kl_rope_problem *host; /* set 0's inputs, for the re-check */
    int sets;
    struct kl_rope_params *p;     /* per set: its own q and k; positions and cache shared */
    void *q0, *k0;                /* pristine device copies of set 0's q and k */
};

static void teardown(void *q)
{
    struct state *s = q;
    if (!s) return;
    for (int i = 1; i < s->sets; i++) kl_dev_free(s->p[i].q), kl_dev_free(s->p[i].k);
    if (s->p && s->p[0].q) kl_tensor_release(&kl_rope_ops, &s->p[0]); /* set 0 owns positions and the cache */
    kl_dev_free(s->q0), kl_dev_free(s->k0);
    kl_rope_problem_free(s->host);
    free(s->p);
    free(s);
}

static void *setup(const struct kl_workload *w, int sets, uint64_t seed, struct kl_err *err)
{
    struct state *s = calloc(1, sizeof *s);
    s->sets = sets;
    s->p = calloc((size_t)sets, sizeof *s->p);
    /* max_pos 1 here and the real cache below: kl_rope_problem_random would also rewrite the
     * first two positions, and the workload's positions must be the ones bytes() counted. */
    s->host = kl_rope_problem_random(w->shape[0], w->shape[1], w->shape[2], w->shape[3], w->shape[4], 1, true,
                                     KL_BF16, seed);
    struct kl_rope_problem *h = s->host;
    h->max_pos = w->shape[5];
    kl_tensor_free(&h->cos_sin_cache);
    kl_tensor_alloc(&h->cos_sin_cache, KL_F32, 2, (int64_t[]){h->max_pos, h->rotary_dim});
    kl_rope_cos_sin_cache(h->cos_sin_cache.data, h->max_pos, h->rotary_dim, KL_ROPE_BASE);
    positions_of(w, h->positions.data);
    if (kl_tensor_upload(&kl_rope_ops, h, &s->p[0], err)) {
        teardown(s);
        return NULL;
    }
    const size_t qb = kl_nbytes(&h->q), kb = kl_nbytes(&h->k);
    if (kl_dev_alloc(&s->q0, qb) || kl_dev_alloc(&s->k0, kb)) {
        kl_fail(err, "cudaMalloc of the pristine copies failed");
        teardown(s);
        return NULL;
    }
    kl_dev_upload(s->q0, h->q.data, qb), kl_dev_upload(s->k0, h->k.data, kb);
    /* Other sets: the same values at other addresses (as cold for the L2 as fresh data); the
     * positions and the cos/sin cache are shared, as in a model's layers. */
    for (int i = 1; i < sets; i++) {
        s->p[i] = s->p[0];
        s->p[i].q = s->p[i].k = NULL;
        if (kl_dev_alloc(&s->p[i].q, qb) || kl_dev_alloc(&s->p[i].k, kb)) {
            kl_fail(err, "cudaMalloc for set %d failed", i);
            teardown(s);
            return NULL;
        }
        kl_dev_upload(s->p[i].q, h->q.data, qb), kl_dev_upload(s->p[i].k, h->k.data, kb);
    }
    return s;
}

static int launch(const struct kl_variant *v, void *q, int set, cudaStream_t stream)
{
    struct state *s = q;
    return (int)((kl_rope_launch_fn)v->launch)(&s->p[set], stream);
}

static int restore(void *q, cudaStream_t stream)
{
    struct state *s = q;
    const struct kl_rope_problem *h = s->host;
    int rc = (int)cudaMemcpyAsync(s->p[0].q, s->q0, kl_nbytes(&h->q), cudaMemcpyDeviceToDevice, stream);
    return rc ? rc : (int)cudaMemcpyAsync(s->p[0].k, s->k0, kl_nbytes(&h->k), cudaMemcpyDeviceToDevice, stream);
}

/* q and k of set 0 after the last timed repetition (see the opening comment) against the reference. */
static int check(const struct kl_variant *v, void *q, struct kl_cmp *out, struct kl_recheck *what, struct kl_err *err)
{
    struct state *s = q;
    const struct kl_rope_problem *h = s->host;
    struct kl_outputs got = {0}, want = {0};
    int rc = kl_tensor_download(&kl_rope_ops, h, &s->p[0], &got, err);
    if (!rc) {
        kl_rope_expected(h, &want);
        for (int i = 0; i < want.count; i++) {
            struct kl_cmp c;
            kl_compare(got.o[i].v, want.o[i].v, want.o[i].n, kl_policy_for(KL_BF16, false), &c);
            if (i == 0) *out = c;
            else kl_cmp_merge(out, &c);
            what->checked += (double)want.o[i].n;
        }
        what->of = what->checked;
        snprintf(what->reason, sizeof what->reason,
                 "q and k of input set 0 (in place: restored from pristine copies before the replay, launched once in "
                 "it) against the float64 reference");
    }
    kl_outputs_free(&got), kl_outputs_free(&want);
    return rc;
}

static cJSON *params(const struct kl_workload *w)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "num_tokens", (double)w->shape[0]);
    cJSON_AddNumberToObject(o, "num_q_heads", (double)w->shape[1]);
    cJSON_AddNumberToObject(o, "num_kv_heads", (double)w->shape[2]);
    cJSON_AddNumberToObject(o, "head_dim", (double)w->shape[3]);
    cJSON_AddNumberToObject(o, "rotary_dim", (double)w->shape[4]);
    cJSON_AddNumberToObject(o, "max_pos", (double)w->shape[5]);
    cJSON_AddNumberToObject(o, "distinct_positions", (double)distinct_positions(w));
    cJSON_AddBoolToObject(o, "is_neox", 1);
    cJSON_AddStringToObject(o, "dtype", "bf16");
    return o;
}

const struct kl_perf_ops kl_rope_perf = {
    .n_workloads = sizeof kworkloads / sizeof kworkloads[0],
    .workloads = kworkloads,
    .metric = KL_METRIC_BW,
    .bytes = bytes,
    .flops = flops,
    .set_bytes = set_bytes,
    .setup = setup,
    .launch = launch,
    .poison = restore,
    .check = check,
    .teardown = teardown,
    .params = params,
    .in_place = true,
};
