/* conv_winograd.c - dense 3x3 stride-1 convolutions by Winograd F(2x2, 3x3).
 *
 * Each 2x2 block of outputs (a tile) of one channel is A^T [U . V] A, where
 * V = B^T d B is the tile's 4x4 input patch d transformed and U = G g G^T the
 * 3x3 kernel g transformed (interpolation points 0, 1, -1, inf). Over
 * channels the element-wise products become 16 independent matrix products
 *
 *   M[s] (o x tiles) = U[s] (o x c) @ V[s] (c x tiles),   s = 0 .. 15,
 *
 * 16 multiplies per tile and channel pair instead of 36: 2.25x fewer flops
 * than im2col + GEMM, plus the transforms (linear in c + o, not c * o).
 *
 * Work: the weights are transformed once per call (parallel over input
 * channels) into U [16][c][o] (each U[s] stored transposed, so the GEMM
 * packs it with contiguous reads); the tile rows of every image are cut
 * into blocks of about TARGET_TILES tiles (at least MIN_TILES), and a task
 * transforms one block's input into its worker's V [16][c][tiles], runs the
 * 16 products with the provider's single-threaded sgemm into
 * M [16][o][tiles], and transforms M back into the output with the bias and
 * activation (conv.c's epilogue semantics: NaN stays NaN). Every buffer
 * comes from the recycled GEMM buffers; nothing is cached between calls
 * (weights may change).
 *
 * Rounding: F(2x2)'s transforms hold only 0, +-1 and 1/2, and its error is
 * im2col's: measured against a float64 loop (He-scaled weights, inputs of
 * unit scale, 64-256 input channels) max |error| / (sum |x w| + |bias|)
 * 0.8-1.0e-7 (im2col 0.6-1.2e-7). F(4x4, 3x3) (4x fewer multiplies; this
 * file's history) reached 3e-6, 2.7e-4 absolute on unit-scale weights,
 * beyond tests/nkipy/test_conv_compiled.py's rtol = atol = 1e-4. */
#include <stdlib.h>
#include <string.h>

#include "conv_winograd.h"

/* Tiles per block: measured (C harness, best of 15, 2 threads) 256 against
 * 128: batch 4 3x3 64->64 56x56 2.45 / 2.9 ms, batch 1 0.67 / 0.78 ms,
 * 128->128 28x28 equal. Fewer blocks pack U fewer times. */
#define TARGET_TILES 256
#define MIN_TILES 40
#define TASKS_PER_WORKER 2

#if defined(__x86_64__) && defined(__GNUC__)
#define WINO_SIMD \
  NKRT_HOT __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define WINO_SIMD NKRT_HOT
#endif

static int g_force = -1;

void nkrt_conv_winograd_force(int mode) { g_force = mode; }

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool nkrt_conv_winograd_applies(const nkrt_conv2d_params_t *p) {
  if (p->kh != 3 || p->kw != 3 || p->stride_h != 1 || p->stride_w != 1 || p->dil_h != 1 ||
      p->dil_w != 1 || p->groups != 1 || p->h < 1 || p->w < 1 || p->c < 1)
    return false;
  /* U is 16 * o * c floats: keep it (and the blocks) to sane sizes */
  if ((double)p->o * (double)p->c > 16.0 * 1024 * 1024) return false;
  if (g_force >= 0) return g_force == 1;
  /* measured (docs/gemm.md): the products need channels on both sides and
   * blocks of many tiles; 14x14 (256 channels) and 7x7 (512) maps ran at
   * 0.3-0.8x im2col + GEMM */
  return p->c >= 32 && p->o >= 32 && p->c <= 256 && p->o <= 256 && p->oh >= 20 &&
         p->ow >= 20 && (double)p->n * (double)p->oh * (double)p->ow >= 700;
}

typedef struct wino_job {
  const nkrt_conv2d_params_t *p;
  const nkrt_gemm_provider_t *prov;
  int64_t th, tw;      /* tiles per image down and across */
  int64_t rows;        /* tile rows of every image: n * th */
  int64_t rb, tb;      /* tile rows per block, tiles per block (rb * tw) */
  int64_t sw;          /* an input row's width in the strip: (tw + 1) * 2 */
  float *u;            /* transformed weights [16][c][o] */
  float *scratch;      /* per worker: V, M, strip, rows, out */
  int64_t per_worker;  /* floats of scratch per worker */
  int64_t off_m, off_strip, off_r, off_out;
} wino_job_t;

/* The transforms' loops, on rows of `n` floats: restrict parameters (not
 * block-scope pointers, which GCC does not trust) let them vectorise. Each
 * is inlined into its caller's instruction-set clone. */
#define WINO_INLINE static inline __attribute__((always_inline))

/* Every output row is its own restrict parameter: with one base pointer and
 * unknown row offsets GCC needs more run-time alias checks than it allows. */

/* G (3 rows of a, `ld` apart) into 4 rows of d, `dld` apart. */
WINO_INLINE void g_rows4(const float *restrict a, int64_t ld, float *restrict d0,
                         float *restrict d1, float *restrict d2, float *restrict d3, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    const float g0 = a[i], g1 = a[ld + i], g2 = a[2 * ld + i];
    d0[i] = g0;
    d1[i] = 0.5f * (g0 + g1 + g2);
    d2[i] = 0.5f * (g0 - g1 + g2);
    d3[i] = g2;
  }
}
WINO_INLINE void g_rows(const float *a, int64_t ld, float *d, int64_t dld, int64_t n) {
  g_rows4(a, ld, d, d + dld, d + 2 * dld, d + 3 * dld, n);
}

/* B^T: e_k = a[off[k] + i] (k < 4) into 4 rows of d, `dld` apart. */
WINO_INLINE void bt_rows4(const float *restrict a, int64_t o1, int64_t o2, int64_t o3,
                          float *restrict d0, float *restrict d1, float *restrict d2,
                          float *restrict d3, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    const float e0 = a[i], e1 = a[o1 + i], e2 = a[o2 + i], e3 = a[o3 + i];
    d0[i] = e0 - e2;
    d1[i] = e1 + e2;
    d2[i] = e2 - e1;
    d3[i] = e1 - e3;
  }
}
WINO_INLINE void bt_rows(const float *a, int64_t o1, int64_t o2, int64_t o3, float *d,
                         int64_t dld, int64_t n) {
  bt_rows4(a, o1, o2, o3, d, d + dld, d + 2 * dld, d + 3 * dld, n);
}

/* A^T over 4 rows of a (`ld` apart) into 2 rows of d (`dld` apart). */
WINO_INLINE void at_rows2(const float *restrict a, int64_t ld, float *restrict d0,
                          float *restrict d1, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    d0[i] = a[i] + a[ld + i] + a[2 * ld + i];
    d1[i] = a[ld + i] - a[2 * ld + i] - a[3 * ld + i];
  }
}
WINO_INLINE void at_rows(const float *a, int64_t ld, float *d, int64_t dld, int64_t n) {
  at_rows2(a, ld, d, d + dld, n);
}

/* Two phase rows of a (`ld` apart) interleaved into d, plus b. */
WINO_INLINE void interleave2(const float *restrict a, int64_t ld, float b, float *restrict d,
                             int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    d[2 * i] = a[i] + b;
    d[2 * i + 1] = a[ld + i] + b;
  }
}

/* The two column phases of a row: d[k * ld + i] = a[2 i + k], i < n. */
WINO_INLINE void deinterleave2(const float *restrict a, float *restrict d, int64_t ld,
                               int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    d[i] = a[2 * i];
    d[ld + i] = a[2 * i + 1];
  }
}

/* ---- weights: U[s][c][o] = (G g G^T)[s] -------------------------------- */

/* Per input channel c: its taps of every output channel are first gathered
 * into 9 rows over o (tap [9][o] in the worker's scratch) so the transform
 * runs along o, vectorised, and writes U[s][c][0 .. o) contiguously. U is
 * stored transposed (c x o per s) so the GEMM packs it as op(A) with
 * contiguous reads. */
static WINO_SIMD void weights_range(void *arg, int64_t begin, int64_t end, uint32_t worker) {
  const wino_job_t *j = arg;
  const nkrt_conv2d_params_t *p = j->p;
  const int64_t C = p->c, O = p->o, OC = p->o * p->c;
  float *tap = j->scratch + (int64_t)worker * j->per_worker;
  float *t = tap + 9 * O; /* G g: [4][3][o] */
  for (int64_t c = begin; c < end; c++) {
    for (int64_t o = 0; o < O; o++)
      for (int k = 0; k < 9; k++) tap[k * O + o] = p->weight[(o * C + c) * 9 + k];
    /* t[a][k][o] = (G g)[a][k]: rows k, 3 + k, 6 + k of the taps */
    for (int k = 0; k < 3; k++) g_rows(tap + k * O, 3 * O, t + k * O, 3 * O, O);
    /* U[a][b] = ((G g) G^T)[a][b] */
    for (int a = 0; a < 4; a++) g_rows(t + a * 3 * O, O, j->u + (int64_t)a * 4 * OC + c * O, OC, O);
  }
}

/* ---- input: V[s][c][t] = (B^T d B)[s] ------------------------------------ */

/* One input row (NULL: a row of padding) into its two column phases:
 * ph[k * ld + i] = input column 2 i + k - pad_left (0 outside), i <= tw. */
static WINO_SIMD void load_row(const wino_job_t *j, const float *xr, float *row, float *ph,
                               int64_t ld) {
  const nkrt_conv2d_params_t *p = j->p;
  const int64_t pw = j->tw + 1, sw = 2 * pw, W = p->w;
  if (!xr) {
    for (int k = 0; k < 2; k++) memset(ph + k * ld, 0, (size_t)pw * sizeof(float));
    return;
  }
  const int64_t s0 = min64(max64(p->pad_left, 0), sw);
  const int64_t s1 = max64(min64(p->pad_left + W, sw), s0);
  if (s0 > 0) memset(row, 0, (size_t)s0 * sizeof(float));
  if (s1 > s0) memcpy(row + s0, xr + (s0 - p->pad_left), (size_t)(s1 - s0) * sizeof(float));
  if (s1 < sw) memset(row + s1, 0, (size_t)(sw - s1) * sizeof(float));
  deinterleave2(row, ph, ld, pw);
}

/* Tile rows [gr0, gr1) (global: image gr / th, row gr % th) of every channel
 * into v: tile tx of the block's row l is column l * pw + tx of V[s][c]
 * (leading dimension j->tb per channel, j->tb * c per s; pw = tw + 1, the
 * extra tile of each row is never read back). The strip holds a channel's
 * 4 input rows per tile row, phase-major ([a][k][l][pw]), so every
 * transform is one long vector loop over the block. */
static WINO_SIMD void input_block(const wino_job_t *j, int64_t gr0, int64_t gr1, float *v,
                                  float *strip, float *r) {
  const nkrt_conv2d_params_t *p = j->p;
  const int64_t C = p->c, H = p->h, W = p->w, pw = j->tw + 1;
  const int64_t L = (gr1 - gr0) * pw, CT = C * j->tb; /* L: tiles with the extras */
  float *row = r + 4 * 2 * L;
  for (int64_t c = 0; c < C; c++) {
    for (int64_t gr = gr0; gr < gr1; gr++) {
      const int64_t n = gr / j->th, ty = gr % j->th;
      const float *xc = p->x + (n * C + c) * H * W;
      for (int64_t a = 0; a < 4; a++) {
        const int64_t iy = ty * 2 - p->pad_top + a;
        load_row(j, iy < 0 || iy >= H ? NULL : xc + iy * W, row,
                 strip + a * 2 * L + (gr - gr0) * pw, L);
      }
    }
    /* down: r[a] = (B^T strip)[a], every column of every tile row */
    bt_rows(strip, 2 * L, 4 * L, 6 * L, r, 2 * L, 2 * L);
    /* across: tile i reads columns 2 i .. 2 i + 3 of its row: phases 0-1 at
     * i and at i + 1 (the extra tile keeps i + 1 in the row) */
    float *vc = v + c * j->tb;
    for (int64_t a = 0; a < 4; a++) bt_rows(r + a * 2 * L, L, 1, L + 1, vc + a * 4 * CT, CT, L);
  }
}

/* ---- output: y = act(A^T M A + bias) --------------------------------------- */

/* out: q [4][2][L], then o2 [2][2][L] (row i, column phase k), then one
 * output row 2 * pw wide. */
static WINO_SIMD void output_block(const wino_job_t *j, int64_t gr0, int64_t gr1, const float *m,
                                   float *out) {
  const nkrt_conv2d_params_t *p = j->p;
  const int64_t O = p->o, OH = p->oh, OW = p->ow, tw = j->tw, pw = tw + 1, OT = O * j->tb;
  const int64_t L = (gr1 - gr0) * pw;
  const float lo = p->act_lo, hi = p->act_hi;
  float *q = out, *o2 = q + 8 * L, *yw = o2 + 4 * L;
  for (int64_t o = 0; o < O; o++) {
    const float *mo = m + o * j->tb;
    /* q[a][k] = (M A)[a][k], then o2[i][k] = (A^T M A)[i][k], every tile */
    for (int a = 0; a < 4; a++) at_rows(mo + (int64_t)a * 4 * OT, OT, q + a * 2 * L, L, L);
    for (int k = 0; k < 2; k++) at_rows(q + k * L, 2 * L, o2 + k * L, 2 * L, L);
    const float b = p->bias ? p->bias[o] : 0.0f;
    for (int64_t gr = gr0; gr < gr1; gr++) {
      const int64_t n = gr / j->th, ty = gr % j->th;
      const int64_t rows = min64(2, OH - ty * 2);
      for (int64_t i = 0; i < rows; i++) {
        interleave2(o2 + i * 2 * L + (gr - gr0) * pw, L, b, yw, tw);
        float *restrict yr = p->y + ((n * O + o) * OH + ty * 2 + i) * OW;
        switch (p->activation) {
          case NKRT_ACT_RELU:
            for (int64_t x = 0; x < OW; x++) yr[x] = yw[x] < 0.0f ? 0.0f : yw[x];
            break;
          case NKRT_ACT_CLAMP:
            for (int64_t x = 0; x < OW; x++) {
              float v = yw[x] < lo ? lo : yw[x];
              yr[x] = v > hi ? hi : v;
            }
            break;
          default:
            memcpy(yr, yw, (size_t)OW * sizeof(float));
        }
      }
    }
  }
}

static void block_range(void *arg, int64_t begin, int64_t end, uint32_t worker) {
  const wino_job_t *j = arg;
  const nkrt_conv2d_params_t *p = j->p;
  float *base = j->scratch + (int64_t)worker * j->per_worker;
  float *v = base, *m = base + j->off_m;
  for (int64_t blk = begin; blk < end; blk++) {
    const int64_t gr0 = blk * j->rb, gr1 = min64(j->rows, gr0 + j->rb);
    const int64_t tiles = (gr1 - gr0) * (j->tw + 1); /* with each row's extra tile */
    input_block(j, gr0, gr1, v, base + j->off_strip, base + j->off_r);
    for (int64_t s = 0; s < 16; s++)
      j->prov->sgemm(1, 0, p->o, tiles, p->c, 1.0f, j->u + s * p->o * p->c, p->o,
                     v + s * p->c * j->tb, j->tb, 0.0f, m + s * p->o * j->tb, j->tb);
    output_block(j, gr0, gr1, m, base + j->off_out);
  }
}

static int64_t round16(int64_t x) { return (x + 15) / 16 * 16; }

const char *nkrt_conv_winograd_run(const nkrt_gemm_provider_t *prov, nkrt_pool_t *pool,
                                   int64_t workers, const nkrt_conv2d_params_t *p) {
  wino_job_t j = {.p = p, .prov = prov};
  j.th = cdiv(p->oh, 2);
  j.tw = cdiv(p->ow, 2);
  j.rows = p->n * j.th;
  j.sw = j.tw * 2 + 2;
  const int64_t want = workers > 1 ? TASKS_PER_WORKER * workers : 1;
  j.rb = max64(1, TARGET_TILES / (j.tw + 1));
  /* smaller blocks to keep every worker busy, but not below MIN_TILES: U is
   * packed again by every product, and short products run slowly */
  if (cdiv(j.rows, j.rb) < want) j.rb = max64(cdiv(MIN_TILES, j.tw + 1), cdiv(j.rows, want));
  j.rb = min64(j.rb, j.rows);
  j.tb = j.rb * (j.tw + 1);
  const int64_t blocks = cdiv(j.rows, j.rb);
  j.off_m = round16(16 * p->c * j.tb);
  j.off_strip = j.off_m + round16(16 * p->o * j.tb);
  j.off_r = j.off_strip + round16(8 * j.tb);
  j.off_out = j.off_r + round16(8 * j.tb + j.sw); /* 4 x 2 phase rows, one input row */
  j.per_worker = max64(j.off_out + round16(12 * j.tb + j.sw), 21 * p->o); /* or the taps */
  /* the pool may run a task on any of its workers: one scratch each */
  const int64_t slots = workers > 1 ? workers : 1;
  const double u_bytes = 16.0 * (double)p->o * (double)p->c * sizeof(float);
  const double s_bytes = (double)slots * (double)j.per_worker * sizeof(float);
  if (u_bytes > 0x1p40 || s_bytes > 0x1p40) return "conv2d: out of host memory for its columns";
  j.u = nkrt_gemm_buffer_get((uint64_t)u_bytes);
  if (!j.u) return "conv2d: out of host memory for its columns";
  j.scratch = nkrt_gemm_buffer_get((uint64_t)slots * (uint64_t)j.per_worker * sizeof(float));
  if (!j.scratch) {
    nkrt_gemm_buffer_put(j.u);
    return "conv2d: out of host memory for its columns";
  }
  if (workers > 1 && p->c > 1)
    nkrt_pool_parallel_for(pool, p->c, max64(1, p->c / (TASKS_PER_WORKER * workers)),
                           weights_range, &j);
  else
    weights_range(&j, 0, p->c, 0);
  if (workers > 1 && blocks > 1)
    nkrt_pool_parallel_for(pool, blocks, 1, block_range, &j);
  else
    block_range(&j, 0, blocks, 0);
  nkrt_gemm_buffer_put(j.scratch);
  nkrt_gemm_buffer_put(j.u);
  return NULL;
}
