/* spike/_spike_objects.c - the objects a Spike runtime hands out.
 *
 * NrtTensor (a named range of device memory), NrtModel (a loaded NEFF), the
 * TensorMetadata / ModelTensorInfo struct sequences that describe a model's
 * inputs and outputs, and SystemTraceSession; with the helpers the Spike
 * methods use to check and wrap them. Each object holds a reference to its
 * runtime's SpikeCtx (_spike_internal.h) and is inert once that is closed.
 */
#include "_spike_internal.h"

/* ------------------------------------------------------------------------ */
/* Helpers for the objects                                                   */
/* ------------------------------------------------------------------------ */

int spike_check_open(SpikeObject *self) { return spike_ctx_check(self->ctx); }

/* The live nkrt tensor of `obj`, or NULL with SpikeError (freed, closed). */
nkrt_tensor_t *spike_tensor_get(NrtTensorObject *obj) {
  if (!obj->tensor) {
    spike_error("Tensor '%U' is freed; it cannot be used after free_tensor()", obj->name);
    return NULL;
  }
  if (obj->ctx->closed) {
    spike_error("Tensor '%U' belongs to a runtime that is closed (after Spike.close() or "
                "spike.reset()); create a new tensor",
                obj->name);
    return NULL;
  }
  return obj->tensor;
}

int spike_tensor_arg(PyObject *arg, const char *what, NrtTensorObject **out) {
  if (!PyObject_TypeCheck(arg, &NrtTensorType)) {
    PyErr_Format(PyExc_TypeError, "%s must be an NrtTensor, got %s", what, Py_TYPE(arg)->tp_name);
    return -1;
  }
  *out = (NrtTensorObject *)arg;
  return spike_tensor_get(*out) ? 0 : -1;
}

nkrt_model_t *spike_model_get(NrtModelObject *obj) {
  if (!obj->model || obj->unload_pending) {
    spike_error("Model '%U' is unloaded; load it again with load_model()", obj->name);
    return NULL;
  }
  if (obj->ctx->closed) {
    spike_error("Model '%U' belongs to a runtime that is closed (after Spike.close() or "
                "spike.reset()); load it again",
                obj->name);
    return NULL;
  }
  return obj->model;
}

int spike_model_arg(PyObject *arg, NrtModelObject **out) {
  if (!PyObject_TypeCheck(arg, &NrtModelType)) {
    PyErr_Format(PyExc_TypeError, "model must be an NrtModel, got %s", Py_TYPE(arg)->tp_name);
    return -1;
  }
  *out = (NrtModelObject *)arg;
  return spike_model_get(*out) ? 0 : -1;
}

/* Wraps a new nkrt tensor (reference taken over) in an NrtTensor. */
PyObject *spike_tensor_wrap(SpikeCtx *ctx, nkrt_tensor_t *tensor) {
  NrtTensorObject *obj = PyObject_New(NrtTensorObject, &NrtTensorType);
  if (!obj) {
    nkrt_tensor_free(&tensor);
    return NULL;
  }
  obj->name = PyUnicode_FromString(nkrt_tensor_name(tensor));
  if (!obj->name) {
    obj->ctx = NULL;
    obj->tensor = NULL;
    nkrt_tensor_free(&tensor);
    Py_DECREF(obj);
    return NULL;
  }
  obj->ctx = ctx;
  spike_ctx_incref(ctx);
  obj->tensor = tensor;
  obj->size = nkrt_tensor_size(tensor);
  obj->core = nkrt_tensor_core(tensor);
  obj->is_slice = nkrt_tensor_is_slice(tensor);
  return (PyObject *)obj;
}

/* Drops a model that has no execution in flight. */
void spike_model_release(NrtModelObject *obj) {
  /* waits for runs without the GIL (the C API's model_run_at), which read the
   * handle under the context's lock; with the GIL held throughout, as GIL
   * holders read the handle (no holder of the read lock waits for the GIL) */
  pthread_rwlock_wrlock(&obj->ctx->lock);
  if (obj->model && !obj->ctx->closed) nkrt_model_unload(obj->model);
  obj->model = NULL;
  obj->unload_pending = 0;
  pthread_rwlock_unlock(&obj->ctx->lock);
}

/* ------------------------------------------------------------------------ */
/* NrtTensor                                                                 */
/* ------------------------------------------------------------------------ */

static void tensor_dealloc(NrtTensorObject *self) {
  if (self->ctx) {
    if (self->tensor && !self->ctx->closed) nkrt_tensor_free(&self->tensor);
    spike_ctx_decref(self->ctx);
  }
  Py_XDECREF(self->name);
  PyObject_Free(self);
}

static PyObject *tensor_get_core_id(NrtTensorObject *self, void *c) {
  (void)c;
  return PyLong_FromUnsignedLong(self->core);
}

static PyObject *tensor_get_size(NrtTensorObject *self, void *c) {
  (void)c;
  return PyLong_FromUnsignedLongLong(self->size);
}

static PyObject *tensor_get_name(NrtTensorObject *self, void *c) {
  (void)c;
  return Py_NewRef(self->name);
}

static PyObject *tensor_get_va(NrtTensorObject *self, void *c) {
  (void)c;
  nkrt_tensor_t *tensor = spike_tensor_get(self);
  if (!tensor) return NULL;
  return PyLong_FromVoidPtr(nkrt_tensor_va(tensor));
}

static PyObject *tensor_get_is_slice(NrtTensorObject *self, void *c) {
  (void)c;
  return PyBool_FromLong(self->is_slice);
}

static PyObject *tensor_get_freed(NrtTensorObject *self, void *c) {
  (void)c;
  return PyBool_FromLong(self->tensor == NULL);
}

static PyObject *tensor_repr(NrtTensorObject *self) {
  const char *state = !self->tensor ? ", freed" : (self->ctx->closed ? ", runtime closed" : "");
  return PyUnicode_FromFormat("NrtTensor(name=%R, size=%llu, core_id=%u%s%s)", self->name,
                              (unsigned long long)self->size, (unsigned)self->core,
                              self->is_slice ? ", slice" : "", state);
}

static PyGetSetDef tensor_getset[] = {
    {"core_id", (getter)tensor_get_core_id, NULL, "Logical core the tensor lives on.", NULL},
    {"size", (getter)tensor_get_size, NULL, "Size in bytes.", NULL},
    {"name", (getter)tensor_get_name, NULL, "Name given at allocation.", NULL},
    {"va", (getter)tensor_get_va, NULL,
     "Host-visible device address of the first byte (an int). Only kernels and the runtime "
     "may touch that memory.",
     NULL},
    {"is_slice", (getter)tensor_get_is_slice, NULL, "True for a slice of another tensor.", NULL},
    {"freed", (getter)tensor_get_freed, NULL, "True after Spike.free_tensor().", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject NrtTensorType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "spike._spike.NrtTensor",
    .tp_basicsize = sizeof(NrtTensorObject),
    .tp_dealloc = (destructor)tensor_dealloc,
    .tp_repr = (reprfunc)tensor_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A device tensor: a named byte range of device memory on one core. Created by "
              "Spike.allocate_tensor() or Spike.slice_from_tensor(); its memory is freed when "
              "the object is deleted or by Spike.free_tensor().",
    .tp_getset = tensor_getset,
};

/* ------------------------------------------------------------------------ */
/* NrtModel                                                                  */
/* ------------------------------------------------------------------------ */

static void model_dealloc(NrtModelObject *self) {
  if (self->ctx) {
    spike_model_release(self);
    spike_ctx_decref(self->ctx);
  }
  Py_XDECREF(self->neff_path);
  Py_XDECREF(self->name);
  PyObject_Free(self);
}

static PyObject *model_get_neff_path(NrtModelObject *self, void *c) {
  (void)c;
  return Py_NewRef(self->neff_path);
}
static PyObject *model_get_name(NrtModelObject *self, void *c) {
  (void)c;
  return Py_NewRef(self->name);
}
static PyObject *model_get_core_id(NrtModelObject *self, void *c) {
  (void)c;
  return PyLong_FromUnsignedLong(self->core);
}
static PyObject *model_get_rank_id(NrtModelObject *self, void *c) {
  (void)c;
  return PyLong_FromLong(self->rank);
}
static PyObject *model_get_world_size(NrtModelObject *self, void *c) {
  (void)c;
  return PyLong_FromLong(self->world_size);
}
static PyObject *model_get_is_collective(NrtModelObject *self, void *c) {
  (void)c;
  return PyBool_FromLong(self->cc_enabled);
}
static PyObject *model_get_loaded(NrtModelObject *self, void *c) {
  (void)c;
  return PyBool_FromLong(self->model && !self->unload_pending && !self->ctx->closed);
}

static PyObject *model_repr(NrtModelObject *self) {
  const char *state = (!self->model || self->unload_pending)
                          ? ", unloaded"
                          : (self->ctx->closed ? ", runtime closed" : "");
  return PyUnicode_FromFormat("NrtModel(name=%R, neff_path=%R, core_id=%u%s)", self->name,
                              self->neff_path, (unsigned)self->core, state);
}

static PyGetSetDef model_getset[] = {
    {"neff_path", (getter)model_get_neff_path, NULL, "Path the NEFF was loaded from.", NULL},
    {"name", (getter)model_get_name, NULL, "Model name (load name or the NEFF's kernel name).",
     NULL},
    {"core_id", (getter)model_get_core_id, NULL, "Logical core the model runs on.", NULL},
    {"rank_id", (getter)model_get_rank_id, NULL, "Rank in the collective group.", NULL},
    {"world_size", (getter)model_get_world_size, NULL, "Ranks in the collective group.", NULL},
    {"is_collective", (getter)model_get_is_collective, NULL,
     "True when loaded with cc_enabled=True.", NULL},
    {"loaded", (getter)model_get_loaded, NULL, "False after unload_model() or runtime close.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject NrtModelType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "spike._spike.NrtModel",
    .tp_basicsize = sizeof(NrtModelObject),
    .tp_dealloc = (destructor)model_dealloc,
    .tp_repr = (reprfunc)model_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A NEFF loaded on one core by Spike.load_model(); unloaded when deleted or by "
              "Spike.unload_model().",
    .tp_getset = model_getset,
};

/* ------------------------------------------------------------------------ */
/* TensorMetadata / ModelTensorInfo                                          */
/* ------------------------------------------------------------------------ */

static PyStructSequence_Field tensor_metadata_fields[] = {
    {"size", "size in bytes"},
    {"dtype", "element type name, e.g. 'float32'"},
    {"shape", "list of extents"},
    {"alias_of", "for an output: the name of the input it aliases, else None"},
    {NULL, NULL},
};

PyStructSequence_Desc spike_tensor_metadata_desc = {
    "spike._spike.TensorMetadata", "Size, dtype and shape of one model input or output.",
    tensor_metadata_fields, 4};

static PyStructSequence_Field model_tensor_info_fields[] = {
    {"inputs", "dict: input name -> TensorMetadata"},
    {"outputs", "dict: output name -> TensorMetadata"},
    {NULL, NULL},
};

PyStructSequence_Desc spike_model_tensor_info_desc = {
    "spike._spike.ModelTensorInfo", "The inputs and outputs of a loaded model, by name.",
    model_tensor_info_fields, 2};

PyTypeObject TensorMetadataType;
PyTypeObject ModelTensorInfoType;

PyObject *spike_tensor_metadata_new(const nkrt_neff_tensor_t *t, const nkrt_model_t *model) {
  PyObject *md = PyStructSequence_New(&TensorMetadataType);
  if (!md) return NULL;
  PyObject *shape = PyList_New(t->ndim); /* a list, as the original's TensorMetadata */
  if (!shape) goto fail;
  PyStructSequence_SetItem(md, 2, shape);
  for (uint32_t i = 0; i < t->ndim; i++) {
    PyObject *dim = PyLong_FromLongLong(t->shape[i]);
    if (!dim) goto fail;
    PyList_SET_ITEM(shape, i, dim);
  }
  PyObject *size = PyLong_FromUnsignedLongLong(t->size);
  if (!size) goto fail;
  PyStructSequence_SetItem(md, 0, size);
  PyObject *dtype = PyUnicode_FromString(nkrt_dtype_name(t->dtype));
  if (!dtype) goto fail;
  PyStructSequence_SetItem(md, 1, dtype);
  PyObject *alias = Py_None;
  const nkrt_neff_tensor_t *input = NULL;
  if (model && t->alias_input >= 0) input = nkrt_model_input(model, (uint32_t)t->alias_input);
  if (input) {
    alias = PyUnicode_FromString(input->name);
    if (!alias) goto fail;
  } else {
    Py_INCREF(alias);
  }
  PyStructSequence_SetItem(md, 3, alias);
  return md;
fail:
  Py_DECREF(md);
  return NULL;
}

/* ------------------------------------------------------------------------ */
/* SystemTraceSession                                                        */
/* ------------------------------------------------------------------------ */

static void trace_session_unlink(TraceSessionObject *s) {
  if (s->prev) s->prev->next = s->next;
  else if (s->ctx && s->ctx->sessions == s) s->ctx->sessions = s->next;
  if (s->next) s->next->prev = s->prev;
  s->prev = s->next = NULL;
}

/* Called by ctx_close before the runtime goes: sessions are freed first. */
void spike_trace_sessions_detach_all(SpikeCtx *ctx) {
  while (ctx->sessions) {
    TraceSessionObject *s = ctx->sessions;
    nkrt_trace_destroy(s->session);
    s->session = NULL;
    s->stopped = 1;
    trace_session_unlink(s);
  }
}

static nkrt_trace_session_t *trace_get(TraceSessionObject *self) {
  if (!self->session || self->ctx->closed) {
    spike_error("the trace session's runtime is closed (after Spike.close() or spike.reset())");
    return NULL;
  }
  return self->session;
}

static PyObject *trace_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"spike", "core_id", NULL};
  PyObject *spike_arg = Py_None, *core_arg = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "|OO:SystemTraceSession", kwlist, &spike_arg,
                                   &core_arg))
    return NULL;
  /* SystemTraceSession(0) means core 0, as in the original API. */
  if (core_arg == Py_None && spike_arg != Py_None && !PyObject_TypeCheck(spike_arg, &SpikeType)) {
    core_arg = spike_arg;
    spike_arg = Py_None;
  }
  SpikeCtx *ctx;
  if (spike_arg == Py_None) {
    if (!g_live_ctx)
      return spike_error("SystemTraceSession needs a runtime: no Spike runtime is active "
                         "(create one with spike.get_spike_singleton() or Spike())");
    ctx = g_live_ctx;
  } else if (PyObject_TypeCheck(spike_arg, &SpikeType)) {
    ctx = ((SpikeObject *)spike_arg)->ctx;
  } else {
    return PyErr_Format(PyExc_TypeError, "spike must be a Spike instance or None, got %s",
                        Py_TYPE(spike_arg)->tp_name);
  }
  int32_t core = -1;
  if (core_arg != Py_None) {
    if (!PyLong_Check(core_arg))
      return PyErr_Format(PyExc_TypeError, "core_id must be an int or None (all cores), got %s",
                          Py_TYPE(core_arg)->tp_name);
    long long value = PyLong_AsLongLong(core_arg);
    if (value == -1 && PyErr_Occurred()) return NULL;
    if (value < 0 || value > INT32_MAX)
      return PyErr_Format(PyExc_ValueError,
                          "core_id must be a non-negative logical core index or None, got %lld",
                          value);
    core = (int32_t)value;
  }
  if (spike_ctx_check(ctx) < 0) return NULL;
  nkrt_trace_session_t *session = NULL;
  nkrt_status_t st = nkrt_trace_start(ctx->runtime, core, &session);
  if (st) return spike_nrt_error(st);
  TraceSessionObject *self = (TraceSessionObject *)type->tp_alloc(type, 0);
  if (!self) {
    nkrt_trace_destroy(session);
    return NULL;
  }
  self->ctx = ctx;
  spike_ctx_incref(ctx);
  self->session = session;
  self->core = core;
  self->next = ctx->sessions;
  if (ctx->sessions) ctx->sessions->prev = self;
  ctx->sessions = self;
  return (PyObject *)self;
}

static void trace_dealloc(TraceSessionObject *self) {
  if (self->ctx) {
    if (self->session && !self->ctx->closed) nkrt_trace_destroy(self->session);
    self->session = NULL;
    trace_session_unlink(self);
    spike_ctx_decref(self->ctx);
  }
  Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *trace_stop(TraceSessionObject *self, PyObject *unused) {
  (void)unused;
  if (self->session && !self->ctx->closed) nkrt_trace_stop(self->session);
  self->stopped = 1;
  Py_RETURN_NONE;
}

/* The session's events as a JSON string; `drain` removes them. */
static PyObject *trace_json(TraceSessionObject *self, bool drain) {
  nkrt_trace_session_t *session = trace_get(self);
  if (!session) return NULL;
  char *json = NULL;
  size_t length = 0;
  nkrt_status_t st = nkrt_trace_events_json(session, drain, &json, &length);
  if (st) return spike_nrt_error(st);
  PyObject *text = PyUnicode_DecodeUTF8(json, (Py_ssize_t)length, "replace");
  nkrt_free(json);
  return text;
}

static PyObject *trace_fetch_events_json(TraceSessionObject *self, PyObject *unused) {
  (void)unused;
  return trace_json(self, false);
}

static PyObject *trace_drain_events(TraceSessionObject *self, PyObject *unused) {
  (void)unused;
  PyObject *text = trace_json(self, true);
  if (!text) return NULL;
  PyObject *json_mod = PyImport_ImportModule("json");
  if (!json_mod) {
    Py_DECREF(text);
    return NULL;
  }
  PyObject *doc = PyObject_CallMethod(json_mod, "loads", "O", text);
  Py_DECREF(json_mod);
  Py_DECREF(text);
  if (!doc) return NULL;
  PyObject *events = PyDict_Check(doc) ? PyDict_GetItemString(doc, "events") : NULL;
  if (!events || !PyList_Check(events)) {
    Py_DECREF(doc);
    return spike_error("the runtime returned trace JSON without an \"events\" list");
  }
  Py_INCREF(events);
  Py_DECREF(doc);
  return events;
}

static PyObject *trace_save(TraceSessionObject *self, PyObject *args) {
  PyObject *path = NULL;
  if (!PyArg_ParseTuple(args, "O&:save", PyUnicode_FSConverter, &path)) return NULL;
  nkrt_trace_session_t *session = trace_get(self);
  if (!session) {
    Py_DECREF(path);
    return NULL;
  }
  nkrt_status_t st = nkrt_trace_write_chrome(session, PyBytes_AS_STRING(path));
  Py_DECREF(path);
  if (st) return spike_nrt_error(st);
  Py_RETURN_NONE;
}

static PyObject *trace_enter(TraceSessionObject *self, PyObject *unused) {
  (void)unused;
  return Py_NewRef(self);
}

static PyObject *trace_exit(TraceSessionObject *self, PyObject *args) {
  (void)args;
  return trace_stop(self, NULL);
}

static PyObject *trace_get_core_id(TraceSessionObject *self, void *c) {
  (void)c;
  if (self->core < 0) Py_RETURN_NONE;
  return PyLong_FromLong(self->core);
}

static PyObject *trace_get_active(TraceSessionObject *self, void *c) {
  (void)c;
  return PyBool_FromLong(self->session && !self->stopped && !self->ctx->closed);
}

static PyObject *trace_get_event_count(TraceSessionObject *self, void *c) {
  (void)c;
  nkrt_trace_session_t *session = trace_get(self);
  if (!session) return NULL;
  return PyLong_FromUnsignedLongLong(nkrt_trace_event_count(session));
}

static PyObject *trace_repr(TraceSessionObject *self) {
  const char *state = self->ctx->closed ? "closed" : (self->stopped ? "stopped" : "recording");
  if (self->core < 0) return PyUnicode_FromFormat("SystemTraceSession(core_id=None, %s)", state);
  return PyUnicode_FromFormat("SystemTraceSession(core_id=%d, %s)", (int)self->core, state);
}

static PyMethodDef trace_methods[] = {
    {"stop", (PyCFunction)trace_stop, METH_NOARGS,
     "stop() -> None\n\nStops recording; recorded events stay readable. Idempotent."},
    {"fetch_events_json", (PyCFunction)trace_fetch_events_json, METH_NOARGS,
     "fetch_events_json() -> str\n\nThe recorded events as system-trace JSON "
     "({\"events\": [...]}), without removing them."},
    {"drain_events", (PyCFunction)trace_drain_events, METH_NOARGS,
     "drain_events() -> list[dict]\n\nThe recorded events, parsed, removed from the session."},
    {"save", (PyCFunction)trace_save, METH_VARARGS,
     "save(path) -> None\n\nWrites the recorded events as Chrome Trace Event JSON."},
    {"__enter__", (PyCFunction)trace_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)trace_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef trace_getset[] = {
    {"core_id", (getter)trace_get_core_id, NULL, "Traced core, or None for all cores.", NULL},
    {"active", (getter)trace_get_active, NULL, "True while recording.", NULL},
    {"event_count", (getter)trace_get_event_count, NULL, "Events recorded and not drained.",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject TraceSessionType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "spike._spike.SystemTraceSession",
    .tp_basicsize = sizeof(TraceSessionObject),
    .tp_dealloc = (destructor)trace_dealloc,
    .tp_repr = (reprfunc)trace_repr,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "SystemTraceSession(spike=None, core_id=None)\n\n"
              "Records executions and copies (events 'nc_exec_running', 'tensor_write', ...) "
              "on one core, or all cores when core_id is None, from creation until stop(). "
              "`spike` is a Spike instance; None uses the live runtime. A context manager "
              "that stops on exit.",
    .tp_methods = trace_methods,
    .tp_getset = trace_getset,
    .tp_new = trace_new,
};
