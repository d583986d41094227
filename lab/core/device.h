/* The CUDA device, reached only through the runtime (statically linked cudart loads the driver
 * at run time), so every binary starts on a machine with no GPU driver and says so cleanly. */
#ifndef KL_DEVICE_H
#define KL_DEVICE_H

#include <stdbool.h>
#include <stddef.h>

#include "results.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Compute capability x10 of device 0 (90 for an H100), or 0 with a reason in why
 * ("no CUDA device (no driver): CUDA driver version is insufficient for CUDA runtime version"). */
int kl_device_cc(char *why, size_t len);
bool kl_have_gpu(void);
/* Name, cc, SMs, L2 of device 0; ceilings left 0. Returns -1 without a GPU. */
int kl_device_query(struct kl_device_info *d);

#ifdef __cplusplus
}
#endif
#endif
