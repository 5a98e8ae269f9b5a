/* spike/_spike_exec.c - Spike's executions of a loaded model.
 *
 * Spike.execute, execute_at, execute_staged and benchmark, which run a model
 * without the GIL on name-keyed tensor sets (exec_begin .. exec_done) or on
 * device addresses (spike_model_execute_at, also behind the C API, as is
 * spike_model_execute_host over host buffers); and
 * Spike.execute_async with the ExecutionEvent it returns.
 */
#include "_spike_internal.h"

/* ------------------------------------------------------------------------ */
/* Spike: execution                                                          */
/* ------------------------------------------------------------------------ */

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
static int model_execute_by_address(PyObject *model_obj, void *const *addresses, uint32_t count,
                                    bool host) {
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
  st = host ? nkrt_execute_host(handle, addresses) : nkrt_execute_at(handle, addresses);
  spike_ctx_leave(ctx);
  Py_END_ALLOW_THREADS
  if (--model->busy == 0 && model->unload_pending) spike_model_release(model);
  if (st) {
    spike_nrt_error(st);
    return -1;
  }
  return 0;
}

int spike_model_execute_at(PyObject *model_obj, void *const *addresses, uint32_t count) {
  return model_execute_by_address(model_obj, addresses, count, false);
}

/* spike_model_execute_at over host buffers (nkrt_execute_host): the C API's
 * path for CPU tensors handed to a compiled kernel. No Python binding: the
 * addresses must come from native code that owns the buffers. */
int spike_model_execute_host(PyObject *model_obj, void *const *addresses, uint32_t count) {
  return model_execute_by_address(model_obj, addresses, count, true);
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
