/* Conversions between float and the 16-bit and 8-bit types, round to nearest, ties to even.
 * Tested on the edge values (largest finite, smallest subnormal, ties, overflow to Inf, NaN)
 * in lab/core/test_core.c. */
#include "dtype.h"

#include <math.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;
} kinfo[KL_DTYPE_COUNT] = {
    [KL_F32] = {"fp32", 4}, [KL_F16] = {"fp16", 2}, [KL_BF16] = {"bf16", 2}, [KL_I32] = {"i32", 4},
    [KL_I64] = {"i64", 8},  [KL_F64] = {"f64", 8},  [KL_U8] = {"u8", 1}, [KL_FP8_E4M3] = {"fp8_e4m3", 1},
};

size_t kl_dtype_size(enum kl_dtype t) { return kinfo[t].size; }
const char *kl_dtype_name(enum kl_dtype t) { return kinfo[t].name; }

int kl_dtype_parse(const char *name, enum kl_dtype *out)
{
    for (int t = 0; t < KL_DTYPE_COUNT; t++)
        if (strcmp(name, kinfo[t].name) == 0) return *out = (enum kl_dtype)t, 0;
    if (strcmp(name, "i4") == 0) return *out = KL_I32, 0; /* radix cases say "i4" */
    return -1;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t kl_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    /* Adding 0x7fff plus the lowest kept bit rounds to nearest with ties to even; a carry
     * into the exponent is the correct rounding up (to Inf past the largest finite). */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float kl_bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t kl_f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t mag = u & 0x7fffffffu;
    if (mag > 0x7f800000u) return sign | 0x7e00u;  /* NaN */
    if (mag >= 0x477ff000u) return sign | 0x7c00u; /* >= 65520 rounds to Inf (65504 + half ulp) */
    if (mag < 0x38800000u) {
        /* Below the smallest normal (2^-14): a subnormal multiple of 2^-24. The float add
         * against 0.5 (2^-1) aligns the value to that grid using the FPU's own round-to-even. */
        float a = bits_f32(mag) + 0.5f;
        return sign | (uint16_t)(f32_bits(a) - 0x3f000000u);
    }
    /* Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits. */
    uint32_t r = mag + ((uint32_t)(15 - 127) << 23) + 0xfffu + ((mag >> 13) & 1u);
    return sign | (uint16_t)(r >> 13);
}

float kl_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13)); /* Inf, NaN */
    if (exp == 0) {
        float v = (float)man * 0x1p-24f; /* subnormal (or zero): exact in float */
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 127 - 15) << 23) | (man << 13));
}

/* E4M3: the binade of |f| fixes the spacing of the codes around it (2^(e-3) for a normal of
 * exponent e, 2^-9 for the subnormals below 2^-6); f / spacing is exact in double, rint rounds it
 * to the nearest integer, ties to even (the default rounding mode), and the rounded value is
 * rebuilt into the code. */
uint8_t kl_f32_to_e4m3(float f)
{
    const uint8_t sign = (f32_bits(f) >> 31) ? 0x80 : 0;
    if (isnan(f)) return sign | 0x7f;
    const double a = fabs((double)f);
    if (a >= 448) return sign | 0x7e; /* saturate; [448, 464] would round to 448 anyway */
    int e;
    frexp(a, &e); /* a = m 2^e, m in [0.5, 1): the binade [2^(e-1), 2^e) */
    const double spacing = a < 0x1p-6 ? 0x1p-9 : ldexp(1.0, e - 1 - 3);
    const double r = rint(a / spacing) * spacing; /* may carry into the next binade: still exact */
    if (r < 0x1p-6) return sign | (uint8_t)(r / 0x1p-9); /* subnormal (code 8, 2^-6, is the first normal) */
    frexp(r, &e);
    const int exp = e - 1, man = (int)(r / ldexp(1.0, exp) * 8) - 8;
    return sign | (uint8_t)((exp + 7) << 3) | (uint8_t)man;
}

float kl_e4m3_to_f32(uint8_t c)
{
    const int exp = (c >> 3) & 15, man = c & 7;
    double v;
    if (exp == 15 && man == 7) v = NAN;
    else if (exp == 0) v = man * 0x1p-9;
    else v = ldexp(1.0 + man / 8.0, exp - 7);
    return (float)((c & 0x80) ? -v : v);
}

double kl_round_to(enum kl_dtype t, double v)
{
    switch (t) {
    case KL_F32: return (double)(float)v;
    case KL_F16: return kl_f16_to_f32(kl_f32_to_f16((float)v));
    case KL_BF16: return kl_bf16_to_f32(kl_f32_to_bf16((float)v));
    case KL_FP8_E4M3: return kl_e4m3_to_f32(kl_f32_to_e4m3((float)v));
    default: return v;
    }
}

double kl_load_elem(enum kl_dtype t, const void *buf, size_t i)
{
    switch (t) {
    case KL_F32: return ((const float *)buf)[i];
    case KL_F16: return kl_f16_to_f32(((const uint16_t *)buf)[i]);
    case KL_BF16: return kl_bf16_to_f32(((const uint16_t *)buf)[i]);
    case KL_I32: return ((const int32_t *)buf)[i];
    case KL_I64: return (double)((const int64_t *)buf)[i];
    case KL_F64: return ((const double *)buf)[i];
    case KL_U8: return ((const uint8_t *)buf)[i];
    case KL_FP8_E4M3: return kl_e4m3_to_f32(((const uint8_t *)buf)[i]);
    default: return NAN;
    }
}

void kl_store_elem(enum kl_dtype t, void *buf, size_t i, double v)
{
    switch (t) {
    case KL_F32: ((float *)buf)[i] = (float)v; break;
    case KL_F16: ((uint16_t *)buf)[i] = kl_f32_to_f16((float)v); break;
    case KL_BF16: ((uint16_t *)buf)[i] = kl_f32_to_bf16((float)v); break;
    case KL_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case KL_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case KL_F64: ((double *)buf)[i] = v; break;
    case KL_U8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case KL_FP8_E4M3: ((uint8_t *)buf)[i] = kl_f32_to_e4m3((float)v); break;
    default: break;
    }
}
