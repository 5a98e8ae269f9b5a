/* conv_direct.c - direct convolution for few input channels (conv.c's
 * dispatch sends groups == 1, stride_w == 1 convolutions whose
 * c * kh * kw is at most NKRT_CONV_DIRECT_MAX_K here: a network's first
 * layer on an RGB image, k = 27 for 3x3).
 *
 * im2col + GEMM wastes such a layer: the column matrix is 9x the input and
 * the GEMM's depth of 27 is too short to amortise its packing. Here each
 * task is a range of output rows (image, oy), every output channel: 16
 * output positions by DIRECT_OB channels of accumulators stay in registers,
 * and each tap loads 16 inputs once and adds them, times one weight, into
 * every channel's accumulator. A row's last block overlaps the one before
 * it; positions a tap reads outside the input (padding, rows narrower than
 * 16) are loaded as zeros. Bias and activation are applied before the block
 * is stored. Measured (MTCNN ONet's first layer, 16 x 3 x 48 x 48 -> 32
 * channels, 3x3, one thread, built-in GEMM, best of 30 on a busy host):
 * im2col + GEMM 0.95 ms, direct 0.55 ms. */
#include <string.h>

#include "conv_direct.h"

/* acc += x * w as one fused multiply-add (ISO C mode turns contraction off):
 * half the instructions of the hot loop; the rounding differs from a
 * separate multiply and add only by being exact in the product. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT ON
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=fast")
#endif

/* Output channels per accumulator block, positions per vector. */
#define DIRECT_OB 8
#define DIRECT_VL 16

#if defined(__x86_64__) && defined(__GNUC__)
#define NKRT_DIRECT_SIMD NKRT_HOT __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define NKRT_DIRECT_SIMD NKRT_HOT
#endif

typedef float vec_t __attribute__((vector_size(DIRECT_VL * sizeof(float))));

static inline int64_t dmin(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t dmax(int64_t a, int64_t b) { return a > b ? a : b; }

/* Not for 1x1 convolutions: the GEMM ran MobileNetV2's pointwise layers with
 * 16-32 input channels 1.3-2.7x faster (2 workers, Zen 5). */
bool nkrt_conv_direct_applies(const nkrt_conv2d_params_t *p) {
  const int64_t k = p->c * p->kh * p->kw;
  return p->groups == 1 && p->stride_w == 1 && p->kh * p->kw > 1 && k > 0 && k <= NKRT_CONV_DIRECT_MAX_K &&
         p->h > 0 && p->w > 0;
}

/* Rows [begin, end) of the n * oh output rows. */
static NKRT_DIRECT_SIMD void direct_rows(void *arg, int64_t begin, int64_t end, uint32_t worker) {
  NKRT_UNUSED(worker);
  const nkrt_conv2d_params_t *p = arg;
  const int64_t C = p->c, H = p->h, W = p->w, O = p->o, KH = p->kh, KW = p->kw;
  const int64_t OH = p->oh, OW = p->ow, K = C * KH * KW;
  float wl[NKRT_CONV_DIRECT_MAX_K][DIRECT_OB]; /* one block's weights, tap-major */
  float bl[DIRECT_OB];
  for (int64_t o0 = 0; o0 < O; o0 += DIRECT_OB) {
    const int64_t ob = dmin(DIRECT_OB, O - o0);
    for (int64_t q = 0; q < K; q++)
      for (int64_t b = 0; b < DIRECT_OB; b++) wl[q][b] = b < ob ? p->weight[(o0 + b) * K + q] : 0.0f;
    for (int64_t b = 0; b < DIRECT_OB; b++) bl[b] = p->bias && b < ob ? p->bias[o0 + b] : 0.0f;
    for (int64_t r = begin; r < end; r++) {
      const int64_t n = r / OH, oy = r % OH;
      const float *xn = p->x + n * C * H * W;
      float *yrow = p->y + (n * O + o0) * OH * OW + oy * OW;
      for (int64_t ox = 0; ox < OW; ox += DIRECT_VL) {
        /* a row's last block overlaps the one before it (the same values
         * written twice) rather than being short: full loads throughout */
        const int64_t ox0 = OW >= DIRECT_VL ? dmin(ox, OW - DIRECT_VL) : ox;
        const int64_t cnt = dmin(DIRECT_VL, OW - ox0);
        vec_t acc[DIRECT_OB];
        for (int64_t b = 0; b < DIRECT_OB; b++) acc[b] = (vec_t){0} + bl[b];
        for (int64_t c = 0; c < C; c++)
          for (int64_t a = 0; a < KH; a++) {
            const int64_t iy = oy * p->stride_h - p->pad_top + a * p->dil_h;
            if (iy < 0 || iy >= H) continue; /* a row of zeros */
            const float *xr = xn + (c * H + iy) * W;
            const float(*wt)[DIRECT_OB] = wl + (c * KH + a) * KW;
            for (int64_t t = 0; t < KW; t++) {
              const int64_t ix0 = ox0 - p->pad_left + t * p->dil_w; /* the input ox0 reads */
              vec_t xv;
              if (ix0 >= 0 && ix0 + DIRECT_VL <= W && cnt == DIRECT_VL) {
                memcpy(&xv, xr + ix0, sizeof(xv));
              } else { /* partly outside the row, or the row's last block: zeros there */
                float tmp[DIRECT_VL];
                const int64_t l0 = dmin(cnt, dmax(0, -ix0)), l1 = dmax(l0, dmin(cnt, W - ix0));
                for (int64_t l = 0; l < DIRECT_VL; l++)
                  tmp[l] = l >= l0 && l < l1 ? xr[ix0 + l] : 0.0f;
                memcpy(&xv, tmp, sizeof(xv));
              }
              for (int64_t b = 0; b < DIRECT_OB; b++) acc[b] += xv * wt[t][b];
            }
          }
        for (int64_t b = 0; b < ob; b++) {
          float out[DIRECT_VL];
          memcpy(out, &acc[b], sizeof(out));
          if (p->activation == NKRT_ACT_RELU) {
            for (int64_t l = 0; l < DIRECT_VL; l++) out[l] = out[l] < 0.0f ? 0.0f : out[l];
          } else if (p->activation == NKRT_ACT_CLAMP) {
            const float lo = p->act_lo, hi = p->act_hi;
            for (int64_t l = 0; l < DIRECT_VL; l++) {
              const float v = out[l] < lo ? lo : out[l];
              out[l] = v > hi ? hi : v;
            }
          }
          float *dst = yrow + b * OH * OW + ox0;
          if (cnt == DIRECT_VL) /* a fixed size: one vector store, not a call */
            memcpy(dst, out, sizeof(out));
          else
            for (int64_t l = 0; l < cnt; l++) dst[l] = out[l];
        }
      }
    }
  }
}

void nkrt_conv_direct_run(nkrt_pool_t *pool, int64_t workers, const nkrt_conv2d_params_t *p) {
  const int64_t rows = p->n * p->oh;
  if (workers > 1 && rows > 1)
    nkrt_pool_parallel_for(pool, rows, dmax(1, rows / (2 * workers)), direct_rows, (void *)p);
  else
    direct_rows((void *)p, 0, rows, 0);
}
