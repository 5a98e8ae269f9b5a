/* The per-core allocator and device tensors. */
#include <stdlib.h>

#include "pool.h"
#include "test.h"

static nkrt_memory_stats_t stats(nkrt_runtime_t *rt, uint32_t core) {
  nkrt_memory_stats_t s;
  memset(&s, 0, sizeof(s));
  s.struct_size = sizeof(s);
  CHECK_OK(nkrt_memory_stats(rt, core, &s));
  return s;
}

static nkrt_tensor_t *alloc(nkrt_runtime_t *rt, uint64_t size) {
  nkrt_tensor_t *t = NULL;
  CHECK_OK(nkrt_tensor_allocate(rt, 0, size, "t", &t));
  return t;
}

TEST(allocator_best_fit_split_coalesce) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 1 << 20);
  nkrt_tensor_t *a = alloc(rt, 1000), *b = alloc(rt, 64), *c = alloc(rt, 5000), *d = alloc(rt, 64);
  uint8_t *base = nkrt_tensor_va(a);
  CHECK((uintptr_t)base % NKRT_ALIGNMENT == 0);
  CHECK((uint8_t *)nkrt_tensor_va(b) == base + 1024); /* 1000 rounded to 64 */
  nkrt_memory_stats_t s = stats(rt, 0);
  CHECK(s.allocated_bytes == 1024 + 64 + 5056 + 64);
  CHECK(s.active_allocations == 4 && s.total_allocations == 4);
  CHECK(s.reserved_bytes == s.allocated_bytes);
  uint8_t *c_va = nkrt_tensor_va(c);
  nkrt_tensor_free(&a);
  nkrt_tensor_free(&c);
  CHECK(a == NULL);
  /* best fit: 900 goes into a's 1024 hole, 4000 into c's 5056 hole */
  nkrt_tensor_t *e = alloc(rt, 4000), *f = alloc(rt, 900);
  CHECK(nkrt_tensor_va(e) == c_va);
  CHECK(nkrt_tensor_va(f) == base);
  /* splitting left the rest of c's hole free, between e and d */
  nkrt_tensor_t *g = alloc(rt, 1000);
  CHECK((uint8_t *)nkrt_tensor_va(g) == c_va + 4032);
  nkrt_tensor_free(&b);
  nkrt_tensor_free(&d);
  nkrt_tensor_free(&e);
  nkrt_tensor_free(&f);
  nkrt_tensor_free(&g);
  s = stats(rt, 0);
  CHECK(s.allocated_bytes == 0 && s.active_allocations == 0);
  CHECK(s.free_blocks == 1); /* everything coalesced */
  CHECK(s.largest_free_block == 1 << 20);
  CHECK(s.reserved_bytes == 0);
  CHECK(s.peak_allocated_bytes >= 1024 + 64 + 5056 + 64);
  CHECK(s.total_frees == 7);
  CHECK_OK(nkrt_memory_reset_peak(rt, 0));
  CHECK(stats(rt, 0).peak_allocated_bytes == 0);
  nkrt_runtime_destroy(rt);
}

TEST(allocator_out_of_memory) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 1 << 20);
  nkrt_tensor_t *a = alloc(rt, 600 << 10), *t = NULL;
  CHECK_ERR(nkrt_tensor_allocate(rt, 0, 600 << 10, "big", &t), NKRT_RESOURCE,
            "out of device memory on core 0: requested 614400 bytes; 614400 of 1048576 bytes "
            "allocated, largest free block 434176 bytes");
  CHECK(t == NULL);
  CHECK_ERR(nkrt_tensor_allocate(rt, 0, UINT64_MAX, "huge", &t), NKRT_RESOURCE, "requested");
  CHECK(stats(rt, 0).oom_count == 2);
  nkrt_tensor_free(&a);
  CHECK_OK(nkrt_tensor_allocate(rt, 0, 1 << 20, "all", &t));
  nkrt_tensor_free(&t);
  nkrt_runtime_destroy(rt);
}

TEST(allocator_random_stress) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 8 << 20);
  enum { N = 200 };
  nkrt_tensor_t *live[N] = {0};
  uint64_t sizes[N] = {0};
  unsigned seed = 12345;
  for (int round = 0; round < 4000; round++) {
    int i = rand_r(&seed) % N;
    if (live[i]) {
      /* the fill pattern must have survived: no overlap with other blocks */
      uint8_t *p = nkrt_tensor_va(live[i]);
      for (uint64_t k = 0; k < sizes[i]; k += 97)
        if (p[k] != (uint8_t)i) {
          nkrt_test_fail(__FILE__, __LINE__, "block %d corrupted at %llu", i, (unsigned long long)k);
          break;
        }
      nkrt_tensor_free(&live[i]);
    } else {
      sizes[i] = (uint64_t)(rand_r(&seed) % 70000);
      nkrt_status_t st = nkrt_tensor_allocate(rt, 0, sizes[i], "r", &live[i]);
      if (st) { /* OOM is allowed under fragmentation; must be RESOURCE */
        CHECK(nkrt_status_code(st) == NKRT_RESOURCE);
        nkrt_status_free(st);
        continue;
      }
      memset(nkrt_tensor_va(live[i]), i, sizes[i]);
    }
  }
  uint64_t expect = 0;
  for (int i = 0; i < N; i++)
    if (live[i]) expect += sizes[i] ? (sizes[i] + 63) / 64 * 64 : 64;
  CHECK(stats(rt, 0).allocated_bytes == expect);
  for (int i = 0; i < N; i++) nkrt_tensor_free(&live[i]);
  nkrt_memory_stats_t s = stats(rt, 0);
  CHECK(s.allocated_bytes == 0 && s.free_blocks == 1 && s.largest_free_block == 8 << 20);
  nkrt_runtime_destroy(rt);
}

TEST(tensor_read_write_bounds) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 1 << 20);
  nkrt_tensor_t *t = NULL;
  CHECK_OK(nkrt_tensor_allocate(rt, 0, 16, "weights", &t));
  CHECK(strcmp(nkrt_tensor_name(t), "weights") == 0);
  CHECK(nkrt_tensor_size(t) == 16 && nkrt_tensor_core(t) == 0 && !nkrt_tensor_is_slice(t));
  CHECK(nkrt_tensor_runtime(t) == rt);
  uint8_t in[16], out[16];
  for (int i = 0; i < 16; i++) in[i] = (uint8_t)(i * 3);
  CHECK_OK(nkrt_tensor_write(t, in, 0, 16));
  CHECK_OK(nkrt_tensor_read(t, out, 0, 16));
  CHECK(memcmp(in, out, 16) == 0);
  CHECK_OK(nkrt_tensor_read(t, out, 12, 4));
  CHECK(out[0] == 36);
  CHECK_ERR(nkrt_tensor_write(t, in, 8, 9), NKRT_INVALID,
            "write of 9 bytes at offset 8 exceeds the tensor bound of 'weights' (16 bytes)");
  CHECK_ERR(nkrt_tensor_read(t, out, 17, 0), NKRT_INVALID, "exceeds the tensor bound");
  CHECK_ERR(nkrt_tensor_read(t, out, 1, UINT64_MAX), NKRT_INVALID, "exceeds the tensor bound");
  CHECK_ERR(nkrt_tensor_write(t, NULL, 0, 4), NKRT_INVALID, "source buffer is NULL");
  CHECK_ERR(nkrt_tensor_read(NULL, out, 0, 4), NKRT_INVALID_HANDLE, "tensor is NULL");
  CHECK_OK(nkrt_tensor_memset(t, 0xab, 4, 4));
  CHECK_OK(nkrt_tensor_read(t, out, 0, 16));
  CHECK(out[3] == 9 && out[4] == 0xab && out[7] == 0xab && out[8] == 24);
  nkrt_tensor_t *u = NULL;
  CHECK_OK(nkrt_tensor_allocate(rt, 0, 8, NULL, &u));
  CHECK(strcmp(nkrt_tensor_name(u), "unnamed_tensor") == 0);
  CHECK_OK(nkrt_tensor_copy(t, 8, u, 0, 8));
  CHECK_OK(nkrt_tensor_read(u, out, 0, 8));
  CHECK(out[0] == 24);
  CHECK_ERR(nkrt_tensor_copy(t, 0, u, 4, 8), NKRT_INVALID, "copy destination");
  nkrt_tensor_free(&u);
  nkrt_tensor_free(&t);
  nkrt_runtime_destroy(rt);
}

TEST(tensor_slices) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 1 << 20);
  nkrt_tensor_t *t = NULL, *s = NULL, *ss = NULL;
  CHECK_OK(nkrt_tensor_allocate(rt, 0, 100, "base", &t));
  CHECK_OK(nkrt_tensor_slice(t, 10, 0, "tail", &s));
  CHECK(nkrt_tensor_size(s) == 90 && nkrt_tensor_is_slice(s));
  CHECK((uint8_t *)nkrt_tensor_va(s) == (uint8_t *)nkrt_tensor_va(t) + 10);
  CHECK_OK(nkrt_tensor_slice(s, 5, 10, "inner", &ss));
  CHECK((uint8_t *)nkrt_tensor_va(ss) == (uint8_t *)nkrt_tensor_va(t) + 15);
  uint8_t v = 77, r = 0;
  CHECK_OK(nkrt_tensor_write(ss, &v, 9, 1));
  CHECK_OK(nkrt_tensor_read(t, &r, 24, 1));
  CHECK(r == 77);
  nkrt_tensor_t *bad = t;
  CHECK_ERR(nkrt_tensor_slice(t, 101, 0, "x", &bad), NKRT_INVALID, "slice offset 101 exceeds");
  CHECK(bad == NULL);
  CHECK_ERR(nkrt_tensor_slice(t, 50, 51, "x", &bad), NKRT_INVALID, "slice [50, 101) exceeds");
  CHECK_ERR(nkrt_tensor_write(ss, &v, 10, 1), NKRT_INVALID, "bound of 'inner' (10 bytes)");
  /* the slice keeps the allocation alive after its parent is freed */
  nkrt_tensor_t *sl = NULL;
  CHECK_OK(nkrt_tensor_slice(t, 0, 0, NULL, &sl));
  nkrt_tensor_free(&t);
  CHECK(stats(rt, 0).active_allocations == 1);
  CHECK_OK(nkrt_tensor_read(sl, &r, 24, 1));
  CHECK(r == 77);
  nkrt_tensor_free(&sl);
  nkrt_tensor_free(&ss);
  CHECK(stats(rt, 0).active_allocations == 1);
  nkrt_tensor_free(&s);
  CHECK(stats(rt, 0).active_allocations == 0);
  nkrt_runtime_destroy(rt);
}

TEST(tensor_lookup_by_address) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0,1", 1 << 20);
  nkrt_tensor_t *a = NULL, *b = NULL, *z = NULL, *found = NULL;
  CHECK_OK(nkrt_tensor_allocate(rt, 0, 100, "a", &a));
  CHECK_OK(nkrt_tensor_allocate(rt, 1, 300, "b", &b));
  CHECK_OK(nkrt_tensor_allocate(rt, 1, 0, "empty", &z));
  uint64_t off = 0;
  CHECK_OK(nkrt_tensor_lookup(rt, (uint8_t *)nkrt_tensor_va(b) + 250, &found, &off));
  CHECK(found == b && off == 250);
  CHECK_OK(nkrt_tensor_lookup(rt, nkrt_tensor_va(a), &found, &off));
  CHECK(found == a && off == 0);
  CHECK_OK(nkrt_tensor_lookup(rt, nkrt_tensor_va(z), &found, &off));
  CHECK(found == z && nkrt_tensor_size(z) == 0);
  CHECK_ERR(nkrt_tensor_lookup(rt, (uint8_t *)nkrt_tensor_va(a) + 100, &found, &off), NKRT_INVALID,
            "not inside any live device allocation");
  void *gone = nkrt_tensor_va(a);
  nkrt_tensor_free(&a);
  CHECK_ERR(nkrt_tensor_lookup(rt, gone, &found, &off), NKRT_INVALID, "not inside");
  CHECK_ERR(nkrt_tensor_lookup(rt, &off, &found, &off), NKRT_INVALID, "not inside");
  nkrt_tensor_free(&b);
  nkrt_runtime_destroy(rt); /* z still live: destroy frees it */
}

typedef struct sum_arg {
  const int32_t *data;
  int64_t partial[64];
  atomic_int calls;
} sum_arg_t;

static void sum_range(void *p, int64_t begin, int64_t end, uint32_t worker) {
  sum_arg_t *a = p;
  int64_t s = 0;
  for (int64_t i = begin; i < end; i++) s += a->data[i];
  a->partial[worker] += s;
  atomic_fetch_add(&a->calls, 1);
}

TEST(worker_pool_parallel_for) {
  nkrt_pool_t *pool = NULL;
  CHECK_OK(nkrt_pool_create(3, &pool));
  enum { N = 1000003 };
  int32_t *data = malloc(N * sizeof(int32_t));
  for (int i = 0; i < N; i++) data[i] = i % 7;
  int64_t expect = 0;
  for (int i = 0; i < N; i++) expect += data[i];
  for (int rep = 0; rep < 50; rep++) {
    sum_arg_t a = {.data = data};
    atomic_init(&a.calls, 0);
    nkrt_pool_parallel_for(pool, N, 1000, sum_range, &a);
    int64_t total = 0;
    for (int w = 0; w < 64; w++) total += a.partial[w];
    CHECK(total == expect);
    CHECK(atomic_load(&a.calls) == 12); /* 4 chunks per worker */
  }
  sum_arg_t small = {.data = data};
  atomic_init(&small.calls, 0);
  nkrt_pool_parallel_for(pool, 10, 100, sum_range, &small); /* inline */
  CHECK(atomic_load(&small.calls) == 1 && small.partial[0] == 24);
  nkrt_pool_parallel_for(pool, 0, 1, sum_range, &small); /* nothing */
  CHECK(atomic_load(&small.calls) == 1);
  free(data);
  nkrt_pool_destroy(pool);
}

/* Workers poll for a while after a job before sleeping: jobs that come back to
 * back (joined while polling), after a pause (workers asleep, woken), and a
 * pool destroyed while its workers poll or sleep. */
TEST(worker_pool_polls_then_sleeps) {
  enum { N = 200003 };
  int32_t *data = malloc(N * sizeof(int32_t));
  int64_t expect = 0;
  for (int i = 0; i < N; i++) expect += (data[i] = i % 5);
  for (int round = 0; round < 2; round++) {
    nkrt_pool_t *pool = NULL;
    CHECK_OK(nkrt_pool_create(3, &pool));
    for (int rep = 0; rep < 60; rep++) {
      sum_arg_t a = {.data = data};
      atomic_init(&a.calls, 0);
      nkrt_pool_parallel_for(pool, N, 1000, sum_range, &a);
      int64_t total = 0;
      for (int w = 0; w < 64; w++) total += a.partial[w];
      CHECK(total == expect);
      CHECK(atomic_load(&a.calls) == 12);
      if (rep % 20 == 19) { /* long enough for the workers to go to sleep */
        struct timespec ts = {0, 3000000};
        nanosleep(&ts, NULL);
      }
    }
    if (round == 1) { /* destroyed while the workers sleep */
      struct timespec ts = {0, 3000000};
      nanosleep(&ts, NULL);
    }
    nkrt_pool_destroy(pool); /* round 0: while they poll */
  }
  free(data);
}
