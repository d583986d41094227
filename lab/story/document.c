/* Reading a story document back (lab/story/story.h): the results folder's story.json, checked
 * for the format its guide can be written from (lab/report/story.c writes the guide). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lab/core/json_path.h"
#include "lab/story/story.h"

/* Whether root is a story document this report can read; NULL, or what is wrong with it. */
const char *kl_story_format_error(const cJSON *root)
{
    if (strcmp(kl_json_str(root, "format", ""), "kernlab-story-1") != 0) return "not a kernlab-story-1 document";
    if (!cJSON_IsArray(kl_json_get(root, "ops")) || !cJSON_IsArray(kl_json_get(root, "phases"))) return "no ops or phases";
    if (cJSON_GetArraySize(kl_json_get(root, "ops")) > 64 || cJSON_GetArraySize(kl_json_get(root, "kinds")) > 16)
        return "too many ops or kinds";
    return NULL;
}

cJSON *kl_story_read_json(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = n >= 0 ? malloc((size_t)n + 1) : NULL;
    const size_t got = text ? fread(text, 1, (size_t)n, f) : 0;
    fclose(f);
    if (!text) return NULL;
    text[got] = 0;
    cJSON *root = cJSON_Parse(text);
    free(text);
    return root;
}

int kl_story_load(const char *results_dir, cJSON **doc)
{
    char path[1200];
    *doc = NULL;
    snprintf(path, sizeof path, "%s/story.json", results_dir);
    FILE *f = fopen(path, "r");
    if (!f) return errno == ENOENT ? 0 : (fprintf(stderr, "kernlab report: %s: %s\n", path, strerror(errno)), -1);
    fclose(f);
    cJSON *root = kl_story_read_json(path);
    if (!root) return fprintf(stderr, "kernlab report: %s: not JSON\n", path), -1;
    const char *why = kl_story_format_error(root);
    if (why) {
        fprintf(stderr, "kernlab report: %s: %s\n", path, why);
        cJSON_Delete(root);
        return -1;
    }
    /* The error model's own figures (lab/story/test_story.c measures them on the CPU), when the
     * results hold them: story.md quotes them. */
    snprintf(path, sizeof path, "%s/story-check.json", results_dir);
    cJSON *check = access(path, F_OK) == 0 ? kl_story_read_json(path) : NULL;
    if (access(path, F_OK) == 0 && (!check || strcmp(kl_json_str(check, "format", ""), "kernlab-story-check-1") != 0)) {
        fprintf(stderr, "kernlab report: %s: not a kernlab-story-check-1 document\n", path);
        cJSON_Delete(check), cJSON_Delete(root);
        return -1;
    }
    if (check) cJSON_AddItemToObject(root, "error_model_check", check);
    /* A run of `kernlab story --kv fp8` beside it, when the results hold one: story.md sets its
     * decode step beside this run's. */
    snprintf(path, sizeof path, "%s/story-fp8.json", results_dir);
    cJSON *fp8 = access(path, F_OK) == 0 ? kl_story_read_json(path) : NULL;
    if (access(path, F_OK) == 0 &&
        (!fp8 || kl_story_format_error(fp8) || strcmp(kl_json_str(fp8, "model.kv", ""), "fp8") != 0)) {
        fprintf(stderr, "kernlab report: %s: not a story document of an FP8 KV cache run\n", path);
        cJSON_Delete(fp8), cJSON_Delete(root);
        return -1;
    }
    if (fp8) cJSON_AddItemToObject(root, "kv_fp8_run", fp8);
    *doc = root;
    return 1;
}

int kl_story_write_json(const cJSON *doc, const char *path)
{
    /* One line per top-level key and per element of the long arrays: readable diffs, modest size. */
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "{\n");
    for (const cJSON *it = doc->child; it; it = it->next) {
        fprintf(f, "\"%s\": ", it->string);
        if (cJSON_IsArray(it) && (strcmp(it->string, "events") == 0 || strcmp(it->string, "phases") == 0 ||
                                  strcmp(it->string, "profiles") == 0 || strcmp(it->string, "kernels") == 0)) {
            fprintf(f, "[\n");
            for (const cJSON *e = it->child; e; e = e->next) {
                char *s = cJSON_PrintUnformatted(e);
                fprintf(f, "  %s%s\n", s ? s : "null", e->next ? "," : "");
                cJSON_free(s);
            }
            fprintf(f, "]");
        } else {
            char *s = cJSON_PrintUnformatted(it);
            fprintf(f, "%s", s ? s : "null");
            cJSON_free(s);
        }
        fprintf(f, "%s\n", it->next ? "," : "");
    }
    fprintf(f, "}\n");
    return fclose(f);
}
