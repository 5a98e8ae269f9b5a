/* conv_direct.h - direct convolution for few input channels (conv_direct.c),
 * one of conv.c's ways. Not installed; not part of the API. */
#ifndef NKRT_CONV_DIRECT_H
#define NKRT_CONV_DIRECT_H

#include <stdbool.h>

#include "gemm.h"

/* The largest c * kh * kw the direct kernel takes (3 x 3 x 3 = 27 fits). */
#define NKRT_CONV_DIRECT_MAX_K 32

/* True when the direct kernel computes p (checked parameters, n, o, oh, ow
 * not 0): groups == 1, stride_w == 1, 0 < c * kh * kw <= NKRT_CONV_DIRECT_MAX_K. */
bool nkrt_conv_direct_applies(const nkrt_conv2d_params_t *p);

/* Computes p on `pool` split into `workers` (1: the calling thread). */
void nkrt_conv_direct_run(nkrt_pool_t *pool, int64_t workers, const nkrt_conv2d_params_t *p);

#endif /* NKRT_CONV_DIRECT_H */
