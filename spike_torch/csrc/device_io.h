// spike_torch/csrc/device_io.h - what the nkipy device (storage_io.cpp) offers
// the one file outside it, kernel_call.cpp: the spike C API table and
// hazard-aware copies between host memory and an nkipy tensor.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "spike_capi.h"

namespace spike_torch {

// The spike C API table (raises if spike_torch is not initialised).
const spike_capi_t& capi();

// Whether `storage` is memory of the open runtime (or holds no device memory);
// false once the runtime it came from was closed (spike.reset()): its address
// may by now belong to another tensor.
bool storage_is_live(const c10::Storage& storage);

// Raises (c10::Error, naming `what`) for a storage of a closed runtime.
void check_storage_live(const c10::Storage& storage, const char* what);

// Copies `size` bytes from the start of nkipy tensor `t`'s data into `dst`
// (nkrt reads: they wait for queued work that writes those bytes).
void read_bytes(const at::Tensor& t, void* dst, uint64_t size);

// Copies `size` bytes from `src` to the start of nkipy tensor `t`'s data.
void write_bytes(const at::Tensor& t, const void* src, uint64_t size);

}  // namespace spike_torch
