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

/* Copies `name` (or `fallback` when NULL/empty) into a new heap string. */
char *nkrt_strdup_name(const char *name, const char *fallback);

#endif /* NKRT_BASE_H */
