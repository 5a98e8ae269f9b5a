// spike_torch/csrc/nkipy_device.cpp - the nkipy device itself: its connection
// to the spike runtime, its options, the device count and the current device,
// with the C entry points spike_torch/_C.py calls for them. The PyTorch
// interfaces built on it each have their own file (README.md lists them).
//
// The nkrt runtime is the one the spike singleton owns: it is reached through
// the C function table spike._spike exports (spike/include/spike_capi.h),
// handed to us once by spike_torch/__init__.py through spike_torch_init().

#include <c10/core/Device.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

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

thread_local constinit c10::DeviceIndex t_current_device = 0;

namespace {
// The personality: set once by spike_torch_set_personality (before it, the
// strided "nkipy" one is assumed by messages, and no factory kernel exists).
char g_device_name[16] = "nkipy";
std::atomic<int> g_personality{0};  // 0 unset, 1 strided, 2 tiled
}  // namespace

const char* device_name() { return g_device_name; }

torch::Library& personality_kernels() {
  static torch::Library* lib = new torch::Library(
      torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  return *lib;
}
bool tiled_layout() { return g_personality.load(std::memory_order_relaxed) == 2; }

void check_device_index(c10::DeviceIndex index) {
  int count = device_count_raw();
  TORCH_CHECK(index >= 0 && index < count, "Invalid nkipy device index ", static_cast<int>(index),
              ": there are ", count, " nkipy device(s), valid indices are 0..", count - 1);
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

// Gives the library its personality: the device's name and its storage
// (tiled != 0: 128-byte sticks, the spyre device; else strided, nkipy), and
// registers the factory, fill and copy kernels of that storage. Once per
// process; a second call with another personality fails (PyTorch has one
// PrivateUse1 device per process). Returns 0, or -1 with a message in `err`.
__attribute__((visibility("default"))) int spike_torch_set_personality(const char* name,
                                                                        int tiled, char* err,
                                                                        size_t n) {
  int want = tiled ? 2 : 1;
  int have = g_personality.load();
  if (have != 0) {
    if (have == want && std::strcmp(name, g_device_name) == 0) return 0;
    std::snprintf(err, n, "this process's device library already serves the '%s' device",
                  g_device_name);
    return -1;
  }
  if (std::strlen(name) == 0 || std::strlen(name) >= sizeof(g_device_name)) {
    std::snprintf(err, n, "bad device name '%s'", name);
    return -1;
  }
  try {
    if (tiled) {
      register_tiled_kernels();
    } else {
      register_strided_factories();
      register_strided_copies();
    }
  } catch (const std::exception& e) {
    std::snprintf(err, n, "%s", e.what());
    return -1;
  }
  std::snprintf(g_device_name, sizeof(g_device_name), "%s", name);
  g_personality = want;
  return 0;
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
