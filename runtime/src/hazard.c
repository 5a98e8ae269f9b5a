/* hazard.c - hazards: the byte ranges queued work touches, registered from
 * submission until it finishes, and the waits of synchronous operations
 * that overlap them. */
#include <pthread.h>
#include <sched.h>

#include "hazard.h"
#include "runtime.h"

static bool ranges_overlap(const nkrt_range_t *a, uint32_t na, const nkrt_range_t *b,
                           uint32_t nb) {
  for (uint32_t i = 0; i < na; i++)
    for (uint32_t j = 0; j < nb; j++)
      if (a[i].lo < b[j].hi && b[j].lo < a[i].hi) return true;
  return false;
}

void nkrt_hazard_add(nkrt_runtime_t *rt, nkrt_hazard_t *h) {
  pthread_mutex_lock(&rt->hazard_mu);
  h->prev = NULL;
  h->next = rt->hazards;
  if (rt->hazards) rt->hazards->prev = h;
  rt->hazards = h;
  h->registered = true;
  atomic_fetch_add_explicit(&rt->hazard_count, 1, memory_order_release);
  pthread_mutex_unlock(&rt->hazard_mu);
}

/* Called once the work's memory accesses are over: the release decrement
 * publishes them to a synchronous operation that then loads a count of 0. */
void nkrt_hazard_remove(nkrt_runtime_t *rt, nkrt_hazard_t *h) {
  pthread_mutex_lock(&rt->hazard_mu);
  if (h->registered) {
    if (h->prev) h->prev->next = h->next;
    else rt->hazards = h->next;
    if (h->next) h->next->prev = h->prev;
    h->registered = false;
    atomic_fetch_add_explicit(&rt->hazard_removals, 1, memory_order_release);
    atomic_fetch_sub_explicit(&rt->hazard_count, 1, memory_order_release);
    if (rt->hazard_waiters) pthread_cond_broadcast(&rt->hazard_cv);
  }
  pthread_mutex_unlock(&rt->hazard_mu);
}

/* Caller holds hazard_mu. */
static bool hazard_conflict_locked(nkrt_runtime_t *rt, const nkrt_range_t *ranges,
                                   uint32_t count, uint32_t skip_core) {
  for (const nkrt_hazard_t *h = rt->hazards; h; h = h->next)
    if (h->core != skip_core && ranges_overlap(h->ranges, h->count, ranges, count)) return true;
  return false;
}

void nkrt_hazard_wait_slow(nkrt_runtime_t *rt, const nkrt_range_t *ranges, uint32_t count,
                           uint32_t skip_core) {
  bool polled = false;
  pthread_mutex_lock(&rt->hazard_mu);
  while (hazard_conflict_locked(rt, ranges, count, skip_core)) {
    if (!polled) { /* poll briefly for a removal before sleeping */
      polled = true;
      unsigned seen = atomic_load_explicit(&rt->hazard_removals, memory_order_relaxed);
      pthread_mutex_unlock(&rt->hazard_mu);
      uint64_t t0 = nkrt_now_ns();
      while (atomic_load_explicit(&rt->hazard_removals, memory_order_acquire) == seen &&
             nkrt_now_ns() - t0 < NKRT_SPIN_NS)
        sched_yield();
      pthread_mutex_lock(&rt->hazard_mu);
      continue;
    }
    rt->hazard_waiters++;
    pthread_cond_wait(&rt->hazard_cv, &rt->hazard_mu);
    rt->hazard_waiters--;
  }
  pthread_mutex_unlock(&rt->hazard_mu);
}
