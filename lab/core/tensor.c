#include "tensor.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t kl_numel(const struct kl_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->dims[i];
    return n;
}

size_t kl_nbytes(const struct kl_tensor *t) { return (size_t)kl_numel(t) * kl_dtype_size(t->dtype); }

int kl_shape_bytes(enum kl_dtype dtype, int ndim, const int64_t *dims, size_t *bytes)
{
    size_t n = kl_dtype_size(dtype);
    for (int i = 0; i < ndim; i++) {
        if (dims[i] < 0) return -1;
        if (dims[i] == 0) n = 0;
        else if (n > SIZE_MAX / (uint64_t)dims[i]) return -1;
        else n *= (size_t)dims[i];
    }
    if (n > (size_t)INT64_MAX) return -1; /* kl_numel is signed */
    *bytes = n;
    return 0;
}

int kl_tensor_try_alloc(struct kl_tensor *t, enum kl_dtype dtype, int ndim, const int64_t *dims)
{
    memset(t, 0, sizeof *t);
    size_t bytes;
    if (ndim < 0 || ndim > KL_MAX_DIMS || kl_shape_bytes(dtype, ndim, dims, &bytes)) return -1;
    t->dtype = dtype;
    t->ndim = ndim;
    for (int i = 0; i < ndim; i++) t->dims[i] = dims[i];
    t->data = calloc(bytes ? bytes : 1, 1);
    return t->data ? 0 : -1;
}

void kl_tensor_alloc(struct kl_tensor *t, enum kl_dtype dtype, int ndim, const int64_t *dims)
{
    KL_CHECK(ndim >= 0 && ndim <= KL_MAX_DIMS, "tensor rank %d out of range", ndim);
    struct kl_tensor want = {.dtype = dtype, .ndim = ndim};
    for (int i = 0; i < ndim; i++) want.dims[i] = dims[i];
    char shape[96];
    KL_CHECK(kl_tensor_try_alloc(t, dtype, ndim, dims) == 0, "out of host memory allocating a %s tensor of shape %s",
             kl_dtype_name(dtype), kl_shape_str(&want, shape, sizeof shape));
}

void kl_tensor_free(struct kl_tensor *t)
{
    free(t->data);
    t->data = NULL;
}

static void convert_into(struct kl_tensor *dst, const struct kl_tensor *src)
{
    int64_t n = kl_numel(src);
    for (int64_t i = 0; i < n; i++)
        kl_store_elem(dst->dtype, dst->data, (size_t)i, kl_load_elem(src->dtype, src->data, (size_t)i));
}

void kl_tensor_convert(struct kl_tensor *dst, const struct kl_tensor *src, enum kl_dtype dtype)
{
    kl_tensor_alloc(dst, dtype, src->ndim, src->dims);
    convert_into(dst, src);
}

int kl_tensor_convert_exact(struct kl_tensor *dst, const struct kl_tensor *src, enum kl_dtype dtype,
                            const char *what, struct kl_err *err)
{
    if (src->dtype != KL_F32 && src->dtype != KL_F64)
        return kl_fail(err, "%s: dtype %s, expected <f4", what, kl_dtype_name(src->dtype));
    /* src came from a file: running out of memory here is that case's failure, not an exit. */
    if (kl_tensor_try_alloc(dst, dtype, src->ndim, src->dims))
        return kl_fail(err, "%s: out of host memory converting it to %s", what, kl_dtype_name(dtype));
    convert_into(dst, src);
    int64_t n = kl_numel(src);
    for (int64_t i = 0; i < n; i++) {
        double a = kl_load_elem(src->dtype, src->data, (size_t)i), b = kl_load_elem(dtype, dst->data, (size_t)i);
        if (!(a == b || (isnan(a) && isnan(b)))) {
            kl_tensor_free(dst);
            return kl_fail(err, "%s: element %lld (%.9g) is not representable in %s", what, (long long)i, a,
                           kl_dtype_name(dtype));
        }
    }
    return 0;
}

double *kl_tensor_to_f64(const struct kl_tensor *t)
{
    int64_t n = kl_numel(t);
    double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
    KL_CHECK(v, "out of host memory");
    for (int64_t i = 0; i < n; i++) v[i] = kl_load_elem(t->dtype, t->data, (size_t)i);
    return v;
}

const char *kl_shape_str(const struct kl_tensor *t, char *buf, size_t len)
{
    size_t off = (size_t)snprintf(buf, len, "[");
    for (int i = 0; i < t->ndim && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, "%s%lld", i ? ", " : "", (long long)t->dims[i]);
    if (off < len) snprintf(buf + off, len - off, "]");
    return buf;
}

int kl_tensor_expect(const struct kl_tensor *t, const char *what, int ndim, const int64_t *dims,
                     struct kl_err *err)
{
    char got[96], want[96];
    bool ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = dims[i] < 0 || dims[i] == t->dims[i];
    if (ok) return 0;
    struct kl_tensor w = {.ndim = ndim};
    for (int i = 0; i < ndim; i++) w.dims[i] = dims[i];
    return kl_fail(err, "%s: shape %s, expected %s", what, kl_shape_str(t, got, sizeof got),
                   kl_shape_str(&w, want, sizeof want));
}

/* ---- RNG: xoshiro256** seeded through splitmix64 (public-domain algorithms by Vigna) ---- */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void kl_rng_seed(struct kl_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t kl_rng_u64(struct kl_rng *r)
{
    uint64_t *s = r->s, result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double kl_rng_uniform(struct kl_rng *r) { return (double)(kl_rng_u64(r) >> 11) * 0x1p-53; }

double kl_rng_normal(struct kl_rng *r)
{
    double a, b;
    kl_rng_normal_pair(r, &a, &b);
    return a;
}

void kl_rng_normal_pair(struct kl_rng *r, double *a, double *b)
{
    /* Box-Muller; 1 - u keeps the log argument in (0, 1]. */
    const double u = 1.0 - kl_rng_uniform(r), v = kl_rng_uniform(r);
    const double radius = sqrt(-2.0 * log(u)), angle = 2.0 * M_PI * v;
    *a = radius * cos(angle), *b = radius * sin(angle);
}

int64_t kl_rng_range(struct kl_rng *r, int64_t n) { return n > 0 ? (int64_t)(kl_rng_u64(r) % (uint64_t)n) : 0; }

void kl_rng_fill_normal(struct kl_rng *r, struct kl_tensor *t, double scale)
{
    const int64_t n = kl_numel(t);
    for (int64_t i = 0; i < n; i += 2) {
        double a, b;
        kl_rng_normal_pair(r, &a, &b);
        kl_store_elem(t->dtype, t->data, (size_t)i, scale * a);
        if (i + 1 < n) kl_store_elem(t->dtype, t->data, (size_t)i + 1, scale * b);
    }
}
