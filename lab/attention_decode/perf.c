/* attention_decode workloads for `kernlab bench`: Llama-3.1-8B's attention (32 qo / 8 kv heads,
 * head_dim 128, bf16) decoding one token per request over a paged cache whose pages are
 * scattered (a shuffled page pool, as a long-running server's cache is).
 * Byte model (the fewest bytes a correct kernel moves): every attended K and V row once
 * (kv_len x kv_heads x head_dim x 2 x 2 bytes per request), q, out and lse once, the index arrays
 * once. FLOP model: 4 x kv_len x head_dim per qo head (q.k and p.v, a multiply and an add each).
 * The bound is the read bandwidth: decode reads about a thousand times what it writes, so the
 * gate's metric is read_frac (of the streaming-read ceiling), with bw_frac (of the copy) beside.
 * Inputs are made on the device (perf/fill.cu); the re-check after timing runs the float64
 * reference on three requests (the first, the middle and the last) of input set 0, copied back
 * page by page: the whole batch (up to 2 GB of KV) would take the CPU minutes. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lab/attention_decode/attention_decode_module.h"
#include "perf/bench.h"

enum { RAGGED = 1 };
#define QO_HEADS 32
#define KV_HEADS 8
#define HEAD_DIM 128
#define RAGGED_SEED 20261123u

/* shape: batch, kv_len (ragged: the longest), page_size */
static const struct kl_workload kworkloads[] = {
    {"b64-kv8k-p16", "64 requests x 8192 tokens, page 16 (2.1 GB of KV)", {64, 8192, 16}, 0},
    {"b32-kv4k-p1", "32 requests x 4096 tokens, page 1 (SGLang's page size)", {32, 4096, 1}, 0},
    {"b1-kv32k-p16", "one request of 32768 tokens, page 16", {1, 32768, 16}, 0},
    {"b128-kv1k-p16", "128 requests x 1024 tokens, page 16", {128, 1024, 16}, 0},
    {"ragged-b64-p16", "64 requests of 1..16384 tokens (seeded), page 16", {64, 16384, 16}, RAGGED},
    {"b8-kv512-p16", "8 requests x 512 tokens, page 16 (small: launch-bound)", {8, 512, 16}, 0},
};

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
    const double tokens = kv_tokens(w, &pages), batch = (double)w->shape[0];
    return tokens * KV_HEADS * HEAD_DIM * 2 * 2 /* K and V */ + 2 * batch * QO_HEADS * HEAD_DIM * 2 /* q, out */ +
           batch * QO_HEADS * 4 /* lse */ + 4 * ((double)pages + 2 * batch + 1) /* indices */;
}

static double flops(const struct kl_workload *w)
{
    int64_t pages;
    return 4.0 * kv_tokens(w, &pages) * HEAD_DIM * QO_HEADS;
}

static size_t set_bytes(const struct kl_workload *w) { return (size_t)bytes(w); }

struct state {
    const struct kl_workload *w;
    int sets;
    int64_t *lens, pages;
    int32_t *indptr, *last; /* host copies of the page table (shared by every set) */
    int32_t **indices;      /* per set: its own page order */
    struct kl_attention_decode_params *p;
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
    if (s->p && s->sets) kl_dev_free((void *)s->p[0].kv_indptr), kl_dev_free((void *)s->p[0].kv_last_page_len);
    free(s->lens), free(s->indptr), free(s->last), free(s->indices), free(s->p);
    free(s);
}

static void *setup(const struct kl_workload *w, int sets, uint64_t seed, struct kl_err *err)
{
    struct state *s = calloc(1, sizeof *s);
    const int64_t batch = w->shape[0], ps = w->shape[2];
    s->w = w, s->sets = sets;
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
    void *indptr_d = NULL, *last_d = NULL;
    int rc = kl_dev_alloc(&indptr_d, sizeof(int32_t) * (size_t)(batch + 1)) || kl_dev_alloc(&last_d, sizeof(int32_t) * (size_t)batch);
    if (!rc) rc = kl_dev_upload(indptr_d, s->indptr, sizeof(int32_t) * (size_t)(batch + 1)) ||
                  kl_dev_upload(last_d, s->last, sizeof(int32_t) * (size_t)batch);
    const size_t cache_elems = (size_t)(s->pages * ps * KV_HEADS * HEAD_DIM), q_elems = (size_t)(batch * QO_HEADS * HEAD_DIM);
    for (int i = 0; i < sets && !rc; i++) {
        struct kl_attention_decode_params *k = &s->p[i];
        *k = (struct kl_attention_decode_params){.kv_indptr = indptr_d, .kv_last_page_len = last_d, .batch = batch,
                                                 .num_qo_heads = QO_HEADS, .num_kv_heads = KV_HEADS,
                                                 .head_dim = HEAD_DIM, .page_size = ps, .num_pages = s->pages,
                                                 .max_kv_len = max_len, .sm_scale = (float)(1 / sqrt(HEAD_DIM)),
                                                 .dtype = KL_BF16};
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
        const size_t sizes[7] = {2 * q_elems, 2 * cache_elems, 2 * cache_elems, sizeof(int32_t) * (size_t)s->pages,
                                 2 * q_elems, sizeof(float) * (size_t)(batch * QO_HEADS), k->workspace_bytes};
        for (int j = 0; j < 7 && !rc; j++) rc = kl_dev_alloc(&bufs[j], sizes[j]);
        k->q = bufs[0], k->k_cache = bufs[1], k->v_cache = bufs[2], k->kv_indices = bufs[3], k->out = bufs[4];
        k->lse = bufs[5], k->workspace = bufs[6];
        if (rc) {
            for (int j = 0; j < 7; j++) kl_dev_free(bufs[j]);
            memset(k, 0, sizeof *k);
            break;
        }
        rc = kl_dev_upload(bufs[3], idx, sizes[3]) || kl_dev_fill_random(bufs[0], KL_BF16, q_elems, kl_rng_u64(&rng), 1) ||
             kl_dev_fill_random(bufs[1], KL_BF16, cache_elems, kl_rng_u64(&rng), 1) ||
             kl_dev_fill_random(bufs[2], KL_BF16, cache_elems, kl_rng_u64(&rng), 1) ||
             kl_dev_fill_bytes(bufs[6], 0, sizes[6]);
    }
    if (!rc) rc = kl_dev_sync();
    if (rc) {
        kl_fail(err, "device memory for %d input sets of %s: %s", sets, w->name, kl_cuda_error_string(rc));
        if (!s->p[0].kv_indptr) kl_dev_free(indptr_d), kl_dev_free(last_d);
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

/* Request b of set 0 as a problem of its own (its pages copied back and renumbered 0..n-1),
 * with the variant's out and lse rows for it. */
static int check_request(const struct state *s, int64_t b, struct kl_cmp *out, struct kl_err *err)
{
    const struct kl_attention_decode_params *k = &s->p[0];
    const int64_t ps = k->page_size, np = s->indptr[b + 1] - s->indptr[b], row = KV_HEADS * HEAD_DIM;
    const int64_t one[1] = {1}, two[1] = {2}, qd[3] = {1, QO_HEADS, HEAD_DIM}, cd[4] = {np, ps, KV_HEADS, HEAD_DIM};
    struct kl_attention_decode_problem *p = calloc(1, sizeof *p);
    *p = (struct kl_attention_decode_problem){.batch = 1, .num_qo_heads = QO_HEADS, .num_kv_heads = KV_HEADS,
                                              .head_dim = HEAD_DIM, .page_size = ps, .num_pages = np,
                                              .sm_scale = k->sm_scale, .dtype = KL_BF16};
    kl_tensor_alloc(&p->q, KL_BF16, 3, qd), kl_tensor_alloc(&p->k_cache, KL_BF16, 4, cd);
    kl_tensor_alloc(&p->v_cache, KL_BF16, 4, cd), kl_tensor_alloc(&p->kv_indptr, KL_I32, 1, two);
    kl_tensor_alloc(&p->kv_indices, KL_I32, 1, &np), kl_tensor_alloc(&p->kv_last_page_len, KL_I32, 1, one);
    ((int32_t *)p->kv_indptr.data)[1] = (int32_t)np;
    ((int32_t *)p->kv_last_page_len.data)[0] = s->last[b];
    const size_t page_bytes = (size_t)(ps * row) * 2, q_bytes = (size_t)(QO_HEADS * HEAD_DIM) * 2;
    int rc = kl_dev_download(p->q.data, (const char *)k->q + b * q_bytes, q_bytes);
    for (int64_t j = 0; j < np && !rc; j++) {
        ((int32_t *)p->kv_indices.data)[j] = (int32_t)j;
        const int64_t page = s->indices[0][s->indptr[b] + j];
        rc = kl_dev_download((char *)p->k_cache.data + j * page_bytes, (const char *)k->k_cache + page * page_bytes,
                             page_bytes) ||
             kl_dev_download((char *)p->v_cache.data + j * page_bytes, (const char *)k->v_cache + page * page_bytes,
                             page_bytes);
    }
    struct kl_outputs want = {0}, got = {0};
    if (!rc && !kl_attention_decode_check_table(p, "re-check: ", err)) {
        kl_attention_decode_bounds(p);
        kl_attention_decode_run_reference(p, &want, err);
        kl_outputs_set(&got, 0, "out", KL_BF16, false, want.o[0].n);
        kl_outputs_set(&got, 1, "lse", KL_F32, false, want.o[1].n);
        rc = kl_out_download(&got.o[0], (const char *)k->out + b * q_bytes, err) ||
             kl_out_download(&got.o[1], (const float *)k->lse + b * QO_HEADS, err);
        for (int i = 0; i < 2 && !rc; i++) {
            struct kl_cmp c;
            kl_compare(got.o[i].v, want.o[i].v, want.o[i].n, want.o[i].policy, &c);
            kl_cmp_merge(out, &c);
        }
    } else if (rc) {
        kl_fail(err, "copying request %lld back: %s", (long long)b, kl_cuda_error_string(rc));
    }
    kl_outputs_free(&want), kl_outputs_free(&got);
    kl_attention_decode_problem_free(p);
    return rc ? -1 : 0;
}

static int check(const struct kl_variant *v, void *q, struct kl_cmp *out, struct kl_err *err)
{
    const struct state *s = q;
    const int64_t batch = s->w->shape[0], sample[3] = {0, batch / 2, batch - 1};
    memset(out, 0, sizeof *out);
    out->pass = true;
    for (int i = 0; i < 3; i++) {
        if (i && sample[i] == sample[i - 1]) continue;
        if (check_request(s, sample[i], out, err)) return -1;
    }
    return 0;
}

static cJSON *params(const struct kl_workload *w)
{
    cJSON *o = cJSON_CreateObject();
    int64_t pages;
    cJSON_AddNumberToObject(o, "batch", (double)w->shape[0]);
    cJSON_AddNumberToObject(o, w->flags & RAGGED ? "max_kv_len" : "kv_len", (double)w->shape[1]);
    cJSON_AddNumberToObject(o, "kv_tokens", kv_tokens(w, &pages));
    cJSON_AddNumberToObject(o, "page_size", (double)w->shape[2]);
    cJSON_AddNumberToObject(o, "num_qo_heads", QO_HEADS);
    cJSON_AddNumberToObject(o, "num_kv_heads", KV_HEADS);
    cJSON_AddNumberToObject(o, "head_dim", HEAD_DIM);
    cJSON_AddStringToObject(o, "dtype", "bf16");
    cJSON_AddStringToObject(o, "recheck", "float64 reference on requests 0, batch/2 and batch-1 of input set 0");
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
    .check = check,
    .teardown = teardown,
    .params = params,
};
