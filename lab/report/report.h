/* `kernlab report` and `kernlab story`: the guides (lab/CONTRACTS.md sections 8 and 9), each
 * command declared with lab/core/args.h. */
#ifndef KL_REPORT_H
#define KL_REPORT_H
#include "lab/core/args.h"

extern const struct kl_command kl_report_command; /* lab/report/report.c */
int kl_cmd_report(int argc, char **argv);

/* `kernlab story`: runs the decoder of lab/story/ and writes its guide (lab/report/story_command.c). */
extern const struct kl_command kl_story_command;
int kl_cmd_story(int argc, char **argv);

struct cJSON;
/* The results document -> story.md and story-trace.json in out_dir (lab/report/story.c). ceilings: what
 * `kernlab ceilings` measured on the story's device (an object with copy_gbs, as results rows carry
 * it), so that DRAM traffic is told as a share of the copy bandwidth; NULL tells it in GB/s.
 * ceilings_from says in words where they come from (the guide prints it). Returns 0 or -1 with the
 * file at fault on stderr. */
int kl_story_write(const struct cJSON *doc, const struct cJSON *ceilings, const char *ceilings_from, const char *out_dir);
/* kl_story_write without ceilings. */
int kl_story_report(const struct cJSON *doc, const char *out_dir);
/* Reads dir/story.json when it exists: 1 and the guide written, 0 when there is none, -1 on error. */
int kl_story_report_dir(const char *results_dir, const char *out_dir);
#endif
