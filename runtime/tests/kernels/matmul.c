/* Test NEFF: one call of env->lib (the runtime's GEMM routines), described by
 * its inputs so one NEFF serves every case:
 *   params int64[16] = {op, dtype, batch, trans_a, trans_b, m, n, k,
 *                       lda, ldb, ldc, stride_a, stride_b, stride_c, 0, 0}
 *     op 0: sgemm, 1: sgemm_batched, 2: gemm_batched_lowp (dtype 2 or 3)
 *   scal float32[2] = {alpha, beta}
 *   a, b, c: float32[CAP] buffers (for op 2 they hold 16-bit elements)
 * output0 aliases c, so C comes in and the product goes out through it. */
#include "nkrt/neff_abi.h"

#define CAP 65536

static const int64_t pshape[1] = {16}, sshape[1] = {2}, bshape[1] = {CAP};
static const nkrt_neff_tensor_t inputs[5] = {
    {"params", NKRT_DTYPE_INT64, 1, pshape, 16 * 8, -1},
    {"scal", NKRT_DTYPE_FLOAT32, 1, sshape, 2 * 4, -1},
    {"a", NKRT_DTYPE_FLOAT32, 1, bshape, CAP * 4, -1},
    {"b", NKRT_DTYPE_FLOAT32, 1, bshape, CAP * 4, -1},
    {"c", NKRT_DTYPE_FLOAT32, 1, bshape, CAP * 4, -1},
};
static const nkrt_neff_tensor_t outputs[1] = {
    {"output0", NKRT_DTYPE_FLOAT32, 1, bshape, CAP * 4, 4},
};

static int kernel(const nkrt_kernel_env_t *env, void *const *in, void *const *out) {
  const int64_t *p = in[0];
  const float *s = in[1];
  const nkrt_kernel_lib_t *lib = env->lib;
  if (!lib || lib->struct_size < sizeof(nkrt_kernel_lib_t)) {
    env->set_error(env->ctx, "no GEMM routines in the kernel env");
    return 1;
  }
  switch (p[0]) {
    case 0:
      lib->sgemm(env->ctx, (int)p[3], (int)p[4], p[5], p[6], p[7], s[0], in[2], p[8], in[3], p[9],
                 s[1], out[0], p[10]);
      break;
    case 1:
      lib->sgemm_batched(env->ctx, p[2], (int)p[3], (int)p[4], p[5], p[6], p[7], s[0], in[2],
                         p[8], p[11], in[3], p[9], p[12], s[1], out[0], p[10], p[13]);
      break;
    case 2:
      lib->gemm_batched_lowp(env->ctx, (uint32_t)p[1], p[2], (int)p[3], (int)p[4], p[5], p[6],
                             p[7], s[0], in[2], p[8], p[11], in[3], p[9], p[12], s[1], out[0],
                             p[10], p[13]);
      break;
    default:
      env->set_error(env->ctx, "unknown op");
      return 1;
  }
  return 0;
}

static const nkrt_neff_desc_t desc = {
    sizeof(nkrt_neff_desc_t), NKRT_NEFF_ABI_VERSION, "matmul", 5, 1, inputs, outputs, 0, kernel};

const nkrt_neff_desc_t *nkrt_neff_query(uint32_t runtime_abi_version) {
  (void)runtime_abi_version;
  return &desc;
}
