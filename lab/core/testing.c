#include "testing.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device.h"

const char *kl_test_skip_reason(const struct kl_variant *v)
{
    static char why[256];
    if (!v || v->min_cc == 0) return NULL;
    int cc = kl_device_cc(why, sizeof why);
    if (!cc) return why;
    if (cc < v->min_cc) {
        snprintf(why, sizeof why, "needs sm_%d", v->min_cc);
        return why;
    }
    return NULL;
}

static int by_name(const struct dirent **a, const struct dirent **b) { return strcmp((*a)->d_name, (*b)->d_name); }

int kl_test_goldens(const char *module, const struct kl_variant *v, FILE *log)
{
    const struct kl_module *m = kl_module_find(module);
    char dir[1024];
    snprintf(dir, sizeof dir, KL_SOURCE_DIR "/golden/%s", module);
    struct dirent **names;
    int n = m ? scandir(dir, &names, NULL, by_name) : -1;
    if (n < 0) return -1;
    int cases = 0, failures = 0;
    for (int i = 0; i < n; i++) {
        char path[1300];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]->d_name);
        if (names[i]->d_name[0] != '.') {
            struct kl_case c;
            struct kl_err err = {{0}};
            struct kl_verdict vd = {0};
            if (kl_case_open(&c, path, &err) == 0) {
                kl_verify_case(m, &c, v, &vd);
                kl_case_close(&c);
            } else {
                vd.status = KL_FAIL;
                snprintf(vd.why, sizeof vd.why, "%s", err.msg);
            }
            cases++;
            failures += vd.status == KL_FAIL;
            fprintf(log, "%s %s %s rel_l2=%.3g max_abs=%.3g %s\n",
                    vd.status == KL_FAIL ? "FAIL" : vd.status == KL_SKIP ? "SKIP" : "PASS",
                    names[i]->d_name, v ? v->name : "reference", vd.rel_l2, vd.max_abs, vd.why);
        }
        free(names[i]);
    }
    free(names);
    return cases ? failures : -1;
}

uint64_t kl_test_seed(FILE *log)
{
    const char *env = getenv("KL_SEED");
    uint64_t seed = env ? strtoull(env, NULL, 10) : (uint64_t)time(NULL);
    fprintf(log, "seed %llu (replay: KL_SEED=%llu)\n", (unsigned long long)seed, (unsigned long long)seed);
    return seed;
}
