// e2e_pinning_prog, sections 1-3: which buffers pinscope pins, copies of
// pinned buffers with pageable semantics, the budget and the settings.
#include "pin_program.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "fake_cudart.h"
#include "program_util.h"

namespace pin_program {
namespace {

// Neither is a recorded block: pinscope cannot pin them.
char g_static[8 * kMiB];

// What a buffer holds: 1 = the expected value everywhere, 2 = the other one
// everywhere, 0 = a mix (never acceptable).
int Observed(const char* p, size_t n, char want, char other) {
  if (All(p, n, want)) return 1;
  if (All(p, n, other)) return 2;
  return 0;
}

// The "__device__ symbol" Symbol() copies to and from.
char g_symbol[16 * kMiB];

}  // namespace

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

}  // namespace pin_program
