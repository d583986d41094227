/* Golden case directories: meta.json (cJSON) and named .npy arrays. */
#include "golden.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const char *kl_case_path(const struct kl_case *c, const char *file, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", c->dir, file);
    return buf;
}

static char *read_file(const char *path, struct kl_err *err)
{
    FILE *f = fopen(path, "rb");
    if (!f) return kl_fail(err, "%s: cannot open: %s", path, strerror(errno)), NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    KL_CHECK(s, "out of memory");
    size_t got = fread(s, 1, (size_t)n, f);
    fclose(f);
    s[got] = 0;
    return s;
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
    char *text = read_file(path, err);
    if (!text) return -1;
    c->meta = cJSON_Parse(text);
    free(text);
    if (!c->meta || !cJSON_IsObject(c->meta)) {
        kl_case_close(c);
        return kl_fail(err, "%s: bad JSON (not an object)", path);
    }
    const cJSON *mod = cJSON_GetObjectItemCaseSensitive(c->meta, "module");
    if (!cJSON_IsString(mod) || strlen(mod->valuestring) >= sizeof c->module) {
        kl_case_close(c);
        return kl_fail(err, "%s: missing or non-string \"module\"", path);
    }
    snprintf(c->module, sizeof c->module, "%s", mod->valuestring);

    const cJSON *name = cJSON_GetObjectItemCaseSensitive(c->meta, "case");
    const char *base = strrchr(c->dir, '/');
    snprintf(c->name, sizeof c->name, "%.127s", cJSON_IsString(name) ? name->valuestring : base ? base + 1 : c->dir);

    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(c->meta, "dtype");
    snprintf(c->dtype_name, sizeof c->dtype_name, "%s", cJSON_IsString(dt) ? dt->valuestring : "fp32");
    if (dt && !cJSON_IsString(dt)) {
        kl_case_close(c);
        return kl_fail(err, "%s: \"dtype\" must be a string", path);
    }
    if (kl_dtype_parse(c->dtype_name, &c->dtype) != 0 ||
        !(c->dtype == KL_F32 || c->dtype == KL_F16 || c->dtype == KL_BF16 || c->dtype == KL_I32)) {
        kl_fail(err, "%s: unknown dtype \"%s\" (want fp32, fp16, bf16 or i4)", path, c->dtype_name);
        kl_case_close(c);
        return -1;
    }
    const cJSON *seed = cJSON_GetObjectItemCaseSensitive(c->meta, "seed");
    c->seed = cJSON_IsNumber(seed) ? (long long)seed->valuedouble : 0;
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
    if (d != (double)(long long)d)
        return kl_fail(err, "%s/meta.json: param \"%s\" must be an integer", c->dir, key);
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
