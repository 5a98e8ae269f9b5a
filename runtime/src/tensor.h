/* tensor.h - the tensor object (tensor.c). Not installed; not part of the
 * API (that is nkrt/tensor.h). */
#ifndef NKRT_TENSOR_INTERNAL_H
#define NKRT_TENSOR_INTERNAL_H

#include "arena.h"
#include "base.h"

/* ---- tensors (tensor.c) ------------------------------------------------ */

struct nkrt_tensor {
  atomic_uint refs;
  nkrt_runtime_t *runtime;
  uint32_t core;
  struct nkrt_tensor *root;   /* slices: the owning tensor (retained) */
  nkrt_block_t *block;        /* owning tensors: the allocation */
  uint8_t *va;
  uint64_t size;
  char *name;
  struct nkrt_tensor *list_prev, *list_next; /* the core's live tensors */
};

/* Retains t unless its last reference is already gone (a release racing
 * with a lookup by address); false then. */
bool nkrt_tensor_try_retain(nkrt_tensor_t *tensor);

/* Copies without checks or hazard waits (queued work uses them). */
/* trace_id: the tracking id its trace events carry (queued work: the id its
 * "queued" event carried); 0 takes a fresh one. */
void nkrt_tensor_write_raw(nkrt_tensor_t *tensor, const void *src, uint64_t offset, uint64_t size,
                           uint64_t trace_id);
void nkrt_tensor_read_raw(const nkrt_tensor_t *tensor, void *dst, uint64_t offset, uint64_t size,
                          uint64_t trace_id);

#endif /* NKRT_TENSOR_INTERNAL_H */
