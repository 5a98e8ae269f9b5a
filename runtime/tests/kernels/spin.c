/* Test NEFF: a single-threaded, compute-bound kernel (no parallel_for), used to
 * show that two cores execute concurrently. output0[i] = x[i] iterated through
 * a logistic map `iters` times, where iters = (int)n[0]. */
#include "nkrt/neff_abi.h"

static const int64_t xs[1] = {256};
static const int64_t ns[1] = {1};
static const nkrt_neff_tensor_t inputs[2] = {
    {"x", NKRT_DTYPE_FLOAT32, 1, xs, 1024, -1},
    {"n", NKRT_DTYPE_INT32, 1, ns, 4, -1},
};
static const nkrt_neff_tensor_t outputs[1] = {{"output0", NKRT_DTYPE_FLOAT32, 1, xs, 1024, -1}};

static int kernel(const nkrt_kernel_env_t *env, void *const *in, void *const *out) {
  (void)env;
  const float *x = in[0];
  int32_t iters = *(const int32_t *)in[1];
  float *y = out[0];
  for (int i = 0; i < 256; i++) {
    float v = x[i];
    for (int32_t k = 0; k < iters; k++) v = 3.7f * v * (1.0f - v);
    y[i] = v;
  }
  return 0;
}

static const nkrt_neff_desc_t desc = {
    sizeof(nkrt_neff_desc_t), NKRT_NEFF_ABI_VERSION, "spin", 2, 1, inputs, outputs, 0, kernel};

const nkrt_neff_desc_t *nkrt_neff_query(uint32_t runtime_abi_version) {
  (void)runtime_abi_version;
  return &desc;
}
