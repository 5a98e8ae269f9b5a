/* tensor_set.h - the tensor set object (tensor_set.c): what binding reads.
 * Not installed; not part of the API (that is nkrt/exec.h). */
#ifndef NKRT_TENSOR_SET_H
#define NKRT_TENSOR_SET_H

#include "base.h"

typedef struct set_entry {
  char *name;
  nkrt_tensor_t *tensor;
} set_entry_t;

struct nkrt_tensor_set {
  set_entry_t *entries;
  uint32_t count, capacity;
};

#endif /* NKRT_TENSOR_SET_H */
