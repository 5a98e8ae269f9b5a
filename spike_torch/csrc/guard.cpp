// spike_torch/csrc/guard.cpp - the nkipy device's c10 device guard
// (DeviceGuardImplInterface, registered for PrivateUse1 at the end): the
// current device, the device count, and the streams and events of a device
// whose work is in order and whose copies are synchronous (events carry the
// host time of their recording, for elapsed_time).

#include <chrono>

#include <c10/core/Device.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include "nkipy_device.h"

namespace spike_torch {
namespace {

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
  // One in-order queue per core, copies synchronous and eager kernels complete
  // when they return: every stream is the core's one queue, and an event is
  // complete as soon as it is recorded. A recorded event keeps the host's
  // steady-clock time of its recording, for elapsedTime (events created with
  // enable_timing=True, EventFlag::BACKEND_DEFAULT, as CUDA's).
  struct Event {
    std::chrono::steady_clock::time_point when;
    bool timing = false;
  };
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    delete static_cast<Event*>(event);
  }
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(),
                "event device index ", device_index, " does not match the recording stream's "
                "device ", stream.device_index());
    auto* e = static_cast<Event*>(*event);
    if (e == nullptr) {
      e = new Event();
      e->timing = flag == c10::EventFlag::BACKEND_DEFAULT;
      *event = e;
    }
    e->when = std::chrono::steady_clock::now();
  }
  void block(void*, const c10::Stream&) const override {}
  // Kernels and copies complete before they return, but for non_blocking
  // copies from pinned memory (pinned_memory.cpp): waiting on or querying a
  // stream, an event or the device covers those (all of them: a superset of
  // the work recorded before, as the one queue per core orders it anyway).
  bool queryEvent(void*) const override { return pinned_idle(); }
  bool queryStream(const c10::Stream&) const override { return pinned_idle(); }
  void synchronizeStream(const c10::Stream&) const override { pinned_wait_all(); }
  void synchronizeEvent(void*) const override { pinned_wait_all(); }
  void synchronizeDevice(const c10::DeviceIndex) const override { pinned_wait_all(); }
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    auto* a = static_cast<Event*>(start);
    auto* b = static_cast<Event*>(end);
    TORCH_CHECK(a != nullptr && b != nullptr,
                "both events must be recorded before calculating elapsed time");
    TORCH_CHECK(a->timing && b->timing,
                "both events must be created with enable_timing=True to calculate elapsed time");
    return std::chrono::duration<double, std::milli>(b->when - a->when).count();
  }
};

}  // namespace

C10_REGISTER_GUARD_IMPL(PrivateUse1, NkipyGuardImpl);

}  // namespace spike_torch
