/* The runtime's float16 / bfloat16 conversions (half.h) against a reference
 * computed another way, in double arithmetic: every float16 and bfloat16
 * value widened, and narrowing checked at every midpoint between neighbouring
 * values (ties go to the even one), one float either side of each, and a
 * sample of every float's bit patterns. */
#include <math.h>
#include <stdint.h>

#include "half.h"
#include "test.h"

/* float16 bits -> value, from the format's definition */
static double half_value(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
  return (h & 0x8000) ? -v : v;
}

/* Rounds |v| (finite, exact in double) to `bits` significant bits, ties to
 * even, with exponents below `emin` rounded in units of 2^(emin - bits + 1);
 * returns (biased exponent << (bits - 1)) + fraction, the format's bits
 * without the sign (overflow: the caller's). */
static uint32_t round_bits(double v, int bits, int emin, int bias) {
  v = fabs(v);
  if (v == 0) return 0;
  int ex;
  frexp(v, &ex);            /* v in [2^(ex-1), 2^ex) */
  int e = ex - 1 < emin ? emin : ex - 1;
  double u = ldexp(v, bits - 1 - e), fl = (double)(int64_t)u; /* units of the last place */
  double q = u - fl > 0.5 || (u - fl == 0.5 && ((int64_t)fl & 1)) ? fl + 1 : fl;
  uint32_t one = 1u << (bits - 1);
  if (q >= 2.0 * one) q /= 2, e++;              /* rounded up to the next binade */
  if (q < one) return (uint32_t)q;              /* subnormal (or zero) */
  return ((uint32_t)(e + bias) << (bits - 1)) + (uint32_t)q - one;
}

static uint16_t half_ref(float f) {
  uint16_t sign = signbit(f) ? 0x8000 : 0;
  if (isnan(f)) return sign | 0x7e00;
  uint32_t r = round_bits(f, 11, -14, 15);
  return (uint16_t)(sign | (isinf(f) || r >= 0x7c00 ? 0x7c00 : r));
}

static uint16_t bf16_ref(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  if (isnan(f)) return (uint16_t)((x >> 16) | 0x40);
  uint16_t sign = signbit(f) ? 0x8000 : 0;
  uint32_t r = round_bits(f, 8, -126, 127);
  return (uint16_t)(sign | (isinf(f) || r >= 0x7f80 ? 0x7f80 : r));
}

static int narrow_mismatch(float f) {
  return nkrt_float_to_half(f) != half_ref(f) || nkrt_float_to_bf16(f) != bf16_ref(f);
}

TEST(half_widening_is_exact) {
  int bad = 0;
  for (uint32_t h = 0; h < 0x10000; h++) {
    double want = half_value((uint16_t)h);
    float got = nkrt_half_to_float((uint16_t)h);
    if (isnan(want))
      bad += !isnan(got) || !!signbit(got) != !!(h & 0x8000) ||
             (nkrt_float_bits(got) & 0x7fffff) != (h & 0x3ffu) << 13;
    else
      bad += (double)got != want || !!signbit(got) != !!(h & 0x8000);
    uint32_t b = nkrt_float_bits(nkrt_bf16_to_float((uint16_t)h));
    bad += b != h << 16;
  }
  CHECK(bad == 0);
}

TEST(half_narrowing_at_every_midpoint) {
  int bad = 0;
  for (uint32_t h = 0; h < 0x7c00; h++) { /* float16: h and h + 1, both signs */
    double mid = (half_value((uint16_t)h) + half_value((uint16_t)(h + 1))) / 2;
    for (int s = 0; s < 2; s++) {
      float m = (float)(s ? -mid : mid); /* exact: 12 significant bits */
      uint32_t mb = nkrt_float_bits(m);  /* -1: toward zero, +1: away from it */
      bad += narrow_mismatch(m) + narrow_mismatch(nkrt_bits_float(mb - 1)) +
             narrow_mismatch(nkrt_bits_float(mb + 1));
    }
  }
  for (uint32_t b = 0; b < 0x7f80; b++) { /* bfloat16: the float between b and b + 1 */
    uint32_t mid = (b << 16) + 0x8000;
    for (int s = 0; s < 2; s++) {
      float m = nkrt_bits_float(mid | (s ? 0x80000000u : 0));
      bad += narrow_mismatch(m) + narrow_mismatch(nkrt_bits_float(nkrt_float_bits(m) - 1)) +
             narrow_mismatch(nkrt_bits_float(nkrt_float_bits(m) + 1));
    }
  }
  if (bad) printf("  %d midpoint conversions differ\n", bad);
  CHECK(bad == 0);
}

TEST(half_narrowing_of_sampled_floats) {
  int bad = 0;
  /* every 4099th bit pattern (a prime step: all exponents, both signs, NaNs
   * with payloads) and the special values */
  for (uint64_t x = 0; x < 0x100000000ull; x += 4099) bad += narrow_mismatch(nkrt_bits_float((uint32_t)x));
  const float special[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 65504.0f, 65519.99f,
                           65520.0f, -65520.0f, 0x1p-24f, 0x1p-25f, 0x1.8p-25f, 0x1p-149f,
                           3.3895314e38f, 3.4028235e38f};
  for (size_t i = 0; i < sizeof(special) / sizeof(special[0]); i++)
    bad += narrow_mismatch(special[i]);
  if (bad) printf("  %d sampled conversions differ\n", bad);
  CHECK(bad == 0);
}
