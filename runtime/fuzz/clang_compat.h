/* clang_compat.h - forced into the fuzz build's compile of the runtime
 * (-include) by clang releases that do not know every feature name gcc's
 * __builtin_cpu_supports takes: clang 14 (Debian 12) rejects "f16c", which
 * runtime/src/gemm.c asks for. The names it does know go to the builtin; f16c
 * is read with CPUID. Nothing here changes what the runtime computes. */
#ifndef NKRT_FUZZ_CLANG_COMPAT_H
#define NKRT_FUZZ_CLANG_COMPAT_H
#if defined(__clang__) && __clang_major__ < 16 && (defined(__x86_64__) || defined(__i386__))
#include <cpuid.h>
#include <string.h>

static inline int nkrt_fuzz_cpu_supports(const char *feature) {
  if (!strcmp(feature, "f16c")) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
  }
  if (!strcmp(feature, "avx")) return __builtin_cpu_supports("avx");
  if (!strcmp(feature, "avx2")) return __builtin_cpu_supports("avx2");
  if (!strcmp(feature, "fma")) return __builtin_cpu_supports("fma");
  if (!strcmp(feature, "avx512f")) return __builtin_cpu_supports("avx512f");
  return 0;
}
#define __builtin_cpu_supports(feature) nkrt_fuzz_cpu_supports(feature)
#endif
#endif /* NKRT_FUZZ_CLANG_COMPAT_H */
