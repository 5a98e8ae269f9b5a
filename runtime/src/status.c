/* status.c - status values: heap objects carrying a code and a message, and
 * context added to them on the way out. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nkrt/status.h"

struct nkrt_status_s {
  nkrt_code_t code;
  int is_static;
  char message[];
};

/* Returned when the host cannot allocate a status; never freed. */
static struct {
  struct nkrt_status_s s;
  char text[64];
} oom_status = {{NKRT_RESOURCE, 1}, "out of host memory while reporting an error"};

nkrt_status_t nkrt_status_makev(nkrt_code_t code, const char *fmt, va_list ap) {
  if (code == NKRT_SUCCESS) return NULL;
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0) n = 0;
  struct nkrt_status_s *s = malloc(sizeof(*s) + (size_t)n + 1);
  if (!s) return &oom_status.s;
  s->code = code;
  s->is_static = 0;
  vsnprintf(s->message, (size_t)n + 1, fmt, ap);
  return s;
}

nkrt_status_t nkrt_status_make(nkrt_code_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  nkrt_status_t s = nkrt_status_makev(code, fmt, ap);
  va_end(ap);
  return s;
}

nkrt_status_t nkrt_status_annotatev(nkrt_status_t status, const char *fmt, va_list ap) {
  if (!status) return NULL;
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0) return status;
  char *context = malloc((size_t)n + 1);
  if (!context) return status;
  vsnprintf(context, (size_t)n + 1, fmt, ap);
  nkrt_status_t s = nkrt_status_make(status->code, "%s (%s)", status->message, context);
  free(context);
  if (s == &oom_status.s) return status; /* no room for more: keep what it said */
  nkrt_status_free(status);
  return s;
}

nkrt_status_t nkrt_status_annotate(nkrt_status_t status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  nkrt_status_t s = nkrt_status_annotatev(status, fmt, ap);
  va_end(ap);
  return s;
}

nkrt_code_t nkrt_status_code(nkrt_status_t status) {
  return status ? status->code : NKRT_SUCCESS;
}

const char *nkrt_status_message(nkrt_status_t status) { return status ? status->message : ""; }

const char *nkrt_code_name(nkrt_code_t code) {
  switch (code) {
    case NKRT_SUCCESS: return "NRT_SUCCESS";
    case NKRT_FAILURE: return "NRT_FAILURE";
    case NKRT_INVALID: return "NRT_INVALID";
    case NKRT_INVALID_HANDLE: return "NRT_INVALID_HANDLE";
    case NKRT_RESOURCE: return "NRT_RESOURCE";
    case NKRT_TIMEOUT: return "NRT_TIMEOUT";
    case NKRT_HW_ERROR: return "NRT_HW_ERROR";
    case NKRT_QUEUE_FULL: return "NRT_QUEUE_FULL";
    case NKRT_LOAD_NOT_ENOUGH_NC: return "NRT_LOAD_NOT_ENOUGH_NC";
    case NKRT_UNSUPPORTED_NEFF_VERSION: return "NRT_UNSUPPORTED_NEFF_VERSION";
    case NKRT_UNINITIALIZED: return "NRT_UNINITIALIZED";
    case NKRT_CLOSED: return "NRT_CLOSED";
    case NKRT_EXEC_BAD_INPUT: return "NRT_EXEC_BAD_INPUT";
    case NKRT_EXEC_COMPLETED_WITH_NUM_ERR: return "NRT_EXEC_COMPLETED_WITH_NUM_ERR";
    case NKRT_EXEC_COMPLETED_WITH_ERR: return "NRT_EXEC_COMPLETED_WITH_ERR";
    case NKRT_EXEC_NC_BUSY: return "NRT_EXEC_NC_BUSY";
  }
  return "NRT_UNKNOWN";
}

void nkrt_status_free(nkrt_status_t status) {
  if (status && !status->is_static) free(status);
}
