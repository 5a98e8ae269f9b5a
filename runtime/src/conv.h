/* conv.h - the 2-D convolution lent to kernels (conv.c,
 * nkrt_kernel_lib_t.conv2d). Not installed; not part of the API. */
#ifndef NKRT_CONV_H
#define NKRT_CONV_H

#include "gemm.h"

/* Runs one convolution (nkrt_conv2d_params_t in nkrt/neff_abi.h) on `pool`
 * (NULL: the calling thread), its matrix products through the
 * single-threaded provider `prov`. Returns NULL, or a message for bad
 * parameters or exhausted host memory (then y is unspecified). */
const char *nkrt_conv2d_run(const nkrt_gemm_provider_t *prov, nkrt_pool_t *pool,
                            const nkrt_conv2d_params_t *p);

#endif /* NKRT_CONV_H */
