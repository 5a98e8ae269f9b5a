// spike_torch/csrc/pinned_memory.cpp - pinned host memory for the nkipy device
// (Tensor.pin_memory(), is_pinned(), DataLoader(pin_memory=True); hooks.cpp
// hands this allocator to PyTorch).
//
// Blocks are page-aligned and locked in RAM (mlock, where RLIMIT_MEMLOCK
// allows; a block that cannot be locked is still served) and cached by size,
// rounded to a power of two, as torch.cuda's host allocator does. A copy from
// a pinned block to the device with non_blocking=True is queued on the core
// (nkrt_tensor_write_async) and returns at once; the block records the copy's
// event, and a block freed while a copy still reads it goes back to the cache
// only when that copy is done, so the allocator never hands out memory a copy
// is reading. torch.nkipy.synchronize() waits for every such copy.

#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "nkipy_device.h"

namespace spike_torch {
namespace {

constexpr size_t kPage = 4096;

struct PinnedBlock {
  void* ptr;
  size_t size;
  bool locked;
  std::vector<std::pair<uint64_t, nkrt_event_t*>> copies;  // (generation, event) in flight
};

void pinned_deleter(void* ctx);

class PinnedAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) override {
    c10::Device cpu(c10::DeviceType::CPU);
    if (n == 0) return c10::DataPtr(nullptr, nullptr, &pinned_deleter, cpu);
    size_t size = kPage;
    while (size < n) size <<= 1;
    std::lock_guard<std::mutex> lock(mu_);
    collect_locked();
    PinnedBlock* b = nullptr;
    auto it = free_.find(size);
    if (it != free_.end()) {
      b = it->second;
      free_.erase(it);
    } else {
      void* p = nullptr;
      TORCH_CHECK_WITH(OutOfMemoryError, posix_memalign(&p, kPage, size) == 0 && p,
                       "nkipy pinned memory: out of host memory allocating ", size, " bytes");
      b = new PinnedBlock{p, size, mlock(p, size) == 0, {}};
    }
    live_[reinterpret_cast<uintptr_t>(b->ptr)] = b;
    return c10::DataPtr(b->ptr, b, &pinned_deleter, cpu);
  }

  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }

  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }

  void free_block(PinnedBlock* b) {
    std::lock_guard<std::mutex> lock(mu_);
    live_.erase(reinterpret_cast<uintptr_t>(b->ptr));
    release_done(b);
    if (b->copies.empty())
      free_.emplace(b->size, b);
    else
      pending_.push_back(b);  // a copy still reads it
  }

  // Whether `p` lies in a live pinned block.
  bool contains(const void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    return find_locked(p) != nullptr;
  }

  // The block of `p` records a queued copy that reads it (the event is its).
  // false when `p` is not pinned memory (the caller waits for the copy).
  bool record_copy(const void* p, uint64_t generation, nkrt_event_t* ev) {
    std::lock_guard<std::mutex> lock(mu_);
    PinnedBlock* b = find_locked(p);
    if (!b) return false;
    b->copies.emplace_back(generation, ev);
    return true;
  }

  // Waits for every queued copy from pinned memory (raises the first error).
  // The blocks keep their copies meanwhile (this waits on references of its
  // own), so a block freed during the wait still goes to pending_, and
  // queries still see the copies in flight.
  void synchronize() {
    std::vector<std::pair<uint64_t, nkrt_event_t*>> all;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& kv : live_) retain_copies(kv.second, &all);
      for (PinnedBlock* b : pending_) retain_copies(b, &all);
    }
    nkrt_status_t first = nullptr;
    for (auto& [gen, ev] : all) {
      nkrt_status_t st = api().event_wait(gen, ev, -1);
      if (st && !first) first = st;
      else if (st) api().status_free(st);
      api().event_release(gen, ev);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& kv : live_) release_done(kv.second);
      collect_locked();
    }
    check_status(first, "nkipy: a non_blocking copy from pinned memory failed");
  }

  // Whether no copy from pinned memory is in flight.
  bool idle() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& kv : live_) {
      release_done(kv.second);
      if (!kv.second->copies.empty()) return false;
    }
    collect_locked();
    return pending_.empty();
  }

  // Returns the cached blocks to the system.
  void empty_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    collect_locked();
    for (auto& kv : free_) {
      if (kv.second->locked) munlock(kv.second->ptr, kv.second->size);
      std::free(kv.second->ptr);
      delete kv.second;
    }
    free_.clear();
  }

  // live bytes, cached bytes, blocks waiting for their copies
  void stats(int64_t* out) {
    std::lock_guard<std::mutex> lock(mu_);
    collect_locked();
    int64_t live = 0, cached = 0;
    for (auto& kv : live_) live += static_cast<int64_t>(kv.second->size);
    for (auto& kv : free_) cached += static_cast<int64_t>(kv.second->size);
    out[0] = live;
    out[1] = cached;
    out[2] = static_cast<int64_t>(pending_.size());
  }

 private:
  PinnedBlock* find_locked(const void* p) {
    auto a = reinterpret_cast<uintptr_t>(p);
    auto it = live_.upper_bound(a);
    if (it == live_.begin()) return nullptr;
    --it;
    PinnedBlock* b = it->second;
    return a < it->first + b->size ? b : nullptr;
  }

  // A reference to each of the block's in-flight copies, for the caller to
  // wait on and release.
  static void retain_copies(PinnedBlock* b,
                            std::vector<std::pair<uint64_t, nkrt_event_t*>>* out) {
    for (auto& c : b->copies) {
      api().event_retain(c.first, c.second);
      out->push_back(c);
    }
  }

  // Drops the block's copies that are done.
  static void release_done(PinnedBlock* b) {
    auto& c = b->copies;
    for (size_t i = 0; i < c.size();) {
      if (api().event_is_done(c[i].first, c[i].second)) {
        api().event_release(c[i].first, c[i].second);
        c[i] = c.back();
        c.pop_back();
      } else {
        i++;
      }
    }
  }

  // Freed blocks whose copies are done go back to the cache.
  void collect_locked() {
    for (size_t i = 0; i < pending_.size();) {
      release_done(pending_[i]);
      if (pending_[i]->copies.empty()) {
        free_.emplace(pending_[i]->size, pending_[i]);
        pending_[i] = pending_.back();
        pending_.pop_back();
      } else {
        i++;
      }
    }
  }

  std::mutex mu_;
  std::map<uintptr_t, PinnedBlock*> live_;
  std::multimap<size_t, PinnedBlock*> free_;
  std::vector<PinnedBlock*> pending_;
};

// Never destroyed: deleters may run during interpreter and static teardown.
PinnedAllocator* g_pinned = new PinnedAllocator();

void pinned_deleter(void* ctx) {
  if (ctx) g_pinned->free_block(static_cast<PinnedBlock*>(ctx));
}

}  // namespace

c10::Allocator* pinned_allocator() { return g_pinned; }

bool is_pinned_ptr(const void* p) { return p && g_pinned->contains(p); }

bool pinned_record_copy(const void* p, uint64_t generation, nkrt_event_t* ev) {
  return g_pinned->record_copy(p, generation, ev);
}

void pinned_wait_all() {
  if (g_api) g_pinned->synchronize();
}

bool pinned_idle() { return !g_api || g_pinned->idle(); }

extern "C" {

__attribute__((visibility("default"))) int spike_torch_pinned_synchronize(char* err,
                                                                        size_t err_size) {
  try {
    pinned_wait_all();
    return 0;
  } catch (const std::exception& e) {
    std::snprintf(err, err_size, "%s", e.what());
    return -1;
  }
}

__attribute__((visibility("default"))) void spike_torch_pinned_empty_cache() {
  g_pinned->empty_cache();
}

__attribute__((visibility("default"))) void spike_torch_pinned_stats(int64_t* out) {
  g_pinned->stats(out);
}

}  // extern "C"

}  // namespace spike_torch
