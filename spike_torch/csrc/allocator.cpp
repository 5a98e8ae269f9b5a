// spike_torch/csrc/allocator.cpp - the nkipy device's caching allocator
// (c10::DeviceAllocator, registered for PrivateUse1 by REGISTER_ALLOCATOR at
// the end): nkrt device memory taken in segments, split into cached blocks,
// with the statistics behind torch.nkipy's memory functions and
// spike_torch.memory_pool_stats, and the C entry points that read them.

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/Exception.h>
#include <torch/csrc/profiler/combined_traceback.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <iterator>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "nkipy_device.h"
#include "spike_capi.h"

namespace spike_torch {
namespace {

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

struct SegmentLess {
  bool operator()(const Segment* a, const Segment* b) const {
    return reinterpret_cast<uintptr_t>(a->base) < reinterpret_cast<uintptr_t>(b->base);
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
    Block* b = malloc_block(dev, n, stacks_ ? gather_frames() : nullptr);
    return c10::DataPtr(b->ptr, b, &block_deleter, device);
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  void copy_data(void* dest, const void* src, std::size_t count) const override;

  void free_block(Block* b) {
    // (frames are gathered before the lock: gathering may take the GIL)
    std::shared_ptr<torch::CapturedTraceback> frames = free_stacks_ ? gather_frames() : nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    Segment* seg = b->seg;
    b->layout.reset();
    b->frames.reset();
    if (seg->generation != generation_) {  // runtime closed since: memory already gone
      b->allocated = false;
      maybe_delete_stale(seg);
      return;
    }
    if (trace_on_) {
      auto addr = reinterpret_cast<uint64_t>(b->ptr);
      auto size = static_cast<int64_t>(b->size);
      trace_locked(seg->device, "free_requested", addr, size, frames);
      trace_locked(seg->device, "free_completed", addr, size, frames);  // one queue: at once
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

  void record_history(bool trace, bool stacks, bool free_stacks, bool cpp, size_t max_entries) {
    std::lock_guard<std::mutex> lock(mu_);
    if (trace)  // started afresh, as documented
      for (auto& t : trace_) t.clear();
    trace_on_ = trace;
    stacks_ = stacks;
    free_stacks_ = stacks && free_stacks;
    cpp_stacks_ = cpp;
    max_entries_ = std::max<size_t>(1, max_entries);
    for (auto& t : trace_)
      while (t.size() > max_entries_) t.pop_front();
  }

  void snapshot(std::vector<SegmentSnapshot>* segments,
                std::vector<std::vector<MemoryTraceEntry>>* traces) {
    std::lock_guard<std::mutex> lock(mu_);
    if (g_api) sync_generation_locked();
    for (int d = 0; d < kMaxDevices; d++) {
      for (Segment* seg : segments_[d]) {
        SegmentSnapshot ss{d, reinterpret_cast<uint64_t>(seg->base),
                           static_cast<int64_t>(seg->size), seg->small, seg->frames, {}};
        for (Block* b = seg->first; b; b = b->next)
          ss.blocks.push_back({reinterpret_cast<uint64_t>(b->ptr), static_cast<int64_t>(b->size),
                               static_cast<int64_t>(b->requested), b->allocated, b->frames});
        segments->push_back(std::move(ss));
      }
      traces->emplace_back(trace_[d].begin(), trace_[d].end());
    }
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
  std::shared_ptr<torch::CapturedTraceback> gather_frames() const {
    return torch::CapturedTraceback::gather(/*python=*/true, /*script=*/false, cpp_stacks_);
  }

  void trace_locked(int device, const char* action, uint64_t addr, int64_t size,
                    std::shared_ptr<torch::CapturedTraceback> frames, int64_t device_free = 0) {
    auto& t = trace_[device];
    if (t.size() >= max_entries_) t.pop_front();
    int64_t now = std::chrono::duration_cast<std::chrono::microseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
    t.push_back({action, addr, size, now, device_free, std::move(frames)});
  }

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
        // the closed runtime took every block and segment with it: say so in
        // the trace, so that it never shows memory the next runtime reuses
        if (trace_on_)
          for (Segment* seg : segments_[d]) {
            for (Block* b = seg->first; b; b = b->next)
              if (b->allocated)
                trace_locked(d, "free_completed", reinterpret_cast<uint64_t>(b->ptr),
                             static_cast<int64_t>(b->size), nullptr);
            trace_locked(d, "segment_free", reinterpret_cast<uint64_t>(seg->base),
                         static_cast<int64_t>(seg->size), nullptr);
          }
        for (auto* pool : {&small_[d], &large_[d]}) {
          std::vector<Block*> blocks(pool->begin(), pool->end());
          pool->clear();
          for (Block* b : blocks) maybe_delete_stale(b->seg);
        }
        stats_[d] = DeviceStats();
        segments_[d].clear();
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
    segments_[seg->device].erase(seg);
    if (trace_on_)
      trace_locked(seg->device, "segment_free", reinterpret_cast<uint64_t>(seg->base),
                   static_cast<int64_t>(seg->size), nullptr);
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

  Block* malloc_block(c10::DeviceIndex dev, size_t n,
                      std::shared_ptr<torch::CapturedTraceback> frames) {
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
        if (st && api().status_code(st) == NKRT_RESOURCE && seg_size > size) {
          // The pool's usual segment (20 MiB for requests under 10 MiB) does
          // not fit in what the device has left; one of just this request may.
          api().status_free(st);
          NKIPY_LOG("no room for a %zu-byte segment on nkipy:%d: trying %zu bytes", seg_size,
                    static_cast<int>(dev), size);
          seg_size = size;
          st = api().tensor_allocate(generation_, static_cast<uint32_t>(dev), seg_size,
                                     "torch_nkipy", &t);
        }
        if (st && api().status_code(st) == NKRT_RESOURCE) {
          std::string rt_msg = api().status_message(st);
          api().status_free(st);
          s.num_ooms++;
          nkrt_memory_stats_t ms;
          std::memset(&ms, 0, sizeof(ms));
          ms.struct_size = sizeof(ms);
          nkrt_status_t st2 = api().memory_stats(generation_, static_cast<uint32_t>(dev), &ms);
          if (st2) api().status_free(st2);
          if (trace_on_)
            trace_locked(dev, "oom", 0, static_cast<int64_t>(n), frames,
                         static_cast<int64_t>(ms.largest_free_block));
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
      seg->frames = frames;
      segments_[dev].insert(seg);
      if (trace_on_)
        trace_locked(dev, "segment_alloc", reinterpret_cast<uint64_t>(seg->base),
                     static_cast<int64_t>(seg_size), frames);
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
    b->layout.reset();
    b->frames = frames;
    if (trace_on_)
      trace_locked(dev, "alloc", reinterpret_cast<uint64_t>(b->ptr), static_cast<int64_t>(b->size),
                   std::move(frames));
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
  // live segments, by base address (memory snapshots)
  std::set<Segment*, SegmentLess> segments_[kMaxDevices];
  // memory history (torch.nkipy._record_memory_history): read without the lock
  // where a stale value only costs or skips one stack
  std::atomic<bool> stacks_{false}, free_stacks_{false};
  std::atomic<bool> cpp_stacks_{false};
  bool trace_on_ = false;
  size_t max_entries_ = SIZE_MAX;
  std::deque<MemoryTraceEntry> trace_[kMaxDevices];
};

void NkipyAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  if (count == 0) return;
  uint64_t gen = api().live_generation();
  nkrt_tensor_t *st = nullptr, *dt = nullptr;
  uint64_t so = 0, doff = 0;
  check_status(api().tensor_lookup(gen, src, &st, &so), "nkipy copy_data");
  check_status(api().tensor_lookup(gen, dest, &dt, &doff), "nkipy copy_data");
  check_status(api().tensor_copy(gen, st, so, dt, doff, count), "nkipy copy_data");
}

// Never destroyed: deleters may run during interpreter and static teardown.
NkipyAllocator* g_allocator = new NkipyAllocator();

}  // namespace

void block_deleter(void* ctx) {
  if (ctx) g_allocator->free_block(static_cast<Block*>(ctx));
}

c10::Allocator* device_allocator() { return g_allocator; }

void allocator_record_history(bool trace, bool stacks, bool free_stacks, bool cpp,
                              size_t max_entries) {
  g_allocator->record_history(trace, stacks, free_stacks, cpp, max_entries);
}

void allocator_snapshot(std::vector<SegmentSnapshot>* segments,
                        std::vector<std::vector<MemoryTraceEntry>>* traces) {
  g_allocator->snapshot(segments, traces);
}

REGISTER_ALLOCATOR(kNkipy, g_allocator);

// ---------------------------------------------------------------------------
// C entry points for spike_torch (called through ctypes)
// ---------------------------------------------------------------------------

extern "C" {

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

}  // extern "C"

}  // namespace spike_torch
