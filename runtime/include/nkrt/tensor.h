/* nkrt/tensor.h - device tensors.
 *
 * A tensor is a named byte range of device memory on one core. An owning
 * tensor holds an allocation from the core's arena; a slice is a non-owning
 * window (offset, size) into another tensor that keeps the allocation alive
 * while the slice exists, so it can never dangle. Tensors are reference
 * counted: nkrt_tensor_release() drops the caller's reference, and in-flight
 * executions and tensor sets hold their own, so memory is returned only when
 * nothing uses it. Reads and writes are bounds-checked.
 *
 * Ordering with queued work. Queued work (nkrt_execute_async,
 * nkrt_tensor_write_async / nkrt_tensor_read_async, see exec.h) records the
 * byte range [va, va + size) of every tensor it binds until it finishes. The
 * synchronous copies below (read, write, copy, memset and their 2-D forms)
 * first wait until no pending work overlaps the bytes they touch, then run:
 * a read of an output returns what the execution wrote, a write into an input
 * lands after the execution read it. Overlap is by byte range, not by
 * allocation: work on one slice does not hold up a copy into a disjoint slice
 * of the same allocation. With nothing queued the check is one atomic load.
 * A 2-D operation's range is its whole extent, from its first row's first
 * byte to its last row's last byte.
 */
#ifndef NKRT_TENSOR_H
#define NKRT_TENSOR_H

#include <stdint.h>

#include "nkrt/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct nkrt_tensor nkrt_tensor_t;

/* Allocates `size` bytes on logical core `core`. size 0 is allowed (a valid,
 * unique address with no bytes). name NULL gives "unnamed_tensor". Out of
 * memory is NKRT_RESOURCE with the figures in the message. |out_tensor|
 * must be released by the caller with nkrt_tensor_release. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_tensor_allocate(nkrt_runtime_t *runtime, uint32_t core, uint64_t size,
                                   const char *name, nkrt_tensor_t **out_tensor);
/* A window [offset, offset+size) of `source`; size 0 means "to the end".
 * |out_tensor| must be released by the caller with nkrt_tensor_release; it
 * keeps the source's allocation alive meanwhile. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_tensor_slice(nkrt_tensor_t *source, uint64_t offset, uint64_t size,
                                const char *name, nkrt_tensor_t **out_tensor);

/* Tensors are shared handles: retain takes a reference, release drops one
 * (the last frees the tensor). NULL is a no-op. */
void nkrt_tensor_retain(nkrt_tensor_t *tensor);
void nkrt_tensor_release(nkrt_tensor_t *tensor);
/* The older name, kept so callers do not break: nkrt_tensor_release(*tensor),
 * then *tensor = NULL. */
void nkrt_tensor_free(nkrt_tensor_t **tensor);

NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_tensor_write(nkrt_tensor_t *tensor, const void *src, uint64_t offset,
                                uint64_t size);
/* nkrt_tensor_write that leaves equal bytes alone: the bytes are compared in
 * 16 KiB blocks and only the blocks that differ are written (and only their
 * packed GEMM weights dropped, see nkrt_gemm_pack_stats). For inputs copied in
 * again on every call that rarely change - weights handed over as host
 * tensors - what the runtime derived from them survives, and an unchanged
 * input costs a read instead of a write. *out_written (may be NULL; the
 * caller's storage, nothing to release): the bytes that were written. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_tensor_update(nkrt_tensor_t *tensor, const void *src, uint64_t offset,
                                 uint64_t size, uint64_t *out_written);
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_tensor_read(const nkrt_tensor_t *tensor, void *dst, uint64_t offset,
                               uint64_t size);
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_tensor_copy(const nkrt_tensor_t *src, uint64_t src_offset, nkrt_tensor_t *dst,
                               uint64_t dst_offset, uint64_t size);
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_tensor_memset(nkrt_tensor_t *tensor, int value, uint64_t offset,
                                 uint64_t size);

/* 2-D (pitched) copies: `rows` rows of `row_bytes` bytes each; row i starts
 * at offset + i * pitch on each side. A destination's pitch must be at least
 * row_bytes when rows > 1 (its rows may not overlap); a source's may be
 * smaller (0 repeats one row). Both extents, (rows - 1) * pitch + row_bytes,
 * are checked for 64-bit overflow and against the tensor's bounds
 * (NKRT_INVALID, the message says which argument). rows or row_bytes 0 is an
 * empty copy (the offset must still be within the tensor). Traced as
 * tensor_write / tensor_read / tensor_copy with rows * row_bytes bytes. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_tensor_write_2d(nkrt_tensor_t *tensor, const void *src, uint64_t src_pitch,
                                   uint64_t dst_offset, uint64_t dst_pitch, uint64_t row_bytes,
                                   uint64_t rows);
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_tensor_read_2d(const nkrt_tensor_t *tensor, void *dst, uint64_t dst_pitch,
                                  uint64_t src_offset, uint64_t src_pitch, uint64_t row_bytes,
                                  uint64_t rows);
/* Device to device. Source and destination extents may overlap only with
 * equal pitches (then it behaves like memmove); else NKRT_INVALID. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_tensor_copy_2d(const nkrt_tensor_t *src, uint64_t src_offset,
                                  uint64_t src_pitch, nkrt_tensor_t *dst, uint64_t dst_offset,
                                  uint64_t dst_pitch, uint64_t row_bytes, uint64_t rows);
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_tensor_memset_2d(nkrt_tensor_t *tensor, int value, uint64_t offset,
                                    uint64_t pitch, uint64_t row_bytes, uint64_t rows);

/* Host-visible address of the first byte. Only nkrt and kernels may touch it. */
void *nkrt_tensor_va(const nkrt_tensor_t *tensor);
uint64_t nkrt_tensor_size(const nkrt_tensor_t *tensor);
uint32_t nkrt_tensor_core(const nkrt_tensor_t *tensor);
const char *nkrt_tensor_name(const nkrt_tensor_t *tensor);
/* 1 for a slice, 0 for an owning tensor. */
int nkrt_tensor_is_slice(const nkrt_tensor_t *tensor);
nkrt_runtime_t *nkrt_tensor_runtime(const nkrt_tensor_t *tensor);

/* Finds the owning tensor whose allocation contains `address` (any byte inside
 * it, not only its base). |out_tensor| is borrowed: valid while it is live;
 * the caller does not release it (nkrt_tensor_retain it to keep it).
 * |out_offset| is the caller's storage. NKRT_INVALID if no live allocation
 * contains the address. */
NKRT_MUST_USE_RESULT
nkrt_status_t nkrt_tensor_lookup(nkrt_runtime_t *runtime, const void *address,
                                 nkrt_tensor_t **out_tensor, uint64_t *out_offset);

#ifdef __cplusplus
}
#endif
#endif /* NKRT_TENSOR_H */
