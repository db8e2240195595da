// e2e_pinning_prog, section 10: pin-ahead (PINSCOPE_PIN_AHEAD).
#include "pin_program.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fake_cudart.h"
#include "program_util.h"

namespace pin_program {

// --- 10. pin-ahead (PINSCOPE_PIN_AHEAD) -----------------------------------------

namespace {

// 1 once p is registered (by pinscope's pin-ahead thread), polling for at
// most `ms` milliseconds.
int WaitRegistered(const void* p, int ms) {
  for (int i = 0; i < ms; ++i) {
    if (fakecuda_is_registered(p)) return 1;
    usleep(1000);
  }
  return fakecuda_is_registered(p);
}

// cudaHostRegister calls since the last fakecuda_reset_stats.
unsigned long RegisterCalls() {
  fakecuda_stats st;
  fakecuda_get_stats(&st);
  return st.host_register_calls;
}

// Until n cudaHostRegister calls have begun since the last
// fakecuda_reset_stats (the double counts a call as it enters, before its
// delay), for at most `ms` milliseconds: a registration is under way.
// Nothing to wait for with pin-ahead off (PINSCOPE_PIN_AHEAD=0).
void WaitRegisterCalls(unsigned long n, int ms) {
  const char* v = getenv("PINSCOPE_PIN_AHEAD");
  if (v && strcmp(v, "0") == 0) return;
  for (int i = 0; i < ms; ++i) {
    if (RegisterCalls() >= n) return;
    usleep(1000);
  }
  Fail("the pin-ahead thread did not start a registration");
}

// AheadThreads (below): the threads, their iterations and the forks.
constexpr int kAheadThreads = 4, kAheadIters = 30, kAheadForks = 6;
char g_ahead_check[kAheadThreads][4 * kMiB];
std::atomic<int> g_ahead_failures{0};

void AheadThreadBody(int id) {
  const size_t n = 4 * kMiB;
  void* dev = nullptr;
  cudaStream_t s;
  if (!ThreadDevice(n, &dev, &s, g_ahead_failures)) return;
  for (int it = 0; it < kAheadIters; ++it) {
    const char v = static_cast<char>(1 + id * kAheadIters + it);
    char* p = MapShm(n, PROT_READ | PROT_WRITE,
                     ("t" + std::to_string(id) + "_" + std::to_string(it)).c_str());
    memset(p, v, n);
    bool ok = true;
    switch (it % 4) {
      case 0:  // never copied: unmapped queued, under registration or registered
        if (it % 8 == 4) usleep(3000);
        break;
      case 1:
        ok = cudaMemcpy(dev, p, n, cudaMemcpyHostToDevice) == cudaSuccess;
        break;
      case 2:  // the copy already has the data when the call returns
        ok = fakecuda_sleep_on_stream(s, 2) == cudaSuccess &&
             cudaMemcpyAsync(dev, p, n, cudaMemcpyHostToDevice, s) == cudaSuccess;
        memset(p, 0, n);
        ok = ok && cudaStreamSynchronize(s) == cudaSuccess;
        break;
      case 3:  // and a D2H copy has landed when the call returns
        ok = cudaMemcpy(dev, p, n, cudaMemcpyHostToDevice) == cudaSuccess;
        memset(p, 0, n);
        ok = ok && cudaMemcpyAsync(p, dev, n, cudaMemcpyDeviceToHost, s) == cudaSuccess &&
             All(p, n, v);
        ok = ok && cudaStreamSynchronize(s) == cudaSuccess;
        break;
    }
    if (it % 4 != 0) {
      ok = ok && cudaMemcpy(g_ahead_check[id], dev, n, cudaMemcpyDeviceToHost) == cudaSuccess &&
           All(g_ahead_check[id], n, v);
    }
    if (!ok) g_ahead_failures.fetch_add(1);
    if (munmap(p, n) != 0) g_ahead_failures.fetch_add(1);
  }
}

}  // namespace

// DataLoader batches: each a new shm mapping of one size. The first is
// registered at its copy; later ones as soon as they are mapped.
void Ahead() {
  const size_t n = 16 * kMiB;
  void* dev = DevAlloc(n);
  // a: the first batch, registered at its copy (16 MiB becomes a batch size).
  char* a = MapShm(n, PROT_READ | PROT_WRITE, "a");
  memset(a, 'a', n);
  PutPtr("a", a);
  CK(cudaMemcpy(dev, a, n, cudaMemcpyHostToDevice));
  if (munmap(a, n) != 0) Fail("munmap a");
  // b: the next batch, registered before any copy; its async copy keeps
  // pageable semantics (the stream is busy: a pinned copy would run late).
  char* b = MapShm(n, PROT_READ | PROT_WRITE, "b");
  PutPtr("b", b);
  memset(b, 'b', n);
  Put("b_registered_ahead", WaitRegistered(b, 2000));
  CK(fakecuda_sleep_on_stream(nullptr, 50));
  CK(cudaMemcpyAsync(dev, b, n, cudaMemcpyHostToDevice, nullptr));
  memset(b, 'x', n);  // the program reuses its buffer at once
  CK(cudaDeviceSynchronize());
  Put("b_device_old_data", All(DeviceBytes(dev, n), n, 'b'));
  if (munmap(b, n) != 0) Fail("munmap b");
  Put("b_registered_after_munmap", fakecuda_is_registered(b));
  // c: a size no copy has taught: not registered ahead.
  char* c = MapShm(8 * kMiB, PROT_READ | PROT_WRITE, "c");
  PutPtr("c", c);
  memset(c, 'c', 8 * kMiB);
  Put("c_registered_before_copy", WaitRegistered(c, 100));
  CK(cudaMemcpy(dev, c, 8 * kMiB, cudaMemcpyHostToDevice));
  if (munmap(c, 8 * kMiB) != 0) Fail("munmap c");
  // From here every registration takes 300 ms.
  fakecuda_set_register_delay_ms(300);
  // d: copied while its registration is under way: the copy waits for it
  // and runs pinned (one registration in all).
  fakecuda_reset_stats();
  char* d = MapShm(n, PROT_READ | PROT_WRITE, "d");
  PutPtr("d", d);
  memset(d, 'd', n);
  WaitRegisterCalls(1, 5000);
  CK(cudaMemcpy(dev, d, n, cudaMemcpyHostToDevice));
  Put("d_device_data", All(DeviceBytes(dev, n), n, 'd'));
  Put("d_register_calls", RegisterCalls());
  if (munmap(d, n) != 0) Fail("munmap d");
  // e: unmapped while being registered: munmap waits, then unregisters.
  char* e = MapShm(n, PROT_READ | PROT_WRITE, "e");
  PutPtr("e", e);
  WaitRegisterCalls(2, 5000);
  if (munmap(e, n) != 0) Fail("munmap e");
  Put("e_registered_after_munmap", fakecuda_is_registered(e));
  // f1 is being registered while f2 waits in the queue; f2 is unmapped
  // before its turn: never registered.
  char* f1 = MapShm(n, PROT_READ | PROT_WRITE, "f1");
  WaitRegisterCalls(3, 5000);
  char* f2 = MapShm(n, PROT_READ | PROT_WRITE, "f2");
  PutPtr("f1", f1);
  PutPtr("f2", f2);
  if (munmap(f2, n) != 0) Fail("munmap f2");
  if (munmap(f1, n) != 0) Fail("munmap f1");
  usleep(400 * 1000);  // time for the thread to have registered f2, had it not been cancelled
  fakecuda_set_register_delay_ms(0);
  PutStats("");
}

// Mappings of a batch size that are never copied: pin-ahead registers the
// first 8 for nothing, then stops for that size; a copy of a buffer of that
// size starts it again.
void AheadUnused() {
  const size_t n = 16 * kMiB;
  void* dev = DevAlloc(n);
  char* a = MapShm(n, PROT_READ | PROT_WRITE, "a");
  PutPtr("a", a);
  CK(cudaMemcpy(dev, a, n, cudaMemcpyHostToDevice));  // teaches 16 MiB
  if (munmap(a, n) != 0) Fail("munmap a");
  int ahead = 0;
  for (int k = 0; k < 8; ++k) {
    char* u = MapShm(n, PROT_READ | PROT_WRITE, ("u" + std::to_string(k)).c_str());
    ahead += WaitRegistered(u, 2000);
    if (munmap(u, n) != 0) Fail("munmap u");
  }
  Put("unused_registered_ahead", ahead);
  char* g = MapShm(n, PROT_READ | PROT_WRITE, "g");
  PutPtr("g", g);
  Put("g_registered_before_copy", WaitRegistered(g, 200));
  memset(g, 'g', n);
  CK(cudaMemcpy(dev, g, n, cudaMemcpyHostToDevice));  // registers, teaches 16 MiB again
  if (!All(DeviceBytes(dev, n), n, 'g')) Fail("ahead_unused: device data");
  if (munmap(g, n) != 0) Fail("munmap g");
  char* h = MapShm(n, PROT_READ | PROT_WRITE, "h");
  PutPtr("h", h);
  Put("h_registered_ahead", WaitRegistered(h, 2000));
  CK(cudaMemcpy(dev, h, n, cudaMemcpyHostToDevice));
  if (munmap(h, n) != 0) Fail("munmap h");
}

// Pin-ahead under load: 4 threads each take 30 batch-sized shm mappings in
// turn (one size, so every mapping after the first copy is queued for the
// pin-ahead thread) and use them four ways - unmapped unused, copied H2D,
// copied async on a busy stream and reused at once, copied D2H into - while
// the main thread forks and every registration takes 2 ms. Whatever the
// interleaving: right data, pageable semantics, each registration released
// once, no CUDA error, nothing left registered.
void AheadThreads() {
  NoteCudaFirst();
  fakecuda_set_register_delay_ms(2);
  std::vector<std::thread> ts;
  for (int i = 0; i < kAheadThreads; ++i) ts.emplace_back(AheadThreadBody, i);
  for (int i = 0; i < kAheadForks; ++i) {
    usleep(5000);
    ForkEmptyChild();
  }
  for (auto& t : ts) t.join();
  fakecuda_set_register_delay_ms(0);
  Put("failures", static_cast<unsigned long long>(g_ahead_failures.load()));
  PutStats("");
}

}  // namespace pin_program
