/* spike/_spike_capi.c - the C function table spike._spike exports.
 *
 * The table of spike/include/spike_capi.h (a capsule, spike._spike._nkrt_capi())
 * through which other native modules (spike_torch) use the runtime the spike
 * singleton owns: the live runtime and its generation, published when a Spike
 * is created and retired before its runtime is destroyed, and the calls that
 * check a caller's generation under a read lock.
 */
#include "_spike_internal.h"

/* ------------------------------------------------------------------------ */
/* The exported C API (spike/include/spike_capi.h)                          */
/* ------------------------------------------------------------------------ */

/* State behind the exported C API (spike_capi.h): the live runtime and its
 * generation, guarded by a read-write lock that API calls hold for reading
 * while they use the runtime and that publish/retire take for writing. */
static pthread_rwlock_t g_capi_lock = PTHREAD_RWLOCK_INITIALIZER;
static nkrt_runtime_t *g_capi_runtime;
static uint64_t g_capi_generation_counter;
static uint64_t g_capi_generation; /* 0: none live; read atomically */

void spike_capi_publish(nkrt_runtime_t *runtime) {
  pthread_rwlock_wrlock(&g_capi_lock);
  g_capi_runtime = runtime;
  __atomic_store_n(&g_capi_generation, ++g_capi_generation_counter, __ATOMIC_RELEASE);
  pthread_rwlock_unlock(&g_capi_lock);
}

/* Called without the GIL before `runtime` is destroyed; waits for API calls. */
void spike_capi_retire(nkrt_runtime_t *runtime) {
  pthread_rwlock_wrlock(&g_capi_lock);
  if (g_capi_runtime == runtime) {
    g_capi_runtime = NULL;
    __atomic_store_n(&g_capi_generation, 0, __ATOMIC_RELEASE);
  }
  pthread_rwlock_unlock(&g_capi_lock);
}

static nkrt_status_t capi_closed_status(void) {
  return nkrt_status_make(NKRT_CLOSED,
                          "the spike runtime this memory belonged to is closed (after "
                          "spike.reset() or at interpreter exit)");
}

/* Takes the read lock; returns the runtime if `generation` is live, else
 * NULL (the lock is then released). */
static nkrt_runtime_t *capi_enter(uint64_t generation) {
  pthread_rwlock_rdlock(&g_capi_lock);
  if (generation != 0 && generation == g_capi_generation && g_capi_runtime)
    return g_capi_runtime;
  pthread_rwlock_unlock(&g_capi_lock);
  return NULL;
}

static void capi_leave(void) { pthread_rwlock_unlock(&g_capi_lock); }

static uint64_t capi_live_generation(void) {
  return __atomic_load_n(&g_capi_generation, __ATOMIC_ACQUIRE);
}

static nkrt_status_t capi_acquire_runtime(nkrt_runtime_t **out_runtime,
                                          uint64_t *out_generation) {
  for (int attempt = 0; attempt < 2; attempt++) {
    pthread_rwlock_rdlock(&g_capi_lock);
    nkrt_runtime_t *runtime = g_capi_runtime;
    uint64_t generation = g_capi_generation;
    pthread_rwlock_unlock(&g_capi_lock);
    if (runtime) {
      *out_runtime = runtime;
      *out_generation = generation;
      return NULL;
    }
    if (attempt == 1) break;
    if (!Py_IsInitialized() || _Py_IsFinalizing())
      return nkrt_status_make(NKRT_CLOSED, "the spike runtime is closed: the interpreter is "
                                           "shutting down");
    PyGILState_STATE gil = PyGILState_Ensure();
    nkrt_status_t st = NULL;
    PyObject *module = PyImport_ImportModule("spike");
    PyObject *result = module ? PyObject_CallMethod(module, "get_spike_singleton", NULL) : NULL;
    if (!result) {
      PyObject *type, *value, *tb;
      PyErr_Fetch(&type, &value, &tb);
      PyObject *text = value ? PyObject_Str(value) : NULL;
      const char *msg = text ? PyUnicode_AsUTF8(text) : NULL;
      st = nkrt_status_make(NKRT_UNINITIALIZED, "could not create the spike runtime: %s",
                            msg ? msg : "unknown error");
      PyErr_Clear();
      Py_XDECREF(text);
      Py_XDECREF(type);
      Py_XDECREF(value);
      Py_XDECREF(tb);
    }
    Py_XDECREF(result);
    Py_XDECREF(module);
    PyGILState_Release(gil);
    if (st) return st;
  }
  return nkrt_status_make(NKRT_UNINITIALIZED, "the spike runtime closed while being acquired");
}

static nkrt_status_t capi_core_count(uint32_t *out_count) {
  pthread_rwlock_rdlock(&g_capi_lock);
  if (g_capi_runtime) {
    *out_count = nkrt_runtime_core_count(g_capi_runtime);
    pthread_rwlock_unlock(&g_capi_lock);
    return NULL;
  }
  pthread_rwlock_unlock(&g_capi_lock);
  return nkrt_visible_core_count(out_count);
}

static int capi_host_addressable(uint64_t generation) {
  nkrt_runtime_t *runtime = capi_enter(generation);
  if (!runtime) return 0;
  int yes = nkrt_runtime_host_addressable(runtime);
  capi_leave();
  return yes;
}

static nkrt_status_t capi_tensor_allocate(uint64_t generation, uint32_t core, uint64_t size,
                                          const char *name, nkrt_tensor_t **out_tensor) {
  nkrt_runtime_t *runtime = capi_enter(generation);
  if (!runtime) return capi_closed_status();
  nkrt_status_t st = nkrt_tensor_allocate(runtime, core, size, name, out_tensor);
  capi_leave();
  return st;
}

static void capi_tensor_release(uint64_t generation, nkrt_tensor_t *tensor) {
  if (!tensor || !capi_enter(generation)) return;
  nkrt_tensor_release(tensor);
  capi_leave();
}

static nkrt_status_t capi_tensor_lookup(uint64_t generation, const void *address,
                                        nkrt_tensor_t **out_tensor, uint64_t *out_offset) {
  nkrt_runtime_t *runtime = capi_enter(generation);
  if (!runtime) return capi_closed_status();
  nkrt_status_t st = nkrt_tensor_lookup(runtime, address, out_tensor, out_offset);
  capi_leave();
  return st;
}

static nkrt_status_t capi_tensor_read(uint64_t generation, const nkrt_tensor_t *tensor,
                                      void *dst, uint64_t offset, uint64_t size) {
  if (!capi_enter(generation)) return capi_closed_status();
  nkrt_status_t st = nkrt_tensor_read(tensor, dst, offset, size);
  capi_leave();
  return st;
}

static nkrt_status_t capi_tensor_write(uint64_t generation, nkrt_tensor_t *tensor,
                                       const void *src, uint64_t offset, uint64_t size) {
  if (!capi_enter(generation)) return capi_closed_status();
  nkrt_status_t st = nkrt_tensor_write(tensor, src, offset, size);
  capi_leave();
  return st;
}

static nkrt_status_t capi_tensor_retain(uint64_t generation, nkrt_tensor_t *tensor) {
  if (!capi_enter(generation)) return capi_closed_status();
  nkrt_tensor_retain(tensor);
  capi_leave();
  return NULL;
}

static nkrt_status_t capi_tensor_update(uint64_t generation, nkrt_tensor_t *tensor,
                                        const void *src, uint64_t offset, uint64_t size) {
  if (!capi_enter(generation)) return capi_closed_status();
  nkrt_status_t st = nkrt_tensor_update(tensor, src, offset, size, NULL);
  capi_leave();
  return st;
}

static nkrt_status_t capi_tensor_copy(uint64_t generation, const nkrt_tensor_t *src,
                                      uint64_t src_offset, nkrt_tensor_t *dst,
                                      uint64_t dst_offset, uint64_t size) {
  if (!capi_enter(generation)) return capi_closed_status();
  nkrt_status_t st = nkrt_tensor_copy(src, src_offset, dst, dst_offset, size);
  capi_leave();
  return st;
}

static nkrt_status_t capi_tensor_memset(uint64_t generation, nkrt_tensor_t *tensor, int value,
                                        uint64_t offset, uint64_t size) {
  if (!capi_enter(generation)) return capi_closed_status();
  nkrt_status_t st = nkrt_tensor_memset(tensor, value, offset, size);
  capi_leave();
  return st;
}

static nkrt_status_t capi_trace_start(uint64_t generation, int32_t core,
                                      nkrt_trace_session_t **out_session) {
  nkrt_runtime_t *runtime = capi_enter(generation);
  if (!runtime) return capi_closed_status();
  nkrt_status_t st = nkrt_trace_start(runtime, core, out_session);
  capi_leave();
  return st;
}

static nkrt_status_t capi_trace_events(uint64_t generation, nkrt_trace_session_t *session,
                                       int drain, nkrt_trace_event_t **out_events,
                                       size_t *out_count) {
  if (!capi_enter(generation)) return capi_closed_status();
  nkrt_status_t st = nkrt_trace_events(session, drain != 0, out_events, out_count);
  capi_leave();
  return st;
}

static void capi_trace_destroy(uint64_t generation, nkrt_trace_session_t *session) {
  if (!session || !capi_enter(generation)) return;
  nkrt_trace_destroy(session);
  capi_leave();
}

static nkrt_status_t capi_tensor_write_async(uint64_t generation, nkrt_tensor_t *tensor,
                                             const void *src, uint64_t offset, uint64_t size,
                                             nkrt_event_t **out_event) {
  if (!capi_enter(generation)) return capi_closed_status();
  nkrt_status_t st = nkrt_tensor_write_async(tensor, src, offset, size, out_event);
  capi_leave();
  return st;
}

static nkrt_status_t capi_event_wait(uint64_t generation, nkrt_event_t *event,
                                     int64_t timeout_ns) {
  if (!capi_enter(generation)) return NULL; /* closing waited for the queues */
  nkrt_status_t st = nkrt_event_wait(event, timeout_ns);
  capi_leave();
  return st;
}

static int capi_event_is_done(uint64_t generation, const nkrt_event_t *event) {
  if (!capi_enter(generation)) return 1;
  int done = nkrt_event_is_done(event);
  capi_leave();
  return done;
}

static void capi_event_release(uint64_t generation, nkrt_event_t *event) {
  if (!event || !capi_enter(generation)) return;
  nkrt_event_release(event);
  capi_leave();
}

static void capi_event_retain(uint64_t generation, nkrt_event_t *event) {
  if (!event || !capi_enter(generation)) return;
  nkrt_event_retain(event);
  capi_leave();
}

static nkrt_status_t capi_memory_stats(uint64_t generation, uint32_t core,
                                       nkrt_memory_stats_t *out_stats) {
  nkrt_runtime_t *runtime = capi_enter(generation);
  if (!runtime) return capi_closed_status();
  nkrt_status_t st = nkrt_memory_stats(runtime, core, out_stats);
  capi_leave();
  return st;
}

static nkrt_status_t capi_memory_reset_peak(uint64_t generation, uint32_t core) {
  nkrt_runtime_t *runtime = capi_enter(generation);
  if (!runtime) return capi_closed_status();
  nkrt_status_t st = nkrt_memory_reset_peak(runtime, core);
  capi_leave();
  return st;
}

/* model_execute_at without the GIL. The model's runtime context lock, held
 * for reading, keeps its handle loaded (spike_model_release and closing take
 * it for writing); the caller's reference keeps the object. */
static nkrt_status_t capi_model_run_at(PyObject *model_obj, void *const *addresses,
                                       uint32_t count) {
  if (!model_obj || !PyObject_TypeCheck(model_obj, &NrtModelType))
    return nkrt_status_make(NKRT_INVALID, "model_run_at: the model is not an NrtModel");
  NrtModelObject *model = (NrtModelObject *)model_obj;
  SpikeCtx *ctx = model->ctx;
  nkrt_status_t st;
  pthread_rwlock_rdlock(&ctx->lock);
  nkrt_model_t *handle = model->model;
  if (__atomic_load_n(&ctx->closed, __ATOMIC_ACQUIRE) || !handle ||
      __atomic_load_n(&model->unload_pending, __ATOMIC_RELAXED)) {
    st = nkrt_status_make(NKRT_CLOSED, "the model is unloaded, or its runtime closed (after "
                          "Spike.close() or spike.reset()); load it again");
  } else {
    uint32_t expected = nkrt_model_input_count(handle) + nkrt_model_output_count(handle);
    st = count == expected ? nkrt_execute_at(handle, addresses)
                           : nkrt_status_make(NKRT_INVALID, "model_run_at: the model takes %u "
                                              "addresses (its inputs, then its outputs), got %u",
                                              expected, count);
  }
  pthread_rwlock_unlock(&ctx->lock);
  return st;
}

static int capi_raise_status(nkrt_status_t status) {
  if (nkrt_status_code(status) == NKRT_CLOSED) {
    spike_error("%s", nkrt_status_message(status));
    nkrt_status_free(status);
    return -1;
  }
  spike_nrt_error(status);
  return -1;
}

static nkrt_status_t capi_status_make(nkrt_code_t code, const char *message) {
  return nkrt_status_make(code, "%s", message ? message : "");
}

static const spike_capi_t g_capi = {
    .struct_size = sizeof(spike_capi_t),
    .version = SPIKE_CAPI_VERSION,
    .acquire_runtime = capi_acquire_runtime,
    .live_generation = capi_live_generation,
    .core_count = capi_core_count,
    .tensor_allocate = capi_tensor_allocate,
    .tensor_release = capi_tensor_release,
    .tensor_lookup = capi_tensor_lookup,
    .tensor_read = capi_tensor_read,
    .tensor_write = capi_tensor_write,
    .tensor_copy = capi_tensor_copy,
    .tensor_memset = capi_tensor_memset,
    .tensor_va = nkrt_tensor_va,
    .tensor_size = nkrt_tensor_size,
    .tensor_core = nkrt_tensor_core,
    .memory_stats = capi_memory_stats,
    .memory_reset_peak = capi_memory_reset_peak,
    .status_code = nkrt_status_code,
    .status_message = nkrt_status_message,
    .code_name = nkrt_code_name,
    .status_free = nkrt_status_free,
    .model_execute_at = spike_model_execute_at,
    .tensor_update = capi_tensor_update,
    .tensor_retain = capi_tensor_retain,
    .comm_set_hosts = nkrt_comm_set_hosts,
    .status_make = capi_status_make,
    .model_execute_host = spike_model_execute_host,
    .host_addressable = capi_host_addressable,
    .model_run_at = capi_model_run_at,
    .raise_status = capi_raise_status,
    .trace_start = capi_trace_start,
    .trace_events = capi_trace_events,
    .trace_destroy = capi_trace_destroy,
    .free_memory = nkrt_free,
    .tensor_write_async = capi_tensor_write_async,
    .event_wait = capi_event_wait,
    .event_is_done = capi_event_is_done,
    .event_release = capi_event_release,
    .event_retain = capi_event_retain,
};

PyObject *spike_module_nkrt_capi(PyObject *module, PyObject *unused) {
  (void)module;
  (void)unused;
  return PyCapsule_New((void *)&g_capi, SPIKE_CAPI_CAPSULE, NULL);
}
