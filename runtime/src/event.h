/* event.h - events of queued work (event.c). Not installed; not part of the
 * API (that is nkrt/exec.h). */
#ifndef NKRT_EVENT_H
#define NKRT_EVENT_H

#include "base.h"

/* A new event with two references, the caller's and the queue's; NULL when
 * the host is out of memory. */
nkrt_event_t *nkrt_event_create(nkrt_runtime_t *runtime);
/* Records the work's status (taking it over), wakes the waiters and drops
 * the queue's reference. */
void nkrt_event_complete(nkrt_event_t *event, nkrt_status_t status);
/* Frees every event regardless of references (runtime teardown). */
void nkrt_events_destroy_all(nkrt_runtime_t *runtime);

#endif /* NKRT_EVENT_H */
