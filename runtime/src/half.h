/* half.h - float16 / bfloat16 conversions (half.c). Not installed; not part
 * of the API. */
#ifndef NKRT_HALF_H
#define NKRT_HALF_H

#include <stdint.h>

/* float16 / bfloat16 conversions (round to nearest even). */
float nkrt_half_to_float(uint16_t h);
uint16_t nkrt_float_to_half(float f);
float nkrt_bf16_to_float(uint16_t h);
uint16_t nkrt_float_to_bf16(float f);

#endif /* NKRT_HALF_H */
