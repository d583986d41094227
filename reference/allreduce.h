#ifndef KL_REFERENCE_ALLREDUCE_H
#define KL_REFERENCE_ALLREDUCE_H
#include <stdint.h>
/* out[i] = x[0][i] + x[1][i] + ... + x[world-1][i]: x is [world, n] row-major (row r is rank r's
 * contribution), float64, summed in rank order starting from rank 0's value. */
void kl_allreduce_reference(const double *x, int world, int64_t n, double *out);
#endif
