/* The attention_prefill lab module: golden-case loading and validation, the check catalogue,
 * running a variant. Tests, `kernlab verify/check/bench` all come through here; the perf
 * workloads are in perf.c. */
#include <math.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lab/attention_prefill/attention_prefill_module.h"

void kl_attention_prefill_problem_free(struct kl_attention_prefill_problem *p)
{
    if (!p) return;
    kl_tensor_free(&p->q), kl_tensor_free(&p->k_cache), kl_tensor_free(&p->v_cache);
    kl_tensor_free(&p->qo_indptr), kl_tensor_free(&p->kv_indptr), kl_tensor_free(&p->kv_indices);
    kl_tensor_free(&p->kv_last_page_len);
    free(p);
}

static void free_problem(void *p) { kl_attention_prefill_problem_free(p); }

/* Points the shape's index arrays at the tensors (after they are final). */
static void bind_shape(struct kl_attention_prefill_problem *p)
{
    p->shape.qo_indptr = p->qo_indptr.data, p->shape.kv_indptr = p->kv_indptr.data;
    p->shape.kv_indices = p->kv_indices.data, p->shape.kv_last_page_len = p->kv_last_page_len.data;
}

int kl_attention_prefill_validate(struct kl_attention_prefill_problem *p, const char *what, struct kl_err *err)
{
    const struct kl_attention_prefill_shape *s = &p->shape;
    const int32_t *qo = s->qo_indptr, *kv = s->kv_indptr, *idx = s->kv_indices, *last = s->kv_last_page_len;
    const int64_t n_indices = kl_numel(&p->kv_indices);
    if (qo[0] != 0 || kv[0] != 0)
        return kl_fail(err, "%s: %s[0] = %d, expected 0", what, qo[0] != 0 ? "qo_indptr" : "kv_indptr",
                       qo[0] != 0 ? qo[0] : kv[0]);
    for (int64_t b = 0; b < s->batch; b++) {
        if (qo[b + 1] < qo[b])
            return kl_fail(err, "%s: qo_indptr decreases at %lld (%d -> %d)", what, (long long)b, qo[b], qo[b + 1]);
        if (kv[b + 1] < kv[b])
            return kl_fail(err, "%s: kv_indptr decreases at %lld (%d -> %d)", what, (long long)b, kv[b], kv[b + 1]);
    }
    if (qo[s->batch] != s->total_q)
        return kl_fail(err, "%s: qo_indptr[%lld] = %d, but q has %lld rows", what, (long long)s->batch, qo[s->batch],
                       (long long)s->total_q);
    if (kv[s->batch] != n_indices)
        return kl_fail(err, "%s: kv_indptr[%lld] = %d, but kv_indices has %lld entries", what, (long long)s->batch,
                       kv[s->batch], (long long)n_indices);
    for (int64_t i = 0; i < n_indices; i++)
        if (idx[i] < 0 || idx[i] >= s->num_pages)
            return kl_fail(err, "%s: kv_indices[%lld] = %d is outside the %lld pages of the cache", what, (long long)i,
                           idx[i], (long long)s->num_pages);
    p->max_q_len = p->max_kv_len = 0;
    for (int64_t b = 0; b < s->batch; b++) {
        const int64_t pages = kv[b + 1] - kv[b], q_len = qo[b + 1] - qo[b];
        if (pages > 0 && (last[b] < 1 || last[b] > s->page_size))
            return kl_fail(err,
                           "%s: kv_last_page_len[%lld] = %d, expected 1..page_size (%lld) for a request with pages",
                           what, (long long)b, last[b], (long long)s->page_size);
        const int64_t kv_len = kl_attention_prefill_kv_len(s, b);
        if (q_len > kv_len)
            return kl_fail(err,
                           "%s: request %lld has q_len %lld > kv_len %lld (its new tokens' K/V must be in the cache)",
                           what, (long long)b, (long long)q_len, (long long)kv_len);
        if (q_len > p->max_q_len) p->max_q_len = q_len;
        if (kv_len > p->max_kv_len) p->max_kv_len = kv_len;
    }
    return 0;
}

/* ---- outputs and their tolerance ---- */

/* sm_scale * max||q|| * max||k|| over the keys requests attend (Cauchy-Schwarz bounds every logit),
 * and max|v| over the same keys: what the attention policies of lab/core/compare.c need. */
static void logit_and_value_bounds(const struct kl_attention_prefill_problem *p, double *logit, double *vmax)
{
    const struct kl_attention_prefill_shape *s = &p->shape;
    const int64_t d = s->head_dim, nq = s->total_q * s->num_qo_heads;
    double qmax = 0, kmax = 0, v = 0;
    for (int64_t r = 0; r < nq; r++) {
        double n2 = 0;
        for (int64_t c = 0; c < d; c++) {
            double x = kl_load_elem(p->dtype, p->q.data, (size_t)(r * d + c));
            n2 += x * x;
        }
        qmax = fmax(qmax, n2);
    }
    for (int64_t b = 0; b < s->batch; b++)
        for (int64_t j = 0; j < kl_attention_prefill_kv_len(s, b); j++) {
            int64_t page = s->kv_indices[s->kv_indptr[b] + j / s->page_size], slot = j % s->page_size;
            for (int64_t h = 0; h < s->num_kv_heads; h++) {
                size_t base = (size_t)(((page * s->page_size + slot) * s->num_kv_heads + h) * d);
                double n2 = 0;
                for (int64_t c = 0; c < d; c++) {
                    double x = kl_load_elem(p->dtype, p->k_cache.data, base + (size_t)c);
                    n2 += x * x;
                    v = fmax(v, fabs(kl_load_elem(p->dtype, p->v_cache.data, base + (size_t)c)));
                }
                kmax = fmax(kmax, n2);
            }
        }
    *logit = fabs(s->sm_scale) * sqrt(qmax) * sqrt(kmax);
    *vmax = v;
}

void kl_attention_prefill_set_outputs(const struct kl_attention_prefill_problem *p, struct kl_outputs *o)
{
    const struct kl_attention_prefill_shape *s = &p->shape;
    double logit, vmax;
    logit_and_value_bounds(p, &logit, &vmax);
    kl_outputs_set(o, 0, "out", p->dtype, false, s->total_q * s->num_qo_heads * s->head_dim);
    kl_outputs_set(o, 1, "lse", KL_F32, false, s->total_q * s->num_qo_heads);
    kl_outputs_policy(o, 0, kl_policy_attention_out(p->dtype, s->head_dim, p->max_kv_len, logit, vmax,
                                                    s->num_qo_heads * s->head_dim));
    kl_outputs_policy(o, 1, kl_policy_attention_lse(s->head_dim, p->max_kv_len, logit));
}

/* ---- golden cases ---- */

static void *load(const struct kl_case *c, struct kl_outputs *expected, struct kl_err *err)
{
    struct kl_attention_prefill_problem *p = calloc(1, sizeof *p);
    struct kl_tensor q = {0}, kc = {0}, vc = {0}, out = {0}, lse = {0};
    char path[1200];
    bool causal;
    double sm_scale;
    p->dtype = c->dtype;
    if (c->dtype != KL_F32 && c->dtype != KL_F16 && c->dtype != KL_BF16) {
        kl_fail(err, "%s/meta.json: attention_prefill needs dtype fp32, fp16 or bf16", c->dir);
        goto fail;
    }
    if (kl_case_param_bool(c, "causal", true, &causal, err)) goto fail;
    if (kl_case_array(c, "q", &q, false, err) || kl_case_array(c, "qo_indptr", &p->qo_indptr, false, err) ||
        kl_case_array(c, "k_cache", &kc, false, err) || kl_case_array(c, "v_cache", &vc, false, err) ||
        kl_case_array(c, "kv_indptr", &p->kv_indptr, false, err) ||
        kl_case_array(c, "kv_indices", &p->kv_indices, false, err) ||
        kl_case_array(c, "kv_last_page_len", &p->kv_last_page_len, false, err) ||
        kl_case_array(c, "out", &out, false, err) || kl_case_array(c, "lse", &lse, false, err))
        goto fail;

    /* Shapes: q fixes total_q, qo_heads, head_dim; k_cache the pages; the indptrs the batch. */
    if (kl_tensor_expect(&q, kl_case_path(c, "q.npy", path, sizeof path), 3, (int64_t[]){-1, -1, -1}, err)) goto fail;
    struct kl_attention_prefill_shape *s = &p->shape;
    s->total_q = q.dims[0], s->num_qo_heads = q.dims[1], s->head_dim = q.dims[2];
    if (kl_tensor_expect(&kc, kl_case_path(c, "k_cache.npy", path, sizeof path), 4,
                         (int64_t[]){-1, -1, -1, s->head_dim}, err) ||
        kl_tensor_expect(&vc, kl_case_path(c, "v_cache.npy", path, sizeof path), 4, kc.dims, err))
        goto fail;
    s->num_pages = kc.dims[0], s->page_size = kc.dims[1], s->num_kv_heads = kc.dims[2];
    kl_case_path(c, "k_cache.npy", path, sizeof path);
    if (s->head_dim < 1 || s->num_qo_heads < 1 || s->page_size < 1 || s->num_kv_heads < 1) {
        kl_fail(err, "%s: head_dim, qo heads, page_size and kv heads must all be >= 1", path);
        goto fail;
    }
    if (s->num_qo_heads % s->num_kv_heads != 0) {
        kl_fail(err, "%s: %lld kv heads do not divide the %lld qo heads of q.npy", path, (long long)s->num_kv_heads,
                (long long)s->num_qo_heads);
        goto fail;
    }
    const char *index_names[4] = {"qo_indptr", "kv_indptr", "kv_indices", "kv_last_page_len"};
    struct kl_tensor *index[4] = {&p->qo_indptr, &p->kv_indptr, &p->kv_indices, &p->kv_last_page_len};
    for (int i = 0; i < 4; i++) {
        char file[64];
        snprintf(file, sizeof file, "%s.npy", index_names[i]);
        kl_case_path(c, file, path, sizeof path);
        if (index[i]->dtype != KL_I32) {
            kl_fail(err, "%s: dtype %s, expected <i4", path, kl_dtype_name(index[i]->dtype));
            goto fail;
        }
        if (kl_tensor_expect(index[i], path, 1, (int64_t[]){-1}, err)) goto fail;
    }
    s->batch = p->qo_indptr.dims[0] - 1;
    if (s->batch < 0 || p->kv_indptr.dims[0] != s->batch + 1 || p->kv_last_page_len.dims[0] != s->batch) {
        kl_fail(err, "%s: %lld entries; qo_indptr.npy has %lld (batch + 1) and kv_indptr.npy %lld",
                kl_case_path(c, "kv_last_page_len.npy", path, sizeof path), (long long)p->kv_last_page_len.dims[0],
                (long long)p->qo_indptr.dims[0], (long long)p->kv_indptr.dims[0]);
        goto fail;
    }
    bind_shape(p);
    if (kl_case_param_double(c, "sm_scale", 1.0 / sqrt((double)s->head_dim), &sm_scale, err)) goto fail;
    s->sm_scale = sm_scale, s->causal = causal;
    if (!isfinite(sm_scale) || !(sm_scale > 0)) {
        kl_fail(err, "%s/meta.json: param \"sm_scale\" must be finite and > 0", c->dir);
        goto fail;
    }
    /* The index arrays: named after the file whose values disagree. */
    char where[1300];
    snprintf(where, sizeof where, "%s/{qo_indptr,kv_indptr,kv_indices,kv_last_page_len}.npy", c->dir);
    if (kl_attention_prefill_validate(p, where, err)) goto fail;

    if (kl_tensor_expect(&out, kl_case_path(c, "out.npy", path, sizeof path), 3, q.dims, err) ||
        kl_tensor_expect(&lse, kl_case_path(c, "lse.npy", path, sizeof path), 2, q.dims, err))
        goto fail;
    if (kl_tensor_convert_exact(&p->q, &q, p->dtype, kl_case_path(c, "q.npy", path, sizeof path), err) ||
        kl_tensor_convert_exact(&p->k_cache, &kc, p->dtype, kl_case_path(c, "k_cache.npy", path, sizeof path), err) ||
        kl_tensor_convert_exact(&p->v_cache, &vc, p->dtype, kl_case_path(c, "v_cache.npy", path, sizeof path), err))
        goto fail;

    kl_attention_prefill_set_outputs(p, expected);
    for (int64_t i = 0; i < expected->o[0].n; i++) expected->o[0].v[i] = kl_load_elem(out.dtype, out.data, (size_t)i);
    for (int64_t i = 0; i < expected->o[1].n; i++) expected->o[1].v[i] = kl_load_elem(lse.dtype, lse.data, (size_t)i);
    kl_tensor_free(&q), kl_tensor_free(&kc), kl_tensor_free(&vc), kl_tensor_free(&out), kl_tensor_free(&lse);
    return p;
fail:
    kl_tensor_free(&q), kl_tensor_free(&kc), kl_tensor_free(&vc), kl_tensor_free(&out), kl_tensor_free(&lse);
    kl_outputs_free(expected);
    kl_attention_prefill_problem_free(p);
    return NULL;
}

/* ---- random problems and the check catalogue ---- */

struct kl_attention_prefill_problem *kl_attention_prefill_problem_random(const struct kl_attention_prefill_spec *sp,
                                                                         uint64_t seed)
{
    struct kl_attention_prefill_problem *p = calloc(1, sizeof *p);
    struct kl_attention_prefill_shape *s = &p->shape;
    struct kl_rng rng;
    kl_rng_seed(&rng, seed);
    int64_t total_q = 0, pages = 0;
    for (int64_t b = 0; b < sp->batch; b++) {
        KL_CHECK(sp->kv_lens[b] >= sp->q_lens[b] && sp->q_lens[b] >= 0, "spec: request %lld has q_len > kv_len",
                 (long long)b);
        total_q += sp->q_lens[b];
        pages += (sp->kv_lens[b] + sp->page_size - 1) / sp->page_size;
    }
    *s = (struct kl_attention_prefill_shape){.batch = sp->batch, .total_q = total_q, .num_qo_heads = sp->num_qo_heads,
                                             .num_kv_heads = sp->num_kv_heads, .head_dim = sp->head_dim,
                                             .page_size = sp->page_size, .num_pages = pages + sp->spare_pages,
                                             .sm_scale = 1.0 / sqrt((double)sp->head_dim), .causal = sp->causal};
    p->dtype = sp->dtype;
    const int64_t nb1 = sp->batch + 1;
    kl_tensor_alloc(&p->qo_indptr, KL_I32, 1, &nb1);
    kl_tensor_alloc(&p->kv_indptr, KL_I32, 1, &nb1);
    kl_tensor_alloc(&p->kv_indices, KL_I32, 1, &pages);
    kl_tensor_alloc(&p->kv_last_page_len, KL_I32, 1, &sp->batch);
    int32_t *qo = p->qo_indptr.data, *kv = p->kv_indptr.data, *idx = p->kv_indices.data;
    int32_t *last = p->kv_last_page_len.data;
    /* Pages in a random order: a partial Fisher-Yates shuffle of 0..num_pages-1. */
    int64_t *perm = malloc(sizeof(int64_t) * (size_t)(s->num_pages + 1));
    for (int64_t i = 0; i < s->num_pages; i++) perm[i] = i;
    for (int64_t i = 0; i < pages; i++) {
        int64_t j = i + kl_rng_range(&rng, s->num_pages - i), t = perm[i];
        perm[i] = perm[j], perm[j] = t;
        idx[i] = (int32_t)perm[i];
    }
    free(perm);
    for (int64_t b = 0; b < sp->batch; b++) {
        const int64_t n = (sp->kv_lens[b] + sp->page_size - 1) / sp->page_size;
        qo[b + 1] = (int32_t)(qo[b] + sp->q_lens[b]);
        kv[b + 1] = (int32_t)(kv[b] + n);
        last[b] = n > 0 ? (int32_t)(sp->kv_lens[b] - (n - 1) * sp->page_size) : 0;
    }
    bind_shape(p);
    const int64_t qdims[3] = {total_q, sp->num_qo_heads, sp->head_dim};
    const int64_t cdims[4] = {s->num_pages, sp->page_size, sp->num_kv_heads, sp->head_dim};
    kl_tensor_alloc(&p->q, sp->dtype, 3, qdims);
    kl_tensor_alloc(&p->k_cache, sp->dtype, 4, cdims);
    kl_tensor_alloc(&p->v_cache, sp->dtype, 4, cdims);
    kl_rng_fill_normal(&rng, &p->q, sp->q_scale > 0 ? sp->q_scale : 1.0);
    kl_rng_fill_normal(&rng, &p->k_cache, 1.0);
    kl_rng_fill_normal(&rng, &p->v_cache, 1.0);
    /* The slots of a request's last page past its keys hold NaN, as an uninitialised cache may: a kernel
     * that lets them into P V (0 x NaN = NaN; TMA variants copy whole pages) fails here. */
    for (int64_t b = 0; b < sp->batch; b++) {
        if (kv[b + 1] == kv[b]) continue;
        const int64_t page = idx[kv[b + 1] - 1];
        for (int64_t slot = last[b]; slot < sp->page_size; slot++)
            for (int64_t e = 0; e < sp->num_kv_heads * sp->head_dim; e++) {
                const size_t at = (size_t)((page * sp->page_size + slot) * sp->num_kv_heads * sp->head_dim + e);
                kl_store_elem(sp->dtype, p->k_cache.data, at, NAN);
                kl_store_elem(sp->dtype, p->v_cache.data, at, NAN);
            }
    }
    struct kl_err err;
    KL_CHECK(kl_attention_prefill_validate(p, "random problem", &err) == 0, "%s", err.msg);
    return p;
}

/* The edge catalogue: every shape the kernels special-case, small enough for the float64 reference.
 * An edge whose kv_lens[0] is -1 is a batch of `batch` requests of q_len q_lens[0] whose kv_len -
 * q_len runs 0, 1, ..., batch - 1: the causal diagonal of a query tile's first row lands on every
 * key of a key tile of up to `batch` keys. Tiled kernels skip the mask on the key tiles that row
 * sees whole, so a mistake there shows at one offset per tile size only. The variants' key tiles:
 * 32 (v1; mainloop_sm80.cuh at head_dim 256), 64 (mainloop_sm80.cuh; mainloop_sm90.cuh at head_dim 256), 128 (mainloop_sm90.cuh,
 * head_dim <= 128). */
#define MAXB 5
static const struct edge {
    int64_t batch, q_lens[MAXB], kv_lens[MAXB];
    int64_t qo_heads, kv_heads, head_dim, page_size;
    bool causal;
    enum kl_dtype dtype;
    double q_scale;
    const char *what;
} kedges[] = {
    {1, {1}, {1}, 8, 2, 128, 16, true, KL_BF16, 1, "one query, one key"},
    {3, {1, 1, 1}, {300, 17, 1}, 8, 2, 128, 16, true, KL_F16, 1, "q_len 1 over many keys (decode-like)"},
    {1, {37}, {300}, 8, 2, 128, 16, true, KL_BF16, 1, "extend: q 37 on kv 300"},
    {4, {5, 0, 40, 0}, {5, 33, 77, 0}, 8, 2, 64, 16, true, KL_BF16, 1, "empty requests in a ragged batch"},
    {3, {20, 9, 31}, {26, 9, 70}, 4, 1, 128, 5, true, KL_BF16, 1, "odd page size 5"},
    {2, {30, 12}, {45, 12}, 4, 2, 64, 1, true, KL_F16, 1, "page size 1"},
    {2, {33, 17}, {33, 49}, 4, 4, 128, 16, true, KL_BF16, 1, "last page partly full"},
    {1, {70}, {90}, 8, 8, 128, 16, true, KL_BF16, 1, "GQA 1"},
    {1, {70}, {90}, 8, 2, 128, 16, true, KL_BF16, 1, "GQA 4"},
    {1, {70}, {90}, 16, 2, 64, 16, true, KL_BF16, 1, "GQA 8"},
    {2, {65, 3}, {80, 200}, 4, 2, 256, 16, true, KL_BF16, 1, "head_dim 256"},
    {1, {97}, {97}, 8, 2, 128, 16, true, KL_BF16, 1, "odd q_len 97"},
    {2, {40, 25}, {60, 25}, 4, 2, 128, 16, true, KL_F32, 1, "fp32"},
    {2, {40, 25}, {60, 25}, 4, 2, 128, 16, true, KL_F16, 1, "fp16"},
    {1, {64}, {130}, 8, 2, 128, 16, true, KL_BF16, 40, "large logits (exp overflows without the max)"},
    {3, {50, 1, 20}, {50, 90, 200}, 8, 2, 128, 16, false, KL_BF16, 1, "non-causal ragged"},
    {1, {300}, {300}, 4, 1, 128, 16, true, KL_BF16, 1, "several query and key tiles, causal"},
    {1, {130}, {1000}, 8, 2, 64, 16, false, KL_F16, 1, "long keys, non-causal"},
    {5, {200, 129, 64, 1, 255}, {200, 300, 64, 129, 400}, 8, 2, 128, 7, true, KL_BF16, 1,
     "ragged batch of many tiles, page 7"},
    {128, {2}, {-1}, 8, 2, 128, 16, true, KL_BF16, 1, "causal diagonal at every offset of 128-key tiles"},
    {128, {2}, {-1}, 16, 2, 64, 7, true, KL_F16, 1, "causal diagonal at every offset of 128-key tiles, GQA 8, page 7"},
    {64, {3}, {-1}, 4, 2, 256, 16, true, KL_BF16, 1, "causal diagonal at every offset of 64-key tiles"},
    {32, {2}, {-1}, 4, 2, 64, 1, true, KL_F32, 1, "causal diagonal at every offset of 32-key tiles in fp32"},
};
#define N_EDGES ((int)(sizeof kedges / sizeof kedges[0]))
#define MAX_REQUESTS 128
#define N_RANDOM 6

/* snprintf at *off, never past len. */
__attribute__((format(printf, 4, 5))) static void append(char *buf, size_t len, size_t *off, const char *fmt, ...)
{
    if (*off >= len) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *off, len - *off, fmt, ap);
    va_end(ap);
    if (n > 0) *off += (size_t)n;
}

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
        static const int64_t dims[3] = {64, 128, 256}, groups[4] = {1, 2, 4, 8}, pages[4] = {1, 3, 16, 16};
        const int64_t kvh = 1 + kl_rng_range(&rng, 2);
        e = (struct edge){1 + kl_rng_range(&rng, MAXB), {0}, {0}, kvh * groups[kl_rng_range(&rng, 4)], kvh,
                          dims[kl_rng_range(&rng, 3)], pages[kl_rng_range(&rng, 4)], kl_rng_range(&rng, 2) == 1,
                          types[kl_rng_range(&rng, 3)], 1, "random"};
        for (int64_t b = 0; b < e.batch; b++) {
            e.q_lens[b] = kl_rng_range(&rng, 4) == 0 ? kl_rng_range(&rng, 3) : kl_rng_range(&rng, 200);
            e.kv_lens[b] = e.q_lens[b] + kl_rng_range(&rng, 250);
        }
    }
    const bool offsets = e.kv_lens[0] == -1;
    int64_t q_lens[MAX_REQUESTS], kv_lens[MAX_REQUESTS];
    KL_CHECK(e.batch <= MAX_REQUESTS, "edge %d: %lld requests, at most %d", i, (long long)e.batch, MAX_REQUESTS);
    for (int64_t b = 0; b < e.batch; b++) {
        q_lens[b] = offsets ? e.q_lens[0] : e.q_lens[b];
        kv_lens[b] = offsets ? e.q_lens[0] + b : e.kv_lens[b];
    }
    size_t off = 0;
    append(label, len, &off, "%s:batch=%lld,q=", e.what, (long long)e.batch);
    if (offsets) {
        append(label, len, &off, "%lld,kv=q+0..%lld", (long long)e.q_lens[0], (long long)(e.batch - 1));
    } else {
        for (int64_t b = 0; b < e.batch; b++) append(label, len, &off, "%s%lld", b ? "/" : "", (long long)q_lens[b]);
        append(label, len, &off, ",kv=");
        for (int64_t b = 0; b < e.batch; b++) append(label, len, &off, "%s%lld", b ? "/" : "", (long long)kv_lens[b]);
    }
    append(label, len, &off, ",heads=%lld/%lld,head_dim=%lld,page=%lld,%s,%s", (long long)e.qo_heads,
           (long long)e.kv_heads, (long long)e.head_dim, (long long)e.page_size, e.causal ? "causal" : "noncausal",
           kl_dtype_name(e.dtype));
    for (char *c = label; *c; c++)
        if (*c == ' ') *c = '_';
    struct kl_attention_prefill_spec sp = {.batch = e.batch, .q_lens = q_lens, .kv_lens = kv_lens,
                                           .num_qo_heads = e.qo_heads, .num_kv_heads = e.kv_heads,
                                           .head_dim = e.head_dim, .page_size = e.page_size, .spare_pages = 3,
                                           .causal = e.causal, .dtype = e.dtype, .q_scale = e.q_scale};
    return kl_attention_prefill_problem_random(&sp, kl_rng_u64(&rng));
}

int kl_attention_prefill_expected(const struct kl_attention_prefill_problem *p, struct kl_outputs *o,
                                  struct kl_err *err)
{
    kl_attention_prefill_set_outputs(p, o);
    double *q = kl_tensor_to_f64(&p->q), *k = kl_tensor_to_f64(&p->k_cache), *v = kl_tensor_to_f64(&p->v_cache);
    int rc = kl_attention_prefill_reference(&p->shape, q, k, v, o->o[0].v, o->o[1].v);
    free(q), free(k), free(v);
    return rc ? kl_fail(err, "reference: out of memory") : 0;
}

static int reference(const void *prob, struct kl_outputs *out, struct kl_err *err)
{
    return kl_attention_prefill_expected(prob, out, err);
}

double kl_attention_prefill_pairs(const struct kl_attention_prefill_problem *p)
{
    const struct kl_attention_prefill_shape *s = &p->shape;
    double pairs = 0;
    for (int64_t b = 0; b < s->batch; b++) {
        const int64_t q_len = s->qo_indptr[b + 1] - s->qo_indptr[b], kv_len = kl_attention_prefill_kv_len(s, b);
        for (int64_t i = 0; i < q_len; i++) pairs += (double)kl_attention_prefill_visible(s->causal, q_len, kv_len, i);
    }
    return pairs;
}

/* ---- the device side ---- */

/* The device side (lab/core/tensor_ops.c does the work): inputs uploaded, out and lse poisoned
 * (0xFF bytes: NaN in every float type, so unwritten elements fail), the workspace zeroed; 16 bytes
 * where a tensor is empty. */
static void device(const void *prob, void *params, struct kl_dev_buf *b)
{
    const struct kl_attention_prefill_problem *p = prob;
    const struct kl_attention_prefill_shape *s = &p->shape;
    *(struct kl_attention_prefill_params *)params = (struct kl_attention_prefill_params){
        .workspace_bytes = KL_ATTENTION_PREFILL_WORKSPACE_BYTES, .batch = s->batch, .total_q = s->total_q,
        .num_qo_heads = s->num_qo_heads, .num_kv_heads = s->num_kv_heads, .head_dim = s->head_dim,
        .page_size = s->page_size, .num_pages = s->num_pages, .max_q_len = p->max_q_len,
        .sm_scale = (float)s->sm_scale, .causal = s->causal, .dtype = p->dtype};
    const struct kl_tensor *src[7] = {&p->q, &p->k_cache, &p->v_cache, &p->qo_indptr,
                                      &p->kv_indptr, &p->kv_indices, &p->kv_last_page_len};
    for (int i = 0; i < 7; i++) b[i] = kl_buf_tensor(src[i], true);
    const size_t out_bytes = (size_t)(s->total_q * s->num_qo_heads * s->head_dim) * kl_dtype_size(p->dtype);
    const size_t lse_bytes = (size_t)(s->total_q * s->num_qo_heads) * sizeof(float);
    b[7] = kl_buf_fill(out_bytes, 0xff, true), b[8] = kl_buf_fill(lse_bytes, 0xff, true);
    b[9] = kl_buf_fill(KL_ATTENTION_PREFILL_WORKSPACE_BYTES, 0, true);
}

static void set_outputs(const void *prob, struct kl_outputs *o) { kl_attention_prefill_set_outputs(prob, o); }

static void declined(const struct kl_variant *v, const void *prob, struct kl_err *err)
{
    const struct kl_attention_prefill_problem *p = prob;
    kl_fail(err, "%s does not take %s inputs with head_dim %lld", v->name, kl_dtype_name(p->dtype),
            (long long)p->shape.head_dim);
}

#define B(field) offsetof(struct kl_attention_prefill_params, field)
KL_TENSOR_OPS(kl_attention_prefill_ops, struct kl_attention_prefill_params, kl_attention_prefill_launch_fn,
              .load = load, .make = make, .reference = reference, .free = free_problem, .n_bufs = 10,
              .buf_field = {B(q), B(k_cache), B(v_cache), B(qo_indptr), B(kv_indptr), B(kv_indices),
                            B(kv_last_page_len), B(out), B(lse), B(workspace)},
              .out_field = {B(out), B(lse)}, .device = device, .outputs = set_outputs, .declined = declined);
#undef B

KL_MODULE(attention_prefill,
          .summary = "prefill attention over a paged K/V cache: ragged batch, causal (bottom-right) or not, GQA",
          .learning_step = 7, .min_cc = 80,
          .tensor = &kl_attention_prefill_ops, .perf = &kl_attention_prefill_perf, .guide = &kl_attention_prefill_guide,
          .tolerance = kl_attention_tolerance_text);
