/* attention_prefill workloads for `kernlab bench`: Llama-3-8B's attention (32 qo / 8 kv heads,
 * head_dim 128, bf16) over a paged cache of 16-token pages handed out in a random order (a
 * fragmented cache), K/V random, never zeros.
 * FLOP model: 4 x head_dim per unmasked (query, key) pair and qo head (QK^T and P.V, 2 FLOPs per
 * multiply-add each), counted exactly: a causal prefill of n tokens has n(n+1)/2 pairs.
 * Byte model: q read once, the K and V rows the requests attend read once, out written once, lse
 * (float32) written once, the index arrays read once.
 * Re-check: set 0's out and lse are poisoned before the last timed repetition and compared whole
 * with the float64 reference after it. That reference is costly on the big workloads (causal-8k:
 * 5.5e11 FLOPs of dgemm and 2^30 serial exps), but every variant of a workload sees the same
 * inputs (they come from the seed alone), so it is computed once per workload and kept for the
 * variants benched after the first: the whole output is checked, no sample of rows. */
#include <cjson/cJSON.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/attention_prefill/attention_prefill_module.h"
#include "perf/bench.h"

enum { CAUSAL = 1, RAGGED = 2 };
enum { kQoHeads = 32, kKvHeads = 8, kHeadDim = 128 };

/* ragged-b16: q_len = kv_len drawn once, uniformly from 128..4096 (Python's random.Random(20261122));
 * fixed here so that every variant and the peers (perf/peers/attention_prefill.py) see the same batch. */
static const int64_t kRagged[16] = {2461, 2196, 1102, 2693, 1703, 2865, 2655, 276,
                                    383,  2700, 1712, 3421, 199,  829,  1916, 2167};

static const struct kl_workload kworkloads[] = {
    /* shape: batch, q_len, kv_len, page_size */
    {"causal-8k", "one 8192-token prompt, causal", {1, 8192, 8192, 16}, CAUSAL},
    {"causal-b4x2k", "4 prompts of 2048 tokens, causal", {4, 2048, 2048, 16}, CAUSAL},
    {"extend-b4-q512-kv4k", "4 requests: 512 new tokens over a 3584-token cached prefix", {4, 512, 4096, 16}, CAUSAL},
    {"ragged-b16", "16 prompts of 199..3421 tokens, causal", {16, 0, 0, 16}, CAUSAL | RAGGED},
    {"noncausal-4k", "one 4096-token sequence, no mask", {1, 4096, 4096, 16}, 0},
    {"causal-8k-p1", "causal-8k over 1-token pages (a gather per key)", {1, 8192, 8192, 1}, CAUSAL},
};

static void lens(const struct kl_workload *w, int64_t b, int64_t *q, int64_t *kv)
{
    if (w->flags & RAGGED) *q = *kv = kRagged[b];
    else *q = w->shape[1], *kv = w->shape[2];
}

static double pairs(const struct kl_workload *w)
{
    double n = 0;
    for (int64_t b = 0; b < w->shape[0]; b++) {
        int64_t q, kv;
        lens(w, b, &q, &kv);
        for (int64_t i = 0; i < q; i++) n += (double)kl_attention_prefill_visible(w->flags & CAUSAL, q, kv, i);
    }
    return n;
}

static double flops(const struct kl_workload *w) { return 4.0 * kHeadDim * kQoHeads * pairs(w); }

/* q, out, lse and the index arrays; with or without the whole cache (set_bytes) or only the keys
 * attended (the model). */
static double io_bytes(const struct kl_workload *w, bool whole_cache)
{
    double total_q = 0, kv_rows = 0, pages = 0;
    for (int64_t b = 0; b < w->shape[0]; b++) {
        int64_t q, kv;
        lens(w, b, &q, &kv);
        total_q += (double)q;
        kv_rows += (double)kv;
        pages += (double)((kv + w->shape[3] - 1) / w->shape[3]);
    }
    if (whole_cache) kv_rows = pages * (double)w->shape[3];
    const double row = (double)kHeadDim * 2; /* bf16 */
    return total_q * kQoHeads * row * 2 + kv_rows * kKvHeads * row * 2 + total_q * kQoHeads * 4 +
           4.0 * (2 * (double)(w->shape[0] + 1) + (double)w->shape[0] + pages);
}

static double bytes(const struct kl_workload *w) { return io_bytes(w, false); }
static size_t set_bytes(const struct kl_workload *w) { return (size_t)io_bytes(w, true); }

struct state {
    const struct kl_workload *w;
    struct kl_attention_prefill_problem *host; /* every set holds these values */
    int sets;
    struct kl_attention_prefill_params *k;
    uint64_t seed;
    struct kl_prefill_trace trace; /* CTA 0's life in one extra launch, for variants that record it (tiles > 0) */
};

static void teardown(void *p)
{
    struct state *s = p;
    if (!s) return;
    for (int i = 0; i < s->sets; i++)
        if (s->k[i].q) kl_tensor_release(&kl_attention_prefill_ops, &s->k[i]);
    kl_attention_prefill_problem_free(s->host);
    free(s->k), free(s);
}

static void *setup(const struct kl_workload *w, int sets, uint64_t seed, struct kl_err *err)
{
    struct state *s = calloc(1, sizeof *s);
    s->w = w, s->seed = seed, s->sets = sets;
    s->k = calloc((size_t)sets, sizeof *s->k);
    int64_t q_lens[16], kv_lens[16];
    for (int64_t b = 0; b < w->shape[0]; b++) lens(w, b, &q_lens[b], &kv_lens[b]);
    struct kl_attention_prefill_spec sp = {.batch = w->shape[0], .q_lens = q_lens, .kv_lens = kv_lens,
                                           .num_qo_heads = kQoHeads, .num_kv_heads = kKvHeads, .head_dim = kHeadDim,
                                           .page_size = w->shape[3], .spare_pages = 0, .causal = w->flags & CAUSAL,
                                           .dtype = KL_BF16, .q_scale = 1.0};
    s->host = kl_attention_prefill_problem_random(&sp, seed);
    for (int i = 0; i < sets; i++)
        if (kl_tensor_upload(&kl_attention_prefill_ops, s->host, &s->k[i], err)) {
            teardown(s);
            return NULL;
        }
    return s;
}

static int launch(const struct kl_variant *v, void *p, int set, cudaStream_t stream)
{
    struct state *s = p;
    return (int)((kl_attention_prefill_launch_fn)v->launch)(&s->k[set], stream);
}

/* One more launch, untimed, with params.trace set: the warp-specialized variants record when CTA 0's
 * producer issued each key tile and when each consumer warpgroup got K, finished S, the softmax and
 * P V (attention_prefill.h). Others ignore the field and the trace stays empty. */
static void trace_one_launch(const struct kl_variant *v, struct state *s)
{
    memset(&s->trace, 0, sizeof s->trace);
    struct kl_prefill_trace *dev = NULL;
    if (kl_dev_alloc((void **)&dev, sizeof *dev) || kl_dev_fill_bytes(dev, 0, sizeof *dev)) return;
    struct kl_attention_prefill_params k = s->k[0];
    k.trace = dev;
    if (((kl_attention_prefill_launch_fn)v->launch)(&k, 0) == cudaSuccess && kl_dev_sync() == 0)
        kl_dev_download(&s->trace, dev, sizeof s->trace);
    kl_dev_free(dev);
}

static int poison(void *p, cudaStream_t stream)
{
    struct state *s = p;
    const struct kl_attention_prefill_shape *sh = &s->host->shape;
    const size_t rows = (size_t)(sh->total_q * sh->num_qo_heads);
    int rc = (int)cudaMemsetAsync(s->k[0].out, 0xff, rows * (size_t)sh->head_dim * 2, stream);
    return rc ? rc : (int)cudaMemsetAsync(s->k[0].lse, 0xff, rows * sizeof(float), stream);
}

/* The float64 reference of input set 0, for the workload and seed it was computed for. */
static struct {
    const struct kl_workload *w;
    uint64_t seed;
    struct kl_outputs want;
} ref;

static int check(const struct kl_variant *v, void *p, struct kl_cmp *out, struct kl_recheck *what, struct kl_err *err)
{
    struct state *s = p;
    if (ref.w != s->w || ref.seed != s->seed) {
        kl_outputs_free(&ref.want);
        ref.w = NULL;
        if (kl_attention_prefill_expected(s->host, &ref.want, err)) return -1;
        ref.w = s->w, ref.seed = s->seed;
    }
    struct kl_outputs got = {0};
    int rc = kl_tensor_download(&kl_attention_prefill_ops, s->host, &s->k[0], &got, err);
    if (!rc) {
        struct kl_cmp c;
        kl_compare(got.o[0].v, ref.want.o[0].v, ref.want.o[0].n, got.o[0].policy, out);
        kl_compare(got.o[1].v, ref.want.o[1].v, ref.want.o[1].n, got.o[1].policy, &c);
        kl_cmp_merge(out, &c);
        what->checked = what->of = (double)(ref.want.o[0].n + ref.want.o[1].n);
        snprintf(what->reason, sizeof what->reason,
                 "out and lse of input set 0, poisoned before the replay, against the float64 dgemm reference");
    }
    kl_outputs_free(&got);
    if (!rc && v->min_cc >= 90) trace_one_launch(v, s); /* the warp-specialized variants are Hopper's */
    return rc;
}

/* The trace as "timeline": SM clock cycles from the CTA's start, per key tile (at most
 * KL_PREFILL_TRACE_TILES), for the producer and each consumer warpgroup; -1 for an event not recorded.
 * Where the variant traced the CTA's second work tile too: its key tiles after the first's, next_tiles,
 * and when each warpgroup took it up and stored its rows. */
static double since(unsigned long long t, unsigned long long t0) { return t >= t0 && t ? (double)(t - t0) : -1; }
static void add_timeline(cJSON *o, const struct kl_prefill_trace *t)
{
    const int all = t->tiles + t->next_tiles, n = all < KL_PREFILL_TRACE_TILES ? all : KL_PREFILL_TRACE_TILES;
    cJSON *tl = cJSON_AddObjectToObject(o, "timeline");
    cJSON_AddStringToObject(tl, "unit", "SM clock cycles from CTA 0's start");
    cJSON_AddNumberToObject(tl, "tiles", t->tiles);
    if (t->next_tiles > 0) cJSON_AddNumberToObject(tl, "next_tiles", t->next_tiles);
    const unsigned long long t0 = t->start;
    cJSON *issued = cJSON_AddArrayToObject(tl, "issued");
    for (int j = 0; j < n; j++) cJSON_AddItemToArray(issued, cJSON_CreateNumber(since(t->issued[j], t0)));
    cJSON *wgs = cJSON_AddArrayToObject(tl, "consumers");
    for (int c = 0; c < 2; c++) {
        cJSON *wg = cJSON_CreateObject();
        const char *names[4] = {"k_ready", "s_done", "softmax_done", "pv_done"};
        const unsigned long long(*ev[4])[KL_PREFILL_TRACE_TILES] = {t->k_ready, t->s_done, t->softmax_done, t->pv_done};
        for (int e = 0; e < 4; e++) {
            cJSON *a = cJSON_AddArrayToObject(wg, names[e]);
            for (int j = 0; j < n; j++) cJSON_AddItemToArray(a, cJSON_CreateNumber(since(ev[e][c][j], t0)));
        }
        cJSON_AddNumberToObject(wg, "end", since(t->end[c], t0));
        if (t->next_tiles > 0) {
            cJSON_AddNumberToObject(wg, "next_begin", since(t->next_begin[c], t0));
            cJSON_AddNumberToObject(wg, "next_end", since(t->next_end[c], t0));
        }
        cJSON_AddItemToArray(wgs, wg);
    }
}

/* The work in (query, head) rows and unmasked pairs, and CTA 0's timeline, for the results line. */
static void extra(void *p, cJSON *o)
{
    struct state *s = p;
    const struct kl_attention_prefill_shape *sh = &s->host->shape;
    /* The work the FLOP model counts, for the guide's story of one CTA (lab/attention_prefill/guide.c). */
    cJSON *work = cJSON_AddObjectToObject(o, "work");
    cJSON_AddNumberToObject(work, "rows", (double)(sh->total_q * sh->num_qo_heads));
    cJSON_AddNumberToObject(work, "pairs", pairs(s->w) * (double)sh->num_qo_heads);
    if (s->trace.tiles > 0) add_timeline(o, &s->trace);
}

static cJSON *params(const struct kl_workload *w)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "batch", (double)w->shape[0]);
    if (w->flags & RAGGED) {
        cJSON_AddStringToObject(o, "lengths", "q_len = kv_len per request, 16 drawn from 128..4096: 199..3421");
        cJSON *a = cJSON_AddArrayToObject(o, "q_lens");
        for (int b = 0; b < 16; b++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)kRagged[b]));
    } else {
        cJSON_AddNumberToObject(o, "q_len", (double)w->shape[1]);
        cJSON_AddNumberToObject(o, "kv_len", (double)w->shape[2]);
    }
    cJSON_AddNumberToObject(o, "num_qo_heads", kQoHeads);
    cJSON_AddNumberToObject(o, "num_kv_heads", kKvHeads);
    cJSON_AddNumberToObject(o, "head_dim", kHeadDim);
    cJSON_AddNumberToObject(o, "page_size", (double)w->shape[3]);
    cJSON_AddBoolToObject(o, "causal", w->flags & CAUSAL);
    cJSON_AddStringToObject(o, "dtype", "bf16");
    cJSON_AddStringToObject(o, "pages", "random order");
    return o;
}

const struct kl_perf_ops kl_attention_prefill_perf = {
    .n_workloads = sizeof kworkloads / sizeof kworkloads[0],
    .workloads = kworkloads,
    .metric = KL_METRIC_TC,
    .bytes = bytes,
    .flops = flops,
    .set_bytes = set_bytes,
    .setup = setup,
    .launch = launch,
    .poison = poison,
    .check = check,
    .teardown = teardown,
    .params = params,
    .extra = extra,
};
