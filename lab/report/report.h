/* `kernlab report`: the guides (lab/CONTRACTS.md section 8), declared with lab/core/args.h. */
#ifndef KL_REPORT_H
#define KL_REPORT_H
#include "lab/core/args.h"

extern const struct kl_command kl_report_command; /* lab/report/report.c */
int kl_cmd_report(int argc, char **argv);
#endif
