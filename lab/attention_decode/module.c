/* The attention_decode lab module: golden-case loading, the page-table checks, the check
 * catalogue, running a variant. Tests and `kernlab verify/check/bench` all come through here;
 * the perf workloads are in perf.c. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention_decode/attention_decode.h"
#include "lab/attention_decode/attention_decode_module.h"
#include "lab/core/registry.h"
#include "reference/attention_decode.h"

void kl_attention_decode_problem_free(struct kl_attention_decode_problem *p)
{
    if (!p) return;
    kl_tensor_free(&p->q), kl_tensor_free(&p->k_cache), kl_tensor_free(&p->v_cache), kl_tensor_free(&p->qo_indptr);
    kl_tensor_free(&p->kv_indptr), kl_tensor_free(&p->kv_indices), kl_tensor_free(&p->kv_last_page_len);
    kl_tensor_free(&p->k_scale), kl_tensor_free(&p->v_scale);
    free(p);
}

static void free_problem(void *p) { kl_attention_decode_problem_free(p); }

static int64_t kv_len_of(const struct kl_attention_decode_problem *p, int64_t b)
{
    const int32_t *indptr = p->kv_indptr.data, *last = p->kv_last_page_len.data;
    const int64_t pages = indptr[b + 1] - indptr[b];
    return pages ? (pages - 1) * p->page_size + last[b] : 0;
}

int64_t kl_attention_decode_problem_kv_len(const struct kl_attention_decode_problem *p, int64_t b)
{
    return kv_len_of(p, b);
}

/* Calls fn(ctx, page, row) for every attended token of request b, in token order. */
#define FOR_EACH_TOKEN(p, b, page, row, body)                                                      \
    for (int64_t t_ = 0, n_ = kv_len_of(p, b); t_ < n_; t_++) {                                 \
        const int64_t page = ((const int32_t *)(p)->kv_indices.data)[((const int32_t *)(p)->kv_indptr.data)[b] + \
                                                                    t_ / (p)->page_size];       \
        const int64_t row = t_ % (p)->page_size;                                                 \
        body;                                                                                    \
    }

static void set_outputs(const void *prob, struct kl_outputs *o)
{
    const struct kl_attention_decode_problem *p = prob;
    kl_outputs_set(o, 0, "out", p->dtype, false, p->rows * p->num_qo_heads * p->head_dim);
    kl_outputs_set(o, 1, "lse", KL_F32, false, p->rows * p->num_qo_heads);
    const int64_t row = p->num_qo_heads * p->head_dim; /* one query row of out */
    kl_outputs_policy(o, 0, p->k_scale.data ? kl_policy_attention_out_fp8(p->dtype, p->head_dim, p->max_kv_len,
                                                                           p->logit_bound, p->v_abs_max, row)
                                            : kl_policy_attention_out(p->dtype, p->head_dim, p->max_kv_len,
                                                                      p->logit_bound, p->v_abs_max, row));
    kl_outputs_policy(o, 1, kl_policy_attention_lse(p->head_dim, p->max_kv_len, p->logit_bound));
}

int kl_attention_decode_check_table(struct kl_attention_decode_problem *p, const char *what, struct kl_err *err)
{
    const int32_t *indptr = p->kv_indptr.data, *idx = p->kv_indices.data, *last = p->kv_last_page_len.data;
    const int64_t n_idx = kl_numel(&p->kv_indices);
    if (indptr[0] != 0) return kl_fail(err, "%skv_indptr.npy: kv_indptr[0] = %d, must be 0", what, indptr[0]);
    p->max_kv_len = 0;
    for (int64_t b = 0; b < p->batch; b++) {
        if (indptr[b + 1] < indptr[b])
            return kl_fail(err, "%skv_indptr.npy: decreases at request %lld (%d then %d)", what, (long long)b,
                           indptr[b], indptr[b + 1]);
        const int64_t pages = indptr[b + 1] - indptr[b];
        if (pages && (last[b] < 1 || last[b] > p->page_size))
            return kl_fail(err, "%skv_last_page_len.npy: request %lld has %d tokens in its last page, page_size %lld",
                           what, (long long)b, last[b], (long long)p->page_size);
        if (!pages && last[b] != 0)
            return kl_fail(err, "%skv_last_page_len.npy: request %lld has no pages but a last page of %d tokens", what,
                           (long long)b, last[b]);
        if (kv_len_of(p, b) > p->max_kv_len) p->max_kv_len = kv_len_of(p, b);
    }
    if (indptr[p->batch] != n_idx)
        return kl_fail(err, "%skv_indptr.npy: ends at %d but kv_indices holds %lld pages", what, indptr[p->batch],
                       (long long)n_idx);
    for (int64_t i = 0; i < n_idx; i++)
        if (idx[i] < 0 || idx[i] >= p->num_pages)
            return kl_fail(err, "%skv_indices.npy: kv_indices[%lld] = %d is not a page (num_pages %lld)", what,
                           (long long)i, idx[i], (long long)p->num_pages);
    p->rows = p->batch, p->max_q_len = 1;
    if (!p->qo_indptr.data) return 0;
    const int32_t *qo = p->qo_indptr.data;
    int64_t *lens = malloc(sizeof(int64_t) * (size_t)(p->batch + 1));
    char why[200];
    for (int64_t b = 0; b < p->batch; b++) lens[b] = kv_len_of(p, b);
    const int bad = kl_attention_decode_check_qo(qo, lens, p->batch, KL_DECODE_MAX_Q_LEN, why, sizeof why);
    free(lens);
    if (bad) return kl_fail(err, "%sqo_indptr.npy: %s", what, why);
    p->rows = qo[p->batch];
    for (int64_t b = 0; b < p->batch; b++)
        if (qo[b + 1] - qo[b] > p->max_q_len) p->max_q_len = qo[b + 1] - qo[b];
    return 0;
}

void kl_attention_decode_bounds(struct kl_attention_decode_problem *p)
{
    const int64_t d = p->head_dim, row = p->num_kv_heads * d;
    double q_norm = 0, k_norm = 0, v_max = 0;
    for (int64_t i = 0; i < p->rows * p->num_qo_heads; i++) {
        double s = 0;
        for (int64_t j = 0; j < d; j++) s += pow(kl_load_elem(p->dtype, p->q.data, (size_t)(i * d + j)), 2);
        q_norm = fmax(q_norm, sqrt(s));
    }
    const float *ks = p->k_scale.data, *vs = p->v_scale.data; /* an FP8 cache: its values are code x scale */
    for (int64_t b = 0; b < p->batch; b++)
        FOR_EACH_TOKEN(p, b, page, r, {
            for (int64_t g = 0; g < p->num_kv_heads; g++) {
                const int64_t at = (page * p->page_size + r) * row + g * d;
                const double k_sc = ks ? ks[g] : 1; /* (no comma: a macro argument) */
                const double v_sc = vs ? vs[g] : 1;
                double s = 0;
                for (int64_t j = 0; j < d; j++) {
                    s += pow(k_sc * kl_load_elem(p->k_cache.dtype, p->k_cache.data, (size_t)(at + j)), 2);
                    v_max = fmax(v_max, fabs(v_sc * kl_load_elem(p->v_cache.dtype, p->v_cache.data, (size_t)(at + j))));
                }
                k_norm = fmax(k_norm, sqrt(s));
            }
        })
    p->logit_bound = fabs(p->sm_scale) * q_norm * k_norm;
    p->v_abs_max = v_max;
}

/* An FP8 case's own arrays: the caches |u1 (e4m3 codes), k_scale and v_scale <f4 [kv_heads], finite
 * and > 0, no query-row opt-in (the FP8 path takes one query per request). */
static int fp8_arrays(const struct kl_case *c, struct kl_attention_decode_problem *p, const struct kl_tensor *kc,
                      const struct kl_tensor *vc, struct kl_err *err)
{
    char path[1200];
    if (kc->dtype != KL_U8 || vc->dtype != KL_U8)
        return kl_fail(err, "%s/k_cache.npy, v_cache.npy: an FP8 cache is |u1 (e4m3 codes)", c->dir);
    if (p->qo_indptr.data) return kl_fail(err, "%s/qo_indptr.npy: an FP8 case has one query per request", c->dir);
    const struct kl_tensor *sc[2] = {&p->k_scale, &p->v_scale};
    for (int i = 0; i < 2; i++) {
        kl_case_path(c, i ? "v_scale.npy" : "k_scale.npy", path, sizeof path);
        if (sc[i]->dtype != KL_F32) return kl_fail(err, "%s: dtype %s, expected <f4", path, kl_dtype_name(sc[i]->dtype));
        if (kl_tensor_expect(sc[i], path, 1, &p->num_kv_heads, err)) return -1;
        for (int64_t g = 0; g < p->num_kv_heads; g++) {
            const float x = ((const float *)sc[i]->data)[g];
            if (!(isfinite(x) && x > 0)) return kl_fail(err, "%s: kv head %lld's scale is not finite and > 0", path, (long long)g);
        }
    }
    return 0;
}

static void *load(const struct kl_case *c, struct kl_outputs *expected, struct kl_err *err)
{
    struct kl_attention_decode_problem *p = calloc(1, sizeof *p);
    struct kl_tensor q = {0}, kc = {0}, vc = {0}, out = {0}, lse = {0};
    char path[1200], what[1100];
    p->dtype = c->dtype;
    /* An FP8 cache says so (lab/CONTRACTS.md section 4): |u1 codes and a scale per kv head. */
    const cJSON *kv = c->params ? cJSON_GetObjectItemCaseSensitive(c->params, "kv_dtype") : NULL;
    const bool fp8 = kv != NULL;
    if (kv && !(cJSON_IsString(kv) && strcmp(kv->valuestring, "fp8_e4m3") == 0)) {
        kl_fail(err, "%s/meta.json: params.kv_dtype must be \"fp8_e4m3\" (or absent: caches in dtype)", c->dir);
        goto fail;
    }
    if (c->dtype != KL_F32 && c->dtype != KL_F16 && c->dtype != KL_BF16) {
        kl_fail(err, "%s/meta.json: attention_decode needs dtype fp32, fp16 or bf16", c->dir);
        goto fail;
    }
    if (fp8 && c->dtype == KL_F32) {
        kl_fail(err, "%s/meta.json: an FP8 cache needs dtype fp16 or bf16 (q and out)", c->dir);
        goto fail;
    }
    if (fp8 && (kl_case_array(c, "k_scale", &p->k_scale, false, err) ||
                kl_case_array(c, "v_scale", &p->v_scale, false, err)))
        goto fail;
    if (kl_case_array(c, "q", &q, false, err) || kl_case_array(c, "k_cache", &kc, false, err) ||
        kl_case_array(c, "v_cache", &vc, false, err) || kl_case_array(c, "kv_indptr", &p->kv_indptr, false, err) ||
        kl_case_array(c, "kv_indices", &p->kv_indices, false, err) ||
        kl_case_array(c, "kv_last_page_len", &p->kv_last_page_len, false, err) ||
        kl_case_array(c, "out", &out, false, err) || kl_case_array(c, "lse", &lse, false, err) ||
        kl_case_array(c, "qo_indptr", &p->qo_indptr, true, err) < 0)
        goto fail;
    if (kl_tensor_expect(&q, kl_case_path(c, "q.npy", path, sizeof path), 3, (int64_t[]){-1, -1, -1}, err)) goto fail;
    p->batch = q.dims[0], p->num_qo_heads = q.dims[1], p->head_dim = q.dims[2];
    if (p->qo_indptr.data) { /* several query rows per request: the batch is qo_indptr's */
        if (kl_tensor_expect(&p->qo_indptr, kl_case_path(c, "qo_indptr.npy", path, sizeof path), 1, (int64_t[]){-1},
                             err))
            goto fail;
        p->batch = p->qo_indptr.dims[0] - 1;
    }
    if (kl_tensor_expect(&kc, kl_case_path(c, "k_cache.npy", path, sizeof path), 4, (int64_t[]){-1, -1, -1, p->head_dim},
                         err))
        goto fail;
    p->num_pages = kc.dims[0], p->page_size = kc.dims[1], p->num_kv_heads = kc.dims[2];
    if (p->head_dim < 1 || p->page_size < 1 || p->num_kv_heads < 1 || p->num_qo_heads < 1) {
        kl_fail(err, "%s: head_dim, page_size, num_kv_heads and num_qo_heads must be >= 1", path);
        goto fail;
    }
    if (p->num_qo_heads % p->num_kv_heads) {
        kl_fail(err, "%s: %lld qo heads (q.npy) are not a multiple of %lld kv heads", path, (long long)p->num_qo_heads,
                (long long)p->num_kv_heads);
        goto fail;
    }
    const int64_t batch1 = p->batch + 1;
    if (kl_tensor_expect(&vc, kl_case_path(c, "v_cache.npy", path, sizeof path), 4, kc.dims, err) ||
        kl_tensor_expect(&out, kl_case_path(c, "out.npy", path, sizeof path), 3, q.dims, err) ||
        kl_tensor_expect(&lse, kl_case_path(c, "lse.npy", path, sizeof path), 2, q.dims, err) ||
        kl_tensor_expect(&p->kv_indptr, kl_case_path(c, "kv_indptr.npy", path, sizeof path), 1, &batch1, err) ||
        kl_tensor_expect(&p->kv_last_page_len, kl_case_path(c, "kv_last_page_len.npy", path, sizeof path), 1,
                         &p->batch, err) ||
        kl_tensor_expect(&p->kv_indices, kl_case_path(c, "kv_indices.npy", path, sizeof path), 1, (int64_t[]){-1}, err))
        goto fail;
    if (fp8 && (fp8_arrays(c, p, &kc, &vc, err))) goto fail;
    const char *ints[4] = {"kv_indptr", "kv_indices", "kv_last_page_len", "qo_indptr"};
    const struct kl_tensor *it[4] = {&p->kv_indptr, &p->kv_indices, &p->kv_last_page_len, &p->qo_indptr};
    for (int i = 0; i < 4; i++)
        if (it[i]->data && it[i]->dtype != KL_I32) {
            snprintf(what, sizeof what, "%s.npy", ints[i]);
            kl_fail(err, "%s: dtype %s, expected <i4", kl_case_path(c, what, path, sizeof path),
                    kl_dtype_name(it[i]->dtype));
            goto fail;
        }
    snprintf(what, sizeof what, "%s/", c->dir);
    if (kl_attention_decode_check_table(p, what, err)) goto fail;
    if (p->rows != q.dims[0]) {
        kl_fail(err, "%sqo_indptr.npy: ends at %lld but q.npy has %lld rows", what, (long long)p->rows,
                (long long)q.dims[0]);
        goto fail;
    }
    double scale;
    if (kl_case_param_double(c, "sm_scale", 1.0 / sqrt((double)p->head_dim), &scale, err)) goto fail;
    p->sm_scale = scale;
    if (kl_tensor_convert_exact(&p->q, &q, p->dtype, kl_case_path(c, "q.npy", path, sizeof path), err))
        goto fail;
    if (fp8) { /* the codes as they are */
        p->k_cache = kc, p->v_cache = vc, kc = (struct kl_tensor){0}, vc = (struct kl_tensor){0};
        p->k_cache.dtype = p->v_cache.dtype = KL_FP8_E4M3;
    } else if (kl_tensor_convert_exact(&p->k_cache, &kc, p->dtype, kl_case_path(c, "k_cache.npy", path, sizeof path),
                                       err) ||
               kl_tensor_convert_exact(&p->v_cache, &vc, p->dtype, kl_case_path(c, "v_cache.npy", path, sizeof path),
                                       err))
        goto fail;
    kl_attention_decode_bounds(p);
    set_outputs(p, expected);
    for (int64_t i = 0; i < expected->o[0].n; i++) expected->o[0].v[i] = kl_load_elem(out.dtype, out.data, (size_t)i);
    for (int64_t i = 0; i < expected->o[1].n; i++) expected->o[1].v[i] = kl_load_elem(lse.dtype, lse.data, (size_t)i);
    kl_tensor_free(&q), kl_tensor_free(&kc), kl_tensor_free(&vc), kl_tensor_free(&out), kl_tensor_free(&lse);
    return p;
fail:
    kl_tensor_free(&q), kl_tensor_free(&kc), kl_tensor_free(&vc), kl_tensor_free(&out), kl_tensor_free(&lse);
    kl_outputs_free(expected);
    kl_attention_decode_problem_free(p);
    return NULL;
}

struct kl_attention_decode_problem *kl_attention_decode_problem_random(int64_t batch, int64_t num_qo_heads,
                                                                       int64_t num_kv_heads, int64_t head_dim,
                                                                       int64_t page_size, const int64_t *kv_lens,
                                                                       enum kl_dtype dtype, double q_scale,
                                                                       uint64_t seed)
{
    return kl_attention_decode_problem_random_multi(batch, num_qo_heads, num_kv_heads, head_dim, page_size, kv_lens,
                                                    NULL, dtype, q_scale, seed);
}

struct kl_attention_decode_problem *kl_attention_decode_problem_random_multi(
    int64_t batch, int64_t num_qo_heads, int64_t num_kv_heads, int64_t head_dim, int64_t page_size,
    const int64_t *kv_lens, const int64_t *q_lens, enum kl_dtype dtype, double q_scale, uint64_t seed)
{
    struct kl_attention_decode_problem *p = calloc(1, sizeof *p);
    struct kl_rng rng;
    kl_rng_seed(&rng, seed);
    int64_t pages = 0;
    for (int64_t b = 0; b < batch; b++) pages += (kv_lens[b] + page_size - 1) / page_size;
    *p = (struct kl_attention_decode_problem){.batch = batch, .num_qo_heads = num_qo_heads,
                                              .num_kv_heads = num_kv_heads, .head_dim = head_dim,
                                              .page_size = page_size, .num_pages = pages + 2,
                                              .sm_scale = 1.0 / sqrt((double)head_dim), .dtype = dtype};
    const int64_t b1 = batch + 1;
    int64_t rows = batch;
    if (q_lens) {
        kl_tensor_alloc(&p->qo_indptr, KL_I32, 1, &b1);
        int32_t *qo = p->qo_indptr.data;
        for (int64_t b = 0; b < batch; b++) qo[b + 1] = qo[b] + (int32_t)q_lens[b];
        rows = qo[batch];
    }
    const int64_t qd[3] = {rows, num_qo_heads, head_dim}, cd[4] = {p->num_pages, page_size, num_kv_heads, head_dim};
    kl_tensor_alloc(&p->q, dtype, 3, qd);
    kl_tensor_alloc(&p->k_cache, dtype, 4, cd), kl_tensor_alloc(&p->v_cache, dtype, 4, cd);
    kl_tensor_alloc(&p->kv_indptr, KL_I32, 1, &b1), kl_tensor_alloc(&p->kv_indices, KL_I32, 1, &pages);
    kl_tensor_alloc(&p->kv_last_page_len, KL_I32, 1, &batch);
    kl_rng_fill_normal(&rng, &p->q, q_scale);
    /* Pages handed out from a shuffled pool (a fragmented cache); the two spare pages and the
     * rows past each request's last token keep the poison. */
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)p->num_pages), *indptr = p->kv_indptr.data;
    for (int64_t i = 0; i < p->num_pages; i++) perm[i] = (int32_t)i;
    for (int64_t i = p->num_pages - 1; i > 0; i--) {
        int64_t j = kl_rng_range(&rng, i + 1);
        int32_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    memcpy(p->kv_indices.data, perm, sizeof(int32_t) * (size_t)pages);
    free(perm);
    for (int64_t b = 0; b < batch; b++) {
        const int64_t np = (kv_lens[b] + page_size - 1) / page_size;
        indptr[b + 1] = indptr[b] + (int32_t)np;
        ((int32_t *)p->kv_last_page_len.data)[b] = np ? (int32_t)(kv_lens[b] - (np - 1) * page_size) : 0;
    }
    const int64_t n = kl_numel(&p->k_cache);
    for (int64_t i = 0; i < n; i++) {
        kl_store_elem(dtype, p->k_cache.data, (size_t)i, KL_DECODE_POISON);
        kl_store_elem(dtype, p->v_cache.data, (size_t)i, -KL_DECODE_POISON);
    }
    struct kl_err err;
    /* Valid by construction (q_lens[b] <= kv_lens[b] is the caller's promise); sets max_kv_len. */
    KL_CHECK(kl_attention_decode_check_table(p, "random problem: ", &err) == 0, "%s", err.msg);
    const int64_t row = num_kv_heads * head_dim;
    for (int64_t b = 0; b < batch; b++)
        FOR_EACH_TOKEN(p, b, page, r, {
            for (int64_t j = 0; j < row; j++) {
                const size_t at = (size_t)((page * page_size + r) * row + j);
                double kv[2]; /* this element of K, of V */
                kl_rng_normal_pair(&rng, &kv[0], &kv[1]);
                kl_store_elem(dtype, p->k_cache.data, at, kv[0]);
                kl_store_elem(dtype, p->v_cache.data, at, kv[1]);
            }
        })
    kl_attention_decode_bounds(p);
    return p;
}

double kl_attention_decode_fp8_scale(int64_t g, bool v)
{
    return v ? 0.05 * (1 + 0.61 * (double)g) * (g % 2 ? 1 : 0.1) : 0.03 * (1 + 0.37 * (double)g) * (g % 2 ? 0.1 : 1);
}

void kl_attention_decode_problem_to_fp8(struct kl_attention_decode_problem *p)
{
    struct kl_tensor *cache[2] = {&p->k_cache, &p->v_cache}, *scale[2] = {&p->k_scale, &p->v_scale};
    const int64_t n = kl_numel(&p->k_cache), kv = p->num_kv_heads;
    for (int c = 0; c < 2; c++) {
        struct kl_tensor codes;
        kl_tensor_alloc(&codes, KL_FP8_E4M3, 4, cache[c]->dims);
        kl_tensor_alloc(scale[c], KL_F32, 1, &kv);
        for (int64_t g = 0; g < kv; g++) ((float *)scale[c]->data)[g] = (float)(kl_attention_decode_fp8_scale(g, c) / 24);
        uint8_t *to = codes.data;
        for (int64_t i = 0; i < n; i++) {
            const double x = kl_load_elem(cache[c]->dtype, cache[c]->data, (size_t)i);
            to[i] = fabs(x) == KL_DECODE_POISON ? (uint8_t)(c ? 0xFF : 0x7F) /* NaN */
                                                 : kl_f32_to_e4m3((float)(24 * x));
        }
        kl_tensor_free(cache[c]);
        *cache[c] = codes;
    }
    kl_attention_decode_bounds(p);
}

/* The check catalogue: edge cases first, then random shapes. kv lengths: a list ending in -1,
 * or {-2, lo, hi} for `batch` lengths drawn from lo..hi. */
static const struct edge {
    int64_t batch, qo_heads, kv_heads, head_dim, page_size;
    int64_t lens[8];
    enum kl_dtype dtype;
    double q_scale;
    const char *what;
} kedges[] = {
    {1, 32, 8, 128, 16, {1, -1}, KL_BF16, 1, "one request, one token"},
    {4, 32, 8, 128, 16, {37, 16, 100, 5, -1}, KL_BF16, 1, "last pages partly full"},
    {3, 8, 2, 128, 1, {97, 1, 40, -1}, KL_BF16, 1, "page_size 1"},
    {3, 8, 2, 64, 5, {23, 5, 11, -1}, KL_F16, 1, "odd page_size 5"},
    {4, 8, 2, 128, 16, {10, 0, 5, 0, -1}, KL_BF16, 1, "kv_len 0 in a batch"},
    {2, 8, 8, 128, 16, {97, 33, -1}, KL_BF16, 1, "GQA 1 (MHA)"},
    {2, 16, 2, 128, 16, {97, 64, -1}, KL_BF16, 1, "GQA 8"},
    {2, 32, 2, 64, 16, {50, 17, -1}, KL_BF16, 1, "GQA 16: two head blocks"},
    {2, 6, 2, 64, 16, {50, 17, -1}, KL_F16, 1, "GQA 3"},
    {2, 8, 2, 256, 16, {70, 33, -1}, KL_BF16, 1, "head_dim 256"},
    {2, 8, 2, 64, 16, {97, 1, -1}, KL_BF16, 1, "head_dim 64, kv_len 97"},
    {2, 8, 2, 128, 16, {60, 9, -1}, KL_BF16, 100, "large logits"},
    {2, 8, 2, 64, 16, {60, 9, -1}, KL_F32, 1, "fp32"},
    {2, 8, 2, 128, 16, {3000, 700, -1}, KL_BF16, 1, "long requests: many splits"},
    {1, 8, 1, 128, 16, {20000, -1}, KL_F16, 1, "one long request: every split of it merged"},
    {33, 8, 2, 128, 16, {-2, 1, 300}, KL_BF16, 1, "33 ragged requests"},
    {64, 32, 8, 128, 16, {-2, 300, 700}, KL_BF16, 1, "64 requests of one chunk each: ring stages reused"},
    {0, 8, 2, 128, 16, {-1}, KL_BF16, 1, "empty batch"},
};
#define N_EDGES ((int)(sizeof kedges / sizeof kedges[0]))
/* Several query tokens per request (qo_indptr): q_lens[b] rows for request b. */
static const struct draft_edge {
    struct edge e;
    int64_t q_lens[8];
} kdrafts[] = {
    {{8, 32, 8, 128, 16, {37, 16, 60, 9, 100, 23, 50, 8}, KL_BF16, 1, "draft tokens 1..8"}, {1, 2, 3, 4, 5, 6, 7, 8}},
    {{4, 16, 2, 128, 1, {33, 7, 5, 120, -1}, KL_F16, 1, "draft tokens, page_size 1, GQA 8"}, {4, 7, 5, 2}},
    {{4, 8, 8, 64, 16, {17, 3, 0, 40, -1}, KL_F32, 1, "draft tokens, MHA, an empty request"}, {8, 3, 0, 1}},
    {{3, 16, 2, 128, 16, {64, 200, 8, -1}, KL_BF16, 1, "8 draft tokens x GQA 8: 64 rows"}, {8, 8, 8}},
    {{2, 16, 2, 256, 16, {70, 9, -1}, KL_BF16, 1, "draft tokens, head_dim 256"}, {3, 8}},
    /* 642 = 5 x 128 + 2: with 128-key chunks, six of the 8 draft tokens see none of the last chunk */
    {{3, 8, 2, 128, 5, {3000, 642, 6, -1}, KL_BF16, 1, "draft tokens, long requests: many splits"}, {4, 8, 6}},
    {{3, 8, 2, 128, 16, {60, 9, 12, -1}, KL_BF16, 100, "draft tokens, large logits"}, {5, 2, 1}},
    {{2, 6, 2, 64, 16, {50, 17, -1}, KL_F16, 1, "draft tokens, GQA 3"}, {7, 2}},
};
#define N_DRAFTS ((int)(sizeof kdrafts / sizeof kdrafts[0]))
#define N_RANDOM 6
#define N_RANDOM_MULTI 4 /* after the N_RANDOM: q_len 1..8 per request */
/* FP8 caches (kl_attention_decode_problem_to_fp8), last: every variant without the FP8 path SKIPs them. */
static const struct edge kfp8[] = {
    {4, 32, 8, 128, 16, {37, 16, 100, 5, -1}, KL_BF16, 1, "fp8 cache, last pages partly full"},
    {3, 8, 8, 128, 1, {97, 1, 40, -1}, KL_BF16, 1, "fp8 cache, page_size 1, MHA"},
    {2, 16, 2, 128, 16, {3000, 700, -1}, KL_BF16, 1, "fp8 cache, GQA 8, many splits"},
    {3, 8, 2, 64, 5, {23, 0, 11, -1}, KL_F16, 1, "fp8 cache, fp16, page_size 5, an empty request"},
    {64, 32, 8, 128, 16, {-2, 300, 700}, KL_BF16, 1, "fp8 cache, 64 requests"},
    {2, 8, 2, 128, 16, {60, 9, -1}, KL_BF16, 1e5, "fp8 cache, large logits, q past fp16's range"},
};
#define N_FP8 ((int)(sizeof kfp8 / sizeof kfp8[0]))

static void *make(int i, uint64_t seed, char *label, size_t len)
{
    if (i >= N_EDGES + N_DRAFTS + N_RANDOM + N_RANDOM_MULTI + N_FP8) return NULL;
    struct kl_rng rng;
    kl_rng_seed(&rng, seed * 1000003u + (uint64_t)i);
    struct edge e;
    int64_t want_q[8] = {0}; /* q_lens of a draft edge; {-2}: drawn 1..8 */
    const bool fp8 = i >= N_EDGES + N_DRAFTS + N_RANDOM + N_RANDOM_MULTI;
    if (fp8) {
        e = kfp8[i - (N_EDGES + N_DRAFTS + N_RANDOM + N_RANDOM_MULTI)];
    } else if (i < N_EDGES) {
        e = kedges[i];
    } else if (i < N_EDGES + N_DRAFTS) {
        e = kdrafts[i - N_EDGES].e;
        memcpy(want_q, kdrafts[i - N_EDGES].q_lens, sizeof want_q);
    } else {
        static const enum kl_dtype types[3] = {KL_F32, KL_F16, KL_BF16};
        static const int64_t dims[3] = {64, 128, 256}, groups[4] = {1, 2, 4, 8}, pages[4] = {1, 5, 16, 16};
        const int64_t kv = 1 + kl_rng_range(&rng, 4);
        e = (struct edge){1 + kl_rng_range(&rng, 8), kv * groups[kl_rng_range(&rng, 4)], kv,
                          dims[kl_rng_range(&rng, 3)], pages[kl_rng_range(&rng, 4)], {-2, 0, 1200},
                          types[kl_rng_range(&rng, 3)], 1, "random"};
        if (i >= N_EDGES + N_DRAFTS + N_RANDOM) e.what = "random draft tokens", want_q[0] = -2;
    }
    int64_t lens[64] = {0}, q_lens[64] = {0};
    const bool multi = (i >= N_EDGES && i < N_EDGES + N_DRAFTS) || (i >= N_EDGES + N_DRAFTS + N_RANDOM && !fp8);
    for (int64_t b = 0; b < e.batch && b < 64; b++) {
        lens[b] = e.lens[0] == -2 ? e.lens[1] + kl_rng_range(&rng, e.lens[2] - e.lens[1] + 1) : e.lens[b];
        q_lens[b] = want_q[0] == -2 ? 1 + kl_rng_range(&rng, KL_DECODE_MAX_Q_LEN) : b < 8 ? want_q[b] : 0;
        if (q_lens[b] > lens[b]) q_lens[b] = lens[b];
    }
    snprintf(label, len, "%s:batch=%lld,heads=%lld/%lld,head_dim=%lld,page=%lld,max_kv=%lld,%s%s", e.what,
             (long long)e.batch, (long long)e.qo_heads, (long long)e.kv_heads, (long long)e.head_dim,
             (long long)e.page_size, (long long)(e.batch ? lens[0] : 0), kl_dtype_name(e.dtype),
             multi ? ",qo_indptr" : "");
    for (char *c = label; *c; c++)
        if (*c == ' ') *c = '_';
    struct kl_attention_decode_problem *p = kl_attention_decode_problem_random_multi(
        e.batch, e.qo_heads, e.kv_heads, e.head_dim, e.page_size, lens, multi ? q_lens : NULL, e.dtype, e.q_scale,
        kl_rng_u64(&rng));
    if (fp8) kl_attention_decode_problem_to_fp8(p);
    return p;
}

int kl_attention_decode_run_reference(const struct kl_attention_decode_problem *p, struct kl_outputs *o,
                                      struct kl_err *err)
{
    set_outputs(p, o);
    if (p->k_scale.data) {
        double *q8 = kl_tensor_to_f64(&p->q);
        kl_attention_decode_reference_fp8(q8, p->k_cache.data, p->v_cache.data, p->k_scale.data, p->v_scale.data,
                                          p->num_pages, p->kv_indptr.data, p->kv_indices.data,
                                          p->kv_last_page_len.data, p->batch, p->num_qo_heads, p->num_kv_heads,
                                          p->head_dim, p->page_size, p->sm_scale, o->o[0].v, o->o[1].v);
        free(q8);
        return 0;
    }
    double *q = kl_tensor_to_f64(&p->q), *k = kl_tensor_to_f64(&p->k_cache), *v = kl_tensor_to_f64(&p->v_cache);
    kl_attention_decode_reference_multi(q, k, v, p->qo_indptr.data, p->kv_indptr.data, p->kv_indices.data,
                                        p->kv_last_page_len.data, p->batch, p->num_qo_heads, p->num_kv_heads,
                                        p->head_dim, p->page_size, p->sm_scale, o->o[0].v, o->o[1].v);
    free(q), free(k), free(v);
    return 0;
}

static int reference(const void *prob, struct kl_outputs *out, struct kl_err *err)
{
    return kl_attention_decode_run_reference(prob, out, err);
}

/* The device side (lab/core/tensor_ops.c does the work): inputs uploaded (qo_indptr only when
 * the problem has one: the ABI's NULL otherwise); out and lse poisoned (0xFF bytes are NaN) so
 * an element a variant never writes fails; the workspace zeroed (its merge counters), as a
 * serving engine would allocate it. */
static void device(const void *prob, void *params, struct kl_dev_buf *b)
{
    const struct kl_attention_decode_problem *p = prob;
    struct kl_attention_decode_params *k = params;
    *k = (struct kl_attention_decode_params){.batch = p->batch, .num_qo_heads = p->num_qo_heads,
                                             .num_kv_heads = p->num_kv_heads, .head_dim = p->head_dim,
                                             .page_size = p->page_size, .num_pages = p->num_pages,
                                             .max_kv_len = p->max_kv_len, .sm_scale = (float)p->sm_scale,
                                             .dtype = p->dtype, .max_q_len = p->qo_indptr.data ? p->max_q_len : 0};
    k->qo_indptr = p->qo_indptr.data; /* a host pointer only to size the workspace; upload replaces it */
    k->workspace_bytes = kl_attention_decode_workspace_bytes(k, kl_attention_decode_sms());
    const struct kl_tensor *src[6] = {&p->q, &p->k_cache, &p->v_cache, &p->kv_indptr, &p->kv_indices,
                                      &p->kv_last_page_len};
    for (int i = 0; i < 6; i++) b[i] = kl_buf_tensor(src[i], false);
    b[6] = kl_buf_fill((size_t)(p->rows * p->num_qo_heads * p->head_dim) * kl_dtype_size(p->dtype), 0xFF, false);
    b[7] = kl_buf_fill((size_t)(p->rows * p->num_qo_heads) * sizeof(float), 0xFF, false);
    b[8] = kl_buf_fill(k->workspace_bytes, 0, false);
    if (p->qo_indptr.data) b[9] = kl_buf_tensor(&p->qo_indptr, false);
    if (p->k_scale.data) b[10] = kl_buf_tensor(&p->k_scale, false), b[11] = kl_buf_tensor(&p->v_scale, false);
}

static void declined(const struct kl_variant *v, const void *prob, struct kl_err *err)
{
    const struct kl_attention_decode_problem *p = prob;
    kl_fail(err, "%s: does not handle %s head_dim %lld%s", v->name, kl_dtype_name(p->dtype), (long long)p->head_dim,
            p->qo_indptr.data ? " or several query tokens per request (qo_indptr)"
            : p->k_scale.data         ? " with an FP8 (e4m3) cache"
            : strstr(v->name, "fp8") ? " with 16-bit caches (it reads FP8 caches only)"
                                      : "");
}

#define B(field) offsetof(struct kl_attention_decode_params, field)
KL_TENSOR_OPS(kl_attention_decode_ops, struct kl_attention_decode_params, kl_attention_decode_launch_fn, .load = load,
              .make = make, .reference = reference, .free = free_problem, .n_bufs = 12,
              .buf_field = {B(q), B(k_cache), B(v_cache), B(kv_indptr), B(kv_indices), B(kv_last_page_len), B(out),
                            B(lse), B(workspace), B(qo_indptr), B(k_scale), B(v_scale)},
              .out_field = {B(out), B(lse)}, .device = device, .outputs = set_outputs, .declined = declined);
#undef B

KL_MODULE(attention_decode, .summary = "paged GQA decode attention (one query token per request, or a few draft tokens)",
          .min_cc = 70, .learning_step = 6, .tensor = &kl_attention_decode_ops, .perf = &kl_attention_decode_perf,
          .tolerance = kl_attention_tolerance_text);
