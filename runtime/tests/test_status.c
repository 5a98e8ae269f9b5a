/* Adding context to a status on its way out: nkrt_status_annotate and
 * NKRT_RETURN_IF_ERROR. */
#include <stdlib.h>

#include "base.h" /* NKRT_RETURN_IF_ERROR */
#include "test.h"

TEST(status_annotate) {
  nkrt_status_t s = nkrt_status_make(NKRT_EXEC_BAD_INPUT, "input '%s' is missing", "x");
  s = nkrt_status_annotate(s, "model '%s' on core %d", "add", 3);
  CHECK(nkrt_status_code(s) == NKRT_EXEC_BAD_INPUT);
  CHECK(strcmp(nkrt_status_message(s), "input 'x' is missing (model 'add' on core 3)") == 0);
  s = nkrt_status_annotate(s, "file '%s'", "add.neff"); /* context on context */
  CHECK(nkrt_status_code(s) == NKRT_EXEC_BAD_INPUT);
  CHECK(strcmp(nkrt_status_message(s),
               "input 'x' is missing (model 'add' on core 3) (file 'add.neff')") == 0);
  nkrt_status_free(s);
  CHECK(nkrt_status_annotate(NULL, "never %s", "formatted") == NULL); /* success stays success */
}

static nkrt_status_t fails_with(nkrt_code_t code) {
  return nkrt_status_make(code, "inner failure");
}

static int reached;

static nkrt_status_t plain(nkrt_code_t code) {
  NKRT_RETURN_IF_ERROR(fails_with(code));
  reached++;
  return NULL;
}

static nkrt_status_t with_context(nkrt_code_t code, const char *what) {
  NKRT_RETURN_IF_ERROR(fails_with(code), "while loading '%s'", what);
  reached++;
  return NULL;
}

TEST(status_return_if_error) {
  reached = 0;
  CHECK(plain(NKRT_SUCCESS) == NULL);
  CHECK(with_context(NKRT_SUCCESS, "a") == NULL);
  CHECK(reached == 2);
  nkrt_status_t s = plain(NKRT_RESOURCE);
  CHECK(nkrt_status_code(s) == NKRT_RESOURCE);
  CHECK(strcmp(nkrt_status_message(s), "inner failure") == 0);
  nkrt_status_free(s);
  s = with_context(NKRT_TIMEOUT, "b.neff");
  CHECK(nkrt_status_code(s) == NKRT_TIMEOUT);
  CHECK(strcmp(nkrt_status_message(s), "inner failure (while loading 'b.neff')") == 0);
  nkrt_status_free(s);
  CHECK(reached == 2);
}

TEST(model_load_file_says_which_file) {
  nkrt_runtime_t *rt = nkrt_test_runtime("0", 4u << 20);
  nkrt_model_t *m = NULL;
  const char *path = nkrt_test_neff("add");
  /* a NEFF that loads, on a core the runtime does not see: the load's error
   * comes back with the file named, code unchanged */
  nkrt_status_t s = nkrt_model_load_file(rt, path, 5, NULL, &m);
  CHECK(nkrt_status_code(s) == NKRT_LOAD_NOT_ENOUGH_NC);
  char want[600];
  snprintf(want, sizeof(want), "core 5 is not visible: this runtime sees 1 core (0-0) (file '%s')",
           path);
  CHECK(strcmp(nkrt_status_message(s), want) == 0);
  nkrt_status_free(s);
  CHECK(m == NULL);
  nkrt_runtime_destroy(rt);
}
