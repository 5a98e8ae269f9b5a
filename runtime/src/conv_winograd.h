/* conv_winograd.h - Winograd F(2x2, 3x3) for dense 3x3 stride-1
 * convolutions (conv_winograd.c), one way of nkrt_conv2d_run (conv.c). Not
 * installed; not part of the API. */
#ifndef NKRT_CONV_WINOGRAD_H
#define NKRT_CONV_WINOGRAD_H

#include "gemm.h"

/* True when nkrt_conv2d_run takes the Winograd way for `p` (already
 * checked by conv.c): a 3x3 kernel, stride 1, dilation 1, one group, and
 * channels and output tiles enough for it to beat im2col + GEMM
 * (docs/gemm.md has the measurements). */
bool nkrt_conv_winograd_applies(const nkrt_conv2d_params_t *p);

/* Runs `p` (any 3x3, stride 1, dilation 1, one group, h and w >= 1, any
 * padding) by Winograd F(2x2, 3x3) on `workers` threads of `pool` (1: the
 * calling thread), the 16 products per block of tiles through the
 * single-threaded provider `prov`. Returns NULL, or a message when host
 * memory ran out (then y is unspecified). */
const char *nkrt_conv_winograd_run(const nkrt_gemm_provider_t *prov, nkrt_pool_t *pool,
                                   int64_t workers, const nkrt_conv2d_params_t *p);

/* Tests only: 1 makes nkrt_conv_winograd_applies true for every layer the
 * Winograd way can run, 0 false for all, -1 (the default) the measured
 * thresholds. Not safe while convolutions run. */
void nkrt_conv_winograd_force(int mode);

#endif /* NKRT_CONV_WINOGRAD_H */
