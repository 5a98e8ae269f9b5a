/* examples/kernels/softmax.c - a hand-written NEFF: row-wise softmax of a
 * float32 [ROWS, COLS] matrix, fused into one pass per row.
 *
 *   output0[i, :] = exp(x[i, :] - max(x[i, :])) / sum(exp(x[i, :] - max(x[i, :])))
 *
 * Build (the shape is fixed at compile time, as in any NEFF):
 *   cc -O2 -shared -fPIC -I"$(python -c 'import spike; print(spike.get_include())')" \
 *      -DROWS=2048 -DCOLS=1024 examples/kernels/softmax.c -o build/demo/softmax.neff
 *
 * It links nothing: rows are spread over the runtime's worker pool with
 * env->parallel_for, and exp is computed here (no libm), as generated
 * kernels do. See docs/neff.md for the ABI.
 */
#include "nkrt/neff_abi.h"

#ifndef ROWS
#define ROWS 2048
#endif
#ifndef COLS
#define COLS 1024
#endif

static const int64_t shape[2] = {ROWS, COLS};
static const nkrt_neff_tensor_t inputs[1] = {
    {"x", NKRT_DTYPE_FLOAT32, 2, shape, (uint64_t)ROWS * COLS * 4, -1},
};
static const nkrt_neff_tensor_t outputs[1] = {
    {"output0", NKRT_DTYPE_FLOAT32, 2, shape, (uint64_t)ROWS * COLS * 4, -1},
};

/* exp(x) for x <= 0 (all softmax needs): x = k*ln2 + r with |r| <= ln2/2,
 * exp(r) by its Taylor polynomial to degree 7 (relative error < 1e-8 on that
 * range), then scaled by 2^k through the exponent bits. Branch-free, so the
 * loops below vectorize; inputs below -87 give ~1.6e-38 instead of 0. */
static inline float exp_nonpos(float x) {
  /* x = max(x, -87) without a float compare (which keeps GCC from
   * vectorizing without -ffast-math): for x <= 0, and for +0, the IEEE bit
   * patterns read as unsigned integers grow with |x|. */
  union { float f; uint32_t u; } in = {.f = x};
  in.u = in.u < 0xc2ae0000u ? in.u : 0xc2ae0000u; /* 0xc2ae0000 is -87.0f */
  x = in.f;
  const float log2e = 1.44269504f, ln2_hi = 0.693145752f, ln2_lo = 1.42860677e-6f;
  int32_t k = (int32_t)(x * log2e - 0.5f); /* round to nearest for x <= 0 */
  float kf = (float)k;
  float r = (x - kf * ln2_hi) - kf * ln2_lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  union { int32_t i; float f; } scale = {.i = (k + 127) * (1 << 23)};
  return p * scale.f;
}

/* Work in blocks of LANES columns with LANES partial maxima and sums: the
 * compiler turns the inner loops into SIMD code without -ffast-math, and the
 * split sums are also more accurate than one running sum. */
#define LANES 16
#define BLOCKED (COLS / LANES * LANES)

static void softmax_row(const float *restrict x, float *restrict y) {
  float mx[LANES], acc[LANES];
  for (int l = 0; l < LANES; l++) mx[l] = x[0];
  for (int j = 0; j < BLOCKED; j += LANES)
    for (int l = 0; l < LANES; l++) mx[l] = x[j + l] > mx[l] ? x[j + l] : mx[l];
  float m = x[0];
  for (int l = 0; l < LANES; l++) m = mx[l] > m ? mx[l] : m;
  for (int j = BLOCKED; j < COLS; j++) m = x[j] > m ? x[j] : m;

  for (int l = 0; l < LANES; l++) acc[l] = 0.0f;
  for (int j = 0; j < BLOCKED; j += LANES)
    for (int l = 0; l < LANES; l++) {
      float e = exp_nonpos(x[j + l] - m);
      y[j + l] = e;
      acc[l] += e;
    }
  float s = 0.0f;
  for (int j = BLOCKED; j < COLS; j++) {
    y[j] = exp_nonpos(x[j] - m);
    s += y[j];
  }
  for (int l = 0; l < LANES; l++) s += acc[l];

  float inv = 1.0f / s;
  for (int j = 0; j < COLS; j++) y[j] *= inv;
}

struct args {
  const float *x;
  float *y;
};

/* parallel_for body: rows [begin, end). */
static void rows(void *p, int64_t begin, int64_t end, uint32_t worker) {
  (void)worker;
  const struct args *a = p;
  for (int64_t i = begin; i < end; i++) softmax_row(a->x + i * COLS, a->y + i * COLS);
}

static int kernel(const nkrt_kernel_env_t *env, void *const *in, void *const *out) {
  struct args a = {in[0], out[0]};
  env->parallel_for(env->ctx, ROWS, 16, rows, &a);
  return 0;
}

static const nkrt_neff_desc_t desc = {
    sizeof(nkrt_neff_desc_t), NKRT_NEFF_ABI_VERSION, "softmax", 1, 1, inputs, outputs, 0,
    kernel};

const nkrt_neff_desc_t *nkrt_neff_query(uint32_t runtime_abi_version) {
  (void)runtime_abi_version;
  return &desc;
}
