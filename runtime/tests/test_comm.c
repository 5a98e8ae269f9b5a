/* Collectives between ranks (nkrt/comm.h): ranks as threads of this process
 * (each maps the segment itself, as a process would) and, through kernels,
 * as forked processes with their own runtimes. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "comm_ref.h"
#include "half.h"
#include "nkrt/comm.h"
#include "test.h"

/* A unique communicator name per test run. */
static const char *cc_name(const char *what) {
  static char names[8][64];
  static int next;
  char *p = names[next++ % 8];
  snprintf(p, 64, "nkrt-test-%d-%s", (int)getpid(), what);
  return p;
}

typedef struct rank_job {
  const char *name;
  uint32_t rank, world;
  int64_t timeout_ns;
  void (*body)(struct rank_job *job, nkrt_comm_t *comm);
  nkrt_status_t join_status;
  int failures;
  char error[256];
} rank_job_t;

static void *rank_main(void *p) {
  rank_job_t *j = p;
  nkrt_comm_t *comm = NULL;
  j->join_status = nkrt_comm_join(j->name, j->rank, j->world, j->timeout_ns, &comm);
  if (!j->join_status && j->body) j->body(j, comm);
  nkrt_comm_destroy(comm);
  return NULL;
}

/* Runs body on `world` ranks (threads); returns the summed failures. */
static int run_ranks(const char *name, uint32_t world, int64_t timeout_ns,
                     void (*body)(rank_job_t *, nkrt_comm_t *)) {
  rank_job_t jobs[4];
  pthread_t th[4];
  for (uint32_t r = 0; r < world; r++) {
    jobs[r] = (rank_job_t){.name = name, .rank = r, .world = world, .timeout_ns = timeout_ns,
                           .body = body};
    pthread_create(&th[r], NULL, rank_main, &jobs[r]);
  }
  int failures = 0;
  for (uint32_t r = 0; r < world; r++) {
    pthread_join(th[r], NULL);
    if (jobs[r].join_status) {
      printf("  rank %u join: %s\n", r, nkrt_status_message(jobs[r].join_status));
      nkrt_status_free(jobs[r].join_status);
      failures++;
    }
    if (jobs[r].failures) printf("  rank %u: %s\n", r, jobs[r].error);
    failures += jobs[r].failures;
  }
  return failures;
}

#define RCHECK(job, cond)                                                       \
  do {                                                                          \
    if (!(cond)) {                                                              \
      (job)->failures++;                                                        \
      snprintf((job)->error, sizeof((job)->error), "line %d: %s", __LINE__, #cond); \
    }                                                                           \
  } while (0)

static bool ok(rank_job_t *j, nkrt_status_t st) {
  if (!st) return true;
  j->failures++;
  snprintf(j->error, sizeof(j->error), "%s", nkrt_status_message(st));
  nkrt_status_free(st);
  return false;
}

enum { BIG = (6 << 20) / 4 }; /* floats: more than one 4 MiB slot */

static void collectives_body(rank_job_t *j, nkrt_comm_t *c) {
  int32_t all[3] = {0, 1, 2};
  float r = (float)j->rank;
  /* all_reduce float32: add, max, in place */
  float x[5] = {r, r + 1, -r, 2 * r, 0.5f}, y[5];
  if (ok(j, nkrt_comm_all_reduce(c, NKRT_DTYPE_FLOAT32, NKRT_CC_ADD, all, 3, x, y, 5)))
    RCHECK(j, y[0] == 3 && y[1] == 6 && y[2] == -3 && y[3] == 6 && y[4] == 1.5f);
  if (ok(j, nkrt_comm_all_reduce(c, NKRT_DTYPE_FLOAT32, NKRT_CC_MAX, all, 3, x, x, 5)))
    RCHECK(j, x[0] == 2 && x[2] == 0 && x[4] == 0.5f);
  /* int32 product, int8 min, bool or */
  int32_t iv[2] = {(int32_t)j->rank + 2, -1}, io[2];
  if (ok(j, nkrt_comm_all_reduce(c, NKRT_DTYPE_INT32, NKRT_CC_MUL, all, 3, iv, io, 2)))
    RCHECK(j, io[0] == 24 && io[1] == -1);
  int8_t bv = (int8_t)(10 - 5 * (int)j->rank), bo;
  if (ok(j, nkrt_comm_all_reduce(c, NKRT_DTYPE_INT8, NKRT_CC_MIN, all, 3, &bv, &bo, 1)))
    RCHECK(j, bo == 0);
  uint8_t flag = j->rank == 1, any;
  if (ok(j, nkrt_comm_all_reduce(c, NKRT_DTYPE_BOOL, NKRT_CC_ADD, all, 3, &flag, &any, 1)))
    RCHECK(j, any == 1);
  /* bfloat16 sums in float32 */
  uint16_t h = nkrt_float_to_bf16(0.25f * (float)(j->rank + 1)), ho;
  if (ok(j, nkrt_comm_all_reduce(c, NKRT_DTYPE_BFLOAT16, NKRT_CC_ADD, all, 3, &h, &ho, 1)))
    RCHECK(j, nkrt_bf16_to_float(ho) == 1.5f);
  /* groups: {0, 2} and {1} */
  int32_t pair[2] = {0, 2}, alone[1] = {1};
  float g = r + 1, go;
  const int32_t *grp = j->rank == 1 ? alone : pair;
  if (ok(j, nkrt_comm_all_reduce(c, NKRT_DTYPE_FLOAT32, NKRT_CC_ADD, grp, j->rank == 1 ? 1 : 2,
                                 &g, &go, 1)))
    RCHECK(j, go == (j->rank == 1 ? 2.0f : 4.0f));
  /* all_gather, all_to_all */
  int32_t mine[2] = {(int32_t)(10 * j->rank), (int32_t)(10 * j->rank + 1)}, gathered[6];
  if (ok(j, nkrt_comm_all_gather(c, NKRT_DTYPE_INT32, all, 3, mine, gathered, 2)))
    RCHECK(j, gathered[0] == 0 && gathered[1] == 1 && gathered[2] == 10 && gathered[5] == 21);
  int32_t send[3], recv[3];
  for (int b = 0; b < 3; b++) send[b] = (int32_t)(100 * j->rank + (uint32_t)b);
  if (ok(j, nkrt_comm_all_to_all(c, NKRT_DTYPE_INT32, all, 3, send, recv, 1)))
    for (int m = 0; m < 3; m++) RCHECK(j, recv[m] == (int32_t)(100 * m + (int)j->rank));
  /* larger than a slot: chunked */
  float *big = malloc(BIG * sizeof(float)), *bigo = malloc(BIG * sizeof(float));
  for (int64_t i = 0; i < BIG; i++) big[i] = (float)(i % 1000) + (float)j->rank;
  if (ok(j, nkrt_comm_all_reduce(c, NKRT_DTYPE_FLOAT32, NKRT_CC_ADD, all, 3, big, bigo, BIG))) {
    int bad = 0;
    for (int64_t i = 0; i < BIG; i++) bad += bigo[i] != 3.0f * (float)(i % 1000) + 3.0f;
    RCHECK(j, bad == 0);
  }
  free(big);
  free(bigo);
  /* refusals */
  int32_t outside[2] = {0, 7}, twice[2] = {0, 0}, without[1] = {(int32_t)((j->rank + 1) % 3)};
  CHECK_ERR(nkrt_comm_all_reduce(c, NKRT_DTYPE_FLOAT32, 0, outside, 2, x, y, 1), NKRT_INVALID,
            "rank 7 of its group is outside the job's 3 ranks");
  CHECK_ERR(nkrt_comm_all_reduce(c, NKRT_DTYPE_FLOAT32, 0, twice, 2, x, y, 1), NKRT_INVALID,
            "is twice in its group");
  CHECK_ERR(nkrt_comm_all_gather(c, NKRT_DTYPE_FLOAT32, without, 1, x, y, 1), NKRT_INVALID,
            "is not in its own group");
  CHECK_ERR(nkrt_comm_all_reduce(c, NKRT_DTYPE_FLOAT32, 9, all, 3, x, y, 1), NKRT_INVALID,
            "unknown op 9");
  ok(j, nkrt_comm_barrier(c));
}

/* all_to_all in groups of different sizes ({0, 1} and {2}) over more than a
 * slot: every rank goes through the same chunks (barriers are world-wide). */
static void uneven_groups_body(rank_job_t *j, nkrt_comm_t *c) {
  enum { COUNT = 1 << 20 };
  int32_t pair[2] = {0, 1}, alone[1] = {2};
  bool in_pair = j->rank < 2;
  uint32_t n = in_pair ? 2 : 1;
  float *src = malloc((size_t)n * COUNT * sizeof(float)), *dst = malloc((size_t)n * COUNT * sizeof(float));
  for (uint32_t b = 0; b < n; b++)
    for (int64_t i = 0; i < COUNT; i++) src[b * COUNT + i] = (float)(1000 * j->rank + 10 * b) + (float)(i % 7);
  if (ok(j, nkrt_comm_all_to_all(c, NKRT_DTYPE_FLOAT32, in_pair ? pair : alone, n, src, dst,
                                 COUNT))) {
    int bad = 0;
    for (uint32_t m = 0; m < n; m++) {
      uint32_t from = in_pair ? m : 2, me = in_pair ? j->rank : 0;
      for (int64_t i = 0; i < COUNT; i += 997)
        bad += dst[m * COUNT + i] != (float)(1000 * from + 10 * me) + (float)(i % 7);
    }
    RCHECK(j, bad == 0);
  }
  free(src);
  free(dst);
}

TEST(comm_all_to_all_uneven_groups) {
  CHECK(run_ranks(cc_name("uneven"), 3, 60000000000ll, uneven_groups_body) == 0);
}

TEST(comm_collectives) {
  CHECK(run_ranks(cc_name("coll"), 3, 20000000000ll, collectives_body) == 0);
}

static void lonely_body(rank_job_t *j, nkrt_comm_t *c) {
  float x = 1, y;
  if (j->rank == 0) {
    /* rank 1 never comes to this all_reduce */
    CHECK_ERR(nkrt_comm_all_reduce(c, NKRT_DTYPE_FLOAT32, 0, (int32_t[]){0, 1}, 2, &x, &y, 1),
              NKRT_TIMEOUT, "waited 0 s for the other ranks during all_reduce");
  } else {
    usleep(600000);
    /* ... and fails fast at its next wait */
    CHECK_ERR(nkrt_comm_barrier(c), NKRT_TIMEOUT, "another rank failed during a barrier");
  }
}

static void mismatch_body(rank_job_t *j, nkrt_comm_t *c) {
  int32_t all[2] = {0, 1};
  float x[8] = {0}, y[16];
  /* rank 1 gathers 5 elements where rank 0 reduces 4: both refuse */
  nkrt_status_t st = j->rank == 0
                         ? nkrt_comm_all_reduce(c, NKRT_DTYPE_FLOAT32, NKRT_CC_ADD, all, 2, x, y, 4)
                         : nkrt_comm_all_gather(c, NKRT_DTYPE_FLOAT32, all, 2, x, y, 5);
  CHECK_ERR(st, NKRT_INVALID, "ranks out of step");
  /* and the communicator stays failed */
  CHECK_ERR(nkrt_comm_barrier(c), NKRT_TIMEOUT, "another rank failed");
}

TEST(comm_timeouts_and_errors) {
  nkrt_comm_t *c = NULL;
  CHECK_ERR(nkrt_comm_join("bad name!", 0, 2, 0, &c), NKRT_INVALID,
            "must be 1 to 200 characters of [A-Za-z0-9._-]");
  CHECK_ERR(nkrt_comm_join("x", 0, 1, 0, &c), NKRT_INVALID, "world size 1 is not between 2");
  CHECK_ERR(nkrt_comm_join("x", 2, 2, 0, &c), NKRT_INVALID, "rank 2 is not below the world size 2");
  CHECK_ERR(nkrt_comm_join(cc_name("alone"), 0, 2, 200000000, &c), NKRT_TIMEOUT,
            "1 of 2 ranks joined within 0 s (rank 1 is missing");
  CHECK(c == NULL);
  CHECK(run_ranks(cc_name("lonely"), 2, 300000000, lonely_body) == 0);
  CHECK(run_ranks(cc_name("mismatch"), 2, 5000000000ll, mismatch_body) == 0);
  CHECK_ERR(nkrt_comm_barrier(NULL), NKRT_INVALID_HANDLE, "communicator is NULL");
}

/* ---- every kind, dtype and op against the reference ---------------------- */

static _Atomic int64_t checked_elements;

/* Checks got[0 .. count) against want; on a mismatch records the first. */
static void same(rank_job_t *j, const char *what, uint32_t d, const void *got, const void *want,
                 int64_t count) {
  size_t es = nkrt_dtype_size(d);
  atomic_fetch_add(&checked_elements, count);
  if (!memcmp(got, want, (size_t)count * es)) return;
  int64_t i = 0;
  while (!memcmp((const char *)got + i * (int64_t)es, (const char *)want + i * (int64_t)es, es)) i++;
  j->failures++;
  snprintf(j->error, sizeof(j->error), "%s dtype %u: element %lld of %lld is %lld, not %lld",
           what, d, (long long)i, (long long)count, (long long)ref_load(d, got, i),
           (long long)ref_load(d, want, i));
}

/* The groups of the kinds tests: all three ranks, or {2, 0} (out of order)
 * and {1} alone. */
static const int32_t *kinds_group(uint32_t rank, int split, uint32_t *n) {
  static const int32_t all[3] = {0, 1, 2}, pair[2] = {2, 0}, alone[1] = {1};
  if (!split) return *n = 3, all;
  if (rank == 1) return *n = 1, alone;
  return *n = 2, pair;
}

static void kinds_body(rank_job_t *j, nkrt_comm_t *c) {
  /* sizes: one element, odd, past the small all_reduce, past a buffer */
  static const int64_t counts[] = {1, 37, 20011, 700001};
  uint32_t salt = 0;
  size_t cap = 8 * 700001 * 3;
  char *src = malloc(cap), *dst = malloc(cap), *want = malloc(cap);
  for (int di = 0; di < REF_NDTYPES; di++) {
    uint32_t d = ref_dtypes[di];
    size_t es = nkrt_dtype_size(d);
    for (int ci = 0; ci < 4; ci++) {
      int64_t count = counts[ci];
      if (ci == 3 && d != NKRT_DTYPE_FLOAT32 && d != NKRT_DTYPE_INT8) continue;
      for (uint32_t op = 0; op < 4; op++) {
        if (ci >= 2 && op != (uint32_t)di % 4) continue; /* big ones: one op per dtype */
        int split = (int)(op + (uint32_t)ci) % 2, inplace = (int)(op / 2 + (uint32_t)di) % 2;
        uint32_t n;
        const int32_t *g = kinds_group(j->rank, split, &n);
        salt++;
        /* all_reduce */
        ref_fill(d, src, j->rank, 0, count, salt);
        for (int64_t i = 0; i < count; i++) ref_reduce(d, op, g, n, i, salt, want, i);
        char *out = inplace ? src : dst;
        if (ok(j, nkrt_comm_all_reduce(c, d, op, g, n, src, out, count)))
          same(j, "all_reduce", d, out, want, count);
        /* reduce_scatter: n blocks of count/4 + 1 */
        int64_t k = count / 4 + 1;
        salt++;
        ref_fill(d, src, j->rank, 0, k * n, salt);
        uint32_t me = 0;
        while ((uint32_t)g[me] != j->rank) me++;
        for (int64_t i = 0; i < k; i++) ref_reduce(d, op, g, n, me * k + i, salt, want, i);
        out = inplace ? src : dst;
        if (ok(j, nkrt_comm_reduce_scatter(c, d, op, g, n, src, out, k)))
          same(j, "reduce_scatter", d, out, want, k);
      }
      /* broadcast from each member (once per size) */
      uint32_t n;
      const int32_t *g = kinds_group(j->rank, ci % 2, &n);
      for (uint32_t root = 0; root < 3; root++) {
        uint32_t rt = root % n;
        salt++;
        ref_fill(d, src, j->rank, 0, count, salt);
        ref_fill(d, want, (uint32_t)g[rt], 0, count, salt);
        char *out = root == 1 ? src : dst;
        memset(dst, 0x5a, (size_t)count * es);
        if (ok(j, nkrt_comm_broadcast(c, d, g, n, rt, src, out, count)))
          same(j, "broadcast", d, out, want, count);
      }
    }
  }
  /* refusals */
  int32_t all[3] = {0, 1, 2};
  CHECK_ERR(nkrt_comm_broadcast(c, NKRT_DTYPE_FLOAT32, all, 3, 3, src, dst, 1), NKRT_INVALID,
            "broadcast: root 3 is not an index into its group of 3 ranks");
  CHECK_ERR(nkrt_comm_reduce_scatter(c, NKRT_DTYPE_FLOAT32, 7, all, 3, src, dst, 1), NKRT_INVALID,
            "reduce_scatter: unknown op 7");
  CHECK_ERR(nkrt_comm_reduce_scatter(c, NKRT_DTYPE_FLOAT64, 0, all, 3, src, dst, 1), NKRT_INVALID,
            "is not supported");
  CHECK_ERR(nkrt_comm_all_reduce(c, NKRT_DTYPE_UINT64, 0, all, 3, src, dst, 1), NKRT_INVALID,
            "is not supported");
  CHECK_ERR(nkrt_comm_all_reduce(c, NKRT_DTYPE_FLOAT8_E4M3FN, 0, all, 3, src, dst, 1),
            NKRT_INVALID, "is not supported");
  CHECK_ERR(nkrt_comm_broadcast(c, NKRT_DTYPE_FLOAT32, all, 3, 0, src, NULL, 4), NKRT_INVALID,
            "broadcast: a NULL buffer");
  ok(j, nkrt_comm_barrier(c));
  free(src), free(dst), free(want);
}

TEST(comm_kinds_dtypes_groups) {
  CHECK(run_ranks(cc_name("kinds"), 3, 120000000000ll, kinds_body) == 0);
  printf("  %lld elements checked\n", (long long)atomic_load(&checked_elements));
  CHECK(atomic_load(&checked_elements) > 10000000);
}

/* Ranks that disagree on a broadcast's root, or run reduce_scatter against
 * an all_reduce, are out of step. */
static void kinds_mismatch_body(rank_job_t *j, nkrt_comm_t *c) {
  int32_t all[2] = {0, 1};
  float x[4] = {0}, y[4];
  CHECK_ERR(nkrt_comm_broadcast(c, NKRT_DTYPE_FLOAT32, all, 2, j->rank, x, y, 2), NKRT_INVALID,
            "with another group (or root)");
}

static void kinds_mismatch2_body(rank_job_t *j, nkrt_comm_t *c) {
  int32_t all[2] = {0, 1};
  float x[4] = {0}, y[4];
  nkrt_status_t st = j->rank == 0
                         ? nkrt_comm_reduce_scatter(c, NKRT_DTYPE_FLOAT32, 0, all, 2, x, y, 2)
                         : nkrt_comm_all_reduce(c, NKRT_DTYPE_FLOAT32, 0, all, 2, x, y, 2);
  CHECK_ERR(st, NKRT_INVALID, j->rank == 0 ? "rank 1 runs #1, all_reduce of 2 elements"
                                           : "rank 0 runs #1, reduce_scatter of 2 elements");
}

TEST(comm_kinds_out_of_step) {
  CHECK(run_ranks(cc_name("kmis"), 2, 5000000000ll, kinds_mismatch_body) == 0);
  CHECK(run_ranks(cc_name("kmis2"), 2, 5000000000ll, kinds_mismatch2_body) == 0);
}

/* The reductions of float16 / bfloat16 round once (half.h's conversions,
 * which test_half.c checks against a reference): every value alone, and sums,
 * products and maxima of every value with another (through the rounding of
 * normals, subnormals, overflow and NaN). */
TEST(comm_half_reductions_round_once) {
  enum { N = 65536 };
  uint16_t *a = malloc(N * 2), *b = malloc(N * 2), *got = malloc(N * 2);
  for (uint32_t i = 0; i < N; i++) a[i] = (uint16_t)i, b[i] = (uint16_t)(i * 40503u + 12345u);
  for (int bf = 0; bf < 2; bf++) {
    uint32_t d = bf ? NKRT_DTYPE_BFLOAT16 : NKRT_DTYPE_FLOAT16;
    float (*load)(uint16_t) = bf ? nkrt_bf16_to_float : nkrt_half_to_float;
    uint16_t (*store)(float) = bf ? nkrt_float_to_bf16 : nkrt_float_to_half;
    const void *one[1] = {a};
    nkrt_comm_reduce(d, NKRT_CC_ADD, one, 1, got, N);
    int bad = 0;
    for (uint32_t i = 0; i < N; i++) bad += got[i] != store(load(a[i]));
    CHECK(bad == 0);
    const void *two[2] = {a, b};
    for (uint32_t op = 0; op < 4; op++) {
      nkrt_comm_reduce(d, op, two, 2, got, N);
      bad = 0;
      for (uint32_t i = 0; i < N; i++) {
        float x = load(a[i]), y = load(b[i]);
        float r = op == NKRT_CC_MUL ? x * y : op == NKRT_CC_MAX ? (x > y || x != x ? x : y)
                  : op == NKRT_CC_MIN ? (x < y || x != x ? x : y) : x + y;
        bad += got[i] != store(r);
      }
      if (bad) printf("  dtype %u op %u: %d of %d differ\n", d, op, bad, N);
      CHECK(bad == 0);
    }
  }
  free(a), free(b), free(got);
}

/* ---- trust: the segment, its owner, dead peers, the timeout ------------- */

static bool shm_exists(const char *name) {
  char path[256];
  snprintf(path, sizeof(path), "/dev/shm/nkrt-cc-%s", name);
  struct stat sb;
  return lstat(path, &sb) == 0;
}

static double seconds_since(const struct timespec *t0) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) / 1e9;
}

TEST(comm_timeout_env_is_strict) {
  char *saved = getenv("NKRT_CC_TIMEOUT") ? strdup(getenv("NKRT_CC_TIMEOUT")) : NULL;
  const char *bad[] = {"abc", "1e999", "-1", "0", "nan", "inf", "5s", "5 5", "1e5", "0x10",
                       "0.0001", " ", " -1 "};
  nkrt_comm_t *c = NULL;
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    setenv("NKRT_CC_TIMEOUT", bad[i], 1);
    char want[64];
    snprintf(want, sizeof(want), "NKRT_CC_TIMEOUT=\"%s\" is not a number of seconds", bad[i]);
    CHECK_ERR(nkrt_comm_join(cc_name("tmo"), 0, 2, -1, &c), NKRT_INVALID, want);
    CHECK(c == NULL && !shm_exists(cc_name("tmo")));
  }
  /* a good value is used, white space around it allowed as in every numeric
   * setting: alone, rank 0 gives up after 0.2 s */
  setenv("NKRT_CC_TIMEOUT", " 0.2 ", 1);
  CHECK_ERR(nkrt_comm_join(cc_name("tmo"), 0, 2, -1, &c), NKRT_TIMEOUT,
            "1 of 2 ranks joined within 0 s");
  if (saved) setenv("NKRT_CC_TIMEOUT", saved, 1);
  else unsetenv("NKRT_CC_TIMEOUT");
  free(saved);
}

/* A segment someone else made under the job's name, of the right size (a
 * squatter waiting for the job's data) */
static int squat(const char *name, uid_t uid, mode_t mode) {
  char shm[256];
  snprintf(shm, sizeof(shm), "/nkrt-cc-%s", name);
  int fd = shm_open(shm, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return -1;
  if (ftruncate(fd, (64 << 10) + 2 * (4 << 20)) != 0 || fchown(fd, uid, uid) != 0 ||
      fchmod(fd, mode) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

TEST(comm_refuses_foreign_segments) {
  const char *name = cc_name("foreign");
  char shm[128], want[400];
  snprintf(shm, sizeof(shm), "/nkrt-cc-%s", name);
  nkrt_comm_t *c = NULL;
  /* another user's (these tests run as root: give it away) */
  int fd = squat(name, 4242, 0600);
  CHECK(fd >= 0);
  snprintf(want, sizeof(want), "the shared-memory segment /dev/shm%s belongs to uid 4242, not to "
           "this user (uid %u); refusing it", shm, (unsigned)geteuid());
  for (uint32_t r = 0; r < 2; r++) {
    CHECK_ERR(nkrt_comm_join(name, r, 2, 1000000000ll, &c), NKRT_FAILURE, want);
    CHECK(c == NULL && shm_exists(name)); /* left alone: it is not ours */
  }
  /* ours, but open to others */
  CHECK(fchown(fd, geteuid(), getegid()) == 0 && fchmod(fd, 0666) == 0);
  snprintf(want, sizeof(want), "the shared-memory segment /dev/shm%s has mode 0666, open to other "
           "users; refusing it", shm);
  for (uint32_t r = 0; r < 2; r++)
    CHECK_ERR(nkrt_comm_join(name, r, 2, 1000000000ll, &c), NKRT_FAILURE, want);
  close(fd);
  shm_unlink(shm);
  /* a symbolic link in its place */
  char path[300];
  snprintf(path, sizeof(path), "/dev/shm%s", shm);
  CHECK(symlink("/dev/null", path) == 0);
  CHECK_ERR(nkrt_comm_join(name, 0, 2, 1000000000ll, &c), NKRT_FAILURE, "is a symbolic link");
  CHECK_ERR(nkrt_comm_join(name, 1, 2, 1000000000ll, &c), NKRT_FAILURE, "is a symbolic link");
  unlink(path);
  CHECK(!shm_exists(name));
}

static void exit_fast_body(rank_job_t *j, nkrt_comm_t *c) {
  float x = 1, y = 0;
  int32_t all[3] = {0, 1, 2};
  if (ok(j, nkrt_comm_all_reduce(c, NKRT_DTYPE_FLOAT32, NKRT_CC_ADD, all, j->world, &x, &y, 1)))
    RCHECK(j, y == (float)j->world);
}

/* A child that joins as `rank` of `world` and is killed (SIGALRM, whose
 * default action ends it like SIGKILL: no cleanup) after `secs`. */
static pid_t doomed_rank(const char *name, uint32_t rank, uint32_t world, unsigned secs) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGALRM, SIG_DFL);
    alarm(secs);
    nkrt_comm_t *c = NULL;
    nkrt_status_t st = nkrt_comm_join(name, rank, world, 120000000000ll, &c);
    (void)st;
    _exit(9); /* not reached: the join waits for ranks that never come */
  }
  return pid;
}

TEST(comm_rank_killed_during_join) {
  const char *name = cc_name("killjoin");
  /* rank 1 dies while rank 0 waits for rank 2: rank 0 says so within seconds */
  pid_t kid = doomed_rank(name, 1, 3, 2);
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  nkrt_comm_t *c = NULL;
  char want[128];
  snprintf(want, sizeof(want), "rank 1 (pid %d) died (it exited or was killed) while the ranks "
           "joined", (int)kid);
  CHECK_ERR(nkrt_comm_join(name, 0, 3, 120000000000ll, &c), NKRT_FAILURE, want);
  double s = seconds_since(&t0);
  printf("  rank 0 noticed rank 1's death during join %.2f s after it started (killed at 2 s)\n", s);
  CHECK(s < 30);
  int status = 0;
  CHECK(waitpid(kid, &status, 0) == kid && WIFSIGNALED(status));
  CHECK(!shm_exists(name));
  /* the job restarted under the same name works, and leaves nothing */
  CHECK(run_ranks(name, 3, 20000000000ll, exit_fast_body) == 0);
  CHECK(!shm_exists(name));
  /* every rank that had joined died: the segment stays, and the next rank 0
   * under the name replaces it */
  kid = doomed_rank(name, 0, 2, 1);
  CHECK(waitpid(kid, &status, 0) == kid && WIFSIGNALED(status));
  CHECK(shm_exists(name));
  CHECK(run_ranks(name, 2, 20000000000ll, exit_fast_body) == 0);
  CHECK(!shm_exists(name));
}

/* Rank `rank` of 3 in its own process: runs all_reduces until one fails;
 * exits 0 when the failure names rank 2 (pid `victim`) as dead. */
static int collective_loop(const char *name, uint32_t rank, pid_t victim, int ready_fd) {
  nkrt_comm_t *c = NULL;
  nkrt_status_t st = nkrt_comm_join(name, rank, 3, 60000000000ll, &c);
  enum { N = 1 << 18 };
  float *x = calloc(N, sizeof(float)), *y = calloc(N, sizeof(float));
  int32_t all[3] = {0, 1, 2};
  for (int i = 0; !st; i++) {
    st = nkrt_comm_all_reduce(c, NKRT_DTYPE_FLOAT32, NKRT_CC_ADD, all, 3, x, y, N);
    if (i == 3 && write(ready_fd, "r", 1) != 1) return 5;
  }
  char want[96];
  snprintf(want, sizeof(want), "rank 2 (pid %d) died", (int)victim);
  int rc = strstr(nkrt_status_message(st), want) ? 0 : 3;
  if (rc) printf("  rank %u: %s\n", rank, nkrt_status_message(st));
  nkrt_status_free(st);
  nkrt_comm_destroy(c);
  free(x);
  free(y);
  return rc;
}

TEST(comm_rank_killed_mid_collective) {
  const char *name = cc_name("killcc");
  int ready[2];
  CHECK(pipe(ready) == 0);
  fflush(stdout);
  pid_t kids[3];
  for (int r = 2; r >= 0; r--) { /* rank 2 first: the others know its pid */
    kids[r] = fork();
    if (kids[r] == 0) _exit(collective_loop(name, (uint32_t)r, kids[2], ready[1]));
  }
  char buf[3];
  size_t got = 0;
  while (got < 3) {
    ssize_t n = read(ready[0], buf + got, 3 - got);
    if (n <= 0) break;
    got += (size_t)n;
  }
  CHECK(got == 3);
  kill(kids[2], SIGKILL); /* not reaped until the others are done: a zombie, dead all the same */
  struct timespec t0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int r = 0; r < 2; r++) {
    int status = 0;
    CHECK(waitpid(kids[r], &status, 0) == kids[r]);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  double s = seconds_since(&t0);
  printf("  ranks 0 and 1 failed %.2f s after rank 2 was killed mid-collective\n", s);
  CHECK(s < 30);
  int status = 0;
  CHECK(waitpid(kids[2], &status, 0) == kids[2] && WIFSIGNALED(status));
  close(ready[0]);
  close(ready[1]);
  CHECK(!shm_exists(name));
}

/* ---- through kernels, one process per rank -------------------------------- */

static int kernel_rank(uint32_t rank, uint32_t world) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 1 << 20);
  nkrt_load_options_t o;
  nkrt_load_options_init(&o);
  o.cc_enabled = 1;
  o.rank = (int32_t)rank;
  o.world_size = (int32_t)world;
  nkrt_model_t *m = NULL;
  int bad = 0;
  nkrt_status_t st = nkrt_model_load_file(rt, nkrt_test_neff("collective"), 0, &o, &m);
  nkrt_tensor_t *p = NULL, *src = NULL, *dst = NULL;
  if (!st) st = nkrt_tensor_allocate(rt, 0, 64, "params", &p);
  if (!st) st = nkrt_tensor_allocate(rt, 0, 65536, "src", &src);
  if (!st) st = nkrt_tensor_allocate(rt, 0, 65536, "dst", &dst);
  /* all_reduce add of 100 floats, then all_gather of 2 int32 */
  int64_t params[8] = {NKRT_CC_ALL_REDUCE, NKRT_DTYPE_FLOAT32, NKRT_CC_ADD, 2, 100, 0, 1, 0};
  float x[100], y[100];
  for (int i = 0; i < 100; i++) x[i] = (float)(i * (int)(rank + 1));
  void *addrs[3] = {NULL, NULL, NULL};
  if (!st) {
    addrs[0] = nkrt_tensor_va(p), addrs[1] = nkrt_tensor_va(src), addrs[2] = nkrt_tensor_va(dst);
    st = nkrt_tensor_write(p, params, 0, sizeof(params));
  }
  if (!st) st = nkrt_tensor_write(src, x, 0, sizeof(x));
  if (!st) st = nkrt_execute_at(m, addrs);
  if (!st) st = nkrt_tensor_read(dst, y, 0, sizeof(y));
  for (int i = 0; !st && i < 100; i++) bad += y[i] != (float)(3 * i);
  params[0] = NKRT_CC_ALL_GATHER, params[1] = NKRT_DTYPE_INT32, params[4] = 2;
  int32_t mine[2] = {(int32_t)rank, 7}, all[4];
  if (!st) st = nkrt_tensor_write(p, params, 0, sizeof(params));
  if (!st) st = nkrt_tensor_write(src, mine, 0, sizeof(mine));
  if (!st) st = nkrt_execute_at(m, addrs);
  if (!st) st = nkrt_tensor_read(dst, all, 0, sizeof(all));
  if (!st) bad += all[0] != 0 || all[1] != 7 || all[2] != 1 || all[3] != 7;
  /* reduce_scatter add of 2 blocks of 2 int32 */
  params[0] = NKRT_CC_REDUCE_SCATTER, params[1] = NKRT_DTYPE_INT32, params[4] = 2;
  int32_t blocks[4] = {(int32_t)rank, 1, 10 * (int32_t)rank, 2}, mine_sum[2];
  if (!st) st = nkrt_tensor_write(p, params, 0, sizeof(params));
  if (!st) st = nkrt_tensor_write(src, blocks, 0, sizeof(blocks));
  if (!st) st = nkrt_execute_at(m, addrs);
  if (!st) st = nkrt_tensor_read(dst, mine_sum, 0, sizeof(mine_sum));
  if (!st) bad += rank == 0 ? mine_sum[0] != 1 || mine_sum[1] != 2
                            : mine_sum[0] != 10 || mine_sum[1] != 4;
  /* broadcast of 3 floats from member 1 (its index travels in reduce_op) */
  params[0] = NKRT_CC_BROADCAST, params[1] = NKRT_DTYPE_FLOAT32, params[2] = 1, params[4] = 3;
  float b[3] = {(float)rank + 1, 10 * ((float)rank + 1), 100 * ((float)rank + 1)}, bo[3];
  if (!st) st = nkrt_tensor_write(p, params, 0, sizeof(params));
  if (!st) st = nkrt_tensor_write(src, b, 0, sizeof(b));
  if (!st) st = nkrt_execute_at(m, addrs);
  if (!st) st = nkrt_tensor_read(dst, bo, 0, sizeof(bo));
  if (!st) bad += bo[0] != 2 || bo[1] != 20 || bo[2] != 200;
  if (st) {
    fprintf(stdout, "  rank %u: %s\n", rank, nkrt_status_message(st));
    nkrt_status_free(st);
    bad++;
  }
  nkrt_tensor_free(&p), nkrt_tensor_free(&src), nkrt_tensor_free(&dst);
  nkrt_model_unload(m);
  nkrt_runtime_destroy(rt);
  return bad;
}

TEST(comm_through_kernels_in_processes) {
  char *saved = getenv("NKRT_CC_ID") ? strdup(getenv("NKRT_CC_ID")) : NULL;
  setenv("NKRT_CC_ID", cc_name("kernels"), 1);
  fflush(stdout);
  pid_t kids[2];
  for (uint32_t r = 0; r < 2; r++) {
    kids[r] = fork();
    if (kids[r] == 0) _exit(kernel_rank(r, 2) == 0 ? 0 : 1);
  }
  for (int r = 0; r < 2; r++) {
    int status = 0;
    CHECK(waitpid(kids[r], &status, 0) == kids[r]);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  /* a model loaded for one rank, or no NKRT_CC_ID: the kernel fails with why */
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 1 << 20);
  nkrt_model_t *m = NULL;
  CHECK_OK(nkrt_model_load_file(rt, nkrt_test_neff("collective"), 0, NULL, &m));
  nkrt_tensor_t *p = NULL, *src = NULL, *dst = NULL;
  CHECK_OK(nkrt_tensor_allocate(rt, 0, 64, "params", &p));
  CHECK_OK(nkrt_tensor_allocate(rt, 0, 65536, "src", &src));
  CHECK_OK(nkrt_tensor_allocate(rt, 0, 65536, "dst", &dst));
  int64_t params[8] = {NKRT_CC_ALL_REDUCE, NKRT_DTYPE_FLOAT32, NKRT_CC_ADD, 2, 1, 0, 1, 0};
  CHECK_OK(nkrt_tensor_write(p, params, 0, sizeof(params)));
  void *addrs[3] = {nkrt_tensor_va(p), nkrt_tensor_va(src), nkrt_tensor_va(dst)};
  CHECK_ERR(nkrt_execute_at(m, addrs), NKRT_EXEC_COMPLETED_WITH_ERR,
            "a collective over several ranks in a model loaded with world size 1");
  nkrt_model_unload(m);
  nkrt_load_options_t o;
  nkrt_load_options_init(&o);
  o.cc_enabled = 1, o.rank = 0, o.world_size = 2;
  CHECK_OK(nkrt_model_load_file(rt, nkrt_test_neff("collective"), 0, &o, &m));
  unsetenv("NKRT_CC_ID");
  CHECK_ERR(nkrt_execute_at(m, addrs), NKRT_EXEC_COMPLETED_WITH_ERR, "collectives need NKRT_CC_ID");
  nkrt_tensor_free(&p), nkrt_tensor_free(&src), nkrt_tensor_free(&dst);
  nkrt_model_unload(m);
  nkrt_runtime_destroy(rt);
  if (saved) setenv("NKRT_CC_ID", saved, 1);
  free(saved);
}
