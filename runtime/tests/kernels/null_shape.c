/* Test NEFF with a malformed descriptor: input "x" has rank 2 but no shape
 * array. Must be refused at load, naming the NULL shape pointer. */
#include <stddef.h>

#include "nkrt/neff_abi.h"

static const int64_t shape[1] = {4};
static const nkrt_neff_tensor_t inputs[1] = {{"x", NKRT_DTYPE_FLOAT32, 2, NULL, 16, -1}};
static const nkrt_neff_tensor_t outputs[1] = {{"output0", NKRT_DTYPE_FLOAT32, 1, shape, 16, -1}};

static int kernel(const nkrt_kernel_env_t *env, void *const *in, void *const *out) {
  (void)env;
  (void)in;
  (void)out;
  return 0;
}

static const nkrt_neff_desc_t desc = {sizeof(nkrt_neff_desc_t), NKRT_NEFF_ABI_VERSION,
                                      "null_shape", 1, 1, inputs, outputs, 0, kernel};

const nkrt_neff_desc_t *nkrt_neff_query(uint32_t runtime_abi_version) {
  (void)runtime_abi_version;
  return &desc;
}
