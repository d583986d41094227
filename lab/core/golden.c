/* Golden case directories: meta.json (cJSON) and named .npy arrays. */
#include "golden.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "files.h"

const char *kl_case_path(const struct kl_case *c, const char *file, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", c->dir, file);
    return buf;
}

/* meta.json is a few hundred bytes; anything past this is not one. */
#define KL_META_MAX_BYTES (1 << 20)

/* A name printed into a verify line: a newline in it could forge a line of its own. */
static bool has_control(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f) return true;
    return false;
}

/* meta's string field key, or NULL when absent; fails when present but not a plain string. */
static int string_field(const cJSON *meta, const char *key, const char *path, const char **out, struct kl_err *err)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(meta, key);
    *out = NULL;
    if (!j) return 0;
    if (!cJSON_IsString(j)) return kl_fail(err, "%s: \"%s\" must be a string", path, key);
    if (has_control(j->valuestring)) return kl_fail(err, "%s: \"%s\" holds a control character", path, key);
    *out = j->valuestring;
    return 0;
}

int kl_case_open(struct kl_case *c, const char *dir, struct kl_err *err)
{
    memset(c, 0, sizeof *c);
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') len--;
    if (len >= sizeof c->dir) return kl_fail(err, "%s: path too long", dir);
    memcpy(c->dir, dir, len);
    struct stat st;
    if (stat(c->dir, &st) != 0 || !S_ISDIR(st.st_mode)) return kl_fail(err, "%s: not a directory", c->dir);

    char path[1100];
    kl_case_path(c, "meta.json", path, sizeof path);
    size_t len_text;
    char *text = kl_read_regular(path, KL_META_MAX_BYTES, &len_text, err);
    if (!text) return -1;
    /* The whole file must be one object: cJSON_Parse alone stops after the first value and
     * would pass "{...} garbage" or two objects back to back. */
    c->meta = strlen(text) == len_text ? cJSON_ParseWithOpts(text, NULL, 1) : NULL;
    free(text);
    if (!c->meta || !cJSON_IsObject(c->meta)) {
        kl_case_close(c);
        return kl_fail(err, "%s: bad JSON (not one object and nothing after it)", path);
    }
    const char *mod, *name, *dt;
    if (string_field(c->meta, "module", path, &mod, err) || string_field(c->meta, "case", path, &name, err) ||
        string_field(c->meta, "dtype", path, &dt, err)) {
        kl_case_close(c);
        return -1;
    }
    if (!mod || strlen(mod) >= sizeof c->module) {
        kl_case_close(c);
        return kl_fail(err, "%s: missing or non-string \"module\"", path);
    }
    snprintf(c->module, sizeof c->module, "%s", mod);
    const char *base = strrchr(c->dir, '/');
    snprintf(c->name, sizeof c->name, "%.127s", name ? name : base ? base + 1 : c->dir);
    snprintf(c->dtype_name, sizeof c->dtype_name, "%s", dt ? dt : "fp32");
    if (kl_dtype_parse(c->dtype_name, &c->dtype) != 0 ||
        !(c->dtype == KL_F32 || c->dtype == KL_F16 || c->dtype == KL_BF16 || c->dtype == KL_I32)) {
        kl_fail(err, "%s: unknown dtype \"%s\" (want fp32, fp16, bf16 or i4)", path, c->dtype_name);
        kl_case_close(c);
        return -1;
    }
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(c->meta, "seed");
    /* Converting a double outside long long's range is undefined behaviour: such a seed is 0. */
    c->seed = cJSON_IsNumber(seed) && fabs(seed->valuedouble) < 0x1p62 ? (long long)seed->valuedouble : 0;
    c->params = cJSON_GetObjectItemCaseSensitive(c->meta, "params");
    if (c->params && !cJSON_IsObject(c->params) && !cJSON_IsNull(c->params)) {
        kl_case_close(c);
        return kl_fail(err, "%s: \"params\" must be an object", path);
    }
    if (cJSON_IsNull(c->params)) c->params = NULL;
    return 0;
}

void kl_case_close(struct kl_case *c)
{
    cJSON_Delete(c->meta);
    c->meta = NULL;
    c->params = NULL;
}

static const cJSON *param(const struct kl_case *c, const char *key)
{
    return c->params ? cJSON_GetObjectItemCaseSensitive(c->params, key) : NULL;
}

int kl_case_param_double(const struct kl_case *c, const char *key, double def, double *out, struct kl_err *err)
{
    const cJSON *p = param(c, key);
    *out = def;
    if (!p || cJSON_IsNull(p)) return 0;
    if (!cJSON_IsNumber(p)) return kl_fail(err, "%s/meta.json: param \"%s\" must be a number", c->dir, key);
    *out = p->valuedouble;
    return 0;
}

int kl_case_param_int(const struct kl_case *c, const char *key, long long def, long long *out, struct kl_err *err)
{
    double d;
    if (kl_case_param_double(c, key, (double)def, &d, err)) return -1;
    /* The range test first: converting a double past long long's range is undefined. */
    if (!(fabs(d) < 0x1p62) || d != floor(d))
        return kl_fail(err, "%s/meta.json: param \"%s\" must be an integer (of magnitude below 2^62)", c->dir, key);
    *out = (long long)d;
    return 0;
}

int kl_case_param_bool(const struct kl_case *c, const char *key, bool def, bool *out, struct kl_err *err)
{
    const cJSON *p = param(c, key);
    *out = def;
    if (!p || cJSON_IsNull(p)) return 0;
    if (!cJSON_IsBool(p)) return kl_fail(err, "%s/meta.json: param \"%s\" must be true or false", c->dir, key);
    *out = cJSON_IsTrue(p);
    return 0;
}

int kl_case_array(const struct kl_case *c, const char *name, struct kl_tensor *t, bool optional, struct kl_err *err)
{
    char path[1200], file[160];
    snprintf(file, sizeof file, "%s.npy", name);
    kl_case_path(c, file, path, sizeof path);
    struct stat st;
    if (stat(path, &st) != 0) {
        if (optional) return 1;
        return kl_fail(err, "%s: missing array \"%s\"", path, name);
    }
    return kl_npy_read(path, t, err);
}
