// Helpers for the e2e_copies test programs: a manifest on stdout
// ("key=value" lines the checker reads to know addresses, streams and
// thread ids) and the common set of buffers. Programs exit 90 when the CUDA
// runtime double refuses a call that should work, so a broken scenario
// never passes as an empty trace.
#pragma once

#include <cuda_runtime_api.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#define CK(expr)                                                                        \
  do {                                                                                  \
    cudaError_t ck_rc_ = (expr);                                                        \
    if (ck_rc_ != cudaSuccess) {                                                        \
      fprintf(stderr, "%s:%d: %s returned %d\n", __FILE__, __LINE__, #expr, (int)ck_rc_); \
      exit(90);                                                                         \
    }                                                                                   \
  } while (0)

// A call that must fail with `want` (the trace records the code).
#define CK_FAILS(expr, want)                                                               \
  do {                                                                                     \
    cudaError_t ck_rc_ = (expr);                                                           \
    if (ck_rc_ != (want)) {                                                                \
      fprintf(stderr, "%s:%d: %s returned %d, expected %d\n", __FILE__, __LINE__, #expr,  \
              (int)ck_rc_, (int)(want));                                                   \
      exit(90);                                                                            \
    }                                                                                      \
    cudaGetLastError(); /* a careful program clears the sticky error */                   \
  } while (0)

// make_cudaPitchedPtr / make_cudaExtent live in driver_functions.h, which
// warns when included without nvcc.
inline cudaPitchedPtr PitchedPtr(void* p, size_t pitch, size_t xsize, size_t ysize) {
  cudaPitchedPtr r;
  r.ptr = p;
  r.pitch = pitch;
  r.xsize = xsize;
  r.ysize = ysize;
  return r;
}
inline cudaExtent Extent(size_t w, size_t h, size_t d) {
  cudaExtent e;
  e.width = w;
  e.height = h;
  e.depth = d;
  return e;
}

inline void Put(const char* key, unsigned long long v) {
  printf("%s=%llu\n", key, v);
  fflush(stdout);
}
inline void PutPtr(const char* key, const void* p) {
  Put(key, static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(p)));
}
inline void PutTid(const char* key) { Put(key, static_cast<unsigned long long>(syscall(SYS_gettid))); }

// The buffers most scenarios copy between (all below PINSCOPE_TRACE_MIN, so
// no HostAlloc events), announced in the manifest.
struct Bufs {
  void* d0 = nullptr;       // cudaMalloc on device 0
  char* host = nullptr;     // malloc: pageable
  char* host2 = nullptr;    // malloc: pageable
  void* pinned = nullptr;   // cudaHostAlloc
  void* managed = nullptr;  // cudaMallocManaged
  cudaStream_t s = nullptr; // cudaStreamCreate
};

constexpr size_t kBufBytes = 8192;

inline Bufs SetUpBufs() {
  Bufs b;
  CK(cudaMalloc(&b.d0, kBufBytes));
  b.host = static_cast<char*>(malloc(kBufBytes));
  b.host2 = static_cast<char*>(malloc(kBufBytes));
  CK(cudaHostAlloc(&b.pinned, kBufBytes, cudaHostAllocDefault));
  CK(cudaMallocManaged(&b.managed, kBufBytes, cudaMemAttachGlobal));
  CK(cudaStreamCreate(&b.s));
  PutPtr("d0", b.d0);
  PutPtr("host", b.host);
  PutPtr("host2", b.host2);
  PutPtr("pinned", b.pinned);
  PutPtr("managed", b.managed);
  PutPtr("stream", b.s);
  PutTid("main_tid");
  return b;
}
