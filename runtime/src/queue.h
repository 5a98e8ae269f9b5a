/* queue.h - per-core in-order queues of work (exec.c). Not installed; not
 * part of the API. */
#ifndef NKRT_QUEUE_H
#define NKRT_QUEUE_H

#include <pthread.h>

#include "base.h"

/* ---- per-core queues and execution (exec.c) --------------------------- */

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

#endif /* NKRT_QUEUE_H */
