/* Test NEFF: x += 1 in place over float32[16]; output0 aliases input x. */
#include "nkrt/neff_abi.h"

static const int64_t shape[1] = {16};
static const nkrt_neff_tensor_t inputs[1] = {{"x", NKRT_DTYPE_FLOAT32, 1, shape, 64, -1}};
static const nkrt_neff_tensor_t outputs[1] = {{"output0", NKRT_DTYPE_FLOAT32, 1, shape, 64, 0}};

static int kernel(const nkrt_kernel_env_t *env, void *const *in, void *const *out) {
  (void)env;
  const float *x = in[0];
  float *y = out[0];
  for (int i = 0; i < 16; i++) y[i] = x[i] + 1.0f;
  return 0;
}

static const nkrt_neff_desc_t desc = {
    sizeof(nkrt_neff_desc_t), NKRT_NEFF_ABI_VERSION, "inplace", 1, 1, inputs, outputs, 0, kernel};

const nkrt_neff_desc_t *nkrt_neff_query(uint32_t runtime_abi_version) {
  (void)runtime_abi_version;
  return &desc;
}
