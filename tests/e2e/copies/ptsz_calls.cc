// Compiled with the per-thread default stream on: every cudaMemcpy* below
// is the _ptds / _ptsz symbol, and stream 0 means the calling thread's
// default stream (recorded as handle 2).
#define CUDA_API_PER_THREAD_DEFAULT_STREAM 1
#include "ptsz_calls.h"

#include <cstring>

void PerThreadCalls(Bufs& b, const void* symbol) {
  CK(cudaMemcpy(b.d0, b.host, 1001, cudaMemcpyHostToDevice));                    // _ptds
  CK(cudaMemcpyAsync(b.d0, b.pinned, 1002, cudaMemcpyHostToDevice, nullptr));    // _ptsz, 0
  CK(cudaMemcpyAsync(b.pinned, b.d0, 1003, cudaMemcpyDeviceToHost, b.s));        // _ptsz, s
  CK(cudaMemcpy2D(b.d0, 256, b.host, 256, 100, 2, cudaMemcpyHostToDevice));      // _ptds
  CK(cudaMemcpy2DAsync(b.pinned, 64, b.d0, 64, 50, 3, cudaMemcpyDefault, nullptr));  // _ptsz
  cudaMemcpy3DParms p;
  memset(&p, 0, sizeof p);
  p.srcPtr = PitchedPtr(b.host, 16, 16, 2);
  p.dstPtr = PitchedPtr(b.d0, 16, 16, 2);
  p.extent = Extent(16, 2, 2);
  p.kind = cudaMemcpyHostToDevice;
  CK(cudaMemcpy3D(&p));                                                          // _ptds
  CK(cudaMemcpy3DAsync(&p, nullptr));                                            // _ptsz
  CK(cudaMemcpyToSymbol(symbol, b.host, 32, 0, cudaMemcpyHostToDevice));         // _ptds
  CK(cudaMemcpyToSymbolAsync(symbol, b.pinned, 33, 0, cudaMemcpyHostToDevice, nullptr));
  CK(cudaMemcpyFromSymbol(b.host, symbol, 34, 0, cudaMemcpyDeviceToHost));       // _ptds
  CK(cudaMemcpyFromSymbolAsync(b.pinned, symbol, 35, 0, cudaMemcpyDeviceToHost, nullptr));
  void* dsts[2] = {b.d0, b.host2};
  const void* srcs[2] = {b.pinned, b.d0};
  size_t sizes[2] = {1011, 1012};
  cudaMemcpyAttributes attr;
  memset(&attr, 0, sizeof attr);
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  size_t idx = 0;
  CK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, &attr, &idx, 1, nullptr));       // _ptsz
  CK(cudaStreamSynchronize(nullptr));                                            // _ptsz
}
