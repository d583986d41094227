/* attention_decode workloads for `kernlab bench`: Llama-3.1-8B's attention (32 qo / 8 kv heads,
 * head_dim 128, bf16) decoding one token per request over a paged cache whose pages are
 * scattered (a shuffled page pool, as a long-running server's cache is). The -qN workloads verify
 * N draft tokens per request (speculative decoding: qo_indptr, every request N query rows, the
 * last N of its keys new and causal among themselves) over the same cache shape. The -fp8
 * workload holds the same cache as e4m3 codes with a float32 scale per kv head (k_scale, v_scale;
 * only the FP8 variants take it, the others SKIP it).
 * Byte model (the fewest bytes a correct kernel moves): every attended K and V row once
 * (kv_len x kv_heads x head_dim x 2 x 2 bytes per request, however many query rows read it; one
 * byte an element on an FP8 cache, plus its 2 x kv_heads scales), q, out and lse once per query
 * row, the index arrays once. FLOP model: 4 x head_dim per qo head and
 * per (query row, key it sees) (q.k and p.v, a multiply and an add each); query i of N sees
 * kv_len - N + 1 + i keys.
 * The bound is the read bandwidth: decode reads about a thousand times what it writes, so the
 * gate's metric is read_frac (of the streaming-read ceiling), with bw_frac (of the copy) beside.
 * Inputs are made on the device (perf/fill.cu). Re-check: set 0's out and lse are poisoned
 * before the last timed repetition and compared whole, request by request, with the float64
 * reference after it; the split-KV workspace is left as the previous launches left it, so a
 * kernel whose per-launch state (merge counters) is not reset writes nothing and fails here.
 * The reference of every request needs the whole cache on the host (up to 2 GB) and is the same
 * for every variant (the inputs come from the seed alone), so it is computed once per workload
 * and kept for the variants benched after the first. */
#include <cjson/cJSON.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/attention_decode/attention_decode_module.h"
#include "perf/bench.h"

enum { RAGGED = 1, FP8 = 2 };
#define QO_HEADS 32
#define KV_HEADS 8
#define HEAD_DIM 128
#define RAGGED_SEED 20261123u

/* shape: batch, kv_len (ragged: the longest), page_size, query tokens per request (0: one, and
 * qo_indptr NULL, the plain decode call) */
static const struct kl_workload kworkloads[] = {
    {"b64-kv8k-p16", "64 requests x 8192 tokens, page 16 (2.1 GB of KV)", {64, 8192, 16}, 0},
    {"b32-kv4k-p1", "32 requests x 4096 tokens, page 1 (SGLang's page size)", {32, 4096, 1}, 0},
    {"b1-kv32k-p16", "one request of 32768 tokens, page 16", {1, 32768, 16}, 0},
    {"b128-kv1k-p16", "128 requests x 1024 tokens, page 16", {128, 1024, 16}, 0},
    {"ragged-b64-p16", "64 requests of 1..16384 tokens (seeded), page 16", {64, 16384, 16}, RAGGED},
    {"b8-kv512-p16", "8 requests x 512 tokens, page 16 (small: launch-bound)", {8, 512, 16}, 0},
    {"b64-kv8k-p16-q4", "b64-kv8k-p16 verifying 4 draft tokens per request (the same KV)", {64, 8192, 16, 4}, 0},
    {"b16-kv2k-p16-q8", "16 requests x 2048 tokens, page 16, 8 draft tokens each", {16, 2048, 16, 8}, 0},
    {"b64-kv8k-p16-fp8", "b64-kv8k-p16 on an FP8 (e4m3) cache, a scale per kv head (1.07 GB of KV)", {64, 8192, 16}, FP8},
};

/* Bytes of one cache element: e4m3 codes on the FP8 workload, bf16 elsewhere. */
static size_t elem_bytes(const struct kl_workload *w) { return w->flags & FP8 ? 1 : 2; }

/* Query rows per request (1 for the plain decode workloads). */
static int64_t q_len(const struct kl_workload *w) { return w->shape[3] > 1 ? w->shape[3] : 1; }

/* kv_len of every request: fixed per workload (ragged lengths from a fixed seed, so the byte
 * model does not depend on the run's seed). */
static void kv_lens(const struct kl_workload *w, int64_t *lens)
{
    struct kl_rng rng;
    kl_rng_seed(&rng, RAGGED_SEED);
    for (int64_t b = 0; b < w->shape[0]; b++) lens[b] = w->flags & RAGGED ? 1 + kl_rng_range(&rng, w->shape[1]) : w->shape[1];
}

static double kv_tokens(const struct kl_workload *w, int64_t *pages)
{
    int64_t *lens = malloc(sizeof(int64_t) * (size_t)w->shape[0]), tokens = 0;
    *pages = 0;
    kv_lens(w, lens);
    for (int64_t b = 0; b < w->shape[0]; b++) tokens += lens[b], *pages += (lens[b] + w->shape[2] - 1) / w->shape[2];
    free(lens);
    return (double)tokens;
}

static double bytes(const struct kl_workload *w)
{
    int64_t pages;
    const double tokens = kv_tokens(w, &pages), batch = (double)w->shape[0], rows = batch * (double)q_len(w);
    return tokens * KV_HEADS * HEAD_DIM * (double)elem_bytes(w) * 2 /* K and V */ +
           (w->flags & FP8 ? 2 * KV_HEADS * 4 : 0) /* k_scale, v_scale */ + 2 * rows * QO_HEADS * HEAD_DIM * 2 /* q, out */ +
           rows * QO_HEADS * 4 /* lse */ + 4 * ((double)pages + 2 * batch + 1) /* indices */ +
           (q_len(w) > 1 ? 4 * (batch + 1) : 0) /* qo_indptr */;
}

static double flops(const struct kl_workload *w)
{
    /* Per request, its N query rows see N kv_len - N (N - 1) / 2 keys together (N = 1: kv_len). */
    int64_t pages;
    const double n = (double)q_len(w), seen = n * kv_tokens(w, &pages) - (double)w->shape[0] * n * (n - 1) / 2;
    return 4.0 * seen * HEAD_DIM * QO_HEADS;
}

static size_t set_bytes(const struct kl_workload *w) { return (size_t)bytes(w); }

struct state {
    const struct kl_workload *w;
    uint64_t seed;
    int sets;
    int64_t *lens, pages;
    int64_t q_len;          /* query rows per request */
    int32_t *indptr, *last; /* host copies of the page table (shared by every set) */
    int32_t **indices;      /* per set: its own page order */
    struct kl_attention_decode_params *p;
    float k_scale[KV_HEADS], v_scale[KV_HEADS]; /* the FP8 workload's (host copies; one device copy for every set) */
    struct kl_decode_trace *trace; /* the CTAs' timeline of one extra launch (variants that record one) */
};

static void teardown(void *q)
{
    struct state *s = q;
    if (!s) return;
    for (int i = 0; i < s->sets; i++) {
        struct kl_attention_decode_params *k = &s->p[i];
        kl_dev_free((void *)k->q), kl_dev_free((void *)k->k_cache), kl_dev_free((void *)k->v_cache);
        kl_dev_free((void *)k->kv_indices), kl_dev_free(k->out), kl_dev_free(k->lse), kl_dev_free(k->workspace);
        free(s->indices[i]);
    }
    if (s->p && s->sets)
        kl_dev_free((void *)s->p[0].kv_indptr), kl_dev_free((void *)s->p[0].kv_last_page_len),
            kl_dev_free((void *)s->p[0].qo_indptr), kl_dev_free((void *)s->p[0].k_scale),
            kl_dev_free((void *)s->p[0].v_scale);
    free(s->lens), free(s->indptr), free(s->last), free(s->indices), free(s->p), free(s->trace);
    free(s);
}

static void *setup(const struct kl_workload *w, int sets, uint64_t seed, struct kl_err *err)
{
    struct state *s = calloc(1, sizeof *s);
    const int64_t batch = w->shape[0], ps = w->shape[2];
    s->w = w, s->seed = seed, s->sets = sets, s->q_len = q_len(w);
    s->lens = malloc(sizeof(int64_t) * (size_t)batch);
    s->indptr = calloc((size_t)batch + 1, sizeof(int32_t)), s->last = calloc((size_t)batch, sizeof(int32_t));
    s->indices = calloc((size_t)sets, sizeof(int32_t *));
    s->p = calloc((size_t)sets, sizeof *s->p);
    kv_lens(w, s->lens);
    int64_t max_len = 0;
    for (int64_t b = 0; b < batch; b++) {
        const int64_t np = (s->lens[b] + ps - 1) / ps;
        s->indptr[b + 1] = s->indptr[b] + (int32_t)np;
        s->last[b] = (int32_t)(s->lens[b] - (np - 1) * ps);
        if (s->lens[b] > max_len) max_len = s->lens[b];
    }
    s->pages = s->indptr[batch];
    struct kl_rng rng;
    kl_rng_seed(&rng, seed);
    void *indptr_d = NULL, *last_d = NULL, *qo_d = NULL, *ks_d = NULL, *vs_d = NULL;
    int rc = kl_dev_alloc(&indptr_d, sizeof(int32_t) * (size_t)(batch + 1)) || kl_dev_alloc(&last_d, sizeof(int32_t) * (size_t)batch);
    if (!rc) rc = kl_dev_upload(indptr_d, s->indptr, sizeof(int32_t) * (size_t)(batch + 1)) ||
                  kl_dev_upload(last_d, s->last, sizeof(int32_t) * (size_t)batch);
    if (!rc && s->q_len > 1) { /* every request s->q_len query rows: qo_indptr = 0, N, 2N, .. */
        int32_t *qo = malloc(sizeof(int32_t) * (size_t)(batch + 1));
        for (int64_t b = 0; b <= batch; b++) qo[b] = (int32_t)(b * s->q_len);
        rc = kl_dev_alloc(&qo_d, sizeof(int32_t) * (size_t)(batch + 1)) ||
             kl_dev_upload(qo_d, qo, sizeof(int32_t) * (size_t)(batch + 1));
        free(qo);
    }
    if (!rc && w->flags & FP8) { /* codes of values of variance 24^2; the scales a factor of ten apart */
        for (int g = 0; g < KV_HEADS; g++)
            s->k_scale[g] = (float)(kl_attention_decode_fp8_scale(g, false) / 24),
            s->v_scale[g] = (float)(kl_attention_decode_fp8_scale(g, true) / 24);
        rc = kl_dev_alloc(&ks_d, sizeof s->k_scale) || kl_dev_alloc(&vs_d, sizeof s->v_scale) ||
             kl_dev_upload(ks_d, s->k_scale, sizeof s->k_scale) || kl_dev_upload(vs_d, s->v_scale, sizeof s->v_scale);
    }
    const size_t cache_elems = (size_t)(s->pages * ps * KV_HEADS * HEAD_DIM), eb = elem_bytes(w);
    const enum kl_dtype cache_t = w->flags & FP8 ? KL_FP8_E4M3 : KL_BF16;
    const float cache_scale = w->flags & FP8 ? 24 : 1;
    const size_t q_elems = (size_t)(batch * s->q_len * QO_HEADS * HEAD_DIM);
    for (int i = 0; i < sets && !rc; i++) {
        struct kl_attention_decode_params *k = &s->p[i];
        *k = (struct kl_attention_decode_params){.kv_indptr = indptr_d, .kv_last_page_len = last_d, .batch = batch,
                                                 .num_qo_heads = QO_HEADS, .num_kv_heads = KV_HEADS,
                                                 .head_dim = HEAD_DIM, .page_size = ps, .num_pages = s->pages,
                                                 .max_kv_len = max_len, .sm_scale = (float)(1 / sqrt(HEAD_DIM)),
                                                 .dtype = KL_BF16, .qo_indptr = qo_d,
                                                 .max_q_len = s->q_len > 1 ? s->q_len : 0, .k_scale = ks_d,
                                                 .v_scale = vs_d};
        k->workspace_bytes = kl_attention_decode_workspace_bytes(k, kl_attention_decode_sms());
        /* A shuffled page pool: a request's pages are scattered over the cache. */
        int32_t *idx = s->indices[i] = malloc(sizeof(int32_t) * (size_t)s->pages);
        for (int64_t j = 0; j < s->pages; j++) idx[j] = (int32_t)j;
        for (int64_t j = s->pages - 1; j > 0; j--) {
            const int64_t r = kl_rng_range(&rng, j + 1);
            const int32_t t = idx[j];
            idx[j] = idx[r], idx[r] = t;
        }
        void *bufs[7] = {0};
        const size_t sizes[7] = {2 * q_elems, eb * cache_elems, eb * cache_elems, sizeof(int32_t) * (size_t)s->pages,
                                 2 * q_elems, sizeof(float) * (size_t)(batch * s->q_len * QO_HEADS),
                                 k->workspace_bytes};
        for (int j = 0; j < 7 && !rc; j++) rc = kl_dev_alloc(&bufs[j], sizes[j]);
        k->q = bufs[0], k->k_cache = bufs[1], k->v_cache = bufs[2], k->kv_indices = bufs[3], k->out = bufs[4];
        k->lse = bufs[5], k->workspace = bufs[6];
        if (rc) {
            for (int j = 0; j < 7; j++) kl_dev_free(bufs[j]);
            memset(k, 0, sizeof *k);
            break;
        }
        rc = kl_dev_upload(bufs[3], idx, sizes[3]) || kl_dev_fill_random(bufs[0], KL_BF16, q_elems, kl_rng_u64(&rng), 1) ||
             kl_dev_fill_random(bufs[1], cache_t, cache_elems, kl_rng_u64(&rng), cache_scale) ||
             kl_dev_fill_random(bufs[2], cache_t, cache_elems, kl_rng_u64(&rng), cache_scale) ||
             kl_dev_fill_bytes(bufs[6], 0, sizes[6]);
    }
    if (!rc) rc = kl_dev_sync();
    if (rc) {
        kl_fail(err, "device memory for %d input sets of %s: %s", sets, w->name, kl_cuda_error_string(rc));
        if (!s->p[0].kv_indptr)
            kl_dev_free(indptr_d), kl_dev_free(last_d), kl_dev_free(qo_d), kl_dev_free(ks_d), kl_dev_free(vs_d);
        teardown(s);
        return NULL;
    }
    return s;
}

static int launch(const struct kl_variant *v, void *q, int set, cudaStream_t stream)
{
    struct state *s = q;
    return (int)((kl_attention_decode_launch_fn)v->launch)(&s->p[set], stream);
}

static int poison(void *q, cudaStream_t stream)
{
    struct state *s = q;
    const struct kl_attention_decode_params *k = &s->p[0];
    const size_t rows = (size_t)(k->batch * s->q_len * QO_HEADS);
    int rc = (int)cudaMemsetAsync(k->out, 0xff, rows * HEAD_DIM * 2, stream);
    return rc ? rc : (int)cudaMemsetAsync(k->lse, 0xff, rows * sizeof(float), stream);
}

/* The float64 reference of every request of input set 0 (out and lse with the request's own
 * tolerance), for the workload and seed it was computed for. */
static struct {
    const struct kl_workload *w;
    uint64_t seed;
    int64_t batch;
    struct kl_outputs *want; /* [batch] */
} ref;

static void ref_free(void)
{
    for (int64_t b = 0; ref.want && b < ref.batch; b++) kl_outputs_free(&ref.want[b]);
    free(ref.want);
    memset(&ref, 0, sizeof ref);
}

/* Request b of set 0 as a problem of its own (its pages copied out of the host copies of the
 * caches and renumbered 0..n-1), through the reference into want. */
static int reference_request(const struct state *s, const char *q, const char *kc, const char *vc, int64_t b,
                             struct kl_outputs *want, struct kl_err *err)
{
    const struct kl_attention_decode_params *k = &s->p[0];
    const int64_t ps = k->page_size, np = s->indptr[b + 1] - s->indptr[b], row = KV_HEADS * HEAD_DIM, n = s->q_len;
    const int64_t one[1] = {1}, two[1] = {2}, qd[3] = {n, QO_HEADS, HEAD_DIM}, cd[4] = {np, ps, KV_HEADS, HEAD_DIM};
    const bool fp8 = s->w->flags & FP8;
    const enum kl_dtype cache_t = fp8 ? KL_FP8_E4M3 : KL_BF16;
    struct kl_attention_decode_problem *p = calloc(1, sizeof *p);
    *p = (struct kl_attention_decode_problem){.batch = 1, .num_qo_heads = QO_HEADS, .num_kv_heads = KV_HEADS,
                                              .head_dim = HEAD_DIM, .page_size = ps, .num_pages = np,
                                              .sm_scale = k->sm_scale, .dtype = KL_BF16};
    kl_tensor_alloc(&p->q, KL_BF16, 3, qd), kl_tensor_alloc(&p->k_cache, cache_t, 4, cd);
    kl_tensor_alloc(&p->v_cache, cache_t, 4, cd), kl_tensor_alloc(&p->kv_indptr, KL_I32, 1, two);
    if (fp8) {
        const int64_t kv = KV_HEADS;
        kl_tensor_alloc(&p->k_scale, KL_F32, 1, &kv), kl_tensor_alloc(&p->v_scale, KL_F32, 1, &kv);
        memcpy(p->k_scale.data, s->k_scale, sizeof s->k_scale), memcpy(p->v_scale.data, s->v_scale, sizeof s->v_scale);
    }
    kl_tensor_alloc(&p->kv_indices, KL_I32, 1, &np), kl_tensor_alloc(&p->kv_last_page_len, KL_I32, 1, one);
    ((int32_t *)p->kv_indptr.data)[1] = (int32_t)np;
    ((int32_t *)p->kv_last_page_len.data)[0] = s->last[b];
    if (n > 1) { /* its n query rows, rows b n .. of the workload's q */
        kl_tensor_alloc(&p->qo_indptr, KL_I32, 1, two);
        ((int32_t *)p->qo_indptr.data)[1] = (int32_t)n;
    }
    const size_t page_bytes = (size_t)(ps * row) * elem_bytes(s->w), q_bytes = (size_t)(n * QO_HEADS * HEAD_DIM) * 2;
    memcpy(p->q.data, q + b * q_bytes, q_bytes);
    for (int64_t j = 0; j < np; j++) {
        ((int32_t *)p->kv_indices.data)[j] = (int32_t)j;
        const int64_t page = s->indices[0][s->indptr[b] + j];
        memcpy((char *)p->k_cache.data + j * page_bytes, kc + page * page_bytes, page_bytes);
        memcpy((char *)p->v_cache.data + j * page_bytes, vc + page * page_bytes, page_bytes);
    }
    int rc = kl_attention_decode_check_table(p, "re-check: ", err);
    if (!rc) {
        kl_attention_decode_bounds(p);
        rc = kl_attention_decode_run_reference(p, want, err);
    }
    kl_attention_decode_problem_free(p);
    return rc;
}

/* Computes ref for s's workload and seed: q and both caches of set 0 copied back whole. */
static int reference(const struct state *s, struct kl_err *err)
{
    const struct kl_attention_decode_params *k = &s->p[0];
    const size_t q_bytes = (size_t)(k->batch * s->q_len * QO_HEADS * HEAD_DIM) * 2;
    const size_t cache_bytes = (size_t)(s->pages * k->page_size * KV_HEADS * HEAD_DIM) * elem_bytes(s->w);
    ref_free();
    char *q = malloc(q_bytes), *kc = malloc(cache_bytes), *vc = malloc(cache_bytes);
    int rc = 0;
    if (!q || !kc || !vc) rc = kl_fail(err, "re-check: no host memory for a %zu-byte copy of the caches", cache_bytes);
    if (!rc && (kl_dev_download(q, k->q, q_bytes) || kl_dev_download(kc, k->k_cache, cache_bytes) ||
                kl_dev_download(vc, k->v_cache, cache_bytes)))
        rc = kl_fail(err, "re-check: copying set 0's inputs back failed");
    if (!rc) {
        ref.want = calloc((size_t)k->batch, sizeof *ref.want);
        ref.batch = k->batch;
        for (int64_t b = 0; b < k->batch && !rc; b++) rc = reference_request(s, q, kc, vc, b, &ref.want[b], err);
        ref.w = s->w, ref.seed = s->seed;
    }
    free(q), free(kc), free(vc);
    if (rc) ref_free();
    return rc;
}

/* One more launch, untimed, with params.trace set: a variant that records a timeline (v20_bulk_merge,
 * v21_merge_tree) stamps each CTA's events (attention_decode.h); the others leave it empty. */
static void trace_one_launch(const struct kl_variant *v, struct state *s)
{
    struct kl_decode_trace *dev = NULL;
    if (!s->trace) s->trace = malloc(sizeof *s->trace);
    if (!s->trace) return;
    memset(s->trace, 0, sizeof *s->trace);
    if (kl_dev_alloc((void **)&dev, sizeof *dev) || kl_dev_fill_bytes(dev, 0, sizeof *dev)) return;
    struct kl_attention_decode_params k = s->p[0];
    k.trace = dev;
    if (((kl_attention_decode_launch_fn)v->launch)(&k, 0) != cudaSuccess || kl_dev_sync() != 0 ||
        kl_dev_download(s->trace, dev, sizeof *dev) != 0)
        memset(s->trace, 0, sizeof *s->trace);
    kl_dev_free(dev);
}

static int check(const struct kl_variant *v, void *q, struct kl_cmp *out, struct kl_recheck *what, struct kl_err *err)
{
    const struct state *s = q;
    const struct kl_attention_decode_params *k = &s->p[0];
    if ((ref.w != s->w || ref.seed != s->seed) && reference(s, err)) return -1;
    struct kl_outputs got = {0};
    const int64_t rows = k->batch * s->q_len;
    kl_outputs_set(&got, 0, "out", KL_BF16, false, rows * QO_HEADS * HEAD_DIM);
    kl_outputs_set(&got, 1, "lse", KL_F32, false, rows * QO_HEADS);
    int rc = kl_out_download(&got.o[0], k->out, err) || kl_out_download(&got.o[1], k->lse, err) ? -1 : 0;
    memset(out, 0, sizeof *out);
    out->pass = true;
    for (int64_t b = 0; b < k->batch && !rc; b++) { /* request b: its q_len query rows */
        const int64_t n[2] = {s->q_len * QO_HEADS * HEAD_DIM, s->q_len * QO_HEADS};
        for (int i = 0; i < 2; i++) {
            struct kl_cmp c;
            kl_compare(got.o[i].v + b * n[i], ref.want[b].o[i].v, n[i], ref.want[b].o[i].policy, &c);
            kl_cmp_merge(out, &c);
        }
    }
    kl_outputs_free(&got);
    if (rc) return rc;
    what->checked = what->of = (double)(rows * QO_HEADS * (HEAD_DIM + 1));
    snprintf(what->reason, sizeof what->reason,
             "out and lse of input set 0, every request, poisoned before the replay (the split-KV workspace left as "
             "the previous launches left it), against the float64 reference");
    trace_one_launch(v, q);
    return 0;
}

static int by_value(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The quantiles of one event over the CTAs that recorded it, in microseconds from t0. */
static cJSON *event_quantiles(const struct kl_decode_trace *t, int e, unsigned long long t0, int *n_out)
{
    static double v[KL_DECODE_TRACE_CTAS];
    int n = 0;
    for (int c = 0; c < KL_DECODE_TRACE_CTAS; c++)
        if (t->at[c][e]) v[n++] = ((double)t->at[c][e] - (double)t0) / 1e3;
    *n_out = n;
    if (n == 0) return NULL;
    qsort(v, (size_t)n, sizeof v[0], by_value);
    cJSON *o = cJSON_CreateObject();
    const int pct[5] = {0, 10, 50, 90, 100};
    const char *name[5] = {"min", "p10", "p50", "p90", "max"};
    for (int i = 0; i < 5; i++) cJSON_AddNumberToObject(o, name[i], v[(n - 1) * pct[i] / 100]);
    return o;
}

void kl_attention_decode_timeline_json(const struct kl_decode_trace *t, cJSON *row_extra)
{
    unsigned long long t0 = 0;
    for (int c = 0; c < KL_DECODE_TRACE_CTAS; c++)
        if (t->at[c][KL_DECODE_RELEASED] && (!t0 || t->at[c][KL_DECODE_RELEASED] < t0)) t0 = t->at[c][KL_DECODE_RELEASED];
    if (!t0) return; /* nothing recorded */
    cJSON *tl = cJSON_AddObjectToObject(row_extra, "timeline");
    cJSON_AddStringToObject(tl, "unit", "microseconds (%globaltimer) from the first CTA's release from its PDL wait");
    cJSON *ev = cJSON_AddObjectToObject(tl, "events");
    const char *names[KL_DECODE_EVENTS] = {"start", "released", "first_tile", "loop_done", "end"};
    for (int e = 0; e < KL_DECODE_EVENTS; e++) {
        int n;
        cJSON *q = event_quantiles(t, e, t0, &n);
        if (q) cJSON_AddItemToObject(ev, names[e], q);
        if (e == KL_DECODE_START) cJSON_AddNumberToObject(tl, "ctas", n);
    }
}

static void extra(void *q, cJSON *o)
{
    const struct state *s = q;
    if (s->trace) kl_attention_decode_timeline_json(s->trace, o);
}

static cJSON *params(const struct kl_workload *w)
{
    cJSON *o = cJSON_CreateObject();
    int64_t pages;
    cJSON_AddNumberToObject(o, "batch", (double)w->shape[0]);
    cJSON_AddNumberToObject(o, w->flags & RAGGED ? "max_kv_len" : "kv_len", (double)w->shape[1]);
    cJSON_AddNumberToObject(o, "kv_tokens", kv_tokens(w, &pages));
    cJSON_AddNumberToObject(o, "page_size", (double)w->shape[2]);
    if (q_len(w) > 1) cJSON_AddNumberToObject(o, "q_len", (double)q_len(w));
    cJSON_AddNumberToObject(o, "num_qo_heads", QO_HEADS);
    cJSON_AddNumberToObject(o, "num_kv_heads", KV_HEADS);
    cJSON_AddNumberToObject(o, "head_dim", HEAD_DIM);
    cJSON_AddStringToObject(o, "dtype", "bf16");
    if (w->flags & FP8) cJSON_AddStringToObject(o, "kv_dtype", "fp8_e4m3");
    return o;
}

const struct kl_perf_ops kl_attention_decode_perf = {
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
    .extra = extra,
};
