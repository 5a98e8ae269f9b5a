/* comm_ref.h - reference results for the collectives tests: every rank's
 * inputs from a formula, and what each collective must give (exact: the
 * inputs are small integers, so floats add and multiply exactly). */
#ifndef NKRT_TEST_COMM_REF_H
#define NKRT_TEST_COMM_REF_H

#include <stdint.h>
#include <string.h>

#include "half.h"
#include "nkrt/neff_abi.h"
#include "nkrt/tensor.h"

static const uint32_t ref_dtypes[] = {
    NKRT_DTYPE_FLOAT32, NKRT_DTYPE_BFLOAT16, NKRT_DTYPE_FLOAT16, NKRT_DTYPE_INT8,
    NKRT_DTYPE_UINT8,   NKRT_DTYPE_INT16,    NKRT_DTYPE_UINT16, NKRT_DTYPE_INT32,
    NKRT_DTYPE_UINT32,  NKRT_DTYPE_INT64,    NKRT_DTYPE_BOOL};
enum { REF_NDTYPES = sizeof(ref_dtypes) / sizeof(ref_dtypes[0]) };

static inline int ref_is_float(uint32_t d) {
  return d == NKRT_DTYPE_FLOAT32 || d == NKRT_DTYPE_BFLOAT16 || d == NKRT_DTYPE_FLOAT16;
}

/* rank r's element i of stream `salt`: a small integer, in -3 .. 3 */
static inline int64_t ref_value(uint32_t r, int64_t i, uint32_t salt) {
  return (int64_t)((uint64_t)(i * 7 + r * 13 + salt * 5) % 7) - 3;
}

static inline void ref_store(uint32_t d, void *p, int64_t i, int64_t v) {
  switch (d) {
    case NKRT_DTYPE_FLOAT32: ((float *)p)[i] = (float)v; break;
    case NKRT_DTYPE_BFLOAT16: ((uint16_t *)p)[i] = nkrt_float_to_bf16((float)v); break;
    case NKRT_DTYPE_FLOAT16: ((uint16_t *)p)[i] = nkrt_float_to_half((float)v); break;
    case NKRT_DTYPE_INT8: case NKRT_DTYPE_UINT8: case NKRT_DTYPE_BOOL:
      ((uint8_t *)p)[i] = (uint8_t)v; break;
    case NKRT_DTYPE_INT16: case NKRT_DTYPE_UINT16: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case NKRT_DTYPE_INT32: case NKRT_DTYPE_UINT32: ((uint32_t *)p)[i] = (uint32_t)v; break;
    default: ((int64_t *)p)[i] = v; break;
  }
}

/* The stored element as a number (floats as their integer value). */
static inline int64_t ref_load(uint32_t d, const void *p, int64_t i) {
  switch (d) {
    case NKRT_DTYPE_FLOAT32: return (int64_t)((const float *)p)[i];
    case NKRT_DTYPE_BFLOAT16: return (int64_t)nkrt_bf16_to_float(((const uint16_t *)p)[i]);
    case NKRT_DTYPE_FLOAT16: return (int64_t)nkrt_half_to_float(((const uint16_t *)p)[i]);
    case NKRT_DTYPE_INT8: return ((const int8_t *)p)[i];
    case NKRT_DTYPE_UINT8: case NKRT_DTYPE_BOOL: return ((const uint8_t *)p)[i];
    case NKRT_DTYPE_INT16: return ((const int16_t *)p)[i];
    case NKRT_DTYPE_UINT16: return ((const uint16_t *)p)[i];
    case NKRT_DTYPE_INT32: return ((const int32_t *)p)[i];
    case NKRT_DTYPE_UINT32: return ((const uint32_t *)p)[i];
    default: return ((const int64_t *)p)[i];
  }
}

/* a op b on stored numbers (integers wrap: the caller truncates) */
static inline int64_t ref_combine(uint32_t d, uint32_t op, int64_t a, int64_t b) {
  if (d == NKRT_DTYPE_BOOL)
    return op == NKRT_CC_MUL || op == NKRT_CC_MIN ? (a != 0 && b != 0) : (a != 0 || b != 0);
  switch (op) {
    case NKRT_CC_MUL: return (int64_t)((uint64_t)a * (uint64_t)b);
    case NKRT_CC_MAX: return a > b ? a : b;
    case NKRT_CC_MIN: return a < b ? a : b;
    default: return (int64_t)((uint64_t)a + (uint64_t)b);
  }
}

/* Fills p[0 .. count) with rank r's elements [first, first + count). */
static inline void ref_fill(uint32_t d, void *p, uint32_t r, int64_t first, int64_t count,
                            uint32_t salt) {
  for (int64_t i = 0; i < count; i++) ref_store(d, p, i, ref_value(r, first + i, salt));
}

static inline float ref_load_f(uint32_t d, const void *p) {
  if (d == NKRT_DTYPE_FLOAT32) return *(const float *)p;
  uint16_t h;
  memcpy(&h, p, 2);
  return d == NKRT_DTYPE_BFLOAT16 ? nkrt_bf16_to_float(h) : nkrt_half_to_float(h);
}

/* The reduction over ranks[0 .. n) of element i (stored in `out` at o):
 * floats in float32, in group order (signed zeros matter). */
static inline void ref_reduce(uint32_t d, uint32_t op, const int32_t *ranks, uint32_t n,
                              int64_t i, uint32_t salt, void *out, int64_t o) {
  char tmp[8];
  if (ref_is_float(d)) {
    ref_store(d, tmp, 0, ref_value((uint32_t)ranks[0], i, salt));
    float acc = ref_load_f(d, tmp);
    for (uint32_t m = 1; m < n; m++) {
      ref_store(d, tmp, 0, ref_value((uint32_t)ranks[m], i, salt));
      float v = ref_load_f(d, tmp);
      acc = op == NKRT_CC_MUL ? acc * v : op == NKRT_CC_MAX ? (acc > v || acc != acc ? acc : v)
            : op == NKRT_CC_MIN ? (acc < v || acc != acc ? acc : v) : acc + v;
    }
    if (d == NKRT_DTYPE_FLOAT32) ((float *)out)[o] = acc;
    else if (d == NKRT_DTYPE_BFLOAT16) ((uint16_t *)out)[o] = nkrt_float_to_bf16(acc);
    else ((uint16_t *)out)[o] = nkrt_float_to_half(acc);
    return;
  }
  ref_store(d, tmp, 0, ref_value((uint32_t)ranks[0], i, salt));
  int64_t acc = ref_load(d, tmp, 0);
  if (d == NKRT_DTYPE_BOOL) acc = acc != 0;
  for (uint32_t m = 1; m < n; m++) {
    ref_store(d, tmp, 0, ref_value((uint32_t)ranks[m], i, salt));
    acc = ref_combine(d, op, acc, ref_load(d, tmp, 0));
  }
  ref_store(d, out, o, acc);
}

#endif
