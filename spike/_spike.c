/* spike/_spike.c - the CPython binding of the nkrt device runtime.
 *
 * Module `spike._spike`: the low-level `Spike` runtime object and the data
 * objects it hands out (NrtTensor, NrtModel, SystemTraceSession), the error
 * classes (SpikeRuntimeError > SpikeError, NrtError) and the metadata types
 * (TensorMetadata, ModelTensorInfo).
 *
 * This file is the module itself: the error classes and helpers, the module
 * functions and PyInit__spike. The rest, sharing _spike_internal.h (where
 * the lifetime and threading rules of the runtime context are):
 *   _spike_core.c     the runtime context (SpikeCtx) and the Spike type:
 *                     lifecycle, models, tensors, statistics, method table
 *   _spike_objects.c  NrtTensor, NrtModel, TensorMetadata / ModelTensorInfo,
 *                     SystemTraceSession
 *   _spike_copy.c     Spike's device copies, memset and 2-D copies
 *   _spike_exec.c     Spike's executions, benchmark, ExecutionEvent
 *   _spike_capi.c     the C function table of include/spike_capi.h
 *   _spike_comm.c     the runtime's communicator for eager collectives
 */
#include "_spike_internal.h"

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */
/* ------------------------------------------------------------------------ */

PyObject *SpikeRuntimeError;
PyObject *SpikeError;
PyObject *NrtError;
PyObject *NrtIndexError;

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
  /* a kernel that found an index out of range (nkipy's check_index) reports
   * "IndexError: ...": an NrtIndexError, which is an IndexError too, as the
   * same index raises on the CPU */
  PyObject *cls = code == NKRT_EXEC_COMPLETED_WITH_ERR &&
                          strstr(nkrt_status_message(status), "IndexError: ") != NULL
                      ? NrtIndexError
                      : NrtError;
  nkrt_status_free(status);
  if (!msg) return NULL;
  PyObject *exc = PyObject_CallOneArg(cls, msg);
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
  PyErr_SetObject(cls, exc);
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

int spike_check_core_id(long long core_id) {
  if (core_id < 0 || core_id > (long long)UINT32_MAX) {
    PyErr_Format(PyExc_ValueError, "core_id must be a non-negative logical core index, got %lld",
                 core_id);
    return -1;
  }
  return 0;
}

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
    {"_comm_collective", (PyCFunction)(void (*)(void))spike_module_comm_collective,
     METH_VARARGS | METH_KEYWORDS,
     "_comm_collective(kind, dtype, reduce_op, rank, world_size, src, dst, count) -> None\n\n"
     "One collective over every rank of the job on the runtime's communicator (joined "
     "under $NKRT_CC_ID as rank of world_size if need be), on the memory at the addresses "
     "src and dst (trusted: the caller's buffers). Private to torch_to_nkipy's process "
     "group."},
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
    PyObject *bases = PyTuple_Pack(2, NrtError, PyExc_IndexError);
    if (!bases) goto fail;
    NrtIndexError = PyErr_NewExceptionWithDoc(
        "spike._spike.NrtIndexError",
        "A kernel's execution failed on an index out of range: an NrtError and an IndexError.",
        bases, NULL);
    Py_DECREF(bases);
    if (!NrtIndexError) goto fail;
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
      add_object(m, "NrtIndexError", NrtIndexError) < 0 ||
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
