/* Test NEFF whose kernel always reports an error. */
#include "nkrt/neff_abi.h"

static const int64_t shape[1] = {4};
static const nkrt_neff_tensor_t inputs[1] = {{"x", NKRT_DTYPE_FLOAT32, 1, shape, 16, -1}};
static const nkrt_neff_tensor_t outputs[1] = {{"output0", NKRT_DTYPE_FLOAT32, 1, shape, 16, -1}};

static int kernel(const nkrt_kernel_env_t *env, void *const *in, void *const *out) {
  (void)in;
  (void)out;
  env->set_error(env->ctx, "deliberate kernel failure");
  return 1;
}

static const nkrt_neff_desc_t desc = {
    sizeof(nkrt_neff_desc_t), NKRT_NEFF_ABI_VERSION, "fails", 1, 1, inputs, outputs, 0, kernel};

const nkrt_neff_desc_t *nkrt_neff_query(uint32_t runtime_abi_version) {
  (void)runtime_abi_version;
  return &desc;
}
