/* Command-line plumbing every kernlab command shares, so an option value is checked the
 * same way everywhere and a usage error reads the same in every command. */
#ifndef KL_ARGS_H
#define KL_ARGS_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* argv[*i] is an option that takes a value: returns the value and steps *i past it. When
 * there is none (the end of argv, or another --option) prints "kernlab CMD: OPT needs a
 * value" to stderr and returns NULL; the caller exits 2. */
const char *kl_opt_value(const char *cmd, int argc, char **argv, int *i);
/* A decimal number in [0, 2^64) and nothing else: no sign, no spaces, not empty (strtoull
 * alone takes "-1" as 2^64-1 and "" as 0). */
bool kl_parse_u64(const char *s, uint64_t *out);

#ifdef __cplusplus
}
#endif
#endif
