// e2e_pinning_prog, section 9: the recycle list (PINSCOPE_PIN_KEEP).
#include "pin_program.h"

#include <malloc.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "fake_cudart.h"
#include "program_util.h"

namespace pin_program {

// --- 9. the recycle list (PINSCOPE_PIN_KEEP) -----------------------------------------

// Free, then allocations that fit the kept block or must not get it.
void Recycle() {
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  const size_t n = 16 * kMiB;
  void* dev = DevAlloc(2 * n);
  char* a = CopiedBlock(dev, n, "a", 'a');            // REGISTERED
  free(a);                                            // kept: still registered
  Put("a_registered_after_free", fakecuda_is_registered(a));
  char* b = Memalign(n);  // the same size: the kept block
  PutPtr("b", b);
  Put("b_registered_before_copy", fakecuda_is_registered(b));
  memset(b, 'b', n);
  CK(cudaMemcpy(dev, b, n, cudaMemcpyHostToDevice));  // CACHED
  if (!All(DeviceBytes(dev, n), n, 'b')) Fail("recycle: device data (b)");
  free(b);  // kept again
  // calloc never gets a kept block (it must be zeroed), nor a size outside
  // [size, size + size/8] of the kept one.
  char* c = static_cast<char*>(calloc(1, n));
  PutPtr("c", c);
  Put("c_zero", All(c, n, 0));
  char* d = static_cast<char*>(malloc(n / 2));
  PutPtr("d", d);
  char* e = static_cast<char*>(malloc(n + kMiB));
  PutPtr("e", e);
  // 14 MiB - 4 KiB: the kept 16 MiB block is more than an eighth larger.
  char* under = static_cast<char*>(malloc(n - 2 * kMiB - 4096));
  PutPtr("under", under);
  // 15 MiB fits (16 MiB <= 15 + 15/8): the kept block again.
  const size_t fn = n - kMiB;
  char* f = static_cast<char*>(malloc(fn));
  PutPtr("f", f);
  Put("f_usable_ok", malloc_usable_size(f) >= fn);
  memset(f, 'f', fn);
  CK(cudaMemcpy(dev, f, fn, cudaMemcpyHostToDevice));  // CACHED
  if (!All(DeviceBytes(dev, fn), fn, 'f')) Fail("recycle: device data (f)");
  // realloc of a reused block: unpinned first, contents preserved.
  char* g = static_cast<char*>(realloc(f, 2 * n));
  if (!g) Fail("realloc");
  PutPtr("g", g);
  Put("g_kept_contents", All(g, fn, 'f'));
  PutStats("");
  free(g);
  free(under);
  free(e);
  free(d);
  free(c);
}

// Frees kRecycleBlocks pinned blocks of `n` bytes in order; the caps decide
// how many stay kept. Then one allocation of n takes the newest.
constexpr int kRecycleBlocks = 6;
void RecycleCap(size_t n) {
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  void* dev = DevAlloc(48 * kMiB);
  char* b[kRecycleBlocks];
  for (int i = 0; i < kRecycleBlocks; ++i)
    b[i] = CopiedBlock(dev, n, "b" + std::to_string(i), static_cast<char>('a' + i));  // REGISTERED
  for (int i = 0; i < kRecycleBlocks; ++i) free(b[i]);
  // A block larger than the byte cap is never kept.
  const size_t ln = 48 * kMiB;
  char* large = CopiedBlock(dev, ln, "large", 'l');  // REGISTERED
  free(large);
  char* r = Memalign(n);
  PutPtr("r", r);
  Put("r_registered", fakecuda_is_registered(r));
  PutStats("");
  free(r);
}

// Budget 32M (so a keep cap of 8M): a kept 8 MiB block gives way to a
// 16 MiB buffer that would not fit beside it.
void RecycleBudget() {
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  void* dev = DevAlloc(16 * kMiB);
  char* b0 = CopiedBlock(dev, 8 * kMiB, "b0", '0');   // REGISTERED
  free(b0);                                           // kept
  char* b1 = CopiedBlock(dev, 16 * kMiB, "b1", '1');  // REGISTERED (24M)
  char* b2 = CopiedBlock(dev, 16 * kMiB, "b2", '2');  // b0 released, REGISTERED
  if (!All(DeviceBytes(dev, 16 * kMiB), 16 * kMiB, '2')) Fail("recycle_budget: device data");
  free(b1);  // 16 MiB > the keep cap: unpinned
  free(b2);
  PutStats("");
}

// A kept block is released before fork; the child's malloc of the same
// size is an ordinary block.
void RecycleFork() {
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  const size_t n = 16 * kMiB;
  void* dev = DevAlloc(n);
  char* a = CopiedBlock(dev, n, "a", 'a');            // REGISTERED
  free(a);                                            // kept
  Put("a_kept_before_fork", fakecuda_is_registered(a));
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) Fail("fork");
  if (pid == 0) {
    fakecuda_reset_stats();
    Put("child_a_registered", fakecuda_is_registered(a));
    char* c = Memalign(n);
    PutPtr("child_c", c);
    Put("child_c_registered", fakecuda_is_registered(c));
    memset(c, 'c', n);
    free(c);
    PutStats("child_");
    exit(0);
  }
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    Fail("child failed");
  Put("child_pid", static_cast<unsigned long long>(pid));
  char* b = Memalign(n);  // the list is empty: an ordinary block
  PutPtr("b", b);
  Put("b_registered_before_copy", fakecuda_is_registered(b));
  memset(b, 'b', n);
  CK(cudaMemcpy(dev, b, n, cudaMemcpyHostToDevice));  // REGISTERED
  free(b);                                            // kept until exit
  PutStats("");
}

// A kept block idle for more than 2 s is released by the flusher thread.
void RecycleIdle() {
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  const size_t n = 16 * kMiB;
  void* dev = DevAlloc(n);
  char* a = CopiedBlock(dev, n, "a", 'a');            // REGISTERED
  free(a);                                            // kept
  Put("a_kept", fakecuda_is_registered(a));
  usleep(3000 * 1000);
  Put("a_registered_after_idle", fakecuda_is_registered(a));
  char* b = Memalign(n);  // the list is empty again
  PutPtr("b", b);
  Put("b_registered_before_copy", fakecuda_is_registered(b));
  free(b);
  PutStats("");
}

// A num_workers=0 batch loop as PyTorch runs it: every batch is collated
// into a new posix_memalign block of kLoopBatch bytes - above glibc's
// largest mmap threshold (32 MiB on 64-bit), so without pinscope glibc maps
// it fresh and unmaps it at free, and every batch page-faults anew - filled,
// copied to the GPU asynchronously, the stream synchronized, then freed.
// Prints the page faults the filling took (this thread's minor faults, the
// first batch and the others summed), how many distinct addresses the
// batches had, and the double's registration counts.
constexpr size_t kLoopBatch = 40 * kMiB;
constexpr int kLoopBatches = 20;
long ThreadMinorFaults() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_minflt;
}
void BatchLoop0() {
  void* dev = DevAlloc(kLoopBatch);
  cudaStream_t stream = nullptr;
  CK(cudaStreamCreate(&stream));
  long first_faults = 0, rest_faults = 0;
  uintptr_t seen[kLoopBatches];
  int distinct = 0;
  for (int i = 0; i < kLoopBatches; ++i) {
    char* b = Memalign(kLoopBatch);
    const char fill = static_cast<char>('A' + i);
    const long before = ThreadMinorFaults();
    memset(b, fill, kLoopBatch);
    const long faults = ThreadMinorFaults() - before;
    (i == 0 ? first_faults : rest_faults) += faults;
    bool known = false;
    for (int j = 0; j < distinct; ++j) known |= seen[j] == reinterpret_cast<uintptr_t>(b);
    if (!known) seen[distinct++] = reinterpret_cast<uintptr_t>(b);
    if (i == 0) PutPtr("batch0", b);
    CK(cudaMemcpyAsync(dev, b, kLoopBatch, cudaMemcpyHostToDevice, stream));
    // Pageable semantics: the source may be overwritten once the call returns.
    memset(b, 'x', kMiB);
    CK(cudaStreamSynchronize(stream));
    if (!All(DeviceBytes(dev, kMiB), kMiB, fill)) Fail("batch_loop0: device data (head)");
    if (!All(DeviceBytes(static_cast<char*>(dev) + kLoopBatch - kMiB, kMiB), kMiB, fill))
      Fail("batch_loop0: device data (tail)");
    free(b);
  }
  Put("first_fill_faults", static_cast<unsigned long long>(first_faults));
  Put("rest_fill_faults", static_cast<unsigned long long>(rest_faults));
  Put("distinct_addresses", static_cast<unsigned long long>(distinct));
  PutStats("");
}

}  // namespace pin_program
