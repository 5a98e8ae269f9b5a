/* gemm_pack.c - weights packed once for the GEMM provider, per runtime.
 *
 * A float32 GEMM library re-lays-out ("packs") B into its own blocked format
 * on every call; for a weight matrix that is the same work every execution,
 * 15-65% of the product's time (docs/gemm.md). When the provider can pack
 * ahead (MKL's cblas_sgemm_pack / _compute, or the built-in kernel's own
 * panels), a product whose B lies inside
 * one of the execution's inputs - and in none of its outputs, so the kernel
 * cannot change it - is looked up here by (address, layout, shape, alpha):
 *
 *   - first sighting: remembered, computed normally;
 *   - seen again by a later execution with its bytes unchanged: packed, then
 *     computed from the packed copy; later executions reuse it. Operands
 *     rewritten before every execution (activations fed back in) and panels
 *     of one product seen twice within an execution never cost a pack.
 *
 * Unchanged is exact, not guessed: every write nkrt makes to device memory
 * (tensor writes, copies and memsets, 1-D and 2-D, synchronous or queued;
 * each execution's outputs and scratch; freeing an allocation) calls
 * nkrt_pack_invalidate with its byte range, and every entry overlapping it is
 * dropped. Device memory is only written through nkrt (tensor.h), so a packed
 * copy never outlives the bytes it was made from.
 *
 * Memory: packed copies live in host memory, at most NKRT_GEMM_PACK_LIMIT
 * bytes per runtime (default 1G; sizes as NKRT_CORE_MEMORY; 0 turns packing
 * off). MKL asks for at least ~7.5 MB per packed operand, and a product cut
 * into column panels packs each panel. When a new copy would pass the limit,
 * it is not made (the product runs unpacked): evicting copies still in use
 * would only trade them for each other on every execution. Remembered but
 * unpacked entries are forgotten least recently used first beyond 4096. An
 * entry in use by a running product is never freed under it: invalidation
 * marks it dead and its last user frees it. */
#include <stdlib.h>
#include <string.h>

#include "gemm.h"

#define DEFAULT_LIMIT (1ull << 30)
/* Remembered-but-unpacked entries beyond this are forgotten (LRU). */
#define MAX_ENTRIES 4096

typedef struct pack_entry {
  struct pack_entry *prev, *next; /* LRU list, most recent first */
  uintptr_t lo, hi;               /* B's bytes */
  const float *b;                 /* key: */
  const nkrt_gemm_provider_t *p;  /* whose layout (the provider can be reselected) */
  int tb;
  int64_t m, n, k, ldb;
  float alpha;
  float *packed;                  /* NULL until packed */
  uint64_t seen_by;               /* the execution that last saw it unpacked */
  uint64_t bytes;
  uint32_t users;                 /* products computing from it now */
  bool packing;                   /* a thread is packing it (outside the lock) */
  bool dead;                      /* off the list; the last user frees it */
} pack_entry_t;

nkrt_status_t nkrt_pack_cache_create(nkrt_pack_cache_t **out) {
  *out = NULL;
  uint64_t limit = DEFAULT_LIMIT;
  const char *env = getenv("NKRT_GEMM_PACK_LIMIT");
  if (env && *env) {
    nkrt_status_t st = nkrt_parse_size(env, &limit);
    if (st) {
      nkrt_status_t wrapped = nkrt_status_make(NKRT_INVALID, "NKRT_GEMM_PACK_LIMIT: %s",
                                               nkrt_status_message(st));
      nkrt_status_free(st);
      return wrapped;
    }
  }
  nkrt_pack_cache_t *c = calloc(1, sizeof(*c));
  if (!c) return nkrt_status_make(NKRT_RESOURCE, "out of host memory");
  pthread_mutex_init(&c->mu, NULL);
  atomic_init(&c->count, 0);
  c->limit = limit;
  *out = c;
  return NULL;
}

static void entry_free(pack_entry_t *e) {
  free(e->packed);
  free(e);
}

/* Takes e off the list (lock held); frees it unless a product still uses it. */
static void entry_drop_locked(nkrt_pack_cache_t *c, pack_entry_t *e) {
  if (e->prev) e->prev->next = e->next;
  else c->head = e->next;
  if (e->next) e->next->prev = e->prev;
  else c->tail = e->prev;
  atomic_fetch_sub_explicit(&c->count, 1, memory_order_release);
  c->bytes -= e->bytes;
  if (e->users || e->packing) e->dead = true;
  else entry_free(e);
}

void nkrt_pack_cache_destroy(nkrt_pack_cache_t *c) {
  if (!c) return;
  /* no product runs any more: the runtime's pool and queues are gone */
  for (pack_entry_t *e = c->head, *next; e; e = next) {
    next = e->next;
    entry_free(e);
  }
  pthread_mutex_destroy(&c->mu);
  free(c);
}

void nkrt_pack_invalidate_slow(nkrt_pack_cache_t *c, uintptr_t lo, uintptr_t hi) {
  if (lo >= hi) return;
  pthread_mutex_lock(&c->mu);
  for (pack_entry_t *e = c->head, *next; e; e = next) {
    next = e->next;
    if (e->lo < hi && lo < e->hi) {
      c->invalidations++;
      entry_drop_locked(c, e);
    }
  }
  pthread_mutex_unlock(&c->mu);
}

static void to_front_locked(nkrt_pack_cache_t *c, pack_entry_t *e) {
  if (c->head == e) return;
  e->prev->next = e->next;
  if (e->next) e->next->prev = e->prev;
  else c->tail = e->prev;
  e->prev = NULL;
  e->next = c->head;
  c->head->prev = e;
  c->head = e;
}

/* Forgets least recently used unpacked entries, not `keep`, beyond MAX_ENTRIES. */
static void evict_locked(nkrt_pack_cache_t *c, const pack_entry_t *keep) {
  pack_entry_t *e = c->tail;
  while (e && atomic_load_explicit(&c->count, memory_order_relaxed) > MAX_ENTRIES) {
    pack_entry_t *prev = e->prev;
    if (e != keep && !e->packing && !e->packed) {
      c->evictions++;
      entry_drop_locked(c, e);
    }
    e = prev;
  }
}

const float *nkrt_pack_acquire(nkrt_pack_cache_t *c, const nkrt_gemm_provider_t *p,
                               uint64_t exec_id, int tb, int64_t m, int64_t n, int64_t k,
                               float alpha, const float *b, int64_t ldb, void **out_entry) {
  *out_entry = NULL;
  if (!c->limit || !p->pack_b_size) return NULL;
  pthread_mutex_lock(&c->mu);
  pack_entry_t *e = c->head;
  while (e && !(e->b == b && e->p == p && e->tb == tb && e->m == m && e->n == n && e->k == k &&
                e->ldb == ldb && e->alpha == alpha))
    e = e->next;
  if (!e) { /* first sighting: remember it */
    e = calloc(1, sizeof(*e));
    if (e) {
      int64_t rows = tb ? n : k, cols = tb ? k : n;
      e->lo = (uintptr_t)b;
      e->hi = (uintptr_t)(b + (rows - 1) * ldb + cols);
      e->b = b;
      e->p = p;
      e->tb = tb;
      e->m = m;
      e->n = n;
      e->k = k;
      e->ldb = ldb;
      e->alpha = alpha;
      e->seen_by = exec_id;
      e->next = c->head;
      if (c->head) c->head->prev = e;
      else c->tail = e;
      c->head = e;
      atomic_fetch_add_explicit(&c->count, 1, memory_order_release);
      evict_locked(c, e);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
  }
  to_front_locked(c, e);
  if (e->packed) { /* packed and unchanged since */
    e->users++;
    c->hits++;
    pthread_mutex_unlock(&c->mu);
    *out_entry = e;
    return e->packed;
  }
  uint64_t bytes = p->pack_b_size(m, n, k);
  if (e->packing || e->seen_by == exec_id || bytes == 0 || bytes > c->limit - c->bytes) {
    e->seen_by = exec_id;
    pthread_mutex_unlock(&c->mu);
    return NULL;
  }
  /* seen before with the same bytes: pack it, outside the lock */
  e->packing = true;
  pthread_mutex_unlock(&c->mu);
  float *packed = malloc(bytes);
  if (packed) p->pack_b(tb, m, n, k, alpha, b, ldb, packed);
  pthread_mutex_lock(&c->mu);
  e->packing = false;
  if (e->dead || !packed) { /* written meanwhile (or no memory): not usable */
    if (e->dead) entry_free(e);
    free(packed);
    pthread_mutex_unlock(&c->mu);
    return NULL;
  }
  if (bytes > c->limit - c->bytes) { /* another copy took the room meanwhile */
    free(packed);
    pthread_mutex_unlock(&c->mu);
    return NULL;
  }
  e->packed = packed;
  e->bytes = bytes;
  c->bytes += bytes;
  c->packs++;
  e->users++;
  pthread_mutex_unlock(&c->mu);
  *out_entry = e;
  return packed;
}

void nkrt_pack_release(nkrt_pack_cache_t *c, void *entry) {
  pack_entry_t *e = entry;
  if (!e) return;
  pthread_mutex_lock(&c->mu);
  if (--e->users == 0 && e->dead) entry_free(e);
  pthread_mutex_unlock(&c->mu);
}

nkrt_status_t nkrt_gemm_pack_stats(nkrt_runtime_t *rt, nkrt_gemm_pack_stats_t *out) {
  if (!rt) return nkrt_status_make(NKRT_INVALID_HANDLE, "runtime handle is NULL");
  if (!out) return nkrt_status_make(NKRT_INVALID, "out_stats is NULL");
  nkrt_pack_cache_t *c = rt->packs;
  memset(out, 0, sizeof(*out));
  pthread_mutex_lock(&c->mu);
  for (pack_entry_t *e = c->head; e; e = e->next) out->packed_matrices += e->packed != NULL;
  out->packed_bytes = c->bytes;
  out->limit_bytes = c->limit;
  out->hits = c->hits;
  out->packs = c->packs;
  out->invalidations = c->invalidations;
  out->evictions = c->evictions;
  pthread_mutex_unlock(&c->mu);
  return NULL;
}
