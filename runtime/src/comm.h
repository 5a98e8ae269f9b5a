/* comm.h - the runtime's communicator (comm.c). Not installed; not part of
 * the API (that is nkrt/comm.h). */
#ifndef NKRT_COMM_INTERNAL_H
#define NKRT_COMM_INTERNAL_H

#include "base.h"

/* ---- collectives between processes (comm.c) ----------------------------- */

/* The runtime's communicator, joined on first use as `rank` of `world_size`
 * under $NKRT_CC_ID. */
nkrt_status_t nkrt_runtime_comm(nkrt_runtime_t *runtime, int32_t rank, int32_t world_size,
                                struct nkrt_comm **out_comm);
/* env->lib->collective */
int nkrt_lib_collective(void *ctx, uint32_t kind, uint32_t dtype, uint32_t reduce_op,
                        const int32_t *ranks, uint32_t n, const void *src, void *dst,
                        int64_t count);

#endif /* NKRT_COMM_INTERNAL_H */
