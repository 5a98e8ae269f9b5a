/* driver_cpu.c - the host-CPU driver: device memory is an anonymous mapping
 * per core, executables are shared objects loaded from anonymous memory
 * files, copies are memcpy. */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "driver.h"

NKRT_MUST_USE_RESULT
static nkrt_status_t cpu_mem_reserve(uint32_t core, uint64_t bytes, uint8_t **out_base) {
  /* Address space only: pages are backed when first touched. */
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    *out_base = NULL;
    return nkrt_status_make(NKRT_RESOURCE,
                            "cannot reserve %llu bytes of device memory for core %u: %s",
                            (unsigned long long)bytes, core, strerror(errno));
  }
  *out_base = p;
  return NULL;
}

static void cpu_mem_release(uint8_t *base, uint64_t bytes) { munmap(base, bytes); }

typedef struct cpu_image {
  void *handle;
  int fd; /* kept open while loaded so /proc/self/fd/N names stay unique */
} cpu_image_t;

#if defined(__x86_64__)
#define HOST_ELF_MACHINE EM_X86_64
#elif defined(__aarch64__)
#define HOST_ELF_MACHINE EM_AARCH64
#else
#error "the CPU driver loads NEFFs on x86-64 and aarch64 hosts"
#endif

/* A readable name of an ELF e_machine value. */
static const char *elf_machine_name(unsigned machine) {
  switch (machine) {
    case EM_X86_64: return "x86-64";
    case EM_AARCH64: return "aarch64";
    case EM_386: return "i386";
    case EM_ARM: return "arm (32-bit)";
    case EM_PPC64: return "ppc64";
    case EM_S390: return "s390x";
#ifdef EM_RISCV
    case EM_RISCV: return "riscv";
#endif
    default: return NULL;
  }
}

/* Checks that the ELF headers and every loadable segment lie inside the
 * image. A truncated shared object would otherwise be mapped past the end of
 * its file, and touching that memory kills the process (SIGBUS). */
NKRT_MUST_USE_RESULT
static nkrt_status_t check_elf(const void *bytes, size_t size) {
  /* headers are copied out: the caller's bytes promise no alignment */
  Elf64_Ehdr eh;
  if (size >= sizeof(eh)) memcpy(&eh, bytes, sizeof(eh));
  if (size < sizeof(eh) || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_type != ET_DYN)
    return nkrt_status_make(NKRT_FAILURE, "not a NEFF: the image is not a 64-bit ELF shared object");
  if (eh.e_ident[EI_DATA] != ELFDATA2LSB)
    return nkrt_status_make(NKRT_FAILURE, "not a NEFF for this host: the shared object is "
                            "big-endian, this host is little-endian");
  if (eh.e_machine != HOST_ELF_MACHINE) {
    const char *built = elf_machine_name(eh.e_machine);
    if (built)
      return nkrt_status_make(NKRT_FAILURE, "not a NEFF for this host: built for %s, this host "
                              "is %s (rebuild it here)", built,
                              elf_machine_name(HOST_ELF_MACHINE));
    return nkrt_status_make(NKRT_FAILURE, "not a NEFF for this host: built for ELF machine %u, "
                            "this host is %s (rebuild it here)", eh.e_machine,
                            elf_machine_name(HOST_ELF_MACHINE));
  }
  if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phoff > size ||
      (uint64_t)eh.e_phnum * sizeof(Elf64_Phdr) > size - eh.e_phoff)
    return nkrt_status_make(NKRT_FAILURE, "not a loadable NEFF (the shared object is truncated or "
                            "corrupt): program headers lie outside its %zu bytes", size);
  for (uint32_t i = 0; i < eh.e_phnum; i++) {
    Elf64_Phdr ph;
    memcpy(&ph, (const char *)bytes + eh.e_phoff + (uint64_t)i * sizeof(ph), sizeof(ph));
    if (ph.p_type != PT_LOAD && ph.p_type != PT_DYNAMIC) continue;
    if (ph.p_offset > size || ph.p_filesz > size - ph.p_offset)
      return nkrt_status_make(NKRT_FAILURE, "not a loadable NEFF (the shared object is truncated "
                              "or corrupt): segment %u needs bytes up to %llu of %zu", i,
                              (unsigned long long)(ph.p_offset + ph.p_filesz), size);
  }
  return NULL;
}

NKRT_MUST_USE_RESULT
static nkrt_status_t cpu_image_load(const void *bytes, size_t size, const char *label,
                                    void **out_image) {
  *out_image = NULL;
  nkrt_status_t bad = check_elf(bytes, size);
  if (bad) return bad;
  int fd = memfd_create(label && *label ? label : "nkrt-neff", MFD_CLOEXEC);
  if (fd < 0)
    return nkrt_status_make(NKRT_HW_ERROR, "memfd_create failed: %s", strerror(errno));
  const char *p = bytes;
  size_t left = size;
  while (left) {
    ssize_t w = write(fd, p, left);
    if (w < 0) {
      if (errno == EINTR) continue;
      nkrt_status_t st = nkrt_status_make(NKRT_HW_ERROR, "writing the NEFF image failed: %s",
                                          strerror(errno));
      close(fd);
      return st;
    }
    p += w;
    left -= (size_t)w;
  }
  char path[64];
  snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
  void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *err = dlerror();
    /* dlerror names the /proc path; keep only the reason after it. */
    const char *why = err ? strstr(err, ": ") : NULL;
    nkrt_status_t st = nkrt_status_make(
        NKRT_FAILURE, "not a loadable NEFF (the shared object is truncated or corrupt): %s",
        why ? why + 2 : (err ? err : "unknown error"));
    close(fd);
    return st;
  }
  cpu_image_t *img = malloc(sizeof(*img));
  if (!img) {
    dlclose(handle);
    close(fd);
    return nkrt_status_make(NKRT_RESOURCE, "out of host memory loading a NEFF");
  }
  img->handle = handle;
  img->fd = fd;
  *out_image = img;
  return NULL;
}

static void *cpu_image_symbol(void *image, const char *symbol) {
  return dlsym(((cpu_image_t *)image)->handle, symbol);
}

static void cpu_image_unload(void *image) {
  cpu_image_t *img = image;
  if (!img) return;
  dlclose(img->handle);
  close(img->fd);
  free(img);
}

static void cpu_copy(void *dst, const void *src, uint64_t size) {
  if (size) memcpy(dst, src, size);
}

const nkrt_driver_t nkrt_cpu_driver = {
    .name = "cpu",
    .mem_reserve = cpu_mem_reserve,
    .mem_release = cpu_mem_release,
    .image_load = cpu_image_load,
    .image_symbol = cpu_image_symbol,
    .image_unload = cpu_image_unload,
    .copy = cpu_copy,
    .host_addressable = true,
};
