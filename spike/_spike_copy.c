/* spike/_spike_copy.c - Spike's device copies, memset and 2-D (pitched) copies.
 *
 * Spike.tensor_copy, tensor_memset and the 2-D (pitched) copies
 * tensor_write_2d, tensor_read_2d, tensor_copy_2d and tensor_memset_2d: each
 * checks its arguments with the GIL, then runs one synchronous nkrt copy
 * without it (copy_nogil). The Spike type's method table lists them.
 */
#include "_spike_internal.h"

/* ------------------------------------------------------------------------ */
/* Spike: device copies, memset and 2-D (pitched) copies                     */
/* ------------------------------------------------------------------------ */

typedef enum { OP_COPY, OP_MEMSET, OP_WRITE_2D, OP_READ_2D, OP_COPY_2D, OP_MEMSET_2D } CopyOp;

/* One synchronous copy, run without the GIL; its tensors are retained meanwhile.
 * The runtime orders it after queued work touching the same bytes. */
typedef struct {
  CopyOp op;
  nkrt_tensor_t *a, *b;         /* the tensor (a), or source (a) and destination (b) */
  void *host;
  int value;
  uint64_t a_offset, a_pitch, b_offset, b_pitch, host_pitch, row_bytes, rows, size;
} CopyArgs;

static nkrt_status_t copy_run(const CopyArgs *c) {
  switch (c->op) {
    case OP_COPY: return nkrt_tensor_copy(c->a, c->a_offset, c->b, c->b_offset, c->size);
    case OP_MEMSET: return nkrt_tensor_memset(c->a, c->value, c->a_offset, c->size);
    case OP_WRITE_2D:
      return nkrt_tensor_write_2d(c->a, c->host, c->host_pitch, c->a_offset, c->a_pitch,
                                  c->row_bytes, c->rows);
    case OP_READ_2D:
      return nkrt_tensor_read_2d(c->a, c->host, c->host_pitch, c->a_offset, c->a_pitch,
                                 c->row_bytes, c->rows);
    case OP_COPY_2D:
      return nkrt_tensor_copy_2d(c->a, c->a_offset, c->a_pitch, c->b, c->b_offset, c->b_pitch,
                                 c->row_bytes, c->rows);
    case OP_MEMSET_2D:
      return nkrt_tensor_memset_2d(c->a, c->value, c->a_offset, c->a_pitch, c->row_bytes,
                                   c->rows);
  }
  return NULL;
}

static PyObject *copy_nogil(SpikeCtx *ctx, CopyArgs *c) {
  if (spike_ctx_enter(ctx) < 0) return NULL;
  nkrt_tensor_retain(c->a);
  nkrt_tensor_retain(c->b);
  nkrt_status_t st;
  Py_BEGIN_ALLOW_THREADS
  st = copy_run(c);
  nkrt_tensor_release(c->a);
  nkrt_tensor_release(c->b);
  spike_ctx_leave(ctx);
  Py_END_ALLOW_THREADS
  if (st) return spike_nrt_error(st);
  Py_RETURN_NONE;
}

static int check_byte_value(long long value) {
  if (value < 0 || value > 255) {
    PyErr_Format(PyExc_ValueError, "value must be a byte value from 0 to 255, got %lld", value);
    return -1;
  }
  return 0;
}

PyObject *spike_tensor_copy(SpikeObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"src", "src_offset", "dst", "dst_offset", "size", NULL};
  PyObject *src_obj, *dst_obj;
  long long src_offset, dst_offset, size;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "OLOLL:tensor_copy", kwlist, &src_obj,
                                   &src_offset, &dst_obj, &dst_offset, &size))
    return NULL;
  NrtTensorObject *src, *dst;
  if (spike_check_non_negative("src_offset", src_offset) < 0 ||
      spike_check_non_negative("dst_offset", dst_offset) < 0 ||
      spike_check_non_negative("size", size) < 0 ||
      spike_check_open(self) < 0 || spike_tensor_arg(src_obj, "src", &src) < 0 ||
      spike_tensor_arg(dst_obj, "dst", &dst) < 0 ||
      spike_check_bounds(src, "copy source", (uint64_t)src_offset, (uint64_t)size) < 0 ||
      spike_check_bounds(dst, "copy destination", (uint64_t)dst_offset, (uint64_t)size) < 0)
    return NULL;
  CopyArgs c = {.op = OP_COPY, .a = src->tensor, .b = dst->tensor,
                .a_offset = (uint64_t)src_offset, .b_offset = (uint64_t)dst_offset,
                .size = (uint64_t)size};
  return copy_nogil(self->ctx, &c);
}

PyObject *spike_tensor_memset(SpikeObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"tensor", "value", "offset", "size", NULL};
  PyObject *arg;
  long long value, offset = 0, size = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "OL|LL:tensor_memset", kwlist, &arg, &value,
                                   &offset, &size))
    return NULL;
  NrtTensorObject *tensor;
  if (check_byte_value(value) < 0 || spike_check_non_negative("offset", offset) < 0 ||
      spike_check_non_negative("size", size) < 0 || spike_check_open(self) < 0 ||
      spike_tensor_arg(arg, "tensor", &tensor) < 0)
    return NULL;
  uint64_t off = (uint64_t)offset, len = (uint64_t)size;
  if (len == 0 && off <= tensor->size) len = tensor->size - off;
  if (spike_check_bounds(tensor, "memset", off, len) < 0) return NULL;
  CopyArgs c = {.op = OP_MEMSET, .a = tensor->tensor, .value = (int)value, .a_offset = off,
                .size = len};
  return copy_nogil(self->ctx, &c);
}

/* Host bytes that `rows` rows of `row_bytes` at `pitch` span; -1 when that
 * overflows (the runtime then reports it). */
static int host_extent(uint64_t pitch, uint64_t row_bytes, uint64_t rows, uint64_t *out) {
  *out = 0;
  if (!rows || !row_bytes) return 0;
  if (pitch && rows - 1 > (UINT64_MAX - row_bytes) / pitch) return -1;
  *out = (rows - 1) * pitch + row_bytes;
  return 0;
}

/* The host side of a 2-D copy: the buffer must hold its rows. A destination
 * whose pitch is below row_bytes is left to the runtime's check. */
static int check_host_2d(Py_buffer *view, const char *pitch_name, uint64_t pitch,
                         uint64_t row_bytes, uint64_t rows, int is_dst) {
  uint64_t need;
  if (host_extent(pitch, row_bytes, rows, &need) < 0) return 0;
  if (is_dst && rows > 1 && pitch < row_bytes) return 0;
  if (need > (uint64_t)view->len) {
    PyErr_Format(PyExc_ValueError,
                 "buffer of %zd bytes is too small: %llu rows of %llu bytes at %s %llu need "
                 "%llu bytes",
                 view->len, (unsigned long long)rows, (unsigned long long)row_bytes, pitch_name,
                 (unsigned long long)pitch, (unsigned long long)need);
    return -1;
  }
  return 0;
}

/* Parses an optional pitch: None gives `fallback`. */
static int pitch_arg(PyObject *obj, const char *what, long long fallback, long long *out) {
  if (!obj || obj == Py_None) {
    *out = fallback;
    return 0;
  }
  if (!PyLong_Check(obj) || PyBool_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "%s must be an int or None, got %s", what,
                 Py_TYPE(obj)->tp_name);
    return -1;
  }
  *out = PyLong_AsLongLong(obj);
  if (*out == -1 && PyErr_Occurred()) return -1;
  return spike_check_non_negative(what, *out);
}

PyObject *spike_tensor_write_2d(SpikeObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"tensor", "buffer", "dst_offset", "dst_pitch", "row_bytes", "rows",
                           "src_pitch", NULL};
  PyObject *arg, *buffer, *src_pitch_obj = Py_None;
  long long dst_offset, dst_pitch, row_bytes, rows, src_pitch;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOLLLL|O:tensor_write_2d", kwlist, &arg, &buffer,
                                   &dst_offset, &dst_pitch, &row_bytes, &rows, &src_pitch_obj))
    return NULL;
  NrtTensorObject *tensor;
  if (spike_check_non_negative("dst_offset", dst_offset) < 0 ||
      spike_check_non_negative("dst_pitch", dst_pitch) < 0 ||
      spike_check_non_negative("row_bytes", row_bytes) < 0 ||
      spike_check_non_negative("rows", rows) < 0 ||
      pitch_arg(src_pitch_obj, "src_pitch", row_bytes, &src_pitch) < 0 ||
      spike_check_open(self) < 0 || spike_tensor_arg(arg, "tensor", &tensor) < 0)
    return NULL;
  Py_buffer view;
  if (spike_get_contiguous_buffer(buffer, &view, 0) < 0) return NULL;
  PyObject *result = NULL;
  if (check_host_2d(&view, "src_pitch", (uint64_t)src_pitch, (uint64_t)row_bytes,
                    (uint64_t)rows, 0) == 0) {
    CopyArgs c = {.op = OP_WRITE_2D, .a = tensor->tensor, .host = view.buf,
                  .host_pitch = (uint64_t)src_pitch, .a_offset = (uint64_t)dst_offset,
                  .a_pitch = (uint64_t)dst_pitch, .row_bytes = (uint64_t)row_bytes,
                  .rows = (uint64_t)rows};
    result = copy_nogil(self->ctx, &c);
  }
  PyBuffer_Release(&view);
  return result;
}

PyObject *spike_tensor_read_2d(SpikeObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"tensor", "buffer", "src_offset", "src_pitch", "row_bytes", "rows",
                           "dst_pitch", NULL};
  PyObject *arg, *buffer, *dst_pitch_obj = Py_None;
  long long src_offset, src_pitch, row_bytes, rows, dst_pitch;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOLLLL|O:tensor_read_2d", kwlist, &arg, &buffer,
                                   &src_offset, &src_pitch, &row_bytes, &rows, &dst_pitch_obj))
    return NULL;
  NrtTensorObject *tensor;
  if (spike_check_non_negative("src_offset", src_offset) < 0 ||
      spike_check_non_negative("src_pitch", src_pitch) < 0 ||
      spike_check_non_negative("row_bytes", row_bytes) < 0 ||
      spike_check_non_negative("rows", rows) < 0 ||
      pitch_arg(dst_pitch_obj, "dst_pitch", row_bytes, &dst_pitch) < 0 ||
      spike_check_open(self) < 0 || spike_tensor_arg(arg, "tensor", &tensor) < 0)
    return NULL;
  Py_buffer view;
  if (spike_get_contiguous_buffer(buffer, &view, 1) < 0) return NULL;
  PyObject *result = NULL;
  if (check_host_2d(&view, "dst_pitch", (uint64_t)dst_pitch, (uint64_t)row_bytes,
                    (uint64_t)rows, 1) == 0) {
    CopyArgs c = {.op = OP_READ_2D, .a = tensor->tensor, .host = view.buf,
                  .host_pitch = (uint64_t)dst_pitch, .a_offset = (uint64_t)src_offset,
                  .a_pitch = (uint64_t)src_pitch, .row_bytes = (uint64_t)row_bytes,
                  .rows = (uint64_t)rows};
    result = copy_nogil(self->ctx, &c);
  }
  PyBuffer_Release(&view);
  return result;
}

PyObject *spike_tensor_copy_2d(SpikeObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"src", "src_offset", "src_pitch", "dst", "dst_offset", "dst_pitch",
                           "row_bytes", "rows", NULL};
  PyObject *src_obj, *dst_obj;
  long long src_offset, src_pitch, dst_offset, dst_pitch, row_bytes, rows;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "OLLOLLLL:tensor_copy_2d", kwlist, &src_obj,
                                   &src_offset, &src_pitch, &dst_obj, &dst_offset, &dst_pitch,
                                   &row_bytes, &rows))
    return NULL;
  NrtTensorObject *src, *dst;
  if (spike_check_non_negative("src_offset", src_offset) < 0 ||
      spike_check_non_negative("src_pitch", src_pitch) < 0 ||
      spike_check_non_negative("dst_offset", dst_offset) < 0 ||
      spike_check_non_negative("dst_pitch", dst_pitch) < 0 ||
      spike_check_non_negative("row_bytes", row_bytes) < 0 ||
      spike_check_non_negative("rows", rows) < 0 ||
      spike_check_open(self) < 0 || spike_tensor_arg(src_obj, "src", &src) < 0 ||
      spike_tensor_arg(dst_obj, "dst", &dst) < 0)
    return NULL;
  CopyArgs c = {.op = OP_COPY_2D, .a = src->tensor, .b = dst->tensor,
                .a_offset = (uint64_t)src_offset, .a_pitch = (uint64_t)src_pitch,
                .b_offset = (uint64_t)dst_offset, .b_pitch = (uint64_t)dst_pitch,
                .row_bytes = (uint64_t)row_bytes, .rows = (uint64_t)rows};
  return copy_nogil(self->ctx, &c);
}

PyObject *spike_tensor_memset_2d(SpikeObject *self, PyObject *args, PyObject *kwds) {
  static char *kwlist[] = {"tensor", "value", "offset", "pitch", "row_bytes", "rows", NULL};
  PyObject *arg;
  long long value, offset, pitch, row_bytes, rows;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "OLLLLL:tensor_memset_2d", kwlist, &arg, &value,
                                   &offset, &pitch, &row_bytes, &rows))
    return NULL;
  NrtTensorObject *tensor;
  if (check_byte_value(value) < 0 || spike_check_non_negative("offset", offset) < 0 ||
      spike_check_non_negative("pitch", pitch) < 0 ||
      spike_check_non_negative("row_bytes", row_bytes) < 0 ||
      spike_check_non_negative("rows", rows) < 0 || spike_check_open(self) < 0 ||
      spike_tensor_arg(arg, "tensor", &tensor) < 0)
    return NULL;
  CopyArgs c = {.op = OP_MEMSET_2D, .a = tensor->tensor, .value = (int)value,
                .a_offset = (uint64_t)offset, .a_pitch = (uint64_t)pitch,
                .row_bytes = (uint64_t)row_bytes, .rows = (uint64_t)rows};
  return copy_nogil(self->ctx, &c);
}
