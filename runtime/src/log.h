/* log.h - how much the runtime prints to stderr (log.c). Not installed; not
 * part of the API. */
#ifndef NKRT_LOG_H
#define NKRT_LOG_H

/* $NKRT_LOG_LEVEL (0 error, 1 warning, 2 info, 3 debug; default 0), read
 * once per process. */
int nkrt_log_level(void);

#endif /* NKRT_LOG_H */
