/* NumPy .npy files: the magic, a version, a header dict, then the raw C-order data.
 * Every failure names the file and what is wrong with it. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "golden.h"

static const struct {
    const char *descr;
    enum kl_dtype dtype;
} kdescr[] = {
    {"<f4", KL_F32}, {"<f8", KL_F64}, {"<i4", KL_I32}, {"<i8", KL_I64}, {"|u1", KL_U8}, {"<f2", KL_F16},
};

/* Finds 'key': in the header dict and returns a pointer just past the colon and spaces. */
static const char *dict_value(const char *hdr, const char *key)
{
    char pat[32];
    snprintf(pat, sizeof pat, "'%s'", key);
    const char *p = strstr(hdr, pat);
    if (!p) return NULL;
    p += strlen(pat);
    while (*p == ' ' || *p == ':') p++;
    return p;
}

static int parse_header(const char *path, const char *hdr, struct kl_tensor *t, struct kl_err *err)
{
    const char *d = dict_value(hdr, "descr");
    if (!d || *d != '\'') return kl_fail(err, "%s: header has no 'descr'", path);
    char descr[16] = {0};
    const char *end = strchr(d + 1, '\'');
    if (!end || end - d - 1 >= (long)sizeof descr) return kl_fail(err, "%s: bad 'descr' in header", path);
    memcpy(descr, d + 1, (size_t)(end - d - 1));
    int found = -1;
    for (size_t i = 0; i < sizeof kdescr / sizeof kdescr[0]; i++)
        if (strcmp(descr, kdescr[i].descr) == 0) found = (int)i;
    if (found < 0)
        return kl_fail(err, "%s: unsupported dtype '%s' (want <f4, <f8, <i4, <i8 or |u1, little-endian)", path,
                       descr);
    t->dtype = kdescr[found].dtype;

    const char *f = dict_value(hdr, "fortran_order");
    if (!f) return kl_fail(err, "%s: header has no 'fortran_order'", path);
    if (strncmp(f, "False", 5) != 0) return kl_fail(err, "%s: Fortran order is not supported (want C order)", path);

    const char *s = dict_value(hdr, "shape");
    if (!s || *s != '(') return kl_fail(err, "%s: header has no 'shape' tuple", path);
    s++;
    t->ndim = 0;
    for (;;) {
        while (*s == ' ' || *s == ',') s++;
        if (*s == ')') break;
        if (!isdigit((unsigned char)*s)) return kl_fail(err, "%s: bad 'shape' in header", path);
        if (t->ndim == KL_MAX_DIMS) return kl_fail(err, "%s: more than %d dimensions", path, KL_MAX_DIMS);
        errno = 0;
        char *next;
        long long v = strtoll(s, &next, 10);
        if (errno || v < 0 || v > (1ll << 40)) return kl_fail(err, "%s: dimension out of range in 'shape'", path);
        t->dims[t->ndim++] = v;
        s = next;
    }
    return 0;
}

int kl_npy_read(const char *path, struct kl_tensor *t, struct kl_err *err)
{
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "rb");
    if (!f) return kl_fail(err, "%s: cannot open: %s", path, strerror(errno));
    int rc = -1;
    char *hdr = NULL;
    unsigned char pre[10];
    if (fread(pre, 1, 8, f) != 8 || memcmp(pre, "\x93NUMPY", 6) != 0) {
        kl_fail(err, "%s: not a .npy file (bad magic)", path);
        goto out;
    }
    size_t hlen;
    if (pre[6] == 1) {
        if (fread(pre + 8, 1, 2, f) != 2) goto truncated;
        hlen = pre[8] | (size_t)pre[9] << 8;
    } else if (pre[6] == 2 || pre[6] == 3) {
        unsigned char l4[4];
        if (fread(l4, 1, 4, f) != 4) goto truncated;
        hlen = l4[0] | (size_t)l4[1] << 8 | (size_t)l4[2] << 16 | (size_t)l4[3] << 24;
        if (hlen > (1u << 20)) {
            kl_fail(err, "%s: header length %zu is implausible", path, hlen);
            goto out;
        }
    } else {
        kl_fail(err, "%s: unsupported .npy version %d.%d", path, pre[6], pre[7]);
        goto out;
    }
    hdr = calloc(hlen + 1, 1);
    KL_CHECK(hdr, "out of memory");
    if (fread(hdr, 1, hlen, f) != hlen) goto truncated;
    struct kl_tensor shape;
    memset(&shape, 0, sizeof shape);
    if (parse_header(path, hdr, &shape, err)) goto out;

    kl_tensor_alloc(t, shape.dtype, shape.ndim, shape.dims);
    size_t want = kl_nbytes(t), got = fread(t->data, 1, want, f);
    if (got != want) {
        kl_fail(err, "%s: truncated: header says %zu data bytes, file has %zu", path, want, got);
        kl_tensor_free(t);
        goto out;
    }
    if (fgetc(f) != EOF) {
        kl_fail(err, "%s: size mismatch: more data than the header's shape holds", path);
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
    case KL_U8: descr = "|u1"; break;
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
