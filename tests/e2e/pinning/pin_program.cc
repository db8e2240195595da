// e2e_pinning_prog: an unmodified CUDA program (linked against the CUDA 13
// runtime double) whose large pageable buffers pinscope may pin behind its
// back (PINSCOPE_PIN). One scenario per run: e2e_pinning_prog SCENARIO.
// It checks what it computes itself (exit 91 on wrong data where the answer
// does not depend on the pinning mode) and prints what it observed as
// "key=value" lines; the checker (e2e_pinning_test) compares both with the
// trace. Addresses go to stdout so the checker can match PinEvents.
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fake_cudart.h"
#include "program_util.h"

namespace {

constexpr size_t kMiB = size_t{1} << 20;

// Neither is a recorded block: pinscope cannot pin them.
char g_static[8 * kMiB];
char g_check[24 * kMiB];  // verification copies land here (pageable)

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

// What a buffer holds: 1 = the expected value everywhere, 2 = the other one
// everywhere, 0 = a mix (never acceptable).
int Observed(const char* p, size_t n, char want, char other) {
  if (All(p, n, want)) return 1;
  if (All(p, n, other)) return 2;
  return 0;
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

// --- 1. decisions ------------------------------------------------------------

void Decisions() {
  const size_t big_n = 16 * kMiB;
  void* dev = DevAlloc(big_n);
  cudaStream_t s;
  CK(cudaStreamCreate(&s));

  char* big = CopiedBlock(dev, big_n, "big", 'a');  // 1: REGISTERED
  Put("big_registered_after_first", fakecuda_is_registered(big));
  memset(big, 'b', big_n);
  CK(cudaMemcpyAsync(dev, big, big_n, cudaMemcpyHostToDevice, s));  // 2: CACHED
  CK(cudaStreamSynchronize(s));
  if (!All(DeviceBytes(dev, big_n), big_n, 'b')) Fail("big: device data");  // 3
  memset(big, 0, big_n);
  CK(cudaMemcpyAsync(big, dev, big_n, cudaMemcpyDeviceToHost, s));  // 4: CACHED (D2H)
  CK(cudaStreamSynchronize(s));
  if (!All(big, big_n, 'b')) Fail("big: D2H data");

  char* small = static_cast<char*>(malloc(kMiB));  // recorded, below PINSCOPE_PIN_MIN
  PutPtr("small", small);
  memset(small, 's', kMiB);
  CK(cudaMemcpy(dev, small, kMiB, cudaMemcpyHostToDevice));  // 5: SKIPPED_SMALL
  Put("small_registered", fakecuda_is_registered(small));

  PutPtr("static", g_static);
  CK(cudaMemcpy(dev, g_static, sizeof g_static, cudaMemcpyHostToDevice));  // 6: UNKNOWN
  char on_stack[64 * 1024];
  memset(on_stack, 1, sizeof on_stack);
  PutPtr("stack", on_stack);
  CK(cudaMemcpy(dev, on_stack, sizeof on_stack, cudaMemcpyHostToDevice));  // 7: UNKNOWN

  void* ha = nullptr;
  CK(cudaHostAlloc(&ha, 8 * kMiB, cudaHostAllocDefault));
  PutPtr("hostalloc", ha);
  CK(cudaMemcpy(dev, ha, 8 * kMiB, cudaMemcpyHostToDevice));  // 8: BY_PROGRAM
  char* reg = Memalign(big_n);
  memset(reg, 'r', big_n);
  PutPtr("program_registered", reg);
  CK(cudaHostRegister(reg, big_n, cudaHostRegisterDefault));
  CK(cudaMemcpyAsync(dev, reg, big_n, cudaMemcpyHostToDevice, s));  // 9: BY_PROGRAM
  CK(cudaStreamSynchronize(s));
  CK(cudaHostUnregister(reg));
  PutStats("");

  CK(cudaFreeHost(ha));
  free(reg);
  free(small);
  free(big);  // UNREGISTER "free" when pinned
  Put("big_registered_after_free", fakecuda_is_registered(big));
}

// --- 2. semantics ---------------------------------------------------------------

// The hazard of facts section 6: the stream is busy, the copy is issued, the
// host touches the buffer at once. Prints 1 (pageable semantics) or 2
// (asynchronous behaviour) for each case; the checker decides which is
// right for the mode.
void Hazard() {
  const size_t n = 16 * kMiB;
  void* dev = DevAlloc(n);
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  char* src = Memalign(n);
  char* dst = Memalign(n);
  PutPtr("src", src);
  PutPtr("dst", dst);

  // H2D from a buffer pinned by this copy (REGISTERED), then again (CACHED).
  const char fills[2][2] = {{'A', 'B'}, {'C', 'D'}};
  const char* keys[2] = {"h2d_registered", "h2d_cached"};
  for (int i = 0; i < 2; ++i) {
    memset(src, fills[i][0], n);
    CK(fakecuda_sleep_on_stream(s, 100));
    CK(cudaMemcpyAsync(dev, src, n, cudaMemcpyHostToDevice, s));
    memset(src, fills[i][1], n);  // the program's next use of its buffer
    CK(cudaStreamSynchronize(s));
    Put(keys[i], Observed(DeviceBytes(dev, n), n, fills[i][0], fills[i][1]));
  }
  // D2H into a buffer pinned by this copy, then again: read at once.
  const char d2h[2][2] = {{'D', 'x'}, {'E', 'y'}};  // {device has, host had}
  const char* dkeys[2] = {"d2h_registered", "d2h_cached"};
  for (int i = 0; i < 2; ++i) {
    memset(g_check, d2h[i][0], n);
    CK(cudaMemcpy(dev, g_check, n, cudaMemcpyHostToDevice));
    memset(dst, d2h[i][1], n);
    CK(fakecuda_sleep_on_stream(s, 100));
    CK(cudaMemcpyAsync(dst, dev, n, cudaMemcpyDeviceToHost, s));
    Put(dkeys[i], Observed(dst, n, d2h[i][0], d2h[i][1]));
    CK(cudaStreamSynchronize(s));
    if (!All(dst, n, d2h[i][0])) Fail("D2H: data after the sync");
  }
  free(src);
  free(dst);
}

// cudaMemcpyToSymbolAsync / FromSymbolAsync with a pinscope-pinned host
// side: the same hazard through the symbol entry points.
char g_symbol[16 * kMiB];

void Symbol() {
  const size_t n = sizeof g_symbol;
  CK(fakecuda_register_symbol(g_symbol, n));
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  char* src = Memalign(n);
  char* dst = Memalign(n);
  PutPtr("src", src);
  PutPtr("dst", dst);
  PutPtr("symbol", g_symbol);
  memset(src, 'H', n);
  CK(fakecuda_sleep_on_stream(s, 100));
  CK(cudaMemcpyToSymbolAsync(g_symbol, src, n, 0, cudaMemcpyHostToDevice, s));
  memset(src, 'I', n);
  CK(cudaStreamSynchronize(s));
  Put("to_symbol", Observed(g_symbol, n, 'H', 'I'));  // the double's "device" is host memory
  memset(dst, 'w', n);
  CK(fakecuda_sleep_on_stream(s, 100));
  CK(cudaMemcpyFromSymbolAsync(dst, g_symbol, n, 0, cudaMemcpyDeviceToHost, s));
  Put("from_symbol", Observed(dst, n, 'H', 'w'));
  CK(cudaStreamSynchronize(s));
  free(src);
  free(dst);
}

// The recorder goes passive (its trace folder fills up) while pinscope
// holds a pinned buffer: copies of that buffer must keep pageable
// semantics all the same.
void Passive() {
  const size_t n = 16 * kMiB;
  void* dev = DevAlloc(n);
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  char* big = Memalign(n);
  memset(big, 'a', n);
  PutPtr("big", big);
  CK(cudaMemcpy(dev, big, n, cudaMemcpyHostToDevice));  // pinned
  char tiny[64] = {};
  for (int round = 0; round < 4; ++round) {  // ~8000 packets: the 64 KiB folder fills
    for (int i = 0; i < 2000; ++i) CK(cudaMemcpy(dev, tiny, sizeof tiny, cudaMemcpyHostToDevice));
    usleep(100 * 1000);  // let the flusher hit the full disk
  }
  Put("big_registered", fakecuda_is_registered(big));
  memset(big, 'A', n);
  CK(fakecuda_sleep_on_stream(s, 100));
  CK(cudaMemcpyAsync(dev, big, n, cudaMemcpyHostToDevice, s));
  memset(big, 'B', n);
  CK(cudaStreamSynchronize(s));
  Put("h2d_passive", Observed(DeviceBytes(dev, n), n, 'A', 'B'));
  free(big);
  Put("big_registered_after_free", fakecuda_is_registered(big));
}

// cudaMemcpyBatchAsync on buffers pinscope pinned earlier.
void Batch() {
  const size_t n = 16 * kMiB, half = n / 2;
  void* dev = DevAlloc(n);
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  char* src = Memalign(n);
  char* dst = Memalign(n);
  PutPtr("src", src);
  PutPtr("dst", dst);
  memset(src, 0, n);
  CK(cudaMemcpy(dev, src, n, cudaMemcpyHostToDevice));  // pins src
  CK(cudaMemcpy(dst, dev, n, cudaMemcpyDeviceToHost));  // pins dst
  PutPtr("dev", dev);

  cudaMemcpyAttributes attr;
  memset(&attr, 0, sizeof attr);
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  size_t idx = 0;
  // H2D: two halves of src.
  memset(src, 'F', n);
  CK(fakecuda_sleep_on_stream(s, 100));
  {
    void* dsts[2] = {dev, static_cast<char*>(dev) + half};
    const void* srcs[2] = {src, src + half};
    size_t sizes[2] = {half, half};
    CK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, &attr, &idx, 1, s));
  }
  memset(src, 'G', n);
  CK(cudaStreamSynchronize(s));
  Put("batch_h2d", Observed(DeviceBytes(dev, n), n, 'F', 'G'));
  // D2H into the two halves of dst: read at once.
  memset(dst, 'z', n);
  CK(fakecuda_sleep_on_stream(s, 100));
  {
    void* dsts[2] = {dst, dst + half};
    const void* srcs[2] = {dev, static_cast<char*>(dev) + half};
    size_t sizes[2] = {half, half};
    CK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, &attr, &idx, 1, s));
  }
  Put("batch_d2h", Observed(dst, n, 'F', 'z'));
  CK(cudaStreamSynchronize(s));
  free(src);
  free(dst);
}

// --- 3. budget --------------------------------------------------------------------

void Budget() {
  const size_t n = 8 * kMiB;
  void* dev = DevAlloc(n);
  char* b[4];
  for (int i = 0; i < 3; ++i) {
    b[i] = Memalign(n);
    memset(b[i], 'a' + i, n);
    PutPtr(("b" + std::to_string(i)).c_str(), b[i]);
  }
  for (int i = 0; i < 3; ++i) {
    CK(cudaMemcpy(dev, b[i], n, cudaMemcpyHostToDevice));  // b2: over budget
    if (!All(DeviceBytes(dev, n), n, 'a' + i)) Fail("budget: device data");
  }
  CK(cudaMemcpy(dev, b[2], n, cudaMemcpyHostToDevice));  // still over budget
  free(b[0]);                                            // frees 8 MiB of budget
  b[3] = Memalign(n);
  memset(b[3], 'd', n);
  PutPtr("b3", b[3]);
  CK(cudaMemcpy(dev, b[3], n, cudaMemcpyHostToDevice));  // pinned now
  if (!All(DeviceBytes(dev, n), n, 'd')) Fail("budget: device data");
  Put("b3_registered", fakecuda_is_registered(b[3]));
  for (int i = 1; i < 4; ++i) free(b[i]);
}

// A plain job for the settings tests: a 1 MiB and a 16 MiB buffer, copied
// both ways, results checked.
void Simple() {
  const size_t n = 16 * kMiB;
  void* dev = DevAlloc(n);
  char* small = static_cast<char*>(malloc(kMiB));
  char* big = Memalign(n);
  PutPtr("small", small);
  PutPtr("big", big);
  memset(small, 1, kMiB);
  memset(big, 2, n);
  CK(cudaMemcpy(dev, small, kMiB, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dev, big, n, cudaMemcpyHostToDevice));
  memset(big, 0, n);
  CK(cudaMemcpy(big, dev, n, cudaMemcpyDeviceToHost));
  if (!All(big, n, 2)) Fail("simple: data");
  Put("ok", 1);
  free(small);
  free(big);
}

// cudaHostRegister refuses the buffer (the program registered its first
// page itself: 712): the copy goes pageable, and later copies do not try
// again until the program's own unregister changes the picture.
void RegisterFails() {
  const size_t n = 16 * kMiB;
  void* dev = DevAlloc(n);
  char* buf = Memalign(n);
  memset(buf, 'f', n);
  PutPtr("buf", buf);
  CK(cudaHostRegister(buf, 4096, cudaHostRegisterDefault));
  char* part = buf + 8 * kMiB;
  CK(cudaMemcpy(dev, part, 4 * kMiB, cudaMemcpyHostToDevice));  // FAILED (712)
  Put("last_error_after_failed_pin", cudaGetLastError());
  CK(cudaMemcpy(dev, part, 4 * kMiB, cudaMemcpyHostToDevice));  // FAILED, no new attempt
  if (!All(DeviceBytes(dev, 4 * kMiB), 4 * kMiB, 'f')) Fail("register fails: device data");
  PutStats("before_");
  CK(cudaHostUnregister(buf));
  CK(cudaMemcpy(dev, part, 4 * kMiB, cudaMemcpyHostToDevice));  // REGISTERED
  free(buf);
  PutStats("");
}

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

// One CUDA call on the main thread first, so the trace's CudaRuntimeInfo
// is written before any thread copies (the recorder writes it on the first
// CUDA call, and another thread's copy could otherwise overtake it).
void NoteCudaFirst() { CK(cudaDeviceSynchronize()); }

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

// --- 10. pin-ahead (PINSCOPE_PIN_AHEAD) -----------------------------------------

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
}  // namespace

int main(int argc, char** argv) {
  std::string s = argc > 1 ? argv[1] : "";
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
  else if (s == "ahead") Ahead();
  else if (s == "ahead_unused") AheadUnused();
  else if (s == "ahead_threads")
    AheadThreads();
  else {
    fprintf(stderr, "unknown scenario %s\n", s.c_str());
    return 2;
  }
  return 0;
}
