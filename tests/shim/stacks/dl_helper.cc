// Shared library for stacks_core_test: loaded with dlopen after the shim has
// started (twice, at two addresses), so that stacks pass through a module the
// start-up scan did not see.
#include <cstdint>

extern "C" __attribute__((visibility("default"), noinline)) uint64_t stacks_dl_call(
    uint64_t (*fn)()) {
  uint64_t id = fn();
  asm volatile("" ::: "memory");
  return id;
}
