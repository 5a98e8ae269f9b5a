/* model.h - the model object (model.c). Not installed; not part of the API
 * (that is nkrt/model.h). */
#ifndef NKRT_MODEL_INTERNAL_H
#define NKRT_MODEL_INTERNAL_H

#include "base.h"

/* ---- models (model.c) --------------------------------------------------- */

struct nkrt_model {
  atomic_uint refs;
  nkrt_runtime_t *runtime;
  uint32_t core;
  void *image;
  const nkrt_neff_desc_t *desc;
  char *name;
  uint32_t cc_enabled;
  int32_t rank, world_size;
  nkrt_tensor_t *scratch;            /* desc->scratch_bytes of device memory */
  struct nkrt_model *list_prev, *list_next;
};

/* Frees a model regardless of references (runtime teardown). */
void nkrt_model_destroy_now(struct nkrt_model *model);

#endif /* NKRT_MODEL_INTERNAL_H */
