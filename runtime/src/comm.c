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
 * others fail at their next wait instead of hanging.
 *
 * Trust: rank 0 alone creates the segment (O_CREAT | O_EXCL, mode 0600); the
 * others open it only if this user owns it and nobody else may read or write
 * it. Each rank records its pid (and its start time and pid namespace) in the
 * header; a waiting rank checks its peers every LIVENESS_NS, so a rank that
 * died ends every wait within about a second with an error naming it. The
 * name is unlinked as soon as every rank has mapped it, and on every failed
 * join; a segment left by a job whose ranks are all dead is removed by the
 * next rank 0 that joins under the name. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
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
#define MAGIC UINT64_C(0x32636374726b6e01) /* set by rank 0 once the header is ready */
#define LIVENESS_NS 250000000ll            /* how often a waiting rank checks its peers */
#define PEERS_PER_CHECK 64                 /* ... and how many of them at a time */
#define MAX_TIMEOUT_S 86400.0              /* NKRT_CC_TIMEOUT's upper bound: a day */
#define DEFAULT_TIMEOUT_S 300.0

/* What a rank is about to run, checked by every rank after the first barrier
 * of a collective: ranks that drifted apart fail instead of mixing data. */
typedef struct {
  _Atomic uint64_t seq;   /* collectives this rank has started */
  _Atomic uint64_t what;  /* kind << 32 | dtype << 16 | reduce op */
  _Atomic int64_t count;
  _Atomic uint64_t group; /* hash of the rank list */
} desc_t;

/* Who a rank is: written before its present[] flag is set (release). */
typedef struct {
  int32_t pid;
  uint32_t unused;
  uint64_t start; /* its start time (/proc/<pid>/stat, clock ticks); 0: unknown */
  uint64_t pidns; /* inode of its pid namespace; 0: unknown */
} peer_t;

typedef struct {
  _Atomic uint64_t magic;      /* MAGIC once rank 0 has set the header up */
  _Atomic uint32_t world_size; /* set by rank 0 */
  _Atomic uint32_t joined;
  _Atomic uint32_t arrived;    /* barrier */
  _Atomic uint32_t generation; /* barrier; also the futex word */
  _Atomic uint32_t failed;     /* a rank gave up waiting */
  _Atomic uint32_t dead;       /* 1 + a rank found dead; 0: none */
  _Atomic uint8_t present[MAX_RANKS];
  peer_t peer[MAX_RANKS];
  desc_t desc[MAX_RANKS];
} header_t;

_Static_assert(sizeof(header_t) <= HEADER_BYTES, "comm header too large");

struct nkrt_comm {
  char name[256];
  char shm_name[240]; /* "/nkrt-cc-<name>" */
  uint32_t rank, world_size;
  int64_t timeout_ns;
  header_t *hdr;
  uint8_t *slots;
  size_t map_bytes;
  dev_t dev;          /* the segment this rank mapped (to unlink only that one) */
  ino_t ino;
  peer_t me;
  uint32_t next_check; /* the next peer find_dead() looks at */
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

/* $NKRT_CC_TIMEOUT: a number of seconds in [0.001, MAX_TIMEOUT_S]; unset or
 * empty: DEFAULT_TIMEOUT_S. Anything else is refused. */
NKRT_MUST_USE_RESULT
static nkrt_status_t env_timeout_ns(int64_t *out_ns) {
  const char *env = getenv("NKRT_CC_TIMEOUT");
  double s = DEFAULT_TIMEOUT_S;
  if (env && *env) {
    bool ok = strlen(env) <= 32;
    for (const char *p = env; ok && *p; p++)
      ok = (*p >= '0' && *p <= '9') || *p == '.' || *p == 'e' || *p == 'E' || *p == '+' ||
           *p == '-';
    char *end = NULL;
    errno = 0;
    if (ok) s = strtod(env, &end);
    if (!ok || end == env || *end || errno || !isfinite(s) || s < 0.001 || s > MAX_TIMEOUT_S)
      return nkrt_status_make(NKRT_INVALID, "NKRT_CC_TIMEOUT=\"%.40s\" is not a number of seconds "
                              "between 0.001 and %.0f: set it to how long a rank may wait for "
                              "the others (e.g. NKRT_CC_TIMEOUT=300, the default), or unset it",
                              env, MAX_TIMEOUT_S);
  }
  *out_ns = (int64_t)(s * 1e9);
  return NULL;
}

/* ---- liveness of the peers -------------------------------------------- */

/* Reads /proc/<pid>/stat: 1 when the process runs (*start = its start time),
 * 0 when it is gone or a zombie, -1 when /proc cannot tell. */
static int proc_state(int32_t pid, uint64_t *start) {
  char path[64], buf[1024];
  snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT || errno == ESRCH ? 0 : -1;
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  int err = errno;
  close(fd);
  if (n <= 0) return n < 0 && err == ESRCH ? 0 : -1;
  buf[n] = 0;
  char *p = strrchr(buf, ')'); /* the command name may hold anything but ends there */
  if (!p || p[1] != ' ' || !p[2]) return -1;
  if (p[2] == 'Z' || p[2] == 'X' || p[2] == 'x') return 0;
  p += 2; /* field 3, the state; the start time is field 22 */
  for (int field = 3; field < 22; field++) {
    p = strchr(p, ' ');
    if (!p) return -1;
    p++;
  }
  *start = strtoull(p, NULL, 10);
  return 1;
}

static void who_am_i(peer_t *me) {
  memset(me, 0, sizeof(*me));
  me->pid = (int32_t)getpid();
  if (proc_state(me->pid, &me->start) != 1) me->start = 0;
  struct stat sb;
  if (stat("/proc/self/ns/pid", &sb) == 0) me->pidns = (uint64_t)sb.st_ino;
}

/* false when the peer's process has exited, was killed (a zombie counts as
 * dead) or its pid now belongs to another process. A peer in another pid
 * namespace cannot be checked: it counts as alive (the timeout still holds). */
static bool peer_alive(const nkrt_comm_t *c, const peer_t *p) {
  if (p->pid <= 0 || p->pid == c->me.pid) return true;
  if (p->pidns && c->me.pidns && p->pidns != c->me.pidns) return true;
  uint64_t start = 0;
  int state = proc_state(p->pid, &start);
  if (state == 1) return !p->start || start == p->start;
  if (state == 0) return false;
  return !(kill(p->pid, 0) != 0 && errno == ESRCH);
}

/* A rank present in the segment whose process is dead (UINT32_MAX: none
 * found); looks at up to PEERS_PER_CHECK peers, round robin. */
static uint32_t find_dead(nkrt_comm_t *c) {
  for (uint32_t i = 0; i < PEERS_PER_CHECK && i < c->world_size; i++) {
    uint32_t r = c->next_check;
    c->next_check = (r + 1) % c->world_size;
    if (r == c->rank || !atomic_load_explicit(&c->hdr->present[r], memory_order_acquire))
      continue;
    if (!peer_alive(c, &c->hdr->peer[r])) return r;
  }
  return UINT32_MAX;
}

/* Marks the communicator failed because `rank` died, and wakes every waiter. */
static void mark_dead(nkrt_comm_t *c, uint32_t rank) {
  uint32_t none = 0;
  atomic_compare_exchange_strong(&c->hdr->dead, &none, rank + 1);
  atomic_store(&c->hdr->failed, 1);
  futex_wake(&c->hdr->generation);
  futex_wake(&c->hdr->joined);
}

/* Waits while *word == value (spinning, then sleeping), up to the timeout;
 * false when it timed out, another rank failed or a peer died. */
static bool wait_change(nkrt_comm_t *c, _Atomic uint32_t *word, uint32_t value) {
  uint64_t t0 = nkrt_now_ns();
  int64_t next_check = LIVENESS_NS;
  while (atomic_load_explicit(word, memory_order_acquire) == value) {
    if (atomic_load_explicit(&c->hdr->failed, memory_order_relaxed)) return false;
    int64_t waited = (int64_t)(nkrt_now_ns() - t0);
    if (waited > c->timeout_ns) return false;
    if (waited >= next_check) {
      next_check = waited + LIVENESS_NS;
      uint32_t dead = find_dead(c);
      if (dead != UINT32_MAX) {
        mark_dead(c, dead);
        return false;
      }
    }
    if (waited < SPIN_NS) sched_yield();
    else futex_wait(word, value, 10000000); /* 10 ms slices: the failed flag is re-read */
  }
  return true;
}

/* "rank 2 (pid 1234) died" for the rank marked dead, into buf. */
static const char *dead_rank(const nkrt_comm_t *c, char *buf, size_t size) {
  uint32_t dead = atomic_load(&c->hdr->dead);
  if (!dead || dead > c->world_size) return NULL;
  snprintf(buf, size, "rank %u (pid %d) died (it exited or was killed)", dead - 1,
           (int)c->hdr->peer[dead - 1].pid);
  return buf;
}

NKRT_MUST_USE_RESULT
static nkrt_status_t give_up(nkrt_comm_t *c, const char *what) {
  bool other = atomic_exchange(&c->hdr->failed, 1) != 0;
  futex_wake(&c->hdr->generation);
  futex_wake(&c->hdr->joined);
  char buf[128];
  if (dead_rank(c, buf, sizeof(buf)))
    return nkrt_status_make(NKRT_FAILURE, "communicator '%s': %s; rank %u of %u stops in %s: "
                            "the job cannot go on (restart it)", c->name, buf, c->rank,
                            c->world_size, what);
  if (other)
    return nkrt_status_make(NKRT_TIMEOUT, "communicator '%s': another rank failed during %s "
                            "(rank %u of %u)", c->name, what, c->rank, c->world_size);
  return nkrt_status_make(NKRT_TIMEOUT, "communicator '%s': rank %u of %u waited %.0f s for the "
                          "other ranks during %s (NKRT_CC_TIMEOUT); they are alive: do all ranks "
                          "run the same collectives in the same order?", c->name, c->rank,
                          c->world_size, (double)c->timeout_ns / 1e9, what);
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

/* ---- the segment -------------------------------------------------------- */

static void sleep_ms(int ms) {
  struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)ms * 1000000};
  nanosleep(&ts, NULL);
}

/* Refuses a segment this user does not own, or that others may use. */
NKRT_MUST_USE_RESULT
static nkrt_status_t check_owner(const nkrt_comm_t *c, const struct stat *sb) {
  if (!S_ISREG(sb->st_mode))
    return nkrt_status_make(NKRT_FAILURE, "communicator '%s': /dev/shm%s is not a shared-memory "
                            "segment (file type 0%o); refusing it: remove it, or use another "
                            "name", c->name, c->shm_name, (unsigned)(sb->st_mode & S_IFMT));
  if (sb->st_uid != geteuid())
    return nkrt_status_make(NKRT_FAILURE, "communicator '%s': the shared-memory segment /dev/shm%s "
                            "belongs to uid %u, not to this user (uid %u); refusing it (whoever "
                            "made it could read and change every rank's data): remove it, or use "
                            "a name private to the job (NKRT_CC_ID)", c->name, c->shm_name,
                            (unsigned)sb->st_uid, (unsigned)geteuid());
  if (sb->st_mode & 077)
    return nkrt_status_make(NKRT_FAILURE, "communicator '%s': the shared-memory segment /dev/shm%s "
                            "has mode 0%03o, open to other users; refusing it (communicators "
                            "create theirs 0600): remove it, or use another name", c->name,
                            c->shm_name, (unsigned)(sb->st_mode & 0777));
  return NULL;
}

/* A segment that cannot be opened: another user's, when it exists. */
static nkrt_status_t open_failed(const nkrt_comm_t *c, int err) {
  struct stat sb;
  char path[256];
  snprintf(path, sizeof(path), "/dev/shm%s", c->shm_name);
  if ((err == EACCES || err == EPERM || err == ELOOP) && lstat(path, &sb) == 0) {
    if (S_ISLNK(sb.st_mode))
      return nkrt_status_make(NKRT_FAILURE, "communicator '%s': %s is a symbolic link; refusing "
                              "it: remove it, or use another name", c->name, path);
    nkrt_status_t st = check_owner(c, &sb);
    if (st) return st;
  }
  return nkrt_status_make(NKRT_RESOURCE, "communicator '%s': shm_open(%s) failed: %s", c->name,
                          c->shm_name, strerror(err));
}

/* Unlinks the segment's name if it still names the segment this rank mapped
 * (never a newer one made under the same name). */
static void unlink_mine(const nkrt_comm_t *c) {
  if (!c->ino) return;
  int fd = shm_open(c->shm_name, O_RDONLY, 0);
  if (fd < 0) return;
  struct stat sb;
  bool mine = fstat(fd, &sb) == 0 && sb.st_dev == c->dev && sb.st_ino == c->ino;
  close(fd);
  if (mine) shm_unlink(c->shm_name);
}

/* A live rank present in the header (UINT32_MAX: none). */
static uint32_t live_rank(const nkrt_comm_t *c, const header_t *h) {
  uint32_t ws = atomic_load(&h->world_size);
  for (uint32_t r = 0; r < ws && r < MAX_RANKS; r++)
    if (atomic_load_explicit(&h->present[r], memory_order_acquire) && peer_alive(c, &h->peer[r]))
      return r;
  return UINT32_MAX;
}

/* Rank 0 met an existing segment under its name: refuses another user's or
 * one open to others, or one a running job uses; removes one left by a job
 * whose ranks are all dead (*removed). */
NKRT_MUST_USE_RESULT
static nkrt_status_t judge_existing(const nkrt_comm_t *c, bool *removed) {
  *removed = false;
  int fd = shm_open(c->shm_name, O_RDONLY, 0);
  if (fd < 0) return errno == ENOENT ? NULL : open_failed(c, errno); /* gone: try again */
  struct stat sb;
  nkrt_status_t st = fstat(fd, &sb) != 0
                         ? nkrt_status_make(NKRT_RESOURCE, "communicator '%s': fstat: %s", c->name,
                                            strerror(errno))
                         : check_owner(c, &sb);
  if (!st && (size_t)sb.st_size >= HEADER_BYTES) {
    const header_t *h = mmap(NULL, HEADER_BYTES, PROT_READ, MAP_SHARED, fd, 0);
    if (h != MAP_FAILED) {
      uint32_t r = atomic_load(&h->magic) == MAGIC ? live_rank(c, h) : UINT32_MAX;
      if (r != UINT32_MAX)
        st = nkrt_status_make(NKRT_INVALID, "communicator '%s' is in use by a running job "
                              "(its rank %u is pid %d): use another name (NKRT_CC_ID) or end "
                              "that job", c->name, r, (int)h->peer[r].pid);
      munmap((void *)h, HEADER_BYTES);
    }
  }
  close(fd);
  if (!st) {
    /* left by a job whose ranks are all dead (or one killed while setting it up) */
    shm_unlink(c->shm_name);
    *removed = true;
  }
  return st;
}

NKRT_MUST_USE_RESULT
static nkrt_status_t map_segment(nkrt_comm_t *c, int fd, const struct stat *sb, size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED)
    return nkrt_status_make(NKRT_RESOURCE, "communicator '%s': mmap of %zu bytes failed: %s",
                            c->name, bytes, strerror(errno));
  c->hdr = p;
  c->slots = (uint8_t *)p + HEADER_BYTES;
  c->map_bytes = bytes;
  c->dev = sb->st_dev;
  c->ino = sb->st_ino;
  return NULL;
}

/* Records who this rank is and marks it present (false: it already was). */
static bool register_rank(nkrt_comm_t *c) {
  c->hdr->peer[c->rank] = c->me;
  return atomic_exchange_explicit(&c->hdr->present[c->rank], 1, memory_order_acq_rel) == 0;
}

/* Rank 0: creates the segment (exclusively, 0600) and sets its header up. */
NKRT_MUST_USE_RESULT
static nkrt_status_t create_segment(nkrt_comm_t *c, size_t bytes) {
  int fd = -1;
  for (int attempt = 0; fd < 0; attempt++) {
    fd = shm_open(c->shm_name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd >= 0) break;
    if (errno != EEXIST || attempt == 8) return open_failed(c, errno);
    bool removed = false;
    NKRT_RETURN_IF_ERROR(judge_existing(c, &removed));
  }
  struct stat sb;
  nkrt_status_t st = NULL;
  if (fstat(fd, &sb) != 0 || ftruncate(fd, (off_t)bytes) != 0)
    st = nkrt_status_make(NKRT_RESOURCE, "communicator '%s': cannot size the shared segment to "
                          "%zu bytes: %s", c->name, bytes, strerror(errno));
  if (!st) st = map_segment(c, fd, &sb, bytes);
  close(fd);
  if (st) {
    shm_unlink(c->shm_name);
    return st;
  }
  header_t *h = c->hdr;
  atomic_store(&h->world_size, c->world_size);
  register_rank(c); /* so that the others find rank 0 alive in a ready header */
  atomic_store_explicit(&h->magic, MAGIC, memory_order_release);
  return NULL;
}

/* Ranks but 0: opens the segment rank 0 created, once it is there and ready,
 * if it is this user's and closed to others. A segment whose ranks are all
 * dead was left by an earlier job: rank 0 replaces it, so this waits. */
NKRT_MUST_USE_RESULT
static nkrt_status_t open_segment(nkrt_comm_t *c, size_t bytes, uint64_t t0) {
  int32_t leftover = 0; /* rank 0's pid in a leftover segment met on the way */
  for (;;) {
    int fd = shm_open(c->shm_name, O_RDWR, 0);
    if (fd < 0 && errno != ENOENT) return open_failed(c, errno);
    if (fd >= 0) {
      struct stat sb;
      nkrt_status_t st = fstat(fd, &sb) != 0
                             ? nkrt_status_make(NKRT_RESOURCE, "communicator '%s': fstat: %s",
                                                c->name, strerror(errno))
                             : check_owner(c, &sb);
      if (!st && (size_t)sb.st_size >= HEADER_BYTES) {
        const header_t *h = mmap(NULL, HEADER_BYTES, PROT_READ, MAP_SHARED, fd, 0);
        if (h == MAP_FAILED) {
          st = nkrt_status_make(NKRT_RESOURCE, "communicator '%s': mmap: %s", c->name,
                                strerror(errno));
        } else if (atomic_load_explicit(&h->magic, memory_order_acquire) == MAGIC) {
          uint32_t ws = atomic_load(&h->world_size);
          bool live = live_rank(c, h) != UINT32_MAX;
          if (!live) {
            leftover = h->peer[0].pid;
          } else if (ws != c->world_size || (size_t)sb.st_size != bytes) {
            st = nkrt_status_make(NKRT_INVALID, "communicator '%s' was joined by a job of %u "
                                  "ranks, not %u: use a name private to the job", c->name, ws,
                                  c->world_size);
          } else if (!peer_alive(c, &h->peer[0])) {
            st = nkrt_status_make(NKRT_FAILURE, "communicator '%s': rank 0 (pid %d) died (it "
                                  "exited or was killed) while the ranks joined: the job cannot "
                                  "go on (restart it)", c->name, (int)h->peer[0].pid);
          } else {
            munmap((void *)h, HEADER_BYTES);
            st = map_segment(c, fd, &sb, bytes);
            close(fd);
            return st;
          }
        }
        if (h != MAP_FAILED) munmap((void *)h, HEADER_BYTES);
      }
      close(fd);
      if (st) return st;
    }
    if ((int64_t)(nkrt_now_ns() - t0) > c->timeout_ns) {
      char also[160] = "";
      if (leftover)
        snprintf(also, sizeof(also), "; a segment under this name was left by an earlier job "
                 "whose rank 0 (pid %d) is dead", (int)leftover);
      return nkrt_status_make(NKRT_TIMEOUT, "communicator '%s': rank 0 did not create it within "
                              "%.0f s (NKRT_CC_TIMEOUT; rank %u waited)%s: does rank 0 run, "
                              "under the same NKRT_CC_ID?", c->name,
                              (double)c->timeout_ns / 1e9, c->rank, also);
    }
    sleep_ms(10);
  }
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
  if (timeout_ns < 0) NKRT_RETURN_IF_ERROR(env_timeout_ns(&timeout_ns));
  nkrt_comm_t *c = calloc(1, sizeof(*c));
  if (!c) return nkrt_status_make(NKRT_RESOURCE, "out of host memory");
  snprintf(c->name, sizeof(c->name), "%s", name);
  snprintf(c->shm_name, sizeof(c->shm_name), "/nkrt-cc-%s", name);
  c->rank = rank;
  c->world_size = world_size;
  c->timeout_ns = timeout_ns;
  c->next_check = (rank + 1) % world_size;
  who_am_i(&c->me);
  pthread_mutex_init(&c->mu, NULL);
  size_t bytes = HEADER_BYTES + (size_t)world_size * SLOT_BYTES;
  uint64_t t0 = nkrt_now_ns();
  nkrt_status_t st = rank == 0 ? create_segment(c, bytes) : open_segment(c, bytes, t0);
  if (!st && rank != 0 && !register_rank(c))
    st = nkrt_status_make(NKRT_INVALID, "communicator '%s': rank %u joined twice (two jobs "
                          "under one name? use a name private to the job)", name, rank);
  if (!st) {
    atomic_fetch_add(&c->hdr->joined, 1);
    futex_wake(&c->hdr->joined);
    int64_t next_check = LIVENESS_NS;
    while (!st) {
      uint32_t w = atomic_load(&c->hdr->joined); /* also the futex word */
      if (w >= world_size) break;
      int64_t waited = (int64_t)(nkrt_now_ns() - t0);
      if (waited >= next_check) {
        next_check = waited + LIVENESS_NS;
        uint32_t dead = find_dead(c);
        if (dead != UINT32_MAX) mark_dead(c, dead);
      }
      char buf[128];
      if (dead_rank(c, buf, sizeof(buf))) {
        st = nkrt_status_make(NKRT_FAILURE, "communicator '%s': %s while the ranks joined; "
                              "rank %u of %u stops: the job cannot go on (restart it)", name,
                              buf, rank, world_size);
      } else if (atomic_load(&c->hdr->failed) || waited > c->timeout_ns) {
        uint32_t missing = UINT32_MAX;
        for (uint32_t r = 0; r < world_size && missing == UINT32_MAX; r++)
          if (!atomic_load(&c->hdr->present[r])) missing = r;
        atomic_store(&c->hdr->failed, 1);
        futex_wake(&c->hdr->joined);
        st = nkrt_status_make(NKRT_TIMEOUT, "communicator '%s': %u of %u ranks joined within "
                              "%.0f s (rank %u is missing; NKRT_CC_TIMEOUT)", name,
                              atomic_load(&c->hdr->joined), world_size,
                              (double)c->timeout_ns / 1e9, missing);
      } else {
        futex_wait(&c->hdr->joined, w, 10000000);
      }
    }
  }
  /* every rank has mapped it, or the join failed: the name has served; each
   * rank removes it (if it still names this segment), so that a rank killed
   * on the way leaves nothing behind */
  unlink_mine(c);
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
                            "the job shares and other users cannot guess (torch_to_nkipy's "
                            "init_nkipy_backend draws one when torch.distributed is initialised "
                            "or torchrun's store is there; else set it, e.g. "
                            "NKRT_CC_ID=job42-$(openssl rand -hex 8), the same on every rank)");
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

/* ---- hosts ----------------------------------------------------------------- */

nkrt_status_t nkrt_comm_set_hosts(uint32_t world_size, const uint32_t *host_of,
                                  const nkrt_comm_transport_t *transport) {
  (void)transport;
  if (!host_of) return NULL;
  for (uint32_t r = 0; r < world_size; r++)
    if (host_of[r] != host_of[0])
      return nkrt_status_make(NKRT_INVALID, "collectives across several hosts are not "
                              "supported by this build");
  return NULL;
}
