// spike_torch/csrc/kernel_call.cpp - the per-call path of a compiled kernel on
// nkipy tensors (torch_to_nkipy's executor), in one Python call:
//
//   call = spike_torch._C.kernel_call(model, core, inputs, outputs, results,
//                                     staged=None)
//   results = spike_torch._C.run_kernel_call(call, args)   # None: not this path
//   results = spike_torch._C.run_kernel_call(call, args, into)  # outputs written into
//                                                              # given tensors
//
// It checks every input tensor against the kernel's signature, allocates the
// fresh outputs on the nkipy device, runs the kernel with every tensor given by
// address (spike's C API model_execute_at: no tensor sets, slices or names) and
// returns the results. Every dtype is passed as it is: kernels compute int64
// and float64 in 64 bits, so nothing is narrowed or widened here.
//
// Host calls (`staged` = "host") take CPU tensors instead, where the runtime's
// kernels can address host memory (the CPU driver: host_addressable()): the
// kernel reads each input where the tensor lies and writes each output into
// a fresh CPU tensor, no copy in either direction. Staged calls (`staged` =
// the device addresses of persistent input and output buffers, in the model's
// order) are the same for a runtime whose kernels cannot: each input is
// written into its buffer (only the blocks that differ, without the GIL), the
// kernel runs on the buffers, and each output is read into a fresh CPU tensor.
//
// This translation unit is the one place spike_torch reads torch tensors from
// Python objects (THPVariable_Unpack / THPVariable_Wrap): PyTorch offers that
// only in C++. It is a plain CPython module object handed to Python through
// spike_torch_py_module() (ctypes.PyDLL), no pybind11 module.

#include <Python.h>

#include <torch/csrc/Dtype.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <exception>
#include <vector>

#include "device_io.h"
#include "py_args.h"

namespace {

using spike_torch::int64_list;
using spike_torch::PyErrorSet;

constexpr c10::DeviceType kNkipy = c10::DeviceType::PrivateUse1;
constexpr const char* kCapsule = "spike_torch.KernelCall";

struct InSpec {
  Py_ssize_t arg;              // index in the call's arguments
  std::vector<int64_t> sizes;
  c10::ScalarType dtype;       // the argument's dtype (the kernel's, 64-bit types included)
};

struct OutSpec {               // one per kernel output, in the model's order
  bool fresh;                  // false: an aliased output (its input's memory)
  std::vector<int64_t> sizes;
  c10::ScalarType dtype;
};

enum class ResultKind { Output, Arg, Value };

struct ResultSpec {
  ResultKind kind;
  Py_ssize_t index;            // Output: which kernel output; Arg: which argument
  PyObject* value;             // Value: the object returned (owned)
};

// A device buffer of a staged call: its allocation, retained for the call's
// life (so the address stays that allocation), and the offset in it.
struct DevBuffer {
  nkrt_tensor_t* tensor;
  uint64_t offset;
};

struct KernelCall {
  PyObject* model = nullptr;   // spike NrtModel (owned)
  c10::DeviceIndex core = 0;
  bool staged = false;         // CPU tensors through persistent device buffers
  bool host = false;           // CPU tensors read and written where they lie
  std::vector<void*> buffers;  // staged: device addresses, inputs then outputs (model order)
  std::vector<DevBuffer> dev;  // staged: the same, retained
  uint64_t generation = 0;     // staged: the runtime the buffers belong to
  std::vector<InSpec> ins;
  std::vector<OutSpec> outs;
  std::vector<ResultSpec> results;

  ~KernelCall() {
    Py_XDECREF(model);
    for (auto& r : results) Py_XDECREF(r.value);
    // a no-op when the runtime closed meanwhile (its memory is gone anyway)
    for (const DevBuffer& b : dev) spike_torch::capi().tensor_release(generation, b.tensor);
  }
};

// An owned reference, released on scope exit.
struct PyRef {
  PyObject* p;
  explicit PyRef(PyObject* o) : p(o) {}
  ~PyRef() { Py_XDECREF(p); }
  PyRef(const PyRef&) = delete;
  PyRef& operator=(const PyRef&) = delete;
};

c10::ScalarType parse_dtype(PyObject* obj) {
  if (!THPDtype_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "kernel_call: expected a torch.dtype, got %s",
                 Py_TYPE(obj)->tp_name);
    throw PyErrorSet{};
  }
  return reinterpret_cast<THPDtype*>(obj)->scalar_type;
}

// Borrowed items of a sequence argument (a list or tuple, as Python passes).
PyObject* const* items_of(PyObject* seq, Py_ssize_t* n) {
  if (PyList_Check(seq)) {
    *n = PyList_GET_SIZE(seq);
    return reinterpret_cast<PyListObject*>(seq)->ob_item;
  }
  if (PyTuple_Check(seq)) {
    *n = PyTuple_GET_SIZE(seq);
    return reinterpret_cast<PyTupleObject*>(seq)->ob_item;
  }
  PyErr_Format(PyExc_TypeError, "expected a list or tuple, got %s", Py_TYPE(seq)->tp_name);
  throw PyErrorSet{};
}

void capsule_destructor(PyObject* capsule) {
  delete static_cast<KernelCall*>(PyCapsule_GetPointer(capsule, kCapsule));
}

std::vector<void*> parse_addresses(PyObject* seq, size_t want, const char* what) {
  Py_ssize_t n;
  PyObject* const* items = items_of(seq, &n);
  if (static_cast<size_t>(n) != want) {
    PyErr_Format(PyExc_ValueError, "kernel_call: staged %s has %zd addresses, the kernel %zu",
                 what, n, want);
    throw PyErrorSet{};
  }
  std::vector<void*> out;
  for (Py_ssize_t i = 0; i < n; i++) {
    void* p = PyLong_AsVoidPtr(items[i]);
    if (!p) {
      if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "kernel_call: staged %s address "
                                          "%zd is NULL", what, i);
      throw PyErrorSet{};
    }
    out.push_back(p);
  }
  return out;
}

// Raises RuntimeError for a non-NULL status (freeing it).
void raise_status(nkrt_status_t st, const char* what) {
  const spike_capi_t& a = spike_torch::capi();
  PyErr_Format(PyExc_RuntimeError, "%s: %s: %s", what, a.code_name(a.status_code(st)),
               a.status_message(st));
  a.status_free(st);
  throw PyErrorSet{};
}

// Finds and retains the allocations behind a staged call's buffer addresses,
// in the live runtime: they cannot be freed (and their addresses handed to
// other tensors) while the call exists, and once that runtime is closed every
// use fails with NRT_CLOSED before anything is written.
void retain_buffers(KernelCall* kc) {
  const spike_capi_t& a = spike_torch::capi();
  kc->generation = a.live_generation();
  for (void* p : kc->buffers) {
    DevBuffer b{nullptr, 0};
    if (nkrt_status_t st = a.tensor_lookup(kc->generation, p, &b.tensor, &b.offset))
      raise_status(st, "kernel_call: staged buffer");
    if (nkrt_status_t st = a.tensor_retain(kc->generation, b.tensor))
      raise_status(st, "kernel_call: staged buffer");
    kc->dev.push_back(b);
  }
}

// kernel_call(model, core, inputs, outputs, results, staged=None) -> capsule
//   inputs:  (arg index, sizes, dtype) per kernel input, in order
//   outputs: (sizes, dtype) per kernel output, or None for an aliased one
//   results: ("output", j) | ("arg", i) | ("value", obj) per result
//   staged:  (input buffer addresses, output buffer addresses): CPU tensors
PyObject* kernel_call(PyObject*, PyObject* args) {
  PyObject *model, *inputs, *outputs, *results, *staged = Py_None;
  int core;
  if (!PyArg_ParseTuple(args, "OiOOO|O:kernel_call", &model, &core, &inputs, &outputs, &results,
                        &staged))
    return nullptr;
  auto* kc = new KernelCall();
  try {
    Py_INCREF(model);
    kc->model = model;
    kc->core = static_cast<c10::DeviceIndex>(core);
    Py_ssize_t n;
    PyObject* const* items = items_of(inputs, &n);
    for (Py_ssize_t i = 0; i < n; i++) {
      PyObject *sizes, *dtype;
      Py_ssize_t arg;
      if (!PyArg_ParseTuple(items[i], "nOO:kernel_call input", &arg, &sizes, &dtype))
        throw PyErrorSet{};
      kc->ins.push_back({arg, int64_list(sizes, "input sizes"), parse_dtype(dtype)});
    }
    items = items_of(outputs, &n);
    for (Py_ssize_t i = 0; i < n; i++) {
      if (items[i] == Py_None) {
        kc->outs.push_back({false, {}, c10::ScalarType::Float});
        continue;
      }
      PyObject *sizes, *dtype;
      if (!PyArg_ParseTuple(items[i], "OO:kernel_call output", &sizes, &dtype))
        throw PyErrorSet{};
      kc->outs.push_back({true, int64_list(sizes, "output sizes"), parse_dtype(dtype)});
    }
    items = items_of(results, &n);
    for (Py_ssize_t i = 0; i < n; i++) {
      const char* kind;
      PyObject* what;
      if (!PyArg_ParseTuple(items[i], "sO:kernel_call result", &kind, &what)) throw PyErrorSet{};
      std::string k(kind);
      if (k == "value") {
        Py_INCREF(what);
        kc->results.push_back({ResultKind::Value, 0, what});
        continue;
      }
      Py_ssize_t index = PyLong_AsSsize_t(what);
      if (index == -1 && PyErr_Occurred()) throw PyErrorSet{};
      bool bad = k == "output"
                     ? (index < 0 || index >= static_cast<Py_ssize_t>(kc->outs.size()) ||
                        !kc->outs[static_cast<size_t>(index)].fresh)
                     : (k != "arg" || index < 0);
      if (bad) {
        PyErr_Format(PyExc_ValueError, "kernel_call: bad result %zd: (%s, %zd)", i, kind, index);
        throw PyErrorSet{};
      }
      kc->results.push_back({k == "output" ? ResultKind::Output : ResultKind::Arg, index,
                             nullptr});
    }
    if (staged != Py_None) {
      for (size_t j = 0; j < kc->outs.size(); j++)
        if (!kc->outs[j].fresh) {
          PyErr_SetString(PyExc_ValueError, "kernel_call: calls on CPU tensors have no aliased "
                          "outputs");
          throw PyErrorSet{};
        }
      for (const auto& r : kc->results)
        if (r.kind == ResultKind::Arg) {
          PyErr_SetString(PyExc_ValueError, "kernel_call: calls on CPU tensors return no "
                          "arguments");
          throw PyErrorSet{};
        }
    }
    if (PyUnicode_Check(staged)) {
      if (PyUnicode_CompareWithASCIIString(staged, "host") != 0) {
        PyErr_Format(PyExc_ValueError, "kernel_call: staged must be None, \"host\" or (input "
                     "addresses, output addresses), got %R", staged);
        throw PyErrorSet{};
      }
      const spike_capi_t& a = spike_torch::capi();
      if (!a.host_addressable(a.live_generation())) {
        PyErr_SetString(PyExc_ValueError, "kernel_call: this runtime's kernels cannot address "
                        "host memory (host_addressable() is false): stage CPU tensors through "
                        "device buffers");
        throw PyErrorSet{};
      }
      kc->host = true;
    } else if (staged != Py_None) {
      PyObject *ins_addr, *outs_addr;
      if (!PyArg_ParseTuple(staged, "OO:kernel_call staged", &ins_addr, &outs_addr))
        throw PyErrorSet{};
      kc->buffers = parse_addresses(ins_addr, kc->ins.size(), "inputs");
      std::vector<void*> outs_buffers = parse_addresses(outs_addr, kc->outs.size(), "outputs");
      kc->buffers.insert(kc->buffers.end(), outs_buffers.begin(), outs_buffers.end());
      retain_buffers(kc);
      kc->staged = true;
    }
  } catch (const PyErrorSet&) {
    delete kc;
    return nullptr;
  }
  PyObject* capsule = PyCapsule_New(kc, kCapsule, capsule_destructor);
  if (!capsule) delete kc;
  return capsule;
}

// The call's results: fresh outputs, arguments (as returned by the graph:
// detached), constants.
PyObject* results_list(const KernelCall* kc, const std::vector<at::Tensor>& fresh,
                       PyObject* const* args, Py_ssize_t nargs) {
  PyObject* out = PyList_New(static_cast<Py_ssize_t>(kc->results.size()));
  if (!out) return nullptr;
  for (size_t i = 0; i < kc->results.size(); i++) {
    const ResultSpec& r = kc->results[i];
    PyObject* item;
    if (r.kind == ResultKind::Value) {
      Py_INCREF(r.value);
      item = r.value;
    } else if (r.kind == ResultKind::Output) {
      item = THPVariable_Wrap(fresh[static_cast<size_t>(r.index)]);
    } else {
      if (r.index >= nargs || !THPVariable_Check(args[r.index])) {
        Py_DECREF(out);
        PyErr_Format(PyExc_IndexError, "run_kernel_call: result %zu is argument %zd, not a "
                     "tensor", i, r.index);
        return nullptr;
      }
      item = THPVariable_Wrap(THPVariable_Unpack(args[r.index]).detach());
    }
    if (!item) {
      Py_DECREF(out);
      return nullptr;
    }
    PyList_SET_ITEM(out, static_cast<Py_ssize_t>(i), item);
  }
  return out;
}

// The tensor output j of a call writes into: `into[j]` when the caller gave one
// (None: a fresh one), checked against the output's sizes and dtype, on
// `device`, contiguous. Returns false (no exception) when it does not match.
bool output_tensor(const KernelCall* kc, PyObject* into, size_t j, c10::Device device,
                   at::Tensor* out) {
  const OutSpec& s = kc->outs[j];
  PyObject* given = into ? PySequence_Fast_GET_ITEM(into, static_cast<Py_ssize_t>(j)) : Py_None;
  if (given == Py_None) {
    *out = at::empty(s.sizes, at::TensorOptions().dtype(s.dtype).device(device));
    return true;
  }
  if (!THPVariable_Check(given)) return false;
  const at::Tensor& t = THPVariable_Unpack(given);
  if (t.device() != device || t.scalar_type() != s.dtype ||
      t.sizes() != c10::IntArrayRef(s.sizes) || !t.is_contiguous())
    return false;
  *out = t;
  return true;
}

PyObject* run_staged(KernelCall* kc, PyObject* const* args, Py_ssize_t nargs,
                     PyObject* into) {
  const spike_capi_t& a = spike_torch::capi();
  size_t n_in = kc->ins.size(), n_out = kc->outs.size();
  std::vector<const void*> host(n_in);
  std::vector<uint64_t> in_bytes(n_in);
  std::vector<c10::Storage> pinned(n_in);   // their memory, whatever happens to the tensors
  for (size_t k = 0; k < n_in; k++) {
    const InSpec& s = kc->ins[k];
    if (s.arg >= nargs || !THPVariable_Check(args[s.arg])) Py_RETURN_NONE;
    const at::Tensor& t = THPVariable_Unpack(args[s.arg]);
    if (!t.device().is_cpu() || t.scalar_type() != s.dtype ||
        t.sizes() != c10::IntArrayRef(s.sizes) || !t.is_contiguous())
      Py_RETURN_NONE;
    pinned[k] = t.storage();
    host[k] = t.const_data_ptr();
    in_bytes[k] = static_cast<uint64_t>(t.numel()) * t.itemsize();
  }
  std::vector<at::Tensor> fresh(n_out);
  for (size_t j = 0; j < n_out; j++)
    if (!output_tensor(kc, into, j, c10::Device(c10::DeviceType::CPU), &fresh[j]))
      Py_RETURN_NONE;
  if (kc->host) {
    std::vector<void*> addresses(n_in + n_out);
    for (size_t k = 0; k < n_in; k++) addresses[k] = const_cast<void*>(host[k]);  // read only
    for (size_t j = 0; j < n_out; j++) addresses[n_in + j] = fresh[j].data_ptr();
    if (a.model_execute_host(kc->model, addresses.data(),
                             static_cast<uint32_t>(addresses.size())) < 0)
      throw PyErrorSet{};
    return results_list(kc, fresh, args, nargs);
  }
  uint64_t gen = kc->generation;
  const DevBuffer* in_dev = kc->dev.data();
  const DevBuffer* out_dev = in_dev + n_in;
  nkrt_status_t st = nullptr;
  Py_BEGIN_ALLOW_THREADS
  for (size_t k = 0; k < n_in && !st; k++)
    st = a.tensor_update(gen, in_dev[k].tensor, host[k], in_dev[k].offset, in_bytes[k]);
  Py_END_ALLOW_THREADS
  if (st) raise_status(st, "writing an input");
  if (a.model_execute_at(kc->model, kc->buffers.data(),
                         static_cast<uint32_t>(kc->buffers.size())) < 0)
    throw PyErrorSet{};
  Py_BEGIN_ALLOW_THREADS
  for (size_t j = 0; j < n_out && !st; j++)
    st = a.tensor_read(gen, out_dev[j].tensor, fresh[j].data_ptr(), out_dev[j].offset,
                       static_cast<uint64_t>(fresh[j].numel()) * fresh[j].itemsize());
  Py_END_ALLOW_THREADS
  if (st) raise_status(st, "reading an output");
  return results_list(kc, fresh, args, nargs);
}

// run_kernel_call(call, args) -> list of results, or None when an input is not
// what the kernel was built for (another device or core, dtype, shape, a
// non-contiguous layout): the caller then takes its general path.
PyObject* run_kernel_call(PyObject*, PyObject* const* argv, Py_ssize_t argc) {
  if (argc != 2 && argc != 3) {
    PyErr_SetString(PyExc_TypeError, "run_kernel_call(call, args, into=None) takes 2 or 3 "
                    "arguments");
    return nullptr;
  }
  if (!PyCapsule_IsValid(argv[0], kCapsule)) {
    PyErr_Format(PyExc_TypeError, "run_kernel_call: call must be what kernel_call() returned, "
                 "got %s", Py_TYPE(argv[0])->tp_name);
    return nullptr;
  }
  auto* kc = static_cast<KernelCall*>(PyCapsule_GetPointer(argv[0], kCapsule));
  if (!PyList_Check(argv[1]) && !PyTuple_Check(argv[1])) {
    PyErr_Format(PyExc_TypeError, "expected a list or tuple, got %s", Py_TYPE(argv[1])->tp_name);
    return nullptr;
  }
  // The GIL is released while the kernel runs: hold our own references to the
  // arguments (another thread may change the list) and to the inputs' storages
  // (so their memory cannot be handed to another tensor meanwhile).
  PyRef snapshot(PySequence_Tuple(argv[1]));
  if (!snapshot.p) return nullptr;
  // `into`: where each kernel output (the model's order) is written, None for a
  // fresh tensor (a tuple of our own, so the tensors stay alive meanwhile)
  PyRef into(nullptr);
  if (argc == 3 && argv[2] != Py_None) {
    into.p = PySequence_Tuple(argv[2]);
    if (!into.p) return nullptr;
    if (PyTuple_GET_SIZE(into.p) != static_cast<Py_ssize_t>(kc->outs.size())) {
      PyErr_Format(PyExc_ValueError, "run_kernel_call: into has %zd entries, the kernel %zu "
                   "outputs", PyTuple_GET_SIZE(into.p), kc->outs.size());
      return nullptr;
    }
  }
  try {
    Py_ssize_t nargs;
    PyObject* const* args = items_of(snapshot.p, &nargs);
    if (kc->staged || kc->host) return run_staged(kc, args, nargs, into.p);
    size_t n_in = kc->ins.size(), n_out = kc->outs.size();
    std::vector<void*> addresses(n_in + n_out, nullptr);
    std::vector<c10::Storage> pinned(n_in);
    for (size_t k = 0; k < n_in; k++) {
      const InSpec& s = kc->ins[k];
      if (s.arg >= nargs) {
        PyErr_Format(PyExc_IndexError, "run_kernel_call: input %zu is argument %zd of %zd", k,
                     s.arg, nargs);
        return nullptr;
      }
      PyObject* obj = args[s.arg];
      if (!THPVariable_Check(obj)) Py_RETURN_NONE;
      const at::Tensor& t = THPVariable_Unpack(obj);
      if (t.device().type() != kNkipy || t.device().index() != kc->core ||
          t.scalar_type() != s.dtype || t.sizes() != c10::IntArrayRef(s.sizes) ||
          !t.is_contiguous())
        Py_RETURN_NONE;
      spike_torch::check_storage_live(t.storage(), "compiled kernel input");
      pinned[k] = t.storage();
      addresses[k] = t.data_ptr();
    }
    std::vector<at::Tensor> fresh(n_out);
    for (size_t j = 0; j < n_out; j++) {
      const OutSpec& s = kc->outs[j];
      if (!s.fresh) continue;
      if (!output_tensor(kc, into.p, j, c10::Device(kNkipy, kc->core), &fresh[j]))
        Py_RETURN_NONE;
      addresses[n_in + j] = fresh[j].data_ptr();
    }
    if (spike_torch::capi().model_execute_at(kc->model, addresses.data(),
                                             static_cast<uint32_t>(addresses.size())) < 0)
      return nullptr;
    return results_list(kc, fresh, args, nargs);
  } catch (const PyErrorSet&) {
    return nullptr;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

PyObject* host_addressable(PyObject*, PyObject*) {
  const spike_capi_t& a = spike_torch::capi();
  return PyBool_FromLong(a.host_addressable(a.live_generation()));
}

PyMethodDef g_methods[] = {
    {"kernel_call", kernel_call, METH_VARARGS,
     "kernel_call(model, core, inputs, outputs, results, staged=None) -> capsule\n\n"
     "How to call a loaded kernel on nkipy tensors: inputs (arg index, sizes, dtype) and "
     "outputs ((sizes, dtype), or None when aliased) in the model's order; "
     "results ('output', j) / ('arg', i) / ('value', obj). staged=\"host\": CPU tensors, "
     "read and written by the kernel where they lie (needs host_addressable()); "
     "staged=(input buffer addresses, output buffer addresses): CPU tensors, copied through "
     "those device buffers."},
    {"host_addressable", host_addressable, METH_NOARGS,
     "host_addressable() -> bool\n\nWhether the live runtime's kernels can read and write host "
     "memory (the CPU driver), so CPU tensors need no staging copies."},
    {"run_kernel_call", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(run_kernel_call)),
     METH_FASTCALL,
     "run_kernel_call(call, args, into=None) -> list or None\n\n"
     "Runs the kernel of a kernel_call on args (nkipy tensors) and returns its results; None "
     "when an input does not match (the caller's general path handles it). into: one entry "
     "per kernel output (the model's order), a tensor the output is written into (right "
     "device, sizes and dtype, contiguous: a view of a bigger tensor is fine) or None for a "
     "fresh one; None as a whole when one does not match."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef g_module = {PyModuleDef_HEAD_INIT, "spike_torch._kernel_call",
                        "The per-call path of compiled kernels on nkipy tensors.", -1, g_methods,
                        nullptr, nullptr, nullptr, nullptr};

}  // namespace

extern "C" __attribute__((visibility("default"))) PyObject* spike_torch_py_module() {
  return PyModule_Create(&g_module);
}
