/* fuzz_env.c - libFuzzer target: the runtime's parsers of environment bytes.
 *
 * The input is up to four NUL-separated fields, the values of
 *   NKRT_CORE_MEMORY, NEURON_RT_VISIBLE_CORES, NKRT_NUM_WORKERS,
 *   NKRT_GEMM_PACK_LIMIT
 * in that order (a field that is absent leaves its variable unset; an empty
 * one sets it to ""). Each iteration:
 *   1. nkrt_parse_size on field 0 and nkrt_parse_core_list on field 1 (the
 *      public parsers behind the first two variables), with a capacity taken
 *      from the last byte, into an array of exactly that capacity;
 *   2. sets the variables and creates a runtime with default options (so it
 *      reads all four), then destroys it.
 * Properties checked besides the sanitizers: an accepted size prints and
 * parses back to itself; an accepted core list is strictly increasing, below
 * NKRT_TOTAL_CORES, within the capacity, and prints and parses back to
 * itself; a created runtime sees the cores the list names (all of them when
 * the variable is unset or blank), has at least the core memory the size
 * names (never less than NKRT_MIN_CORE_MEMORY, a multiple of 4096) and 1 to
 * 1024 workers; every refusal carries a message and a documented code. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "nkrt/nkrt.h"

static const char *const k_vars[4] = {"NKRT_CORE_MEMORY", "NEURON_RT_VISIBLE_CORES",
                                      "NKRT_NUM_WORKERS", "NKRT_GEMM_PACK_LIMIT"};

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  for (int i = 0; i < 4; i++) unsetenv(k_vars[i]);
  return 0;
}

static void check_size(const char *text, bool *ok, uint64_t *value) {
  *ok = false;
  *value = 0;
  nkrt_status_t st = nkrt_parse_size(text, value);
  if (st) {
    fz_check_error(st, "nkrt_parse_size");
    return;
  }
  *ok = true;
  char again[32];
  snprintf(again, sizeof(again), "%llu", (unsigned long long)*value);
  uint64_t v2 = 0;
  st = nkrt_parse_size(again, &v2);
  if (st || v2 != *value)
    fz_fail("size \"%s\" gave %llu, which does not parse back (\"%s\": %s)", text,
            (unsigned long long)*value, again, nkrt_status_message(st));
}

/* Returns the number of cores, or -1 when the list is refused. */
static int check_core_list(const char *spec, uint32_t capacity) {
  uint32_t *ids = malloc(capacity ? capacity * sizeof(uint32_t) : 1);
  if (!ids) abort();
  uint32_t count = 12345;
  nkrt_status_t st = nkrt_parse_core_list(spec, ids, capacity, &count);
  if (st) {
    fz_check_error(st, "nkrt_parse_core_list");
    free(ids);
    return -1;
  }
  if (count == 0 || count > capacity) fz_fail("core list \"%s\" gave %u cores (capacity %u)",
                                              spec, count, capacity);
  char again[NKRT_TOTAL_CORES * 4 + 1];
  size_t len = 0;
  for (uint32_t i = 0; i < count; i++) {
    if (ids[i] >= NKRT_TOTAL_CORES) fz_fail("core list \"%s\" gave core %u", spec, ids[i]);
    if (i && ids[i] <= ids[i - 1]) fz_fail("core list \"%s\" is not strictly increasing", spec);
    len += (size_t)snprintf(again + len, sizeof(again) - len, i ? ",%u" : "%u", ids[i]);
  }
  uint32_t ids2[NKRT_TOTAL_CORES], count2 = 0;
  st = nkrt_parse_core_list(again, ids2, NKRT_TOTAL_CORES, &count2);
  if (st || count2 != count || memcmp(ids, ids2, count * sizeof(uint32_t)) != 0)
    fz_fail("core list \"%s\" does not parse back as \"%s\" (%s)", spec, again,
            nkrt_status_message(st));
  free(ids);
  return (int)count;
}

static bool blank(const char *s) {
  while (*s == ' ' || (*s >= '\t' && *s <= '\r')) s++;
  return *s == '\0';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* the fields, NUL-terminated copies */
  char *buf = malloc(size + 1);
  if (!buf) abort();
  memcpy(buf, data, size);
  buf[size] = '\0';
  const char *field[4] = {NULL, NULL, NULL, NULL};
  size_t at = 0;
  for (int i = 0; i < 4 && at <= size; i++) {
    if (at == size && i > 0) break; /* the input ended: the rest stay unset */
    field[i] = buf + at;
    at += strlen(buf + at) + 1;
  }
  uint32_t capacity = size ? data[size - 1] % (NKRT_TOTAL_CORES + 3) : NKRT_TOTAL_CORES;

  /* 1. the parsers directly */
  bool size_ok = false;
  uint64_t size_value = 0;
  if (field[0]) check_size(field[0], &size_ok, &size_value);
  int list_count = -1;
  if (field[1]) {
    (void)check_core_list(field[1], capacity);
    list_count = check_core_list(field[1], NKRT_TOTAL_CORES);
  }

  /* 2. through the runtime */
  for (int i = 0; i < 4; i++) {
    if (field[i]) setenv(k_vars[i], field[i], 1);
    else unsetenv(k_vars[i]);
  }
  uint32_t visible = 0;
  nkrt_status_t st = nkrt_visible_core_count(&visible);
  if (st) fz_check_error(st, "nkrt_visible_core_count");
  nkrt_runtime_t *rt = NULL;
  st = nkrt_runtime_create(NULL, &rt);
  if (st) {
    if (rt) fz_fail("nkrt_runtime_create failed but returned a runtime");
    fz_check_error(st, "nkrt_runtime_create");
  } else {
    uint32_t cores = nkrt_runtime_core_count(rt);
    bool all = !field[1] || blank(field[1]);
    if (all ? cores != NKRT_TOTAL_CORES : (int)cores != list_count)
      fz_fail("NEURON_RT_VISIBLE_CORES=\"%s\": the runtime sees %u cores, the list names %d",
              field[1] ? field[1] : "(unset)", cores, all ? (int)NKRT_TOTAL_CORES : list_count);
    if (cores != visible)
      fz_fail("nkrt_visible_core_count says %u cores, the runtime sees %u", visible, cores);
    uint64_t mem = nkrt_runtime_core_memory(rt);
    if (mem < NKRT_MIN_CORE_MEMORY || mem % 4096)
      fz_fail("NKRT_CORE_MEMORY=\"%s\": the runtime has %llu bytes of core memory",
              field[0] ? field[0] : "(unset)", (unsigned long long)mem);
    if (field[0] && field[0][0] && size_ok && mem < size_value)
      fz_fail("NKRT_CORE_MEMORY=\"%s\" names %llu bytes; the runtime has %llu", field[0],
              (unsigned long long)size_value, (unsigned long long)mem);
    if (!field[0] || !field[0][0]) {
      if (mem != NKRT_DEFAULT_CORE_MEMORY) fz_fail("default core memory is %llu",
                                                   (unsigned long long)mem);
    } else if (!size_ok) {
      fz_fail("NKRT_CORE_MEMORY=\"%s\" is refused by nkrt_parse_size but the runtime took it",
              field[0]);
    }
    uint32_t workers = nkrt_runtime_num_workers(rt);
    if (workers < 1 || workers > 1024) fz_fail("the runtime has %u workers", workers);
    nkrt_runtime_destroy(rt);
  }
  for (int i = 0; i < 4; i++) unsetenv(k_vars[i]);
  free(buf);
  return 0;
}
