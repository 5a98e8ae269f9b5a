/* One verb set for lifetimes: _retain / _release for shared handles (models,
 * tensors, events), _destroy for owned objects, and the older names kept as
 * aliases (nkrt_model_unload, nkrt_tensor_free). */
#include <stdlib.h>

#include "runtime.h" /* rt->models: whether a model is still loaded */
#include "test.h"

static uint64_t live_allocations(nkrt_runtime_t *rt) {
  nkrt_memory_stats_t s = {.struct_size = sizeof(s)};
  CHECK_OK(nkrt_memory_stats(rt, 0, &s));
  return s.active_allocations;
}

TEST(model_retain_release_and_unload_alias) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 4u << 20);
  nkrt_model_t *m = NULL;
  CHECK_OK(nkrt_model_load_file(rt, nkrt_test_neff("add"), 0, NULL, &m));
  nkrt_model_retain(m);
  nkrt_model_unload(m); /* the older name drops one reference, like release */
  CHECK(rt->models == m && strcmp(nkrt_model_name(m), "add") == 0);
  nkrt_model_release(m); /* the last one unloads */
  CHECK(rt->models == NULL);
  nkrt_model_t *m2 = NULL;
  CHECK_OK(nkrt_model_load_file(rt, nkrt_test_neff("add"), 0, NULL, &m2));
  nkrt_model_unload(m2); /* alone, the alias unloads too */
  CHECK(rt->models == NULL);
  nkrt_model_retain(NULL);
  nkrt_model_release(NULL);
  nkrt_model_unload(NULL);
  nkrt_runtime_destroy(rt);
}

TEST(tensor_free_alias) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 4u << 20);
  nkrt_tensor_t *t = NULL;
  CHECK_OK(nkrt_tensor_allocate(rt, 0, 64, "t", &t));
  nkrt_tensor_t *other = t;
  nkrt_tensor_retain(other);
  nkrt_tensor_free(&t); /* the older form: release, then NULL */
  CHECK(t == NULL);
  CHECK(live_allocations(rt) == 1); /* `other` still holds it */
  float x = 2.0f;
  CHECK_OK(nkrt_tensor_write(other, &x, 0, sizeof(x)));
  nkrt_tensor_release(other);
  CHECK(live_allocations(rt) == 0);
  nkrt_tensor_free(&t); /* NULL: a no-op */
  nkrt_tensor_free(NULL);
  nkrt_runtime_destroy(rt);
}

TEST(event_retain_release) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 4u << 20);
  nkrt_tensor_t *t = NULL;
  CHECK_OK(nkrt_tensor_allocate(rt, 0, 16, "t", &t));
  float src[4] = {1, 2, 3, 4};
  nkrt_event_t *ev = NULL;
  CHECK_OK(nkrt_tensor_write_async(t, src, 0, sizeof(src), &ev));
  nkrt_event_retain(ev); /* a second holder */
  CHECK_OK(nkrt_event_wait(ev, -1));
  uint64_t id = nkrt_event_id(ev);
  nkrt_event_release(ev);
  CHECK(nkrt_event_id(ev) == id && nkrt_event_is_done(ev)); /* still held */
  nkrt_event_release(ev);
  nkrt_event_retain(NULL);
  nkrt_event_release(NULL);
  nkrt_tensor_release(t);
  nkrt_runtime_destroy(rt);
}
