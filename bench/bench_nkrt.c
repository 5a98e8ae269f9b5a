/* bench_nkrt.c - C-level benchmarks of the nkrt runtime (run by bench/run.py).
 *
 *   build/bench_nkrt [--neff-dir DIR] [--repeats R] [--iters N] [--json]
 *
 * Measures, with the public API only:
 *   exec_sync       nkrt_execute of the noop NEFF (tensor sets built once)
 *   exec_async      nkrt_execute_async + nkrt_event_wait + nkrt_event_release
 *   kernel_direct   the noop kernel called straight through its function
 *                   pointer (dlopen of the same .so): the floor under both
 *   spin_1core /    the single-threaded spin NEFF executed repeatedly on one
 *   spin_2cores     core, then on two cores at once (one thread per core);
 *                   interleaved with the same loop on plain threads (no
 *                   runtime), the two-thread scaling the host itself gives
 *
 * Each figure is the median over R batches of the mean time of one call in a
 * batch of N calls (warm-up batch first). Times are in nanoseconds. With
 * --json the results are printed as one JSON object, else as a table.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nkrt/nkrt.h"

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die_on(nkrt_status_t st, const char *what) {
  if (!st) return;
  fprintf(stderr, "bench_nkrt: %s failed: %s: %s\n", what, nkrt_code_name(nkrt_status_code(st)),
          nkrt_status_message(st));
  nkrt_status_free(st);
  exit(1);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Summary of R per-call figures (ns). */
typedef struct stats {
  double median, min, max;
} stats_t;

static stats_t summarize(double *v, int n) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  stats_t s = {n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]), v[0], v[n - 1]};
  return s;
}

typedef struct noop_fixture {
  nkrt_runtime_t *rt;
  nkrt_model_t *model;
  nkrt_tensor_t *x, *y;
  nkrt_tensor_set_t *in, *out;
} noop_fixture_t;

static void noop_setup(noop_fixture_t *f, nkrt_runtime_t *rt, const char *path) {
  memset(f, 0, sizeof(*f));
  f->rt = rt;
  die_on(nkrt_model_load_file(rt, path, 0, NULL, &f->model), "loading noop.neff");
  float one = 1.0f;
  die_on(nkrt_tensor_allocate(rt, 0, 4, "x", &f->x), "allocate x");
  die_on(nkrt_tensor_allocate(rt, 0, 4, "y", &f->y), "allocate y");
  die_on(nkrt_tensor_write(f->x, &one, 0, 4), "write x");
  die_on(nkrt_tensor_set_create(&f->in), "tensor set");
  die_on(nkrt_tensor_set_create(&f->out), "tensor set");
  die_on(nkrt_tensor_set_add(f->in, "x", f->x), "tensor set add");
  die_on(nkrt_tensor_set_add(f->out, "output0", f->y), "tensor set add");
}

static void noop_teardown(noop_fixture_t *f) {
  nkrt_tensor_set_destroy(f->in);
  nkrt_tensor_set_destroy(f->out);
  nkrt_tensor_release(f->x);
  nkrt_tensor_release(f->y);
  nkrt_model_unload(f->model);
}

static double batch_sync(noop_fixture_t *f, int iters) {
  uint64_t t0 = now_ns();
  for (int i = 0; i < iters; i++) die_on(nkrt_execute(f->model, f->in, f->out), "nkrt_execute");
  return (double)(now_ns() - t0) / iters;
}

static double batch_async(noop_fixture_t *f, int iters) {
  uint64_t t0 = now_ns();
  for (int i = 0; i < iters; i++) {
    nkrt_event_t *ev = NULL;
    die_on(nkrt_execute_async(f->model, f->in, f->out, &ev), "nkrt_execute_async");
    die_on(nkrt_event_wait(ev, -1), "nkrt_event_wait");
    nkrt_event_release(ev);
  }
  return (double)(now_ns() - t0) / iters;
}

/* The noop kernel called directly, with an env that has no callbacks (the
 * noop kernel uses none). Keeps the compiler from dropping the loop by
 * reading the output back through a volatile. */
static double batch_direct(nkrt_kernel_fn kernel, int iters) {
  float x = 1.0f, y = 0.0f;
  void *ins[1] = {&x}, *outs[1] = {&y};
  nkrt_kernel_env_t env;
  memset(&env, 0, sizeof(env));
  env.struct_size = sizeof(env);
  env.abi_version = NKRT_NEFF_ABI_VERSION;
  env.num_workers = 1;
  volatile float sink = 0.0f;
  uint64_t t0 = now_ns();
  for (int i = 0; i < iters; i++) {
    kernel(&env, ins, outs);
    sink += y;
  }
  (void)sink;
  return (double)(now_ns() - t0) / iters;
}

/* ---- two cores at once -------------------------------------------------- */

typedef struct spin_job {
  nkrt_model_t *model;
  nkrt_tensor_t *x, *n, *y;
  nkrt_tensor_set_t *in, *out;
  int reps;
  pthread_barrier_t *start;
} spin_job_t;

static void spin_setup(spin_job_t *j, nkrt_runtime_t *rt, const char *path, uint32_t core,
                       int32_t iters) {
  memset(j, 0, sizeof(*j));
  die_on(nkrt_model_load_file(rt, path, core, NULL, &j->model), "loading spin.neff");
  float x[256];
  for (int i = 0; i < 256; i++) x[i] = 0.1f + (float)i / 1000.0f;
  die_on(nkrt_tensor_allocate(rt, core, sizeof(x), "x", &j->x), "allocate");
  die_on(nkrt_tensor_allocate(rt, core, 4, "n", &j->n), "allocate");
  die_on(nkrt_tensor_allocate(rt, core, sizeof(x), "y", &j->y), "allocate");
  die_on(nkrt_tensor_write(j->x, x, 0, sizeof(x)), "write");
  die_on(nkrt_tensor_write(j->n, &iters, 0, 4), "write");
  die_on(nkrt_tensor_set_create(&j->in), "tensor set");
  die_on(nkrt_tensor_set_create(&j->out), "tensor set");
  die_on(nkrt_tensor_set_add(j->in, "x", j->x), "tensor set add");
  die_on(nkrt_tensor_set_add(j->in, "n", j->n), "tensor set add");
  die_on(nkrt_tensor_set_add(j->out, "output0", j->y), "tensor set add");
}

static void spin_teardown(spin_job_t *j) {
  nkrt_tensor_set_destroy(j->in);
  nkrt_tensor_set_destroy(j->out);
  nkrt_tensor_release(j->x);
  nkrt_tensor_release(j->n);
  nkrt_tensor_release(j->y);
  nkrt_model_unload(j->model);
}

static void *spin_thread(void *p) {
  spin_job_t *j = p;
  pthread_barrier_wait(j->start);
  for (int i = 0; i < j->reps; i++) die_on(nkrt_execute(j->model, j->in, j->out), "spin execute");
  return NULL;
}

/* The host alone: the spin kernel's loop run on plain threads, no runtime.
 * Tells how much two-thread scaling the host itself delivers right now. */
typedef struct raw_job {
  int reps;
  int32_t iters;
  float y[256];
  pthread_barrier_t *start;
} raw_job_t;

static void *raw_thread(void *p) {
  raw_job_t *j = p;
  pthread_barrier_wait(j->start);
  for (int r = 0; r < j->reps; r++)
    for (int i = 0; i < 256; i++) {
      volatile float seed = 0.1f + (float)i / 1000.0f;
      float v = seed;
      for (int32_t k = 0; k < j->iters; k++) v = 3.7f * v * (1.0f - v);
      j->y[i] = v;
    }
  return NULL;
}

static double raw_throughput(int nthreads, int reps, int32_t iters) {
  pthread_t threads[2];
  raw_job_t jobs[2];
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, (unsigned)nthreads + 1);
  for (int c = 0; c < nthreads; c++) {
    jobs[c].reps = reps;
    jobs[c].iters = iters;
    jobs[c].start = &start;
    if (pthread_create(&threads[c], NULL, raw_thread, &jobs[c]) != 0) {
      fprintf(stderr, "bench_nkrt: pthread_create failed\n");
      exit(1);
    }
  }
  pthread_barrier_wait(&start);
  uint64_t t0 = now_ns();
  for (int c = 0; c < nthreads; c++) pthread_join(threads[c], NULL);
  uint64_t dt = now_ns() - t0;
  pthread_barrier_destroy(&start);
  return (double)nthreads * reps / ((double)dt / 1e9);
}

/* Executions per second of `ncores` threads, each running reps executions on
 * its own core. */
static double spin_throughput(spin_job_t *jobs, int ncores, int reps) {
  pthread_t threads[2];
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, (unsigned)ncores + 1);
  for (int c = 0; c < ncores; c++) {
    jobs[c].reps = reps;
    jobs[c].start = &start;
    if (pthread_create(&threads[c], NULL, spin_thread, &jobs[c]) != 0) {
      fprintf(stderr, "bench_nkrt: pthread_create failed\n");
      exit(1);
    }
  }
  pthread_barrier_wait(&start);
  uint64_t t0 = now_ns();
  for (int c = 0; c < ncores; c++) pthread_join(threads[c], NULL);
  uint64_t dt = now_ns() - t0;
  pthread_barrier_destroy(&start);
  return (double)ncores * reps / ((double)dt / 1e9);
}

/* ---- main ----------------------------------------------------------------- */

static void usage(void) {
  fprintf(stderr, "usage: bench_nkrt [--neff-dir DIR] [--repeats R] [--iters N] "
                  "[--spin-iters K] [--spin-reps M] [--json]\n");
  exit(2);
}

int main(int argc, char **argv) {
  const char *dir = "build/neff";
  int repeats = 21, iters = 20000, json = 0;
  int spin_iters = 2000, spin_reps = 200;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) json = 1;
    else if (!strcmp(argv[i], "--neff-dir") && i + 1 < argc) dir = argv[++i];
    else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--iters") && i + 1 < argc) iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--spin-iters") && i + 1 < argc) spin_iters = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--spin-reps") && i + 1 < argc) spin_reps = atoi(argv[++i]);
    else usage();
  }
  if (repeats < 1 || iters < 1 || spin_iters < 1 || spin_reps < 1) usage();
  char noop_path[4096], spin_path[4096];
  snprintf(noop_path, sizeof(noop_path), "%s/noop.neff", dir);
  snprintf(spin_path, sizeof(spin_path), "%s/spin.neff", dir);

  nkrt_options_t opts;
  nkrt_options_init(&opts);
  opts.visible_cores = "0-1";
  opts.core_memory_bytes = 64ull << 20;
  nkrt_runtime_t *rt = NULL;
  die_on(nkrt_runtime_create(&opts, &rt), "nkrt_runtime_create");

  double *samples = malloc(sizeof(double) * (size_t)repeats);
  if (!samples) return 1;

  /* execute round trips */
  noop_fixture_t f;
  noop_setup(&f, rt, noop_path);
  batch_sync(&f, iters); /* warm-up */
  for (int r = 0; r < repeats; r++) samples[r] = batch_sync(&f, iters);
  stats_t sync = summarize(samples, repeats);
  batch_async(&f, iters / 4 + 1);
  for (int r = 0; r < repeats; r++) samples[r] = batch_async(&f, iters);
  stats_t async = summarize(samples, repeats);
  noop_teardown(&f);

  /* the kernel alone */
  void *so = dlopen(noop_path, RTLD_NOW | RTLD_LOCAL);
  if (!so) {
    fprintf(stderr, "bench_nkrt: dlopen %s: %s\n", noop_path, dlerror());
    return 1;
  }
  nkrt_neff_query_fn query = (nkrt_neff_query_fn)dlsym(so, NKRT_NEFF_ENTRY);
  const nkrt_neff_desc_t *desc = query ? query(NKRT_NEFF_ABI_VERSION) : NULL;
  if (!desc) {
    fprintf(stderr, "bench_nkrt: %s has no usable %s\n", noop_path, NKRT_NEFF_ENTRY);
    return 1;
  }
  batch_direct(desc->kernel, iters);
  for (int r = 0; r < repeats; r++) samples[r] = batch_direct(desc->kernel, iters * 10);
  stats_t direct = summarize(samples, repeats);
  dlclose(so);

  /* two cores against one */
  spin_job_t jobs[2];
  spin_setup(&jobs[0], rt, spin_path, 0, spin_iters);
  spin_setup(&jobs[1], rt, spin_path, 1, spin_iters);
  spin_throughput(jobs, 1, spin_reps / 10 + 1); /* warm-up */
  int spin_repeats = repeats < 7 ? repeats : 7;
  double one[7], two[7], ratio[7], raw[7];
  for (int r = 0; r < spin_repeats; r++) { /* interleaved, so drift hits all */
    one[r] = spin_throughput(jobs, 1, spin_reps);
    two[r] = spin_throughput(jobs, 2, spin_reps);
    ratio[r] = two[r] / one[r];
    double raw1 = raw_throughput(1, spin_reps, spin_iters);
    raw[r] = raw_throughput(2, spin_reps, spin_iters) / raw1;
  }
  stats_t s1 = summarize(one, spin_repeats), s2 = summarize(two, spin_repeats);
  stats_t sr = summarize(ratio, spin_repeats), sraw = summarize(raw, spin_repeats);
  spin_teardown(&jobs[0]);
  spin_teardown(&jobs[1]);
  uint32_t workers = nkrt_runtime_num_workers(rt);
  nkrt_runtime_destroy(rt);
  free(samples);

  if (json) {
    printf("{\"repeats\":%d,\"iters\":%d,\"num_workers\":%u,\n", repeats, iters, workers);
    printf(" \"exec_sync_ns\":{\"median\":%.1f,\"min\":%.1f,\"max\":%.1f},\n", sync.median,
           sync.min, sync.max);
    printf(" \"exec_async_ns\":{\"median\":%.1f,\"min\":%.1f,\"max\":%.1f},\n", async.median,
           async.min, async.max);
    printf(" \"kernel_direct_ns\":{\"median\":%.2f,\"min\":%.2f,\"max\":%.2f},\n", direct.median,
           direct.min, direct.max);
    printf(" \"spin\":{\"iters\":%d,\"reps\":%d,\"one_core_per_s\":%.1f,"
           "\"two_cores_per_s\":%.1f,\"ratio\":%.3f,\"ratio_min\":%.3f,\"ratio_max\":%.3f,"
           "\"host_two_thread_ratio\":%.3f}}\n",
           spin_iters, spin_reps, s1.median, s2.median, sr.median, sr.min, sr.max, sraw.median);
  } else {
    printf("nkrt C benchmarks (%d batches of %d calls, %u workers; medians)\n", repeats, iters,
           workers);
    printf("  nkrt_execute (noop), sync round trip   %9.1f ns  (min %.1f, max %.1f)\n",
           sync.median, sync.min, sync.max);
    printf("  nkrt_execute_async + event wait (noop) %9.1f ns  (min %.1f, max %.1f)\n",
           async.median, async.min, async.max);
    printf("  noop kernel called directly            %9.2f ns\n", direct.median);
    printf("  spin: 1 core %.1f exec/s, 2 cores %.1f exec/s, ratio %.3f (min %.3f, max %.3f)\n",
           s1.median, s2.median, sr.median, sr.min, sr.max);
    printf("  the same loop on plain threads (host alone): 2 threads / 1 = %.3f\n", sraw.median);
  }
  return 0;
}
