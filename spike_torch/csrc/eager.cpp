// spike_torch/csrc/eager.cpp - the nkipy device's boxed fallback: the kernel of
// every ATen operator nothing else implements for PrivateUse1, with its hot
// path in C++.
//
// A call is keyed by the operator and its arguments as the kernel depends on
// them: each tensor's dtype, sizes, core and whether it is contiguous (with
// the permutation of a transposed or permuted one, which the kernel reads as
// it lies: dense_perm), every other value itself (a Python scalar a C++ op
// wrapped into a 0-dim tensor is such a value: kernels bake scalars in),
// except a float in a position spike_torch._scalar_slots makes a slot
// (eager_lift): the key says "a float here", the kernel reads the value from
// an input the call fills (a small device buffer of the call's slot values).
// A key found in the cache runs the
// loaded kernel directly: inputs by address (another non-contiguous one made
// contiguous on the device first), fresh outputs from the caching allocator,
// mutated arguments updated in place by the kernel, written directly or
// copied into on the device. Nothing of that enters Python or takes the GIL:
// the kernel runs through spike's model_run_at.
//
// Any other call goes to spike_torch._generic (Python), which spike_torch
// registers as the fallback of PrivateUse2, a dispatch key no tensor carries:
// this fallback redispatches to that key. When the Python side serves a call
// with a device kernel it describes the kernel to eager_register(), which
// files it under the key of the call in progress (checked to be that call:
// the same operator and the same tensors), so the next such call stays here.
// A call whose key cannot be formed (a CPU tensor, a complex scalar, an
// argument type not listed) always takes the Python road.
//
// The Python functions (eager_register, eager_clear, eager_stats) live on the
// module object spike_torch_eager_py_module() returns (spike_torch/_C.py).

#include <Python.h>

#include <ATen/Dispatch.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <torch/csrc/Dtype.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/library.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "device_io.h"
#include "nkipy_device.h"
#include "py_args.h"

namespace spike_torch {
namespace {

// ---- the key of a call -------------------------------------------------------

// The containers of a call keep their elements inline (no heap allocation on
// the hot path for calls of a few tensors).
using Words = c10::SmallVector<int64_t, 32>;
using Tensors = c10::SmallVector<at::Tensor, 6>;
using Slots = c10::SmallVector<double, 4>;
using Indices = c10::SmallVector<size_t, 4>;

struct Key {
  Words words;
  size_t hash = 0;
  bool operator==(const Key& o) const { return hash == o.hash && words == o.words; }
};

struct KeyHash {
  size_t operator()(const Key& k) const { return k.hash; }
};

// Tags that keep the encodings of different kinds of values apart.
enum : int64_t {
  kTensor = 1, kNone, kInt, kDouble, kBool, kString, kDevice, kList, kEnd, kWrapped, kSlot
};

// Per operator schema: which arguments' floats are slots (eager_lift).
std::mutex g_lift_mutex;
std::unordered_map<const c10::FunctionSchema*, std::vector<bool>> g_lift;

// The order of a non-contiguous tensor's dims from the outermost in memory,
// when in that order it is contiguous (a transpose or permute of a contiguous
// block, which a kernel reads as it lies). spike_torch._generic._perm is the
// same rule. Checked on the strides, as c10 decides contiguity (dims of size 1
// do not count), without making the permuted view on this hot path.
bool dense_perm(const at::Tensor& t, std::vector<int64_t>& perm) {
  perm.resize(static_cast<size_t>(t.dim()));
  for (int64_t d = 0; d < t.dim(); d++) perm[static_cast<size_t>(d)] = d;
  auto sizes = t.sizes();
  auto strides = t.strides();
  std::stable_sort(perm.begin(), perm.end(),
                   [&](int64_t a, int64_t b) { return strides[a] > strides[b]; });
  if (t.numel() == 0) return true;
  int64_t expected = 1;
  for (auto d = perm.rbegin(); d != perm.rend(); ++d) {
    if (sizes[*d] == 1) continue;
    if (strides[*d] != expected) return false;
    expected *= sizes[*d];
  }
  return true;
}

int64_t double_bits(double d) {
  int64_t bits;
  std::memcpy(&bits, &d, sizeof bits);   // 0.0 and -0.0 differ, a NaN equals itself
  return bits;
}

// Appends the encoding of one argument to `words` and its tensors to `ts` (in
// the order spike_torch._generic._sig lists them); with `slots`, a slot
// position's floats go there instead of into the key. False: not cacheable.
bool encode(const c10::IValue& v, Words& words, Tensors& ts, Slots* slots) {
  if (slots && v.isDouble()) {
    words.push_back(kSlot);
    slots->push_back(v.toDouble());
    return true;
  }
  if (slots && v.isTensor() && v.toTensor().defined() &&
      v.toTensor().unsafeGetTensorImpl()->is_wrapped_number() && v.toTensor().device().is_cpu() &&
      v.toTensor().scalar_type() == c10::ScalarType::Double) {
    words.push_back(kSlot);
    slots->push_back(*v.toTensor().const_data_ptr<double>());
    return true;
  }
  if (v.isTensor()) {
    const at::Tensor& t = v.toTensor();
    if (!t.defined()) {
      words.push_back(kNone);
      return true;
    }
    if (t.unsafeGetTensorImpl()->is_wrapped_number()) {
      // a Python scalar C++ wrapped: Python sees the number itself
      words.push_back(kWrapped);
      words.push_back(static_cast<int64_t>(t.scalar_type()));
      if (t.device().is_cpu() && t.scalar_type() == c10::ScalarType::Double) {
        words.push_back(double_bits(*t.const_data_ptr<double>()));
      } else if (t.device().is_cpu() && t.scalar_type() == c10::ScalarType::Long) {
        words.push_back(*t.const_data_ptr<int64_t>());
      } else if (t.device().is_cpu() && t.scalar_type() == c10::ScalarType::Bool) {
        words.push_back(*t.const_data_ptr<bool>() ? 1 : 0);
      } else {
        return false;
      }
      return true;
    }
    if (t.device().type() != kNkipy || t.layout() != c10::kStrided || t.is_conj() ||
        t.is_neg())
      return false;
    words.push_back(kTensor);
    words.push_back(static_cast<int64_t>(t.scalar_type()));
    words.push_back(t.device().index());
    bool contiguous = t.is_contiguous();
    words.push_back(contiguous ? 1 : 0);
    words.push_back(t.dim());
    for (int64_t s : t.sizes()) words.push_back(s);
    std::vector<int64_t> perm;
    if (!contiguous && !tiled_layout() && dense_perm(t, perm)) {
      // the kernel may read it as it lies: the key says how it lies
      words.push_back(kList);
      words.insert(words.end(), perm.begin(), perm.end());
      words.push_back(kEnd);
    }
    if (tiled_layout()) {
      // a tiled tensor's kernel reads its whole storage: the layout of that,
      // and where the tensor lies in it, are part of the key
      for (int64_t s : t.strides()) words.push_back(s);
      words.push_back(t.storage_offset());
      std::shared_ptr<const StickLayout> l = storage_layout(t.storage());
      if (!l) return false;
      words.push_back(static_cast<int64_t>(l->device_dtype));
      for (const auto* v : {&l->host_size, &l->device_size, &l->dim_map}) {
        words.push_back(static_cast<int64_t>(v->size()));
        words.insert(words.end(), v->begin(), v->end());
      }
    }
    ts.push_back(t);
    return true;
  }
  if (v.isNone()) {
    words.push_back(kNone);
  } else if (v.isBool()) {
    words.push_back(kBool);
    words.push_back(v.toBool());
  } else if (v.isInt()) {
    words.push_back(kInt);
    words.push_back(v.toInt());
  } else if (v.isDouble()) {
    words.push_back(kDouble);
    words.push_back(double_bits(v.toDouble()));
  } else if (v.isString()) {
    words.push_back(kString);
    words.push_back(static_cast<int64_t>(std::hash<std::string>{}(v.toStringRef())));
    words.push_back(static_cast<int64_t>(v.toStringRef().size()));
  } else if (v.isDevice()) {
    words.push_back(kDevice);
    words.push_back(static_cast<int64_t>(v.toDevice().type()));
    words.push_back(v.toDevice().index());
  } else if (v.isIntList()) {
    words.push_back(kList);
    for (int64_t x : v.toIntList()) {
      words.push_back(kInt);
      words.push_back(x);
    }
    words.push_back(kEnd);
  } else if (v.isDoubleList()) {
    words.push_back(kList);
    for (double x : v.toDoubleList()) {
      if (slots) {
        words.push_back(kSlot);
        slots->push_back(x);
        continue;
      }
      words.push_back(kDouble);
      words.push_back(double_bits(x));
    }
    words.push_back(kEnd);
  } else if (v.isBoolList()) {
    words.push_back(kList);
    for (bool x : v.toBoolList()) {
      words.push_back(kBool);
      words.push_back(x);
    }
    words.push_back(kEnd);
  } else if (v.isTensorList() || v.isList()) {
    words.push_back(kList);
    for (const c10::IValue& x : v.toListRef())
      if (!encode(x, words, ts, slots)) return false;
    words.push_back(kEnd);
  } else {
    return false;   // complex scalars, generators, symbolic values, ...
  }
  return true;
}

// Appends, per index w of `written`, the first index j != w of ts holding the
// very tensor ts[w], or -1 (by a scan, or a table for long lists: foreach ops).
void append_same_tensors(const Tensors& ts, const Indices& written, Words& words) {
  if (written.size() * ts.size() <= 4096) {
    for (size_t w : written) {
      int64_t same = -1;
      for (size_t j = 0; j < ts.size() && same < 0; j++)
        if (j != w && ts[j].unsafeGetTensorImpl() == ts[w].unsafeGetTensorImpl())
          same = static_cast<int64_t>(j);
      words.push_back(same);
    }
    return;
  }
  // per tensor, its first two indices
  std::unordered_map<const c10::TensorImpl*, std::pair<int64_t, int64_t>> first;
  for (size_t j = 0; j < ts.size(); j++) {
    auto it = first.emplace(ts[j].unsafeGetTensorImpl(), std::make_pair(int64_t(j), int64_t(-1)));
    if (!it.second && it.first->second.second < 0) it.first->second.second = int64_t(j);
  }
  for (size_t w : written) {
    const auto& f = first[ts[w].unsafeGetTensorImpl()];
    words.push_back(f.first != static_cast<int64_t>(w) ? f.first : f.second);
  }
}

// The key of a call on the stack, its tensors and its slot values. False: not
// cacheable.
bool key_of(const c10::OperatorHandle& op, const torch::jit::Stack& stack, Key& key,
            Tensors& ts, Slots& slots) {
  const auto& schema = op.schema();
  size_t n = schema.arguments().size();
  key.words.clear();
  key.words.push_back(static_cast<int64_t>(reinterpret_cast<uintptr_t>(&schema)));
  const std::vector<bool>* lift = nullptr;
  if (!tiled_layout()) {
    std::lock_guard<std::mutex> lock(g_lift_mutex);
    auto it = g_lift.find(&schema);
    if (it != g_lift.end()) lift = &it->second;   // entries are never erased
  }
  Indices written;   // ts indices of the tensors the schema marks written
  for (size_t i = stack.size() - n, a = 0; i < stack.size(); i++, a++) {
    bool slot = lift && a < lift->size() && (*lift)[a];
    size_t before = ts.size();
    if (!encode(stack[i], key.words, ts, slot ? &slots : nullptr)) return false;
    const c10::AliasInfo* alias = schema.arguments()[a].alias_info();
    if (alias && alias->isWrite())
      for (size_t t = before; t < ts.size(); t++) written.push_back(t);
  }
  if (ts.empty()) return false;
  // a written tensor that is also another argument (addcmul_'s out= self) may
  // be updated in place by the kernel: which one it is belongs to the key
  // (spike_torch._generic._same_as is the same rule)
  if (!written.empty()) {
    key.words.push_back(kList);
    append_same_tensors(ts, written, key.words);
    key.words.push_back(kEnd);
  }
  size_t h = 1469598103934665603ull;
  for (int64_t w : key.words) h = (h ^ static_cast<size_t>(w)) * 1099511628211ull;
  key.hash = h;
  return true;
}

// ---- the cache ---------------------------------------------------------------

struct OutSpec {
  std::vector<int64_t> sizes;
  c10::ScalarType dtype;
};

enum class Ret { Output, Arg, None };

struct RetSpec {
  Ret kind;
  size_t index;                // Output: which output; Arg: which argument of the schema
};

// A kernel input that holds a slot's value, converted to its dtype.
struct SlotInput {
  size_t slot;
  c10::ScalarType dtype;       // Double, Float, Half or BFloat16
  c10::ScalarType via;         // Half or BFloat16: rounded to that first; else Undefined
};

constexpr size_t kSlotBytes = 8;   // spike_torch._scalar_slots.SLOT_BYTES

// A loaded kernel and how a call maps onto it (spike_torch._generic._Plan).
struct Entry {
  PyObject* model = nullptr;   // spike NrtModel (owned)
  uint64_t generation = 0;     // the runtime it is loaded into
  c10::DeviceIndex core = 0;
  // kernel inputs (the model's order): an index into ts, or -1 - j for the
  // slot input slot_inputs[j]
  std::vector<int64_t> in_idx;
  std::vector<bool> raw;       // per kernel input: a permuted tensor read as it lies
  std::vector<SlotInput> slot_inputs;
  size_t n_slots = 0;          // the slot values a call has
  // per slot, the dtype its value must fit (an alpha or value PyTorch
  // converts with an overflow check), or Undefined; empty: none checked
  std::vector<c10::ScalarType> slot_limits;
  int overlap = 0;             // how calls check their written tensors (check_overlap)
  bool foreach = false;        // a _foreach_ op (see overlaps_another)
  std::vector<OutSpec> outs;   // n_results fresh results, then one per mutation
  size_t n_results = 0;
  std::vector<size_t> mutations;   // ts indices of the arguments written
  // per mutation, the kernel input (the model's order) its output aliases,
  // the argument updated in place, or -1
  std::vector<int64_t> inplace;
  std::vector<RetSpec> rets;
  ~Entry() {
    if (model && Py_IsInitialized()) {
      PyGILState_STATE g = PyGILState_Ensure();
      Py_DECREF(model);
      PyGILState_Release(g);
    }
  }
};

std::mutex g_mutex;
std::unordered_map<Key, std::shared_ptr<Entry>, KeyHash> g_cache;
std::atomic<int64_t> g_hits{0};

// The calls in progress on this thread that went to Python: the key each
// would be filed under, and its tensors (eager_register checks them).
struct Pending {
  const c10::OperatorHandle* op;
  Key key;
  Tensors ts;
  size_t n_slots;
};
thread_local std::vector<Pending> t_pending;

struct PendingScope {
  explicit PendingScope(Pending p) { t_pending.push_back(std::move(p)); }
  ~PendingScope() { t_pending.pop_back(); }
  PendingScope(const PendingScope&) = delete;
  PendingScope& operator=(const PendingScope&) = delete;
};

struct Gil {
  PyGILState_STATE state;
  Gil() : state(PyGILState_Ensure()) {}
  ~Gil() { PyGILState_Release(state); }
  Gil(const Gil&) = delete;
  Gil& operator=(const Gil&) = delete;
};

// Raises the Python error that is set as a C++ exception PyTorch's bindings
// turn back into it.
[[noreturn]] void throw_python_error() {
  python_error err;
  err.persist();
  throw std::move(err);
}

// ---- a call from the cache -----------------------------------------------------

// Raises NRT_CLOSED, naming the op, for a tensor of a runtime closed since.
void check_live(const c10::OperatorHandle& op, const at::Tensor& t) {
  if (storage_is_live(t.storage())) return;
  const auto& schema = op.schema();
  std::string what = "nkipy " + schema.name();
  if (!schema.overload_name().empty()) what += "." + schema.overload_name();
  check_storage_live(t.storage(), what.c_str());
}

// The returns of a call, in place of its arguments on the stack.
// A return the kernel does not compute (native_batch_norm_backward's weight
// gradient when there is no weight) is an undefined tensor where the schema
// returns a Tensor (autograd refuses None there), else None.
void push_returns(const c10::OperatorHandle& op, const Entry& e,
                  const Tensors& outs, torch::jit::Stack* stack, size_t n_args) {
  size_t first = stack->size() - n_args;   // the call's arguments on the stack
  const auto& returns = op.schema().returns();
  c10::SmallVector<c10::IValue, 4> rets;
  rets.reserve(e.rets.size());
  for (size_t i = 0; i < e.rets.size(); i++) {
    const RetSpec& r = e.rets[i];
    if (r.kind == Ret::Output)
      rets.emplace_back(outs[r.index]);
    else if (r.kind == Ret::Arg)
      rets.push_back((*stack)[first + r.index]);
    else if (returns[i].type()->kind() == c10::TypeKind::TensorType)
      rets.emplace_back(at::Tensor());
    else
      rets.emplace_back();
  }
  torch::jit::drop(*stack, n_args);
  for (c10::IValue& v : rets) stack->push_back(std::move(v));
}

// Runs the kernel without the GIL (spike's model_run_at; a caller that holds
// it, a torch.ops call, lets it go meanwhile); an error is raised as spike
// raises it.
void execute(const Entry& e, c10::SmallVectorImpl<void*>& addresses) {
  nkrt_status_t st;
  uint32_t n = static_cast<uint32_t>(addresses.size());
  if (PyGILState_Check()) {
    Py_BEGIN_ALLOW_THREADS
    st = capi().model_run_at(e.model, addresses.data(), n);
    Py_END_ALLOW_THREADS
  } else {
    st = capi().model_run_at(e.model, addresses.data(), n);
  }
  if (st) {
    Gil gil;
    capi().raise_status(st);
    throw_python_error();
  }
}

// PyTorch's refusals of a written tensor whose result would depend on the
// order its elements are computed in. mode (spike_torch._generic.OVERLAP_*):
// 1, one that partly overlaps another argument (copy_); 2, that or one with
// elements that share memory (TensorIterator's, for pointwise ops); 3, one
// that overlaps another argument at all, or itself (index_select's).
void check_overlap(const Tensors& ts, const std::vector<size_t>& written,
                   int mode) {
  for (size_t w : written) {
    if (mode >= 2) at::assert_no_internal_overlap(ts[w]);
    for (size_t i = 0; i < ts.size(); i++) {
      if (i == w) continue;
      if (mode >= 3)
        at::assert_no_overlap(ts[w], ts[i]);
      else
        at::assert_no_partial_overlap(ts[w], ts[i]);
    }
  }
}

// Whether a written tensor shares memory with another tensor of the call (a
// view overlapping it): a foreach op's elements then see each other's writes
// on the CPU, which the one kernel does not give (spike_torch._foreach.
// overlapping; the very same tensor twice is told apart by the key).
bool overlaps_another(const Tensors& ts, const std::vector<size_t>& written) {
  for (size_t w : written) {
    const at::Tensor& a = ts[w];
    for (size_t i = 0; i < ts.size(); i++) {
      const at::Tensor& b = ts[i];
      if (b.unsafeGetTensorImpl() == a.unsafeGetTensorImpl() ||
          !b.storage().is_alias_of(a.storage()))
        continue;
      if (at::get_overlap_status(a, b) != at::MemOverlapStatus::No) return true;
    }
  }
  return false;
}

// A call on tiled storage (the spyre personality, torch_spyre/_kernels.py):
// the kernel reads its inputs' whole storages and writes fresh results, then
// a new image of each written tensor's storage, copied over it afterwards.
void run_tiled(const c10::OperatorHandle& op, const Entry& e, const Tensors& ts,
               torch::jit::Stack* stack, size_t n_args) {
  size_t n_in = e.in_idx.size(), n_out = e.outs.size();
  c10::Device device(kNkipy, e.core);
  c10::SmallVector<void*, 12> addresses(n_in + n_out, nullptr);
  for (size_t k = 0; k < n_in; k++) {
    const at::Tensor& t = ts[static_cast<size_t>(e.in_idx[k])];   // no slots when tiled
    check_live(op, t);
    addresses[k] = t.storage().mutable_data();
  }
  Tensors outs(n_out);
  for (size_t j = 0; j < n_out; j++) {
    outs[j] = at::empty(e.outs[j].sizes, at::TensorOptions().dtype(e.outs[j].dtype).device(device));
    addresses[n_in + j] = outs[j].storage().mutable_data();
  }
  for (size_t k = 0; k < e.mutations.size(); k++) check_live(op, ts[e.mutations[k]]);
  execute(e, addresses);
  for (size_t k = 0; k < e.mutations.size(); k++) {
    const at::Tensor& image = outs[e.n_results + k];
    const at::Tensor& dst = ts[e.mutations[k]];
    uint64_t n = static_cast<uint64_t>(image.numel()) * image.element_size();
    if (n == 0) continue;
    DevLoc s = locate_storage(image.storage()), d = locate_storage(dst.storage());
    check_status(capi().tensor_copy(s.generation, s.tensor, s.offset, d.tensor, d.offset, n),
                 "device copy of a written storage");
  }
  g_hits.fetch_add(1, std::memory_order_relaxed);
  push_returns(op, e, outs, stack, n_args);
}

// The device buffer of a call's slot inputs: input j at kSlotBytes * j, the
// slot's value converted to its dtype (rounded to nearest; to a half type
// through float, as spike_torch._scalar_slots.convert).
at::Tensor slot_buffer(const Entry& e, const Slots& slots, c10::Device device) {
  std::vector<uint8_t> host(kSlotBytes * e.slot_inputs.size(), 0);
  for (size_t j = 0; j < e.slot_inputs.size(); j++) {
    double v = slots[e.slot_inputs[j].slot];
    if (e.slot_inputs[j].via == c10::ScalarType::Half)
      v = static_cast<float>(c10::Half(static_cast<float>(v)));
    else if (e.slot_inputs[j].via == c10::ScalarType::BFloat16)
      v = static_cast<float>(c10::BFloat16(static_cast<float>(v)));
    uint8_t* dst = &host[kSlotBytes * j];
    switch (e.slot_inputs[j].dtype) {
      case c10::ScalarType::Float: {
        float f = static_cast<float>(v);
        std::memcpy(dst, &f, sizeof f);
        break;
      }
      case c10::ScalarType::Half: {
        c10::Half h(static_cast<float>(v));
        std::memcpy(dst, &h, sizeof h);
        break;
      }
      case c10::ScalarType::BFloat16: {
        c10::BFloat16 b(static_cast<float>(v));
        std::memcpy(dst, &b, sizeof b);
        break;
      }
      default:
        std::memcpy(dst, &v, sizeof v);
    }
  }
  at::Tensor buf = at::empty({static_cast<int64_t>(host.size())},
                             at::TensorOptions().dtype(at::kByte).device(device));
  write_bytes(buf, host.data(), host.size());
  return buf;
}

void run(const c10::OperatorHandle& op, const Entry& e, const Tensors& ts, const Slots& slots,
         torch::jit::Stack* stack, size_t n_args) {
  if (tiled_layout()) {
    run_tiled(op, e, ts, stack, n_args);
    return;
  }
  size_t n_in = e.in_idx.size(), n_out = e.outs.size();
  c10::Device device(kNkipy, e.core);
  Tensors ins(n_in);
  c10::SmallVector<void*, 12> addresses(n_in + n_out, nullptr);
  at::Tensor slot_buf;
  // an alpha or value past its dtype's range raises PyTorch's error
  for (size_t j = 0; j < e.slot_limits.size(); j++) {
    if (e.slot_limits[j] == c10::ScalarType::Undefined) continue;
    AT_DISPATCH_ALL_TYPES_AND2(c10::ScalarType::Half, c10::ScalarType::BFloat16,
                               e.slot_limits[j], "slot limit",
                               [&] { (void)c10::Scalar(slots[j]).to<scalar_t>(); });
  }
  if (!e.slot_inputs.empty()) slot_buf = slot_buffer(e, slots, device);
  for (size_t k = 0; k < n_in; k++) {
    if (e.in_idx[k] < 0) {
      addresses[k] = static_cast<uint8_t*>(slot_buf.data_ptr()) +
                     kSlotBytes * static_cast<size_t>(-1 - e.in_idx[k]);
      continue;
    }
    const at::Tensor& t = ts[static_cast<size_t>(e.in_idx[k])];
    ins[k] = t.is_contiguous() || e.raw[k] ? t : t.contiguous();
    check_live(op, ins[k]);
    addresses[k] = ins[k].data_ptr();
  }
  Tensors outs(n_out);
  for (size_t j = 0; j < e.n_results; j++)
    outs[j] = at::empty(e.outs[j].sizes, at::TensorOptions().dtype(e.outs[j].dtype).device(device));
  // whether dst's memory is that of a kernel input other than ins[skip]
  auto shared = [&](const at::Tensor& dst, size_t skip) {
    for (size_t i = 0; i < n_in; i++)
      if (i != skip && ins[i].defined() && ins[i].storage().is_alias_of(dst.storage()))
        return true;
    return false;
  };
  // a mutated argument the kernel can write directly (contiguous, the result's
  // sizes and dtype, sharing no memory with an input) is its own output. One
  // the kernel updates in place is written where its input lies: the argument
  // itself when contiguous and no other input shares its memory, else a copy
  // of it, copied back afterwards.
  c10::SmallVector<bool, 4> direct(e.mutations.size(), false);
  for (size_t k = 0; k < e.mutations.size(); k++) {
    const at::Tensor& dst = ts[e.mutations[k]];
    const OutSpec& s = e.outs[e.n_results + k];
    check_live(op, dst);
    if (e.inplace[k] >= 0) {
      size_t m = static_cast<size_t>(e.inplace[k]);
      const at::Tensor& arg = ts[static_cast<size_t>(e.in_idx[m])];
      bool own = ins[m].unsafeGetTensorImpl() == arg.unsafeGetTensorImpl();
      // the kernel writes its input m: not an argument's memory that is not
      // dst's alone (another argument sharing it, or another tensor at all)
      if (own && (arg.unsafeGetTensorImpl() != dst.unsafeGetTensorImpl() || shared(dst, m))) {
        ins[m] = ins[m].clone();
        addresses[m] = ins[m].data_ptr();
      }
      direct[k] = ins[m].unsafeGetTensorImpl() == dst.unsafeGetTensorImpl();
      outs[e.n_results + k] = ins[m];
      continue;
    }
    bool ok = dst.is_contiguous() && dst.scalar_type() == s.dtype &&
              dst.sizes() == c10::IntArrayRef(s.sizes) && !shared(dst, n_in);
    direct[k] = ok;
    outs[e.n_results + k] =
        ok ? dst : at::empty(s.sizes, at::TensorOptions().dtype(s.dtype).device(device));
  }
  for (size_t j = 0; j < n_out; j++) addresses[n_in + j] = outs[j].data_ptr();
  execute(e, addresses);
  for (size_t k = 0; k < e.mutations.size(); k++)
    if (!direct[k]) ts[e.mutations[k]].copy_(outs[e.n_results + k]);
  g_hits.fetch_add(1, std::memory_order_relaxed);
  push_returns(op, e, outs, stack, n_args);
}

void fallback(const c10::OperatorHandle& op, c10::DispatchKeySet, torch::jit::Stack* stack) {
  Key key;
  Tensors ts;
  Slots slots;
  size_t n_args = op.schema().arguments().size();
  bool cacheable = key_of(op, *stack, key, ts, slots);
  if (cacheable) {
    std::shared_ptr<Entry> e, stale;   // stale: released after the lock (it takes the GIL)
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      auto it = g_cache.find(key);
      if (it != g_cache.end()) {
        if (it->second->generation == capi().live_generation()) {
          e = it->second;
        } else {   // the runtime was reset: Python loads the kernel again
          stale = std::move(it->second);
          g_cache.erase(it);
        }
      }
    }
    if (e && e->foreach && overlaps_another(ts, e->mutations)) {
      e.reset();   // one element after another: the Python side runs PyTorch's loop
    }
    if (e) {
      NKIPY_LOG("eager %s: from the C++ cache", op.schema().name().c_str());
      if (e->overlap) check_overlap(ts, e->mutations, e->overlap);
      run(op, *e, ts, slots, stack, n_args);
      return;
    }
  }
  std::unique_ptr<PendingScope> scope;
  if (cacheable)
    scope = std::make_unique<PendingScope>(Pending{&op, std::move(key), ts, slots.size()});
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::PrivateUse2), stack);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&fallback>());
}


// ---- the Python side ---------------------------------------------------------

std::vector<size_t> index_list(PyObject* seq, size_t bound, const char* what) {
  std::vector<size_t> out;
  for (int64_t v : int64_list(seq, what)) {
    if (v < 0 || static_cast<size_t>(v) >= bound) {
      PyErr_Format(PyExc_ValueError, "%s index %lld out of range [0, %zu)",
                   what, static_cast<long long>(v), bound);
      throw PyErrorSet{};
    }
    out.push_back(static_cast<size_t>(v));
  }
  return out;
}

// eager_register(op_name, tensors, model, core, in_idx, outs, n_results,
//                mutations, rets, slot_inputs, n_slots, raw, inplace, limits,
//                overlap) -> bool
PyObject* eager_register(PyObject*, PyObject* args) {
  const char* name;
  PyObject *tensors, *model, *in_idx, *outs, *mutations, *rets, *slot_inputs, *raw, *inplace,
      *limits;
  int core, overlap;
  Py_ssize_t n_results, n_slots;
  if (!PyArg_ParseTuple(args, "sOOiOOnOOOnOOOi:eager_register", &name, &tensors, &model, &core,
                        &in_idx, &outs, &n_results, &mutations, &rets, &slot_inputs, &n_slots,
                        &raw, &inplace, &limits, &overlap))
    return nullptr;
  if (t_pending.empty()) Py_RETURN_FALSE;   // not called from the fallback
  const Pending& p = t_pending.back();
  const auto& schema = p.op->schema();
  std::string full = schema.name();
  if (!schema.overload_name().empty()) full += "." + schema.overload_name();
  if (full != name) Py_RETURN_FALSE;
  // a kernel for the call's slots, or with its values baked in where the key
  // has none: any other kernel would serve values it was not built for
  if (n_slots < 0 || static_cast<size_t>(n_slots) != p.n_slots) Py_RETURN_FALSE;
  try {
    // the very tensors of the call in progress, in the same order
    PyObject* fast = PySequence_Fast(tensors, "eager_register: tensors");
    if (!fast) throw PyErrorSet{};
    bool same = static_cast<size_t>(PySequence_Fast_GET_SIZE(fast)) == p.ts.size();
    for (size_t i = 0; same && i < p.ts.size(); i++) {
      PyObject* o = PySequence_Fast_GET_ITEM(fast, static_cast<Py_ssize_t>(i));
      same = THPVariable_Check(o) &&
             THPVariable_Unpack(o).unsafeGetTensorImpl() == p.ts[i].unsafeGetTensorImpl();
    }
    Py_DECREF(fast);
    if (!same) Py_RETURN_FALSE;
    auto e = std::make_shared<Entry>();
    e->core = static_cast<c10::DeviceIndex>(core);
    PyObject* fs = PySequence_Fast(slot_inputs, "eager_register: slot_inputs");
    if (!fs) throw PyErrorSet{};
    for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(fs); j++) {
      Py_ssize_t slot;
      PyObject *dtype, *via;
      if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fs, j), "nOO:eager_register slot input",
                            &slot, &dtype, &via) || !THPDtype_Check(dtype) ||
          (via != Py_None && !THPDtype_Check(via)) || slot < 0 || slot >= n_slots) {
        Py_DECREF(fs);
        if (!PyErr_Occurred())
          PyErr_SetString(PyExc_ValueError, "eager_register: a slot input is (slot, dtype, "
                          "half dtype or None), slot < n_slots");
        throw PyErrorSet{};
      }
      c10::ScalarType st = reinterpret_cast<THPDtype*>(dtype)->scalar_type;
      c10::ScalarType vt = via == Py_None ? c10::ScalarType::Undefined
                                          : reinterpret_cast<THPDtype*>(via)->scalar_type;
      bool half = st == c10::ScalarType::Half || st == c10::ScalarType::BFloat16;
      if ((st != c10::ScalarType::Float && st != c10::ScalarType::Double && !half) ||
          (vt != c10::ScalarType::Undefined && vt != c10::ScalarType::Half &&
           vt != c10::ScalarType::BFloat16)) {
        Py_DECREF(fs);
        PyErr_SetString(PyExc_ValueError, "eager_register: a slot input is a float dtype, "
                        "rounded first to a half dtype or not");
        throw PyErrorSet{};
      }
      e->slot_inputs.push_back({static_cast<size_t>(slot), st, vt});
    }
    Py_DECREF(fs);
    e->n_slots = static_cast<size_t>(n_slots);
    if (overlap < 0 || overlap > 3) {
      PyErr_SetString(PyExc_ValueError, "eager_register: overlap is 0 to 3");
      throw PyErrorSet{};
    }
    e->overlap = overlap;
    e->foreach = full.rfind("aten::_foreach_", 0) == 0;
    PyObject* fl = PySequence_Fast(limits, "eager_register: limits");
    if (!fl) throw PyErrorSet{};
    Py_ssize_t n_limits = PySequence_Fast_GET_SIZE(fl);
    bool limits_ok = n_limits == 0 || n_limits == n_slots;
    for (Py_ssize_t j = 0; limits_ok && j < n_limits; j++) {
      PyObject* d = PySequence_Fast_GET_ITEM(fl, j);
      limits_ok = d == Py_None || THPDtype_Check(d);
      if (limits_ok)
        e->slot_limits.push_back(d == Py_None ? c10::ScalarType::Undefined
                                              : reinterpret_cast<THPDtype*>(d)->scalar_type);
    }
    Py_DECREF(fl);
    if (!limits_ok) {
      PyErr_SetString(PyExc_ValueError, "eager_register: limits are a dtype or None per slot "
                      "(or none at all)");
      throw PyErrorSet{};
    }
    for (int64_t v : int64_list(in_idx, "input")) {
      int64_t n_slot_in = static_cast<int64_t>(e->slot_inputs.size());
      if (v >= static_cast<int64_t>(p.ts.size()) || v < -n_slot_in) {
        PyErr_Format(PyExc_ValueError, "eager_register: input index %lld out of range "
                     "[-%lld, %zu)", static_cast<long long>(v),
                     static_cast<long long>(n_slot_in), p.ts.size());
        throw PyErrorSet{};
      }
      e->in_idx.push_back(v);
    }
    // a tensor read as it lies is one the key holds the permutation of
    std::vector<int64_t> raw_flags = int64_list(raw, "raw");
    if (raw_flags.size() != e->in_idx.size()) {
      PyErr_SetString(PyExc_ValueError, "eager_register: one raw flag per kernel input");
      throw PyErrorSet{};
    }
    for (size_t k = 0; k < raw_flags.size(); k++) {
      bool r = raw_flags[k] != 0;
      if (r) {
        if (e->in_idx[k] < 0) Py_RETURN_FALSE;
        const at::Tensor& t = p.ts[static_cast<size_t>(e->in_idx[k])];
        std::vector<int64_t> perm;
        if (t.is_contiguous() || !dense_perm(t, perm)) Py_RETURN_FALSE;
      }
      e->raw.push_back(r);
    }
    e->mutations = index_list(mutations, p.ts.size(), "eager_register: mutation");
    // an argument updated in place is the kernel input it is written into
    e->inplace = int64_list(inplace, "inplace");
    if (e->inplace.size() != e->mutations.size()) {
      PyErr_SetString(PyExc_ValueError, "eager_register: one inplace entry per mutation");
      throw PyErrorSet{};
    }
    for (size_t k = 0; k < e->inplace.size(); k++) {
      int64_t m = e->inplace[k];
      if (m < -1 || m >= static_cast<int64_t>(e->in_idx.size()) ||
          (m >= 0 && (e->in_idx[static_cast<size_t>(m)] < 0 ||
                      p.ts[static_cast<size_t>(e->in_idx[static_cast<size_t>(m)])]
                              .unsafeGetTensorImpl() !=
                          p.ts[e->mutations[k]].unsafeGetTensorImpl() ||
                      e->raw[static_cast<size_t>(m)]))) {
        PyErr_Format(PyExc_ValueError, "eager_register: inplace entry %lld is not -1 or the "
                     "kernel input of the tensor written (read contiguous)", static_cast<long long>(m));
        throw PyErrorSet{};
      }
    }
    PyObject* fo = PySequence_Fast(outs, "eager_register: outs");
    if (!fo) throw PyErrorSet{};
    for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(fo); j++) {
      PyObject *sizes, *dtype;
      if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fo, j), "OO:eager_register output",
                            &sizes, &dtype) || !THPDtype_Check(dtype)) {
        Py_DECREF(fo);
        if (!PyErr_Occurred())
          PyErr_SetString(PyExc_TypeError, "eager_register: an output is (sizes, dtype)");
        throw PyErrorSet{};
      }
      e->outs.push_back({int64_list(sizes, "output sizes"),
                         reinterpret_cast<THPDtype*>(dtype)->scalar_type});
    }
    Py_DECREF(fo);
    if (n_results < 0 ||
        static_cast<size_t>(n_results) + e->mutations.size() != e->outs.size()) {
      PyErr_SetString(PyExc_ValueError, "eager_register: outs must be n_results results and "
                      "one per mutation");
      throw PyErrorSet{};
    }
    e->n_results = static_cast<size_t>(n_results);
    PyObject* fr = PySequence_Fast(rets, "eager_register: rets");
    if (!fr) throw PyErrorSet{};
    for (Py_ssize_t j = 0; j < PySequence_Fast_GET_SIZE(fr); j++) {
      const char* kind;
      Py_ssize_t index;
      if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fr, j), "sn:eager_register return", &kind,
                            &index)) {
        Py_DECREF(fr);
        throw PyErrorSet{};
      }
      std::string k(kind);
      bool ok = (k == "output" && index >= 0 && static_cast<size_t>(index) < e->n_results) ||
                (k == "arg" && index >= 0 &&
                 static_cast<size_t>(index) < schema.arguments().size()) ||
                k == "none";
      if (!ok) {
        Py_DECREF(fr);
        PyErr_Format(PyExc_ValueError, "eager_register: bad return (%s, %zd)", kind, index);
        throw PyErrorSet{};
      }
      e->rets.push_back({k == "output" ? Ret::Output : k == "arg" ? Ret::Arg : Ret::None,
                         static_cast<size_t>(index)});
    }
    Py_DECREF(fr);
    if (e->rets.size() != schema.returns().size()) {
      PyErr_Format(PyExc_ValueError, "eager_register: %zu returns, the schema has %zu",
                   e->rets.size(), schema.returns().size());
      throw PyErrorSet{};
    }
    Py_INCREF(model);
    e->model = model;
    e->generation = capi().live_generation();
    std::lock_guard<std::mutex> lock(g_mutex);
    g_cache[p.key] = std::move(e);
  } catch (const PyErrorSet&) {
    return nullptr;
  }
  Py_RETURN_TRUE;
}

// eager_lift(op_name, positions): the floats of these argument positions of
// op_name ("aten::add.Tensor") are slots in its calls' keys from now on (the
// first call for an operator holds).
PyObject* eager_lift(PyObject*, PyObject* args) {
  const char* name;
  PyObject* positions;
  if (!PyArg_ParseTuple(args, "sO:eager_lift", &name, &positions)) return nullptr;
  std::string full(name);
  size_t dot = full.find('.');
  c10::OperatorName opname(full.substr(0, dot),
                           dot == std::string::npos ? "" : full.substr(dot + 1));
  auto handle = c10::Dispatcher::singleton().findSchema(opname);
  if (!handle) {
    PyErr_Format(PyExc_ValueError, "eager_lift: no operator %s", name);
    return nullptr;
  }
  const c10::FunctionSchema* schema = &handle->schema();
  std::vector<bool> lift(schema->arguments().size(), false);
  try {
    for (int64_t v : int64_list(positions, "positions")) {
      if (v < 0 || static_cast<size_t>(v) >= lift.size()) {
        PyErr_Format(PyExc_ValueError, "eager_lift: %s has no argument %lld", name,
                     static_cast<long long>(v));
        throw PyErrorSet{};
      }
      lift[static_cast<size_t>(v)] = true;
    }
  } catch (const PyErrorSet&) {
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(g_lift_mutex);
  g_lift.emplace(schema, std::move(lift));   // the first call holds: keys may point at it
  Py_RETURN_NONE;
}

PyObject* eager_clear(PyObject*, PyObject*) {
  std::unordered_map<Key, std::shared_ptr<Entry>, KeyHash> old;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    old.swap(g_cache);
  }
  Py_RETURN_NONE;   // entries release their models here, under the GIL
}

PyObject* eager_stats(PyObject*, PyObject*) {
  size_t n;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    n = g_cache.size();
  }
  return Py_BuildValue("{sLsn}", "fast_calls", static_cast<long long>(g_hits.load()),
                       "cached_calls", static_cast<Py_ssize_t>(n));
}

PyObject* eager_check_overlap(PyObject*, PyObject* args) {
  PyObject *tensors, *written;
  int mode;
  if (!PyArg_ParseTuple(args, "OOi:eager_check_overlap", &tensors, &written, &mode))
    return nullptr;
  HANDLE_TH_ERRORS
  Tensors ts;
  PyObject* fast = PySequence_Fast(tensors, "eager_check_overlap: tensors");
  if (!fast) return nullptr;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(fast); i++) {
    PyObject* o = PySequence_Fast_GET_ITEM(fast, i);
    if (!THPVariable_Check(o)) {
      Py_DECREF(fast);
      PyErr_SetString(PyExc_TypeError, "eager_check_overlap: tensors must be tensors");
      return nullptr;
    }
    ts.push_back(THPVariable_Unpack(o));
  }
  Py_DECREF(fast);
  std::vector<size_t> w;
  try {
    w = index_list(written, ts.size(), "eager_check_overlap: written");
  } catch (const PyErrorSet&) {
    return nullptr;
  }
  check_overlap(ts, w, mode);
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyMethodDef g_methods[] = {
    {"eager_register", eager_register, METH_VARARGS,
     "eager_register(op_name, tensors, model, core, in_idx, outs, n_results, mutations, "
     "rets, slot_inputs, n_slots, raw, limits, overlap) -> bool\n\n"
     "Files a loaded kernel under the key of the fallback call in progress on this thread, "
     "if that call is op_name on exactly these tensors with n_slots slot values (else "
     "False: nothing filed). in_idx: the kernel's inputs (the model's order) as indices "
     "into tensors, or -1 - j for slot_inputs[j], a (slot, dtype, via) the call fills with "
     "that slot's value (rounded to the half dtype via first, unless None); raw: per kernel "
     "input, whether it is a permuted tensor the kernel reads as it lies; outs: (sizes, "
     "dtype) "
     "of the n_results fresh results, then of one output per mutated tensor (mutations: "
     "indices into tensors); rets: per schema return ('output', j), ('arg', position) or "
     "('none', 0); limits: per slot, the dtype its value must fit or None (empty: no "
     "checks); a call whose value does not fit raises PyTorch's overflow error; overlap: "
     "the mode in which each call checks its written tensors (eager_check_overlap; 0: none)."},
    {"eager_check_overlap", eager_check_overlap, METH_VARARGS,
     "eager_check_overlap(tensors, written, mode)\n\nRaises PyTorch's error where a tensor "
     "of tensors at an index of written partly overlaps another of tensors (mode 1), or "
     "that or has elements that share memory (mode 2), or overlaps another at all or "
     "itself (mode 3)."},
    {"eager_clear", eager_clear, METH_NOARGS, "eager_clear()\n\nEmpties the C++ call cache."},
    {"eager_lift", eager_lift, METH_VARARGS,
     "eager_lift(op_name, positions)\n\nMakes the floats of these argument positions of "
     "op_name ('aten::add.Tensor') scalar slots of its calls' keys "
     "(spike_torch._scalar_slots)."},
    {"eager_stats", eager_stats, METH_NOARGS,
     "eager_stats() -> dict\n\nfast_calls: calls served from the C++ cache so far; "
     "cached_calls: keys filed."},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef g_module = {PyModuleDef_HEAD_INIT, "spike_torch._eager_cache",
                        "The C++ call cache of the nkipy device's eager ops.", -1, g_methods,
                        nullptr, nullptr, nullptr, nullptr};

}  // namespace

extern "C" {

// Writes "[spike_torch] <message>" to stderr when SPIKE_TORCH_DEBUG is on.
__attribute__((visibility("default"))) void spike_torch_debug_log(const char* message) {
  if (message != nullptr) NKIPY_LOG("%s", message);
}

// Makes the fallback the PrivateUse1 kernel of aten op `name` ("add.Tensor"),
// which PyTorch would otherwise run through a composite kernel (add as an
// empty result and add.out, layer norm as a batch norm and an addcmul): one
// kernel, one cache lookup. spike_torch._generic.SERVED_OPS lists them.
// Returns 0, or -1 with the reason in `error` (size `n`).
__attribute__((visibility("default"))) int spike_torch_serve_op(const char* name, char* error,
                                                                 size_t n) {
  static auto* lib = new torch::Library(torch::Library::IMPL, "aten",
                                        c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  try {
    lib->impl(name, torch::CppFunction::makeFromBoxedFunction<&fallback>());
  } catch (const std::exception& e) {
    std::snprintf(error, n, "%s", e.what());
    return -1;
  }
  return 0;
}

__attribute__((visibility("default"))) PyObject* spike_torch_eager_py_module() {
  return PyModule_Create(&g_module);
}

}  // extern "C"

}  // namespace spike_torch
