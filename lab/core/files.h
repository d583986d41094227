/* Reading input files that a user, or an attacker, may have replaced with anything.
 *
 * Inputs (golden .npy arrays, meta.json, trace.jsonl, results .jsonl) are opened as REGULAR
 * files only: a FIFO in place of one would block the read forever, a device such as /dev/zero
 * would be read until memory runs out, a directory reads as garbage. Each is an error naming
 * the file, and the size is known before anything is allocated. */
#ifndef KL_FILES_H
#define KL_FILES_H

#include <stdio.h>

#include "check.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Opens path for reading if it is a regular file of at most max_bytes; *size (if not NULL)
 * gets its size. Never blocks (a FIFO is refused, not opened for a writer to appear). NULL
 * with "<path>: <why>" in err otherwise. */
FILE *kl_open_regular(const char *path, long long max_bytes, long long *size, struct kl_err *err);
/* The whole regular file, NUL-terminated (malloc'ed; *len without the NUL), or NULL with a
 * message naming path. */
char *kl_read_regular(const char *path, long long max_bytes, size_t *len, struct kl_err *err);

#ifdef __cplusplus
}
#endif
#endif
