// e2e_copies_prog12: the CUDA 12.8 ABI of cudaMemcpyBatchAsync (9 arguments,
// `size_t* failIdx` before the stream), linked against the libcudart.so.12
// double. pinscope's hook must read the stream from the 9th argument here.
//   e2e_copies_prog12 batch
// The toolkit's headers are CUDA 13's: move their 8-argument prototypes out
// of the way and declare the 12.8 ones, as code built with CUDA 12.8 sees them.
#define cudaMemcpyBatchAsync fake13hdr_cudaMemcpyBatchAsync
#include <cuda_runtime_api.h>
#undef cudaMemcpyBatchAsync

#include <cstdint>
#include <cstring>
#include <string>

#include "program_util.h"

extern "C" {
cudaError_t cudaMemcpyBatchAsync(void** dsts, void** srcs, size_t* sizes, size_t count,
                                 cudaMemcpyAttributes* attrs, size_t* attrsIdxs, size_t numAttrs,
                                 size_t* failIdx, cudaStream_t stream);
cudaError_t cudaMemcpyBatchAsync_ptsz(void** dsts, void** srcs, size_t* sizes, size_t count,
                                      cudaMemcpyAttributes* attrs, size_t* attrsIdxs,
                                      size_t numAttrs, size_t* failIdx, cudaStream_t stream);
}

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) != "batch") return 2;
  Bufs b = SetUpBufs();
  CK(cudaMemcpy(b.d0, b.host, 1001, cudaMemcpyHostToDevice));
  void* dsts[3] = {b.d0, b.pinned, b.managed};
  void* srcs[3] = {b.host, b.d0, b.d0};
  size_t sizes[3] = {2001, 2002, 2003};
  cudaMemcpyAttributes attr;
  memset(&attr, 0, sizeof attr);
  attr.srcAccessOrder = cudaMemcpySrcAccessOrderStream;
  size_t idx = 0;
  size_t fail = 12345;
  CK(cudaMemcpyBatchAsync(dsts, srcs, sizes, 3, &attr, &idx, 1, &fail, b.s));
  Put("fail_ok", fail);
  CK(cudaMemcpyBatchAsync_ptsz(dsts, srcs, sizes, 2, &attr, &idx, 1, &fail, nullptr));
  fail = 12345;
  CK_FAILS(cudaMemcpyBatchAsync(dsts, srcs, sizes, 2, &attr, &idx, 1, &fail, nullptr),
           cudaErrorInvalidValue);
  Put("fail_legacy", fail);
  return 0;
}
