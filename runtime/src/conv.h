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

/* The provider a convolution's products use: `selected` (nkrt_gemm_selected),
 * except that under NKRT_GEMM=auto MKL gives way to the built-in kernel on
 * a CPU not made by Intel when the built-in kernel has AVX-512: MKL runs its
 * AVX2 code there, at half the speed (docs/gemm.md). */
const nkrt_gemm_provider_t *nkrt_conv_provider(const nkrt_gemm_provider_t *selected);

#endif /* NKRT_CONV_H */
