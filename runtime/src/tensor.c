/* tensor.c - device tensors: allocation, slices, bounds-checked copies,
 * address lookup. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static nkrt_tensor_t *new_tensor(nkrt_runtime_t *rt, uint32_t core, const char *name) {
  nkrt_tensor_t *t = calloc(1, sizeof(*t));
  if (!t) return NULL;
  t->name = nkrt_strdup_name(name, "unnamed_tensor");
  if (!t->name) {
    free(t);
    return NULL;
  }
  atomic_init(&t->refs, 1);
  t->runtime = rt;
  t->core = core;
  return t;
}

/* Caller holds the core's arena lock. */
static void link_tensor(nkrt_core_t *core, nkrt_tensor_t *t) {
  t->list_prev = NULL;
  t->list_next = core->tensors;
  if (core->tensors) core->tensors->list_prev = t;
  core->tensors = t;
}

static void unlink_tensor(nkrt_core_t *core, nkrt_tensor_t *t) {
  if (t->list_prev) t->list_prev->list_next = t->list_next;
  else core->tensors = t->list_next;
  if (t->list_next) t->list_next->list_prev = t->list_prev;
}

nkrt_status_t nkrt_tensor_allocate(nkrt_runtime_t *rt, uint32_t core, uint64_t size,
                                   const char *name, nkrt_tensor_t **out_tensor) {
  if (!out_tensor) return nkrt_status_make(NKRT_INVALID, "out_tensor is NULL");
  *out_tensor = NULL;
  nkrt_status_t st = nkrt_check_core(rt, core);
  if (st) return st;
  nkrt_tensor_t *t = new_tensor(rt, core, name);
  if (!t) return nkrt_status_make(NKRT_RESOURCE, "out of host memory allocating a tensor");
  nkrt_core_t *c = &rt->cores[core];
  pthread_mutex_lock(&c->arena.mu);
  st = nkrt_arena_alloc_locked(&c->arena, size, &t->block);
  if (!st) {
    t->block->owner = t;
    t->va = c->arena.base + t->block->offset;
    t->size = size;
    link_tensor(c, t);
  }
  pthread_mutex_unlock(&c->arena.mu);
  if (st) {
    free(t->name);
    free(t);
    return st;
  }
  *out_tensor = t;
  return NULL;
}

nkrt_status_t nkrt_tensor_slice(nkrt_tensor_t *src, uint64_t offset, uint64_t size,
                                const char *name, nkrt_tensor_t **out_tensor) {
  if (!out_tensor) return nkrt_status_make(NKRT_INVALID, "out_tensor is NULL");
  *out_tensor = NULL;
  if (!src) return nkrt_status_make(NKRT_INVALID_HANDLE, "source tensor is NULL");
  if (offset > src->size)
    return nkrt_status_make(NKRT_INVALID,
                            "slice offset %" PRIu64 " exceeds the tensor bound of '%s' (%" PRIu64
                            " bytes)", offset, src->name, src->size);
  if (size == 0) size = src->size - offset;
  if (size > src->size - offset)
    return nkrt_status_make(NKRT_INVALID,
                            "slice [%" PRIu64 ", %" PRIu64 ") exceeds the tensor bound of '%s' (%"
                            PRIu64 " bytes)", offset, offset + size, src->name, src->size);
  nkrt_tensor_t *root = src->root ? src->root : src;
  nkrt_tensor_t *t = new_tensor(src->runtime, src->core, name);
  if (!t) return nkrt_status_make(NKRT_RESOURCE, "out of host memory slicing a tensor");
  nkrt_tensor_retain(root);
  t->root = root;
  t->va = src->va + offset;
  t->size = size;
  nkrt_core_t *c = &src->runtime->cores[src->core];
  pthread_mutex_lock(&c->arena.mu);
  link_tensor(c, t);
  pthread_mutex_unlock(&c->arena.mu);
  *out_tensor = t;
  return NULL;
}

void nkrt_tensor_retain(nkrt_tensor_t *t) {
  if (t) atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
}

void nkrt_tensor_release(nkrt_tensor_t *t) {
  if (!t) return;
  if (atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) != 1) return;
  nkrt_core_t *c = &t->runtime->cores[t->core];
  nkrt_tensor_t *root = t->root;
  pthread_mutex_lock(&c->arena.mu);
  unlink_tensor(c, t);
  if (t->block) nkrt_arena_free_locked(&c->arena, t->block);
  pthread_mutex_unlock(&c->arena.mu);
  free(t->name);
  free(t);
  nkrt_tensor_release(root);
}

void nkrt_tensor_free(nkrt_tensor_t **t) {
  if (!t) return;
  nkrt_tensor_release(*t);
  *t = NULL;
}

static nkrt_status_t check_range(const nkrt_tensor_t *t, uint64_t offset, uint64_t size,
                                 const char *what) {
  if (!t) return nkrt_status_make(NKRT_INVALID_HANDLE, "%s: tensor is NULL", what);
  if (offset > t->size || size > t->size - offset)
    return nkrt_status_make(NKRT_INVALID,
                            "%s of %" PRIu64 " bytes at offset %" PRIu64
                            " exceeds the tensor bound of '%s' (%" PRIu64 " bytes)",
                            what, size, offset, t->name, t->size);
  return NULL;
}

static uint64_t trace_begin(nkrt_runtime_t *rt, nkrt_trace_kind_t kind, uint32_t core,
                            uint64_t bytes, const char *name) {
  if (!nkrt_trace_enabled(rt)) return 0;
  uint64_t id = atomic_fetch_add(&rt->next_id, 1);
  nkrt_trace_record(rt, kind, 0, core, id, nkrt_now_ns(), bytes, name);
  return id;
}

static void trace_end(nkrt_runtime_t *rt, nkrt_trace_kind_t kind, uint32_t core, uint64_t id,
                      uint64_t bytes, const char *name) {
  if (id) nkrt_trace_record(rt, kind, 1, core, id, nkrt_now_ns(), bytes, name);
}

nkrt_status_t nkrt_tensor_write(nkrt_tensor_t *t, const void *src, uint64_t offset,
                                uint64_t size) {
  nkrt_status_t st = check_range(t, offset, size, "write");
  if (st) return st;
  if (size && !src) return nkrt_status_make(NKRT_INVALID, "write: source buffer is NULL");
  uint64_t id = trace_begin(t->runtime, NKRT_TRACE_WRITE, t->core, size, t->name);
  t->runtime->driver->copy(t->va + offset, src, size);
  trace_end(t->runtime, NKRT_TRACE_WRITE, t->core, id, size, t->name);
  return NULL;
}

nkrt_status_t nkrt_tensor_read(const nkrt_tensor_t *t, void *dst, uint64_t offset, uint64_t size) {
  nkrt_status_t st = check_range(t, offset, size, "read");
  if (st) return st;
  if (size && !dst) return nkrt_status_make(NKRT_INVALID, "read: destination buffer is NULL");
  uint64_t id = trace_begin(t->runtime, NKRT_TRACE_READ, t->core, size, t->name);
  t->runtime->driver->copy(dst, t->va + offset, size);
  trace_end(t->runtime, NKRT_TRACE_READ, t->core, id, size, t->name);
  return NULL;
}

nkrt_status_t nkrt_tensor_copy(const nkrt_tensor_t *src, uint64_t src_offset, nkrt_tensor_t *dst,
                               uint64_t dst_offset, uint64_t size) {
  nkrt_status_t st = check_range(src, src_offset, size, "copy source");
  if (!st) st = check_range(dst, dst_offset, size, "copy destination");
  if (st) return st;
  if (src->runtime != dst->runtime)
    return nkrt_status_make(NKRT_INVALID, "copy between tensors of different runtimes");
  uint64_t id = trace_begin(dst->runtime, NKRT_TRACE_COPY, dst->core, size, dst->name);
  if (size) memmove(dst->va + dst_offset, src->va + src_offset, size);
  trace_end(dst->runtime, NKRT_TRACE_COPY, dst->core, id, size, dst->name);
  return NULL;
}

nkrt_status_t nkrt_tensor_memset(nkrt_tensor_t *t, int value, uint64_t offset, uint64_t size) {
  nkrt_status_t st = check_range(t, offset, size, "memset");
  if (st) return st;
  if (size) memset(t->va + offset, value, size);
  return NULL;
}

void *nkrt_tensor_va(const nkrt_tensor_t *t) { return t ? t->va : NULL; }
uint64_t nkrt_tensor_size(const nkrt_tensor_t *t) { return t ? t->size : 0; }
uint32_t nkrt_tensor_core(const nkrt_tensor_t *t) { return t ? t->core : 0; }
const char *nkrt_tensor_name(const nkrt_tensor_t *t) { return t ? t->name : ""; }
int nkrt_tensor_is_slice(const nkrt_tensor_t *t) { return t && t->root ? 1 : 0; }
nkrt_runtime_t *nkrt_tensor_runtime(const nkrt_tensor_t *t) { return t ? t->runtime : NULL; }

nkrt_status_t nkrt_tensor_lookup(nkrt_runtime_t *rt, const void *address, nkrt_tensor_t **out_tensor,
                                 uint64_t *out_offset) {
  if (out_tensor) *out_tensor = NULL;
  if (out_offset) *out_offset = 0;
  if (!rt) return nkrt_status_make(NKRT_INVALID_HANDLE, "runtime handle is NULL");
  for (uint32_t i = 0; i < rt->core_count; i++) {
    nkrt_arena_t *a = &rt->cores[i].arena;
    pthread_mutex_lock(&a->mu);
    nkrt_block_t *b = nkrt_arena_find_locked(a, address);
    nkrt_tensor_t *owner = b ? b->owner : NULL;
    if (owner) {
      uint64_t off = (uint64_t)((const uint8_t *)address - owner->va);
      pthread_mutex_unlock(&a->mu);
      if (off >= owner->size && !(owner->size == 0 && off == 0)) break;
      if (out_tensor) *out_tensor = owner;
      if (out_offset) *out_offset = off;
      return NULL;
    }
    pthread_mutex_unlock(&a->mu);
  }
  return nkrt_status_make(NKRT_INVALID, "address %p is not inside any live device allocation",
                          address);
}
