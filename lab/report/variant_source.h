/* What a guide quotes of a variant file: the line of its first __global__ function (its kernel;
 * 0: none, a host-side variant) and its opening comment without the comment markers, cut at len.
 * Read at build time (tools/variant_notes.c, which compiles them into kernlab) and by
 * `kernlab report` to check that the copies it was built with still match the file (built.c). */
#ifndef KL_REPORT_VARIANT_SOURCE_H
#define KL_REPORT_VARIANT_SOURCE_H

#include <stddef.h>

#define KL_NOTE_MAX 4096 /* the comment as the guide quotes it, cut there */

int kl_variant_source_read(const char *path, char *comment, size_t len);

#endif
