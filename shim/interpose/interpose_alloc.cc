// Exported malloc-family hooks: each one is the inline entry point of
// alloc_core.h (a compare and a tail call to glibc for sizes that are not
// recorded), nothing else. Defined under C++ names with asm labels, so the C
// library headers' prototypes (whose exception specifications vary between
// glibc versions) never clash with ours, as in interpose_cuda.cc.
#include <link.h>

#include <cstddef>

#include "shim/core/alloc_core.h"
#include "shim/process/process.h"
#include "shim/record/recorder.h"

#define PINSCOPE_EXPORT extern "C" __attribute__((visibility("default")))

namespace a = pinscope::shim::alloc;

PINSCOPE_EXPORT void* ps_malloc(size_t n) __asm__("malloc");
PINSCOPE_EXPORT void* ps_calloc(size_t nmemb, size_t size) __asm__("calloc");
PINSCOPE_EXPORT void* ps_realloc(void* p, size_t n) __asm__("realloc");
PINSCOPE_EXPORT void* ps_reallocarray(void* p, size_t nmemb, size_t size) __asm__("reallocarray");
PINSCOPE_EXPORT void ps_free(void* p) __asm__("free");
PINSCOPE_EXPORT void ps_cfree(void* p) __asm__("cfree");
PINSCOPE_EXPORT int ps_posix_memalign(void** out, size_t alignment,
                                      size_t n) __asm__("posix_memalign");
PINSCOPE_EXPORT void* ps_aligned_alloc(size_t alignment, size_t n) __asm__("aligned_alloc");
PINSCOPE_EXPORT void* ps_memalign(size_t alignment, size_t n) __asm__("memalign");
PINSCOPE_EXPORT void* ps_valloc(size_t n) __asm__("valloc");
PINSCOPE_EXPORT void* ps_pvalloc(size_t n) __asm__("pvalloc");
PINSCOPE_EXPORT size_t ps_malloc_usable_size(void* p) __asm__("malloc_usable_size");

// The caller's address (read only on the slow path) tells the program's
// calls from libpinscope.so's own.
#define PS_CALLER __builtin_return_address(0)

void* ps_malloc(size_t n) { return a::Malloc(n, PS_CALLER); }
void* ps_calloc(size_t nmemb, size_t size) { return a::Calloc(nmemb, size, PS_CALLER); }
void* ps_realloc(void* p, size_t n) { return a::Realloc(p, n, PS_CALLER); }
void* ps_reallocarray(void* p, size_t nmemb, size_t size) {
  return a::Reallocarray(p, nmemb, size, PS_CALLER);
}
void ps_free(void* p) { a::Free(p); }
void ps_cfree(void* p) { a::Free(p); }
int ps_posix_memalign(void** out, size_t alignment, size_t n) {
  return a::PosixMemalign(out, alignment, n, PS_CALLER);
}
void* ps_aligned_alloc(size_t alignment, size_t n) {
  return a::AlignedAlloc(alignment, n, PS_CALLER);
}
void* ps_memalign(size_t alignment, size_t n) { return a::Memalign(alignment, n, PS_CALLER); }
void* ps_valloc(size_t n) { return a::Valloc(n, PS_CALLER); }
void* ps_pvalloc(size_t n) { return a::Pvalloc(n, PS_CALLER); }
size_t ps_malloc_usable_size(void* p) { return a::UsableSize(p); }

namespace {

// This library's executable segment, from its own program headers.
int FindText(dl_phdr_info* info, size_t, void* out) {
  auto* range = static_cast<uintptr_t*>(out);
  uintptr_t self = reinterpret_cast<uintptr_t>(&FindText);
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
    uintptr_t begin = info->dlpi_addr + ph.p_vaddr, end = begin + ph.p_memsz;
    if (self >= begin && self < end) {
      range[0] = begin;
      range[1] = end;
      return 1;
    }
  }
  return 0;
}

// Until this runs every call passes straight through (the thresholds start
// at SIZE_MAX). InitProcess is idempotent: whichever constructor of the
// library runs first reads the configuration.
__attribute__((constructor)) void InitAllocHooks() {
  uintptr_t range[2] = {0, 0};
  dl_iterate_phdr(FindText, range);
  a::SetShimText(range[0], range[1]);
  pinscope::shim::InitProcess();
  a::InitAlloc();
}
}  // namespace
