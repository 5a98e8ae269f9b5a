/* nkrt/trace.h - profiling: executions and copies as timed events.
 *
 * A trace session records, from its start until it is stopped, every
 * execution (event_type "nc_exec_running", as libnrt's system trace names
 * it) and every copy ("tensor_write", "tensor_read", "tensor_copy") on its
 * core (or all cores), each as a start and a stop event with a monotonic
 * nanosecond timestamp and a tracking id shared by the pair; queued work
 * (nkrt_execute_async, nkrt_tensor_write_async/read_async) has a third,
 * "queued" event with the same id, recorded when it was submitted. Sessions are
 * independent; when none is active, recording costs one atomic load.
 *
 * Events read back as JSON in the system-trace shape:
 *   {"events":[{"event_type":"nc_exec_running","phase":"start","nc_idx":0,
 *               "tracking_id":7,"name":"add","data":{"nc_timestamp_ns":...,
 *               "bytes":0}}, ...]}
 * and are written as Chrome Trace Event JSON (one track per core for
 * executions, one per core for copies), which Perfetto and chrome://tracing open.
 */
#ifndef NKRT_TRACE_H
#define NKRT_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nkrt/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum nkrt_trace_kind {
  NKRT_TRACE_EXEC = 1,   /* "nc_exec_running" */
  NKRT_TRACE_WRITE = 2,  /* "tensor_write": host to device */
  NKRT_TRACE_READ = 3,   /* "tensor_read": device to host */
  NKRT_TRACE_COPY = 4    /* "tensor_copy": device to device */
} nkrt_trace_kind_t;

typedef struct nkrt_trace_session nkrt_trace_session_t;

/* One recorded event, as nkrt_trace_events returns it. */
typedef struct nkrt_trace_event {
  uint64_t tracking_id;  /* shared by an operation's start and stop events */
  uint64_t timestamp_ns; /* CLOCK_MONOTONIC */
  uint64_t bytes;        /* copies: bytes moved; executions: 0 */
  uint32_t kind;         /* nkrt_trace_kind_t */
  uint32_t phase;        /* 0 start, 1 stop, 2 queued (work submitted to a core's queue:
                          * nkrt_execute_async and the async copies, before it starts) */
  uint32_t core;
  char name[64];         /* model or tensor name, truncated, NUL-terminated */
} nkrt_trace_event_t;

/* core: a logical core, or -1 for all cores. |out_session| is owned by the
 * caller and must be destroyed with nkrt_trace_destroy, before the runtime
 * is destroyed. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_trace_start(nkrt_runtime_t *runtime, int32_t core,
                               nkrt_trace_session_t **out_session);
/* Stops recording; recorded events stay readable. Idempotent. */
void nkrt_trace_stop(nkrt_trace_session_t *session);
uint64_t nkrt_trace_event_count(const nkrt_trace_session_t *session);
/* Events as JSON (see above); with drain, the returned events are removed.
 * |out_json| must be freed by the caller with nkrt_free; |out_length| (may
 * be NULL) is the caller's storage. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_trace_events_json(nkrt_trace_session_t *session, bool drain, char **out_json,
                                     size_t *out_length);
/* The recorded events, in recording order, as an array; with drain, they are
 * removed. |out_events| (NULL when there are none) must be freed by the
 * caller with nkrt_free. For profilers that merge the runtime's events into
 * their own timeline (spike_torch's torch.profiler activity). */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_trace_events(nkrt_trace_session_t *session, bool drain,
                                nkrt_trace_event_t **out_events, size_t *out_count);
/* Writes the recorded events as Chrome Trace Event JSON to `path`. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_trace_write_chrome(nkrt_trace_session_t *session, const char *path);
/* Stops if needed and frees. NULL is a no-op. */
void nkrt_trace_destroy(nkrt_trace_session_t *session);

#ifdef __cplusplus
}
#endif
#endif /* NKRT_TRACE_H */
