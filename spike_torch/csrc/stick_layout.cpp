// spike_torch/csrc/stick_layout.cpp - the tiled personality's storage (the
// spyre device): a tensor's bytes lie in device memory in 128-byte "sticks"
// along its stick dimension, padded to whole sticks. Here: the dtype policy
// (int64 held as int32, bool as float16), the default tiling, the layout
// recorded on each allocator block, and the factory kernels that allocate
// tiled storage, registered by register_tiled_kernels(). Tiling and untiling
// the bytes themselves is done by torch ops that torch_spyre/_layout.py builds
// from a layout (on the host for copies, inside device kernels for ops).

#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/as_strided_native.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <optional>
#include <utility>
#include <vector>

#include "nkipy_device.h"

namespace spike_torch {

namespace {
// Whether allocating an int64 tensor warns that it is held as int32
// (torch.spyre.set_downcast_warning, TORCH_SPYRE_DOWNCAST_WARN).
std::atomic<int> g_downcast_warn{1};
}  // namespace

// The tiled personality's debug lines: "[function] message" on stdout.
#define STICK_LOG(fn, ...)                                 \
  do {                                                     \
    if (g_debug.load(std::memory_order_relaxed)) {         \
      std::printf("[%s] ", fn);                            \
      std::printf(__VA_ARGS__);                            \
      std::printf("\n");                                   \
      std::fflush(stdout);                                 \
    }                                                      \
  } while (0)

at::ScalarType stick_device_dtype(at::ScalarType host) {
  switch (host) {
    case at::kHalf:
    case at::kFloat:
    case at::kBFloat16:
    case at::kChar:
    case at::kShort:
    case at::kInt:
      return host;
    case at::kLong:
      return at::kInt;
    case at::kBool:
      return at::kHalf;
    default:
      TORCH_CHECK_TYPE(false, "the ", device_name(), " device holds no torch.",
                       c10::getDtypeNames(host).first, " tensors: it holds float16, float32, bfloat16, int8, int16, int32, "
                       "int64 (as int32) and bool (as float16)");
  }
}

StickLayout default_stick_layout(c10::IntArrayRef sizes, at::ScalarType host_dtype,
                                 c10::IntArrayRef dim_order) {
  int64_t ndim = static_cast<int64_t>(sizes.size());
  TORCH_CHECK(ndim <= 6, "the ", device_name(), " device holds tensors of at most 6 dimensions, got ",
              ndim);
  StickLayout l;
  l.host_size = sizes.vec();
  l.device_dtype = stick_device_dtype(host_dtype);
  int64_t elems = kStickBytes / static_cast<int64_t>(c10::elementSize(l.device_dtype));
  std::vector<int64_t> order;
  if (dim_order.empty()) {
    for (int64_t d = 0; d < ndim; d++) order.push_back(d);
  } else {
    TORCH_CHECK(static_cast<int64_t>(dim_order.size()) == ndim, "dim_order ", dim_order,
                " is not a permutation of the ", ndim, " dimensions of ", sizes);
    std::vector<bool> seen(ndim, false);
    for (int64_t d : dim_order) {
      TORCH_CHECK(d >= 0 && d < ndim && !seen[d], "dim_order ", dim_order,
                  " is not a permutation of the ", ndim, " dimensions of ", sizes);
      seen[d] = true;
      order.push_back(d);
    }
  }
  std::vector<int64_t> kept;  // size-1 dimensions are dropped before tiling
  for (int64_t d : order)
    if (sizes[d] != 1) kept.push_back(d);
  if (kept.empty()) {  // 0-d or all ones: one element in one stick
    l.device_size = {elems};
    l.dim_map = {-1};
    return l;
  }
  int64_t stick = kept.back();
  int64_t tiles = (sizes[stick] + elems - 1) / elems;
  if (kept.size() == 1) {
    l.device_size = {tiles, elems};
    l.dim_map = {stick, stick};
    return l;
  }
  for (size_t i = 1; i + 1 < kept.size(); i++) {
    l.device_size.push_back(sizes[kept[i]]);
    l.dim_map.push_back(kept[i]);
  }
  l.device_size.push_back(tiles);
  l.dim_map.push_back(stick);
  l.device_size.push_back(sizes[kept[0]]);
  l.dim_map.push_back(kept[0]);
  l.device_size.push_back(elems);
  l.dim_map.push_back(stick);
  return l;
}

size_t stick_layout_bytes(const StickLayout& layout) {
  size_t n = kStickBytes;
  for (size_t i = 0; i + 1 < layout.device_size.size(); i++)
    n *= static_cast<size_t>(layout.device_size[i]);
  return n;
}

namespace {

Block* storage_block(const c10::Storage& storage) {
  const c10::DataPtr& dp = storage.data_ptr();
  if (dp.get_deleter() != &block_deleter || !dp.get_context()) return nullptr;
  return static_cast<Block*>(dp.get_context());
}

}  // namespace

std::shared_ptr<const StickLayout> storage_layout(const c10::Storage& storage) {
  Block* b = storage_block(storage);
  return b ? b->layout : nullptr;
}

void set_storage_layout(const c10::Storage& storage, std::shared_ptr<const StickLayout> layout) {
  Block* b = storage_block(storage);
  if (!b) {
    TORCH_CHECK(!layout || stick_layout_bytes(*layout) == 0 || storage.nbytes() == 0,
                "set_storage_layout: the storage holds no ", device_name(), " device memory");
    return;
  }
  TORCH_CHECK(!layout || stick_layout_bytes(*layout) <= storage.nbytes(), "a layout of ",
              stick_layout_bytes(*layout), " bytes does not fit a storage of ", storage.nbytes(),
              " bytes");
  b->layout = std::move(layout);
}

namespace {

// Once per process (every time under torch.set_warn_always(True)), a
// UserWarning with exactly torch-spyre's text.
void warn_downcast() {
  static std::atomic<bool> warned{false};
  if (warned.exchange(true) && !c10::WarningUtils::get_warnAlways()) return;
  c10::warn(c10::Warning(
      c10::UserWarning(),
      c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
      "Backend Spyre does not support int64; downcasting to int32 may change values outside the "
      "32-bit range. You can silence this via warnings.filterwarnings(...) or "
      "spyre.set_downcast_warning(False) or TORCH_SPYRE_DOWNCAST_WARN env. variable.",
      /*verbatim=*/true));
}

// A tensor of `sizes` (contiguous strides) over fresh device memory tiled by
// `layout`. int64 tensors keep 8 bytes per element of storage (PyTorch checks
// views against the storage's size) of which the tiled int32 data uses half.
at::Tensor tiled_tensor(c10::IntArrayRef sizes, at::ScalarType dtype, c10::DeviceIndex device,
                        std::shared_ptr<const StickLayout> layout) {
  CurrentDeviceScope scope(device);
  size_t nbytes = stick_layout_bytes(*layout);
  size_t numel = 1;
  for (int64_t s : sizes) numel *= static_cast<size_t>(s);
  if (numel == 0) nbytes = 0;
  nbytes = std::max(nbytes, numel * c10::elementSize(dtype));
  c10::DataPtr dp = device_allocator()->allocate(nbytes);
  auto storage = c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(),
                                                       nbytes, std::move(dp), device_allocator(),
                                                       /*resizable=*/true);
  c10::Storage st(storage);
  if (numel > 0) set_storage_layout(st, std::move(layout));
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      caffe2::TypeMeta::fromScalarType(dtype));
  t.unsafeGetTensorImpl()->set_sizes_contiguous(sizes);
  if (dtype == at::kLong && g_downcast_warn.load()) warn_downcast();
  STICK_LOG("empty", "%zu bytes of %s:%d memory for a torch.%s tensor of %zu elements", nbytes,
            device_name(), static_cast<int>(device), std::string(c10::getDtypeNames(dtype).first).c_str(),
            numel);
  return t;
}

bool contiguous_strides(c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  int64_t expected = 1;
  for (int64_t d = static_cast<int64_t>(sizes.size()) - 1; d >= 0; d--) {
    if (sizes[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

// Tiled tensors are always row-major over their storage's host tensor: a
// memory format other than contiguous gives contiguous strides too.
at::Tensor tiled_empty(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                       std::optional<at::Layout> layout, std::optional<at::Device> device,
                       std::optional<bool> pin_memory,
                       std::optional<at::MemoryFormat> memory_format) {
  (void)layout;
  (void)pin_memory;
  (void)memory_format;
  int64_t numel = 1;
  for (int64_t s : size) {
    TORCH_CHECK(s >= 0, "empty: negative dimension ", s, " in ", size);
    numel *= s;
  }
  at::ScalarType dt = c10::dtype_or_default(dtype);
  if (numel == 0) {  // no elements, no layout: any dtype (a batch norm's empty uint8 reserve)
    CurrentDeviceScope scope(factory_device(device));
    return at::detail::empty_generic(size, device_allocator(),
                                     c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), dt,
                                     std::nullopt);
  }
  return tiled_tensor(size, dt, factory_device(device),
                      std::make_shared<const StickLayout>(default_stick_layout(size, dt)));
}

// Strides other than contiguous: the storage holds a 1-D host tensor spanning
// every element the strides reach, and the result is a view of it.
at::Tensor tiled_empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                               std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> pin_memory) {
  if (contiguous_strides(size, stride)) return tiled_empty(size, dtype, layout, device, pin_memory, {});
  int64_t span = 1;
  for (size_t d = 0; d < size.size(); d++) {
    TORCH_CHECK(size[d] >= 0 && stride[d] >= 0, "empty_strided: bad size ", size, " or stride ",
                stride);
    if (size[d] == 0) span = 0;
  }
  if (span) {
    for (size_t d = 0; d < size.size(); d++) span += (size[d] - 1) * stride[d];
  }
  at::Tensor base = tiled_empty({span}, dtype, layout, device, pin_memory, {});
  return at::native::as_strided_tensorimpl(base, size, stride, 0);
}

void put(std::vector<int64_t>& out, const std::vector<int64_t>& v) {
  out.push_back(static_cast<int64_t>(v.size()));
  out.insert(out.end(), v.begin(), v.end());
}

// [n_host, host_size..., n_dev, device_size..., dim_map..., device_dtype]
std::vector<int64_t> encode(const StickLayout& l) {
  std::vector<int64_t> out;
  put(out, l.host_size);
  put(out, l.device_size);
  out.insert(out.end(), l.dim_map.begin(), l.dim_map.end());
  out.push_back(static_cast<int64_t>(l.device_dtype));
  return out;
}

int write_out(const std::vector<int64_t>& v, int64_t* out, int cap) {
  if (static_cast<int>(v.size()) > cap) return -1;
  std::memcpy(out, v.data(), v.size() * sizeof(int64_t));
  return static_cast<int>(v.size());
}

c10::Storage borrow(void* storage_impl) {
  return c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(
      static_cast<c10::StorageImpl*>(storage_impl)));
}

template <typename Fn>
int guarded(char* err, size_t n, Fn&& fn) {
  try {
    return fn();
  } catch (const c10::Error& e) {
    std::snprintf(err, n, "%s", e.what_without_backtrace());
  } catch (const std::exception& e) {
    std::snprintf(err, n, "%s", e.what());
  }
  return -1;
}

}  // namespace

void register_tiled_kernels() {
  torch::Library* lib = &personality_kernels();
  lib->impl("empty.memory_format", TORCH_FN(tiled_empty));
  lib->impl("empty_strided", TORCH_FN(tiled_empty_strided));
}

// ---------------------------------------------------------------------------
// C entry points (torch_spyre/_layout.py, through ctypes)
// ---------------------------------------------------------------------------

extern "C" {

// The default layout of a host tensor, encoded into `out` (see encode());
// returns the count written, or -1 with a message in `err`.
__attribute__((visibility("default"))) int spike_torch_stick_default(
    const int64_t* sizes, int ndim, int dtype, const int64_t* dim_order, int n_order, int64_t* out,
    int cap, char* err, size_t errn) {
  return guarded(err, errn, [&] {
    StickLayout l = default_stick_layout(c10::IntArrayRef(sizes, ndim),
                                         static_cast<at::ScalarType>(dtype),
                                         c10::IntArrayRef(dim_order, n_order));
    return write_out(encode(l), out, cap);
  });
}

// Whether allocating an int64 tensor warns (set: 0 or 1; get: pass -1).
__attribute__((visibility("default"))) int spike_torch_downcast_warning(int value) {
  if (value >= 0) g_downcast_warn = value ? 1 : 0;
  return g_downcast_warn.load();
}

// A "[function] message" debug line of the tiled personality (when debugging).
__attribute__((visibility("default"))) void spike_torch_stick_log(const char* fn,
                                                                  const char* msg) {
  STICK_LOG(fn, "%s", msg);
}

// The device dtype (a c10::ScalarType number) a host dtype is held in, or -1
// with a message in `err`.
__attribute__((visibility("default"))) int spike_torch_stick_device_dtype(int dtype, char* err,
                                                                          size_t errn) {
  return guarded(err, errn, [&] {
    return static_cast<int>(stick_device_dtype(static_cast<at::ScalarType>(dtype)));
  });
}

// The layout recorded for a storage (a c10::StorageImpl*), encoded; 0 if none.
__attribute__((visibility("default"))) int spike_torch_storage_layout(void* storage_impl,
                                                                      int64_t* out, int cap) {
  if (!storage_impl) return 0;
  std::shared_ptr<const StickLayout> l = storage_layout(borrow(storage_impl));
  return l ? write_out(encode(*l), out, cap) : 0;
}

// Records an encoded layout for a storage; 0, or -1 with a message in `err`.
__attribute__((visibility("default"))) int spike_torch_set_storage_layout(void* storage_impl,
                                                                          const int64_t* buf,
                                                                          int n, char* err,
                                                                          size_t errn) {
  return guarded(err, errn, [&] {
    auto l = std::make_shared<StickLayout>();
    int i = 0;
    auto take = [&](std::vector<int64_t>& v, int64_t count) {
      TORCH_CHECK(count >= 0 && i + count <= n, "malformed layout");
      v.assign(buf + i, buf + i + count);
      i += static_cast<int>(count);
    };
    TORCH_CHECK(n >= 1, "malformed layout");
    int64_t nh = buf[i++];
    take(l->host_size, nh);
    TORCH_CHECK(i < n, "malformed layout");
    int64_t nd = buf[i++];
    take(l->device_size, nd);
    take(l->dim_map, nd);
    TORCH_CHECK(i + 1 == n, "malformed layout");
    l->device_dtype = static_cast<at::ScalarType>(buf[i]);
    TORCH_CHECK(nd >= 1 && l->device_size.back() * static_cast<int64_t>(c10::elementSize(
                                                       l->device_dtype)) == kStickBytes,
                "a layout's last device dimension is one 128-byte stick");
    set_storage_layout(borrow(storage_impl), std::move(l));
    return 0;
  });
}

// Reads (write == 0) or writes `n` bytes at byte `offset` of a storage's
// device memory from or to host memory at `host`; 0, or -1 with a message.
__attribute__((visibility("default"))) int spike_torch_storage_rw(void* storage_impl, int write,
                                                                  uint64_t offset, void* host,
                                                                  uint64_t n, char* err,
                                                                  size_t errn) {
  return guarded(err, errn, [&] {
    c10::Storage st = borrow(storage_impl);
    TORCH_CHECK(offset <= st.nbytes() && n <= st.nbytes() - offset, "bytes ", offset, "..",
                offset + n, " are outside a storage of ", st.nbytes(), " bytes");
    if (write)
      storage_write(st, offset, host, n);
    else
      storage_read(st, offset, host, n);
    return 0;
  });
}

// Copies `n` bytes from the start of storage `src` to the start of storage
// `dst` on the device; 0, or -1 with a message.
__attribute__((visibility("default"))) int spike_torch_storage_copy(void* dst_impl, void* src_impl,
                                                                    uint64_t n, char* err,
                                                                    size_t errn) {
  return guarded(err, errn, [&] {
    c10::Storage d = borrow(dst_impl), s = borrow(src_impl);
    TORCH_CHECK(n <= d.nbytes() && n <= s.nbytes(), "a copy of ", n, " bytes between storages of ",
                s.nbytes(), " and ", d.nbytes(), " bytes");
    if (n == 0) return 0;
    DevLoc dl = locate_storage(d), sl = locate_storage(s);
    TORCH_CHECK(dl.generation == sl.generation && dl.generation == api().live_generation(),
                "a storage belongs to a closed spike runtime");
    check_status(api().tensor_copy(sl.generation, sl.tensor, sl.offset, dl.tensor, dl.offset, n),
                 "device copy");
    return 0;
  });
}

}  // extern "C"

}  // namespace spike_torch
