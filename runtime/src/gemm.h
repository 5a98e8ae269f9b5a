/* gemm.h - internals of the matrix routines lent to kernels (gemm*.c).
 *
 * A provider does single-threaded GEMM on one panel; gemm.c cuts every call
 * into panels and spreads them over the runtime's worker pool, so one thread
 * pool serves the process. Providers: "mkl" (Intel MKL, dlopen'ed at first
 * use, see gemm_mkl.c) and "reference" (the portable blocked C kernel in
 * gemm_ref.c, always there). docs/gemm.md explains the choice. */
#ifndef NKRT_GEMM_H
#define NKRT_GEMM_H

#include <stdbool.h>
#include <stdint.h>

#include "base.h"
#include "gemm_pack.h"
#include "half.h" /* panels widen and narrow float16 / bfloat16 */
#include "pool.h"

/* Hot loops are compiled at -O3 (vectorised) though the runtime builds at
 * -O2; clang has no per-function optimize attribute and vectorises at -O2. */
#if defined(__GNUC__) && !defined(__clang__)
#define NKRT_HOT __attribute__((optimize("O3")))
#else
#define NKRT_HOT
#endif

typedef struct nkrt_gemm_provider {
  const char *name;
  /* Single-threaded, row-major: C = alpha * op(A) @ op(B) + beta * C with
   * m, n, k >= 1 (beta == 0: C is not read). */
  void (*sgemm)(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
  /* Optional native mixed precision: A and B of `dtype` (float16 or
   * bfloat16), C float32, same semantics as sgemm. NULL, or returns false
   * for a dtype it lacks: the caller then widens to float32. */
  bool (*gemm_lowp_f32)(uint32_t dtype, int ta, int tb, int64_t m, int64_t n, int64_t k,
                        float alpha, const uint16_t *a, int64_t lda, const uint16_t *b,
                        int64_t ldb, float beta, float *c, int64_t ldc);
  /* Optional, float32 (all three or none): B packed once into the library's
   * own layout, alpha applied (pack_b_size bytes for an m x n x k product),
   * then products with the packed B (C = A @ packed + beta * C). Weights
   * reused across executions are packed once (gemm_pack.c) instead of by
   * every call. compute_packed_b returns false, C untouched, when it cannot
   * use the copy (made for another micro-kernel, no scratch memory): the
   * caller then computes from B as stored. */
  uint64_t (*pack_b_size)(int64_t m, int64_t n, int64_t k);
  void (*pack_b)(int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *b,
                 int64_t ldb, float *dst);
  bool (*compute_packed_b)(int ta, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                           const float *packed, float beta, float *c, int64_t ldc);
  /* Which library, version and instruction set; for logs and docs. */
  char description[256];
} nkrt_gemm_provider_t;

/* The portable provider (gemm_ref.c). */
extern const nkrt_gemm_provider_t nkrt_gemm_reference;
/* The single-threaded blocked kernel behind it. */
void nkrt_gemm_ref_sgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                         const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                         float *c, int64_t ldc);
/* The instruction set the reference kernel dispatches to: "avx512f",
 * "avx2+fma" or "generic". */
const char *nkrt_gemm_ref_isa(void);
/* True on a CPU not made by Intel where the reference kernel has AVX-512:
 * MKL runs its AVX2 code there, at 0.55-0.6x the reference's speed
 * (docs/gemm.md), so NKRT_GEMM=auto picks the reference. */
bool nkrt_gemm_builtin_preferred(void);
/* Tests only: use the micro-kernel for `isa` ("generic", "avx2+fma",
 * "avx512f"; NULL: the CPU's best). False when the CPU lacks it. Not safe
 * while GEMMs run. */
bool nkrt_gemm_ref_force_isa(const char *isa);

/* Opens Intel MKL (gemm_mkl.c): `path` names libmkl_rt; NULL tries the
 * loader's default search. Returns NULL (and a reason in `why`) when it
 * cannot be used. The provider lives for the rest of the process. */
const nkrt_gemm_provider_t *nkrt_gemm_mkl_open(const char *path, char *why, size_t why_len);

/* A packed copy of B for this product from `cache` (gemm_pack.c), or NULL:
 * not packable by `p`, not yet seen unchanged by an earlier execution than
 * `exec_id`, being packed by another thread, or no room - the caller then
 * runs a plain sgemm. A non-NULL result stays valid until
 * nkrt_pack_release(cache, *out_entry). */
const float *nkrt_pack_acquire(nkrt_pack_cache_t *cache, const nkrt_gemm_provider_t *p,
                               uint64_t exec_id, int tb, int64_t m, int64_t n, int64_t k,
                               float alpha, const float *b, int64_t ldb, void **out_entry);
void nkrt_pack_release(nkrt_pack_cache_t *cache, void *entry);

/* Temporary buffers for panels, recycled across calls (gemm.c). Any thread
 * may call these. Returns 64-byte aligned memory or NULL. */
void *nkrt_gemm_buffer_get(uint64_t bytes);
void nkrt_gemm_buffer_put(void *buffer);

/* Whether a float32 product may take its B from packed weights: a single
 * product with rows enough, on a provider that packs. If so, B's bytes are
 * [*out_lo, *out_hi): the caller looks for a cache that may hold them (an
 * execution's: B one of the kernel's inputs, not written by it). */
bool nkrt_gemm_packable_b(const nkrt_gemm_provider_t *p, int64_t batch, int tb, int64_t m,
                          int64_t n, int64_t k, const float *b, int64_t ldb, const void **out_lo,
                          const void **out_hi);
/* float32 products on the worker pool; `packs` (or NULL) is the packed-
 * weights cache a single product's B may come from, for the execution
 * `exec_id` (nkrt_pack_acquire). */
const char *nkrt_gemm_sgemm_job(const nkrt_gemm_provider_t *p, nkrt_pool_t *pool,
                                nkrt_pack_cache_t *packs, uint64_t exec_id, int64_t batch, int ta,
                                int tb, int64_t m, int64_t n, int64_t k, float alpha,
                                const float *a, int64_t lda, int64_t sa, const float *b,
                                int64_t ldb, int64_t sb, float beta, float *c, int64_t ldc,
                                int64_t sc);

/* ---- entry points for tests and benchmarks ------------------------------
 * The routines of nkrt_kernel_lib_t, with a pool instead of an execution
 * context, on a chosen provider. They return NULL, or a message when
 * temporary memory ran out. */
const char *nkrt_gemm_sgemm_batched(const nkrt_gemm_provider_t *p, nkrt_pool_t *pool,
                                    int64_t batch, int ta, int tb, int64_t m, int64_t n,
                                    int64_t k, float alpha, const float *a, int64_t lda,
                                    int64_t sa, const float *b, int64_t ldb, int64_t sb,
                                    float beta, float *c, int64_t ldc, int64_t sc);
const char *nkrt_gemm_lowp_batched(const nkrt_gemm_provider_t *p, nkrt_pool_t *pool,
                                   uint32_t dtype, int64_t batch, int ta, int tb, int64_t m,
                                   int64_t n, int64_t k, float alpha, const void *a, int64_t lda,
                                   int64_t sa, const void *b, int64_t ldb, int64_t sb, float beta,
                                   void *c, int64_t ldc, int64_t sc);
/* The provider NKRT_GEMM (and the search) picks; chosen once per process. */
const nkrt_gemm_provider_t *nkrt_gemm_selected(void);

/* NKRT_INVALID, naming the variable, when $NKRT_GEMM is not auto, mkl or
 * reference, when $NKRT_GEMM_LIBRARY names no usable MKL, or when NKRT_GEMM=mkl
 * finds none; checked when a runtime is created. NULL otherwise. */
nkrt_status_t nkrt_gemm_check_env(void);
/* Tests only: forget the choice, so the next call reads NKRT_GEMM again.
 * Not safe while GEMMs run. */
void nkrt_gemm_reselect(void);
/* A provider by name ("reference", "mkl"), or NULL when not available. */
const nkrt_gemm_provider_t *nkrt_gemm_find(const char *name);

#endif /* NKRT_GEMM_H */
