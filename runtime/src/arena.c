/* arena.c - device memory of one core: a best-fit allocator with splitting
 * and coalescing over one contiguous arena.
 *
 * Blocks tile the arena in address order (a doubly linked list plus a treap
 * keyed by offset, which also answers "which block holds this address").
 * Free blocks sit in a second treap keyed by (size, offset): the smallest
 * block that fits is found in O(log n) (exact best fit, lowest address on
 * ties). A block larger than needed is split; a freed block merges with free
 * neighbours, so there are never two adjacent free blocks. Block metadata
 * lives on the host heap, never inside device memory.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"

#define BLOCK_OF(node, field) \
  ((nkrt_block_t *)((char *)(node) - offsetof(nkrt_block_t, field)))

static int cmp_addr(const nkrt_treap_node_t *a, const nkrt_treap_node_t *b) {
  uint64_t x = BLOCK_OF(a, by_addr)->offset, y = BLOCK_OF(b, by_addr)->offset;
  return x < y ? -1 : x > y;
}

static int cmp_size(const nkrt_treap_node_t *a, const nkrt_treap_node_t *b) {
  const nkrt_block_t *x = BLOCK_OF(a, by_size), *y = BLOCK_OF(b, by_size);
  if (x->size != y->size) return x->size < y->size ? -1 : 1;
  return x->offset < y->offset ? -1 : x->offset > y->offset;
}

void nkrt_arena_init(nkrt_arena_t *arena, const nkrt_driver_t *driver, uint32_t core,
                     uint64_t capacity) {
  memset(arena, 0, sizeof(*arena));
  pthread_mutex_init(&arena->mu, NULL);
  arena->driver = driver;
  arena->core = core;
  arena->capacity = capacity;
  nkrt_treap_init(&arena->addr, cmp_addr);
  nkrt_treap_init(&arena->free_by_size, cmp_size);
}

void nkrt_arena_deinit(nkrt_arena_t *arena) {
  nkrt_block_t *b = arena->tail;
  while (b) {
    nkrt_block_t *prev = b->prev;
    free(b);
    b = prev;
  }
  if (arena->base) arena->driver->mem_release(arena->base, arena->capacity);
  pthread_mutex_destroy(&arena->mu);
  memset(arena, 0, sizeof(*arena));
}

static void mark_free(nkrt_arena_t *arena, nkrt_block_t *b) {
  b->free = true;
  b->owner = NULL;
  nkrt_treap_insert(&arena->free_by_size, &b->by_size);
  arena->free_count++;
}

static void unmark_free(nkrt_arena_t *arena, nkrt_block_t *b) {
  nkrt_treap_remove(&arena->free_by_size, &b->by_size);
  b->free = false;
  arena->free_count--;
}

/* Bytes from the arena start to the end of the highest live block. */
static uint64_t extent(const nkrt_arena_t *arena) {
  const nkrt_block_t *t = arena->tail;
  if (!t) return 0;
  return t->free ? t->offset : t->offset + t->size;
}

static uint64_t largest_free(const nkrt_arena_t *arena) {
  if (!arena->base) return arena->capacity;
  nkrt_treap_node_t *n = nkrt_treap_max(&arena->free_by_size);
  return n ? BLOCK_OF(n, by_size)->size : 0;
}

NKRT_MUST_USE_RESULT
static nkrt_status_t reserve(nkrt_arena_t *arena) {
  NKRT_RETURN_IF_ERROR(arena->driver->mem_reserve(arena->core, arena->capacity, &arena->base));
  nkrt_block_t *b = calloc(1, sizeof(*b));
  if (!b) {
    arena->driver->mem_release(arena->base, arena->capacity);
    arena->base = NULL;
    return nkrt_status_make(NKRT_RESOURCE, "out of host memory creating the arena of core %u",
                            arena->core);
  }
  b->offset = 0;
  b->size = arena->capacity;
  arena->tail = b;
  nkrt_treap_insert(&arena->addr, &b->by_addr);
  mark_free(arena, b);
  return NULL;
}

nkrt_status_t nkrt_arena_alloc_locked(nkrt_arena_t *arena, uint64_t size, nkrt_block_t **out_block) {
  *out_block = NULL;
  if (size > arena->capacity) goto oom;
  uint64_t need = size ? (size + NKRT_ALIGNMENT - 1) & ~(uint64_t)(NKRT_ALIGNMENT - 1) : NKRT_ALIGNMENT;
  if (!arena->base) {
    NKRT_RETURN_IF_ERROR(reserve(arena));
  }
  nkrt_block_t key = {.offset = 0, .size = need};
  nkrt_treap_node_t *n = nkrt_treap_lower_bound(&arena->free_by_size, &key.by_size);
  if (!n) goto oom;
  nkrt_block_t *b = BLOCK_OF(n, by_size);
  unmark_free(arena, b);
  if (b->size - need >= NKRT_ALIGNMENT) {
    nkrt_block_t *rest = calloc(1, sizeof(*rest));
    if (rest) { /* without metadata memory the whole block is handed out */
      rest->offset = b->offset + need;
      rest->size = b->size - need;
      b->size = need;
      rest->prev = b;
      rest->next = b->next;
      if (b->next) b->next->prev = rest;
      else arena->tail = rest;
      b->next = rest;
      nkrt_treap_insert(&arena->addr, &rest->by_addr);
      mark_free(arena, rest);
    }
  }
  arena->allocated += b->size;
  if (arena->allocated > arena->peak_allocated) arena->peak_allocated = arena->allocated;
  uint64_t ext = extent(arena);
  if (ext > arena->peak_reserved) arena->peak_reserved = ext;
  arena->active++;
  arena->total_allocs++;
  *out_block = b;
  return NULL;

oom:
  arena->ooms++;
  return nkrt_status_make(NKRT_RESOURCE,
                          "out of device memory on core %u: requested %" PRIu64
                          " bytes; %" PRIu64 " of %" PRIu64
                          " bytes allocated, largest free block %" PRIu64 " bytes",
                          arena->core, size, arena->allocated, arena->capacity,
                          largest_free(arena));
}

/* Folds b->next into b. The caller has taken b->next out of the free index. */
static void swallow_next(nkrt_arena_t *arena, nkrt_block_t *b) {
  nkrt_block_t *n = b->next;
  nkrt_treap_remove(&arena->addr, &n->by_addr);
  b->size += n->size;
  b->next = n->next;
  if (n->next) n->next->prev = b;
  else arena->tail = b;
  free(n);
}

void nkrt_arena_free_locked(nkrt_arena_t *arena, nkrt_block_t *b) {
  arena->allocated -= b->size;
  arena->active--;
  arena->total_frees++;
  b->owner = NULL;
  if (b->next && b->next->free) {
    unmark_free(arena, b->next);
    swallow_next(arena, b);
  }
  if (b->prev && b->prev->free) {
    nkrt_block_t *p = b->prev;
    unmark_free(arena, p); /* its size, and so its key, changes */
    swallow_next(arena, p);
    b = p;
  }
  mark_free(arena, b);
}

nkrt_block_t *nkrt_arena_find_locked(nkrt_arena_t *arena, const void *address) {
  if (!arena->base) return NULL;
  const uint8_t *p = address;
  if (p < arena->base || p >= arena->base + arena->capacity) return NULL;
  nkrt_block_t key = {.offset = (uint64_t)(p - arena->base)};
  nkrt_treap_node_t *n = nkrt_treap_floor(&arena->addr, &key.by_addr);
  if (!n) return NULL;
  nkrt_block_t *b = BLOCK_OF(n, by_addr);
  if (b->free || key.offset >= b->offset + b->size) return NULL;
  return b;
}

void nkrt_arena_stats_locked(const nkrt_arena_t *arena, nkrt_memory_stats_t *out) {
  out->core = arena->core;
  out->capacity_bytes = arena->capacity;
  out->allocated_bytes = arena->allocated;
  out->peak_allocated_bytes = arena->peak_allocated;
  out->reserved_bytes = extent(arena);
  out->peak_reserved_bytes = arena->peak_reserved;
  out->active_allocations = arena->active;
  out->total_allocations = arena->total_allocs;
  out->total_frees = arena->total_frees;
  out->oom_count = arena->ooms;
  out->free_blocks = arena->base ? arena->free_count : 1;
  out->largest_free_block = largest_free(arena);
}

void nkrt_arena_reset_peak_locked(nkrt_arena_t *arena) {
  arena->peak_allocated = arena->allocated;
  arena->peak_reserved = extent(arena);
}

bool nkrt_arena_overlaps(nkrt_arena_t *arena, uintptr_t lo, uintptr_t hi) {
  pthread_mutex_lock(&arena->mu); /* its memory is reserved lazily */
  uintptr_t base = (uintptr_t)arena->base;
  bool yes = arena->base && lo < base + arena->capacity && base < hi;
  pthread_mutex_unlock(&arena->mu);
  return yes;
}
