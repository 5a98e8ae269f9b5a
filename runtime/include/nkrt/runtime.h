/* nkrt/runtime.h - the runtime context: init/close, visible cores, memory.
 *
 * One nkrt_runtime_t owns everything: the visible NeuronCores, a device-memory
 * arena per core, the worker pool kernels parallelise over, the per-core
 * execution queues and the trace sessions. There are no hidden globals; the
 * Python layer keeps one runtime per process (the spike singleton).
 *
 * Virtual NeuronCores: the CPU driver presents NKRT_TOTAL_CORES cores (ids
 * 0..NKRT_TOTAL_CORES-1). The visible ones are chosen by the `visible_cores`
 * option, else NEURON_RT_VISIBLE_CORES (syntax "0-3,5"), else all of them.
 * Calls address visible cores by logical index 0..count-1, as libnrt does.
 *
 * Device memory: each core has its own arena of `core_memory_bytes` (option,
 * else NKRT_CORE_MEMORY, e.g. "4G", "512M", else NKRT_DEFAULT_CORE_MEMORY).
 * Arenas are reserved address space; host pages are touched only when used.
 */
#ifndef NKRT_RUNTIME_H
#define NKRT_RUNTIME_H

#include <stdbool.h>
#include <stdint.h>

#include "nkrt/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NKRT_VERSION_MAJOR 0
#define NKRT_VERSION_MINOR 1
#define NKRT_TOTAL_CORES 32u
#define NKRT_DEFAULT_CORE_MEMORY (16ull << 30)
#define NKRT_MIN_CORE_MEMORY (1ull << 20)
#define NKRT_MAX_CORE_MEMORY (64ull << 40) /* reserved address space per core */
#define NKRT_ALIGNMENT 64u
#define NKRT_MAX_WORKERS 1024u

typedef struct nkrt_runtime nkrt_runtime_t;

typedef struct nkrt_options {
  uint32_t struct_size;        /* set by nkrt_options_init */
  const char *visible_cores;   /* "0-3,5"; NULL: NEURON_RT_VISIBLE_CORES, else all */
  uint64_t core_memory_bytes;  /* 0: NKRT_CORE_MEMORY, else the default */
  uint32_t num_workers;        /* 1..NKRT_MAX_WORKERS; 0: NKRT_NUM_WORKERS, else the host's
                                  CPU count (at most NKRT_MAX_WORKERS) */
} nkrt_options_t;

void nkrt_options_init(nkrt_options_t *options);

/* Parses a core list such as "0-3,5" into ascending ids below
 * NKRT_TOTAL_CORES; a core listed twice ("0,0", "0-3,2") is an error. Errors
 * name the offending text. |out_ids| (capacity
 * entries) and |out_count| are the caller's storage; nothing to release. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_parse_core_list(const char *spec, uint32_t *out_ids, uint32_t capacity,
                                   uint32_t *out_count);
/* Parses a byte size such as "4G", "512M", "65536". |out_bytes| is the
 * caller's storage; nothing to release. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_parse_size(const char *text, uint64_t *out_bytes);

/* How many cores a runtime created now with default options would see
 * (reads NEURON_RT_VISIBLE_CORES). Needs no runtime. |out_count| is the
 * caller's storage; nothing to release. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_visible_core_count(uint32_t *out_count);

/* Creates a runtime (options NULL: the defaults). |out_runtime| is owned by
 * the caller and must be destroyed with nkrt_runtime_destroy. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_runtime_create(const nkrt_options_t *options, nkrt_runtime_t **out_runtime);
/* Waits for queued work, then frees every tensor, model, event, trace session
 * and arena. Handles obtained from the runtime are invalid afterwards: destroy
 * tensor sets (which hold tensors) and trace sessions you still need to free
 * before the runtime, never after. NULL is a no-op. */
void nkrt_runtime_destroy(nkrt_runtime_t *runtime);

uint32_t nkrt_runtime_core_count(const nkrt_runtime_t *runtime);
/* Physical (virtual NeuronCore) id of logical core `core`, or -1. */
int32_t nkrt_runtime_physical_core(const nkrt_runtime_t *runtime, uint32_t core);
uint32_t nkrt_runtime_num_workers(const nkrt_runtime_t *runtime);
uint64_t nkrt_runtime_core_memory(const nkrt_runtime_t *runtime);

/* Per-core device-memory statistics. Fields are only appended. */
typedef struct nkrt_memory_stats {
  uint32_t struct_size;
  uint32_t core;
  uint64_t capacity_bytes;        /* arena size */
  uint64_t allocated_bytes;       /* bytes in live allocations (rounded to alignment) */
  uint64_t peak_allocated_bytes;  /* since creation or the last reset_peak */
  uint64_t reserved_bytes;        /* extent of the arena in use: end of the highest live block */
  uint64_t peak_reserved_bytes;
  uint64_t active_allocations;    /* live allocations */
  uint64_t total_allocations;     /* successful allocations ever */
  uint64_t total_frees;
  uint64_t oom_count;             /* allocations refused for lack of memory */
  uint64_t free_blocks;           /* free fragments below the extent, plus the tail */
  uint64_t largest_free_block;
} nkrt_memory_stats_t;

/* Fills |out_stats|, the caller's struct (set its struct_size; 0 means this
 * header's size); nothing to release. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_memory_stats(nkrt_runtime_t *runtime, uint32_t core,
                                nkrt_memory_stats_t *out_stats);
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_memory_reset_peak(nkrt_runtime_t *runtime, uint32_t core);

/* Name of the GEMM library kernels get through nkrt_kernel_lib_t: "mkl" or
 * "reference". Picked once per process at first use: NKRT_GEMM=auto|mkl|
 * reference forces one, NKRT_GEMM_LIBRARY / NKRT_GEMM_PATH say where to look
 * for MKL (docs/gemm.md). */
const char *nkrt_gemm_provider(void);

/* Frees memory returned by nkrt (JSON strings). */
void nkrt_free(void *ptr);

/* Weights packed once for GEMMs (runtime/src/gemm_pack.c): float32 products
 * whose B is a kernel input the kernel does not write are packed into the
 * GEMM library's layout on their second sighting with unchanged bytes and
 * reused until any nkrt write touches those bytes. Host memory, at most
 * NKRT_GEMM_PACK_LIMIT bytes per runtime (default 1G, 0 disables); past the
 * limit new weights simply run unpacked. */
typedef struct nkrt_gemm_pack_stats {
  uint64_t packed_matrices; /* packed copies held now */
  uint64_t packed_bytes;    /* their host memory */
  uint64_t limit_bytes;     /* NKRT_GEMM_PACK_LIMIT */
  uint64_t hits;            /* products computed from a packed copy */
  uint64_t packs;           /* copies made */
  uint64_t invalidations;   /* entries dropped because their bytes were written */
  uint64_t evictions;       /* remembered (unpacked) entries forgotten beyond 4096 */
} nkrt_gemm_pack_stats_t;

/* Fills |out_stats|, the caller's struct; nothing to release. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_gemm_pack_stats(nkrt_runtime_t *runtime, nkrt_gemm_pack_stats_t *out_stats);

#ifdef __cplusplus
}
#endif
#endif /* NKRT_RUNTIME_H */
