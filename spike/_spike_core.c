/* spike/_spike_core.c - the Spike runtime object and the context it shares.
 *
 * The shared runtime context (SpikeCtx: the nkrt runtime, its `closed` flag
 * and lock), and the Spike type: its lifecycle (creation, close), models
 * (load, unload, tensor info), tensors (allocate, slice, free, host reads
 * and writes), statistics, and its method table, which also lists the copies
 * (_spike_copy.c) and executions (_spike_exec.c).
 */
#include "_spike_internal.h"

/* ------------------------------------------------------------------------ */
/* The shared runtime context                                                */
/* ------------------------------------------------------------------------ */

/* The context of the live (not closed) runtime, if any: one per process. */
SpikeCtx *g_live_ctx;

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
  __atomic_store_n(&ctx->closed, 1, __ATOMIC_RELEASE); /* from here on nothing new starts */
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
  if (model->busy) /* the last execution unloads it */
    __atomic_store_n(&model->unload_pending, 1, __ATOMIC_RELAXED);
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
