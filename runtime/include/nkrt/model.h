/* nkrt/model.h - executables (NEFFs): load, validate, describe, release.
 *
 * A NEFF is a native shared object following nkrt/neff_abi.h. Loading copies
 * the bytes into an anonymous memory file and loads that, so every load is
 * independent and the source file may go away afterwards. The descriptor is
 * validated (ABI version, struct size, tensor names unique and non-empty,
 * dtypes known, sizes equal to shape x dtype size, aliases in range) and
 * anything malformed is refused with a message. Only load trusted NEFFs: a
 * NEFF is native code.
 */
#ifndef NKRT_MODEL_H
#define NKRT_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "nkrt/neff_abi.h"
#include "nkrt/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nkrt_model nkrt_model_t;

typedef struct nkrt_load_options {
  uint32_t struct_size;  /* set by nkrt_load_options_init */
  uint32_t cc_enabled;   /* collective parameters, recorded for the kernel env */
  int32_t rank;
  int32_t world_size;
  const char *name;      /* NULL: the descriptor's name */
} nkrt_load_options_t;

void nkrt_load_options_init(nkrt_load_options_t *options);

/* Loads a NEFF image of `size` bytes onto logical core `core` (options NULL:
 * the defaults). |out_model| must be released by the caller with
 * nkrt_model_release. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_model_load(nkrt_runtime_t *runtime, const void *neff, size_t size,
                              uint32_t core, const nkrt_load_options_t *options,
                              nkrt_model_t **out_model);
/* The largest NEFF file nkrt_model_load_file reads unless NKRT_MAX_NEFF_SIZE
 * (a size such as "2G") says otherwise. */
#define NKRT_DEFAULT_MAX_NEFF_BYTES (1ull << 30)

/* nkrt_model_load of the file at `path`; errors name the file. Only a regular
 * file of at most NKRT_MAX_NEFF_SIZE bytes (default
 * NKRT_DEFAULT_MAX_NEFF_BYTES) is read: a directory, device, FIFO or socket
 * is refused without reading it, a bad NKRT_MAX_NEFF_SIZE is NKRT_INVALID.
 * |out_model| must be released by the caller with nkrt_model_release. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_model_load_file(nkrt_runtime_t *runtime, const char *path, uint32_t core,
                                   const nkrt_load_options_t *options, nkrt_model_t **out_model);
/* Models are shared handles: retain takes a reference, release drops one;
 * queued executions hold their own, so the model lives until they finish.
 * NULL is a no-op. */
void nkrt_model_retain(nkrt_model_t *model);
void nkrt_model_release(nkrt_model_t *model);
/* The older name of nkrt_model_release, kept so callers do not break. */
void nkrt_model_unload(nkrt_model_t *model);

uint32_t nkrt_model_input_count(const nkrt_model_t *model);
uint32_t nkrt_model_output_count(const nkrt_model_t *model);
/* Descriptor entries, valid while the model is loaded; NULL out of range. */
const nkrt_neff_tensor_t *nkrt_model_input(const nkrt_model_t *model, uint32_t index);
const nkrt_neff_tensor_t *nkrt_model_output(const nkrt_model_t *model, uint32_t index);
const char *nkrt_model_name(const nkrt_model_t *model);
uint32_t nkrt_model_core(const nkrt_model_t *model);
uint32_t nkrt_model_abi_version(const nkrt_model_t *model);
uint64_t nkrt_model_scratch_bytes(const nkrt_model_t *model);
/* The collective parameters it was loaded with; each out-parameter may be
 * NULL and is the caller's storage (nothing to release). */
void nkrt_model_collectives(const nkrt_model_t *model, uint32_t *out_cc_enabled,
                            int32_t *out_rank, int32_t *out_world_size);

/* "float32", "bfloat16", ...; "unknown" otherwise. */
const char *nkrt_dtype_name(uint32_t dtype);

#ifdef __cplusplus
}
#endif
#endif /* NKRT_MODEL_H */
