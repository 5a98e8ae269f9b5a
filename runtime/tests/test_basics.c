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
  CHECK_OK(nkrt_parse_core_list(" 7 , 2-2,7", ids, NKRT_TOTAL_CORES, &n));
  CHECK(n == 2 && ids[0] == 2 && ids[1] == 7);
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
  CHECK_ERR(nkrt_runtime_create(&o, &rt), NKRT_INVALID, "invalid core list \"x\"");
  unsetenv("NEURON_RT_VISIBLE_CORES");
  CHECK_OK(nkrt_visible_core_count(&n));
  CHECK(n == NKRT_TOTAL_CORES);
  setenv("NKRT_CORE_MEMORY", "2M", 1);
  rt = nkrt_test_runtime("0", 0);
  CHECK(nkrt_runtime_core_memory(rt) == 2 << 20);
  nkrt_runtime_destroy(rt);
  setenv("NKRT_CORE_MEMORY", "two", 1);
  CHECK_ERR(nkrt_runtime_create(&o, &rt), NKRT_INVALID, "NKRT_CORE_MEMORY: invalid size");
  unsetenv("NKRT_CORE_MEMORY");
  setenv("NKRT_NUM_WORKERS", "3", 1);
  rt = nkrt_test_runtime("0", 1 << 20);
  CHECK(nkrt_runtime_num_workers(rt) == 3);
  nkrt_runtime_destroy(rt);
  setenv("NKRT_NUM_WORKERS", "many", 1);
  CHECK_ERR(nkrt_runtime_create(&o, &rt), NKRT_INVALID, "NKRT_NUM_WORKERS: invalid value \"many\"");
  setenv("NKRT_NUM_WORKERS", "0", 1);
  CHECK_ERR(nkrt_runtime_create(&o, &rt), NKRT_INVALID, "from 1 to 1024");
  unsetenv("NKRT_NUM_WORKERS");
  o.core_memory_bytes = 1000;
  CHECK_ERR(nkrt_runtime_create(&o, &rt), NKRT_INVALID, "below the minimum");
  if (saved) {
    setenv("NEURON_RT_VISIBLE_CORES", saved, 1);
    free(saved);
  }
}
