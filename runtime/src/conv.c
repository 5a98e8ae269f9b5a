/* conv.c - the 2-D convolution lent to kernels (nkrt_kernel_lib_t.conv2d).
 *
 * float32 throughout, NCHW input, OIHW weights, NCHW output, with the bias
 * and an activation (ReLU, clamp) applied to each output block while it is
 * still in cache. Several ways, all on the runtime's worker pool (the pool
 * GEMM uses) through nkrt_pool_parallel_for:
 *
 * - One input channel per output channel (depthwise): a direct loop per
 *   output plane, no GEMM. Stride 1: the plane is copied with its zero
 *   border into a per-worker buffer and each tap is one long vectorised
 *   multiply-add over it; other strides add shifted input rows to each
 *   output row.
 * - 1x1, stride 1, no padding (pointwise): per image and group the output
 *   is W[o, c] @ X[c, h*w], the input read in place as the GEMM's B.
 * - Dense 3x3, stride 1, with channels and positions enough: Winograd
 *   F(2x2, 3x3) (conv_winograd.c, nkrt_conv_winograd_applies).
 * - Otherwise im2col + GEMM, blocked: the output columns (positions) are cut
 *   into chunks whose column matrix (k = c/groups * kh * kw rows by the
 *   chunk) stays in cache; a task builds its chunk's columns in a per-worker
 *   buffer and multiplies the group's weights by it with the provider's
 *   single-threaded sgemm, writing the output rows in place. When positions
 *   are too few to keep every worker busy (late layers of a CNN), the
 *   output channels are cut too, and the columns are built once, in
 *   parallel, into a shared buffer first.
 * - Wide (groups == 1, weights over 1 MB or an image's columns within one
 *   chunk): every image's columns side by side, then one GEMM on the pool
 *   (gemm.c splits it into panels) - the weights are read once, not once
 *   per chunk - then the product is scattered into the images' planes with
 *   the bias and activation.
 *
 * The split follows gemm.c: small convolutions run on the calling thread
 * (waking the pool costs tens of microseconds here). docs/gemm.md has the
 * measurements. */
#include <stdlib.h>
#include <string.h>

#include "conv.h"
#include "conv_direct.h"
#include "conv_winograd.h"

/* Below this many flops a convolution runs on the calling thread. */
#define CONV_PARALLEL_MIN_FLOPS (4.0 * 1024 * 1024)
/* A chunk's column matrix is at most about this many floats (1 MB): it
 * stays in a core's L2 cache while the GEMM reads it. */
#define COLS_TARGET_FLOATS (256 * 1024)
#define MIN_CHUNK_COLS 32
#define MAX_CHUNK_COLS 4096
#define MIN_CHUNK_ROWS 16
/* Weights larger than this (floats: 1 MB) are not re-read per chunk: the
 * columns of every image go to one GEMM instead, if they take at most
 * WIDE_MAX_BYTES. */
#define WIDE_MIN_WEIGHTS (256.0 * 1024)
#define WIDE_MAX_BYTES (256.0 * 1024 * 1024)
#define WIDE_TRANSPOSED_BELOW 128
/* Tasks per worker the split aims at, so a worker that wakes late leaves its
 * share to the others. */
#define TASKS_PER_WORKER 2

/* The hot loops are compiled for AVX-512 and AVX2+FMA too (the runtime
 * itself targets plain x86-64), the CPU's best picked at load. */
#if defined(__x86_64__) && defined(__GNUC__)
#define NKRT_CONV_SIMD NKRT_HOT __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define NKRT_CONV_SIMD NKRT_HOT
#endif

typedef struct conv_job {
  const nkrt_conv2d_params_t *p;
  const nkrt_gemm_provider_t *prov;
  int64_t cg, og, k, pos; /* channels per group in and out, k = cg*kh*kw, pos = oh*ow */
  int64_t pc, np;         /* positions per chunk, chunks */
  int64_t oc, no;         /* output channels per chunk, chunks */
  bool pointwise;         /* the input is its own column matrix */
  bool shared;            /* cols holds every (image, group)'s columns */
  float *cols;            /* per worker k x pc, or shared n*groups x k x pos */
  int64_t pad_h, pad_w;   /* depthwise, stride 1: the padded plane's extent */
  int64_t per_worker;     /* depthwise, stride 1: floats of cols per worker */
  float *tmp;             /* wide, batches: the product [o, n * pos] */
  bool transposed;        /* wide: tmp is the product transposed, [n * pos, o] */
} conv_job_t;

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Bias and activation over a rows x cols block of y (rows = output channels
 * from o0, leading dimension ld). */
static NKRT_CONV_SIMD void epilogue(const nkrt_conv2d_params_t *p, float *y, int64_t ld, int64_t o0,
                              int64_t rows, int64_t cols) {
  const float lo = p->act_lo, hi = p->act_hi;
  for (int64_t r = 0; r < rows; r++) {
    float *yr = y + r * ld;
    const float b = p->bias ? p->bias[o0 + r] : 0.0f;
    switch (p->activation) {
      case NKRT_ACT_RELU:
        for (int64_t i = 0; i < cols; i++) {
          float v = yr[i] + b;
          yr[i] = v < 0.0f ? 0.0f : v;
        }
        break;
      case NKRT_ACT_CLAMP:
        for (int64_t i = 0; i < cols; i++) {
          float v = yr[i] + b;
          v = v < lo ? lo : v;
          yr[i] = v > hi ? hi : v;
        }
        break;
      default:
        if (p->bias)
          for (int64_t i = 0; i < cols; i++) yr[i] += b;
    }
  }
}

/* ---- depthwise: one input channel per output channel ------------------- */

static NKRT_CONV_SIMD void depthwise_plane(const conv_job_t *j, int64_t plane) {
  const nkrt_conv2d_params_t *p = j->p;
  const int64_t n = plane / p->o, o = plane % p->o;
  const float *xc = p->x + (n * p->c + o / j->og) * p->h * p->w;
  const float *wo = p->weight + o * p->kh * p->kw;
  float *yp = p->y + plane * j->pos;
  const int64_t W = p->w, OW = p->ow, sw = p->stride_w;
  const float b = p->bias ? p->bias[o] : 0.0f;
  for (int64_t oy = 0; oy < p->oh; oy++) {
    float *yr = yp + oy * OW;
    for (int64_t ox = 0; ox < OW; ox++) yr[ox] = b;
    for (int64_t a = 0; a < p->kh; a++) {
      const int64_t iy = oy * p->stride_h - p->pad_top + a * p->dil_h;
      if (iy < 0 || iy >= p->h) continue;
      const float *xr = xc + iy * W;
      for (int64_t t = 0; t < p->kw; t++) {
        const float wv = wo[a * p->kw + t];
        const int64_t off = t * p->dil_w - p->pad_left; /* input column of ox = 0 */
        /* ox with 0 <= ox * sw + off < W */
        const int64_t lo = off >= 0 ? 0 : cdiv(-off, sw);
        const int64_t hi = off >= W ? 0 : min64(OW, (W - 1 - off) / sw + 1);
        if (lo >= hi) continue;
        if (sw == 1) {
          const float *xs = xr + (off + lo);
          float *ys = yr + lo;
          for (int64_t i = 0; i < hi - lo; i++) ys[i] += wv * xs[i];
        } else {
          for (int64_t ox = lo; ox < hi; ox++) yr[ox] += wv * xr[ox * sw + off];
        }
      }
    }
  }
  if (p->activation != NKRT_ACT_NONE) {
    nkrt_conv2d_params_t q = *p;
    q.bias = NULL; /* already added */
    epilogue(&q, yp, j->pos, o, 1, j->pos);
  }
}

/* Stride 1 (j->cols: per worker, a zero-bordered copy of the input plane
 * and an accumulator, both wp wide): the output is computed wp wide, so each
 * tap is one long multiply-add over the whole plane (wp - ow columns of
 * every row are discarded), then copied out with the bias and activation. */
static NKRT_CONV_SIMD void depthwise_plane_padded(const conv_job_t *j, int64_t plane, uint32_t worker) {
  const nkrt_conv2d_params_t *p = j->p;
  const int64_t n = plane / p->o, o = plane % p->o;
  const int64_t wp = j->pad_w, hp = j->pad_h, OW = p->ow, OH = p->oh;
  float *xp = j->cols + (int64_t)worker * j->per_worker, *acc = xp + hp * wp + wp;
  const float *xc = p->x + (n * p->c + o / j->og) * p->h * p->w;
  const float *wo = p->weight + o * p->kh * p->kw;
  /* zero border; rows and columns of the input past the padded plane are never read */
  memset(xp, 0, (size_t)(hp * wp + wp) * sizeof(float));
  for (int64_t iy = 0; iy < p->h; iy++) {
    int64_t ry = iy + p->pad_top;
    if (ry >= hp) break;
    int64_t cols = min64(p->w, wp - p->pad_left);
    if (cols > 0) memcpy(xp + ry * wp + p->pad_left, xc + iy * p->w, (size_t)cols * sizeof(float));
  }
  const int64_t len = (OH - 1) * wp + OW;
  for (int64_t i = 0; i < len; i++) acc[i] = 0.0f;
  for (int64_t a = 0; a < p->kh; a++)
    for (int64_t t = 0; t < p->kw; t++) {
      const float wv = wo[a * p->kw + t];
      const float *xs = xp + a * p->dil_h * wp + t * p->dil_w;
      for (int64_t i = 0; i < len; i++) acc[i] += wv * xs[i];
    }
  float *yp = p->y + plane * j->pos;
  for (int64_t oy = 0; oy < OH; oy++) memcpy(yp + oy * OW, acc + oy * wp, (size_t)OW * sizeof(float));
  epilogue(p, yp, j->pos, o, 1, j->pos);
}

static void depthwise_range(void *arg, int64_t begin, int64_t end, uint32_t worker) {
  const conv_job_t *j = arg;
  for (int64_t t = begin; t < end; t++) {
    if (j->cols)
      depthwise_plane_padded(j, t, worker);
    else
      depthwise_plane(j, t);
  }
}

/* ---- im2col ------------------------------------------------------------ */

/* Rows [r0, r1) (of k) and positions [p0, p1) of one (image, group)'s column
 * matrix, xg its first input channel, into dst (row r0, position p0 first;
 * leading dimension ld). */
static NKRT_CONV_SIMD void im2col(const conv_job_t *j, const float *xg, int64_t r0, int64_t r1,
                            int64_t p0, int64_t p1, float *dst, int64_t ld) {
  const nkrt_conv2d_params_t *p = j->p;
  const int64_t khw = p->kh * p->kw, W = p->w, OW = p->ow, sw = p->stride_w;
  for (int64_t r = r0; r < r1; r++) {
    const int64_t ci = r / khw, a = (r % khw) / p->kw, t = r % p->kw;
    const float *xc = xg + ci * p->h * W;
    float *d = dst + (r - r0) * ld - p0; /* d[q]: position q */
    const int64_t off = t * p->dil_w - p->pad_left;
    const int64_t lo = off >= 0 ? 0 : cdiv(-off, sw);
    const int64_t hi = off >= W ? 0 : min64(OW, (W - 1 - off) / sw + 1);
    for (int64_t q = p0; q < p1;) {
      const int64_t oy = q / OW, ox0 = q % OW, ox1 = min64(OW, p1 - oy * OW);
      float *dr = d + oy * OW; /* dr[ox] */
      const int64_t iy = oy * p->stride_h - p->pad_top + a * p->dil_h;
      if (iy < 0 || iy >= p->h) {
        memset(dr + ox0, 0, (size_t)(ox1 - ox0) * sizeof(float));
      } else {
        const int64_t l = min64(max64(lo, ox0), ox1), h = max64(min64(hi, ox1), l);
        const float *xr = xc + iy * W;
        if (l > ox0) memset(dr + ox0, 0, (size_t)(l - ox0) * sizeof(float));
        if (sw == 1) {
          if (h > l) memcpy(dr + l, xr + (l + off), (size_t)(h - l) * sizeof(float));
        } else {
          for (int64_t ox = l; ox < h; ox++) dr[ox] = xr[ox * sw + off];
        }
        if (ox1 > h) memset(dr + h, 0, (size_t)(ox1 - h) * sizeof(float));
      }
      q = oy * OW + ox1;
    }
  }
}

/* Shared columns: task t is row t % k of (image, group) t / k, every position. */
static void cols_range(void *arg, int64_t begin, int64_t end, uint32_t worker) {
  NKRT_UNUSED(worker);
  const conv_job_t *j = arg;
  const nkrt_conv2d_params_t *p = j->p;
  for (int64_t t = begin; t < end;) {
    const int64_t ig = t / j->k, r0 = t % j->k, r1 = min64(j->k, r0 + (end - t));
    const float *xg = p->x + ((ig / p->groups) * p->c + (ig % p->groups) * j->cg) * p->h * p->w;
    im2col(j, xg, r0, r1, 0, j->pos, j->cols + (ig * j->k + r0) * j->pos, j->pos);
    t += r1 - r0;
  }
}

/* ---- GEMM tasks: (image, group, position chunk, channel chunk) ---------- */

static void gemm_task(const conv_job_t *j, int64_t t, uint32_t worker) {
  const nkrt_conv2d_params_t *p = j->p;
  const int64_t oi = t % j->no, pi = (t / j->no) % j->np, ig = t / (j->no * j->np);
  const int64_t n = ig / p->groups, g = ig % p->groups;
  const int64_t p0 = pi * j->pc, p1 = min64(j->pos, p0 + j->pc);
  const int64_t o0 = oi * j->oc, o1 = min64(j->og, o0 + j->oc);
  if (p0 >= p1 || o0 >= o1) return;
  const int64_t ofirst = g * j->og + o0;
  float *y = p->y + (n * p->o + ofirst) * j->pos + p0;
  if (j->k == 0) { /* no input channels: the bias alone */
    for (int64_t r = 0; r < o1 - o0; r++)
      memset(y + r * j->pos, 0, (size_t)(p1 - p0) * sizeof(float));
  } else {
    const float *xg = p->x + (n * p->c + g * j->cg) * p->h * p->w;
    const float *b;
    int64_t ldb;
    if (j->pointwise) {
      b = xg + p0;
      ldb = j->pos;
    } else if (j->shared) {
      b = j->cols + ig * j->k * j->pos + p0;
      ldb = j->pos;
    } else {
      float *cols = j->cols + (int64_t)worker * j->k * j->pc;
      im2col(j, xg, 0, j->k, p0, p1, cols, p1 - p0);
      b = cols;
      ldb = p1 - p0;
    }
    j->prov->sgemm(0, 0, o1 - o0, p1 - p0, j->k, 1.0f, p->weight + ofirst * j->k, j->k, b, ldb,
                   0.0f, y, j->pos);
  }
  epilogue(p, y, j->pos, ofirst, o1 - o0, p1 - p0);
}

static void gemm_range(void *arg, int64_t begin, int64_t end, uint32_t worker) {
  for (int64_t t = begin; t < end; t++) gemm_task(arg, t, worker);
}

/* ---- wide: one GEMM over every image's columns (groups == 1) ------------- */

/* Task t is row t % k of image t / k's columns, into [k, n * pos]. */
static void wide_cols_range(void *arg, int64_t begin, int64_t end, uint32_t worker) {
  NKRT_UNUSED(worker);
  const conv_job_t *j = arg;
  const nkrt_conv2d_params_t *p = j->p;
  const int64_t ld = p->n * j->pos;
  for (int64_t t = begin; t < end;) {
    const int64_t n = t / j->k, r0 = t % j->k, r1 = min64(j->k, r0 + (end - t));
    im2col(j, p->x + n * p->c * p->h * p->w, r0, r1, 0, j->pos,
           j->cols + r0 * ld + n * j->pos, ld);
    t += r1 - r0;
  }
}

/* Task t is output plane t (image t / o, channel t % o): from the product
 * [o, n * pos] (j->tmp; NULL: the product is y itself) with bias and activation. */
static void wide_out_range(void *arg, int64_t begin, int64_t end, uint32_t worker) {
  NKRT_UNUSED(worker);
  const conv_job_t *j = arg;
  const nkrt_conv2d_params_t *p = j->p;
  for (int64_t t = begin; t < end; t++) {
    const int64_t n = t / p->o, o = t % p->o;
    float *y = p->y + t * j->pos;
    if (j->transposed) { /* the product is [n * pos, o] */
      const float *src = j->tmp + n * j->pos * p->o + o;
      for (int64_t q = 0; q < j->pos; q++) y[q] = src[q * p->o];
    } else if (j->tmp) {
      memcpy(y, j->tmp + o * p->n * j->pos + n * j->pos, (size_t)j->pos * sizeof(float));
    }
    epilogue(p, y, j->pos, o, 1, j->pos);
  }
}

static const char *run_wide(conv_job_t *j, nkrt_pool_t *pool, int64_t workers) {
  const nkrt_conv2d_params_t *p = j->p;
  const int64_t np = p->n * j->pos;
  j->cols = nkrt_gemm_buffer_get((uint64_t)j->k * (uint64_t)np * sizeof(float));
  if (!j->cols) return "conv2d: out of host memory for its columns";
  /* Few positions in all: the product transposed, [n * pos, o] = cols^T @ w^T,
   * so the GEMM's long side is the channels (measured, built-in kernel, one
   * thread: 49 x 512 x 4608 at 115 GF/s against 91 for 512 x 49 x 4608). */
  j->transposed = np < WIDE_TRANSPOSED_BELOW;
  if (p->n > 1 || j->transposed) {
    j->tmp = nkrt_gemm_buffer_get((uint64_t)p->o * (uint64_t)np * sizeof(float));
    if (!j->tmp) {
      nkrt_gemm_buffer_put(j->cols);
      return "conv2d: out of host memory for its columns";
    }
  }
  const int64_t rows = p->n * j->k;
  if (workers > 1)
    nkrt_pool_parallel_for(pool, rows, max64(1, rows / (TASKS_PER_WORKER * workers)),
                           wide_cols_range, j);
  else
    wide_cols_range(j, 0, rows, 0);
  nkrt_pool_t *gpool = workers > 1 ? pool : NULL;
  const char *err =
      j->transposed
          ? nkrt_gemm_sgemm_job(j->prov, gpool, NULL, 0, 1, 1, 1, np, p->o, j->k, 1.0f, j->cols,
                                np, 0, p->weight, j->k, 0, 0.0f, j->tmp, p->o, 0)
          : nkrt_gemm_sgemm_job(j->prov, gpool, NULL, 0, 1, 0, 0, p->o, np, j->k, 1.0f,
                                p->weight, j->k, 0, j->cols, np, 0, 0.0f,
                                j->tmp ? j->tmp : p->y, np, 0);
  const int64_t planes = p->n * p->o;
  if (!err && (j->tmp || p->bias || p->activation != NKRT_ACT_NONE)) {
    if (workers > 1)
      nkrt_pool_parallel_for(pool, planes, max64(1, planes / (TASKS_PER_WORKER * workers)),
                             wide_out_range, j);
    else
      wide_out_range(j, 0, planes, 0);
  }
  nkrt_gemm_buffer_put(j->cols);
  if (j->tmp) nkrt_gemm_buffer_put(j->tmp);
  return err;
}

/* ---- entry ----------------------------------------------------------------- */

static const char *check(const nkrt_conv2d_params_t *p) {
  if (!p || p->struct_size < sizeof(nkrt_conv2d_params_t))
    return "conv2d given a parameter block older than this runtime's (struct_size too small)";
  if (p->n < 0 || p->c < 0 || p->h < 0 || p->w < 0 || p->o < 0 || p->oh < 0 || p->ow < 0 ||
      p->kh < 1 || p->kw < 1 || p->groups < 1 || p->stride_h < 1 || p->stride_w < 1 ||
      p->dil_h < 1 || p->dil_w < 1)
    return "conv2d given a negative size, or a kernel size, groups, stride or dilation below 1";
  if (p->c % p->groups || p->o % p->groups)
    return "conv2d channels (in and out) must be multiples of groups";
  if (p->activation > NKRT_ACT_CLAMP) return "conv2d given an unknown activation";
  if (p->n && p->o && p->oh && p->ow && (!p->y || !p->weight || (p->c && p->h && p->w && !p->x)))
    return "conv2d given a NULL tensor";
  return NULL;
}

const char *nkrt_conv2d_run(const nkrt_gemm_provider_t *prov, nkrt_pool_t *pool,
                            const nkrt_conv2d_params_t *p) {
  const char *err = check(p);
  if (err) return err;
  if (!p->n || !p->o || !p->oh || !p->ow) return NULL;
  conv_job_t j = {.p = p, .prov = prov};
  j.cg = p->c / p->groups;
  j.og = p->o / p->groups;
  j.k = j.cg * p->kh * p->kw;
  j.pos = p->oh * p->ow;
  if (p->h == 0 || p->w == 0) j.k = 0; /* every tap reads padding */
  const double flops = 2.0 * (double)p->n * (double)p->o * (double)j.pos * (double)(j.k ? j.k : 1);
  const int64_t workers =
      pool && flops >= CONV_PARALLEL_MIN_FLOPS ? (int64_t)nkrt_pool_size(pool) : 1;

  if (j.cg == 1 && j.k) { /* depthwise (and any one-channel-per-group convolution) */
    const int64_t planes = p->n * p->o;
    if (p->stride_h == 1 && p->stride_w == 1 && p->pad_top >= 0 && p->pad_left >= 0) {
      /* the padded plane: every tap of every output inside it */
      j.pad_h = p->oh + p->dil_h * (p->kh - 1);
      j.pad_w = p->ow + p->dil_w * (p->kw - 1);
      j.per_worker = (j.pad_h * j.pad_w + j.pad_w + p->oh * j.pad_w + 15) / 16 * 16;
      if ((double)workers * (double)j.per_worker * sizeof(float) < 0x1p40)
        j.cols = nkrt_gemm_buffer_get((uint64_t)workers * (uint64_t)j.per_worker * sizeof(float));
      /* without the buffer: the direct loop */
    }
    if (workers > 1 && planes > 1)
      nkrt_pool_parallel_for(pool, planes, 1, depthwise_range, &j);
    else
      depthwise_range(&j, 0, planes, 0);
    if (j.cols) nkrt_gemm_buffer_put(j.cols);
    return NULL;
  }

  if (nkrt_conv_direct_applies(p)) { /* few input channels: conv_direct.c */
    nkrt_conv_direct_run(pool, workers, p);
    return NULL;
  }
  if (j.k && nkrt_conv_winograd_applies(p)) /* dense 3x3, stride 1 (conv_winograd.c) */
    return nkrt_conv_winograd_run(prov, pool, workers, p);

  j.pointwise = p->kh == 1 && p->kw == 1 && p->stride_h == 1 && p->stride_w == 1 &&
                p->pad_top == 0 && p->pad_left == 0 && p->oh == p->h && p->ow == p->w;
  const int64_t ig = p->n * p->groups, want = workers > 1 ? TASKS_PER_WORKER * workers : 1;
  /* positions per chunk: the chunk's columns stay in cache */
  j.pc = j.k ? COLS_TARGET_FLOATS / j.k : MAX_CHUNK_COLS;
  j.pc = min64(MAX_CHUNK_COLS, max64(MIN_CHUNK_COLS, j.pc / 16 * 16));
  /* One GEMM over every image's columns when the weights would be re-read
   * from memory by every chunk (more than WIDE_MIN_WEIGHTS floats) or an
   * image's columns fit one chunk anyway (7x7 maps late in a CNN). */
  if (p->groups == 1 && j.k &&
      ((double)p->o * (double)j.k > WIDE_MIN_WEIGHTS || j.pos <= j.pc) &&
      (double)j.k * (double)p->n * (double)j.pos * sizeof(float) <= WIDE_MAX_BYTES)
    return run_wide(&j, pool, workers);
  if (ig * cdiv(j.pos, j.pc) < want) /* smaller chunks, to keep every worker busy */
    j.pc = max64(MIN_CHUNK_COLS, cdiv(cdiv(j.pos, cdiv(want, ig)), 16) * 16);
  j.pc = min64(j.pc, j.pos);
  j.np = cdiv(j.pos, j.pc);
  j.no = 1;
  j.oc = j.og;
  if (ig * j.np < want && j.og >= 2 * MIN_CHUNK_ROWS) { /* few positions: cut channels too */
    int64_t parts = min64(cdiv(want, ig * j.np), j.og / MIN_CHUNK_ROWS);
    j.oc = cdiv(cdiv(j.og, parts), 8) * 8;
    j.no = cdiv(j.og, j.oc);
  }
  j.shared = !j.pointwise && j.k && j.no > 1;
  if (j.k && !j.pointwise) {
    double floats = j.shared ? (double)ig * (double)j.k * (double)j.pos
                             : (double)workers * (double)j.k * (double)j.pc;
    if (floats * sizeof(float) > 0x1p62) return "conv2d: out of host memory for its columns";
    j.cols = nkrt_gemm_buffer_get((uint64_t)floats * sizeof(float));
    if (!j.cols) return "conv2d: out of host memory for its columns";
  }
  if (j.shared) {
    const int64_t rows = ig * j.k;
    if (workers > 1)
      nkrt_pool_parallel_for(pool, rows, max64(1, rows / (TASKS_PER_WORKER * workers)),
                             cols_range, &j);
    else
      cols_range(&j, 0, rows, 0);
  }
  const int64_t tasks = ig * j.np * j.no;
  if (workers > 1 && tasks > 1)
    nkrt_pool_parallel_for(pool, tasks, 1, gemm_range, &j);
  else
    gemm_range(&j, 0, tasks, 0);
  if (j.cols) nkrt_gemm_buffer_put(j.cols);
  return NULL;
}
