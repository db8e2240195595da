// e2e_pinning_prog: an unmodified CUDA program (linked against the CUDA 13
// runtime double) whose large pageable buffers pinscope may pin behind its
// back (PINSCOPE_PIN). One scenario per run: e2e_pinning_prog SCENARIO.
// It checks what it computes itself (exit 91 on wrong data where the answer
// does not depend on the pinning mode) and prints what it observed as
// "key=value" lines; the checker (e2e_pinning_test) compares both with the
// trace. Addresses go to stdout so the checker can match PinEvents.
#include "pin_program.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "fake_cudart.h"
#include "program_util.h"

namespace pin_program {

char g_check[24 * kMiB];

void Fail(const char* what) {
  fprintf(stderr, "e2e_pinning_prog: %s\n", what);
  fflush(stderr);
  exit(91);
}

char* Memalign(size_t n) {
  void* p = nullptr;
  if (posix_memalign(&p, 64, n) != 0) Fail("posix_memalign");
  return static_cast<char*>(p);
}

// 1 when all n bytes of p equal c.
bool All(const char* p, size_t n, char c) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != c) return false;
  return true;
}

// Device contents, read back through a pageable (unrecorded) buffer.
const char* DeviceBytes(const void* dev, size_t n) {
  CK(cudaMemcpy(g_check, dev, n, cudaMemcpyDeviceToHost));
  return g_check;
}

void* DevAlloc(size_t n) {
  void* d = nullptr;
  CK(cudaMalloc(&d, n));
  return d;
}

// A device buffer of n bytes and a stream for a thread's copies; false
// (counted in `failures`) when the runtime refuses either.
bool ThreadDevice(size_t n, void** dev, cudaStream_t* s, std::atomic<int>& failures) {
  if (cudaMalloc(dev, n) != cudaSuccess || cudaStreamCreate(s) != cudaSuccess) {
    failures.fetch_add(1);
    return false;
  }
  return true;
}

// A child that exits at once, waited for.
void ForkEmptyChild() {
  pid_t pid = fork();
  if (pid < 0) Fail("fork");
  if (pid == 0) _exit(0);
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) Fail("child failed");
}

void PutStats(const char* prefix) {
  fakecuda_stats s;
  fakecuda_get_stats(&s);
  std::string p = prefix;
  Put((p + "register_calls").c_str(), s.host_register_calls);
  Put((p + "unregister_calls").c_str(), s.host_unregister_calls);
  Put((p + "registered_bytes").c_str(), s.registered_bytes);
}

// A new n-byte posix_memalign block filled with `fill`, its address printed
// as `key`, copied to dev once (pinscope registers it).
char* CopiedBlock(void* dev, size_t n, const std::string& key, char fill) {
  char* p = Memalign(n);
  memset(p, fill, n);
  PutPtr(key.c_str(), p);
  CK(cudaMemcpy(dev, p, n, cudaMemcpyHostToDevice));
  return p;
}

// A shm mapping as a DataLoader batch arrives: shm_open, ftruncate, mmap
// MAP_SHARED, unlink at once.
char* MapShm(size_t n, int prot, const char* tag) {
  std::string name = "/pinscope_e2e_pin_" + std::to_string(getpid()) + "_" + tag;
  int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) Fail("shm_open");
  if (ftruncate(fd, static_cast<off_t>(n)) != 0) Fail("ftruncate");
  void* p = mmap(nullptr, n, prot, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) Fail("mmap");
  shm_unlink(name.c_str());
  close(fd);
  return static_cast<char*>(p);
}

// One CUDA call on the main thread first, so the trace's CudaRuntimeInfo
// is written before any thread copies (the recorder writes it on the first
// CUDA call, and another thread's copy could otherwise overtake it).
void NoteCudaFirst() { CK(cudaDeviceSynchronize()); }

namespace {

// Runs the scenario named s (after printing where g_check is); 2 for an
// unknown name.
int RunScenario(const std::string& s) {
  PutPtr("check", g_check);
  if (s == "decisions") Decisions();
  else if (s == "hazard") Hazard();
  else if (s == "batch") Batch();
  else if (s == "symbol") Symbol();
  else if (s == "passive") Passive();
  else if (s == "budget") Budget();
  else if (s == "register_fails") RegisterFails();
  else if (s == "simple") Simple();
  else if (s == "free_reuse") FreeReuse();
  else if (s == "realloc") Realloc();
  else if (s == "shm") Shm();
  else if (s == "fork") Fork();
  else if (s == "child_copies") ChildCopies();
  else if (s == "fork_threads") ForkThreads();
  else if (s == "interplay") Interplay();
  else if (s == "threads") Threads();
  else if (s == "recycle") Recycle();
  else if (s == "recycle_cap") RecycleCap(16 * kMiB);
  else if (s == "recycle_count") RecycleCap(8 * kMiB);
  else if (s == "recycle_budget") RecycleBudget();
  else if (s == "recycle_fork") RecycleFork();
  else if (s == "recycle_idle") RecycleIdle();
  else if (s == "batch_loop0") BatchLoop0();
  else if (s == "ahead") Ahead();
  else if (s == "ahead_unused") AheadUnused();
  else if (s == "ahead_threads") AheadThreads();
  else if (s == "hidden") Hidden();
  else if (s == "fault_register") FaultRegister();
  else if (s == "fault_budget") FaultBudget();
  else if (s == "fault_unregister_fork") FaultUnregisterFork();
  else if (s == "fault_unregister_free") FaultUnregisterFree();
  else {
    fprintf(stderr, "unknown scenario %s\n", s.c_str());
    return 2;
  }
  return 0;
}

}  // namespace
}  // namespace pin_program

int main(int argc, char** argv) { return pin_program::RunScenario(argc > 1 ? argv[1] : ""); }
