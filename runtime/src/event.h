/* event.h - events of queued work (exec.c). Not installed; not part of the
 * API (that is nkrt/exec.h). */
#ifndef NKRT_EVENT_H
#define NKRT_EVENT_H

#include "base.h"

void nkrt_events_destroy_all(nkrt_runtime_t *runtime);

#endif /* NKRT_EVENT_H */
