/* queue.h - per-core in-order queues of work (queue.c). Not installed; not
 * part of the API. */
#ifndef NKRT_QUEUE_H
#define NKRT_QUEUE_H

#include <pthread.h>

#include "base.h"
#include "hazard.h"

/* ---- per-core queues (queue.c) ------------------------------------------ */

typedef struct nkrt_work nkrt_work_t;

typedef struct nkrt_queue {
  pthread_mutex_t mu;
  pthread_cond_t work_cv;   /* work arrived or stop */
  pthread_cond_t idle_cv;   /* an item finished */
  nkrt_work_t *head, *tail;
  atomic_uint pending;      /* items queued (changed under mu, read lock-free) */
  bool busy;                /* an item is running (worker or inline) */
  bool thread_started;
  bool stop;
  pthread_t thread;
} nkrt_queue_t;

struct nkrt_core;

void nkrt_queue_init(nkrt_queue_t *queue);
/* Finishes queued work, stops the thread. */
void nkrt_queue_shutdown(struct nkrt_core *core);

/* Claims an idle queue (nothing queued or running, not stopping) for work the
 * caller runs itself; false when it is not idle. */
static inline bool nkrt_queue_claim_idle(nkrt_queue_t *q) {
  pthread_mutex_lock(&q->mu);
  bool inline_ok = !q->busy && !q->head && !q->stop;
  if (inline_ok) q->busy = true;
  pthread_mutex_unlock(&q->mu);
  return inline_ok;
}

/* Ends a claim: work queued meanwhile may start, waiters for idle wake. */
static inline void nkrt_queue_unclaim(nkrt_queue_t *q) {
  pthread_mutex_lock(&q->mu);
  q->busy = false;
  if (q->head) pthread_cond_signal(&q->work_cv);
  pthread_cond_broadcast(&q->idle_cv);
  pthread_mutex_unlock(&q->mu);
}

/* Queues an execution whose tensors are bound on the model's core: takes over
 * the n references in `slots` (released on failure too) and copies `ptrs`
 * and `ranges`. The ranges are registered as a hazard until it finishes.
 * |out_event| must be released by the caller with nkrt_event_release. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_queue_submit_exec(struct nkrt_model *model, nkrt_tensor_t *const *slots,
                                    void *const *ptrs, const nkrt_range_t *ranges, uint32_t n,
                                    nkrt_event_t **out_event);

#endif /* NKRT_QUEUE_H */
