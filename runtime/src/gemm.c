/* gemm.c - the matrix routines lent to kernels (nkrt_kernel_lib_t).
 *
 * Every call is cut into panels - the rows of C (M) or, when C is wider than
 * tall, its columns (N) - and, for batches, into whole products; the pieces
 * run on the runtime's worker pool (nkrt_pool_parallel_for), each through a
 * single-threaded provider. So GEMM libraries never start threads of their
 * own and one pool serves the process. Small products run on the caller.
 *
 * Providers (gemm.h): "mkl" (Intel MKL from PyPI, dlopen'ed) when it can be
 * found, else "reference" (the blocked C kernel in gemm_ref.c). Chosen once,
 * at first use:
 *   NKRT_GEMM=auto|mkl|reference   which one (default auto: mkl, else reference;
 *       on a non-Intel CPU with AVX-512, reference, which is faster there than
 *       MKL's AVX2 code)
 *   NKRT_GEMM_LIBRARY=/path/libmkl_rt.so.3   use exactly this library
 *   NKRT_GEMM_PATH=dir1:dir2       directories searched for libmkl_rt.so.3/.2,
 *       then $VIRTUAL_ENV/lib, $CONDA_PREFIX/lib and the loader's own search.
 * The Python layer sets NKRT_GEMM_PATH to <sys.prefix>/lib, where
 * `pip install mkl` puts the library. docs/gemm.md has the measurements.
 *
 * float16/bfloat16: with a native routine (MKL's cblas_gemm_bf16bf16f32 /
 * f16f16f32) a panel is computed into a float32 buffer and narrowed into C;
 * otherwise the panel's operands are widened to float32 first. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gemm.h"
#include "log.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define NKRT_GEMM_X86 1
#endif

/* Below this many flops a call runs on the calling thread: waking the pool
 * costs tens of microseconds on a virtualised host, so splitting only pays
 * from about 256^3 up (measured: docs/gemm.md). */
#define PARALLEL_MIN_FLOPS (24.0 * 1024 * 1024)
/* Products with fewer rows than this never use packed weights: below it the
 * library's matrix-vector paths do not pack B anyway (docs/gemm.md). */
#define PACK_MIN_ROWS 8
/* Panels are at least this many rows / columns. */
#define MIN_PANEL_ROWS 8
#define MIN_PANEL_COLS 64

/* ---- recycled panel buffers ---------------------------------------------- */

#define CACHE_SLOTS 8
#define CACHE_MAX_BYTES (64ull << 20) /* larger buffers are freed after use */

typedef struct buffer_header {
  uint64_t capacity;
  uint64_t pad[7]; /* keeps the payload 64-byte aligned */
} buffer_header_t;

static struct {
  pthread_mutex_t mu;
  buffer_header_t *slots[CACHE_SLOTS];
} cache = {.mu = PTHREAD_MUTEX_INITIALIZER};

void *nkrt_gemm_buffer_get(uint64_t bytes) {
  if (bytes > UINT64_MAX - 2 * sizeof(buffer_header_t)) return NULL;
  pthread_mutex_lock(&cache.mu);
  int best = -1;
  for (int i = 0; i < CACHE_SLOTS; i++) {
    buffer_header_t *h = cache.slots[i];
    if (h && h->capacity >= bytes && (best < 0 || h->capacity < cache.slots[best]->capacity))
      best = i;
  }
  buffer_header_t *h = NULL;
  if (best >= 0) {
    h = cache.slots[best];
    cache.slots[best] = NULL;
  }
  pthread_mutex_unlock(&cache.mu);
  if (!h) {
    uint64_t cap = (bytes + 63) & ~(uint64_t)63;
    if (cap > SIZE_MAX - sizeof(buffer_header_t)) return NULL;
    h = aligned_alloc(64, sizeof(buffer_header_t) + (size_t)cap);
    if (!h) return NULL;
    h->capacity = cap;
  }
  return h + 1;
}

void nkrt_gemm_buffer_put(void *buffer) {
  if (!buffer) return;
  buffer_header_t *h = (buffer_header_t *)buffer - 1;
  if (h->capacity <= CACHE_MAX_BYTES) {
    pthread_mutex_lock(&cache.mu);
    int victim = -1;
    for (int i = 0; i < CACHE_SLOTS && victim < 0; i++)
      if (!cache.slots[i]) victim = i;
    if (victim < 0) { /* full: replace the smallest if this one is larger */
      victim = 0;
      for (int i = 1; i < CACHE_SLOTS; i++)
        if (cache.slots[i]->capacity < cache.slots[victim]->capacity) victim = i;
      if (cache.slots[victim]->capacity >= h->capacity) victim = -1;
    }
    if (victim >= 0) {
      buffer_header_t *old = cache.slots[victim];
      cache.slots[victim] = h;
      h = old;
    }
    pthread_mutex_unlock(&cache.mu);
  }
  free(h);
}

/* ---- float16 / bfloat16 arrays ------------------------------------------- */

#ifdef NKRT_GEMM_X86
__attribute__((target("avx,f16c"))) static void half_widen_f16c(const uint16_t *s, float *d,
                                                                int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
  for (; i < n; i++) d[i] = nkrt_half_to_float(s[i]);
}

__attribute__((target("avx,f16c"))) static void half_narrow_f16c(const float *s, uint16_t *d,
                                                                 int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i *)(d + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; i++) d[i] = nkrt_float_to_half(s[i]);
}

static bool have_f16c(void) {
  static _Atomic int known = -1;
  int v = atomic_load_explicit(&known, memory_order_relaxed);
  if (v < 0) {
    __builtin_cpu_init();
    v = __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
    atomic_store_explicit(&known, v, memory_order_relaxed);
  }
  return v != 0;
}
#endif

/* bfloat16 <-> float32 over arrays, written for the vectoriser: AVX2 where
 * the CPU has it, the baseline ISA otherwise. */
#define NKRT_BF16_LOOPS(suffix, attr)                                                          \
  attr static void bf16_widen_##suffix(const uint16_t *restrict s, float *restrict d,          \
                                       int64_t n) {                                            \
    for (int64_t i = 0; i < n; i++) d[i] = nkrt_bf16_to_float(s[i]);                           \
  }                                                                                            \
  attr static void bf16_narrow_##suffix(const float *restrict s, uint16_t *restrict d,         \
                                        int64_t n) {                                           \
    for (int64_t i = 0; i < n; i++) d[i] = nkrt_float_to_bf16(s[i]);                           \
  }
NKRT_BF16_LOOPS(base, NKRT_HOT)
#ifdef NKRT_GEMM_X86
NKRT_BF16_LOOPS(avx2, NKRT_HOT __attribute__((target("avx2"))))

static bool have_avx2(void) {
  static _Atomic int known = -1;
  int v = atomic_load_explicit(&known, memory_order_relaxed);
  if (v < 0) {
    __builtin_cpu_init();
    v = __builtin_cpu_supports("avx2");
    atomic_store_explicit(&known, v, memory_order_relaxed);
  }
  return v != 0;
}
#endif

static void widen(uint32_t dtype, const uint16_t *s, float *d, int64_t n) {
  if (dtype == NKRT_DTYPE_BFLOAT16) {
#ifdef NKRT_GEMM_X86
    if (have_avx2()) {
      bf16_widen_avx2(s, d, n);
      return;
    }
#endif
    bf16_widen_base(s, d, n);
    return;
  }
#ifdef NKRT_GEMM_X86
  if (have_f16c()) {
    half_widen_f16c(s, d, n);
    return;
  }
#endif
  for (int64_t i = 0; i < n; i++) d[i] = nkrt_half_to_float(s[i]);
}

static void narrow(uint32_t dtype, const float *s, uint16_t *d, int64_t n) {
  if (dtype == NKRT_DTYPE_BFLOAT16) {
#ifdef NKRT_GEMM_X86
    if (have_avx2()) {
      bf16_narrow_avx2(s, d, n);
      return;
    }
#endif
    bf16_narrow_base(s, d, n);
    return;
  }
#ifdef NKRT_GEMM_X86
  if (have_f16c()) {
    half_narrow_f16c(s, d, n);
    return;
  }
#endif
  for (int64_t i = 0; i < n; i++) d[i] = nkrt_float_to_half(s[i]);
}

/* ---- provider selection ------------------------------------------------- */

/* Tries libmkl_rt.so.3 and .2 in each directory of the ':'-separated `list`,
 * each directory followed by `suffix`. */
static const nkrt_gemm_provider_t *mkl_in_list(const char *list, const char *suffix, char *why,
                                               size_t why_len) {
  static const char *const names[] = {"libmkl_rt.so.3", "libmkl_rt.so.2"};
  if (!list || !*list) return NULL;
  char path[4096];
  size_t slen = strlen(suffix);
  for (const char *s = list; *s;) {
    const char *e = strchr(s, ':');
    size_t len = e ? (size_t)(e - s) : strlen(s);
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
      size_t nlen = strlen(names[i]);
      if (len == 0 || len + slen + nlen + 2 > sizeof(path)) continue;
      memcpy(path, s, len);
      memcpy(path + len, suffix, slen);
      path[len + slen] = '/';
      memcpy(path + len + slen + 1, names[i], nlen + 1);
      if (access(path, R_OK) != 0) continue;
      const nkrt_gemm_provider_t *p = nkrt_gemm_mkl_open(path, why, why_len);
      if (p) return p;
    }
    if (!e) break;
    s = e + 1;
  }
  return NULL;
}

static const nkrt_gemm_provider_t *find_mkl(char *why, size_t why_len) {
  snprintf(why, why_len, "libmkl_rt.so.3/.2 not found (pip install mkl; see docs/gemm.md)");
  const char *lib = getenv("NKRT_GEMM_LIBRARY");
  if (lib && *lib) return nkrt_gemm_mkl_open(lib, why, why_len);
  const nkrt_gemm_provider_t *p = mkl_in_list(getenv("NKRT_GEMM_PATH"), "", why, why_len);
  if (!p) p = mkl_in_list(getenv("VIRTUAL_ENV"), "/lib", why, why_len);
  if (!p) p = mkl_in_list(getenv("CONDA_PREFIX"), "/lib", why, why_len);
  if (!p) {
    char ignored[256];
    p = nkrt_gemm_mkl_open(NULL, ignored, sizeof(ignored));
  }
  return p;
}

const nkrt_gemm_provider_t *nkrt_gemm_find(const char *name) {
  char why[512];
  if (!name) return NULL;
  if (strcmp(name, "reference") == 0) return &nkrt_gemm_reference;
  if (strcmp(name, "mkl") == 0) return find_mkl(why, sizeof(why));
  return NULL;
}

bool nkrt_gemm_builtin_preferred(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  return !__builtin_cpu_is("intel") && strcmp(nkrt_gemm_ref_isa(), "avx512f") == 0;
#else
  return false;
#endif
}

static const nkrt_gemm_provider_t *choose_provider(void) {
  const char *want = getenv("NKRT_GEMM");
  if (!want || !*want) want = "auto";
  const nkrt_gemm_provider_t *p = NULL;
  char why[512] = "";
  if (strcmp(want, "reference") == 0) {
    p = &nkrt_gemm_reference;
  } else if (strcmp(want, "auto") == 0 && nkrt_gemm_builtin_preferred()) {
    p = &nkrt_gemm_reference;
    if (nkrt_log_level() >= 2)
      fprintf(stderr, "[nkrt] NKRT_GEMM=auto: MKL not used on this non-Intel CPU with AVX-512 "
                      "(MKL runs its AVX2 code here; the built-in kernel is faster)\n");
  } else if (strcmp(want, "mkl") == 0 || strcmp(want, "auto") == 0) {
    p = find_mkl(why, sizeof(why));
    if (!p && strcmp(want, "mkl") == 0)
      fprintf(stderr,
              "[nkrt] NKRT_GEMM=mkl, but MKL cannot be used: %s; using the reference GEMM\n",
              why);
  } else {
    fprintf(stderr,
            "[nkrt] unknown NKRT_GEMM value '%s' (expected auto, mkl or reference); "
            "using the reference GEMM\n",
            want);
    p = &nkrt_gemm_reference;
  }
  if (!p) p = &nkrt_gemm_reference;
  if (nkrt_log_level() >= 2) {
    const char *d = p->description;
    if (p == &nkrt_gemm_reference)
      fprintf(stderr, "[nkrt] GEMM provider: reference (built-in blocked C kernel, %s)\n",
              nkrt_gemm_ref_isa());
    else
      fprintf(stderr, "[nkrt] GEMM provider: %s (%s)\n", p->name, d);
  }
  return p;
}

nkrt_status_t nkrt_gemm_check_env(void) {
  char why[512] = "";
  const char *want = getenv("NKRT_GEMM");
  if (want && *want && strcmp(want, "auto") != 0 && strcmp(want, "mkl") != 0 &&
      strcmp(want, "reference") != 0)
    return nkrt_status_make(NKRT_INVALID, "NKRT_GEMM: invalid value \"%.40s\" (expected auto, "
                            "mkl or reference; unset it for auto)", want);
  const char *lib = getenv("NKRT_GEMM_LIBRARY");
  if (lib && *lib && !nkrt_gemm_mkl_open(lib, why, sizeof(why)))
    return nkrt_status_make(NKRT_INVALID, "NKRT_GEMM_LIBRARY: \"%.200s\" cannot be used: %s "
                            "(name MKL's libmkl_rt.so, or unset it to search NKRT_GEMM_PATH)",
                            lib, why);
  if (want && strcmp(want, "mkl") == 0 && !find_mkl(why, sizeof(why)))
    return nkrt_status_make(NKRT_INVALID, "NKRT_GEMM=mkl, but MKL cannot be used: %s (install it, "
                            "or set NKRT_GEMM=auto for the built-in kernel)", why);
  return NULL;
}

static _Atomic(const nkrt_gemm_provider_t *) selected;

const nkrt_gemm_provider_t *nkrt_gemm_selected(void) {
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  const nkrt_gemm_provider_t *p = atomic_load_explicit(&selected, memory_order_acquire);
  if (p) return p;
  pthread_mutex_lock(&mu);
  p = atomic_load_explicit(&selected, memory_order_relaxed);
  if (!p) {
    p = choose_provider();
    atomic_store_explicit(&selected, p, memory_order_release);
  }
  pthread_mutex_unlock(&mu);
  return p;
}

void nkrt_gemm_reselect(void) { atomic_store(&selected, NULL); }

const char *nkrt_gemm_provider(void) { return nkrt_gemm_selected()->name; }

/* ---- splitting into panels -------------------------------------------- */

typedef struct gemm_job {
  const nkrt_gemm_provider_t *p;
  uint32_t dtype; /* NKRT_DTYPE_FLOAT32, FLOAT16 or BFLOAT16 */
  int ta, tb;
  int64_t m, n, k;
  float alpha, beta;
  const void *a, *b;
  void *c;
  int64_t lda, ldb, ldc, sa, sb, sc;
  int64_t parts;  /* panels per product */
  int64_t panel;  /* rows (or columns, split_n) per panel */
  bool split_n;
  nkrt_pack_cache_t *packs; /* float32, batch 1: B is a weight that may be packed */
  uint64_t exec_id;         /* the execution running the product */
  _Atomic bool failed;
} gemm_job_t;

/* One low-precision panel: rows x cols of C over the whole k. */
static bool lowp_panel(const gemm_job_t *g, const uint16_t *a, const uint16_t *b, uint16_t *c,
                       int64_t rows, int64_t cols) {
  int64_t k = g->k;
  bool native = g->p->gemm_lowp_f32 != NULL;
  double need = (double)rows * (double)cols + (double)rows * (double)k + (double)k * (double)cols;
  if (need * sizeof(float) > 0x1p62) return false; /* no such machine */
  uint64_t floats = (uint64_t)rows * (uint64_t)cols;
  if (!native) floats += (uint64_t)rows * (uint64_t)k + (uint64_t)k * (uint64_t)cols;
  float *ct = nkrt_gemm_buffer_get(floats * sizeof(float));
  if (!ct) return false;
  if (!native ||
      !g->p->gemm_lowp_f32(g->dtype, g->ta, g->tb, rows, cols, k, g->alpha, a, g->lda, b, g->ldb,
                           0.0f, ct, cols)) {
    if (native) { /* the provider lacks this dtype: widen after all */
      nkrt_gemm_buffer_put(ct);
      floats += (uint64_t)rows * (uint64_t)k + (uint64_t)k * (uint64_t)cols;
      ct = nkrt_gemm_buffer_get(floats * sizeof(float));
      if (!ct) return false;
    }
    /* Widen the operands keeping their stored orientation. */
    float *aw = ct + rows * cols, *bw = aw + rows * k;
    int64_t ldaw, ldbw;
    if (!g->ta) { /* rows x k */
      for (int64_t r = 0; r < rows; r++) widen(g->dtype, a + r * g->lda, aw + r * k, k);
      ldaw = k;
    } else { /* k x rows */
      for (int64_t q = 0; q < k; q++) widen(g->dtype, a + q * g->lda, aw + q * rows, rows);
      ldaw = rows;
    }
    if (!g->tb) { /* k x cols */
      for (int64_t q = 0; q < k; q++) widen(g->dtype, b + q * g->ldb, bw + q * cols, cols);
      ldbw = cols;
    } else { /* cols x k */
      for (int64_t j = 0; j < cols; j++) widen(g->dtype, b + j * g->ldb, bw + j * k, k);
      ldbw = k;
    }
    g->p->sgemm(g->ta, g->tb, rows, cols, k, g->alpha, aw, ldaw, bw, ldbw, 0.0f, ct, cols);
  }
  for (int64_t r = 0; r < rows; r++) {
    float *t = ct + r * cols;
    uint16_t *cr = c + r * g->ldc;
    if (g->beta != 0.0f) {
      /* C = narrow(alpha * A @ B + beta * C), summed in float32 */
      for (int64_t j = 0; j < cols; j++) {
        float old = g->dtype == NKRT_DTYPE_BFLOAT16 ? nkrt_bf16_to_float(cr[j])
                                                    : nkrt_half_to_float(cr[j]);
        t[j] += g->beta * old;
      }
    }
    narrow(g->dtype, t, cr, cols);
  }
  nkrt_gemm_buffer_put(ct);
  return true;
}

static void run_task(gemm_job_t *g, int64_t t) {
  int64_t bi = t / g->parts, part = t % g->parts;
  int64_t i0 = 0, i1 = g->m, j0 = 0, j1 = g->n;
  if (g->split_n) {
    j0 = part * g->panel;
    j1 = j0 + g->panel < g->n ? j0 + g->panel : g->n;
  } else {
    i0 = part * g->panel;
    i1 = i0 + g->panel < g->m ? i0 + g->panel : g->m;
  }
  if (i0 >= i1 || j0 >= j1) return;
  int64_t aoff = bi * g->sa + (g->ta ? i0 : i0 * g->lda);
  int64_t boff = bi * g->sb + (g->tb ? j0 * g->ldb : j0);
  int64_t coff = bi * g->sc + i0 * g->ldc + j0;
  if (g->dtype == NKRT_DTYPE_FLOAT32) {
    const float *a = (const float *)g->a + aoff, *b = (const float *)g->b + boff;
    float *c = (float *)g->c + coff;
    void *entry = NULL;
    const float *packed = g->packs ? nkrt_pack_acquire(g->packs, g->p, g->exec_id, g->tb,
                                                       i1 - i0, j1 - j0, g->k, g->alpha, b,
                                                       g->ldb, &entry)
                                   : NULL;
    bool done = false;
    if (packed) {
      done = g->p->compute_packed_b(g->ta, i1 - i0, j1 - j0, g->k, a, g->lda, packed, g->beta, c,
                                    g->ldc);
      nkrt_pack_release(g->packs, entry);
    }
    if (!done)
      g->p->sgemm(g->ta, g->tb, i1 - i0, j1 - j0, g->k, g->alpha, a, g->lda, b, g->ldb, g->beta,
                  c, g->ldc);
  } else if (!lowp_panel(g, (const uint16_t *)g->a + aoff, (const uint16_t *)g->b + boff,
                         (uint16_t *)g->c + coff, i1 - i0, j1 - j0)) {
    atomic_store(&g->failed, true);
  }
}

static void run_range(void *arg, int64_t begin, int64_t end, uint32_t worker) {
  NKRT_UNUSED(worker);
  for (int64_t t = begin; t < end; t++) run_task(arg, t);
}

/* C = beta * C for every product (k == 0 or alpha == 0: A and B unread). */
static void scale_only(const gemm_job_t *g, int64_t batch) {
  for (int64_t bi = 0; bi < batch; bi++) {
    for (int64_t i = 0; i < g->m; i++) {
      int64_t off = bi * g->sc + i * g->ldc;
      if (g->dtype == NKRT_DTYPE_FLOAT32) {
        float *r = (float *)g->c + off;
        for (int64_t j = 0; j < g->n; j++) r[j] = g->beta == 0.0f ? 0.0f : g->beta * r[j];
      } else {
        uint16_t *r = (uint16_t *)g->c + off;
        for (int64_t j = 0; j < g->n; j++) {
          float v = 0.0f;
          if (g->beta != 0.0f)
            v = g->beta * (g->dtype == NKRT_DTYPE_BFLOAT16 ? nkrt_bf16_to_float(r[j])
                                                           : nkrt_half_to_float(r[j]));
          r[j] = g->dtype == NKRT_DTYPE_BFLOAT16 ? nkrt_float_to_bf16(v) : nkrt_float_to_half(v);
        }
      }
    }
  }
}

/* BLAS rules: a leading dimension covers a stored row (and is >= 1). A
 * matrix stored as a single row never uses its leading dimension, so any
 * value (a broadcast 0, say) is made legal there rather than refused. */
static const char *check_args(int64_t batch, int ta, int tb, int64_t m, int64_t n, int64_t k,
                              int64_t *lda, int64_t *ldb, int64_t *ldc) {
  if (batch < 0 || m < 0 || n < 0 || k < 0) return "GEMM given a negative batch or dimension";
  if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1)) return "GEMM transpose flags must be 0 or 1";
  int64_t arows = ta ? k : m, acols = ta ? m : k, brows = tb ? n : k, bcols = tb ? k : n;
  int64_t amin = acols > 1 ? acols : 1, bmin = bcols > 1 ? bcols : 1, cmin = n > 1 ? n : 1;
  if (arows <= 1 && *lda < amin) *lda = amin;
  if (brows <= 1 && *ldb < bmin) *ldb = bmin;
  if (m <= 1 && *ldc < cmin) *ldc = cmin;
  if (*lda < amin || *ldb < bmin || *ldc < cmin) return "GEMM leading dimension smaller than a row";
  return NULL;
}

static const char *run_job(gemm_job_t *g, nkrt_pool_t *pool, int64_t batch) {
  if (batch == 0 || g->m == 0 || g->n == 0) return NULL;
  if (g->k == 0 || g->alpha == 0.0f) {
    scale_only(g, batch);
    return NULL;
  }
  double flops = 2.0 * (double)g->m * (double)g->n * (double)g->k * (double)batch;
  int64_t workers = pool ? (int64_t)nkrt_pool_size(pool) : 1;
  g->parts = 1;
  g->split_n = g->n > g->m; /* split the larger side: the other operand is re-read */
  g->panel = g->split_n ? g->n : g->m;
  if (workers > 1 && flops >= PARALLEL_MIN_FLOPS && batch < 2 * workers) {
    /* float32: two panels per worker, so a worker that wakes late (or shares
     * its CPU) leaves its second panel to the others. Native low precision
     * (AMX): one, as each call re-packs the other operand, which costs more
     * next to the faster arithmetic. */
    int64_t per_worker = g->dtype != NKRT_DTYPE_FLOAT32 && g->p->gemm_lowp_f32 ? 1 : 2;
    int64_t want = (per_worker * workers + batch - 1) / batch;
    int64_t dim = g->split_n ? g->n : g->m;
    int64_t align = g->split_n ? MIN_PANEL_COLS : MIN_PANEL_ROWS;
    int64_t most = dim / align > 1 ? dim / align : 1;
    int64_t parts = want < most ? want : most;
    int64_t panel = (dim + parts - 1) / parts;
    if (parts > 1) panel = (panel + align - 1) / align * align; /* whole cache lines / tiles */
    g->panel = panel;
    g->parts = (dim + panel - 1) / panel;
  }
  int64_t tasks = batch * g->parts;
  if (workers > 1 && flops >= PARALLEL_MIN_FLOPS && tasks > 1)
    nkrt_pool_parallel_for(pool, tasks, 1, run_range, g);
  else
    run_range(g, 0, tasks, 0);
  return atomic_load(&g->failed) ? "out of host memory for low-precision GEMM buffers" : NULL;
}

bool nkrt_gemm_packable_b(const nkrt_gemm_provider_t *p, int64_t batch, int tb, int64_t m,
                          int64_t n, int64_t k, const float *b, int64_t ldb, const void **out_lo,
                          const void **out_hi) {
  if (!(batch == 1 && p->pack_b_size && m >= PACK_MIN_ROWS && n > 0 && k > 0)) return false;
  int64_t rows = tb ? n : k, cols = tb ? k : n;
  *out_lo = b;
  *out_hi = b + (rows - 1) * ldb + cols;
  return true;
}

const char *nkrt_gemm_sgemm_job(const nkrt_gemm_provider_t *p, nkrt_pool_t *pool,
                                nkrt_pack_cache_t *packs, uint64_t exec_id, int64_t batch, int ta,
                                int tb, int64_t m, int64_t n, int64_t k, float alpha,
                                const float *a, int64_t lda, int64_t sa, const float *b,
                                int64_t ldb, int64_t sb, float beta, float *c, int64_t ldc,
                                int64_t sc) {
  const char *err = check_args(batch, ta, tb, m, n, k, &lda, &ldb, &ldc);
  if (err) return err;
  gemm_job_t g = {.p = p, .dtype = NKRT_DTYPE_FLOAT32, .ta = ta, .tb = tb, .m = m, .n = n,
                  .k = k, .alpha = alpha, .beta = beta, .a = a, .b = b, .c = c, .lda = lda,
                  .ldb = ldb, .ldc = ldc, .sa = sa, .sb = sb, .sc = sc};
  atomic_init(&g.failed, false);
  if (packs && batch == 1 && p->pack_b_size && m >= PACK_MIN_ROWS && n > 0 && k > 0) {
    g.packs = packs;
    g.exec_id = exec_id;
  }
  return run_job(&g, pool, batch);
}

const char *nkrt_gemm_sgemm_batched(const nkrt_gemm_provider_t *p, nkrt_pool_t *pool,
                                    int64_t batch, int ta, int tb, int64_t m, int64_t n,
                                    int64_t k, float alpha, const float *a, int64_t lda,
                                    int64_t sa, const float *b, int64_t ldb, int64_t sb,
                                    float beta, float *c, int64_t ldc, int64_t sc) {
  return nkrt_gemm_sgemm_job(p, pool, NULL, 0, batch, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb,
                             beta, c, ldc, sc);
}

const char *nkrt_gemm_lowp_batched(const nkrt_gemm_provider_t *p, nkrt_pool_t *pool,
                                   uint32_t dtype, int64_t batch, int ta, int tb, int64_t m,
                                   int64_t n, int64_t k, float alpha, const void *a, int64_t lda,
                                   int64_t sa, const void *b, int64_t ldb, int64_t sb, float beta,
                                   void *c, int64_t ldc, int64_t sc) {
  if (dtype != NKRT_DTYPE_FLOAT16 && dtype != NKRT_DTYPE_BFLOAT16)
    return "low-precision GEMM dtype must be float16 or bfloat16";
  const char *err = check_args(batch, ta, tb, m, n, k, &lda, &ldb, &ldc);
  if (err) return err;
  gemm_job_t g = {.p = p, .dtype = dtype, .ta = ta, .tb = tb, .m = m, .n = n, .k = k,
                  .alpha = alpha, .beta = beta, .a = a, .b = b, .c = c, .lda = lda, .ldb = ldb,
                  .ldc = ldc, .sa = sa, .sb = sb, .sc = sc};
  atomic_init(&g.failed, false);
  return run_job(&g, pool, batch);
}
