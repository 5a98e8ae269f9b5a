/* log.c - the log level every part of the runtime reads: kernels' env->log
 * (kernel_env.c) and the GEMM provider choice (gemm.c). */
#include <stdatomic.h>
#include <stdlib.h>

#include "log.h"

int nkrt_log_level(void) {
  static atomic_int cached = -1;
  int v = atomic_load(&cached);
  if (v < 0) {
    const char *env = getenv("NKRT_LOG_LEVEL");
    v = env ? atoi(env) : 0;
    atomic_store(&cached, v);
  }
  return v;
}
