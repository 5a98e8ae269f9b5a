/* NEFF loading and validation, execution, events, tracing, concurrency. */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "test.h"

static nkrt_model_t *load(nkrt_runtime_t *rt, const char *name, uint32_t core) {
  nkrt_model_t *m = NULL;
  CHECK_OK(nkrt_model_load_file(rt, nkrt_test_neff(name), core, NULL, &m));
  return m;
}

static nkrt_tensor_t *tensor_from(nkrt_runtime_t *rt, uint32_t core, const char *name,
                                  const void *data, uint64_t size) {
  nkrt_tensor_t *t = NULL;
  CHECK_OK(nkrt_tensor_allocate(rt, core, size, name, &t));
  if (t && data) CHECK_OK(nkrt_tensor_write(t, data, 0, size));
  return t;
}

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n);
  *len = fread(buf, 1, (size_t)n, f);
  fclose(f);
  return buf;
}

TEST(model_load_and_info) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 1 << 20);
  nkrt_load_options_t o;
  nkrt_load_options_init(&o);
  o.cc_enabled = 1;
  o.rank = 1;
  o.world_size = 4;
  nkrt_model_t *m = NULL;
  CHECK_OK(nkrt_model_load_file(rt, nkrt_test_neff("mixed"), 0, &o, &m));
  CHECK(strcmp(nkrt_model_name(m), "mixed") == 0);
  CHECK(nkrt_model_input_count(m) == 2 && nkrt_model_output_count(m) == 2);
  const nkrt_neff_tensor_t *y = nkrt_model_input(m, 1);
  CHECK(strcmp(y->name, "y") == 0 && y->dtype == NKRT_DTYPE_INT32 && y->ndim == 1 &&
        y->shape[0] == 3 && y->size == 12);
  CHECK(strcmp(nkrt_dtype_name(nkrt_model_output(m, 0)->dtype), "float32") == 0);
  CHECK(nkrt_model_input(m, 2) == NULL && nkrt_model_output(m, 2) == NULL);
  CHECK(nkrt_model_abi_version(m) == NKRT_NEFF_ABI_VERSION);
  CHECK(nkrt_model_scratch_bytes(m) == 256 && nkrt_model_core(m) == 0);
  uint32_t cc;
  int32_t rank, world;
  nkrt_model_collectives(m, &cc, &rank, &world);
  CHECK(cc == 1 && rank == 1 && world == 4);
  nkrt_model_unload(m);
  /* the same bytes load twice, independently, from memory */
  size_t len = 0;
  char *bytes = read_file(nkrt_test_neff("add"), &len);
  nkrt_model_t *m1 = NULL, *m2 = NULL;
  nkrt_load_options_init(&o);
  o.name = "add_copy";
  CHECK_OK(nkrt_model_load(rt, bytes, len, 0, NULL, &m1));
  CHECK_OK(nkrt_model_load(rt, bytes, len, 0, &o, &m2));
  CHECK(strcmp(nkrt_model_name(m2), "add_copy") == 0);
  nkrt_model_unload(m1);
  nkrt_model_unload(m2);
  free(bytes);
  CHECK(strcmp(nkrt_dtype_name(99), "unknown") == 0 && nkrt_dtype_size(NKRT_DTYPE_BFLOAT16) == 2);
  /* the 8-bit floats, appended after float64 (NEFFs built before keep their codes) */
  CHECK(NKRT_DTYPE_FLOAT64 == 13 && NKRT_DTYPE_FLOAT8_E4M3FN == 14 && NKRT_DTYPE_FLOAT8_E5M2 == 15 &&
        NKRT_DTYPE_FLOAT8_E4M3 == 16 && NKRT_DTYPE_COUNT_ == 17);
  CHECK(strcmp(nkrt_dtype_name(NKRT_DTYPE_FLOAT8_E4M3FN), "float8_e4m3fn") == 0 &&
        strcmp(nkrt_dtype_name(NKRT_DTYPE_FLOAT8_E5M2), "float8_e5m2") == 0 &&
        strcmp(nkrt_dtype_name(NKRT_DTYPE_FLOAT8_E4M3), "float8_e4m3") == 0);
  CHECK(nkrt_dtype_size(NKRT_DTYPE_FLOAT8_E4M3FN) == 1 && nkrt_dtype_size(NKRT_DTYPE_FLOAT8_E4M3) == 1 &&
        nkrt_dtype_size(NKRT_DTYPE_COUNT_) == 0);
  nkrt_runtime_destroy(rt);
}

TEST(model_load_errors) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 1 << 20);
  nkrt_model_t *m = NULL;
  CHECK_ERR(nkrt_model_load_file(rt, "/nonexistent/x.neff", 0, NULL, &m), NKRT_FAILURE,
            "cannot open NEFF file '/nonexistent/x.neff': No such file or directory");
  char junk[4096];
  for (size_t i = 0; i < sizeof(junk); i++) junk[i] = (char)(i * 7);
  CHECK_ERR(nkrt_model_load(rt, junk, sizeof(junk), 0, NULL, &m), NKRT_FAILURE,
            "do not start with the ELF magic");
  CHECK_ERR(nkrt_model_load(rt, junk, 3, 0, NULL, &m), NKRT_FAILURE, "ELF magic");
  CHECK_ERR(nkrt_model_load(rt, NULL, 64, 0, NULL, &m), NKRT_INVALID,
            "not a NEFF: the image pointer is NULL");
  /* the ELF magic but too few bytes for a header: truncated, not "no magic" */
  memcpy(junk, "\x7f" "ELF", 4);
  CHECK_ERR(nkrt_model_load(rt, junk, 20, 0, NULL, &m), NKRT_FAILURE,
            "not a loadable NEFF (the shared object is truncated): 20 bytes, fewer than the 64 "
            "of an ELF header (rebuild or copy the NEFF again)");
  size_t len = 0;
  char *bytes = read_file(nkrt_test_neff("add"), &len);
  CHECK_ERR(nkrt_model_load(rt, bytes, len / 2, 0, NULL, &m), NKRT_FAILURE,
            "not a loadable NEFF (the shared object is truncated or corrupt)");
  /* corrupt the program headers but keep the magic */
  memset(bytes + 64, 0xff, 256);
  CHECK_ERR(nkrt_model_load(rt, bytes, len, 0, NULL, &m), NKRT_FAILURE, "not a loadable NEFF");
  free(bytes);
  CHECK_ERR(nkrt_model_load_file(rt, nkrt_test_neff("bad_abi"), 0, NULL, &m),
            NKRT_UNSUPPORTED_NEFF_VERSION,
            "NEFF 'bad_abi' was built for ABI version 999; this runtime supports versions 1 to 1");
  CHECK_ERR(nkrt_model_load_file(rt, nkrt_test_neff("bad_desc"), 0, NULL, &m), NKRT_FAILURE,
            "input 'x' declares 15 bytes but its shape and dtype (float32) give 16 bytes");
  CHECK_ERR(nkrt_model_load_file(rt, nkrt_test_neff("null_shape"), 0, NULL, &m), NKRT_FAILURE,
            "invalid NEFF 'null_shape': input 'x' has rank 2 but its shape pointer is NULL (the "
            "NEFF's descriptor is malformed: rebuild it)");
  CHECK_ERR(nkrt_model_load_file(rt, nkrt_test_neff("noentry"), 0, NULL, &m), NKRT_FAILURE,
            "has no entry point 'nkrt_neff_query'");
  CHECK_ERR(nkrt_model_load_file(rt, nkrt_test_neff("add"), 5, NULL, &m), NKRT_LOAD_NOT_ENOUGH_NC,
            "core 5 is not visible");
  nkrt_load_options_t o;
  nkrt_load_options_init(&o);
  o.rank = 2;
  o.world_size = 2;
  CHECK_ERR(nkrt_model_load_file(rt, nkrt_test_neff("add"), 0, &o, &m), NKRT_INVALID,
            "rank 2, world size 2");
  CHECK(m == NULL);
  nkrt_runtime_destroy(rt);
}

enum { ROWS = 64, COLS = 33, N = ROWS * COLS };

TEST(execute_add) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 1 << 20);
  nkrt_model_t *m = load(rt, "add", 0);
  float a[N], b[N], out[N];
  for (int i = 0; i < N; i++) {
    a[i] = (float)i;
    b[i] = (float)(2 * i) + 0.5f;
  }
  nkrt_tensor_t *ta = tensor_from(rt, 0, "a", a, sizeof(a));
  nkrt_tensor_t *tb = tensor_from(rt, 0, "b", b, sizeof(b));
  nkrt_tensor_t *to = tensor_from(rt, 0, "out", NULL, sizeof(out));
  nkrt_tensor_set_t *in = NULL, *os = NULL;
  CHECK_OK(nkrt_tensor_set_create(&in));
  CHECK_OK(nkrt_tensor_set_create(&os));
  CHECK_OK(nkrt_tensor_set_add(in, "a", ta));
  CHECK_OK(nkrt_tensor_set_add(in, "b", tb));
  CHECK_OK(nkrt_tensor_set_add(os, "output0", to));
  CHECK(nkrt_tensor_set_count(in) == 2 && nkrt_tensor_set_get(in, "b") == tb);
  CHECK(nkrt_tensor_set_get(in, "zz") == NULL);
  for (int rep = 0; rep < 3; rep++) CHECK_OK(nkrt_execute(m, in, os));
  CHECK_OK(nkrt_tensor_read(to, out, 0, sizeof(out)));
  int bad = 0;
  for (int i = 0; i < N; i++) bad += out[i] != a[i] + b[i];
  CHECK(bad == 0);
  /* sets retain their tensors: freeing the caller's reference is safe */
  nkrt_tensor_free(&ta);
  CHECK_OK(nkrt_execute(m, in, os));
  nkrt_tensor_set_destroy(in);
  nkrt_tensor_set_destroy(os);
  nkrt_tensor_free(&tb);
  nkrt_tensor_free(&to);
  nkrt_model_unload(m);
  nkrt_runtime_destroy(rt);
}

/* More tensors than nkrt_execute keeps on its stack: inline, inside a trace
 * session (so the call is seen running on the caller), and queued behind work. */
TEST(execute_wide_model) {
  enum { W = 16, NIN = 40 };
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 1 << 20);
  nkrt_model_t *m = load(rt, "wide", 0);
  nkrt_tensor_t *t[NIN];
  nkrt_tensor_set_t *in = NULL, *os = NULL;
  CHECK_OK(nkrt_tensor_set_create(&in));
  CHECK_OK(nkrt_tensor_set_create(&os));
  for (int k = 0; k < NIN; k++) {
    float v[W];
    for (int i = 0; i < W; i++) v[i] = (float)(k + i);
    char name[16];
    snprintf(name, sizeof(name), "x%d", k);
    t[k] = tensor_from(rt, 0, name, v, sizeof(v));
    CHECK_OK(nkrt_tensor_set_add(in, name, t[k]));
  }
  nkrt_tensor_t *to = tensor_from(rt, 0, "out", NULL, W * 4);
  CHECK_OK(nkrt_tensor_set_add(os, "output0", to));
  CHECK_OK(nkrt_execute(m, in, os));
  float out[W];
  CHECK_OK(nkrt_tensor_read(to, out, 0, sizeof(out)));
  int bad = 0;
  for (int i = 0; i < W; i++) bad += out[i] != (float)(NIN * i + NIN * (NIN - 1) / 2);
  CHECK(bad == 0);
  /* a missing input is still reported with the names expected */
  nkrt_tensor_set_t *partial = NULL;
  CHECK_OK(nkrt_tensor_set_create(&partial));
  CHECK_OK(nkrt_tensor_set_add(partial, "x0", t[0]));
  CHECK_ERR(nkrt_execute(m, partial, os), NKRT_EXEC_BAD_INPUT, "missing input tensor 'x1'");
  nkrt_tensor_set_destroy(partial);
  nkrt_tensor_set_destroy(in);
  nkrt_tensor_set_destroy(os);
  for (int k = 0; k < NIN; k++) nkrt_tensor_free(&t[k]);
  nkrt_tensor_free(&to);
  nkrt_model_unload(m);
  nkrt_runtime_destroy(rt);
}

TEST(execute_bad_inputs) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0,1", 1 << 20);
  nkrt_model_t *m = load(rt, "add", 0);
  nkrt_tensor_t *ta = tensor_from(rt, 0, "a", NULL, N * 4);
  nkrt_tensor_t *small = tensor_from(rt, 0, "s", NULL, 16);
  nkrt_tensor_t *other = tensor_from(rt, 1, "o", NULL, N * 4);
  nkrt_tensor_t *to = tensor_from(rt, 0, "out", NULL, N * 4);
  nkrt_tensor_set_t *in = NULL, *os = NULL;
  CHECK_OK(nkrt_tensor_set_create(&in));
  CHECK_OK(nkrt_tensor_set_create(&os));
  CHECK_OK(nkrt_tensor_set_add(os, "output0", to));
  CHECK_OK(nkrt_tensor_set_add(in, "a", ta));
  CHECK_ERR(nkrt_execute(m, in, os), NKRT_EXEC_BAD_INPUT,
            "missing input tensor 'b' for model 'add'; it expects inputs: a, b");
  CHECK_OK(nkrt_tensor_set_add(in, "b", small));
  CHECK_ERR(nkrt_execute(m, in, os), NKRT_EXEC_BAD_INPUT,
            "input 'b' of model 'add' is 16 bytes but the model expects 8448 bytes (float32[64, 33])");
  CHECK_OK(nkrt_tensor_set_add(in, "b", other));
  CHECK_ERR(nkrt_execute(m, in, os), NKRT_EXEC_BAD_INPUT,
            "input 'b' is on core 1 but model 'add' is loaded on core 0");
  CHECK_OK(nkrt_tensor_set_add(in, "b", ta));
  CHECK_OK(nkrt_tensor_set_add(in, "c", ta));
  CHECK_ERR(nkrt_execute(m, in, os), NKRT_EXEC_BAD_INPUT,
            "unknown input tensor 'c' for model 'add'; it expects inputs: a, b");
  nkrt_tensor_set_clear(in);
  CHECK_OK(nkrt_tensor_set_add(in, "a", ta));
  CHECK_OK(nkrt_tensor_set_add(in, "b", ta));
  nkrt_tensor_set_clear(os);
  CHECK_ERR(nkrt_execute(m, in, os), NKRT_EXEC_BAD_INPUT, "missing output tensor 'output0'");
  CHECK_ERR(nkrt_execute(m, in, NULL), NKRT_EXEC_BAD_INPUT, "missing output tensor 'output0'");
  CHECK_ERR(nkrt_execute(NULL, in, os), NKRT_INVALID_HANDLE, "model is NULL");
  CHECK_ERR(nkrt_tensor_set_add(in, "", ta), NKRT_INVALID, "non-empty name");
  nkrt_event_t *ev = NULL;
  CHECK_ERR(nkrt_execute_async(m, in, os, &ev), NKRT_EXEC_BAD_INPUT, "missing output");
  CHECK(ev == NULL);
  nkrt_tensor_set_destroy(in);
  nkrt_tensor_set_destroy(os);
  nkrt_tensor_free(&ta);
  nkrt_tensor_free(&small);
  nkrt_tensor_free(&other);
  nkrt_tensor_free(&to);
  nkrt_model_unload(m);
  nkrt_runtime_destroy(rt);
}

TEST(execute_scratch_alias_and_failure) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 1 << 20);
  /* mixed: two outputs, two dtypes, scratch memory */
  nkrt_model_t *m = load(rt, "mixed", 0);
  float x[6] = {1, 2, 3, 4, 5, 6}, o0[6];
  int32_t y[3] = {10, 20, 30}, o1 = 0;
  nkrt_tensor_t *tx = tensor_from(rt, 0, "x", x, sizeof(x));
  nkrt_tensor_t *ty = tensor_from(rt, 0, "y", y, sizeof(y));
  nkrt_tensor_t *t0 = tensor_from(rt, 0, "o0", NULL, sizeof(o0));
  nkrt_tensor_t *t1 = tensor_from(rt, 0, "o1", NULL, sizeof(o1));
  nkrt_tensor_set_t *in = NULL, *os = NULL;
  CHECK_OK(nkrt_tensor_set_create(&in));
  CHECK_OK(nkrt_tensor_set_create(&os));
  CHECK_OK(nkrt_tensor_set_add(in, "x", tx));
  CHECK_OK(nkrt_tensor_set_add(in, "y", ty));
  CHECK_OK(nkrt_tensor_set_add(os, "output0", t0));
  CHECK_OK(nkrt_tensor_set_add(os, "output1", t1));
  CHECK_OK(nkrt_execute(m, in, os));
  CHECK_OK(nkrt_tensor_read(t0, o0, 0, sizeof(o0)));
  CHECK_OK(nkrt_tensor_read(t1, &o1, 0, sizeof(o1)));
  CHECK(o0[0] == 11 && o0[5] == 36 && o1 == 60);
  nkrt_model_unload(m);
  nkrt_tensor_set_clear(in);
  nkrt_tensor_set_clear(os);

  /* inplace: the aliased output defaults to its input */
  m = load(rt, "inplace", 0);
  float v[16] = {0};
  nkrt_tensor_t *tv = tensor_from(rt, 0, "v", v, sizeof(v));
  CHECK_OK(nkrt_tensor_set_add(in, "x", tv));
  CHECK_OK(nkrt_execute(m, in, os));
  CHECK_OK(nkrt_execute(m, in, NULL));
  CHECK_OK(nkrt_tensor_read(tv, v, 0, sizeof(v)));
  CHECK(v[0] == 2 && v[15] == 2);
  nkrt_model_unload(m);

  /* a kernel error surfaces with its message */
  m = load(rt, "fails", 0);
  nkrt_tensor_t *f4 = tensor_from(rt, 0, "f", NULL, 16), *g4 = tensor_from(rt, 0, "g", NULL, 16);
  nkrt_tensor_set_clear(in);
  CHECK_OK(nkrt_tensor_set_add(in, "x", f4));
  CHECK_OK(nkrt_tensor_set_add(os, "output0", g4));
  CHECK_ERR(nkrt_execute(m, in, os), NKRT_EXEC_COMPLETED_WITH_ERR,
            "kernel 'fails' failed on core 0: deliberate kernel failure");
  nkrt_event_t *ev = NULL;
  CHECK_OK(nkrt_execute_async(m, in, os, &ev));
  CHECK_ERR(nkrt_event_wait(ev, -1), NKRT_EXEC_COMPLETED_WITH_ERR, "deliberate kernel failure");
  CHECK_ERR(nkrt_event_wait(ev, 0), NKRT_EXEC_COMPLETED_WITH_ERR, "deliberate"); /* repeatable */
  nkrt_event_release(ev);
  nkrt_model_unload(m);
  nkrt_tensor_set_destroy(in);
  nkrt_tensor_set_destroy(os);
  nkrt_tensor_t *all[] = {tx, ty, t0, t1, tv, f4, g4};
  for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) nkrt_tensor_release(all[i]);
  nkrt_memory_stats_t s = {.struct_size = sizeof(s)};
  CHECK_OK(nkrt_memory_stats(rt, 0, &s));
  CHECK(s.active_allocations == 0); /* models' scratch was returned too */
  nkrt_runtime_destroy(rt);
}

/* nkrt_execute_at: tensors by address (parts of allocations included), the
 * wide model's heap path, aliased outputs, and every refusal with its text. */
TEST(execute_at_addresses) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0,1", 1 << 22);
  nkrt_model_t *m = load(rt, "add", 0);
  float a[N], b[N], out[N];
  for (int i = 0; i < N; i++) {
    a[i] = (float)i;
    b[i] = 0.25f * (float)i;
  }
  /* a and b side by side in one allocation, the output in another */
  nkrt_tensor_t *ab = tensor_from(rt, 0, "ab", NULL, 2 * sizeof(a) + 64);
  CHECK_OK(nkrt_tensor_write(ab, a, 0, sizeof(a)));
  CHECK_OK(nkrt_tensor_write(ab, b, sizeof(a), sizeof(b)));
  nkrt_tensor_t *to = tensor_from(rt, 0, "out", NULL, sizeof(out));
  uint8_t *base = nkrt_tensor_va(ab);
  void *addrs[3] = {base, base + sizeof(a), nkrt_tensor_va(to)};
  CHECK_OK(nkrt_execute_at(m, addrs));
  CHECK_OK(nkrt_tensor_read(to, out, 0, sizeof(out)));
  int bad = 0;
  for (int i = 0; i < N; i++) bad += out[i] != a[i] + b[i];
  CHECK(bad == 0);

  /* refusals name the tensor */
  void *missing[3] = {base, NULL, nkrt_tensor_va(to)};
  CHECK_ERR(nkrt_execute_at(m, missing), NKRT_EXEC_BAD_INPUT,
            "missing input tensor 'b' for model 'add': its address is NULL");
  float host[4];
  void *outside[3] = {base, host, nkrt_tensor_va(to)};
  CHECK_ERR(nkrt_execute_at(m, outside), NKRT_EXEC_BAD_INPUT,
            "input 'b' of model 'add': address");
  CHECK_ERR(nkrt_execute_at(m, outside), NKRT_EXEC_BAD_INPUT,
            "is not inside a live allocation on core 0");
  void *past[3] = {base, base + sizeof(a) + 128, nkrt_tensor_va(to)};
  CHECK_ERR(nkrt_execute_at(m, past), NKRT_EXEC_BAD_INPUT,
            "input 'b' of model 'add' needs 8448 bytes at");
  CHECK_ERR(nkrt_execute_at(m, past), NKRT_EXEC_BAD_INPUT, "past the end of allocation 'ab'");
  nkrt_tensor_t *other = tensor_from(rt, 1, "other", NULL, sizeof(out));
  void *elsewhere[3] = {base, base + sizeof(a), nkrt_tensor_va(other)};
  CHECK_ERR(nkrt_execute_at(m, elsewhere), NKRT_EXEC_BAD_INPUT,
            "output 'output0' of model 'add': address");
  CHECK_ERR(nkrt_execute_at(m, NULL), NKRT_INVALID, "addresses is NULL");
  CHECK_ERR(nkrt_execute_at(NULL, addrs), NKRT_INVALID_HANDLE, "model is NULL");
  nkrt_tensor_free(&other);
  nkrt_model_unload(m);

  /* more tensors than the stack arrays hold */
  enum { W = 16, NIN = 40 };
  m = load(rt, "wide", 0);
  nkrt_tensor_t *xs = tensor_from(rt, 0, "xs", NULL, NIN * W * 4);
  void *waddrs[NIN + 1];
  for (int k = 0; k < NIN; k++) {
    float v[W];
    for (int i = 0; i < W; i++) v[i] = (float)(k + i);
    CHECK_OK(nkrt_tensor_write(xs, v, (uint64_t)k * W * 4, sizeof(v)));
    waddrs[k] = (uint8_t *)nkrt_tensor_va(xs) + k * W * 4;
  }
  waddrs[NIN] = nkrt_tensor_va(to);
  CHECK_OK(nkrt_execute_at(m, waddrs));
  CHECK_OK(nkrt_tensor_read(to, out, 0, W * 4));
  bad = 0;
  for (int i = 0; i < W; i++) bad += out[i] != (float)(NIN * i + NIN * (NIN - 1) / 2);
  CHECK(bad == 0);
  nkrt_model_unload(m);

  /* an aliased output with no address updates its input in place */
  m = load(rt, "inplace", 0);
  float v[16] = {0};
  CHECK_OK(nkrt_tensor_write(to, v, 64, sizeof(v)));
  void *iaddrs[2] = {(uint8_t *)nkrt_tensor_va(to) + 64, NULL};
  CHECK_OK(nkrt_execute_at(m, iaddrs));
  CHECK_OK(nkrt_execute_at(m, iaddrs));
  CHECK_OK(nkrt_tensor_read(to, v, 64, sizeof(v)));
  CHECK(v[0] == 2 && v[15] == 2);
  nkrt_model_unload(m);
  nkrt_tensor_free(&ab);
  nkrt_tensor_free(&to);
  nkrt_tensor_free(&xs);
  nkrt_memory_stats_t s = {.struct_size = sizeof(s)};
  CHECK_OK(nkrt_memory_stats(rt, 0, &s));
  CHECK(s.active_allocations == 0); /* nothing is left retained */
  nkrt_runtime_destroy(rt);
}

/* nkrt_execute_host: the kernel reads and writes the caller's host buffers
 * directly; NULL, misaligned and device addresses are refused by name. */
TEST(execute_host_buffers) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 1 << 20);
  CHECK(nkrt_runtime_host_addressable(rt));
  nkrt_model_t *m = load(rt, "add", 0);
  float *a = malloc((N + 1) * sizeof(float)), b[N], out[N];
  CHECK(a != NULL);
  for (int i = 0; i < N; i++) {
    a[i] = (float)i;
    b[i] = 2.0f * (float)i;
    out[i] = -1.0f;
  }
  void *addrs[3] = {a, b, out};
  CHECK_OK(nkrt_execute_host(m, addrs));
  int bad = 0;
  for (int i = 0; i < N; i++) bad += out[i] != 3.0f * (float)i;
  CHECK(bad == 0);

  void *missing[3] = {a, b, NULL};
  CHECK_ERR(nkrt_execute_host(m, missing), NKRT_EXEC_BAD_INPUT,
            "missing output tensor 'output0' for model 'add': its address is NULL");
  void *odd[3] = {(uint8_t *)a + 2, b, out};
  CHECK_ERR(nkrt_execute_host(m, odd), NKRT_EXEC_BAD_INPUT,
            "is not aligned to its 4-byte elements");
  nkrt_tensor_t *dev = tensor_from(rt, 0, "dev", NULL, sizeof(out));
  void *on_device[3] = {a, nkrt_tensor_va(dev), out};
  CHECK_ERR(nkrt_execute_host(m, on_device), NKRT_EXEC_BAD_INPUT,
            "input 'b' of model 'add':");
  CHECK_ERR(nkrt_execute_host(m, on_device), NKRT_EXEC_BAD_INPUT,
            "is device memory of core 0, not host memory");
  CHECK_ERR(nkrt_execute_host(m, NULL), NKRT_INVALID, "addresses is NULL");
  CHECK_ERR(nkrt_execute_host(NULL, addrs), NKRT_INVALID_HANDLE, "model is NULL");
  nkrt_tensor_free(&dev);
  nkrt_model_unload(m);
  free(a);
  nkrt_memory_stats_t s = {.struct_size = sizeof(s)};
  CHECK_OK(nkrt_memory_stats(rt, 0, &s));
  CHECK(s.active_allocations == 0);
  CHECK(!nkrt_runtime_host_addressable(NULL));
  nkrt_runtime_destroy(rt);
}

TEST(execute_zero_size_tensors) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 1 << 20);
  nkrt_model_t *m = load(rt, "empty", 0);
  float y[2] = {1, 2}, r[2] = {0, 0};
  nkrt_tensor_t *ty = tensor_from(rt, 0, "y", y, sizeof(y));
  nkrt_tensor_t *tr = tensor_from(rt, 0, "r", NULL, sizeof(r));
  /* by address: a 0-byte tensor may be given as NULL (torch's address for an
   * empty tensor) or as an address past the end of an allocation (an empty
   * slice at the end of its storage); the kernel gets a usable address */
  uint8_t *py = nkrt_tensor_va(ty), *pr = nkrt_tensor_va(tr);
  void *nulls[4] = {NULL, py, NULL, pr};
  CHECK_OK(nkrt_execute_at(m, nulls));
  CHECK_OK(nkrt_tensor_read(tr, r, 0, sizeof(r)));
  CHECK(r[0] == 2 && r[1] == 3);
  void *past_end[4] = {py + sizeof(y), py, pr + 4096, pr};
  CHECK_OK(nkrt_execute_at(m, past_end));
  /* NULL stays refused for a tensor that has bytes */
  void *missing[4] = {NULL, NULL, NULL, pr};
  CHECK_ERR(nkrt_execute_at(m, missing), NKRT_EXEC_BAD_INPUT,
            "missing input tensor 'y' for model 'empty': its address is NULL");
  /* queued behind other work, too */
  nkrt_event_t *ev = NULL;
  CHECK_OK(nkrt_tensor_write_async(ty, y, 0, sizeof(y), &ev));
  CHECK_OK(nkrt_execute_at(m, nulls));
  nkrt_event_release(ev);

  /* by name: 0-byte tensors allocated on the core */
  nkrt_tensor_t *tx = tensor_from(rt, 0, "x", NULL, 0);
  nkrt_tensor_t *te = tensor_from(rt, 0, "e", NULL, 0);
  nkrt_tensor_set_t *in = NULL, *out = NULL;
  CHECK_OK(nkrt_tensor_set_create(&in));
  CHECK_OK(nkrt_tensor_set_create(&out));
  CHECK_OK(nkrt_tensor_set_add(in, "x", tx));
  CHECK_OK(nkrt_tensor_set_add(in, "y", ty));
  CHECK_OK(nkrt_tensor_set_add(out, "output0", te));
  CHECK_OK(nkrt_tensor_set_add(out, "output1", tr));
  r[0] = r[1] = 0;
  CHECK_OK(nkrt_tensor_write(tr, r, 0, sizeof(r)));
  CHECK_OK(nkrt_execute(m, in, out));
  CHECK_OK(nkrt_tensor_read(tr, r, 0, sizeof(r)));
  CHECK(r[0] == 2 && r[1] == 3);
  nkrt_tensor_set_destroy(in);
  nkrt_tensor_set_destroy(out);
  nkrt_tensor_release(tx);
  nkrt_tensor_release(te);
  nkrt_tensor_release(ty);
  nkrt_tensor_release(tr);
  nkrt_model_release(m);
  nkrt_memory_stats_t s = {.struct_size = sizeof(s)};
  CHECK_OK(nkrt_memory_stats(rt, 0, &s));
  CHECK(s.active_allocations == 0); /* nothing is left retained */
  nkrt_runtime_destroy(rt);
}

/* Builds sets for the spin kernel on `core`. */
typedef struct spin_job {
  nkrt_runtime_t *rt;
  uint32_t core;
  nkrt_model_t *model;
  nkrt_tensor_set_t *in, *out;
  nkrt_tensor_t *x, *n, *y;
} spin_job_t;

static void spin_setup(spin_job_t *j, nkrt_runtime_t *rt, uint32_t core, int32_t iters) {
  memset(j, 0, sizeof(*j));
  j->rt = rt;
  j->core = core;
  j->model = load(rt, "spin", core);
  float x[256];
  for (int i = 0; i < 256; i++) x[i] = 0.1f + (float)i / 1000.0f;
  j->x = tensor_from(rt, core, "x", x, sizeof(x));
  j->n = tensor_from(rt, core, "n", &iters, 4);
  j->y = tensor_from(rt, core, "y", NULL, sizeof(x));
  CHECK_OK(nkrt_tensor_set_create(&j->in));
  CHECK_OK(nkrt_tensor_set_create(&j->out));
  CHECK_OK(nkrt_tensor_set_add(j->in, "x", j->x));
  CHECK_OK(nkrt_tensor_set_add(j->in, "n", j->n));
  CHECK_OK(nkrt_tensor_set_add(j->out, "output0", j->y));
}

static void spin_teardown(spin_job_t *j) {
  nkrt_tensor_set_destroy(j->in);
  nkrt_tensor_set_destroy(j->out);
  nkrt_tensor_release(j->x);
  nkrt_tensor_release(j->n);
  nkrt_tensor_release(j->y);
  nkrt_model_unload(j->model);
}

TEST(async_queue_order_and_events) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 1 << 20);
  spin_job_t j;
  spin_setup(&j, rt, 0, 20000);
  /* copies and executions on one core run in submission order */
  int32_t small = 1, big = 200000;
  nkrt_event_t *w1 = NULL, *e1 = NULL, *w2 = NULL, *e2 = NULL, *r = NULL;
  float y1[256], y2[256];
  CHECK_OK(nkrt_tensor_write_async(j.n, &big, 0, 4, &w1));
  CHECK_OK(nkrt_execute_async(j.model, j.in, j.out, &e1));
  CHECK(!nkrt_event_is_done(e1) || nkrt_event_is_done(w1));
  CHECK_ERR(nkrt_event_wait(e1, 0), NKRT_TIMEOUT, "not done after 0 ns");
  CHECK_OK(nkrt_tensor_write_async(j.n, &small, 0, 4, &w2));
  CHECK_OK(nkrt_execute_async(j.model, j.in, j.out, &e2));
  CHECK_OK(nkrt_event_wait(e1, -1));
  CHECK_OK(nkrt_tensor_read_async(j.y, y2, 0, sizeof(y2), &r));
  CHECK_OK(nkrt_event_wait(r, 1000000000));
  CHECK(nkrt_event_is_done(w1) && nkrt_event_is_done(w2) && nkrt_event_is_done(e2));
  CHECK(nkrt_event_id(e2) > nkrt_event_id(e1));
  /* the read saw the second execution (1 iteration) */
  CHECK(y2[0] > 0.332f && y2[0] < 0.334f); /* 3.7 * 0.1 * 0.9 */
  CHECK_OK(nkrt_core_synchronize(rt, 0));
  /* synchronous execute queues behind async work */
  CHECK_OK(nkrt_tensor_write_async(j.n, &big, 0, 4, &w1 /* reuse var; released below */));
  nkrt_event_t *w3 = w1;
  CHECK_OK(nkrt_execute(j.model, j.in, j.out));
  CHECK(nkrt_event_is_done(w3));
  CHECK_OK(nkrt_tensor_read(j.y, y1, 0, sizeof(y1)));
  CHECK(y1[0] != y2[0]);
  CHECK_ERR(nkrt_tensor_write_async(j.n, &big, 4, 4, &w1), NKRT_INVALID, "exceeds the tensor bound");
  nkrt_event_release(w3);
  nkrt_event_release(e1);
  nkrt_event_release(w2);
  nkrt_event_release(e2);
  nkrt_event_release(r);
  nkrt_event_t *leak = NULL; /* an unreleased event is freed by destroy */
  CHECK_OK(nkrt_execute_async(j.model, j.in, j.out, &leak));
  spin_teardown(&j);
  nkrt_runtime_destroy(rt);
}

/* nkrt_execute_at on a busy core runs after the queued work (here on part of
 * the memory that work writes), through the queue. */
TEST(execute_at_queued_behind_work) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 1 << 20);
  spin_job_t j;
  spin_setup(&j, rt, 0, 200000);
  nkrt_model_t *inc = load(rt, "inplace", 0);
  nkrt_event_t *ev = NULL;
  CHECK_OK(nkrt_execute_async(j.model, j.in, j.out, &ev));
  void *addrs[2] = {(uint8_t *)nkrt_tensor_va(j.y) + 64, NULL}; /* y[16 .. 32) */
  CHECK_OK(nkrt_execute_at(inc, addrs));
  CHECK(nkrt_event_is_done(ev));
  float after[256], fresh[256];
  CHECK_OK(nkrt_tensor_read(j.y, after, 0, sizeof(after)));
  CHECK_OK(nkrt_execute(j.model, j.in, j.out));
  CHECK_OK(nkrt_tensor_read(j.y, fresh, 0, sizeof(fresh)));
  int bad = 0;
  for (int i = 0; i < 256; i++) bad += after[i] != fresh[i] + (i >= 16 && i < 32 ? 1.0f : 0.0f);
  CHECK(bad == 0);
  nkrt_event_release(ev);
  nkrt_model_unload(inc);
  spin_teardown(&j);
  nkrt_runtime_destroy(rt);
}

typedef struct thread_arg {
  spin_job_t *job;
  int reps;
  int failures;
} thread_arg_t;

static void *hammer(void *p) {
  thread_arg_t *a = p;
  for (int i = 0; i < a->reps; i++) {
    nkrt_tensor_t *t = NULL;
    nkrt_status_t st = nkrt_tensor_allocate(a->job->rt, a->job->core, 1000 + (uint64_t)i * 64, "h", &t);
    if (st) {
      a->failures++;
      nkrt_status_free(st);
      continue;
    }
    st = nkrt_execute(a->job->model, a->job->in, a->job->out);
    if (st) {
      a->failures++;
      nkrt_status_free(st);
    }
    nkrt_event_t *ev = NULL;
    st = nkrt_execute_async(a->job->model, a->job->in, a->job->out, &ev);
    if (!st) st = nkrt_event_wait(ev, -1);
    if (st) {
      a->failures++;
      nkrt_status_free(st);
    }
    nkrt_event_release(ev);
    nkrt_tensor_release(t);
  }
  return NULL;
}

TEST(concurrency_many_threads) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0,1", 4 << 20);
  spin_job_t jobs[2];
  spin_setup(&jobs[0], rt, 0, 50);
  spin_setup(&jobs[1], rt, 1, 50);
  pthread_t th[8];
  thread_arg_t args[8];
  for (int i = 0; i < 8; i++) {
    args[i] = (thread_arg_t){&jobs[i % 2], 200, 0};
    pthread_create(&th[i], NULL, hammer, &args[i]);
  }
  int failures = 0;
  for (int i = 0; i < 8; i++) {
    pthread_join(th[i], NULL);
    failures += args[i].failures;
  }
  CHECK(failures == 0);
  for (int c = 0; c < 2; c++) {
    nkrt_memory_stats_t s = {.struct_size = sizeof(s)};
    CHECK_OK(nkrt_memory_stats(rt, (uint32_t)c, &s));
    CHECK(s.active_allocations == 3 && s.total_allocations == 3 + 800);
  }
  spin_teardown(&jobs[0]);
  spin_teardown(&jobs[1]);
  nkrt_runtime_destroy(rt);
}

TEST(trace_queued_work_has_a_queued_event) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 1 << 20);
  nkrt_tensor_t *t = NULL;
  CHECK_OK(nkrt_tensor_allocate(rt, 0, 4096, "dst", &t));
  static char src[4096];
  nkrt_trace_session_t *s = NULL;
  CHECK_OK(nkrt_trace_start(rt, -1, &s));
  nkrt_event_t *ev = NULL;
  CHECK_OK(nkrt_tensor_write_async(t, src, 0, sizeof(src), &ev));
  CHECK_OK(nkrt_event_wait(ev, -1));
  nkrt_trace_event_t *e = NULL;
  size_t n = 0;
  CHECK_OK(nkrt_trace_events(s, false, &e, &n));
  CHECK(n == 3 && e != NULL);
  if (e && n == 3) {
    CHECK(e[0].phase == 2 && e[1].phase == 0 && e[2].phase == 1);
    CHECK(e[0].kind == NKRT_TRACE_WRITE && e[0].bytes == sizeof(src));
    CHECK(e[0].tracking_id == e[1].tracking_id && e[1].tracking_id == e[2].tracking_id);
    CHECK(e[0].tracking_id == nkrt_event_id(ev));
    CHECK(e[0].timestamp_ns <= e[1].timestamp_ns && strcmp(e[0].name, "dst") == 0);
  }
  nkrt_free(e);
  char *json = NULL;
  CHECK_OK(nkrt_trace_events_json(s, true, &json, NULL));
  CHECK(json && strstr(json, "\"phase\":\"queued\"") != NULL);
  nkrt_free(json);
  nkrt_event_release(ev);
  nkrt_trace_destroy(s);
  nkrt_tensor_release(t);
  nkrt_runtime_destroy(rt);
}

TEST(trace_sessions) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0,1", 1 << 20);
  spin_job_t j0, j1;
  spin_setup(&j0, rt, 0, 10);
  spin_setup(&j1, rt, 1, 10);
  nkrt_trace_session_t *all = NULL, *core1 = NULL;
  CHECK_ERR(nkrt_trace_start(rt, 7, &all), NKRT_LOAD_NOT_ENOUGH_NC, "core 7 is not visible");
  CHECK_ERR(nkrt_trace_start(rt, -2, &all), NKRT_INVALID, "use -1 for all cores");
  CHECK_OK(nkrt_trace_start(rt, -1, &all));
  CHECK_OK(nkrt_trace_start(rt, 1, &core1));
  CHECK_OK(nkrt_execute(j0.model, j0.in, j0.out));
  CHECK_OK(nkrt_execute(j1.model, j1.in, j1.out));
  float buf[4];
  CHECK_OK(nkrt_tensor_read(j1.y, buf, 0, sizeof(buf)));
  nkrt_trace_stop(all);
  nkrt_trace_stop(all);
  CHECK_OK(nkrt_execute(j0.model, j0.in, j0.out)); /* not recorded */
  CHECK(nkrt_trace_event_count(all) == 6);
  CHECK(nkrt_trace_event_count(core1) == 4);
  char *json = NULL;
  size_t len = 0;
  CHECK_OK(nkrt_trace_events_json(core1, false, &json, &len));
  CHECK(json && strlen(json) == len);
  CHECK(strstr(json, "{\"events\":[{\"event_type\":\"nc_exec_running\",\"phase\":\"start\","
                     "\"nc_idx\":1,") != NULL);
  CHECK(strstr(json, "\"event_type\":\"tensor_read\",\"phase\":\"stop\"") != NULL);
  CHECK(strstr(json, "\"name\":\"spin\"") != NULL && strstr(json, "\"nc_timestamp_ns\":") != NULL);
  nkrt_free(json);
  nkrt_trace_event_t *ev = NULL;
  size_t nev = 0;
  CHECK_OK(nkrt_trace_events(core1, false, &ev, &nev));
  CHECK(nev == 4 && ev != NULL);
  if (ev && nev == 4) {
    CHECK(ev[0].kind == NKRT_TRACE_EXEC && ev[0].phase == 0 && ev[0].core == 1);
    CHECK(ev[1].kind == NKRT_TRACE_EXEC && ev[1].phase == 1 &&
          ev[1].tracking_id == ev[0].tracking_id && ev[1].timestamp_ns >= ev[0].timestamp_ns);
    CHECK(strcmp(ev[0].name, "spin") == 0);
    CHECK(ev[2].kind == NKRT_TRACE_READ && ev[2].bytes == sizeof(buf));
  }
  nkrt_free(ev);
  CHECK_ERR(nkrt_trace_events(core1, false, NULL, &nev), NKRT_INVALID, "out_events or out_count");
  CHECK_ERR(nkrt_trace_events(NULL, false, &ev, &nev), NKRT_INVALID_HANDLE, "trace session is NULL");
  CHECK_OK(nkrt_trace_events_json(core1, true, &json, NULL));
  nkrt_free(json);
  CHECK(nkrt_trace_event_count(core1) == 0);
  CHECK_OK(nkrt_trace_events(core1, true, &ev, &nev));
  CHECK(nev == 0 && ev == NULL);
  char path[] = "/tmp/nkrt_trace_XXXXXX";
  int fd = mkstemp(path);
  close(fd);
  CHECK_OK(nkrt_trace_write_chrome(all, path));
  size_t n = 0;
  char *text = read_file(path, &n);
  CHECK(text && n > 0);
  if (text) {
    text = realloc(text, n + 1);
    text[n] = '\0';
    CHECK(strstr(text, "\"traceEvents\":[") != NULL);
    CHECK(strstr(text, "\"cat\":\"nc_exec_running\",\"ph\":\"X\"") != NULL);
    CHECK(strstr(text, "\"cat\":\"tensor_read\"") != NULL);
    CHECK(strstr(text, "NeuronCore 1 (nc 1) execution") != NULL);
  }
  free(text);
  remove(path);
  CHECK_ERR(nkrt_trace_write_chrome(all, "/nonexistent/dir/t.json"), NKRT_FAILURE,
            "cannot write trace file '/nonexistent/dir/t.json'");
  nkrt_trace_destroy(all);
  spin_teardown(&j0);
  spin_teardown(&j1);
  nkrt_runtime_destroy(rt); /* core1 session still open: destroy frees it */
}
