/* hazard.h - memory touched by queued work (hazard.c). Not installed; not
 * part of the API. */
#ifndef NKRT_HAZARD_H
#define NKRT_HAZARD_H

#include "base.h"

/* ---- hazards: memory touched by queued work (hazard.c) ------------------- *
 * Queued work (executions, async copies) registers the byte ranges of every
 * tensor it binds from submission until it finishes. Synchronous tensor
 * operations wait until no registered range overlaps theirs. */

typedef struct nkrt_range {
  uintptr_t lo, hi; /* [lo, hi); empty when lo == hi */
} nkrt_range_t;

typedef struct nkrt_hazard {
  struct nkrt_hazard *prev, *next; /* in runtime->hazards while registered */
  nkrt_range_t *ranges;
  uint32_t count;
  uint32_t core;                   /* the queue the work sits on */
  bool registered;
} nkrt_hazard_t;

/* Registers / unregisters a hazard (idempotent unregister). */
void nkrt_hazard_add(nkrt_runtime_t *runtime, nkrt_hazard_t *hazard);
void nkrt_hazard_remove(nkrt_runtime_t *runtime, nkrt_hazard_t *hazard);
/* Waits until no registered hazard overlaps any of `ranges`; hazards of core
 * `skip_core` are ignored (NKRT_HAZARD_ALL_CORES: none is). */
#define NKRT_HAZARD_ALL_CORES UINT32_MAX
void nkrt_hazard_wait_slow(nkrt_runtime_t *runtime, const nkrt_range_t *ranges, uint32_t count,
                           uint32_t skip_core);
/* The fast path: one atomic load when nothing is queued (runtime.h must be
 * included where it is used). */
#define nkrt_hazard_wait(runtime, ranges, count, skip_core)                                   \
  do {                                                                                      \
    if (atomic_load_explicit(&(runtime)->hazard_count, memory_order_acquire) != 0)          \
      nkrt_hazard_wait_slow((runtime), (ranges), (count), (skip_core));                     \
  } while (0)

#endif /* NKRT_HAZARD_H */
