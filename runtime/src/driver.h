/* driver.h - the device driver table (driver_cpu.c is the one driver).
 * Not installed; not part of the API. */
#ifndef NKRT_DRIVER_H
#define NKRT_DRIVER_H

#include "base.h"

/* ---- the CPU driver (driver_cpu.c) -------------------------------------
 * What differs per device kind sits behind this table, so a CUDA driver can
 * be added without touching the core. */
typedef struct nkrt_driver {
  const char *name;
  /* Reserves `bytes` of device memory; returns its host-visible base. */
  nkrt_status_t (*mem_reserve)(uint32_t core, uint64_t bytes, uint8_t **out_base);
  void (*mem_release)(uint8_t *base, uint64_t bytes);
  /* Maps an executable image (NEFF bytes) and returns an opaque handle. */
  nkrt_status_t (*image_load)(const void *bytes, size_t size, const char *label, void **out_image);
  void *(*image_symbol)(void *image, const char *symbol);
  void (*image_unload)(void *image);
  /* Copies between host and device memory (both host-visible here). */
  void (*copy)(void *dst, const void *src, uint64_t size);
  /* Whether kernels run where host memory is directly addressable, so that
   * nkrt_execute_host may hand them host addresses (true for the CPU driver;
   * a discrete accelerator's driver sets false). */
  bool host_addressable;
} nkrt_driver_t;

extern const nkrt_driver_t nkrt_cpu_driver;

#endif /* NKRT_DRIVER_H */
