/* runtime.h - the runtime object and its cores (runtime.c). Not installed;
 * not part of the API (that is nkrt/runtime.h). */
#ifndef NKRT_RUNTIME_INTERNAL_H
#define NKRT_RUNTIME_INTERNAL_H

#include <pthread.h>

#include "arena.h"
#include "base.h"
#include "driver.h"
#include "pool.h"
#include "queue.h"

typedef struct nkrt_core {
  uint32_t physical_id;
  nkrt_arena_t arena;        /* arena.mu also guards `tensors` */
  struct nkrt_tensor *tensors;
  nkrt_queue_t queue;
  struct nkrt_runtime *runtime;
} nkrt_core_t;

/* ---- the runtime ------------------------------------------------------- */

struct nkrt_model;
struct nkrt_event;
struct nkrt_trace_session;
struct nkrt_hazard;
struct nkrt_pack_cache;
struct nkrt_comm;

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
  /* hazards (hazard.c): registered ranges of queued work */
  atomic_uint hazard_count;         /* registered hazards; read lock-free */
  pthread_mutex_t hazard_mu;        /* guards the list and waiters */
  pthread_cond_t hazard_cv;         /* a hazard was removed */
  atomic_uint hazard_removals;      /* bumped at every removal: waiters poll it */
  struct nkrt_hazard *hazards;
  uint32_t hazard_waiters;
  struct nkrt_pack_cache *packs;    /* GEMM weights packed once (gemm_pack.c) */
  struct nkrt_comm *comm;           /* the job's communicator, joined at the first
                                       collective (comm.c); guarded by comm_mu */
  pthread_mutex_t comm_mu;          /* held while joining: may wait minutes for the
                                       other ranks, so not mu */
  /* tracing (trace.c) */
  atomic_uint trace_active;         /* recording sessions */
  pthread_mutex_t trace_mu;
  struct nkrt_trace_session *sessions;
};

NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_check_core(const nkrt_runtime_t *runtime, uint32_t core);

#endif /* NKRT_RUNTIME_INTERNAL_H */
