/* comm.c - collectives between the processes of a job (nkrt/comm.h).
 *
 * One POSIX shared-memory segment per communicator: a header (the world size,
 * who has joined, a barrier) and one staging slot per rank. A collective moves
 * data in chunks of a slot: every member copies its chunk into its own slot,
 * all ranks meet at a barrier, every member reads what it needs from the
 * others' slots, and all meet again before the slots are reused. Each rank
 * combines the members' data itself, in group order, so all members compute
 * the same bits.
 *
 * The barrier counts arrivals and bumps a generation; waiters spin briefly
 * and then sleep on a futex of the generation (shared between processes).
 * Waiting is bounded: a rank that gives up marks the segment failed, and the
 * others fail at their next wait instead of hanging. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "half.h"
#include "runtime.h"
#include "nkrt/comm.h"

#define MAX_RANKS 1024
#define SLOT_BYTES (4u << 20)
#define HEADER_BYTES (64u << 10)
#define SPIN_NS 50000

/* What a rank is about to run, checked by every rank after the first barrier
 * of a collective: ranks that drifted apart fail instead of mixing data. */
typedef struct {
  _Atomic uint64_t seq;   /* collectives this rank has started */
  _Atomic uint64_t what;  /* kind << 32 | dtype << 16 | reduce op */
  _Atomic int64_t count;
  _Atomic uint64_t group; /* hash of the rank list */
} desc_t;

typedef struct {
  _Atomic uint32_t world_size; /* 0 until the first rank sets it */
  _Atomic uint32_t joined;
  _Atomic uint32_t arrived;    /* barrier */
  _Atomic uint32_t generation; /* barrier; also the futex word */
  _Atomic uint32_t failed;     /* a rank gave up waiting */
  _Atomic uint8_t present[MAX_RANKS];
  desc_t desc[MAX_RANKS];
} header_t;

_Static_assert(sizeof(header_t) <= HEADER_BYTES, "comm header too large");

struct nkrt_comm {
  char name[256];
  uint32_t rank, world_size;
  int64_t timeout_ns;
  header_t *hdr;
  uint8_t *slots;
  size_t map_bytes;
  pthread_mutex_t mu; /* one collective at a time in this process */
  uint64_t seq;       /* collectives started (under mu) */
};

static void futex_wait(_Atomic uint32_t *word, uint32_t expected, int64_t ns) {
  struct timespec ts = {.tv_sec = ns / 1000000000, .tv_nsec = ns % 1000000000};
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, expected, &ts, NULL, 0);
}

static void futex_wake(_Atomic uint32_t *word) {
  syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static int64_t env_timeout_ns(void) {
  const char *env = getenv("NKRT_CC_TIMEOUT");
  double s = env && *env ? strtod(env, NULL) : 300.0;
  if (!(s > 0)) s = 300.0;
  return (int64_t)(s * 1e9);
}

/* Waits while *word == value (spinning, then sleeping), up to the timeout;
 * false when it timed out or another rank failed. */
static bool wait_change(nkrt_comm_t *c, _Atomic uint32_t *word, uint32_t value) {
  uint64_t t0 = nkrt_now_ns();
  while (atomic_load_explicit(word, memory_order_acquire) == value) {
    if (atomic_load_explicit(&c->hdr->failed, memory_order_relaxed)) return false;
    uint64_t waited = nkrt_now_ns() - t0;
    if ((int64_t)waited > c->timeout_ns) return false;
    if (waited < SPIN_NS) sched_yield();
    else futex_wait(word, value, 10000000); /* 10 ms slices: the failed flag is re-read */
  }
  return true;
}

NKRT_MUST_USE_RESULT
static nkrt_status_t give_up(nkrt_comm_t *c, const char *what) {
  bool other = atomic_exchange(&c->hdr->failed, 1) != 0;
  futex_wake(&c->hdr->generation);
  futex_wake(&c->hdr->joined);
  if (other)
    return nkrt_status_make(NKRT_TIMEOUT, "communicator '%s': another rank failed during %s "
                            "(rank %u of %u)", c->name, what, c->rank, c->world_size);
  return nkrt_status_make(NKRT_TIMEOUT, "communicator '%s': rank %u of %u waited %.0f s for the "
                          "other ranks during %s (NKRT_CC_TIMEOUT); do all ranks run the same "
                          "collectives in the same order?", c->name, c->rank, c->world_size,
                          (double)c->timeout_ns / 1e9, what);
}

NKRT_MUST_USE_RESULT
static nkrt_status_t barrier(nkrt_comm_t *c, const char *what) {
  header_t *h = c->hdr;
  /* a rank that gave up left the count inconsistent: nothing can meet again */
  if (atomic_load_explicit(&h->failed, memory_order_acquire)) return give_up(c, what);
  uint32_t gen = atomic_load_explicit(&h->generation, memory_order_acquire);
  if (atomic_fetch_add_explicit(&h->arrived, 1, memory_order_acq_rel) + 1 == c->world_size) {
    atomic_store_explicit(&h->arrived, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->generation, 1, memory_order_release);
    futex_wake(&h->generation);
    return NULL;
  }
  return wait_change(c, &h->generation, gen) ? NULL : give_up(c, what);
}

static bool valid_name(const char *name) {
  size_t n = strlen(name);
  if (n == 0 || n > 200) return false;
  for (size_t i = 0; i < n; i++) {
    char ch = name[i];
    bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '.' || ch == '_' || ch == '-';
    if (!ok) return false;
  }
  return true;
}

nkrt_status_t nkrt_comm_join(const char *name, uint32_t rank, uint32_t world_size,
                             int64_t timeout_ns, nkrt_comm_t **out_comm) {
  if (!out_comm) return nkrt_status_make(NKRT_INVALID, "out_comm is NULL");
  *out_comm = NULL;
  if (!name || !valid_name(name))
    return nkrt_status_make(NKRT_INVALID, "communicator name \"%s\" must be 1 to 200 characters "
                            "of [A-Za-z0-9._-]", name ? name : "(null)");
  if (world_size < 2 || world_size > MAX_RANKS)
    return nkrt_status_make(NKRT_INVALID, "communicator world size %u is not between 2 and %u",
                            world_size, MAX_RANKS);
  if (rank >= world_size)
    return nkrt_status_make(NKRT_INVALID, "rank %u is not below the world size %u", rank,
                            world_size);
  nkrt_comm_t *c = calloc(1, sizeof(*c));
  if (!c) return nkrt_status_make(NKRT_RESOURCE, "out of host memory");
  snprintf(c->name, sizeof(c->name), "%s", name);
  c->rank = rank;
  c->world_size = world_size;
  c->timeout_ns = timeout_ns < 0 ? env_timeout_ns() : timeout_ns;
  pthread_mutex_init(&c->mu, NULL);
  char shm_name[240];
  snprintf(shm_name, sizeof(shm_name), "/nkrt-cc-%s", name);
  size_t bytes = HEADER_BYTES + (size_t)world_size * SLOT_BYTES;
  int fd = shm_open(shm_name, O_CREAT | O_RDWR, 0600);
  nkrt_status_t st = NULL;
  struct stat sb;
  if (fd < 0) {
    st = nkrt_status_make(NKRT_RESOURCE, "communicator '%s': shm_open(%s) failed: %s", name,
                          shm_name, strerror(errno));
  } else if (fstat(fd, &sb) != 0 || (sb.st_size != 0 && (size_t)sb.st_size != bytes)) {
    st = nkrt_status_make(NKRT_INVALID, "communicator '%s' exists with another size (a job of "
                          "another world size, or left by a crashed job): use a new name",
                          name);
  } else if (ftruncate(fd, (off_t)bytes) != 0) {
    st = nkrt_status_make(NKRT_RESOURCE, "communicator '%s': cannot size the shared segment to "
                          "%zu bytes: %s", name, bytes, strerror(errno));
  } else {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
      st = nkrt_status_make(NKRT_RESOURCE, "communicator '%s': mmap of %zu bytes failed: %s",
                            name, bytes, strerror(errno));
    else {
      c->hdr = p;
      c->slots = (uint8_t *)p + HEADER_BYTES;
      c->map_bytes = bytes;
    }
  }
  if (fd >= 0) close(fd);
  if (!st) {
    header_t *h = c->hdr;
    uint32_t expected = 0;
    if (!atomic_compare_exchange_strong(&h->world_size, &expected, world_size) &&
        expected != world_size)
      st = nkrt_status_make(NKRT_INVALID, "communicator '%s' was joined by a job of %u ranks, "
                            "not %u", name, expected, world_size);
    else if (atomic_exchange(&h->present[rank], 1) != 0)
      st = nkrt_status_make(NKRT_INVALID, "communicator '%s': rank %u joined twice (a name left "
                            "by an earlier job? use a new name)", name, rank);
  }
  if (!st) {
    uint32_t joined = atomic_fetch_add(&c->hdr->joined, 1) + 1;
    futex_wake(&c->hdr->joined);
    if (joined == world_size) shm_unlink(shm_name); /* all mapped: nothing to leave behind */
    uint64_t t0 = nkrt_now_ns();
    while (!st) {
      uint32_t w = atomic_load(&c->hdr->joined);  /* also the futex word */
      if (w >= world_size) break;
      if (atomic_load(&c->hdr->failed) || (int64_t)(nkrt_now_ns() - t0) > c->timeout_ns) {
        uint32_t missing = UINT32_MAX;
        for (uint32_t r = 0; r < world_size && missing == UINT32_MAX; r++)
          if (!atomic_load(&c->hdr->present[r])) missing = r;
        atomic_store(&c->hdr->failed, 1);
        st = nkrt_status_make(NKRT_TIMEOUT, "communicator '%s': %u of %u ranks joined within "
                              "%.0f s (rank %u is missing; NKRT_CC_TIMEOUT)", name,
                              atomic_load(&c->hdr->joined), world_size,
                              (double)c->timeout_ns / 1e9, missing);
        shm_unlink(shm_name);
      } else {
        futex_wait(&c->hdr->joined, w, 10000000);
      }
    }
  }
  if (st) {
    nkrt_comm_destroy(c);
    return st;
  }
  *out_comm = c;
  return NULL;
}

void nkrt_comm_destroy(nkrt_comm_t *c) {
  if (!c) return;
  if (c->hdr) munmap(c->hdr, c->map_bytes);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

uint32_t nkrt_comm_rank(const nkrt_comm_t *c) { return c ? c->rank : 0; }
uint32_t nkrt_comm_world_size(const nkrt_comm_t *c) { return c ? c->world_size : 0; }

nkrt_status_t nkrt_comm_barrier(nkrt_comm_t *c) {
  if (!c) return nkrt_status_make(NKRT_INVALID_HANDLE, "communicator is NULL");
  pthread_mutex_lock(&c->mu);
  nkrt_status_t st = barrier(c, "a barrier");
  pthread_mutex_unlock(&c->mu);
  return st;
}

/* The caller's index in the group, after checking the group. */
NKRT_MUST_USE_RESULT
static nkrt_status_t group_index(const nkrt_comm_t *c, const int32_t *ranks, uint32_t n,
                                 uint32_t dtype, int64_t count, uint32_t *out_index) {
  if (!ranks || n == 0) return nkrt_status_make(NKRT_INVALID, "collective: empty rank group");
  if (count < 0) return nkrt_status_make(NKRT_INVALID, "collective: negative count");
  if (nkrt_dtype_size(dtype) == 0)
    return nkrt_status_make(NKRT_INVALID, "collective: unknown dtype %u", dtype);
  uint32_t index = UINT32_MAX;
  for (uint32_t i = 0; i < n; i++) {
    if (ranks[i] < 0 || (uint32_t)ranks[i] >= c->world_size)
      return nkrt_status_make(NKRT_INVALID, "collective: rank %d of its group is outside the "
                              "job's %u ranks", ranks[i], c->world_size);
    for (uint32_t j = 0; j < i; j++)
      if (ranks[j] == ranks[i])
        return nkrt_status_make(NKRT_INVALID, "collective: rank %d is twice in its group",
                                ranks[i]);
    if ((uint32_t)ranks[i] == c->rank) index = i;
  }
  if (index == UINT32_MAX)
    return nkrt_status_make(NKRT_INVALID, "collective: rank %u is not in its own group", c->rank);
  *out_index = index;
  return NULL;
}

static const char *const kind_names[] = {"all_reduce", "all_gather", "all_to_all"};

static uint64_t group_hash(const int32_t *ranks, uint32_t n) {
  uint64_t h = 1469598103934665603ull;
  for (uint32_t i = 0; i < n; i++) h = (h ^ (uint32_t)ranks[i]) * 1099511628211ull;
  return h ^ n;
}

/* Publishes what this rank is about to run (before its first barrier). */
static void announce(nkrt_comm_t *c, uint32_t kind, uint32_t dtype, uint32_t op,
                     int64_t count, const int32_t *ranks, uint32_t n) {
  desc_t *d = &c->hdr->desc[c->rank];
  atomic_store_explicit(&d->what, (uint64_t)kind << 32 | (uint64_t)dtype << 16 | op,
                        memory_order_relaxed);
  atomic_store_explicit(&d->count, count, memory_order_relaxed);
  atomic_store_explicit(&d->group, group_hash(ranks, n), memory_order_relaxed);
  atomic_store_explicit(&d->seq, ++c->seq, memory_order_release);
}

/* After the first barrier: every rank runs the same collective of the same
 * size, and every member of the group passed the same rank list. */
NKRT_MUST_USE_RESULT
static nkrt_status_t agree(nkrt_comm_t *c, const int32_t *ranks, uint32_t n) {
  const desc_t *mine = &c->hdr->desc[c->rank];
  uint64_t what = atomic_load(&mine->what), group = atomic_load(&mine->group);
  int64_t count = atomic_load(&mine->count);
  for (uint32_t r = 0; r < c->world_size; r++) {
    const desc_t *d = &c->hdr->desc[r];
    uint64_t rseq = atomic_load_explicit(&d->seq, memory_order_acquire);
    uint64_t rwhat = atomic_load(&d->what);
    int64_t rcount = atomic_load(&d->count);
    bool member = false;
    for (uint32_t i = 0; i < n && !member; i++) member = (uint32_t)ranks[i] == r;
    if (rseq == c->seq && rwhat == what && rcount == count &&
        (!member || atomic_load(&d->group) == group))
      continue;
    atomic_store(&c->hdr->failed, 1);
    futex_wake(&c->hdr->generation);
    return nkrt_status_make(NKRT_INVALID, "communicator '%s': ranks out of step: rank %u runs "
                            "collective #%" PRIu64 ", %s of %" PRId64 " elements (dtype %u, op %u), "
                            "rank %u runs #%" PRIu64 ", %s of %" PRId64 " elements (dtype %u, op "
                            "%u)%s; every rank must run the same collectives in the same order",
                            c->name, c->rank, c->seq, kind_names[(what >> 32) % 3], count,
                            (unsigned)(what >> 16 & 0xffff), (unsigned)(what & 0xffff), r, rseq,
                            kind_names[(rwhat >> 32) % 3], rcount, (unsigned)(rwhat >> 16 & 0xffff),
                            (unsigned)(rwhat & 0xffff),
                            member && rwhat == what && rcount == count ? " with another group" : "");
  }
  return NULL;
}

static uint8_t *slot(const nkrt_comm_t *c, int32_t rank) {
  return c->slots + (size_t)rank * SLOT_BYTES;
}

static float load_f(uint32_t dtype, const void *p, int64_t i) {
  switch (dtype) {
    case NKRT_DTYPE_FLOAT32: return ((const float *)p)[i];
    case NKRT_DTYPE_FLOAT16: return nkrt_half_to_float(((const uint16_t *)p)[i]);
    default: return nkrt_bf16_to_float(((const uint16_t *)p)[i]);
  }
}

static float combine_f(uint32_t op, float a, float b) {
  switch (op) {
    case NKRT_CC_MUL: return a * b;
    case NKRT_CC_MAX: return a > b || a != a ? a : b;
    case NKRT_CC_MIN: return a < b || a != a ? a : b;
    default: return a + b;
  }
}

static int64_t combine_i(uint32_t op, int64_t a, int64_t b) {
  switch (op) {
    /* wrapping arithmetic, as the integer dtypes do */
    case NKRT_CC_MUL: return (int64_t)((uint64_t)a * (uint64_t)b);
    case NKRT_CC_MAX: return a > b ? a : b;
    case NKRT_CC_MIN: return a < b ? a : b;
    default: return (int64_t)((uint64_t)a + (uint64_t)b);
  }
}

static int64_t load_i(uint32_t dtype, const void *p, int64_t i) {
  switch (dtype) {
    case NKRT_DTYPE_INT8: return ((const int8_t *)p)[i];
    case NKRT_DTYPE_UINT8: case NKRT_DTYPE_BOOL: return ((const uint8_t *)p)[i];
    case NKRT_DTYPE_INT16: return ((const int16_t *)p)[i];
    case NKRT_DTYPE_UINT16: return ((const uint16_t *)p)[i];
    case NKRT_DTYPE_INT32: return ((const int32_t *)p)[i];
    case NKRT_DTYPE_UINT32: return ((const uint32_t *)p)[i];
    default: return ((const int64_t *)p)[i];
  }
}

static void store_i(uint32_t dtype, void *p, int64_t i, int64_t v) {
  switch (dtype) {
    case NKRT_DTYPE_INT8: ((int8_t *)p)[i] = (int8_t)v; break;
    case NKRT_DTYPE_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case NKRT_DTYPE_BOOL: ((uint8_t *)p)[i] = v != 0; break;
    case NKRT_DTYPE_INT16: ((int16_t *)p)[i] = (int16_t)v; break;
    case NKRT_DTYPE_UINT16: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case NKRT_DTYPE_INT32: ((int32_t *)p)[i] = (int32_t)v; break;
    case NKRT_DTYPE_UINT32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    default: ((int64_t *)p)[i] = v; break;
  }
}

/* dst[0 .. c) = op over the members' slots (each holding c elements). */
static void reduce_slots(const nkrt_comm_t *comm, uint32_t dtype, uint32_t op,
                         const int32_t *ranks, uint32_t n, uint8_t *dst, int64_t c) {
  bool is_float = dtype == NKRT_DTYPE_FLOAT32 || dtype == NKRT_DTYPE_FLOAT16 ||
                  dtype == NKRT_DTYPE_BFLOAT16;
  if (dtype == NKRT_DTYPE_FLOAT32) {
    float *d = (float *)dst;
    memcpy(d, slot(comm, ranks[0]), (size_t)c * 4);
    for (uint32_t m = 1; m < n; m++) {
      const float *s = (const float *)slot(comm, ranks[m]);
      for (int64_t i = 0; i < c; i++) d[i] = combine_f(op, d[i], s[i]);
    }
    return;
  }
  for (int64_t i = 0; i < c; i++) {
    if (is_float) {
      float acc = load_f(dtype, slot(comm, ranks[0]), i);
      for (uint32_t m = 1; m < n; m++) acc = combine_f(op, acc, load_f(dtype, slot(comm, ranks[m]), i));
      ((uint16_t *)dst)[i] = dtype == NKRT_DTYPE_FLOAT16 ? nkrt_float_to_half(acc)
                                                         : nkrt_float_to_bf16(acc);
    } else {
      int64_t acc = load_i(dtype, slot(comm, ranks[0]), i);
      for (uint32_t m = 1; m < n; m++) {
        int64_t v = load_i(dtype, slot(comm, ranks[m]), i);
        acc = dtype == NKRT_DTYPE_BOOL ? (op == NKRT_CC_MUL || op == NKRT_CC_MIN ? (acc && v)
                                                                               : (acc || v))
                                       : combine_i(op, acc, v);
      }
      store_i(dtype, dst, i, acc);
    }
  }
}

/* One collective, moved slot-sized chunk by chunk: fill() puts this rank's
 * part of elements [off, off + k) in its slot, the ranks meet (and check they
 * run the same thing), take() reads what it needs from the members' slots,
 * and the ranks meet again before the slots are reused. */
typedef struct xfer {
  nkrt_comm_t *c;
  uint32_t kind, dtype, op;
  const int32_t *ranks;
  uint32_t n, me; /* group size, the caller's index in it */
  const uint8_t *src;
  uint8_t *dst;
  int64_t count;
  size_t es;
  void (*fill)(const struct xfer *x, int64_t off, int64_t k);
  void (*take)(const struct xfer *x, int64_t off, int64_t k);
} xfer_t;

static void fill_own(const xfer_t *x, int64_t off, int64_t k) {
  memcpy(slot(x->c, (int32_t)x->c->rank), x->src + off * (int64_t)x->es, (size_t)k * x->es);
}

static void take_reduced(const xfer_t *x, int64_t off, int64_t k) {
  reduce_slots(x->c, x->dtype, x->op, x->ranks, x->n, x->dst + off * (int64_t)x->es, k);
}

static void take_gathered(const xfer_t *x, int64_t off, int64_t k) {
  for (uint32_t m = 0; m < x->n; m++)
    memcpy(x->dst + ((int64_t)m * x->count + off) * (int64_t)x->es, slot(x->c, x->ranks[m]),
           (size_t)k * x->es);
}

/* all_to_all: n blocks of k elements per slot, block b for member b */
static void fill_blocks(const xfer_t *x, int64_t off, int64_t k) {
  uint8_t *mine = slot(x->c, (int32_t)x->c->rank);
  for (uint32_t b = 0; b < x->n; b++)
    memcpy(mine + (size_t)b * (size_t)k * x->es,
           x->src + ((int64_t)b * x->count + off) * (int64_t)x->es, (size_t)k * x->es);
}

static void take_blocks(const xfer_t *x, int64_t off, int64_t k) {
  for (uint32_t m = 0; m < x->n; m++)
    memcpy(x->dst + ((int64_t)m * x->count + off) * (int64_t)x->es,
           slot(x->c, x->ranks[m]) + (size_t)x->me * (size_t)k * x->es, (size_t)k * x->es);
}

NKRT_MUST_USE_RESULT
static nkrt_status_t run_chunks(xfer_t *x) {
  nkrt_comm_t *c = x->c;
  if (!c) return nkrt_status_make(NKRT_INVALID_HANDLE, "communicator is NULL");
  NKRT_RETURN_IF_ERROR(group_index(c, x->ranks, x->n, x->dtype, x->count, &x->me));
  x->es = nkrt_dtype_size(x->dtype);
  int64_t per_slot = (int64_t)(SLOT_BYTES / x->es);
  /* all_to_all holds n blocks per slot; sized by the world, not the group, so
   * ranks of groups of different sizes go through the same number of chunks
   * (every barrier is world-wide) */
  int64_t chunk = x->kind == NKRT_CC_ALL_TO_ALL ? per_slot / c->world_size : per_slot;
  if (chunk < 1) return nkrt_status_make(NKRT_INVALID, "all_to_all: group too large");
  const char *what = kind_names[x->kind];
  nkrt_status_t st = NULL;
  pthread_mutex_lock(&c->mu);
  announce(c, x->kind, x->dtype, x->op, x->count, x->ranks, x->n);
  for (int64_t off = 0; (off == 0 || off < x->count) && !st; off += chunk) {
    int64_t k = x->count - off < chunk ? x->count - off : chunk;
    x->fill(x, off, k);
    st = barrier(c, what);
    if (!st && off == 0) st = agree(c, x->ranks, x->n);
    if (!st) x->take(x, off, k);
    if (!st) st = barrier(c, what);
  }
  pthread_mutex_unlock(&c->mu);
  return st;
}

nkrt_status_t nkrt_comm_all_reduce(nkrt_comm_t *c, uint32_t dtype, uint32_t op,
                                   const int32_t *ranks, uint32_t n, const void *src, void *dst,
                                   int64_t count) {
  if (op > NKRT_CC_MIN) return nkrt_status_make(NKRT_INVALID, "all_reduce: unknown op %u", op);
  if (dtype == NKRT_DTYPE_FLOAT64 || dtype == NKRT_DTYPE_UINT64)
    return nkrt_status_make(NKRT_INVALID, "all_reduce: dtype %u is not supported", dtype);
  xfer_t x = {.c = c, .kind = NKRT_CC_ALL_REDUCE, .dtype = dtype, .op = op, .ranks = ranks,
              .n = n, .src = src, .dst = dst, .count = count, .fill = fill_own,
              .take = take_reduced};
  return run_chunks(&x);
}

nkrt_status_t nkrt_comm_all_gather(nkrt_comm_t *c, uint32_t dtype, const int32_t *ranks,
                                   uint32_t n, const void *src, void *dst, int64_t count) {
  xfer_t x = {.c = c, .kind = NKRT_CC_ALL_GATHER, .dtype = dtype, .ranks = ranks, .n = n,
              .src = src, .dst = dst, .count = count, .fill = fill_own, .take = take_gathered};
  return run_chunks(&x);
}

nkrt_status_t nkrt_comm_all_to_all(nkrt_comm_t *c, uint32_t dtype, const int32_t *ranks,
                                   uint32_t n, const void *src, void *dst, int64_t count) {
  xfer_t x = {.c = c, .kind = NKRT_CC_ALL_TO_ALL, .dtype = dtype, .ranks = ranks, .n = n,
              .src = src, .dst = dst, .count = count, .fill = fill_blocks, .take = take_blocks};
  return run_chunks(&x);
}

/* ---- the runtime's communicator (env->lib->collective) -------------------- */

nkrt_status_t nkrt_runtime_comm(nkrt_runtime_t *rt, int32_t rank, int32_t world_size,
                                nkrt_comm_t **out_comm) {
  *out_comm = NULL;
  pthread_mutex_lock(&rt->comm_mu);
  nkrt_status_t st = NULL;
  if (!rt->comm) {
    const char *id = getenv("NKRT_CC_ID");
    if (world_size < 2)
      st = nkrt_status_make(NKRT_INVALID, "a collective over several ranks in a model loaded "
                            "with world size %d: load it with the job's rank and world size "
                            "(cc_enabled)", world_size);
    else if (!id || !*id)
      st = nkrt_status_make(NKRT_INVALID, "collectives need NKRT_CC_ID: a name every rank of "
                            "the job shares (torch_to_nkipy's init_nkipy_backend sets it; "
                            "e.g. NKRT_CC_ID=job42)");
    else
      st = nkrt_comm_join(id, (uint32_t)rank, (uint32_t)world_size, -1, &rt->comm);
  } else if (nkrt_comm_rank(rt->comm) != (uint32_t)rank ||
             nkrt_comm_world_size(rt->comm) != (uint32_t)world_size) {
    st = nkrt_status_make(NKRT_INVALID, "this process is rank %u of %u in its communicator; a "
                          "model loaded as rank %d of %d cannot use it",
                          nkrt_comm_rank(rt->comm), nkrt_comm_world_size(rt->comm), rank,
                          world_size);
  }
  if (!st) *out_comm = rt->comm;
  pthread_mutex_unlock(&rt->comm_mu);
  return st;
}

nkrt_status_t nkrt_runtime_collective(nkrt_runtime_t *rt, int32_t rank, int32_t world_size,
                                      uint32_t kind, uint32_t dtype, uint32_t reduce_op,
                                      const int32_t *ranks, uint32_t n, const void *src, void *dst,
                                      int64_t count) {
  nkrt_comm_t *comm = NULL;
  nkrt_status_t st = nkrt_runtime_comm(rt, rank, world_size, &comm);
  if (!st) {
    switch (kind) {
      case NKRT_CC_ALL_REDUCE:
        st = nkrt_comm_all_reduce(comm, dtype, reduce_op, ranks, n, src, dst, count);
        break;
      case NKRT_CC_ALL_GATHER: st = nkrt_comm_all_gather(comm, dtype, ranks, n, src, dst, count); break;
      case NKRT_CC_ALL_TO_ALL: st = nkrt_comm_all_to_all(comm, dtype, ranks, n, src, dst, count); break;
      default: st = nkrt_status_make(NKRT_INVALID, "unknown collective kind %u", kind);
    }
  }
  return st;
}
