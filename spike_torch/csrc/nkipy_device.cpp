// spike_torch/csrc/nkipy_device.cpp - what PyTorch only accepts from C++ for
// the "nkipy" device (PrivateUse1): the caching allocator over nkrt device
// memory, the device guard, the PrivateUse1 hooks (generators, device from
// pointer), the metadata kernels, copies and fills through nkrt, and the
// boxed CPU fallback. Everything else lives in Python (spike_torch/).
//
// The nkrt runtime is the one the spike singleton owns: it is reached through
// the C function table spike._spike exports (spike/include/spike_capi.h),
// handed to us once by spike_torch/__init__.py through spike_torch_init().
// Device memory is never touched by the CPU here: every byte moves through
// nkrt read/write/copy/memset calls.
//
// Only PyTorch core headers (c10, ATen, torch/library.h): no pybind11.

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <iterator>
#include <cmath>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "device_io.h"
#include "nkipy_device.h"
#include "spike_capi.h"

namespace spike_torch {

const spike_capi_t* g_api = nullptr;
std::atomic<int> g_debug{0};
std::atomic<int> g_fallback_warn{1};

const spike_capi_t& api() {
  TORCH_CHECK(g_api != nullptr,
              "spike_torch is not initialised: import spike_torch (it connects the nkipy "
              "device to the spike runtime)");
  return *g_api;
}

// Turns a non-NULL status into a C++ exception (freeing the status).
void check_status(nkrt_status_t st, const char* what) {
  if (!st) return;
  const spike_capi_t& a = api();
  std::string msg = std::string(what) + ": " + a.code_name(a.status_code(st)) + ": " +
                    a.status_message(st);
  a.status_free(st);
  TORCH_CHECK(false, msg);
}

int device_count_raw() noexcept {
  if (!g_api) return 0;
  uint32_t n = 0;
  nkrt_status_t st = g_api->core_count(&n);
  if (st) {
    g_api->status_free(st);
    return 0;
  }
  return static_cast<int>(n);
}

thread_local c10::DeviceIndex t_current_device = 0;

void check_device_index(c10::DeviceIndex index) {
  int count = device_count_raw();
  TORCH_CHECK(index >= 0 && index < count, "Invalid nkipy device index ", static_cast<int>(index),
              ": there are ", count, " nkipy device(s), valid indices are 0..", count - 1);
}

// ---------------------------------------------------------------------------
// Caching allocator
// ---------------------------------------------------------------------------

constexpr size_t kRound = 512;                  // block sizes are multiples of this
constexpr size_t kSmallSize = 1 << 20;          // requests <= 1 MiB use the small pool
constexpr size_t kSmallSegment = 2 << 20;       // small pool segment size
constexpr size_t kLargeSegment = 20 << 20;      // requests < 10 MiB share 20 MiB segments
constexpr size_t kMinLargeAlloc = 10 << 20;
constexpr size_t kLargeRound = 2 << 20;         // larger requests round to 2 MiB
constexpr size_t kMinLargeSplit = 1 << 20;      // a large block's remainder must exceed this

struct BlockLess {
  bool operator()(const Block* a, const Block* b) const {
    if (a->size != b->size) return a->size < b->size;
    return reinterpret_cast<uintptr_t>(a->ptr) < reinterpret_cast<uintptr_t>(b->ptr);
  }
};

struct Stat {
  int64_t current = 0, peak = 0, allocated = 0, freed = 0;
  void add(int64_t n) {
    current += n;
    allocated += n;
    peak = std::max(peak, current);
  }
  void sub(int64_t n) {
    current -= n;
    freed += n;
  }
  void reset_peak() { peak = current; }
  void reset_accumulated() { allocated = freed = 0; }
};

struct DeviceStats {
  Stat allocated_bytes, reserved_bytes, active_bytes, requested_bytes, allocation, segment,
      active;
  int64_t num_alloc_retries = 0, num_ooms = 0, num_device_alloc = 0, num_device_free = 0;
  // Memory-pool counters (spike_torch.memory_pool_stats, docs/spike_torch.md), cumulative,
  // counted once per successful allocation of a non-empty block:
  //   allocation_count = reuse_count + cache_miss_count;  cache_hit_count <= reuse_count.
  int64_t allocation_count = 0;  // allocations served
  int64_t reuse_count = 0;       // served from a cached free block (no runtime call)
  int64_t cache_hit_count = 0;   // ... whose size was exactly the rounded request
  int64_t cache_miss_count = 0;  // no fitting cached block: a new segment from the runtime
};

// Order of the values spike_torch_pool_stats() writes (spike_torch._C.POOL_STAT_KEYS).
constexpr int kPoolStats = 7;

class NkipyAllocator final : public c10::DeviceAllocator {
 public:
  // --- c10::DeviceAllocator (torch.accelerator memory APIs) ---
  bool initialized() override { return g_api != nullptr; }
  void emptyCache(c10::MempoolId_t) override {
    if (g_api) empty_cache(-1);
  }
  void recordStream(const c10::DataPtr&, c10::Stream) override {}
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    c10::CachingDeviceAllocator::DeviceStats out;
    std::lock_guard<std::mutex> lock(mu_);
    if (g_api) sync_generation_locked();
    if (device < 0 || device >= kMaxDevices) return out;
    const DeviceStats& s = stats_[device];
    auto put = [](c10::CachingDeviceAllocator::StatArray& arr, const Stat& st) {
      auto& a = arr[static_cast<size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE)];
      a.current = st.current;
      a.peak = st.peak;
      a.allocated = st.allocated;
      a.freed = st.freed;
    };
    put(out.allocated_bytes, s.allocated_bytes);
    put(out.reserved_bytes, s.reserved_bytes);
    put(out.active_bytes, s.active_bytes);
    put(out.requested_bytes, s.requested_bytes);
    put(out.allocation, s.allocation);
    put(out.segment, s.segment);
    put(out.active, s.active);
    out.num_alloc_retries = s.num_alloc_retries;
    out.num_ooms = s.num_ooms;
    out.num_device_alloc = s.num_device_alloc;
    out.num_device_free = s.num_device_free;
    return out;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override { reset_accumulated(device); }
  void resetPeakStats(c10::DeviceIndex device) override { reset_peak(device); }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    check_device_index(device);
    nkrt_memory_stats_t ms;
    std::memset(&ms, 0, sizeof(ms));
    ms.struct_size = sizeof(ms);
    check_status(api().memory_stats(api().live_generation(), static_cast<uint32_t>(device), &ms),
                 "nkipy memory info");
    return {static_cast<size_t>(ms.capacity_bytes - ms.allocated_bytes),
            static_cast<size_t>(ms.capacity_bytes)};
  }

  // --- c10::Allocator ---
  c10::DataPtr allocate(size_t n) override {
    c10::DeviceIndex dev = t_current_device;
    c10::Device device(kNkipy, dev);
    if (n == 0) return c10::DataPtr(nullptr, nullptr, &block_deleter, device);
    Block* b = malloc_block(dev, n);
    return c10::DataPtr(b->ptr, b, &block_deleter, device);
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  void copy_data(void* dest, const void* src, std::size_t count) const override;

  void free_block(Block* b) {
    std::lock_guard<std::mutex> lock(mu_);
    Segment* seg = b->seg;
    if (seg->generation != generation_) {  // runtime closed since: memory already gone
      b->allocated = false;
      maybe_delete_stale(seg);
      return;
    }
    DeviceStats& s = stats_[seg->device];
    s.allocated_bytes.sub(b->size);
    s.active_bytes.sub(b->size);
    s.requested_bytes.sub(b->requested);
    s.allocation.sub(1);
    s.active.sub(1);
    b->allocated = false;
    b->requested = 0;
    auto& pool = pool_for(seg);
    // merge with free neighbours
    if (b->prev && !b->prev->allocated) {
      Block* p = b->prev;
      pool.erase(p);
      p->size += b->size;
      p->next = b->next;
      if (b->next) b->next->prev = p;
      delete b;
      b = p;
    }
    if (b->next && !b->next->allocated) {
      Block* nx = b->next;
      pool.erase(nx);
      b->size += nx->size;
      b->next = nx->next;
      if (nx->next) nx->next->prev = b;
      delete nx;
    }
    pool.insert(b);
  }

  // Returns every fully free segment of `device` (all devices if < 0).
  void empty_cache(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    sync_generation_locked();
    release_free_segments_locked(device);
  }

  int64_t cached_blocks(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    sync_generation_locked();
    int64_t n = 0;
    for (int d = 0; d < kMaxDevices; d++) {
      if (device >= 0 && d != device) continue;
      n += static_cast<int64_t>(small_[d].size() + large_[d].size());
    }
    return n;
  }

  // Memory-pool figures of `device` (summed over all devices if < 0), in the order
  // used_bytes, cached_bytes, total_bytes, allocation_count, reuse_count,
  // cache_hit_count, cache_miss_count. Returns the number of values (kPoolStats).
  int pool_stats(int device, int64_t* out, int capacity) {
    std::lock_guard<std::mutex> lock(mu_);
    sync_generation_locked();
    int64_t v[kPoolStats] = {0, 0, 0, 0, 0, 0, 0};
    for (int d = 0; d < kMaxDevices; d++) {
      if (device >= 0 && d != device) continue;
      const DeviceStats& s = stats_[d];
      v[0] += s.allocated_bytes.current;
      v[1] += s.reserved_bytes.current - s.allocated_bytes.current;
      v[2] += s.reserved_bytes.current;
      v[3] += s.allocation_count;
      v[4] += s.reuse_count;
      v[5] += s.cache_hit_count;
      v[6] += s.cache_miss_count;
    }
    int n = std::max(0, std::min(capacity, kPoolStats));
    std::copy(v, v + n, out);
    return kPoolStats;
  }

  // Releases entirely free segments of `device` (all devices if < 0) until the
  // cached (reserved but unallocated) bytes of that scope are <= target, or no
  // entirely free segment is left (free blocks of partly used segments cannot be
  // given back). Returns the bytes released to the runtime.
  //
  // Choice of segments: while the excess (cached - target) is positive, release the
  // smallest free segment that covers the whole excess on its own if there is one
  // (one more release ends the trim and keeps as much cache as possible below the
  // target), else the largest free segment (the most progress per runtime call).
  // target 0 releases every free segment, as empty_cache() does.
  int64_t trim(int device, int64_t target) {
    std::lock_guard<std::mutex> lock(mu_);
    sync_generation_locked();
    if (target < 0) target = 0;
    int64_t cached = 0;
    std::vector<Block*> free_segs;  // the single free block of each entirely free segment
    for (int d = 0; d < kMaxDevices; d++) {
      if (device >= 0 && d != device) continue;
      cached += stats_[d].reserved_bytes.current - stats_[d].allocated_bytes.current;
      for (auto* pool : {&small_[d], &large_[d]})
        for (Block* b : *pool)
          if (!b->prev && !b->next) free_segs.push_back(b);
    }
    // ascending size (address breaks ties: deterministic)
    std::sort(free_segs.begin(), free_segs.end(), BlockLess());
    int64_t released = 0;
    while (cached > target && !free_segs.empty()) {
      int64_t excess = cached - target;
      auto it = std::find_if(free_segs.begin(), free_segs.end(), [&](const Block* b) {
        return static_cast<int64_t>(b->size) >= excess;
      });
      if (it == free_segs.end()) it = std::prev(free_segs.end());
      Block* b = *it;
      free_segs.erase(it);
      int64_t size = static_cast<int64_t>(b->seg->size);
      release_segment_locked(b);
      cached -= size;
      released += size;
    }
    if (released)
      NKIPY_LOG("trim to %lld cached bytes: released %lld bytes", static_cast<long long>(target),
                static_cast<long long>(released));
    return released;
  }

  // Fills `out` with the statistics in the order of spike_torch._STAT_KEYS.
  int stats(int device, int64_t* out, int capacity) {
    std::lock_guard<std::mutex> lock(mu_);
    sync_generation_locked();
    if (device < 0 || device >= kMaxDevices) return 0;
    const DeviceStats& s = stats_[device];
    int64_t inactive_split = 0, inactive_split_bytes = 0;
    for (auto* pool : {&small_[device], &large_[device]}) {
      for (Block* b : *pool) {
        if (b->prev || b->next) {
          inactive_split++;
          inactive_split_bytes += static_cast<int64_t>(b->size);
        }
      }
    }
    std::vector<int64_t> v;
    for (const Stat* st : {&s.allocated_bytes, &s.reserved_bytes, &s.active_bytes,
                           &s.requested_bytes, &s.allocation, &s.segment, &s.active}) {
      v.push_back(st->current);
      v.push_back(st->peak);
      v.push_back(st->allocated);
      v.push_back(st->freed);
    }
    v.push_back(inactive_split);
    v.push_back(inactive_split_bytes);
    v.push_back(s.num_alloc_retries);
    v.push_back(s.num_ooms);
    v.push_back(s.num_device_alloc);
    v.push_back(s.num_device_free);
    v.push_back(static_cast<int64_t>(small_[device].size() + large_[device].size()));
    int n = std::min<int>(capacity, static_cast<int>(v.size()));
    std::copy(v.begin(), v.begin() + n, out);
    return static_cast<int>(v.size());
  }

  void reset_peak(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    if (device < 0 || device >= kMaxDevices) return;
    DeviceStats& s = stats_[device];
    for (Stat* st : {&s.allocated_bytes, &s.reserved_bytes, &s.active_bytes, &s.requested_bytes,
                     &s.allocation, &s.segment, &s.active})
      st->reset_peak();
  }

  void reset_accumulated(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    if (device < 0 || device >= kMaxDevices) return;
    DeviceStats& s = stats_[device];
    for (Stat* st : {&s.allocated_bytes, &s.reserved_bytes, &s.active_bytes, &s.requested_bytes,
                     &s.allocation, &s.segment, &s.active})
      st->reset_accumulated();
    s.num_alloc_retries = s.num_ooms = s.num_device_alloc = s.num_device_free = 0;
    s.allocation_count = s.reuse_count = s.cache_hit_count = s.cache_miss_count = 0;
  }

  // Forgets all state of a closed runtime (called by spike_torch.reset()).
  void drop_runtime() {
    std::lock_guard<std::mutex> lock(mu_);
    sync_generation_locked();  // the runtime is closed: drops every stale block
  }

  uint64_t generation() {
    std::lock_guard<std::mutex> lock(mu_);
    return generation_;
  }

 private:
  std::set<Block*, BlockLess>& pool_for(Segment* seg) {
    return seg->small ? small_[seg->device] : large_[seg->device];
  }

  // After the runtime closed, every segment is stale: forget the free ones and
  // the statistics. Segments with live blocks are deleted by their last block.
  void sync_generation_locked() {
    uint64_t live = api().live_generation();
    if (live == generation_ && live != 0) return;
    if (generation_ != 0 && live != generation_) {
      NKIPY_LOG("runtime generation %llu closed: dropping cached blocks",
                static_cast<unsigned long long>(generation_));
      for (int d = 0; d < kMaxDevices; d++) {
        for (auto* pool : {&small_[d], &large_[d]}) {
          std::vector<Block*> blocks(pool->begin(), pool->end());
          pool->clear();
          for (Block* b : blocks) maybe_delete_stale(b->seg);
        }
        stats_[d] = DeviceStats();
      }
    }
    generation_ = live;
  }

  // Deletes a stale segment's structures once none of its blocks is in use.
  // Its free blocks must already be out of the pools.
  void maybe_delete_stale(Segment* seg) {
    for (Block* b = seg->first; b; b = b->next)
      if (b->allocated) return;
    Block* b = seg->first;
    while (b) {
      Block* n = b->next;
      delete b;
      b = n;
    }
    delete seg;
  }

  void release_free_segments_locked(int device) {
    for (int d = 0; d < kMaxDevices; d++) {
      if (device >= 0 && d != device) continue;
      for (auto* pool : {&small_[d], &large_[d]}) {
        for (auto it = pool->begin(); it != pool->end();) {
          Block* b = *it;
          ++it;
          if (!b->prev && !b->next) release_segment_locked(b);
        }
      }
    }
  }

  // Gives the segment of `b` (its only block, free and in its pool) back to the runtime.
  void release_segment_locked(Block* b) {
    Segment* seg = b->seg;
    pool_for(seg).erase(b);
    api().tensor_release(seg->generation, seg->tensor);
    DeviceStats& s = stats_[seg->device];
    s.reserved_bytes.sub(seg->size);
    s.segment.sub(1);
    s.num_device_free++;
    delete b;
    delete seg;
  }

  static size_t round_size(size_t n) { return (n + kRound - 1) / kRound * kRound; }

  static size_t segment_size(size_t size) {
    if (size <= kSmallSize) return kSmallSegment;
    if (size < kMinLargeAlloc) return kLargeSegment;
    return (size + kLargeRound - 1) / kLargeRound * kLargeRound;
  }

  Block* malloc_block(c10::DeviceIndex dev, size_t n) {
    check_device_index(dev);
    TORCH_CHECK(dev < kMaxDevices, "nkipy supports at most ", kMaxDevices, " devices");
    nkrt_runtime_t* runtime = nullptr;
    uint64_t gen = 0;
    {
      // Make sure a runtime is live (may call into Python: no lock held).
      if (api().live_generation() == 0) check_status(api().acquire_runtime(&runtime, &gen),
                                                     "nkipy allocation");
    }
    std::lock_guard<std::mutex> lock(mu_);
    sync_generation_locked();
    TORCH_CHECK(generation_ != 0, "nkipy allocation: the spike runtime is closed");
    size_t size = round_size(n);
    bool small = size <= kSmallSize;
    auto& pool = small ? small_[dev] : large_[dev];
    DeviceStats& s = stats_[dev];
    Block key{nullptr, 0, size, 0, nullptr, false, nullptr, nullptr};
    auto it = pool.lower_bound(&key);
    Block* b = nullptr;
    bool reused = false, exact = false;
    if (it != pool.end()) {
      b = *it;
      pool.erase(it);
      reused = true;
      exact = b->size == size;
    } else {
      size_t seg_size = segment_size(size);
      nkrt_tensor_t* t = nullptr;
      nkrt_status_t st = api().tensor_allocate(generation_, static_cast<uint32_t>(dev), seg_size,
                                               "torch_nkipy", &t);
      if (st && api().status_code(st) == NKRT_RESOURCE) {
        api().status_free(st);
        NKIPY_LOG("out of memory for %zu bytes on nkipy:%d: freeing the cache and retrying", n,
                  static_cast<int>(dev));
        s.num_alloc_retries++;
        release_free_segments_locked(dev);
        st = api().tensor_allocate(generation_, static_cast<uint32_t>(dev), seg_size,
                                   "torch_nkipy", &t);
        if (st && api().status_code(st) == NKRT_RESOURCE) {
          std::string rt_msg = api().status_message(st);
          api().status_free(st);
          s.num_ooms++;
          nkrt_memory_stats_t ms;
          std::memset(&ms, 0, sizeof(ms));
          ms.struct_size = sizeof(ms);
          nkrt_status_t st2 = api().memory_stats(generation_, static_cast<uint32_t>(dev), &ms);
          if (st2) api().status_free(st2);
          TORCH_CHECK_WITH(OutOfMemoryError, false, "nkipy out of memory: tried to allocate ",
                           n, " bytes (segment of ", seg_size, " bytes) on nkipy:",
                           static_cast<int>(dev), ". Device capacity ", ms.capacity_bytes,
                           " bytes; ", s.allocated_bytes.current,
                           " bytes allocated by PyTorch; ", s.reserved_bytes.current,
                           " bytes reserved by PyTorch (", ms.allocated_bytes,
                           " bytes in use on the device, largest free block ",
                           ms.largest_free_block, " bytes). Runtime: ", rt_msg);
        }
      }
      check_status(st, "nkipy allocation");
      Segment* seg = new Segment{t, static_cast<char*>(api().tensor_va(t)), seg_size,
                                 generation_, static_cast<int>(dev), small, nullptr};
      b = new Block{seg, 0, seg_size, 0, seg->base, false, nullptr, nullptr};
      seg->first = b;
      s.reserved_bytes.add(seg_size);
      s.segment.add(1);
      s.num_device_alloc++;
      NKIPY_LOG("new segment of %zu bytes on nkipy:%d", seg_size, static_cast<int>(dev));
    }
    // split
    size_t remaining = b->size - size;
    bool split = small ? remaining >= kRound : remaining > kMinLargeSplit;
    if (split) {
      Block* rest = new Block{b->seg, b->offset + size, remaining, 0, b->ptr + size, false, b,
                              b->next};
      if (b->next) b->next->prev = rest;
      b->next = rest;
      b->size = size;
      pool.insert(rest);
    }
    b->allocated = true;
    b->requested = n;
    s.allocated_bytes.add(b->size);
    s.active_bytes.add(b->size);
    s.requested_bytes.add(n);
    s.allocation.add(1);
    s.active.add(1);
    s.allocation_count++;
    if (reused) {
      s.reuse_count++;
      if (exact) s.cache_hit_count++;
    } else {
      s.cache_miss_count++;
    }
    return b;
  }

  std::mutex mu_;
  uint64_t generation_ = 0;
  std::set<Block*, BlockLess> small_[kMaxDevices];
  std::set<Block*, BlockLess> large_[kMaxDevices];
  DeviceStats stats_[kMaxDevices];
};

// Never destroyed: deleters may run during interpreter and static teardown.
NkipyAllocator* g_allocator = new NkipyAllocator();

void block_deleter(void* ctx) {
  if (ctx) g_allocator->free_block(static_cast<Block*>(ctx));
}

c10::Allocator* device_allocator() { return g_allocator; }

REGISTER_ALLOCATOR(kNkipy, g_allocator);

// ---------------------------------------------------------------------------
// Locating device memory
// ---------------------------------------------------------------------------

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

// Element span [lo, hi] (in elements from the storage start) a view covers.
void view_span(const at::Tensor& t, int64_t* lo, int64_t* hi) {
  int64_t end = t.storage_offset();
  for (int64_t d = 0; d < t.dim(); d++) end += (t.size(d) - 1) * t.stride(d);
  *lo = t.storage_offset();
  *hi = end;
}

bool is_nkipy(const at::Tensor& t) { return t.device().type() == kNkipy; }

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

// dst (nkipy) <- host (CPU, any dtype, broadcastable).
void host_to_device(const at::Tensor& dst, const at::Tensor& host) {
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

at::Tensor nkipy_copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  (void)non_blocking;
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
    host_to_device(dst, self);
    return dst;
  }
  // device to device (same or another core)
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

void NkipyAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  if (count == 0) return;
  uint64_t gen = api().live_generation();
  nkrt_tensor_t *st = nullptr, *dt = nullptr;
  uint64_t so = 0, doff = 0;
  check_status(api().tensor_lookup(gen, src, &st, &so), "nkipy copy_data");
  check_status(api().tensor_lookup(gen, dest, &dt, &doff), "nkipy copy_data");
  check_status(api().tensor_copy(gen, st, so, dt, doff, count), "nkipy copy_data");
}

at::Tensor nkipy_copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  dst.resize_(self.sizes());
  return nkipy_copy_from(self, dst, false);
}

// ---------------------------------------------------------------------------
// Factories and metadata kernels
// ---------------------------------------------------------------------------

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
c10::DeviceIndex factory_device(std::optional<at::Device> device) {
  c10::Device dev = device.value_or(c10::Device(kNkipy, t_current_device));
  c10::DeviceIndex index = dev.has_index() ? dev.index() : t_current_device;
  check_device_index(index);
  return index;
}

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

// ---------------------------------------------------------------------------
// CPU fallback: one warning per operator
// ---------------------------------------------------------------------------

std::mutex g_warned_mu;
std::unordered_set<std::string> g_warned;
std::atomic<int64_t> g_fallback_calls{0};

void nkipy_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  g_fallback_calls++;
  const auto& name = op.schema().operator_name();
  std::string full = name.name + (name.overload_name.empty() ? "" : "." + name.overload_name);
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(g_warned_mu);
    first = g_warned.insert(full).second;
  }
  if (first && g_fallback_warn.load()) {
    TORCH_WARN("nkipy: operator '", full,
               "' has no nkipy implementation; it runs on the CPU (tensors are copied to the "
               "host and back). This warning is shown once per operator; set "
               "SPIKE_TORCH_FALLBACK_WARN=0 to silence it.");
  }
  NKIPY_LOG("CPU fallback: %s", full.c_str());
  at::native::cpu_fallback(op, stack);
}

// ---------------------------------------------------------------------------
// Device guard
// ---------------------------------------------------------------------------

struct NkipyGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return kNkipy; }
  c10::Device exchangeDevice(c10::Device d) const override {
    TORCH_INTERNAL_ASSERT(d.type() == kNkipy);
    c10::Device old(kNkipy, t_current_device);
    if (d.index() != t_current_device) setDevice(d);
    return old;
  }
  c10::Device getDevice() const override { return c10::Device(kNkipy, t_current_device); }
  void setDevice(c10::Device d) const override {
    TORCH_INTERNAL_ASSERT(d.type() == kNkipy);
    check_device_index(d.index());
    t_current_device = d.index();
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override {
    if (d.index() >= 0) t_current_device = d.index();
  }
  c10::Stream getStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getNewStream(c10::Device d, int priority) const override {
    (void)priority;
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool high) const override {
    (void)high;
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    return c10::Stream(c10::Stream::DEFAULT, s.device());
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(device_count_raw());
  }
  // One in-order queue per core and synchronous copies: events are trivially
  // complete.
  void destroyEvent(void*, const c10::DeviceIndex) const noexcept override {}
  void record(void**, const c10::Stream&, const c10::DeviceIndex,
              const c10::EventFlag) const override {}
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void*) const override { return true; }
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void synchronizeEvent(void*) const override {}
  void synchronizeDevice(const c10::DeviceIndex) const override {}
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
  double elapsedTime(void*, void*, const c10::DeviceIndex) const override { return 0.0; }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, NkipyGuardImpl);

// ---------------------------------------------------------------------------
// Generators and hooks
// ---------------------------------------------------------------------------

struct NkipyGenerator : public at::CPUGeneratorImpl {
  explicit NkipyGenerator(c10::DeviceIndex index) {
    device_ = c10::Device(kNkipy, index);
    key_set_ = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);
  }
  ~NkipyGenerator() override = default;
};

const at::Generator& default_generator(c10::DeviceIndex index) {
  static std::mutex mu;
  static std::vector<at::Generator>* gens = new std::vector<at::Generator>();
  std::lock_guard<std::mutex> lock(mu);
  if (index < 0) index = t_current_device;
  check_device_index(index);
  if (gens->empty()) {
    gens->resize(kMaxDevices);
  }
  at::Generator& g = (*gens)[index];
  if (!g.defined()) {
    g = at::make_generator<NkipyGenerator>(index);  // PyTorch's default seed, as on CPU
  }
  return g;
}

struct NkipyHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return device_count_raw() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  void init() const override {}
  c10::DeviceIndex deviceCount() const override {
    return static_cast<c10::DeviceIndex>(device_count_raw());
  }
  void setCurrentDevice(c10::DeviceIndex d) const override {
    check_device_index(d);
    t_current_device = d;
  }
  c10::DeviceIndex getCurrentDevice() const override { return t_current_device; }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    c10::DeviceIndex old = t_current_device;
    setCurrentDevice(d);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override {
    c10::DeviceIndex old = t_current_device;
    t_current_device = d;
    return old;
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex index) const override {
    return default_generator(index);
  }
  at::Generator getNewGenerator(c10::DeviceIndex index) const override {
    if (index < 0) index = t_current_device;
    return at::make_generator<NkipyGenerator>(index);
  }
  at::Device getDeviceFromPtr(void* data) const override {
    uint64_t gen = api().live_generation();
    nkrt_tensor_t* t = nullptr;
    uint64_t off = 0;
    check_status(api().tensor_lookup(gen, data, &t, &off), "nkipy getDeviceFromPtr");
    return c10::Device(kNkipy, static_cast<c10::DeviceIndex>(api().tensor_core(t)));
  }
  bool isPinnedPtr(const void*) const override { return false; }
  at::Allocator* getPinnedMemoryAllocator() const override { return at::getCPUAllocator(); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    grow_storage(storage, newsize);
  }
};

struct HooksRegistrar {
  HooksRegistrar() { at::RegisterPrivateUse1HooksInterface(new NkipyHooks()); }
};
HooksRegistrar g_hooks_registrar;

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

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(nkipy_empty_memory_format));
  m.impl("empty_strided", TORCH_FN(nkipy_empty_strided));
  m.impl("as_strided", TORCH_FN(nkipy_as_strided));
  m.impl("view", TORCH_FN(nkipy_view));
  m.impl("_reshape_alias", TORCH_FN(nkipy_reshape_alias));
  m.impl("unfold", TORCH_FN(nkipy_unfold));
  m.impl("resize_", TORCH_FN(nkipy_resize_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(nkipy_set_source_storage_offset));
  m.impl("set_.source_Storage", TORCH_FN(nkipy_set_source_storage));
  m.impl("set_.source_Tensor", TORCH_FN(nkipy_set_source_tensor));
  m.impl("set_", TORCH_FN(nkipy_set_empty));
  m.impl("_copy_from", TORCH_FN(nkipy_copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(nkipy_copy_from_and_resize));
  m.impl("fill_.Scalar", TORCH_FN(nkipy_fill_scalar));
  m.impl("fill_.Tensor", TORCH_FN(nkipy_fill_tensor));
  m.impl("zero_", TORCH_FN(nkipy_zero));
  m.impl("_local_scalar_dense", TORCH_FN(nkipy_local_scalar_dense));
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&nkipy_cpu_fallback>());
}

// ---------------------------------------------------------------------------
// C entry points for spike_torch (called through ctypes)
// ---------------------------------------------------------------------------

extern "C" {

__attribute__((visibility("default"))) int spike_torch_init(const void* capi) {
  const spike_capi_t* a = static_cast<const spike_capi_t*>(capi);
  if (!a || a->version < SPIKE_CAPI_VERSION || a->struct_size < sizeof(spike_capi_t)) return -1;
  g_api = a;
  return 0;
}

__attribute__((visibility("default"))) void spike_torch_set_options(int debug,
                                                                    int fallback_warn) {
  g_debug = debug;
  g_fallback_warn = fallback_warn;
}

__attribute__((visibility("default"))) int spike_torch_get_device() {
  return t_current_device;
}

__attribute__((visibility("default"))) void spike_torch_set_device(int index) {
  t_current_device = static_cast<c10::DeviceIndex>(index);
}

__attribute__((visibility("default"))) int spike_torch_device_count() {
  return device_count_raw();
}

__attribute__((visibility("default"))) void spike_torch_empty_cache(int device) {
  if (g_api) g_allocator->empty_cache(device);
}

__attribute__((visibility("default"))) int64_t spike_torch_cached_blocks(int device) {
  return g_api ? g_allocator->cached_blocks(device) : 0;
}

__attribute__((visibility("default"))) int spike_torch_memory_stats(int device, int64_t* out,
                                                                     int capacity) {
  return g_api ? g_allocator->stats(device, out, capacity) : 0;
}

__attribute__((visibility("default"))) int spike_torch_pool_stats(int device, int64_t* out,
                                                                   int capacity) {
  return g_api ? g_allocator->pool_stats(device, out, capacity) : 0;
}

__attribute__((visibility("default"))) int64_t spike_torch_trim(int device,
                                                                int64_t target_bytes) {
  return g_api ? g_allocator->trim(device, target_bytes) : 0;
}

__attribute__((visibility("default"))) void spike_torch_reset_peak(int device) {
  g_allocator->reset_peak(device);
}

__attribute__((visibility("default"))) void spike_torch_reset_accumulated(int device) {
  g_allocator->reset_accumulated(device);
}

__attribute__((visibility("default"))) void spike_torch_drop_runtime() {
  if (g_api) g_allocator->drop_runtime();
}

__attribute__((visibility("default"))) int64_t spike_torch_fallback_calls() {
  return g_fallback_calls.load();
}

__attribute__((visibility("default"))) void spike_torch_clear_fallback_warnings() {
  std::lock_guard<std::mutex> lock(g_warned_mu);
  g_warned.clear();
}

}  // extern "C"

}  // namespace spike_torch
