// spike_torch/csrc/hooks.cpp - the nkipy device's PrivateUse1 hooks
// (PrivateUse1HooksInterface, registered when the library loads, at the end):
// availability and device count, the current device, each device's default
// generator (PyTorch's CPU generator on an nkipy device), the device of a data
// pointer, and growing a storage.

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/Allocator.h>
#include <c10/core/Storage.h>

#include <cstdint>
#include <mutex>
#include <vector>

#include "nkipy_device.h"
#include "spike_capi.h"

namespace spike_torch {
namespace {

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
  bool isPinnedPtr(const void* data) const override { return is_pinned_ptr(data); }
  at::Allocator* getPinnedMemoryAllocator() const override { return pinned_allocator(); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    grow_storage(storage, newsize);
  }
};

struct HooksRegistrar {
  HooksRegistrar() { at::RegisterPrivateUse1HooksInterface(new NkipyHooks()); }
};
HooksRegistrar g_hooks_registrar;

}  // namespace

}  // namespace spike_torch
