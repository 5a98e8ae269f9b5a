/* gemm_mkl.c - the Intel MKL provider, loaded with dlopen (never linked).
 *
 * MKL comes from PyPI (`pip install mkl`: <prefix>/lib/libmkl_rt.so.3, or .2
 * for releases before 2025). It is forced sequential before any other MKL
 * call (MKL_Set_Threading_Layer(SEQUENTIAL)), so it starts no threads of its
 * own: gemm.c runs it on panels over the runtime's worker pool. If MKL was
 * already initialised in this process with another threading layer, every
 * calling thread sets its own MKL thread count to 1 instead.
 *
 * Routines: cblas_sgemm, cblas_gemm_bf16bf16f32 (AMX / AVX512-BF16 where the
 * CPU has them), cblas_gemm_f16f16f32 and, for weights packed once
 * (gemm_pack.c), cblas_sgemm_pack_get_size / _pack / _compute (ILP64 only),
 * through their ILP64 (_64) entry
 * points when the library has them, else the LP64 ones (dimensions must then
 * fit in an int; larger calls go to the reference kernel). */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "gemm.h"

enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112, PACKED = 151, B_MATRIX = 162,
       THREADING_SEQUENTIAL = 1 };

typedef void (*sgemm64_fn)(int, int, int, int64_t, int64_t, int64_t, float, const float *,
                           int64_t, const float *, int64_t, float, float *, int64_t);
typedef void (*sgemm32_fn)(int, int, int, int, int, int, float, const float *, int,
                           const float *, int, float, float *, int);
typedef void (*lowp64_fn)(int, int, int, int64_t, int64_t, int64_t, float, const uint16_t *,
                          int64_t, const uint16_t *, int64_t, float, float *, int64_t);
typedef void (*lowp32_fn)(int, int, int, int, int, int, float, const uint16_t *, int,
                          const uint16_t *, int, float, float *, int);
typedef size_t (*pack_size64_fn)(int, int64_t, int64_t, int64_t);
typedef void (*pack64_fn)(int, int, int, int64_t, int64_t, int64_t, float, const float *, int64_t,
                          float *);
typedef void (*compute64_fn)(int, int, int, int64_t, int64_t, int64_t, const float *, int64_t,
                             const float *, int64_t, float, float *, int64_t);

static struct {
  void *handle;
  sgemm64_fn sgemm64;
  sgemm32_fn sgemm32;
  lowp64_fn bf16_64, f16_64;
  lowp32_fn bf16_32, f16_32;
  pack_size64_fn pack_size64;
  pack64_fn pack64;
  compute64_fn compute64;
  int (*set_local_threads)(int);
  bool per_thread_limit;
} mkl;

static nkrt_gemm_provider_t mkl_provider;

static _Thread_local bool thread_ready;

static void limit_thread(void) {
  if (mkl.per_thread_limit && !thread_ready) {
    mkl.set_local_threads(1);
    thread_ready = true;
  }
}

static bool fits_int(int64_t a, int64_t b, int64_t c, int64_t d, int64_t e, int64_t f) {
  return a <= INT_MAX && b <= INT_MAX && c <= INT_MAX && d <= INT_MAX && e <= INT_MAX &&
         f <= INT_MAX;
}

static void mkl_sgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                      const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                      float *c, int64_t ldc) {
  limit_thread();
  int ota = ta ? TRANS : NO_TRANS, otb = tb ? TRANS : NO_TRANS;
  if (mkl.sgemm64) {
    mkl.sgemm64(ROW_MAJOR, ota, otb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  } else if (fits_int(m, n, k, lda, ldb, ldc)) {
    mkl.sgemm32(ROW_MAJOR, ota, otb, (int)m, (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb,
                beta, c, (int)ldc);
  } else {
    nkrt_gemm_ref_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}

static bool mkl_lowp(uint32_t dtype, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                     const uint16_t *a, int64_t lda, const uint16_t *b, int64_t ldb, float beta,
                     float *c, int64_t ldc) {
  bool bf16 = dtype == NKRT_DTYPE_BFLOAT16;
  lowp64_fn f64 = bf16 ? mkl.bf16_64 : mkl.f16_64;
  lowp32_fn f32 = bf16 ? mkl.bf16_32 : mkl.f16_32;
  int ota = ta ? TRANS : NO_TRANS, otb = tb ? TRANS : NO_TRANS;
  if (f64) {
    limit_thread();
    f64(ROW_MAJOR, ota, otb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return true;
  }
  if (f32 && fits_int(m, n, k, lda, ldb, ldc)) {
    limit_thread();
    f32(ROW_MAJOR, ota, otb, (int)m, (int)n, (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c,
        (int)ldc);
    return true;
  }
  return false;
}

static uint64_t mkl_pack_b_size(int64_t m, int64_t n, int64_t k) {
  return (uint64_t)mkl.pack_size64(B_MATRIX, m, n, k);
}

static void mkl_pack_b(int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *b,
                       int64_t ldb, float *dst) {
  limit_thread();
  mkl.pack64(ROW_MAJOR, B_MATRIX, tb ? TRANS : NO_TRANS, m, n, k, alpha, b, ldb, dst);
}

static bool mkl_compute_packed_b(int ta, int64_t m, int64_t n, int64_t k, const float *a,
                                 int64_t lda, const float *packed, float beta, float *c,
                                 int64_t ldc) {
  limit_thread();
  /* ldb is not read for a packed B */
  mkl.compute64(ROW_MAJOR, ta ? TRANS : NO_TRANS, PACKED, m, n, k, a, lda, packed, 1, beta, c,
                ldc);
  return true;
}

static const char *branch_name(int code) {
  switch (code) {
    case 10: return "AVX2";
    case 12: return "AVX-512";
    case 14: return "AVX-512 with VNNI/BF16 (E1)";
    case 15: return "AVX10";
    default: return NULL;
  }
}

const nkrt_gemm_provider_t *nkrt_gemm_mkl_open(const char *path, char *why, size_t why_len) {
  static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&mu);
  if (mkl.handle) { /* one MKL per process: the first one opened */
    pthread_mutex_unlock(&mu);
    return &mkl_provider;
  }
  const char *names[] = {"libmkl_rt.so.3", "libmkl_rt.so.2", "libmkl_rt.so"};
  void *h = NULL;
  if (path) {
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  } else {
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !h; i++)
      h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  }
  if (!h) {
    const char *e = dlerror();
    snprintf(why, why_len, "%s", e ? e : "libmkl_rt not found");
    pthread_mutex_unlock(&mu);
    return NULL;
  }
  /* dlsym returns void *; converting it to a function pointer is what POSIX
   * guarantees works. */
#define NKRT_SYM(type, name) ((type)dlsym(h, name))
  int (*set_layer)(int) = NKRT_SYM(int (*)(int), "MKL_Set_Threading_Layer");
  mkl.set_local_threads = NKRT_SYM(int (*)(int), "MKL_Set_Num_Threads_Local");
  mkl.sgemm64 = NKRT_SYM(sgemm64_fn, "cblas_sgemm_64");
  mkl.sgemm32 = NKRT_SYM(sgemm32_fn, "cblas_sgemm");
  mkl.bf16_64 = NKRT_SYM(lowp64_fn, "cblas_gemm_bf16bf16f32_64");
  mkl.f16_64 = NKRT_SYM(lowp64_fn, "cblas_gemm_f16f16f32_64");
  mkl.bf16_32 = NKRT_SYM(lowp32_fn, "cblas_gemm_bf16bf16f32");
  mkl.f16_32 = NKRT_SYM(lowp32_fn, "cblas_gemm_f16f16f32");
  mkl.pack_size64 = NKRT_SYM(pack_size64_fn, "cblas_sgemm_pack_get_size_64");
  mkl.pack64 = NKRT_SYM(pack64_fn, "cblas_sgemm_pack_64");
  mkl.compute64 = NKRT_SYM(compute64_fn, "cblas_sgemm_compute_64");
  void (*version)(char *, int) = NKRT_SYM(void (*)(char *, int), "MKL_Get_Version_String");
  int (*branch)(void) = NKRT_SYM(int (*)(void), "MKL_CBWR_Get_Auto_Branch");
#undef NKRT_SYM
  if (!set_layer || !mkl.set_local_threads || (!mkl.sgemm64 && !mkl.sgemm32)) {
    snprintf(why, why_len, "%s is not Intel MKL's single dynamic library (libmkl_rt)",
             path ? path : "libmkl_rt");
    dlclose(h);
    memset(&mkl, 0, sizeof(mkl));
    pthread_mutex_unlock(&mu);
    return NULL;
  }
  /* Must come before any other MKL call; returns the layer in effect. */
  mkl.per_thread_limit = set_layer(THREADING_SEQUENTIAL) != THREADING_SEQUENTIAL;
  mkl.handle = h;

  char ver[160] = "Intel MKL";
  if (version) {
    version(ver, (int)sizeof(ver) - 1);
    ver[sizeof(ver) - 1] = '\0';
  }
  const char *isa = branch ? branch_name(branch()) : NULL;
  mkl_provider.name = "mkl";
  mkl_provider.sgemm = mkl_sgemm;
  mkl_provider.gemm_lowp_f32 = mkl_lowp;
  if (mkl.pack_size64 && mkl.pack64 && mkl.compute64) {
    mkl_provider.pack_b_size = mkl_pack_b_size;
    mkl_provider.pack_b = mkl_pack_b;
    mkl_provider.compute_packed_b = mkl_compute_packed_b;
  }
  snprintf(mkl_provider.description, sizeof(mkl_provider.description), "%s; ISA %s; %s", ver,
           isa ? isa : "unknown",
           mkl.per_thread_limit ? "one thread per caller (MKL was already initialised)"
                                : "sequential layer");
  pthread_mutex_unlock(&mu);
  return &mkl_provider;
}
