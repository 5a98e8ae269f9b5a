/* gemm_pack.h - weights packed once for GEMMs (gemm_pack.c): what the rest
 * of the runtime sees of the cache. Not installed; not part of the API. */
#ifndef NKRT_GEMM_PACK_H
#define NKRT_GEMM_PACK_H

#include <pthread.h>

#include "base.h"
#include "runtime.h"

/* ---- weights packed once for GEMMs (gemm_pack.c) ------------------------ */

typedef struct nkrt_pack_cache {
  pthread_mutex_t mu;
  atomic_uint count;            /* entries; read lock-free by writers */
  struct pack_entry *head, *tail;
  uint64_t bytes, limit;
  uint64_t hits, packs, invalidations, evictions;
} nkrt_pack_cache_t;

NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_pack_cache_create(nkrt_pack_cache_t **out_cache);
void nkrt_pack_cache_destroy(nkrt_pack_cache_t *cache);
void nkrt_pack_invalidate_slow(nkrt_pack_cache_t *cache, uintptr_t lo, uintptr_t hi);
/* Every write to device memory calls this with its bytes [lo, hi): packed
 * copies of them are dropped. One atomic load when nothing is packed. */
#define nkrt_pack_invalidate(runtime, lo, hi)                                                 \
  do {                                                                                      \
    nkrt_pack_cache_t *pc_ = (runtime)->packs;                                              \
    if (pc_ && atomic_load_explicit(&pc_->count, memory_order_acquire) != 0)                \
      nkrt_pack_invalidate_slow(pc_, (uintptr_t)(lo), (uintptr_t)(hi));                     \
  } while (0)

#endif /* NKRT_GEMM_PACK_H */
