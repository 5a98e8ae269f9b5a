/* Synchronous tensor operations ordered after queued work on the same bytes
 * (the hazard ranges of exec.h / tensor.h), using the slow `sleep` NEFF. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "hazard.h" /* the fake-hazard test registers a range by hand */
#include "runtime.h"
#include "test.h"

enum { XN = 1024, XB = XN * 4 };

static uint64_t ms_since(uint64_t t0) { return (nkrt_now_ns() - t0) / 1000000u; }

/* The sleep model on `core` with its input x = i (float), ms input, and sets
 * binding x, ms and output0 = `out`. */
typedef struct sleep_job {
  nkrt_model_t *model;
  nkrt_tensor_t *x, *ms;
  nkrt_tensor_set_t *in, *out;
} sleep_job_t;

static void sleep_setup(sleep_job_t *j, nkrt_runtime_t *rt, uint32_t core, int32_t ms,
                        nkrt_tensor_t *out) {
  memset(j, 0, sizeof(*j));
  CHECK_OK(nkrt_model_load_file(rt, nkrt_test_neff("sleep"), core, NULL, &j->model));
  CHECK_OK(nkrt_tensor_allocate(rt, core, XB, "x", &j->x));
  CHECK_OK(nkrt_tensor_allocate(rt, core, 4, "ms", &j->ms));
  float x[XN];
  for (int i = 0; i < XN; i++) x[i] = (float)i;
  CHECK_OK(nkrt_tensor_write(j->x, x, 0, sizeof(x)));
  CHECK_OK(nkrt_tensor_write(j->ms, &ms, 0, 4));
  CHECK_OK(nkrt_tensor_set_create(&j->in));
  CHECK_OK(nkrt_tensor_set_create(&j->out));
  CHECK_OK(nkrt_tensor_set_add(j->in, "x", j->x));
  CHECK_OK(nkrt_tensor_set_add(j->in, "ms", j->ms));
  CHECK_OK(nkrt_tensor_set_add(j->out, "output0", out));
}

static void sleep_teardown(sleep_job_t *j) {
  nkrt_tensor_set_destroy(j->in);
  nkrt_tensor_set_destroy(j->out);
  nkrt_tensor_free(&j->x);
  nkrt_tensor_free(&j->ms);
  nkrt_model_unload(j->model);
}

static int count_bad(const float *y, float add) {
  int bad = 0;
  for (int i = 0; i < XN; i++) bad += y[i] != (float)i + add;
  return bad;
}

TEST(hazard_sync_read_waits_for_async_exec) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 1 << 20);
  nkrt_tensor_t *out = NULL;
  CHECK_OK(nkrt_tensor_allocate(rt, 0, XB, "out", &out));
  CHECK_OK(nkrt_tensor_memset(out, 0, 0, XB));
  sleep_job_t j;
  sleep_setup(&j, rt, 0, 100, out);
  nkrt_event_t *ev = NULL;
  uint64_t t0 = nkrt_now_ns();
  CHECK_OK(nkrt_execute_async(j.model, j.in, j.out, &ev));
  float y[XN];
  CHECK_OK(nkrt_tensor_read(out, y, 0, sizeof(y))); /* no event wait: the read orders itself */
  CHECK(ms_since(t0) >= 90);
  CHECK(count_bad(y, 1.0f) == 0);
  /* a slice of the output, and a copy and a 2-D read out of it, all wait too */
  nkrt_tensor_t *tail = NULL, *dst = NULL;
  CHECK_OK(nkrt_tensor_slice(out, XB - 64, 64, "tail", &tail));
  CHECK_OK(nkrt_tensor_allocate(rt, 0, XB, "dst", &dst));
  CHECK_OK(nkrt_event_wait(ev, -1));
  nkrt_event_release(ev);
  CHECK_OK(nkrt_tensor_memset(out, 0, 0, XB));
  CHECK_OK(nkrt_execute_async(j.model, j.in, j.out, &ev));
  CHECK_OK(nkrt_tensor_copy(tail, 0, dst, 0, 64));
  float last[16];
  CHECK_OK(nkrt_tensor_read(dst, last, 0, sizeof(last)));
  CHECK(last[15] == (float)(XN - 1) + 1.0f && last[0] == (float)(XN - 16) + 1.0f);
  CHECK_OK(nkrt_event_wait(ev, -1));
  nkrt_event_release(ev);
  CHECK_OK(nkrt_tensor_memset(out, 0, 0, XB));
  CHECK_OK(nkrt_execute_async(j.model, j.in, j.out, &ev));
  float col[4];
  CHECK_OK(nkrt_tensor_read_2d(out, col, 4, 0, 1024, 4, 4)); /* y[0], y[256], ... */
  CHECK(col[0] == 1.0f && col[1] == 257.0f && col[3] == 769.0f);
  CHECK_OK(nkrt_event_wait(ev, -1));
  nkrt_event_release(ev);
  nkrt_tensor_free(&tail);
  nkrt_tensor_free(&dst);
  sleep_teardown(&j);
  nkrt_tensor_free(&out);
  nkrt_runtime_destroy(rt);
}

TEST(hazard_ranges_not_allocations) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 1 << 20);
  /* one allocation, three blocks: the output, a neighbour, a spare */
  nkrt_tensor_t *blk = NULL, *out = NULL, *next = NULL;
  CHECK_OK(nkrt_tensor_allocate(rt, 0, 3 * XB, "blk", &blk));
  CHECK_OK(nkrt_tensor_memset(blk, 0, 0, 3 * XB));
  CHECK_OK(nkrt_tensor_slice(blk, 0, XB, "out", &out));
  CHECK_OK(nkrt_tensor_slice(blk, XB, XB, "next", &next));
  sleep_job_t j;
  sleep_setup(&j, rt, 0, 300, out);
  nkrt_event_t *ev = NULL;
  uint64_t t0 = nkrt_now_ns();
  CHECK_OK(nkrt_execute_async(j.model, j.in, j.out, &ev));
  /* disjoint bytes of the same allocation: none of these waits */
  uint8_t ones[XB];
  memset(ones, 1, sizeof(ones));
  CHECK_OK(nkrt_tensor_write(next, ones, 0, sizeof(ones)));
  CHECK_OK(nkrt_tensor_write(blk, ones, XB, 16));
  CHECK_OK(nkrt_tensor_memset(blk, 2, 2 * XB, XB));
  CHECK_OK(nkrt_tensor_copy(next, 0, blk, 2 * XB, 64));
  CHECK_OK(nkrt_tensor_write_2d(blk, ones, 0, XB, 64, 16, 8));
  CHECK_OK(nkrt_tensor_memset_2d(blk, 5, 2 * XB, 64, 8, 16));
  uint8_t probe[16];
  CHECK_OK(nkrt_tensor_read(blk, probe, XB + 8, 16));
  CHECK_OK(nkrt_tensor_read(blk, probe, XB, 0)); /* empty range at the boundary */
  CHECK(!nkrt_event_is_done(ev));
  CHECK(ms_since(t0) < 250);
  /* overlapping by a few bytes (the output's last 6 and the neighbour's
   * first 2): waits; the kernel's result is older, so these bytes survive */
  uint8_t mark[8];
  memset(mark, 0xAB, sizeof(mark));
  CHECK_OK(nkrt_tensor_write(blk, mark, XB - 6, sizeof(mark)));
  CHECK(ms_since(t0) >= 280);
  CHECK_OK(nkrt_event_wait(ev, -1));
  nkrt_event_release(ev);
  uint8_t back[8];
  CHECK_OK(nkrt_tensor_read(blk, back, XB - 6, sizeof(back)));
  CHECK(memcmp(back, mark, sizeof(mark)) == 0);
  float y[XN - 2];
  CHECK_OK(nkrt_tensor_read(out, y, 0, sizeof(y)));
  int bad = 0;
  for (int i = 0; i < XN - 2; i++) bad += y[i] != (float)i + 1.0f;
  CHECK(bad == 0);
  sleep_teardown(&j);
  nkrt_tensor_free(&out);
  nkrt_tensor_free(&next);
  nkrt_tensor_free(&blk);
  nkrt_runtime_destroy(rt);
}

TEST(hazard_inputs_and_async_copies) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 1 << 20);
  nkrt_tensor_t *out = NULL;
  CHECK_OK(nkrt_tensor_allocate(rt, 0, XB, "out", &out));
  sleep_job_t j;
  sleep_setup(&j, rt, 0, 80, out);
  /* a write into an input the pending execution still has to read waits for
   * it: the output is computed from the old input */
  nkrt_event_t *ev = NULL;
  CHECK_OK(nkrt_execute_async(j.model, j.in, j.out, &ev));
  float fresh[XN], y[XN];
  for (int i = 0; i < XN; i++) fresh[i] = 1000.0f + (float)i;
  CHECK_OK(nkrt_tensor_write(j.x, fresh, 0, sizeof(fresh)));
  CHECK_OK(nkrt_event_wait(ev, -1));
  nkrt_event_release(ev);
  CHECK_OK(nkrt_tensor_read(out, y, 0, sizeof(y)));
  CHECK(count_bad(y, 1.0f) == 0);
  /* an async read queued behind the execution; a sync write to its bytes
   * waits for the read, so the host buffer gets the kernel's result */
  float x[XN];
  for (int i = 0; i < XN; i++) x[i] = (float)i;
  CHECK_OK(nkrt_tensor_write(j.x, x, 0, sizeof(x)));
  nkrt_event_t *exec_ev = NULL, *read_ev = NULL, *write_ev = NULL;
  float *host = calloc(XN, sizeof(float));
  CHECK_OK(nkrt_execute_async(j.model, j.in, j.out, &exec_ev));
  CHECK_OK(nkrt_tensor_read_async(out, host, 0, XB, &read_ev));
  CHECK_OK(nkrt_tensor_memset(out, 0, 0, XB));
  CHECK_OK(nkrt_event_wait(read_ev, -1));
  CHECK(count_bad(host, 1.0f) == 0);
  /* an async write: a sync read of its bytes sees the written data */
  CHECK_OK(nkrt_execute_async(j.model, j.in, j.out, &ev));
  CHECK_OK(nkrt_tensor_write_async(j.x, fresh, 0, XB, &write_ev));
  float xb[XN];
  CHECK_OK(nkrt_tensor_read(j.x, xb, 0, sizeof(xb)));
  CHECK(memcmp(xb, fresh, sizeof(xb)) == 0);
  CHECK_OK(nkrt_event_wait(ev, -1));
  CHECK_OK(nkrt_event_wait(write_ev, -1));
  nkrt_event_release(ev);
  nkrt_event_release(exec_ev);
  nkrt_event_release(read_ev);
  nkrt_event_release(write_ev);
  free(host);
  sleep_teardown(&j);
  nkrt_tensor_free(&out);
  nkrt_runtime_destroy(rt);
}

TEST(hazard_other_cores) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0,1", 1 << 20);
  nkrt_tensor_t *out0 = NULL, *out1 = NULL;
  CHECK_OK(nkrt_tensor_allocate(rt, 0, XB, "out0", &out0));
  CHECK_OK(nkrt_tensor_allocate(rt, 1, XB, "out1", &out1));
  sleep_job_t slow, quick;
  sleep_setup(&slow, rt, 0, 300, out0);
  sleep_setup(&quick, rt, 1, 0, out1);
  /* pending work on core 0 does not hold up a sync execution on core 1 */
  nkrt_event_t *ev = NULL;
  uint64_t t0 = nkrt_now_ns();
  CHECK_OK(nkrt_execute_async(slow.model, slow.in, slow.out, &ev));
  CHECK_OK(nkrt_execute(quick.model, quick.in, quick.out));
  float y[XN];
  CHECK_OK(nkrt_tensor_read(out1, y, 0, sizeof(y)));
  CHECK(count_bad(y, 1.0f) == 0);
  CHECK(!nkrt_event_is_done(ev) && ms_since(t0) < 250);
  /* ... nor a sync execution on core 0 its own queue orders anyway */
  CHECK_OK(nkrt_execute(slow.model, slow.in, slow.out));
  CHECK(nkrt_event_is_done(ev));
  CHECK_OK(nkrt_event_wait(ev, -1));
  nkrt_event_release(ev);
  sleep_teardown(&slow);
  sleep_teardown(&quick);
  nkrt_tensor_free(&out0);
  nkrt_tensor_free(&out1);
  nkrt_runtime_destroy(rt);
}

/* Tensors of one core only ever live in that core's arena, so queued work of
 * another core never overlaps them through the public API; this test
 * registers such a range by hand to check that nkrt_execute honours it, and
 * ignores one of its own core. */
typedef struct remover {
  nkrt_runtime_t *rt;
  nkrt_hazard_t *hazard;
  atomic_int removed;
} remover_t;

static void *remove_later(void *p) {
  remover_t *r = p;
  struct timespec ts = {0, 100 * 1000000L};
  nanosleep(&ts, NULL);
  atomic_store(&r->removed, 1);
  nkrt_hazard_remove(r->rt, r->hazard);
  return NULL;
}

TEST(hazard_execute_waits_for_other_core_ranges) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0,1", 1 << 20);
  nkrt_tensor_t *out = NULL;
  CHECK_OK(nkrt_tensor_allocate(rt, 0, XB, "out", &out));
  sleep_job_t j;
  sleep_setup(&j, rt, 0, 0, out);
  uintptr_t lo = (uintptr_t)nkrt_tensor_va(out) + 100;
  nkrt_range_t range = {lo, lo + 8};
  nkrt_hazard_t own = {.ranges = &range, .count = 1, .core = 0};
  nkrt_hazard_add(rt, &own); /* this core's: ignored */
  uint64_t t0 = nkrt_now_ns();
  CHECK_OK(nkrt_execute(j.model, j.in, j.out));
  CHECK(ms_since(t0) < 80);
  nkrt_hazard_remove(rt, &own);
  nkrt_hazard_remove(rt, &own); /* idempotent */
  nkrt_hazard_t other = {.ranges = &range, .count = 1, .core = 1};
  nkrt_hazard_add(rt, &other);
  remover_t r = {.rt = rt, .hazard = &other};
  atomic_init(&r.removed, 0);
  pthread_t th;
  pthread_create(&th, NULL, remove_later, &r);
  CHECK_OK(nkrt_execute(j.model, j.in, j.out));
  CHECK(atomic_load(&r.removed) == 1);
  pthread_join(th, NULL);
  CHECK(atomic_load(&rt->hazard_count) == 0);
  sleep_teardown(&j);
  nkrt_tensor_free(&out);
  nkrt_runtime_destroy(rt);
}

/* Threads pipelining: each submits executions into its own output and reads
 * it back synchronously without waiting on events, with slices of one shared
 * allocation as outputs (disjoint ranges). Run under the sanitizers too. */
typedef struct pipe_arg {
  nkrt_runtime_t *rt;
  nkrt_model_t *model;
  nkrt_tensor_t *out;
  int bad;
} pipe_arg_t;

static void *pipe_main(void *p) {
  pipe_arg_t *a = p;
  nkrt_tensor_t *x = NULL, *ms = NULL;
  nkrt_tensor_set_t *in = NULL, *os = NULL;
  CHECK_OK(nkrt_tensor_allocate(a->rt, 0, XB, "x", &x));
  CHECK_OK(nkrt_tensor_allocate(a->rt, 0, 4, "ms", &ms));
  int32_t zero = 0;
  CHECK_OK(nkrt_tensor_write(ms, &zero, 0, 4));
  CHECK_OK(nkrt_tensor_set_create(&in));
  CHECK_OK(nkrt_tensor_set_create(&os));
  CHECK_OK(nkrt_tensor_set_add(in, "x", x));
  CHECK_OK(nkrt_tensor_set_add(in, "ms", ms));
  CHECK_OK(nkrt_tensor_set_add(os, "output0", a->out));
  float v[XN], y[XN];
  for (int it = 0; it < 40; it++) {
    for (int i = 0; i < XN; i++) v[i] = (float)(it * 3 + i);
    CHECK_OK(nkrt_tensor_write(x, v, 0, sizeof(v)));
    nkrt_event_t *ev = NULL;
    CHECK_OK(nkrt_execute_async(a->model, in, os, &ev));
    nkrt_event_release(ev); /* dropped unwaited: the read below orders itself */
    CHECK_OK(nkrt_tensor_read(a->out, y, 0, sizeof(y)));
    for (int i = 0; i < XN; i++) a->bad += y[i] != v[i] + 1.0f;
  }
  nkrt_tensor_set_destroy(in);
  nkrt_tensor_set_destroy(os);
  nkrt_tensor_free(&x);
  nkrt_tensor_free(&ms);
  return NULL;
}

TEST(hazard_pipelined_threads) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 1 << 22);
  nkrt_model_t *m = NULL;
  CHECK_OK(nkrt_model_load_file(rt, nkrt_test_neff("sleep"), 0, NULL, &m));
  nkrt_tensor_t *blk = NULL;
  CHECK_OK(nkrt_tensor_allocate(rt, 0, 4 * XB, "outs", &blk));
  pipe_arg_t args[4];
  pthread_t th[4];
  for (int i = 0; i < 4; i++) {
    args[i] = (pipe_arg_t){.rt = rt, .model = m};
    CHECK_OK(nkrt_tensor_slice(blk, (uint64_t)i * XB, XB, "out", &args[i].out));
    pthread_create(&th[i], NULL, pipe_main, &args[i]);
  }
  for (int i = 0; i < 4; i++) {
    pthread_join(th[i], NULL);
    CHECK(args[i].bad == 0);
    nkrt_tensor_free(&args[i].out);
  }
  CHECK(atomic_load(&rt->hazard_count) == 0);
  nkrt_tensor_free(&blk);
  nkrt_model_unload(m);
  nkrt_runtime_destroy(rt);
}

TEST(hazard_destroy_with_pending_work) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 1 << 20);
  nkrt_tensor_t *out = NULL;
  CHECK_OK(nkrt_tensor_allocate(rt, 0, XB, "out", &out));
  sleep_job_t j;
  sleep_setup(&j, rt, 0, 30, out);
  nkrt_event_t *kept = NULL, *dropped = NULL;
  CHECK_OK(nkrt_execute_async(j.model, j.in, j.out, &kept));
  CHECK_OK(nkrt_execute_async(j.model, j.in, j.out, &dropped));
  nkrt_event_release(dropped);
  sleep_teardown(&j);
  nkrt_tensor_free(&out);
  nkrt_runtime_destroy(rt); /* drains the queue, frees the unreleased event */
}
