/* The story's decoder in float64, with the error the GPU pipeline is expected to have (story.h).
 *
 * How the tolerance of the end-to-end check is derived. The GPU stores every activation between
 * two kernels in bf16 and computes inside a kernel in float32. Model each stored value y as
 * y (1 + d) with d the rounding error: round to nearest makes it uniform over half an ulp each way,
 * variance ulp(y)^2 / 12 (ulp = 2^(e-8) for |y| in [2^(e-1), 2^e): 8 significant bits). Treat the
 * roundings as independent and propagate their variances to first order through each operation
 * (the Jacobian squared, element by element), adding each operation's own roundings:
 *   embedding        exact copy of bf16 weights: variance 0
 *   GEMM y = W x     var_y = sum_j W_ij^2 var_xj  + K 2^-48/3 sum_j W_ij^2 x_j^2 (float32 accumulation
 *                    of K terms) + 2 r(y): the output rounding, counted twice because cuBLAS may
 *                    reduce split-K partials in the output type (one more rounding of that size)
 *   rmsnorm          y_i = g_i x_i / r, r = sqrt(mean x^2 + eps): dy_i/dx_j = g_i/r (delta_ij -
 *                    x_i x_j / (n r^2)), + r(y); the fused form first adds x + residual, whose sum
 *                    is stored too (+ r(sum)) and is what gets normalised
 *   rope             each pair rotates: var_a' = c^2 var_a + s^2 var_b, + r(a')
 *   attention        o_d = sum_j p_j v_jd, p = softmax(s), s_j = sm_scale q.k_j:
 *                    var_o = sum_j p_j^2 var_vjd                                      (values)
 *                          + sm_scale^2 sum_e var_qe (sum_j p_j (v_jd - o_d) k_je)^2    (the query)
 *                          + sm_scale^2 sum_j p_j^2 (v_jd - o_d)^2 sum_e q_e^2 var_kje  (the keys)
 *                          + u^2/3 sum_j p_j^2 v_jd^2                                   (P in bf16)
 *                          + r(o)
 *                    The P term is the kernels' own error as lab/core/compare.c models it for the
 *                    attention rows (P rounded to bf16, u = 2^-8, the sum l from unrounded P); its
 *                    float32 score error, (d + 8) 2^-24 A there, is ~10^-5 here and left out.
 *   silu(g) * u      var = (silu'(g) u)^2 var_g + silu(g)^2 var_u + r(y)
 *   LM head          a GEMM with float32 output: no output rounding
 * where r(y) = ulp(y)^2 / 12. The result is sigma_i^2 for every logit: the expected spread of the
 * GPU's logit around the float64 one. How many sigma the check (lab/story/test_story.c) allows,
 * and why, is lab/core/compare.c's, the one home of the lab's bounds (kl_story_logit_sigmas,
 * kl_story_norm_ratio); the guide's sentence is written there from the same constants.
 * The bf16 emulation below (every rounding above actually done, in float32 arithmetic) stays inside
 * these bounds; the faulty emulations show what they catch (test_story.c lists both).
 *
 * An FP8 cache (kl_story_ref_seq_fp8). The float64 pass quantizes its own K and V exactly as the GPU
 * does: y = (float)(x / scale), code = e4m3(y) (kernels/dtype.h), value = code * scale, so both
 * sides carry the same e4m3 rounding and the check is not widened by it. What can still differ is the
 * code: the GPU's y is off by its error e (the variance carried so far; the fused store rotates in
 * float32 and never rounds rotated K to bf16, so rope's output rounding is not counted, and its own
 * float32 steps add (2^-23 y)^2), and where e carries y past the midpoint between y's code and a
 * neighbour, the GPU holds the neighbour: one e4m3 step, 2^-3 of the binade, far more than e. So
 * the value's variance is
 *   scale^2 (step_up^2 P(e > mid_up - y) + step_down^2 P(e < mid_down - y)),   e ~ N(0, var)
 * (kl_story_e4m3_flip_var), which the reference can compute because it knows y; a code two steps
 * away would need e past a whole step, thousands of sigma. The attention terms then take these
 * values and variances in place of the bf16 cache's, P rounded to bf16 as before.
 * The scales (kl_story_kv_scales): x = rmsnorm(h) g is at most sqrt(hidden) max|g| long (its mean
 * square is 1 before g), so by Cauchy-Schwarz |k_d| <= |x| |W_d| for row d of the projection and a
 * rotated pair (k_d, k_d') has |rope(k)_d| <= |x| sqrt(|W_d|^2 + |W_d'|^2): that bound over 448
 * (|W_d| for V) is a scale under which no code saturates, derived from the weights alone (no
 * calibration pass to reproduce). The headroom costs little: e4m3 is floating point, every value
 * above scale 2^-6 keeps its 3 mantissa bits, and only smaller ones lose bits as subnormals. */
#include "story.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attention_decode.h"
#include "attention_prefill.h"
#include "kernels/dtype.h"
#include "rmsnorm.h"
#include "rope.h"

/* ---- bf16 ---- */

static double round_bf16(double v)
{
    float f = (float)v;
    uint32_t b;
    memcpy(&b, &f, 4);
    if ((b & 0x7f800000u) == 0x7f800000u) return f; /* Inf, NaN */
    b += 0x7fffu + ((b >> 16) & 1u);                /* to nearest, ties to even */
    b &= 0xffff0000u;
    memcpy(&f, &b, 4);
    return f;
}

double kl_story_bf16_rounding_var(double v)
{
    if (v == 0 || !isfinite(v)) return 0;
    int e;
    frexp(v, &e); /* |v| in [2^(e-1), 2^e) */
    const double ulp = ldexp(1.0, e - 8);
    return ulp * ulp / 12;
}
#define RB kl_story_bf16_rounding_var

/* ---- the two story kernels ---- */

static double silu(double g)
{
    return g / (1 + exp(-g));
}

void kl_story_silu_mul_reference(const double *gu, int64_t n, int64_t mlp, double *out)
{
    for (int64_t t = 0; t < n; t++)
        for (int64_t i = 0; i < mlp; i++)
            out[t * mlp + i] = silu(gu[t * 2 * mlp + i]) * gu[t * 2 * mlp + mlp + i];
}

void kl_story_argmax_reference(const double *logits, int64_t batch, int64_t vocab, int32_t *ids)
{
    for (int64_t b = 0; b < batch; b++) {
        const double *l = logits + b * vocab;
        int64_t best = 0;
        for (int64_t i = 0; i < vocab; i++)
            if (!isnan(l[i]) && (isnan(l[best]) || l[i] > l[best])) best = i;
        ids[b] = (int32_t)best;
    }
}

/* ---- a request's cache ---- */

struct kl_story_ref_seq *kl_story_ref_seq_new(const struct kl_story_dims *d, int capacity)
{
    struct kl_story_ref_seq *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->capacity = (capacity + 15) / 16 * 16; /* whole pages of 16: the attention references read pages */
    const size_t n = (size_t)s->capacity * (size_t)(d->kv_heads * d->head_dim);
    for (int l = 0; l < d->layers; l++) {
        s->k[l] = calloc(n, sizeof(double)), s->v[l] = calloc(n, sizeof(double));
        s->kvar[l] = calloc(n, sizeof(double)), s->vvar[l] = calloc(n, sizeof(double));
        if (!s->k[l] || !s->v[l] || !s->kvar[l] || !s->vvar[l]) {
            kl_story_ref_seq_free(s, d);
            return NULL;
        }
    }
    return s;
}

void kl_story_ref_seq_free(struct kl_story_ref_seq *s, const struct kl_story_dims *d)
{
    if (!s) return;
    for (int l = 0; l < d->layers; l++) {
        free(s->k[l]), free(s->v[l]), free(s->kvar[l]), free(s->vvar[l]);
        free(s->kq[l]), free(s->vq[l]), free(s->kqvar[l]), free(s->vqvar[l]);
    }
    free(s);
}

int kl_story_ref_seq_fp8(struct kl_story_ref_seq *s, const struct kl_story_dims *d, const float *k_scale,
                         const float *v_scale)
{
    const size_t n = (size_t)s->capacity * (size_t)(d->kv_heads * d->head_dim);
    s->k_scale = k_scale, s->v_scale = v_scale;
    for (int l = 0; l < d->layers; l++) {
        s->kq[l] = calloc(n, sizeof(double)), s->vq[l] = calloc(n, sizeof(double));
        s->kqvar[l] = calloc(n, sizeof(double)), s->vqvar[l] = calloc(n, sizeof(double));
        if (!s->kq[l] || !s->vq[l] || !s->kqvar[l] || !s->vqvar[l]) return -1;
    }
    return 0;
}

/* ---- the FP8 cache ---- */

void kl_story_kv_scales(const struct kl_story_dims *d, const double *attn_norm, const double *wk, const double *wv,
                        float *k_scale, float *v_scale)
{
    const int H = d->hidden, D = d->head_dim, half = D / 2;
    double g = 0;
    for (int i = 0; i < H; i++)
        g = fmax(g, fabs(attn_norm[i]));
    const double x_len = sqrt((double)H) * g;
    for (int h = 0; h < d->kv_heads; h++) {
        double kk = 0, vv = 0, nk[D];
        for (int i = 0; i < D; i++) {
            const double *rk = wk + ((size_t)h * D + i) * H, *rv = wv + ((size_t)h * D + i) * H;
            double a = 0, b = 0;
            for (int j = 0; j < H; j++)
                a += rk[j] * rk[j], b += rv[j] * rv[j];
            nk[i] = a, vv = fmax(vv, b);
        }
        for (int i = 0; i < half; i++) /* NeoX pairs i, i + half */
            kk = fmax(kk, nk[i] + nk[i + half]);
        k_scale[h] = (float)(x_len * sqrt(kk) / 448);
        v_scale[h] = (float)(x_len * sqrt(vv) / 448);
    }
}

/* The e4m3 value next to code c's, one step up (dir 1) or down (-1); NAN past +-448. */
static double e4m3_neighbour(uint8_t c, int dir)
{
    const int neg = c & 0x80 && (c & 0x7f), mag = c & 0x7f; /* -0 counts as +0 */
    const int away = (dir > 0) != neg;                      /* moving away from zero */
    if (away) return mag + 1 > 0x7e ? NAN : (neg ? -1 : 1) * (double)kl_e4m3_to_f32((uint8_t)(mag + 1));
    if (mag == 0) return dir * (double)kl_e4m3_to_f32(1); /* across zero */
    return (neg ? -1 : 1) * (double)kl_e4m3_to_f32((uint8_t)(mag - 1));
}

double kl_story_e4m3_flip_var(double y, double var)
{
    if (!(var > 0) || !isfinite(y)) return 0;
    const uint8_t c = kl_f32_to_e4m3((float)y);
    const double v = kl_e4m3_to_f32(c), sd = sqrt(2 * var), up = e4m3_neighbour(c, 1), dn = e4m3_neighbour(c, -1);
    double out = 0;
    if (!isnan(up)) out += (up - v) * (up - v) * 0.5 * erfc(((v + up) / 2 - y) / sd);
    if (!isnan(dn)) out += (v - dn) * (v - dn) * 0.5 * erfc((y - (v + dn) / 2) / sd);
    return out;
}

/* ---- one forward pass ---- */

/* An activation: values and, in EXACT mode, error variances (NULL in BF16 mode). */
struct act {
    double *x, *w;
};

struct pass {
    const struct kl_story_dims *d;
    const struct kl_story_ref_weights *wt;
    struct kl_story_ref_seq *s;
    enum kl_story_ref_mode mode;
    int faults;
    int n, c;      /* new tokens, tokens cached before them */
    bool fp8_read; /* attention reads the FP8 cache: a decode step of a request that has one */
};

/* The K and V a pass's attention reads (values, variances): the FP8 cache's or the bf16 one's. */
static const double *cache_k(const struct pass *p, int l)
{
    return p->fp8_read ? p->s->kq[l] : p->s->k[l];
}
static const double *cache_v(const struct pass *p, int l)
{
    return p->fp8_read ? p->s->vq[l] : p->s->v[l];
}
static const double *cache_kvar(const struct pass *p, int l)
{
    return p->fp8_read ? p->s->kqvar[l] : p->s->kvar[l];
}
static const double *cache_vvar(const struct pass *p, int l)
{
    return p->fp8_read ? p->s->vqvar[l] : p->s->vvar[l];
}

static bool exact(const struct pass *p)
{
    return p->mode == KL_STORY_REF_EXACT;
}

static int act_alloc(struct act *a, size_t n, bool with_var)
{
    a->x = calloc(n, sizeof(double));
    a->w = with_var ? calloc(n, sizeof(double)) : NULL;
    return a->x && (a->w || !with_var) ? 0 : -1;
}

static void act_free(struct act *a)
{
    free(a->x), free(a->w);
}

/* out = rmsnorm(x [+ res]) * g over rows of h; with res, res_out = x + res (stored). */
static void norm(const struct pass *p, const struct act *x, const struct act *res, const double *g, struct act *out,
                 struct act *res_out)
{
    const int h = p->d->hidden, n = p->n;
    const double eps = p->d->eps * (p->faults & KL_STORY_FAULT_EPS_X10 ? 10 : 1);
    if (exact(p)) {
        kl_rmsnorm_reference(x->x, res ? res->x : NULL, g, n, h, eps, out->x, res ? res_out->x : NULL);
        for (int t = 0; t < n; t++) {
            /* the normalised input s and its variance: x, or the stored sum x + res */
            const double *s = (res ? res_out->x : x->x) + (size_t)t * h;
            double sw[h];
            double ms = 0, a = 0;
            for (int i = 0; i < h; i++) {
                sw[i] = x->w[(size_t)t * h + i];
                if (res) {
                    sw[i] += res->w[(size_t)t * h + i] + RB(s[i]);
                    res_out->w[(size_t)t * h + i] = sw[i];
                }
                ms += s[i] * s[i];
            }
            ms = ms / h + eps;
            for (int i = 0; i < h; i++)
                a += s[i] * s[i] * sw[i];
            for (int i = 0; i < h; i++) {
                const double c = s[i] * s[i] / (h * ms); /* x_i^2 / (n r^2) */
                const double v = sw[i] * (1 - c) * (1 - c) + c / (h * ms) * (a - s[i] * s[i] * sw[i]);
                const double y = out->x[(size_t)t * h + i];
                out->w[(size_t)t * h + i] = g[i] * g[i] / ms * v + RB(y);
            }
        }
        return;
    }
    for (int t = 0; t < n; t++) {
        float sf[h], ms = 0;
        for (int i = 0; i < h; i++) {
            sf[i] = (float)x->x[(size_t)t * h + i];
            if (res) {
                sf[i] += (float)res->x[(size_t)t * h + i];
                res_out->x[(size_t)t * h + i] = round_bf16(sf[i]);
            }
            ms += sf[i] * sf[i];
        }
        const float r = 1.f / sqrtf(ms / (float)h + (float)eps);
        for (int i = 0; i < h; i++)
            out->x[(size_t)t * h + i] = round_bf16(sf[i] * r * (float)g[i]);
    }
}

/* y [n, rows] = x [n, cols] W^T, W [rows, cols]; stored in bf16 unless f32_out. */
static void gemm(const struct pass *p, const double *W, int rows, int cols, const struct act *x, struct act *y,
                 bool f32_out)
{
    for (int t = 0; t < p->n; t++) {
        const double *xt = x->x + (size_t)t * cols;
        for (int r = 0; r < rows; r++) {
            const double *wr = W + (size_t)r * cols;
            double *yv = y->x + (size_t)t * rows + r;
            if (exact(p)) {
                const double *xw = x->w + (size_t)t * cols;
                double acc = 0, var = 0, mag = 0;
                for (int j = 0; j < cols; j++) {
                    acc += wr[j] * xt[j];
                    var += wr[j] * wr[j] * xw[j];
                    mag += wr[j] * wr[j] * xt[j] * xt[j];
                }
                *yv = acc;
                y->w[(size_t)t * rows + r] = var + cols * 0x1p-48 / 3 * mag + (f32_out ? 0 : 2 * RB(acc));
            } else {
                float acc = 0;
                for (int j = 0; j < cols; j++)
                    acc += (float)wr[j] * (float)xt[j];
                *yv = f32_out ? acc : round_bf16(acc);
            }
        }
    }
}

/* In place on x [n, heads, head_dim] at positions c .. c + n - 1 (NeoX halves, full rotary dim). */
static void rope(const struct pass *p, struct act *x, int heads)
{
    const int D = p->d->head_dim, half = D / 2, n = p->n,
              shift = p->faults & KL_STORY_FAULT_ROPE_SHIFT || (p->faults & KL_STORY_FAULT_DECODE_POS && n == 1);
    if (exact(p)) {
        int64_t pos[n];
        for (int t = 0; t < n; t++)
            pos[t] = p->c + t;
        for (int t = 0; t < n; t++) /* variances first: they need the rotation, not the values */
            for (int h = 0; h < heads; h++)
                for (int i = 0; i < half; i++) {
                    const double c = p->wt->cos_sin[pos[t] * D + i], s = p->wt->cos_sin[pos[t] * D + half + i];
                    double *w = x->w + ((size_t)t * heads + h) * D;
                    const double a = w[i], b = w[i + half];
                    w[i] = c * c * a + s * s * b, w[i + half] = c * c * b + s * s * a;
                }
        kl_rope_reference(x->x, pos, p->wt->cos_sin, n, heads, D, D, p->d->max_pos, true);
        for (size_t i = 0; i < (size_t)n * heads * D; i++)
            x->w[i] += RB(x->x[i]);
        return;
    }
    for (int t = 0; t < n; t++) {
        const int64_t pos = p->c + t + shift;
        for (int h = 0; h < heads; h++) {
            double *v = x->x + ((size_t)t * heads + h) * D;
            for (int i = 0; i < half; i++) {
                const float c = (float)p->wt->cos_sin[pos * D + i], s = (float)p->wt->cos_sin[pos * D + half + i];
                const float a = (float)v[i], b = (float)v[i + half];
                v[i] = round_bf16(a * c - b * s), v[i + half] = round_bf16(b * c + a * s);
            }
        }
    }
}

/* Error variance of one attention output row (query t, qo head h): story.c's header. */
static void attention_var(const struct pass *p, int layer, const double *q, const double *qw, int kvh, int visible,
                          const double *o, double *ow)
{
    const int D = p->d->head_dim, KV = p->d->kv_heads;
    const double scale = 1 / sqrt((double)D), u = 0x1p-8;
    const double *K = cache_k(p, layer), *V = cache_v(p, layer), *Kw = cache_kvar(p, layer), *Vw = cache_vvar(p, layer);
    double *pr = malloc(sizeof(double) * (size_t)visible), m = -INFINITY, l = 0;
    double *C = calloc((size_t)D * D, sizeof(double)); /* C[d][e] = sum_j p_j (v_jd - o_d) k_je */
    for (int j = 0; j < visible; j++) {
        const double *k = K + ((size_t)j * KV + kvh) * D;
        double s = 0;
        for (int e = 0; e < D; e++)
            s += q[e] * k[e];
        pr[j] = s * scale;
        m = fmax(m, pr[j]);
    }
    for (int j = 0; j < visible; j++)
        l += (pr[j] = exp(pr[j] - m));
    for (int d = 0; d < D; d++)
        ow[d] = 0;
    for (int j = 0; j < visible; j++) {
        const double pj = pr[j] / l;
        const double *k = K + ((size_t)j * KV + kvh) * D, *v = V + ((size_t)j * KV + kvh) * D;
        const double *kw = Kw + ((size_t)j * KV + kvh) * D, *vw = Vw + ((size_t)j * KV + kvh) * D;
        double qk = 0; /* sum_e q_e^2 var_kje */
        for (int e = 0; e < D; e++)
            qk += q[e] * q[e] * kw[e];
        for (int d = 0; d < D; d++) {
            const double dv = v[d] - o[d];
            ow[d] += pj * pj * (vw[d] + scale * scale * dv * dv * qk + u * u / 3 * v[d] * v[d]);
            for (int e = 0; e < D; e++)
                C[(size_t)d * D + e] += pj * dv * k[e];
        }
    }
    for (int d = 0; d < D; d++) {
        double qv = 0;
        for (int e = 0; e < D; e++)
            qv += qw[e] * C[(size_t)d * D + e] * C[(size_t)d * D + e];
        ow[d] += scale * scale * qv + RB(o[d]);
    }
    free(pr), free(C);
}

/* The BF16 emulation of one attention row, with the faults that concern attention. */
static void attention_bf16(const struct pass *p, int layer, const double *q, int kvh, int visible, double *o)
{
    const int D = p->d->head_dim, KV = p->d->kv_heads;
    const float scale = 1.f / sqrtf((float)D);
    if (p->faults & KL_STORY_FAULT_DROP_NEWEST_KEY && visible > 1) visible--;
    float *pr = malloc(sizeof(float) * (size_t)visible), m = -INFINITY, l = 0, acc[D];
    for (int j = 0; j < visible; j++) {
        const int jj = p->faults & KL_STORY_FAULT_WRONG_PAGE && j >= 16 && j < 32 ? j - 16 : j;
        const double *k = cache_k(p, layer) + ((size_t)jj * KV + kvh) * D;
        float s = 0;
        for (int e = 0; e < D; e++)
            s += (float)q[e] * (float)k[e];
        pr[j] = s * scale;
        m = fmaxf(m, pr[j]);
    }
    for (int d = 0; d < D; d++)
        acc[d] = 0;
    for (int j = 0; j < visible; j++) {
        const int jj = p->faults & KL_STORY_FAULT_WRONG_PAGE && j >= 16 && j < 32 ? j - 16 : j;
        const float e = expf(pr[j] - m), pt = p->faults & KL_STORY_FAULT_NO_P_ROUNDING ? e : (float)round_bf16(e);
        l += e; /* the sum from unrounded P, as the kernels keep it */
        const double *v = cache_v(p, layer) + ((size_t)jj * KV + kvh) * D;
        for (int d = 0; d < D; d++)
            acc[d] += pt * (float)v[d];
    }
    for (int d = 0; d < D; d++)
        o[d] = round_bf16(acc[d] / l);
    free(pr);
}

/* out [n, qo_heads, D]: causal attention of the n new queries over the request's c + n keys. */
static int attention(const struct pass *p, int layer, const struct act *q, struct act *out)
{
    const struct kl_story_dims *d = p->d;
    const int D = d->head_dim, QH = d->qo_heads, group = QH / d->kv_heads, n = p->n, kv_len = p->c + n;
    if (exact(p)) {
        const int pages = (kv_len + 15) / 16;
        int32_t *indices = malloc(sizeof(int32_t) * (size_t)pages), indptr[2] = {0, pages}, qo[2] = {0, n};
        int32_t last = kv_len - (pages - 1) * 16;
        if (!indices) return -1;
        for (int i = 0; i < pages; i++)
            indices[i] = i;
        const double sm_scale = 1 / sqrt((double)D);
        int rc = 0;
        if (n == 1) { /* a decode step: the decode reference */
            double lse[QH];
            kl_attention_decode_reference(q->x, cache_k(p, layer), cache_v(p, layer), indptr, indices, &last, 1, QH,
                                          d->kv_heads, D, 16, sm_scale, out->x, lse);
        } else {
            const struct kl_attention_prefill_shape sh = {.batch = 1,
                                                          .total_q = n,
                                                          .num_qo_heads = QH,
                                                          .num_kv_heads = d->kv_heads,
                                                          .head_dim = D,
                                                          .page_size = 16,
                                                          .num_pages = pages,
                                                          .qo_indptr = qo,
                                                          .kv_indptr = indptr,
                                                          .kv_indices = indices,
                                                          .kv_last_page_len = &last,
                                                          .sm_scale = sm_scale,
                                                          .causal = true};
            double *lse = malloc(sizeof(double) * (size_t)n * QH);
            rc = lse ? kl_attention_prefill_reference(&sh, q->x, p->s->k[layer], p->s->v[layer], out->x, lse) : -1;
            free(lse);
        }
        free(indices);
        if (rc) return rc;
        for (int t = 0; t < n; t++)
            for (int h = 0; h < QH; h++) {
                const size_t row = ((size_t)t * QH + h) * D;
                attention_var(p, layer, q->x + row, q->w + row, h / group, p->c + t + 1, out->x + row, out->w + row);
            }
        return 0;
    }
    for (int t = 0; t < n; t++)
        for (int h = 0; h < QH; h++) {
            const size_t row = ((size_t)t * QH + h) * D;
            attention_bf16(p, layer, q->x + row, h / group, p->c + t + 1, out->x + row);
        }
    return 0;
}

static void silu_mul(const struct pass *p, const struct act *gu, struct act *out)
{
    const int M = p->d->mlp;
    if (exact(p)) {
        kl_story_silu_mul_reference(gu->x, p->n, M, out->x);
        for (int t = 0; t < p->n; t++)
            for (int i = 0; i < M; i++) {
                const size_t a = (size_t)t * 2 * M + i, b = a + M, o = (size_t)t * M + i;
                const double g = gu->x[a], up = gu->x[b], sg = 1 / (1 + exp(-g));
                const double dsilu = sg * (1 + g * (1 - sg));
                out->w[o] = dsilu * dsilu * up * up * gu->w[a] + g * sg * g * sg * gu->w[b] + RB(out->x[o]);
            }
        return;
    }
    for (int t = 0; t < p->n; t++)
        for (int i = 0; i < M; i++) {
            const float g = (float)gu->x[(size_t)t * 2 * M + i], up = (float)gu->x[(size_t)t * 2 * M + M + i];
            out->x[(size_t)t * M + i] = round_bf16(g / (1.f + expf(-g)) * up);
        }
}

/* Appends the new tokens' K and V (values and variances) to the request's cache. */
static void append_kv(const struct pass *p, int layer, const struct act *k, const struct act *v)
{
    const size_t row = (size_t)p->d->kv_heads * p->d->head_dim, off = (size_t)p->c * row, n = (size_t)p->n * row;
    memcpy(p->s->k[layer] + off, k->x, n * sizeof(double));
    memcpy(p->s->v[layer] + off, v->x, n * sizeof(double));
    if (exact(p)) {
        memcpy(p->s->kvar[layer] + off, k->w, n * sizeof(double));
        memcpy(p->s->vvar[layer] + off, v->w, n * sizeof(double));
    }
}

/* Appends the new tokens' K and V to the FP8 cache (kl_story_ref_seq_fp8): k_pre is K before
 * RoPE (the fused store rotates it itself, in float32, without a bf16 rounding), k after. */
static void append_fp8(const struct pass *p, int layer, const double *k_pre, const struct act *k, const struct act *v)
{
    const int KV = p->d->kv_heads, D = p->d->head_dim, half = D / 2;
    const size_t row = (size_t)KV * D, off = (size_t)p->c * row;
    for (int t = 0; t < p->n; t++)
        for (int h = 0; h < KV; h++) {
            const double ks = p->s->k_scale[layer * KV + h], vs = p->s->v_scale[layer * KV + h];
            const size_t at = ((size_t)t * KV + h) * D;
            double *kq = p->s->kq[layer] + off + at, *vq = p->s->vq[layer] + off + at;
            if (exact(p)) {
                double *kw = p->s->kqvar[layer] + off + at, *vw = p->s->vqvar[layer] + off + at;
                for (int i = 0; i < D; i++) {
                    const double yk = (float)(k->x[at + i] / ks), yv = (float)(v->x[at + i] / vs);
                    const double ek = (k->w[at + i] - RB(k->x[at + i])) / (ks * ks), ev = v->w[at + i] / (vs * vs);
                    kq[i] = kl_e4m3_to_f32(kl_f32_to_e4m3((float)yk)) * ks;
                    vq[i] = kl_e4m3_to_f32(kl_f32_to_e4m3((float)yv)) * vs;
                    kw[i] = ks * ks * kl_story_e4m3_flip_var(yk, ek + 0x1p-46 * yk * yk);
                    vw[i] = vs * vs * kl_story_e4m3_flip_var(yv, ev + 0x1p-46 * yv * yv);
                }
                continue;
            }
            /* the emulation: the fused store's float32 steps (fmaf rotation, times the rounded reciprocal) */
            const int64_t pos = p->c + t;
            const double *x = k_pre + at;
            const float kinv = 1.f / (float)ks, vinv = 1.f / (float)vs;
            for (int i = 0; i < D; i++) {
                const int j = i < half ? i + half : i - half;
                const float c = (float)p->wt->cos_sin[pos * D + i % half],
                            sn = (float)p->wt->cos_sin[pos * D + half + i % half];
                const float a = (float)x[i], b = (float)x[j];
                const float r = i < half ? fmaf(a, c, -(b * sn)) : fmaf(a, c, b * sn);
                const float y[2] = {r * kinv, (float)v->x[at + i] * vinv};
                const double sc[2] = {ks, vs};
                double *dst[2] = {kq + i, vq + i};
                for (int e = 0; e < 2; e++) {
                    const float code = kl_e4m3_to_f32(kl_f32_to_e4m3(y[e]));
                    if (p->faults & KL_STORY_FAULT_NO_QUANT)
                        *dst[e] = e ? v->x[at + i] : r;
                    else
                        *dst[e] = p->faults & KL_STORY_FAULT_NO_SCALE ? code : (float)(code * (float)sc[e]);
                }
            }
        }
}

int kl_story_ref_forward(const struct kl_story_dims *d, const struct kl_story_ref_weights *w,
                         struct kl_story_ref_seq *s, const int32_t *tokens, int n, enum kl_story_ref_mode mode,
                         int faults, double *logits, double *logits_var)
{
    if (n < 1 || s->len + n > s->capacity || s->len + n > d->max_pos || d->layers > KL_STORY_MAX_LAYERS) return -1;
    const struct pass p = {.d = d,
                           .wt = w,
                           .s = s,
                           .mode = mode,
                           .faults = mode == KL_STORY_REF_EXACT ? 0 : faults,
                           .n = n,
                           .c = s->len,
                           .fp8_read = s->k_scale && n == 1};
    const size_t H = (size_t)d->hidden, QD = (size_t)d->qo_heads * d->head_dim, KD = (size_t)d->kv_heads * d->head_dim;
    const size_t M = (size_t)d->mlp, N = (size_t)n;
    const bool var = mode == KL_STORY_REF_EXACT;
    /* res[0/1]: the residual stream, written alternately (its input and output never alias) */
    struct act x = {0}, res[2] = {{0}}, h = {0}, q = {0}, k = {0}, v = {0}, att = {0}, o = {0}, gu = {0}, a = {0},
               mo = {0}, lg = {0};
    int rc = act_alloc(&x, N * H, var) | act_alloc(&res[0], N * H, var) | act_alloc(&res[1], N * H, var) |
             act_alloc(&h, N * H, var) | act_alloc(&q, N * QD, var) | act_alloc(&k, N * KD, var) |
             act_alloc(&v, N * KD, var) | act_alloc(&att, N * QD, var) | act_alloc(&o, N * H, var) |
             act_alloc(&gu, N * 2 * M, var) | act_alloc(&a, N * M, var) | act_alloc(&mo, N * H, var) |
             act_alloc(&lg, (size_t)d->vocab, var);
    double *k_pre = s->k_scale && !var ? malloc(sizeof(double) * N * KD) : NULL; /* the emulation's unrotated K */
    if (s->k_scale && !var && !k_pre) rc = -1;
    for (int t = 0; !rc && t < n; t++) { /* embedding: a copy of exact bf16 rows, variance 0 */
        if (tokens[t] < 0 || tokens[t] >= d->vocab)
            rc = -1;
        else
            memcpy(x.x + t * H, w->embed + (size_t)tokens[t] * H, H * sizeof(double));
    }
    const struct act *resid = &x; /* layer 0's residual is the embedding itself */
    int next = 0;
    for (int l = 0; !rc && l < d->layers; l++) {
        const struct kl_story_ref_layer *L = &w->layer[l];
        if (l == 0)
            norm(&p, &x, NULL, L->attn_norm, &h, NULL);
        else
            norm(&p, &mo, resid, L->attn_norm, &h, &res[next]), resid = &res[next], next ^= 1;
        gemm(&p, L->wq, (int)QD, (int)H, &h, &q, false);
        gemm(&p, L->wk, (int)KD, (int)H, &h, &k, false);
        gemm(&p, L->wv, (int)KD, (int)H, &h, &v, false);
        if (k_pre) memcpy(k_pre, k.x, sizeof(double) * N * KD);
        rope(&p, &q, d->qo_heads);
        rope(&p, &k, d->kv_heads);
        append_kv(&p, l, &k, &v);
        if (s->k_scale) append_fp8(&p, l, k_pre, &k, &v);
        if ((rc = attention(&p, l, &q, &att))) break;
        gemm(&p, L->wo, (int)H, (int)QD, &att, &o, false);
        norm(&p, &o, resid, L->mlp_norm, &h, &res[next]), resid = &res[next], next ^= 1;
        gemm(&p, L->w_gate_up, (int)(2 * M), (int)H, &h, &gu, false);
        silu_mul(&p, &gu, &a);
        gemm(&p, L->w_down, (int)H, (int)M, &a, &mo, false);
    }
    if (!rc) {
        norm(&p, &mo, resid, w->final_norm, &h, &res[next]);
        /* the LM head on the last token only, float32 logits */
        struct pass last = p;
        last.n = 1;
        const struct act hl = {h.x + (N - 1) * H, var ? h.w + (N - 1) * H : NULL};
        gemm(&last, w->lm_head, d->vocab, (int)H, &hl, &lg, true);
        memcpy(logits, lg.x, sizeof(double) * (size_t)d->vocab);
        if (logits_var) {
            if (var)
                memcpy(logits_var, lg.w, sizeof(double) * (size_t)d->vocab);
            else
                memset(logits_var, 0, sizeof(double) * (size_t)d->vocab);
        }
        s->len += n;
    }
    struct act *all[] = {&x, &res[0], &res[1], &h, &q, &k, &v, &att, &o, &gu, &a, &mo, &lg};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        act_free(all[i]);
    free(k_pre);
    return rc ? -1 : 0;
}
