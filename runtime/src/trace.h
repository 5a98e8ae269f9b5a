/* trace.h - recording trace events (trace.c). Not installed; not part of
 * the API (that is nkrt/trace.h). */
#ifndef NKRT_TRACE_INTERNAL_H
#define NKRT_TRACE_INTERNAL_H

#include "base.h"
#include "runtime.h"

/* ---- tracing (trace.c) -------------------------------------------------- */

void nkrt_trace_record(nkrt_runtime_t *runtime, nkrt_trace_kind_t kind, int phase, uint32_t core,
                       uint64_t tracking_id, uint64_t timestamp_ns, uint64_t bytes,
                       const char *name);
static inline bool nkrt_trace_enabled(nkrt_runtime_t *runtime) {
  return atomic_load_explicit(&runtime->trace_active, memory_order_relaxed) != 0;
}
void nkrt_trace_destroy_all(nkrt_runtime_t *runtime);

#endif /* NKRT_TRACE_INTERNAL_H */
