/* Comparison against a float64 reference, and the tolerance table.
 *
 * What a correct kernel may differ by. Every variant computes in float32 and rounds each output
 * once to its dtype, so the error of one element is dominated by that final rounding: at most
 * u|ref|, with u the unit roundoff of the output dtype (2^-24 fp32, 2^-11 fp16, 2^-8 bf16); its
 * float32 arithmetic adds errors of a few 2^-24, some of them shared by many elements (a row's
 * 1/rms is computed once). Each row below states what it catches, and each claim is a mutant
 * that a test shows caught (named after the claim); what a row lets through is said too.
 *
 * bf16 and fp16 rows: three checks.
 *   element  |out - ref| <= 2u|ref| + (u/2) max|ref|. 2u: one rounding of the output plus one
 *            legitimate rounding of an intermediate in the kernel dtype (a residual sum a
 *            kernel stores and then normalises). u/2 of the largest |ref|: an element near zero
 *            computed at the tensor's scale (x cos - y sin, a sum of terms of both signs) keeps
 *            the absolute error of that scale. Catches an element's wrong value: eps left out
 *            where it matters (rmsnorm eps_ignored), a rotation by the wrong pair or sign (rope
 *            sin_sign_flipped), a poisoned (never written) element, which is NaN (rmsnorm
 *            last_not_written), NaN or Inf anywhere the reference is finite.
 *   rel_l2   ||out - ref|| / ||ref|| <= u. One rounding has an RMS of about 0.41u relative
 *            (0.58u at the worst place in a binade), two about 0.6u. Catches errors that every
 *            element's bound allows but no correct kernel makes on most elements: every element
 *            1.5u off with a random sign (test_core's compare_rel_l2_catches_errors_near_every_
 *            element_bound). Lets through out rounded to one bit fewer than the dtype (~0.82u).
 *   bias     the least-squares scale of the error onto the reference,
 *                bias = sum (out - ref) ref / sum ref^2,
 *            must hold |bias| <= 8 u sqrt(sum ref^4) / sum ref^2 + 2^-16 + u^2. A systematic
 *            error shifts every element the same way by far less than u and hides in the first
 *            two checks (u/8 on every element: rel_l2 0.13u), but not in this scale. For a
 *            correct kernel, bias = sum e_i ref_i / sum ref_i^2 with e_i its rounding errors:
 *            independent, zero-mean, |e_i ref_i| <= u ref_i^2, so Hoeffding's inequality gives
 *            P(|bias| >= k u sqrt(sum ref^4)/sum ref^2) <= 2 exp(-k^2/2): k = 8 puts a false
 *            failure at 2.5e-14 per comparison, beyond every run this lab will ever make. With
 *            rtol's second rounding (|e_i| <= 2u) the same inequality still gives 2 exp(-8) for
 *            the worst distribution of errors; roundings have an RMS of at most 0.82u, which
 *            puts the limit near 10 standard deviations. 2^-16: the float32 computation's own
 *            error, shared by many elements (a row's 1/rms, a reduction's rounding), bounded by
 *            what the fp32 row allows an element (256 float32 roundings). u^2: round to nearest
 *            is not exactly zero-mean (an error correlates with the value's low bits by at most
 *            u^2/6).
 *            Catches (rmsnorm, on goldens): the sum of squares missing the last 4 elements of a
 *            4100-wide row (tail_dropped), the sum of squares accumulated in bf16 or in fp16
 *            (bf16_accumulate, fp16_accumulate: 256 partial sums a row, as mutants.cu does),
 *            an output truncated instead of rounded to nearest (truncated_output; allreduce's
 *            round_toward_zero). Lets through a per-row error of random sign that averages
 *            out over the rows, as half-precision partial sums give on short rows.
 *
 * Data movement (index, store; exact): the bits of every element, so -0 against +0 and a NaN's
 * payload count (store's negative_zero_as_positive and nan_canonicalised, which a comparison of
 * values passes).
 *
 * fp32 row: the final rounding (2^-24) is tiny next to the float32 accumulation over a row
 * (error growth ~ sqrt(n) 2^-24, for n up to 16k terms ~128 x 2^-24), so fp32 allows rtol 2^-16
 * (256u), atol 2^-20 max|ref| and rel_l2 2^-18. No bias check: the float32 arithmetic's shared
 * error is the error, so a shift is judged by rel_l2 alone. Catches an output that went through
 * bf16 (2^-8: rmsnorm's bf16_rounded_fp32) and eps left out where it matters (eps_matters_fp32).
 *
 * The reference against a golden: the goldens hold numpy's float64 results rounded once to
 * float32 (<f4), so the C reference (float64) must match them within one float32 rounding of
 * the value, 2^-24 |ref|, plus the difference of two float64 computations of one value in
 * another order (n 2^-53 of the terms' scale, under 2^-38 for every golden's n): 2^-32 max|ref|
 * covers it with room and stays far below one float32 rounding. A reference that accumulates in float32 is off by
 * ~sqrt(n) 2^-24 and fails (rmsnorm's reference_fp32_sum_of_squares). */
#include "compare.h"

#include <math.h>
#include <string.h>

struct kl_policy kl_policy_for(enum kl_dtype t, bool exact)
{
    if (exact)
        return (struct kl_policy){.why = "data movement: every element bit for bit (sign of zero, NaN payload)",
                                  .exact = true};
    switch (t) {
    case KL_F16:
        return (struct kl_policy){.rtol = 0x1p-10, .atol_frac = 0x1p-12, .rel_l2 = 0x1p-11,
                                  .why = "fp16 output, u = 2^-11: rtol 2u, atol u/2 x max abs(ref), rel_l2 u, "
                                         "bias 8u sqrt(sum ref^4)/sum ref^2 + 2^-16 + u^2",
                                  .bias_u = 0x1p-11, .bias_floor = 0x1p-16 + 0x1p-22};
    case KL_BF16:
        return (struct kl_policy){.rtol = 0x1p-7, .atol_frac = 0x1p-9, .rel_l2 = 0x1p-8,
                                  .why = "bf16 output, u = 2^-8: rtol 2u, atol u/2 x max abs(ref), rel_l2 u, "
                                         "bias 8u sqrt(sum ref^4)/sum ref^2 + 2^-16 + u^2",
                                  .bias_u = 0x1p-8, .bias_floor = 0x1p-16 + 0x1p-16};
    case KL_F64:
        return (struct kl_policy){.rtol = 1e-12, .atol_frac = 1e-13, .rel_l2 = 1e-12,
                                  .why = "float64: reference against reference"};
    default:
        return (struct kl_policy){.rtol = 0x1p-16, .atol_frac = 0x1p-20, .rel_l2 = 0x1p-18,
                                  .why = "fp32 output, u = 2^-24: rtol 256u, atol 16u x max abs(ref), rel_l2 64u "
                                         "(float32 accumulation over long rows)"};
    }
}

struct kl_policy kl_policy_reference(bool exact)
{
    if (exact) return kl_policy_for(KL_F32, true);
    return (struct kl_policy){.rtol = 0x1p-24, .atol_frac = 0x1p-32, .rel_l2 = 0x1p-24 + 0x1p-32,
                              .why = "the float64 reference against <f4 goldens: one float32 rounding "
                                     "(2^-24 |ref|) plus float64 noise (2^-32 max abs(ref))"};
}

/* Attention (decode and prefill). What every fast kernel does, and so what a correct one may
 * differ by: scores s = sm_scale * q.k in float32 from inputs exact in float32; p = exp(s - m)
 * in float32 with the running max m; P rounded to the input dtype t (unit roundoff u_p: 2^-8
 * bf16, 2^-11 fp16; fp32 inputs keep P in float32) before the P.V product, which accumulates in
 * float32; l = sum p in float32 from the unrounded p; out = acc / l rounded once to t; lse = m +
 * log(l) in float32. With d = head_dim, n = keys attended and A = the logit bound (an upper
 * bound on sm_scale * sum_i |q_i k_i|; we use sm_scale * max||q|| * max||k||, Cauchy-Schwarz):
 *   score   |ds| <= (d + 1) 2^-24 A (a float32 dot product, worst case), typically sqrt(d) 2^-24 A
 *   p       relative error e_p <= |ds| + 2^-24 * 2A * (rounding of s - m and its log2(e) scaling)
 *           + 2^-22 (ex2.approx), so e_p <= (d + 8) 2^-24 A + 2^-22
 *   out     = sum p_j (1 + delta_j) v_j / sum p_j (1 + eps_j) with |delta| <= e_p + u_p and
 *           |eps| <= e_p: |out' - out| <= (u_p + 2 e_p) max|v|, plus the float32 sums of n terms
 *           in the numerator and l (at most n 2^-24 each, relative), plus, for fp16 only, p below
 *           the smallest normal (2^-14) stored with absolute error up to 2^-25: n 2^-25 max|v| / l
 *           with l >= 1. The final rounding to t is u_out |out|.
 * So the element bound is |got - ref| <= 2 u_out |ref| + (u_p + 2 e_p + 2 n 2^-24 [+ n 2^-25])
 * max|v|: the absolute part scales with max|v| (not with max|out|: an average of many random v
 * is much smaller than v), which is why attention outputs carry atol_scale = max|v|.
 * rel_l2 takes the typical errors, not the worst: independent roundings of P and of the output
 * give an RMS relative error of about 0.42 u each (0.6 u together), score errors about sqrt(d)
 * 2^-24 A, float32 sums sqrt(n) 2^-24. Limit: max(u_p, u_out) + 2 (sqrt(d) + 8) 2^-24 A + 2^-21
 * + 2 sqrt(n) 2^-24.
 * lse: the score errors and the exp/log arithmetic move it by at most (d + 5) 2^-24 A + n 2^-24
 * + 2^-21 (absolute), plus 2^-23 |lse| for the final float32 roundings; its rel_l2 limit, 2^-12,
 * is only there for systematic errors (a log2 instead of ln is 0.44 relative, a missing sm_scale
 * more), the precision is carried by the element bound.
 * rel_l2 is taken over the whole output, so rows of a few keys, whose outputs are as large as v
 * itself, dominate its norm and dilute the error of the long rows beside them.
 *
 * What the rows catch. Each claim below is a mutant (lab/attention_prefill/mutants_reference.h:
 * the float64 computation with that one bug) judged with these policies on the goldens by the
 * CPU tests of attention_decode and attention_prefill, which name the goldens that must catch it
 * and fail if one does not; the same tests show a float32 computation of the kernel above
 * passing every golden and catalogue problem. n is the number of keys a row attends.
 * - sm_scale missing (logits sqrt(d) too large): out and lse, on every case with two keys or more.
 * - lse in log2 (1.44x): lse, everywhere.
 * - A wrong kv head (kv head 0 for every qo head, or h % kv_heads): out, wherever there are two
 *   kv heads or more.
 * - One key too many or too few on the causal diagonal: out, in every causal case with q_len > 1.
 * - No max subtracted: exp overflows float32 once a logit passes ~88.7, and the NaN fails on the
 *   goldens whose logits do (large_logits, large_logits_bf16). Below that the output is right up
 *   to rounding: nothing catches it there, and nothing needs to.
 * - The running output not rescaled when a later key tile raises the max: out, on the goldens
 *   whose rows span several key tiles (of 16, 64 or 128 keys). A row that reaches only a few keys
 *   into its second tile may never raise its max there, and passes.
 * - A tiled causal mask whose skip test uses the tile's second row: at one (kv_len - q_len) mod
 *   tile_k offset per tile, the tile's first row sees one extra key of weight ~1/n. lse catches it
 *   whenever that weight beats its bound (about (d + 5) 2^-24 A + n 2^-24): rows up to a couple of
 *   thousand keys, so at every tile size of the variants on the golden that holds every offset.
 *   out catches it only where weight x |v - out| exceeds u_p max|v|: on that golden at tiles of 32
 *   and 64 keys, not at 128 (n ~ 127 there).
 * - The request's last key dropped: its weight w ~ 1/n moves each element of a row by w |v - out|,
 *   a relative change of ~sqrt(n_eff)/n (n_eff: the softmax's effective number of keys, n for
 *   independent random keys). out's rel_l2 catches it where the rows that lose it carry the norm
 *   (decode, non-causal prefill; shown up to 1500 keys, and by this estimate up to n ~ 1/u_p^2,
 *   65k keys in bf16, of independent values), and its element bound on short rows. Under causal
 *   prefill only the last query loses it, and out catches it on the extend goldens (few queries,
 *   hundreds of keys). lse catches it up to a couple of thousand keys (as above). A key whose
 *   weight is below both bounds (large logits put nearly all the weight on a few keys) is not
 *   caught, and dropping it changes nothing beyond rounding.
 * - P.V accumulated in the input dtype (the accumulator rounded every 16 keys): each rounding
 *   adds ~u/sqrt(3) of the running sum, ~u sqrt(n/96) relative in all: out's rel_l2 catches it on
 *   rows of a few hundred keys and more (goldens of 300 to 8192 keys). Below ~100 keys it is no
 *   larger than what a correct kernel's rounding of P already does, and passes.
 * - The logits rounded to the input dtype (each off by up to u |s|): lse, on 16-bit goldens of up to
 *   a few hundred keys; out only with large logits, or at the margin on a long row. Over thousands
 *   of keys the errors average out below both bounds.
 * How the field compares: flash-attention's tests ask for at most 2x the error of a PyTorch
 * implementation in the same low precision, FlashInfer uses about 1e-2 absolute for bf16; for
 * bf16 at A ~ 10 our element bound is about 0.006 max|v| and our rel_l2 limit u = 0.0039, tighter
 * than both on typical inputs and derived rather than tuned. */
static double unit_roundoff(enum kl_dtype t)
{
    return t == KL_BF16 ? 0x1p-8 : t == KL_F16 ? 0x1p-11 : 0x1p-24;
}

struct kl_policy kl_policy_attention_out(enum kl_dtype t, int64_t head_dim, int64_t max_kv_len, double logit_bound,
                                         double v_abs_max)
{
    const double u = unit_roundoff(t), d = (double)head_dim, n = (double)(max_kv_len > 0 ? max_kv_len : 1);
    const double e_p = (d + 8) * 0x1p-24 * logit_bound + 0x1p-22;
    const double e_typ = (sqrt(d) + 8) * 0x1p-24 * logit_bound + 0x1p-22;
    const double atol = u + 2 * e_p + 2 * n * 0x1p-24 + (t == KL_F16 ? n * 0x1p-25 : 0);
    return (struct kl_policy){.rtol = 2 * u, .atol_frac = atol, .rel_l2 = u + 2 * e_typ + 0x1p-21 + 2 * sqrt(n) * 0x1p-24,
                              .why = "attention out: P rounded to the input dtype, float32 scores and sums "
                                     "(lab/core/compare.c derives it)",
                              .atol_scale = v_abs_max > 0 ? v_abs_max : 1};
}

struct kl_policy kl_policy_attention_lse(int64_t head_dim, int64_t max_kv_len, double logit_bound)
{
    const double d = (double)head_dim, n = (double)(max_kv_len > 0 ? max_kv_len : 1);
    return (struct kl_policy){.rtol = 0x1p-23, .atol_frac = (d + 5) * 0x1p-24 * logit_bound + n * 0x1p-24 + 0x1p-21,
                              .rel_l2 = 0x1p-12,
                              .why = "attention lse: float32 scores, exp and log (lab/core/compare.c derives it)",
                              .atol_scale = 1};
}

const char kl_attention_tolerance_text[] =
    "Attention outputs are not judged by the rows above. A fast kernel computes the scores in float32, rounds the "
    "probabilities P to the input dtype (u_p: 2^-8 bf16, 2^-11 fp16; fp32 keeps P in float32) before P.V, and "
    "accumulates in float32. With d = head_dim, n = keys attended and A = a bound on the logits' magnitude "
    "(sm_scale x max||q|| x max||k||), a correct kernel differs from the float64 reference by at most "
    "`2 u_out |ref| + (u_p + 2 e_p + 2 n 2^-24) max|v|` per element of `out`, where `e_p = (d + 8) 2^-24 A + 2^-22` "
    "is the float32 error of a probability (fp16 adds `n 2^-25 max|v|` for probabilities below its smallest normal). "
    "The absolute part scales with max|v|, not max|out|: an average of many values is much smaller than the values. "
    "The whole output must also hold `rel_l2 <= max(u_p, u_out) + 2 (sqrt(d) + 8) 2^-24 A + 2^-21 + 2 sqrt(n) 2^-24`: "
    "the typical, not the worst, error (independent roundings of P and of out give about 0.6 u together). `lse` "
    "(natural log) may differ by `(d + 5) 2^-24 A + n 2^-24 + 2^-21 + 2^-23 |lse|`; its rel_l2 limit 2^-12 only "
    "catches systematic errors. A float32 computation of that kernel passes every golden case and check problem.\n\n"
    "What the rows catch, each a planted bug judged on the golden cases by the module's CPU tests, which fail if a "
    "named case lets it through: a missing sm_scale (out and lse), lse in log2 (lse), a wrong kv head (out, on every "
    "case with two kv heads or more), a key too many or too few on the causal diagonal (out), a running output never "
    "rescaled when a later key tile raises the max (out, on rows of several key tiles), no max subtracted (NaN "
    "where a logit passes ~88; below that the output is right and nothing catches it). A tiled causal mask "
    "whose skip test uses the tile's second row gives one row per tile one extra key at a single offset of "
    "(kv_len - q_len) mod the tile size: lse catches it at every tile size on the case that holds every offset, out "
    "at tiles of 32 and 64 keys but not 128, where the key's weight (~1/127) times |v - out| stays inside u max|v|. "
    "The last key dropped moves a row by about sqrt(n)/n relative: out catches it where the rows that lose it carry "
    "the output (decode, non-causal prefill: shown up to 1500 keys, estimated up to n ~ 1/u^2, 65k in bf16) and on "
    "short rows, lse up to a couple of thousand keys; a key of negligible weight (large logits) is not caught, nor "
    "does it matter. P.V accumulated in the input dtype (rounded every 16 keys) drifts by about u sqrt(n/96): out "
    "catches it on rows of a few hundred keys and more, not below ~100 keys, where it is no larger than a correct "
    "kernel's rounding of P. Logits rounded to the input dtype: lse catches them on 16-bit cases of up to a few "
    "hundred keys, out only with large logits or at the margin on a long row. rel_l2 spans the whole output, so short "
    "rows (outputs as large as v) dilute the error of long rows beside them. For comparison, flash-attention's tests "
    "allow twice the error of a PyTorch implementation in the same precision and FlashInfer about 1e-2 absolute in "
    "bf16; ours is derived from u and the reduction lengths, and tighter on typical inputs.";

static bool same_bits(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

void kl_compare(const double *got, const double *want, int64_t n, struct kl_policy p, struct kl_cmp *out)
{
    memset(out, 0, sizeof *out);
    double maxref = 0, err2 = 0, ref2 = 0, err_ref = 0, ref4 = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(want[i]) && fabs(want[i]) > maxref) maxref = fabs(want[i]);
    double atol = p.atol_frac * (p.atol_scale > 0 ? p.atol_scale : maxref);
    for (int64_t i = 0; i < n; i++) {
        double g = got[i], w = want[i], d = fabs(g - w);
        bool bad;
        if (p.exact) {
            bad = !same_bits(g, w);
            /* -0 against +0 or two NaNs have no distance that says it: infinitely far. */
            d = !bad ? 0 : d > 0 && isfinite(d) ? d : INFINITY;
        } else if (!isfinite(w)) {
            bad = !(isnan(w) ? isnan(g) : g == w); /* a non-finite reference must be matched exactly */
            d = bad ? INFINITY : 0;
        } else if (!isfinite(g)) {
            bad = true;
            d = INFINITY;
        } else {
            bad = d > atol + p.rtol * fabs(w);
        }
        if (isfinite(d) && isfinite(w)) {
            err2 += d * d;
            ref2 += w * w;
            err_ref += (g - w) * w;
            ref4 += w * w * w * w;
        }
        if (d > out->max_abs || (isnan(d) && !isnan(out->max_abs))) out->max_abs = d;
        if (bad) {
            if (out->n_reported < KL_MAX_REPORTED) out->first[out->n_reported++] = (struct kl_mismatch){i, g, w};
            out->n_bad++;
        }
    }
    out->rel_l2 = ref2 > 0 ? sqrt(err2 / ref2) : sqrt(err2);
    if (out->n_bad) out->rel_l2 = isinf(out->max_abs) ? INFINITY : out->rel_l2;
    out->pass = out->n_bad == 0 && (p.exact || out->rel_l2 <= p.rel_l2);
    if (p.bias_u > 0 && ref2 > 0) {
        out->bias = err_ref / ref2;
        out->bias_limit = KL_BIAS_SIGMAS * p.bias_u * sqrt(ref4) / ref2 + p.bias_floor;
        out->pass = out->pass && fabs(out->bias) <= out->bias_limit;
    }
}

void kl_cmp_merge(struct kl_cmp *a, const struct kl_cmp *b)
{
    if (b->rel_l2 > a->rel_l2 || isnan(b->rel_l2)) a->rel_l2 = b->rel_l2;
    if (b->max_abs > a->max_abs || isnan(b->max_abs)) a->max_abs = b->max_abs;
    /* The bias of the output nearest its limit. */
    if (b->bias_limit > 0 && (a->bias_limit == 0 || fabs(b->bias) / b->bias_limit > fabs(a->bias) / a->bias_limit))
        a->bias = b->bias, a->bias_limit = b->bias_limit;
    for (int i = 0; i < b->n_reported && a->n_reported < KL_MAX_REPORTED; i++) a->first[a->n_reported++] = b->first[i];
    a->n_bad += b->n_bad;
    a->pass = a->pass && b->pass;
}

void kl_cmp_print(FILE *f, const char *name, const struct kl_cmp *c)
{
    for (int i = 0; i < c->n_reported; i++)
        fprintf(f, "    %s[%lld]: got %.9g, expected %.9g\n", name, (long long)c->first[i].index, c->first[i].got,
                c->first[i].want);
    if (c->n_bad > c->n_reported) fprintf(f, "    ... %lld more mismatches\n", (long long)(c->n_bad - c->n_reported));
}
