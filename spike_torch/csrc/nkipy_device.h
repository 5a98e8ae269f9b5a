// spike_torch/csrc/nkipy_device.h - private to the files of the nkipy device
// (README.md lists them): what they share. The connection to the spike
// runtime, the device count and the current device; the allocator's blocks;
// locating and copying a storage's device memory; growing a storage.
// kernel_call.cpp sees only device_io.h.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/Storage.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>

#include "spike_capi.h"

namespace spike_torch {

constexpr c10::DeviceType kNkipy = c10::DeviceType::PrivateUse1;

constexpr int kMaxDevices = 64;

// ---------------------------------------------------------------------------
// The device (nkipy_device.cpp)
// ---------------------------------------------------------------------------

// The spike C API table, set by spike_torch_init() (NULL before).
extern const spike_capi_t* g_api;
extern std::atomic<int> g_debug;
extern std::atomic<int> g_fallback_warn;

#define NKIPY_LOG(...)                          \
  do {                                          \
    if (g_debug.load(std::memory_order_relaxed)) { \
      std::fprintf(stderr, "[spike_torch] ");   \
      std::fprintf(stderr, __VA_ARGS__);        \
      std::fprintf(stderr, "\n");               \
    }                                           \
  } while (0)

const spike_capi_t& api();

// Turns a non-NULL status into a C++ exception (freeing the status).
void check_status(nkrt_status_t st, const char* what);

int device_count_raw() noexcept;

// The calling thread's current nkipy device (constinit: no TLS init call on access).
extern thread_local constinit c10::DeviceIndex t_current_device;

void check_device_index(c10::DeviceIndex index);

// ---------------------------------------------------------------------------
// The caching allocator (allocator.cpp)
// ---------------------------------------------------------------------------

struct Segment;

struct Block {
  Segment* seg;
  size_t offset;  // in the segment
  size_t size;
  size_t requested;
  char* ptr;
  bool allocated;
  Block* prev;
  Block* next;
};

struct Segment {
  nkrt_tensor_t* tensor;
  char* base;
  size_t size;
  uint64_t generation;
  int device;
  bool small;
  Block* first;
};

// The deleter of every DataPtr the allocator hands out (its context is the Block).
void block_deleter(void* ctx);

// The allocator registered for the nkipy device (never destroyed).
c10::Allocator* device_allocator();

// ---------------------------------------------------------------------------
// Storage I/O (storage_io.cpp)
// ---------------------------------------------------------------------------

struct DevLoc {
  nkrt_tensor_t* tensor;
  uint64_t offset;  // of the storage's first byte within tensor
  uint64_t generation;
};

// The nkrt tensor and offset of a device storage's data pointer.
DevLoc locate_storage(const c10::Storage& storage);

// Element span [lo, hi] (in elements from the storage start) a view covers.
void view_span(const at::Tensor& t, int64_t* lo, int64_t* hi);

// A CPU tensor holding the device view `src` (same sizes and strides, dtype).
at::Tensor device_to_host_view(const at::Tensor& src);

// Writes the CPU tensor `span_buf` (the bytes of dst's span) into dst.
void write_span(const at::Tensor& dst, const at::Tensor& span_buf);

// The `_copy_from` kernel: copies between nkipy and CPU tensors, either way.
at::Tensor nkipy_copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking);

// ---------------------------------------------------------------------------
// Factories and metadata kernels (tensor_ops.cpp)
// ---------------------------------------------------------------------------

// Grows `storage` to `nbytes` (new device memory, old bytes copied by nkrt).
void grow_storage(const c10::Storage& storage, size_t nbytes);

}  // namespace spike_torch
