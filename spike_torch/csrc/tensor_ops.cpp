// spike_torch/csrc/tensor_ops.cpp - the nkipy device's ATen kernels that
// create tensors or change their metadata (empty, empty_strided, views,
// resize_, set_) and fill them (fill_, zero_, _local_scalar_dense), all
// registered at the end. Views and set_ reuse ATen's native metadata code.

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/EmptyTensor.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <utility>

#include "nkipy_device.h"
#include "spike_capi.h"

namespace spike_torch {
namespace {

}  // namespace

c10::DeviceIndex factory_device(std::optional<at::Device> device) {
  c10::Device dev = device.value_or(c10::Device(kNkipy, t_current_device));
  c10::DeviceIndex index = dev.has_index() ? dev.index() : t_current_device;
  check_device_index(index);
  return index;
}

namespace {

at::Tensor nkipy_empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                                     std::optional<at::Layout> layout,
                                     std::optional<at::Device> device,
                                     std::optional<bool> pin_memory,
                                     std::optional<at::MemoryFormat> memory_format) {
  (void)layout;
  (void)pin_memory;
  CurrentDeviceScope scope(factory_device(device));
  return at::detail::empty_generic(size, device_allocator(),
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                   c10::dtype_or_default(dtype), memory_format);
}

at::Tensor nkipy_empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride,
                               std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> pin_memory) {
  (void)layout;
  (void)pin_memory;
  CurrentDeviceScope scope(factory_device(device));
  return at::detail::empty_strided_generic(size, stride, device_allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                           c10::dtype_or_default(dtype));
}

at::Tensor nkipy_as_strided(const at::Tensor& self, c10::IntArrayRef size,
                            c10::IntArrayRef stride, std::optional<int64_t> storage_offset) {
  return at::native::as_strided_tensorimpl(self, size, stride, storage_offset);
}

at::Tensor nkipy_view(const at::Tensor& self, c10::IntArrayRef size) {
  return at::native::view(self, size);
}

at::Tensor nkipy_reshape_alias(const at::Tensor& self, c10::IntArrayRef size,
                               c10::IntArrayRef stride) {
  return at::native::_reshape_alias(self, size, stride);
}

at::Tensor nkipy_unfold(const at::Tensor& self, int64_t dimension, int64_t size, int64_t step) {
  return at::native::unfold(self, dimension, size, step);
}

}  // namespace

// Grows `storage` to `nbytes` (new device memory, old bytes copied by nkrt).
void grow_storage(const c10::Storage& storage, size_t nbytes) {
  c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  TORCH_CHECK(impl->resizable(), "Trying to resize storage that is not resizable");
  size_t old = impl->nbytes();
  c10::DataPtr fresh;
  {
    CurrentDeviceScope scope(storage.device().has_index() ? storage.device().index()
                                                          : t_current_device);
    fresh = device_allocator()->allocate(nbytes);
  }
  size_t keep = std::min(old, nbytes);
  if (keep > 0 && impl->data_ptr().get()) {
    DevLoc s = locate_storage(storage);
    Block* b = static_cast<Block*>(fresh.get_context());
    check_status(api().tensor_copy(s.generation, s.tensor, s.offset, b->seg->tensor,
                                   static_cast<uint64_t>(b->ptr - b->seg->base), keep),
                 "nkipy storage resize");
  }
  impl->set_data_ptr_noswap(std::move(fresh));
  impl->set_nbytes(nbytes);
}

namespace {

const at::Tensor& nkipy_resize_(const at::Tensor& self, c10::IntArrayRef size,
                                std::optional<at::MemoryFormat> memory_format) {
  c10::TensorImpl* impl = self.unsafeGetTensorImpl();
  for (int64_t s : size) TORCH_CHECK(s >= 0, "resize_: negative size ", s, " in ", size);
  impl->set_sizes_contiguous(size);
  if (memory_format.has_value()) {
    TORCH_CHECK(*memory_format != at::MemoryFormat::Preserve,
                "Unsupported memory format Preserve for resize_");
    impl->empty_tensor_restride(*memory_format);
  }
  int64_t numel = self.numel();
  if (numel > 0) {
    size_t needed = static_cast<size_t>(self.storage_offset() + numel) * self.element_size();
    if (needed > self.storage().nbytes()) grow_storage(self.storage(), needed);
  }
  return self;
}

at::Tensor& nkipy_set_source_storage_offset(at::Tensor& self, at::Storage source,
                                            int64_t storage_offset, c10::IntArrayRef size,
                                            c10::IntArrayRef stride) {
  return at::native::set_storage_cpu_(self, source, storage_offset, size, stride);
}

at::Tensor& nkipy_set_source_storage(at::Tensor& self, at::Storage source) {
  return at::native::set_(self, source);
}

at::Tensor& nkipy_set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  return at::native::set_tensor_(self, source);
}

at::Tensor& nkipy_set_empty(at::Tensor& self) {
  caffe2::TypeMeta dtype = self.dtype();
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, device_allocator(), true);
  self.set_(storage, 0, {0}, {});
  TORCH_INTERNAL_ASSERT(dtype == self.dtype());
  return self;
}

// ---------------------------------------------------------------------------
// Fills and scalars
// ---------------------------------------------------------------------------

at::Tensor& nkipy_fill_scalar(at::Tensor& self, const at::Scalar& value) {
  if (self.numel() == 0) return self;
  if (self.is_contiguous()) {
    bool zero;
    if (value.isBoolean())
      zero = !value.toBool();
    else if (value.isIntegral(false))
      zero = value.toLong() == 0;
    else if (value.isFloatingPoint())
      zero = value.toDouble() == 0.0 && !std::signbit(value.toDouble());
    else
      zero = false;
    size_t item = self.element_size();
    DevLoc loc = locate_storage(self.storage());
    uint64_t off = loc.offset + self.storage_offset() * item;
    if (zero) {
      check_status(api().tensor_memset(loc.generation, loc.tensor, 0, off, self.numel() * item),
                   "nkipy fill_");
      return self;
    }
    at::Tensor h = at::empty(self.sizes(), self.options().device(at::kCPU));
    h.fill_(value);
    check_status(api().tensor_write(loc.generation, loc.tensor, h.data_ptr(), off,
                                    self.numel() * item),
                 "nkipy fill_");
    return self;
  }
  at::Tensor view = device_to_host_view(self);
  view.fill_(value);
  int64_t lo, hi;
  view_span(self, &lo, &hi);
  write_span(self, view.as_strided({hi - lo + 1}, {1}, 0));
  return self;
}

at::Tensor& nkipy_fill_tensor(at::Tensor& self, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ",
              value.dim(), " dimensions.");
  return nkipy_fill_scalar(self, value.item());
}

at::Tensor& nkipy_zero(at::Tensor& self) { return nkipy_fill_scalar(self, at::Scalar(0)); }

at::Scalar nkipy_local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(),
              " elements cannot be converted to Scalar");
  at::Tensor h = at::empty({}, self.options().device(at::kCPU));
  nkipy_copy_from(self.reshape({}), h, false);
  return h.item();
}

}  // namespace

// ---------------------------------------------------------------------------
// Registrations
// ---------------------------------------------------------------------------

// The metadata kernels serve both personalities (a view of a tiled tensor has
// sizes and strides over its storage's host tensor); the factories, fills,
// resize_ and _local_scalar_dense only the strided one (register_strided_factories).
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("as_strided", TORCH_FN(nkipy_as_strided));
  m.impl("view", TORCH_FN(nkipy_view));
  m.impl("_reshape_alias", TORCH_FN(nkipy_reshape_alias));
  m.impl("unfold", TORCH_FN(nkipy_unfold));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(nkipy_set_source_storage_offset));
  m.impl("set_.source_Storage", TORCH_FN(nkipy_set_source_storage));
  m.impl("set_.source_Tensor", TORCH_FN(nkipy_set_source_tensor));
  m.impl("set_", TORCH_FN(nkipy_set_empty));
}

void register_strided_factories() {
  torch::Library* lib = &personality_kernels();
  lib->impl("empty.memory_format", TORCH_FN(nkipy_empty_memory_format));
  lib->impl("empty_strided", TORCH_FN(nkipy_empty_strided));
  // metadata-only views; without them the CPU fallback returned copies, and
  // writes through y.real / y.imag were lost
  lib->impl("view_as_real", TORCH_FN(at::native::view_as_real));
  lib->impl("view_as_complex", TORCH_FN(at::native::view_as_complex));
  lib->impl("resize_", TORCH_FN(nkipy_resize_));
  lib->impl("fill_.Scalar", TORCH_FN(nkipy_fill_scalar));
  lib->impl("fill_.Tensor", TORCH_FN(nkipy_fill_tensor));
  lib->impl("zero_", TORCH_FN(nkipy_zero));
  lib->impl("_local_scalar_dense", TORCH_FN(nkipy_local_scalar_dense));
}

}  // namespace spike_torch
