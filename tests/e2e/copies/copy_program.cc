// e2e_copies_prog: an unmodified CUDA program (linked against the CUDA 13
// runtime double) that makes a known set of copies, one scenario per run:
//   e2e_copies_prog SCENARIO [ARG]
// The checker (e2e_copies_test) runs it under LD_PRELOAD=libpinscope.so and
// compares the trace with what the scenario did; see the checker for the
// expected events of each scenario. Addresses and thread ids go to stdout.
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>

#include <cstring>
#include <string>
#include <thread>

#include "fake_cudart.h"
#include "program_util.h"
#include "ptsz_calls.h"

namespace {

// A __device__ symbol, as far as the runtime double is concerned.
char g_symbol[256];

// cudaMemcpy with every kind, then cudaMemcpyDefault with every pair.
void Kinds(Bufs& b) {
  CK(cudaMemcpy(b.d0, b.host, 1001, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(b.host, b.d0, 1002, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(b.d0, b.pinned, 1003, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(b.pinned, b.d0, 1004, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(b.managed, b.d0, 1005, cudaMemcpyDeviceToDevice));
  CK(cudaMemcpy(b.host2, b.host, 1006, cudaMemcpyHostToHost));
  CK(cudaMemcpy(b.d0, b.host, 1007, cudaMemcpyDefault));
  CK(cudaMemcpy(b.pinned, b.d0, 1008, cudaMemcpyDefault));
  CK(cudaMemcpy(b.managed, b.d0, 1009, cudaMemcpyDefault));
  CK(cudaMemcpy(b.host2, b.pinned, 1010, cudaMemcpyDefault));
  CK(cudaMemcpy(b.d0, b.managed, 1011, cudaMemcpyDefault));
}

// cudaMemcpyAsync on a created stream, legacy 0, cudaStreamLegacy and
// cudaStreamPerThread (handle 2, through the ordinary entry point).
void Async(Bufs& b) {
  CK(cudaMemcpyAsync(b.d0, b.pinned, 1001, cudaMemcpyHostToDevice, b.s));
  CK(cudaMemcpyAsync(b.pinned, b.d0, 1002, cudaMemcpyDeviceToHost, nullptr));
  CK(cudaMemcpyAsync(b.d0, b.host, 1003, cudaMemcpyDefault, cudaStreamPerThread));
  CK(cudaMemcpyAsync(b.host, b.d0, 1004, cudaMemcpyDeviceToHost, cudaStreamLegacy));
}

void TwoDThreeD(Bufs& b) {
  CK(cudaMemcpy2D(b.d0, 256, b.host, 300, 200, 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy2DAsync(b.pinned, 128, b.d0, 256, 96, 8, cudaMemcpyDeviceToHost, b.s));
  cudaMemcpy3DParms p;
  memset(&p, 0, sizeof p);
  p.srcPtr = PitchedPtr(b.pinned, 64, 64, 4);
  p.dstPtr = PitchedPtr(b.d0, 64, 64, 4);
  p.extent = Extent(64, 4, 2);
  p.kind = cudaMemcpyHostToDevice;
  CK(cudaMemcpy3D(&p));
  memset(&p, 0, sizeof p);
  p.srcPtr = PitchedPtr(b.d0, 32, 32, 4);
  p.dstPtr = PitchedPtr(b.host, 32, 32, 4);
  p.extent = Extent(32, 4, 3);
  p.kind = cudaMemcpyDefault;
  CK(cudaMemcpy3DAsync(&p, b.s));
}

// Needs FAKECUDA_DEVICES=2.
void Peer(Bufs& b) {
  void* d1 = nullptr;
  CK(cudaSetDevice(1));
  CK(cudaMalloc(&d1, kBufBytes));
  CK(cudaSetDevice(0));
  PutPtr("d1", d1);
  CK(cudaMemcpyPeer(d1, 1, b.d0, 0, 1001));
  CK(cudaMemcpyPeerAsync(b.d0, 0, d1, 1, 1002, b.s));
}

void Symbol(Bufs& b) {
  CK(fakecuda_register_symbol(g_symbol, sizeof g_symbol));
  PutPtr("symbol", g_symbol);
  CK(cudaMemcpyToSymbol(g_symbol, b.host, 64, 0, cudaMemcpyHostToDevice));
  CK(cudaMemcpyToSymbolAsync(g_symbol, b.pinned, 65, 0, cudaMemcpyHostToDevice, b.s));
  CK(cudaMemcpyFromSymbol(b.host, g_symbol, 66, 0, cudaMemcpyDeviceToHost));
  CK(cudaMemcpyFromSymbolAsync(b.pinned, g_symbol, 67, 0, cudaMemcpyDefault, b.s));
}

// CUDA 13 ABI: 8 arguments.
void Batch(Bufs& b) {
  void* dsts[4] = {b.d0, b.pinned, b.managed, b.host2};
  const void* srcs[4] = {b.host, b.d0, b.d0, b.pinned};
  size_t sizes[4] = {1001, 1002, 1003, 1004};
  cudaMemcpyAttributes attr;
  memset(&attr, 0, sizeof attr);
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  size_t idx = 0;
  CK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 4, &attr, &idx, 1, b.s));
  // The legacy stream is refused: every element is recorded with the error.
  CK_FAILS(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, &attr, &idx, 1, nullptr),
           cudaErrorInvalidValue);
}

void Errors(Bufs& b) {
  CK_FAILS(cudaMemcpy(b.d0, b.host, 1001, static_cast<cudaMemcpyKind>(7)),
           cudaErrorInvalidMemcpyDirection);
  // The double refuses a pageable side the kind calls device memory.
  CK_FAILS(cudaMemcpy(b.host2, b.host, 1002, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  CK_FAILS(cudaMemcpyAsync(b.d0, b.pinned, 1003, cudaMemcpyHostToDevice,
                           reinterpret_cast<cudaStream_t>(0x7777)),
           cudaErrorInvalidResourceHandle);
  CK(cudaMemcpy(b.d0, b.host, 1004, cudaMemcpyHostToDevice));
}

void Syncs(Bufs& b) {
  cudaEvent_t ev;
  CK(cudaEventCreate(&ev));
  CK(cudaMemcpyAsync(b.d0, b.pinned, 1001, cudaMemcpyHostToDevice, b.s));
  CK(cudaStreamSynchronize(b.s));
  CK(cudaDeviceSynchronize());
  CK(cudaEventRecord(ev, b.s));
  CK(cudaEventSynchronize(ev));
  CK(cudaStreamSynchronize(nullptr));
  CK_FAILS(cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(0x7777)),
           cudaErrorInvalidResourceHandle);
}

// Host-blocked time: the stream is busy for 100 ms before each copy.
void Blocking(Bufs& b) {
  CK(fakecuda_sleep_on_stream(b.s, 100));
  CK(cudaMemcpyAsync(b.d0, b.host, 1001, cudaMemcpyHostToDevice, b.s));  // waits
  CK(cudaStreamSynchronize(b.s));
  CK(fakecuda_sleep_on_stream(b.s, 100));
  CK(cudaMemcpyAsync(b.d0, b.pinned, 1002, cudaMemcpyHostToDevice, b.s));  // enqueued only
  CK(cudaStreamSynchronize(b.s));
}

// The pointer-kind cache must see the program's own (un)registration.
void Register(Bufs& b) {
  char* buf = static_cast<char*>(aligned_alloc(4096, kBufBytes));
  PutPtr("buf", buf);
  CK(cudaMemcpy(b.d0, buf, 1001, cudaMemcpyHostToDevice));
  CK(cudaHostRegister(buf, kBufBytes, cudaHostRegisterDefault));
  CK(cudaMemcpy(b.d0, buf, 1002, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(buf, b.d0, 1003, cudaMemcpyDefault));
  CK(cudaHostUnregister(buf));
  CK(cudaMemcpy(b.d0, buf, 1004, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(buf, b.d0, 1005, cudaMemcpyDefault));
}

// Two named threads copy, one after the other (a deterministic order).
void Threads(Bufs& b) {
  CK(cudaMemcpy(b.d0, b.host, 1001, cudaMemcpyHostToDevice));
  const char* names[2] = {"copier-a", "copier-b"};
  for (int i = 0; i < 2; ++i) {
    std::thread t([&b, i, &names] {
      pthread_setname_np(pthread_self(), names[i]);
      PutTid(i == 0 ? "tid_a" : "tid_b");
      CK(cudaMemcpy(b.d0, b.host, 2001 + 10 * i, cudaMemcpyHostToDevice));
      CK(cudaMemcpyAsync(b.pinned, b.d0, 2002 + 10 * i, cudaMemcpyDeviceToHost, b.s));
      CK(cudaStreamSynchronize(b.s));
    });
    t.join();
  }
}

// Copies, then idles until killed (PINSCOPE_FLUSH_MS makes them reach disk).
void SleepUntilKilled(Bufs& b) {
  for (int i = 0; i < 5; ++i)
    CK(cudaMemcpy(b.d0, b.host, 1001 + i, cudaMemcpyHostToDevice));
  Put("ready", 1);
  for (;;) pause();
}

void Many(Bufs& b, int n) {
  for (int i = 0; i < n; ++i)
    CK(cudaMemcpyAsync(b.d0, b.pinned, 64, cudaMemcpyHostToDevice, b.s));
  CK(cudaStreamSynchronize(b.s));
}

// FAKECUDA_DEVICES=0: nothing works, the program carries on regardless.
void NoGpu() {
  char* a = static_cast<char*>(malloc(4096));
  char* c = static_cast<char*>(malloc(4096));
  PutPtr("a", a);
  PutPtr("c", c);
  PutTid("main_tid");
  CK_FAILS(cudaMemcpy(c, a, 1001, cudaMemcpyHostToDevice), cudaErrorNoDevice);
  CK_FAILS(cudaMemcpy(a, c, 1002, cudaMemcpyDeviceToHost), cudaErrorNoDevice);
  CK_FAILS(cudaMemcpyAsync(c, a, 1003, cudaMemcpyHostToHost, nullptr), cudaErrorNoDevice);
}

// Recording paused and resumed through the shim's control ABI
// (pinscope_recording_pause): a copy before, a copy and a wait while
// paused, a copy after; then paused again until the exit. Without the shim
// the symbol is missing ("pause_missing").
void Paused(Bufs& b) {
  using PauseFn = int (*)(int);
  auto pause = reinterpret_cast<PauseFn>(dlsym(RTLD_DEFAULT, "pinscope_recording_pause"));
  if (!pause) {
    Put("pause_missing", 1);
    return;
  }
  CK(cudaMemcpy(b.d0, b.host, 1001, cudaMemcpyHostToDevice));
  Put("pause_rc", static_cast<unsigned long long>(pause(1) + 10));
  Put("pause_again_rc", static_cast<unsigned long long>(pause(1) + 10));
  CK(cudaMemcpy(b.d0, b.host, 1002, cudaMemcpyHostToDevice));
  CK(cudaDeviceSynchronize());
  Put("resume_rc", static_cast<unsigned long long>(pause(0) + 10));
  CK(cudaMemcpy(b.host, b.d0, 1003, cudaMemcpyDeviceToHost));
  Put("last_pause_rc", static_cast<unsigned long long>(pause(1) + 10));
  CK(cudaMemcpy(b.d0, b.host, 1004, cudaMemcpyHostToDevice));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s SCENARIO [ARG]\n", argv[0]);
    return 2;
  }
  std::string sc = argv[1];
  int arg = argc > 2 ? atoi(argv[2]) : 0;
  if (sc == "none") return 0;  // linked against the runtime, never calls it
  if (sc == "nogpu") {
    NoGpu();
    return 0;
  }
  Bufs b = SetUpBufs();
  if (sc == "one") {
    CK(cudaMemcpy(b.d0, b.host, 1001, cudaMemcpyHostToDevice));
    return arg;  // return from main: exit status through libc's own exit
  } else if (sc == "exit") {
    CK(cudaMemcpy(b.d0, b.host, 1001, cudaMemcpyHostToDevice));
    exit(arg);
  } else if (sc == "_exit") {
    CK(cudaMemcpy(b.d0, b.host, 1001, cudaMemcpyHostToDevice));
    fflush(stdout);
    _exit(arg);
  } else if (sc == "exec_missing") {
    // An exec that fails (no such file): the process goes on copying.
    CK(cudaMemcpy(b.d0, b.host, 1001, cudaMemcpyHostToDevice));
    char* const args[] = {const_cast<char*>("missing"), nullptr};
    errno = 0;
    int rc = execv("/nonexistent/pinscope-e2e-missing", args);
    Put("exec_rc", static_cast<unsigned long long>(rc + 10));
    Put("exec_errno", static_cast<unsigned long long>(errno));
    CK(cudaMemcpy(b.d0, b.host, 1002, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b.host, b.d0, 1003, cudaMemcpyDeviceToHost));
  } else if (sc == "kinds") {
    Kinds(b);
  } else if (sc == "async") {
    Async(b);
  } else if (sc == "2d3d") {
    TwoDThreeD(b);
  } else if (sc == "peer") {
    Peer(b);
  } else if (sc == "symbol") {
    Symbol(b);
  } else if (sc == "batch") {
    Batch(b);
  } else if (sc == "ptsz") {
    CK(fakecuda_register_symbol(g_symbol, sizeof g_symbol));
    PutPtr("symbol", g_symbol);
    PerThreadCalls(b, g_symbol);
  } else if (sc == "errors") {
    Errors(b);
  } else if (sc == "sync") {
    Syncs(b);
  } else if (sc == "blocking") {
    Blocking(b);
  } else if (sc == "register") {
    Register(b);
  } else if (sc == "threads") {
    Threads(b);
  } else if (sc == "sleep") {
    SleepUntilKilled(b);
  } else if (sc == "paused") {
    Paused(b);
  } else if (sc == "many") {
    Many(b, arg);
  } else {
    fprintf(stderr, "unknown scenario %s\n", sc.c_str());
    return 2;
  }
  return 0;
}
