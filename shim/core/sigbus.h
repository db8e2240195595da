// SIGBUS inside a recorded shared-memory mapping: one clear diagnosis on
// stderr and in the trace ("/dev/shm is full: ..."), then the signal takes
// its original course (the program's previous handler, else the default
// action). The handler is installed lazily, when a process records its first
// shm mapping, with SA_SIGINFO|SA_ONSTACK, keeping the previous action.
// pinscope does not hook sigaction: a handler the program installs later
// replaces ours (docs/host-memory.md).
#pragma once

#include <signal.h>

#include <cstddef>
#include <cstdint>

namespace pinscope::shim {

// Installs the handler once per process (again in a forked child, whose
// handler a library such as torch's worker code may have replaced).
// Lock-free; cheap after the first call.
void EnsureSigbusHandler();

// The handler (exposed for tests). Async-signal-safe: write(2), statfs,
// kill(pid, 0), sigaction and try-locks only.
void SigbusHandler(int sig, siginfo_t* info, void* ctx);

// Formats the diagnosis for a fault at `address` as the handler would;
// returns 0 if the address is in no recorded mapping. For tests.
size_t FormatSigbusDiagnosis(uint64_t address, char* buf, size_t cap);

}  // namespace pinscope::shim
