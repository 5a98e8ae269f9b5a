/* pool.h - the worker pool behind the kernels' parallel_for (pool.c). Not
 * installed; not part of the API. */
#ifndef NKRT_POOL_H
#define NKRT_POOL_H

#include "base.h"

/* ---- worker pool (pool.c) --------------------------------------------- */

typedef struct nkrt_pool nkrt_pool_t;
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_pool_create(uint32_t num_workers, nkrt_pool_t **out_pool);
void nkrt_pool_destroy(nkrt_pool_t *pool);
uint32_t nkrt_pool_size(const nkrt_pool_t *pool);
void nkrt_pool_parallel_for(nkrt_pool_t *pool, int64_t n, int64_t grain, nkrt_range_fn fn, void *arg);

#endif /* NKRT_POOL_H */
