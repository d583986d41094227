/* Reading results rows and story documents: a value by its dotted path ("counters.launch.grid"),
 * so the guides read the nested JSON of lab/CONTRACTS.md section 7 one expression at a time. */
#ifndef KL_JSON_PATH_H
#define KL_JSON_PATH_H

#include <cjson/cJSON.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The item at path under o, or NULL when any step is missing. Keys are at most 63 bytes; in an
 * array a key of digits is an index ("timeline.consumers.0.k_ready"). */
const cJSON *kl_json_get(const cJSON *o, const char *path);
/* Its number, NAN when absent or not a number (the guides print NAN as "-"). */
double kl_json_num(const cJSON *o, const char *path);
/* Its string, def when absent or not a string. */
const char *kl_json_str(const cJSON *o, const char *path, const char *def);

#ifdef __cplusplus
}
#endif
#endif
