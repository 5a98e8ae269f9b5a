/* spike/_spike.c - the CPython binding of the nkrt device runtime.
 *
 * Module `spike._spike`: the low-level `Spike` runtime object and the data
 * objects it hands out (NrtTensor, NrtModel, SystemTraceSession), the error
 * classes (SpikeRuntimeError > SpikeError, NrtError) and the metadata types
 * (TensorMetadata, ModelTensorInfo).
 *
 * Lifetime. One small reference-counted context (SpikeCtx) holds the
 * nkrt_runtime_t and a `closed` flag; the Spike object and every object it
 * creates hold a reference. The runtime is destroyed by Spike.close() or when
 * the last holder goes away; after that every destructor is a no-op and every
 * use raises SpikeError("... the runtime is closed").
 *
 * Threads. `closed` is only read and written with the GIL held. Calls that
 * release the GIL take the context's read lock first (while still holding the
 * GIL, after checking `closed`) and drop it before taking the GIL back;
 * close() sets `closed` under the GIL, then waits for the write lock without
 * the GIL before destroying the runtime. Nothing holding the write lock ever
 * needs the GIL, so the two locks cannot deadlock. Tensors used without the
 * GIL are retained for the duration; a model being executed is unloaded only
 * once its last execution has returned.
 */
#include "_spike_internal.h"

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */
/* ------------------------------------------------------------------------ */

PyObject *SpikeRuntimeError;
PyObject *SpikeError;
PyObject *NrtError;

/* Raises SpikeError("Spike Error: <formatted>") and returns NULL. The format
 * is that of PyUnicode_FromFormat. */
PyObject *spike_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  PyObject *text = PyUnicode_FromFormatV(fmt, ap);
  va_end(ap);
  if (!text) return NULL;
  PyObject *msg = PyUnicode_FromFormat("Spike Error: %U", text);
  Py_DECREF(text);
  if (!msg) return NULL;
  PyErr_SetObject(SpikeError, msg);
  Py_DECREF(msg);
  return NULL;
}

/* Raises NrtError for a failed status, frees the status, returns NULL. */
PyObject *spike_nrt_error(nkrt_status_t status) {
  nkrt_code_t code = nkrt_status_code(status);
  const char *name = nkrt_code_name(code);
  PyObject *msg = PyUnicode_FromFormat("NRT Error %s(%d): %s", name, (int)code,
                                       nkrt_status_message(status));
  nkrt_status_free(status);
  if (!msg) return NULL;
  PyObject *exc = PyObject_CallOneArg(NrtError, msg);
  Py_DECREF(msg);
  if (!exc) return NULL;
  PyObject *code_obj = PyLong_FromLong((long)code);
  PyObject *name_obj = PyUnicode_FromString(name);
  if (!code_obj || !name_obj || PyObject_SetAttrString(exc, "status_code", code_obj) < 0 ||
      PyObject_SetAttrString(exc, "status_name", name_obj) < 0) {
    Py_XDECREF(code_obj);
    Py_XDECREF(name_obj);
    Py_DECREF(exc);
    return NULL;
  }
  Py_DECREF(code_obj);
  Py_DECREF(name_obj);
  PyErr_SetObject(NrtError, exc);
  Py_DECREF(exc);
  return NULL;
}

/* Argument checks shared by the methods. Return 0, or -1 with ValueError. */
int spike_check_non_negative(const char *what, long long value) {
  if (value < 0) {
    PyErr_Format(PyExc_ValueError, "%s must be a non-negative integer, got %lld", what, value);
    return -1;
  }
  return 0;
}

/* "O&" converter: a filesystem path (str, bytes, os.PathLike) as bytes, or
 * None as NULL. Supports the cleanup call of PyArg_Parse*. */
static int fs_path_or_none(PyObject *obj, void *out) {
  PyObject **result = out;
  if (obj == NULL) {
    Py_CLEAR(*result);
    return 1;
  }
  if (obj == Py_None) {
    *result = NULL;
    return 1;
  }
  return PyUnicode_FSConverter(obj, out);
}

int spike_check_core_id(long long core_id) {
  if (core_id < 0 || core_id > (long long)UINT32_MAX) {
    PyErr_Format(PyExc_ValueError, "core_id must be a non-negative logical core index, got %lld",
                 core_id);
    return -1;
  }
  return 0;
}

/* ------------------------------------------------------------------------ */
/* The shared runtime context                                                */
/* ------------------------------------------------------------------------ */

/* The context of the live (not closed) runtime, if any: one per process. */
SpikeCtx *g_live_ctx;

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

static SpikeCtx *ctx_new(nkrt_runtime_t *runtime) {
  SpikeCtx *ctx = calloc(1, sizeof(*ctx));
  if (!ctx) return NULL;
  if (pthread_rwlock_init(&ctx->lock, NULL) != 0) {
    free(ctx);
    return NULL;
  }
  ctx->refs = 1;
  ctx->runtime = runtime;
  return ctx;
}

void spike_ctx_incref(SpikeCtx *ctx) { ctx->refs++; }

/* Destroys the runtime (GIL held on entry and exit). Idempotent. */
static void ctx_close(SpikeCtx *ctx) {
  if (ctx->closed) return;
  ctx->closed = 1; /* from here on nothing new starts */
  if (g_live_ctx == ctx) g_live_ctx = NULL;
  spike_trace_sessions_detach_all(ctx);
  nkrt_runtime_t *runtime = ctx->runtime;
  ctx->runtime = NULL;
  Py_BEGIN_ALLOW_THREADS
  /* Waits for calls still running without the GIL. */
  pthread_rwlock_wrlock(&ctx->lock);
  spike_capi_retire(runtime);
  nkrt_runtime_destroy(runtime);
  pthread_rwlock_unlock(&ctx->lock);
  Py_END_ALLOW_THREADS
}

void spike_ctx_decref(SpikeCtx *ctx) {
  if (!ctx || --ctx->refs > 0) return;
  ctx_close(ctx);
  pthread_rwlock_destroy(&ctx->lock);
  free(ctx);
}

/* 0 if the runtime is open, else -1 with SpikeError. */
int spike_ctx_check(const SpikeCtx *ctx) {
  if (ctx->closed) {
    spike_error("the runtime is closed (after Spike.close() or spike.reset()); "
                "create a new runtime and new objects");
    return -1;
  }
  return 0;
}

/* Enter/leave a region that runs without the GIL. spike_ctx_enter is called
 * with the GIL held and fails if the runtime is closed. */
int spike_ctx_enter(SpikeCtx *ctx) {
  if (spike_ctx_check(ctx) < 0) return -1;
  pthread_rwlock_rdlock(&ctx->lock);
  return 0;
}

void spike_ctx_leave(SpikeCtx *ctx) { pthread_rwlock_unlock(&ctx->lock); }

/* Process exit: if objects leaked past finalization, still stop the runtime's
 * threads and unmap its memory. No Python API is used here. */
void spike_at_exit(void) {
  SpikeCtx *ctx = g_live_ctx;
  if (ctx && !ctx->closed) {
    ctx->closed = 1;
    g_live_ctx = NULL;
    pthread_rwlock_wrlock(&ctx->lock); /* a daemon thread may still be executing */
    spike_capi_retire(ctx->runtime);
    nkrt_runtime_destroy(ctx->runtime);
    ctx->runtime = NULL;
    pthread_rwlock_unlock(&ctx->lock);
  }
}

/* ------------------------------------------------------------------------ */
/* Spike: lifecycle                                                          */
/* ------------------------------------------------------------------------ */

static PyObject *spike_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"verbose_level", "core_memory_bytes", "num_workers", NULL};
  int verbose_level = 0;
  PyObject *memory_arg = Py_None, *workers_arg = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "|i$OO:Spike", kwlist, &verbose_level,
                                   &memory_arg, &workers_arg))
    return NULL;
  nkrt_options_t options;
  nkrt_options_init(&options);
  if (memory_arg != Py_None) {
    if (!PyLong_Check(memory_arg))
      return PyErr_Format(PyExc_TypeError, "core_memory_bytes must be an int or None, got %s",
                          Py_TYPE(memory_arg)->tp_name);
    unsigned long long bytes = PyLong_AsUnsignedLongLong(memory_arg);
    if (PyErr_Occurred() || bytes == 0) {
      PyErr_Clear();
      return PyErr_Format(PyExc_ValueError,
                          "core_memory_bytes must be a positive number of bytes, got %R",
                          memory_arg);
    }
    options.core_memory_bytes = bytes;
  }
  if (workers_arg != Py_None) {
    if (!PyLong_Check(workers_arg))
      return PyErr_Format(PyExc_TypeError, "num_workers must be an int or None, got %s",
                          Py_TYPE(workers_arg)->tp_name);
    long long workers = PyLong_AsLongLong(workers_arg);
    if ((workers == -1 && PyErr_Occurred()) || workers <= 0 || workers > UINT32_MAX) {
      PyErr_Clear();
      return PyErr_Format(PyExc_ValueError, "num_workers must be a positive int, got %R",
                          workers_arg);
    }
    options.num_workers = (uint32_t)workers;
  }
  if (g_live_ctx)
    return spike_error("a Spike runtime is already active in this process (only one per "
                       "process); close it first (Spike.close() or spike.reset()), or use "
                       "spike.get_spike_singleton()");
  nkrt_runtime_t *runtime = NULL;
  nkrt_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = nkrt_runtime_create(&options, &runtime);
  Py_END_ALLOW_THREADS
  if (st) return spike_nrt_error(st);
  if (g_live_ctx) { /* another thread won the race while the GIL was released */
    nkrt_runtime_destroy(runtime);
    return spike_error("a Spike runtime is already active in this process (only one per "
                       "process)");
  }
  SpikeObject *self = (SpikeObject *)type->tp_alloc(type, 0);
  if (!self) {
    nkrt_runtime_destroy(runtime);
    return NULL;
  }
  self->ctx = ctx_new(runtime);
  if (!self->ctx) {
    nkrt_runtime_destroy(runtime);
    Py_DECREF(self);
    return PyErr_NoMemory();
  }
  self->verbose_level = verbose_level;
  g_live_ctx = self->ctx;
  spike_capi_publish(runtime);
  return (PyObject *)self;
}

static void spike_dealloc(SpikeObject *self) {
  spike_ctx_decref(self->ctx);
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *spike_close(SpikeObject *self, PyObject *unused) {
  (void)unused;
  ctx_close(self->ctx);
  return PyLong_FromLong(0);
}

static PyObject *spike_get_visible_core_count(PyObject *unused1, PyObject *unused2) {
  (void)unused1;
  (void)unused2;
  uint32_t count = 0;
  nkrt_status_t st = nkrt_visible_core_count(&count);
  if (st) return spike_nrt_error(st);
  return PyLong_FromUnsignedLong(count);
}

static PyObject *spike_get_closed(SpikeObject *self, void *c) {
  (void)c;
  return PyBool_FromLong(self->ctx->closed);
}

static PyObject *spike_get_verbose_level(SpikeObject *self, void *c) {
  (void)c;
  return PyLong_FromLong(self->verbose_level);
}

static PyObject *spike_get_core_count(SpikeObject *self, void *c) {
  (void)c;
  if (spike_check_open(self) < 0) return NULL;
  return PyLong_FromUnsignedLong(nkrt_runtime_core_count(self->ctx->runtime));
}

static PyObject *spike_get_num_workers(SpikeObject *self, void *c) {
  (void)c;
  if (spike_check_open(self) < 0) return NULL;
  return PyLong_FromUnsignedLong(nkrt_runtime_num_workers(self->ctx->runtime));
}

static PyObject *spike_get_core_memory(SpikeObject *self, void *c) {
  (void)c;
  if (spike_check_open(self) < 0) return NULL;
  return PyLong_FromUnsignedLongLong(nkrt_runtime_core_memory(self->ctx->runtime));
}

static PyObject *spike_repr(SpikeObject *self) {
  if (self->ctx->closed) return PyUnicode_FromString("Spike(closed)");
  return PyUnicode_FromFormat("Spike(cores=%u, workers=%u, core_memory_bytes=%llu)",
                              (unsigned)nkrt_runtime_core_count(self->ctx->runtime),
                              (unsigned)nkrt_runtime_num_workers(self->ctx->runtime),
                              (unsigned long long)nkrt_runtime_core_memory(self->ctx->runtime));
}

/* ------------------------------------------------------------------------ */
/* Spike: models                                                             */
/* ------------------------------------------------------------------------ */

static PyObject *spike_load_model(SpikeObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"neff_file", "core_id", "cc_enabled", "rank_id", "world_size",
                           "name", NULL};
  PyObject *path = NULL;
  long long core_id = 0;
  int cc_enabled = 0, rank_id = 0, world_size = 1;
  const char *name = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "O&|Lpiiz:load_model", kwlist,
                                   PyUnicode_FSConverter, &path, &core_id, &cc_enabled, &rank_id,
                                   &world_size, &name))
    return NULL;
  PyObject *result = NULL;
  if (spike_check_core_id(core_id) < 0) goto done;
  if (world_size < 1) {
    PyErr_Format(PyExc_ValueError, "world_size must be >= 1, got %d", world_size);
    goto done;
  }
  if (rank_id < 0 || rank_id >= world_size) {
    PyErr_Format(PyExc_ValueError, "rank_id must be in [0, world_size=%d), got %d", world_size,
                 rank_id);
    goto done;
  }
  if (name && !name[0]) {
    PyErr_SetString(PyExc_ValueError, "name must be a non-empty string or None");
    goto done;
  }
  nkrt_load_options_t options;
  nkrt_load_options_init(&options);
  options.cc_enabled = (uint32_t)cc_enabled;
  options.rank = rank_id;
  options.world_size = world_size;
  options.name = name;
  nkrt_model_t *model = NULL;
  nkrt_status_t st;
  SpikeCtx *ctx = self->ctx;
  if (spike_ctx_enter(ctx) < 0) goto done;
  Py_BEGIN_ALLOW_THREADS
  st = nkrt_model_load_file(ctx->runtime, PyBytes_AS_STRING(path), (uint32_t)core_id, &options,
                            &model);
  spike_ctx_leave(ctx);
  Py_END_ALLOW_THREADS
  if (st) {
    spike_nrt_error(st);
    goto done;
  }
  if (ctx->closed) { /* closed by another thread meanwhile: the model went with it */
    spike_error("the runtime was closed while the model was loading");
    goto done;
  }
  /* Read everything from the handle before allocating anything. */
  uint32_t cc = 0;
  int32_t rank = 0, world = 1;
  nkrt_model_collectives(model, &cc, &rank, &world);
  uint32_t core = nkrt_model_core(model);
  PyObject *model_name = PyUnicode_FromString(nkrt_model_name(model));
  PyObject *neff_path = PyUnicode_DecodeFSDefault(PyBytes_AS_STRING(path));
  NrtModelObject *obj = model_name && neff_path ? PyObject_New(NrtModelObject, &NrtModelType)
                                                : NULL;
  if (!obj) {
    Py_XDECREF(model_name);
    Py_XDECREF(neff_path);
    if (!ctx->closed) nkrt_model_unload(model);
    goto done;
  }
  obj->ctx = ctx;
  spike_ctx_incref(ctx);
  obj->model = model;
  obj->core = core;
  obj->rank = rank;
  obj->world_size = world;
  obj->cc_enabled = cc != 0;
  obj->busy = 0;
  obj->unload_pending = 0;
  obj->neff_path = neff_path;
  obj->name = model_name;
  result = (PyObject *)obj;
done:
  Py_DECREF(path);
  return result;
}

static PyObject *spike_unload_model(SpikeObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"model", NULL};
  PyObject *arg;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:unload_model", kwlist, &arg)) return NULL;
  NrtModelObject *model;
  if (spike_check_open(self) < 0 || spike_model_arg(arg, &model) < 0) return NULL;
  if (model->busy) model->unload_pending = 1; /* the last execution unloads it */
  else spike_model_release(model);
  Py_RETURN_NONE;
}

/* dict name -> TensorMetadata for the inputs or outputs of `model`. */
static PyObject *tensor_info_dict(const nkrt_model_t *model, int outputs) {
  PyObject *dict = PyDict_New();
  if (!dict) return NULL;
  uint32_t count = outputs ? nkrt_model_output_count(model) : nkrt_model_input_count(model);
  for (uint32_t i = 0; i < count; i++) {
    const nkrt_neff_tensor_t *t = outputs ? nkrt_model_output(model, i) : nkrt_model_input(model, i);
    if (!t) continue;
    PyObject *md = spike_tensor_metadata_new(t, model);
    if (!md || PyDict_SetItemString(dict, t->name, md) < 0) {
      Py_XDECREF(md);
      Py_DECREF(dict);
      return NULL;
    }
    Py_DECREF(md);
  }
  return dict;
}

static PyObject *spike_get_tensor_info(SpikeObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"model", NULL};
  PyObject *arg;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:get_tensor_info", kwlist, &arg)) return NULL;
  NrtModelObject *model;
  if (spike_check_open(self) < 0 || spike_model_arg(arg, &model) < 0) return NULL;
  PyObject *info = PyStructSequence_New(&ModelTensorInfoType);
  if (!info) return NULL;
  PyObject *inputs = tensor_info_dict(model->model, 0);
  if (!inputs) goto fail;
  PyStructSequence_SetItem(info, 0, inputs);
  PyObject *outputs = tensor_info_dict(model->model, 1);
  if (!outputs) goto fail;
  PyStructSequence_SetItem(info, 1, outputs);
  return info;
fail:
  Py_DECREF(info);
  return NULL;
}

/* ------------------------------------------------------------------------ */
/* Spike: tensors                                                            */
/* ------------------------------------------------------------------------ */

static PyObject *spike_allocate_tensor(SpikeObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"size", "core_id", "name", NULL};
  long long size, core_id = 0;
  const char *name = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "L|Lz:allocate_tensor", kwlist, &size, &core_id,
                                   &name))
    return NULL;
  if (spike_check_non_negative("size", size) < 0 || spike_check_core_id(core_id) < 0) return NULL;
  if (spike_check_open(self) < 0) return NULL;
  nkrt_tensor_t *tensor = NULL;
  nkrt_status_t st =
      nkrt_tensor_allocate(self->ctx->runtime, (uint32_t)core_id, (uint64_t)size, name, &tensor);
  if (st) return spike_nrt_error(st);
  return spike_tensor_wrap(self->ctx, tensor);
}

static PyObject *spike_slice_from_tensor(SpikeObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"source", "offset", "size", "name", NULL};
  PyObject *arg;
  long long offset = 0, size = 0;
  const char *name = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|LLz:slice_from_tensor", kwlist, &arg, &offset,
                                   &size, &name))
    return NULL;
  if (spike_check_non_negative("offset", offset) < 0 || spike_check_non_negative("size", size) < 0)
    return NULL;
  NrtTensorObject *source;
  if (spike_check_open(self) < 0 || spike_tensor_arg(arg, "source", &source) < 0) return NULL;
  uint64_t off = (uint64_t)offset, len = (uint64_t)size;
  if (off > source->size || len > source->size - off)
    return spike_error("slice of %llu bytes at offset %llu exceeds the tensor bound: tensor "
                       "'%U' has %llu bytes",
                       (unsigned long long)len, (unsigned long long)off, source->name,
                       (unsigned long long)source->size);
  nkrt_tensor_t *tensor = NULL;
  nkrt_status_t st = nkrt_tensor_slice(source->tensor, off, len, name, &tensor);
  if (st) return spike_nrt_error(st);
  return spike_tensor_wrap(self->ctx, tensor);
}

/* Finds the live allocation containing `address` (a host-visible device
 * address): the owning tensor (borrowed) and the offset inside it. */
static nkrt_tensor_t *lookup_arg(SpikeObject *self, PyObject *addr_obj, uint64_t *out_offset) {
  if (!PyLong_Check(addr_obj)) {
    PyErr_Format(PyExc_TypeError, "address must be an int, got %s", Py_TYPE(addr_obj)->tp_name);
    return NULL;
  }
  unsigned long long address = PyLong_AsUnsignedLongLong(addr_obj);
  if (PyErr_Occurred()) {
    PyErr_Clear();
    PyErr_Format(PyExc_ValueError, "address must be a non-negative int, got %R", addr_obj);
    return NULL;
  }
  if (spike_check_open(self) < 0) return NULL;
  nkrt_tensor_t *owner = NULL;
  nkrt_status_t st =
      nkrt_tensor_lookup(self->ctx->runtime, (const void *)(uintptr_t)address, &owner, out_offset);
  if (st) {
    spike_nrt_error(st);
    return NULL;
  }
  return owner;
}

static PyObject *spike_slice_from_address(SpikeObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"address", "size", "name", NULL};
  PyObject *addr_obj;
  long long size = 0;
  const char *name = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|Lz:slice_from_address", kwlist, &addr_obj,
                                   &size, &name))
    return NULL;
  if (spike_check_non_negative("size", size) < 0) return NULL;
  uint64_t offset = 0;
  nkrt_tensor_t *owner = lookup_arg(self, addr_obj, &offset);
  if (!owner) return NULL;
  uint64_t total = nkrt_tensor_size(owner);
  if ((uint64_t)size > total - offset)
    return spike_error("slice of %llu bytes at offset %llu exceeds the allocation bound: it "
                       "has %llu bytes",
                       (unsigned long long)size, (unsigned long long)offset,
                       (unsigned long long)total);
  if (size == 0 && offset == total)
    return spike_error("address is the end of its allocation: an empty slice needs a size");
  nkrt_tensor_t *tensor = NULL;
  nkrt_status_t st = nkrt_tensor_slice(owner, offset, (uint64_t)size, name, &tensor);
  if (st) return spike_nrt_error(st);
  return spike_tensor_wrap(self->ctx, tensor);
}

static PyObject *spike_lookup_address(SpikeObject *self, PyObject *addr_obj) {
  uint64_t offset = 0;
  nkrt_tensor_t *owner = lookup_arg(self, addr_obj, &offset);
  if (!owner) return NULL;
  return Py_BuildValue("(KKI)", (unsigned long long)(uintptr_t)nkrt_tensor_va(owner),
                       (unsigned long long)nkrt_tensor_size(owner),
                       (unsigned int)nkrt_tensor_core(owner));
}

static PyObject *spike_free_tensor(SpikeObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"tensor", NULL};
  PyObject *arg;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:free_tensor", kwlist, &arg)) return NULL;
  NrtTensorObject *tensor;
  if (spike_check_open(self) < 0 || spike_tensor_arg(arg, "tensor", &tensor) < 0) return NULL;
  nkrt_tensor_free(&tensor->tensor);
  Py_RETURN_NONE;
}

/* Checks [offset, offset + size) against the tensor; SpikeError if outside. */
int spike_check_bounds(NrtTensorObject *t, const char *op, uint64_t offset, uint64_t size) {
  if (offset > t->size || size > t->size - offset) {
    spike_error("%s of %llu bytes at offset %llu exceeds the tensor bound: tensor '%U' has %llu "
                "bytes",
                op, (unsigned long long)size, (unsigned long long)offset, t->name,
                (unsigned long long)t->size);
    return -1;
  }
  return 0;
}

/* Copies between host memory and a tensor without the GIL: write when
 * `src` is given (only the blocks that differ with `only_changes`:
 * nkrt_tensor_update), else read into `dst`. The tensor is retained
 * meanwhile. */
static PyObject *tensor_copy_nogil_ex(NrtTensorObject *t, const void *src, void *dst,
                                      uint64_t offset, uint64_t size, int only_changes) {
  SpikeCtx *ctx = t->ctx;
  nkrt_tensor_t *tensor = t->tensor;
  if (spike_ctx_enter(ctx) < 0) return NULL;
  nkrt_tensor_retain(tensor);
  nkrt_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = !src          ? nkrt_tensor_read(tensor, dst, offset, size)
       : only_changes ? nkrt_tensor_update(tensor, src, offset, size, NULL)
                      : nkrt_tensor_write(tensor, src, offset, size);
  nkrt_tensor_release(tensor);
  spike_ctx_leave(ctx);
  Py_END_ALLOW_THREADS
  if (st) return spike_nrt_error(st);
  Py_RETURN_NONE;
}

static PyObject *tensor_copy_nogil(NrtTensorObject *t, const void *src, void *dst,
                                   uint64_t offset, uint64_t size) {
  return tensor_copy_nogil_ex(t, src, dst, offset, size, 0);
}

static PyObject *spike_tensor_write(SpikeObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"tensor", "data", "offset", NULL};
  PyObject *arg;
  Py_buffer data;
  long long offset = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "Oy*|L:tensor_write", kwlist, &arg, &data,
                                   &offset))
    return NULL;
  PyObject *result = NULL;
  NrtTensorObject *tensor;
  if (spike_check_non_negative("offset", offset) < 0 || spike_check_open(self) < 0 ||
      spike_tensor_arg(arg, "tensor", &tensor) < 0 ||
      spike_check_bounds(tensor, "write", (uint64_t)offset, (uint64_t)data.len) < 0)
    goto done;
  result = tensor_copy_nogil(tensor, data.buf, NULL, (uint64_t)offset, (uint64_t)data.len);
done:
  PyBuffer_Release(&data);
  return result;
}

static PyObject *spike_tensor_read(SpikeObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"tensor", "offset", "size", NULL};
  PyObject *arg;
  long long offset = 0, size = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|LL:tensor_read", kwlist, &arg, &offset, &size))
    return NULL;
  NrtTensorObject *tensor;
  if (spike_check_non_negative("offset", offset) < 0 ||
      spike_check_non_negative("size", size) < 0 ||
      spike_check_open(self) < 0 || spike_tensor_arg(arg, "tensor", &tensor) < 0)
    return NULL;
  uint64_t off = (uint64_t)offset, len = (uint64_t)size;
  if (len == 0 && off <= tensor->size) len = tensor->size - off;
  if (spike_check_bounds(tensor, "read", off, len) < 0) return NULL;
  if (len > (uint64_t)PY_SSIZE_T_MAX) return PyErr_NoMemory();
  PyObject *bytes = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)len);
  if (!bytes) return NULL;
  PyObject *ok = tensor_copy_nogil(tensor, NULL, PyBytes_AS_STRING(bytes), off, len);
  if (!ok) {
    Py_DECREF(bytes);
    return NULL;
  }
  Py_DECREF(ok);
  return bytes;
}

/* Gets a C-contiguous buffer (writable if asked); clear errors otherwise. */
int spike_get_contiguous_buffer(PyObject *obj, Py_buffer *view, int writable) {
  int flags = PyBUF_STRIDES | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(obj, view, flags) < 0) {
    if (writable && PyObject_CheckBuffer(obj)) {
      PyErr_Clear();
      PyErr_Format(PyExc_ValueError, "buffer must be writable to read into it, got a read-only %s",
                   Py_TYPE(obj)->tp_name);
    } else if (!PyObject_CheckBuffer(obj)) {
      PyErr_Clear();
      PyErr_Format(PyExc_TypeError,
                   "buffer must support the buffer protocol (bytes, bytearray, memoryview, "
                   "numpy array), got %s",
                   Py_TYPE(obj)->tp_name);
    }
    return -1;
  }
  if (!PyBuffer_IsContiguous(view, 'C')) {
    PyBuffer_Release(view);
    PyErr_SetString(PyExc_ValueError,
                    "buffer must be C-contiguous (use numpy.ascontiguousarray first)");
    return -1;
  }
  return 0;
}

static PyObject *spike_tensor_write_from_pybuffer(SpikeObject *self, PyObject *args,
                                                  PyObject *kwds) {
  static char *kwlist[] = {"tensor", "buffer", "offset", "only_changes", NULL};
  PyObject *arg, *buffer;
  long long offset = 0;
  int only_changes = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|Lp:tensor_write_from_pybuffer", kwlist, &arg,
                                   &buffer, &offset, &only_changes))
    return NULL;
  NrtTensorObject *tensor;
  if (spike_check_non_negative("offset", offset) < 0 || spike_check_open(self) < 0 ||
      spike_tensor_arg(arg, "tensor", &tensor) < 0)
    return NULL;
  Py_buffer view;
  if (spike_get_contiguous_buffer(buffer, &view, 0) < 0) return NULL;
  PyObject *result = NULL;
  if (spike_check_bounds(tensor, "write", (uint64_t)offset, (uint64_t)view.len) == 0)
    result = tensor_copy_nogil_ex(tensor, view.buf, NULL, (uint64_t)offset, (uint64_t)view.len,
                                  only_changes);
  PyBuffer_Release(&view);
  return result;
}

static PyObject *spike_tensor_read_to_pybuffer(SpikeObject *self, PyObject *args,
                                               PyObject *kwds) {
  static char *kwlist[] = {"tensor", "buffer", "offset", "size", NULL};
  PyObject *arg, *buffer;
  long long offset = 0, size = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|LL:tensor_read_to_pybuffer", kwlist, &arg,
                                   &buffer, &offset, &size))
    return NULL;
  NrtTensorObject *tensor;
  if (spike_check_non_negative("offset", offset) < 0 ||
      spike_check_non_negative("size", size) < 0 ||
      spike_check_open(self) < 0 || spike_tensor_arg(arg, "tensor", &tensor) < 0)
    return NULL;
  Py_buffer view;
  if (spike_get_contiguous_buffer(buffer, &view, 1) < 0) return NULL;
  PyObject *result = NULL;
  uint64_t off = (uint64_t)offset, len = (uint64_t)size;
  if (len == 0 && off <= tensor->size) len = tensor->size - off;
  if (spike_check_bounds(tensor, "read", off, len) < 0) goto done;
  if (len > (uint64_t)view.len) {
    PyErr_Format(PyExc_ValueError,
                 "buffer of %zd bytes is too small to read %llu bytes from tensor '%U'",
                 view.len, (unsigned long long)len, tensor->name);
    goto done;
  }
  result = tensor_copy_nogil(tensor, NULL, view.buf, off, len);
done:
  PyBuffer_Release(&view);
  return result;
}

/* ------------------------------------------------------------------------ */
/* Spike: execution                                                          */
/* ------------------------------------------------------------------------ */

/* A mapping str -> NrtTensor as a list of (name, tensor) pairs, checked for
 * types. May run Python code (a custom mapping), so it is called before the
 * runtime lock is taken. `what` names the argument in messages. */
static PyObject *tensor_items(PyObject *mapping, const char *what) {
  PyObject *items = PyMapping_Check(mapping) ? PyMapping_Items(mapping) : NULL;
  if (!items) {
    PyErr_Clear();
    PyErr_Format(PyExc_TypeError, "%s must be a mapping of str to NrtTensor, got %s", what,
                 Py_TYPE(mapping)->tp_name);
    return NULL;
  }
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
    PyObject *pair = PyList_GET_ITEM(items, i);
    PyObject *key = PyTuple_GET_ITEM(pair, 0), *value = PyTuple_GET_ITEM(pair, 1);
    if (!PyUnicode_Check(key)) {
      PyErr_Format(PyExc_TypeError, "%s keys must be tensor names (str), got %s", what,
                   Py_TYPE(key)->tp_name);
      goto fail;
    }
    if (!PyUnicode_AsUTF8(key)) goto fail; /* caches the UTF-8 form */
    if (!PyObject_TypeCheck(value, &NrtTensorType)) {
      PyErr_Format(PyExc_TypeError, "%s['%U'] must be an NrtTensor, got %s", what, key,
                   Py_TYPE(value)->tp_name);
      goto fail;
    }
  }
  return items;
fail:
  Py_DECREF(items);
  return NULL;
}

/* Why building a tensor set failed; raised once the runtime lock is dropped
 * (raising allocates, which may run arbitrary Python code). */
typedef struct {
  nkrt_status_t status;       /* from the runtime */
  NrtTensorObject *bad;       /* a freed or stale tensor (borrowed from items) */
  PyObject *key;              /* its name in the mapping (borrowed) */
  const char *what;           /* "inputs" / "outputs" */
} BuildError;

static void build_error_raise(BuildError *e) {
  if (e->status) {
    spike_nrt_error(e->status);
  } else if (!e->bad->tensor) {
    spike_error("Tensor '%U' is freed (passed as %s['%U'])", e->bad->name, e->what, e->key);
  } else {
    spike_error("Tensor '%U' (%s['%U']) belongs to a runtime that is closed", e->bad->name,
                e->what, e->key);
  }
}

/* Builds a tensor set from checked items. Runs no Python code and raises
 * nothing (see BuildError); called with the GIL and the read lock held. */
static nkrt_tensor_set_t *tensor_set_build(SpikeCtx *ctx, PyObject *items, const char *what,
                                           BuildError *err) {
  nkrt_tensor_set_t *set = NULL;
  err->what = what;
  err->status = nkrt_tensor_set_create(&set);
  if (err->status) return NULL;
  for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
    PyObject *pair = PyList_GET_ITEM(items, i);
    PyObject *key = PyTuple_GET_ITEM(pair, 0);
    NrtTensorObject *t = (NrtTensorObject *)PyTuple_GET_ITEM(pair, 1);
    if (!t->tensor || t->ctx != ctx || t->ctx->closed) {
      err->bad = t;
      err->key = key;
      goto fail;
    }
    err->status = nkrt_tensor_set_add(set, PyUnicode_AsUTF8(key), t->tensor);
    if (err->status) goto fail;
  }
  return set;
fail:
  nkrt_tensor_set_destroy(set);
  return NULL;
}

/* What execute and benchmark share: the model and its two tensor sets,
 * valid between exec_begin and exec_finish. */
typedef struct {
  SpikeCtx *ctx;
  NrtModelObject *model;
  nkrt_model_t *handle;
  nkrt_tensor_set_t *inputs;
  nkrt_tensor_set_t *outputs;
} ExecArgs;

/* Checks the arguments, takes the runtime's read lock, builds the tensor
 * sets and marks the model busy. On success the caller releases the GIL,
 * runs, and calls exec_finish_nogil then exec_done. */
static int exec_begin(SpikeObject *self, PyObject *model_obj, PyObject *inputs,
                      PyObject *outputs, ExecArgs *a) {
  memset(a, 0, sizeof(*a));
  a->ctx = self->ctx;
  if (spike_check_open(self) < 0 || spike_model_arg(model_obj, &a->model) < 0) return -1;
  if (a->model->ctx != self->ctx) {
    spike_error("Model '%U' belongs to another runtime", a->model->name);
    return -1;
  }
  PyObject *in_items = tensor_items(inputs, "inputs");
  if (!in_items) return -1;
  PyObject *out_items = tensor_items(outputs, "outputs");
  if (!out_items) {
    Py_DECREF(in_items);
    return -1;
  }
  int rc = -1;
  BuildError err = {NULL, NULL, NULL, NULL};
  if (spike_ctx_enter(a->ctx) < 0) goto done;
  /* Python code may have run above (a custom mapping): check the model
   * again; everything from here to spike_ctx_leave runs no Python code. */
  if (!a->model->model || a->model->unload_pending) {
    spike_ctx_leave(a->ctx);
    spike_model_get(a->model); /* raises the right SpikeError */
    goto done;
  }
  a->inputs = tensor_set_build(a->ctx, in_items, "inputs", &err);
  if (a->inputs) a->outputs = tensor_set_build(a->ctx, out_items, "outputs", &err);
  if (!a->outputs) {
    nkrt_tensor_set_destroy(a->inputs);
    a->inputs = NULL;
    spike_ctx_leave(a->ctx);
    build_error_raise(&err);
    goto done;
  }
  a->handle = a->model->model;
  a->model->busy++;
  rc = 0;
done:
  Py_DECREF(in_items);
  Py_DECREF(out_items);
  return rc;
}

/* Frees the sets and drops the read lock; runs without the GIL, before the
 * runtime may be destroyed by a concurrent close. */
static void exec_finish_nogil(ExecArgs *a) {
  nkrt_tensor_set_destroy(a->inputs);
  nkrt_tensor_set_destroy(a->outputs);
  a->inputs = a->outputs = NULL;
  spike_ctx_leave(a->ctx);
}

/* With the GIL back: unloads the model if that was asked meanwhile. */
static void exec_done(ExecArgs *a) {
  if (--a->model->busy == 0 && a->model->unload_pending) spike_model_release(a->model);
}

PyObject *spike_execute(SpikeObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"model", "inputs", "outputs", "ntff_name", "save_trace", NULL};
  PyObject *model_obj, *inputs, *outputs;
  PyObject *ntff = NULL;
  int save_trace = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO|O&p:execute", kwlist, &model_obj, &inputs,
                                   &outputs, fs_path_or_none, &ntff, &save_trace))
    return NULL;
  ExecArgs a;
  if (exec_begin(self, model_obj, inputs, outputs, &a) < 0) {
    Py_XDECREF(ntff);
    return NULL;
  }
  const char *trace_path = ntff ? PyBytes_AS_STRING(ntff) : "profile.ntff";
  nkrt_runtime_t *runtime = a.ctx->runtime;
  uint32_t core = a.model->core;
  nkrt_status_t st = NULL, trace_st = NULL;
  Py_BEGIN_ALLOW_THREADS
  nkrt_trace_session_t *session = NULL;
  if (save_trace) trace_st = nkrt_trace_start(runtime, (int32_t)core, &session);
  if (!trace_st) st = nkrt_execute(a.handle, a.inputs, a.outputs);
  if (session) {
    nkrt_trace_stop(session);
    if (!st) trace_st = nkrt_trace_write_chrome(session, trace_path);
    nkrt_trace_destroy(session);
  }
  exec_finish_nogil(&a);
  Py_END_ALLOW_THREADS
  exec_done(&a);
  Py_XDECREF(ntff);
  if (st) {
    nkrt_status_free(trace_st);
    return spike_nrt_error(st);
  }
  if (trace_st) return spike_nrt_error(trace_st);
  Py_RETURN_NONE;
}

/* Runs a loaded model on tensors given by device address (nkrt_execute_at):
 * `count` addresses, its inputs then its outputs (NULL: an aliased output's
 * input). Called with the GIL, released while the kernel runs. 0, or -1 with
 * an exception: SpikeError (unloaded model, closed runtime), ValueError (a
 * wrong count), NrtError (what nkrt refused). Shared by Spike.execute_at and
 * the C API (spike_torch's per-call path). */
int spike_model_execute_at(PyObject *model_obj, void *const *addresses, uint32_t count) {
  NrtModelObject *model;
  if (spike_model_arg(model_obj, &model) < 0) return -1;
  uint32_t expected = nkrt_model_input_count(model->model) +
                      nkrt_model_output_count(model->model);
  if (count != expected) {
    PyErr_Format(PyExc_ValueError,
                 "execute_at: model '%U' takes %u addresses (its inputs, then its outputs), "
                 "got %u", model->name, expected, count);
    return -1;
  }
  SpikeCtx *ctx = model->ctx;
  if (spike_ctx_enter(ctx) < 0) return -1;
  nkrt_model_t *handle = model->model;
  model->busy++;
  nkrt_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = nkrt_execute_at(handle, addresses);
  spike_ctx_leave(ctx);
  Py_END_ALLOW_THREADS
  if (--model->busy == 0 && model->unload_pending) spike_model_release(model);
  if (st) {
    spike_nrt_error(st);
    return -1;
  }
  return 0;
}

PyObject *spike_execute_at(SpikeObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"model", "addresses", NULL};
  PyObject *model_obj, *seq;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO:execute_at", kwlist, &model_obj, &seq))
    return NULL;
  NrtModelObject *model;
  if (spike_check_open(self) < 0 || spike_model_arg(model_obj, &model) < 0) return NULL;
  if (model->ctx != self->ctx) return spike_error("Model '%U' belongs to another runtime",
                                                   model->name);
  PyObject *fast = PySequence_Fast(seq, "execute_at: addresses must be a sequence of ints");
  if (!fast) return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  void **addresses = PyMem_Calloc((size_t)(n ? n : 1), sizeof(void *));
  int rc = addresses ? 0 : -1;
  if (!addresses) PyErr_NoMemory();
  for (Py_ssize_t i = 0; i < n && rc == 0; i++) {
    PyObject *item = PySequence_Fast_GET_ITEM(fast, i);
    if (item == Py_None) continue;
    unsigned long long v = PyLong_Check(item) ? PyLong_AsUnsignedLongLong(item) : 0;
    if (!PyLong_Check(item) || (v == (unsigned long long)-1 && PyErr_Occurred())) {
      PyErr_Clear();
      PyErr_Format(PyExc_TypeError, "execute_at: addresses[%zd] must be a non-negative int "
                   "(a device address) or None, got %R", i, item);
      rc = -1;
    }
    addresses[i] = (void *)(uintptr_t)v;
  }
  if (rc == 0 && n > UINT32_MAX) {
    PyErr_Format(PyExc_ValueError, "execute_at: %zd addresses is too many", n);
    rc = -1;
  }
  if (rc == 0) rc = spike_model_execute_at(model_obj, addresses, (uint32_t)n);
  PyMem_Free(addresses);
  Py_DECREF(fast);
  if (rc < 0) return NULL;
  Py_RETURN_NONE;
}

static double ns_between(const struct timespec *a, const struct timespec *b) {
  return (double)(b->tv_sec - a->tv_sec) * 1e9 + (double)(b->tv_nsec - a->tv_nsec);
}

/* One host<->device copy of execute_staged: `size` bytes between the host
 * address `host` and offset 0 of `tensor`. */
typedef struct {
  nkrt_tensor_t *tensor;
  void *host;
  uint64_t size;
} StagedCopy;

/* Parses a sequence of (NrtTensor, address, nbytes) into `out` (PyMem). */
static Py_ssize_t staged_copies(PyObject *seq, const char *what, StagedCopy **out) {
  *out = NULL;
  PyObject *fast = PySequence_Fast(seq, "execute_staged: writes and reads must be sequences");
  if (!fast) return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
  StagedCopy *c = PyMem_Calloc((size_t)(n ? n : 1), sizeof(StagedCopy));
  if (!c) {
    Py_DECREF(fast);
    PyErr_NoMemory();
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *item = PySequence_Fast_GET_ITEM(fast, i);
    PyObject *tobj;
    unsigned long long address, size;
    if (!PyTuple_Check(item) ||
        !PyArg_ParseTuple(item, "OKK", &tobj, &address, &size)) {
      if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "execute_staged: %s[%zd] must be a tuple (NrtTensor, address, nbytes)",
                     what, i);
      }
      goto fail;
    }
    NrtTensorObject *t;
    if (spike_tensor_arg(tobj, what, &t) < 0 || spike_check_bounds(t, what, 0, size) < 0) goto fail;
    if (size && !address) {
      PyErr_Format(PyExc_ValueError, "execute_staged: %s[%zd] has a NULL host address", what, i);
      goto fail;
    }
    c[i].tensor = t->tensor;
    c[i].host = (void *)(uintptr_t)address;
    c[i].size = size;
  }
  Py_DECREF(fast);
  *out = c;
  return n;
fail:
  Py_DECREF(fast);
  PyMem_Free(c);
  return -1;
}

PyObject *spike_execute_staged(SpikeObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"model", "inputs", "outputs", "writes", "reads", NULL};
  PyObject *model_obj, *inputs, *outputs, *writes_seq, *reads_seq;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOO:execute_staged", kwlist, &model_obj,
                                   &inputs, &outputs, &writes_seq, &reads_seq))
    return NULL;
  StagedCopy *writes = NULL, *reads = NULL;
  Py_ssize_t nw = staged_copies(writes_seq, "writes", &writes);
  if (nw < 0) return NULL;
  Py_ssize_t nr = staged_copies(reads_seq, "reads", &reads);
  if (nr < 0) {
    PyMem_Free(writes);
    return NULL;
  }
  ExecArgs a;
  if (exec_begin(self, model_obj, inputs, outputs, &a) < 0) {
    PyMem_Free(writes);
    PyMem_Free(reads);
    return NULL;
  }
  nkrt_status_t st = NULL;
  struct timespec t0, t1, t2, t3;
  Py_BEGIN_ALLOW_THREADS
  clock_gettime(CLOCK_MONOTONIC, &t0);
  /* inputs written again on every call are often unchanged (weights): only
   * blocks that differ are written, so packed GEMM weights survive */
  for (Py_ssize_t i = 0; i < nw && !st; i++)
    st = nkrt_tensor_update(writes[i].tensor, writes[i].host, 0, writes[i].size, NULL);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (!st) st = nkrt_execute(a.handle, a.inputs, a.outputs);
  clock_gettime(CLOCK_MONOTONIC, &t2);
  for (Py_ssize_t i = 0; i < nr && !st; i++)
    st = nkrt_tensor_read(reads[i].tensor, reads[i].host, 0, reads[i].size);
  clock_gettime(CLOCK_MONOTONIC, &t3);
  exec_finish_nogil(&a);
  Py_END_ALLOW_THREADS
  exec_done(&a);
  PyMem_Free(writes);
  PyMem_Free(reads);
  if (st) return spike_nrt_error(st);
  return Py_BuildValue("(ddd)", ns_between(&t0, &t1), ns_between(&t1, &t2),
                       ns_between(&t2, &t3));
}


PyObject *spike_benchmark(SpikeObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"model", "inputs", "outputs", "warmup_iterations",
                           "benchmark_iterations", NULL};
  PyObject *model_obj, *inputs, *outputs;
  long long warmup = 1, iterations = 1;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO|LL:benchmark", kwlist, &model_obj, &inputs,
                                   &outputs, &warmup, &iterations))
    return NULL;
  if (spike_check_non_negative("warmup_iterations", warmup) < 0) return NULL;
  if (iterations < 1 || iterations > 10000000)
    return PyErr_Format(PyExc_ValueError,
                        "benchmark_iterations must be between 1 and 10000000, got %lld",
                        iterations);
  PyObject *types = PyImport_ImportModule("spike._types");
  if (!types) return NULL;
  PyObject *factory = PyObject_GetAttrString(types, "BenchmarkResult");
  Py_DECREF(types);
  if (!factory) return NULL;
  double *durations = PyMem_RawMalloc((size_t)iterations * sizeof(double));
  if (!durations) {
    Py_DECREF(factory);
    return PyErr_NoMemory();
  }
  PyObject *result = NULL;
  ExecArgs a;
  if (exec_begin(self, model_obj, inputs, outputs, &a) < 0) goto done;
  nkrt_status_t st = NULL;
  Py_BEGIN_ALLOW_THREADS
  for (long long i = 0; i < warmup && !st; i++) st = nkrt_execute(a.handle, a.inputs, a.outputs);
  for (long long i = 0; i < iterations && !st; i++) {
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    st = nkrt_execute(a.handle, a.inputs, a.outputs);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    durations[i] = ns_between(&t0, &t1) / 1e6;
  }
  exec_finish_nogil(&a);
  Py_END_ALLOW_THREADS
  exec_done(&a);
  if (st) {
    spike_nrt_error(st);
    goto done;
  }
  PyObject *list = PyList_New((Py_ssize_t)iterations);
  if (!list) goto done;
  for (long long i = 0; i < iterations; i++) {
    PyObject *v = PyFloat_FromDouble(durations[i]);
    if (!v) {
      Py_DECREF(list);
      goto done;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)i, v);
  }
  result = PyObject_CallMethod(factory, "from_durations", "OL", list, warmup);
  Py_DECREF(list);
done:
  PyMem_RawFree(durations);
  Py_DECREF(factory);
  return result;
}

/* ------------------------------------------------------------------------ */
/* ExecutionEvent and Spike.execute_async                                    */
/* ------------------------------------------------------------------------ */

/* An execution queued by Spike.execute_async. Holds a reference to the nkrt
 * event until its result is collected (wait() or `done` seeing it finished),
 * then keeps the result. The runtime itself retains the bound tensors and the
 * model until the execution is done; the event also keeps the model and the
 * two mappings passed in (and so their NrtTensors) alive until then. After
 * the runtime is closed the nkrt event is gone (close drains the queues and
 * frees every event): nothing touches it any more. */
typedef struct {
  PyObject_HEAD
  SpikeCtx *ctx;
  nkrt_event_t *event;  /* NULL once released (result collected) or the runtime closed */
  PyObject *model_name; /* str */
  PyObject *keep;       /* (model, inputs, outputs) until the result is collected */
  uint64_t id;
  int finished;         /* code/message hold the result */
  int waiting;          /* wait() calls running without the GIL */
  nkrt_code_t code;
  char *message;        /* error message (malloc), NULL on success */
} ExecutionEventObject;

/* Records the execution's result (st is consumed) and, when no other wait is
 * in flight, drops the nkrt event. GIL held. */
static void event_collect(ExecutionEventObject *self, nkrt_status_t st) {
  if (!self->finished) {
    self->finished = 1;
    self->code = nkrt_status_code(st);
    self->message = st ? strdup(nkrt_status_message(st)) : NULL;
    Py_CLEAR(self->keep);
  }
  nkrt_status_free(st);
  if (self->waiting == 0 && self->event) {
    if (!self->ctx->closed) nkrt_event_release(self->event);
    self->event = NULL;
  }
}

/* The collected result: None, or the error Spike.execute would raise. */
static PyObject *event_result(ExecutionEventObject *self) {
  if (self->code == NKRT_SUCCESS) Py_RETURN_NONE;
  return spike_nrt_error(nkrt_status_make(self->code, "%s", self->message ? self->message : ""));
}

static void event_dealloc(ExecutionEventObject *self) {
  if (self->ctx) {
    /* unwaited: the queue holds its own reference, so this is safe at any time */
    if (self->event && !self->ctx->closed) nkrt_event_release(self->event);
    spike_ctx_decref(self->ctx);
  }
  Py_XDECREF(self->model_name);
  Py_XDECREF(self->keep);
  free(self->message);
  PyObject_Free(self);
}

static PyObject *event_wait(ExecutionEventObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"timeout", NULL};
  PyObject *timeout_obj = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:wait", kwlist, &timeout_obj)) return NULL;
  int64_t timeout_ns = -1;
  double timeout = -1.0;
  if (timeout_obj != Py_None) {
    if (PyBool_Check(timeout_obj) || !(PyFloat_Check(timeout_obj) || PyLong_Check(timeout_obj))) {
      PyErr_Format(PyExc_TypeError, "timeout must be a number of seconds or None, got %s",
                   Py_TYPE(timeout_obj)->tp_name);
      return NULL;
    }
    timeout = PyFloat_AsDouble(timeout_obj);
    if (timeout == -1.0 && PyErr_Occurred()) return NULL;
    if (!(timeout >= 0.0)) {
      PyErr_Format(PyExc_ValueError,
                   "timeout must be a non-negative number of seconds or None, got %R",
                   timeout_obj);
      return NULL;
    }
    timeout_ns = timeout * 1e9 >= 9.2e18 ? -1 : (int64_t)(timeout * 1e9);
  }
  if (self->finished) return event_result(self);
  if (self->ctx->closed)
    return spike_error("execution %llu of model '%U' was not waited for before its runtime was "
                       "closed (after Spike.close() or spike.reset()); its result is lost",
                       (unsigned long long)self->id, self->model_name);
  if (spike_ctx_enter(self->ctx) < 0) return NULL;
  nkrt_event_t *ev = self->event;
  self->waiting++;
  nkrt_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = nkrt_event_wait(ev, timeout_ns);
  spike_ctx_leave(self->ctx);
  Py_END_ALLOW_THREADS
  self->waiting--;
  if (nkrt_status_code(st) == NKRT_TIMEOUT) {
    nkrt_status_free(st);
    if (self->finished) return event_result(self); /* another wait collected it meanwhile */
    PyErr_Format(PyExc_TimeoutError, "execution %llu of model '%U' is not done after %R s",
                 (unsigned long long)self->id, self->model_name, timeout_obj);
    return NULL;
  }
  event_collect(self, st);
  return event_result(self);
}

static PyObject *event_get_done(ExecutionEventObject *self, void *c) {
  (void)c;
  if (self->finished || self->ctx->closed || !self->event) Py_RETURN_TRUE;
  if (!nkrt_event_is_done(self->event)) Py_RETURN_FALSE;
  if (self->waiting == 0) event_collect(self, nkrt_event_wait(self->event, 0));
  Py_RETURN_TRUE;
}

static PyObject *event_get_id(ExecutionEventObject *self, void *c) {
  (void)c;
  return PyLong_FromUnsignedLongLong(self->id);
}

static PyObject *event_get_model_name(ExecutionEventObject *self, void *c) {
  (void)c;
  return Py_NewRef(self->model_name);
}

static PyObject *event_repr(ExecutionEventObject *self) {
  PyObject *done = event_get_done(self, NULL);
  if (!done) return NULL;
  PyObject *r = PyUnicode_FromFormat("ExecutionEvent(id=%llu, model=%R, done=%S)",
                                     (unsigned long long)self->id, self->model_name, done);
  Py_DECREF(done);
  return r;
}

static PyMethodDef event_methods[] = {
    {"wait", (PyCFunction)(void (*)(void))event_wait, METH_VARARGS | METH_KEYWORDS,
     "wait(timeout=None) -> None\n\nWaits (without the GIL) until the execution is done, up to "
     "`timeout` seconds (None: no limit). Raises the execution's error as Spike.execute would "
     "(NrtError), TimeoutError when the time runs out (the execution goes on; wait again), and "
     "SpikeError if the runtime was closed before the result was collected. May be called "
     "again: it returns or raises the same result."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef event_getset[] = {
    {"done", (getter)event_get_done, NULL,
     "True once the execution finished (never blocks); also True after the runtime closed.",
     NULL},
    {"id", (getter)event_get_id, NULL,
     "The runtime's id of the execution (the tracking_id in traces).", NULL},
    {"model_name", (getter)event_get_model_name, NULL, "Name of the model executed.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject ExecutionEventType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "spike._spike.ExecutionEvent",
    .tp_basicsize = sizeof(ExecutionEventObject),
    .tp_dealloc = (destructor)event_dealloc,
    .tp_repr = (reprfunc)event_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An execution queued by Spike.execute_async() / SpikeModel.submit(): wait() for "
              "it, poll `done`. Dropping it unwaited is safe (the execution still runs).",
    .tp_methods = event_methods,
    .tp_getset = event_getset,
};

PyObject *spike_execute_async(SpikeObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"model", "inputs", "outputs", NULL};
  PyObject *model_obj, *inputs, *outputs;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO:execute_async", kwlist, &model_obj, &inputs,
                                   &outputs))
    return NULL;
  ExecutionEventObject *obj = PyObject_New(ExecutionEventObject, &ExecutionEventType);
  if (!obj) return NULL;
  obj->ctx = NULL;
  obj->event = NULL;
  obj->model_name = NULL;
  obj->keep = NULL;
  obj->finished = obj->waiting = 0;
  obj->code = NKRT_SUCCESS;
  obj->message = NULL;
  obj->keep = PyTuple_Pack(3, model_obj, inputs, outputs);
  ExecArgs a;
  if (!obj->keep || exec_begin(self, model_obj, inputs, outputs, &a) < 0) {
    Py_DECREF(obj);
    return NULL;
  }
  /* Queued without waiting for anything: no need to drop the GIL. */
  nkrt_event_t *ev = NULL;
  nkrt_status_t st = nkrt_execute_async(a.handle, a.inputs, a.outputs, &ev);
  exec_finish_nogil(&a);
  exec_done(&a);
  if (st) {
    Py_DECREF(obj);
    return spike_nrt_error(st);
  }
  obj->ctx = a.ctx;
  spike_ctx_incref(a.ctx);
  obj->event = ev;
  obj->id = nkrt_event_id(ev);
  obj->model_name = Py_NewRef(a.model->name);
  return (PyObject *)obj;
}

/* ------------------------------------------------------------------------ */
/* Spike: statistics                                                         */
/* ------------------------------------------------------------------------ */

static int dict_set_u64(PyObject *dict, const char *key, uint64_t value) {
  PyObject *v = PyLong_FromUnsignedLongLong(value);
  if (!v) return -1;
  int rc = PyDict_SetItemString(dict, key, v);
  Py_DECREF(v);
  return rc;
}

static PyObject *spike_memory_stats(SpikeObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"core_id", NULL};
  long long core_id = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "|L:memory_stats", kwlist, &core_id)) return NULL;
  if (spike_check_core_id(core_id) < 0 || spike_check_open(self) < 0) return NULL;
  nkrt_memory_stats_t s;
  memset(&s, 0, sizeof(s));
  s.struct_size = sizeof(s);
  nkrt_status_t st = nkrt_memory_stats(self->ctx->runtime, (uint32_t)core_id, &s);
  if (st) return spike_nrt_error(st);
  PyObject *d = PyDict_New();
  if (!d) return NULL;
  if (dict_set_u64(d, "core", s.core) < 0 || dict_set_u64(d, "capacity_bytes", s.capacity_bytes) < 0 ||
      dict_set_u64(d, "allocated_bytes", s.allocated_bytes) < 0 ||
      dict_set_u64(d, "peak_allocated_bytes", s.peak_allocated_bytes) < 0 ||
      dict_set_u64(d, "reserved_bytes", s.reserved_bytes) < 0 ||
      dict_set_u64(d, "peak_reserved_bytes", s.peak_reserved_bytes) < 0 ||
      dict_set_u64(d, "active_allocations", s.active_allocations) < 0 ||
      dict_set_u64(d, "total_allocations", s.total_allocations) < 0 ||
      dict_set_u64(d, "total_frees", s.total_frees) < 0 ||
      dict_set_u64(d, "oom_count", s.oom_count) < 0 ||
      dict_set_u64(d, "free_blocks", s.free_blocks) < 0 ||
      dict_set_u64(d, "largest_free_block", s.largest_free_block) < 0) {
    Py_DECREF(d);
    return NULL;
  }
  return d;
}

static PyObject *spike_memory_reset_peak(SpikeObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"core_id", NULL};
  long long core_id = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "|L:memory_reset_peak", kwlist, &core_id))
    return NULL;
  if (spike_check_core_id(core_id) < 0 || spike_check_open(self) < 0) return NULL;
  nkrt_status_t st = nkrt_memory_reset_peak(self->ctx->runtime, (uint32_t)core_id);
  if (st) return spike_nrt_error(st);
  Py_RETURN_NONE;
}

static PyObject *spike_gemm_pack_stats(SpikeObject *self, PyObject *unused) {
  (void)unused;
  if (spike_check_open(self) < 0) return NULL;
  nkrt_gemm_pack_stats_t s;
  nkrt_status_t st = nkrt_gemm_pack_stats(self->ctx->runtime, &s);
  if (st) return spike_nrt_error(st);
  PyObject *d = PyDict_New();
  if (!d) return NULL;
  if (dict_set_u64(d, "packed_matrices", s.packed_matrices) < 0 ||
      dict_set_u64(d, "packed_bytes", s.packed_bytes) < 0 ||
      dict_set_u64(d, "limit_bytes", s.limit_bytes) < 0 || dict_set_u64(d, "hits", s.hits) < 0 ||
      dict_set_u64(d, "packs", s.packs) < 0 ||
      dict_set_u64(d, "invalidations", s.invalidations) < 0 ||
      dict_set_u64(d, "evictions", s.evictions) < 0) {
    Py_DECREF(d);
    return NULL;
  }
  return d;
}

/* ------------------------------------------------------------------------ */
/* Spike type                                                                */
/* ------------------------------------------------------------------------ */

#define KW (METH_VARARGS | METH_KEYWORDS)

static PyMethodDef spike_methods[] = {
    {"get_visible_neuron_core_count", (PyCFunction)spike_get_visible_core_count,
     METH_NOARGS | METH_STATIC,
     "get_visible_neuron_core_count() -> int\n\nCores a runtime created now would see "
     "(NEURON_RT_VISIBLE_CORES, else all). Needs no runtime."},
    {"close", (PyCFunction)spike_close, METH_NOARGS,
     "close() -> int\n\nDestroys the runtime; every tensor and model it made becomes invalid. "
     "Returns 0. Idempotent."},
    {"load_model", (PyCFunction)(void (*)(void))spike_load_model, KW,
     "load_model(neff_file, core_id=0, cc_enabled=False, rank_id=0, world_size=1, name=None) "
     "-> NrtModel\n\nLoads a NEFF on a logical core."},
    {"unload_model", (PyCFunction)(void (*)(void))spike_unload_model, KW,
     "unload_model(model) -> None\n\nUnloads a model (after any running execution)."},
    {"get_tensor_info", (PyCFunction)(void (*)(void))spike_get_tensor_info, KW,
     "get_tensor_info(model) -> ModelTensorInfo\n\nThe model's inputs and outputs by name."},
    {"allocate_tensor", (PyCFunction)(void (*)(void))spike_allocate_tensor, KW,
     "allocate_tensor(size, core_id=0, name=None) -> NrtTensor\n\nAllocates `size` bytes of "
     "device memory (name defaults to 'unnamed_tensor')."},
    {"slice_from_tensor", (PyCFunction)(void (*)(void))spike_slice_from_tensor, KW,
     "slice_from_tensor(source, offset=0, size=0, name=None) -> NrtTensor\n\nA non-owning "
     "window of `source`; size 0 means to the end."},
    {"slice_from_address", (PyCFunction)(void (*)(void))spike_slice_from_address, KW,
     "slice_from_address(address, size=0, name=None) -> NrtTensor\n\nA non-owning window "
     "of the live allocation containing the device address `address` (range lookup), from "
     "that address; size 0 means to the end of the allocation. Keeps the allocation alive."},
    {"lookup_address", (PyCFunction)spike_lookup_address, METH_O,
     "lookup_address(address) -> (base_address, size, core_id)\n\nThe live allocation "
     "containing the device address (any byte inside it); NrtError if none."},
    {"free_tensor", (PyCFunction)(void (*)(void))spike_free_tensor, KW,
     "free_tensor(tensor) -> None\n\nFrees the tensor now; any later use raises SpikeError."},
    {"tensor_write", (PyCFunction)(void (*)(void))spike_tensor_write, KW,
     "tensor_write(tensor, data: bytes, offset=0) -> None\n\nCopies bytes to the device."},
    {"tensor_read", (PyCFunction)(void (*)(void))spike_tensor_read, KW,
     "tensor_read(tensor, offset=0, size=0) -> bytes\n\nCopies bytes from the device; size 0 "
     "means to the end."},
    {"tensor_write_from_pybuffer", (PyCFunction)(void (*)(void))spike_tensor_write_from_pybuffer,
     KW,
     "tensor_write_from_pybuffer(tensor, buffer, offset=0, only_changes=False) -> None\n\n"
     "Copies a C-contiguous buffer (e.g. a NumPy array) straight to the device, without the "
     "GIL. With only_changes, compares first and writes only the 16 KiB blocks that differ "
     "(nkrt_tensor_update: unchanged weights keep their packed GEMM copies)."},
    {"tensor_read_to_pybuffer", (PyCFunction)(void (*)(void))spike_tensor_read_to_pybuffer, KW,
     "tensor_read_to_pybuffer(tensor, buffer, offset=0, size=0) -> None\n\nCopies device bytes "
     "straight into a writable C-contiguous buffer, without the GIL; size 0 means to the end."},
    {"execute_staged", (PyCFunction)(void (*)(void))spike_execute_staged, KW,
     "execute_staged(model, inputs, outputs, writes, reads) -> (write_ns, execute_ns, "
     "read_ns)\n\nOne call for the common host round trip, without the GIL: copies each "
     "(NrtTensor, host_address, nbytes) of writes into its tensor, runs the model with the "
     "name-keyed sets, then copies each (NrtTensor, host_address, nbytes) of reads out. The "
     "addresses are raw host pointers: the caller keeps that memory alive and at least "
     "nbytes long for the call (e.g. a CPU torch tensor's data_ptr()). Returns the time of "
     "each phase in nanoseconds."},
    {"execute", (PyCFunction)(void (*)(void))spike_execute, KW,
     "execute(model, inputs, outputs, ntff_name=None, save_trace=False) -> None\n\nRuns the "
     "model once with name-keyed tensors, without the GIL. With save_trace, writes a Chrome "
     "trace of the execution to ntff_name (default 'profile.ntff')."},
    {"execute_at", (PyCFunction)(void (*)(void))spike_execute_at, KW,
     "execute_at(model, addresses) -> None\n\nRuns the model once with its tensors given by "
     "device address: one int per input, then one per output (None for an aliased output: "
     "its input), in the model's order (get_tensor_info). Each tensor may be any part of a "
     "live allocation on the model's core (slice_from_address's memory); no tensor objects "
     "are made. The caller keeps the memory alive during the call."},
    {"execute_async", (PyCFunction)(void (*)(void))spike_execute_async, KW,
     "execute_async(model, inputs, outputs) -> ExecutionEvent\n\nQueues one execution on the "
     "model's core and returns at once. Arguments as execute(); the tensors are bound (and "
     "retained by the runtime) now, so the mappings may change right after. Synchronous copies "
     "(tensor_read, tensor_write, ...) of bytes the execution uses wait for it; wait on the "
     "event to get its error."},
    {"tensor_copy", (PyCFunction)(void (*)(void))spike_tensor_copy, KW,
     "tensor_copy(src, src_offset, dst, dst_offset, size) -> None\n\nCopies size bytes from "
     "one tensor to another (or within one; overlap allowed), without the GIL."},
    {"tensor_memset", (PyCFunction)(void (*)(void))spike_tensor_memset, KW,
     "tensor_memset(tensor, value, offset=0, size=0) -> None\n\nFills bytes with value "
     "(0-255); size 0 means to the end."},
    {"tensor_write_2d", (PyCFunction)(void (*)(void))spike_tensor_write_2d, KW,
     "tensor_write_2d(tensor, buffer, dst_offset, dst_pitch, row_bytes, rows, src_pitch=None) "
     "-> None\n\nCopies `rows` rows of `row_bytes` bytes from a C-contiguous buffer (rows "
     "src_pitch apart, default row_bytes; 0 repeats one row) to the tensor (rows dst_pitch "
     "apart from dst_offset), without the GIL."},
    {"tensor_read_2d", (PyCFunction)(void (*)(void))spike_tensor_read_2d, KW,
     "tensor_read_2d(tensor, buffer, src_offset, src_pitch, row_bytes, rows, dst_pitch=None) "
     "-> None\n\nCopies `rows` rows of `row_bytes` bytes from the tensor (rows src_pitch apart "
     "from src_offset) into a writable C-contiguous buffer (rows dst_pitch apart, default "
     "row_bytes), without the GIL."},
    {"tensor_copy_2d", (PyCFunction)(void (*)(void))spike_tensor_copy_2d, KW,
     "tensor_copy_2d(src, src_offset, src_pitch, dst, dst_offset, dst_pitch, row_bytes, rows) "
     "-> None\n\nCopies `rows` rows of `row_bytes` bytes between tensors (e.g. padding into a "
     "wider bucket), without the GIL. Overlapping extents need equal pitches."},
    {"tensor_memset_2d", (PyCFunction)(void (*)(void))spike_tensor_memset_2d, KW,
     "tensor_memset_2d(tensor, value, offset, pitch, row_bytes, rows) -> None\n\nFills `rows` "
     "rows of `row_bytes` bytes, `pitch` apart from offset, with value (0-255)."},
    {"benchmark", (PyCFunction)(void (*)(void))spike_benchmark, KW,
     "benchmark(model, inputs, outputs, warmup_iterations=1, benchmark_iterations=1) -> "
     "BenchmarkResult\n\nTimes each execution on the host clock, without the GIL."},
    {"memory_stats", (PyCFunction)(void (*)(void))spike_memory_stats, KW,
     "memory_stats(core_id=0) -> dict\n\nDevice-memory statistics of a core."},
    {"memory_reset_peak", (PyCFunction)(void (*)(void))spike_memory_reset_peak, KW,
     "memory_reset_peak(core_id=0) -> None\n\nResets the peak statistics of a core."},
    {"gemm_pack_stats", (PyCFunction)spike_gemm_pack_stats, METH_NOARGS,
     "gemm_pack_stats() -> dict\n\nThe runtime's GEMM weights packed once (docs/gemm.md): "
     "packed_matrices, packed_bytes, limit_bytes, hits, packs, invalidations, evictions."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef spike_getset[] = {
    {"closed", (getter)spike_get_closed, NULL, "True after close().", NULL},
    {"verbose_level", (getter)spike_get_verbose_level, NULL, "Verbosity given at creation.",
     NULL},
    {"core_count", (getter)spike_get_core_count, NULL, "Visible cores of this runtime.", NULL},
    {"num_workers", (getter)spike_get_num_workers, NULL, "Worker threads kernels use.", NULL},
    {"core_memory_bytes", (getter)spike_get_core_memory, NULL, "Device memory per core.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject SpikeType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "spike._spike.Spike",
    .tp_basicsize = sizeof(SpikeObject),
    .tp_dealloc = (destructor)spike_dealloc,
    .tp_repr = (reprfunc)spike_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Spike(verbose_level=0, *, core_memory_bytes=None, num_workers=None)\n\n"
              "The device runtime (one live instance per process). Visible cores come from "
              "NEURON_RT_VISIBLE_CORES. Deleting it keeps the runtime alive for the tensors and "
              "models it made; close() ends it at once.",
    .tp_methods = spike_methods,
    .tp_getset = spike_getset,
    .tp_new = spike_new,
};

/* ------------------------------------------------------------------------ */
/* Module                                                                    */
/* ------------------------------------------------------------------------ */

static PyObject *module_ensure_usable(PyObject *module, PyObject *obj) {
  (void)module;
  if (PyObject_TypeCheck(obj, &NrtTensorType)) {
    if (!spike_tensor_get((NrtTensorObject *)obj)) return NULL;
  } else if (PyObject_TypeCheck(obj, &NrtModelType)) {
    if (!spike_model_get((NrtModelObject *)obj)) return NULL;
  } else {
    return PyErr_Format(PyExc_TypeError, "expected an NrtTensor or NrtModel, got %s",
                        Py_TYPE(obj)->tp_name);
  }
  Py_RETURN_NONE;
}

/* ------------------------------------------------------------------------ */
/* The exported C API (spike/include/spike_capi.h)                          */
/* ------------------------------------------------------------------------ */

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
};

PyObject *spike_module_nkrt_capi(PyObject *module, PyObject *unused) {
  (void)module;
  (void)unused;
  return PyCapsule_New((void *)&g_capi, SPIKE_CAPI_CAPSULE, NULL);
}

static PyObject *module_gemm_provider(PyObject *module, PyObject *unused) {
  (void)module;
  (void)unused;
  const char *name;
  Py_BEGIN_ALLOW_THREADS
  name = nkrt_gemm_provider(); /* may load the GEMM library on first use */
  Py_END_ALLOW_THREADS
  return PyUnicode_FromString(name ? name : "");
}

static PyMethodDef module_methods[] = {
    {"gemm_provider", module_gemm_provider, METH_NOARGS,
     "gemm_provider() -> str\n\nThe library serving kernels' matrix products (\"mkl\" or "
     "\"reference\"), chosen at first use; see docs/gemm.md."},
    {"ensure_usable", module_ensure_usable, METH_O,
     "ensure_usable(obj) -> None\n\nRaises SpikeError if the NrtTensor is freed, the NrtModel "
     "unloaded, or their runtime closed; needs no Spike instance."},
    {"_nkrt_capi", spike_module_nkrt_capi, METH_NOARGS,
     "_nkrt_capi() -> capsule\n\nThe C function table of spike_capi.h (capsule name "
     "'" SPIKE_CAPI_CAPSULE "'), for native modules that share this process's runtime."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef spike_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "spike._spike",
    .m_methods = module_methods,
    .m_doc = "CPython binding of the nkrt device runtime: Spike, NrtTensor, NrtModel, "
             "SystemTraceSession and the spike error classes.",
    .m_size = -1,
};

static int add_type(PyObject *m, PyTypeObject *type, const char *name) {
  if (PyType_Ready(type) < 0) return -1;
  Py_INCREF(type);
  if (PyModule_AddObject(m, name, (PyObject *)type) < 0) {
    Py_DECREF(type);
    return -1;
  }
  return 0;
}

static int add_object(PyObject *m, const char *name, PyObject *obj) {
  if (!obj) return -1;
  Py_INCREF(obj);
  if (PyModule_AddObject(m, name, obj) < 0) {
    Py_DECREF(obj);
    return -1;
  }
  return 0;
}

PyMODINIT_FUNC PyInit__spike(void) {
  PyObject *m = PyModule_Create(&spike_module);
  if (!m) return NULL;
  if (!SpikeRuntimeError) {
    SpikeRuntimeError = PyErr_NewExceptionWithDoc(
        "spike._spike.SpikeRuntimeError", "Base class of every spike runtime error.",
        PyExc_RuntimeError, NULL);
    if (!SpikeRuntimeError) goto fail;
    SpikeError = PyErr_NewExceptionWithDoc(
        "spike._spike.SpikeError",
        "A spike-level error: use after free or close, bounds, a second runtime.",
        SpikeRuntimeError, NULL);
    if (!SpikeError) goto fail;
    PyObject *attrs = Py_BuildValue("{s:O,s:O}", "status_code", Py_None, "status_name", Py_None);
    if (!attrs) goto fail;
    NrtError = PyErr_NewExceptionWithDoc(
        "spike._spike.NrtError",
        "An error status from the nkrt runtime; `status_code` (int) and `status_name` "
        "(e.g. 'NRT_RESOURCE') carry it.",
        SpikeRuntimeError, attrs);
    Py_DECREF(attrs);
    if (!NrtError) goto fail;
    if (!TensorMetadataType.tp_name &&
        PyStructSequence_InitType2(&TensorMetadataType, &spike_tensor_metadata_desc) < 0)
      goto fail;
    if (!ModelTensorInfoType.tp_name &&
        PyStructSequence_InitType2(&ModelTensorInfoType, &spike_model_tensor_info_desc) < 0)
      goto fail;
    Py_AtExit(spike_at_exit);
  }
  if (add_object(m, "SpikeRuntimeError", SpikeRuntimeError) < 0 ||
      add_object(m, "SpikeError", SpikeError) < 0 || add_object(m, "NrtError", NrtError) < 0 ||
      add_type(m, &SpikeType, "Spike") < 0 || add_type(m, &NrtTensorType, "NrtTensor") < 0 ||
      add_type(m, &NrtModelType, "NrtModel") < 0 ||
      add_type(m, &TraceSessionType, "SystemTraceSession") < 0 ||
      add_type(m, &ExecutionEventType, "ExecutionEvent") < 0 ||
      add_object(m, "TensorMetadata", (PyObject *)&TensorMetadataType) < 0 ||
      add_object(m, "ModelTensorInfo", (PyObject *)&ModelTensorInfoType) < 0)
    goto fail;
  if (PyModule_AddObject(m, "nkrt_capi", spike_module_nkrt_capi(m, NULL)) < 0) goto fail;
  if (PyModule_AddIntConstant(m, "TOTAL_CORES", NKRT_TOTAL_CORES) < 0 ||
      PyModule_AddIntConstant(m, "NEFF_ABI_VERSION", NKRT_NEFF_ABI_VERSION) < 0 ||
      PyModule_AddIntConstant(m, "ALIGNMENT", NKRT_ALIGNMENT) < 0)
    goto fail;
  return m;
fail:
  Py_DECREF(m);
  return NULL;
}
