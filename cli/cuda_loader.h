// The few CUDA runtime functions `pinscope calibrate` needs, resolved with
// dlopen/dlsym at run time: the CLI never links libcudart, so one binary works
// with CUDA 12 and 13 runtimes and on machines without CUDA (where calibrate
// says so and exits 2). cuda_runtime_api.h is included for the types only.
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

namespace pinscope::cli {

// Function pointer table over one dlopened libcudart. Only functions whose
// signature is the same in CUDA 12 and 13 (no cudaGetDeviceProperties: its
// struct changes with the version).
struct CudaApi {
  void* handle = nullptr;
  std::string path;  // the file that was loaded (resolved through dlinfo)

  cudaError_t (*GetDeviceCount)(int*) = nullptr;
  cudaError_t (*SetDevice)(int) = nullptr;
  cudaError_t (*RuntimeGetVersion)(int*) = nullptr;
  cudaError_t (*DriverGetVersion)(int*) = nullptr;
  const char* (*GetErrorString)(cudaError_t) = nullptr;
  const char* (*GetErrorName)(cudaError_t) = nullptr;           // optional
  cudaError_t (*DeviceGetPCIBusId)(char*, int, int) = nullptr;  // optional
  cudaError_t (*Malloc)(void**, size_t) = nullptr;
  cudaError_t (*Free)(void*) = nullptr;
  cudaError_t (*HostAlloc)(void**, size_t, unsigned int) = nullptr;
  cudaError_t (*FreeHost)(void*) = nullptr;
  cudaError_t (*MemcpyAsync)(void*, const void*, size_t, cudaMemcpyKind, cudaStream_t) = nullptr;
  cudaError_t (*StreamCreate)(cudaStream_t*) = nullptr;
  cudaError_t (*StreamDestroy)(cudaStream_t) = nullptr;
  cudaError_t (*StreamSynchronize)(cudaStream_t) = nullptr;
  cudaError_t (*EventCreate)(cudaEvent_t*) = nullptr;
  cudaError_t (*EventRecord)(cudaEvent_t, cudaStream_t) = nullptr;
  cudaError_t (*EventSynchronize)(cudaEvent_t) = nullptr;
  cudaError_t (*EventElapsedTime)(float*, cudaEvent_t, cudaEvent_t) = nullptr;
  cudaError_t (*EventDestroy)(cudaEvent_t) = nullptr;
  cudaError_t (*HostRegister)(void*, size_t, unsigned int) = nullptr;  // optional
  cudaError_t (*HostUnregister)(void*) = nullptr;                      // optional

  // "cudaErrorNoDevice (no CUDA-capable device is detected)", or the number.
  std::string ErrorText(cudaError_t error) const;
};

// One place to look for libcudart, and why it is on the list.
struct CudartCandidate {
  std::string path;   // a file path or a soname for the loader's search
  std::string where;  // "--cudart", "$PINSCOPE_CUDART", "loader path", ...
};

// The search order: --cudart (only it, if given), else $PINSCOPE_CUDART
// (only it, if set), else libcudart.so.13, .so.12, .so by soname, then the
// nvidia pip wheels that `python3` can import (nvidia/cu13/lib/libcudart.so.13,
// nvidia/cuda_runtime/lib/libcudart.so.12), then /usr/local/cuda/lib64.
std::vector<CudartCandidate> CudartCandidates(const std::string& explicit_path);

// Loads the first candidate that dlopens and has every required symbol.
// False with *error listing each candidate and why it failed.
bool LoadCudaRuntime(const std::vector<CudartCandidate>& candidates, CudaApi* api,
                     std::string* error);

// "NVIDIA H200" from /proc/driver/nvidia/gpus/<bus id>/information, else
// from `nvidia-smi -L`, else "GPU <n>".
std::string GpuName(const CudaApi& api, int device);

}  // namespace pinscope::cli
