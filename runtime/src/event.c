/* event.c - events: what queued work reports its completion and status
 * through (nkrt_event_wait / nkrt_event_is_done). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "event.h"
#include "runtime.h"

struct nkrt_event {
  nkrt_runtime_t *runtime;
  uint64_t id;
  atomic_uint refs;         /* the caller's and the queue's */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  bool done;
  atomic_bool done_flag;    /* = done, readable without the lock */
  nkrt_status_t status;
  struct nkrt_event *list_prev, *list_next;
};

nkrt_event_t *nkrt_event_create(nkrt_runtime_t *rt) {
  nkrt_event_t *ev = calloc(1, sizeof(*ev));
  if (!ev) return NULL;
  ev->runtime = rt;
  ev->id = atomic_fetch_add(&rt->next_id, 1);
  atomic_init(&ev->refs, 2);
  atomic_init(&ev->done_flag, false);
  pthread_mutex_init(&ev->mu, NULL);
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&ev->cv, &attr);
  pthread_condattr_destroy(&attr);
  pthread_mutex_lock(&rt->mu);
  ev->list_next = rt->events;
  if (rt->events) rt->events->list_prev = ev;
  rt->events = ev;
  pthread_mutex_unlock(&rt->mu);
  return ev;
}

static void event_destroy(nkrt_event_t *ev) {
  nkrt_runtime_t *rt = ev->runtime;
  pthread_mutex_lock(&rt->mu);
  if (ev->list_prev) ev->list_prev->list_next = ev->list_next;
  else rt->events = ev->list_next;
  if (ev->list_next) ev->list_next->list_prev = ev->list_prev;
  pthread_mutex_unlock(&rt->mu);
  nkrt_status_free(ev->status);
  pthread_cond_destroy(&ev->cv);
  pthread_mutex_destroy(&ev->mu);
  free(ev);
}

void nkrt_event_retain(nkrt_event_t *ev) {
  if (ev) atomic_fetch_add_explicit(&ev->refs, 1, memory_order_relaxed);
}

void nkrt_event_release(nkrt_event_t *ev) {
  if (ev && atomic_fetch_sub_explicit(&ev->refs, 1, memory_order_acq_rel) == 1) event_destroy(ev);
}

void nkrt_events_destroy_all(nkrt_runtime_t *rt) {
  while (rt->events) event_destroy(rt->events);
}

void nkrt_event_complete(nkrt_event_t *ev, nkrt_status_t st) {
  pthread_mutex_lock(&ev->mu);
  ev->status = st;
  ev->done = true;
  atomic_store_explicit(&ev->done_flag, true, memory_order_release);
  pthread_cond_broadcast(&ev->cv);
  pthread_mutex_unlock(&ev->mu);
  nkrt_event_release(ev);
}

nkrt_status_t nkrt_event_wait(nkrt_event_t *ev, int64_t timeout_ns) {
  if (!ev) return nkrt_status_make(NKRT_INVALID_HANDLE, "event is NULL");
  struct timespec deadline;
  if (timeout_ns >= 0) {
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += timeout_ns / 1000000000;
    deadline.tv_nsec += timeout_ns % 1000000000;
    if (deadline.tv_nsec >= 1000000000) {
      deadline.tv_sec++;
      deadline.tv_nsec -= 1000000000;
    }
  }
  if (timeout_ns != 0) { /* poll briefly before sleeping */
    uint64_t t0 = nkrt_now_ns();
    uint64_t limit = timeout_ns > 0 && (uint64_t)timeout_ns < NKRT_SPIN_NS ? (uint64_t)timeout_ns
                                                                         : NKRT_SPIN_NS;
    while (!atomic_load_explicit(&ev->done_flag, memory_order_acquire) &&
           nkrt_now_ns() - t0 < limit)
      sched_yield();
  }
  pthread_mutex_lock(&ev->mu);
  while (!ev->done) {
    if (timeout_ns < 0) {
      pthread_cond_wait(&ev->cv, &ev->mu);
    } else if (pthread_cond_timedwait(&ev->cv, &ev->mu, &deadline) == ETIMEDOUT) {
      break;
    }
  }
  nkrt_status_t st;
  if (!ev->done)
    st = nkrt_status_make(NKRT_TIMEOUT, "event %" PRIu64 " not done after %" PRId64 " ns", ev->id,
                          timeout_ns);
  else
    st = ev->status ? nkrt_status_make(nkrt_status_code(ev->status), "%s",
                                       nkrt_status_message(ev->status))
                    : NULL;
  pthread_mutex_unlock(&ev->mu);
  return st;
}

bool nkrt_event_is_done(const nkrt_event_t *ev) {
  if (!ev) return true;
  nkrt_event_t *e = (nkrt_event_t *)ev;
  pthread_mutex_lock(&e->mu);
  bool done = e->done;
  pthread_mutex_unlock(&e->mu);
  return done;
}

uint64_t nkrt_event_id(const nkrt_event_t *ev) { return ev ? ev->id : 0; }
