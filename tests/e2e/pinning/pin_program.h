// Shared helpers and the scenarios of e2e_pinning_prog (pin_program.cc has
// main). The scenarios live by group, the same groups as the checker's
// files (pinning_checks.h):
//   decisions_scenarios.cc   1-3: decisions, pageable semantics, budget
//   lifetime_scenarios.cc    4-8: invalidation, fork, the program's own
//                            register calls, threads
//   recycle_scenarios.cc     9: the recycle list
//   pin_ahead_scenarios.cc   10: pin-ahead
//   hidden_scenarios.cc      11: pinscope's registrations hidden from the program
//   fault_scenarios.cc       12: pinning's CUDA calls failing, a full budget
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstddef>
#include <string>

namespace pin_program {

inline constexpr size_t kMiB = size_t{1} << 20;

// Verification copies land here (pageable, not a recorded block).
extern char g_check[24 * kMiB];

// Prints `what` on stderr and exits 91 (wrong data).
void Fail(const char* what);
// A new 64-byte aligned block of n bytes (posix_memalign).
char* Memalign(size_t n);
// 1 when all n bytes of p equal c.
bool All(const char* p, size_t n, char c);
// Device contents, read back through a pageable (unrecorded) buffer.
const char* DeviceBytes(const void* dev, size_t n);
void* DevAlloc(size_t n);
// A device buffer of n bytes and a stream for a thread's copies; false
// (counted in `failures`) when the runtime refuses either.
bool ThreadDevice(size_t n, void** dev, cudaStream_t* s, std::atomic<int>& failures);
// A child that exits at once, waited for.
void ForkEmptyChild();
// Prints the double's register/unregister statistics, each key prefixed.
void PutStats(const char* prefix);
// A new n-byte posix_memalign block filled with `fill`, its address printed
// as `key`, copied to dev once (pinscope registers it).
char* CopiedBlock(void* dev, size_t n, const std::string& key, char fill);
// A shm mapping as a DataLoader batch arrives: shm_open, ftruncate, mmap
// MAP_SHARED, unlink at once.
char* MapShm(size_t n, int prot, const char* tag);
// One CUDA call on the main thread first, so the trace's CudaRuntimeInfo
// is written before any thread copies (the recorder writes it on the first
// CUDA call, and another thread's copy could otherwise overtake it).
void NoteCudaFirst();

// Scenarios, one per run: e2e_pinning_prog SCENARIO.
void Decisions();
void Hazard();
void Batch();
void Symbol();
void Passive();
void Budget();
void RegisterFails();
void Simple();
void FreeReuse();
void Realloc();
void Shm();
void Fork();
void ChildCopies();
void ForkThreads();
void Interplay();
void Threads();
void Recycle();
void RecycleCap(size_t n);
void RecycleBudget();
void RecycleFork();
void RecycleIdle();
void BatchLoop0();
void Ahead();
void AheadUnused();
void AheadThreads();
void Hidden();
void FaultRegister();
void FaultBudget();
void FaultUnregisterFork();
void FaultUnregisterFree();

}  // namespace pin_program
