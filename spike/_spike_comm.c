/* spike/_spike_comm.c - the runtime's communicator, for eager collectives.
 *
 * spike._spike._comm_collective runs one collective over every rank of the
 * job on the communicator of the live runtime (the one compiled graphs'
 * kernels use, runtime/src/comm.c), joined first if need be. torch_to_nkipy's
 * process group "nkipy" calls it on the memory of its tensors: nkipy tensors
 * live in host-visible device memory, CPU tensors in host memory, so no copy
 * is staged. Queued device work is finished first, then the GIL is released
 * for the collective.
 */
#include "_spike_internal.h"

/* The addresses are trusted: they are the caller's tensors' data pointers,
 * with `count` elements of `dtype` behind them (src: one block, or world
 * blocks for all_to_all / reduce_scatter; dst: one block, or world blocks for
 * all_gather / all_to_all). Everything else is checked here or by the
 * runtime. */
PyObject *spike_module_comm_collective(PyObject *module, PyObject *args, PyObject *kwds) {
  (void)module;
  static char *kwlist[] = {"kind", "dtype", "reduce_op", "rank", "world_size", "src", "dst",
                           "count", NULL};
  unsigned int kind, dtype, reduce_op;
  int rank, world_size;
  unsigned long long src, dst;
  long long count;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "IIIiiKKL:_comm_collective", kwlist, &kind,
                                   &dtype, &reduce_op, &rank, &world_size, &src, &dst, &count))
    return NULL;
  if (world_size < 2 || world_size > 1024 || rank < 0 || rank >= world_size)
    return PyErr_Format(PyExc_ValueError, "_comm_collective: rank %d of world size %d (the "
                        "world size must be 2 .. 1024)", rank, world_size);
  if (count < 0) return PyErr_Format(PyExc_ValueError, "_comm_collective: count %lld < 0", count);
  if (count > 0 && (src == 0 || dst == 0))
    return PyErr_Format(PyExc_ValueError, "_comm_collective: a NULL buffer address");
  SpikeCtx *ctx = g_live_ctx;
  if (!ctx)
    return spike_error("no live runtime for a collective: create it first "
                       "(spike.get_spike_singleton())");
  int32_t *ranks = malloc(sizeof(int32_t) * (size_t)world_size);
  if (!ranks) return PyErr_NoMemory();
  for (int i = 0; i < world_size; i++) ranks[i] = i;
  if (spike_ctx_enter(ctx) < 0) {
    free(ranks);
    return NULL;
  }
  spike_ctx_incref(ctx);
  nkrt_status_t st = NULL;
  Py_BEGIN_ALLOW_THREADS
  nkrt_runtime_t *rt = ctx->runtime;
  /* work queued before (on any core of this process) completes first, so
   * every rank's collectives come in the order its program issued them */
  uint32_t cores = nkrt_runtime_core_count(rt);
  for (uint32_t c = 0; c < cores && !st; c++) st = nkrt_core_synchronize(rt, c);
  if (!st)
    st = nkrt_runtime_collective(rt, rank, world_size, kind, dtype, reduce_op, ranks,
                                 (uint32_t)world_size, (const void *)(uintptr_t)src,
                                 (void *)(uintptr_t)dst, (int64_t)count);
  spike_ctx_leave(ctx);
  Py_END_ALLOW_THREADS
  spike_ctx_decref(ctx);
  free(ranks);
  if (st) return spike_nrt_error(st);
  Py_RETURN_NONE;
}
