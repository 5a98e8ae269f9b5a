/* model.c - loading NEFFs (native shared objects following neff_abi.h),
 * validating their descriptors, describing their tensors. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model.h"
#include "runtime.h"
#include "tensor.h"

static const char *const dtype_names[NKRT_DTYPE_COUNT_] = {
    "unknown", "float32", "float16", "bfloat16", "int8",  "uint8",  "int16",
    "uint16",  "int32",   "uint32",  "int64",    "uint64", "bool",  "float64",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3"};

const char *nkrt_dtype_name(uint32_t dtype) {
  return dtype < NKRT_DTYPE_COUNT_ ? dtype_names[dtype] : "unknown";
}

void nkrt_load_options_init(nkrt_load_options_t *o) {
  memset(o, 0, sizeof(*o));
  o->struct_size = sizeof(*o);
  o->world_size = 1;
}

/* Checks one tensor entry of a descriptor. */
NKRT_MUST_USE_RESULT
static nkrt_status_t check_tensor(const nkrt_neff_desc_t *d, const char *kind, uint32_t i,
                                  const nkrt_neff_tensor_t *t) {
  const char *model = d->name ? d->name : "?";
  if (!t->name || !t->name[0] || strnlen(t->name, NKRT_NEFF_MAX_NAME + 1) > NKRT_NEFF_MAX_NAME)
    return nkrt_status_make(NKRT_FAILURE, "invalid NEFF '%s': %s %u has an empty or overlong "
                            "name", model, kind, i);
  if (t->dtype == NKRT_DTYPE_INVALID || t->dtype >= NKRT_DTYPE_COUNT_)
    return nkrt_status_make(NKRT_FAILURE, "invalid NEFF '%s': %s '%s' has unknown dtype %u",
                            model, kind, t->name, t->dtype);
  if (t->ndim > NKRT_NEFF_MAX_RANK)
    return nkrt_status_make(NKRT_FAILURE, "invalid NEFF '%s': %s '%s' has rank %u (at most %u)",
                            model, kind, t->name, t->ndim, NKRT_NEFF_MAX_RANK);
  if (t->ndim && !t->shape)
    return nkrt_status_make(NKRT_FAILURE, "invalid NEFF '%s': %s '%s' has rank %u but its shape "
                            "pointer is NULL (the NEFF's descriptor is malformed: rebuild it)",
                            model, kind, t->name, t->ndim);
  uint64_t n = nkrt_dtype_size(t->dtype);
  for (uint32_t k = 0; k < t->ndim; k++) {
    if (t->shape[k] < 0)
      return nkrt_status_make(NKRT_FAILURE, "invalid NEFF '%s': %s '%s' has negative extent %"
                              PRId64, model, kind, t->name, t->shape[k]);
    if (t->shape[k] && n > UINT64_MAX / (uint64_t)t->shape[k])
      return nkrt_status_make(NKRT_FAILURE, "invalid NEFF '%s': %s '%s' is too large", model,
                              kind, t->name);
    n *= (uint64_t)t->shape[k];
  }
  if (n != t->size)
    return nkrt_status_make(NKRT_FAILURE, "invalid NEFF '%s': %s '%s' declares %" PRIu64
                            " bytes but its shape and dtype (%s) give %" PRIu64 " bytes",
                            model, kind, t->name, t->size, nkrt_dtype_name(t->dtype), n);
  return NULL;
}

NKRT_MUST_USE_RESULT
static nkrt_status_t validate(const nkrt_neff_desc_t *d) {
  if (d->abi_version < NKRT_NEFF_ABI_MIN_VERSION || d->abi_version > NKRT_NEFF_ABI_VERSION)
    return nkrt_status_make(NKRT_UNSUPPORTED_NEFF_VERSION,
                            "NEFF '%s' was built for ABI version %u; this runtime supports "
                            "versions %u to %u (rebuild the NEFF)",
                            d->name ? d->name : "?", d->abi_version, NKRT_NEFF_ABI_MIN_VERSION,
                            NKRT_NEFF_ABI_VERSION);
  if (d->struct_size < sizeof(nkrt_neff_desc_t))
    return nkrt_status_make(NKRT_FAILURE, "invalid NEFF: descriptor struct_size %u is smaller "
                            "than %zu", d->struct_size, sizeof(nkrt_neff_desc_t));
  if (!d->name || !d->name[0])
    return nkrt_status_make(NKRT_FAILURE, "invalid NEFF: the descriptor has no name");
  if (!d->kernel) return nkrt_status_make(NKRT_FAILURE, "invalid NEFF '%s': no kernel", d->name);
  if ((d->num_inputs && !d->inputs) || (d->num_outputs && !d->outputs))
    return nkrt_status_make(NKRT_FAILURE, "invalid NEFF '%s': tensor table missing", d->name);
  if (d->num_inputs > 4096 || d->num_outputs > 4096)
    return nkrt_status_make(NKRT_FAILURE, "invalid NEFF '%s': too many tensors", d->name);
  for (uint32_t i = 0; i < d->num_inputs; i++) {
    NKRT_RETURN_IF_ERROR(check_tensor(d, "input", i, &d->inputs[i]));
  }
  for (uint32_t i = 0; i < d->num_outputs; i++) {
    const nkrt_neff_tensor_t *o = &d->outputs[i];
    NKRT_RETURN_IF_ERROR(check_tensor(d, "output", i, o));
    if (o->alias_input >= (int32_t)d->num_inputs || o->alias_input < -1)
      return nkrt_status_make(NKRT_FAILURE, "invalid NEFF '%s': output '%s' aliases input %d "
                              "of %u", d->name, o->name, o->alias_input, d->num_inputs);
    if (o->alias_input >= 0 && d->inputs[o->alias_input].size != o->size)
      return nkrt_status_make(NKRT_FAILURE, "invalid NEFF '%s': output '%s' aliases input '%s' "
                              "of a different size", d->name, o->name,
                              d->inputs[o->alias_input].name);
  }
  /* names unique among inputs and among outputs; an output may carry the
   * name of the input it aliases (an input the kernel updates in place) */
  uint32_t total = d->num_inputs + d->num_outputs;
  for (uint32_t i = 0; i < total; i++) {
    const char *a = i < d->num_inputs ? d->inputs[i].name : d->outputs[i - d->num_inputs].name;
    for (uint32_t j = i + 1; j < total; j++) {
      const char *b = j < d->num_inputs ? d->inputs[j].name : d->outputs[j - d->num_inputs].name;
      if (strcmp(a, b) != 0) continue;
      if (i < d->num_inputs && j >= d->num_inputs &&
          d->outputs[j - d->num_inputs].alias_input == (int32_t)i)
        continue;
      return nkrt_status_make(NKRT_FAILURE, "invalid NEFF '%s': tensor name '%s' is used twice",
                              d->name, a);
    }
  }
  return NULL;
}

static void link_model(nkrt_runtime_t *rt, nkrt_model_t *m) {
  pthread_mutex_lock(&rt->mu);
  m->list_prev = NULL;
  m->list_next = rt->models;
  if (rt->models) rt->models->list_prev = m;
  rt->models = m;
  pthread_mutex_unlock(&rt->mu);
}

void nkrt_model_destroy_now(nkrt_model_t *m) {
  nkrt_runtime_t *rt = m->runtime;
  pthread_mutex_lock(&rt->mu);
  if (m->list_prev) m->list_prev->list_next = m->list_next;
  else if (rt->models == m) rt->models = m->list_next;
  if (m->list_next) m->list_next->list_prev = m->list_prev;
  pthread_mutex_unlock(&rt->mu);
  nkrt_tensor_release(m->scratch);
  rt->driver->image_unload(m->image);
  free(m->name);
  free(m);
}

void nkrt_model_retain(nkrt_model_t *m) {
  if (m) atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed);
}

void nkrt_model_release(nkrt_model_t *m) {
  if (m && atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) == 1)
    nkrt_model_destroy_now(m);
}

/* The older name of nkrt_model_release (nkrt/model.h). */
void nkrt_model_unload(nkrt_model_t *m) { nkrt_model_release(m); }

nkrt_status_t nkrt_model_load(nkrt_runtime_t *rt, const void *neff, size_t size, uint32_t core,
                              const nkrt_load_options_t *options, nkrt_model_t **out_model) {
  if (!out_model) return nkrt_status_make(NKRT_INVALID, "out_model is NULL");
  *out_model = NULL;
  NKRT_RETURN_IF_ERROR(nkrt_check_core(rt, core));
  nkrt_load_options_t defaults;
  nkrt_load_options_init(&defaults);
  if (!options) options = &defaults;
  if (options->world_size < 1 || options->rank < 0 || options->rank >= options->world_size)
    return nkrt_status_make(NKRT_INVALID, "invalid collective parameters: rank %d, world size %d "
                            "(need 0 <= rank < world size)", options->rank, options->world_size);
  static const unsigned char elf_magic[4] = {0x7f, 'E', 'L', 'F'};
  if (!neff)
    return nkrt_status_make(NKRT_INVALID, "not a NEFF: the image pointer is NULL");
  if (size < sizeof(elf_magic) || memcmp(neff, elf_magic, sizeof(elf_magic)) != 0)
    return nkrt_status_make(NKRT_FAILURE,
                            "not a NEFF: %zu bytes that do not start with the ELF magic (a NEFF "
                            "is a shared object built against nkrt/neff_abi.h)", size);
  if (size < 64) /* the ELF magic, but not even a whole ELF header */
    return nkrt_status_make(NKRT_FAILURE,
                            "not a loadable NEFF (the shared object is truncated): %zu bytes, "
                            "fewer than the 64 of an ELF header (rebuild or copy the NEFF again)",
                            size);

  nkrt_model_t *m = calloc(1, sizeof(*m));
  if (!m) return nkrt_status_make(NKRT_RESOURCE, "out of host memory loading a NEFF");
  atomic_init(&m->refs, 1);
  m->runtime = rt;
  m->core = core;
  m->cc_enabled = options->cc_enabled;
  m->rank = options->rank;
  m->world_size = options->world_size;

  nkrt_status_t st =
      rt->driver->image_load(neff, size, options->name ? options->name : "nkrt-neff", &m->image);
  if (st) goto fail;
  nkrt_neff_query_fn query = (nkrt_neff_query_fn)rt->driver->image_symbol(m->image, NKRT_NEFF_ENTRY);
  if (!query) {
    st = nkrt_status_make(NKRT_FAILURE, "not a NEFF: the shared object has no entry point '%s'",
                          NKRT_NEFF_ENTRY);
    goto fail;
  }
  m->desc = query(NKRT_NEFF_ABI_VERSION);
  if (!m->desc) {
    st = nkrt_status_make(NKRT_UNSUPPORTED_NEFF_VERSION,
                          "the NEFF refused this runtime's ABI version %u", NKRT_NEFF_ABI_VERSION);
    goto fail;
  }
  st = validate(m->desc);
  if (st) goto fail;
  m->name = nkrt_strdup_name(options->name, m->desc->name);
  if (!m->name) {
    st = nkrt_status_make(NKRT_RESOURCE, "out of host memory loading a NEFF");
    goto fail;
  }
  if (m->desc->scratch_bytes) {
    st = nkrt_tensor_allocate(rt, core, m->desc->scratch_bytes, "scratch", &m->scratch);
    if (st) goto fail;
  }
  link_model(rt, m);
  *out_model = m;
  return NULL;

fail:
  if (m->image) rt->driver->image_unload(m->image);
  free(m->name);
  free(m);
  return st;
}

/* What a file that is not a regular file is, for messages. */
static const char *file_type_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

/* The largest NEFF file nkrt_model_load_file reads: NKRT_MAX_NEFF_SIZE (a size
 * such as "1G", parsed as NKRT_CORE_MEMORY is), else the default. */
NKRT_MUST_USE_RESULT
static nkrt_status_t max_neff_bytes(uint64_t *out) {
  *out = NKRT_DEFAULT_MAX_NEFF_BYTES;
  const char *env = getenv("NKRT_MAX_NEFF_SIZE");
  if (!env || !*env) return NULL;
  nkrt_status_t st = nkrt_parse_size(env, out);
  if (!st && *out == 0)
    st = nkrt_status_make(NKRT_INVALID, "invalid size \"%s\": it must be at least 1", env);
  if (!st) return NULL;
  nkrt_status_t wrapped = nkrt_status_make(NKRT_INVALID, "NKRT_MAX_NEFF_SIZE: %s (unset it for "
                                           "the default of 1G)", nkrt_status_message(st));
  nkrt_status_free(st);
  return wrapped;
}

/* Reads a whole NEFF file: a regular file of at most the size cap. Opening
 * with O_NONBLOCK keeps a FIFO from blocking the open; nothing but a regular
 * file is read, so /dev/zero or a pipe cannot grow memory or hang. */
NKRT_MUST_USE_RESULT
static nkrt_status_t read_neff_file(const char *path, char **out_buf, size_t *out_len) {
  *out_buf = NULL;
  *out_len = 0;
  uint64_t cap = 0;
  NKRT_RETURN_IF_ERROR(max_neff_bytes(&cap));
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0)
    return nkrt_status_make(NKRT_FAILURE, "cannot open NEFF file '%s': %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    nkrt_status_t s = nkrt_status_make(NKRT_FAILURE, "cannot read NEFF file '%s': %s", path,
                                       strerror(errno));
    close(fd);
    return s;
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    return nkrt_status_make(NKRT_FAILURE, "cannot load NEFF file '%s': it is %s, not a regular "
                            "file (give the path of a .neff file)", path,
                            file_type_name(st.st_mode));
  }
  uint64_t size = (uint64_t)st.st_size;
  if (size > cap || size > SIZE_MAX - 1) {
    close(fd);
    return nkrt_status_make(NKRT_FAILURE, "cannot load NEFF file '%s': it is %" PRIu64 " bytes, "
                            "over the limit of %" PRIu64 " bytes (NKRT_MAX_NEFF_SIZE; raise it "
                            "if this NEFF is genuine)", path, size, cap);
  }
  char *buf = malloc(size ? (size_t)size : 1);
  if (!buf) {
    close(fd);
    return nkrt_status_make(NKRT_RESOURCE, "out of host memory reading the %" PRIu64 " bytes of "
                            "NEFF file '%s'", size, path);
  }
  /* at most the size fstat gave: a file that grows meanwhile is cut there,
   * one that shrinks ends early (and fails the ELF checks) */
  size_t len = 0;
  while (len < size) {
    ssize_t r = read(fd, buf + len, (size_t)size - len);
    if (r == 0) break;
    if (r < 0) {
      if (errno == EINTR) continue;
      nkrt_status_t s = nkrt_status_make(NKRT_FAILURE, "cannot read NEFF file '%s': %s", path,
                                         strerror(errno));
      free(buf);
      close(fd);
      return s;
    }
    len += (size_t)r;
  }
  close(fd);
  *out_buf = buf;
  *out_len = len;
  return NULL;
}

nkrt_status_t nkrt_model_load_file(nkrt_runtime_t *rt, const char *path, uint32_t core,
                                   const nkrt_load_options_t *options, nkrt_model_t **out_model) {
  if (out_model) *out_model = NULL;
  if (!path) return nkrt_status_make(NKRT_INVALID, "NEFF path is NULL");
  char *buf = NULL;
  size_t len = 0;
  NKRT_RETURN_IF_ERROR(read_neff_file(path, &buf, &len));
  nkrt_status_t st = nkrt_model_load(rt, buf, len, core, options, out_model);
  st = nkrt_status_annotate(st, "file '%s'", path); /* say which file */
  free(buf);
  return st;
}

uint32_t nkrt_model_input_count(const nkrt_model_t *m) { return m ? m->desc->num_inputs : 0; }
uint32_t nkrt_model_output_count(const nkrt_model_t *m) { return m ? m->desc->num_outputs : 0; }

const nkrt_neff_tensor_t *nkrt_model_input(const nkrt_model_t *m, uint32_t i) {
  return (m && i < m->desc->num_inputs) ? &m->desc->inputs[i] : NULL;
}

const nkrt_neff_tensor_t *nkrt_model_output(const nkrt_model_t *m, uint32_t i) {
  return (m && i < m->desc->num_outputs) ? &m->desc->outputs[i] : NULL;
}

const char *nkrt_model_name(const nkrt_model_t *m) { return m ? m->name : ""; }
uint32_t nkrt_model_core(const nkrt_model_t *m) { return m ? m->core : 0; }
uint32_t nkrt_model_abi_version(const nkrt_model_t *m) { return m ? m->desc->abi_version : 0; }
uint64_t nkrt_model_scratch_bytes(const nkrt_model_t *m) { return m ? m->desc->scratch_bytes : 0; }

void nkrt_model_collectives(const nkrt_model_t *m, uint32_t *cc, int32_t *rank, int32_t *world) {
  if (cc) *cc = m ? m->cc_enabled : 0;
  if (rank) *rank = m ? m->rank : 0;
  if (world) *world = m ? m->world_size : 1;
}
