// Scenarios of group 12: the copy path under pinning when pinning's CUDA
// calls fail (the runtime double's FAKE_CUDART_FAIL_REGISTER /
// FAKE_CUDART_FAIL_UNREGISTER, or a full budget). Each checks the data of
// every copy itself (exit 91 on wrong data) and prints what the program's
// queries and own register calls answered.
#include <malloc.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "fake_cudart.h"
#include "pin_program.h"
#include "program_util.h"

namespace pin_program {
namespace {

// What cudaPointerGetAttributes says p is (cudaMemoryType), as the program
// sees it.
unsigned long long AttrType(const void* p) {
  cudaPointerAttributes a;
  memset(&a, 0, sizeof a);
  CK(cudaPointerGetAttributes(&a, p));
  return static_cast<unsigned long long>(a.type);
}

// Copies each buffer of bufs (n bytes, filled with 'a' + i) to the device
// twice and back once, and one async H2D copy that the host overwrites at
// once: every result checked (the async copy must deliver the old data, as
// a pageable copy does).
void CopyAndCheck(char* const* bufs, int count, size_t n, void* dev, const char* what) {
  std::string w = what;
  for (int i = 0; i < count; ++i) {
    memset(bufs[i], 'a' + i, n);
    CK(cudaMemcpy(dev, bufs[i], n, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dev, bufs[i], n, cudaMemcpyHostToDevice));
    if (!All(DeviceBytes(dev, n), n, 'a' + i)) Fail((w + ": device data").c_str());
    memset(bufs[i], 0, n);
    CK(cudaMemcpy(bufs[i], dev, n, cudaMemcpyDeviceToHost));
    if (!All(bufs[i], n, 'a' + i)) Fail((w + ": host data").c_str());
  }
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  memset(bufs[0], 'O', n);
  CK(fakecuda_sleep_on_stream(s, 50));
  CK(cudaMemcpyAsync(dev, bufs[0], n, cudaMemcpyHostToDevice, s));
  memset(bufs[0], 'N', n);
  CK(cudaStreamSynchronize(s));
  if (!All(DeviceBytes(dev, n), n, 'O')) Fail((w + ": async device data").c_str());
  CK(cudaStreamDestroy(s));
  Put("last_error", cudaGetLastError());
}

}  // namespace

// Every cudaHostRegister fails (FAKE_CUDART_FAIL_REGISTER=all): three
// 1 MiB buffers, each copied pageable.
void FaultRegister() {
  const size_t n = kMiB;
  void* dev = DevAlloc(n);
  char* b[3];
  for (int i = 0; i < 3; ++i) {
    b[i] = Memalign(n);
    PutPtr(("b" + std::to_string(i)).c_str(), b[i]);
  }
  CopyAndCheck(b, 3, n, dev, "fault_register");
  PutStats("");
  for (char* p : b) free(p);
}

// A budget (PINSCOPE_PIN_BUDGET=1M) that holds one of three 768 KiB buffers.
void FaultBudget() {
  const size_t n = 768 * 1024;
  void* dev = DevAlloc(n);
  char* b[3];
  for (int i = 0; i < 3; ++i) {
    b[i] = Memalign(n);
    PutPtr(("b" + std::to_string(i)).c_str(), b[i]);
  }
  CopyAndCheck(b, 3, n, dev, "fault_budget");
  Put("b0_registered", fakecuda_is_registered(b[0]));
  Put("b1_registered", fakecuda_is_registered(b[1]));
  for (char* p : b) free(p);
}

// pinscope's first cudaHostUnregister fails (FAKE_CUDART_FAIL_UNREGISTER=1):
// at fork, for buffer a, which the program keeps. Its queries must still
// answer unregistered, its copies stay right, and its own cudaHostRegister
// of a succeeds (pinscope gives its registration up first: the second
// unregister succeeds).
void FaultUnregisterFork() {
  const size_t n = 4 * kMiB;
  void* dev = DevAlloc(n);
  char* a = Memalign(n);
  PutPtr("a", a);
  CopyAndCheck(&a, 1, n, dev, "fault_unregister_fork");  // a: REGISTERED
  ForkEmptyChild();                                      // the unpin before fork fails
  Put("a_registered_after_fork", fakecuda_is_registered(a));
  Put("a_attr_type", AttrType(a));
  unsigned flags = 0;
  Put("a_flags_rc", cudaHostGetFlags(&flags, a));
  cudaGetLastError();
  CopyAndCheck(&a, 1, n, dev, "fault_unregister_fork after fork");
  Put("a_register_rc", cudaHostRegister(a, n, cudaHostRegisterDefault));
  Put("a_attr_type_own", AttrType(a));
  Put("a_unregister_rc", cudaHostUnregister(a));
  Put("a_registered_end", fakecuda_is_registered(a));
  free(a);
  PutStats("");
}

// The same failure at free: the freed block must not come back to the
// program while the driver has it registered. glibc's mmap threshold is
// fixed so that, without that care, the next block of the size would be a
// new mapping at the address just unmapped.
void FaultUnregisterFree() {
  const size_t n = 4 * kMiB;
  mallopt(M_MMAP_THRESHOLD, 256 * 1024);
  void* dev = DevAlloc(n);
  char* a = Memalign(n);
  PutPtr("a", a);
  CopyAndCheck(&a, 1, n, dev, "fault_unregister_free");  // a: REGISTERED
  free(a);                                               // the unregister fails
  char* b = Memalign(n);
  PutPtr("b", b);
  Put("b_attr_type", AttrType(b));
  CopyAndCheck(&b, 1, n, dev, "fault_unregister_free b");
  Put("b_register_rc", cudaHostRegister(b, n, cudaHostRegisterDefault));
  Put("b_attr_type_own", AttrType(b));
  Put("b_unregister_rc", cudaHostUnregister(b));
  free(b);
  PutStats("");
}

}  // namespace pin_program
