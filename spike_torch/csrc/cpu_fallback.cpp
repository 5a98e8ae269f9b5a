// spike_torch/csrc/cpu_fallback.cpp - what is left in C++ of the nkipy device's
// boxed fallback. The fallback itself (the kernel of every operator nothing
// else implements for PrivateUse1) is Python, spike_torch/_generic.py: it runs
// the operator as a device kernel generated from the ATen op registry when it
// can, else on the CPU. This file gives it the device's one debug log, so its
// messages look like every other C++ message of SPIKE_TORCH_DEBUG=1.

#include <cstdio>

#include "nkipy_device.h"

namespace spike_torch {

extern "C" {

// Writes "[spike_torch] <message>" to stderr when SPIKE_TORCH_DEBUG is on.
__attribute__((visibility("default"))) void spike_torch_debug_log(const char* message) {
  if (message != nullptr) NKIPY_LOG("%s", message);
}

}  // extern "C"

}  // namespace spike_torch
