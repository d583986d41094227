/* Host tensors and device buffers.
 *
 * A kl_tensor is a dense C-order host array with its element type and shape. It is what .npy
 * files load into, what the references read and write, and what gets copied to the device.
 * Device buffers are plain pointers from kl_dev_alloc (cudaMalloc underneath). */
#ifndef KL_TENSOR_H
#define KL_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "check.h"
#include "kernels/dtype.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KL_MAX_DIMS 4

struct kl_tensor {
    enum kl_dtype dtype;
    int ndim;
    int64_t dims[KL_MAX_DIMS];
    void *data; /* numel * dtype size bytes, owned by the tensor */
};

int64_t kl_numel(const struct kl_tensor *t);
size_t kl_nbytes(const struct kl_tensor *t);
/* Bytes of a dtype array of this shape into *bytes; -1 if a dim is negative or the size
 * overflows (dims read from a file can say anything). */
int kl_shape_bytes(enum kl_dtype dtype, int ndim, const int64_t *dims, size_t *bytes);
/* Allocates zeroed storage; dies on out-of-memory (a program error, not a data error). Shapes
 * that come from files go through kl_tensor_try_alloc instead. */
void kl_tensor_alloc(struct kl_tensor *t, enum kl_dtype dtype, int ndim, const int64_t *dims);
/* The same, returning -1 (t->data NULL) on a bad rank, an overflowing size or no memory. */
int kl_tensor_try_alloc(struct kl_tensor *t, enum kl_dtype dtype, int ndim, const int64_t *dims);
void kl_tensor_free(struct kl_tensor *t);
/* A copy of src converted (with rounding) to dtype. */
void kl_tensor_convert(struct kl_tensor *dst, const struct kl_tensor *src, enum kl_dtype dtype);
/* dst = src converted to dtype, failing (message naming `what`, the file) unless src is <f4/<f8
 * holding values exactly representable in dtype: goldens store bf16/fp16 inputs that way
 * (lab/CONTRACTS.md section 4), and a kernel fed rounded inputs would not match the stored outputs. */
int kl_tensor_convert_exact(struct kl_tensor *dst, const struct kl_tensor *src, enum kl_dtype dtype,
                            const char *what, struct kl_err *err);
/* All elements as doubles (malloc'ed; caller frees). */
double *kl_tensor_to_f64(const struct kl_tensor *t);
/* "[4, 111]" into buf. */
const char *kl_shape_str(const struct kl_tensor *t, char *buf, size_t len);
/* 0 if t has exactly this rank and these dims (a dim of -1 matches anything); else a message
 * naming `what` (the file or array at fault) in err. */
int kl_tensor_expect(const struct kl_tensor *t, const char *what, int ndim, const int64_t *dims,
                     struct kl_err *err);

/* Device memory. These return cudaError_t codes as int so C callers need no CUDA headers. */
int kl_dev_alloc(void **ptr, size_t bytes);
int kl_dev_free(void *ptr);
int kl_dev_upload(void *dst, const void *src, size_t bytes);
int kl_dev_download(void *dst, const void *src, size_t bytes);
int kl_dev_fill_bytes(void *ptr, int byte, size_t bytes); /* poison: 0xFF is NaN in f32/f16/bf16 */
int kl_dev_sync(void);

/* Seeded RNG (splitmix64 seeding xoshiro256**): same seed, same stream, every machine. */
struct kl_rng {
    uint64_t s[4];
};
void kl_rng_seed(struct kl_rng *r, uint64_t seed);
uint64_t kl_rng_u64(struct kl_rng *r);
double kl_rng_uniform(struct kl_rng *r);          /* [0, 1) */
double kl_rng_normal(struct kl_rng *r);           /* N(0, 1) */
/* Two independent N(0, 1) values from one Box-Muller draw (its cosine and sine halves): half the
 * logarithms and trigonometry of two kl_rng_normal calls, for the bulk fills. */
void kl_rng_normal_pair(struct kl_rng *r, double *a, double *b);
int64_t kl_rng_range(struct kl_rng *r, int64_t n); /* [0, n) */
/* Fills a float tensor (f32/f16/bf16/f64) with N(0, scale^2) values rounded to its dtype. */
void kl_rng_fill_normal(struct kl_rng *r, struct kl_tensor *t, double scale);

#ifdef __cplusplus
}
#endif
#endif
