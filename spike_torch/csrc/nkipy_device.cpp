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

}  // extern "C"

}  // namespace spike_torch
