/* exec.c - execution: binding a model's tensors (by name or by address) and
 * running it, inline on an idle core or through its queue. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hazard.h"
#include "kernel_env.h"
#include "model.h"
#include "queue.h"
#include "runtime.h"
#include "tensor_set.h"
#include "tensor.h"

/* ---- binding a model's tensors by name ---------------------------------- */

/* "a, b, c" for the names of a tensor table, into buf. */
static const char *name_list(const nkrt_neff_tensor_t *ts, uint32_t n, char *buf, size_t cap) {
  size_t used = 0;
  buf[0] = '\0';
  for (uint32_t i = 0; i < n && used + 1 < cap; i++) {
    int w = snprintf(buf + used, cap - used, "%s%s", i ? ", " : "", ts[i].name);
    if (w < 0) break;
    used += (size_t)w;
  }
  if (n == 0) snprintf(buf, cap, "(none)");
  return buf;
}

static void shape_text(const nkrt_neff_tensor_t *t, char *buf, size_t cap) {
  size_t used = (size_t)snprintf(buf, cap, "%s[", nkrt_dtype_name(t->dtype));
  for (uint32_t k = 0; k < t->ndim && used < cap; k++)
    used += (size_t)snprintf(buf + used, cap - used, "%s%" PRId64, k ? ", " : "", t->shape[k]);
  if (used < cap) snprintf(buf + used, cap - used, "]");
}

NKRT_MUST_USE_RESULT
static nkrt_status_t check_binding(const nkrt_model_t *m, const char *kind,
                                   const nkrt_neff_tensor_t *info, const nkrt_tensor_t *t) {
  if (t->size != info->size) {
    char shape[160];
    shape_text(info, shape, sizeof(shape));
    return nkrt_status_make(NKRT_EXEC_BAD_INPUT,
                            "%s '%s' of model '%s' is %" PRIu64 " bytes but the model expects %"
                            PRIu64 " bytes (%s)", kind, info->name, m->name, t->size, info->size,
                            shape);
  }
  if (t->core != m->core || t->runtime != m->runtime)
    return nkrt_status_make(NKRT_EXEC_BAD_INPUT,
                            "%s '%s' is on core %u but model '%s' is loaded on core %u", kind,
                            info->name, t->core, m->name, m->core);
  return NULL;
}

NKRT_MUST_USE_RESULT
static nkrt_status_t check_unknown(const nkrt_model_t *m, const char *kind,
                                   const nkrt_tensor_set_t *set, const nkrt_neff_tensor_t *ts,
                                   uint32_t n) {
  if (!set) return NULL;
  for (uint32_t i = 0; i < set->count; i++) {
    bool known = false;
    for (uint32_t j = 0; j < n && !known; j++) known = strcmp(set->entries[i].name, ts[j].name) == 0;
    if (!known) {
      char names[1024];
      return nkrt_status_make(NKRT_EXEC_BAD_INPUT,
                              "unknown %s tensor '%s' for model '%s'; it expects %ss: %s", kind,
                              set->entries[i].name, m->name, kind, name_list(ts, n, names,
                                                                             sizeof(names)));
    }
  }
  return NULL;
}

/* Resolves and retains every tensor of an execution into slots[0 .. nin+nout). */
NKRT_MUST_USE_RESULT
static nkrt_status_t bind(const nkrt_model_t *m, const nkrt_tensor_set_t *in,
                          const nkrt_tensor_set_t *out, nkrt_tensor_t **slots) {
  const nkrt_neff_desc_t *d = m->desc;
  NKRT_RETURN_IF_ERROR(check_unknown(m, "input", in, d->inputs, d->num_inputs));
  NKRT_RETURN_IF_ERROR(check_unknown(m, "output", out, d->outputs, d->num_outputs));
  nkrt_status_t st = NULL;
  uint32_t bound = 0;
  char names[1024];
  for (uint32_t i = 0; i < d->num_inputs && !st; i++) {
    nkrt_tensor_t *t = nkrt_tensor_set_get(in, d->inputs[i].name);
    if (!t)
      st = nkrt_status_make(NKRT_EXEC_BAD_INPUT, "missing input tensor '%s' for model '%s'; it "
                            "expects inputs: %s", d->inputs[i].name, m->name,
                            name_list(d->inputs, d->num_inputs, names, sizeof(names)));
    else
      st = check_binding(m, "input", &d->inputs[i], t);
    if (!st) {
      nkrt_tensor_retain(t);
      slots[bound++] = t;
    }
  }
  for (uint32_t i = 0; i < d->num_outputs && !st; i++) {
    const nkrt_neff_tensor_t *o = &d->outputs[i];
    nkrt_tensor_t *t = nkrt_tensor_set_get(out, o->name);
    if (!t && o->alias_input >= 0) t = slots[o->alias_input];
    if (!t)
      st = nkrt_status_make(NKRT_EXEC_BAD_INPUT, "missing output tensor '%s' for model '%s'; it "
                            "expects outputs: %s", o->name, m->name,
                            name_list(d->outputs, d->num_outputs, names, sizeof(names)));
    else
      st = check_binding(m, "output", o, t);
    if (!st) {
      nkrt_tensor_retain(t);
      slots[bound++] = t;
    }
  }
  if (st)
    for (uint32_t i = 0; i < bound; i++) nkrt_tensor_release(slots[i]);
  return st;
}

static void unbind(const nkrt_model_t *m, nkrt_tensor_t **slots) {
  uint32_t n = m->desc->num_inputs + m->desc->num_outputs;
  for (uint32_t i = 0; i < n; i++) nkrt_tensor_release(slots[i]);
}

/* Kernel addresses and hazard ranges of tensors bound by name. */
static void slot_addresses(nkrt_tensor_t *const *slots, uint32_t n, void **ptrs,
                           nkrt_range_t *ranges) {
  for (uint32_t i = 0; i < n; i++) {
    uintptr_t lo = (uintptr_t)slots[i]->va;
    ptrs[i] = slots[i]->va;
    ranges[i] = (nkrt_range_t){lo, lo + (uintptr_t)slots[i]->size};
  }
}

/* What a kernel gets for a tensor of 0 bytes bound by address: a tensor with
 * no bytes has no memory (torch gives NULL for an empty tensor, or an address
 * one past the end of its storage for an empty slice), so any address is
 * accepted and none is retained. The kernel gets this one instead: never
 * NULL, aligned like every allocation, read-only (a write through it faults),
 * and, with no bytes to touch, never dereferenced by a correct kernel. */
static const _Alignas(NKRT_ALIGNMENT) uint8_t empty_tensor_address[NKRT_ALIGNMENT];

/* Binds by address (nkrt_execute_at): each tensor's owning allocation on the
 * model's core is retained into slots; ptrs and ranges get the addresses. A
 * tensor of 0 bytes needs no allocation (its slot stays NULL); a NULL address
 * is refused for any other. */
NKRT_MUST_USE_RESULT
static nkrt_status_t bind_at(const nkrt_model_t *m, void *const *addresses,
                             nkrt_tensor_t **slots, void **ptrs, nkrt_range_t *ranges) {
  const nkrt_neff_desc_t *d = m->desc;
  uint32_t n = d->num_inputs + d->num_outputs, bound = 0;
  nkrt_arena_t *arena = &m->runtime->cores[m->core].arena;
  nkrt_status_t st = NULL;
  pthread_mutex_lock(&arena->mu);
  for (uint32_t i = 0; i < n && !st; i++) {
    bool is_in = i < d->num_inputs;
    const nkrt_neff_tensor_t *info = is_in ? &d->inputs[i] : &d->outputs[i - d->num_inputs];
    if (info->size == 0) {
      uintptr_t lo = (uintptr_t)empty_tensor_address;
      slots[bound++] = NULL; /* nothing held; releasing NULL is a no-op */
      ptrs[i] = (void *)lo;
      ranges[i] = (nkrt_range_t){lo, lo}; /* empty: overlaps nothing */
      continue;
    }
    uint8_t *p = addresses[i];
    if (!p && !is_in && info->alias_input >= 0) p = ptrs[info->alias_input];
    nkrt_block_t *b = p ? nkrt_arena_find_locked(arena, p) : NULL;
    nkrt_tensor_t *owner = b ? b->owner : NULL;
    if (owner && !nkrt_tensor_try_retain(owner)) owner = NULL; /* being freed */
    const char *kind = is_in ? "input" : "output";
    if (!p) {
      st = nkrt_status_make(NKRT_EXEC_BAD_INPUT, "missing %s tensor '%s' for model '%s': its "
                            "address is NULL", kind, info->name, m->name);
    } else if (!owner) {
      st = nkrt_status_make(NKRT_EXEC_BAD_INPUT, "%s '%s' of model '%s': address %p is not "
                            "inside a live allocation on core %u", kind, info->name, m->name,
                            (void *)p, m->core);
    } else if ((uint64_t)(p - owner->va) + info->size > owner->size) {
      st = nkrt_status_make(NKRT_EXEC_BAD_INPUT, "%s '%s' of model '%s' needs %" PRIu64
                            " bytes at %p, past the end of allocation '%s' (%" PRIu64
                            " bytes from %p)", kind, info->name, m->name, info->size, (void *)p,
                            owner->name, owner->size, (void *)owner->va);
      slots[bound++] = owner; /* released below with the others */
    } else {
      slots[bound++] = owner;
      ptrs[i] = p;
      ranges[i] = (nkrt_range_t){(uintptr_t)p, (uintptr_t)p + (uintptr_t)info->size};
    }
  }
  pthread_mutex_unlock(&arena->mu);
  if (st)
    for (uint32_t i = 0; i < bound; i++) nkrt_tensor_release(slots[i]);
  return st;
}

/* Binds host buffers (nkrt_execute_host): nothing is retained (slots stay
 * NULL); each address is checked for NULL, alignment and not lying in the
 * device memory of any core. */
NKRT_MUST_USE_RESULT
static nkrt_status_t bind_host(const nkrt_model_t *m, void *const *addresses, void **ptrs,
                               nkrt_range_t *ranges) {
  const nkrt_neff_desc_t *d = m->desc;
  const nkrt_runtime_t *rt = m->runtime;
  uint32_t n = d->num_inputs + d->num_outputs;
  for (uint32_t i = 0; i < n; i++) {
    bool is_in = i < d->num_inputs;
    const nkrt_neff_tensor_t *info = is_in ? &d->inputs[i] : &d->outputs[i - d->num_inputs];
    const char *kind = is_in ? "input" : "output";
    if (info->size == 0) {
      uintptr_t lo = (uintptr_t)empty_tensor_address;
      ptrs[i] = (void *)lo;
      ranges[i] = (nkrt_range_t){lo, lo};
      continue;
    }
    uint8_t *p = addresses[i];
    if (!p && !is_in && info->alias_input >= 0) p = ptrs[info->alias_input];
    if (!p)
      return nkrt_status_make(NKRT_EXEC_BAD_INPUT, "missing %s tensor '%s' for model '%s': its "
                              "address is NULL", kind, info->name, m->name);
    uint32_t elem = nkrt_dtype_size(info->dtype);
    if (elem > 1 && (uintptr_t)p % elem)
      return nkrt_status_make(NKRT_EXEC_BAD_INPUT, "%s '%s' of model '%s': host address %p is not "
                              "aligned to its %u-byte elements", kind, info->name, m->name,
                              (void *)p, elem);
    uintptr_t lo = (uintptr_t)p, hi = lo + (uintptr_t)info->size;
    if (hi < lo)
      return nkrt_status_make(NKRT_EXEC_BAD_INPUT, "%s '%s' of model '%s': %" PRIu64 " bytes at "
                              "%p wrap the address space", kind, info->name, m->name, info->size,
                              (void *)p);
    for (uint32_t c = 0; c < rt->core_count; c++) {
      if (nkrt_arena_overlaps(&rt->cores[c].arena, lo, hi))
        return nkrt_status_make(NKRT_EXEC_BAD_INPUT, "%s '%s' of model '%s': %p is device "
                                "memory of core %u, not host memory (device tensors are "
                                "bound with nkrt_execute_at)", kind, info->name, m->name,
                                (void *)p, c);
    }
    ptrs[i] = p;
    ranges[i] = (nkrt_range_t){lo, hi};
  }
  return NULL;
}

/* Stack arrays for up to 32 tensors, heap beyond (a model with its weights as
 * inputs): what an execution binds, before it runs or is queued. */
typedef struct {
  nkrt_tensor_t *slots_buf[32];
  void *ptrs_buf[32];
  nkrt_range_t ranges_buf[32];
  nkrt_tensor_t **slots;
  void **ptrs;
  nkrt_range_t *ranges;
} exec_arrays_t;

NKRT_MUST_USE_RESULT
static nkrt_status_t arrays_init(exec_arrays_t *a, const nkrt_model_t *m, uint32_t n) {
  if (n <= 32) {
    a->slots = a->slots_buf;
    a->ptrs = a->ptrs_buf;
    a->ranges = a->ranges_buf;
    return NULL;
  }
  a->slots = calloc(n, sizeof(*a->slots));
  a->ptrs = calloc(n, sizeof(*a->ptrs));
  a->ranges = calloc(n, sizeof(*a->ranges));
  if (a->slots && a->ptrs && a->ranges) return NULL;
  return nkrt_status_make(NKRT_RESOURCE, "out of host memory executing '%s'", m->name);
}

static void arrays_free(exec_arrays_t *a) {
  if (a->slots == a->slots_buf) return;
  free(a->slots);
  free(a->ptrs);
  free(a->ranges);
}

/* Binds tensor sets into `a` (arrays_free it afterwards, whatever the result):
 * the tensors retained, their addresses and ranges. */
NKRT_MUST_USE_RESULT
static nkrt_status_t bind_sets(const nkrt_model_t *m, const nkrt_tensor_set_t *in,
                               const nkrt_tensor_set_t *out, uint32_t n, exec_arrays_t *a) {
  nkrt_status_t st = arrays_init(a, m, n);
  if (!st) st = bind(m, in, out, a->slots);
  if (!st) slot_addresses(a->slots, n, a->ptrs, a->ranges);
  return st;
}

nkrt_status_t nkrt_execute_async(nkrt_model_t *m, const nkrt_tensor_set_t *in,
                                 const nkrt_tensor_set_t *out, nkrt_event_t **out_event) {
  if (!out_event) return nkrt_status_make(NKRT_INVALID, "out_event is NULL");
  *out_event = NULL;
  if (!m) return nkrt_status_make(NKRT_INVALID_HANDLE, "model is NULL");
  uint32_t n = m->desc->num_inputs + m->desc->num_outputs;
  exec_arrays_t a;
  nkrt_status_t st = bind_sets(m, in, out, n, &a);
  if (!st) st = nkrt_queue_submit_exec(m, a.slots, a.ptrs, a.ranges, n, out_event);
  arrays_free(&a);
  return st;
}

/* Runs bound tensors (n references in slots, consumed): inline on the calling
 * thread when the core's queue is idle, else queued behind its work and
 * waited for. Either way it first waits for other cores' queued work that
 * overlaps `ranges`. */
NKRT_MUST_USE_RESULT
static nkrt_status_t execute_bound(nkrt_model_t *m, nkrt_tensor_t **slots, void **ptrs,
                                   nkrt_range_t *ranges, uint32_t n) {
  nkrt_runtime_t *rt = m->runtime;
  nkrt_queue_t *q = &rt->cores[m->core].queue;
  /* Queued work of this core is ordered by the queue (below); that of other
   * cores touching the same memory must finish first. Waiting happens before
   * the core is claimed, so no queue is held up meanwhile. */
  nkrt_hazard_wait(rt, ranges, n, m->core);
  if (!nkrt_queue_claim_idle(q)) { /* in order behind the queued work */
    nkrt_event_t *ev = NULL;
    NKRT_RETURN_IF_ERROR(nkrt_queue_submit_exec(m, slots, ptrs, ranges, n, &ev));
    nkrt_status_t st = nkrt_event_wait(ev, -1);
    nkrt_event_release(ev);
    return st;
  }
  /* idle core: run on the calling thread, no hand-off */
  nkrt_status_t st =
      nkrt_kernel_run(m, ptrs, atomic_fetch_add_explicit(&rt->next_id, 1, memory_order_relaxed));
  unbind(m, slots);
  nkrt_queue_unclaim(q);
  return st;
}

nkrt_status_t nkrt_execute(nkrt_model_t *m, const nkrt_tensor_set_t *in,
                           const nkrt_tensor_set_t *out) {
  if (!m) return nkrt_status_make(NKRT_INVALID_HANDLE, "model is NULL");
  uint32_t n = m->desc->num_inputs + m->desc->num_outputs;
  exec_arrays_t a;
  nkrt_status_t st = bind_sets(m, in, out, n, &a);
  if (!st) st = execute_bound(m, a.slots, a.ptrs, a.ranges, n);
  arrays_free(&a);
  return st;
}

bool nkrt_runtime_host_addressable(const nkrt_runtime_t *rt) {
  return rt && rt->driver->host_addressable;
}

nkrt_status_t nkrt_execute_host(nkrt_model_t *m, void *const *addresses) {
  if (!m) return nkrt_status_make(NKRT_INVALID_HANDLE, "model is NULL");
  if (!m->runtime->driver->host_addressable)
    return nkrt_status_make(NKRT_INVALID, "model '%s': the %s driver's kernels cannot address "
                            "host memory; copy the tensors to the device", m->name,
                            m->runtime->driver->name);
  uint32_t n = m->desc->num_inputs + m->desc->num_outputs;
  if (!addresses && n) return nkrt_status_make(NKRT_INVALID, "addresses is NULL");
  exec_arrays_t a;
  nkrt_status_t st = arrays_init(&a, m, n);
  if (!st) {
    memset(a.slots, 0, (size_t)n * sizeof(*a.slots)); /* nothing retained */
    st = bind_host(m, addresses, a.ptrs, a.ranges);
  }
  if (!st) st = execute_bound(m, a.slots, a.ptrs, a.ranges, n);
  arrays_free(&a);
  return st;
}

nkrt_status_t nkrt_execute_at(nkrt_model_t *m, void *const *addresses) {
  if (!m) return nkrt_status_make(NKRT_INVALID_HANDLE, "model is NULL");
  uint32_t n = m->desc->num_inputs + m->desc->num_outputs;
  if (!addresses && n) return nkrt_status_make(NKRT_INVALID, "addresses is NULL");
  exec_arrays_t a;
  nkrt_status_t st = arrays_init(&a, m, n);
  if (!st) st = bind_at(m, addresses, a.slots, a.ptrs, a.ranges);
  if (!st) st = execute_bound(m, a.slots, a.ptrs, a.ranges, n);
  arrays_free(&a);
  return st;
}

