/* arena.h - device memory: one arena per core (arena.c). Not installed; not
 * part of the API. */
#ifndef NKRT_ARENA_H
#define NKRT_ARENA_H

#include <pthread.h>

#include "base.h"
#include "driver.h"
#include "treap.h"

/* ---- device memory: one arena per core (arena.c) ---------------------- */

typedef struct nkrt_block {
  nkrt_treap_node_t by_addr;  /* every block, keyed by offset */
  nkrt_treap_node_t by_size;  /* free blocks, keyed by (size, offset) */
  uint64_t offset;
  uint64_t size;
  struct nkrt_block *prev, *next; /* address order; blocks tile the arena */
  bool free;
  struct nkrt_tensor *owner;      /* owning tensor of a live block */
} nkrt_block_t;

typedef struct nkrt_arena {
  pthread_mutex_t mu;
  const nkrt_driver_t *driver; /* reserves and releases the arena's memory */
  uint32_t core;
  uint8_t *base;          /* NULL until first allocation (reserved lazily) */
  uint64_t capacity;
  nkrt_treap_t addr;
  nkrt_treap_t free_by_size;
  nkrt_block_t *tail;     /* highest block */
  uint64_t allocated, peak_allocated, peak_reserved;
  uint64_t active, total_allocs, total_frees, ooms, free_count;
} nkrt_arena_t;

/* An empty arena of `capacity` bytes for logical core `core`; its memory is
 * reserved through `driver` at the first allocation. */
void nkrt_arena_init(nkrt_arena_t *arena, const nkrt_driver_t *driver, uint32_t core,
                     uint64_t capacity);
void nkrt_arena_deinit(nkrt_arena_t *arena);
/* Caller holds arena->mu. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_arena_alloc_locked(nkrt_arena_t *arena, uint64_t size, nkrt_block_t **out_block);
void nkrt_arena_free_locked(nkrt_arena_t *arena, nkrt_block_t *block);
nkrt_block_t *nkrt_arena_find_locked(nkrt_arena_t *arena, const void *address);
void nkrt_arena_stats_locked(const nkrt_arena_t *arena, nkrt_memory_stats_t *out);
void nkrt_arena_reset_peak_locked(nkrt_arena_t *arena);
/* Whether [lo, hi) overlaps the arena's memory (takes arena->mu). */
bool nkrt_arena_overlaps(nkrt_arena_t *arena, uintptr_t lo, uintptr_t hi);

#endif /* NKRT_ARENA_H */
