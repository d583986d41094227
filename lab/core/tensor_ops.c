/* The device side of a tensor module, done once for all of them from the description in its
 * struct kl_tensor_ops (registry.h): allocate and fill the buffers of its params struct, launch a
 * variant, copy the outputs back, free. A module keeps only what is its own: which buffers its
 * kernels take and what they start as. */
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "device.h"
#include "registry.h"

/* The device pointer at byte offset `field` of params (memcpy: the field's pointer type is the
 * kernel's, const bf16 * or int32_t *, not void *). */
static void *field_get(const void *params, size_t field)
{
    void *p;
    memcpy(&p, (const char *)params + field, sizeof p);
    return p;
}

static void field_set(void *params, size_t field, void *p) { memcpy((char *)params + field, &p, sizeof p); }

struct kl_dev_buf kl_buf_tensor(const struct kl_tensor *t, bool nonempty)
{
    const size_t n = kl_nbytes(t);
    return (struct kl_dev_buf){.init = KL_BUF_UPLOAD, .bytes = n || !nonempty ? n : 16, .src = t->data};
}

struct kl_dev_buf kl_buf_fill(size_t bytes, int byte, bool nonempty)
{
    return (struct kl_dev_buf){.init = KL_BUF_FILL, .bytes = bytes || !nonempty ? bytes : 16, .fill = byte};
}

int kl_tensor_upload(const struct kl_tensor_ops *ops, const void *prob, void *params, struct kl_err *err)
{
    KL_CHECK(ops->n_bufs <= KL_MAX_BUFS, "%d device buffers, at most %d", ops->n_bufs, KL_MAX_BUFS);
    struct kl_dev_buf bufs[KL_MAX_BUFS] = {{0}};
    memset(params, 0, ops->params_size);
    ops->device(prob, params, bufs);
    for (int i = 0; i < ops->n_bufs; i++) {
        void *p = NULL;
        if (bufs[i].init == KL_BUF_NONE) continue;
        if (kl_dev_alloc(&p, bufs[i].bytes)) {
            for (int j = 0; j < i; j++) kl_dev_free(field_get(params, ops->buf_field[j]));
            memset(params, 0, ops->params_size);
            return kl_fail(err, "cudaMalloc of %zu bytes failed", bufs[i].bytes);
        }
        field_set(params, ops->buf_field[i], p);
        if (bufs[i].init == KL_BUF_UPLOAD) kl_dev_upload(p, bufs[i].src, bufs[i].bytes);
        else kl_dev_fill_bytes(p, bufs[i].fill, bufs[i].bytes);
    }
    return 0;
}

int kl_tensor_download(const struct kl_tensor_ops *ops, const void *prob, const void *params, struct kl_outputs *o,
                       struct kl_err *err)
{
    ops->outputs(prob, o);
    for (int i = 0; i < o->count; i++)
        if (kl_out_download(&o->o[i], field_get(params, ops->out_field[i]), err)) return -1;
    return 0;
}

void kl_tensor_release(const struct kl_tensor_ops *ops, void *params)
{
    for (int i = 0; i < ops->n_bufs; i++) kl_dev_free(field_get(params, ops->buf_field[i]));
    memset(params, 0, ops->params_size);
}

int kl_tensor_run(const struct kl_tensor_ops *ops, const struct kl_variant *v, const void *prob,
                  struct kl_outputs *out, struct kl_err *err)
{
    void *k = calloc(1, ops->params_size);
    KL_CHECK(k, "out of host memory");
    if (kl_tensor_upload(ops, prob, k, err)) return free(k), -1;
    int rc = ops->launch(v, k, NULL), ret;
    if (rc == (int)cudaErrorNotSupported && ops->declined) {
        ops->declined(v, prob, err);
        ret = 1;
    } else {
        if (!rc) rc = kl_dev_sync();
        ret = rc ? kl_fail(err, "%s: launch failed: %s", v->name, kl_cuda_error_string(rc))
                 : kl_tensor_download(ops, prob, k, out, err);
    }
    kl_tensor_release(ops, k);
    free(k);
    return ret;
}

int kl_tensor_run_variant(const struct kl_tensor_ops *ops, const struct kl_variant *v, const void *prob,
                          struct kl_outputs *out, struct kl_err *err)
{
    return ops->run ? ops->run(v, prob, out, err) : kl_tensor_run(ops, v, prob, out, err);
}
