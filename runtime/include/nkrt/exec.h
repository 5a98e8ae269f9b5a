/* nkrt/exec.h - tensor sets, execution and events.
 *
 * Execution binds tensors by name: inputs by the NEFF's input names, outputs
 * by its output names. Every input must be present; every output must be
 * present except aliased ones (they default to their input); a name the
 * model does not have is an error that lists the names it expects.
 *
 * Each core has an in-order queue served by its own thread. nkrt_execute runs
 * synchronously (inline on the caller when the queue is idle, in order with
 * queued work otherwise); nkrt_execute_async and the async copies return an
 * event to wait on or poll. Work on different cores runs concurrently.
 *
 * Hazards. Until it finishes, queued work holds the byte ranges of the
 * tensors it binds (an execution: every input and output; an async copy: the
 * range it copies). Synchronous tensor operations (tensor.h) wait for pending
 * work overlapping their bytes; nkrt_execute, in order with its own core's
 * queue anyway, also waits for pending work of other cores that overlaps its
 * tensors. Queued work does not wait for other queued work: order it with
 * events or by queueing it on one core.
 */
#ifndef NKRT_EXEC_H
#define NKRT_EXEC_H

#include <stdbool.h>
#include <stdint.h>

#include "nkrt/model.h"
#include "nkrt/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nkrt_tensor_set nkrt_tensor_set_t;

/* A set is owned by whoever created it. |out_set| must be destroyed by the
 * caller with nkrt_tensor_set_destroy (which releases its tensors), before
 * the runtime is destroyed. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_tensor_set_create(nkrt_tensor_set_t **out_set);
void nkrt_tensor_set_destroy(nkrt_tensor_set_t *set);
/* Binds name -> tensor (retaining it); replaces an earlier binding of name. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_tensor_set_add(nkrt_tensor_set_t *set, const char *name, nkrt_tensor_t *tensor);
/* Borrowed; NULL if absent. */
nkrt_tensor_t *nkrt_tensor_set_get(const nkrt_tensor_set_t *set, const char *name);
uint32_t nkrt_tensor_set_count(const nkrt_tensor_set_t *set);
void nkrt_tensor_set_clear(nkrt_tensor_set_t *set);

/* Runs the model once and returns its status. Thread-safe. Runs after the
 * work queued on the model's core, and after queued work of other cores that
 * overlaps its tensors. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_execute(nkrt_model_t *model, const nkrt_tensor_set_t *inputs,
                           const nkrt_tensor_set_t *outputs);

/* nkrt_execute with the tensors given by device address, in the model's
 * order: addresses[0 .. inputs) for its inputs, then one per output (NULL for
 * an aliased output: its input's address). Each tensor's bytes,
 * [address, address + its size in the NEFF), must lie inside one live
 * allocation on the model's core (a tensor, or any part of one); that
 * allocation is retained while the kernel runs. No tensor set, slice or name
 * lookup is made: this is the per-call path of callers that bind the same
 * model over and over (spike_torch). The caller keeps the memory alive for
 * the call. Errors name the tensor (NKRT_EXEC_BAD_INPUT). */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_execute_at(nkrt_model_t *model, void *const *addresses);

/* nkrt_execute_at with the tensors in HOST memory: the kernel reads its inputs
 * from, and writes its outputs into, the caller's own buffers, with no copy
 * to or from device memory (a CPU tensor handed to a compiled kernel). Only
 * on a runtime whose kernels can address host memory (the CPU driver; else
 * NKRT_INVALID, nothing run). Same order and NULL rule as nkrt_execute_at;
 * each address must be aligned to its tensor's element size and its bytes
 * must not lie in device memory (a device tensor goes through
 * nkrt_execute_at, which retains it). Nothing is retained: the caller keeps
 * every buffer alive, and does not write the inputs or touch the outputs,
 * until this returns; it runs synchronously, after the core's queued work. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_execute_host(nkrt_model_t *model, void *const *addresses);

/* Whether nkrt_execute_host can run on this runtime. */
bool nkrt_runtime_host_addressable(const nkrt_runtime_t *runtime);

typedef struct nkrt_event nkrt_event_t;

/* Queues an execution on the model's core. Tensors are bound (and retained)
 * at submission, so the sets may change or be destroyed right after.
 * Synchronous operations on their bytes wait for it (see above).
 * |out_event| must be released by the caller with nkrt_event_release. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_execute_async(nkrt_model_t *model, const nkrt_tensor_set_t *inputs,
                                 const nkrt_tensor_set_t *outputs, nkrt_event_t **out_event);
/* Queued host-to-device / device-to-host copies, in order with executions on
 * the tensor's core. The host buffer must stay valid until the event is done.
 * |out_event| must be released by the caller with nkrt_event_release. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_tensor_write_async(nkrt_tensor_t *tensor, const void *src, uint64_t offset,
                                      uint64_t size, nkrt_event_t **out_event);
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_tensor_read_async(nkrt_tensor_t *tensor, void *dst, uint64_t offset,
                                     uint64_t size, nkrt_event_t **out_event);

/* Waits up to timeout_ns (< 0: forever). Returns the work's status (a copy
 * the caller frees), or NKRT_TIMEOUT. Can be called repeatedly. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_event_wait(nkrt_event_t *event, int64_t timeout_ns);
/* Polls without blocking. */
bool nkrt_event_is_done(const nkrt_event_t *event);
/* Monotonic per-runtime id, also the tracking_id in traces. */
uint64_t nkrt_event_id(const nkrt_event_t *event);
/* Events are shared handles (the caller's and the queue's): retain takes a
 * reference, release drops one. NULL is a no-op. */
void nkrt_event_retain(nkrt_event_t *event);
void nkrt_event_release(nkrt_event_t *event);

/* Waits until every queued item on logical core `core` is done. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_core_synchronize(nkrt_runtime_t *runtime, uint32_t core);

#ifdef __cplusplus
}
#endif
#endif /* NKRT_EXEC_H */
