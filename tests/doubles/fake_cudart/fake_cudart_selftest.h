// Shared by the three files of fake_cudart_selftest (the self-test of the
// CUDA runtime TEST DOUBLE, tests/doubles/fake_cudart): the per-thread entry
// points' prototypes, small helpers and the `Fake` fixture.
//   fake_cudart_selftest.cc          versions, exports, pointer kinds,
//                                    registration, the sticky last error
//   fake_cudart_selftest_copies.cc   the asynchrony hazard, 2D/3D/peer/symbol
//                                    copies and memset, batch copies
//   fake_cudart_selftest_streams.cc  events and synchronisation, fork(), no
//                                    device, the 12.x double
// Everything is in one named namespace so that all files share one fixture
// type (GoogleTest requires it of the tests of one suite).
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fake_cudart.h"

// The per-thread-default-stream entry points have no prototype unless
// CUDA_API_PER_THREAD_DEFAULT_STREAM is defined; call them by name.
extern "C" {
cudaError_t cudaMemcpy_ptds(void*, const void*, size_t, cudaMemcpyKind);
cudaError_t cudaMemcpyAsync_ptsz(void*, const void*, size_t, cudaMemcpyKind, cudaStream_t);
cudaError_t cudaMemcpy2D_ptds(void*, size_t, const void*, size_t, size_t, size_t, cudaMemcpyKind);
cudaError_t cudaMemcpy2DAsync_ptsz(void*, size_t, const void*, size_t, size_t, size_t,
                                   cudaMemcpyKind, cudaStream_t);
cudaError_t cudaMemcpy3D_ptds(const cudaMemcpy3DParms*);
cudaError_t cudaMemcpy3DAsync_ptsz(const cudaMemcpy3DParms*, cudaStream_t);
cudaError_t cudaMemcpyToSymbol_ptds(const void*, const void*, size_t, size_t, cudaMemcpyKind);
cudaError_t cudaMemcpyFromSymbol_ptds(void*, const void*, size_t, size_t, cudaMemcpyKind);
cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void*, const void*, size_t, size_t, cudaMemcpyKind,
                                         cudaStream_t);
cudaError_t cudaMemcpyFromSymbolAsync_ptsz(void*, const void*, size_t, size_t, cudaMemcpyKind,
                                           cudaStream_t);
cudaError_t cudaMemcpyBatchAsync_ptsz(void* const*, const void* const*, const size_t*, size_t,
                                      cudaMemcpyAttributes*, size_t*, size_t, cudaStream_t);
cudaError_t cudaMemcpy3DBatchAsync_ptsz(size_t, cudaMemcpy3DBatchOp*, unsigned long long,
                                        cudaStream_t);
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t);
cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t, cudaEvent_t, unsigned int);
cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t, cudaStreamCaptureStatus*);
cudaError_t cudaEventRecord_ptsz(cudaEvent_t, cudaStream_t);
}

namespace fake_cudart_test {

using Clock = std::chrono::steady_clock;

// driver_functions.h's helpers, without its internal-header warning.
inline cudaPitchedPtr make_cudaPitchedPtr(void* p, size_t pitch, size_t xsize, size_t ysize) {
  cudaPitchedPtr r;
  r.ptr = p;
  r.pitch = pitch;
  r.xsize = xsize;
  r.ysize = ysize;
  return r;
}
inline cudaPos make_cudaPos(size_t x, size_t y, size_t z) { return cudaPos{x, y, z}; }
inline cudaExtent make_cudaExtent(size_t w, size_t h, size_t d) { return cudaExtent{w, h, d}; }

inline double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

#define ASSERT_CUDA(call) ASSERT_EQ((call), cudaSuccess) << #call

inline constexpr size_t kN = 1 << 16;

inline std::vector<char> read_device(const void* d, size_t n) {
  std::vector<char> out(n);
  EXPECT_EQ(cudaMemcpy(out.data(), d, n, cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

inline bool all_equal(const std::vector<char>& v, char c) {
  for (char x : v)
    if (x != c) return false;
  return true;
}
inline bool all_equal(const char* p, size_t n, char c) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != c) return false;
  return true;
}

inline int device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

class Fake : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_CUDA(cudaSetDevice(0));
    cudaGetLastError();
  }
  void TearDown() override { EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess); }
};

}  // namespace fake_cudart_test
