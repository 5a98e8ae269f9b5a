/* fuzz_util.h - what the libFuzzer targets of runtime/fuzz share: a reader
 * that takes typed values off the fuzz input (zeros once it runs dry, so every
 * input is a complete test case), a check that aborts with a message (a
 * finding, like a sanitizer report), and a stand-in for the driver's image
 * calls so the loader runs without dlopen. Not part of the runtime. */
#ifndef NKRT_FUZZ_UTIL_H
#define NKRT_FUZZ_UTIL_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nkrt/nkrt.h"

typedef struct {
  const uint8_t *p;
  size_t left;
} fz_reader_t;

static inline void fz_take(fz_reader_t *r, void *out, size_t n) {
  size_t k = n < r->left ? n : r->left;
  memcpy(out, r->p, k);
  memset((uint8_t *)out + k, 0, n - k);
  r->p += k;
  r->left -= k;
}

static inline uint8_t fz_u8(fz_reader_t *r) {
  uint8_t v;
  fz_take(r, &v, 1);
  return v;
}

static inline uint16_t fz_u16(fz_reader_t *r) {
  uint16_t v;
  fz_take(r, &v, 2);
  return v;
}

static inline uint32_t fz_u32(fz_reader_t *r) {
  uint32_t v;
  fz_take(r, &v, 4);
  return v;
}

static inline uint64_t fz_u64(fz_reader_t *r) {
  uint64_t v;
  fz_take(r, &v, 8);
  return v;
}

/* A fresh NUL-terminated copy of the next `n` input bytes (fewer when the
 * input runs dry); embedded NULs are kept, as a C string would end there. */
static inline char *fz_str(fz_reader_t *r, size_t n) {
  char *s = malloc(n + 1);
  if (!s) abort();
  fz_take(r, s, n);
  s[n] = '\0';
  return s;
}

/* A property the target checks failed: report it like a sanitizer would. */
__attribute__((noreturn, format(printf, 1, 2))) static inline void fz_fail(const char *fmt,
                                                                             ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "==FUZZ== property violated: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  abort();
}

/* Every status that comes back must carry a message (errors name the
 * problem) and a code the runtime documents; frees it. */
static inline void fz_check_error(nkrt_status_t st, const char *what) {
  if (!st) return;
  const char *msg = nkrt_status_message(st);
  if (!msg || !msg[0]) fz_fail("%s: error code %d with an empty message", what,
                               (int)nkrt_status_code(st));
  if (!strcmp(nkrt_code_name(nkrt_status_code(st)), "NRT_UNKNOWN"))
    fz_fail("%s: undocumented error code %d (%s)", what, (int)nkrt_status_code(st), msg);
  nkrt_status_free(st);
}

#endif /* NKRT_FUZZ_UTIL_H */
