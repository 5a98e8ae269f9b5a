/* half.h - float16 / bfloat16 to and from float32 (round to nearest even),
 * the runtime's one implementation: GEMM panels (gemm.c), the collectives'
 * reductions (comm.c). Written without branches, so that loops over arrays
 * vectorise. Not installed; not part of the API. */
#ifndef NKRT_HALF_H
#define NKRT_HALF_H

#include <stdint.h>
#include <string.h>

static inline float nkrt_bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline uint32_t nkrt_float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static inline float nkrt_bf16_to_float(uint16_t h) { return nkrt_bits_float((uint32_t)h << 16); }

/* A NaN stays a NaN of the same sign (its quiet bit set). */
static inline uint16_t nkrt_float_to_bf16(float f) {
  uint32_t x = nkrt_float_bits(f);
  uint32_t nan = (x >> 16) | 0x40, rne = (x + 0x7fff + ((x >> 16) & 1)) >> 16;
  return (uint16_t)((x & 0x7fffffff) > 0x7f800000 ? nan : rne);
}

static inline float nkrt_half_to_float(uint16_t h) {
  uint32_t em = h & 0x7fffu, sign = (uint32_t)(h & 0x8000u) << 16;
  /* normal, infinity, NaN: move the exponent (31 becomes 255) */
  uint32_t wide = (em << 13) + (112u << 23) + ((em >> 10) == 31 ? 112u << 23 : 0);
  /* zero, subnormal: em * 2^-24, exact */
  uint32_t sub = nkrt_float_bits((float)(int32_t)em * 0x1p-24f);
  return nkrt_bits_float(((em >> 10) == 0 ? sub : wide) | sign);
}

/* A NaN becomes the quiet NaN 0x7e00 of its sign; past 65520, infinity. */
static inline uint16_t nkrt_float_to_half(float f) {
  uint32_t x = nkrt_float_bits(f), sign = (x >> 16) & 0x8000u;
  x &= 0x7fffffffu;
  uint32_t big = x > 0x7f800000u ? 0x7e00u : 0x7c00u; /* NaN, else overflow */
  uint32_t magic = 126u << 23;                        /* 0.5: ulp 2^-24 */
  uint32_t small = nkrt_float_bits(nkrt_bits_float(x) + nkrt_bits_float(magic)) - magic;
  uint32_t normal = (x + ((uint32_t)(15 - 127) << 23) + 0xfffu + ((x >> 13) & 1)) >> 13;
  uint32_t h = x >= (143u << 23) ? big : x < (113u << 23) ? small : normal;
  return (uint16_t)(h | sign);
}

#endif /* NKRT_HALF_H */
