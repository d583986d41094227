/* Attention with one planted bug, on the CPU, and the harness that judges it on the goldens and
 * the check catalogue (mutants_reference.h says what for). Plain loops, one (query, qo head) row
 * at a time: the scores s_j = sm_scale q . k_j of the keys the row sees, then the softmax and P.V,
 * each bug perturbing the step a kernel with that bug gets wrong and nothing else. Everything not
 * perturbed is float64, so a caught mutant is caught for its bug alone, not for rounding a real
 * kernel adds on top; FLOAT32_KERNEL is the other way round: the kernel's arithmetic, no bug. */
#include "lab/attention_prefill/mutants_reference.h"

#include <dirent.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

struct scratch {
    const double **k, **v; /* the rows the current query attends, in key order */
    double *s;             /* their logits */
    float *acc;            /* float32 accumulator (FLOAT32_KERNEL) */
};

static const double *cache_row(const struct kl_attention_prefill_shape *s, const double *cache, int64_t b, int64_t key,
                               int64_t kv_head)
{
    const int64_t page = s->kv_indices[s->kv_indptr[b] + key / s->page_size], slot = key % s->page_size;
    return cache + ((page * s->page_size + slot) * s->num_kv_heads + kv_head) * s->head_dim;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* The keys query i of a request sees under the mutant's mask (the first n keys). */
static int64_t keys_seen(const struct kl_attention_mutant *m, bool causal, int64_t q_len, int64_t kv_len, int64_t i)
{
    const int64_t n = kl_attention_prefill_visible(causal, q_len, kv_len, i);
    switch (m->bug) {
    case KL_ATTN_LAST_KEY_DROPPED:
        return n == kv_len && n > 0 ? n - 1 : n;
    case KL_ATTN_DIAGONAL_PLUS_ONE:
        return min64(kv_len, n + (causal ? 1 : 0));
    case KL_ATTN_DIAGONAL_MINUS_ONE:
        return causal && n > 0 ? n - 1 : n;
    case KL_ATTN_MASK_FROM_NEXT_ROW: {
        if (!causal || n == 0) return n;
        /* A tiled kernel runs the key tiles its last row sees and masks only those reaching past
         * mask_from, the keys its first row sees; every row sees all of an unmasked tile. The bug
         * takes mask_from from the next row, so the tile ending exactly one key past the first row's
         * diagonal goes unmasked and that row sees one key too many. */
        const int64_t tile_q0 = i - i % m->tile_q, last = min64(tile_q0 + m->tile_q, q_len) - 1;
        const int64_t n_keys = kl_attention_prefill_visible(causal, q_len, kv_len, last);
        const int64_t mask_from = kl_attention_prefill_visible(causal, q_len, kv_len, tile_q0 + 1);
        const int64_t tile_end = ((n - 1) / m->tile_k + 1) * m->tile_k; /* of the tile holding key n - 1 */
        return tile_end <= mask_from ? min64(tile_end, n_keys) : n;
    }
    default:
        return n;
    }
}

/* What a correct fast kernel computes, in float32 (see compare.c's attention rationale). */
static void float32_row(enum kl_dtype t, const double *q, const struct scratch *w, int64_t n, int64_t d,
                        double sm_scale, double *out, double *lse)
{
    float mx = -INFINITY, l = 0;
    for (int64_t j = 0; j < n; j++) {
        float dot = 0;
        for (int64_t c = 0; c < d; c++) dot += (float)q[c] * (float)w->k[j][c];
        w->s[j] = dot * (float)sm_scale;
        mx = fmaxf(mx, (float)w->s[j]);
    }
    memset(w->acc, 0, sizeof(float) * (size_t)d);
    for (int64_t j = 0; j < n; j++) {
        const float p = expf((float)w->s[j] - mx), p_rounded = (float)kl_round_to(t, p);
        l += p;
        for (int64_t c = 0; c < d; c++) w->acc[c] += p_rounded * (float)w->v[j][c];
    }
    for (int64_t c = 0; c < d; c++) out[c] = kl_round_to(t, w->acc[c] / l);
    *lse = (double)(mx + logf(l));
}

/* Softmax and P.V over the logits w->s[0..n) in float64, perturbed by m. */
static void softmax_row(const struct kl_attention_mutant *m, enum kl_dtype t, const struct scratch *w, int64_t n,
                        int64_t d, double *out, double *lse)
{
    double mx = -INFINITY, l = 0;
    for (int64_t j = 0; j < n; j++) mx = fmax(mx, w->s[j]);
    if (m->bug == KL_ATTN_NO_MAX) mx = 0;
    if (m->bug == KL_ATTN_NO_RESCALE) { /* online, tile by tile: the running max moves */
        mx = -INFINITY;
        for (int64_t j0 = 0; j0 < n; j0 += m->tile_k) {
            const int64_t j1 = min64(n, j0 + m->tile_k);
            double m_new = mx;
            for (int64_t j = j0; j < j1; j++) m_new = fmax(m_new, w->s[j]);
            l *= exp(mx - m_new); /* the accumulator should be scaled by the same factor: the bug */
            for (int64_t j = j0; j < j1; j++) {
                const double p = exp(w->s[j] - m_new);
                l += p;
                for (int64_t c = 0; c < d; c++) out[c] += p * w->v[j][c];
            }
            mx = m_new;
        }
    } else {
        for (int64_t j = 0; j < n; j++) {
            double p = exp(w->s[j] - mx);
            if (m->bug == KL_ATTN_NO_MAX) p = kl_round_to(KL_F32, p); /* float32 range: Inf past ~88.7 */
            l += p;
            for (int64_t c = 0; c < d; c++) out[c] += p * w->v[j][c];
            if (m->bug == KL_ATTN_O_IN_DTYPE && (j % 16 == 15 || j == n - 1))
                for (int64_t c = 0; c < d; c++) out[c] = kl_round_to(t, out[c]);
        }
    }
    for (int64_t c = 0; c < d; c++) out[c] /= l;
    *lse = mx + log(l);
    if (m->bug == KL_ATTN_LSE_LOG2) *lse /= log(2.0);
}

void kl_attention_mutant_run(const struct kl_attention_mutant *m, enum kl_dtype dtype,
                             const struct kl_attention_prefill_shape *s, const double *q, const double *k_cache,
                             const double *v_cache, double *out, double *lse)
{
    const int64_t d = s->head_dim, group = s->num_qo_heads / s->num_kv_heads;
    int64_t max_kv = 0;
    for (int64_t b = 0; b < s->batch; b++) {
        const int64_t n = kl_attention_prefill_kv_len(s, b);
        if (n > max_kv) max_kv = n;
    }
    const size_t keys = (size_t)max_kv + 1;
    struct scratch w = {.k = malloc(sizeof(double *) * keys), .v = malloc(sizeof(double *) * keys),
                        .s = malloc(sizeof(double) * keys), .acc = malloc(sizeof(float) * (size_t)d)};
    for (int64_t b = 0; b < s->batch; b++) {
        const int64_t q0 = s->qo_indptr[b], q_len = s->qo_indptr[b + 1] - q0,
                      kv_len = kl_attention_prefill_kv_len(s, b);
        for (int64_t i = 0; i < q_len; i++) {
            const int64_t n = keys_seen(m, s->causal, q_len, kv_len, i);
            for (int64_t h = 0; h < s->num_qo_heads; h++) {
                const int64_t g = m->bug == KL_ATTN_KV_HEAD_0     ? 0
                                  : m->bug == KL_ATTN_KV_HEAD_MOD ? h % s->num_kv_heads
                                                                  : h / group;
                const int64_t row = (q0 + i) * s->num_qo_heads + h;
                const double *qrow = q + row * d;
                double *o = out + row * d;
                memset(o, 0, sizeof(double) * (size_t)d);
                if (n == 0) {
                    lse[row] = -INFINITY;
                    continue;
                }
                for (int64_t j = 0; j < n; j++)
                    w.k[j] = cache_row(s, k_cache, b, j, g), w.v[j] = cache_row(s, v_cache, b, j, g);
                if (m->bug == KL_ATTN_FLOAT32_KERNEL) {
                    float32_row(dtype, qrow, &w, n, d, s->sm_scale, o, &lse[row]);
                    continue;
                }
                const double scale = m->bug == KL_ATTN_NO_SM_SCALE ? 1.0 : s->sm_scale;
                for (int64_t j = 0; j < n; j++) {
                    double dot = 0;
                    for (int64_t c = 0; c < d; c++) dot += qrow[c] * w.k[j][c];
                    w.s[j] = m->bug == KL_ATTN_SCORES_IN_DTYPE ? kl_round_to(dtype, scale * dot) : scale * dot;
                }
                softmax_row(m, dtype, &w, n, d, o, &lse[row]);
            }
        }
    }
    free(w.k), free(w.v), free(w.s), free(w.acc);
}

/* ---- judging ---- */

void kl_attention_view_free(struct kl_attention_view *v)
{
    free(v->q), free(v->k_cache), free(v->v_cache), free(v->qo_indptr);
    memset(v, 0, sizeof *v);
}

void kl_attention_mutant_judge(const struct kl_attention_mutant *m, const struct kl_attention_view *v,
                               const struct kl_outputs *expected, struct kl_cmp cmp[2])
{
    const int64_t rows = v->shape.total_q * v->shape.num_qo_heads;
    double *out = malloc(sizeof(double) * (size_t)(rows * v->shape.head_dim + 1));
    double *lse = malloc(sizeof(double) * (size_t)(rows + 1));
    kl_attention_mutant_run(m, v->dtype, &v->shape, v->q, v->k_cache, v->v_cache, out, lse);
    kl_compare(out, expected->o[0].v, expected->o[0].n, expected->o[0].policy, &cmp[0]);
    kl_compare(lse, expected->o[1].v, expected->o[1].n, expected->o[1].policy, &cmp[1]);
    free(out), free(lse);
}

static void log_verdict(FILE *log, const char *mutant, const char *where, const struct kl_outputs *expected,
                        const struct kl_cmp cmp[2])
{
    fprintf(log, "%-8s %-28s %-40s", cmp[0].pass && cmp[1].pass ? "passes" : "CAUGHT", mutant, where);
    for (int o = 0; o < 2; o++)
        fprintf(log, " %s: rel_l2 %.3g (limit %.3g), %lld out of bounds;", expected->o[o].name, cmp[o].rel_l2,
                expected->o[o].policy.rel_l2, (long long)cmp[o].n_bad);
    fputc('\n', log);
}

static bool listed(const struct kl_attention_claim *c, const char *name)
{
    bool in = false;
    for (int g = 0; g < KL_CLAIM_MAX_GOLDENS && c->goldens[g]; g++) {
        const char *entry = c->goldens[g];
        if (entry[0] == '!' && strcmp(entry + 1, name) == 0) return false;
        in |= strcmp(entry, "*") == 0 || strcmp(entry, name) == 0;
    }
    return in;
}

static int by_name(const struct dirent **a, const struct dirent **b) { return strcmp((*a)->d_name, (*b)->d_name); }

int kl_attention_check_claims(const char *module, kl_attention_view_fn view, const struct kl_attention_claim *claims,
                              int n_claims, FILE *log)
{
    const struct kl_module *mod = kl_module_find(module);
    char dir[1024];
    snprintf(dir, sizeof dir, KL_SOURCE_DIR "/golden/%s", module);
    struct dirent **names;
    const int n = mod ? scandir(dir, &names, NULL, by_name) : -1;
    if (n < 0) return -1;
    bool *broken = calloc((size_t)n_claims, sizeof(bool));
    int *found = calloc((size_t)n_claims * KL_CLAIM_MAX_GOLDENS, sizeof(int)), cases = 0;
    bool reference_broken = false;
    for (int i = 0; i < n; i++) {
        char path[1300];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
        struct kl_case c;
        struct kl_err err = {{0}};
        struct kl_outputs expected = {0};
        void *prob = NULL;
        if (names[i]->d_name[0] != '.' && kl_case_open(&c, path, &err) == 0) {
            prob = mod->tensor->load(&c, &expected, &err);
            kl_case_close(&c);
            if (!prob) fprintf(log, "CLAIM BROKEN: golden %s does not load: %s\n", names[i]->d_name, err.msg);
        }
        if (prob) {
            /* The reference itself first: float64, it must pass with room to spare. */
            struct kl_attention_view v = {0};
            struct kl_outputs ref = {0};
            struct kl_cmp cmp[2] = {{0}};
            const int rc = mod->tensor->reference(prob, &ref, &err);
            for (int o = 0; o < 2 && rc == 0; o++)
                kl_compare(ref.o[o].v, expected.o[o].v, expected.o[o].n, expected.o[o].policy, &cmp[o]);
            log_verdict(log, "reference", names[i]->d_name, &expected, cmp);
            if (rc || !cmp[0].pass || !cmp[1].pass) {
                fprintf(log, "CLAIM BROKEN: the reference fails %s %s\n", names[i]->d_name, rc ? err.msg : "");
                reference_broken = true;
            }
            kl_outputs_free(&ref);
            view(prob, &v);
            cases++;
            for (int k = 0; k < n_claims; k++) {
                const struct kl_attention_claim *cl = &claims[k];
                struct kl_cmp cmp[2];
                kl_attention_mutant_judge(&cl->m, &v, &expected, cmp);
                log_verdict(log, cl->m.name, names[i]->d_name, &expected, cmp);
                for (int g = 0; g < KL_CLAIM_MAX_GOLDENS && cl->goldens[g]; g++)
                    found[k * KL_CLAIM_MAX_GOLDENS + g] +=
                        strcmp(cl->goldens[g] + (cl->goldens[g][0] == '!'), names[i]->d_name) == 0;
                const bool bad = cl->by == KL_CLAIM_PASSES ? !(cmp[0].pass && cmp[1].pass)
                                                           : listed(cl, names[i]->d_name) && cmp[cl->by].pass;
                if (bad)
                    fprintf(log, "CLAIM BROKEN: %s %s on %s\n", cl->m.name,
                            cl->by == KL_CLAIM_PASSES ? "fails"
                            : cl->by == KL_CLAIM_OUT  ? "is not caught by out"
                                                      : "is not caught by lse",
                            names[i]->d_name);
                broken[k] |= bad;
            }
            kl_attention_view_free(&v);
            mod->tensor->free(prob);
        } else if (names[i]->d_name[0] != '.') {
            for (int k = 0; k < n_claims; k++) broken[k] = true;
        }
        kl_outputs_free(&expected);
        free(names[i]);
    }
    free(names);
    int n_broken = 0;
    for (int k = 0; k < n_claims; k++) {
        for (int g = 0; g < KL_CLAIM_MAX_GOLDENS && claims[k].goldens[g]; g++)
            if (strcmp(claims[k].goldens[g], "*") != 0 && found[k * KL_CLAIM_MAX_GOLDENS + g] == 0) {
                fprintf(log, "CLAIM BROKEN: %s names golden %s, which does not exist\n", claims[k].m.name,
                        claims[k].goldens[g]);
                broken[k] = true;
            }
        n_broken += broken[k];
    }
    free(broken), free(found);
    return cases ? n_broken + reference_broken : -1;
}

int kl_attention_mutant_catalogue(const struct kl_module *module, kl_attention_view_fn view,
                                  const struct kl_attention_mutant *m, uint64_t seed, bool edges_only, FILE *log)
{
    int caught = 0;
    char label[200];
    for (int i = 0;; i++) {
        void *prob = module->tensor->make(i, seed, label, sizeof label);
        if (!prob) break;
        if (!edges_only || strncmp(label, "random", 6) != 0) {
            struct kl_outputs expected = {0};
            struct kl_err err = {{0}};
            struct kl_attention_view v = {0};
            struct kl_cmp cmp[2];
            if (module->tensor->reference(prob, &expected, &err) == 0) {
                view(prob, &v);
                kl_attention_mutant_judge(m, &v, &expected, cmp);
                log_verdict(log, m->name, label, &expected, cmp);
                caught += !(cmp[0].pass && cmp[1].pass);
                kl_attention_view_free(&v);
            } else {
                fprintf(log, "reference failed on %s: %s\n", label, err.msg);
            }
            kl_outputs_free(&expected);
        }
        module->tensor->free(prob);
    }
    return caught;
}

static bool same(const void *a, const void *b, int64_t n, size_t size)
{
    return n <= 0 || memcmp(a, b, (size_t)n * size) == 0;
}

int kl_attention_catalogue_replays(const struct kl_module *module, kl_attention_view_fn view, uint64_t seed, FILE *log)
{
    int broken = 0;
    char label[3][200];
    for (int i = 0;; i++) {
        void *prob[3] = {module->tensor->make(i, seed, label[0], sizeof label[0]),
                         module->tensor->make(i, seed, label[1], sizeof label[1]),
                         module->tensor->make(i, seed + 1, label[2], sizeof label[2])};
        if (!prob[0]) break;
        struct kl_attention_view v[3];
        for (int k = 0; k < 3; k++) view(prob[k], &v[k]);
        const struct kl_attention_prefill_shape *a = &v[0].shape, *b = &v[1].shape;
        const int64_t nq = a->total_q * a->num_qo_heads * a->head_dim;
        const int64_t nkv = a->num_pages * a->page_size * a->num_kv_heads * a->head_dim;
        const bool replays = strcmp(label[0], label[1]) == 0 &&
                             memcmp(a, b, offsetof(struct kl_attention_prefill_shape, qo_indptr)) == 0 &&
                             same(a->qo_indptr, b->qo_indptr, a->batch + 1, sizeof(int32_t)) &&
                             same(a->kv_indptr, b->kv_indptr, a->batch + 1, sizeof(int32_t)) &&
                             same(a->kv_indices, b->kv_indices, a->kv_indptr[a->batch], sizeof(int32_t)) &&
                             same(a->kv_last_page_len, b->kv_last_page_len, a->batch, sizeof(int32_t)) &&
                             same(v[0].q, v[1].q, nq, sizeof(double)) &&
                             same(v[0].k_cache, v[1].k_cache, nkv, sizeof(double)) &&
                             same(v[0].v_cache, v[1].v_cache, nkv, sizeof(double));
        const bool other = nq == 0 || v[2].shape.total_q * v[2].shape.num_qo_heads * v[2].shape.head_dim != nq ||
                           !same(v[0].q, v[2].q, nq, sizeof(double));
        if (!replays) fprintf(log, "%s: two draws from seed %llu differ\n", label[0], (unsigned long long)seed);
        if (!other)
            fprintf(log, "%s: seeds %llu and %llu drew the same q\n", label[0], (unsigned long long)seed,
                    (unsigned long long)seed + 1);
        broken += !replays || !other;
        for (int k = 0; k < 3; k++) kl_attention_view_free(&v[k]), module->tensor->free(prob[k]);
    }
    return broken;
}
