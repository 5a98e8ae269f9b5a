/* tensor.c - device tensors: allocation, slices, bounds-checked copies,
 * address lookup. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "gemm_pack.h"
#include "hazard.h"
#include "runtime.h"
#include "tensor.h"
#include "trace.h"

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
  NKRT_RETURN_IF_ERROR(nkrt_check_core(rt, core));
  nkrt_tensor_t *t = new_tensor(rt, core, name);
  if (!t) return nkrt_status_make(NKRT_RESOURCE, "out of host memory allocating a tensor");
  nkrt_core_t *c = &rt->cores[core];
  pthread_mutex_lock(&c->arena.mu);
  nkrt_status_t st = nkrt_arena_alloc_locked(&c->arena, size, &t->block);
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

bool nkrt_tensor_try_retain(nkrt_tensor_t *t) {
  unsigned refs = atomic_load_explicit(&t->refs, memory_order_relaxed);
  while (refs != 0)
    if (atomic_compare_exchange_weak_explicit(&t->refs, &refs, refs + 1, memory_order_acquire,
                                              memory_order_relaxed))
      return true;
  return false; /* being released: no longer live */
}

void nkrt_tensor_retain(nkrt_tensor_t *t) {
  if (t) atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
}

void nkrt_tensor_release(nkrt_tensor_t *t) {
  if (!t) return;
  if (atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) != 1) return;
  nkrt_core_t *c = &t->runtime->cores[t->core];
  nkrt_tensor_t *root = t->root;
  /* memory handed back may come back as another tensor: forget packed copies */
  if (t->block) nkrt_pack_invalidate(t->runtime, t->va, t->va + t->size);
  pthread_mutex_lock(&c->arena.mu);
  unlink_tensor(c, t);
  if (t->block) nkrt_arena_free_locked(&c->arena, t->block);
  pthread_mutex_unlock(&c->arena.mu);
  free(t->name);
  free(t);
  nkrt_tensor_release(root);
}

/* The older form of nkrt_tensor_release (nkrt/tensor.h). */
void nkrt_tensor_free(nkrt_tensor_t **t) {
  if (!t) return;
  nkrt_tensor_release(*t);
  *t = NULL;
}

NKRT_MUST_USE_RESULT
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
                            uint64_t bytes, const char *name, uint64_t id) {
  if (!nkrt_trace_enabled(rt)) return 0;
  if (!id) id = atomic_fetch_add(&rt->next_id, 1);
  nkrt_trace_record(rt, kind, 0, core, id, nkrt_now_ns(), bytes, name);
  return id;
}

static void trace_end(nkrt_runtime_t *rt, nkrt_trace_kind_t kind, uint32_t core, uint64_t id,
                      uint64_t bytes, const char *name) {
  if (id) nkrt_trace_record(rt, kind, 1, core, id, nkrt_now_ns(), bytes, name);
}

/* [va + offset, va + offset + size): what a synchronous operation touches. */
static nkrt_range_t range_of(const nkrt_tensor_t *t, uint64_t offset, uint64_t size) {
  uintptr_t lo = (uintptr_t)(t->va + offset);
  return (nkrt_range_t){lo, lo + (uintptr_t)size};
}

void nkrt_tensor_write_raw(nkrt_tensor_t *t, const void *src, uint64_t offset, uint64_t size,
                           uint64_t trace_id) {
  uint64_t id = trace_begin(t->runtime, NKRT_TRACE_WRITE, t->core, size, t->name, trace_id);
  t->runtime->driver->copy(t->va + offset, src, size);
  nkrt_pack_invalidate(t->runtime, t->va + offset, t->va + offset + size);
  trace_end(t->runtime, NKRT_TRACE_WRITE, t->core, id, size, t->name);
}

void nkrt_tensor_read_raw(const nkrt_tensor_t *t, void *dst, uint64_t offset, uint64_t size,
                          uint64_t trace_id) {
  uint64_t id = trace_begin(t->runtime, NKRT_TRACE_READ, t->core, size, t->name, trace_id);
  t->runtime->driver->copy(dst, t->va + offset, size);
  trace_end(t->runtime, NKRT_TRACE_READ, t->core, id, size, t->name);
}

nkrt_status_t nkrt_tensor_write(nkrt_tensor_t *t, const void *src, uint64_t offset,
                                uint64_t size) {
  NKRT_RETURN_IF_ERROR(check_range(t, offset, size, "write"));
  if (size && !src) return nkrt_status_make(NKRT_INVALID, "write: source buffer is NULL");
  nkrt_range_t r = range_of(t, offset, size);
  nkrt_hazard_wait(t->runtime, &r, 1, NKRT_HAZARD_ALL_CORES);
  nkrt_tensor_write_raw(t, src, offset, size, 0);
  return NULL;
}

#define UPDATE_BLOCK (16u << 10)

nkrt_status_t nkrt_tensor_update(nkrt_tensor_t *t, const void *src, uint64_t offset,
                                 uint64_t size, uint64_t *out_written) {
  if (out_written) *out_written = 0;
  NKRT_RETURN_IF_ERROR(check_range(t, offset, size, "update"));
  if (size && !src) return nkrt_status_make(NKRT_INVALID, "update: source buffer is NULL");
  nkrt_range_t r = range_of(t, offset, size);
  nkrt_hazard_wait(t->runtime, &r, 1, NKRT_HAZARD_ALL_CORES);
  uint64_t id = trace_begin(t->runtime, NKRT_TRACE_WRITE, t->core, size, t->name, 0);
  const uint8_t *s = src;
  uint8_t *d = t->va + offset;
  uint64_t written = 0, run = 0; /* [run, off): differing blocks not yet written */
  bool in_run = false;
  for (uint64_t off = 0;;) {
    uint64_t n = size - off < UPDATE_BLOCK ? size - off : UPDATE_BLOCK; /* 0 at the end */
    bool differs = n && memcmp(d + off, s + off, n) != 0;
    if (differs && !in_run) {
      run = off;
      in_run = true;
    } else if (!differs && in_run) { /* write the run of differing blocks at once */
      t->runtime->driver->copy(d + run, s + run, off - run);
      nkrt_pack_invalidate(t->runtime, d + run, d + off);
      written += off - run;
      in_run = false;
    }
    if (!n) break;
    off += n;
  }
  trace_end(t->runtime, NKRT_TRACE_WRITE, t->core, id, size, t->name);
  if (out_written) *out_written = written;
  return NULL;
}

nkrt_status_t nkrt_tensor_read(const nkrt_tensor_t *t, void *dst, uint64_t offset, uint64_t size) {
  NKRT_RETURN_IF_ERROR(check_range(t, offset, size, "read"));
  if (size && !dst) return nkrt_status_make(NKRT_INVALID, "read: destination buffer is NULL");
  nkrt_range_t r = range_of(t, offset, size);
  nkrt_hazard_wait(t->runtime, &r, 1, NKRT_HAZARD_ALL_CORES);
  nkrt_tensor_read_raw(t, dst, offset, size, 0);
  return NULL;
}

nkrt_status_t nkrt_tensor_copy(const nkrt_tensor_t *src, uint64_t src_offset, nkrt_tensor_t *dst,
                               uint64_t dst_offset, uint64_t size) {
  NKRT_RETURN_IF_ERROR(check_range(src, src_offset, size, "copy source"));
  NKRT_RETURN_IF_ERROR(check_range(dst, dst_offset, size, "copy destination"));
  if (src->runtime != dst->runtime)
    return nkrt_status_make(NKRT_INVALID, "copy between tensors of different runtimes");
  nkrt_range_t r[2] = {range_of(src, src_offset, size), range_of(dst, dst_offset, size)};
  nkrt_hazard_wait(dst->runtime, r, 2, NKRT_HAZARD_ALL_CORES);
  uint64_t id = trace_begin(dst->runtime, NKRT_TRACE_COPY, dst->core, size, dst->name, 0);
  if (size) memmove(dst->va + dst_offset, src->va + src_offset, size);
  nkrt_pack_invalidate(dst->runtime, dst->va + dst_offset, dst->va + dst_offset + size);
  trace_end(dst->runtime, NKRT_TRACE_COPY, dst->core, id, size, dst->name);
  return NULL;
}

nkrt_status_t nkrt_tensor_memset(nkrt_tensor_t *t, int value, uint64_t offset, uint64_t size) {
  NKRT_RETURN_IF_ERROR(check_range(t, offset, size, "memset"));
  nkrt_range_t r = range_of(t, offset, size);
  nkrt_hazard_wait(t->runtime, &r, 1, NKRT_HAZARD_ALL_CORES);
  if (size) memset(t->va + offset, value, size);
  nkrt_pack_invalidate(t->runtime, t->va + offset, t->va + offset + size);
  return NULL;
}

/* ---- 2-D (pitched) copies ------------------------------------------------ */

/* Bytes spanned by `rows` rows of `row_bytes` bytes whose starts are `pitch`
 * apart: (rows - 1) * pitch + row_bytes, 0 when rows or row_bytes is 0.
 * False when that does not fit in 64 bits. */
static bool extent_2d(uint64_t pitch, uint64_t row_bytes, uint64_t rows, uint64_t *out) {
  *out = 0;
  if (!rows || !row_bytes) return true;
  uint64_t steps = rows - 1;
  if (pitch && steps > (UINT64_MAX - row_bytes) / pitch) return false;
  *out = steps * pitch + row_bytes;
  return true;
}

/* Checks one side of a 2-D copy. `what` names the operation ("write_2d"),
 * `side` the pitch argument ("dst_pitch"); a destination's rows must not
 * overlap one another (pitch >= row_bytes), a source's may (pitch 0 repeats
 * one row). `t` NULL checks a host buffer `host` instead of a tensor. */
NKRT_MUST_USE_RESULT
static nkrt_status_t check_2d(const char *what, const nkrt_tensor_t *t, const void *host,
                              const char *side, bool is_dst, uint64_t offset, uint64_t pitch,
                              uint64_t row_bytes, uint64_t rows, uint64_t *out_extent) {
  bool empty = !rows || !row_bytes;
  if (is_dst && !empty && rows > 1 && pitch < row_bytes)
    return nkrt_status_make(NKRT_INVALID,
                            "%s: %s %" PRIu64 " is smaller than row_bytes %" PRIu64
                            " (destination rows would overlap)", what, side, pitch, row_bytes);
  if (!extent_2d(pitch, row_bytes, rows, out_extent))
    return nkrt_status_make(NKRT_INVALID,
                            "%s: %" PRIu64 " rows of %" PRIu64 " bytes at %s %" PRIu64
                            " span more than 2^64 bytes", what, rows, row_bytes, side, pitch);
  if (!t) {
    if (!empty && !host)
      return nkrt_status_make(NKRT_INVALID, "%s: %s buffer is NULL", what,
                              is_dst ? "destination" : "source");
    return NULL;
  }
  if (offset > t->size || *out_extent > t->size - offset)
    return nkrt_status_make(NKRT_INVALID,
                            "%s of %" PRIu64 " rows of %" PRIu64 " bytes (%s %" PRIu64
                            ") at offset %" PRIu64 " spans bytes [%" PRIu64 ", %" PRIu64
                            ") and exceeds the tensor bound of '%s' (%" PRIu64 " bytes)",
                            what, rows, row_bytes, side, pitch, offset, offset,
                            offset > UINT64_MAX - *out_extent ? UINT64_MAX : offset + *out_extent,
                            t->name, t->size);
  return NULL;
}

NKRT_MUST_USE_RESULT
static nkrt_status_t null_tensor(const char *what, const char *role) {
  return nkrt_status_make(NKRT_INVALID_HANDLE, "%s: %stensor is NULL", what, role);
}

/* Copies rows with the driver (no overlap between source and destination). */
static void copy_rows(const nkrt_driver_t *drv, uint8_t *dst, uint64_t dst_pitch,
                      const uint8_t *src, uint64_t src_pitch, uint64_t row_bytes, uint64_t rows) {
  if (!rows || !row_bytes) return;
  if (dst_pitch == row_bytes && src_pitch == row_bytes) {
    drv->copy(dst, src, rows * row_bytes);
    return;
  }
  for (uint64_t i = 0; i < rows; i++) drv->copy(dst + i * dst_pitch, src + i * src_pitch, row_bytes);
}

nkrt_status_t nkrt_tensor_write_2d(nkrt_tensor_t *t, const void *src, uint64_t src_pitch,
                                   uint64_t dst_offset, uint64_t dst_pitch, uint64_t row_bytes,
                                   uint64_t rows) {
  if (!t) return null_tensor("write_2d", "");
  uint64_t dst_extent, src_extent;
  NKRT_RETURN_IF_ERROR(check_2d("write_2d", t, NULL, "dst_pitch", true, dst_offset, dst_pitch,
                                row_bytes, rows, &dst_extent));
  NKRT_RETURN_IF_ERROR(check_2d("write_2d", NULL, src, "src_pitch", false, 0, src_pitch,
                                row_bytes, rows, &src_extent));
  nkrt_range_t r = range_of(t, dst_offset, dst_extent);
  nkrt_hazard_wait(t->runtime, &r, 1, NKRT_HAZARD_ALL_CORES);
  uint64_t bytes = dst_extent ? rows * row_bytes : 0;
  uint64_t id = trace_begin(t->runtime, NKRT_TRACE_WRITE, t->core, bytes, t->name, 0);
  copy_rows(t->runtime->driver, t->va + dst_offset, dst_pitch, src, src_pitch, row_bytes, rows);
  nkrt_pack_invalidate(t->runtime, r.lo, r.hi);
  trace_end(t->runtime, NKRT_TRACE_WRITE, t->core, id, bytes, t->name);
  return NULL;
}

nkrt_status_t nkrt_tensor_read_2d(const nkrt_tensor_t *t, void *dst, uint64_t dst_pitch,
                                  uint64_t src_offset, uint64_t src_pitch, uint64_t row_bytes,
                                  uint64_t rows) {
  if (!t) return null_tensor("read_2d", "");
  uint64_t dst_extent, src_extent;
  NKRT_RETURN_IF_ERROR(check_2d("read_2d", t, NULL, "src_pitch", false, src_offset, src_pitch,
                                row_bytes, rows, &src_extent));
  NKRT_RETURN_IF_ERROR(check_2d("read_2d", NULL, dst, "dst_pitch", true, 0, dst_pitch,
                                row_bytes, rows, &dst_extent));
  nkrt_range_t r = range_of(t, src_offset, src_extent);
  nkrt_hazard_wait(t->runtime, &r, 1, NKRT_HAZARD_ALL_CORES);
  uint64_t bytes = dst_extent ? rows * row_bytes : 0;
  uint64_t id = trace_begin(t->runtime, NKRT_TRACE_READ, t->core, bytes, t->name, 0);
  copy_rows(t->runtime->driver, dst, dst_pitch, t->va + src_offset, src_pitch, row_bytes, rows);
  trace_end(t->runtime, NKRT_TRACE_READ, t->core, id, bytes, t->name);
  return NULL;
}

nkrt_status_t nkrt_tensor_copy_2d(const nkrt_tensor_t *src, uint64_t src_offset,
                                  uint64_t src_pitch, nkrt_tensor_t *dst, uint64_t dst_offset,
                                  uint64_t dst_pitch, uint64_t row_bytes, uint64_t rows) {
  if (!src) return null_tensor("copy_2d", "source ");
  if (!dst) return null_tensor("copy_2d", "destination ");
  if (src->runtime != dst->runtime)
    return nkrt_status_make(NKRT_INVALID, "copy_2d: the source and destination tensors belong "
                            "to different runtimes");
  uint64_t src_extent, dst_extent;
  NKRT_RETURN_IF_ERROR(check_2d("copy_2d source", src, NULL, "src_pitch", false, src_offset,
                                src_pitch, row_bytes, rows, &src_extent));
  NKRT_RETURN_IF_ERROR(check_2d("copy_2d destination", dst, NULL, "dst_pitch", true, dst_offset,
                                dst_pitch, row_bytes, rows, &dst_extent));
  nkrt_range_t r[2] = {range_of(src, src_offset, src_extent), range_of(dst, dst_offset, dst_extent)};
  bool overlap = r[0].lo < r[1].hi && r[1].lo < r[0].hi;
  if (overlap && src_pitch != dst_pitch)
    return nkrt_status_make(NKRT_INVALID,
                            "copy_2d: the source rows [%" PRIu64 ", %" PRIu64 ") of '%s' and the "
                            "destination rows [%" PRIu64 ", %" PRIu64 ") of '%s' overlap with "
                            "different pitches (src_pitch %" PRIu64 ", dst_pitch %" PRIu64
                            "); use equal pitches or copy through another tensor",
                            src_offset, src_offset + src_extent, src->name, dst_offset,
                            dst_offset + dst_extent, dst->name, src_pitch, dst_pitch);
  nkrt_hazard_wait(dst->runtime, r, 2, NKRT_HAZARD_ALL_CORES);
  uint64_t bytes = dst_extent ? rows * row_bytes : 0;
  uint64_t id = trace_begin(dst->runtime, NKRT_TRACE_COPY, dst->core, bytes, dst->name, 0);
  const uint8_t *s = src->va + src_offset;
  uint8_t *d = dst->va + dst_offset;
  if (!bytes) {
    /* nothing to move */
  } else if (!overlap) {
    copy_rows(dst->runtime->driver, d, dst_pitch, s, src_pitch, row_bytes, rows);
  } else if (dst_pitch == row_bytes) { /* equal, dense pitches: one block */
    memmove(d, s, rows * row_bytes);
  } else if (d <= s) { /* equal pitches: move rows in the order that reads before writing */
    for (uint64_t i = 0; i < rows; i++) memmove(d + i * dst_pitch, s + i * src_pitch, row_bytes);
  } else {
    for (uint64_t i = rows; i-- > 0;) memmove(d + i * dst_pitch, s + i * src_pitch, row_bytes);
  }
  nkrt_pack_invalidate(dst->runtime, r[1].lo, r[1].hi);
  trace_end(dst->runtime, NKRT_TRACE_COPY, dst->core, id, bytes, dst->name);
  return NULL;
}

nkrt_status_t nkrt_tensor_memset_2d(nkrt_tensor_t *t, int value, uint64_t offset, uint64_t pitch,
                                    uint64_t row_bytes, uint64_t rows) {
  if (!t) return null_tensor("memset_2d", "");
  uint64_t extent;
  NKRT_RETURN_IF_ERROR(check_2d("memset_2d", t, NULL, "pitch", true, offset, pitch, row_bytes,
                                rows, &extent));
  nkrt_range_t r = range_of(t, offset, extent);
  nkrt_hazard_wait(t->runtime, &r, 1, NKRT_HAZARD_ALL_CORES);
  if (!extent) return NULL;
  uint8_t *d = t->va + offset;
  if (pitch == row_bytes) {
    memset(d, value, rows * row_bytes);
  } else {
    for (uint64_t i = 0; i < rows; i++) memset(d + i * pitch, value, row_bytes);
  }
  nkrt_pack_invalidate(t->runtime, r.lo, r.hi);
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
