/* The option parser every kernlab command uses (lab/CONTRACTS.md section 3).
 *
 * A command declares its options in a table (a flag, an option with a value, or one with a
 * decimal number in a range) and its operands by count; kl_args_parse does the rest the same way
 * for every command: `--help`/`-h` prints the command's usage to stdout (exit 0), a usage error
 * prints one line naming the argument at fault and the synopsis to stderr (exit 2). Options may
 * come before, between or after the operands; `--opt=value` is the same as `--opt value`; after
 * `--` everything is an operand. */
#ifndef KL_ARGS_H
#define KL_ARGS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The exit statuses every command keeps: 0 success, 1 a failure (a FAIL line, a failed re-check,
 * an error), 2 a usage error, 3 a target missed under --gate (everything else ran and passed),
 * 77 nothing was run (no device, every run skipped: ctest's skip). */
enum { KL_EXIT_OK = 0, KL_EXIT_FAIL = 1, KL_EXIT_USAGE = 2, KL_EXIT_TARGET_MISSED = 3, KL_EXIT_NOTHING_RUN = 77 };

enum kl_opt_kind {
    KL_OPT_FLAG,   /* --gate */
    KL_OPT_VALUE,  /* --variant NAME: a non-empty string */
    KL_OPT_NUMBER, /* --seed N: a decimal integer in [min, max] (max 0: up to 2^64 - 1) */
};

struct kl_opt {
    const char *name; /* "--variant" */
    enum kl_opt_kind kind;
    const char *meta; /* the value's name in the usage: "NAME", "N", "DIR" */
    const char *help; /* one line for --help */
    uint64_t min, max;
};

/* What the parser found for each option, by the option's index in its table. */
struct kl_optval {
    bool set;
    const char *value; /* KL_OPT_VALUE and KL_OPT_NUMBER: the text given (the last one, if repeated) */
    uint64_t number;   /* KL_OPT_NUMBER */
};

#define KL_MAX_OPTS 16

struct kl_command {
    const char *name;     /* "check" */
    const char *operands; /* "MODULE", "CASE_DIR...", "MODULE [NAME]"; NULL: none */
    int min_operands, max_operands; /* max -1: any number */
    const char *summary;  /* one line for `kernlab --help` */
    const char *details;  /* paragraphs after the options in `kernlab CMD --help`, or NULL */
    const struct kl_opt *opts; /* ends with an entry whose name is NULL */
    int (*run)(int argc, char **argv);
};

/* Parses argv (the arguments after the command's name). Fills opt[i] for options[i] and the
 * operands, in order (operands must hold max_operands entries, or argc when max is -1). Returns
 * -1 when the command should run, else the status to exit with at once: 0 after --help, 2 after
 * a usage error (both already printed). */
int kl_args_parse(const struct kl_command *c, int argc, char **argv, struct kl_optval *opt, const char **operands,
                  int *n_operands);
/* Prints "kernlab CMD: <message>" and the synopsis to stderr; returns 2. For the usage errors
 * a command finds after parsing (an unknown module, options that exclude each other). */
int kl_usage_error(const struct kl_command *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The full usage of a command (synopsis, summary, options, details), as --help prints it. */
void kl_args_usage(const struct kl_command *c, FILE *f);
/* "kernlab check MODULE [--variant NAME] [--seed N]": the one-line synopsis. */
void kl_args_synopsis(const struct kl_command *c, FILE *f);

/* A decimal number in [0, 2^64) and nothing else: no sign, no spaces, not empty (strtoull
 * alone takes "-1" as 2^64-1 and "" as 0). */
bool kl_parse_u64(const char *s, uint64_t *out);

#ifdef __cplusplus
}
#endif
#endif
