/* Collectives between hosts (nkrt_comm_set_hosts, comm_hosts.c), with
 * simulated hosts: forked processes, a shared-memory segment per "host", and
 * a test-only transport over socketpairs between the processes (the product
 * transport is gloo's, in spike_torch). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "comm_ref.h"
#include "nkrt/comm.h"
#include "test.h"

#define MAXP 8

/* ---- the test transport ------------------------------------------------ */

typedef struct {
  int me, nprocs;
  int fd[MAXP];  /* to each process (-1: itself) */
  int die_at;    /* exits (no cleanup) in this exchange call, after its first send; 0: never */
  int calls;
  int *released; /* counts release() calls */
} sp_t;

/* Each transfer goes as an 8-byte length and the bytes; a receiver refuses a
 * length other than the one it expects. */
static nkrt_status_t sp_exchange(void *ctx, const nkrt_comm_xfer_t *x, uint32_t n) {
  sp_t *t = ctx;
  t->calls++;
  uint64_t *done = calloc(n + 1, sizeof(uint64_t)), *hdr = calloc(n + 1, sizeof(uint64_t));
  struct pollfd *pf = calloc(n + 1, sizeof(struct pollfd));
  int *who = calloc(n + 1, sizeof(int));
  nkrt_status_t st = NULL;
  for (;;) {
    uint32_t nf = 0;
    bool all_done = true;
    for (uint32_t i = 0; i < n; i++) {
      if (done[i] == 8 + x[i].bytes) continue;
      all_done = false;
      bool first = true; /* the first unfinished transfer this way with this peer */
      for (uint32_t j = 0; j < i && first; j++)
        first = !(x[j].peer == x[i].peer && x[j].send == x[i].send && done[j] < 8 + x[j].bytes);
      if (!first) continue;
      if (x[i].peer < 0 || x[i].peer >= t->nprocs || t->fd[x[i].peer] < 0) {
        st = nkrt_status_make(NKRT_INVALID, "test transport: no connection to rank %d", x[i].peer);
        goto out;
      }
      pf[nf] = (struct pollfd){t->fd[x[i].peer], x[i].send ? POLLOUT : POLLIN, 0};
      who[nf++] = (int)i;
    }
    if (all_done) break;
    int r = poll(pf, nf, 20000);
    if (r == 0) {
      st = nkrt_status_make(NKRT_TIMEOUT, "test transport: rank %d waited 20 s", t->me);
      goto out;
    }
    for (uint32_t f = 0; f < nf; f++) {
      if (!pf[f].revents) continue;
      uint32_t i = (uint32_t)who[f];
      int fd = pf[f].fd;
      ssize_t k;
      if (x[i].send) {
        hdr[i] = x[i].bytes;
        const uint8_t *p = done[i] < 8 ? (const uint8_t *)&hdr[i] + done[i]
                                       : (const uint8_t *)x[i].buf + (done[i] - 8);
        size_t len = done[i] < 8 ? 8 - done[i] : x[i].bytes - (done[i] - 8);
        k = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
      } else {
        uint8_t *p = done[i] < 8 ? (uint8_t *)&hdr[i] + done[i] : (uint8_t *)x[i].buf + (done[i] - 8);
        size_t len = done[i] < 8 ? 8 - done[i] : x[i].bytes - (done[i] - 8);
        k = recv(fd, p, len, MSG_DONTWAIT);
        if (k == 0) {
          st = nkrt_status_make(NKRT_FAILURE, "test transport: rank %d closed its connection "
                                "(it died?)", x[i].peer);
          goto out;
        }
      }
      if (k < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (k < 0) {
        st = nkrt_status_make(NKRT_FAILURE, "test transport: rank %d: %s", x[i].peer,
                              strerror(errno));
        goto out;
      }
      done[i] += (uint64_t)k;
      if (!x[i].send && done[i] == 8 && hdr[i] != x[i].bytes) {
        st = nkrt_status_make(NKRT_FAILURE, "test transport: rank %d sent %llu bytes where %llu "
                              "were expected", x[i].peer, (unsigned long long)hdr[i],
                              (unsigned long long)x[i].bytes);
        goto out;
      }
      if (x[i].send && done[i] == 8 + x[i].bytes && t->die_at == t->calls) _exit(7);
    }
  }
out:
  free(done), free(hdr), free(pf), free(who);
  return st;
}

static void sp_release(void *ctx) {
  sp_t *t = ctx;
  if (t->released) (*t->released)++;
}

/* socketpairs between every two of p processes: pairs[a][b] */
static int pairs[MAXP][MAXP][2];

static void make_pairs(int p) {
  for (int a = 0; a < p; a++)
    for (int b = a + 1; b < p; b++) {
      int sv[2];
      if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) abort();
      pairs[a][b][0] = sv[0], pairs[a][b][1] = sv[1];
    }
}

/* In process `me`: keeps its ends, closes the others' (so that a process
 * that dies closes its connections for good). */
static void keep_pairs(int p, int me, sp_t *t) {
  memset(t, 0, sizeof(*t));
  t->me = me, t->nprocs = p;
  for (int a = 0; a < MAXP; a++) t->fd[a] = -1;
  for (int a = 0; a < p; a++) {
    for (int b = a + 1; b < p; b++) {
      if (a == me) t->fd[b] = pairs[a][b][0];
      else close(pairs[a][b][0]);
      if (b == me) t->fd[a] = pairs[a][b][1];
      else close(pairs[a][b][1]);
    }
  }
}

static void close_pairs(int p) {
  for (int a = 0; a < p; a++)
    for (int b = a + 1; b < p; b++) close(pairs[a][b][0]), close(pairs[a][b][1]);
}

/* ---- one rank of a simulated job -------------------------------------- */

typedef struct topo {
  const char *label;
  uint32_t world;
  uint32_t host_of[MAXP];
} topo_t;

/* every rank's output hash per collective, for the identical-bits check */
enum { MAX_CASES = 512 };
static uint64_t (*hashes)[MAX_CASES];

static uint64_t hash_bytes(const void *p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ ((const uint8_t *)p)[i]) * 1099511628211ull;
  return h;
}

static int bad_line;
#define HCHECK(cond)                                                              \
  do {                                                                            \
    if (!(cond)) {                                                                \
      if (!bad_line) bad_line = __LINE__;                                         \
      fails++;                                                                    \
    }                                                                             \
  } while (0)

/* got == want: floats by value (-0 == 0: the order between hosts differs
 * from one host's), the rest bitwise */
static bool equal(uint32_t d, const void *got, const void *want, int64_t count) {
  size_t es = nkrt_dtype_size(d);
  for (int64_t i = 0; i < count; i++) {
    const char *g = (const char *)got + i * (int64_t)es, *w = (const char *)want + i * (int64_t)es;
    if (ref_is_float(d) ? ref_load_f(d, g) != ref_load_f(d, w) : memcmp(g, w, es) != 0) {
      printf("  element %lld: %lld, not %lld\n", (long long)i, (long long)ref_load(d, g, 0),
             (long long)ref_load(d, w, 0));
      return false;
    }
  }
  return true;
}

/* The groups: 0 every rank, 1 every rank in reverse, 2 split in two
 * interleaved halves spanning the hosts. */
static uint32_t group_of(const topo_t *tp, uint32_t rank, int which, int32_t *g) {
  uint32_t n = 0, w = tp->world;
  if (which == 0) for (uint32_t r = 0; r < w; r++) g[n++] = (int32_t)r;
  else if (which == 1) for (uint32_t r = w; r-- > 0;) g[n++] = (int32_t)r;
  else for (uint32_t r = w; r-- > 0;) if (r % 2 == rank % 2) g[n++] = (int32_t)r;
  return n;
}

static int hosts_body(const topo_t *tp, nkrt_comm_t *c, uint32_t rank) {
  static const uint32_t dtypes[] = {NKRT_DTYPE_FLOAT32, NKRT_DTYPE_BFLOAT16, NKRT_DTYPE_INT32,
                                    NKRT_DTYPE_INT8, NKRT_DTYPE_BOOL};
  static const int64_t counts[] = {1, 37, 70001};
  int fails = 0, cases = 0;
  size_t cap = (size_t)70001 * 8 * MAXP * 2;
  char *src = malloc(cap), *dst = malloc(cap), *want = malloc(cap);
  uint32_t salt = 0;
  for (int di = 0; di < 5; di++)
    for (int ci = 0; ci < 3; ci++)
      for (int gi = 0; gi < 3; gi++) {
        uint32_t d = dtypes[di], op = (uint32_t)(di + ci + gi) % 4;
        int64_t count = counts[ci];
        size_t es = nkrt_dtype_size(d);
        int32_t g[MAXP];
        uint32_t n = group_of(tp, rank, gi, g), me = 0;
        while ((uint32_t)g[me] != rank) me++;
        /* all_reduce, in place every other time */
        salt++;
        ref_fill(d, src, rank, 0, count, salt);
        for (int64_t i = 0; i < count; i++) ref_reduce(d, op, g, n, i, salt, want, i);
        char *out = (ci + gi) % 2 ? src : dst;
        nkrt_status_t st = nkrt_comm_all_reduce(c, d, op, g, n, src, out, count);
        if (st) printf("  rank %u: %s\n", rank, nkrt_status_message(st)), nkrt_status_free(st), fails++;
        else HCHECK(equal(d, out, want, count));
        hashes[rank][cases++] = hash_bytes(out, (size_t)count * es) ^ (uint64_t)g[0] * 7919;
        /* reduce_scatter */
        salt++;
        ref_fill(d, src, rank, 0, count * n, salt);
        for (int64_t i = 0; i < count; i++) ref_reduce(d, op, g, n, me * count + i, salt, want, i);
        st = nkrt_comm_reduce_scatter(c, d, op, g, n, src, dst, count);
        if (st) printf("  rank %u: %s\n", rank, nkrt_status_message(st)), nkrt_status_free(st), fails++;
        else HCHECK(equal(d, dst, want, count));
        /* all_gather (bitwise) */
        salt++;
        ref_fill(d, src, rank, 0, count, salt);
        for (uint32_t m = 0; m < n; m++) ref_fill(d, want + m * count * (int64_t)es, (uint32_t)g[m], 0, count, salt);
        st = nkrt_comm_all_gather(c, d, g, n, src, dst, count);
        if (st) printf("  rank %u: %s\n", rank, nkrt_status_message(st)), nkrt_status_free(st), fails++;
        else HCHECK(!memcmp(dst, want, (size_t)(count * n) * es));
        /* all_to_all: my block b holds stream (b) of mine */
        salt++;
        for (uint32_t b = 0; b < n; b++) ref_fill(d, src + b * count * (int64_t)es, rank, b * 1000, count, salt);
        for (uint32_t m = 0; m < n; m++) ref_fill(d, want + m * count * (int64_t)es, (uint32_t)g[m], me * 1000, count, salt);
        st = nkrt_comm_all_to_all(c, d, g, n, src, dst, count);
        if (st) printf("  rank %u: %s\n", rank, nkrt_status_message(st)), nkrt_status_free(st), fails++;
        else HCHECK(!memcmp(dst, want, (size_t)(count * n) * es));
        /* broadcast from a member on another host than the first */
        uint32_t root = (uint32_t)(ci + di) % n;
        salt++;
        ref_fill(d, src, rank, 0, count, salt);
        ref_fill(d, want, (uint32_t)g[root], 0, count, salt);
        out = gi == 1 ? src : dst;
        st = nkrt_comm_broadcast(c, d, g, n, root, src, out, count);
        if (st) printf("  rank %u: %s\n", rank, nkrt_status_message(st)), nkrt_status_free(st), fails++;
        else HCHECK(!memcmp(out, want, (size_t)count * es));
      }
  nkrt_status_t st = nkrt_comm_barrier(c);
  if (st) printf("  rank %u: %s\n", rank, nkrt_status_message(st)), nkrt_status_free(st), fails++;
  /* refusals between hosts */
  int32_t all[MAXP], twice[2] = {0, 0};
  uint32_t n = group_of(tp, rank, 0, all);
  CHECK_ERR(nkrt_comm_broadcast(c, NKRT_DTYPE_FLOAT32, all, n, n, src, dst, 1), NKRT_INVALID,
            "is not an index into its group");
  CHECK_ERR(nkrt_comm_all_reduce(c, NKRT_DTYPE_FLOAT32, 0, twice, 2, src, dst, 1), NKRT_INVALID,
            "is twice in its group");
  if (bad_line) printf("  rank %u: first failed check at line %d\n", rank, bad_line);
  free(src), free(dst), free(want);
  return fails;
}

static int topo_rank(const topo_t *tp, uint32_t rank, int die_at,
                     int (*body)(const topo_t *, nkrt_comm_t *, uint32_t)) {
  sp_t t;
  keep_pairs((int)tp->world, (int)rank, &t);
  t.die_at = die_at;
  int released = 0;
  t.released = &released;
  nkrt_comm_transport_t tr = {sizeof(tr), &t, sp_exchange, sp_release};
  nkrt_status_t st = nkrt_comm_set_hosts(tp->world, tp->host_of, &tr);
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 1 << 20);
  nkrt_comm_t *c = NULL;
  if (!st) st = nkrt_runtime_comm(rt, (int32_t)rank, (int32_t)tp->world, &c);
  if (st) {
    printf("  rank %u: %s\n", rank, nkrt_status_message(st));
    nkrt_status_free(st);
    return 1;
  }
  int fails = nkrt_comm_rank(c) != rank || nkrt_comm_world_size(c) != tp->world;
  fails += body(tp, c, rank);
  /* the communicator keeps the transport until it goes */
  CHECK_OK(nkrt_comm_set_hosts(0, NULL, NULL));
  fails += released != 0;
  nkrt_runtime_destroy(rt);
  fails += released != 1;
  return fails;
}

static bool shm_left(const char *id) {
  char path[256];
  for (int h = 0; h < MAXP; h++) {
    struct stat sb;
    snprintf(path, sizeof(path), "/dev/shm/nkrt-cc-%s-h%d", id, h);
    if (lstat(path, &sb) == 0) return true;
  }
  return false;
}

/* Runs a topology in forked processes; returns the failed ranks. */
static int run_topo(const topo_t *tp, int die_rank, int die_at,
                    int (*body)(const topo_t *, nkrt_comm_t *, uint32_t), const char *id) {
  char *saved = getenv("NKRT_CC_ID") ? strdup(getenv("NKRT_CC_ID")) : NULL;
  setenv("NKRT_CC_ID", id, 1);
  make_pairs((int)tp->world);
  fflush(stdout);
  pid_t kids[MAXP];
  for (uint32_t r = 0; r < tp->world; r++) {
    kids[r] = fork();
    if (kids[r] == 0) {
      int rc = topo_rank(tp, r, (int)r == die_rank ? die_at : 0, body);
      fflush(stdout);
      _exit(rc ? 1 : 0);
    }
  }
  close_pairs((int)tp->world);
  int bad = 0;
  for (uint32_t r = 0; r < tp->world; r++) {
    int status = 0;
    waitpid(kids[r], &status, 0);
    bool ok = (int)r == die_rank ? WIFEXITED(status) && WEXITSTATUS(status) == 7
                                 : WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!ok) printf("  %s: rank %u ended with status 0x%x\n", tp->label, r, status);
    bad += !ok;
  }
  if (saved) setenv("NKRT_CC_ID", saved, 1);
  else unsetenv("NKRT_CC_ID");
  free(saved);
  return bad;
}

static const char *hosts_id(const char *what) {
  static char names[4][64];
  static int next;
  char *p = names[next++ % 4];
  snprintf(p, 64, "nkrt-test-%d-%s", (int)getpid(), what);
  return p;
}

TEST(comm_hosts_collectives) {
  static const topo_t topos[] = {
      {"2 hosts x 2 ranks", 4, {0, 0, 2, 2}},
      {"3 hosts x 1 rank", 3, {0, 1, 2}},
      {"2 + 1 ranks", 3, {0, 0, 2}},
      {"interleaved hosts", 4, {0, 1, 0, 1}},
  };
  hashes = mmap(NULL, sizeof(uint64_t) * MAXP * MAX_CASES, PROT_READ | PROT_WRITE,
                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(hashes != MAP_FAILED);
  for (size_t i = 0; i < sizeof(topos) / sizeof(topos[0]); i++) {
    const topo_t *tp = &topos[i];
    memset(hashes, 0, sizeof(uint64_t) * MAXP * MAX_CASES);
    const char *id = hosts_id("hosts");
    int bad = run_topo(tp, -1, 0, hosts_body, id);
    if (bad) printf("  %s: %d ranks failed\n", tp->label, bad);
    CHECK(bad == 0);
    CHECK(!shm_left(id));
    /* all_reduce: the members of a group got the same bits */
    for (int k = 0; k < MAX_CASES; k++)
      for (uint32_t r = 0; r < tp->world; r++) {
        int32_t g[MAXP];
        int gi = k % 3; /* the case order of hosts_body: groups cycle fastest */
        uint32_t n = group_of(tp, r, gi, g);
        for (uint32_t m = 0; m < n; m++) CHECK(hashes[g[m]][k] == hashes[r][k]);
      }
  }
  munmap(hashes, sizeof(uint64_t) * MAXP * MAX_CASES);
}

/* ---- a lead that dies mid-exchange -------------------------------------- */

static int dying_body(const topo_t *tp, nkrt_comm_t *c, uint32_t rank) {
  (void)tp;
  int32_t all[4] = {0, 1, 2, 3};
  float x[64], y[64];
  for (int i = 0; i < 64; i++) x[i] = (float)rank;
  nkrt_status_t st = nkrt_comm_all_reduce(c, NKRT_DTYPE_FLOAT32, NKRT_CC_ADD, all, 4, x, y, 64);
  int fails = st != NULL || y[0] != 6;
  nkrt_status_free(st);
  /* rank 2 (host 2's lead) exits in the second exchange, after its first send */
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  st = nkrt_comm_all_reduce(c, NKRT_DTYPE_FLOAT32, NKRT_CC_ADD, all, 4, x, y, 64);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  if (!st) return fails + 1;
  const char *msg = nkrt_status_message(st);
  /* rank 0: its transport names rank 2; rank 1: rank 0's reason; rank 3: its
   * host's peer died */
  const char *want = rank == 0 ? "test transport: rank 2"
                     : rank == 1 ? "rank 0 failed during broadcast: test transport: rank 2"
                                 : "rank 2 (pid";
  if (!strstr(msg, want)) {
    printf("  rank %u (%.1f s): %s\n  (expected \"%s\")\n", rank, s, msg, want);
    fails++;
  }
  if (rank == 0) printf("  the others failed within %.2f s of rank 2's exit\n", s);
  fails += s > 60;
  nkrt_status_free(st);
  /* and the communicator stays failed */
  st = nkrt_comm_barrier(c);
  fails += st == NULL;
  nkrt_status_free(st);
  return fails;
}

TEST(comm_hosts_lead_dies_mid_exchange) {
  static const topo_t tp = {"2 hosts x 2 ranks", 4, {0, 0, 2, 2}};
  const char *id = hosts_id("hdie");
  char *saved = getenv("NKRT_CC_TIMEOUT") ? strdup(getenv("NKRT_CC_TIMEOUT")) : NULL;
  setenv("NKRT_CC_TIMEOUT", "60", 1);
  CHECK(run_topo(&tp, 2, 2, dying_body, id) == 0);
  if (saved) setenv("NKRT_CC_TIMEOUT", saved, 1);
  else unsetenv("NKRT_CC_TIMEOUT");
  free(saved);
  CHECK(!shm_left(id));
}

/* ---- leads that run different collectives ------------------------------- */

static int out_of_step_body(const topo_t *tp, nkrt_comm_t *c, uint32_t rank) {
  (void)tp;
  int32_t all[2] = {0, 1};
  float x[4] = {1, 2, 3, 4}, y[4];
  /* the same bytes move, but rank 1 takes the maximum where rank 0 adds */
  nkrt_status_t st = nkrt_comm_all_reduce(c, NKRT_DTYPE_FLOAT32, rank ? NKRT_CC_MAX : NKRT_CC_ADD,
                                          all, 2, x, y, 4);
  const char *want = rank ? "ranks out of step between hosts: rank 1 runs collective #1, "
                            "all_reduce of 4 elements (dtype 1, op 2), rank 0 (on another host) "
                            "runs #1, all_reduce of 4 elements (dtype 1, op 0)"
                          : "rank 1 (on another host) runs #1, all_reduce of 4 elements (dtype 1, "
                            "op 2)";
  int fails = !st || !strstr(nkrt_status_message(st), want);
  if (fails) printf("  rank %u: %s\n", rank, st ? nkrt_status_message(st) : "no error");
  nkrt_status_free(st);
  return fails;
}

TEST(comm_hosts_out_of_step) {
  static const topo_t tp = {"2 hosts x 1 rank", 2, {0, 1}};
  const char *id = hosts_id("hstep");
  CHECK(run_topo(&tp, -1, 0, out_of_step_body, id) == 0);
  CHECK(!shm_left(id));
}

/* ---- nkrt_comm_set_hosts refuses what it cannot use ---------------------- */

static nkrt_status_t never(void *ctx, const nkrt_comm_xfer_t *x, uint32_t n) {
  (void)ctx, (void)x, (void)n;
  return nkrt_status_make(NKRT_FAILURE, "not used");
}

static void count_release(void *ctx) { (*(int *)ctx)++; }

TEST(comm_set_hosts_validates) {
  int released = 0;
  nkrt_comm_transport_t tr = {sizeof(tr), &released, never, count_release};
  CHECK_ERR(nkrt_comm_set_hosts(3, (uint32_t[]){0, 2, 2}, &tr), NKRT_INVALID,
            "host_of[1] = 2 is not the lowest rank of a host");
  CHECK_ERR(nkrt_comm_set_hosts(3, (uint32_t[]){0, 0, 1}, &tr), NKRT_INVALID,
            "host_of[2] = 1 is not the lowest rank of a host");
  CHECK_ERR(nkrt_comm_set_hosts(3, (uint32_t[]){1, 1, 2}, &tr), NKRT_INVALID,
            "host_of[0] = 1 is not the lowest rank of a host");
  CHECK_ERR(nkrt_comm_set_hosts(0, (uint32_t[]){0}, &tr), NKRT_INVALID,
            "world size 0 is not between 1 and 1024");
  CHECK_ERR(nkrt_comm_set_hosts(2, (uint32_t[]){0, 1}, NULL), NKRT_INVALID,
            "2 hosts need a transport between them");
  nkrt_comm_transport_t small = tr;
  small.struct_size = 8;
  CHECK_ERR(nkrt_comm_set_hosts(2, (uint32_t[]){0, 1}, &small), NKRT_INVALID,
            "2 hosts need a transport between them (struct_size 8, at least");
  nkrt_comm_transport_t noexch = tr;
  noexch.exchange = NULL;
  CHECK_ERR(nkrt_comm_set_hosts(2, (uint32_t[]){0, 1}, &noexch), NKRT_INVALID,
            "and an exchange callback");
  CHECK(released == 0);
  /* one host: shared memory only (the transport is dropped at once) */
  CHECK_OK(nkrt_comm_set_hosts(2, (uint32_t[]){0, 0}, &tr));
  CHECK(released == 1);
  /* replaced, then cleared: each released once */
  CHECK_OK(nkrt_comm_set_hosts(2, (uint32_t[]){0, 1}, &tr));
  CHECK_OK(nkrt_comm_set_hosts(4, (uint32_t[]){0, 1, 1, 3}, &tr));
  CHECK(released == 2);
  /* a model of another world size cannot use them */
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 1 << 20);
  nkrt_comm_t *c = NULL;
  char *saved = getenv("NKRT_CC_ID") ? strdup(getenv("NKRT_CC_ID")) : NULL;
  setenv("NKRT_CC_ID", hosts_id("hval"), 1);
  CHECK_ERR(nkrt_runtime_comm(rt, 0, 2, &c), NKRT_INVALID,
            "the job's hosts were set for 4 ranks (nkrt_comm_set_hosts), but this model was "
            "loaded as rank 0 of 2");
  CHECK(c == NULL);
  nkrt_runtime_destroy(rt);
  if (saved) setenv("NKRT_CC_ID", saved, 1);
  else unsetenv("NKRT_CC_ID");
  free(saved);
  CHECK_OK(nkrt_comm_set_hosts(0, NULL, NULL));
  CHECK(released == 3);
}
