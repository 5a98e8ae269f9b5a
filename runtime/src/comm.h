/* comm.h - the runtime's communicator (comm.c). Not installed; not part of
 * the API (that is nkrt/comm.h). */
#ifndef NKRT_COMM_INTERNAL_H
#define NKRT_COMM_INTERNAL_H

#include "base.h"

struct nkrt_hier;

/* ---- collectives between processes (comm.c) ----------------------------- */

/* The runtime's communicator, joined on first use as `rank` of `world_size`
 * under $NKRT_CC_ID: over shared memory, or between hosts when
 * nkrt_comm_set_hosts named several (comm_hosts.c). */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_runtime_comm(nkrt_runtime_t *runtime, int32_t rank, int32_t world_size,
                                struct nkrt_comm **out_comm);
/* nkrt_runtime_collective (one collective on this communicator) is public:
 * nkrt/comm.h. */

/* ---- for the collectives between hosts (comm_hosts.c) ------------------- */

/* nkrt_comm_join for the ranks of one host: world_size may be 1; global[r]
 * (kept by the caller, or NULL) is the job's rank of local rank r, for
 * messages. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_comm_join_local(const char *name, uint32_t rank, uint32_t world_size,
                                   int64_t timeout_ns, const uint32_t *global,
                                   struct nkrt_comm **out_comm);
/* One collective over shared memory among local ranks[0 .. n); `span` >=
 * count is the size every rank of the segment agrees on and chunks by (the
 * ranks whose own count is smaller idle through the rest). */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_comm_run_local(struct nkrt_comm *c, uint32_t kind, uint32_t dtype,
                                  uint32_t op, const int32_t *ranks, uint32_t n, const void *src,
                                  void *dst, int64_t count, int64_t span);
/* Fails the segment for every local rank (their waits end at once); `why`
 * goes into their messages. */
void nkrt_comm_fail(struct nkrt_comm *c, const char *why);
/* dst[i] = op over src[0][i], src[1][i], ... in that order (dst may be one
 * of them); the reductions of nkrt_comm_all_reduce. */
void nkrt_comm_reduce(uint32_t dtype, uint32_t op, const void *const *src, uint32_t m, void *dst,
                      int64_t count);
/* Checks a group: ranks[0 .. n) non-empty, each in [0, world_size), none
 * twice, `rank` among them (its index into *out_index). */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_comm_check_group(const int32_t *ranks, uint32_t n, uint32_t world_size,
                                    uint32_t rank, uint32_t *out_index);
/* Gives the communicator its between-hosts part (owned from then on). */
void nkrt_comm_attach_hier(struct nkrt_comm *c, struct nkrt_hier *hier);

#endif /* NKRT_COMM_INTERNAL_H */
