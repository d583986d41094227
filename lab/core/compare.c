/* Comparison against a float64 reference, and the tolerance table.
 *
 * Rationale for the table. Every variant computes in float32 and rounds each output once to
 * its dtype, so the error of one element is dominated by that final rounding: at most u*|ref|,
 * with u the unit roundoff of the output dtype (2^-24 fp32, 2^-11 fp16, 2^-8 bf16). We allow
 * rtol = 2u per element: one rounding of the output plus one legitimate rounding of an
 * intermediate in the kernel dtype (for example a residual sum that a kernel stores in bf16 and
 * then normalises). For fp32 outputs the final rounding is tiny next to the float32
 * accumulation over a row (error growth ~ sqrt(n) u for n up to 16k terms is ~128u), so fp32
 * gets rtol = 2^-16 (256u).
 * atol covers elements whose reference is near zero while the computation ran at the
 * tensor's scale (cancellation in x*cos - y*sin, a sum of terms of both signs): u/2 of the
 * largest |ref| of that output, i.e. one float32 rounding at that scale is far below it, one
 * bf16 rounding is not.
 * rel_l2: independent roundings of uniform error have an RMS of u/sqrt(3) relative each; two
 * of them give ~0.82u, so the whole output must stay within u (fp32: 2^-18, for the same
 * accumulation reason as above). Systematic errors (a wrong eps, a skipped element in a sum)
 * shift every element the same way and show up here even when each element is in bounds. */
#include "compare.h"

#include <math.h>
#include <string.h>

struct kl_policy kl_policy_for(enum kl_dtype t, bool exact)
{
    if (exact) return (struct kl_policy){0, 0, 0, "data movement: every element bit-exact"};
    switch (t) {
    case KL_F16:
        return (struct kl_policy){0x1p-10, 0x1p-12, 0x1p-11,
                                  "fp16 output, u = 2^-11: rtol 2u, atol u/2 x max abs(ref), rel_l2 u"};
    case KL_BF16:
        return (struct kl_policy){0x1p-7, 0x1p-9, 0x1p-8,
                                  "bf16 output, u = 2^-8: rtol 2u, atol u/2 x max abs(ref), rel_l2 u"};
    case KL_F64:
        return (struct kl_policy){1e-12, 1e-13, 1e-12, "float64: reference against reference"};
    default:
        return (struct kl_policy){0x1p-16, 0x1p-20, 0x1p-18,
                                  "fp32 output, u = 2^-24: rtol 256u, atol 16u x max abs(ref), rel_l2 64u "
                                  "(float32 accumulation over long rows)"};
    }
}

void kl_compare(const double *got, const double *want, int64_t n, struct kl_policy p, struct kl_cmp *out)
{
    memset(out, 0, sizeof *out);
    double maxref = 0, err2 = 0, ref2 = 0;
    for (int64_t i = 0; i < n; i++)
        if (isfinite(want[i]) && fabs(want[i]) > maxref) maxref = fabs(want[i]);
    double atol = p.atol_frac * maxref;
    for (int64_t i = 0; i < n; i++) {
        double g = got[i], w = want[i], d = fabs(g - w);
        bool bad;
        if (!isfinite(w)) {
            bad = !(isnan(w) ? isnan(g) : g == w); /* a non-finite reference must be matched exactly */
            d = bad ? INFINITY : 0;
        } else if (!isfinite(g)) {
            bad = true;
            d = INFINITY;
        } else {
            bad = d > atol + p.rtol * fabs(w);
            err2 += d * d;
            ref2 += w * w;
        }
        if (d > out->max_abs || (isnan(d) && !isnan(out->max_abs))) out->max_abs = d;
        if (bad) {
            if (out->n_reported < KL_MAX_REPORTED) out->first[out->n_reported++] = (struct kl_mismatch){i, g, w};
            out->n_bad++;
        }
    }
    out->rel_l2 = ref2 > 0 ? sqrt(err2 / ref2) : sqrt(err2);
    if (out->n_bad) out->rel_l2 = isinf(out->max_abs) ? INFINITY : out->rel_l2;
    out->pass = out->n_bad == 0 && out->rel_l2 <= p.rel_l2;
}

void kl_cmp_merge(struct kl_cmp *a, const struct kl_cmp *b)
{
    if (b->rel_l2 > a->rel_l2 || isnan(b->rel_l2)) a->rel_l2 = b->rel_l2;
    if (b->max_abs > a->max_abs || isnan(b->max_abs)) a->max_abs = b->max_abs;
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
