/* spike_capi.h - the C function table spike._spike exports to other native
 * modules (spike_torch's allocator), so that they use the SAME nkrt runtime
 * the spike singleton owns instead of creating a second one.
 *
 * Get it once with the GIL held:
 *
 *     import spike; spike.get_spike_singleton()
 *     const spike_capi_t *api = PyCapsule_Import(SPIKE_CAPI_CAPSULE, 0);
 *
 * or from Python, spike._spike._nkrt_capi() returns the capsule. Check
 * api->version == SPIKE_CAPI_VERSION (or >=, the table only grows) and
 * api->struct_size before using a member.
 *
 * Generations. Every runtime the process creates gets a new generation
 * number; closing it (spike.reset(), Spike.close(), interpreter exit) makes
 * that generation stale. Every call that touches the runtime takes the
 * generation the caller obtained from acquire_runtime() and fails with
 * NKRT_CLOSED (release: does nothing) when it is stale, so handles from a
 * closed runtime are never dereferenced and deleters that run after close are
 * harmless no-ops. The calls hold a read lock while they run; closing waits
 * for them. Apart from acquire_runtime (which may take the GIL to create the
 * singleton) no call needs or takes the GIL, and all are thread-safe.
 */
#ifndef SPIKE_CAPI_H
#define SPIKE_CAPI_H

#include <stdint.h>

#include "nkrt/comm.h"
#include "nkrt/exec.h"
#include "nkrt/runtime.h"
#include "nkrt/status.h"
#include "nkrt/tensor.h"
#include "nkrt/trace.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SPIKE_CAPI_CAPSULE "spike._spike.nkrt_capi"
#define SPIKE_CAPI_VERSION 7u

typedef struct spike_capi {
  uint32_t struct_size; /* sizeof(spike_capi_t) of the exporter */
  uint32_t version;     /* SPIKE_CAPI_VERSION of the exporter */

  /* The live runtime and its generation. If none is live, creates the spike
   * singleton by calling spike.get_spike_singleton() in Python (takes the GIL;
   * fails with NKRT_CLOSED while the interpreter is finalizing). */
  nkrt_status_t (*acquire_runtime)(nkrt_runtime_t **out_runtime, uint64_t *out_generation);
  /* Generation of the live runtime, 0 when none is live. Never blocks. */
  uint64_t (*live_generation)(void);
  /* Visible cores a runtime would have (live runtime's count when live). */
  nkrt_status_t (*core_count)(uint32_t *out_count);

  nkrt_status_t (*tensor_allocate)(uint64_t generation, uint32_t core, uint64_t size,
                                   const char *name, nkrt_tensor_t **out_tensor);
  /* Drops the reference; a no-op for a stale generation (memory already gone). */
  void (*tensor_release)(uint64_t generation, nkrt_tensor_t *tensor);
  nkrt_status_t (*tensor_lookup)(uint64_t generation, const void *address,
                                 nkrt_tensor_t **out_tensor, uint64_t *out_offset);
  nkrt_status_t (*tensor_read)(uint64_t generation, const nkrt_tensor_t *tensor, void *dst,
                               uint64_t offset, uint64_t size);
  nkrt_status_t (*tensor_write)(uint64_t generation, nkrt_tensor_t *tensor, const void *src,
                                uint64_t offset, uint64_t size);
  nkrt_status_t (*tensor_copy)(uint64_t generation, const nkrt_tensor_t *src,
                               uint64_t src_offset, nkrt_tensor_t *dst, uint64_t dst_offset,
                               uint64_t size);
  nkrt_status_t (*tensor_memset)(uint64_t generation, nkrt_tensor_t *tensor, int value,
                                 uint64_t offset, uint64_t size);
  /* Accessors of a live tensor (no lock: the caller holds a reference). */
  void *(*tensor_va)(const nkrt_tensor_t *tensor);
  uint64_t (*tensor_size)(const nkrt_tensor_t *tensor);
  uint32_t (*tensor_core)(const nkrt_tensor_t *tensor);

  nkrt_status_t (*memory_stats)(uint64_t generation, uint32_t core,
                                nkrt_memory_stats_t *out_stats);
  nkrt_status_t (*memory_reset_peak)(uint64_t generation, uint32_t core);

  nkrt_code_t (*status_code)(nkrt_status_t status);
  const char *(*status_message)(nkrt_status_t status);
  const char *(*code_name)(nkrt_code_t code);
  void (*status_free)(nkrt_status_t status);

  /* Version 2. Runs `model` (a spike NrtModel object) once on tensors given by
   * device address (nkrt_execute_at): `count` addresses, its inputs then its
   * outputs, NULL for an aliased output (struct _object is PyObject). Unlike the calls above it is a Python
   * API: call it with the GIL held (it is released while the kernel runs).
   * Returns 0, or -1 with a Python exception set (SpikeError, ValueError,
   * NrtError), exactly as Spike.execute_at raises. */
  int (*model_execute_at)(struct _object *model, void *const *addresses, uint32_t count);
  /* Version 3. nkrt_tensor_update: writes only the 16 KiB blocks that differ. */
  nkrt_status_t (*tensor_update)(uint64_t generation, nkrt_tensor_t *tensor, const void *src,
                                 uint64_t offset, uint64_t size);
  /* Version 3. Takes a reference (a tensor_lookup result is borrowed), dropped
   * with tensor_release: the memory stays the same allocation meanwhile. */
  nkrt_status_t (*tensor_retain)(uint64_t generation, nkrt_tensor_t *tensor);
  /* Version 4. nkrt_comm_set_hosts: the job's hosts and the transport
   * between them (spike_torch's gloo transport). */
  nkrt_status_t (*comm_set_hosts)(uint32_t world_size, const uint32_t *host_of,
                                  const nkrt_comm_transport_t *transport);
  /* Version 4. A status of `code` with `message` (copied; NULL for
   * NKRT_SUCCESS), for callbacks that hand one back to the runtime: the
   * transport's exchange (nkrt_comm_transport_t) returns a status the runtime
   * frees. */
  nkrt_status_t (*status_make)(nkrt_code_t code, const char *message);
  /* Version 5. model_execute_at over HOST buffers (nkrt_execute_host): the
   * kernel reads its inputs from and writes its outputs into the caller's
   * memory, no device copy (CPU tensors handed to a compiled kernel). Same
   * order, GIL rule and errors as model_execute_at. */
  int (*model_execute_host)(struct _object *model, void *const *addresses, uint32_t count);
  /* Version 5. Whether the live runtime's kernels can address host memory
   * (nkrt_runtime_host_addressable): 1, 0, or 0 when `generation` is stale. */
  int (*host_addressable)(uint64_t generation);
  /* Version 6. model_execute_at without the GIL (the per-call path of
   * spike_torch's eager ops): the caller need not hold it, and the kernel
   * runs with whatever the caller holds. The caller keeps `model` alive (a
   * reference) and, holding it, may call this from any thread. Returns NULL,
   * or a status the caller frees or hands to raise_status: NKRT_CLOSED when
   * the runtime was closed or the model unloaded, NKRT_INVALID_ARGUMENT for
   * `model` not an NrtModel or a wrong count, else what nkrt_execute_at
   * returned. Unloading the model waits for these runs. */
  nkrt_status_t (*model_run_at)(struct _object *model, void *const *addresses, uint32_t count);
  /* Version 6. Sets the Python exception spike raises for `status` (NrtError,
   * SpikeError for NKRT_CLOSED) and frees it; returns -1. GIL held. */
  int (*raise_status)(nkrt_status_t status);
  /* Version 7. Trace sessions of the live runtime (nkrt/trace.h), for
   * profilers outside spike (spike_torch's torch.profiler activity): started
   * on `core` (-1: every core); recorded events copied out, and with `drain`
   * removed (nkrt_trace_events; free the array with free_memory). A session
   * belongs to its runtime: once that generation is stale, trace_events
   * fails with NKRT_CLOSED and trace_destroy does nothing (closing the
   * runtime freed it). */
  nkrt_status_t (*trace_start)(uint64_t generation, int32_t core,
                               nkrt_trace_session_t **out_session);
  nkrt_status_t (*trace_events)(uint64_t generation, nkrt_trace_session_t *session, int drain,
                                nkrt_trace_event_t **out_events, size_t *out_count);
  void (*trace_destroy)(uint64_t generation, nkrt_trace_session_t *session);
  /* Version 7. nkrt_free: memory the runtime allocated for the caller. */
  void (*free_memory)(void *ptr);
  /* Version 7. nkrt_tensor_write_async: the copy is queued on the tensor's
   * core and ordered with the work that touches its bytes; `src` must stay
   * valid and unchanged until the event is done (spike_torch's pinned host
   * memory keeps its block until then). Wait for and release the event with
   * event_wait / event_release (both no-ops once `generation` is stale: the
   * runtime's close finished and freed every event). */
  nkrt_status_t (*tensor_write_async)(uint64_t generation, nkrt_tensor_t *tensor, const void *src,
                                      uint64_t offset, uint64_t size, nkrt_event_t **out_event);
  nkrt_status_t (*event_wait)(uint64_t generation, nkrt_event_t *event, int64_t timeout_ns);
  int (*event_is_done)(uint64_t generation, const nkrt_event_t *event);
  void (*event_release)(uint64_t generation, nkrt_event_t *event);
  /* Version 7. Another reference to `event` (each released with event_release). */
  void (*event_retain)(uint64_t generation, nkrt_event_t *event);
} spike_capi_t;

#ifdef __cplusplus
}
#endif
#endif /* SPIKE_CAPI_H */
