/* base.h - what every runtime source uses: small helpers, the clock and how
 * long a thread polls before it sleeps. Not installed; not part of the API. */
#ifndef NKRT_BASE_H
#define NKRT_BASE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "nkrt/nkrt.h"

#define NKRT_UNUSED(x) ((void)(x))
#define NKRT_NAME_MAX 256

/* How long a thread about to sleep first polls (yielding the CPU) for the
 * thing it waits for: a hand-off that arrives meanwhile costs about a
 * microsecond instead of a wake-up through the kernel and the hypervisor. */
#define NKRT_SPIN_NS 20000ull

static inline uint64_t nkrt_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Returns from the calling function when `expr`, an nkrt_status_t, is an
 * error, optionally adding context (nkrt_status_annotate):
 *   NKRT_RETURN_IF_ERROR(nkrt_check_core(rt, core));
 *   NKRT_RETURN_IF_ERROR(load(rt, path), "file '%s'", path); -> "<msg> (file '...')"
 * The context is formatted only on the error path; at most 14 arguments
 * follow the format. */
#define NKRT_RETURN_IF_ERROR(...)                                                            \
  NKRT_RIE_PICK_(__VA_ARGS__, NKRT_RIE_CTX_, NKRT_RIE_CTX_, NKRT_RIE_CTX_, NKRT_RIE_CTX_,     \
                 NKRT_RIE_CTX_, NKRT_RIE_CTX_, NKRT_RIE_CTX_, NKRT_RIE_CTX_, NKRT_RIE_CTX_,   \
                 NKRT_RIE_CTX_, NKRT_RIE_CTX_, NKRT_RIE_CTX_, NKRT_RIE_CTX_, NKRT_RIE_CTX_,   \
                 NKRT_RIE_CTX_, NKRT_RIE_PLAIN_, unused)                                      \
  (__VA_ARGS__)
#define NKRT_RIE_PICK_(a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, a16, \
                       name, ...)                                                            \
  name
#define NKRT_RIE_PLAIN_(expr)                                                                \
  do {                                                                                       \
    nkrt_status_t nkrt_rie_status_ = (expr);                                                 \
    if (nkrt_rie_status_) return nkrt_rie_status_;                                           \
  } while (0)
#define NKRT_RIE_CTX_(expr, ...)                                                             \
  do {                                                                                       \
    nkrt_status_t nkrt_rie_status_ = (expr);                                                 \
    if (nkrt_rie_status_) return nkrt_status_annotate(nkrt_rie_status_, __VA_ARGS__);        \
  } while (0)

/* Copies `name` (or `fallback` when NULL/empty) into a new heap string. */
char *nkrt_strdup_name(const char *name, const char *fallback);

/* The one rule for the runtime's integer settings (runtime.c): decimal digits,
 * optionally surrounded by white space, within [lo, hi]. False otherwise. */
bool nkrt_parse_env_uint(const char *text, uint64_t lo, uint64_t hi, uint64_t *out);

#endif /* NKRT_BASE_H */
