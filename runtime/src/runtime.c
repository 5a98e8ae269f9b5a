/* runtime.c - runtime lifecycle, visible cores, options, memory statistics. */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "event.h"
#include "gemm.h"
#include "gemm_pack.h"
#include "log.h"
#include "model.h"
#include "runtime.h"
#include "tensor.h"
#include "trace.h"
#include "nkrt/comm.h"

char *nkrt_strdup_name(const char *name, const char *fallback) {
  const char *s = (name && *name) ? name : fallback;
  size_t n = strnlen(s, NKRT_NAME_MAX - 1);
  char *copy = malloc(n + 1);
  if (!copy) return NULL;
  memcpy(copy, s, n);
  copy[n] = '\0';
  return copy;
}

void nkrt_free(void *ptr) { free(ptr); }

void nkrt_options_init(nkrt_options_t *options) {
  memset(options, 0, sizeof(*options));
  options->struct_size = sizeof(*options);
}

static const char *skip_spaces(const char *p) {
  while (*p && isspace((unsigned char)*p)) p++;
  return p;
}

NKRT_MUST_USE_RESULT
static nkrt_status_t parse_uint(const char **pp, const char *spec, uint64_t *out) {
  const char *p = skip_spaces(*pp);
  if (!isdigit((unsigned char)*p))
    return nkrt_status_make(NKRT_INVALID,
                            "invalid core list \"%s\": expected a core number at \"%s\" "
                            "(syntax: \"0-3,5\")",
                            spec, p);
  errno = 0;
  char *end;
  unsigned long long v = strtoull(p, &end, 10);
  if (errno)
    return nkrt_status_make(NKRT_INVALID, "invalid core list \"%s\": core number \"%.*s\" is out "
                            "of range (the CPU driver has %u virtual NeuronCores, 0-%u)", spec,
                            (int)(end - p), p, NKRT_TOTAL_CORES, NKRT_TOTAL_CORES - 1);
  *out = v;
  *pp = skip_spaces(end);
  return NULL;
}

nkrt_status_t nkrt_parse_core_list(const char *spec, uint32_t *out_ids, uint32_t capacity,
                                   uint32_t *out_count) {
  *out_count = 0;
  if (!spec) return nkrt_status_make(NKRT_INVALID, "core list is NULL");
  bool seen[NKRT_TOTAL_CORES] = {false};
  const char *p = skip_spaces(spec);
  if (!*p) return nkrt_status_make(NKRT_INVALID, "invalid core list \"%s\": it is empty", spec);
  for (;;) {
    uint64_t lo, hi;
    NKRT_RETURN_IF_ERROR(parse_uint(&p, spec, &lo));
    hi = lo;
    if (*p == '-') {
      p++;
      NKRT_RETURN_IF_ERROR(parse_uint(&p, spec, &hi));
    }
    if (hi < lo)
      return nkrt_status_make(NKRT_INVALID, "invalid core list \"%s\": range %llu-%llu is reversed",
                              spec, (unsigned long long)lo, (unsigned long long)hi);
    if (hi >= NKRT_TOTAL_CORES)
      return nkrt_status_make(NKRT_INVALID,
                              "invalid core list \"%s\": core %llu does not exist (the CPU "
                              "driver has %u virtual NeuronCores, 0-%u)",
                              spec, (unsigned long long)hi, NKRT_TOTAL_CORES,
                              NKRT_TOTAL_CORES - 1);
    for (uint64_t c = lo; c <= hi; c++) {
      if (seen[c])
        return nkrt_status_make(NKRT_INVALID, "invalid core list \"%s\": core %llu is listed "
                                "twice (list each core once, e.g. \"0-3,5\")",
                                spec, (unsigned long long)c);
      seen[c] = true;
    }
    if (*p == '\0') break;
    if (*p != ',')
      return nkrt_status_make(NKRT_INVALID,
                              "invalid core list \"%s\": unexpected \"%s\" (syntax: \"0-3,5\")",
                              spec, p);
    p++;
  }
  uint32_t n = 0;
  for (uint32_t c = 0; c < NKRT_TOTAL_CORES; c++) {
    if (!seen[c]) continue;
    if (n >= capacity)
      return nkrt_status_make(NKRT_INVALID, "core list \"%s\" has more than %u cores", spec,
                              capacity);
    out_ids[n++] = c;
  }
  *out_count = n;
  return NULL;
}

nkrt_status_t nkrt_parse_size(const char *text, uint64_t *out_bytes) {
  *out_bytes = 0;
  if (!text) return nkrt_status_make(NKRT_INVALID, "size is NULL");
  const char *p = skip_spaces(text);
  if (!isdigit((unsigned char)*p))
    return nkrt_status_make(NKRT_INVALID, "invalid size \"%s\": expected a number such as 4G",
                            text);
  errno = 0;
  char *end;
  unsigned long long v = strtoull(p, &end, 10);
  uint64_t mult = 1;
  switch (toupper((unsigned char)*end)) {
    case 'K': mult = 1ull << 10; end++; break;
    case 'M': mult = 1ull << 20; end++; break;
    case 'G': mult = 1ull << 30; end++; break;
    case 'T': mult = 1ull << 40; end++; break;
    default: break;
  }
  if (toupper((unsigned char)*end) == 'I') end++;
  if (toupper((unsigned char)*end) == 'B') end++;
  end = (char *)skip_spaces(end);
  if (*end != '\0' || errno)
    return nkrt_status_make(NKRT_INVALID, "invalid size \"%s\": expected a number with an "
                            "optional K, M, G or T suffix", text);
  if (v > UINT64_MAX / mult)
    return nkrt_status_make(NKRT_INVALID, "invalid size \"%s\": too large", text);
  *out_bytes = v * mult;
  return NULL;
}

/* A status for a bad environment variable: "NAME: <what st says> (hint)". */
NKRT_MUST_USE_RESULT
static nkrt_status_t env_error(const char *name, nkrt_status_t st, const char *hint) {
  nkrt_status_t wrapped = nkrt_status_make(nkrt_status_code(st), "%s: %s (%s)", name,
                                           nkrt_status_message(st), hint);
  nkrt_status_free(st);
  return wrapped;
}

NKRT_MUST_USE_RESULT
static nkrt_status_t resolve_cores(const char *spec, uint32_t *ids, uint32_t *count) {
  bool from_env = !spec;
  if (from_env) spec = getenv("NEURON_RT_VISIBLE_CORES");
  if (!spec || !*skip_spaces(spec)) {
    for (uint32_t i = 0; i < NKRT_TOTAL_CORES; i++) ids[i] = i;
    *count = NKRT_TOTAL_CORES;
    return NULL;
  }
  nkrt_status_t st = nkrt_parse_core_list(spec, ids, NKRT_TOTAL_CORES, count);
  if (st && from_env)
    return env_error("NEURON_RT_VISIBLE_CORES", st, "fix or unset it; unset means all cores");
  return nkrt_status_annotate(st, "options.visible_cores");
}

/* The one rule for the runtime's integer settings: decimal digits, optionally
 * surrounded by white space, within [lo, hi]. */
bool nkrt_parse_env_uint(const char *text, uint64_t lo, uint64_t hi, uint64_t *out) {
  const char *p = skip_spaces(text);
  char *end = (char *)p;
  unsigned long long v = 0;
  errno = 0;
  if (isdigit((unsigned char)*p)) v = strtoull(p, &end, 10);
  if (end == p || *skip_spaces(end) != '\0' || errno || v < lo || v > hi) return false;
  *out = v;
  return true;
}

/* NKRT_NUM_WORKERS: digits only (surrounding spaces allowed), 1 to 1024. */
NKRT_MUST_USE_RESULT
static nkrt_status_t parse_workers(const char *text, uint32_t *out) {
  uint64_t v;
  if (!nkrt_parse_env_uint(text, 1, NKRT_MAX_WORKERS, &v))
    return nkrt_status_make(NKRT_INVALID, "NKRT_NUM_WORKERS: invalid value \"%s\" (expected a "
                            "number of threads from 1 to %u; unset it for the CPU count)", text,
                            NKRT_MAX_WORKERS);
  *out = (uint32_t)v;
  return NULL;
}

nkrt_status_t nkrt_visible_core_count(uint32_t *out_count) {
  uint32_t ids[NKRT_TOTAL_CORES];
  return resolve_cores(NULL, ids, out_count);
}

nkrt_status_t nkrt_runtime_create(const nkrt_options_t *options, nkrt_runtime_t **out_runtime) {
  *out_runtime = NULL;
  nkrt_options_t defaults;
  nkrt_options_init(&defaults);
  if (!options) options = &defaults;
  if (options->struct_size < sizeof(uint32_t) * 2)
    return nkrt_status_make(NKRT_INVALID, "nkrt_options_t.struct_size is %u: call "
                            "nkrt_options_init first", options->struct_size);

  uint32_t ids[NKRT_TOTAL_CORES], count = 0;
  NKRT_RETURN_IF_ERROR(resolve_cores(options->visible_cores, ids, &count));

  uint64_t memory = options->core_memory_bytes;
  const char *memory_from = "options.core_memory_bytes";
  if (!memory) {
    const char *env = getenv("NKRT_CORE_MEMORY");
    if (env && *env) {
      memory_from = "NKRT_CORE_MEMORY";
      nkrt_status_t st = nkrt_parse_size(env, &memory);
      if (st) return env_error("NKRT_CORE_MEMORY", st, "unset it for the default of 16G");
    } else {
      memory = NKRT_DEFAULT_CORE_MEMORY;
    }
  }
  if (memory < NKRT_MIN_CORE_MEMORY)
    return nkrt_status_make(NKRT_INVALID, "%s: core memory of %llu bytes is below the minimum of "
                            "%llu bytes (use at least 1M)", memory_from,
                            (unsigned long long)memory, (unsigned long long)NKRT_MIN_CORE_MEMORY);
  if (memory > NKRT_MAX_CORE_MEMORY)
    return nkrt_status_make(NKRT_INVALID, "%s: core memory of %llu bytes is above the maximum of "
                            "%llu bytes (use at most 64T)", memory_from,
                            (unsigned long long)memory, (unsigned long long)NKRT_MAX_CORE_MEMORY);
  memory = (memory + 4095) & ~4095ull; /* cannot wrap: at most NKRT_MAX_CORE_MEMORY */

  uint32_t workers = options->num_workers;
  if (workers > NKRT_MAX_WORKERS)
    return nkrt_status_make(NKRT_INVALID, "options.num_workers is %u, above the maximum of %u "
                            "threads (pass 1 to %u, or 0 for NKRT_NUM_WORKERS or the CPU count)",
                            workers, NKRT_MAX_WORKERS, NKRT_MAX_WORKERS);
  if (!workers) {
    const char *env = getenv("NKRT_NUM_WORKERS");
    if (env && *env) {
      NKRT_RETURN_IF_ERROR(parse_workers(env, &workers));
    }
  }
  NKRT_RETURN_IF_ERROR(nkrt_check_log_level_env());
  NKRT_RETURN_IF_ERROR(nkrt_gemm_check_env());
  if (!workers) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    workers = n > 0 ? (uint32_t)n : 1;
  }
  if (workers > NKRT_MAX_WORKERS) workers = NKRT_MAX_WORKERS; /* a host with more CPUs */

  nkrt_runtime_t *rt = calloc(1, sizeof(*rt));
  nkrt_core_t *cores = calloc(count, sizeof(*cores));
  if (!rt || !cores) {
    free(rt);
    free(cores);
    return nkrt_status_make(NKRT_RESOURCE, "out of host memory creating the runtime");
  }
  rt->driver = &nkrt_cpu_driver;
  rt->core_count = count;
  rt->cores = cores;
  rt->core_memory = memory;
  atomic_init(&rt->next_id, 1);
  atomic_init(&rt->trace_active, 0);
  pthread_mutex_init(&rt->mu, NULL);
  pthread_mutex_init(&rt->trace_mu, NULL);
  pthread_mutex_init(&rt->comm_mu, NULL);
  atomic_init(&rt->hazard_count, 0);
  atomic_init(&rt->hazard_removals, 0);
  pthread_mutex_init(&rt->hazard_mu, NULL);
  pthread_cond_init(&rt->hazard_cv, NULL);
  for (uint32_t i = 0; i < count; i++) {
    cores[i].physical_id = ids[i];
    cores[i].runtime = rt;
    nkrt_arena_init(&cores[i].arena, rt->driver, i, memory);
    nkrt_queue_init(&cores[i].queue);
  }
  nkrt_status_t st = nkrt_pool_create(workers, &rt->pool);
  if (!st) st = nkrt_pack_cache_create(&rt->packs);
  if (st) {
    nkrt_runtime_destroy(rt);
    return st;
  }
  *out_runtime = rt;
  return NULL;
}

void nkrt_runtime_destroy(nkrt_runtime_t *rt) {
  if (!rt) return;
  for (uint32_t i = 0; i < rt->core_count; i++) nkrt_queue_shutdown(&rt->cores[i]);
  nkrt_pool_destroy(rt->pool);
  nkrt_events_destroy_all(rt);
  while (rt->models) nkrt_model_destroy_now(rt->models);
  for (uint32_t i = 0; i < rt->core_count; i++) {
    nkrt_core_t *core = &rt->cores[i];
    nkrt_tensor_t *t = core->tensors;
    while (t) {
      nkrt_tensor_t *next = t->list_next;
      free(t->name);
      free(t);
      t = next;
    }
    nkrt_arena_deinit(&core->arena);
  }
  nkrt_trace_destroy_all(rt);
  pthread_mutex_destroy(&rt->mu);
  pthread_mutex_destroy(&rt->trace_mu);
  pthread_cond_destroy(&rt->hazard_cv);
  pthread_mutex_destroy(&rt->hazard_mu);
  nkrt_pack_cache_destroy(rt->packs);
  nkrt_comm_destroy(rt->comm);
  pthread_mutex_destroy(&rt->comm_mu);
  free(rt->cores);
  free(rt);
}

uint32_t nkrt_runtime_core_count(const nkrt_runtime_t *rt) { return rt ? rt->core_count : 0; }

int32_t nkrt_runtime_physical_core(const nkrt_runtime_t *rt, uint32_t core) {
  return (rt && core < rt->core_count) ? (int32_t)rt->cores[core].physical_id : -1;
}

uint32_t nkrt_runtime_num_workers(const nkrt_runtime_t *rt) { return nkrt_pool_size(rt->pool); }

uint64_t nkrt_runtime_core_memory(const nkrt_runtime_t *rt) { return rt->core_memory; }

nkrt_status_t nkrt_check_core(const nkrt_runtime_t *rt, uint32_t core) {
  if (!rt) return nkrt_status_make(NKRT_INVALID_HANDLE, "runtime handle is NULL");
  if (core >= rt->core_count)
    return nkrt_status_make(NKRT_LOAD_NOT_ENOUGH_NC,
                            "core %u is not visible: this runtime sees %u core%s (0-%u)", core,
                            rt->core_count, rt->core_count == 1 ? "" : "s", rt->core_count - 1);
  return NULL;
}

nkrt_status_t nkrt_memory_stats(nkrt_runtime_t *rt, uint32_t core, nkrt_memory_stats_t *out) {
  NKRT_RETURN_IF_ERROR(nkrt_check_core(rt, core));
  if (!out) return nkrt_status_make(NKRT_INVALID, "out_stats is NULL");
  uint32_t size = out->struct_size;
  nkrt_memory_stats_t full;
  memset(&full, 0, sizeof(full));
  nkrt_arena_t *arena = &rt->cores[core].arena;
  pthread_mutex_lock(&arena->mu);
  nkrt_arena_stats_locked(arena, &full);
  pthread_mutex_unlock(&arena->mu);
  /* size-in: callers built against an older header get a prefix */
  if (size == 0 || size > sizeof(full)) size = sizeof(full);
  full.struct_size = size;
  memcpy(out, &full, size);
  return NULL;
}

nkrt_status_t nkrt_memory_reset_peak(nkrt_runtime_t *rt, uint32_t core) {
  NKRT_RETURN_IF_ERROR(nkrt_check_core(rt, core));
  nkrt_arena_t *arena = &rt->cores[core].arena;
  pthread_mutex_lock(&arena->mu);
  nkrt_arena_reset_peak_locked(arena);
  pthread_mutex_unlock(&arena->mu);
  return NULL;
}
