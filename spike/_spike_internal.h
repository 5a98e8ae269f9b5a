/* spike/_spike_internal.h - what the files of the spike._spike extension share.
 *
 * The module's C files (spike/_spike*.c; _spike.c lists them) include this
 * header and nothing else of each other: the shared runtime context
 * (SpikeCtx), the error classes and helpers, the type objects and the layout
 * of the objects, and the few functions one file calls in another. Private
 * to the extension (built with -fvisibility=hidden: nothing declared here is
 * exported; only PyInit__spike is).
 */
#ifndef SPIKE_INTERNAL_H
#define SPIKE_INTERNAL_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nkrt/nkrt.h"
#include "include/spike_capi.h"

/* ------------------------------------------------------------------------ */
/* Errors (_spike.c)                                                        */
/* ------------------------------------------------------------------------ */

/* The error classes: SpikeRuntimeError > SpikeError, NrtError > NrtIndexError
 * (also an IndexError) (module init). */
extern PyObject *SpikeRuntimeError;
extern PyObject *SpikeError;
extern PyObject *NrtError;
extern PyObject *NrtIndexError;

/* Raises SpikeError("Spike Error: <formatted>") and returns NULL. The format
 * is that of PyUnicode_FromFormat. */
PyObject *spike_error(const char *fmt, ...);

/* Raises NrtError for a failed status, frees the status, returns NULL. */
PyObject *spike_nrt_error(nkrt_status_t status);

/* Argument checks shared by the methods. Return 0, or -1 with ValueError. */
int spike_check_non_negative(const char *what, long long value);
int spike_check_core_id(long long core_id);

/* ------------------------------------------------------------------------ */
/* The shared runtime context (_spike_core.c)                               */
/* ------------------------------------------------------------------------ */

struct TraceSessionObject;

/* Lifetime. One small reference-counted context (SpikeCtx) holds the
 * nkrt_runtime_t and a `closed` flag; the Spike object and every object it
 * creates hold a reference. The runtime is destroyed by Spike.close() or when
 * the last holder goes away; after that every destructor is a no-op and every
 * use raises SpikeError("... the runtime is closed").
 *
 * Threads. `closed` is written with the GIL held. Calls that release the GIL
 * take the context's read lock first (while still holding the GIL, after
 * checking `closed`) and drop it before taking the GIL back; the C API's
 * model_run_at, called without the GIL, takes the read lock and reads
 * `closed` and the model's handle under it. close() sets `closed` under the
 * GIL, then waits for the write lock without the GIL before destroying the
 * runtime; unloading a model takes the write lock with the GIL held. No
 * holder of the read lock ever waits for the GIL, and nothing holding the
 * write lock needs the GIL it does not already hold, so the two locks cannot
 * deadlock. Tensors used without the GIL are retained for the duration; a
 * model being executed is unloaded only once its last execution has
 * returned. */
typedef struct SpikeCtx {
  Py_ssize_t refs;          /* holders; changed with the GIL held */
  nkrt_runtime_t *runtime;  /* NULL once closed */
  int closed;               /* written with the GIL held; read with it, or atomically
                               under `lock` (the C API's model_run_at) */
  pthread_rwlock_t lock;    /* read: a call running without the GIL; write: close */
  struct TraceSessionObject *sessions; /* live SystemTraceSessions, destroyed at close */
} SpikeCtx;

/* The context of the live (not closed) runtime, if any: one per process. */
extern SpikeCtx *g_live_ctx;

void spike_ctx_incref(SpikeCtx *ctx);
void spike_ctx_decref(SpikeCtx *ctx);

/* 0 if the runtime is open, else -1 with SpikeError. */
int spike_ctx_check(const SpikeCtx *ctx);

/* Enter/leave a region that runs without the GIL. spike_ctx_enter is called
 * with the GIL held and fails if the runtime is closed. */
int spike_ctx_enter(SpikeCtx *ctx);
void spike_ctx_leave(SpikeCtx *ctx);

/* Process exit: if objects leaked past finalization, still stop the runtime's
 * threads and unmap its memory. No Python API is used here. */
void spike_at_exit(void);

/* The exported C API's view of the live runtime (spike_capi.h; in
 * _spike_capi.c): published when a runtime is created, retired (without the
 * GIL, waiting for API calls) before it is destroyed. */
void spike_capi_publish(nkrt_runtime_t *runtime);
void spike_capi_retire(nkrt_runtime_t *runtime);

/* ------------------------------------------------------------------------ */
/* Type objects and the objects' layout                                     */
/* ------------------------------------------------------------------------ */

extern PyTypeObject SpikeType;            /* _spike_core.c */
extern PyTypeObject NrtTensorType;        /* _spike_objects.c */
extern PyTypeObject NrtModelType;         /* _spike_objects.c */
extern PyTypeObject TraceSessionType;     /* _spike_objects.c */
extern PyTypeObject TensorMetadataType;   /* _spike_objects.c */
extern PyTypeObject ModelTensorInfoType;  /* _spike_objects.c */
extern PyTypeObject ExecutionEventType;   /* _spike_exec.c */

/* The struct sequences' descriptions, for PyStructSequence_InitType2
 * (_spike_objects.c). */
extern PyStructSequence_Desc spike_tensor_metadata_desc;
extern PyStructSequence_Desc spike_model_tensor_info_desc;

typedef struct {
  PyObject_HEAD
  SpikeCtx *ctx;
  int verbose_level;
} SpikeObject;

typedef struct {
  PyObject_HEAD
  SpikeCtx *ctx;
  nkrt_tensor_t *tensor; /* NULL once freed */
  PyObject *name;        /* str, kept for messages after free */
  uint64_t size;
  uint32_t core;
  int is_slice;
} NrtTensorObject;

typedef struct {
  PyObject_HEAD
  SpikeCtx *ctx;
  nkrt_model_t *model;   /* NULL once unloaded */
  PyObject *neff_path;   /* str */
  PyObject *name;        /* str */
  uint32_t core;
  int32_t rank;
  int32_t world_size;
  int cc_enabled;
  int busy;              /* executions running without the GIL */
  int unload_pending;    /* unload requested while busy (read atomically by model_run_at) */
} NrtModelObject;

typedef struct TraceSessionObject {
  PyObject_HEAD
  SpikeCtx *ctx;
  nkrt_trace_session_t *session; /* NULL once the runtime closed */
  int32_t core;                  /* -1: all cores */
  int stopped;
  struct TraceSessionObject *prev, *next; /* in ctx->sessions */
} TraceSessionObject;

/* ------------------------------------------------------------------------ */
/* Helpers for the objects (_spike_objects.c)                               */
/* ------------------------------------------------------------------------ */

int spike_check_open(SpikeObject *self);

/* The live nkrt tensor of `obj`, or NULL with SpikeError (freed, closed). */
nkrt_tensor_t *spike_tensor_get(NrtTensorObject *obj);
int spike_tensor_arg(PyObject *arg, const char *what, NrtTensorObject **out);
nkrt_model_t *spike_model_get(NrtModelObject *obj);
int spike_model_arg(PyObject *arg, NrtModelObject **out);

/* Wraps a new nkrt tensor (reference taken over) in an NrtTensor. */
PyObject *spike_tensor_wrap(SpikeCtx *ctx, nkrt_tensor_t *tensor);

/* Drops a model that has no execution in flight. */
void spike_model_release(NrtModelObject *obj);

/* A TensorMetadata for one input or output of `model`. */
PyObject *spike_tensor_metadata_new(const nkrt_neff_tensor_t *t, const nkrt_model_t *model);

/* Called by ctx_close before the runtime goes: sessions are freed first. */
void spike_trace_sessions_detach_all(SpikeCtx *ctx);

/* ------------------------------------------------------------------------ */
/* Spike: tensors, shared with the copies and execution (_spike_core.c)     */
/* ------------------------------------------------------------------------ */

/* Checks [offset, offset + size) against the tensor; SpikeError if outside. */
int spike_check_bounds(NrtTensorObject *t, const char *op, uint64_t offset, uint64_t size);

/* Gets a C-contiguous buffer (writable if asked); clear errors otherwise. */
int spike_get_contiguous_buffer(PyObject *obj, Py_buffer *view, int writable);

/* ------------------------------------------------------------------------ */
/* Spike methods apart from the Spike type (_spike_copy.c, _spike_exec.c)   */
/* ------------------------------------------------------------------------ */

/* Device copies, memset and 2-D (pitched) copies. */
PyObject *spike_tensor_copy(SpikeObject *self, PyObject *args, PyObject *kwds);
PyObject *spike_tensor_memset(SpikeObject *self, PyObject *args, PyObject *kwds);
PyObject *spike_tensor_write_2d(SpikeObject *self, PyObject *args, PyObject *kwds);
PyObject *spike_tensor_read_2d(SpikeObject *self, PyObject *args, PyObject *kwds);
PyObject *spike_tensor_copy_2d(SpikeObject *self, PyObject *args, PyObject *kwds);
PyObject *spike_tensor_memset_2d(SpikeObject *self, PyObject *args, PyObject *kwds);

/* Execution and benchmark. */
PyObject *spike_execute(SpikeObject *self, PyObject *args, PyObject *kwds);
PyObject *spike_execute_at(SpikeObject *self, PyObject *args, PyObject *kwds);
PyObject *spike_execute_staged(SpikeObject *self, PyObject *args, PyObject *kwds);
PyObject *spike_execute_async(SpikeObject *self, PyObject *args, PyObject *kwds);
PyObject *spike_benchmark(SpikeObject *self, PyObject *args, PyObject *kwds);

/* Runs a loaded model on tensors given by device address (nkrt_execute_at):
 * `count` addresses, its inputs then its outputs. 0, or -1 with an exception.
 * Shared by Spike.execute_at and the C API. */
int spike_model_execute_at(PyObject *model_obj, void *const *addresses, uint32_t count);
int spike_model_execute_host(PyObject *model_obj, void *const *addresses, uint32_t count);

/* ------------------------------------------------------------------------ */
/* The exported C API (_spike_capi.c)                                       */
/* ------------------------------------------------------------------------ */

/* spike._spike._nkrt_capi(): the capsule holding the C function table. */
PyObject *spike_module_nkrt_capi(PyObject *module, PyObject *unused);

/* ------------------------------------------------------------------------ */
/* The runtime's communicator for eager collectives (_spike_comm.c)         */
/* ------------------------------------------------------------------------ */

/* spike._spike._comm_collective(kind, dtype, reduce_op, rank, world_size,
 * src, dst, count): one collective over the whole job (nkrt_runtime_collective)
 * on the live runtime, after its queued work, without the GIL. */
PyObject *spike_module_comm_collective(PyObject *module, PyObject *args, PyObject *kwds);

#endif /* SPIKE_INTERNAL_H */
