/* Prefill attention over a paged K/V cache, the obviously right way: float64, per request and
 * kv head, the scores of a block of queries as one dgemm, softmax with the row max subtracted,
 * then P.V as a second dgemm.
 *
 *   s[i, j] = sm_scale * q[i] . k[j]   for the keys j query i sees (j < visible(i))
 *   out[i]  = sum_j exp(s[i, j] - m_i) v[j] / l_i,  l_i = sum_j exp(s[i, j] - m_i),  lse_i = m_i + log(l_i)
 *
 * The queries of a (request, kv head) are handled in blocks of about kRowsPerBlock rows, the g
 * query heads that share the kv head stacked together (row = (query, head)), so an 8k-token
 * request needs a 256 x 8k score buffer, not 8k x 8k. */
#include "attention_prefill.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { kRowsPerBlock = 256 };

int64_t kl_attention_prefill_kv_len(const struct kl_attention_prefill_shape *s, int64_t b)
{
    int64_t pages = s->kv_indptr[b + 1] - s->kv_indptr[b];
    return pages > 0 ? (pages - 1) * s->page_size + s->kv_last_page_len[b] : 0;
}

int64_t kl_attention_prefill_visible(bool causal, int64_t q_len, int64_t kv_len, int64_t i)
{
    if (!causal) return kv_len;
    int64_t n = kv_len - q_len + i + 1; /* bottom-right aligned: the last query sees every key */
    return n < 0 ? 0 : n > kv_len ? kv_len : n;
}

/* Row `key` of the cache for kv head h: page kv_indices[first + key / page_size], slot key % page_size. */
static const double *cache_row(const struct kl_attention_prefill_shape *s, const double *cache, int64_t first_page,
                               int64_t key, int64_t h)
{
    int64_t page = s->kv_indices[first_page + key / s->page_size], slot = key % s->page_size;
    return cache + ((page * s->page_size + slot) * s->num_kv_heads + h) * s->head_dim;
}

int kl_attention_prefill_reference(const struct kl_attention_prefill_shape *s, const double *q, const double *k_cache,
                                   const double *v_cache, double *out, double *lse)
{
    const int64_t d = s->head_dim, group = s->num_qo_heads / s->num_kv_heads;
    int64_t max_kv = 0;
    for (int64_t b = 0; b < s->batch; b++) {
        int64_t n = kl_attention_prefill_kv_len(s, b);
        if (n > max_kv) max_kv = n;
    }
    const int64_t qblock = group >= kRowsPerBlock ? 1 : kRowsPerBlock / group, rows_max = qblock * group;
    double *k = malloc(sizeof(double) * (size_t)(max_kv * d + 1)), *v = malloc(sizeof(double) * (size_t)(max_kv * d + 1));
    double *qb = malloc(sizeof(double) * (size_t)(rows_max * d)), *ob = malloc(sizeof(double) * (size_t)(rows_max * d));
    double *sc = malloc(sizeof(double) * (size_t)(rows_max * max_kv + 1));
    double *l = malloc(sizeof(double) * (size_t)rows_max);
    if (!k || !v || !qb || !ob || !sc || !l) {
        free(k), free(v), free(qb), free(ob), free(sc), free(l);
        return -1;
    }
    for (int64_t b = 0; b < s->batch; b++) {
        const int64_t q0 = s->qo_indptr[b], q_len = s->qo_indptr[b + 1] - q0;
        const int64_t kv_len = kl_attention_prefill_kv_len(s, b), first_page = s->kv_indptr[b];
        for (int64_t hk = 0; hk < s->num_kv_heads && q_len > 0; hk++) {
            /* This request's keys and values for kv head hk, gathered from their pages. */
            for (int64_t j = 0; j < kv_len; j++) {
                memcpy(k + j * d, cache_row(s, k_cache, first_page, j, hk), sizeof(double) * (size_t)d);
                memcpy(v + j * d, cache_row(s, v_cache, first_page, j, hk), sizeof(double) * (size_t)d);
            }
            for (int64_t i0 = 0; i0 < q_len; i0 += qblock) {
                const int64_t nq = q_len - i0 < qblock ? q_len - i0 : qblock, rows = nq * group;
                /* The keys any query of the block sees: the last query sees the most. */
                const int64_t n_keys = kl_attention_prefill_visible(s->causal, q_len, kv_len, i0 + nq - 1);
                for (int64_t r = 0; r < rows; r++) /* row r: query i0 + r / group, head hk * group + r % group */
                    memcpy(qb + r * d, q + ((q0 + i0 + r / group) * s->num_qo_heads + hk * group + r % group) * d,
                           sizeof(double) * (size_t)d);
                if (n_keys > 0)
                    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)n_keys, (int)d, s->sm_scale,
                                qb, (int)d, k, (int)d, 0.0, sc, (int)n_keys);
                for (int64_t r = 0; r < rows; r++) {
                    double *row = sc + r * n_keys;
                    const int64_t seen = kl_attention_prefill_visible(s->causal, q_len, kv_len, i0 + r / group);
                    double m = -INFINITY, sum = 0;
                    for (int64_t j = 0; j < seen; j++) m = row[j] > m ? row[j] : m;
                    for (int64_t j = 0; j < n_keys; j++) {
                        row[j] = j < seen ? exp(row[j] - m) : 0.0; /* masked keys weigh nothing */
                        sum += row[j];
                    }
                    l[r] = sum;
                    lse[(q0 + i0 + r / group) * s->num_qo_heads + hk * group + r % group] =
                        seen > 0 ? m + log(sum) : -INFINITY;
                }
                if (n_keys > 0)
                    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)d, (int)n_keys, 1.0, sc,
                                (int)n_keys, v, (int)d, 0.0, ob, (int)d);
                for (int64_t r = 0; r < rows; r++) {
                    double *o = out + ((q0 + i0 + r / group) * s->num_qo_heads + hk * group + r % group) * d;
                    for (int64_t c = 0; c < d; c++) o[c] = n_keys > 0 && l[r] > 0 ? ob[r * d + c] / l[r] : 0.0;
                }
            }
        }
    }
    free(k), free(v), free(qb), free(ob), free(sc), free(l);
    return 0;
}

void kl_attention_prefill_reference_rows(const struct kl_attention_prefill_shape *s, const double *q,
                                         const double *k_cache, const double *v_cache, const int64_t *rows, int64_t n,
                                         double *out, double *lse)
{
    const int64_t d = s->head_dim, group = s->num_qo_heads / s->num_kv_heads;
    for (int64_t r = 0; r < n; r++) {
        const int64_t token = rows[r] / s->num_qo_heads, head = rows[r] % s->num_qo_heads, hk = head / group;
        int64_t b = 0; /* the request owning this token: the last b with qo_indptr[b] <= token */
        while (b + 1 < s->batch && s->qo_indptr[b + 1] <= token) b++;
        const int64_t q_len = s->qo_indptr[b + 1] - s->qo_indptr[b], kv_len = kl_attention_prefill_kv_len(s, b);
        const int64_t seen = kl_attention_prefill_visible(s->causal, q_len, kv_len, token - s->qo_indptr[b]);
        const double *qr = q + rows[r] * d;
        double m = -INFINITY, sum = 0, *o = out + r * d;
        for (int64_t j = 0; j < seen; j++) { /* pass 1: the row max */
            const double *kr = cache_row(s, k_cache, s->kv_indptr[b], j, hk);
            double dot = 0;
            for (int64_t c = 0; c < d; c++) dot += qr[c] * kr[c];
            m = fmax(m, s->sm_scale * dot);
        }
        memset(o, 0, sizeof(double) * (size_t)d);
        for (int64_t j = 0; j < seen; j++) { /* pass 2: weights and the weighted sum of values */
            const double *kr = cache_row(s, k_cache, s->kv_indptr[b], j, hk);
            const double *vr = cache_row(s, v_cache, s->kv_indptr[b], j, hk);
            double dot = 0;
            for (int64_t c = 0; c < d; c++) dot += qr[c] * kr[c];
            const double p = exp(s->sm_scale * dot - m);
            sum += p;
            for (int64_t c = 0; c < d; c++) o[c] += p * vr[c];
        }
        for (int64_t c = 0; c < d; c++) o[c] = seen > 0 ? o[c] / sum : 0.0;
        lse[r] = seen > 0 ? m + log(sum) : -INFINITY;
    }
}
