/* Test NEFF with zero-element tensors: input "x" float32[0, 3] (0 bytes) and
 * "y" float32[2]; output0 float32[0, 3] (0 bytes), output1 = y + 1 when every
 * tensor address is non-NULL and 64-byte aligned, else y + 100. */
#include <stdint.h>

#include "nkrt/neff_abi.h"

static const int64_t empty_shape[2] = {0, 3};
static const int64_t two[1] = {2};
static const nkrt_neff_tensor_t inputs[2] = {{"x", NKRT_DTYPE_FLOAT32, 2, empty_shape, 0, -1},
                                             {"y", NKRT_DTYPE_FLOAT32, 1, two, 8, -1}};
static const nkrt_neff_tensor_t outputs[2] = {
    {"output0", NKRT_DTYPE_FLOAT32, 2, empty_shape, 0, -1},
    {"output1", NKRT_DTYPE_FLOAT32, 1, two, 8, -1}};

static int usable(const void *p) { return p && ((uintptr_t)p % 64) == 0; }

static int kernel(const nkrt_kernel_env_t *env, void *const *in, void *const *out) {
  (void)env;
  const float *y = in[1];
  float *r = out[1];
  float add = usable(in[0]) && usable(in[1]) && usable(out[0]) && usable(out[1]) ? 1.0f : 100.0f;
  for (int i = 0; i < 2; i++) r[i] = y[i] + add;
  return 0;
}

static const nkrt_neff_desc_t desc = {
    sizeof(nkrt_neff_desc_t), NKRT_NEFF_ABI_VERSION, "empty", 2, 2, inputs, outputs, 0, kernel};

const nkrt_neff_desc_t *nkrt_neff_query(uint32_t runtime_abi_version) {
  (void)runtime_abi_version;
  return &desc;
}
