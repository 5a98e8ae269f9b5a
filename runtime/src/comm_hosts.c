/* comm_hosts.c - collectives between hosts (nkrt_comm_set_hosts).
 *
 * Shared memory joins the ranks of one host. With several hosts set, the
 * runtime's communicator joins its host's own segment ("<id>-h<host>", host
 * = the lowest rank there) as its local index among the host's ranks, and a
 * collective over a group G runs in three steps:
 *
 *   1. within each host, over shared memory, among G's members there;
 *   2. between the hosts' leads (G's first member on each host) over the
 *      transport: each lead sends every other lead what its host holds for
 *      that host, with a small description of the collective that the other
 *      checks (ranks out of step fail instead of mixing data);
 *   3. within each host again: a broadcast from the lead.
 *
 * Every rank of a host runs the same two local steps whatever its group
 * (shared-memory barriers are host-wide), sized by the job's world size, not
 * by the group ("span"); a group on one host only skips step 2 and moves no
 * data in step 3. The leads combine the hosts' partial results in host order
 * (the order of the hosts' first members in G), so every member gets the
 * same bits; floats may differ from the single-host result by rounding.
 *
 * A transport failure fails the lead's collective and marks its host's
 * segment failed with the reason, so its local peers stop at once with it. */
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "comm_hosts.h"
#include "nkrt/comm.h"
#include "nkrt/neff_abi.h"

#define MAX_RANKS 1024
#define DESC_MAGIC UINT64_C(0x6e6b72742d686f73)

/* The job's hosts and transport as nkrt_comm_set_hosts set them; shared by
 * the communicators joined with them (the transport is released with the
 * last one). */
typedef struct hosts {
  _Atomic uint32_t refs;
  uint32_t world_size, n_hosts;
  uint32_t *host_of;
  nkrt_comm_transport_t transport;
  pthread_mutex_t xmu; /* one exchange at a time per process, as the transport asks */
} hosts_t;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static hosts_t *g_hosts; /* under g_mu */

static void hosts_unref(hosts_t *h) {
  if (!h || atomic_fetch_sub(&h->refs, 1) != 1) return;
  if (h->transport.release) h->transport.release(h->transport.ctx);
  pthread_mutex_destroy(&h->xmu);
  free(h->host_of);
  free(h);
}

nkrt_status_t nkrt_comm_set_hosts(uint32_t world_size, const uint32_t *host_of,
                                  const nkrt_comm_transport_t *transport) {
  hosts_t *h = NULL;
  if (host_of) {
    if (world_size < 1 || world_size > MAX_RANKS)
      return nkrt_status_make(NKRT_INVALID, "nkrt_comm_set_hosts: world size %u is not between 1 "
                              "and %u", world_size, MAX_RANKS);
    uint32_t n_hosts = 0;
    for (uint32_t r = 0; r < world_size; r++) {
      uint32_t lead = host_of[r];
      if (lead > r || host_of[lead] != lead)
        return nkrt_status_make(NKRT_INVALID, "nkrt_comm_set_hosts: host_of[%u] = %u is not the "
                                "lowest rank of a host (each rank's entry must be the lowest "
                                "rank on its host, whose own entry is itself)", r, lead);
      n_hosts += lead == r;
    }
    if (n_hosts > 1) {
      if (!transport || transport->struct_size < sizeof(nkrt_comm_transport_t) ||
          !transport->exchange)
        return nkrt_status_make(NKRT_INVALID, "nkrt_comm_set_hosts: %u hosts need a transport "
                                "between them (struct_size %u, at least %zu, and an exchange "
                                "callback)", n_hosts, transport ? transport->struct_size : 0,
                                sizeof(nkrt_comm_transport_t));
      h = calloc(1, sizeof(*h));
      uint32_t *copy = malloc(world_size * sizeof(uint32_t));
      if (!h || !copy) {
        free(h);
        free(copy);
        return nkrt_status_make(NKRT_RESOURCE, "out of host memory");
      }
      memcpy(copy, host_of, world_size * sizeof(uint32_t));
      atomic_init(&h->refs, 1);
      h->world_size = world_size;
      h->n_hosts = n_hosts;
      h->host_of = copy;
      memcpy(&h->transport, transport, sizeof(h->transport));
      pthread_mutex_init(&h->xmu, NULL);
    }
  }
  /* one host (or none): shared memory only; a transport given anyway is
   * still the caller's to drop */
  if (!h && transport && transport->struct_size >= sizeof(nkrt_comm_transport_t) &&
      transport->release)
    transport->release(transport->ctx);
  pthread_mutex_lock(&g_mu);
  hosts_t *old = g_hosts;
  g_hosts = h;
  pthread_mutex_unlock(&g_mu);
  hosts_unref(old);
  return NULL;
}

/* ---- the communicator between hosts ----------------------------------- */

struct nkrt_hier {
  hosts_t *hosts;
  uint32_t rank, world_size, host; /* host: its lowest rank */
  uint32_t *local_of;              /* each rank's index among its host's ranks */
  uint32_t *global;                /* this host's ranks, by local index */
  uint32_t local_count;
  struct nkrt_comm *local;         /* this host's segment (owns this) */
  pthread_mutex_t mu;              /* one collective at a time */
  uint64_t seq;
};

uint32_t nkrt_hier_rank(const struct nkrt_hier *h) { return h->rank; }
uint32_t nkrt_hier_world_size(const struct nkrt_hier *h) { return h->world_size; }

void nkrt_hier_free(struct nkrt_hier *h) {
  if (!h) return;
  hosts_unref(h->hosts);
  free(h->local_of);
  free(h->global);
  pthread_mutex_destroy(&h->mu);
  free(h);
}

nkrt_status_t nkrt_hier_join(const char *id, uint32_t rank, uint32_t world_size,
                             struct nkrt_comm **out_comm, bool *joined) {
  *joined = false;
  pthread_mutex_lock(&g_mu);
  hosts_t *hs = g_hosts;
  if (hs) atomic_fetch_add(&hs->refs, 1);
  pthread_mutex_unlock(&g_mu);
  if (!hs) return NULL;
  if (hs->world_size != world_size || rank >= world_size) {
    nkrt_status_t st = nkrt_status_make(NKRT_INVALID, "the job's hosts were set for %u ranks "
                                        "(nkrt_comm_set_hosts), but this model was loaded as "
                                        "rank %u of %u", hs->world_size, rank, world_size);
    hosts_unref(hs);
    return st;
  }
  struct nkrt_hier *h = calloc(1, sizeof(*h));
  uint32_t *local_of = malloc(world_size * sizeof(uint32_t));
  uint32_t *global = malloc(world_size * sizeof(uint32_t));
  uint32_t *seen = calloc(world_size, sizeof(uint32_t));
  if (!h || !local_of || !global || !seen) {
    free(h), free(local_of), free(global), free(seen);
    hosts_unref(hs);
    return nkrt_status_make(NKRT_RESOURCE, "out of host memory");
  }
  h->hosts = hs;
  h->rank = rank;
  h->world_size = world_size;
  h->host = hs->host_of[rank];
  h->local_of = local_of;
  h->global = global;
  for (uint32_t r = 0; r < world_size; r++) {
    local_of[r] = seen[hs->host_of[r]]++;
    if (hs->host_of[r] == h->host) global[local_of[r]] = r;
  }
  h->local_count = seen[h->host];
  free(seen);
  pthread_mutex_init(&h->mu, NULL);
  char name[256];
  snprintf(name, sizeof(name), "%s-h%u", id, h->host);
  struct nkrt_comm *c = NULL;
  nkrt_status_t st = nkrt_comm_join_local(name, local_of[rank], h->local_count, -1, global, &c);
  if (st) {
    uint32_t host = h->host;
    nkrt_hier_free(h);
    return nkrt_status_annotate(st, "joining the shared memory of host %u (rank %u of %u)",
                                host, rank, world_size);
  }
  h->local = c;
  nkrt_comm_attach_hier(c, h);
  *out_comm = c;
  *joined = true;
  return NULL;
}

/* ---- one collective ------------------------------------------------------ */

/* A group as the hosts see it. Hosts are numbered in the order of their
 * first member in the group; members[hstart[k] .. hstart[k + 1]) are host
 * k's members (indices into the group, in group order). */
typedef struct plan {
  const int32_t *ranks;
  uint32_t n, me, nh, myh, nl, my_pos; /* my_pos: my position among my host's members */
  uint32_t *hpos, *lpos, *hstart, *members;
  int32_t *lranks; /* my host's members as local ranks */
  bool lead;
} plan_t;

static void plan_free(plan_t *p) {
  free(p->hpos);
  free(p->lranks);
}

NKRT_MUST_USE_RESULT
static nkrt_status_t make_plan(const struct nkrt_hier *h, const int32_t *ranks, uint32_t n,
                               plan_t *p) {
  memset(p, 0, sizeof(*p));
  NKRT_RETURN_IF_ERROR(nkrt_comm_check_group(ranks, n, h->world_size, h->rank, &p->me));
  uint32_t *block = malloc(((size_t)n * 5 + 1) * sizeof(uint32_t));
  p->lranks = malloc((size_t)n * sizeof(int32_t) + 1);
  if (!block || !p->lranks) {
    free(block);
    return nkrt_status_make(NKRT_RESOURCE, "out of host memory");
  }
  p->hpos = block, p->lpos = block + n, p->hstart = block + 2 * n; /* hstart: n + 1 */
  uint32_t *host_id = block + 3 * n + 1; /* host k's lowest rank */
  p->members = block + 4 * n + 1;
  const uint32_t *host_of = h->hosts->host_of;
  p->ranks = ranks, p->n = n;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t host = host_of[ranks[i]], k = 0;
    while (k < p->nh && host_id[k] != host) k++;
    if (k == p->nh) host_id[p->nh++] = host;
    p->hpos[i] = k;
  }
  /* members by host (a counting sort keeps group order within a host) */
  memset(p->hstart, 0, (p->nh + 1) * sizeof(uint32_t));
  for (uint32_t i = 0; i < n; i++) p->hstart[p->hpos[i] + 1]++;
  for (uint32_t k = 0; k < p->nh; k++) p->hstart[k + 1] += p->hstart[k];
  uint32_t *fill = host_id; /* reused: the next free place of each host */
  for (uint32_t k = 0; k < p->nh; k++) fill[k] = p->hstart[k];
  for (uint32_t i = 0; i < n; i++) {
    uint32_t k = p->hpos[i];
    p->lpos[i] = fill[k] - p->hstart[k];
    p->members[fill[k]++] = i;
  }
  p->myh = p->hpos[p->me];
  p->nl = p->hstart[p->myh + 1] - p->hstart[p->myh];
  p->my_pos = p->lpos[p->me];
  for (uint32_t a = 0; a < p->nl; a++)
    p->lranks[a] = (int32_t)h->local_of[ranks[p->members[p->hstart[p->myh] + a]]];
  p->lead = p->my_pos == 0;
  return NULL;
}

/* The group index of host k's lead, and of its a-th member. */
static uint32_t member(const plan_t *p, uint32_t k, uint32_t a) {
  return p->members[p->hstart[k] + a];
}
static uint32_t host_size(const plan_t *p, uint32_t k) {
  return p->hstart[k + 1] - p->hstart[k];
}

/* What the leads tell each other before the data. */
typedef struct {
  uint64_t magic, seq, what;
  int64_t count;
  uint64_t group, bytes; /* bytes: the data the sender sends the receiver */
} lead_desc_t;

static uint64_t group_hash(const int32_t *ranks, uint32_t n) {
  uint64_t g = 1469598103934665603ull;
  for (uint32_t i = 0; i < n; i++) g = (g ^ (uint32_t)ranks[i]) * 1099511628211ull;
  return g ^ n;
}

static const char *kind_name(uint64_t kind) {
  static const char *const names[] = {"all_reduce", "all_gather", "all_to_all", "reduce_scatter",
                                      "broadcast"};
  return kind < 5 ? names[kind] : "?";
}

/* Step 2, on a lead: sends send[k] (send_bytes[k]) to host k's lead and
 * receives recv_bytes[k] into recv[k], for every other host k of the group,
 * after the descriptions; fails the host's segment on any error. */
NKRT_MUST_USE_RESULT
static nkrt_status_t exchange(struct nkrt_hier *h, const plan_t *p, uint64_t what, int64_t count,
                              uint64_t group, void *const *send, const uint64_t *send_bytes,
                              void *const *recv, const uint64_t *recv_bytes) {
  uint32_t nh = p->nh;
  lead_desc_t *d = calloc((size_t)nh * 2, sizeof(lead_desc_t));
  nkrt_comm_xfer_t *x = calloc((size_t)nh * 4, sizeof(nkrt_comm_xfer_t));
  if (!d || !x) {
    free(d), free(x);
    nkrt_status_t st = nkrt_status_make(NKRT_RESOURCE, "out of host memory");
    nkrt_comm_fail(h->local, nkrt_status_message(st));
    return st;
  }
  uint32_t nx = 0;
  for (uint32_t k = 0; k < nh; k++) {
    if (k == p->myh) continue;
    int32_t peer = p->ranks[member(p, k, 0)];
    d[2 * k] = (lead_desc_t){DESC_MAGIC, h->seq, what, count, group, send_bytes[k]};
    x[nx++] = (nkrt_comm_xfer_t){peer, 1, &d[2 * k], sizeof(lead_desc_t)};
    x[nx++] = (nkrt_comm_xfer_t){peer, 0, &d[2 * k + 1], sizeof(lead_desc_t)};
    if (send_bytes[k]) x[nx++] = (nkrt_comm_xfer_t){peer, 1, send[k], send_bytes[k]};
    if (recv_bytes[k]) x[nx++] = (nkrt_comm_xfer_t){peer, 0, recv[k], recv_bytes[k]};
  }
  const nkrt_comm_transport_t *t = &h->hosts->transport;
  pthread_mutex_lock(&h->hosts->xmu);
  nkrt_status_t st = t->exchange(t->ctx, x, nx);
  pthread_mutex_unlock(&h->hosts->xmu);
  if (st) {
    st = nkrt_status_annotate(st, "rank %u: %s #%" PRIu64 " between hosts", h->rank,
                              kind_name(what >> 32), h->seq);
  } else {
    for (uint32_t k = 0; k < nh && !st; k++) {
      if (k == p->myh) continue;
      const lead_desc_t *o = &d[2 * k + 1];
      int32_t peer = p->ranks[member(p, k, 0)];
      if (o->magic != DESC_MAGIC || o->seq != h->seq || o->what != what || o->count != count ||
          o->group != group || o->bytes != recv_bytes[k])
        st = nkrt_status_make(NKRT_INVALID, "ranks out of step between hosts: rank %u runs "
                              "collective #%" PRIu64 ", %s of %" PRId64 " elements (dtype %u, op "
                              "%u), rank %d (on another host) runs #%" PRIu64 ", %s of %" PRId64
                              " elements (dtype %u, op %u)%s; every rank must run the same "
                              "collectives in the same order", h->rank, h->seq,
                              kind_name(what >> 32), count, (unsigned)(what >> 16 & 0xffff),
                              (unsigned)(what & 0xffff), peer, o->seq, kind_name(o->what >> 32),
                              o->count, (unsigned)(o->what >> 16 & 0xffff),
                              (unsigned)(o->what & 0xffff),
                              o->magic != DESC_MAGIC ? " (its message is not a collective's)"
                              : o->what == what && o->count == count ? " with another group"
                                                                     : "");
    }
  }
  if (st) nkrt_comm_fail(h->local, nkrt_status_message(st));
  free(d);
  free(x);
  return st;
}

typedef struct {
  struct nkrt_hier *h;
  plan_t p;
  uint32_t kind, dtype, op;
  size_t es;
  int64_t count;
  uint64_t what, group;
  void **send, **recv; /* per host */
  uint64_t *send_bytes, *recv_bytes;
} step_t;

NKRT_MUST_USE_RESULT
static nkrt_status_t local(step_t *s, uint32_t kind, uint32_t op, const void *src, void *dst,
                           int64_t count, int64_t span) {
  return nkrt_comm_run_local(s->h->local, kind, s->dtype, op, s->p.lranks, s->p.nl, src, dst,
                             count, span);
}

NKRT_MUST_USE_RESULT
static nkrt_status_t between(step_t *s) {
  return exchange(s->h, &s->p, s->what, s->count, s->group, s->send, s->send_bytes, s->recv,
                  s->recv_bytes);
}

#define BYTES(e) ((size_t)(e) * s->es)

NKRT_MUST_USE_RESULT
static nkrt_status_t all_reduce(step_t *s, const void *src, void *dst) {
  plan_t *p = &s->p;
  int64_t c = s->count;
  nkrt_status_t st = local(s, NKRT_CC_ALL_REDUCE, s->op, src, dst, c, c);
  uint8_t *tmp = NULL;
  if (!st && p->lead && p->nh > 1) {
    tmp = malloc(BYTES(c) * p->nh + 1);
    const void **ptrs = malloc(p->nh * sizeof(void *));
    if (!tmp || !ptrs) st = nkrt_status_make(NKRT_RESOURCE, "out of host memory");
    for (uint32_t k = 0; !st && k < p->nh; k++) {
      s->send[k] = dst, s->send_bytes[k] = BYTES(c);
      s->recv[k] = tmp + BYTES(c) * k, s->recv_bytes[k] = BYTES(c);
      ptrs[k] = k == p->myh ? dst : s->recv[k];
    }
    if (!st) st = between(s);
    if (!st) nkrt_comm_reduce(s->dtype, s->op, ptrs, p->nh, dst, c);
    free(ptrs);
  }
  free(tmp);
  if (!st) st = local(s, NKRT_CC_BROADCAST, 0, dst, dst, p->nh > 1 ? c : 0, c);
  return st;
}

NKRT_MUST_USE_RESULT
static nkrt_status_t all_gather(step_t *s, const void *src, void *dst) {
  plan_t *p = &s->p;
  int64_t c = s->count;
  uint8_t *lb = malloc(BYTES(c) * p->nl + 1), *rb = NULL, *out = dst;
  nkrt_status_t st = lb ? local(s, NKRT_CC_ALL_GATHER, 0, src, lb, c, c)
                        : nkrt_status_make(NKRT_RESOURCE, "out of host memory");
  if (!st && p->lead && p->nh > 1) {
    rb = malloc(BYTES(c) * p->n + 1); /* host k's blocks at its first member's index */
    if (!rb) st = nkrt_status_make(NKRT_RESOURCE, "out of host memory");
    for (uint32_t k = 0; !st && k < p->nh; k++) {
      s->send[k] = lb, s->send_bytes[k] = BYTES(c) * p->nl;
      s->recv[k] = rb + BYTES(c) * p->hstart[k], s->recv_bytes[k] = BYTES(c) * host_size(p, k);
    }
    if (!st) st = between(s);
  }
  if (!st && c > 0 && (p->nh == 1 || p->lead))
    for (uint32_t i = 0; i < p->n; i++) {
      uint32_t k = p->hpos[i];
      const uint8_t *from = k == p->myh ? lb + BYTES(c) * p->lpos[i]
                                        : rb + BYTES(c) * (p->hstart[k] + p->lpos[i]);
      memcpy(out + BYTES(c) * i, from, BYTES(c));
    }
  free(lb);
  free(rb);
  int64_t total = c * p->n;
  if (!st) st = local(s, NKRT_CC_BROADCAST, 0, dst, dst, p->nh > 1 ? total : 0,
                      c * s->h->world_size);
  return st;
}

NKRT_MUST_USE_RESULT
static nkrt_status_t all_to_all(step_t *s, const void *src, void *dst) {
  plan_t *p = &s->p;
  int64_t c = s->count, n = p->n, nl = p->nl;
  uint8_t *lb = malloc(BYTES(c) * (size_t)(n * nl) + 1), *out = dst;
  nkrt_status_t st = lb ? local(s, NKRT_CC_ALL_GATHER, 0, src, lb, c * n,
                                c * s->h->world_size)
                        : nkrt_status_make(NKRT_RESOURCE, "out of host memory");
  /* from the other hosts: host k's part of `all` at roff[k], [a' of k][a of mine] */
  int64_t others = n - nl;
  uint8_t *all = NULL, *pack = NULL;
  uint64_t *roff = calloc(p->nh, sizeof(uint64_t));
  if (!st && !roff) st = nkrt_status_make(NKRT_RESOURCE, "out of host memory");
  for (uint32_t k = 0, at = 0; !st && k < p->nh; k++)
    if (k != p->myh) roff[k] = at, at += host_size(p, k);
  if (!st && p->nh > 1) {
    all = malloc(BYTES(c) * (size_t)(others * nl) + 1);
    if (!all) st = nkrt_status_make(NKRT_RESOURCE, "out of host memory");
  }
  if (!st && p->lead && p->nh > 1) {
    pack = malloc(BYTES(c) * (size_t)(others * nl) + 1);
    if (!pack) st = nkrt_status_make(NKRT_RESOURCE, "out of host memory");
    uint8_t *at = pack;
    for (uint32_t k = 0; !st && k < p->nh; k++) {
      if (k == p->myh) continue;
      uint32_t nk = host_size(p, k);
      s->send[k] = at, s->send_bytes[k] = BYTES(c) * nk * (size_t)nl;
      for (int64_t a = 0; a < nl; a++)
        for (uint32_t b = 0; b < nk; b++, at += BYTES(c))
          memcpy(at, lb + BYTES(c) * (size_t)(a * n + member(p, k, b)), BYTES(c));
      s->recv[k] = all + BYTES(c) * roff[k] * (size_t)nl;
      s->recv_bytes[k] = BYTES(c) * nk * (size_t)nl;
    }
    if (!st) st = between(s);
  }
  if (!st) {
    int64_t most = c * (int64_t)(s->h->world_size - 1) * s->h->local_count;
    st = local(s, NKRT_CC_BROADCAST, 0, all ? all : dst, all ? all : dst,
               p->nh > 1 ? c * others * nl : 0, most);
  }
  if (!st && c > 0)
    for (uint32_t j = 0; j < p->n; j++) {
      uint32_t k = p->hpos[j];
      const uint8_t *from =
          k == p->myh ? lb + BYTES(c) * ((size_t)p->lpos[j] * n + p->me)
                      : all + BYTES(c) * ((roff[k] + p->lpos[j]) * (size_t)nl + p->my_pos);
      memcpy(out + BYTES(c) * j, from, BYTES(c));
    }
  free(lb), free(all), free(pack), free(roff);
  return st;
}

NKRT_MUST_USE_RESULT
static nkrt_status_t reduce_scatter(step_t *s, const void *src, void *dst) {
  plan_t *p = &s->p;
  int64_t c = s->count, n = p->n, nl = p->nl;
  uint8_t *part = malloc(BYTES(c) * (size_t)n + 1), *res = malloc(BYTES(c) * (size_t)nl + 1);
  uint8_t *pack = NULL, *in = NULL;
  const void **ptrs = malloc(p->nh * sizeof(void *));
  nkrt_status_t st = part && res && ptrs ? local(s, NKRT_CC_ALL_REDUCE, s->op, src, part, c * n,
                                                 c * s->h->world_size)
                                         : nkrt_status_make(NKRT_RESOURCE, "out of host memory");
  if (!st && p->lead && p->nh > 1) {
    pack = malloc(BYTES(c) * (size_t)(n - nl) + 1);
    in = malloc(BYTES(c) * (size_t)nl * p->nh + 1);
    if (!pack || !in) st = nkrt_status_make(NKRT_RESOURCE, "out of host memory");
    uint8_t *at = pack;
    for (uint32_t k = 0; !st && k < p->nh; k++) {
      s->recv[k] = in + BYTES(c) * (size_t)nl * k, s->recv_bytes[k] = BYTES(c) * (size_t)nl;
      if (k == p->myh) continue;
      uint32_t nk = host_size(p, k);
      s->send[k] = at, s->send_bytes[k] = BYTES(c) * nk;
      for (uint32_t b = 0; b < nk; b++, at += BYTES(c))
        memcpy(at, part + BYTES(c) * member(p, k, b), BYTES(c));
    }
    if (!st) st = between(s);
    /* each local member's block: the hosts' partials in host order */
    for (int64_t a = 0; !st && a < nl; a++) {
      for (uint32_t k = 0; k < p->nh; k++)
        ptrs[k] = k == p->myh ? part + BYTES(c) * member(p, p->myh, (uint32_t)a)
                              : in + BYTES(c) * ((size_t)nl * k + (size_t)a);
      nkrt_comm_reduce(s->dtype, s->op, ptrs, p->nh, res + BYTES(c) * (size_t)a, c);
    }
  }
  if (!st)
    st = local(s, NKRT_CC_BROADCAST, 0, res, res, p->nh > 1 ? c * nl : 0,
               c * s->h->local_count);
  if (!st && c)
    memcpy(dst, p->nh > 1 ? res + BYTES(c) * p->my_pos : part + BYTES(c) * p->me, BYTES(c));
  free(part), free(res), free(pack), free(in), free(ptrs);
  return st;
}

NKRT_MUST_USE_RESULT
static nkrt_status_t broadcast(step_t *s, const void *src, void *dst) {
  plan_t *p = &s->p;
  int64_t c = s->count;
  uint32_t rh = p->hpos[s->op];
  bool here = rh == p->myh;
  nkrt_status_t st = local(s, NKRT_CC_BROADCAST, here ? p->lpos[s->op] : 0, here ? src : dst,
                           dst, here ? c : 0, c);
  if (!st && p->lead && p->nh > 1) {
    for (uint32_t k = 0; k < p->nh; k++) {
      s->send[k] = dst, s->send_bytes[k] = here ? BYTES(c) : 0;
      s->recv[k] = dst, s->recv_bytes[k] = k == rh ? BYTES(c) : 0;
    }
    st = between(s);
  }
  if (!st) st = local(s, NKRT_CC_BROADCAST, 0, dst, dst, here || p->nh == 1 ? 0 : c, c);
  return st;
}

#undef BYTES

nkrt_status_t nkrt_hier_collective(struct nkrt_hier *h, uint32_t kind, uint32_t dtype,
                                   uint32_t op, const int32_t *ranks, uint32_t n,
                                   const void *src, void *dst, int64_t count) {
  int32_t *world = NULL;
  if (!ranks && n == 0) { /* nkrt_comm_barrier: every rank */
    world = malloc(h->world_size * sizeof(int32_t));
    if (!world) return nkrt_status_make(NKRT_RESOURCE, "out of host memory");
    for (uint32_t r = 0; r < h->world_size; r++) world[r] = (int32_t)r;
    ranks = world, n = h->world_size;
  }
  step_t s = {.h = h, .kind = kind, .dtype = dtype, .op = op, .count = count,
              .es = nkrt_dtype_size(dtype)};
  nkrt_status_t st = NULL;
  if (kind > NKRT_CC_BROADCAST) st = nkrt_status_make(NKRT_INVALID, "unknown collective kind %u", kind);
  else if (count < 0) st = nkrt_status_make(NKRT_INVALID, "collective: negative count");
  else if (!s.es) st = nkrt_status_make(NKRT_INVALID, "collective: unknown dtype %u", dtype);
  else if ((kind == NKRT_CC_ALL_REDUCE || kind == NKRT_CC_REDUCE_SCATTER) && op > NKRT_CC_MIN)
    st = nkrt_status_make(NKRT_INVALID, "%s: unknown op %u", kind_name(kind), op);
  else if (count > 0 && (!src || !dst))
    st = nkrt_status_make(NKRT_INVALID, "%s: a NULL buffer", kind_name(kind));
  if (!st) st = make_plan(h, ranks, n, &s.p);
  if (!st && kind == NKRT_CC_BROADCAST && op >= n)
    st = nkrt_status_make(NKRT_INVALID, "broadcast: root %u is not an index into its group "
                          "of %u ranks", op, n);
  if (!st) {
    s.send = calloc(s.p.nh, sizeof(void *));
    s.recv = calloc(s.p.nh, sizeof(void *));
    s.send_bytes = calloc(s.p.nh, sizeof(uint64_t));
    s.recv_bytes = calloc(s.p.nh, sizeof(uint64_t));
    if (!s.send || !s.recv || !s.send_bytes || !s.recv_bytes)
      st = nkrt_status_make(NKRT_RESOURCE, "out of host memory");
  }
  if (!st) {
    s.what = (uint64_t)kind << 32 | (uint64_t)dtype << 16 | (op & 0xffff);
    s.group = group_hash(ranks, n);
    pthread_mutex_lock(&h->mu);
    h->seq++;
    switch (kind) {
      case NKRT_CC_ALL_REDUCE: st = all_reduce(&s, src, dst); break;
      case NKRT_CC_ALL_GATHER: st = all_gather(&s, src, dst); break;
      case NKRT_CC_ALL_TO_ALL: st = all_to_all(&s, src, dst); break;
      case NKRT_CC_REDUCE_SCATTER: st = reduce_scatter(&s, src, dst); break;
      default: st = broadcast(&s, src, dst); break;
    }
    pthread_mutex_unlock(&h->mu);
  }
  free(s.send), free(s.recv), free(s.send_bytes), free(s.recv_bytes);
  plan_free(&s.p);
  free(world);
  return st;
}
