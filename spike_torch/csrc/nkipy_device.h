// spike_torch/csrc/nkipy_device.h - private to the files of the nkipy device
// (README.md lists them): what they share. The connection to the spike
// runtime, the device count and the current device; the allocator's blocks;
// locating and copying a storage's device memory; growing a storage.
// kernel_call.cpp sees only device_io.h.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/Storage.h>
#include <torch/library.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <memory>
#include <vector>

#include "spike_capi.h"

namespace torch {
struct CapturedTraceback;  // torch/csrc/profiler/combined_traceback.h
}

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

// The personality the front end that loaded the library gave it
// (spike_torch_set_personality): its device name ("nkipy" or "spyre") and
// whether tensors are stored in 128-byte sticks (spyre) or strided (nkipy).
// Set once, before any tensor exists.
const char* device_name();
bool tiled_layout();

// ---------------------------------------------------------------------------
// Stick-tiled layouts (stick_layout.cpp), the spyre personality's storage
// ---------------------------------------------------------------------------

// How a storage of the tiled personality holds its tensor: the host tensor of
// `host_size` (row-major) lies in device memory as a row-major array of
// `device_size` elements of `device_dtype`; device dimension k walks host
// dimension dim_map[k] (the stick dimension appears twice: its tiles, and
// last, its elements within a 128-byte stick; -1 in a 0-d layout).
struct StickLayout {
  std::vector<int64_t> host_size;
  std::vector<int64_t> device_size;
  std::vector<int64_t> dim_map;
  at::ScalarType device_dtype;
};

constexpr int64_t kStickBytes = 128;

// The dtype the device stores a host dtype in (int64 as int32, bool as
// float16); throws TypeError for dtypes the tiled device does not hold.
at::ScalarType stick_device_dtype(at::ScalarType host);

// The default tiling of a host tensor (size-1 dimensions dropped, the last
// dimension of dim_order, or of the tensor, in sticks).
StickLayout default_stick_layout(c10::IntArrayRef sizes, at::ScalarType host_dtype,
                                 c10::IntArrayRef dim_order = {});

// Bytes of device memory a layout covers: 128 x prod(device_size[:-1]).
size_t stick_layout_bytes(const StickLayout& layout);

// The layout recorded for a storage's memory (NULL when none is).
std::shared_ptr<const StickLayout> storage_layout(const c10::Storage& storage);
void set_storage_layout(const c10::Storage& storage, std::shared_ptr<const StickLayout> layout);

// The tiled personality's factory kernels (registered by stick_layout.cpp).
void register_tiled_kernels();

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
  // tiled personality: how the tensor the block holds is laid out (reset on
  // every allocation and free)
  std::shared_ptr<const StickLayout> layout{};
  // where it was allocated, while memory history is recorded
  std::shared_ptr<torch::CapturedTraceback> frames{};
};

struct Segment {
  nkrt_tensor_t* tensor;
  char* base;
  size_t size;
  uint64_t generation;
  int device;
  bool small;
  Block* first;
  std::shared_ptr<torch::CapturedTraceback> frames{};  // the allocation that made it
};

// ---------------------------------------------------------------------------
// Pinned host memory (pinned_memory.cpp)
// ---------------------------------------------------------------------------

// The host allocator of Tensor.pin_memory() (hooks.cpp hands it to PyTorch).
c10::Allocator* pinned_allocator();
// Whether `p` lies in a live pinned block.
bool is_pinned_ptr(const void* p);
// The pinned block holding `p` keeps the queued copy `ev` (of `generation`)
// that reads it, and stays out of the cache until it is done; false when `p`
// is not pinned memory (then the caller still owns `ev`).
bool pinned_record_copy(const void* p, uint64_t generation, nkrt_event_t* ev);
// Waits for every queued copy from pinned memory (raises the first error):
// what synchronizing a stream, an event or the device waits for.
void pinned_wait_all();
// Whether no copy from pinned memory is in flight (stream and event queries).
bool pinned_idle();

// ---------------------------------------------------------------------------
// Memory history and snapshots (allocator.cpp; memory_snapshot.cpp turns them
// into torch.cuda's snapshot format for Python)
// ---------------------------------------------------------------------------

// One allocator event while history is recorded (torch.cuda's trace entry).
struct MemoryTraceEntry {
  const char* action;  // alloc, free_requested, free_completed, segment_alloc, segment_free, oom
  uint64_t addr;
  int64_t size;
  int64_t time_us;
  int64_t device_free;  // oom only: the device's largest free block
  std::shared_ptr<torch::CapturedTraceback> frames;
};

struct BlockSnapshot {
  uint64_t addr;
  int64_t size, requested;
  bool allocated;
  std::shared_ptr<torch::CapturedTraceback> frames;
};

struct SegmentSnapshot {
  int device;
  uint64_t addr;
  int64_t size;
  bool small;
  std::shared_ptr<torch::CapturedTraceback> frames;
  std::vector<BlockSnapshot> blocks;
};

// What the allocator records from now on: nothing (trace false, stacks
// false), the stack of each live block (stacks), and/or a trace of events
// (trace, at most max_entries per device, oldest dropped); stacks also of
// frees (free_stacks); C++ frames too (cpp). Turning the trace on clears it.
void allocator_record_history(bool trace, bool stacks, bool free_stacks, bool cpp,
                              size_t max_entries);
// Every live segment with its blocks (ascending address per device), and the
// recorded trace of each device (kMaxDevices lists).
void allocator_snapshot(std::vector<SegmentSnapshot>* segments,
                        std::vector<std::vector<MemoryTraceEntry>>* traces);

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

// The aten PrivateUse1 library the personality's kernels are registered on
// (created on first use, never destroyed).
torch::Library& personality_kernels();

// Registers the strided personality's kernels that the tiled one replaces
// (factories, fills, copies, resize_, _local_scalar_dense).
void register_strided_factories();
void register_strided_copies();

// Makes `index` the thread's current device until the scope ends (also when
// an exception leaves it), so the allocator serves that device.
struct CurrentDeviceScope {
  explicit CurrentDeviceScope(c10::DeviceIndex index) : saved(t_current_device) {
    t_current_device = index;
  }
  ~CurrentDeviceScope() { t_current_device = saved; }
  CurrentDeviceScope(const CurrentDeviceScope&) = delete;
  CurrentDeviceScope& operator=(const CurrentDeviceScope&) = delete;
  c10::DeviceIndex saved;
};

// The device a factory call allocates on: the one given, else the current one.
c10::DeviceIndex factory_device(std::optional<at::Device> device);

// Reads or writes `n` bytes at byte `offset` of a device storage.
void storage_read(const c10::Storage& storage, uint64_t offset, void* dst, uint64_t n);
void storage_write(const c10::Storage& storage, uint64_t offset, const void* src, uint64_t n);

}  // namespace spike_torch
