/* fuzz_cc_timeout.c - libFuzzer target: NKRT_CC_TIMEOUT, the collectives'
 * timeout in seconds.
 *
 * The runtime reads the variable when a communicator is joined with the
 * default timeout (nkrt_comm_join with timeout_ns < 0, as the runtime's own
 * communicator is). Each iteration sets NKRT_CC_TIMEOUT to the input bytes
 * (up to the first NUL) and joins a communicator of world size 2 under a
 * fresh name from two threads, one per rank, so the join completes at once
 * whatever the timeout says; a barrier follows, then both are destroyed.
 *
 * Properties checked besides the sanitizers (UBSan's float-cast-overflow
 * matters here: the seconds are a double turned into nanoseconds): both
 * ranks join and meet at the barrier, or both are refused with a message and
 * a documented code, within bounded time (a hang is a libFuzzer timeout). */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "nkrt/comm.h"
#include "nkrt/nkrt.h"

typedef struct {
  const char *name;
  uint32_t rank;
  nkrt_status_t st;
  nkrt_comm_t *comm;
} rank_t;

static void *join_rank(void *arg) {
  rank_t *r = arg;
  r->st = nkrt_comm_join(r->name, r->rank, 2, -1, &r->comm);
  if (!r->st) r->st = nkrt_comm_barrier(r->comm);
  return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static unsigned long serial;
  char *value = malloc(size + 1);
  if (!value) abort();
  memcpy(value, data, size);
  value[size] = '\0';
  setenv("NKRT_CC_TIMEOUT", value, 1);

  char name[64];
  snprintf(name, sizeof(name), "nkrt-fuzz-%ld-%lu", (long)getpid(), serial++);
  rank_t ranks[2] = {{name, 0, NULL, NULL}, {name, 1, NULL, NULL}};
  pthread_t th;
  if (pthread_create(&th, NULL, join_rank, &ranks[1]) != 0) abort();
  join_rank(&ranks[0]);
  pthread_join(th, NULL);

  bool ok0 = !ranks[0].st, ok1 = !ranks[1].st;
  /* a timeout the runtime takes must let two ranks that arrive together
   * meet; a refusal must be the same for both (both read the same text) */
  if (ok0 != ok1) {
    /* a tiny timeout (nanoseconds) may expire before the other thread starts */
    for (int i = 0; i < 2; i++)
      if (ranks[i].st && nkrt_status_code(ranks[i].st) != NKRT_TIMEOUT)
        fz_fail("NKRT_CC_TIMEOUT=\"%s\": rank %d refused (%s) while the other joined", value, i,
                nkrt_status_message(ranks[i].st));
  }
  for (int i = 0; i < 2; i++) {
    fz_check_error(ranks[i].st, "nkrt_comm_join");
    nkrt_comm_destroy(ranks[i].comm);
  }
  unsetenv("NKRT_CC_TIMEOUT");
  free(value);
  return 0;
}
