/* Decode attention, the obviously right way, in float64.
 *
 * For each request and each kv head, the keys and values it owns are first gathered out of the
 * pages into contiguous [kv_len, head_dim] matrices. The GQA group's query rows (the qo heads
 * sharing that kv head) against those keys is one matrix product, S = Q K^T, and the output is
 * another, O = P V: both through OpenBLAS. The softmax subtracts each row's max before exp, so
 * large logits cannot overflow. With several query tokens per request, query i of q_len is the
 * same computation over the first kv_len - q_len + 1 + i keys only (the causal limit), one pair
 * of products per query token. An FP8 cache is first decoded, each code times its kv head's scale
 * (exact in float64), and then attended the same way. */
#include "attention_decode.h"

#include "kernels/dtype.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void kl_attention_decode_reference(const double *q, const double *k_cache, const double *v_cache,
                                   const int32_t *kv_indptr, const int32_t *kv_indices,
                                   const int32_t *kv_last_page_len, int64_t batch, int64_t qo_heads,
                                   int64_t kv_heads, int64_t head_dim, int64_t page_size, double sm_scale,
                                   double *out, double *lse)
{
    kl_attention_decode_reference_multi(q, k_cache, v_cache, NULL, kv_indptr, kv_indices, kv_last_page_len, batch,
                                        qo_heads, kv_heads, head_dim, page_size, sm_scale, out, lse);
}

void kl_attention_decode_reference_multi(const double *q, const double *k_cache, const double *v_cache,
                                         const int32_t *qo_indptr, const int32_t *kv_indptr,
                                         const int32_t *kv_indices, const int32_t *kv_last_page_len, int64_t batch,
                                         int64_t qo_heads, int64_t kv_heads, int64_t head_dim, int64_t page_size,
                                         double sm_scale, double *out, double *lse)
{
    const int64_t group = qo_heads / kv_heads, d = head_dim;
    for (int64_t b = 0; b < batch; b++) {
        const int64_t pages = kv_indptr[b + 1] - kv_indptr[b];
        const int64_t kv_len = pages ? (pages - 1) * page_size + kv_last_page_len[b] : 0;
        const int64_t row0 = qo_indptr ? qo_indptr[b] : b, q_len = qo_indptr ? qo_indptr[b + 1] - row0 : 1;
        if (kv_len == 0) { /* no keys: q_len is 0 with qo_indptr, else row b is the empty sum */
            for (int64_t r = row0; r < row0 + q_len; r++) {
                memset(out + r * qo_heads * d, 0, sizeof(double) * (size_t)(qo_heads * d));
                for (int64_t h = 0; h < qo_heads; h++) lse[r * qo_heads + h] = -INFINITY;
            }
            continue;
        }
        double *k = malloc(sizeof(double) * (size_t)(kv_len * d)), *v = malloc(sizeof(double) * (size_t)(kv_len * d));
        double *s = malloc(sizeof(double) * (size_t)(group * kv_len));
        if (!(k && v && s)) { /* the references stand below the lab: no KL_CHECK here, the same exit */
            fprintf(stderr, "kernlab: %s:%d: out of host memory (kv_len %lld)\n", __FILE__, __LINE__, (long long)kv_len);
            exit(1);
        }
        for (int64_t g = 0; g < kv_heads; g++) {
            /* Gather: token t lives in page kv_indices[kv_indptr[b] + t / page_size], row t % page_size. */
            for (int64_t t = 0; t < kv_len; t++) {
                const int64_t page = kv_indices[kv_indptr[b] + t / page_size], row = t % page_size;
                const int64_t at = ((page * page_size + row) * kv_heads + g) * d;
                memcpy(k + t * d, k_cache + at, sizeof(double) * (size_t)d);
                memcpy(v + t * d, v_cache + at, sizeof(double) * (size_t)d);
            }
            for (int64_t i = 0; i < q_len; i++) {
                /* Query i sees the first n keys; S[group, n] = sm_scale * Q_g K^T, Q_g = the
                 * group's rows of q for that token (contiguous). */
                const int64_t n = kv_len - q_len + 1 + i;
                double *o_i = out + (row0 + i) * qo_heads * d, *lse_i = lse + (row0 + i) * qo_heads;
                const double *q_g = q + ((row0 + i) * qo_heads + g * group) * d;
                cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)group, (int)n, (int)d, sm_scale, q_g, (int)d,
                            k, (int)d, 0.0, s, (int)n);
                for (int64_t r = 0; r < group; r++) {
                    double *row = s + r * n, m = -INFINITY, sum = 0;
                    for (int64_t t = 0; t < n; t++) m = fmax(m, row[t]);
                    for (int64_t t = 0; t < n; t++) sum += row[t] = exp(row[t] - m);
                    for (int64_t t = 0; t < n; t++) row[t] /= sum;
                    lse_i[g * group + r] = m + log(sum);
                }
                /* O_g[group, d] = P V. */
                cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)group, (int)d, (int)n, 1.0, s, (int)n, v,
                            (int)d, 0.0, o_i + g * group * d, (int)d);
            }
        }
        free(k), free(v), free(s);
    }
}

void kl_attention_decode_reference_fp8(const double *q, const uint8_t *k_codes, const uint8_t *v_codes,
                                       const float *k_scale, const float *v_scale, int64_t num_pages,
                                       const int32_t *kv_indptr, const int32_t *kv_indices,
                                       const int32_t *kv_last_page_len, int64_t batch, int64_t qo_heads,
                                       int64_t kv_heads, int64_t head_dim, int64_t page_size, double sm_scale,
                                       double *out, double *lse)
{
    const size_t n = (size_t)(num_pages * page_size * kv_heads * head_dim);
    double *k = malloc(sizeof(double) * (n ? n : 1)), *v = malloc(sizeof(double) * (n ? n : 1));
    if (!(k && v)) {
        fprintf(stderr, "kernlab: %s:%d: out of host memory (%zu cache elements)\n", __FILE__, __LINE__, n);
        exit(1);
    }
    for (size_t i = 0; i < n; i++) { /* element i belongs to kv head (i / head_dim) % kv_heads */
        const int64_t g = (int64_t)(i / (size_t)head_dim) % kv_heads;
        k[i] = (double)kl_e4m3_to_f32(k_codes[i]) * k_scale[g];
        v[i] = (double)kl_e4m3_to_f32(v_codes[i]) * v_scale[g];
    }
    kl_attention_decode_reference_multi(q, k, v, NULL, kv_indptr, kv_indices, kv_last_page_len, batch, qo_heads,
                                        kv_heads, head_dim, page_size, sm_scale, out, lse);
    free(k), free(v);
}
