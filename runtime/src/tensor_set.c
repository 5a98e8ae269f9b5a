/* tensor_set.c - tensor sets: name -> tensor bindings an execution reads. */
#include <stdlib.h>
#include <string.h>

#include "tensor_set.h"

nkrt_status_t nkrt_tensor_set_create(nkrt_tensor_set_t **out_set) {
  if (!out_set) return nkrt_status_make(NKRT_INVALID, "out_set is NULL");
  *out_set = calloc(1, sizeof(nkrt_tensor_set_t));
  return *out_set ? NULL : nkrt_status_make(NKRT_RESOURCE, "out of host memory");
}

void nkrt_tensor_set_clear(nkrt_tensor_set_t *s) {
  if (!s) return;
  for (uint32_t i = 0; i < s->count; i++) {
    free(s->entries[i].name);
    nkrt_tensor_release(s->entries[i].tensor);
  }
  s->count = 0;
}

void nkrt_tensor_set_destroy(nkrt_tensor_set_t *s) {
  if (!s) return;
  nkrt_tensor_set_clear(s);
  free(s->entries);
  free(s);
}

static set_entry_t *find_entry(const nkrt_tensor_set_t *s, const char *name) {
  for (uint32_t i = 0; i < s->count; i++)
    if (strcmp(s->entries[i].name, name) == 0) return &s->entries[i];
  return NULL;
}

nkrt_status_t nkrt_tensor_set_add(nkrt_tensor_set_t *s, const char *name, nkrt_tensor_t *t) {
  if (!s || !name || !*name || !t)
    return nkrt_status_make(NKRT_INVALID, "tensor set add needs a set, a non-empty name and a "
                            "tensor");
  set_entry_t *e = find_entry(s, name);
  if (e) {
    nkrt_tensor_retain(t);
    nkrt_tensor_release(e->tensor);
    e->tensor = t;
    return NULL;
  }
  if (s->count == s->capacity) {
    uint32_t ncap = s->capacity ? s->capacity * 2 : 8;
    set_entry_t *ne = realloc(s->entries, ncap * sizeof(*ne));
    if (!ne) return nkrt_status_make(NKRT_RESOURCE, "out of host memory");
    s->entries = ne;
    s->capacity = ncap;
  }
  char *copy = nkrt_strdup_name(name, name);
  if (!copy) return nkrt_status_make(NKRT_RESOURCE, "out of host memory");
  nkrt_tensor_retain(t);
  s->entries[s->count].name = copy;
  s->entries[s->count].tensor = t;
  s->count++;
  return NULL;
}

nkrt_tensor_t *nkrt_tensor_set_get(const nkrt_tensor_set_t *s, const char *name) {
  if (!s || !name) return NULL;
  set_entry_t *e = find_entry(s, name);
  return e ? e->tensor : NULL;
}

uint32_t nkrt_tensor_set_count(const nkrt_tensor_set_t *s) { return s ? s->count : 0; }
