/* kernel_env.h - running a kernel with what it gets: the env and the
 * library table (kernel_env.c). Not installed; not part of the API. */
#ifndef NKRT_KERNEL_ENV_H
#define NKRT_KERNEL_ENV_H

#include "base.h"

/* Runs the kernel on its tensors' addresses: ptrs[0 .. inputs), then outputs;
 * `id` is the execution's tracking id. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_kernel_run(struct nkrt_model *model, void **ptrs, uint64_t id);

#endif /* NKRT_KERNEL_ENV_H */
