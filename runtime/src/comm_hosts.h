/* comm_hosts.h - collectives between hosts (comm_hosts.c). Not installed;
 * not part of the API (that is nkrt_comm_set_hosts in nkrt/comm.h). */
#ifndef NKRT_COMM_HOSTS_H
#define NKRT_COMM_HOSTS_H

#include "base.h"

struct nkrt_comm;
struct nkrt_hier;

/* Joins the runtime's communicator as `rank` of `world_size` under `id`:
 * with the hosts nkrt_comm_set_hosts set (several), the segment of this
 * rank's host ("<id>-h<host>") and the transport between hosts; else
 * (*joined = false) nothing, and the caller joins the single-host
 * communicator itself. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_hier_join(const char *id, uint32_t rank, uint32_t world_size,
                             struct nkrt_comm **out_comm, bool *joined);
/* One collective between hosts: global ranks, nkrt/comm.h's semantics. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_hier_collective(struct nkrt_hier *h, uint32_t kind, uint32_t dtype,
                                   uint32_t op, const int32_t *ranks, uint32_t n,
                                   const void *src, void *dst, int64_t count);
uint32_t nkrt_hier_rank(const struct nkrt_hier *h);
uint32_t nkrt_hier_world_size(const struct nkrt_hier *h);
/* Drops the transport's reference and frees (NULL: nothing). */
void nkrt_hier_free(struct nkrt_hier *h);

#endif /* NKRT_COMM_HOSTS_H */
