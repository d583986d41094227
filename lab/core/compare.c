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
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the text of a bound, written from the numbers that make it ---- */

/* A text that cannot say what its numbers are stops the program: a guide must never print a
 * bound other than the one checked. (No KL_CHECK: the emulator links this file without check.c.) */
static void text_fails(const char *why)
{
    fprintf(stderr, "lab/core/compare.c: %s\n", why);
    abort();
}

/* "2^-24" for a power of two (every constant the texts name is one). */
static const char *pow2(char *buf, size_t len, double x)
{
    int e;
    if (frexp(x, &e) != 0.5) text_fails("a constant named as a power of two is not one");
    snprintf(buf, len, "2^%d", e - 1);
    return buf;
}
#define P2(x) pow2((char[16]){0}, 16, (x))

/* k u for a multiple k of the unit roundoff: "u", "2u", "256u", "u/2". */
static const char *units(char *buf, size_t len, double k)
{
    if (k == 1) snprintf(buf, len, "u");
    else if (k > 1) snprintf(buf, len, "%gu", k);
    else snprintf(buf, len, "u/%g", 1 / k);
    return buf;
}
#define U(k) units((char[16]){0}, 16, (k))

/* Appends to buf (of len bytes, filled to *off); a text that does not fit stops the program (the
 * buffers are sized for the texts; a cut one would be wrong without a word). */
__attribute__((format(printf, 4, 5))) static void put(char *buf, size_t len, size_t *off, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    const int n = vsnprintf(buf + *off, len - *off, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= len - *off) text_fails("a tolerance text outgrew its buffer");
    *off += (size_t)n;
}

/* ---- the rows: one per output dtype ---- */

/* Each bound is a multiple of the output dtype's unit roundoff u; the comment at the top derives
 * them. The bias check's floor is KBIAS_FLOOR + u^2. */
static const struct row {
    enum kl_dtype t;
    double u;                  /* unit roundoff: 2^-(significand bits) */
    double rtol, atol, rel_l2; /* in units of u (atol: of u max|ref|) */
    bool bias;                 /* the bias check (the 16-bit rows) */
    double half_subnormal;     /* half the spacing of the dtype's subnormals (all-reduce) */
} krows[] = {
    {KL_F16, 0x1p-11, 2, 0.5, 1, true, 0x1p-25},
    {KL_BF16, 0x1p-8, 2, 0.5, 1, true, 0x1p-134},
    {KL_F32, 0x1p-24, 256, 16, 64, false, 0x1p-150},
};
static const double KBIAS_FLOOR = 0x1p-16; /* the float32 computation's shared error */

/* fp32 for any dtype without a row of its own (the integers and float64 never reach a variant's
 * comparison through here, except as data movement). */
static const struct row *row_of(enum kl_dtype t)
{
    for (size_t i = 0; i < sizeof krows / sizeof krows[0]; i++)
        if (krows[i].t == t) return &krows[i];
    return &krows[2];
}

static char krow_why[3][200];

struct kl_policy kl_policy_for(enum kl_dtype t, bool exact)
{
    if (exact)
        return (struct kl_policy){.why = "data movement: every element bit for bit (sign of zero, NaN payload)",
                                  .exact = true};
    if (t == KL_F64)
        return (struct kl_policy){.rtol = 1e-12, .atol_frac = 1e-13, .rel_l2 = 1e-12,
                                  .why = "float64: reference against reference"};
    const struct row *r = row_of(t);
    return (struct kl_policy){.rtol = r->rtol * r->u, .atol_frac = r->atol * r->u, .rel_l2 = r->rel_l2 * r->u,
                              .why = krow_why[r - krows], .bias_u = r->bias ? r->u : 0,
                              .bias_floor = r->bias ? KBIAS_FLOOR + r->u * r->u : 0};
}

static void write_row_texts(void)
{
    for (int i = 0; i < 3; i++) {
        const struct row *r = &krows[i];
        size_t off = 0;
        char *b = krow_why[i];
        const size_t len = sizeof krow_why[i];
        put(b, len, &off, "%s output, u = %s: rtol %s, atol %s x max abs(ref), rel_l2 %s", kl_dtype_name(r->t),
            P2(r->u), U(r->rtol), U(r->atol), U(r->rel_l2));
        if (r->bias)
            put(b, len, &off, ", bias %s sqrt(sum ref^4)/sum ref^2 + %s + u^2", U(KL_BIAS_SIGMAS), P2(KBIAS_FLOOR));
        else
            put(b, len, &off, " (float32 accumulation over long rows)");
    }
}

/* The reference against a golden: one float32 rounding of the value, plus float64 noise. */
static const double KREF_ROUNDING = 0x1p-24, KREF_NOISE = 0x1p-32;
static char kreference_why[200];

struct kl_policy kl_policy_reference(bool exact)
{
    if (exact) return kl_policy_for(KL_F32, true);
    return (struct kl_policy){.rtol = KREF_ROUNDING, .atol_frac = KREF_NOISE, .rel_l2 = KREF_ROUNDING + KREF_NOISE,
                              .why = kreference_why};
}

static void write_reference_text(void)
{
    size_t off = 0;
    put(kreference_why, sizeof kreference_why, &off,
        "the float64 reference against <f4 goldens: one float32 rounding (%s |ref|) plus float64 noise (%s max "
        "abs(ref))",
        P2(KREF_ROUNDING), P2(KREF_NOISE));
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
 * itself, dominate its norm and dilute the error of the long rows beside them. So decode and
 * prefill also take it over each query row's heads (kl_policy.rel_l2_group), where a long row
 * stands alone.
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
/* What the rows catch: planted bugs, each judged by a module's CPU tests (the comment above lists them). */
static const char kattention_catches[] =
    "What the rows catch, each a planted bug judged on the golden cases by the module's CPU tests, which fail if "
    "a named case lets it through: a missing sm_scale (out and lse), lse in log2 (lse), a wrong kv head (out, on "
    "every case with two kv heads or more), a key too many or too few on the causal diagonal (out), a running "
    "output never rescaled when a later key tile raises the max (out, on rows of several key tiles), no max "
    "subtracted (NaN where a logit passes ~88; below that the output is right and nothing catches it). A tiled "
    "causal mask whose skip test uses the tile's second row gives one row per tile one extra key at a single "
    "offset of (kv_len - q_len) mod the tile size: lse catches it at every tile size on the case that holds "
    "every offset, out at tiles of 32 and 64 keys but not 128, where the key's weight (~1/127) times |v - out| "
    "stays inside u max|v|. The last key dropped moves a row by about sqrt(n)/n relative: out catches it where "
    "the rows that lose it carry the output (decode, non-causal prefill: shown up to 1500 keys, estimated up to "
    "n ~ 1/u^2, 65k in bf16) and on short rows, lse up to a couple of thousand keys; a key of negligible weight "
    "(large logits) is not caught, nor does it matter. P.V accumulated in the input dtype (rounded every 16 "
    "keys) drifts by about u sqrt(n/96): out catches it on rows of a few hundred keys and more, not below ~100 "
    "keys, where it is no larger than a correct kernel's rounding of P. Logits rounded to the input dtype: lse "
    "catches them on 16-bit cases of up to a few hundred keys, out only with large logits or at the margin on a "
    "long row. rel_l2 spans the whole output, so short rows (outputs as large as v) dilute the error of long "
    "rows beside them; each query row's heads must hold it too, so a long row's error shows on its own (a decode "
    "merge that drops one of a long request's splits fails there beside short requests). For comparison, "
    "flash-attention's tests allow twice the error of a PyTorch implementation in the same precision and "
    "FlashInfer about 1e-2 absolute in bf16; ours is derived from u and the reduction "
    "lengths, and tighter on typical inputs.";

/* The attention rows' constants, as the comment above derives them. */
static const double KSCORE_SLACK = 8; /* e_p = (d + 8) 2^-24 A + 2^-22: the score's dot product, s - m, log2(e) */
static const double KEXP2 = 0x1p-22;  /* ex2.approx's relative error */
static const double KEP = 2;          /* e_p enters twice: the numerator's p and l's */
static const double KSUMS = 2;        /* two float32 sums of n terms: the numerator and l */
static const double KOUT_RTOL = 2;    /* 2 u_out |ref|: the output's rounding, and P's share of it */
static const double KREL_FLOOR = 0x1p-21;
static const double KLSE_SLACK = 5, KLSE_RTOL = 0x1p-23, KLSE_REL_L2 = 0x1p-12;

/* The rel_l2 limit below adds KEP x KEXP2 (= 2^-21, from the typical e_p) to KREL_FLOOR; the
 * guides' formula (the text below) shows KREL_FLOOR alone. Adding the term to the text changes
 * every attention guide, so it is left for a change that regenerates them. */
struct kl_policy kl_policy_attention_out(enum kl_dtype t, int64_t head_dim, int64_t max_kv_len, double logit_bound,
                                         double v_abs_max, int64_t row_elems)
{
    const double u = row_of(t)->u, f32 = row_of(KL_F32)->u, d = (double)head_dim;
    const double n = (double)(max_kv_len > 0 ? max_kv_len : 1);
    const double e_p = (d + KSCORE_SLACK) * f32 * logit_bound + KEXP2;
    const double e_typ = (sqrt(d) + KSCORE_SLACK) * f32 * logit_bound + KEXP2;
    const double atol = u + KEP * e_p + KSUMS * n * f32 + (t == KL_F16 ? n * row_of(KL_F16)->half_subnormal : 0);
    return (struct kl_policy){.rtol = KOUT_RTOL * u, .atol_frac = atol,
                              .rel_l2 = u + KEP * e_typ + KREL_FLOOR + KSUMS * sqrt(n) * f32,
                              .why = "attention out: P rounded to the input dtype, float32 scores and sums "
                                     "(lab/core/compare.c derives it)",
                              .atol_scale = v_abs_max > 0 ? v_abs_max : 1,
                              .rel_l2_group = row_elems};
}

/* Decode on an FP8 (e4m3) cache. The reference reads the same codes (k = code x k_scale[g], v = code
 * x v_scale[g], exact in float64), so e4m3's own rounding is in the inputs of both and not in the
 * error. What the kernel adds, against the bound above:
 * - every e4m3 value (3 mantissa bits, exponents -9 .. 8) is exact in bf16 and fp16, so the codes
 *   dequantized to the mma's input type carry no error; q is the input as given;
 * - q . code accumulates in float32 as q . k did, and the scale factor k_scale x sm_scale x log2(e)
 *   is one float32 product (two roundings) applied to that sum: the score error is the same
 *   (d + 1) 2^-24 A plus 2 2^-24 A, inside the score slack of 8 the bound already carries;
 * - P rounded to the input dtype, P.code accumulated in float32, v_scale applied to the float32
 *   sum once (2^-24 relative), well inside 2 u_out |ref|.
 * So the bf16/fp16 decode bound holds unchanged, with A and max|v| taken on the decoded values. It
 * stays tight: the goldens' scales differ by a factor of ten between neighbouring kv heads, so
 * dropping k_scale (logits off by 1/k_scale), taking another head's scale (a factor of 10 or more
 * on the logits or on out) or dropping v_scale (out off by 1/v_scale) fails by orders of magnitude
 * (CPU: the reference mutants of test_attention_decode.c; GPU: mutants.cu). */
struct kl_policy kl_policy_attention_out_fp8(enum kl_dtype t, int64_t head_dim, int64_t max_kv_len,
                                             double logit_bound, double v_abs_max, int64_t row_elems)
{
    struct kl_policy p = kl_policy_attention_out(t, head_dim, max_kv_len, logit_bound, v_abs_max, row_elems);
    p.why = "attention out on an FP8 cache: the 16-bit decode's bound on the decoded values (e4m3 is exact in "
            "bf16/fp16; lab/core/compare.c derives it)";
    return p;
}

struct kl_policy kl_policy_attention_lse(int64_t head_dim, int64_t max_kv_len, double logit_bound)
{
    const double f32 = row_of(KL_F32)->u, d = (double)head_dim, n = (double)(max_kv_len > 0 ? max_kv_len : 1);
    return (struct kl_policy){.rtol = KLSE_RTOL, .atol_frac = (d + KLSE_SLACK) * f32 * logit_bound + n * f32 + KREL_FLOOR,
                              .rel_l2 = KLSE_REL_L2,
                              .why = "attention lse: float32 scores, exp and log (lab/core/compare.c derives it)",
                              .atol_scale = 1};
}

char kl_attention_tolerance_text[4096];

static void write_attention_text(void)
{
    char *b = kl_attention_tolerance_text;
    const size_t len = sizeof kl_attention_tolerance_text;
    const double f32 = row_of(KL_F32)->u;
    size_t off = 0;
    put(b, len, &off,
        "Attention outputs are not judged by the rows above. A fast kernel computes the scores in float32, rounds the "
        "probabilities P to the input dtype (u_p: %s bf16, %s fp16; fp32 keeps P in float32) before P.V, and "
        "accumulates in float32. With d = head_dim, n = keys attended and A = a bound on the logits' magnitude "
        "(sm_scale x max||q|| x max||k||), a correct kernel differs from the float64 reference by at most ",
        P2(row_of(KL_BF16)->u), P2(row_of(KL_F16)->u));
    put(b, len, &off,
        "`%g u_out |ref| + (u_p + %g e_p + %g n %s) max|v|` per element of `out`, where `e_p = (d + %g) %s A + %s` "
        "is the float32 error of a probability (fp16 adds `n %s max|v|` for probabilities below its smallest normal). "
        "The absolute part scales with max|v|, not max|out|: an average of many values is much smaller than the values. ",
        KOUT_RTOL, KEP, KSUMS, P2(f32), KSCORE_SLACK, P2(f32), P2(KEXP2), P2(row_of(KL_F16)->half_subnormal));
    put(b, len, &off,
        "The whole output, and each query row's heads on their own, must also hold "
        "`rel_l2 <= max(u_p, u_out) + %g (sqrt(d) + %g) %s A + %s + %g sqrt(n) %s`: "
        "the typical, not the worst, error (independent roundings of P and of out give about 0.6 u together). `lse` "
        "(natural log) may differ by `(d + %g) %s A + n %s + %s + %s |lse|`; its rel_l2 limit %s only "
        "catches systematic errors. A float32 computation of that kernel passes every golden case and check problem.",
        KEP, KSCORE_SLACK, P2(f32), P2(KREL_FLOOR), KSUMS, P2(f32), KLSE_SLACK, P2(f32), P2(f32), P2(KREL_FLOOR),
        P2(KLSE_RTOL), P2(KLSE_REL_L2));
    put(b, len, &off, "\n\n%s", kattention_catches);
}

/* ---- all-reduce: each element the sum of `world` addends exact in the dtype ---- */

/* The rationale (the guide prints it) derives both checks: Higham's bound for recursive summation,
 * with u' = u + 2^-23 for a 16-bit dtype (float32 first, then the dtype: two roundings), and a bias
 * check of KL_BIAS_SIGMAS spreads. A golden's <f4 output carries its own rounding, KAR_GOLDEN. */
static const double KAR_DOUBLE_ROUNDING = 0x1p-23, KAR_GOLDEN = 0x1p-24;

static double ar_unit(enum kl_dtype t)
{
    const struct row *r = row_of(t);
    return r->t == KL_F32 ? r->u : r->u + KAR_DOUBLE_ROUNDING;
}

int kl_allreduce_exact_bits(enum kl_dtype t) { return -ilogb(row_of(t)->u); }

double kl_allreduce_bound(int world, enum kl_dtype t, double s, double golden_ref)
{
    const double k = world - 1, u = ar_unit(t), file = KAR_GOLDEN * golden_ref;
    return world <= 1 ? file : k * u / (1 - k * u) * s + k * row_of(t)->half_subnormal + file;
}

double kl_allreduce_bias_limit(int world, enum kl_dtype t, bool golden, double s2r2, double sr, double ref2)
{
    /* w-1 roundings of at most u S_i each, and a golden file's own (2^-24 |ref| <= 2^-24 S_i). */
    const double k = world - 1, u = ar_unit(t), file = golden ? KAR_GOLDEN : 0;
    const double var = k * u * u + file * file; /* the squared ranges, per S_i |ref_i| */
    return KL_BIAS_SIGMAS * sqrt(var * s2r2) / ref2 + var * sr / ref2;
}

char kl_allreduce_tolerance_text[4096];

static void write_allreduce_text(void)
{
    char *b = kl_allreduce_tolerance_text;
    const size_t len = sizeof kl_allreduce_tolerance_text;
    const struct row *f16 = row_of(KL_F16), *bf16 = row_of(KL_BF16);
    size_t off = 0;
    put(b, len, &off,
        "Element i of the output is the sum of world values x_r[i], each exact in the dtype; let S_i = sum_r |x_r[i]|. "
        "A correct all-reduce makes world-1 additions. Whatever their order, and wherever it rounds, each addition's "
        "result is rounded at most twice (to float32, then to the dtype) and no partial sum exceeds S_i, so "
        "|out - ref| <= gamma_{w-1} S_i with gamma_k = k u' / (1 - k u') (Higham's bound for recursive summation), "
        "u' = u + %s for fp16 and bf16 (u = %s, %s) and u' = %s for fp32, plus w-1 half-spacings of the "
        "dtype's subnormals. ",
        P2(KAR_DOUBLE_ROUNDING), P2(f16->u), P2(bf16->u), P2(ar_unit(KL_F32)));
    put(b, len, &off,
        "That bound holds for NCCL's ring, which rounds every partial sum to the dtype (the loosest "
        "correct implementation), and our kernels sit far inside it (float32 sums, one rounding: about u |ref|). "
        "Integer inputs whose sums stay within the dtype's exact integers (S_i <= 2^%d bf16, 2^%d fp16, 2^%d fp32) "
        "leave nothing to round, so they are compared bit for bit, sign of zero included. Against a golden's stored "
        "<f4 output the bound also allows that file's own rounding, %s |ref|. ",
        kl_allreduce_exact_bits(KL_BF16), kl_allreduce_exact_bits(KL_F16), kl_allreduce_exact_bits(KL_F32),
        P2(KAR_GOLDEN));
    put(b, len, &off,
        "That element bound grows with the world "
        "faster than one rounding does, so from world 3 on it passes a sum rounded toward zero (an error of up to one "
        "unit in the last place, always toward zero). A second check sees it: the least-squares scale of the error onto "
        "the reference, bias = sum (out - ref) ref / sum ref^2, is about -0.65u for such a sum. A correct all-reduce's "
        "w-1 roundings are zero-mean and each at most u' S_i, so by Hoeffding's inequality its |bias| stays below "
        "%g u' sqrt((w-1) sum S_i^2 ref_i^2) / sum ref_i^2 (a false failure below %.1e per comparison), plus "
        "(w-1) u'^2 sum S_i |ref_i| / sum ref_i^2 for round to nearest's own tiny mean (against a golden's <f4 file, "
        "its rounding, %s |ref|, counts as one more). ",
        KL_BIAS_SIGMAS, 2 * exp(-KL_BIAS_SIGMAS * KL_BIAS_SIGMAS / 2), P2(KAR_GOLDEN));
    put(b, len, &off,
        "With random inputs that limit is about 0.06u at world 2 and "
        "0.27u at world 8 for 64k elements (it shrinks as 1/sqrt(n)), so a sum rounded toward zero fails at every "
        "world size on the check catalogue's 64k + 3 random sums, and at world 2 on the goldens too (20000 sums; the "
        "other worlds' random goldens are too small for it). It lets through accumulating in the dtype instead of "
        "float32 (NCCL's way: legal, up to 7 roundings at world 8) and a summation order that differs between ranks "
        "(each rank's result is in bounds; the ranks' outputs are compared bit for bit, which catches it from world 3 "
        "up: with two ranks a + b = b + a). It catches a missing or doubled contribution (an error of about S_i / world "
        "against %.1f%% of S_i at bf16 world 2), stale or unwritten (NaN-poisoned) elements, and a sum rounded toward "
        "zero.",
        100 * kl_allreduce_bound(2, KL_BF16, 1, 0));
}

/* The fused all-reduce + residual add + RMSNorm. residual_out = sum + residual: the sum's error
 * (kl_allreduce_bound) plus one rounding of the add, u' |residual_out| (float32, then the dtype).
 * out = r w / rho, rho = sqrt(mean r^2 + eps): an input error |d_i| <= b_i moves rho by at most
 * b_rms = sqrt(mean b^2) (Minkowski; eps only shrinks it), so out moves by at most
 * (|w_i| b_i + |out_i| b_rms) / (rho - b_rms), on top of rmsnorm's own row for the dtype. */
double kl_allreduce_residual_bound(int world, enum kl_dtype t, double s, double ro_abs, double golden_ref)
{
    return kl_allreduce_bound(world, t, s, golden_ref) + ar_unit(t) * ro_abs;
}

double kl_allreduce_rmsnorm_bound(enum kl_dtype t, double ref_abs, double ref_max, double w_abs, double b_i,
                                  double b_rms, double rho)
{
    const struct kl_policy p = kl_policy_for(t, false);
    const double lo = rho - b_rms;
    if (lo <= 0) return INFINITY; /* the input error could be the whole row: no bound */
    return p.rtol * ref_abs + p.atol_frac * ref_max + (w_abs * b_i + ref_abs * b_rms) / lo;
}

char kl_allreduce_rmsnorm_tolerance_text[1024];

static void write_allreduce_rmsnorm_text(void)
{
    char *b = kl_allreduce_rmsnorm_tolerance_text;
    const size_t len = sizeof kl_allreduce_rmsnorm_tolerance_text;
    size_t off = 0;
    const struct row *bf16 = row_of(KL_BF16);
    put(b, len, &off,
        "Fused all-reduce + residual add + RMSNorm. residual_out = sum + residual may differ from the float64 value "
        "by the all-reduce's bound (above) plus one rounding of the add, u' |residual_out| (u' = u + %s for fp16 and "
        "bf16, %s for fp32): b_i per element. ",
        P2(KAR_DOUBLE_ROUNDING), P2(ar_unit(KL_F32)));
    put(b, len, &off,
        "out = r w / rho with rho = sqrt(mean r^2 + eps); an input error within b moves rho by at most "
        "b_rms = sqrt(mean b_i^2), so out may differ by rmsnorm's row for the dtype (bf16: rtol %s, atol %s x max "
        "abs(ref)) plus (|w_i| b_i + |out_i| b_rms) / (rho - b_rms). Every element is checked; the bias check of "
        "the plain all-reduce is not applied to the fused outputs.",
        U(bf16->rtol), U(bf16->atol));
}

/* ---- FP8 E4M3 codes: the fused RoPE + quantize + store ---- */

/* What a correct kernel may differ by. The code of element i is e4m3(y_i), y_i = rope(x)_i / scale
 * (over the head's scale; kernels/store/store.h), rounded to nearest even and saturated at 448. A
 * kernel computes y_i in float32 from inputs exact in float32 (bf16/fp16 x, float32 cos, sin and
 * scale): two products x1 c and x2 s, their difference, a reciprocal of the scale and a product,
 * each one rounding of at most 2^-24 of its magnitude; the reference itself rounds y_i to float32
 * once before encoding (the encoder's input: kernels/dtype.h). With T_i = (|x1 c| + |x2 s|) / scale
 * (|x| / scale where nothing is rotated: V, and dims past rotary_dim), every one of those magnitudes
 * is at most T_i (|y_i| <= T_i), so the kernel's float32 y_i is within 6 x 2^-24 T_i of the float64
 * one; KE4M3_ROUNDINGS = 8 leaves two roundings for another order of the same operations (a fused
 * multiply-add, the scale folded into cos and sin). That slack is 2^-21 T_i: the rounding to e4m3
 * (spacing 2^-3 relative) hides it except within 2^-21 T_i of a tie between two codes. So the policy
 * is bit-exactness where it can apply: an element's code must be one that rounding some value in
 * [y_i - slack_i, y_i + slack_i] gives, i.e. the reference's code, or its neighbour only where y_i
 * is that close to the tie between them. NaN stays NaN (e4m3 has one NaN of each sign; the sign of
 * a NaN is not judged); a zero carries the sign of y_i unless |y_i| <= slack_i (the kernel may
 * compute the other sign of a value that small); -0 in gives -0 out (slack 0).
 * The value error that follows: a code stands for code x scale; rounding to e4m3 moves a normal
 * (|y| >= 2^-6) by at most 2^-4 |y| (unit roundoff: 3 mantissa bits), a subnormal by at most 2^-10
 * (half of the spacing 2^-9), and saturation moves |y| > 448 to 448. So |dequant - x| <= 2^-4 |x| +
 * 2^-10 scale, plus one code step (2^-3 relative) only where the tie rule allows it. This bound is
 * what the attention reading the cache inherits; it is not what we check, which is the codes.
 * What it catches (lab/store/test_store_fp8.c, each planted in a copy of the reference and judged
 * on the goldens): no saturation (a value past 464 becomes NaN, as an unsaturated conversion gives),
 * the scale applied twice, RoPE applied after the quantization, and on the GPU the wrong head's
 * scale (lab/store/mutants.cu). A kernel in float32 passes (the test's float32 stand-in). */
static const double KE4M3_ROUNDINGS = 8, KE4M3_U32 = 0x1p-24;

double kl_e4m3_slack(double terms) { return KE4M3_ROUNDINGS * KE4M3_U32 * terms; }

char kl_e4m3_tolerance_text[1536];

struct kl_policy kl_policy_e4m3(const double *pre, const double *slack)
{
    return (struct kl_policy){.why = kl_e4m3_tolerance_text, .e4m3_pre = pre, .e4m3_slack = slack};
}

static void write_e4m3_text(void)
{
    char *b = kl_e4m3_tolerance_text;
    const size_t len = sizeof kl_e4m3_tolerance_text;
    size_t off = 0;
    put(b, len, &off,
        "FP8 E4M3 caches (the fused RoPE + quantize + store): each code is judged, not its value. The code is "
        "e4m3(y), y = rope(x) / scale, rounded to nearest even and saturated at 448. A kernel computes y in float32 "
        "from exact inputs: a handful of roundings, each at most %s of T = (abs(x1 c) + abs(x2 s)) / scale (abs(x) / "
        "scale where nothing rotates), so its y is within slack = %g x %s T of the float64 one (six roundings, and "
        "two more for another order of the same operations). ",
        P2(KE4M3_U32), KE4M3_ROUNDINGS, P2(KE4M3_U32));
    put(b, len, &off,
        "Rounding to e4m3 (spacing 2^-3 relative) hides that slack except next to a tie, so a code must be one that "
        "rounding some value within slack of y gives: the reference's code, or its neighbour only where y lies "
        "within slack of the tie between them. NaN stays NaN; a zero keeps the sign of y unless abs(y) <= slack, so "
        "-0 stays -0. In value terms a stored code x scale differs from x by at most 2^-4 abs(x) for a normal code "
        "(unit roundoff, 3 mantissa bits), 2^-10 scale for a subnormal one (half their spacing 2^-9), and by the "
        "saturation where abs(x) / scale > 448; that is the error attention inherits from the cache.");
}

/* ---- the story: the tiny decoder's logits against its float64 forward pass ---- */

/* reference/story.c propagates the variance of every bf16 rounding to a sigma per logit; the
 * end-to-end check (lab/story/test_story.c) allows
 *   |gpu_i - ref_i| <= z c sigma_i  per logit, z = 6: the two-sided Gaussian tail 2e-9 per logit,
 *                    so under 1e-4 for a run comparing ~2e4 logits;
 *   ||gpu - ref|| <= 1.5 c ||sigma||  per step: the norm of 512 independent errors is within a few
 *                    percent of its expectation, 1.5 leaves room;
 * with c = 2 for what the independence assumption misses: one token's K/V rounding is reused by every
 * later query of the request, so errors of neighbouring positions are correlated (the emulation test
 * measures the real ratio, about 1 / 3 of the limit). Greedy tokens must agree wherever the float64
 * top two logits are further apart than the sum of their two bounds. */
#define KSTORY_Z 6.0
#define KSTORY_C 2.0
#define KSTORY_NORM 1.5
const double kl_story_logit_sigmas = KSTORY_Z * KSTORY_C;
const double kl_story_norm_ratio = KSTORY_NORM * KSTORY_C;

char kl_story_tolerance_text[512];

static void write_story_text(void)
{
    size_t off = 0;
    put(kl_story_tolerance_text, sizeof kl_story_tolerance_text, &off,
        "Each logit must be within %g sigma (a Gaussian tail of %g sigma, times %g for what the model leaves out) and "
        "each step's error norm within %g times the predicted norm.",
        kl_story_logit_sigmas, KSTORY_Z, KSTORY_C, kl_story_norm_ratio);
}

/* Every text above, written once before main (the KL_MODULE descriptors point at the arrays). */
__attribute__((constructor)) static void write_texts(void)
{
    write_row_texts();
    write_reference_text();
    write_attention_text();
    write_allreduce_text();
    write_allreduce_rmsnorm_text();
    write_story_text();
    write_e4m3_text();
}

static bool same_bits(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

/* Whether code g (decoded) is one that rounding a value within slack of pre gives (kl_policy_e4m3). */
static bool e4m3_code_ok(double g, double w, double pre, double slack)
{
    if (same_bits(g, w)) return true;
    if (isnan(pre) || isnan(w)) return isnan(g);
    if (isnan(g)) return false;
    if (g == 0 && w == 0) return fabs(pre) <= slack && slack > 0; /* a zero of the other sign */
    const double lo = kl_e4m3_to_f32(kl_f32_to_e4m3((float)(pre - slack)));
    const double hi = kl_e4m3_to_f32(kl_f32_to_e4m3((float)(pre + slack)));
    return g >= lo && g <= hi;
}

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
        if (p.e4m3_pre) {
            bad = !e4m3_code_ok(g, w, p.e4m3_pre[i], p.e4m3_slack[i]);
            d = !bad ? (isfinite(d) ? d : 0) : d > 0 && isfinite(d) ? d : INFINITY; /* NaN for NaN: 0 */
        } else if (p.exact) {
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
    for (int64_t g0 = 0; p.rel_l2_group > 0 && g0 < n; g0 += p.rel_l2_group) { /* the worst group's */
        double ge2 = 0, gr2 = 0;
        for (int64_t i = g0; i < n && i < g0 + p.rel_l2_group; i++)
            if (isfinite(got[i] - want[i]) && isfinite(want[i]))
                ge2 += (got[i] - want[i]) * (got[i] - want[i]), gr2 += want[i] * want[i];
        const double g = gr2 > 0 ? sqrt(ge2 / gr2) : sqrt(ge2);
        if (g > out->rel_l2) out->rel_l2 = g;
    }
    if (out->n_bad) out->rel_l2 = isinf(out->max_abs) ? INFINITY : out->rel_l2;
    out->pass = out->n_bad == 0 && (p.exact || p.e4m3_pre || out->rel_l2 <= p.rel_l2);
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
