/* kernel_env.h - what kernels get while they run (kernel_env.c). Not
 * installed; not part of the API. */
#ifndef NKRT_KERNEL_ENV_H
#define NKRT_KERNEL_ENV_H

#include "base.h"
#include "gemm_pack.h"
#include "pool.h"

/* ---- what kernels get (kernel_env.c) ---------------------------------- */

/* The kernel env's ctx gives access to the execution's pool and scratch. */
nkrt_pool_t *nkrt_exec_ctx_pool(void *ctx);
void *nkrt_exec_ctx_scratch(void *ctx, uint64_t bytes);
void nkrt_exec_ctx_fail(void *ctx, const char *msg);
/* The matrix routines table handed to kernels. */
const nkrt_kernel_lib_t *nkrt_kernel_lib(void);
/* The cache a GEMM of the running execution `ctx` may use for B = [lo, hi):
 * non-NULL only when those bytes lie inside one input and overlap no output
 * or scratch of the execution; *out_exec_id: the execution's id. */
nkrt_pack_cache_t *nkrt_exec_ctx_packs(void *ctx, const void *lo, const void *hi,
                                       uint64_t *out_exec_id);
/* The model an execution context runs. */
const struct nkrt_model *nkrt_exec_ctx_model(void *ctx);

/* Runs the kernel on its tensors' addresses: ptrs[0 .. inputs), then outputs;
 * `id` is the execution's tracking id (kernel_env.c). */
nkrt_status_t nkrt_kernel_run(struct nkrt_model *model, void **ptrs, uint64_t id);

#endif /* NKRT_KERNEL_ENV_H */
