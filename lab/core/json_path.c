#include "json_path.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const cJSON *kl_json_get(const cJSON *o, const char *path)
{
    char key[64];
    while (o && *path) {
        const char *dot = strchr(path, '.');
        const size_t len = dot ? (size_t)(dot - path) : strlen(path);
        snprintf(key, sizeof key, "%.*s", (int)len, path);
        /* in an array, a key of digits is an index: "consumers.0.k_ready" */
        o = cJSON_IsArray(o) && len > 0 && strspn(key, "0123456789") == len ? cJSON_GetArrayItem(o, atoi(key))
                                                                         : cJSON_GetObjectItemCaseSensitive(o, key);
        path += len + (dot != NULL);
    }
    return o;
}

double kl_json_num(const cJSON *o, const char *path)
{
    const cJSON *v = kl_json_get(o, path);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

const char *kl_json_str(const cJSON *o, const char *path, const char *def)
{
    const cJSON *v = kl_json_get(o, path);
    return cJSON_IsString(v) ? v->valuestring : def;
}
