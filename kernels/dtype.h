/* Element types and the conversions between them.
 *
 * f16 and bf16 are stored as raw uint16_t bits on the host so that C code needs no CUDA
 * headers. Conversions from float round to nearest, ties to even, exactly as the GPU's
 * __float2bfloat16_rn / __float2half_rn do, so host-prepared inputs match device ones bit for bit. */
#ifndef KL_DTYPE_H
#define KL_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum kl_dtype { KL_F32, KL_F16, KL_BF16, KL_I32, KL_I64, KL_F64, KL_U8, KL_FP8_E4M3, KL_DTYPE_COUNT };

size_t kl_dtype_size(enum kl_dtype t);
/* Names as lab/CONTRACTS.md writes them in meta.json and results: fp32, fp16, bf16, i32, i64, f64, u8,
 * fp8_e4m3. */
const char *kl_dtype_name(enum kl_dtype t);
/* Parses fp32/fp16/bf16 (and the other names); returns -1 for an unknown name. */
int kl_dtype_parse(const char *name, enum kl_dtype *out);

uint16_t kl_f32_to_bf16(float f);
float kl_bf16_to_f32(uint16_t h);
uint16_t kl_f32_to_f16(float f);
float kl_f16_to_f32(uint16_t h);
/* FP8 E4M3 (OCP's E4M3FN: 1 sign, 4 exponent bits of bias 7, 3 mantissa bits; no infinities; NaN
 * is 0x7f and 0xff; largest finite 448, smallest subnormal 2^-9), one byte. The encoder rounds to
 * nearest, ties to even, and saturates: |f| past 448 (infinities included) gives +-448; NaN gives
 * NaN of f's sign; -0 stays -0. Its input is a float, as the hardware's cvt takes one (a float64
 * value is rounded to float32 first, as ml_dtypes does). Tested against ml_dtypes on every code
 * and a sweep of floats in lab/store/test_store_fp8.c. */
uint8_t kl_f32_to_e4m3(float f);
float kl_e4m3_to_f32(uint8_t c);

/* Rounds a value to the nearest value representable in t (f32/f16/bf16; others unchanged). */
double kl_round_to(enum kl_dtype t, double v);

/* Element i of a buffer of type t, as a double; and the store back (with rounding). */
double kl_load_elem(enum kl_dtype t, const void *buf, size_t i);
void kl_store_elem(enum kl_dtype t, void *buf, size_t i, double v);

#ifdef __cplusplus
}
#endif
#endif
