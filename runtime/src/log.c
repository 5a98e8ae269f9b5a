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
    uint64_t level = 0; /* unset or invalid (refused at runtime creation): 0 */
    if (env && *env) (void)nkrt_parse_env_uint(env, 0, 3, &level);
    v = (int)level;
    atomic_store(&cached, v);
  }
  return v;
}

nkrt_status_t nkrt_check_log_level_env(void) {
  const char *env = getenv("NKRT_LOG_LEVEL");
  uint64_t level;
  if (env && *env && !nkrt_parse_env_uint(env, 0, 3, &level))
    return nkrt_status_make(NKRT_INVALID, "NKRT_LOG_LEVEL: invalid value \"%.40s\" (expected 0 "
                            "errors, 1 warnings, 2 info or 3 debug; unset it for 0)", env);
  return NULL;
}
