/* kernel_env.c - what a kernel gets while it runs: the env (worker pool,
 * scratch, log, error) with its execution context, and the library table
 * (GEMMs, collectives, convolution); and running one kernel on its tensors. */
#include <stdio.h>
#include <stdlib.h>

#include "comm.h"
#include "conv.h"
#include "gemm.h"
#include "gemm_pack.h"
#include "kernel_env.h"
#include "log.h"
#include "model.h"
#include "pool.h"
#include "runtime.h"
#include "tensor.h"
#include "trace.h"

/* ---- the env: an execution's context ---------------------------------- */

typedef struct exec_ctx {
  nkrt_model_t *model;
  void **ptrs;                  /* the tensors' addresses: inputs, then outputs */
  uint64_t id;                  /* the execution's tracking id */
  uint64_t scratch_used;
  nkrt_tensor_t **extra;        /* scratch beyond the model's reservation */
  uint32_t extra_count, extra_cap;
  char error[512];
  bool has_error;
} exec_ctx_t;

static void env_parallel_for(void *ctx, int64_t n, int64_t grain, nkrt_range_fn fn, void *arg) {
  exec_ctx_t *x = ctx;
  nkrt_pool_parallel_for(x->model->runtime->pool, n, grain, fn, arg);
}

static void *env_scratch(void *ctx, uint64_t bytes) {
  exec_ctx_t *x = ctx;
  nkrt_model_t *m = x->model;
  uint64_t need = (bytes + NKRT_ALIGNMENT - 1) & ~(uint64_t)(NKRT_ALIGNMENT - 1);
  if (m->scratch && need <= m->scratch->size - x->scratch_used) {
    void *p = m->scratch->va + x->scratch_used;
    x->scratch_used += need;
    return p;
  }
  if (x->extra_count == x->extra_cap) {
    uint32_t ncap = x->extra_cap ? x->extra_cap * 2 : 4;
    nkrt_tensor_t **ne = realloc(x->extra, ncap * sizeof(*ne));
    if (!ne) return NULL;
    x->extra = ne;
    x->extra_cap = ncap;
  }
  nkrt_tensor_t *t = NULL;
  nkrt_status_t st = nkrt_tensor_allocate(m->runtime, m->core, bytes, "scratch", &t);
  if (st) {
    snprintf(x->error, sizeof(x->error), "scratch allocation failed: %s", nkrt_status_message(st));
    nkrt_status_free(st);
    return NULL;
  }
  x->extra[x->extra_count++] = t;
  return t->va;
}

static void env_log(void *ctx, int level, const char *msg) {
  exec_ctx_t *x = ctx;
  if (level <= nkrt_log_level())
    fprintf(stderr, "[nkrt] kernel '%s' (core %u): %s\n", x->model->name, x->model->core,
            msg ? msg : "");
}

static void env_set_error(void *ctx, const char *msg) {
  exec_ctx_t *x = ctx;
  snprintf(x->error, sizeof(x->error), "%s", msg ? msg : "kernel error");
  x->has_error = true;
}

static bool overlaps(uintptr_t lo, uintptr_t hi, const void *p, uint64_t size) {
  return lo < (uintptr_t)p + size && (uintptr_t)p < hi;
}

/* The cache a GEMM of the running execution may use for B = [lo, hi):
 * non-NULL only when those bytes lie inside one input, in device memory, and
 * overlap no output or scratch of the execution; *out_exec_id: the
 * execution's id. Host memory (nkrt_execute_host's buffers) is written
 * without nkrt seeing it, so a packed copy of it could go stale: never. */
static nkrt_pack_cache_t *exec_packs(const exec_ctx_t *x, const void *lo, const void *hi,
                                     uint64_t *out_exec_id) {
  const nkrt_model_t *m = x->model;
  const nkrt_neff_desc_t *d = m->desc;
  uintptr_t a = (uintptr_t)lo, b = (uintptr_t)hi;
  *out_exec_id = x->id;
  bool inside = false;
  for (uint32_t i = 0; i < d->num_inputs && !inside; i++) {
    uintptr_t p = (uintptr_t)x->ptrs[i];
    inside = p <= a && b <= p + d->inputs[i].size;
  }
  if (!inside || !nkrt_arena_overlaps(&m->runtime->cores[m->core].arena, a, b)) return NULL;
  for (uint32_t i = 0; i < d->num_outputs; i++)
    if (overlaps(a, b, x->ptrs[d->num_inputs + i], d->outputs[i].size)) return NULL;
  if (m->scratch && overlaps(a, b, m->scratch->va, m->scratch->size)) return NULL;
  for (uint32_t i = 0; i < x->extra_count; i++)
    if (overlaps(a, b, x->extra[i]->va, x->extra[i]->size)) return NULL;
  return m->runtime->packs;
}

/* ---- the table kernels get -------------------------------------------- */

/* float32 products of the execution `ctx`: a single product's B may come from
 * the packed-weights cache when it is one of the kernel's inputs. */
static const char *exec_sgemm(void *ctx, int64_t batch, int ta, int tb, int64_t m, int64_t n,
                              int64_t k, float alpha, const float *a, int64_t lda, int64_t sa,
                              const float *b, int64_t ldb, int64_t sb, float beta, float *c,
                              int64_t ldc, int64_t sc) {
  const exec_ctx_t *x = ctx;
  const nkrt_gemm_provider_t *p = nkrt_gemm_selected();
  nkrt_pack_cache_t *packs = NULL;
  uint64_t exec_id = 0;
  const void *lo, *hi;
  if (nkrt_gemm_packable_b(p, batch, tb, m, n, k, b, ldb, &lo, &hi))
    packs = exec_packs(x, lo, hi, &exec_id);
  return nkrt_gemm_sgemm_job(p, x->model->runtime->pool, packs, exec_id, batch, ta, tb, m, n, k,
                             alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc);
}

static void lib_sgemm(void *ctx, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha,
                      const float *a, int64_t lda, const float *b, int64_t ldb, float beta,
                      float *c, int64_t ldc) {
  const char *err = exec_sgemm(ctx, 1, ta, tb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc,
                               0);
  if (err) env_set_error(ctx, err);
}

static void lib_sgemm_batched(void *ctx, int64_t batch, int ta, int tb, int64_t m, int64_t n,
                              int64_t k, float alpha, const float *a, int64_t lda, int64_t sa,
                              const float *b, int64_t ldb, int64_t sb, float beta, float *c,
                              int64_t ldc, int64_t sc) {
  const char *err = exec_sgemm(ctx, batch, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta,
                               c, ldc, sc);
  if (err) env_set_error(ctx, err);
}

static void lib_gemm_batched_lowp(void *ctx, uint32_t dtype, int64_t batch, int ta, int tb,
                                  int64_t m, int64_t n, int64_t k, float alpha, const void *a,
                                  int64_t lda, int64_t sa, const void *b, int64_t ldb, int64_t sb,
                                  float beta, void *c, int64_t ldc, int64_t sc) {
  const char *err = nkrt_gemm_lowp_batched(nkrt_gemm_selected(),
                                           ((exec_ctx_t *)ctx)->model->runtime->pool, dtype,
                                           batch, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb,
                                           beta, c, ldc, sc);
  if (err) env_set_error(ctx, err);
}

/* Collectives of the job the model was loaded into (its rank and world
 * size); a failure becomes the kernel's error. */
static int lib_collective(void *ctx, uint32_t kind, uint32_t dtype, uint32_t reduce_op,
                          const int32_t *ranks, uint32_t n, const void *src, void *dst,
                          int64_t count) {
  const nkrt_model_t *m = ((exec_ctx_t *)ctx)->model;
  nkrt_status_t st = nkrt_runtime_collective(m->runtime, m->rank, m->world_size, kind, dtype,
                                             reduce_op, ranks, n, src, dst, count);
  if (!st) return 0;
  env_set_error(ctx, nkrt_status_message(st));
  nkrt_status_free(st);
  return 1;
}

/* A convolution of the execution `ctx` on the runtime's pool (conv.c). */
static int lib_conv2d(void *ctx, const nkrt_conv2d_params_t *params) {
  const char *err = nkrt_conv2d_run(nkrt_gemm_selected(), ((exec_ctx_t *)ctx)->model->runtime->pool, params);
  if (!err) return 0;
  env_set_error(ctx, err);
  return 1;
}

static const nkrt_kernel_lib_t kernel_lib = {
    .struct_size = sizeof(nkrt_kernel_lib_t),
    .sgemm = lib_sgemm,
    .sgemm_batched = lib_sgemm_batched,
    .gemm_batched_lowp = lib_gemm_batched_lowp,
    .collective = lib_collective,
    .conv2d = lib_conv2d,
};

/* ---- running a kernel ---------------------------------------------------- */

/* Runs the kernel on its tensors' addresses: ptrs[0 .. inputs), then outputs. */
nkrt_status_t nkrt_kernel_run(nkrt_model_t *m, void **ptrs, uint64_t id) {
  const nkrt_neff_desc_t *d = m->desc;
  exec_ctx_t x = {.model = m, .ptrs = ptrs, .id = id};
  nkrt_kernel_env_t env = {
      .struct_size = sizeof(env),
      .abi_version = NKRT_NEFF_ABI_VERSION,
      .core_id = m->core,
      .num_workers = nkrt_pool_size(m->runtime->pool),
      .rank = m->rank,
      .world_size = m->world_size,
      .cc_enabled = m->cc_enabled,
      .ctx = &x,
      .parallel_for = env_parallel_for,
      .scratch = env_scratch,
      .log = env_log,
      .set_error = env_set_error,
      .lib = &kernel_lib,
  };
  nkrt_runtime_t *rt = m->runtime;
  bool tracing = nkrt_trace_enabled(rt);
  if (tracing) nkrt_trace_record(rt, NKRT_TRACE_EXEC, 0, m->core, id, nkrt_now_ns(), 0, m->name);
  int rc = d->kernel(&env, ptrs, ptrs + d->num_inputs);
  if (tracing) nkrt_trace_record(rt, NKRT_TRACE_EXEC, 1, m->core, id, nkrt_now_ns(), 0, m->name);

  /* what the kernel wrote: packed copies of those bytes are stale now */
  for (uint32_t i = 0; i < d->num_outputs; i++)
    nkrt_pack_invalidate(rt, ptrs[d->num_inputs + i],
                         (uint8_t *)ptrs[d->num_inputs + i] + d->outputs[i].size);
  if (m->scratch && x.scratch_used)
    nkrt_pack_invalidate(rt, m->scratch->va, m->scratch->va + x.scratch_used);
  for (uint32_t i = 0; i < x.extra_count; i++) nkrt_tensor_release(x.extra[i]);
  free(x.extra);
  if (rc != 0 || x.has_error)
    return nkrt_status_make(NKRT_EXEC_COMPLETED_WITH_ERR, "kernel '%s' failed on core %u: %s",
                            m->name, m->core, x.error[0] ? x.error : "it returned an error code");
  return NULL;
}
