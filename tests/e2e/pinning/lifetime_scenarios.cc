// e2e_pinning_prog, sections 4-8: free, realloc and munmap of pinned
// memory, fork (also with another thread copying), a child that copies
// without a CUDA context of its own, the program's own register and
// unregister calls, threads.
#include "pin_program.h"

#include <malloc.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "fake_cudart.h"
#include "program_util.h"

namespace pin_program {

// --- 4. invalidation ------------------------------------------------------------

void FreeReuse() {
  // A fixed mmap threshold: 16 MiB blocks are mmapped chunks, so the block
  // that follows the free gets the same address back (the kernel reuses the
  // hole) - the case where a stale registration would answer 712.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  const size_t n = 16 * kMiB;
  void* dev = DevAlloc(n);
  char* a = static_cast<char*>(malloc(n));
  memset(a, 'a', n);
  PutPtr("a", a);
  CK(cudaMemcpy(dev, a, n, cudaMemcpyHostToDevice));
  Put("a_registered", fakecuda_is_registered(a));
  free(a);
  Put("a_registered_after_free", fakecuda_is_registered(a));
  char* b = static_cast<char*>(malloc(n));
  memset(b, 'b', n);
  PutPtr("b", b);
  Put("same_address", a == b);
  CK(cudaMemcpy(dev, b, n, cudaMemcpyHostToDevice));
  if (!All(DeviceBytes(dev, n), n, 'b')) Fail("reuse: device data");
  Put("b_registered", fakecuda_is_registered(b));
  free(b);
  PutStats("");
}

void Realloc() {
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  const size_t n = 16 * kMiB, grown = 24 * kMiB, shrunk = 8 * kMiB;
  void* dev = DevAlloc(grown);
  char* p = static_cast<char*>(malloc(n));
  memset(p, 'p', n);
  PutPtr("p", p);
  CK(cudaMemcpy(dev, p, n, cudaMemcpyHostToDevice));
  char* q = static_cast<char*>(realloc(p, grown));
  if (!q || !All(q, n, 'p')) Fail("realloc grow lost data");
  memset(q + n, 'q', grown - n);
  PutPtr("q", q);
  CK(cudaMemcpy(dev, q, grown, cudaMemcpyHostToDevice));
  const char* d = DeviceBytes(dev, grown);
  if (!All(d, n, 'p') || !All(d + n, grown - n, 'q')) Fail("realloc grow: device data");
  char* r = static_cast<char*>(realloc(q, shrunk));
  if (!r || !All(r, shrunk, 'p')) Fail("realloc shrink lost data");
  PutPtr("r", r);
  CK(cudaMemcpy(dev, r, shrunk, cudaMemcpyHostToDevice));
  Put("r_registered", fakecuda_is_registered(r));
  free(r);
  PutStats("");
}

void Shm() {
  const size_t n = 16 * kMiB;
  void* dev = DevAlloc(n);
  char* m1 = MapShm(n, PROT_READ | PROT_WRITE, "a");
  memset(m1, 'm', n);
  PutPtr("m1", m1);
  CK(cudaMemcpy(dev, m1, n, cudaMemcpyHostToDevice));
  if (!All(DeviceBytes(dev, n), n, 'm')) Fail("shm: device data");
  Put("m1_registered", fakecuda_is_registered(m1));
  if (munmap(m1, n) != 0) Fail("munmap");
  Put("m1_registered_after_munmap", fakecuda_is_registered(m1));

  // Unmapping the middle releases the whole registration; what is left of
  // the mapping can be pinned again on its next copy.
  char* m2 = MapShm(n, PROT_READ | PROT_WRITE, "b");
  memset(m2, 'n', n);
  PutPtr("m2", m2);
  CK(cudaMemcpy(dev, m2, n, cudaMemcpyHostToDevice));
  if (munmap(m2 + 4 * kMiB, 4 * kMiB) != 0) Fail("munmap middle");
  Put("m2_registered_after_hole", fakecuda_is_registered(m2));
  CK(cudaMemcpy(dev, m2, 4 * kMiB, cudaMemcpyHostToDevice));  // the first piece
  if (!All(DeviceBytes(dev, 4 * kMiB), 4 * kMiB, 'n')) Fail("shm piece: device data");
  if (munmap(m2, 4 * kMiB) != 0 || munmap(m2 + 8 * kMiB, 8 * kMiB) != 0) Fail("munmap rest");

  // A read-only mapping (registered read-only).
  char* m3 = MapShm(n, PROT_READ, "c");
  PutPtr("m3", m3);
  CK(cudaMemcpy(dev, m3, n, cudaMemcpyHostToDevice));
  if (!All(DeviceBytes(dev, n), n, 0)) Fail("read-only shm: device data");
  if (munmap(m3, n) != 0) Fail("munmap");
  PutStats("");
}

// --- 5. fork -------------------------------------------------------------------

void Fork() {
  const size_t n = 16 * kMiB, sn = 8 * kMiB;
  void* dev = DevAlloc(n);
  char* priv = CopiedBlock(dev, n, "priv", 'P');  // REGISTERED
  char* shm = MapShm(sn, PROT_READ | PROT_WRITE, "f");
  memset(shm, 'S', sn);
  PutPtr("shm", shm);
  CK(cudaMemcpy(dev, shm, sn, cudaMemcpyHostToDevice));  // REGISTERED (shm)

  int ready[2];
  if (pipe(ready) != 0) Fail("pipe");
  pid_t pid = fork();
  if (pid < 0) Fail("fork");
  if (pid == 0) {
    // The child: no CUDA at all. The double's counters are the parent's
    // copy; start them from zero to see what this process does.
    fakecuda_reset_stats();
    Put("child_priv_registered", fakecuda_is_registered(priv));
    Put("child_shm_registered", fakecuda_is_registered(shm));
    memset(priv, 'C', n);  // copy-on-write: the parent must not see this
    if (write(ready[1], "x", 1) != 1) _exit(92);
    free(priv);
    munmap(shm, sn);
    PutStats("child_");
    exit(0);
  }
  char c;
  if (read(ready[0], &c, 1) != 1) Fail("read");
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    Fail("child failed");
  Put("child_pid", static_cast<unsigned long long>(pid));
  Put("parent_sees_own_data", All(priv, n, 'P'));
  Put("parent_priv_registered_after_fork", fakecuda_is_registered(priv));
  Put("parent_shm_registered_after_fork", fakecuda_is_registered(shm));
  CK(cudaMemcpy(dev, priv, n, cudaMemcpyHostToDevice));  // REGISTERED again
  if (!All(DeviceBytes(dev, n), n, 'P')) Fail("fork: device data");
  CK(cudaMemcpy(dev, shm, sn, cudaMemcpyHostToDevice));  // CACHED
  free(priv);
  munmap(shm, sn);
}

// --- 8. no CUDA context: a forked child that copies ----------------------------

void ChildCopies() {
  const size_t n = 16 * kMiB;
  void* dev = DevAlloc(n);
  char* a = CopiedBlock(dev, n, "a", 'a');  // the parent uses CUDA
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) Fail("fork");
  if (pid == 0) {
    fakecuda_reset_stats();
    char* b = Memalign(n);
    memset(b, 'b', n);
    PutPtr("child_b", b);
    // The double lets a forked child copy; the real runtime would refuse.
    CK(cudaMemcpy(dev, b, n, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dev, b, n, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dev, a, n, cudaMemcpyHostToDevice));
    if (!All(DeviceBytes(dev, n), n, 'a')) _exit(93);
    Put("child_b_registered", fakecuda_is_registered(b));
    PutStats("child_");
    free(b);
    exit(0);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    Fail("child failed");
  Put("child_pid", static_cast<unsigned long long>(pid));
  free(a);
}

// --- 6. the program's own register / unregister -----------------------------------

void Interplay() {
  const size_t n = 16 * kMiB;
  void* dev = DevAlloc(n);
  cudaStream_t s;
  CK(cudaStreamCreate(&s));

  // (a) The program registers a buffer pinscope pinned, then unregisters it.
  char* a = CopiedBlock(dev, n, "a", 'a');  // REGISTERED
  Put("a_register_rc", cudaHostRegister(a, n, cudaHostRegisterDefault));
  Put("a_registered", fakecuda_is_registered(a));
  CK(cudaMemcpyAsync(dev, a, n, cudaMemcpyHostToDevice, s));  // BY_PROGRAM
  CK(cudaStreamSynchronize(s));
  Put("a_unregister_rc", cudaHostUnregister(a));
  Put("a_registered_after_unregister", fakecuda_is_registered(a));

  // (b) The program unregisters a range only pinscope registered.
  char* b = CopiedBlock(dev, n, "b", 'b');  // REGISTERED
  Put("b_unregister_rc", cudaHostUnregister(b));
  Put("b_last_error", cudaGetLastError());
  Put("b_last_error_again", cudaGetLastError());
  Put("b_registered", fakecuda_is_registered(b));
  CK(cudaMemcpy(dev, b, n, cudaMemcpyHostToDevice));  // CACHED
  // ... and registers a piece of it: pinscope's whole registration goes.
  Put("b_piece_register_rc", cudaHostRegister(b + 4 * kMiB, 4 * kMiB, cudaHostRegisterDefault));
  Put("b_piece_unregister_rc", cudaHostUnregister(b + 4 * kMiB));

  // (c) torch's pinned memory: cudaHostAlloc + cudaFreeHost.
  void* h = nullptr;
  CK(cudaHostAlloc(&h, n, cudaHostAllocDefault));
  PutPtr("h", h);
  memset(h, 'h', n);
  CK(cudaMemcpyAsync(dev, h, n, cudaMemcpyHostToDevice, s));  // BY_PROGRAM
  CK(cudaStreamSynchronize(s));
  Put("h_free_rc", cudaFreeHost(h));

  // (d) torch's register path: malloc + touch + cudaHostRegister, copy,
  // cudaHostUnregister + free.
  char* t = Memalign(n);
  memset(t, 't', n);
  PutPtr("t", t);
  CK(cudaHostRegister(t, n, cudaHostRegisterDefault));
  CK(cudaMemcpyAsync(dev, t, n, cudaMemcpyHostToDevice, s));  // BY_PROGRAM
  CK(cudaStreamSynchronize(s));
  if (!All(DeviceBytes(dev, n), n, 't')) Fail("interplay: device data");
  CK(cudaHostUnregister(t));
  free(t);
  free(a);
  free(b);
  PutStats("");
}

// --- 7. threads -------------------------------------------------------------------

namespace {

constexpr int kThreads = 4, kRounds = 5, kIters = 10;
char g_thread_check[kThreads][6 * kMiB];
std::atomic<int> g_thread_failures{0};

void ThreadBody(int id) {
  const size_t n = 6 * kMiB;
  void* dev = nullptr;
  cudaStream_t s;
  if (!ThreadDevice(n, &dev, &s, g_thread_failures)) return;
  for (int round = 0; round < kRounds; ++round) {
    char* src = Memalign(n);
    char* dst = Memalign(n);
    for (int it = 0; it < kIters; ++it) {
      char v = static_cast<char>(1 + id * 50 + round * kIters + it);
      memset(src, v, n);
      bool ok = cudaMemcpyAsync(dev, src, n, cudaMemcpyHostToDevice, s) == cudaSuccess;
      memset(src, 0, n);  // pageable semantics: the copy already has the data
      ok = ok && cudaMemcpyAsync(dst, dev, n, cudaMemcpyDeviceToHost, s) == cudaSuccess;
      ok = ok && All(dst, n, v);  // and the D2H already landed
      ok = ok && cudaMemcpy(g_thread_check[id], dev, n, cudaMemcpyDeviceToHost) == cudaSuccess;
      ok = ok && All(g_thread_check[id], n, v);
      if (!ok) g_thread_failures.fetch_add(1);
    }
    free(src);  // while other threads copy their own buffers
    free(dst);
  }
}

}  // namespace

void Threads() {
  NoteCudaFirst();
  std::vector<std::thread> ts;
  for (int i = 0; i < kThreads; ++i) ts.emplace_back(ThreadBody, i);
  for (auto& t : ts) t.join();
  Put("failures", static_cast<unsigned long long>(g_thread_failures.load()));
  PutStats("");
}

// Forks while another thread keeps copying a pinned buffer: fork waits for
// the copy in flight before it unpins, the copying thread never sees wrong
// data, nothing deadlocks.
void ForkThreads() {
  NoteCudaFirst();
  const size_t n = 8 * kMiB;
  std::atomic<bool> stop{false};
  std::atomic<int> failures{0}, copies{0};
  std::thread copier([&] {
    void* dev = nullptr;
    cudaStream_t s;
    if (!ThreadDevice(n, &dev, &s, failures)) return;
    char* buf = Memalign(n);
    static char check[8 * kMiB];
    for (int it = 0; !stop.load() || it < 20; ++it) {
      char v = static_cast<char>(1 + it % 100);
      memset(buf, v, n);
      bool ok = cudaMemcpyAsync(dev, buf, n, cudaMemcpyHostToDevice, s) == cudaSuccess;
      memset(buf, 0, n);
      ok = ok && cudaMemcpy(check, dev, n, cudaMemcpyDeviceToHost) == cudaSuccess;
      ok = ok && All(check, n, v);
      if (!ok) failures.fetch_add(1);
      copies.fetch_add(1);
    }
    free(buf);
  });
  while (copies.load() < 3) usleep(1000);
  for (int i = 0; i < 5; ++i) {
    ForkEmptyChild();
    usleep(5000);
  }
  // Two more copies after the last fork: the buffer is pinned again when
  // the copier frees it.
  int seen = copies.load();
  while (copies.load() < seen + 2) usleep(1000);
  stop.store(true);
  copier.join();
  Put("failures", static_cast<unsigned long long>(failures.load()));
  PutStats("");
}

}  // namespace pin_program
