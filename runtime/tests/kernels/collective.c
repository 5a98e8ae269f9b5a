/* Test NEFF: one env->lib->collective call described by its inputs:
 *   params int64[8] = {kind, dtype, reduce_op, n, count, rank0, rank1, rank2}
 *   src uint8[CAP] (count elements of dtype per block; all_to_all: n blocks)
 * output0 uint8[CAP] receives dst. */
#include "nkrt/neff_abi.h"

#define CAP 65536

static const int64_t pshape[1] = {8}, bshape[1] = {CAP};
static const nkrt_neff_tensor_t inputs[2] = {
    {"params", NKRT_DTYPE_INT64, 1, pshape, 64, -1},
    {"src", NKRT_DTYPE_UINT8, 1, bshape, CAP, -1},
};
static const nkrt_neff_tensor_t outputs[1] = {{"output0", NKRT_DTYPE_UINT8, 1, bshape, CAP, -1}};

static int kernel(const nkrt_kernel_env_t *env, void *const *in, void *const *out) {
  const int64_t *p = in[0];
  if (!NKRT_KERNEL_LIB_HAS_COLLECTIVE(env->lib)) {
    env->set_error(env->ctx, "this runtime has no collectives");
    return 1;
  }
  int32_t ranks[3] = {(int32_t)p[5], (int32_t)p[6], (int32_t)p[7]};
  return env->lib->collective(env->ctx, (uint32_t)p[0], (uint32_t)p[1], (uint32_t)p[2], ranks,
                              (uint32_t)p[3], in[1], out[0], p[4]);
}

static const nkrt_neff_desc_t desc = {
    sizeof(nkrt_neff_desc_t), NKRT_NEFF_ABI_VERSION, "collective", 2, 1, inputs, outputs, 0,
    kernel};

const nkrt_neff_desc_t *nkrt_neff_query(uint32_t runtime_abi_version) {
  (void)runtime_abi_version;
  return &desc;
}
