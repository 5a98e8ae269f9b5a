/* bench_comm.c - the shared-memory communicator's speed against memcpy.
 *
 *   cc -std=c11 -D_GNU_SOURCE -O2 -Iruntime/include -Iruntime/src runtime/src/*.c \
 *      bench/bench_comm.c -o build/bench_comm -ldl -lpthread
 *   build/bench_comm [ranks] [kind]   (kind: all_reduce, reduce_scatter, all_gather,
 *                                broadcast, all_to_all; default all_reduce)
 *
 * Forks `ranks` processes (default 2) that join one communicator and run the
 * collective on float32 buffers from 4 KiB to 64 MiB; rank 0 prints the
 * median time per call, the algorithm bandwidth (bytes per rank / time) and
 * its ratio to a single memcpy of the same bytes in one process. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nkrt/comm.h"
#include "nkrt/neff_abi.h"
#include "nkrt/status.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int reps_for(size_t bytes) { return bytes <= (1 << 20) ? 200 : bytes <= (16 << 20) ? 20 : 6; }

static double memcpy_s(size_t bytes) {
  char *a = malloc(bytes), *b = malloc(bytes);
  memset(a, 1, bytes), memset(b, 2, bytes);
  int reps = reps_for(bytes);
  double t[256];
  for (int r = 0; r < reps; r++) {
    double t0 = now();
    memcpy(b, a, bytes);
    __asm__ volatile("" ::"r"(b) : "memory");
    t[r] = now() - t0;
  }
  qsort(t, (size_t)reps, sizeof(double), cmp);
  free(a), free(b);
  return t[reps / 2];
}

static int rank_main(const char *name, uint32_t rank, uint32_t world, int kind) {
  nkrt_comm_t *c = NULL;
  nkrt_status_t st = nkrt_comm_join(name, rank, world, 60000000000ll, &c);
  if (st) {
    fprintf(stderr, "join: %s\n", nkrt_status_message(st));
    return 1;
  }
  int32_t ranks[64];
  for (uint32_t r = 0; r < world; r++) ranks[r] = (int32_t)r;
  size_t maxb = (size_t)64 << 20;
  float *src = malloc(maxb * world), *dst = malloc(maxb * world);
  memset(src, 0, maxb * world), memset(dst, 0, maxb * world);
  if (rank == 0)
    printf("%-14s %5s %10s %10s %10s %7s\n", "kind", "ranks", "bytes", "us/call", "GB/s", "xmemcpy");
  for (size_t bytes = 4096; bytes <= maxb; bytes *= 4) {
    int64_t count = (int64_t)(bytes / 4);
    int reps = reps_for(bytes);
    double t[256];
    for (int r = -2; r < reps && !st; r++) {
      st = nkrt_comm_barrier(c);
      double t0 = now();
      switch (kind) {
        case 0: st = st ? st : nkrt_comm_all_reduce(c, NKRT_DTYPE_FLOAT32, NKRT_CC_ADD, ranks, world, src, dst, count); break;
        case 1: st = st ? st : nkrt_comm_reduce_scatter(c, NKRT_DTYPE_FLOAT32, NKRT_CC_ADD, ranks, world, src, dst, count / world); break;
        case 2: st = st ? st : nkrt_comm_all_gather(c, NKRT_DTYPE_FLOAT32, ranks, world, src, dst, count / world); break;
        case 3: st = st ? st : nkrt_comm_broadcast(c, NKRT_DTYPE_FLOAT32, ranks, world, 0, src, dst, count); break;
        default: st = st ? st : nkrt_comm_all_to_all(c, NKRT_DTYPE_FLOAT32, ranks, world, src, dst, count / world); break;
      }
      if (r >= 0) t[r] = now() - t0;
    }
    if (st) break;
    qsort(t, (size_t)reps, sizeof(double), cmp);
    double s = t[reps / 2];
    if (rank == 0) {
      static const char *names[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all"};
      double m = memcpy_s(bytes);
      printf("%-14s %5u %10zu %10.1f %10.2f %7.2f\n", names[kind], world, bytes, s * 1e6,
             (double)bytes / s / 1e9, m / s);
      fflush(stdout);
    }
  }
  if (st) fprintf(stderr, "rank %u: %s\n", rank, nkrt_status_message(st));
  nkrt_comm_destroy(c);
  return st != NULL;
}

int main(int argc, char **argv) {
  uint32_t world = argc > 1 ? (uint32_t)atoi(argv[1]) : 2;
  int kind = 0;
  static const char *names[] = {"all_reduce", "reduce_scatter", "all_gather", "broadcast", "all_to_all"};
  for (int k = 0; argc > 2 && k < 5; k++) if (!strcmp(argv[2], names[k])) kind = k;
  char name[64];
  snprintf(name, sizeof(name), "bench-comm-%d", (int)getpid());
  pid_t kids[64];
  for (uint32_t r = 0; r < world; r++) {
    kids[r] = fork();
    if (kids[r] == 0) _exit(rank_main(name, r, world, kind));
  }
  int bad = 0;
  for (uint32_t r = 0; r < world; r++) {
    int status = 0;
    waitpid(kids[r], &status, 0);
    bad |= !WIFEXITED(status) || WEXITSTATUS(status);
  }
  return bad;
}
