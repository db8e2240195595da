// The module map for call stacks: which loaded ELF object (path, GNU build
// id, load bias, executable extent) each recorded pc falls in, written to the
// trace as Module packets the first time a written stack needs the module, so
// that the analyzer can symbolize after the run. No symbolization here.
//
// Contract: thread-safe, no malloc, bounded (kMaxModules entries, a fixed
// path arena). Modules are found with dl_iterate_phdr, only when a pc misses
// the cached map and the loader reports a change (dlopen/dlclose counters).
#pragma once

#include <cstddef>
#include <cstdint>

namespace pinscope::shim::modules {

constexpr size_t kMaxModules = 4096;

// Scans the loaded modules and finds the one holding `self` (an address in
// the shim's code). Idempotent; false if the tables cannot be mapped.
bool Init(const void* self);

// True when pc is in the shim's own code and the shim is a separate shared
// object (libpinscope.so). False when the shim is linked into the main
// program (tests, benchmarks): there the frames to drop are found otherwise.
bool InShim(uint64_t pc);

// For each return address in pcs, writes the Module packet of the module it
// falls in if this trace file lacks it. Addresses in no module (JIT code)
// are skipped.
void EnsureWritten(const uint64_t* pcs, size_t n, uint64_t ts);

// fork(): forgets a lock a vanished thread may hold. (Written-marks are reset
// through intern::ResetInChild.)
void ResetInChild();

// For tests: the module holding addr (a code address, not a return address).
struct Info {
  const char* path;
  const char* build_id;  // hex, "" if none
  uint64_t load_address, start, end;
};
bool Find(uint64_t addr, Info* out);

}  // namespace pinscope::shim::modules
