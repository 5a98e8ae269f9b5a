/* log.h - how much the runtime prints to stderr (log.c). Not installed; not
 * part of the API. */
#ifndef NKRT_LOG_H
#define NKRT_LOG_H

#include "base.h"

/* $NKRT_LOG_LEVEL (0 error, 1 warning, 2 info, 3 debug; default 0), read
 * once per process; a value that is not one of those counts as 0 here and is
 * refused by nkrt_check_log_level_env (runtime creation). */
int nkrt_log_level(void);

/* NKRT_INVALID naming the variable and its value when $NKRT_LOG_LEVEL is set
 * to anything but 0-3 (white space around the digit allowed); else NULL. */
nkrt_status_t nkrt_check_log_level_env(void);

#endif /* NKRT_LOG_H */
