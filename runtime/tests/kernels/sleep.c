/* Test NEFF: a slow kernel for ordering tests. Sleeps ms[0] milliseconds, then
 * writes output0[i] = x[i] + 1 over float32[1024]. */
#define _POSIX_C_SOURCE 199309L
#include <time.h>

#include "nkrt/neff_abi.h"

static const int64_t xs[1] = {1024};
static const int64_t ms_shape[1] = {1};
static const nkrt_neff_tensor_t inputs[2] = {
    {"x", NKRT_DTYPE_FLOAT32, 1, xs, 4096, -1},
    {"ms", NKRT_DTYPE_INT32, 1, ms_shape, 4, -1},
};
static const nkrt_neff_tensor_t outputs[1] = {{"output0", NKRT_DTYPE_FLOAT32, 1, xs, 4096, -1}};

static int kernel(const nkrt_kernel_env_t *env, void *const *in, void *const *out) {
  (void)env;
  const float *x = in[0];
  int32_t ms = *(const int32_t *)in[1];
  float *y = out[0];
  if (ms > 0) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
  }
  for (int i = 0; i < 1024; i++) y[i] = x[i] + 1.0f;
  return 0;
}

static const nkrt_neff_desc_t desc = {
    sizeof(nkrt_neff_desc_t), NKRT_NEFF_ABI_VERSION, "sleep", 2, 1, inputs, outputs, 0, kernel};

const nkrt_neff_desc_t *nkrt_neff_query(uint32_t runtime_abi_version) {
  (void)runtime_abi_version;
  return &desc;
}
