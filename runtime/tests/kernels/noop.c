/* Test NEFF: the smallest useful kernel, output0 = x over float32[1]. Used to
 * measure the execute round trip. */
#include "nkrt/neff_abi.h"

static const int64_t shape[1] = {1};
static const nkrt_neff_tensor_t inputs[1] = {{"x", NKRT_DTYPE_FLOAT32, 1, shape, 4, -1}};
static const nkrt_neff_tensor_t outputs[1] = {{"output0", NKRT_DTYPE_FLOAT32, 1, shape, 4, -1}};

static int kernel(const nkrt_kernel_env_t *env, void *const *in, void *const *out) {
  (void)env;
  *(float *)out[0] = *(const float *)in[0];
  return 0;
}

static const nkrt_neff_desc_t desc = {
    sizeof(nkrt_neff_desc_t), NKRT_NEFF_ABI_VERSION, "noop", 1, 1, inputs, outputs, 0, kernel};

const nkrt_neff_desc_t *nkrt_neff_query(uint32_t runtime_abi_version) {
  (void)runtime_abi_version;
  return &desc;
}
