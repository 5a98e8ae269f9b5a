// spike_torch/csrc/cpu_fallback.cpp - the nkipy device's boxed fallback, the
// kernel of every operator nothing else implements for PrivateUse1: it runs
// the operator on the CPU (at::native::cpu_fallback copies the tensors to the
// host and back), warning once per operator, and counts the calls. Registered
// at the end; the C entry points read the count and reset the warnings.

#include <ATen/native/CPUFallback.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_set>

#include "nkipy_device.h"

namespace spike_torch {
namespace {

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
  // A view computed on a host copy is a copy: writes through it would be lost
  // without a word. (In-place ops, whose returns alias for writing, are copied
  // back by cpu_fallback.)
  for (const auto& ret : op.schema().returns()) {
    const auto* alias = ret.alias_info();
    TORCH_CHECK(!alias || alias->isWrite(), "nkipy: operator '", full,
                "' returns a view of its input, which the CPU fallback can only return as a "
                "copy (writes through it would be lost); it is not supported on the nkipy device");
  }
  NKIPY_LOG("CPU fallback: %s", full.c_str());
  at::native::cpu_fallback(op, stack);
}

}  // namespace

// ---------------------------------------------------------------------------
// Registrations
// ---------------------------------------------------------------------------

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&nkipy_cpu_fallback>());
}

// ---------------------------------------------------------------------------
// C entry points for spike_torch (called through ctypes)
// ---------------------------------------------------------------------------

extern "C" {

__attribute__((visibility("default"))) int64_t spike_torch_fallback_calls() {
  return g_fallback_calls.load();
}

__attribute__((visibility("default"))) void spike_torch_clear_fallback_warnings() {
  std::lock_guard<std::mutex> lock(g_warned_mu);
  g_warned.clear();
}

}  // extern "C"

}  // namespace spike_torch
