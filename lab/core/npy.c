/* NumPy .npy files: the magic, a version, a header dict, then the raw C-order data.
 * Every failure names the file and what is wrong with it. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "files.h"
#include "golden.h"

static const struct {
    const char *descr;
    enum kl_dtype dtype;
} kdescr[] = {
    {"<f4", KL_F32}, {"<f8", KL_F64}, {"<i4", KL_I32}, {"<i8", KL_I64}, {"|u1", KL_U8}, {"<f2", KL_F16},
};

/* Arrays past this size are refused before anything is allocated: golden arrays are a few MB
 * (lab/CONTRACTS.md section 4 keeps golden/ small; big shapes use fresh random inputs), so a larger
 * one is a mistake, and reading it whole could take the machine's memory. */
#define KL_NPY_MAX_BYTES (4ll << 30)

/* The header is a Python dict literal, as numpy writes it:
 *     {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
 * parsed strictly: exactly these three keys, each once, each value of its own form, nothing
 * after the closing brace but the padding. A lenient scan (find "'descr'" anywhere) would
 * take a key from inside another value, or read 'Falsey' as False and '(4 64)' as (4, 64). */
struct hdr {
    const char *p, *path;
    struct kl_err *err;
};

static void skip_space(struct hdr *h)
{
    while (*h->p == ' ' || *h->p == '\t') h->p++;
}

static int expect_char(struct hdr *h, char c, const char *where)
{
    skip_space(h);
    if (*h->p != c) return kl_fail(h->err, "%s: bad header: expected '%c' %s", h->path, c, where);
    h->p++;
    return 0;
}

/* A quoted string without escapes (numpy writes none) into out. */
static int quoted(struct hdr *h, char *out, size_t len)
{
    skip_space(h);
    char q = *h->p;
    if (q != '\'' && q != '"') return kl_fail(h->err, "%s: bad header: expected a quoted string", h->path);
    const char *s = ++h->p;
    while (*h->p && *h->p != q && *h->p != '\\') h->p++;
    if (*h->p != q || (size_t)(h->p - s) >= len) return kl_fail(h->err, "%s: bad header: bad string", h->path);
    memcpy(out, s, (size_t)(h->p - s));
    out[h->p - s] = 0;
    h->p++;
    return 0;
}

static int parse_descr(struct hdr *h, struct kl_tensor *t)
{
    char descr[16];
    if (quoted(h, descr, sizeof descr)) return -1;
    for (size_t i = 0; i < sizeof kdescr / sizeof kdescr[0]; i++)
        if (strcmp(descr, kdescr[i].descr) == 0) return t->dtype = kdescr[i].dtype, 0;
    return kl_fail(h->err, "%s: unsupported dtype '%s' (want <f4, <f8, <i4, <i8 or |u1, little-endian)", h->path,
                   descr);
}

static int parse_fortran_order(struct hdr *h)
{
    skip_space(h);
    size_t n = 0;
    while (isalpha((unsigned char)h->p[n])) n++;
    bool is_false = n == 5 && strncmp(h->p, "False", 5) == 0, is_true = n == 4 && strncmp(h->p, "True", 4) == 0;
    if (!is_false && !is_true) return kl_fail(h->err, "%s: bad header: 'fortran_order' must be False or True", h->path);
    h->p += n;
    if (is_true) return kl_fail(h->err, "%s: Fortran order is not supported (want C order)", h->path);
    return 0;
}

/* A tuple of non-negative integers: (), (4,), (2, 3) or (2, 3,). Like numpy, (4) is not a
 * tuple. */
static int parse_shape(struct hdr *h, struct kl_tensor *t)
{
    if (expect_char(h, '(', "to open 'shape'")) return -1;
    t->ndim = 0;
    bool comma = true; /* a value may follow */
    for (;;) {
        skip_space(h);
        if (*h->p == ')') break;
        if (!comma || !isdigit((unsigned char)*h->p))
            return kl_fail(h->err, "%s: bad 'shape' in header (want a tuple like (2, 3))", h->path);
        if (t->ndim == KL_MAX_DIMS) return kl_fail(h->err, "%s: more than %d dimensions", h->path, KL_MAX_DIMS);
        errno = 0;
        char *next;
        long long v = strtoll(h->p, &next, 10);
        if (errno || v > (1ll << 40)) return kl_fail(h->err, "%s: dimension out of range in 'shape'", h->path);
        t->dims[t->ndim++] = v;
        h->p = next;
        skip_space(h);
        comma = *h->p == ',';
        if (comma) h->p++;
    }
    h->p++;
    if (t->ndim == 1 && !comma) return kl_fail(h->err, "%s: bad 'shape' in header: (N) is not a tuple, (N,) is", h->path);
    return 0;
}

static int parse_header(const char *path, const char *text, struct kl_tensor *t, struct kl_err *err)
{
    static const char *const keys[] = {"descr", "fortran_order", "shape"};
    struct hdr h = {text, path, err};
    bool seen[3] = {false, false, false};
    if (expect_char(&h, '{', "at the start")) return -1;
    for (;;) {
        skip_space(&h);
        if (*h.p == '}') break;
        char key[32];
        if (quoted(&h, key, sizeof key)) return -1;
        int k = -1;
        for (int i = 0; i < 3; i++)
            if (strcmp(key, keys[i]) == 0) k = i;
        if (k < 0) return kl_fail(err, "%s: unknown key '%s' in header", path, key);
        if (seen[k]) return kl_fail(err, "%s: key '%s' twice in header", path, key);
        seen[k] = true;
        if (expect_char(&h, ':', "after a key")) return -1;
        if ((k == 0 && parse_descr(&h, t)) || (k == 1 && parse_fortran_order(&h)) || (k == 2 && parse_shape(&h, t)))
            return -1;
        skip_space(&h);
        if (*h.p == ',') h.p++;
        else if (*h.p != '}') return kl_fail(err, "%s: bad header: expected ',' or '}' after '%s'", path, key);
    }
    h.p++;
    while (*h.p == ' ' || *h.p == '\t' || *h.p == '\n' || *h.p == '\r') h.p++;
    if (*h.p) return kl_fail(err, "%s: bad header: text after the closing '}'", path);
    for (int i = 0; i < 3; i++)
        if (!seen[i]) return kl_fail(err, "%s: header has no '%s'", path, keys[i]);
    return 0;
}

int kl_npy_read(const char *path, struct kl_tensor *t, struct kl_err *err)
{
    memset(t, 0, sizeof *t);
    long long size;
    FILE *f = kl_open_regular(path, LLONG_MAX, &size, err);
    if (!f) return -1;
    int rc = -1;
    char *hdr = NULL;
    unsigned char pre[10];
    if (fread(pre, 1, 8, f) != 8 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        kl_fail(err, "%s: not a .npy file (bad magic)", path);
        goto out;
    }
    size_t hlen, off;
    if (pre[6] == 1) {
        if (fread(pre + 8, 1, 2, f) != 2) goto truncated;
        hlen = pre[8] | (size_t)pre[9] << 8;
        off = 10 + hlen;
    } else if (pre[6] == 2 || pre[6] == 3) {
        unsigned char l4[4];
        if (fread(l4, 1, 4, f) != 4) goto truncated;
        hlen = l4[0] | (size_t)l4[1] << 8 | (size_t)l4[2] << 16 | (size_t)l4[3] << 24;
        off = 12 + hlen;
        if (hlen > (1u << 20)) {
            kl_fail(err, "%s: header length %zu is implausible", path, hlen);
            goto out;
        }
    } else {
        kl_fail(err, "%s: unsupported .npy version %d.%d", path, pre[6], pre[7]);
        goto out;
    }
    if ((long long)off > size) goto truncated;
    hdr = calloc(hlen + 1, 1);
    KL_CHECK(hdr, "out of memory");
    if (fread(hdr, 1, hlen, f) != hlen) goto truncated;
    if (memchr(hdr, 0, hlen)) {
        kl_fail(err, "%s: bad header: a NUL byte in it", path);
        goto out;
    }
    struct kl_tensor shape;
    memset(&shape, 0, sizeof shape);
    if (parse_header(path, hdr, &shape, err)) goto out;

    /* The shape's size is checked for overflow and against the file before any allocation.
     * An empty array's other dims are held to the same bound, so no product of dims that a
     * module forms from them can overflow either. */
    size_t want, span;
    int64_t nonzero[KL_MAX_DIMS];
    for (int i = 0; i < shape.ndim; i++) nonzero[i] = shape.dims[i] ? shape.dims[i] : 1;
    if (kl_shape_bytes(shape.dtype, shape.ndim, nonzero, &span) || span > (size_t)KL_NPY_MAX_BYTES) {
        kl_fail(err, "%s: shape %s is too large (more than %lld bytes)", path,
                kl_shape_str(&shape, (char[96]){0}, 96), KL_NPY_MAX_BYTES);
        goto out;
    }
    kl_shape_bytes(shape.dtype, shape.ndim, shape.dims, &want);
    size_t have = (size_t)(size - (long long)off);
    if (have < want) {
        kl_fail(err, "%s: truncated: header says %zu data bytes, file has %zu", path, want, have);
        goto out;
    }
    if (have > want) {
        kl_fail(err, "%s: size mismatch: more data than the header's shape holds", path);
        goto out;
    }
    if (kl_tensor_try_alloc(t, shape.dtype, shape.ndim, shape.dims)) {
        kl_fail(err, "%s: out of host memory for its %zu data bytes", path, want);
        goto out;
    }
    if (fread(t->data, 1, want, f) != want) {
        kl_fail(err, "%s: read error (or the file shrank while it was read)", path);
        kl_tensor_free(t);
        goto out;
    }
    rc = 0;
    goto out;
truncated:
    kl_fail(err, "%s: truncated header", path);
out:
    free(hdr);
    fclose(f);
    return rc;
}

int kl_npy_write(const char *path, const struct kl_tensor *t, struct kl_err *err)
{
    const char *descr;
    struct kl_tensor wide = {0};
    const struct kl_tensor *src = t;
    switch (t->dtype) {
    case KL_F32: descr = "<f4"; break;
    case KL_F64: descr = "<f8"; break;
    case KL_I32: descr = "<i4"; break;
    case KL_I64: descr = "<i8"; break;
    case KL_U8:
    case KL_FP8_E4M3: descr = "|u1"; break; /* fp8 codes: the bytes as they are (CONTRACTS section 4) */
    default: /* f16/bf16 are stored widened, exactly representable in <f4 */
        kl_tensor_convert(&wide, t, KL_F32);
        src = &wide;
        descr = "<f4";
    }
    char shape[256] = "(";
    size_t off = 1;
    for (int i = 0; i < src->ndim; i++)
        off += (size_t)snprintf(shape + off, sizeof shape - off, "%lld,%s", (long long)src->dims[i],
                                i + 1 < src->ndim ? " " : "");
    snprintf(shape + off, sizeof shape - off, ")");
    char hdr[512];
    int n = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
    /* Pad with spaces so magic + version + length + header + newline is a multiple of 64. */
    int total = 10 + n + 1, pad = (64 - total % 64) % 64;
    memset(hdr + n, ' ', (size_t)pad);
    hdr[n + pad] = '\n';
    uint16_t hlen = (uint16_t)(n + pad + 1);
    FILE *f = fopen(path, "wb");
    if (!f) {
        kl_tensor_free(&wide);
        return kl_fail(err, "%s: cannot write: %s", path, strerror(errno));
    }
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff),
                             (unsigned char)(hlen >> 8)};
    bool ok = fwrite(pre, 1, 10, f) == 10 && fwrite(hdr, 1, hlen, f) == hlen &&
              fwrite(src->data, 1, kl_nbytes(src), f) == kl_nbytes(src);
    ok = (fclose(f) == 0) && ok;
    kl_tensor_free(&wide);
    return ok ? 0 : kl_fail(err, "%s: write failed", path);
}
