/* test_main.c - runs every registered test; prints "N passed, N failed". */
#include <stdarg.h>
#include <stdlib.h>

#include "test.h"

#define MAX_TESTS 256

static struct {
  const char *name;
  void (*fn)(void);
} tests[MAX_TESTS];
static int test_count;
static int current_failures;

void nkrt_test_register(const char *name, void (*fn)(void)) {
  if (test_count < MAX_TESTS) {
    tests[test_count].name = name;
    tests[test_count].fn = fn;
    test_count++;
  }
}

void nkrt_test_fail(const char *file, int line, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stdout, "  %s:%d: ", file, line);
  vfprintf(stdout, fmt, ap);
  fprintf(stdout, "\n");
  va_end(ap);
  current_failures++;
}

const char *nkrt_test_neff(const char *name) {
  static char paths[16][512];
  static int next;
  const char *dir = getenv("NKRT_TEST_NEFF_DIR");
  char *p = paths[next++ % 16];
  snprintf(p, 512, "%s/%s.neff", dir ? dir : "build/neff", name);
  return p;
}

nkrt_runtime_t *nkrt_test_runtime(const char *cores, uint64_t memory) {
  nkrt_options_t o;
  nkrt_options_init(&o);
  o.visible_cores = cores;
  o.core_memory_bytes = memory;
  nkrt_runtime_t *rt = NULL;
  nkrt_status_t st = nkrt_runtime_create(&o, &rt);
  if (st) {
    fprintf(stdout, "cannot create runtime: %s\n", nkrt_status_message(st));
    nkrt_status_free(st);
    exit(2);
  }
  return rt;
}

int main(int argc, char **argv) {
  const char *only = argc > 1 ? argv[1] : NULL;
  int passed = 0, failed = 0;
  for (int i = 0; i < test_count; i++) {
    if (only && !strstr(tests[i].name, only)) continue;
    current_failures = 0;
    tests[i].fn();
    if (current_failures) {
      printf("FAIL %s\n", tests[i].name);
      failed++;
    } else {
      printf("ok   %s\n", tests[i].name);
      passed++;
    }
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
