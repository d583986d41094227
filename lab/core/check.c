#include "check.h"

#include <stdio.h>
#include <stdlib.h>

int kl_fail(struct kl_err *err, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

void kl_die(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "kernlab: %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}
