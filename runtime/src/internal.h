/* internal.h - shared internals of nkrt. Not installed; not part of the API. */
#ifndef NKRT_INTERNAL_H
#define NKRT_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "nkrt/nkrt.h"
#include "treap.h"

#define NKRT_UNUSED(x) ((void)(x))
#define NKRT_NAME_MAX 256

/* How long a thread about to sleep first polls (yielding the CPU) for the
 * thing it waits for: a hand-off that arrives meanwhile costs about a
 * microsecond instead of a wake-up through the kernel and the hypervisor. */
#define NKRT_SPIN_NS 20000ull

static inline uint64_t nkrt_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Copies `name` (or `fallback` when NULL/empty) into a new heap string. */
char *nkrt_strdup_name(const char *name, const char *fallback);

/* ---- device memory: one arena per core (arena.c) ---------------------- */

typedef struct nkrt_block {
  nkrt_treap_node_t by_addr;  /* every block, keyed by offset */
  nkrt_treap_node_t by_size;  /* free blocks, keyed by (size, offset) */
  uint64_t offset;
  uint64_t size;
  struct nkrt_block *prev, *next; /* address order; blocks tile the arena */
  bool free;
  struct nkrt_tensor *owner;      /* owning tensor of a live block */
} nkrt_block_t;

typedef struct nkrt_arena {
  pthread_mutex_t mu;
  uint32_t core;
  uint8_t *base;          /* NULL until first allocation (reserved lazily) */
  uint64_t capacity;
  nkrt_treap_t addr;
  nkrt_treap_t free_by_size;
  nkrt_block_t *tail;     /* highest block */
  uint64_t allocated, peak_allocated, peak_reserved;
  uint64_t active, total_allocs, total_frees, ooms, free_count;
} nkrt_arena_t;

void nkrt_arena_init(nkrt_arena_t *arena, uint32_t core, uint64_t capacity);
void nkrt_arena_deinit(nkrt_arena_t *arena);
/* Caller holds arena->mu. */
nkrt_status_t nkrt_arena_alloc_locked(nkrt_arena_t *arena, uint64_t size, nkrt_block_t **out_block);
void nkrt_arena_free_locked(nkrt_arena_t *arena, nkrt_block_t *block);
nkrt_block_t *nkrt_arena_find_locked(nkrt_arena_t *arena, const void *address);
void nkrt_arena_stats_locked(const nkrt_arena_t *arena, nkrt_memory_stats_t *out);
void nkrt_arena_reset_peak_locked(nkrt_arena_t *arena);

/* ---- the CPU driver (driver_cpu.c) -------------------------------------
 * What differs per device kind sits behind this table, so a CUDA driver can
 * be added without touching the core. */
typedef struct nkrt_driver {
  const char *name;
  /* Reserves `bytes` of device memory; returns its host-visible base. */
  nkrt_status_t (*mem_reserve)(uint32_t core, uint64_t bytes, uint8_t **out_base);
  void (*mem_release)(uint8_t *base, uint64_t bytes);
  /* Maps an executable image (NEFF bytes) and returns an opaque handle. */
  nkrt_status_t (*image_load)(const void *bytes, size_t size, const char *label, void **out_image);
  void *(*image_symbol)(void *image, const char *symbol);
  void (*image_unload)(void *image);
  /* Copies between host and device memory (both host-visible here). */
  void (*copy)(void *dst, const void *src, uint64_t size);
} nkrt_driver_t;

extern const nkrt_driver_t nkrt_cpu_driver;

/* ---- worker pool (pool.c) --------------------------------------------- */

typedef struct nkrt_pool nkrt_pool_t;
nkrt_status_t nkrt_pool_create(uint32_t num_workers, nkrt_pool_t **out_pool);
void nkrt_pool_destroy(nkrt_pool_t *pool);
uint32_t nkrt_pool_size(const nkrt_pool_t *pool);
void nkrt_pool_parallel_for(nkrt_pool_t *pool, int64_t n, int64_t grain, nkrt_range_fn fn, void *arg);

/* ---- what kernels get (exec.c, gemm.c) ---------------------------------- */

/* The kernel env's ctx gives access to the execution's pool and scratch. */
nkrt_pool_t *nkrt_exec_ctx_pool(void *ctx);
void *nkrt_exec_ctx_scratch(void *ctx, uint64_t bytes);
void nkrt_exec_ctx_fail(void *ctx, const char *msg);
/* The matrix routines table handed to kernels (gemm.c). */
const nkrt_kernel_lib_t *nkrt_kernel_lib(void);

/* ---- tensors (tensor.c) ------------------------------------------------ */

struct nkrt_tensor {
  atomic_uint refs;
  nkrt_runtime_t *runtime;
  uint32_t core;
  struct nkrt_tensor *root;   /* slices: the owning tensor (retained) */
  nkrt_block_t *block;        /* owning tensors: the allocation */
  uint8_t *va;
  uint64_t size;
  char *name;
  struct nkrt_tensor *list_prev, *list_next; /* the core's live tensors */
};

/* ---- hazards: memory touched by queued work (exec.c) ------------------- *
 * Queued work (executions, async copies) registers the byte ranges of every
 * tensor it binds from submission until it finishes. Synchronous tensor
 * operations wait until no registered range overlaps theirs. */

typedef struct nkrt_range {
  uintptr_t lo, hi; /* [lo, hi); empty when lo == hi */
} nkrt_range_t;

typedef struct nkrt_hazard {
  struct nkrt_hazard *prev, *next; /* in runtime->hazards while registered */
  nkrt_range_t *ranges;
  uint32_t count;
  uint32_t core;                   /* the queue the work sits on */
  bool registered;
} nkrt_hazard_t;

/* Registers / unregisters a hazard (idempotent unregister). */
void nkrt_hazard_add(nkrt_runtime_t *runtime, nkrt_hazard_t *hazard);
void nkrt_hazard_remove(nkrt_runtime_t *runtime, nkrt_hazard_t *hazard);
/* Waits until no registered hazard overlaps any of `ranges`; hazards of core
 * `skip_core` are ignored (NKRT_HAZARD_ALL_CORES: none is). */
#define NKRT_HAZARD_ALL_CORES UINT32_MAX
void nkrt_hazard_wait_slow(nkrt_runtime_t *runtime, const nkrt_range_t *ranges, uint32_t count,
                           uint32_t skip_core);
/* The fast path: one atomic load when nothing is queued. */
#define nkrt_hazard_wait(runtime, ranges, count, skip_core)                                   \
  do {                                                                                      \
    if (atomic_load_explicit(&(runtime)->hazard_count, memory_order_acquire) != 0)          \
      nkrt_hazard_wait_slow((runtime), (ranges), (count), (skip_core));                     \
  } while (0)

/* ---- weights packed once for GEMMs (gemm_pack.c) ------------------------ */

typedef struct nkrt_pack_cache {
  pthread_mutex_t mu;
  atomic_uint count;            /* entries; read lock-free by writers */
  struct pack_entry *head, *tail;
  uint64_t bytes, limit;
  uint64_t hits, packs, invalidations, evictions;
} nkrt_pack_cache_t;

nkrt_status_t nkrt_pack_cache_create(nkrt_pack_cache_t **out_cache);
void nkrt_pack_cache_destroy(nkrt_pack_cache_t *cache);
void nkrt_pack_invalidate_slow(nkrt_pack_cache_t *cache, uintptr_t lo, uintptr_t hi);
/* Every write to device memory calls this with its bytes [lo, hi): packed
 * copies of them are dropped. One atomic load when nothing is packed. */
#define nkrt_pack_invalidate(runtime, lo, hi)                                                 \
  do {                                                                                      \
    nkrt_pack_cache_t *pc_ = (runtime)->packs;                                              \
    if (pc_ && atomic_load_explicit(&pc_->count, memory_order_acquire) != 0)                \
      nkrt_pack_invalidate_slow(pc_, (uintptr_t)(lo), (uintptr_t)(hi));                     \
  } while (0)
/* The cache a GEMM of the running execution `ctx` may use for B = [lo, hi):
 * non-NULL only when those bytes lie inside one input and overlap no output
 * or scratch of the execution (exec.c); *out_exec_id: the execution's id. */
nkrt_pack_cache_t *nkrt_exec_ctx_packs(void *ctx, const void *lo, const void *hi,
                                       uint64_t *out_exec_id);

/* ---- collectives between processes (comm.c) ----------------------------- */

/* The runtime's communicator, joined on first use as `rank` of `world_size`
 * under $NKRT_CC_ID. */
nkrt_status_t nkrt_runtime_comm(nkrt_runtime_t *runtime, int32_t rank, int32_t world_size,
                                struct nkrt_comm **out_comm);
/* env->lib->collective */
int nkrt_lib_collective(void *ctx, uint32_t kind, uint32_t dtype, uint32_t reduce_op,
                        const int32_t *ranks, uint32_t n, const void *src, void *dst,
                        int64_t count);
/* The model an execution context runs (exec.c). */
const struct nkrt_model *nkrt_exec_ctx_model(void *ctx);

/* Retains t unless its last reference is already gone (a release racing
 * with a lookup by address); false then. */
bool nkrt_tensor_try_retain(nkrt_tensor_t *tensor);

/* Copies without checks or hazard waits (queued work uses them). */
void nkrt_tensor_write_raw(nkrt_tensor_t *tensor, const void *src, uint64_t offset, uint64_t size);
void nkrt_tensor_read_raw(const nkrt_tensor_t *tensor, void *dst, uint64_t offset, uint64_t size);

/* ---- per-core queues and execution (exec.c) --------------------------- */

typedef struct nkrt_work nkrt_work_t;

typedef struct nkrt_queue {
  pthread_mutex_t mu;
  pthread_cond_t work_cv;   /* work arrived or stop */
  pthread_cond_t idle_cv;   /* an item finished */
  nkrt_work_t *head, *tail;
  atomic_uint pending;      /* items queued (changed under mu, read lock-free) */
  bool busy;                /* an item is running (worker or inline) */
  bool thread_started;
  bool stop;
  pthread_t thread;
} nkrt_queue_t;

typedef struct nkrt_core {
  uint32_t physical_id;
  nkrt_arena_t arena;        /* arena.mu also guards `tensors` */
  struct nkrt_tensor *tensors;
  nkrt_queue_t queue;
  struct nkrt_runtime *runtime;
} nkrt_core_t;

void nkrt_queue_init(nkrt_queue_t *queue);
/* Finishes queued work, stops the thread. */
void nkrt_queue_shutdown(nkrt_core_t *core);

/* ---- the runtime ------------------------------------------------------- */

struct nkrt_model;
struct nkrt_event;
struct nkrt_trace_session;

struct nkrt_runtime {
  const nkrt_driver_t *driver;
  uint32_t core_count;
  nkrt_core_t *cores;
  uint64_t core_memory;
  nkrt_pool_t *pool;
  atomic_ullong next_id;            /* tracking ids */
  pthread_mutex_t mu;               /* guards the lists below */
  struct nkrt_model *models;
  struct nkrt_event *events;
  /* hazards (exec.c): registered ranges of queued work */
  atomic_uint hazard_count;         /* registered hazards; read lock-free */
  pthread_mutex_t hazard_mu;        /* guards the list and waiters */
  pthread_cond_t hazard_cv;         /* a hazard was removed */
  atomic_uint hazard_removals;      /* bumped at every removal: waiters poll it */
  struct nkrt_hazard *hazards;
  uint32_t hazard_waiters;
  nkrt_pack_cache_t *packs;         /* GEMM weights packed once (gemm_pack.c) */
  struct nkrt_comm *comm;           /* the job's communicator, joined at the first
                                       collective (comm.c); guarded by comm_mu */
  pthread_mutex_t comm_mu;          /* held while joining: may wait minutes for the
                                       other ranks, so not mu */
  /* tracing (trace.c) */
  atomic_uint trace_active;         /* recording sessions */
  pthread_mutex_t trace_mu;
  struct nkrt_trace_session *sessions;
};

nkrt_status_t nkrt_check_core(const nkrt_runtime_t *runtime, uint32_t core);

/* ---- models (model.c) --------------------------------------------------- */

struct nkrt_model {
  atomic_uint refs;
  nkrt_runtime_t *runtime;
  uint32_t core;
  void *image;
  const nkrt_neff_desc_t *desc;
  char *name;
  uint32_t cc_enabled;
  int32_t rank, world_size;
  nkrt_tensor_t *scratch;            /* desc->scratch_bytes of device memory */
  struct nkrt_model *list_prev, *list_next;
};

void nkrt_model_retain(struct nkrt_model *model);
void nkrt_model_release(struct nkrt_model *model);
/* Frees a model regardless of references (runtime teardown). */
void nkrt_model_destroy_now(struct nkrt_model *model);

/* ---- tracing (trace.c) -------------------------------------------------- */

void nkrt_trace_record(nkrt_runtime_t *runtime, nkrt_trace_kind_t kind, int phase, uint32_t core,
                       uint64_t tracking_id, uint64_t timestamp_ns, uint64_t bytes,
                       const char *name);
static inline bool nkrt_trace_enabled(nkrt_runtime_t *runtime) {
  return atomic_load_explicit(&runtime->trace_active, memory_order_relaxed) != 0;
}
void nkrt_trace_destroy_all(nkrt_runtime_t *runtime);
void nkrt_events_destroy_all(nkrt_runtime_t *runtime);

#endif /* NKRT_INTERNAL_H */
