/* nkrt/neff_abi.h - the NEFF ABI: the one contract between generated kernels
 * and the nkrt runtime.
 *
 * A NEFF here is a native shared object (ELF .so). It exports one symbol,
 * NKRT_NEFF_ENTRY, of type nkrt_neff_query_fn. The runtime calls it with its
 * own ABI version and gets back a static descriptor saying which ABI the NEFF
 * was built for, its input and output tensors (name, dtype, shape, byte size,
 * aliasing of outputs to inputs), how much scratch memory it needs, and the
 * kernel entry point.
 *
 * Kernels link nothing: everything they need from outside (a parallel-for over
 * the runtime's worker pool, scratch memory, logging, error reporting) comes in
 * through the nkrt_kernel_env_t passed to every call. This header therefore
 * includes only <stdint.h> and <stddef.h>, so generated C compiles fast.
 *
 * Versioning: structs start with struct_size and only grow; fields are only
 * appended; enum values are only appended. A runtime accepts a NEFF whose
 * abi_version is between NKRT_NEFF_ABI_MIN_VERSION and NKRT_NEFF_ABI_VERSION.
 *
 * Security: a NEFF is native code, loaded like a .so. Load only NEFFs you trust.
 */
#ifndef NKRT_NEFF_ABI_H
#define NKRT_NEFF_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NKRT_NEFF_ABI_VERSION 1u
#define NKRT_NEFF_ABI_MIN_VERSION 1u
#define NKRT_NEFF_ENTRY "nkrt_neff_query"
#define NKRT_NEFF_MAX_RANK 8u
#define NKRT_NEFF_MAX_NAME 255u

/* Element types. Values are stable; new ones are appended. */
typedef enum nkrt_dtype {
  NKRT_DTYPE_INVALID = 0,
  NKRT_DTYPE_FLOAT32 = 1,
  NKRT_DTYPE_FLOAT16 = 2,
  NKRT_DTYPE_BFLOAT16 = 3,
  NKRT_DTYPE_INT8 = 4,
  NKRT_DTYPE_UINT8 = 5,
  NKRT_DTYPE_INT16 = 6,
  NKRT_DTYPE_UINT16 = 7,
  NKRT_DTYPE_INT32 = 8,
  NKRT_DTYPE_UINT32 = 9,
  NKRT_DTYPE_INT64 = 10,
  NKRT_DTYPE_UINT64 = 11,
  NKRT_DTYPE_BOOL = 12,
  NKRT_DTYPE_FLOAT64 = 13,
  /* 8-bit floats (storage and conversion only; see docs/nkipy.md#float8):
   * OCP E4M3FN (bias 7, no infinities, NaN 0x7F/0xFF, max 448), E5M2 (bias
   * 15, IEEE-like with infinities), and NKI's E4M3 (bias 7, with
   * infinities, max 240: ml_dtypes.float8_e4m3). */
  NKRT_DTYPE_FLOAT8_E4M3FN = 14,
  NKRT_DTYPE_FLOAT8_E5M2 = 15,
  NKRT_DTYPE_FLOAT8_E4M3 = 16,
  NKRT_DTYPE_COUNT_ = 17
} nkrt_dtype_t;

/* One input or output of a NEFF. */
typedef struct nkrt_neff_tensor {
  const char *name;      /* inputs: kernel parameter names; outputs: output0..N */
  uint32_t dtype;        /* nkrt_dtype_t */
  uint32_t ndim;         /* <= NKRT_NEFF_MAX_RANK; 0 for a scalar */
  const int64_t *shape;  /* ndim extents, each >= 0 */
  uint64_t size;         /* bytes: product(shape) * dtype size */
  int32_t alias_input;   /* outputs: index of the input this output aliases, else -1 */
} nkrt_neff_tensor_t;

/* Worker callback of parallel_for: handles indices [begin, end). `worker` is
 * in [0, env->num_workers) and is unique among the threads running one
 * parallel_for, so it can index per-worker scratch. */
typedef void (*nkrt_range_fn)(void *arg, int64_t begin, int64_t end, uint32_t worker);

/* Library routines the runtime lends to kernels. Matrices are row-major with
 * leading dimensions in elements; trans_* is 0 (use as stored) or 1 (use the
 * transpose). Calls parallelise over the runtime's worker pool themselves:
 * call them from the kernel's own thread, not from inside parallel_for. */
struct nkrt_conv2d_params;

typedef struct nkrt_kernel_lib {
  uint32_t struct_size;
  uint32_t reserved0;
  /* C[m,n] = alpha * op(A)[m,k] @ op(B)[k,n] + beta * C, float32. */
  void (*sgemm)(void *ctx, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                int64_t ldc);
  /* `batch` independent sgemms; the i-th uses a + i*stride_a, b + i*stride_b,
   * c + i*stride_c (strides in elements; 0 broadcasts an operand). */
  void (*sgemm_batched)(void *ctx, int64_t batch, int trans_a, int trans_b, int64_t m, int64_t n,
                        int64_t k, float alpha, const float *a, int64_t lda, int64_t stride_a,
                        const float *b, int64_t ldb, int64_t stride_b, float beta, float *c,
                        int64_t ldc, int64_t stride_c);
  /* As sgemm_batched for float16 or bfloat16 storage (dtype is
   * NKRT_DTYPE_FLOAT16 or NKRT_DTYPE_BFLOAT16; A, B and C all of it),
   * accumulating in float32. */
  void (*gemm_batched_lowp)(void *ctx, uint32_t dtype, int64_t batch, int trans_a, int trans_b,
                            int64_t m, int64_t n, int64_t k, float alpha, const void *a,
                            int64_t lda, int64_t stride_a, const void *b, int64_t ldb,
                            int64_t stride_b, float beta, void *c, int64_t ldc, int64_t stride_c);
  /* Added after the first release: check struct_size before use
   * (NKRT_KERNEL_LIB_HAS_COLLECTIVE). A collective over the group
   * ranks[0 .. n) of the job's communicator (nkrt/comm.h; `kind` one of
   * NKRT_CC_ALL_REDUCE / _ALL_GATHER / _ALL_TO_ALL / _REDUCE_SCATTER /
   * _BROADCAST, `reduce_op` one of NKRT_CC_ADD / _MUL / _MAX / _MIN for
   * all_reduce and reduce_scatter, and for broadcast the root's index in
   * ranks), `count` elements of `dtype` per rank (for reduce_scatter, what
   * each member receives). Returns 0, or non-zero after recording the error (the
   * kernel then returns non-zero). */
  int (*collective)(void *ctx, uint32_t kind, uint32_t dtype, uint32_t reduce_op,
                    const int32_t *ranks, uint32_t n, const void *src, void *dst, int64_t count);
  /* Added after collective: check struct_size before use
   * (NKRT_KERNEL_LIB_HAS_CONV2D). A float32 2-D convolution with its bias
   * and activation fused (nkrt_conv2d_params_t below), parallel over the
   * worker pool. Returns 0, or non-zero after recording the error. */
  int (*conv2d)(void *ctx, const struct nkrt_conv2d_params *params);
} nkrt_kernel_lib_t;

/* The activation applied to each output of conv2d after its bias. NaN stays
 * NaN (as np.maximum / np.minimum propagate it). Values are only appended. */
enum {
  NKRT_ACT_NONE = 0,
  NKRT_ACT_RELU = 1,  /* max(v, 0) */
  NKRT_ACT_CLAMP = 2  /* min(max(v, act_lo), act_hi); act_lo may be -inf, act_hi +inf */
};

/* One convolution: y = act(conv(x, w) + bias), float32, all contiguous
 * row-major: x is n x c x h x w (NCHW), w is o x (c / groups) x kh x kw
 * (OIHW), y is n x o x oh x ow, bias o floats or NULL. Output (i, j) reads
 * input row i * stride_h - pad_top + a * dil_h, column j * stride_w -
 * pad_left + b * dil_w for tap (a, b); positions outside the input read 0
 * (so the bottom / right padding follows from oh, ow). Starts with
 * struct_size (sizeof when built); fields are only appended. */
typedef struct nkrt_conv2d_params {
  uint32_t struct_size;
  uint32_t activation; /* NKRT_ACT_* */
  int64_t n, c, h, w;
  int64_t o, kh, kw;
  int64_t oh, ow;
  int64_t groups;
  int64_t stride_h, stride_w, pad_top, pad_left, dil_h, dil_w;
  float act_lo, act_hi; /* NKRT_ACT_CLAMP's bounds */
  const float *x, *weight, *bias;
  float *y;
} nkrt_conv2d_params_t;

enum {
  NKRT_CC_ALL_REDUCE = 0,
  NKRT_CC_ALL_GATHER = 1,
  NKRT_CC_ALL_TO_ALL = 2,
  NKRT_CC_REDUCE_SCATTER = 3,
  NKRT_CC_BROADCAST = 4
};
enum { NKRT_CC_ADD = 0, NKRT_CC_MUL = 1, NKRT_CC_MAX = 2, NKRT_CC_MIN = 3 };

#define NKRT_KERNEL_LIB_HAS_CONV2D(lib)                                                     \
  ((lib)->struct_size >= offsetof(nkrt_kernel_lib_t, conv2d) + sizeof(void *) &&            \
   (lib)->conv2d != NULL)

#define NKRT_KERNEL_LIB_HAS_COLLECTIVE(lib)                                                   \
  ((lib)->struct_size >= offsetof(nkrt_kernel_lib_t, collective) + sizeof(void *) &&        \
   (lib)->collective != NULL)

/* What the runtime passes to a kernel. */
typedef struct nkrt_kernel_env {
  uint32_t struct_size;
  uint32_t abi_version;   /* the runtime's NKRT_NEFF_ABI_VERSION */
  uint32_t core_id;       /* logical core running this execution */
  uint32_t num_workers;   /* threads parallel_for may use, >= 1 */
  int32_t rank;           /* collective parameters given at load */
  int32_t world_size;
  uint32_t cc_enabled;
  uint32_t reserved0;
  void *ctx;              /* opaque; pass back to the callbacks */
  /* Runs fn over [0, n) in chunks of at least `grain` indices on the
   * runtime's worker pool (the calling thread takes part) and returns when
   * every chunk is done. Small ranges run inline. */
  void (*parallel_for)(void *ctx, int64_t n, int64_t grain, nkrt_range_fn fn, void *arg);
  /* Returns `bytes` of 64-byte aligned scratch memory valid until the kernel
   * returns, or NULL when memory is exhausted (then return non-zero). Each
   * call returns a fresh region. */
  void *(*scratch)(void *ctx, uint64_t bytes);
  /* Logs a message through the runtime (level 0 error .. 3 debug). */
  void (*log)(void *ctx, int level, const char *msg);
  /* Records an error message; the kernel then returns non-zero. */
  void (*set_error)(void *ctx, const char *msg);
  /* Matrix routines (GEMM); never NULL. */
  const nkrt_kernel_lib_t *lib;
} nkrt_kernel_env_t;

/* The kernel: inputs[i] and outputs[i] point at device memory of the sizes the
 * descriptor declares, in descriptor order. Returns 0 on success. */
typedef int (*nkrt_kernel_fn)(const nkrt_kernel_env_t *env, void *const *inputs,
                              void *const *outputs);

typedef struct nkrt_neff_desc {
  uint32_t struct_size;      /* sizeof(nkrt_neff_desc_t) when built */
  uint32_t abi_version;      /* NKRT_NEFF_ABI_VERSION when built */
  const char *name;          /* kernel name, for traces and errors */
  uint32_t num_inputs;
  uint32_t num_outputs;
  const nkrt_neff_tensor_t *inputs;
  const nkrt_neff_tensor_t *outputs;
  uint64_t scratch_bytes;    /* reserved per loaded model for env->scratch */
  nkrt_kernel_fn kernel;
} nkrt_neff_desc_t;

/* The one exported entry point. Returns NULL if the NEFF cannot serve a
 * runtime of that ABI version. */
typedef const nkrt_neff_desc_t *(*nkrt_neff_query_fn)(uint32_t runtime_abi_version);

/* Byte size of one element; 0 for an unknown dtype. */
static inline uint32_t nkrt_dtype_size(uint32_t dtype) {
  static const uint8_t sizes[NKRT_DTYPE_COUNT_] = {0, 4, 2, 2, 1, 1, 2, 2, 4, 4,
                                                       8, 8, 1, 8, 1, 1, 1};
  return dtype < NKRT_DTYPE_COUNT_ ? sizes[dtype] : 0u;
}

#ifdef __cplusplus
}
#endif
#endif /* NKRT_NEFF_ABI_H */
