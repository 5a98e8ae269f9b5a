// spike_torch/csrc/storage_io.cpp - moving the bytes of nkipy storages: where
// a storage's data lies in nkrt device memory, reads and writes between host
// memory and the device (large ones split over threads), the `_copy_from`
// kernels (nkipy <-> CPU, nkipy <-> nkipy), registered at the end, and what
// device_io.h offers kernel_call.cpp.

#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "device_io.h"
#include "nkipy_device.h"
#include "spike_capi.h"

namespace spike_torch {

// The nkrt tensor and offset of a device storage's data pointer.
DevLoc locate_storage(const c10::Storage& storage) {
  const c10::DataPtr& dp = storage.data_ptr();
  if (dp.get_deleter() == &block_deleter && dp.get_context()) {
    Block* b = static_cast<Block*>(dp.get_context());
    const char* p = static_cast<const char*>(dp.get());
    return DevLoc{b->seg->tensor, static_cast<uint64_t>(p - b->seg->base), b->seg->generation};
  }
  uint64_t gen = api().live_generation();
  nkrt_tensor_t* t = nullptr;
  uint64_t off = 0;
  check_status(api().tensor_lookup(gen, dp.get(), &t, &off), "nkipy memory lookup");
  return DevLoc{t, off, gen};
}

bool storage_is_live(const c10::Storage& storage) {
  const c10::DataPtr& dp = storage.data_ptr();
  if (dp.get_deleter() != &block_deleter || !dp.get_context()) return true;  // empty, or foreign
  return static_cast<const Block*>(dp.get_context())->seg->generation == api().live_generation();
}

void check_storage_live(const c10::Storage& storage, const char* what) {
  TORCH_CHECK(storage_is_live(storage), what,
              ": NRT_CLOSED: the spike runtime this tensor's memory belonged to is closed (after "
              "spike.reset() or at interpreter exit); its data is gone: create the tensor again");
}

namespace {

// Large host<->device transfers are split into chunks copied by several
// threads (each chunk is one nkrt read/write), so that the page faults of
// fresh host memory and the copy itself are spread over the cores as a CPU
// clone() spreads them over PyTorch's intra-op threads. (at::parallel_for is
// inline OpenMP in the headers, which this TU is not built with.)
constexpr uint64_t kChunk = 4ull << 20;

template <typename Fn>
void chunked(uint64_t size, const char* what, Fn&& fn) {
  int threads = std::max(1, std::min<int>(at::get_num_threads(),
                                          static_cast<int>(size / (2 * kChunk))));
  if (threads <= 1) {
    check_status(fn(0, size), what);
    return;
  }
  uint64_t chunks = (size + kChunk - 1) / kChunk;
  std::atomic<uint64_t> next{0};
  std::atomic<nkrt_status_t> first{nullptr};
  auto work = [&]() {
    for (uint64_t i = next++; i < chunks; i = next++) {
      uint64_t off = i * kChunk;
      nkrt_status_t st = fn(off, std::min<uint64_t>(kChunk, size - off));
      nkrt_status_t expected = nullptr;
      if (st && !first.compare_exchange_strong(expected, st)) api().status_free(st);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; t++) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  check_status(first.load(), what);
}

void dev_read(const DevLoc& loc, uint64_t offset, void* dst, uint64_t size, const char* what) {
  chunked(size, what, [&](uint64_t off, uint64_t n) {
    return api().tensor_read(loc.generation, loc.tensor, static_cast<char*>(dst) + off,
                             loc.offset + offset + off, n);
  });
}

void dev_write(const DevLoc& loc, uint64_t offset, const void* src, uint64_t size,
               const char* what) {
  chunked(size, what, [&](uint64_t off, uint64_t n) {
    return api().tensor_write(loc.generation, loc.tensor, static_cast<const char*>(src) + off,
                              loc.offset + offset + off, n);
  });
}

bool is_nkipy(const at::Tensor& t) { return t.device().type() == kNkipy; }

}  // namespace

// Element span [lo, hi] (in elements from the storage start) a view covers.
void view_span(const at::Tensor& t, int64_t* lo, int64_t* hi) {
  int64_t end = t.storage_offset();
  for (int64_t d = 0; d < t.dim(); d++) end += (t.size(d) - 1) * t.stride(d);
  *lo = t.storage_offset();
  *hi = end;
}

// A CPU tensor holding the device view `src` (same sizes and strides, dtype).
at::Tensor device_to_host_view(const at::Tensor& src) {
  if (src.numel() == 0) return at::empty(src.sizes(), src.options().device(at::kCPU));
  int64_t lo, hi;
  view_span(src, &lo, &hi);
  int64_t n = hi - lo + 1;
  size_t item = src.element_size();
  at::Tensor buf = at::empty({n}, src.options().device(at::kCPU));
  DevLoc loc = locate_storage(src.storage());
  dev_read(loc, static_cast<uint64_t>(lo) * item, buf.data_ptr(), n * item,
           "nkipy device-to-host copy");
  return buf.as_strided(src.sizes(), src.strides(), 0);
}

// Writes the CPU tensor `host` (same dtype; its sizes/strides are those of
// `dst`, with storage offset 0 meaning the first element of dst's span) into dst.
void write_span(const at::Tensor& dst, const at::Tensor& span_buf) {
  int64_t lo, hi;
  view_span(dst, &lo, &hi);
  size_t item = dst.element_size();
  DevLoc loc = locate_storage(dst.storage());
  dev_write(loc, static_cast<uint64_t>(lo) * item, span_buf.data_ptr(), (hi - lo + 1) * item,
            "nkipy host-to-device copy");
}

namespace {

// dst (nkipy) <- host (CPU, any dtype, broadcastable). With non_blocking, a
// contiguous copy from pinned memory is queued on the core and not waited for.
void host_to_device(const at::Tensor& dst, const at::Tensor& host, bool non_blocking = false) {
  if (dst.numel() == 0) return;
  if (dst.is_contiguous()) {
    at::Tensor h = host;
    if (h.scalar_type() != dst.scalar_type() || !h.sizes().equals(dst.sizes()) ||
        !h.is_contiguous()) {
      h = at::empty(dst.sizes(), dst.options().device(at::kCPU));
      h.copy_(host);
    }
    int64_t lo = dst.storage_offset();
    size_t item = dst.element_size();
    DevLoc loc = locate_storage(dst.storage());
    if (non_blocking && h.is_same(host) && is_pinned_ptr(h.data_ptr())) {
      nkrt_event_t* ev = nullptr;
      check_status(api().tensor_write_async(loc.generation, loc.tensor, h.data_ptr(),
                                            loc.offset + static_cast<uint64_t>(lo) * item,
                                            dst.numel() * item, &ev),
                   "nkipy non_blocking host-to-device copy");
      if (!pinned_record_copy(h.data_ptr(), loc.generation, ev)) {  // freed meanwhile
        nkrt_status_t st = api().event_wait(loc.generation, ev, -1);
        api().event_release(loc.generation, ev);
        check_status(st, "nkipy non_blocking host-to-device copy");
      }
      return;
    }
    dev_write(loc, static_cast<uint64_t>(lo) * item, h.data_ptr(), dst.numel() * item,
              "nkipy host-to-device copy");
    return;
  }
  int64_t lo, hi;
  view_span(dst, &lo, &hi);
  if (dst.is_non_overlapping_and_dense()) {
    // A permuted dense layout covers its whole span: no need to read it first.
    at::Tensor buf = at::empty({hi - lo + 1}, dst.options().device(at::kCPU));
    buf.as_strided(dst.sizes(), dst.strides(), 0).copy_(host);
    write_span(dst, buf);
    return;
  }
  // Strided destination with gaps: read-modify-write the span it covers.
  at::Tensor view = device_to_host_view(dst);
  view.copy_(host);
  at::Tensor span = view.as_strided({hi - lo + 1}, {1}, 0);
  write_span(dst, span);
}

}  // namespace

at::Tensor nkipy_copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  TORCH_CHECK(self.defined() && dst.defined(), "copy_: undefined tensor");
  if (dst.numel() == 0) return dst;
  bool src_dev = is_nkipy(self), dst_dev = is_nkipy(dst);
  TORCH_CHECK((src_dev || self.is_cpu()) && (dst_dev || dst.is_cpu()),
              "nkipy copies are between nkipy and cpu tensors, got ", self.device(), " -> ",
              dst.device());
  if (src_dev && !dst_dev) {  // device to host
    if (self.is_contiguous() && dst.is_contiguous() && self.scalar_type() == dst.scalar_type() &&
        self.sizes().equals(dst.sizes())) {
      size_t item = self.element_size();
      DevLoc loc = locate_storage(self.storage());
      dev_read(loc, self.storage_offset() * item, dst.data_ptr(), self.numel() * item,
               "nkipy device-to-host copy");
    } else {
      dst.copy_(device_to_host_view(self));
    }
    return dst;
  }
  if (!src_dev && dst_dev) {
    host_to_device(dst, self, non_blocking);
    return dst;
  }
  // device to device (same or another core); a destination that partly
  // overlaps the source is refused, as the CPU's copy_ refuses it
  at::assert_no_partial_overlap(dst, self);
  if (self.is_contiguous() && dst.is_contiguous() && self.scalar_type() == dst.scalar_type() &&
      self.sizes().equals(dst.sizes())) {
    size_t item = self.element_size();
    DevLoc s = locate_storage(self.storage());
    DevLoc d = locate_storage(dst.storage());
    TORCH_CHECK(s.generation == d.generation,
                "nkipy copy: a tensor belongs to a closed spike runtime");
    check_status(api().tensor_copy(s.generation, s.tensor, s.offset + self.storage_offset() * item,
                                   d.tensor, d.offset + dst.storage_offset() * item,
                                   self.numel() * item),
                 "nkipy device-to-device copy");
    return dst;
  }
  host_to_device(dst, device_to_host_view(self));
  return dst;
}

namespace {

at::Tensor nkipy_copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return nkipy_copy_from(self, dst, false);
}

}  // namespace

// ---------------------------------------------------------------------------
// For kernel_call.cpp (device_io.h)
// ---------------------------------------------------------------------------

const spike_capi_t& capi() { return api(); }

void read_bytes(const at::Tensor& t, void* dst, uint64_t size) {
  dev_read(locate_storage(t.storage()), static_cast<uint64_t>(t.storage_offset()) * t.itemsize(),
           dst, size, "nkipy read");
}

void write_bytes(const at::Tensor& t, const void* src, uint64_t size) {
  dev_write(locate_storage(t.storage()), static_cast<uint64_t>(t.storage_offset()) * t.itemsize(),
            src, size, "nkipy write");
}

// ---------------------------------------------------------------------------
// Registrations
// ---------------------------------------------------------------------------

void register_strided_copies() {
  torch::Library* lib = &personality_kernels();
  lib->impl("_copy_from", TORCH_FN(nkipy_copy_from));
  lib->impl("_copy_from_and_resize", TORCH_FN(nkipy_copy_from_and_resize));
}

void storage_read(const c10::Storage& storage, uint64_t offset, void* dst, uint64_t n) {
  if (n == 0) return;
  check_storage_live(storage, "device read");
  dev_read(locate_storage(storage), offset, dst, n, "device read");
}

void storage_write(const c10::Storage& storage, uint64_t offset, const void* src, uint64_t n) {
  if (n == 0) return;
  check_storage_live(storage, "device write");
  dev_write(locate_storage(storage), offset, src, n, "device write");
}

}  // namespace spike_torch

// 1 when the storage behind `storage_impl` (a c10::StorageImpl*, as
// UntypedStorage._cdata gives it) is live memory of the open runtime or holds
// no device memory, 0 when it belongs to a runtime closed since (spike.reset()).
extern "C" __attribute__((visibility("default"))) int spike_torch_storage_live(void* storage_impl) {
  if (!storage_impl) return 1;
  c10::Storage storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(
      static_cast<c10::StorageImpl*>(storage_impl)));
  return spike_torch::storage_is_live(storage) ? 1 : 0;
}
