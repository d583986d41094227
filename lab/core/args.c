#include "args.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *kl_opt_value(const char *cmd, int argc, char **argv, int *i)
{
    const char *opt = argv[*i];
    /* "--json --gate" is a forgotten value, not a file named --gate. */
    if (*i + 1 >= argc || strncmp(argv[*i + 1], "--", 2) == 0) {
        fprintf(stderr, "kernlab %s: %s needs a value\n", cmd, opt);
        return NULL;
    }
    return argv[++*i];
}

bool kl_parse_u64(const char *s, uint64_t *out)
{
    if (!*s) return false;
    for (const char *p = s; *p; p++)
        if (!isdigit((unsigned char)*p)) return false;
    errno = 0;
    unsigned long long v = strtoull(s, NULL, 10);
    if (errno) return false;
    *out = v;
    return true;
}
