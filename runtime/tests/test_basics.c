/* Status values, option parsing, runtime lifecycle and visible cores. */
#include <stdlib.h>

#include "test.h"

TEST(status_values) {
  CHECK(nkrt_status_make(NKRT_SUCCESS, "ignored") == NULL);
  CHECK(nkrt_status_code(NULL) == NKRT_SUCCESS);
  CHECK(strcmp(nkrt_status_message(NULL), "") == 0);
  nkrt_status_t s = nkrt_status_make(NKRT_RESOURCE, "need %d bytes", 42);
  CHECK(nkrt_status_code(s) == NKRT_RESOURCE);
  CHECK(strcmp(nkrt_status_message(s), "need 42 bytes") == 0);
  nkrt_status_free(s);
  CHECK(strcmp(nkrt_code_name(NKRT_RESOURCE), "NRT_RESOURCE") == 0);
  CHECK(strcmp(nkrt_code_name(NKRT_EXEC_BAD_INPUT), "NRT_EXEC_BAD_INPUT") == 0);
  CHECK(strcmp(nkrt_code_name((nkrt_code_t)777), "NRT_UNKNOWN") == 0);
  nkrt_status_free(NULL);
}

TEST(core_list_parsing) {
  uint32_t ids[NKRT_TOTAL_CORES], n = 0;
  CHECK_OK(nkrt_parse_core_list("0-3,5", ids, NKRT_TOTAL_CORES, &n));
  CHECK(n == 5 && ids[0] == 0 && ids[3] == 3 && ids[4] == 5);
  CHECK_OK(nkrt_parse_core_list(" 7 , 2-2", ids, NKRT_TOTAL_CORES, &n));
  CHECK(n == 2 && ids[0] == 2 && ids[1] == 7);
  /* a repeated core is refused, not silently merged (spike.configure refuses it too) */
  CHECK_ERR(nkrt_parse_core_list("0,0", ids, NKRT_TOTAL_CORES, &n), NKRT_INVALID,
            "invalid core list \"0,0\": core 0 is listed twice (list each core once, e.g. "
            "\"0-3,5\")");
  CHECK_ERR(nkrt_parse_core_list("0-3,2", ids, NKRT_TOTAL_CORES, &n), NKRT_INVALID,
            "core 2 is listed twice");
  CHECK_ERR(nkrt_parse_core_list("4-6,1-5", ids, NKRT_TOTAL_CORES, &n), NKRT_INVALID,
            "core 4 is listed twice");
  CHECK_ERR(nkrt_parse_core_list("a", ids, NKRT_TOTAL_CORES, &n), NKRT_INVALID, "expected a core number");
  CHECK_ERR(nkrt_parse_core_list("3-1", ids, NKRT_TOTAL_CORES, &n), NKRT_INVALID, "reversed");
  CHECK_ERR(nkrt_parse_core_list("40", ids, NKRT_TOTAL_CORES, &n), NKRT_INVALID, "core 40 does not exist");
  CHECK_ERR(nkrt_parse_core_list("1,,2", ids, NKRT_TOTAL_CORES, &n), NKRT_INVALID, "expected a core number");
  CHECK_ERR(nkrt_parse_core_list("1;2", ids, NKRT_TOTAL_CORES, &n), NKRT_INVALID, "unexpected \";2\"");
  CHECK_ERR(nkrt_parse_core_list("", ids, NKRT_TOTAL_CORES, &n), NKRT_INVALID, "empty");
  CHECK_ERR(nkrt_parse_core_list("0-9", ids, 4, &n), NKRT_INVALID, "more than 4 cores");
}

TEST(size_parsing) {
  uint64_t v = 0;
  CHECK_OK(nkrt_parse_size("4G", &v));
  CHECK(v == 4ull << 30);
  CHECK_OK(nkrt_parse_size("512MiB", &v));
  CHECK(v == 512ull << 20);
  CHECK_OK(nkrt_parse_size("65536", &v));
  CHECK(v == 65536);
  CHECK_ERR(nkrt_parse_size("lots", &v), NKRT_INVALID, "expected a number");
  CHECK_ERR(nkrt_parse_size("4X", &v), NKRT_INVALID, "optional K, M, G or T");
  CHECK_ERR(nkrt_parse_size("99999999999999T", &v), NKRT_INVALID, "too large");
}

TEST(runtime_visible_cores) {
  nkrt_runtime_t *rt = nkrt_test_runtime("1,3", 1 << 20);
  CHECK(nkrt_runtime_core_count(rt) == 2);
  CHECK(nkrt_runtime_physical_core(rt, 0) == 1);
  CHECK(nkrt_runtime_physical_core(rt, 1) == 3);
  CHECK(nkrt_runtime_physical_core(rt, 2) == -1);
  CHECK(nkrt_runtime_num_workers(rt) >= 1);
  CHECK(nkrt_runtime_core_memory(rt) == 1 << 20);
  nkrt_tensor_t *t = NULL;
  CHECK_ERR(nkrt_tensor_allocate(rt, 2, 16, "x", &t), NKRT_LOAD_NOT_ENOUGH_NC,
            "core 2 is not visible: this runtime sees 2 cores (0-1)");
  nkrt_runtime_destroy(rt);
  nkrt_runtime_destroy(NULL);
}

TEST(runtime_environment) {
  const char *old = getenv("NEURON_RT_VISIBLE_CORES");
  char *saved = old ? strdup(old) : NULL;
  setenv("NEURON_RT_VISIBLE_CORES", "4-6", 1);
  uint32_t n = 0;
  CHECK_OK(nkrt_visible_core_count(&n));
  CHECK(n == 3);
  nkrt_runtime_t *rt = nkrt_test_runtime(NULL, 1 << 20);
  CHECK(nkrt_runtime_core_count(rt) == 3 && nkrt_runtime_physical_core(rt, 0) == 4);
  nkrt_runtime_destroy(rt);
  setenv("NEURON_RT_VISIBLE_CORES", "x", 1);
  nkrt_options_t o;
  nkrt_options_init(&o);
  CHECK_ERR(nkrt_runtime_create(&o, &rt), NKRT_INVALID,
            "NEURON_RT_VISIBLE_CORES: invalid core list \"x\"");
  setenv("NEURON_RT_VISIBLE_CORES", "0,0", 1);
  CHECK_ERR(nkrt_runtime_create(&o, &rt), NKRT_INVALID,
            "NEURON_RT_VISIBLE_CORES: invalid core list \"0,0\": core 0 is listed twice (list "
            "each core once, e.g. \"0-3,5\") (fix or unset it; unset means all cores)");
  CHECK_ERR(nkrt_visible_core_count(&n), NKRT_INVALID,
            "NEURON_RT_VISIBLE_CORES: invalid core list \"0,0\": core 0 is listed twice");
  o.visible_cores = "1,1";
  CHECK_ERR(nkrt_runtime_create(&o, &rt), NKRT_INVALID,
            "invalid core list \"1,1\": core 1 is listed twice (list each core once, e.g. "
            "\"0-3,5\") (options.visible_cores)");
  o.visible_cores = NULL;
  unsetenv("NEURON_RT_VISIBLE_CORES");
  CHECK_OK(nkrt_visible_core_count(&n));
  CHECK(n == NKRT_TOTAL_CORES);
  setenv("NKRT_CORE_MEMORY", "2M", 1);
  rt = nkrt_test_runtime("0", 0);
  CHECK(nkrt_runtime_core_memory(rt) == 2 << 20);
  nkrt_runtime_destroy(rt);
  setenv("NKRT_CORE_MEMORY", "two", 1);
  CHECK_ERR(nkrt_runtime_create(&o, &rt), NKRT_INVALID,
            "NKRT_CORE_MEMORY: invalid size \"two\": expected a number such as 4G (unset it for "
            "the default of 16G)");
  setenv("NKRT_CORE_MEMORY", "1K", 1);
  CHECK_ERR(nkrt_runtime_create(&o, &rt), NKRT_INVALID,
            "NKRT_CORE_MEMORY: core memory of 1024 bytes is below the minimum of 1048576 bytes "
            "(use at least 1M)");
  /* 2^64-1 used to round up to 0 bytes (found by fuzz_env) */
  setenv("NKRT_CORE_MEMORY", "18446744073709551615", 1);
  CHECK_ERR(nkrt_runtime_create(&o, &rt), NKRT_INVALID,
            "NKRT_CORE_MEMORY: core memory of 18446744073709551615 bytes is above the maximum of "
            "70368744177664 bytes (use at most 64T)");
  setenv("NKRT_CORE_MEMORY", "65T", 1);
  CHECK_ERR(nkrt_runtime_create(&o, &rt), NKRT_INVALID, "is above the maximum");
  unsetenv("NKRT_CORE_MEMORY");
  setenv("NKRT_NUM_WORKERS", "3", 1);
  rt = nkrt_test_runtime("0", 1 << 20);
  CHECK(nkrt_runtime_num_workers(rt) == 3);
  nkrt_runtime_destroy(rt);
  setenv("NKRT_NUM_WORKERS", " 2 ", 1); /* spaces around the number are fine */
  rt = nkrt_test_runtime("0", 1 << 20);
  CHECK(nkrt_runtime_num_workers(rt) == 2);
  nkrt_runtime_destroy(rt);
  /* anything else is refused, naming the variable (README: environment variables) */
  setenv("NKRT_NUM_WORKERS", "many", 1);
  CHECK_ERR(nkrt_runtime_create(&o, &rt), NKRT_INVALID,
            "NKRT_NUM_WORKERS: invalid value \"many\" (expected a number of threads from 1 to "
            "1024; unset it for the CPU count)");
  const char *bad_workers[] = {"0", "1025", "-3", "+3", "3x", "3.5", "0x4", " ",
                               "99999999999999999999999"};
  for (size_t i = 0; i < sizeof(bad_workers) / sizeof(*bad_workers); i++) {
    char expect[128];
    snprintf(expect, sizeof(expect), "NKRT_NUM_WORKERS: invalid value \"%s\"", bad_workers[i]);
    setenv("NKRT_NUM_WORKERS", bad_workers[i], 1);
    CHECK_ERR(nkrt_runtime_create(&o, &rt), NKRT_INVALID, expect);
  }
  unsetenv("NKRT_NUM_WORKERS");
  /* a core number past 2^64 names itself, not the wrapped UINT64_MAX */
  setenv("NEURON_RT_VISIBLE_CORES", "99999999999999999999", 1);
  CHECK_ERR(nkrt_runtime_create(&o, &rt), NKRT_INVALID,
            "NEURON_RT_VISIBLE_CORES: invalid core list \"99999999999999999999\": core number "
            "\"99999999999999999999\" is out of range");
  unsetenv("NEURON_RT_VISIBLE_CORES");
  /* NKRT_LOG_LEVEL: 0-3, white space allowed, anything else refused */
  const char *bad_levels[] = {"abc", "-1", "99", "4", "1.5", "2 2"};
  for (size_t i = 0; i < sizeof(bad_levels) / sizeof(*bad_levels); i++) {
    char expect[128];
    snprintf(expect, sizeof(expect), "NKRT_LOG_LEVEL: invalid value \"%s\" (expected 0 errors",
             bad_levels[i]);
    setenv("NKRT_LOG_LEVEL", bad_levels[i], 1);
    CHECK_ERR(nkrt_runtime_create(&o, &rt), NKRT_INVALID, expect);
  }
  setenv("NKRT_LOG_LEVEL", " 0 ", 1);
  rt = nkrt_test_runtime("0", 1 << 20);
  nkrt_runtime_destroy(rt);
  unsetenv("NKRT_LOG_LEVEL");
  /* NKRT_GEMM: one of three names; NKRT_GEMM_LIBRARY: a usable library */
  setenv("NKRT_GEMM", "MKL", 1);
  CHECK_ERR(nkrt_runtime_create(&o, &rt), NKRT_INVALID,
            "NKRT_GEMM: invalid value \"MKL\" (expected auto, mkl or reference; unset it for "
            "auto)");
  unsetenv("NKRT_GEMM");
  setenv("NKRT_GEMM_LIBRARY", "/nonexistent.so", 1);
  CHECK_ERR(nkrt_runtime_create(&o, &rt), NKRT_INVALID,
            "NKRT_GEMM_LIBRARY: \"/nonexistent.so\" cannot be used: ");
  unsetenv("NKRT_GEMM_LIBRARY");
  setenv("NKRT_NUM_WORKERS", "", 1); /* empty: as if unset */
  rt = nkrt_test_runtime("0", 1 << 20);
  CHECK(nkrt_runtime_num_workers(rt) >= 1);
  nkrt_runtime_destroy(rt);
  unsetenv("NKRT_NUM_WORKERS");
  o.num_workers = 1025;
  CHECK_ERR(nkrt_runtime_create(&o, &rt), NKRT_INVALID,
            "options.num_workers is 1025, above the maximum of 1024 threads (pass 1 to 1024, or "
            "0 for NKRT_NUM_WORKERS or the CPU count)");
  o.num_workers = 0;
  o.core_memory_bytes = 1000;
  CHECK_ERR(nkrt_runtime_create(&o, &rt), NKRT_INVALID,
            "options.core_memory_bytes: core memory of 1000 bytes is below the minimum");
  if (saved) {
    setenv("NEURON_RT_VISIBLE_CORES", saved, 1);
    free(saved);
  }
}
