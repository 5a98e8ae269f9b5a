/* test.h - a minimal C test harness. Tests register themselves; the runner
 * prints one line per failure and ends with "N passed, N failed". */
#ifndef NKRT_TEST_H
#define NKRT_TEST_H

#include <stdio.h>
#include <string.h>

#include "nkrt/nkrt.h"

void nkrt_test_register(const char *name, void (*fn)(void));
void nkrt_test_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Path of a test NEFF built from runtime/tests/kernels/<name>.c. */
const char *nkrt_test_neff(const char *name);

#define TEST(fn)                                                     \
  static void fn(void);                                              \
  __attribute__((constructor)) static void register_##fn(void) {     \
    nkrt_test_register(#fn, fn);                                     \
  }                                                                  \
  static void fn(void)

#define CHECK(cond)                                                  \
  do {                                                               \
    if (!(cond)) nkrt_test_fail(__FILE__, __LINE__, "CHECK(%s)", #cond); \
  } while (0)

#define CHECK_OK(expr)                                                          \
  do {                                                                          \
    nkrt_status_t s_ = (expr);                                                  \
    if (s_) {                                                                   \
      nkrt_test_fail(__FILE__, __LINE__, "%s failed: %s: %s", #expr,            \
                     nkrt_code_name(nkrt_status_code(s_)), nkrt_status_message(s_)); \
      nkrt_status_free(s_);                                                     \
    }                                                                           \
  } while (0)

/* Expects a status with `code` whose message contains `needle`. */
#define CHECK_ERR(expr, code, needle)                                            \
  do {                                                                           \
    nkrt_status_t s_ = (expr);                                                   \
    if (!s_) {                                                                   \
      nkrt_test_fail(__FILE__, __LINE__, "%s succeeded; expected %s", #expr, #code); \
    } else {                                                                     \
      if (nkrt_status_code(s_) != (code))                                        \
        nkrt_test_fail(__FILE__, __LINE__, "%s gave %s, expected %s (%s)", #expr, \
                       nkrt_code_name(nkrt_status_code(s_)), #code, nkrt_status_message(s_)); \
      if (!strstr(nkrt_status_message(s_), (needle)))                            \
        nkrt_test_fail(__FILE__, __LINE__, "message \"%s\" lacks \"%s\"",        \
                       nkrt_status_message(s_), (needle));                       \
      nkrt_status_free(s_);                                                      \
    }                                                                            \
  } while (0)

/* A runtime with `cores` visible cores and `memory` bytes per core. */
nkrt_runtime_t *nkrt_test_runtime(const char *cores, uint64_t memory);

#endif
