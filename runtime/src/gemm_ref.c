/* gemm_ref.c - the portable GEMM provider: a cache-blocked single-threaded
 * SGEMM in the Goto/BLIS shape.
 *
 * C is first scaled by beta, then alpha * op(A) @ op(B) is added block by
 * block: op(B) is packed KC x NC into panels NR columns wide (zero padded),
 * op(A) is packed MC x KC into slivers MR rows high, and a register-blocked
 * micro-kernel multiplies one sliver by one panel. The micro-kernel is chosen
 * at run time from what the CPU has: AVX-512 (8 x 32 tile), AVX2+FMA (6 x 16)
 * or portable C vectors (4 x 8). Packing buffers come
 * from the recycled panel buffers (gemm.c); if none can be had the kernel
 * falls back to an unblocked loop, so it never fails. */
#include <stdlib.h>
#include <string.h>

#include "gemm.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define NKRT_GEMM_X86 1
#endif

#define KC 256
#define MC 120  /* a multiple of every MR */
#define NC 1024 /* a multiple of every NR */
#define MAX_MR 8
#define MAX_NR 32

typedef void (*micro_fn)(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc,
                         int64_t mr, int64_t nr, float alpha);

/* Adds alpha * tile (MR x NR, row stride ld) to the mr x nr corner of C. */
static void add_tile(const float *tile, int64_t ld, float *c, int64_t ldc, int64_t mr, int64_t nr,
                     float alpha) {
  for (int64_t i = 0; i < mr; i++)
    for (int64_t j = 0; j < nr; j++) c[i * ldc + j] += alpha * tile[i * ld + j];
}

/* ---- portable micro-kernel: 4 x 8 ---------------------------------------
 * GCC/Clang generic vectors: SSE2 on x86-64, NEON on AArch64, scalar code
 * elsewhere. 8 accumulators + 2 B vectors fit any 16-register file. */
typedef float v4f __attribute__((vector_size(16)));

static inline v4f load4(const float *p) {
  v4f v;
  memcpy(&v, p, sizeof(v));
  return v;
}

static void micro_generic(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc,
                          int64_t mr, int64_t nr, float alpha) {
  v4f c00 = {0, 0, 0, 0}, c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00,
      c31 = c00;
  for (int64_t p = 0; p < kc; p++) {
    v4f b0 = load4(bp), b1 = load4(bp + 4);
    v4f a0 = {ap[0], ap[0], ap[0], ap[0]}, a1 = {ap[1], ap[1], ap[1], ap[1]};
    v4f a2 = {ap[2], ap[2], ap[2], ap[2]}, a3 = {ap[3], ap[3], ap[3], ap[3]};
    c00 += a0 * b0, c01 += a0 * b1;
    c10 += a1 * b0, c11 += a1 * b1;
    c20 += a2 * b0, c21 += a2 * b1;
    c30 += a3 * b0, c31 += a3 * b1;
    ap += 4;
    bp += 8;
  }
  float tile[4][8];
  v4f acc[4][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}};
  memcpy(tile, acc, sizeof(tile));
  add_tile(&tile[0][0], 8, c, ldc, mr, nr, alpha);
}

#ifdef NKRT_GEMM_X86
/* ---- AVX2 + FMA micro-kernel: 6 x 16 ------------------------------------- */

__attribute__((target("avx2,fma"))) static void micro_avx2(int64_t kc, const float *ap,
                                                           const float *bp, float *c, int64_t ldc,
                                                           int64_t mr, int64_t nr, float alpha) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (int64_t p = 0; p < kc; p++) {
    __m256 b0 = _mm256_loadu_ps(bp), b1 = _mm256_loadu_ps(bp + 8);
    __m256 a;
#define NKRT_ROW(i, x0, x1)              \
  a = _mm256_broadcast_ss(ap + (i));     \
  x0 = _mm256_fmadd_ps(a, b0, x0);       \
  x1 = _mm256_fmadd_ps(a, b1, x1);
    NKRT_ROW(0, c00, c01)
    NKRT_ROW(1, c10, c11)
    NKRT_ROW(2, c20, c21)
    NKRT_ROW(3, c30, c31)
    NKRT_ROW(4, c40, c41)
    NKRT_ROW(5, c50, c51)
#undef NKRT_ROW
    ap += 6;
    bp += 16;
  }
  __m256 acc[6][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31}, {c40, c41}, {c50, c51}};
  if (mr == 6 && nr == 16) {
    __m256 va = _mm256_set1_ps(alpha);
    for (int i = 0; i < 6; i++) {
      float *r = c + i * ldc;
      _mm256_storeu_ps(r, _mm256_fmadd_ps(va, acc[i][0], _mm256_loadu_ps(r)));
      _mm256_storeu_ps(r + 8, _mm256_fmadd_ps(va, acc[i][1], _mm256_loadu_ps(r + 8)));
    }
  } else {
    float tile[6][16];
    for (int i = 0; i < 6; i++) {
      _mm256_storeu_ps(&tile[i][0], acc[i][0]);
      _mm256_storeu_ps(&tile[i][8], acc[i][1]);
    }
    add_tile(&tile[0][0], 16, c, ldc, mr, nr, alpha);
  }
}

/* ---- AVX-512 micro-kernel: 8 x 32 ---------------------------------------- */

__attribute__((target("avx512f,fma"))) static void micro_avx512(int64_t kc, const float *ap,
                                                                const float *bp, float *c,
                                                                int64_t ldc, int64_t mr,
                                                                int64_t nr, float alpha) {
  __m512 c00 = _mm512_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m512 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  __m512 c60 = c00, c61 = c00, c70 = c00, c71 = c00;
  for (int64_t p = 0; p < kc; p++) {
    __m512 b0 = _mm512_loadu_ps(bp), b1 = _mm512_loadu_ps(bp + 16);
    __m512 a;
#define NKRT_ROW(i, x0, x1)          \
  a = _mm512_set1_ps(ap[i]);         \
  x0 = _mm512_fmadd_ps(a, b0, x0);   \
  x1 = _mm512_fmadd_ps(a, b1, x1);
    NKRT_ROW(0, c00, c01)
    NKRT_ROW(1, c10, c11)
    NKRT_ROW(2, c20, c21)
    NKRT_ROW(3, c30, c31)
    NKRT_ROW(4, c40, c41)
    NKRT_ROW(5, c50, c51)
    NKRT_ROW(6, c60, c61)
    NKRT_ROW(7, c70, c71)
#undef NKRT_ROW
    ap += 8;
    bp += 32;
  }
  __m512 acc[8][2] = {{c00, c01}, {c10, c11}, {c20, c21}, {c30, c31},
                      {c40, c41}, {c50, c51}, {c60, c61}, {c70, c71}};
  if (mr == 8 && nr == 32) {
    __m512 va = _mm512_set1_ps(alpha);
    for (int i = 0; i < 8; i++) {
      float *r = c + i * ldc;
      _mm512_storeu_ps(r, _mm512_fmadd_ps(va, acc[i][0], _mm512_loadu_ps(r)));
      _mm512_storeu_ps(r + 16, _mm512_fmadd_ps(va, acc[i][1], _mm512_loadu_ps(r + 16)));
    }
  } else {
    float tile[8][32];
    for (int i = 0; i < 8; i++) {
      _mm512_storeu_ps(&tile[i][0], acc[i][0]);
      _mm512_storeu_ps(&tile[i][16], acc[i][1]);
    }
    add_tile(&tile[0][0], 32, c, ldc, mr, nr, alpha);
  }
}
#endif /* NKRT_GEMM_X86 */

/* ---- dispatch ---------------------------------------------------------- */

typedef struct kernel_choice {
  micro_fn fn;
  int64_t mr, nr;
  const char *isa;
} kernel_choice_t;

static kernel_choice_t choose_kernel(void) {
#ifdef NKRT_GEMM_X86
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return (kernel_choice_t){micro_avx512, 8, 32, "avx512f"};
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return (kernel_choice_t){micro_avx2, 6, 16, "avx2+fma"};
#endif
  return (kernel_choice_t){micro_generic, 4, 8, "generic"};
}

static _Atomic int ready;
static kernel_choice_t choice;
static pthread_mutex_t kernel_mu = PTHREAD_MUTEX_INITIALIZER;

static kernel_choice_t kernel(void) {
  if (!atomic_load_explicit(&ready, memory_order_acquire)) {
    pthread_mutex_lock(&kernel_mu);
    if (!atomic_load_explicit(&ready, memory_order_relaxed)) {
      choice = choose_kernel();
      atomic_store_explicit(&ready, 1, memory_order_release);
    }
    pthread_mutex_unlock(&kernel_mu);
  }
  return choice;
}

const char *nkrt_gemm_ref_isa(void) { return kernel().isa; }

bool nkrt_gemm_ref_force_isa(const char *isa) {
  kernel_choice_t want = choose_kernel();
  if (isa && strcmp(isa, "generic") == 0) {
    want = (kernel_choice_t){micro_generic, 4, 8, "generic"};
#ifdef NKRT_GEMM_X86
  } else if (isa && strcmp(isa, "avx2+fma") == 0) {
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return false;
    want = (kernel_choice_t){micro_avx2, 6, 16, "avx2+fma"};
  } else if (isa && strcmp(isa, "avx512f") == 0) {
    if (!__builtin_cpu_supports("avx512f")) return false;
    want = (kernel_choice_t){micro_avx512, 8, 32, "avx512f"};
#endif
  } else if (isa) {
    return false;
  }
  (void)kernel(); /* settle the first choice, then replace it */
  pthread_mutex_lock(&kernel_mu);
  choice = want;
  pthread_mutex_unlock(&kernel_mu);
  return true;
}

/* ---- packing ------------------------------------------------------------ */

/* dst[c * ldd + r] = src[r * lds + c] for r < rows, c < cols: in 4 x 4 blocks
 * through SSE registers on x86-64 (a transposing pack element by element,
 * with a strided load or store each, cost as much as the products it fed for
 * a Linear layer's weight), one element at a time elsewhere. */
static void transpose_copy(const float *src, int64_t lds, int64_t rows, int64_t cols,
                           float *dst, int64_t ldd) {
  int64_t r = 0;
#ifdef NKRT_GEMM_X86
  for (; r + 4 <= rows; r += 4) {
    const float *s0 = src + r * lds, *s1 = s0 + lds, *s2 = s1 + lds, *s3 = s2 + lds;
    int64_t c = 0;
    for (; c + 4 <= cols; c += 4) {
      __m128 x0 = _mm_loadu_ps(s0 + c), x1 = _mm_loadu_ps(s1 + c), x2 = _mm_loadu_ps(s2 + c),
             x3 = _mm_loadu_ps(s3 + c);
      _MM_TRANSPOSE4_PS(x0, x1, x2, x3);
      float *d = dst + c * ldd + r;
      _mm_storeu_ps(d, x0);
      _mm_storeu_ps(d + ldd, x1);
      _mm_storeu_ps(d + 2 * ldd, x2);
      _mm_storeu_ps(d + 3 * ldd, x3);
    }
    for (; c < cols; c++) {
      float *d = dst + c * ldd + r;
      d[0] = s0[c], d[1] = s1[c], d[2] = s2[c], d[3] = s3[c];
    }
  }
#endif
  for (; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) dst[c * ldd + r] = src[r * lds + c];
}

/* Zeroes entries used .. width of each of the kc rows of a packed sliver or
 * panel (width entries per row): the edge tile's padding. */
static void zero_tail(float *dst, int64_t kc, int64_t width, int64_t used) {
  if (used < width)
    for (int64_t p = 0; p < kc; p++)
      memset(dst + p * width + used, 0, (size_t)(width - used) * sizeof(float));
}

/* op(A)[i0 .. i0+mc, p0 .. p0+kc] into slivers of mr rows: dst[s][p][r]. */
static void pack_a(int ta, const float *a, int64_t lda, int64_t i0, int64_t p0, int64_t mc,
                   int64_t kc, int64_t mr, float *dst) {
  for (int64_t s = 0; s < mc; s += mr) {
    int64_t rows = mc - s < mr ? mc - s : mr;
    if (ta) {
      for (int64_t p = 0; p < kc; p++)
        memcpy(dst + p * mr, a + (p0 + p) * lda + i0 + s, (size_t)rows * sizeof(float));
    } else {
      transpose_copy(a + (i0 + s) * lda + p0, lda, rows, kc, dst, mr);
    }
    zero_tail(dst, kc, mr, rows);
    dst += kc * mr;
  }
}

/* op(B)[p0 .. p0+kc, j0 .. j0+nc] into panels of nr columns: dst[s][p][c]. */
static void pack_b(int tb, const float *b, int64_t ldb, int64_t p0, int64_t j0, int64_t kc,
                   int64_t nc, int64_t nr, float *dst) {
  for (int64_t s = 0; s < nc; s += nr) {
    int64_t cols = nc - s < nr ? nc - s : nr;
    if (!tb) {
      for (int64_t p = 0; p < kc; p++)
        memcpy(dst + p * nr, b + (p0 + p) * ldb + j0 + s, (size_t)cols * sizeof(float));
    } else {
      transpose_copy(b + (j0 + s) * ldb + p0, ldb, cols, kc, dst, nr);
    }
    zero_tail(dst, kc, nr, cols);
    dst += kc * nr;
  }
}

/* ---- the kernel ---------------------------------------------------------- */

static void scale_c(int64_t m, int64_t n, float beta, float *c, int64_t ldc) {
  if (beta == 1.0f) return;
  for (int64_t i = 0; i < m; i++) {
    float *r = c + i * ldc;
    if (beta == 0.0f) memset(r, 0, (size_t)n * sizeof(float));
    else
      for (int64_t j = 0; j < n; j++) r[j] *= beta;
  }
}

/* Unblocked: for tiny products, and when no packing memory can be had. */
static void sgemm_simple(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                         const float *a, int64_t lda, const float *b, int64_t ldb, float *c,
                         int64_t ldc) {
  for (int64_t i = 0; i < m; i++) {
    float *cr = c + i * ldc;
    for (int64_t p = 0; p < k; p++) {
      float av = alpha * (ta ? a[p * lda + i] : a[i * lda + p]);
      if (tb)
        for (int64_t j = 0; j < n; j++) cr[j] += av * b[j * ldb + p];
      else
        for (int64_t j = 0; j < n; j++) cr[j] += av * b[p * ldb + j];
    }
  }
}

/* One or two rows of C: packing would touch every element of B for one use,
 * so stream B as stored - axpy into the C row (B as stored) or dot products
 * (B transposed). Vectorised by the compiler at -O3. */
NKRT_HOT static void axpy(float *restrict c, const float *restrict b, float s, int64_t n) {
  for (int64_t j = 0; j < n; j++) c[j] += s * b[j];
}

/* Four rows of B at once: four streams in flight, C touched once per four. */
NKRT_HOT static void axpy4(float *restrict c, const float *restrict b, int64_t ldb,
                           const float *s, int64_t n) {
  const float *restrict b0 = b, *restrict b1 = b + ldb, *restrict b2 = b + 2 * ldb,
                        *restrict b3 = b + 3 * ldb;
  float s0 = s[0], s1 = s[1], s2 = s[2], s3 = s[3];
  for (int64_t j = 0; j < n; j++) c[j] += (s0 * b0[j] + s1 * b1[j]) + (s2 * b2[j] + s3 * b3[j]);
}

NKRT_HOT static float dot(const float *restrict x, const float *restrict y, int64_t k) {
  float acc[16] = {0};
  int64_t p = 0;
  for (; p + 16 <= k; p += 16)
    for (int l = 0; l < 16; l++) acc[l] += x[p + l] * y[p + l];
  float s = 0.0f;
  for (int l = 0; l < 16; l++) s += acc[l];
  for (; p < k; p++) s += x[p] * y[p];
  return s;
}

static bool few_rows(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                     const float *a, int64_t lda, const float *b, int64_t ldb, float *c,
                     int64_t ldc) {
  float *row = NULL;
  if (ta && tb) {
    row = nkrt_gemm_buffer_get((uint64_t)k * sizeof(float));
    if (!row) return false;
  }
  for (int64_t i = 0; i < m; i++) {
    float *cr = c + i * ldc;
    if (!tb) {
      int64_t p = 0;
      for (; p + 4 <= k; p += 4) {
        float s[4];
        for (int q = 0; q < 4; q++) s[q] = alpha * (ta ? a[(p + q) * lda + i] : a[i * lda + p + q]);
        axpy4(cr, b + p * ldb, ldb, s, n);
      }
      for (; p < k; p++) axpy(cr, b + p * ldb, alpha * (ta ? a[p * lda + i] : a[i * lda + p]), n);
    } else {
      const float *ar = a + i * lda;
      if (ta) {
        for (int64_t p = 0; p < k; p++) row[p] = a[p * lda + i];
        ar = row;
      }
      for (int64_t j = 0; j < n; j++) cr[j] += alpha * dot(ar, b + j * ldb, k);
    }
  }
  nkrt_gemm_buffer_put(row);
  return true;
}

/* C[:, 0 .. nc] += alpha * op(A)[:, pc .. pc+kc] @ the packed slab `bpack`
 * (nc columns in panels of the kernel's width), A packed MC rows at a time
 * into `apack`. */
static void multiply_block(kernel_choice_t kc_, int ta, const float *a, int64_t lda, int64_t m,
                           int64_t pc, int64_t kc, const float *bpack, int64_t nc, float *apack,
                           float *c, int64_t ldc, float alpha) {
  int64_t mr = kc_.mr, nr = kc_.nr;
  for (int64_t ic = 0; ic < m; ic += MC) {
    int64_t mc = m - ic < MC ? m - ic : MC;
    pack_a(ta, a, lda, ic, pc, mc, kc, mr, apack);
    for (int64_t jr = 0; jr < nc; jr += nr) {
      int64_t nrr = nc - jr < nr ? nc - jr : nr;
      const float *bp = bpack + (jr / nr) * kc * nr;
      for (int64_t ir = 0; ir < mc; ir += mr) {
        int64_t mrr = mc - ir < mr ? mc - ir : mr;
        kc_.fn(kc, apack + (ir / mr) * kc * mr, bp, c + (ic + ir) * ldc + jr, ldc, mrr, nrr,
               alpha);
      }
    }
  }
}

void nkrt_gemm_ref_sgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                         const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                         float *c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  scale_c(m, n, beta, c, ldc);
  if (k <= 0 || alpha == 0.0f) return;
  if ((double)m * (double)n * (double)k <= 4096.0) {
    sgemm_simple(ta, tb, m, n, k, alpha, a, lda, b, ldb, c, ldc);
    return;
  }
  if (m <= 2 && few_rows(ta, tb, m, n, k, alpha, a, lda, b, ldb, c, ldc)) return;
  kernel_choice_t kc_ = kernel();
  int64_t mr = kc_.mr, nr = kc_.nr;
  int64_t ncap = n < NC ? (n + nr - 1) / nr * nr : NC;
  int64_t kcap = k < KC ? k : KC;
  int64_t mcap = m < MC ? (m + mr - 1) / mr * mr : MC;
  float *apack = nkrt_gemm_buffer_get((uint64_t)(mcap * kcap + kcap * ncap) * sizeof(float));
  if (!apack) {
    sgemm_simple(ta, tb, m, n, k, alpha, a, lda, b, ldb, c, ldc);
    return;
  }
  float *bpack = apack + mcap * kcap;
  for (int64_t jc = 0; jc < n; jc += NC) {
    int64_t nc = n - jc < NC ? n - jc : NC;
    for (int64_t pc = 0; pc < k; pc += KC) {
      int64_t kc = k - pc < KC ? k - pc : KC;
      pack_b(tb, b, ldb, pc, jc, kc, nc, nr, bpack);
      multiply_block(kc_, ta, a, lda, m, pc, kc, bpack, nc, apack, c + jc, ldc, alpha);
    }
  }
  nkrt_gemm_buffer_put(apack);
}

/* ---- B packed ahead (gemm_pack.c) -----------------------------------------
 * A header, then the panels pack_b makes for each NC-wide block of columns
 * and each KC-deep slab of it, in the order the kernel walks them, alpha
 * applied. The header records the panel width: a copy made for another
 * micro-kernel (nkrt_gemm_ref_force_isa in tests) is refused, and the caller
 * computes from B as stored. */

#define PACKED_MAGIC 0x6e6b5042u /* "nkPB" */
#define PACKED_HEADER 16         /* floats: 64 bytes keep the panels aligned */

typedef struct packed_header {
  uint32_t magic;
  uint32_t nr;
  int64_t n, k;
} packed_header_t;

_Static_assert(sizeof(packed_header_t) <= PACKED_HEADER * sizeof(float), "header too large");

/* Columns of the packed copy: each block's width rounded up to panels. */
static int64_t packed_cols(int64_t n, int64_t nr) {
  int64_t full = n / NC * NC, rest = n - full;
  return full + (rest + nr - 1) / nr * nr;
}

static uint64_t ref_pack_b_size(int64_t m, int64_t n, int64_t k) {
  (void)m;
  if (n <= 0 || k <= 0) return 0;
  return (uint64_t)(PACKED_HEADER + k * packed_cols(n, kernel().nr)) * sizeof(float);
}

static void ref_pack_b(int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *b,
                       int64_t ldb, float *dst) {
  (void)m;
  int64_t nr = kernel().nr;
  packed_header_t h = {.magic = PACKED_MAGIC, .nr = (uint32_t)nr, .n = n, .k = k};
  memcpy(dst, &h, sizeof(h));
  float *d = dst + PACKED_HEADER;
  for (int64_t jc = 0; jc < n; jc += NC) {
    int64_t nc = n - jc < NC ? n - jc : NC, ncp = (nc + nr - 1) / nr * nr;
    for (int64_t pc = 0; pc < k; pc += KC) {
      int64_t kc = k - pc < KC ? k - pc : KC;
      pack_b(tb, b, ldb, pc, jc, kc, nc, nr, d);
      if (alpha != 1.0f)
        for (int64_t e = 0; e < kc * ncp; e++) d[e] *= alpha;
      d += kc * ncp;
    }
  }
}

static bool ref_compute_packed_b(int ta, int64_t m, int64_t n, int64_t k, const float *a,
                                 int64_t lda, const float *packed, float beta, float *c,
                                 int64_t ldc) {
  kernel_choice_t kc_ = kernel();
  packed_header_t h;
  memcpy(&h, packed, sizeof(h));
  if (h.magic != PACKED_MAGIC || h.nr != (uint32_t)kc_.nr || h.n != n || h.k != k) return false;
  if (m <= 0 || n <= 0) return true;
  int64_t mr = kc_.mr, nr = kc_.nr;
  int64_t kcap = k < KC ? k : KC, mcap = m < MC ? (m + mr - 1) / mr * mr : MC;
  float *apack = nkrt_gemm_buffer_get((uint64_t)(mcap * kcap) * sizeof(float));
  if (!apack) return false; /* C untouched: the caller computes it unpacked */
  scale_c(m, n, beta, c, ldc);
  const float *d = packed + PACKED_HEADER;
  for (int64_t jc = 0; jc < n; jc += NC) {
    int64_t nc = n - jc < NC ? n - jc : NC, ncp = (nc + nr - 1) / nr * nr;
    for (int64_t pc = 0; pc < k; pc += KC) {
      int64_t kc = k - pc < KC ? k - pc : KC;
      multiply_block(kc_, ta, a, lda, m, pc, kc, d, nc, apack, c + jc, ldc, 1.0f);
      d += kc * ncp;
    }
  }
  nkrt_gemm_buffer_put(apack);
  return true;
}

const nkrt_gemm_provider_t nkrt_gemm_reference = {
    .name = "reference",
    .sgemm = nkrt_gemm_ref_sgemm,
    .gemm_lowp_f32 = NULL,
    .pack_b_size = ref_pack_b_size,
    .pack_b = ref_pack_b,
    .compute_packed_b = ref_compute_packed_b,
    .description = "built-in blocked C kernel",
};
