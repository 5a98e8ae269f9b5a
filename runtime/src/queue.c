/* queue.c - per-core in-order queues: the queued work (executions and async
 * copies), the thread that runs a core's work in order, submission with an
 * event, and waiting for a core to drain. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "event.h"
#include "hazard.h"
#include "kernel_env.h"
#include "model.h"
#include "trace.h"
#include "queue.h"
#include "runtime.h"
#include "tensor.h"

static void unbind(const nkrt_model_t *m, nkrt_tensor_t **slots) {
  uint32_t n = m->desc->num_inputs + m->desc->num_outputs;
  for (uint32_t i = 0; i < n; i++) nkrt_tensor_release(slots[i]);
}

typedef enum { WORK_EXEC, WORK_WRITE, WORK_READ } work_kind_t;

struct nkrt_work {
  work_kind_t kind;
  nkrt_work_t *next;
  nkrt_event_t *event;
  nkrt_runtime_t *runtime;
  nkrt_model_t *model;        /* exec */
  nkrt_tensor_t **slots;      /* exec: the tensors it holds (retained) */
  void **ptrs;                /* exec: the kernel's tensor addresses */
  nkrt_tensor_t *tensor;      /* copies */
  void *host;
  uint64_t offset, size;
  nkrt_hazard_t hazard;       /* the device ranges it touches while queued */
  nkrt_range_t range;         /* copies: the one range; exec: ranges are allocated */
};

void nkrt_queue_init(nkrt_queue_t *q) {
  memset(q, 0, sizeof(*q));
  atomic_init(&q->pending, 0);
  pthread_mutex_init(&q->mu, NULL);
  pthread_cond_init(&q->work_cv, NULL);
  pthread_cond_init(&q->idle_cv, NULL);
}

NKRT_MUST_USE_RESULT
static nkrt_status_t do_work(nkrt_work_t *w) {
  switch (w->kind) {
    case WORK_EXEC: return nkrt_kernel_run(w->model, w->ptrs, nkrt_event_id(w->event));
    case WORK_WRITE:
      nkrt_tensor_write_raw(w->tensor, w->host, w->offset, w->size, nkrt_event_id(w->event));
      break;
    case WORK_READ:
      nkrt_tensor_read_raw(w->tensor, w->host, w->offset, w->size, nkrt_event_id(w->event));
      break;
  }
  return NULL;
}

/* Unregisters the work's ranges, then drops what it holds. */
static void free_work(nkrt_work_t *w) {
  nkrt_hazard_remove(w->runtime, &w->hazard);
  if (w->kind == WORK_EXEC) {
    unbind(w->model, w->slots);
    free(w->slots);
    free(w->ptrs);
    if (w->hazard.ranges != &w->range) free(w->hazard.ranges);
    nkrt_model_release(w->model);
  } else {
    nkrt_tensor_release(w->tensor);
  }
  free(w);
}

static void *queue_main(void *p) {
  nkrt_core_t *core = p;
  nkrt_queue_t *q = &core->queue;
  pthread_mutex_lock(&q->mu);
  for (;;) {
    while (!q->stop && (!q->head || q->busy)) {
      if (!q->head && !q->busy) { /* idle: poll briefly before sleeping */
        pthread_mutex_unlock(&q->mu);
        uint64_t t0 = nkrt_now_ns();
        while (atomic_load_explicit(&q->pending, memory_order_acquire) == 0 &&
               nkrt_now_ns() - t0 < NKRT_SPIN_NS)
          sched_yield();
        pthread_mutex_lock(&q->mu);
        if (q->head || q->stop) continue;
      }
      pthread_cond_wait(&q->work_cv, &q->mu);
    }
    if (!q->head) break; /* stopping, and nothing left */
    if (q->busy) {       /* stopping while an inline execution runs */
      pthread_cond_wait(&q->work_cv, &q->mu);
      continue;
    }
    nkrt_work_t *w = q->head;
    atomic_fetch_sub_explicit(&q->pending, 1, memory_order_relaxed);
    q->head = w->next;
    if (!q->head) q->tail = NULL;
    q->busy = true;
    pthread_mutex_unlock(&q->mu);
    nkrt_status_t st = do_work(w);
    nkrt_event_t *ev = w->event;
    free_work(w);
    nkrt_event_complete(ev, st);
    pthread_mutex_lock(&q->mu);
    q->busy = false;
    pthread_cond_broadcast(&q->idle_cv);
  }
  pthread_mutex_unlock(&q->mu);
  return NULL;
}

NKRT_MUST_USE_RESULT
static nkrt_status_t enqueue(nkrt_core_t *core, nkrt_work_t *w) {
  nkrt_queue_t *q = &core->queue;
  pthread_mutex_lock(&q->mu);
  if (q->stop) {
    pthread_mutex_unlock(&q->mu);
    return nkrt_status_make(NKRT_CLOSED, "the runtime is shutting down");
  }
  if (!q->thread_started) {
    if (pthread_create(&q->thread, NULL, queue_main, core) != 0) {
      pthread_mutex_unlock(&q->mu);
      return nkrt_status_make(NKRT_HW_ERROR, "cannot start the queue thread of core %u",
                              core->arena.core);
    }
    q->thread_started = true;
  }
  w->next = NULL;
  if (q->tail) q->tail->next = w;
  else q->head = w;
  q->tail = w;
  atomic_fetch_add_explicit(&q->pending, 1, memory_order_release);
  pthread_cond_signal(&q->work_cv);
  pthread_mutex_unlock(&q->mu);
  return NULL;
}

void nkrt_queue_shutdown(nkrt_core_t *core) {
  nkrt_queue_t *q = &core->queue;
  pthread_mutex_lock(&q->mu);
  q->stop = true;
  pthread_cond_broadcast(&q->work_cv);
  bool started = q->thread_started;
  pthread_mutex_unlock(&q->mu);
  if (started) pthread_join(q->thread, NULL);
  pthread_cond_destroy(&q->work_cv);
  pthread_cond_destroy(&q->idle_cv);
  pthread_mutex_destroy(&q->mu);
}

/* Submits work with a fresh event; on failure frees the work. */
NKRT_MUST_USE_RESULT
static nkrt_status_t submit(nkrt_runtime_t *rt, uint32_t core, nkrt_work_t *w,
                            nkrt_event_t **out_event) {
  nkrt_event_t *ev = nkrt_event_create(rt);
  w->event = ev;
  w->hazard.core = core;
  /* registered before it is queued: a synchronous operation the caller issues
   * after this returns sees it; free_work unregisters it */
  if (ev) nkrt_hazard_add(rt, &w->hazard);
  /* a "queued" trace event, sharing its tracking id (the event's id) with the
   * start and stop the queue thread records: profilers attribute the work to
   * what was running when it was submitted */
  if (ev && nkrt_trace_enabled(rt)) {
    bool exec = w->kind == WORK_EXEC;
    nkrt_trace_record(rt, exec ? NKRT_TRACE_EXEC : w->kind == WORK_WRITE ? NKRT_TRACE_WRITE
                                                                          : NKRT_TRACE_READ,
                      2, core, nkrt_event_id(ev), nkrt_now_ns(), exec ? 0 : w->size,
                      exec ? w->model->name : w->tensor->name);
  }
  /* once queued, w belongs to the queue thread and may be gone at any time */
  nkrt_status_t st = ev ? enqueue(&rt->cores[core], w)
                        : nkrt_status_make(NKRT_RESOURCE, "out of host memory");
  if (st) {
    free_work(w);
    if (ev) { /* neither the queue nor the caller will release it */
      nkrt_event_release(ev);
      nkrt_event_release(ev);
    }
    return st;
  }
  *out_event = ev;
  return NULL;
}

/* Queued work for an execution whose tensors are bound: takes over the n
 * references in `slots` (released on failure too); copies ptrs and ranges. */
NKRT_MUST_USE_RESULT
static nkrt_status_t exec_work_from(nkrt_model_t *m, nkrt_tensor_t *const *slots,
                                    void *const *ptrs, const nkrt_range_t *ranges, uint32_t n,
                                    nkrt_work_t **out_work) {
  nkrt_work_t *w = calloc(1, sizeof(*w));
  nkrt_tensor_t **wslots = calloc(n ? n : 1, sizeof(*wslots));
  void **wptrs = calloc(n ? n : 1, sizeof(*wptrs));
  nkrt_range_t *wranges = n > 1 ? calloc(n, sizeof(*wranges)) : NULL;
  if (!w || !wslots || !wptrs || (n > 1 && !wranges)) {
    free(w);
    free(wslots);
    free(wptrs);
    free(wranges);
    for (uint32_t i = 0; i < n; i++) nkrt_tensor_release(slots[i]);
    return nkrt_status_make(NKRT_RESOURCE, "out of host memory");
  }
  memcpy(wslots, slots, n * sizeof(*wslots));
  memcpy(wptrs, ptrs, n * sizeof(*wptrs));
  nkrt_model_retain(m);
  w->kind = WORK_EXEC;
  w->runtime = m->runtime;
  w->model = m;
  w->slots = wslots;
  w->ptrs = wptrs;
  w->hazard.ranges = wranges ? wranges : &w->range;
  w->hazard.count = n;
  memcpy(w->hazard.ranges, ranges, n * sizeof(*ranges));
  *out_work = w;
  return NULL;
}

nkrt_status_t nkrt_queue_submit_exec(nkrt_model_t *m, nkrt_tensor_t *const *slots,
                                    void *const *ptrs, const nkrt_range_t *ranges, uint32_t n,
                                    nkrt_event_t **out_event) {
  nkrt_work_t *w = NULL;
  nkrt_status_t st = exec_work_from(m, slots, ptrs, ranges, n, &w);
  return st ? st : submit(m->runtime, m->core, w, out_event);
}

NKRT_MUST_USE_RESULT
static nkrt_status_t copy_async(work_kind_t kind, nkrt_tensor_t *t, void *host, uint64_t offset,
                                uint64_t size, nkrt_event_t **out_event) {
  if (!out_event) return nkrt_status_make(NKRT_INVALID, "out_event is NULL");
  *out_event = NULL;
  if (!t) return nkrt_status_make(NKRT_INVALID_HANDLE, "tensor is NULL");
  if (offset > t->size || size > t->size - offset)
    return nkrt_status_make(NKRT_INVALID, "%s of %" PRIu64 " bytes at offset %" PRIu64
                            " exceeds the tensor bound of '%s' (%" PRIu64 " bytes)",
                            kind == WORK_WRITE ? "write" : "read", size, offset, t->name, t->size);
  if (size && !host) return nkrt_status_make(NKRT_INVALID, "host buffer is NULL");
  nkrt_work_t *w = calloc(1, sizeof(*w));
  if (!w) return nkrt_status_make(NKRT_RESOURCE, "out of host memory");
  nkrt_tensor_retain(t);
  w->kind = kind;
  w->runtime = t->runtime;
  w->tensor = t;
  uintptr_t lo = (uintptr_t)(t->va + offset);
  w->range = (nkrt_range_t){lo, lo + (uintptr_t)size};
  w->hazard.ranges = &w->range;
  w->hazard.count = 1;
  w->host = host;
  w->offset = offset;
  w->size = size;
  return submit(t->runtime, t->core, w, out_event);
}

nkrt_status_t nkrt_tensor_write_async(nkrt_tensor_t *t, const void *src, uint64_t offset,
                                      uint64_t size, nkrt_event_t **out_event) {
  return copy_async(WORK_WRITE, t, (void *)src, offset, size, out_event);
}

nkrt_status_t nkrt_tensor_read_async(nkrt_tensor_t *t, void *dst, uint64_t offset, uint64_t size,
                                     nkrt_event_t **out_event) {
  return copy_async(WORK_READ, t, dst, offset, size, out_event);
}

nkrt_status_t nkrt_core_synchronize(nkrt_runtime_t *rt, uint32_t core) {
  NKRT_RETURN_IF_ERROR(nkrt_check_core(rt, core));
  nkrt_queue_t *q = &rt->cores[core].queue;
  pthread_mutex_lock(&q->mu);
  while (q->head || q->busy) pthread_cond_wait(&q->idle_cv, &q->mu);
  pthread_mutex_unlock(&q->mu);
  return NULL;
}
