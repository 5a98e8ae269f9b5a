/* GEMM routines lent to kernels (gemm*.c): every provider that can be loaded
 * here ("reference" always, "mkl" when found) is checked against a float64
 * reference - transposes, alpha/beta, odd shapes, padded leading dimensions,
 * panel splitting over the pool, batches with broadcast operands, float16 and
 * bfloat16 - directly and through a NEFF (tests/kernels/matmul.c).
 *
 * Tolerances: |got - ref| <= tol * (|alpha| sum_p |a_ip b_pj| + |beta c_ij|)
 * + out * |ref| (+ 2^-24 for float16 subnormals), with tol = 3e-5 (float32
 * accumulation) and `out` the rounding of the result to its storage type (0
 * for float32, 2^-8 bfloat16, 2^-11 float16). Inputs of float16/bfloat16
 * cases are exact in their type. */
#include <math.h>
#include <stdlib.h>

#include "gemm.h"
#include "test.h"

typedef struct gcase {
  uint32_t dtype;
  int64_t batch;
  int ta, tb;
  int64_t m, n, k;
  float alpha, beta;
  int64_t pad;          /* extra elements per row of A, B, C */
  bool bcast_a, bcast_b;
  bool nan_c;           /* C starts as NaN (beta must be 0: C unread) */
} gcase_t;

typedef struct gdata {
  int64_t lda, ldb, ldc, sa, sb, sc;
  int64_t na, nb, nc;   /* elements allocated */
  float *a, *b, *c;     /* float32 values (exact in dtype) */
  uint16_t *a16, *b16, *c16;
  double *ref, *mag;    /* per output element of every product */
} gdata_t;

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float rnd(void) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((rng_state >> 40) & 0xffffff) / (float)(1 << 23) - 1.0f;
}

static float to_dtype(uint32_t dtype, float v) {
  if (dtype == NKRT_DTYPE_BFLOAT16) return nkrt_bf16_to_float(nkrt_float_to_bf16(v));
  if (dtype == NKRT_DTYPE_FLOAT16) return nkrt_half_to_float(nkrt_float_to_half(v));
  return v;
}
static uint16_t to16(uint32_t dtype, float v) {
  return dtype == NKRT_DTYPE_BFLOAT16 ? nkrt_float_to_bf16(v) : nkrt_float_to_half(v);
}
static float from16(uint32_t dtype, uint16_t v) {
  return dtype == NKRT_DTYPE_BFLOAT16 ? nkrt_bf16_to_float(v) : nkrt_half_to_float(v);
}

static void make_data(const gcase_t *g, gdata_t *d) {
  memset(d, 0, sizeof(*d));
  int64_t arows = g->ta ? g->k : g->m, acols = g->ta ? g->m : g->k;
  int64_t brows = g->tb ? g->n : g->k, bcols = g->tb ? g->k : g->n;
  d->lda = (acols > 0 ? acols : 1) + g->pad;
  d->ldb = (bcols > 0 ? bcols : 1) + g->pad;
  d->ldc = (g->n > 0 ? g->n : 1) + g->pad;
  int64_t b1 = g->batch > 0 ? g->batch : 1;
  d->sa = g->bcast_a ? 0 : arows * d->lda + 5;
  d->sb = g->bcast_b ? 0 : brows * d->ldb + 3;
  d->sc = g->m * d->ldc + 7;
  d->na = d->sa * (b1 - 1) + arows * d->lda + 1;
  d->nb = d->sb * (b1 - 1) + brows * d->ldb + 1;
  d->nc = d->sc * (b1 - 1) + g->m * d->ldc + 1;
  d->a = malloc((size_t)d->na * 4);
  d->b = malloc((size_t)d->nb * 4);
  d->c = malloc((size_t)d->nc * 4);
  for (int64_t i = 0; i < d->na; i++) d->a[i] = to_dtype(g->dtype, rnd());
  for (int64_t i = 0; i < d->nb; i++) d->b[i] = to_dtype(g->dtype, rnd());
  for (int64_t i = 0; i < d->nc; i++) d->c[i] = g->nan_c ? NAN : to_dtype(g->dtype, rnd());
  if (g->dtype != NKRT_DTYPE_FLOAT32) {
    d->a16 = malloc((size_t)d->na * 2);
    d->b16 = malloc((size_t)d->nb * 2);
    d->c16 = malloc((size_t)d->nc * 2);
    for (int64_t i = 0; i < d->na; i++) d->a16[i] = to16(g->dtype, d->a[i]);
    for (int64_t i = 0; i < d->nb; i++) d->b16[i] = to16(g->dtype, d->b[i]);
    for (int64_t i = 0; i < d->nc; i++) d->c16[i] = to16(g->dtype, d->c[i]);
  }
  size_t outs = (size_t)(b1 * g->m * g->n);
  d->ref = malloc((outs ? outs : 1) * sizeof(double));
  d->mag = malloc((outs ? outs : 1) * sizeof(double));
  for (int64_t bi = 0; bi < g->batch; bi++)
    for (int64_t i = 0; i < g->m; i++)
      for (int64_t j = 0; j < g->n; j++) {
        double s = 0, mag = 0;
        for (int64_t p = 0; p < g->k; p++) {
          double av = d->a[bi * d->sa + (g->ta ? p * d->lda + i : i * d->lda + p)];
          double bv = d->b[bi * d->sb + (g->tb ? j * d->ldb + p : p * d->ldb + j)];
          s += av * bv;
          mag += fabs(av * bv);
        }
        double cv = g->beta == 0.0f ? 0.0 : (double)d->c[bi * d->sc + i * d->ldc + j];
        size_t o = (size_t)((bi * g->m + i) * g->n + j);
        d->ref[o] = (double)g->alpha * s + (double)g->beta * cv;
        d->mag[o] = fabs((double)g->alpha) * mag + fabs((double)g->beta * cv);
      }
}

static void free_data(gdata_t *d) {
  free(d->a), free(d->b), free(d->c), free(d->a16), free(d->b16), free(d->c16);
  free(d->ref), free(d->mag);
}

/* Compares the output (float32 in c or 16-bit in c16) with the reference and
 * checks that no element outside the products was written. */
static int check_data(const gcase_t *g, const gdata_t *d, const float *c, const uint16_t *c16,
                      const char *who) {
  double out = g->dtype == NKRT_DTYPE_BFLOAT16  ? 1.0 / 256
               : g->dtype == NKRT_DTYPE_FLOAT16 ? 1.0 / 2048
                                                : 0;
  /* float16 results below 2^-14 are subnormal: absolute spacing 2^-24 */
  double tiny = g->dtype == NKRT_DTYPE_FLOAT16 ? 1.0 / (1 << 24) : 1e-30;
  int bad = 0;
  char *inside = calloc((size_t)d->nc, 1);
  for (int64_t bi = 0; bi < g->batch; bi++)
    for (int64_t i = 0; i < g->m; i++)
      for (int64_t j = 0; j < g->n; j++) {
        int64_t at = bi * d->sc + i * d->ldc + j;
        inside[at] = 1;
        size_t o = (size_t)((bi * g->m + i) * g->n + j);
        double got = c16 ? from16(g->dtype, c16[at]) : c[at];
        double tol = 3e-5 * d->mag[o] + out * fabs(d->ref[o]) + tiny;
        if (!(fabs(got - d->ref[o]) <= tol)) {
          if (bad++ < 3)
            nkrt_test_fail(__FILE__, __LINE__,
                           "%s: dtype %u batch %ld ta %d tb %d m %ld n %ld k %ld alpha %g beta "
                           "%g: C[%ld][%ld][%ld] = %.9g, expected %.9g (tol %.3g)",
                           who, g->dtype, (long)g->batch, g->ta, g->tb, (long)g->m, (long)g->n,
                           (long)g->k, g->alpha, g->beta, (long)bi, (long)i, (long)j, got,
                           d->ref[o], tol);
        }
      }
  for (int64_t at = 0; at < d->nc; at++) {
    if (inside[at]) continue;
    bool same = c16 ? c16[at] == d->c16[at]
                    : (c[at] == d->c[at] || (isnan(c[at]) && isnan(d->c[at])));
    if (!same && bad++ < 3)
      nkrt_test_fail(__FILE__, __LINE__, "%s: element %ld outside C was written", who, (long)at);
  }
  free(inside);
  return bad;
}

/* Runs a case directly on provider p over `pool`. */
static int run_direct(const nkrt_gemm_provider_t *p, nkrt_pool_t *pool, const gcase_t *g) {
  gdata_t d;
  make_data(g, &d);
  const char *err;
  int bad;
  if (g->dtype == NKRT_DTYPE_FLOAT32) {
    float *c = malloc((size_t)d.nc * 4);
    memcpy(c, d.c, (size_t)d.nc * 4);
    err = nkrt_gemm_sgemm_batched(p, pool, g->batch, g->ta, g->tb, g->m, g->n, g->k, g->alpha,
                                  d.a, d.lda, d.sa, d.b, d.ldb, d.sb, g->beta, c, d.ldc, d.sc);
    bad = check_data(g, &d, c, NULL, p->name);
    free(c);
  } else {
    uint16_t *c = malloc((size_t)d.nc * 2);
    memcpy(c, d.c16, (size_t)d.nc * 2);
    err = nkrt_gemm_lowp_batched(p, pool, g->dtype, g->batch, g->ta, g->tb, g->m, g->n, g->k,
                                 g->alpha, d.a16, d.lda, d.sa, d.b16, d.ldb, d.sb, g->beta, c,
                                 d.ldc, d.sc);
    bad = check_data(g, &d, NULL, c, p->name);
    free(c);
  }
  if (err) {
    nkrt_test_fail(__FILE__, __LINE__, "%s: unexpected error: %s", p->name, err);
    bad++;
  }
  free_data(&d);
  return bad;
}

/* Every provider available here. */
static int providers(const nkrt_gemm_provider_t **out) {
  int n = 0;
  out[n++] = &nkrt_gemm_reference;
  const nkrt_gemm_provider_t *mkl = nkrt_gemm_find("mkl");
  if (mkl) out[n++] = mkl;
  return n;
}

static nkrt_pool_t *make_pool(uint32_t workers) {
  nkrt_pool_t *pool = NULL;
  CHECK_OK(nkrt_pool_create(workers, &pool));
  return pool;
}

static const int64_t odd[] = {1, 7, 33, 257};

TEST(gemm_float32_odd_shapes) {
  const nkrt_gemm_provider_t *ps[4];
  int np = providers(ps);
  nkrt_pool_t *pool = make_pool(2);
  for (int pi = 0; pi < np; pi++) {
    int idx = 0, bad = 0;
    for (int mi = 0; mi < 4; mi++)
      for (int ni = 0; ni < 4; ni++)
        for (int ki = 0; ki < 4; ki++, idx++) {
          gcase_t g = {.dtype = NKRT_DTYPE_FLOAT32, .batch = 1, .ta = idx & 1,
                       .tb = (idx >> 1) & 1, .m = odd[mi], .n = odd[ni], .k = odd[ki],
                       .alpha = idx % 3 ? 1.0f : -1.5f, .beta = idx % 5 == 1 ? 0.5f : 0.0f,
                       .pad = idx % 2 ? 3 : 0};
          if (bad < 3) bad += run_direct(ps[pi], pool, &g);
        }
  }
  nkrt_pool_destroy(pool);
}

TEST(gemm_float32_panels) {
  /* Large enough to be cut into panels: rows (m >= n) or columns (n > m). */
  const nkrt_gemm_provider_t *ps[4];
  int np = providers(ps);
  const int64_t shapes[][3] = {{300, 200, 150}, {20, 1000, 200}, {513, 130, 64}, {2, 3000, 700}};
  for (uint32_t workers = 1; workers <= 3; workers++) {
    nkrt_pool_t *pool = make_pool(workers);
    for (int pi = 0; pi < np; pi++)
      for (int s = 0; s < 4; s++)
        for (int t = 0; t < 4; t++) {
          gcase_t g = {.dtype = NKRT_DTYPE_FLOAT32, .batch = 1, .ta = t & 1, .tb = t >> 1,
                       .m = shapes[s][0], .n = shapes[s][1], .k = shapes[s][2],
                       .alpha = 0.75f, .beta = t == 2 ? -1.0f : 0.0f, .pad = t == 1 ? 16 : 0};
          run_direct(ps[pi], pool, &g);
        }
    nkrt_pool_destroy(pool);
  }
}

TEST(gemm_reference_micro_kernels) {
  /* every micro-kernel this CPU can run, on edge tiles and whole tiles */
  const char *isas[] = {"generic", "avx2+fma", "avx512f"};
  const int64_t shapes[][3] = {{33, 257, 7}, {257, 33, 70}, {9, 31, 300}, {48, 64, 33}};
  nkrt_pool_t *pool = make_pool(2);
  for (int i = 0; i < 3; i++) {
    if (!nkrt_gemm_ref_force_isa(isas[i])) continue;
    CHECK(strcmp(nkrt_gemm_ref_isa(), isas[i]) == 0);
    for (int s = 0; s < 4; s++)
      for (int t = 0; t < 4; t++) {
        gcase_t g = {.dtype = NKRT_DTYPE_FLOAT32, .batch = 1, .ta = t & 1, .tb = t >> 1,
                     .m = shapes[s][0], .n = shapes[s][1], .k = shapes[s][2], .alpha = 1.25f,
                     .beta = t == 1 ? 0.5f : 0.0f, .pad = s};
        run_direct(&nkrt_gemm_reference, pool, &g);
      }
  }
  CHECK(!nkrt_gemm_ref_force_isa("neon"));
  CHECK(nkrt_gemm_ref_force_isa(NULL));
  nkrt_pool_destroy(pool);
}

/* The built-in kernel's B packed ahead (gemm_pack.c uses it): shapes across
 * its column blocks (NC 1024) and depth slabs (KC 256), every transpose,
 * alpha folded into the copy, beta on C; a copy made for another
 * micro-kernel is refused with C untouched. */
TEST(gemm_reference_packed_b) {
  const nkrt_gemm_provider_t *p = &nkrt_gemm_reference;
  const int64_t shapes[][3] = {{37, 1100, 300}, {8, 33, 7}, {130, 64, 520}};
  for (int s = 0; s < 3; s++)
    for (int t = 0; t < 4; t++) {
      int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2];
      int ta = t & 1, tb = t >> 1;
      int64_t lda = (ta ? m : k) + 1, ldb = (tb ? k : n) + 2, ldc = n + 3;
      float alpha = t == 3 ? -0.5f : 1.0f, beta = t == 1 ? 0.25f : 0.0f;
      float *a = malloc((size_t)((ta ? k : m) * lda) * 4);
      float *b = malloc((size_t)((tb ? n : k) * ldb) * 4);
      float *c = malloc((size_t)(m * ldc) * 4), *c0 = malloc((size_t)(m * ldc) * 4);
      for (int64_t i = 0; i < (ta ? k : m) * lda; i++) a[i] = rnd();
      for (int64_t i = 0; i < (tb ? n : k) * ldb; i++) b[i] = rnd();
      for (int64_t i = 0; i < m * ldc; i++) c0[i] = rnd();
      memcpy(c, c0, (size_t)(m * ldc) * 4);
      uint64_t bytes = p->pack_b_size(m, n, k);
      CHECK(bytes >= (uint64_t)(n * k) * 4);
      float *packed = malloc(bytes);
      p->pack_b(tb, m, n, k, alpha, b, ldb, packed);
      CHECK(p->compute_packed_b(ta, m, n, k, a, lda, packed, beta, c, ldc));
      int bad = 0;
      for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
          double want = beta * (double)c0[i * ldc + j];
          for (int64_t q = 0; q < k; q++)
            want += alpha * (double)(ta ? a[q * lda + i] : a[i * lda + q]) *
                    (tb ? b[j * ldb + q] : b[q * ldb + j]);
          bad += fabs(c[i * ldc + j] - want) > 1e-4 * (1 + fabs(want));
        }
      CHECK(bad == 0);
      if (bad) printf("  packed B %lld x %lld x %lld, ta %d tb %d: %d wrong\n", (long long)m,
                      (long long)n, (long long)k, ta, tb, bad);
      /* another micro-kernel, or another shape: refused, C untouched */
      memcpy(c, c0, (size_t)(m * ldc) * 4);
      CHECK(!p->compute_packed_b(ta, m, n + 1, k, a, lda, packed, beta, c, ldc));
      const char *other = strcmp(nkrt_gemm_ref_isa(), "generic") ? "generic" : NULL;
      if (other && nkrt_gemm_ref_force_isa(other)) {
        CHECK(!p->compute_packed_b(ta, m, n, k, a, lda, packed, beta, c, ldc));
        CHECK(nkrt_gemm_ref_force_isa(NULL));
      }
      CHECK(memcmp(c, c0, (size_t)(m * ldc) * 4) == 0);
      free(a), free(b), free(c), free(c0), free(packed);
    }
}

TEST(gemm_float32_batched) {
  const nkrt_gemm_provider_t *ps[4];
  int np = providers(ps);
  nkrt_pool_t *pool = make_pool(2);
  for (int pi = 0; pi < np; pi++) {
    gcase_t cases[] = {
        /* broadcast B, fewer products than workers: each one split */
        {NKRT_DTYPE_FLOAT32, 1, 0, 0, 130, 90, 140, 1.0f, 0.0f, 0, false, true, false},
        {NKRT_DTYPE_FLOAT32, 3, 0, 1, 33, 257, 7, 1.0f, 0.5f, 2, false, true, false},
        /* many small products, broadcast A: spread over the pool */
        {NKRT_DTYPE_FLOAT32, 9, 1, 0, 64, 64, 64, 2.0f, 0.0f, 1, true, false, false},
        {NKRT_DTYPE_FLOAT32, 5, 1, 1, 7, 33, 257, -1.0f, 1.0f, 0, false, false, false},
        {NKRT_DTYPE_FLOAT32, 0, 0, 0, 7, 7, 7, 1.0f, 0.0f, 0, false, false, false},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
      run_direct(ps[pi], pool, &cases[i]);
  }
  nkrt_pool_destroy(pool);
}

TEST(gemm_low_precision) {
  const nkrt_gemm_provider_t *ps[4];
  int np = providers(ps);
  nkrt_pool_t *pool = make_pool(2);
  const uint32_t dtypes[2] = {NKRT_DTYPE_BFLOAT16, NKRT_DTYPE_FLOAT16};
  for (int pi = 0; pi < np; pi++)
    for (int di = 0; di < 2; di++) {
      int idx = 0;
      for (int mi = 0; mi < 4; mi++)
        for (int ni = 0; ni < 4; ni++, idx++) {
          gcase_t g = {.dtype = dtypes[di], .batch = 1 + (idx % 3 == 0), .ta = idx & 1,
                       .tb = (idx >> 1) & 1, .m = odd[mi], .n = odd[ni], .k = odd[(mi + ni) % 4],
                       .alpha = idx % 2 ? 1.0f : 0.5f, .beta = idx % 4 == 3 ? 0.5f : 0.0f,
                       .pad = idx % 3, .bcast_b = idx % 6 == 0};
          run_direct(ps[pi], pool, &g);
        }
      /* cut into panels, both ways, with beta */
      gcase_t rows = {dtypes[di], 1, 1, 0, 300, 100, 120, 1.0f, 0.25f, 1, false, false, false};
      gcase_t cols = {dtypes[di], 1, 0, 1, 9, 700, 150, -1.0f, 0.0f, 0, false, false, false};
      gcase_t two = {dtypes[di], 2, 1, 1, 9, 300, 650, 1.0f, 1.0f, 2, false, true, false};
      run_direct(ps[pi], pool, &rows);
      run_direct(ps[pi], pool, &cols);
      run_direct(ps[pi], pool, &two);
    }
  nkrt_pool_destroy(pool);
}

TEST(gemm_edge_cases) {
  const nkrt_gemm_provider_t *ps[4];
  int np = providers(ps);
  nkrt_pool_t *pool = make_pool(2);
  for (int pi = 0; pi < np; pi++) {
    gcase_t cases[] = {
        /* k == 0 and alpha == 0: C = beta * C */
        {NKRT_DTYPE_FLOAT32, 2, 0, 0, 5, 6, 0, 1.0f, 0.5f, 1, false, false, false},
        {NKRT_DTYPE_FLOAT32, 1, 1, 1, 5, 6, 9, 0.0f, 2.0f, 0, false, false, false},
        {NKRT_DTYPE_BFLOAT16, 1, 0, 0, 5, 6, 0, 1.0f, 0.5f, 0, false, false, false},
        {NKRT_DTYPE_FLOAT16, 1, 0, 0, 3, 4, 5, 0.0f, 0.0f, 0, false, false, false},
        /* m == 0, n == 0: nothing */
        {NKRT_DTYPE_FLOAT32, 1, 0, 0, 0, 6, 9, 1.0f, 0.0f, 0, false, false, false},
        {NKRT_DTYPE_FLOAT32, 1, 0, 0, 6, 0, 9, 1.0f, 0.0f, 0, false, false, false},
        /* beta == 0 never reads C, even NaN */
        {NKRT_DTYPE_FLOAT32, 1, 0, 0, 17, 19, 23, 1.0f, 0.0f, 0, false, false, true},
        {NKRT_DTYPE_FLOAT32, 1, 1, 0, 200, 200, 200, 1.0f, 0.0f, 0, false, false, true},
        {NKRT_DTYPE_BFLOAT16, 1, 0, 1, 17, 19, 23, 1.0f, 0.0f, 0, false, false, true},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
      run_direct(ps[pi], pool, &cases[i]);
  }
  /* bad arguments are reported, never run */
  float x[4] = {0};
  uint16_t h[4] = {0};
  const char *e;
  e = nkrt_gemm_sgemm_batched(ps[0], pool, 1, 0, 0, -1, 2, 2, 1, x, 2, 0, x, 2, 0, 0, x, 2, 0);
  CHECK(e && strstr(e, "negative"));
  e = nkrt_gemm_sgemm_batched(ps[0], pool, 1, 2, 0, 1, 2, 2, 1, x, 2, 0, x, 2, 0, 0, x, 2, 0);
  CHECK(e && strstr(e, "transpose flags"));
  e = nkrt_gemm_sgemm_batched(ps[0], pool, 1, 0, 0, 2, 2, 2, 1, x, 1, 0, x, 2, 0, 0, x, 2, 0);
  CHECK(e && strstr(e, "leading dimension"));
  /* NaN and infinity survive the float32 -> 16-bit rounding of C */
  for (int pi = 0; pi < np; pi++)
    for (int di = 0; di < 2; di++) {
      uint32_t dt = di ? NKRT_DTYPE_FLOAT16 : NKRT_DTYPE_BFLOAT16;
      uint16_t av[2] = {to16(dt, NAN), to16(dt, INFINITY)}, bv[40], cv[80];
      for (int j = 0; j < 40; j++) bv[j] = to16(dt, 1.0f + (float)j);
      e = nkrt_gemm_lowp_batched(ps[pi], pool, dt, 1, 0, 0, 2, 40, 1, 1, av, 1, 0, bv, 40, 0, 0,
                                 cv, 40, 0);
      CHECK(!e);
      int ok = 0;
      for (int j = 0; j < 40; j++)
        ok += isnan(from16(dt, cv[j])) && from16(dt, cv[40 + j]) == INFINITY;
      CHECK(ok == 40);
    }
  /* a single stored row needs no leading dimension: 0 is accepted */
  float row[3] = {1, 2, 3}, col[3] = {4, 5, 6}, out[1] = {0};
  for (int pi = 0; pi < np; pi++) {
    e = nkrt_gemm_sgemm_batched(ps[pi], pool, 1, 0, 0, 1, 1, 3, 1, row, 0, 0, col, 1, 0, 0, out,
                                0, 0);
    CHECK(!e && out[0] == 32.0f);
  }
  e = nkrt_gemm_lowp_batched(ps[0], pool, NKRT_DTYPE_FLOAT32, 1, 0, 0, 2, 2, 1, 1, h, 1, 0, h, 2,
                             0, 0, h, 2, 0);
  CHECK(e && strstr(e, "float16 or bfloat16"));
  nkrt_pool_destroy(pool);
}

TEST(gemm_conversions) {
  CHECK(nkrt_float_to_half(1.0f) == 0x3c00 && nkrt_half_to_float(0x3c00) == 1.0f);
  CHECK(nkrt_float_to_half(65504.0f) == 0x7bff && nkrt_float_to_half(1e6f) == 0x7c00);
  CHECK(nkrt_half_to_float(0x0001) == 5.9604644775390625e-08f); /* smallest subnormal */
  CHECK(nkrt_float_to_half(1.0f + 1.0f / 4096) == 0x3c00);     /* ties to even */
  CHECK(isnan(nkrt_half_to_float(nkrt_float_to_half(NAN))));
  CHECK(nkrt_float_to_bf16(1.0f) == 0x3f80 && nkrt_bf16_to_float(0xc000) == -2.0f);
  CHECK(nkrt_float_to_bf16(1.0f + 1.0f / 256) == 0x3f80); /* ties to even */
  CHECK(isnan(nkrt_bf16_to_float(nkrt_float_to_bf16(NAN))));
}

/* ---- through a NEFF and the provider the runtime picks -------------------- */

enum { CAP = 65536 };

static nkrt_tensor_t *tensor_of(nkrt_runtime_t *rt, const char *name, const void *data,
                                uint64_t size) {
  nkrt_tensor_t *t = NULL;
  CHECK_OK(nkrt_tensor_allocate(rt, 0, size, name, &t));
  if (t && data) CHECK_OK(nkrt_tensor_write(t, data, 0, size));
  return t;
}

/* Runs a case (op 0 sgemm, 1 sgemm_batched, 2 low precision) through the
 * matmul NEFF; returns the execute status. */
static nkrt_status_t run_neff(nkrt_runtime_t *rt, nkrt_model_t *m, int op, const gcase_t *g,
                              bool check) {
  gdata_t d;
  make_data(g, &d);
  int64_t params[16] = {op,    g->dtype, g->batch, g->ta, g->tb, g->m, g->n, g->k,
                        d.lda, d.ldb,    d.ldc,    d.sa,  d.sb,  d.sc, 0,    0};
  float scal[2] = {g->alpha, g->beta};
  float *bufs[3];
  for (int i = 0; i < 3; i++) bufs[i] = calloc(CAP, 4);
  bool lowp = g->dtype != NKRT_DTYPE_FLOAT32;
  size_t es = lowp ? 2 : 4;
  int64_t cap = (int64_t)CAP * 4 / (int64_t)es;
  CHECK(d.na <= cap && d.nb <= cap && d.nc <= cap);
  memcpy(bufs[0], lowp ? (void *)d.a16 : (void *)d.a, (size_t)d.na * es);
  memcpy(bufs[1], lowp ? (void *)d.b16 : (void *)d.b, (size_t)d.nb * es);
  memcpy(bufs[2], lowp ? (void *)d.c16 : (void *)d.c, (size_t)d.nc * es);
  nkrt_tensor_t *tp = tensor_of(rt, "params", params, sizeof(params));
  nkrt_tensor_t *ts = tensor_of(rt, "scal", scal, sizeof(scal));
  nkrt_tensor_t *ta = tensor_of(rt, "a", bufs[0], CAP * 4);
  nkrt_tensor_t *tb = tensor_of(rt, "b", bufs[1], CAP * 4);
  nkrt_tensor_t *tc = tensor_of(rt, "c", bufs[2], CAP * 4);
  nkrt_tensor_set_t *in = NULL, *out = NULL;
  CHECK_OK(nkrt_tensor_set_create(&in));
  CHECK_OK(nkrt_tensor_set_create(&out));
  CHECK_OK(nkrt_tensor_set_add(in, "params", tp));
  CHECK_OK(nkrt_tensor_set_add(in, "scal", ts));
  CHECK_OK(nkrt_tensor_set_add(in, "a", ta));
  CHECK_OK(nkrt_tensor_set_add(in, "b", tb));
  CHECK_OK(nkrt_tensor_set_add(in, "c", tc));
  CHECK_OK(nkrt_tensor_set_add(out, "output0", tc));
  nkrt_status_t st = nkrt_execute(m, in, out);
  if (!st && check) {
    CHECK_OK(nkrt_tensor_read(tc, bufs[2], 0, CAP * 4));
    char who[64];
    snprintf(who, sizeof(who), "NEFF via %s", nkrt_gemm_provider());
    check_data(g, &d, lowp ? NULL : bufs[2], lowp ? (uint16_t *)bufs[2] : NULL, who);
  }
  nkrt_tensor_set_destroy(in);
  nkrt_tensor_set_destroy(out);
  nkrt_tensor_free(&tp), nkrt_tensor_free(&ts), nkrt_tensor_free(&ta), nkrt_tensor_free(&tb);
  nkrt_tensor_free(&tc);
  for (int i = 0; i < 3; i++) free(bufs[i]);
  free_data(&d);
  return st;
}

static void neff_cases(nkrt_runtime_t *rt, nkrt_model_t *m) {
  gcase_t sg = {NKRT_DTYPE_FLOAT32, 1, 1, 0, 120, 130, 140, 1.0f, 0.5f, 3, false, false, false};
  CHECK_OK(run_neff(rt, m, 0, &sg, true));
  gcase_t small = {NKRT_DTYPE_FLOAT32, 1, 0, 1, 7, 33, 1, -2.0f, 0.0f, 0, false, false, false};
  CHECK_OK(run_neff(rt, m, 0, &small, true));
  gcase_t bt = {NKRT_DTYPE_FLOAT32, 4, 0, 0, 33, 40, 57, 1.0f, 1.0f, 1, false, true, false};
  CHECK_OK(run_neff(rt, m, 1, &bt, true));
  gcase_t bf = {NKRT_DTYPE_BFLOAT16, 3, 0, 1, 57, 64, 70, 1.0f, 0.5f, 0, true, false, false};
  CHECK_OK(run_neff(rt, m, 2, &bf, true));
  gcase_t hf = {NKRT_DTYPE_FLOAT16, 1, 1, 1, 100, 129, 160, 0.5f, 0.0f, 2, false, false, false};
  CHECK_OK(run_neff(rt, m, 2, &hf, true));
  /* a bad call fails the execution with the GEMM's message */
  gcase_t neg = {NKRT_DTYPE_BFLOAT16, 1, 0, 0, 4, 4, 4, 1.0f, 0.0f, 0, false, false, false};
  gcase_t badt = neg;
  badt.dtype = NKRT_DTYPE_FLOAT32;
  nkrt_status_t st = run_neff(rt, m, 2, &badt, false);
  CHECK(st && nkrt_status_code(st) == NKRT_EXEC_COMPLETED_WITH_ERR &&
        strstr(nkrt_status_message(st), "float16 or bfloat16"));
  nkrt_status_free(st);
  (void)neg;
}

static void set_env(const char *name, const char *value) {
  if (value) setenv(name, value, 1);
  else unsetenv(name);
}

TEST(gemm_through_neff) {
  char *saved_gemm = getenv("NKRT_GEMM") ? strdup(getenv("NKRT_GEMM")) : NULL;
  char *saved_lib = getenv("NKRT_GEMM_LIBRARY") ? strdup(getenv("NKRT_GEMM_LIBRARY")) : NULL;
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 16 << 20);
  nkrt_model_t *m = NULL;
  CHECK_OK(nkrt_model_load_file(rt, nkrt_test_neff("matmul"), 0, NULL, &m));
  if (m) {
    /* whatever the environment picks (make test-c: mkl when installed) */
    const char *name = nkrt_gemm_provider();
    CHECK(strcmp(name, "mkl") == 0 || strcmp(name, "reference") == 0);
    neff_cases(rt, m);
    /* auto: the built-in kernel where MKL would run its slower AVX2 code, else
       MKL when it can be found */
    set_env("NKRT_GEMM", "auto");
    nkrt_gemm_reselect();
    if (nkrt_gemm_builtin_preferred() || !nkrt_gemm_find("mkl"))
      CHECK(strcmp(nkrt_gemm_provider(), "reference") == 0);
    else
      CHECK(strcmp(nkrt_gemm_provider(), "mkl") == 0);
    /* forced reference */
    set_env("NKRT_GEMM", "reference");
    nkrt_gemm_reselect();
    CHECK(strcmp(nkrt_gemm_provider(), "reference") == 0);
    neff_cases(rt, m);
    /* forced MKL from a path that does not hold it: warns, uses reference */
    set_env("NKRT_GEMM", "mkl");
    set_env("NKRT_GEMM_LIBRARY", "/nonexistent/libmkl_rt.so.3");
    nkrt_gemm_reselect();
    CHECK(strcmp(nkrt_gemm_provider(), "reference") == 0 ||
          strcmp(nkrt_gemm_provider(), "mkl") == 0 /* already loaded in this process */);
    set_env("NKRT_GEMM_LIBRARY", saved_lib);
    /* forced MKL where it can be found */
    if (nkrt_gemm_find("mkl")) {
      nkrt_gemm_reselect();
      CHECK(strcmp(nkrt_gemm_provider(), "mkl") == 0);
      neff_cases(rt, m);
    }
    nkrt_model_unload(m);
  }
  set_env("NKRT_GEMM", saved_gemm);
  set_env("NKRT_GEMM_LIBRARY", saved_lib);
  nkrt_gemm_reselect();
  free(saved_gemm);
  free(saved_lib);
  nkrt_runtime_destroy(rt);
}

/* ---- weights packed once (gemm_pack.c) -------------------------------------- */

enum { PM = 64, PN = 96, PK = 80 };

typedef struct {
  nkrt_runtime_t *rt;
  nkrt_model_t *mm;
  nkrt_tensor_t *params, *scal, *a, *b, *c;
  float ha[PM * PK], hb[PN * PK];
} pack_fixture_t;

/* C = A @ B^T through the matmul NEFF (B is input "b", C aliased output
 * "output0"); returns how many elements differ from the host product. */
static int pack_run(pack_fixture_t *f) {
  void *addrs[6] = {nkrt_tensor_va(f->params), nkrt_tensor_va(f->scal), nkrt_tensor_va(f->a),
                    nkrt_tensor_va(f->b), nkrt_tensor_va(f->c), NULL};
  CHECK_OK(nkrt_execute_at(f->mm, addrs));
  static float c[PM * PN];
  CHECK_OK(nkrt_tensor_read(f->c, c, 0, sizeof(c)));
  int bad = 0;
  for (int i = 0; i < PM; i++)
    for (int j = 0; j < PN; j++) {
      double want = 0;
      for (int q = 0; q < PK; q++) want += (double)f->ha[i * PK + q] * f->hb[j * PK + q];
      bad += fabs(c[i * PN + j] - want) > 1e-3 * (1 + fabs(want));
    }
  return bad;
}

/* Random A (PM x PK) and B (PN x PK) in fresh tensors, the matmul NEFF's
 * parameters for C = A @ B^T. */
static void pack_fixture_fill(pack_fixture_t *f) {
  int64_t params[16] = {0, NKRT_DTYPE_FLOAT32, 1, 0, 1, PM, PN, PK, PK, PK, PN, 0, 0, 0, 0, 0};
  float scal[2] = {1.0f, 0.0f};
  for (int i = 0; i < PM * PK; i++) f->ha[i] = rnd();
  for (int i = 0; i < PN * PK; i++) f->hb[i] = rnd();
  f->params = tensor_of(f->rt, "params", params, sizeof(params));
  f->scal = tensor_of(f->rt, "scal", scal, sizeof(scal));
  f->a = tensor_of(f->rt, "a", NULL, CAP * 4);
  f->b = tensor_of(f->rt, "b", NULL, CAP * 4);
  f->c = tensor_of(f->rt, "c", NULL, CAP * 4);
  CHECK_OK(nkrt_tensor_write(f->a, f->ha, 0, sizeof(f->ha)));
  CHECK_OK(nkrt_tensor_write(f->b, f->hb, 0, sizeof(f->hb)));
}

static nkrt_gemm_pack_stats_t pack_stats(nkrt_runtime_t *rt) {
  nkrt_gemm_pack_stats_t s;
  CHECK_OK(nkrt_gemm_pack_stats(rt, &s));
  return s;
}

/* Makes `name` ("reference" or "mkl") the provider for a packed-weight test
 * and returns it; NULL (the checks are skipped) when it cannot be had or
 * cannot pack. *saved: NKRT_GEMM to put back with restore_gemm. */
static const nkrt_gemm_provider_t *use_packing(const char *name, char **saved) {
  const nkrt_gemm_provider_t *p = nkrt_gemm_find(name);
  *saved = NULL;
  if (!p || !p->pack_b_size) {
    printf("  (packed-weight checks for %s skipped: not found or no packed GEMM)\n", name);
    return NULL;
  }
  *saved = getenv("NKRT_GEMM") ? strdup(getenv("NKRT_GEMM")) : NULL;
  set_env("NKRT_GEMM", name);
  nkrt_gemm_reselect();
  return p;
}

static void restore_gemm(char *saved) {
  set_env("NKRT_GEMM", saved);
  nkrt_gemm_reselect();
  free(saved);
}

/* A weight is packed on its second sighting and reused after; every kind of
 * write to its bytes (a tensor write, a memset, a kernel's output) drops the
 * packed copy, so results always follow the current bytes. */
static void gemm_packed_weights_with(const char *provider) {
  char *saved;
  const nkrt_gemm_provider_t *prov = use_packing(provider, &saved);
  if (!prov) return;
  pack_fixture_t f = {.rt = nkrt_test_runtime("0", 16 << 20)};
  CHECK_OK(nkrt_model_load_file(f.rt, nkrt_test_neff("matmul"), 0, NULL, &f.mm));
  nkrt_model_t *inc = NULL;
  CHECK_OK(nkrt_model_load_file(f.rt, nkrt_test_neff("inplace"), 0, NULL, &inc));
  pack_fixture_fill(&f);
  nkrt_gemm_pack_stats_t s = pack_stats(f.rt);
  CHECK(s.limit_bytes == 1ull << 30 && s.packs == 0 && s.packed_matrices == 0);

  CHECK(pack_run(&f) == 0); /* first sighting: remembered only */
  CHECK(pack_stats(f.rt).packs == 0);
  CHECK(pack_run(&f) == 0); /* unchanged: packed */
  s = pack_stats(f.rt);
  CHECK(s.packs == 1 && s.packed_matrices == 1 && s.packed_bytes > 0 && s.hits == 0);
  CHECK(pack_run(&f) == 0 && pack_run(&f) == 0); /* reused */
  CHECK(pack_stats(f.rt).hits == 2);

  /* a tensor write to the weight's bytes */
  for (int i = 0; i < PN * PK; i++) f.hb[i] = rnd();
  CHECK_OK(nkrt_tensor_write(f.b, f.hb, 0, sizeof(f.hb)));
  s = pack_stats(f.rt);
  CHECK(s.packed_matrices == 0 && s.invalidations >= 1);
  CHECK(pack_run(&f) == 0 && pack_run(&f) == 0 && pack_run(&f) == 0);
  s = pack_stats(f.rt);
  CHECK(s.packs == 2 && s.hits == 3);

  /* a memset of part of it */
  CHECK_OK(nkrt_tensor_memset(f.b, 0, 40 * 4, 8));
  f.hb[40] = f.hb[41] = 0.0f;
  CHECK(pack_stats(f.rt).packed_matrices == 0);
  CHECK(pack_run(&f) == 0 && pack_run(&f) == 0 && pack_run(&f) == 0);

  /* another kernel's output: inplace adds 1 to b[16 .. 32) */
  uint64_t inv = pack_stats(f.rt).invalidations;
  void *iaddrs[2] = {(float *)nkrt_tensor_va(f.b) + 16, NULL};
  CHECK_OK(nkrt_execute_at(inc, iaddrs));
  for (int i = 16; i < 32; i++) f.hb[i] += 1.0f;
  CHECK(pack_stats(f.rt).invalidations == inv + 1);
  CHECK(pack_run(&f) == 0 && pack_run(&f) == 0 && pack_run(&f) == 0);

  /* a B the execution also writes is never packed */
  uint64_t packs = pack_stats(f.rt).packs;
  void *self[6] = {nkrt_tensor_va(f.params), nkrt_tensor_va(f.scal), nkrt_tensor_va(f.a),
                   nkrt_tensor_va(f.c), nkrt_tensor_va(f.c), NULL};
  for (int r = 0; r < 3; r++) CHECK_OK(nkrt_execute_at(f.mm, self));
  CHECK(pack_stats(f.rt).packs == packs);

  /* freeing the weight's memory drops its copy */
  CHECK(pack_stats(f.rt).packed_matrices == 1);
  nkrt_tensor_free(&f.b);
  CHECK(pack_stats(f.rt).packed_matrices == 0);

  nkrt_tensor_free(&f.params), nkrt_tensor_free(&f.scal), nkrt_tensor_free(&f.a);
  nkrt_tensor_free(&f.c);
  nkrt_model_unload(f.mm);
  nkrt_model_unload(inc);
  nkrt_runtime_destroy(f.rt);

  /* NKRT_GEMM_PACK_LIMIT: 0 turns packing off; a bad value is refused */
  set_env("NKRT_GEMM_PACK_LIMIT", "0");
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 16 << 20);
  CHECK(pack_stats(rt).limit_bytes == 0);
  nkrt_runtime_destroy(rt);
  set_env("NKRT_GEMM_PACK_LIMIT", "lots");
  nkrt_options_t o;
  nkrt_options_init(&o);
  rt = NULL;
  CHECK_ERR(nkrt_runtime_create(&o, &rt), NKRT_INVALID, "NKRT_GEMM_PACK_LIMIT:");
  CHECK(rt == NULL);
  set_env("NKRT_GEMM_PACK_LIMIT", NULL);
  CHECK_ERR(nkrt_gemm_pack_stats(NULL, &s), NKRT_INVALID_HANDLE, "runtime handle is NULL");
  restore_gemm(saved);
}

TEST(gemm_packed_weights) {
  gemm_packed_weights_with("reference");
  gemm_packed_weights_with("mkl");
}

/* Host buffers (nkrt_execute_host) are written without nkrt seeing it, so a
 * weight in host memory is never packed: a changed B shows at once. */
static void gemm_host_weights_never_packed_with(const char *provider) {
  char *saved;
  const nkrt_gemm_provider_t *prov = use_packing(provider, &saved);
  if (!prov) return;
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 16 << 20);
  nkrt_model_t *mm = NULL;
  CHECK_OK(nkrt_model_load_file(rt, nkrt_test_neff("matmul"), 0, NULL, &mm));
  int64_t params[16] = {0, NKRT_DTYPE_FLOAT32, 1, 0, 1, PM, PN, PK, PK, PK, PN, 0, 0, 0, 0, 0};
  float scal[2] = {1.0f, 0.0f};
  float *a = calloc(CAP, 4), *b = calloc(CAP, 4), *c = calloc(CAP, 4);
  CHECK(a && b && c);
  void *addrs[6] = {params, scal, a, b, c, NULL};
  for (int round = 0; round < 4; round++) {
    for (int i = 0; i < PM * PK; i++) a[i] = rnd();
    if (round == 0 || round == 3) /* rounds 1 and 2 keep B: still never packed */
      for (int i = 0; i < PN * PK; i++) b[i] = rnd();
    CHECK_OK(nkrt_execute_host(mm, addrs));
    CHECK_OK(nkrt_execute_host(mm, addrs));
    int bad = 0;
    for (int i = 0; i < PM; i++)
      for (int j = 0; j < PN; j++) {
        double want = 0;
        for (int q = 0; q < PK; q++) want += (double)a[i * PK + q] * b[j * PK + q];
        bad += fabs(c[i * PN + j] - want) > 1e-3 * (1 + fabs(want));
      }
    CHECK(bad == 0);
  }
  nkrt_gemm_pack_stats_t s = pack_stats(rt);
  CHECK(s.packs == 0 && s.packed_matrices == 0 && s.hits == 0);
  free(a), free(b), free(c);
  nkrt_model_unload(mm);
  nkrt_runtime_destroy(rt);
  restore_gemm(saved);
}

TEST(gemm_host_weights_never_packed) {
  gemm_host_weights_never_packed_with("reference");
  gemm_host_weights_never_packed_with("mkl");
}

/* nkrt_tensor_update writes only the 16 KiB blocks that differ: an unchanged
 * weight keeps its packed copy, a changed one is rewritten and repacked. */
static void tensor_update_keeps_unchanged_weights_with(const char *provider) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 16 << 20);
  enum { BYTES = 40000 }; /* two whole blocks and a partial one */
  uint8_t *src = malloc(BYTES), *back = malloc(BYTES);
  for (int i = 0; i < BYTES; i++) src[i] = (uint8_t)(i * 7);
  nkrt_tensor_t *t = tensor_of(rt, "t", NULL, BYTES);
  uint64_t written = 1;
  CHECK_OK(nkrt_tensor_update(t, src, 0, BYTES, &written));
  CHECK(written == BYTES); /* fresh memory is zero: every block differs */
  CHECK_OK(nkrt_tensor_update(t, src, 0, BYTES, &written));
  CHECK(written == 0);
  src[BYTES - 1] ^= 1; /* the partial last block */
  src[20000] ^= 1;     /* the second block */
  CHECK_OK(nkrt_tensor_update(t, src, 0, BYTES, &written));
  CHECK(written == (BYTES - 16384));
  CHECK_OK(nkrt_tensor_read(t, back, 0, BYTES));
  CHECK(memcmp(back, src, BYTES) == 0);
  src[5] ^= 1;
  CHECK_OK(nkrt_tensor_update(t, src, 0, BYTES, NULL));
  CHECK_OK(nkrt_tensor_read(t, back, 0, BYTES));
  CHECK(memcmp(back, src, BYTES) == 0);
  CHECK_ERR(nkrt_tensor_update(t, src, 8, BYTES, NULL), NKRT_INVALID, "update of 40000 bytes");
  CHECK_ERR(nkrt_tensor_update(t, NULL, 0, 4, NULL), NKRT_INVALID, "source buffer is NULL");
  CHECK_OK(nkrt_tensor_update(t, NULL, 0, 0, NULL));
  nkrt_tensor_free(&t);
  free(src);
  free(back);
  nkrt_runtime_destroy(rt);

  char *saved;
  const nkrt_gemm_provider_t *prov = use_packing(provider, &saved);
  if (!prov) return;
  pack_fixture_t f = {.rt = nkrt_test_runtime("0", 16 << 20)};
  CHECK_OK(nkrt_model_load_file(f.rt, nkrt_test_neff("matmul"), 0, NULL, &f.mm));
  pack_fixture_fill(&f);
  CHECK(pack_run(&f) == 0 && pack_run(&f) == 0); /* packed */
  CHECK(pack_stats(f.rt).packed_matrices == 1);
  CHECK_OK(nkrt_tensor_update(f.b, f.hb, 0, sizeof(f.hb), &written)); /* the same bytes */
  CHECK(written == 0 && pack_stats(f.rt).packed_matrices == 1);
  CHECK(pack_run(&f) == 0 && pack_stats(f.rt).hits == 1);
  f.hb[3] += 1.0f;
  CHECK_OK(nkrt_tensor_update(f.b, f.hb, 0, sizeof(f.hb), &written));
  CHECK(written > 0 && pack_stats(f.rt).packed_matrices == 0);
  CHECK(pack_run(&f) == 0);
  nkrt_tensor_free(&f.params), nkrt_tensor_free(&f.scal), nkrt_tensor_free(&f.a);
  nkrt_tensor_free(&f.b), nkrt_tensor_free(&f.c);
  nkrt_model_unload(f.mm);
  nkrt_runtime_destroy(f.rt);
  restore_gemm(saved);
}

TEST(tensor_update_keeps_unchanged_weights) {
  tensor_update_keeps_unchanged_weights_with("reference");
  tensor_update_keeps_unchanged_weights_with("mkl");
}

/* A B rewritten before every execution is never packed, even when its
 * product is cut into panels that meet the same entry within an execution;
 * past NKRT_GEMM_PACK_LIMIT weights run unpacked and results stay right. */
static void gemm_packing_skips_one_off_operands_and_respects_the_limit_with(const char *provider) {
  char *saved;
  const nkrt_gemm_provider_t *prov = use_packing(provider, &saved);
  if (!prov) return;
  enum { S = 256 }; /* 2 * 256^3 flops: split into panels over the pool */
  for (int limited = 0; limited < 2; limited++) {
    if (limited) { /* below one packed copy */
      char limit[32];
      snprintf(limit, sizeof(limit), "%llu",
               (unsigned long long)(prov->pack_b_size(8, S, S) / 2));
      set_env("NKRT_GEMM_PACK_LIMIT", limit);
    }
    nkrt_runtime_t *rt = nkrt_test_runtime("0", 16 << 20);
    nkrt_model_t *mm = NULL;
    CHECK_OK(nkrt_model_load_file(rt, nkrt_test_neff("matmul"), 0, NULL, &mm));
    int64_t params[16] = {0, NKRT_DTYPE_FLOAT32, 1, 0, 1, S, S, S, S, S, S, 0, 0, 0, 0, 0};
    float scal[2] = {1.0f, 0.0f};
    float *a = malloc(S * S * 4), *b = malloc(S * S * 4), *c = malloc(S * S * 4);
    for (int i = 0; i < S * S; i++) a[i] = rnd(), b[i] = rnd();
    nkrt_tensor_t *tp = tensor_of(rt, "params", params, sizeof(params));
    nkrt_tensor_t *ts = tensor_of(rt, "scal", scal, sizeof(scal));
    nkrt_tensor_t *ta = tensor_of(rt, "a", a, CAP * 4), *tb = tensor_of(rt, "b", NULL, CAP * 4);
    nkrt_tensor_t *tc = tensor_of(rt, "c", NULL, CAP * 4);
    void *addrs[6] = {nkrt_tensor_va(tp), nkrt_tensor_va(ts), nkrt_tensor_va(ta),
                      nkrt_tensor_va(tb), nkrt_tensor_va(tc), NULL};
    for (int rep = 0; rep < 4; rep++) {
      /* unlimited: new bytes before every execution; limited: the same weight */
      if (!limited || rep == 0) {
        b[rep] += 1.0f;
        CHECK_OK(nkrt_tensor_write(tb, b, 0, S * S * 4));
      }
      CHECK_OK(nkrt_execute_at(mm, addrs));
      CHECK_OK(nkrt_tensor_read(tc, c, 0, S * S * 4));
      int bad = 0;
      for (int i = 0; i < S; i += 37)
        for (int j = 0; j < S; j += 41) {
          double want = 0;
          for (int q = 0; q < S; q++) want += (double)a[i * S + q] * b[j * S + q];
          bad += fabs(c[i * S + j] - want) > 1e-3 * (1 + fabs(want));
        }
      CHECK(bad == 0);
    }
    nkrt_gemm_pack_stats_t s = pack_stats(rt);
    CHECK(s.packs == 0 && s.packed_matrices == 0 && s.hits == 0);
    nkrt_tensor_free(&tp), nkrt_tensor_free(&ts), nkrt_tensor_free(&ta), nkrt_tensor_free(&tb);
    nkrt_tensor_free(&tc);
    nkrt_model_unload(mm);
    nkrt_runtime_destroy(rt);
    free(a), free(b), free(c);
  }
  set_env("NKRT_GEMM_PACK_LIMIT", NULL);
  restore_gemm(saved);
}

TEST(gemm_packing_skips_one_off_operands_and_respects_the_limit) {
  gemm_packing_skips_one_off_operands_and_respects_the_limit_with("reference");
  gemm_packing_skips_one_off_operands_and_respects_the_limit_with("mkl");
}

/* Past NKRT_GEMM_PACK_LIMIT the first weight keeps its packed copy and the
 * second runs unpacked, call after call (nothing is evicted to make room). */
static void gemm_pack_limit_keeps_what_it_packed_with(const char *provider) {
  char *saved;
  const nkrt_gemm_provider_t *prov = use_packing(provider, &saved);
  if (!prov) return;
  char limit[32];
  snprintf(limit, sizeof(limit), "%llu",
           (unsigned long long)(prov->pack_b_size(PM, PN, PK) * 3 / 2)); /* room for one */
  set_env("NKRT_GEMM_PACK_LIMIT", limit);
  pack_fixture_t f = {.rt = nkrt_test_runtime("0", 16 << 20)};
  CHECK_OK(nkrt_model_load_file(f.rt, nkrt_test_neff("matmul"), 0, NULL, &f.mm));
  pack_fixture_fill(&f);
  nkrt_tensor_t *first = f.b, *second = tensor_of(f.rt, "b2", NULL, CAP * 4);
  CHECK_OK(nkrt_tensor_write(second, f.hb, 0, sizeof(f.hb)));
  for (int rep = 0; rep < 4; rep++)
    for (int w = 0; w < 2; w++) {
      f.b = w ? second : first; /* the same values at two addresses */
      CHECK(pack_run(&f) == 0);
    }
  nkrt_gemm_pack_stats_t s = pack_stats(f.rt);
  CHECK(s.packs == 1 && s.packed_matrices == 1 && s.hits == 2); /* packed on rep 1 */
  f.b = first;
  nkrt_tensor_free(&second);
  nkrt_tensor_free(&f.params), nkrt_tensor_free(&f.scal), nkrt_tensor_free(&f.a);
  nkrt_tensor_free(&f.b), nkrt_tensor_free(&f.c);
  nkrt_model_unload(f.mm);
  nkrt_runtime_destroy(f.rt);
  set_env("NKRT_GEMM_PACK_LIMIT", NULL);
  restore_gemm(saved);
}

TEST(gemm_pack_limit_keeps_what_it_packed) {
  gemm_pack_limit_keeps_what_it_packed_with("reference");
  gemm_pack_limit_keeps_what_it_packed_with("mkl");
}
