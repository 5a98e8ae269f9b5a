/* nkrt/nkrt.h - the whole nkrt C API: the device runtime of the NKIPy stack.
 * See docs/runtime.md for a tour. */
#ifndef NKRT_NKRT_H
#define NKRT_NKRT_H
#include "nkrt/status.h"
#include "nkrt/runtime.h"
#include "nkrt/neff_abi.h"
#include "nkrt/tensor.h"
#include "nkrt/model.h"
#include "nkrt/exec.h"
#include "nkrt/trace.h"
#include "nkrt/comm.h"
#endif
