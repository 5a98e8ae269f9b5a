/* fuzz_neff_elf.c - libFuzzer target: the checks nkrt_model_load makes on a
 * NEFF's bytes before they reach the system loader.
 *
 * A NEFF is a shared object: nkrt_model_load checks the length and the ELF
 * magic, then the CPU driver's image_load checks the ELF header and that
 * every loadable segment lies inside the bytes (check_elf in driver_cpu.c)
 * before writing them to a memory file and calling dlopen. dlopen of bytes
 * that pass is the system loader's business (it trusts its input: load only
 * NEFFs you trust), so this target stops there: it builds driver_cpu.c into
 * itself (check_elf is static) and installs a driver whose image_load runs
 * the real check_elf and then, instead of dlopen, hands back an image whose
 * entry point returns a fixed valid descriptor. Everything else is the
 * runtime's public path: fuzz bytes in, nkrt_model_load, release.
 *
 * Properties checked besides the sanitizers: bytes the checks pass are a
 * 64-bit ELF shared object for this host whose program headers, loadable and
 * dynamic segments lie inside the buffer (read here independently); a refusal
 * carries a message and a documented code. */
#include <elf.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "fuzz_util.h"
#include "nkrt/nkrt.h"
#include "runtime.h" /* module-private: the driver table of the runtime */

#include "driver_cpu.c" /* check_elf; this target links every runtime source but this one */

static nkrt_runtime_t *g_rt;
static nkrt_driver_t g_driver;
static int g_image;

static int fake_kernel(const nkrt_kernel_env_t *env, void *const *in, void *const *out) {
  (void)env, (void)in, (void)out;
  return 0;
}

static const int64_t k_shape[1] = {4};
static const nkrt_neff_tensor_t k_in[1] = {{"x", NKRT_DTYPE_FLOAT32, 1, k_shape, 16, -1}};
static const nkrt_neff_tensor_t k_out[1] = {{"output0", NKRT_DTYPE_FLOAT32, 1, k_shape, 16, -1}};
static const nkrt_neff_desc_t k_desc = {sizeof(nkrt_neff_desc_t), NKRT_NEFF_ABI_VERSION, "elf",
                                        1, 1, k_in, k_out, 0, fake_kernel};

static const nkrt_neff_desc_t *fake_query(uint32_t v) {
  (void)v;
  return &k_desc;
}

static size_t g_checked_size;

static nkrt_status_t checked_image_load(const void *bytes, size_t size, const char *label,
                                        void **out_image) {
  (void)label;
  *out_image = NULL;
  NKRT_RETURN_IF_ERROR(check_elf(bytes, size));
  g_checked_size = size;
  *out_image = &g_image;
  return NULL;
}

static void *fake_image_symbol(void *image, const char *symbol) {
  (void)image;
  return strcmp(symbol, NKRT_NEFF_ENTRY) == 0 ? (void *)fake_query : NULL;
}

static void fake_image_unload(void *image) { (void)image; }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc, (void)argv;
  nkrt_options_t o;
  nkrt_options_init(&o);
  o.visible_cores = "0";
  o.core_memory_bytes = 1ull << 20;
  o.num_workers = 1;
  nkrt_status_t st = nkrt_runtime_create(&o, &g_rt);
  if (st) {
    fprintf(stderr, "fuzz_neff_elf: cannot create the runtime: %s\n", nkrt_status_message(st));
    abort();
  }
  g_driver = *g_rt->driver;
  g_driver.image_load = checked_image_load;
  g_driver.image_symbol = fake_image_symbol;
  g_driver.image_unload = fake_image_unload;
  g_rt->driver = &g_driver;
  return 0;
}

/* The ELF facts a loadable NEFF must have, read with memcpy (no alignment
 * assumed). */
static void check_passed(const uint8_t *b, size_t size) {
  Elf64_Ehdr eh;
  if (size < sizeof(eh)) fz_fail("accepted %zu bytes, shorter than an ELF header", size);
  memcpy(&eh, b, sizeof(eh));
  if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0) fz_fail("accepted bytes without the ELF magic");
  if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_type != ET_DYN)
    fz_fail("accepted an ELF that is not a 64-bit shared object");
  if (eh.e_machine != EM_X86_64 && eh.e_machine != EM_AARCH64)
    fz_fail("accepted ELF machine %u", eh.e_machine);
  if (eh.e_phentsize != sizeof(Elf64_Phdr)) fz_fail("accepted e_phentsize %u", eh.e_phentsize);
  if (eh.e_phoff > size || (uint64_t)eh.e_phnum * sizeof(Elf64_Phdr) > size - eh.e_phoff)
    fz_fail("accepted program headers outside the %zu bytes", size);
  for (uint32_t i = 0; i < eh.e_phnum; i++) {
    Elf64_Phdr ph;
    memcpy(&ph, b + eh.e_phoff + (uint64_t)i * sizeof(ph), sizeof(ph));
    if (ph.p_type != PT_LOAD && ph.p_type != PT_DYNAMIC) continue;
    if (ph.p_offset > size || ph.p_filesz > size - ph.p_offset)
      fz_fail("accepted segment %u (bytes %llu + %llu) outside the %zu bytes", i,
              (unsigned long long)ph.p_offset, (unsigned long long)ph.p_filesz, size);
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  g_checked_size = (size_t)-1;
  nkrt_model_t *m = NULL;
  nkrt_status_t st = nkrt_model_load(g_rt, data, size, 0, NULL, &m);
  if (st) {
    if (m) fz_fail("nkrt_model_load failed but returned a model");
    fz_check_error(st, "nkrt_model_load");
    return 0;
  }
  if (!m) fz_fail("nkrt_model_load succeeded without a model");
  if (g_checked_size != size) fz_fail("the driver checked %zu of %zu bytes", g_checked_size, size);
  check_passed(data, size);
  nkrt_model_release(m);
  return 0;
}
