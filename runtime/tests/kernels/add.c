/* Test NEFF: output0 = a + b over float32[64, 33], rows split with parallel_for. */
#include "nkrt/neff_abi.h"

#define ROWS 64
#define COLS 33

static const int64_t shape[2] = {ROWS, COLS};
static const nkrt_neff_tensor_t inputs[2] = {
    {"a", NKRT_DTYPE_FLOAT32, 2, shape, ROWS * COLS * 4, -1},
    {"b", NKRT_DTYPE_FLOAT32, 2, shape, ROWS * COLS * 4, -1},
};
static const nkrt_neff_tensor_t outputs[1] = {
    {"output0", NKRT_DTYPE_FLOAT32, 2, shape, ROWS * COLS * 4, -1},
};

struct args { const float *a, *b; float *out; };

static void rows(void *p, int64_t begin, int64_t end, uint32_t worker) {
  (void)worker;
  const struct args *x = p;
  for (int64_t i = begin * COLS; i < end * COLS; i++) x->out[i] = x->a[i] + x->b[i];
}

static int kernel(const nkrt_kernel_env_t *env, void *const *in, void *const *out) {
  struct args x = {in[0], in[1], out[0]};
  env->parallel_for(env->ctx, ROWS, 1, rows, &x);
  return 0;
}

static const nkrt_neff_desc_t desc = {
    sizeof(nkrt_neff_desc_t), NKRT_NEFF_ABI_VERSION, "add", 2, 1, inputs, outputs, 0, kernel};

const nkrt_neff_desc_t *nkrt_neff_query(uint32_t runtime_abi_version) {
  (void)runtime_abi_version;
  return &desc;
}
