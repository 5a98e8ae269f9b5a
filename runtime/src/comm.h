/* comm.h - the runtime's communicator (comm.c). Not installed; not part of
 * the API (that is nkrt/comm.h). */
#ifndef NKRT_COMM_INTERNAL_H
#define NKRT_COMM_INTERNAL_H

#include "base.h"

/* ---- collectives between processes (comm.c) ----------------------------- */

/* The runtime's communicator, joined on first use as `rank` of `world_size`
 * under $NKRT_CC_ID. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_runtime_comm(nkrt_runtime_t *runtime, int32_t rank, int32_t world_size,
                                struct nkrt_comm **out_comm);
/* One collective (`kind`: NKRT_CC_ALL_REDUCE, _ALL_GATHER or _ALL_TO_ALL) on
 * the runtime's communicator, joined first if need be (env->lib->collective
 * of a model loaded as `rank` of `world_size`). */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_runtime_collective(nkrt_runtime_t *runtime, int32_t rank, int32_t world_size,
                                      uint32_t kind, uint32_t dtype, uint32_t reduce_op,
                                      const int32_t *ranks, uint32_t n, const void *src, void *dst,
                                      int64_t count);

#endif /* NKRT_COMM_INTERNAL_H */
