/* comm.c - collectives between the processes of a job (nkrt/comm.h).
 *
 * One POSIX shared-memory segment per communicator: a header (the world size,
 * who has joined, a barrier) and one staging slot per rank, two buffers used
 * by turns. A collective moves data in chunks of a buffer: every member
 * copies what the others need of its chunk into its buffer, all ranks meet
 * at a barrier, and every member reads what it needs from the others'
 * buffers (the chunk engine below says how each kind splits the work:
 * all_reduce is a reduce-scatter then an all-gather). Reductions run in group
 * order, so all members compute the same bits. Buffers alternate, so a
 * chunk needs no second barrier before its buffer is reused.
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
#include <ctype.h>
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
#include "comm_hosts.h"
#include "half.h"
#include "runtime.h"
#include "nkrt/comm.h"

#define MAX_RANKS 1024
#define SLOT_BYTES (4u << 20)         /* per rank: two buffers, used in turn */
#define BUF_BYTES (SLOT_BYTES / 2)
#define HEADER_BYTES (128u << 10)
#define SMALL_REDUCE_BYTES (64u << 10) /* all_reduce up to this: every member reduces it all */
#define TILE 512                       /* elements a reduction combines at a time */
#define SPIN_NS 100000
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
  _Atomic uint32_t sleepers;   /* ranks asleep on the generation (else no wake-up call) */
  _Atomic uint32_t failed;     /* a rank gave up waiting */
  _Atomic uint32_t dead;       /* 1 + a rank found dead; 0: none */
  _Atomic uint32_t why_set;    /* 1 + the rank that wrote why[] */
  char why[256];               /* why that rank failed the communicator (between hosts) */
  _Atomic uint8_t present[MAX_RANKS];
  peer_t peer[MAX_RANKS];
  /* by collective number parity: a rank may announce its next collective
   * while a slower one still checks the last (one barrier per collective) */
  desc_t desc[2][MAX_RANKS];
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
  uint32_t parity;    /* the slot buffer the next chunk uses (under mu) */
  const void *ptrs[MAX_RANKS]; /* a reduction's sources (under mu) */
  const uint32_t *global; /* this host's ranks' global ranks (between hosts), else NULL */
  struct nkrt_hier *hier; /* between hosts (comm_hosts.c), else NULL; owned */
};

/* The rank the job knows local rank `r` as (in messages). */
static uint32_t grank(const nkrt_comm_t *c, uint32_t r) { return c->global ? c->global[r] : r; }

/* "rank 3 of 4", or between hosts "rank 3 (1 of this host's 2)": who this rank
 * is, in messages. */
static const char *whoami(const nkrt_comm_t *c, char *buf, size_t size) {
  if (c->global)
    snprintf(buf, size, "rank %u (%u of this host's %u)", grank(c, c->rank), c->rank,
             c->world_size);
  else
    snprintf(buf, size, "rank %u of %u", c->rank, c->world_size);
  return buf;
}

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
    /* digits of a number, with white space around it allowed (the rule of
     * every numeric setting: nkrt_parse_env_uint) */
    const char *b = env, *e = env + strlen(env);
    while (isspace((unsigned char)*b)) b++;
    while (e > b && isspace((unsigned char)e[-1])) e--;
    char num[33];
    bool ok = e > b && (size_t)(e - b) < sizeof(num);
    for (const char *p = b; ok && p < e; p++)
      ok = (*p >= '0' && *p <= '9') || *p == '.' || *p == 'e' || *p == 'E' || *p == '+' ||
           *p == '-';
    char *end = NULL;
    errno = 0;
    if (ok) {
      memcpy(num, b, (size_t)(e - b));
      num[e - b] = '\0';
      s = strtod(num, &end);
    }
    if (!ok || end == num || *end || errno || !isfinite(s) || s < 0.001 || s > MAX_TIMEOUT_S)
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
    if (waited < SPIN_NS) {
      sched_yield();
    } else {
      /* the rank that moves the word wakes sleepers only when it sees one:
       * both sides use sequentially consistent order, so either it sees this
       * count or the kernel sees the new word */
      atomic_fetch_add(&c->hdr->sleepers, 1);
      futex_wait(word, value, 10000000); /* 10 ms slices: the failed flag is re-read */
      atomic_fetch_sub(&c->hdr->sleepers, 1);
    }
  }
  return true;
}

/* "rank 2 (pid 1234) died" for the rank marked dead, into buf. */
static const char *dead_rank(const nkrt_comm_t *c, char *buf, size_t size) {
  uint32_t dead = atomic_load(&c->hdr->dead);
  if (!dead || dead > c->world_size) return NULL;
  snprintf(buf, size, "rank %u (pid %d) died (it exited or was killed)", grank(c, dead - 1),
           (int)c->hdr->peer[dead - 1].pid);
  return buf;
}

NKRT_MUST_USE_RESULT
static nkrt_status_t give_up(nkrt_comm_t *c, const char *what) {
  bool other = atomic_exchange(&c->hdr->failed, 1) != 0;
  futex_wake(&c->hdr->generation);
  futex_wake(&c->hdr->joined);
  char buf[128], me[64];
  whoami(c, me, sizeof(me));
  if (dead_rank(c, buf, sizeof(buf)))
    return nkrt_status_make(NKRT_FAILURE, "communicator '%s': %s; %s stops in %s: "
                            "the job cannot go on (restart it)", c->name, buf, me, what);
  uint32_t why = atomic_load_explicit(&c->hdr->why_set, memory_order_acquire);
  if (other && why && why - 1 < c->world_size)
    return nkrt_status_make(NKRT_FAILURE, "communicator '%s': rank %u failed during %s: %.255s "
                            "(rank %u stops too)", c->name, grank(c, why - 1), what, c->hdr->why,
                            grank(c, c->rank));
  if (other)
    return nkrt_status_make(NKRT_TIMEOUT, "communicator '%s': another rank failed during %s "
                            "(%s)", c->name, what, me);
  return nkrt_status_make(NKRT_TIMEOUT, "communicator '%s': %s waited %.0f s for the "
                          "other ranks during %s (NKRT_CC_TIMEOUT); they are alive: do all ranks "
                          "run the same collectives in the same order?", c->name, me,
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
    atomic_fetch_add(&h->generation, 1);
    if (atomic_load(&h->sleepers)) futex_wake(&h->generation);
    return NULL;
  }
  return wait_change(c, &h->generation, gen) ? NULL : give_up(c, what);
}

/* A name of 1 to `max` characters of [A-Za-z0-9._-]. */
static bool valid_name(const char *name, size_t max) {
  size_t n = strlen(name);
  if (n == 0 || n > max) return false;
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
  if (!name || !valid_name(name, 200))
    return nkrt_status_make(NKRT_INVALID, "communicator name \"%s\" must be 1 to 200 characters "
                            "of [A-Za-z0-9._-]", name ? name : "(null)");
  if (world_size < 2 || world_size > MAX_RANKS)
    return nkrt_status_make(NKRT_INVALID, "communicator world size %u is not between 2 and %u",
                            world_size, MAX_RANKS);
  return nkrt_comm_join_local(name, rank, world_size, timeout_ns, NULL, out_comm);
}

nkrt_status_t nkrt_comm_join_local(const char *name, uint32_t rank, uint32_t world_size,
                                   int64_t timeout_ns, const uint32_t *global,
                                   nkrt_comm_t **out_comm) {
  *out_comm = NULL;
  /* (a host's segment: the job's name, up to 200, and "-h<host>") */
  if (!name || !valid_name(name, 210))
    return nkrt_status_make(NKRT_INVALID, "communicator name \"%s\" must be 1 to 200 characters "
                            "of [A-Za-z0-9._-]", name ? name : "(null)");
  if (world_size < 1 || world_size > MAX_RANKS)
    return nkrt_status_make(NKRT_INVALID, "communicator world size %u is not between 1 and %u",
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
  c->global = global;
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
      char buf[128], me[64];
      if (dead_rank(c, buf, sizeof(buf))) {
        st = nkrt_status_make(NKRT_FAILURE, "communicator '%s': %s while the ranks joined; "
                              "%s stops: the job cannot go on (restart it)", name, buf,
                              whoami(c, me, sizeof(me)));
      } else if (atomic_load(&c->hdr->failed) || waited > c->timeout_ns) {
        uint32_t missing = UINT32_MAX;
        for (uint32_t r = 0; r < world_size && missing == UINT32_MAX; r++)
          if (!atomic_load(&c->hdr->present[r])) missing = r;
        atomic_store(&c->hdr->failed, 1);
        futex_wake(&c->hdr->joined);
        st = nkrt_status_make(NKRT_TIMEOUT, "communicator '%s': %u of %u ranks joined within "
                              "%.0f s (rank %u is missing; NKRT_CC_TIMEOUT)", name,
                              atomic_load(&c->hdr->joined), world_size,
                              (double)c->timeout_ns / 1e9, grank(c, missing));
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
  nkrt_hier_free(c->hier);
  if (c->hdr) munmap(c->hdr, c->map_bytes);
  pthread_mutex_destroy(&c->mu);
  free(c);
}

uint32_t nkrt_comm_rank(const nkrt_comm_t *c) {
  return !c ? 0 : c->hier ? nkrt_hier_rank(c->hier) : c->rank;
}
uint32_t nkrt_comm_world_size(const nkrt_comm_t *c) {
  return !c ? 0 : c->hier ? nkrt_hier_world_size(c->hier) : c->world_size;
}

void nkrt_comm_attach_hier(nkrt_comm_t *c, struct nkrt_hier *hier) { c->hier = hier; }

/* Cuts a character that snprintf's truncation left incomplete off the end of s. */
static void utf8_trim(char *s) {
  size_t len = strlen(s), i = len;
  while (i > 0 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) i--;
  if (i == 0 || !((unsigned char)s[i - 1] & 0x80)) return; /* ends in ASCII */
  unsigned char lead = (unsigned char)s[i - 1];
  size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
  if (len - (i - 1) < need) s[i - 1] = '\0';
}

void nkrt_comm_fail(nkrt_comm_t *c, const char *why) {
  uint32_t none = 0;
  if (atomic_compare_exchange_strong(&c->hdr->why_set, &none, UINT32_MAX)) {
    snprintf(c->hdr->why, sizeof(c->hdr->why), "%s", why);
    utf8_trim(c->hdr->why);
    atomic_store_explicit(&c->hdr->why_set, c->rank + 1, memory_order_release);
  }
  atomic_store(&c->hdr->failed, 1);
  futex_wake(&c->hdr->generation);
  futex_wake(&c->hdr->joined);
}

nkrt_status_t nkrt_comm_barrier(nkrt_comm_t *c) {
  if (!c) return nkrt_status_make(NKRT_INVALID_HANDLE, "communicator is NULL");
  if (c->hier) /* an empty collective over every rank of the job */
    return nkrt_hier_collective(c->hier, NKRT_CC_ALL_REDUCE, NKRT_DTYPE_INT32, NKRT_CC_ADD, NULL,
                                0, NULL, NULL, 0);
  pthread_mutex_lock(&c->mu);
  nkrt_status_t st = barrier(c, "a barrier");
  pthread_mutex_unlock(&c->mu);
  return st;
}

/* The caller's index in the group, after checking the group. */
nkrt_status_t nkrt_comm_check_group(const int32_t *ranks, uint32_t n, uint32_t world_size,
                                    uint32_t rank, uint32_t *out_index) {
  if (!ranks || n == 0) return nkrt_status_make(NKRT_INVALID, "collective: empty rank group");
  uint32_t index = UINT32_MAX;
  for (uint32_t i = 0; i < n; i++) {
    if (ranks[i] < 0 || (uint32_t)ranks[i] >= world_size)
      return nkrt_status_make(NKRT_INVALID, "collective: rank %d of its group is outside the "
                              "job's %u ranks", ranks[i], world_size);
    for (uint32_t j = 0; j < i; j++)
      if (ranks[j] == ranks[i])
        return nkrt_status_make(NKRT_INVALID, "collective: rank %d is twice in its group",
                                ranks[i]);
    if ((uint32_t)ranks[i] == rank) index = i;
  }
  if (index == UINT32_MAX)
    return nkrt_status_make(NKRT_INVALID, "collective: rank %u is not in its own group", rank);
  *out_index = index;
  return NULL;
}

NKRT_MUST_USE_RESULT
static nkrt_status_t group_index(const nkrt_comm_t *c, const int32_t *ranks, uint32_t n,
                                 uint32_t dtype, int64_t count, uint32_t *out_index) {
  if (count < 0) return nkrt_status_make(NKRT_INVALID, "collective: negative count");
  if (nkrt_dtype_size(dtype) == 0)
    return nkrt_status_make(NKRT_INVALID, "collective: unknown dtype %u", dtype);
  return nkrt_comm_check_group(ranks, n, c->world_size, c->rank, out_index);
}

static const char *const kind_names[] = {"all_reduce", "all_gather", "all_to_all",
                                         "reduce_scatter", "broadcast"};

static const char *kind_name(uint64_t kind) { return kind < 5 ? kind_names[kind] : "?"; }

static uint64_t group_hash(const int32_t *ranks, uint32_t n, uint32_t root) {
  uint64_t h = 1469598103934665603ull;
  for (uint32_t i = 0; i < n; i++) h = (h ^ (uint32_t)ranks[i]) * 1099511628211ull;
  return (h ^ n) * 31 + root;
}

/* A collective's description as the ranks compare it: kind, dtype and the
 * reduction (a broadcast's root is an index into each group: it goes with
 * the group, checked among members only). */
static uint64_t what_of(uint32_t kind, uint32_t dtype, uint32_t op) {
  return (uint64_t)kind << 32 | (uint64_t)dtype << 16 | (kind == NKRT_CC_BROADCAST ? 0 : op);
}

/* Publishes what this rank is about to run (before its first barrier). */
static void announce(nkrt_comm_t *c, uint64_t what, int64_t span, uint64_t group) {
  desc_t *d = &c->hdr->desc[(c->seq + 1) & 1][c->rank];
  atomic_store_explicit(&d->what, what, memory_order_relaxed);
  atomic_store_explicit(&d->count, span, memory_order_relaxed);
  atomic_store_explicit(&d->group, group, memory_order_relaxed);
  atomic_store_explicit(&d->seq, ++c->seq, memory_order_release);
}

/* After the first barrier: every rank runs the same collective of the same
 * size, and every member of the group passed the same rank list. */
NKRT_MUST_USE_RESULT
static nkrt_status_t agree(nkrt_comm_t *c, const int32_t *ranks, uint32_t n) {
  const desc_t *all = c->hdr->desc[c->seq & 1], *mine = &all[c->rank];
  uint64_t what = atomic_load(&mine->what), group = atomic_load(&mine->group);
  int64_t count = atomic_load(&mine->count);
  for (uint32_t r = 0; r < c->world_size; r++) {
    const desc_t *d = &all[r];
    uint64_t rseq = atomic_load_explicit(&d->seq, memory_order_acquire);
    uint64_t rwhat = atomic_load(&d->what);
    int64_t rcount = atomic_load(&d->count);
    bool member = false;
    for (uint32_t i = 0; i < n && !member; i++) member = (uint32_t)ranks[i] == r;
    if (rseq == c->seq && rwhat == what && rcount == count &&
        (!member || atomic_load(&d->group) == group))
      continue;
    nkrt_status_t st = nkrt_status_make(
        NKRT_INVALID, "communicator '%s': ranks out of step: rank %u runs collective #%" PRIu64
        ", %s of %" PRId64 " elements (dtype %u, op %u), rank %u runs #%" PRIu64 ", %s of %" PRId64
        " elements (dtype %u, op %u)%s; every rank must run the same collectives in the same "
        "order", c->name, grank(c, c->rank), c->seq, kind_name(what >> 32), count,
        (unsigned)(what >> 16 & 0xffff), (unsigned)(what & 0xffff), grank(c, r), rseq,
        kind_name(rwhat >> 32), rcount, (unsigned)(rwhat >> 16 & 0xffff),
        (unsigned)(rwhat & 0xffff),
        member && rwhat == what && rcount == count ? " with another group (or root)" : "");
    atomic_store(&c->hdr->failed, 1);
    futex_wake(&c->hdr->generation);
    return st;
  }
  return NULL;
}

/* ---- reductions ------------------------------------------------------------
 *
 * dst[0 .. len) = op over src[0][i], src[1][i], ... in that order, a tile of
 * TILE elements at a time: each pass over a tile is a plain loop the compiler
 * vectorizes. float16 / bfloat16 accumulate in float32 and round once;
 * integers wrap (computed unsigned); bool is or (add, max) / and (mul, min).
 * dst may be one of the sources (each tile is read before it is written). */

/* the reductions only: vectorized loops (the build's -O2 keeps the cheapest
 * vectorizer model, which leaves these loops alone; no-trapping-math lets
 * the float16 conversions' selects vectorize: nothing reads the FP exception
 * flags, and the results are the same) */
#if defined(__GNUC__) && !defined(__clang__) /* clang vectorizes these at -O2 as it is */
#pragma GCC push_options
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic", "no-trapping-math")
#endif

/* x86-64-v3 (AVX2) where the CPU has it (x86-64 builds default to SSE2, which has no
 * widening loads or packing for the 16-bit floats) */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define VECTOR_CLONES
#endif

static inline float f_max(float a, float b) { return a > b || a != a ? a : b; }
static inline float f_min(float a, float b) { return a < b || a != a ? a : b; }

#define F32_LOAD(v) (v)
#define F32_STORE(v) (v)

/* Whether d is one of src[2 ..] (which a pass over d would change before it
 * is read). */
static bool aliased(const void *const *src, uint32_t m, const void *d) {
  for (uint32_t k = 2; k < m; k++)
    if (src[k] == d) return true;
  return false;
}

/* float32, m >= 2: d = src[0] op src[1], then d op= src[k], a tile at a
 * time (the tile of d stays in L1), then the tile copied to d2. */
VECTOR_CLONES static void reduce_f32_direct(uint32_t op, const void *const *src, uint32_t m, void *dv,
                              void *dv2, int64_t len) {
  float *d = dv, *d2 = dv2;
  for (int64_t i0 = 0; i0 < len; i0 += TILE) {
    int t = len - i0 < TILE ? (int)(len - i0) : TILE;
    const float *s0 = (const float *)src[0] + i0, *s1 = (const float *)src[1] + i0;
    float *o = d + i0;
    switch (op) {
      case NKRT_CC_MUL: for (int i = 0; i < t; i++) o[i] = s0[i] * s1[i]; break;
      case NKRT_CC_MAX: for (int i = 0; i < t; i++) o[i] = f_max(s0[i], s1[i]); break;
      case NKRT_CC_MIN: for (int i = 0; i < t; i++) o[i] = f_min(s0[i], s1[i]); break;
      default: for (int i = 0; i < t; i++) o[i] = s0[i] + s1[i]; break;
    }
    for (uint32_t k = 2; k < m; k++) {
      const float *sk = (const float *)src[k] + i0;
      switch (op) {
        case NKRT_CC_MUL: for (int i = 0; i < t; i++) o[i] *= sk[i]; break;
        case NKRT_CC_MAX: for (int i = 0; i < t; i++) o[i] = f_max(o[i], sk[i]); break;
        case NKRT_CC_MIN: for (int i = 0; i < t; i++) o[i] = f_min(o[i], sk[i]); break;
        default: for (int i = 0; i < t; i++) o[i] += sk[i]; break;
      }
    }
    if (d2) memcpy(d2 + i0, o, (size_t)t * sizeof(float));
  }
}

/* float-like types: accumulate in float; the first two sources combine in
 * one pass, the result goes to d (and d2) in one pass */
#define F_OP(op, a, b)                                                                        \
  ((op) == NKRT_CC_MUL ? (a) * (b) : (op) == NKRT_CC_MAX ? f_max(a, b)                        \
   : (op) == NKRT_CC_MIN ? f_min(a, b) : (a) + (b))
#define F_PASS(OPC, EXPR)                                                                     \
  case OPC: for (int i = 0; i < t; i++) EXPR; break;
#define DEF_REDUCE_F(NAME, T, LOAD, STORE, DIRECT)                                                   \
  VECTOR_CLONES static void NAME(uint32_t op, const void *const *src, uint32_t m, void *dv, void *dv2,      \
                   int64_t len) {                                                             \
    T *d = dv, *d2 = dv2;                                                                     \
    float acc[TILE];                                                                          \
    if (DIRECT && m >= 2 && !aliased(src, m, dv)) { /* float32: accumulate in d itself */     \
      reduce_f32_direct(op, src, m, dv, dv2, len);                                            \
      return;                                                                                 \
    }                                                                                         \
    for (int64_t i0 = 0; i0 < len; i0 += TILE) {                                              \
      int t = len - i0 < TILE ? (int)(len - i0) : TILE;                                       \
      const T *s0 = (const T *)src[0] + i0, *s1 = (const T *)src[m > 1] + i0;                 \
      if (m == 1) {                                                                           \
        for (int i = 0; i < t; i++) acc[i] = LOAD(s0[i]);                                     \
      } else {                                                                                \
        switch (op) {                                                                         \
          F_PASS(NKRT_CC_MUL, acc[i] = LOAD(s0[i]) * LOAD(s1[i]))                             \
          F_PASS(NKRT_CC_MAX, acc[i] = f_max(LOAD(s0[i]), LOAD(s1[i])))                       \
          F_PASS(NKRT_CC_MIN, acc[i] = f_min(LOAD(s0[i]), LOAD(s1[i])))                       \
          default: for (int i = 0; i < t; i++) acc[i] = LOAD(s0[i]) + LOAD(s1[i]); break;     \
        }                                                                                     \
      }                                                                                       \
      for (uint32_t k = 2; k < m; k++) {                                                      \
        const T *s = (const T *)src[k] + i0;                                                  \
        switch (op) {                                                                         \
          F_PASS(NKRT_CC_MUL, acc[i] *= LOAD(s[i]))                                           \
          F_PASS(NKRT_CC_MAX, acc[i] = f_max(acc[i], LOAD(s[i])))                             \
          F_PASS(NKRT_CC_MIN, acc[i] = f_min(acc[i], LOAD(s[i])))                             \
          default: for (int i = 0; i < t; i++) acc[i] += LOAD(s[i]); break;                   \
        }                                                                                     \
      }                                                                                       \
      T *o = d + i0;                                                                          \
      if (d2) {                                                                               \
        T *o2 = d2 + i0;                                                                      \
        for (int i = 0; i < t; i++) o[i] = o2[i] = STORE(acc[i]);                             \
      } else {                                                                                \
        for (int i = 0; i < t; i++) o[i] = STORE(acc[i]);                                     \
      }                                                                                       \
    }                                                                                         \
  }

DEF_REDUCE_F(reduce_f32, float, F32_LOAD, F32_STORE, 1)
DEF_REDUCE_F(reduce_bf16, uint16_t, nkrt_bf16_to_float, nkrt_float_to_bf16, 0)
DEF_REDUCE_F(reduce_f16, uint16_t, nkrt_half_to_float, nkrt_float_to_half, 0)

/* integers: T, computed in the unsigned U (wrapping) for add and mul */
#define DEF_REDUCE_I(NAME, T, U)                                                              \
  VECTOR_CLONES static void NAME(uint32_t op, const void *const *src, uint32_t m, void *dv, void *dv2,      \
                   int64_t len) {                                                             \
    T *d = dv, *d2 = dv2;                                                                     \
    T tmp[TILE];                                                                              \
    /* accumulate in d itself unless d is a source it would overwrite first */                \
    bool direct = true;                                                                       \
    for (uint32_t k = 1; k < m; k++) direct = direct && src[k] != dv;                         \
    for (int64_t i0 = 0; i0 < len; i0 += TILE) {                                              \
      int t = len - i0 < TILE ? (int)(len - i0) : TILE;                                       \
      T *acc = direct ? d + i0 : tmp;                                                         \
      if (acc != (const T *)src[0] + i0)                                                      \
        memcpy(acc, (const T *)src[0] + i0, (size_t)t * sizeof(T));                           \
      for (uint32_t k = 1; k < m; k++) {                                                      \
        const T *s = (const T *)src[k] + i0;                                                  \
        switch (op) {                                                                         \
          case NKRT_CC_MUL:                                                                   \
            for (int i = 0; i < t; i++) acc[i] = (T)(U)((uint64_t)(U)acc[i] * (U)s[i]);       \
            break;                                                                            \
          case NKRT_CC_MAX: for (int i = 0; i < t; i++) acc[i] = acc[i] > s[i] ? acc[i] : s[i]; break; \
          case NKRT_CC_MIN: for (int i = 0; i < t; i++) acc[i] = acc[i] < s[i] ? acc[i] : s[i]; break; \
          default: for (int i = 0; i < t; i++) acc[i] = (T)(U)((U)acc[i] + (U)s[i]); break;   \
        }                                                                                     \
      }                                                                                       \
      if (!direct) memcpy(d + i0, acc, (size_t)t * sizeof(T));                                \
      if (d2) memcpy(d2 + i0, acc, (size_t)t * sizeof(T));                                    \
    }                                                                                         \
  }

DEF_REDUCE_I(reduce_i8, int8_t, uint8_t)
DEF_REDUCE_I(reduce_u8, uint8_t, uint8_t)
DEF_REDUCE_I(reduce_i16, int16_t, uint16_t)
DEF_REDUCE_I(reduce_u16, uint16_t, uint16_t)
DEF_REDUCE_I(reduce_i32, int32_t, uint32_t)
DEF_REDUCE_I(reduce_u32, uint32_t, uint32_t)
DEF_REDUCE_I(reduce_i64, int64_t, uint64_t)

static void reduce_bool(uint32_t op, const void *const *src, uint32_t m, void *dv, void *dv2,
                        int64_t len) {
  uint8_t *d = dv, *d2 = dv2;
  uint8_t acc[TILE];
  bool all = op == NKRT_CC_MUL || op == NKRT_CC_MIN;
  for (int64_t i0 = 0; i0 < len; i0 += TILE) {
    int t = len - i0 < TILE ? (int)(len - i0) : TILE;
    const uint8_t *s0 = (const uint8_t *)src[0] + i0;
    for (int i = 0; i < t; i++) acc[i] = s0[i] != 0;
    for (uint32_t k = 1; k < m; k++) {
      const uint8_t *s = (const uint8_t *)src[k] + i0;
      if (all) for (int i = 0; i < t; i++) acc[i] &= s[i] != 0;
      else for (int i = 0; i < t; i++) acc[i] |= s[i] != 0;
    }
    memcpy(d + i0, acc, (size_t)t);
    if (d2) memcpy(d2 + i0, acc, (size_t)t);
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

typedef void (*reduce_fn)(uint32_t op, const void *const *src, uint32_t m, void *d, void *d2,
                          int64_t len);

static reduce_fn reducer(uint32_t dtype) {
  switch (dtype) {
    case NKRT_DTYPE_FLOAT32: return reduce_f32;
    case NKRT_DTYPE_BFLOAT16: return reduce_bf16;
    case NKRT_DTYPE_FLOAT16: return reduce_f16;
    case NKRT_DTYPE_INT8: return reduce_i8;
    case NKRT_DTYPE_UINT8: return reduce_u8;
    case NKRT_DTYPE_BOOL: return reduce_bool;
    case NKRT_DTYPE_INT16: return reduce_i16;
    case NKRT_DTYPE_UINT16: return reduce_u16;
    case NKRT_DTYPE_INT32: return reduce_i32;
    case NKRT_DTYPE_UINT32: return reduce_u32;
    case NKRT_DTYPE_INT64: return reduce_i64;
    default: return NULL;
  }
}

void nkrt_comm_reduce(uint32_t dtype, uint32_t op, const void *const *src, uint32_t m, void *dst,
                      int64_t count) {
  reducer(dtype)(op, src, m, dst, NULL, count);
}

NKRT_MUST_USE_RESULT
static nkrt_status_t check_reduction(const char *what, uint32_t dtype, uint32_t op) {
  if (op > NKRT_CC_MIN) return nkrt_status_make(NKRT_INVALID, "%s: unknown op %u", what, op);
  if (nkrt_dtype_size(dtype) && !reducer(dtype))
    return nkrt_status_make(NKRT_INVALID, "%s: dtype %u is not supported", what, dtype);
  return NULL;
}

/* ---- the chunk engine ------------------------------------------------------
 *
 * A collective moves through the slots a chunk at a time. Each rank's slot
 * holds two buffers used by turns, chunk after chunk (all ranks go through
 * the same chunks: the chunk size depends on the kind, dtype and world size,
 * never on the group). Writing buffer b again two chunks later is safe
 * without a barrier of its own: every rank has passed the barrier of the
 * chunk in between, so every reader of b is done with it.
 *
 *   all_reduce, large: each member copies the parts of its chunk that the
 *     others reduce into its buffer (barrier), reduces its own 1/n part from
 *     the members' buffers (its own from its source) in group order into its
 *     destination and its buffer (barrier), and copies the others' reduced
 *     parts: two barriers a chunk, every member reading about the chunk's
 *     size once.
 *   all_reduce, small (up to SMALL_REDUCE_BYTES): each member copies its
 *     chunk into its buffer (barrier) and reduces the whole chunk itself.
 *   all_gather, broadcast: copy in (barrier), copy out.
 *   all_to_all, reduce_scatter: each member's buffer holds one block per
 *     member (barrier); each takes (or reduces) the blocks meant for it. */
typedef struct xfer {
  nkrt_comm_t *c;
  uint32_t kind, dtype, op; /* op: the reduction, or the root's index (broadcast) */
  const int32_t *ranks;
  uint32_t n, me; /* group size, the caller's index in it */
  const uint8_t *src;
  uint8_t *dst;
  int64_t count, span; /* elements; span >= count: the size all ranks agree on */
  size_t es;
  reduce_fn reduce;
} xfer_t;

/* memcpy, for buffers that may be NULL when there is nothing to copy */
static inline void copy(void *d, const void *s, size_t n) {
  if (n) memcpy(d, s, n);
}

static uint8_t *buf_of(const nkrt_comm_t *c, int32_t rank, uint32_t b) {
  return c->slots + (size_t)rank * SLOT_BYTES + (size_t)b * BUF_BYTES;
}

/* Member j's part of a chunk of k elements split n ways: [*lo, *hi). Parts
 * are whole cache lines (64 bytes) but for the last. */
static void part_of(int64_t k, uint32_t n, uint32_t j, size_t es, int64_t *lo, int64_t *hi) {
  int64_t line = (int64_t)(64 / es), q = (k + n - 1) / n;
  q = (q + line - 1) / line * line;
  *lo = (int64_t)j * q < k ? (int64_t)j * q : k;
  *hi = (int64_t)(j + 1) * q < k ? (int64_t)(j + 1) * q : k;
}

#define AT(p, e) ((p) + (size_t)(e) * x->es)

static void fill(const xfer_t *x, int64_t off, int64_t k, uint32_t b, bool small) {
  nkrt_comm_t *c = x->c;
  uint8_t *mine = buf_of(c, (int32_t)c->rank, b);
  size_t kb = (size_t)k * x->es;
  switch (x->kind) {
    case NKRT_CC_ALL_REDUCE:
      if (small) {
        copy(mine, AT(x->src, off), kb);
      } else { /* all but my own part: nobody else reads it */
        int64_t lo, hi;
        part_of(k, x->n, x->me, x->es, &lo, &hi);
        copy(mine, AT(x->src, off), (size_t)lo * x->es);
        copy(AT(mine, hi), AT(x->src, off + hi), (size_t)(k - hi) * x->es);
      }
      break;
    case NKRT_CC_ALL_GATHER: copy(mine, AT(x->src, off), kb); break;
    case NKRT_CC_BROADCAST:
      if (x->me == x->op) copy(mine, AT(x->src, off), kb);
      break;
    default: /* all_to_all, reduce_scatter: block j for member j */
      for (uint32_t j = 0; j < x->n; j++)
        if (j != x->me) copy(AT(mine, (int64_t)j * k), AT(x->src, (int64_t)j * x->count + off), kb);
      if (x->kind == NKRT_CC_ALL_TO_ALL && x->src != x->dst) /* my own block, straight */
        copy(AT(x->dst, (int64_t)x->me * x->count + off),
               AT(x->src, (int64_t)x->me * x->count + off), kb);
      break;
  }
}

/* After the first barrier of the chunk. */
static void take(const xfer_t *x, int64_t off, int64_t k, uint32_t b, bool small) {
  nkrt_comm_t *c = x->c;
  size_t kb = (size_t)k * x->es;
  switch (x->kind) {
    case NKRT_CC_ALL_REDUCE:
      if (small) {
        for (uint32_t m = 0; m < x->n; m++) c->ptrs[m] = buf_of(c, x->ranks[m], b);
        x->reduce(x->op, c->ptrs, x->n, AT(x->dst, off), NULL, k);
      } else {
        int64_t lo, hi;
        part_of(k, x->n, x->me, x->es, &lo, &hi);
        for (uint32_t m = 0; m < x->n; m++)
          c->ptrs[m] = m == x->me ? AT(x->src, off + lo) : AT(buf_of(c, x->ranks[m], b), lo);
        x->reduce(x->op, c->ptrs, x->n, AT(x->dst, off + lo),
                  AT(buf_of(c, (int32_t)c->rank, b), lo), hi - lo);
      }
      break;
    case NKRT_CC_ALL_GATHER:
      for (uint32_t m = 0; m < x->n; m++)
        copy(AT(x->dst, (int64_t)m * x->count + off), buf_of(c, x->ranks[m], b), kb);
      break;
    case NKRT_CC_BROADCAST:
      if (x->me != x->op) copy(AT(x->dst, off), buf_of(c, x->ranks[x->op], b), kb);
      else if (x->src != x->dst) copy(AT(x->dst, off), AT(x->src, off), kb);
      break;
    case NKRT_CC_ALL_TO_ALL:
      for (uint32_t m = 0; m < x->n; m++)
        if (m != x->me)
          copy(AT(x->dst, (int64_t)m * x->count + off),
                 AT(buf_of(c, x->ranks[m], b), (int64_t)x->me * k), kb);
      break;
    default: /* reduce_scatter */
      for (uint32_t m = 0; m < x->n; m++)
        c->ptrs[m] = m == x->me ? AT(x->src, (int64_t)x->me * x->count + off)
                                : AT(buf_of(c, x->ranks[m], b), (int64_t)x->me * k);
      x->reduce(x->op, c->ptrs, x->n, AT(x->dst, off), NULL, k);
      break;
  }
}

/* all_reduce, large: after the second barrier, the others' reduced parts. */
static void gather_parts(const xfer_t *x, int64_t off, int64_t k, uint32_t b) {
  for (uint32_t m = 0; m < x->n; m++) {
    if (m == x->me) continue;
    int64_t lo, hi;
    part_of(k, x->n, m, x->es, &lo, &hi);
    copy(AT(x->dst, off + lo), AT(buf_of(x->c, x->ranks[m], b), lo), (size_t)(hi - lo) * x->es);
  }
}

NKRT_MUST_USE_RESULT
static nkrt_status_t run_chunks(xfer_t *x) {
  nkrt_comm_t *c = x->c;
  if (!c) return nkrt_status_make(NKRT_INVALID_HANDLE, "communicator is NULL");
  const char *what = kind_name(x->kind);
  NKRT_RETURN_IF_ERROR(group_index(c, x->ranks, x->n, x->dtype, x->count, &x->me));
  if (x->kind == NKRT_CC_ALL_REDUCE || x->kind == NKRT_CC_REDUCE_SCATTER) {
    NKRT_RETURN_IF_ERROR(check_reduction(what, x->dtype, x->op));
    x->reduce = reducer(x->dtype);
  }
  if (x->kind == NKRT_CC_BROADCAST && x->op >= x->n)
    return nkrt_status_make(NKRT_INVALID, "broadcast: root %u is not an index into its group "
                            "of %u ranks", x->op, x->n);
  if (x->n > 1 && (!x->src || !x->dst) && x->count > 0)
    return nkrt_status_make(NKRT_INVALID, "%s: a NULL buffer", what);
  x->es = nkrt_dtype_size(x->dtype);
  int64_t chunk = (int64_t)(BUF_BYTES / x->es);
  /* all_to_all and reduce_scatter hold n blocks per buffer; sized by the
   * world, not the group, so every rank goes through the same chunks */
  if (x->kind == NKRT_CC_ALL_TO_ALL || x->kind == NKRT_CC_REDUCE_SCATTER) chunk /= c->world_size;
  if (chunk < 1) return nkrt_status_make(NKRT_INVALID, "%s: group too large", what);
  bool small = x->kind == NKRT_CC_ALL_REDUCE &&
               (uint64_t)x->span * x->es <= SMALL_REDUCE_BYTES;
  nkrt_status_t st = NULL;
  pthread_mutex_lock(&c->mu);
  announce(c, what_of(x->kind, x->dtype, x->op), x->span,
           group_hash(x->ranks, x->n, x->kind == NKRT_CC_BROADCAST ? x->op : 0));
  for (int64_t off = 0; (off == 0 || off < x->span) && !st; off += chunk) {
    int64_t k = x->count - off < chunk ? x->count - off : chunk;
    if (k < 0) k = 0;
    uint32_t b = c->parity;
    c->parity ^= 1;
    fill(x, off, k, b, small);
    st = barrier(c, what);
    if (!st && off == 0) st = agree(c, x->ranks, x->n);
    if (!st) take(x, off, k, b, small);
    if (!st && x->kind == NKRT_CC_ALL_REDUCE && !small) {
      st = barrier(c, what);
      if (!st) gather_parts(x, off, k, b);
    }
  }
  pthread_mutex_unlock(&c->mu);
  return st;
}

#undef AT

nkrt_status_t nkrt_comm_run_local(nkrt_comm_t *c, uint32_t kind, uint32_t dtype, uint32_t op,
                                  const int32_t *ranks, uint32_t n, const void *src, void *dst,
                                  int64_t count, int64_t span) {
  xfer_t x = {.c = c, .kind = kind, .dtype = dtype, .op = op, .ranks = ranks, .n = n,
              .src = src, .dst = dst, .count = count, .span = span > count ? span : count};
  return run_chunks(&x);
}

/* The public collectives: over shared memory, or between hosts when the
 * communicator was joined with hosts (comm_hosts.c). */
static nkrt_status_t collective(nkrt_comm_t *c, uint32_t kind, uint32_t dtype, uint32_t op,
                                const int32_t *ranks, uint32_t n, const void *src, void *dst,
                                int64_t count) {
  if (c && c->hier)
    return nkrt_hier_collective(c->hier, kind, dtype, op, ranks, n, src, dst, count);
  return nkrt_comm_run_local(c, kind, dtype, op, ranks, n, src, dst, count, count);
}

nkrt_status_t nkrt_comm_all_reduce(nkrt_comm_t *c, uint32_t dtype, uint32_t op,
                                   const int32_t *ranks, uint32_t n, const void *src, void *dst,
                                   int64_t count) {
  return collective(c, NKRT_CC_ALL_REDUCE, dtype, op, ranks, n, src, dst, count);
}

nkrt_status_t nkrt_comm_all_gather(nkrt_comm_t *c, uint32_t dtype, const int32_t *ranks,
                                   uint32_t n, const void *src, void *dst, int64_t count) {
  return collective(c, NKRT_CC_ALL_GATHER, dtype, 0, ranks, n, src, dst, count);
}

nkrt_status_t nkrt_comm_all_to_all(nkrt_comm_t *c, uint32_t dtype, const int32_t *ranks,
                                   uint32_t n, const void *src, void *dst, int64_t count) {
  return collective(c, NKRT_CC_ALL_TO_ALL, dtype, 0, ranks, n, src, dst, count);
}

nkrt_status_t nkrt_comm_reduce_scatter(nkrt_comm_t *c, uint32_t dtype, uint32_t op,
                                       const int32_t *ranks, uint32_t n, const void *src,
                                       void *dst, int64_t count) {
  return collective(c, NKRT_CC_REDUCE_SCATTER, dtype, op, ranks, n, src, dst, count);
}

nkrt_status_t nkrt_comm_broadcast(nkrt_comm_t *c, uint32_t dtype, const int32_t *ranks,
                                  uint32_t n, uint32_t root, const void *src, void *dst,
                                  int64_t count) {
  return collective(c, NKRT_CC_BROADCAST, dtype, root, ranks, n, src, dst, count);
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
    else {
      bool joined = false;
      st = nkrt_hier_join(id, (uint32_t)rank, (uint32_t)world_size, &rt->comm, &joined);
      if (!st && !joined)
        st = nkrt_comm_join(id, (uint32_t)rank, (uint32_t)world_size, -1, &rt->comm);
    }
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
      case NKRT_CC_REDUCE_SCATTER:
        st = nkrt_comm_reduce_scatter(comm, dtype, reduce_op, ranks, n, src, dst, count);
        break;
      case NKRT_CC_BROADCAST:
        st = nkrt_comm_broadcast(comm, dtype, ranks, n, reduce_op, src, dst, count);
        break;
      default: st = nkrt_status_make(NKRT_INVALID, "unknown collective kind %u", kind);
    }
  }
  return st;
}
