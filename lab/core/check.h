/* Error handling for kernlab.
 *
 * Programs die on errors with the expression, file:line and the library's message on stderr
 * (KL_CUDA_CHECK and friends). Library code returns errors instead: it fills a caller's
 * message buffer (struct kl_err) and returns nonzero, so a malformed golden case becomes one
 * FAIL line, never an exit. */
#ifndef KL_CHECK_H
#define KL_CHECK_H

#include <stdarg.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A message buffer that library functions fill on failure. */
struct kl_err {
    char msg[512];
};

/* Formats into err (if not NULL) and returns -1, so `return kl_fail(err, ...)` reads naturally. */
int kl_fail(struct kl_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints "kernlab: <file>:<line>: <message>" to stderr and exits with status 1. */
void kl_die(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));

#define KL_CHECK(cond, ...)                                   \
    do {                                                      \
        if (!(cond)) kl_die(__FILE__, __LINE__, __VA_ARGS__); \
    } while (0)

/* CUDA runtime: the message comes from cudaGetErrorString. Declared here, defined in
 * lab/core/device.c, so C files need no CUDA headers to use the macro. */
const char *kl_cuda_error_string(int code);
#define KL_CUDA_CHECK(expr)                                                                      \
    do {                                                                                         \
        int kl_rc_ = (int)(expr);                                                                \
        if (kl_rc_ != 0) kl_die(__FILE__, __LINE__, "%s: %s", #expr, kl_cuda_error_string(kl_rc_)); \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
