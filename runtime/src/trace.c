/* trace.c - trace sessions: timed start/stop events of executions and
 * copies, read back as system-trace JSON or written as Chrome trace JSON. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime.h"
#include "trace.h"

typedef nkrt_trace_event_t trace_event_t;

struct nkrt_trace_session {
  nkrt_runtime_t *runtime;
  int32_t core;
  bool recording;
  trace_event_t *events;     /* guarded by runtime->trace_mu */
  uint64_t count, capacity;
  struct nkrt_trace_session *next;
};

static const char *kind_name(uint32_t kind) {
  switch (kind) {
    case NKRT_TRACE_EXEC: return "nc_exec_running";
    case NKRT_TRACE_WRITE: return "tensor_write";
    case NKRT_TRACE_READ: return "tensor_read";
    case NKRT_TRACE_COPY: return "tensor_copy";
  }
  return "unknown";
}

nkrt_status_t nkrt_trace_start(nkrt_runtime_t *rt, int32_t core, nkrt_trace_session_t **out) {
  if (!out) return nkrt_status_make(NKRT_INVALID, "out_session is NULL");
  *out = NULL;
  if (!rt) return nkrt_status_make(NKRT_INVALID_HANDLE, "runtime handle is NULL");
  if (core < -1) return nkrt_status_make(NKRT_INVALID, "trace core %d: use -1 for all cores", core);
  if (core >= 0) {
    NKRT_RETURN_IF_ERROR(nkrt_check_core(rt, (uint32_t)core));
  }
  nkrt_trace_session_t *s = calloc(1, sizeof(*s));
  if (!s) return nkrt_status_make(NKRT_RESOURCE, "out of host memory");
  s->runtime = rt;
  s->core = core;
  s->recording = true;
  pthread_mutex_lock(&rt->trace_mu);
  s->next = rt->sessions;
  rt->sessions = s;
  atomic_fetch_add(&rt->trace_active, 1);
  pthread_mutex_unlock(&rt->trace_mu);
  *out = s;
  return NULL;
}

void nkrt_trace_stop(nkrt_trace_session_t *s) {
  if (!s) return;
  nkrt_runtime_t *rt = s->runtime;
  pthread_mutex_lock(&rt->trace_mu);
  if (s->recording) {
    s->recording = false;
    atomic_fetch_sub(&rt->trace_active, 1);
  }
  pthread_mutex_unlock(&rt->trace_mu);
}

static void session_free(nkrt_trace_session_t *s) {
  free(s->events);
  free(s);
}

void nkrt_trace_destroy(nkrt_trace_session_t *s) {
  if (!s) return;
  nkrt_runtime_t *rt = s->runtime;
  nkrt_trace_stop(s);
  pthread_mutex_lock(&rt->trace_mu);
  for (nkrt_trace_session_t **p = &rt->sessions; *p; p = &(*p)->next) {
    if (*p == s) {
      *p = s->next;
      break;
    }
  }
  pthread_mutex_unlock(&rt->trace_mu);
  session_free(s);
}

void nkrt_trace_destroy_all(nkrt_runtime_t *rt) {
  while (rt->sessions) {
    nkrt_trace_session_t *s = rt->sessions;
    rt->sessions = s->next;
    session_free(s);
  }
}

void nkrt_trace_record(nkrt_runtime_t *rt, nkrt_trace_kind_t kind, int phase, uint32_t core,
                       uint64_t tracking_id, uint64_t timestamp_ns, uint64_t bytes,
                       const char *name) {
  pthread_mutex_lock(&rt->trace_mu);
  for (nkrt_trace_session_t *s = rt->sessions; s; s = s->next) {
    if (!s->recording || (s->core >= 0 && (uint32_t)s->core != core)) continue;
    if (s->count == s->capacity) {
      uint64_t ncap = s->capacity ? s->capacity * 2 : 256;
      trace_event_t *ne = realloc(s->events, ncap * sizeof(*ne));
      if (!ne) continue; /* drop the event rather than fail the work */
      s->events = ne;
      s->capacity = ncap;
    }
    trace_event_t *e = &s->events[s->count++];
    e->tracking_id = tracking_id;
    e->timestamp_ns = timestamp_ns;
    e->bytes = bytes;
    e->kind = (uint32_t)kind;
    e->phase = (uint32_t)phase;
    e->core = core;
    snprintf(e->name, sizeof(e->name), "%s", name ? name : "");
  }
  pthread_mutex_unlock(&rt->trace_mu);
}

uint64_t nkrt_trace_event_count(const nkrt_trace_session_t *s) {
  if (!s) return 0;
  pthread_mutex_lock(&s->runtime->trace_mu);
  uint64_t n = s->count;
  pthread_mutex_unlock(&s->runtime->trace_mu);
  return n;
}

nkrt_status_t nkrt_trace_events(nkrt_trace_session_t *s, bool drain,
                                nkrt_trace_event_t **out_events, size_t *out_count) {
  if (!out_events || !out_count)
    return nkrt_status_make(NKRT_INVALID, "out_events or out_count is NULL");
  *out_events = NULL;
  *out_count = 0;
  if (!s) return nkrt_status_make(NKRT_INVALID_HANDLE, "trace session is NULL");
  nkrt_runtime_t *rt = s->runtime;
  pthread_mutex_lock(&rt->trace_mu);
  uint64_t n = s->count;
  nkrt_trace_event_t *copy = n ? malloc(n * sizeof(*copy)) : NULL;
  if (n && !copy) {
    pthread_mutex_unlock(&rt->trace_mu);
    return nkrt_status_make(NKRT_RESOURCE, "out of host memory copying %" PRIu64 " trace events",
                            n);
  }
  if (n) memcpy(copy, s->events, n * sizeof(*copy));
  if (drain) s->count = 0;
  pthread_mutex_unlock(&rt->trace_mu);
  *out_events = copy;
  *out_count = (size_t)n;
  return NULL;
}

/* A growable string. */
typedef struct sbuf {
  char *data;
  size_t len, cap;
  bool failed;
} sbuf_t;

__attribute__((format(printf, 2, 3))) static void sb_printf(sbuf_t *b, const char *fmt, ...) {
  if (b->failed) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->data ? b->data + b->len : NULL, b->data ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->failed = true;
      return;
    }
    if (b->data && b->len + (size_t)n < b->cap) {
      b->len += (size_t)n;
      return;
    }
    size_t ncap = b->cap ? b->cap * 2 : 4096;
    while (ncap < b->len + (size_t)n + 1) ncap *= 2;
    char *nd = realloc(b->data, ncap);
    if (!nd) {
      b->failed = true;
      return;
    }
    b->data = nd;
    b->cap = ncap;
  }
}

/* Writes s as a JSON string body (names are kernel/tensor names). */
static void sb_json_string(sbuf_t *b, const char *s) {
  sb_printf(b, "\"");
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') sb_printf(b, "\\%c", c);
    else if (c < 0x20) sb_printf(b, "\\u%04x", c);
    else sb_printf(b, "%c", c);
  }
  sb_printf(b, "\"");
}

nkrt_status_t nkrt_trace_events_json(nkrt_trace_session_t *s, bool drain, char **out_json,
                                     size_t *out_length) {
  if (!out_json) return nkrt_status_make(NKRT_INVALID, "out_json is NULL");
  *out_json = NULL;
  if (out_length) *out_length = 0;
  if (!s) return nkrt_status_make(NKRT_INVALID_HANDLE, "trace session is NULL");
  nkrt_runtime_t *rt = s->runtime;
  sbuf_t b = {0};
  pthread_mutex_lock(&rt->trace_mu);
  sb_printf(&b, "{\"events\":[");
  for (uint64_t i = 0; i < s->count; i++) {
    const trace_event_t *e = &s->events[i];
    sb_printf(&b, "%s{\"event_type\":\"%s\",\"phase\":\"%s\",\"nc_idx\":%u,\"tracking_id\":%" PRIu64
              ",\"name\":", i ? "," : "", kind_name(e->kind),
              e->phase == 2 ? "queued" : e->phase ? "stop" : "start",
              e->core, e->tracking_id);
    sb_json_string(&b, e->name);
    sb_printf(&b, ",\"data\":{\"nc_timestamp_ns\":%" PRIu64 ",\"bytes\":%" PRIu64 "}}",
              e->timestamp_ns, e->bytes);
  }
  sb_printf(&b, "]}");
  if (drain && !b.failed) s->count = 0;
  pthread_mutex_unlock(&rt->trace_mu);
  if (b.failed) {
    free(b.data);
    return nkrt_status_make(NKRT_RESOURCE, "out of host memory formatting trace events");
  }
  *out_json = b.data;
  if (out_length) *out_length = b.len;
  return NULL;
}

/* 0666 less the process's umask, read without changing it (umask() would
 * open a window in which other threads create files with no mask); 0644 if
 * /proc/self/status does not say. */
static mode_t default_file_mode(void) {
  mode_t mode = 0644;
  FILE *f = fopen("/proc/self/status", "re");
  if (!f) return mode;
  char line[256];
  while (fgets(line, sizeof(line), f)) {
    unsigned int mask;
    if (sscanf(line, "Umask: %o", &mask) == 1) {
      mode = (mode_t)(0666u & ~mask);
      break;
    }
  }
  fclose(f);
  return mode;
}

/* Writes `len` bytes to `path` atomically without trusting what lies there:
 * the bytes go to a fresh temporary created exclusively (O_CREAT | O_EXCL,
 * mode 0600, so a planted file or symlink under a guessable name is never
 * opened) in the target's directory, then it is renamed over the target.
 * rename replaces a symlink planted at `path` instead of writing through it,
 * and readers never see a partial file. The temporary is removed on any
 * failure; errors name `path`. */
NKRT_MUST_USE_RESULT
static nkrt_status_t write_file_atomic(const char *path, const char *data, size_t len) {
  const char *slash = strrchr(path, '/');
  size_t dir_len = slash ? (size_t)(slash - path) + 1 : 0; /* with its '/' */
  const char *base = slash ? slash + 1 : path;
  size_t cap = strlen(path) + 16;
  char *tmp = malloc(cap);
  if (!tmp) return nkrt_status_make(NKRT_RESOURCE, "out of host memory writing '%s'", path);
  snprintf(tmp, cap, "%.*s.%s.XXXXXX", (int)dir_len, path, base);
  int fd = mkostemp(tmp, O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    nkrt_status_t st = nkrt_status_make(
        NKRT_FAILURE, "cannot write trace file '%s': cannot create a temporary file in '%.*s': "
        "%s (choose a path in a directory you can write)", path, dir_len ? (int)dir_len : 1,
        dir_len ? path : ".", strerror(err));
    free(tmp);
    return st;
  }
  int err = 0;
  for (size_t done = 0; done < len && !err;) {
    ssize_t w = write(fd, data + done, len - done);
    if (w > 0) done += (size_t)w;
    else if (w == 0) err = EIO; /* no progress: never loop forever */
    else if (errno != EINTR) err = errno;
  }
  if (!err && fchmod(fd, default_file_mode()) != 0) err = errno;
  if (close(fd) != 0 && !err) err = errno;
  if (!err && rename(tmp, path) != 0) err = errno;
  nkrt_status_t st = NULL;
  if (err) {
    unlink(tmp);
    st = nkrt_status_make(NKRT_FAILURE, "cannot write trace file '%s': %s (choose a writable "
                          "path that is not a directory)", path, strerror(err));
  }
  free(tmp);
  return st;
}

nkrt_status_t nkrt_trace_write_chrome(nkrt_trace_session_t *s, const char *path) {
  if (!s) return nkrt_status_make(NKRT_INVALID_HANDLE, "trace session is NULL");
  if (!path || !*path) return nkrt_status_make(NKRT_INVALID, "trace path is empty");
  nkrt_runtime_t *rt = s->runtime;
  sbuf_t b = {0};
  uint64_t t0 = UINT64_MAX;
  sb_printf(&b, "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[");
  pthread_mutex_lock(&rt->trace_mu);
  for (uint64_t i = 0; i < s->count; i++)
    if (s->events[i].timestamp_ns < t0) t0 = s->events[i].timestamp_ns;
  /* track names: executions on tid 2*core, copies on 2*core+1 */
  bool named[2 * NKRT_TOTAL_CORES] = {false};
  bool first = true;
  for (uint64_t i = 0; i < s->count; i++) {
    const trace_event_t *e = &s->events[i];
    uint32_t tid = 2 * e->core + (e->kind == NKRT_TRACE_EXEC ? 0 : 1);
    if (tid < 2 * NKRT_TOTAL_CORES && !named[tid]) {
      named[tid] = true;
      sb_printf(&b, "%s{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":0,\"tid\":%u,\"args\":"
                "{\"name\":\"NeuronCore %u (nc %d) %s\"}}", first ? "" : ",", tid, e->core,
                nkrt_runtime_physical_core(rt, e->core),
                e->kind == NKRT_TRACE_EXEC ? "execution" : "copies");
      first = false;
    }
    if (e->phase != 0) continue;
    /* pair with the stop event of the same tracking id */
    const trace_event_t *stop = NULL;
    for (uint64_t j = i + 1; j < s->count && !stop; j++)
      if (s->events[j].tracking_id == e->tracking_id && s->events[j].phase == 1)
        stop = &s->events[j];
    if (!stop) continue;
    sb_printf(&b, "%s{\"name\":", first ? "" : ",");
    first = false;
    sb_json_string(&b, e->name);
    sb_printf(&b, ",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":0,\"tid\":%u,\"ts\":%.3f,\"dur\":%.3f,"
              "\"args\":{\"tracking_id\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"nc_idx\":%u}}",
              kind_name(e->kind), tid, (double)(e->timestamp_ns - t0) / 1000.0,
              (double)(stop->timestamp_ns - e->timestamp_ns) / 1000.0, e->tracking_id, e->bytes,
              e->core);
  }
  pthread_mutex_unlock(&rt->trace_mu);
  sb_printf(&b, "%s{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":\"nkrt "
            "(%s driver)\"}}]}\n", first ? "" : ",", rt->driver->name);
  if (b.failed) {
    free(b.data);
    return nkrt_status_make(NKRT_RESOURCE, "out of host memory formatting the trace");
  }
  nkrt_status_t st = write_file_atomic(path, b.data, b.len);
  free(b.data);
  return st;
}
