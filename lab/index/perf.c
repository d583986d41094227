/* index workloads for `kernlab bench`: Llama-3.1-8B's embedding table (128256 x 4096 bf16,
 * 1.05 GB), ids uniform over the vocabulary; a decode batch and an 8k-token prefill.
 * Byte model (the fewest bytes a correct gather moves): the ids read (4 B each), each token's
 * row read once from the table (8 KB) and written once to out (8 KB); NOT the whole table. With
 * 64 or 8192 random ids out of 128256 repeats are rare and the byte model counts them as reads
 * anyway. FLOP model: none (pure data movement).
 * The table is allocated once per state, not per rotation set (it alone is 1 GB): rotation sets
 * only differ in their id arrays and out buffers; random ids into a 1 GB table already defeat
 * the 50 MB L2.
 * Re-check: set 0's out is poisoned before the last timed repetition and compared whole, bit for
 * bit, with the reference after it. */
#include <cjson/cJSON.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/index/index_module.h"
#include "perf/bench.h"
#include "reference/index.h"

static const struct kl_workload kworkloads[] = {
    {"decode-64", "64 tokens from a 128256 x 4096 bf16 table", {64, 128256, 4096}, 0},
    {"prefill-8k", "8192 tokens from a 128256 x 4096 bf16 table", {8192, 128256, 4096}, 0},
};

static double bytes(const struct kl_workload *w)
{
    const double n = (double)w->shape[0], row = (double)w->shape[2] * 2;
    return n * 4 + 2 * n * row;
}

static double flops(const struct kl_workload *w) { return 0; }

static size_t set_bytes(const struct kl_workload *w) { return (size_t)bytes(w); }

struct state {
    struct kl_index_problem *host; /* the table and set 0's ids, for the re-check */
    int sets;
    void *table;                   /* one device table shared by every set */
    struct kl_index_params *k;     /* per set: its own ids and out */
};

static void teardown(void *p)
{
    struct state *s = p;
    if (!s) return;
    for (int i = 0; i < s->sets; i++) kl_dev_free((void *)s->k[i].ids), kl_dev_free(s->k[i].out);
    kl_dev_free(s->table);
    kl_index_problem_free(s->host);
    free(s->k);
    free(s);
}

static void *setup(const struct kl_workload *w, int sets, uint64_t seed, struct kl_err *err)
{
    const int64_t n = w->shape[0], vocab = w->shape[1], hidden = w->shape[2];
    struct state *s = calloc(1, sizeof *s);
    s->sets = sets;
    s->k = calloc((size_t)sets, sizeof *s->k);
    /* Built by hand, not with kl_index_problem_random: 525M normal draws would take most of a
     * minute. Random bits serve as well for a bit-exact copy; clearing bit 14 of every bf16
     * keeps its exponent below all-ones, so no NaN (NaN != NaN would fail an exact compare). */
    struct kl_index_problem *h = calloc(1, sizeof *h);
    *h = (struct kl_index_problem){.num_tokens = n, .vocab = vocab, .hidden = hidden, .dtype = KL_BF16};
    kl_tensor_alloc(&h->table, KL_BF16, 2, (int64_t[]){vocab, hidden});
    kl_tensor_alloc(&h->ids, KL_I32, 1, &n);
    s->host = h;
    struct kl_rng trng;
    kl_rng_seed(&trng, seed);
    uint64_t *bits = h->table.data;
    for (size_t i = 0; i < kl_nbytes(&h->table) / 8; i++) bits[i] = kl_rng_u64(&trng) & 0xBFFFBFFFBFFFBFFFull;
    for (int64_t t = 0; t < n; t++) ((int32_t *)h->ids.data)[t] = (int32_t)kl_rng_range(&trng, vocab);
    if (kl_dev_alloc(&s->table, kl_nbytes(&s->host->table))) {
        kl_fail(err, "cudaMalloc of the %zu-byte table failed", kl_nbytes(&s->host->table));
        teardown(s);
        return NULL;
    }
    kl_dev_upload(s->table, s->host->table.data, kl_nbytes(&s->host->table));
    /* Set 0 uses the host problem's ids; the others fresh random ids from the same seed stream. */
    struct kl_rng rng;
    kl_rng_seed(&rng, seed ^ 0x9e3779b97f4a7c15ull);
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)n);
    const size_t out_bytes = (size_t)(n * hidden) * 2;
    for (int i = 0; i < sets; i++) {
        void *dids = NULL, *dout = NULL;
        if (kl_dev_alloc(&dids, sizeof(int32_t) * (size_t)n) || kl_dev_alloc(&dout, out_bytes)) {
            kl_dev_free(dids);
            kl_fail(err, "cudaMalloc for set %d failed", i);
            free(ids);
            teardown(s);
            return NULL;
        }
        for (int64_t t = 0; t < n; t++) ids[t] = i == 0 ? ((int32_t *)s->host->ids.data)[t] : (int32_t)kl_rng_range(&rng, vocab);
        kl_dev_upload(dids, ids, sizeof(int32_t) * (size_t)n);
        kl_dev_fill_bytes(dout, 0xff, out_bytes);
        s->k[i] = (struct kl_index_params){.table = s->table, .ids = dids, .out = dout, .num_tokens = n,
                                           .vocab = vocab, .hidden = hidden, .vocab_start = 0, .dtype = KL_BF16};
    }
    free(ids);
    return s;
}

static int launch(const struct kl_variant *v, void *p, int set, cudaStream_t stream)
{
    struct state *s = p;
    return (int)((kl_index_launch_fn)v->launch)(&s->k[set], stream);
}

static int poison(void *p, cudaStream_t stream)
{
    struct state *s = p;
    return (int)cudaMemsetAsync(s->k[0].out, 0xff, (size_t)(s->host->num_tokens * s->host->hidden) * 2, stream);
}

/* Set 0's out, written by the last timed launch, compared bit-exactly with the reference. The
 * reference runs on the n rows the ids pick, copied into a compact table (ids renumbered
 * 0..n-1): converting the whole 1 GB table to doubles would take 4 GB. */
static int check(const struct kl_variant *v, void *p, struct kl_cmp *out, struct kl_recheck *what, struct kl_err *err)
{
    struct state *s = p;
    const struct kl_index_problem *h = s->host;
    struct kl_outputs got = {0};
    int rc = kl_tensor_download(&kl_index_ops, h, &s->k[0], &got, err);
    if (rc) return rc;
    const int64_t n = h->num_tokens, hidden = h->hidden;
    double *rows = malloc(sizeof(double) * (size_t)(n * hidden)), *want = malloc(sizeof(double) * (size_t)(n * hidden));
    int32_t *local = malloc(sizeof(int32_t) * (size_t)n);
    for (int64_t t = 0; t < n; t++) {
        const int64_t row = ((const int32_t *)h->ids.data)[t];
        for (int64_t i = 0; i < hidden; i++)
            rows[t * hidden + i] = kl_load_elem(KL_BF16, h->table.data, (size_t)(row * hidden + i));
        local[t] = (int32_t)t;
    }
    kl_index_reference(rows, local, n, n, hidden, 0, want);
    kl_compare(got.o[0].v, want, n * hidden, kl_policy_for(KL_BF16, true), out);
    what->checked = what->of = (double)(n * hidden);
    snprintf(what->reason, sizeof what->reason,
             "out of input set 0, poisoned before the replay, bit for bit against the reference gather");
    free(rows), free(want), free(local);
    kl_outputs_free(&got);
    return 0;
}

static cJSON *params(const struct kl_workload *w)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "num_tokens", (double)w->shape[0]);
    cJSON_AddNumberToObject(o, "vocab", (double)w->shape[1]);
    cJSON_AddNumberToObject(o, "hidden", (double)w->shape[2]);
    cJSON_AddNumberToObject(o, "vocab_start", 0);
    cJSON_AddStringToObject(o, "dtype", "bf16");
    cJSON_AddStringToObject(o, "ids", "uniform random over the vocabulary");
    return o;
}

const struct kl_perf_ops kl_index_perf = {
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
