/* The convolution lent to kernels (conv.c): every way it runs (depthwise, direct,
 * pointwise, im2col with private and shared columns; on the calling thread
 * and on pools of 1-3 workers) with every provider that loads here, against
 * a float64 reference; bias and activations; argument errors. Through a
 * NEFF it is exercised by the compiled-conv2d tests in tests/nkipy.
 *
 * Tolerance: |got - ref| <= 3e-5 * (sum |x w| + |bias|) + 1e-6. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "conv.h"
#include "conv_direct.h"
#include "conv_winograd.h"
#include "test.h"

typedef struct ccase {
  int64_t n, c, h, w, o, kh, kw, groups, sh, sw, pt, pl, pb, pr, dh, dw;
  int bias;
  uint32_t act;
} ccase_t;

static float frand(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((*s >> 40) & 0xffff) / 32768.0f - 1.0f;
}

/* Runs one case on (prov, pool); returns the number of bad elements (0 ok). */
static int run_case(const nkrt_gemm_provider_t *prov, nkrt_pool_t *pool, const ccase_t *cc) {
  int64_t oh = (cc->h + cc->pt + cc->pb - cc->dh * (cc->kh - 1) - 1) / cc->sh + 1;
  int64_t ow = (cc->w + cc->pl + cc->pr - cc->dw * (cc->kw - 1) - 1) / cc->sw + 1;
  int64_t cg = cc->c / cc->groups, og = cc->o / cc->groups;
  int64_t nx = cc->n * cc->c * cc->h * cc->w, nw = cc->o * cg * cc->kh * cc->kw;
  int64_t ny = cc->n * cc->o * oh * ow;
  float *x = malloc(sizeof(float) * (size_t)(nx + 1)), *w = malloc(sizeof(float) * (size_t)(nw + 1));
  float *b = malloc(sizeof(float) * (size_t)(cc->o + 1)), *y = malloc(sizeof(float) * (size_t)(ny + 1));
  uint64_t seed = (uint64_t)(cc->n * 131 + cc->c * 17 + cc->o * 7 + cc->kh);
  for (int64_t i = 0; i < nx; i++) x[i] = frand(&seed);
  for (int64_t i = 0; i < nw; i++) w[i] = frand(&seed);
  for (int64_t i = 0; i < cc->o; i++) b[i] = frand(&seed);
  for (int64_t i = 0; i < ny; i++) y[i] = NAN; /* every output must be written */
  nkrt_conv2d_params_t p = {
      .struct_size = sizeof(p), .activation = cc->act, .n = cc->n, .c = cc->c, .h = cc->h,
      .w = cc->w, .o = cc->o, .kh = cc->kh, .kw = cc->kw, .oh = oh, .ow = ow,
      .groups = cc->groups, .stride_h = cc->sh, .stride_w = cc->sw, .pad_top = cc->pt,
      .pad_left = cc->pl, .dil_h = cc->dh, .dil_w = cc->dw, .act_lo = -0.25f, .act_hi = 0.5f,
      .x = x, .weight = w, .bias = cc->bias ? b : NULL, .y = y};
  const char *err = nkrt_conv2d_run(prov, pool, &p);
  int bad = 0;
  if (err) {
    nkrt_test_fail(__FILE__, __LINE__, "%s: unexpected error: %s", prov->name, err);
    bad++;
  }
  for (int64_t n = 0; n < cc->n && !bad; n++)
    for (int64_t o = 0; o < cc->o; o++) {
      int64_t g = o / og;
      for (int64_t i = 0; i < oh; i++)
        for (int64_t j = 0; j < ow; j++) {
          double ref = cc->bias ? b[o] : 0.0, mag = cc->bias ? fabs(b[o]) : 0.0;
          for (int64_t ci = 0; ci < cg; ci++)
            for (int64_t a = 0; a < cc->kh; a++)
              for (int64_t t = 0; t < cc->kw; t++) {
                int64_t iy = i * cc->sh - cc->pt + a * cc->dh, ix = j * cc->sw - cc->pl + t * cc->dw;
                if (iy < 0 || iy >= cc->h || ix < 0 || ix >= cc->w) continue;
                double v = (double)x[((n * cc->c + g * cg + ci) * cc->h + iy) * cc->w + ix] *
                           (double)w[((o * cg + ci) * cc->kh + a) * cc->kw + t];
                ref += v;
                mag += fabs(v);
              }
          if (cc->act == NKRT_ACT_RELU) ref = ref < 0 ? 0 : ref;
          if (cc->act == NKRT_ACT_CLAMP) ref = ref < -0.25 ? -0.25 : ref > 0.5 ? 0.5 : ref;
          double got = y[((n * cc->o + o) * oh + i) * ow + j];
          if (!(fabs(got - ref) <= 3e-5 * mag + 1e-6)) {
            if (bad < 3)
              nkrt_test_fail(__FILE__, __LINE__,
                             "%s n%ld c%ld %ldx%ld o%ld k%ldx%ld g%ld s%ld,%ld d%ld,%ld: "
                             "y[%ld,%ld,%ld,%ld] = %g, expected %g",
                             prov->name, (long)cc->n, (long)cc->c, (long)cc->h, (long)cc->w,
                             (long)cc->o, (long)cc->kh, (long)cc->kw, (long)cc->groups,
                             (long)cc->sh, (long)cc->sw, (long)cc->dh, (long)cc->dw, (long)n,
                             (long)o, (long)i, (long)j, got, ref);
            bad++;
          }
        }
    }
  free(x);
  free(w);
  free(b);
  free(y);
  return bad;
}

static const ccase_t cases[] = {
    /* n  c   h   w   o  kh kw  g sh sw pt pl pb pr dh dw bias act */
    {1, 3, 5, 7, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, NKRT_ACT_NONE},   /* small 3x3 */
    {2, 5, 9, 11, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, NKRT_ACT_RELU},  /* batch 2 */
    {1, 16, 13, 13, 8, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, NKRT_ACT_RELU}, /* pointwise */
    {3, 7, 6, 5, 9, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 0, NKRT_ACT_NONE},   /* pointwise odd */
    {1, 8, 15, 15, 12, 1, 1, 1, 2, 2, 0, 0, 0, 0, 1, 1, 1, NKRT_ACT_NONE}, /* 1x1 stride 2 */
    {1, 4, 17, 19, 6, 3, 3, 1, 2, 2, 1, 1, 1, 1, 1, 1, 1, NKRT_ACT_CLAMP}, /* strided */
    {2, 4, 12, 10, 4, 3, 3, 1, 1, 1, 2, 2, 2, 2, 2, 2, 1, NKRT_ACT_NONE},  /* dilated */
    {1, 6, 9, 8, 9, 3, 2, 3, 1, 2, 1, 0, 2, 1, 1, 1, 1, NKRT_ACT_RELU},    /* grouped, uneven pads */
    {2, 8, 11, 9, 8, 3, 3, 8, 1, 1, 1, 1, 1, 1, 1, 1, 1, NKRT_ACT_CLAMP},  /* depthwise */
    {1, 6, 10, 13, 12, 3, 3, 6, 2, 2, 1, 1, 1, 1, 1, 1, 0, NKRT_ACT_RELU}, /* depthwise x2, s2 */
    {1, 5, 7, 7, 5, 5, 5, 5, 1, 1, 2, 2, 2, 2, 1, 1, 1, NKRT_ACT_NONE},    /* depthwise 5x5 */
    {1, 4, 3, 3, 4, 3, 3, 4, 1, 1, 3, 3, 3, 3, 2, 2, 1, NKRT_ACT_NONE},    /* mostly padding */
    {1, 3, 4, 4, 2, 7, 7, 1, 1, 1, 3, 3, 3, 3, 1, 1, 1, NKRT_ACT_RELU},    /* kernel > input */
    /* large enough for the pool: many positions; few positions, many channels */
    {1, 32, 40, 40, 48, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, NKRT_ACT_RELU},
    {2, 64, 7, 7, 256, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, NKRT_ACT_NONE},
    {1, 128, 7, 7, 256, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, NKRT_ACT_RELU},
    {1, 64, 30, 30, 64, 3, 3, 64, 1, 1, 1, 1, 1, 1, 1, 1, 1, NKRT_ACT_CLAMP},
    {4, 32, 9, 9, 64, 3, 3, 2, 2, 2, 1, 1, 1, 1, 1, 1, 0, NKRT_ACT_NONE},
    /* one input channel, many outputs (the direct path, multiplier 5) */
    {2, 1, 12, 12, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, NKRT_ACT_RELU},
    {1, 1, 12, 13, 3, 5, 5, 1, 2, 1, 2, 2, 2, 2, 1, 1, 0, NKRT_ACT_NONE},
    /* depthwise, stride 1: dilated, uneven and negative (cropping) padding */
    {2, 6, 11, 12, 6, 3, 3, 6, 1, 1, 2, 2, 2, 2, 2, 2, 1, NKRT_ACT_RELU},
    {1, 4, 9, 10, 8, 3, 5, 4, 1, 1, 0, 3, 2, 1, 1, 1, 1, NKRT_ACT_NONE},
    {1, 4, 9, 10, 4, 3, 3, 4, 1, 1, -1, -2, 1, 0, 1, 1, 1, NKRT_ACT_NONE},
    {1, 4, 9, 10, 4, 3, 3, 1, 1, 1, -1, 1, 0, -2, 1, 1, 0, NKRT_ACT_NONE},
    /* few input channels, c * kh * kw <= 32, stride_w 1 (conv_direct.c): an ONet-like
     * first layer (two 16-wide blocks and a tail of 14, 32 channels = 4 blocks), odd
     * channel counts (a partial block of 8), padding, negative padding, dilation,
     * stride_h 2, rows narrower than a vector, every activation */
    {2, 3, 48, 48, 32, 3, 3, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, NKRT_ACT_NONE},
    {1, 3, 20, 37, 13, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, NKRT_ACT_RELU},
    {2, 2, 11, 19, 5, 3, 5, 1, 2, 1, 2, 3, 0, 1, 1, 2, 0, NKRT_ACT_CLAMP},
    {1, 3, 9, 21, 9, 3, 3, 1, 1, 1, -1, -2, 0, -1, 1, 1, 1, NKRT_ACT_RELU},
    {1, 1, 6, 5, 3, 4, 4, 1, 1, 1, 2, 3, 2, 3, 2, 1, 1, NKRT_ACT_NONE},
    {1, 8, 6, 40, 17, 2, 2, 1, 1, 1, 0, 0, 1, 1, 1, 1, 1, NKRT_ACT_CLAMP},
    {3, 32, 5, 18, 8, 1, 1, 1, 1, 1, 0, 1, 0, 1, 1, 1, 0, NKRT_ACT_NONE},
};

static nkrt_pool_t *make_pool(uint32_t workers) {
  nkrt_pool_t *pool = NULL;
  CHECK_OK(nkrt_pool_create(workers, &pool));
  return pool;
}

/* The n cases of cs with each provider, on no pool and on pools of 1-3
 * workers (after three wrong cases in one setting, the rest are skipped). */
static void run_everywhere(const ccase_t *cs, size_t n) {
  const nkrt_gemm_provider_t *ps[2] = {&nkrt_gemm_reference, nkrt_gemm_find("mkl")};
  for (int pi = 0; pi < 2; pi++) {
    if (!ps[pi]) continue;
    for (uint32_t workers = 0; workers <= 3; workers++) {
      nkrt_pool_t *pool = workers ? make_pool(workers) : NULL;
      int bad = 0;
      for (size_t i = 0; i < n && bad < 3; i++) bad += run_case(ps[pi], pool, &cs[i]) != 0;
      if (pool) nkrt_pool_destroy(pool);
    }
  }
}

TEST(conv2d_against_reference) { run_everywhere(cases, sizeof(cases) / sizeof(cases[0])); }

TEST(conv2d_edge_cases) {
  /* no input rows (all padding): the bias alone; no images / outputs: nothing */
  ccase_t empty_in = {1, 3, 0, 4, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, NKRT_ACT_RELU};
  CHECK(run_case(&nkrt_gemm_reference, NULL, &empty_in) == 0);
  ccase_t no_channels = {1, 0, 4, 4, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, NKRT_ACT_NONE};
  CHECK(run_case(&nkrt_gemm_reference, NULL, &no_channels) == 0);
  ccase_t no_images = {0, 3, 4, 4, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, NKRT_ACT_NONE};
  CHECK(run_case(&nkrt_gemm_reference, NULL, &no_images) == 0);
  /* NaN propagates through the activations, as np.maximum / np.minimum */
  float x = NAN, w = 1.0f, y = 0.0f;
  nkrt_conv2d_params_t p = {.struct_size = sizeof(p), .activation = NKRT_ACT_RELU, .n = 1,
                            .c = 1, .h = 1, .w = 1, .o = 1, .kh = 1, .kw = 1, .oh = 1, .ow = 1,
                            .groups = 1, .stride_h = 1, .stride_w = 1, .dil_h = 1, .dil_w = 1,
                            .x = &x, .weight = &w, .y = &y};
  CHECK(nkrt_conv2d_run(&nkrt_gemm_reference, NULL, &p) == NULL);
  CHECK(isnan(y));
  p.c = p.o = 2; /* pointwise through the GEMM, clamped at both ends */
  float x2[2] = {-3.0f, 9.0f}, w2[4] = {1, 0, 0, 1}, y2[2] = {1, 1};
  p.x = x2, p.weight = w2, p.y = y2, p.activation = NKRT_ACT_CLAMP, p.act_lo = 0, p.act_hi = 6;
  CHECK(nkrt_conv2d_run(&nkrt_gemm_reference, NULL, &p) == NULL);
  CHECK(y2[0] == 0.0f && y2[1] == 6.0f);
}

TEST(conv2d_argument_errors) {
  float x = 1.0f, w = 1.0f, y = 0.0f;
  nkrt_conv2d_params_t ok = {.struct_size = sizeof(ok), .n = 1, .c = 1, .h = 1, .w = 1, .o = 1,
                             .kh = 1, .kw = 1, .oh = 1, .ow = 1, .groups = 1, .stride_h = 1,
                             .stride_w = 1, .dil_h = 1, .dil_w = 1, .x = &x, .weight = &w,
                             .y = &y};
  const char *e;
  nkrt_conv2d_params_t p = ok;
  p.struct_size = 8;
  e = nkrt_conv2d_run(&nkrt_gemm_reference, NULL, &p);
  CHECK(e && strstr(e, "struct_size too small"));
  CHECK(nkrt_conv2d_run(&nkrt_gemm_reference, NULL, NULL) != NULL);
  p = ok;
  p.stride_w = 0;
  e = nkrt_conv2d_run(&nkrt_gemm_reference, NULL, &p);
  CHECK(e && strstr(e, "kernel size, groups, stride or dilation below 1"));
  p = ok;
  p.h = -1;
  e = nkrt_conv2d_run(&nkrt_gemm_reference, NULL, &p);
  CHECK(e && strstr(e, "negative size"));
  p = ok;
  p.groups = 2, p.c = 2, p.o = 3;
  e = nkrt_conv2d_run(&nkrt_gemm_reference, NULL, &p);
  CHECK(e && strstr(e, "multiples of groups"));
  p = ok;
  p.activation = 99;
  e = nkrt_conv2d_run(&nkrt_gemm_reference, NULL, &p);
  CHECK(e && strstr(e, "unknown activation"));
  p = ok;
  p.weight = NULL;
  e = nkrt_conv2d_run(&nkrt_gemm_reference, NULL, &p);
  CHECK(e && strstr(e, "conv2d given a NULL tensor"));
  CHECK(nkrt_conv2d_run(&nkrt_gemm_reference, NULL, &ok) == NULL && y == 1.0f);
}

/* Winograd F(2x2, 3x3) (conv_winograd.c), forced on for every 3x3 stride-1
 * case: odd sizes (partial tiles at the right and bottom), uneven, large and
 * negative padding, one and many tile rows per block, bias and every
 * activation, on the calling thread and on pools; within the same tolerance
 * as im2col. */
static const ccase_t wino_cases[] = {
    /* n  c   h   w   o  kh kw  g sh sw pt pl pb pr dh dw bias act */
    {1, 3, 5, 7, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, NKRT_ACT_NONE},
    {2, 5, 9, 11, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, NKRT_ACT_RELU},
    {1, 1, 1, 1, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, NKRT_ACT_CLAMP},   /* one pixel */
    {1, 4, 6, 6, 3, 3, 3, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, NKRT_ACT_NONE},    /* valid, whole tiles */
    {1, 4, 13, 10, 5, 3, 3, 1, 1, 1, 2, 0, 1, 3, 1, 1, 1, NKRT_ACT_RELU},  /* uneven pads */
    {1, 4, 9, 10, 4, 3, 3, 1, 1, 1, -1, 1, 0, -2, 1, 1, 1, NKRT_ACT_NONE}, /* cropping */
    {1, 2, 3, 3, 2, 3, 3, 1, 1, 1, 4, 4, 4, 4, 1, 1, 1, NKRT_ACT_CLAMP},   /* mostly padding */
    {3, 17, 23, 19, 9, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, NKRT_ACT_CLAMP},
    {2, 32, 30, 33, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, NKRT_ACT_RELU}, /* pool-sized */
    {1, 64, 57, 57, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, NKRT_ACT_NONE},
};

TEST(conv2d_winograd_against_reference) {
  nkrt_conv_winograd_force(1);
  for (size_t i = 0; i < sizeof(wino_cases) / sizeof(wino_cases[0]); i++)
    CHECK(nkrt_conv_winograd_applies(&(nkrt_conv2d_params_t){
        .n = 1, .c = wino_cases[i].c, .h = wino_cases[i].h, .w = wino_cases[i].w,
        .o = wino_cases[i].o, .kh = 3, .kw = 3, .oh = 1, .ow = 1, .groups = 1,
        .stride_h = 1, .stride_w = 1, .dil_h = 1, .dil_w = 1}));
  run_everywhere(wino_cases, sizeof(wino_cases) / sizeof(wino_cases[0]));
  /* the im2col cases too: Winograd where it applies, the rest unchanged */
  run_everywhere(cases, sizeof(cases) / sizeof(cases[0]));
  nkrt_conv_winograd_force(-1);
}

TEST(conv2d_winograd_selection) {
  nkrt_conv2d_params_t p = {.n = 4, .c = 64, .h = 56, .w = 56, .o = 64, .kh = 3, .kw = 3,
                            .oh = 56, .ow = 56, .groups = 1, .stride_h = 1, .stride_w = 1,
                            .pad_top = 1, .pad_left = 1, .dil_h = 1, .dil_w = 1};
  CHECK(nkrt_conv_winograd_applies(&p)); /* ResNet's first stage */
  nkrt_conv2d_params_t q = p;
  q.stride_h = 2;
  CHECK(!nkrt_conv_winograd_applies(&q));
  q = p, q.dil_w = 2;
  CHECK(!nkrt_conv_winograd_applies(&q));
  q = p, q.groups = 2;
  CHECK(!nkrt_conv_winograd_applies(&q));
  q = p, q.kw = 5;
  CHECK(!nkrt_conv_winograd_applies(&q));
  q = p, q.c = q.o = 512, q.h = q.w = q.oh = q.ow = 7; /* few tiles: im2col is faster */
  CHECK(!nkrt_conv_winograd_applies(&q));
  nkrt_conv_winograd_force(0);
  CHECK(!nkrt_conv_winograd_applies(&p));
  nkrt_conv_winograd_force(-1);
}

TEST(conv2d_direct_selection) {
  nkrt_conv2d_params_t p = {.n = 16, .c = 3, .h = 48, .w = 48, .o = 32, .kh = 3, .kw = 3,
                            .oh = 46, .ow = 46, .groups = 1, .stride_h = 1, .stride_w = 1,
                            .dil_h = 1, .dil_w = 1};
  CHECK(nkrt_conv_direct_applies(&p)); /* ONet's first layer */
  nkrt_conv2d_params_t q = p;
  q.c = 4; /* 36 taps: past the registers' budget */
  CHECK(!nkrt_conv_direct_applies(&q));
  q = p, q.stride_w = 2;
  CHECK(!nkrt_conv_direct_applies(&q));
  q = p, q.groups = 3, q.o = 3;
  CHECK(!nkrt_conv_direct_applies(&q));
  /* pointwise with few channels: the GEMM was 1.3-2.7x faster (MobileNetV2's
     16/24/32 -> 96/144/192 layers, 2 workers) */
  q = p, q.c = 16, q.kh = q.kw = 1;
  CHECK(!nkrt_conv_direct_applies(&q));
}

TEST(conv2d_columns_out_of_memory) {
  /* columns beyond any memory (k = c * 9 rows for one position, 2^62+
   * bytes): refused before allocating, and no input is read */
  float x = 1.0f, w = 1.0f, y = 0.0f;
  nkrt_conv2d_params_t p = {.struct_size = sizeof(p), .n = 1, .c = (int64_t)1 << 59, .h = 1,
                            .w = 1, .o = 1, .kh = 3, .kw = 3, .oh = 1, .ow = 1, .groups = 1,
                            .stride_h = 1, .stride_w = 1, .pad_top = 1, .pad_left = 1,
                            .dil_h = 1, .dil_w = 1, .x = &x, .weight = &w, .y = &y};
  const char *e = nkrt_conv2d_run(&nkrt_gemm_reference, NULL, &p);
  CHECK(e && strcmp(e, "conv2d: out of host memory for its columns") == 0);
}
