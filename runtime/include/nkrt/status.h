/* nkrt/status.h - status values: a code, its name and a message.
 *
 * Every fallible nkrt call returns an nkrt_status_t. NULL means success, so
 * checking is one compare; anything else is a heap object owned by the caller,
 * released with nkrt_status_free(). Codes are those of libnrt (NRT_*), so that
 * users who know the Neuron runtime read the same names; the enum only grows.
 */
#ifndef NKRT_STATUS_H
#define NKRT_STATUS_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum nkrt_code {
  NKRT_SUCCESS = 0,
  NKRT_FAILURE = 1,                 /* generic failure (e.g. a NEFF that cannot be loaded) */
  NKRT_INVALID = 2,                 /* bad argument: out of bounds, bad syntax, bad size */
  NKRT_INVALID_HANDLE = 3,          /* a handle that is NULL or already released */
  NKRT_RESOURCE = 4,                /* out of device or host memory */
  NKRT_TIMEOUT = 5,                 /* a wait ran out of time */
  NKRT_HW_ERROR = 6,                /* the driver failed (mmap, thread creation) */
  NKRT_QUEUE_FULL = 7,
  NKRT_LOAD_NOT_ENOUGH_NC = 9,      /* core index outside the visible cores */
  NKRT_UNSUPPORTED_NEFF_VERSION = 10, /* NEFF built against another ABI version */
  NKRT_UNINITIALIZED = 13,
  NKRT_CLOSED = 14,                 /* the runtime was closed */
  NKRT_EXEC_BAD_INPUT = 1002,       /* missing/unknown tensor names, wrong sizes or cores */
  NKRT_EXEC_COMPLETED_WITH_NUM_ERR = 1003,
  NKRT_EXEC_COMPLETED_WITH_ERR = 1004, /* the kernel reported an error */
  NKRT_EXEC_NC_BUSY = 1005
} nkrt_code_t;

typedef struct nkrt_status_s *nkrt_status_t;

/* Marks a function whose result must be used: every call returning an
 * nkrt_status_t is one, since a status ignored is an error lost (and a heap
 * object leaked). With GCC, a (void) cast does not silence the warning:
 * handle the status, or free it with nkrt_status_free. */
#if defined(__GNUC__) || defined(__clang__)
#define NKRT_MUST_USE_RESULT __attribute__((warn_unused_result))
#else
#define NKRT_MUST_USE_RESULT
#endif

/* Makes a status with a printf-style message. NKRT_SUCCESS gives NULL. Never
 * fails: when the host is out of memory a static status without the
 * formatted message is returned (and nkrt_status_free ignores it). */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_status_make(nkrt_code_t code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_status_makev(nkrt_code_t code, const char *fmt, va_list ap);

/* Adds context to a status on its way out: the result has the same code and
 * the message "<message> (<context>)", with the context formatted printf-
 * style. Takes over `status` (the caller frees what is returned instead);
 * NULL stays NULL. When the host is out of memory the status comes back
 * unchanged. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_status_annotate(nkrt_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_status_annotatev(nkrt_status_t status, const char *fmt, va_list ap);

/* NKRT_SUCCESS for NULL. */
nkrt_code_t nkrt_status_code(nkrt_status_t status);
/* "" for NULL. Valid until the status is freed. */
const char *nkrt_status_message(nkrt_status_t status);
/* "NRT_SUCCESS", "NRT_RESOURCE", ...; "NRT_UNKNOWN" for codes not in the enum. */
const char *nkrt_code_name(nkrt_code_t code);
void nkrt_status_free(nkrt_status_t status);

#ifdef __cplusplus
}
#endif
#endif /* NKRT_STATUS_H */
