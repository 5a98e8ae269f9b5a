/* fuzz_neff_desc.c - libFuzzer target: NEFF descriptor validation.
 *
 * A NEFF describes itself with an nkrt_neff_desc_t (nkrt/neff_abi.h) that the
 * loader validates before anything uses it. This target builds a descriptor
 * from the fuzz input -- counts, dtypes, ranks, extents, byte sizes, names,
 * aliases, scratch size, with NULL pointers chosen by flag bits -- and loads
 * it through the public nkrt_model_load, the path a real NEFF takes. Only the
 * driver's image calls are replaced (runtime.h's driver table: a stand-in
 * whose "shared object" exports a query function returning the fuzzed
 * descriptor), so no dlopen runs; validation, naming, the scratch allocation
 * and the model's release are the runtime's own.
 *
 * Properties checked besides the sanitizers: a descriptor the loader accepts
 * satisfies every rule later code relies on (checked here independently), a
 * refused one comes back with a message and a documented code, and the
 * loaded model reports what the descriptor says.
 *
 * Input layout (all little-endian; missing bytes read as zero): see
 * runtime/fuzz/README.md. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "nkrt/neff_abi.h"
#include "nkrt/nkrt.h"
#include "runtime.h" /* module-private: the driver table of the runtime */

#define FZ_MAX_TEMPLATES 6u   /* tensors described by the input, per table */
#define FZ_MAX_TABLE 4400u    /* entries allocated per table (counts may exceed 4096) */

static nkrt_runtime_t *g_rt;
static const nkrt_neff_desc_t *g_desc;
static bool g_no_entry; /* the image exports no entry point */
static nkrt_driver_t g_driver;
static int g_image; /* the stand-in image handle points here */

static const nkrt_neff_desc_t *fake_query(uint32_t runtime_abi_version) {
  (void)runtime_abi_version;
  return g_desc;
}

static nkrt_status_t fake_image_load(const void *bytes, size_t size, const char *label,
                                     void **out_image) {
  (void)bytes, (void)size, (void)label;
  *out_image = &g_image;
  return NULL;
}

static void *fake_image_symbol(void *image, const char *symbol) {
  if (image != &g_image) fz_fail("image_symbol called with a handle the driver never gave");
  return !g_no_entry && strcmp(symbol, NKRT_NEFF_ENTRY) == 0 ? (void *)fake_query : NULL;
}

static void fake_image_unload(void *image) {
  if (image != &g_image) fz_fail("image_unload called with a handle the driver never gave");
}

static int fake_kernel(const nkrt_kernel_env_t *env, void *const *in, void *const *out) {
  (void)env, (void)in, (void)out;
  return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  nkrt_options_t o;
  nkrt_options_init(&o);
  o.visible_cores = "0";
  o.core_memory_bytes = 1ull << 20; /* small: scratch requests above it must fail cleanly */
  o.num_workers = 1;
  nkrt_status_t st = nkrt_runtime_create(&o, &g_rt);
  if (st) {
    fprintf(stderr, "fuzz_neff_desc: cannot create the runtime: %s\n", nkrt_status_message(st));
    abort();
  }
  g_driver = *g_rt->driver;
  g_driver.image_load = fake_image_load;
  g_driver.image_symbol = fake_image_symbol;
  g_driver.image_unload = fake_image_unload;
  g_rt->driver = &g_driver;
  return 0;
}

typedef struct {
  nkrt_neff_tensor_t t;
  char *name;
  int64_t *shape;
} fz_tensor_t;

/* One tensor description off the input. */
static void read_tensor(fz_reader_t *r, fz_tensor_t *ft) {
  memset(ft, 0, sizeof(*ft));
  uint8_t flags = fz_u8(r);
  /* names: mostly short, sometimes around the 255-byte limit */
  size_t len = (flags & 0x40) ? 250u + fz_u8(r) % 12u : fz_u8(r) % 8u;
  ft->name = fz_str(r, len);
  ft->t.name = (flags & 0x01) ? NULL : ft->name;
  ft->t.dtype = (flags & 0x02) ? fz_u32(r) : fz_u8(r) % 16u;
  ft->t.ndim = (flags & 0x04) ? fz_u8(r) : fz_u8(r) % 10u;
  /* the table always holds ndim extents, so a validator that reads them in a
   * different order than today's stays inside the allocation */
  ft->shape = calloc(ft->t.ndim ? ft->t.ndim : 1, sizeof(int64_t));
  if (!ft->shape) abort();
  for (uint32_t k = 0; k < ft->t.ndim; k++) {
    uint8_t b = fz_u8(r);
    ft->shape[k] = (b & 0x80) ? (int64_t)fz_u64(r) : (int64_t)(b & 0x7f);
  }
  ft->t.shape = (flags & 0x08) ? NULL : ft->shape;
  if (flags & 0x10) {
    ft->t.size = fz_u64(r);
  } else { /* the consistent size, wrapping on overflow like a careless NEFF would */
    uint64_t n = nkrt_dtype_size(ft->t.dtype);
    for (uint32_t k = 0; k < ft->t.ndim; k++) n *= (uint64_t)ft->shape[k];
    ft->t.size = n;
  }
  ft->t.alias_input = (flags & 0x20) ? (int32_t)fz_u32(r) : (int32_t)(int8_t)fz_u8(r);
}

static bool valid_tensor(const nkrt_neff_tensor_t *t) {
  if (!t->name || !t->name[0] || strlen(t->name) > NKRT_NEFF_MAX_NAME) return false;
  if (t->dtype == NKRT_DTYPE_INVALID || t->dtype >= NKRT_DTYPE_COUNT_) return false;
  if (t->ndim > NKRT_NEFF_MAX_RANK || (t->ndim && !t->shape)) return false;
  uint64_t n = nkrt_dtype_size(t->dtype);
  for (uint32_t k = 0; k < t->ndim; k++) {
    if (t->shape[k] < 0) return false;
    if (__builtin_mul_overflow(n, (uint64_t)t->shape[k], &n)) return false;
  }
  return n == t->size;
}

/* What the rest of the runtime relies on in an accepted descriptor. */
static void check_accepted(const nkrt_neff_desc_t *d) {
  if (d->abi_version < NKRT_NEFF_ABI_MIN_VERSION || d->abi_version > NKRT_NEFF_ABI_VERSION)
    fz_fail("accepted a descriptor of ABI version %u", d->abi_version);
  if (d->struct_size < sizeof(*d)) fz_fail("accepted struct_size %u", d->struct_size);
  if (!d->name || !d->name[0]) fz_fail("accepted a descriptor without a name");
  if (!d->kernel) fz_fail("accepted a descriptor without a kernel");
  if ((d->num_inputs && !d->inputs) || (d->num_outputs && !d->outputs))
    fz_fail("accepted a descriptor without its tensor tables");
  for (uint32_t i = 0; i < d->num_inputs; i++)
    if (!valid_tensor(&d->inputs[i])) fz_fail("accepted invalid input %u", i);
  for (uint32_t i = 0; i < d->num_outputs; i++) {
    const nkrt_neff_tensor_t *o = &d->outputs[i];
    if (!valid_tensor(o)) fz_fail("accepted invalid output %u", i);
    if (o->alias_input < -1 || o->alias_input >= (int64_t)d->num_inputs)
      fz_fail("accepted output %u aliasing input %d of %u", i, o->alias_input, d->num_inputs);
    if (o->alias_input >= 0 && d->inputs[o->alias_input].size != o->size)
      fz_fail("accepted output %u aliasing an input of another size", i);
  }
  for (uint32_t i = 0; i < d->num_inputs; i++)
    for (uint32_t j = i + 1; j < d->num_inputs; j++)
      if (!strcmp(d->inputs[i].name, d->inputs[j].name))
        fz_fail("accepted inputs %u and %u both named '%s'", i, j, d->inputs[i].name);
  for (uint32_t i = 0; i < d->num_outputs; i++) {
    for (uint32_t j = i + 1; j < d->num_outputs; j++)
      if (!strcmp(d->outputs[i].name, d->outputs[j].name))
        fz_fail("accepted outputs %u and %u both named '%s'", i, j, d->outputs[i].name);
    for (uint32_t j = 0; j < d->num_inputs; j++)
      if (!strcmp(d->outputs[i].name, d->inputs[j].name) && d->outputs[i].alias_input != (int32_t)j)
        fz_fail("accepted output %u named like input %u it does not alias", i, j);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_reader_t r = {data, size};
  uint8_t flags = fz_u8(&r);
  nkrt_neff_desc_t d;
  memset(&d, 0, sizeof(d));
  d.struct_size = (flags & 0x01) ? fz_u32(&r) : (uint32_t)sizeof(d);
  d.abi_version = (flags & 0x02) ? fz_u32(&r) : NKRT_NEFF_ABI_VERSION;
  char *model_name = fz_str(&r, (flags & 0x04) ? fz_u16(&r) % 600u : fz_u8(&r) % 8u);
  d.name = (flags & 0x08) ? NULL : model_name;
  d.kernel = (flags & 0x10) ? NULL : fake_kernel;
  d.scratch_bytes = (flags & 0x20) ? fz_u64(&r) : fz_u8(&r) * 64u;
  /* counts: usually the number of tensors described; with flag 0x40, any
   * count up to FZ_MAX_TABLE (tables repeat the described tensors) */
  uint8_t nt_in = fz_u8(&r) % (FZ_MAX_TEMPLATES + 1), nt_out = fz_u8(&r) % (FZ_MAX_TEMPLATES + 1);
  uint32_t n_in = nt_in, n_out = nt_out;
  if (flags & 0x40) {
    n_in = fz_u16(&r) % FZ_MAX_TABLE;
    n_out = fz_u16(&r) % FZ_MAX_TABLE;
  }
  /* bit 0: inputs table NULL, bit 1: outputs table NULL, bit 2: the entry
   * point returns NULL, bit 3: no entry point, bit 4: load on core 1 (not
   * visible), bit 5: rank and world size follow (two i8) */
  uint8_t nulls = fz_u8(&r);
  int32_t rank = 0, world = 1;
  if (nulls & 0x20) {
    rank = (int8_t)fz_u8(&r);
    world = (int8_t)fz_u8(&r);
  }
  fz_tensor_t tin[FZ_MAX_TEMPLATES], tout[FZ_MAX_TEMPLATES];
  for (uint32_t i = 0; i < nt_in; i++) read_tensor(&r, &tin[i]);
  for (uint32_t i = 0; i < nt_out; i++) read_tensor(&r, &tout[i]);

  /* the tables: exactly the declared count of entries, templates repeated
   * (no templates: zeroed entries, which are invalid) */
  nkrt_neff_tensor_t *ins = calloc(n_in ? n_in : 1, sizeof(*ins));
  nkrt_neff_tensor_t *outs = calloc(n_out ? n_out : 1, sizeof(*outs));
  if (!ins || !outs) abort();
  for (uint32_t i = 0; i < n_in && nt_in; i++) ins[i] = tin[i % nt_in].t;
  for (uint32_t i = 0; i < n_out && nt_out; i++) outs[i] = tout[i % nt_out].t;
  d.num_inputs = n_in;
  d.num_outputs = n_out;
  d.inputs = (nulls & 1) ? NULL : ins;
  d.outputs = (nulls & 2) ? NULL : outs;

  g_desc = (nulls & 0x04) ? NULL : &d;
  g_no_entry = (nulls & 0x08) != 0;
  static const unsigned char image[64] = {0x7f, 'E', 'L', 'F'};
  nkrt_load_options_t lo;
  nkrt_load_options_init(&lo);
  if (flags & 0x80) lo.name = "fuzz";
  lo.rank = rank;
  lo.world_size = world;
  nkrt_model_t *m = NULL;
  nkrt_status_t st =
      nkrt_model_load(g_rt, image, sizeof(image), (nulls & 0x10) ? 1 : 0, &lo, &m);
  if (st) {
    if (m) fz_fail("nkrt_model_load failed but returned a model");
    fz_check_error(st, "nkrt_model_load");
  } else {
    if (!m) fz_fail("nkrt_model_load succeeded without a model");
    if (nulls & 0x1c) fz_fail("loaded a NEFF without a descriptor, entry point or visible core");
    if (world < 1 || rank < 0 || rank >= world)
      fz_fail("loaded as rank %d of world size %d", rank, world);
    int32_t got_rank = -7, got_world = -7;
    nkrt_model_collectives(m, NULL, &got_rank, &got_world);
    if (got_rank != rank || got_world != world) fz_fail("collective parameters differ");
    check_accepted(&d);
    if (nkrt_model_input_count(m) != d.num_inputs || nkrt_model_output_count(m) != d.num_outputs)
      fz_fail("the model's tensor counts differ from its descriptor");
    for (uint32_t i = 0; i < d.num_outputs; i++)
      if (nkrt_model_output(m, i) != &d.outputs[i]) fz_fail("output %u is not the descriptor's", i);
    if (nkrt_model_input(m, d.num_inputs) || nkrt_model_output(m, d.num_outputs))
      fz_fail("a tensor index past the end gave a tensor");
    const char *name = nkrt_model_name(m);
    if (!name || !name[0] || strlen(name) > NKRT_NEFF_MAX_NAME)
      fz_fail("model name of %zu bytes", name ? strlen(name) : 0);
    if (nkrt_model_scratch_bytes(m) != d.scratch_bytes) fz_fail("scratch size differs");
    nkrt_model_release(m);
  }
  g_desc = NULL;
  free(ins);
  free(outs);
  for (uint32_t i = 0; i < nt_in; i++) free(tin[i].name), free(tin[i].shape);
  for (uint32_t i = 0; i < nt_out; i++) free(tout[i].name), free(tout[i].shape);
  free(model_name);
  return 0;
}
