/* Test NEFF with more tensors than nkrt_execute keeps on its stack:
 * output0[i] = sum over the 40 inputs x0..x39 of xk[i], float32[16]. */
#include "nkrt/neff_abi.h"

#define N 16
#define NIN 40

static const int64_t shape[1] = {N};
#define IN(k) {"x" #k, NKRT_DTYPE_FLOAT32, 1, shape, N * 4, -1}
static const nkrt_neff_tensor_t inputs[NIN] = {
    IN(0),  IN(1),  IN(2),  IN(3),  IN(4),  IN(5),  IN(6),  IN(7),  IN(8),  IN(9),
    IN(10), IN(11), IN(12), IN(13), IN(14), IN(15), IN(16), IN(17), IN(18), IN(19),
    IN(20), IN(21), IN(22), IN(23), IN(24), IN(25), IN(26), IN(27), IN(28), IN(29),
    IN(30), IN(31), IN(32), IN(33), IN(34), IN(35), IN(36), IN(37), IN(38), IN(39),
};
static const nkrt_neff_tensor_t outputs[1] = {
    {"output0", NKRT_DTYPE_FLOAT32, 1, shape, N * 4, -1},
};

static int kernel(const nkrt_kernel_env_t *env, void *const *in, void *const *out) {
  (void)env;
  float *o = out[0];
  for (int i = 0; i < N; i++) {
    float s = 0;
    for (int k = 0; k < NIN; k++) s += ((const float *)in[k])[i];
    o[i] = s;
  }
  return 0;
}

static const nkrt_neff_desc_t desc = {
    sizeof(nkrt_neff_desc_t), NKRT_NEFF_ABI_VERSION, "wide", NIN, 1, inputs, outputs, 0, kernel};

const nkrt_neff_desc_t *nkrt_neff_query(uint32_t runtime_abi_version) {
  (void)runtime_abi_version;
  return &desc;
}
