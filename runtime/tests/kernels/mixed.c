/* Test NEFF with mixed dtypes and two outputs:
 *   output0 float32[2,3] = x + y (y broadcast over rows)
 *   output1 int32[1]     = sum(y)
 * and scratch memory: y is staged through env->scratch. */
#include "nkrt/neff_abi.h"

static const int64_t xs[2] = {2, 3};
static const int64_t ys[1] = {3};
static const int64_t ss[1] = {1};
static const nkrt_neff_tensor_t inputs[2] = {
    {"x", NKRT_DTYPE_FLOAT32, 2, xs, 24, -1},
    {"y", NKRT_DTYPE_INT32, 1, ys, 12, -1},
};
static const nkrt_neff_tensor_t outputs[2] = {
    {"output0", NKRT_DTYPE_FLOAT32, 2, xs, 24, -1},
    {"output1", NKRT_DTYPE_INT32, 1, ss, 4, -1},
};

static int kernel(const nkrt_kernel_env_t *env, void *const *in, void *const *out) {
  const float *x = in[0];
  const int32_t *y = in[1];
  int32_t *tmp = env->scratch(env->ctx, 3 * sizeof(int32_t));
  if (!tmp) {
    env->set_error(env->ctx, "mixed: no scratch memory");
    return 1;
  }
  for (int j = 0; j < 3; j++) tmp[j] = y[j];
  float *o0 = out[0];
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 3; j++) o0[i * 3 + j] = x[i * 3 + j] + (float)tmp[j];
  *(int32_t *)out[1] = tmp[0] + tmp[1] + tmp[2];
  return 0;
}

static const nkrt_neff_desc_t desc = {
    sizeof(nkrt_neff_desc_t), NKRT_NEFF_ABI_VERSION, "mixed", 2, 2, inputs, outputs, 256, kernel};

const nkrt_neff_desc_t *nkrt_neff_query(uint32_t runtime_abi_version) {
  (void)runtime_abi_version;
  return &desc;
}
