/* nkrt/comm.h - collectives between the processes of a job.
 *
 * Each rank of a job (one process, one runtime, usually one core: what
 * torchrun starts) joins a communicator by a name all ranks share. Ranks meet
 * in a POSIX shared-memory segment ("/nkrt-cc-<name>") that holds one staging
 * slot per rank, in two halves used by turns; collectives move through the
 * slots chunk by chunk, so any size works. An all_reduce is a reduce-scatter
 * (each member reduces its own share of a chunk straight from the others'
 * slots, in group order) then an all-gather. Rank 0 creates the segment
 * exclusively, mode 0600; the others open it only if this user owns it and no
 * one else may use it (another user's segment, or one open to others, is
 * refused with its path). Its name is removed from /dev/shm once every rank
 * has mapped it, and when a join fails; a segment left by a job whose ranks
 * all died is replaced by the next rank 0 that joins under that name. Ranks
 * on several hosts: see "between hosts" below.
 *
 * Kernels reach the communicator through env->lib->collective (neff_abi.h):
 * the runtime joins it at a kernel's first collective, as the rank and world
 * size the model was loaded with (nkrt_model_load's options), under the name
 * in $NKRT_CC_ID (torch_to_nkipy sets it for every rank). Every rank must run
 * the same collectives in the same order, as SPMD kernels do; a group
 * (replica group) is a subset of the ranks, the same list on each of its
 * members. A rank that does not arrive within the timeout ($NKRT_CC_TIMEOUT
 * seconds, 0.001 to 86400, default 300; any other value is refused) fails the
 * collective on every rank instead of hanging the job; a rank whose process
 * died (each rank records its pid) fails every other rank's wait within about
 * a second, with an error naming it. */
#ifndef NKRT_COMM_H
#define NKRT_COMM_H

#include <stdint.h>

#include "nkrt/runtime.h"
#include "nkrt/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nkrt_comm nkrt_comm_t;

/* Joins communicator `name` ([A-Za-z0-9._-], at most 200 characters) as
 * `rank` of `world_size` (2 .. 1024) and waits until every rank has joined
 * (timeout_ns < 0: $NKRT_CC_TIMEOUT). Errors say which rank is missing or
 * died, that the name is in use by a running job (of another size, or with
 * this rank taken), or that its segment belongs to someone else. |out_comm| is
 * owned by the caller and must be destroyed with nkrt_comm_destroy. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_comm_join(const char *name, uint32_t rank, uint32_t world_size,
                             int64_t timeout_ns, nkrt_comm_t **out_comm);
void nkrt_comm_destroy(nkrt_comm_t *comm);
uint32_t nkrt_comm_rank(const nkrt_comm_t *comm);
uint32_t nkrt_comm_world_size(const nkrt_comm_t *comm);

/* Every rank of the job waits here for all the others. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_comm_barrier(nkrt_comm_t *comm);

/* Collectives within the group `ranks[0 .. n)` (the caller among them; every
 * member passes the same list). `count` elements of `dtype` per rank; buffers
 * are host-visible memory (device memory on this driver); src and dst may be
 * the same buffer.
 *   all_reduce:  dst[count] = reduce_op over the members of src[count], in
 *                group order (so every member gets the same bits); float16
 *                and bfloat16 accumulate in float32.
 *   all_gather:  dst[n * count] = the members' src[count], in group order.
 *   all_to_all:  src is n blocks of count; member i's dst block j is member
 *                j's src block i. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_comm_all_reduce(nkrt_comm_t *comm, uint32_t dtype, uint32_t reduce_op,
                                   const int32_t *ranks, uint32_t n, const void *src, void *dst,
                                   int64_t count);
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_comm_all_gather(nkrt_comm_t *comm, uint32_t dtype, const int32_t *ranks,
                                   uint32_t n, const void *src, void *dst, int64_t count);
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_comm_all_to_all(nkrt_comm_t *comm, uint32_t dtype, const int32_t *ranks,
                                   uint32_t n, const void *src, void *dst, int64_t count);
/*   reduce_scatter: src is n blocks of count; member i's dst[count] =
 *                reduce_op over the members' src block i, in group order.
 *   broadcast:   every member's dst[count] = member `root`'s src[count]
 *                (`root` an index into ranks; src is read on the root only). */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_comm_reduce_scatter(nkrt_comm_t *comm, uint32_t dtype, uint32_t reduce_op,
                                       const int32_t *ranks, uint32_t n, const void *src,
                                       void *dst, int64_t count);
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_comm_broadcast(nkrt_comm_t *comm, uint32_t dtype, const int32_t *ranks,
                                  uint32_t n, uint32_t root, const void *src, void *dst,
                                  int64_t count);

/* ---- between hosts -------------------------------------------------------
 *
 * Shared memory joins the ranks of one host only. Between hosts the data
 * moves over a transport an existing engine provides (spike_torch registers
 * one built on the job's torch.distributed gloo group); the runtime never
 * opens a network connection itself. With hosts set, a collective runs in
 * three steps: within each host over shared memory, between the hosts' lead
 * members over the transport, and within each host again. */

/* One transfer of `bytes` at `buf` to (send = 1) or from (send = 0) the
 * global rank `peer`. */
typedef struct nkrt_comm_xfer {
  int32_t peer;
  uint32_t send;
  void *buf;
  uint64_t bytes;
} nkrt_comm_xfer_t;

typedef struct nkrt_comm_transport {
  uint32_t struct_size; /* sizeof(nkrt_comm_transport_t) of the caller */
  void *ctx;            /* passed back to the callbacks */
  /* Starts every transfer of xfers[0 .. n), then waits for all of them;
   * transfers between two ranks match in the order they are posted. Returns
   * NULL, or a status whose message names the peer that failed (a dead peer
   * must fail within the engine's timeout, never hang). Called from any
   * thread, one call at a time per process. */
  nkrt_status_t (*exchange)(void *ctx, const nkrt_comm_xfer_t *xfers, uint32_t n);
  /* Drops ctx when the transport is replaced or cleared (may be NULL). */
  void (*release)(void *ctx);
} nkrt_comm_transport_t;

/* Process-wide: the job's hosts and the transport between them, for the
 * runtime's communicator (joined at a kernel's first collective, or by
 * nkrt_runtime_collective). host_of[r] is the host of rank r, as the lowest
 * rank on that host, for each of the world_size ranks; all ranks of the job
 * pass the same list. NULL host_of (or one host) clears it: every rank on
 * one host, shared memory only. The transport is copied; it is required when
 * there are several hosts. A communicator already joined keeps the hosts it
 * was joined with (call before the first collective, or after a reset). */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_comm_set_hosts(uint32_t world_size, const uint32_t *host_of,
                                  const nkrt_comm_transport_t *transport);

/* One collective on the runtime's own communicator (the one kernels'
 * collectives use: env->lib->collective of a model loaded as `rank` of
 * `world_size`), joined first if need be, over the group ranks[0 .. n) of
 * that job (the caller among them). `kind`:
 * NKRT_CC_ALL_REDUCE, _ALL_GATHER, _ALL_TO_ALL, _REDUCE_SCATTER or
 * _BROADCAST, whose root index in the group is `reduce_op`; buffers as for
 * nkrt_comm_collective. Queued work on the runtime's cores is the caller's
 * to finish first. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_runtime_collective(nkrt_runtime_t *runtime, int32_t rank, int32_t world_size,
                                      uint32_t kind, uint32_t dtype, uint32_t reduce_op,
                                      const int32_t *ranks, uint32_t n, const void *src, void *dst,
                                      int64_t count);

#ifdef __cplusplus
}
#endif
#endif /* NKRT_COMM_H */
