/* Golden cases (lab/CONTRACTS.md section 4): a directory with meta.json and .npy arrays.
 *
 * Every reader returns an error message naming the file and the problem, so `kernlab verify`
 * turns a malformed case into one FAIL line. */
#ifndef KL_GOLDEN_H
#define KL_GOLDEN_H

#include <stdbool.h>

#include "check.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

struct cJSON;

struct kl_case {
    char dir[1024];       /* as given, without a trailing slash */
    char module[64];
    char name[128];       /* meta "case", else the directory's last component */
    char dtype_name[16];  /* meta "dtype": fp32, fp16, bf16 (radix: i4) */
    enum kl_dtype dtype;  /* parsed dtype_name (KL_I32 for i4) */
    long long seed;
    struct cJSON *meta;   /* the whole meta.json */
    struct cJSON *params; /* meta "params" (may be NULL: every param takes its default) */
};

/* Reads dir/meta.json. Fails (message naming the file) on a missing or non-regular file, bad
 * JSON or anything after the one object, a missing or non-string "module", a module, case or
 * dtype string holding a control character, an unknown dtype, "params" that is not an object. */
int kl_case_open(struct kl_case *c, const char *dir, struct kl_err *err);
void kl_case_close(struct kl_case *c);

/* Params with their defaults; a param of the wrong JSON type is an error. */
int kl_case_param_double(const struct kl_case *c, const char *key, double def, double *out,
                         struct kl_err *err);
int kl_case_param_int(const struct kl_case *c, const char *key, long long def, long long *out,
                      struct kl_err *err);
int kl_case_param_bool(const struct kl_case *c, const char *key, bool def, bool *out,
                       struct kl_err *err);

/* Loads dir/<name>.npy. `optional`: a missing file is not an error (returns 1, t untouched). */
int kl_case_array(const struct kl_case *c, const char *name, struct kl_tensor *t, bool optional,
                  struct kl_err *err);
/* Path of a file of the case ("<dir>/<file>") into buf. */
const char *kl_case_path(const struct kl_case *c, const char *file, char *buf, size_t len);

/* .npy format 1.0, little-endian, C order. Reading accepts <f4 <f8 <i4 <i8 |u1 (and <f2);
 * rejects a file that is not a regular one, bad magic, other versions, a header that is not
 * exactly numpy's dict, Fortran order, other dtypes, a shape over 4 GiB, truncated data, a
 * size that disagrees with the header: all before allocating the data. */
int kl_npy_read(const char *path, struct kl_tensor *t, struct kl_err *err);
/* Writes f32, f64, i32, i64, u8 tensors (f16/bf16 are widened to <f4, as goldens store them). */
int kl_npy_write(const char *path, const struct kl_tensor *t, struct kl_err *err);

#ifdef __cplusplus
}
#endif
#endif
