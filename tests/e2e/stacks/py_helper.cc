// Shared library for the Python test of tests/e2e/stacks: py_stacks.py calls
// stacks_py_copy through ctypes; it makes one recorded event (a cudaMemcpy of
// n KiB through the fake CUDA runtime) two native frames down.
#include <cuda_runtime_api.h>

namespace pyhelper {

char g_host[4096];

__attribute__((noinline)) int Inner(int n) {
  static void* device = nullptr;
  if (!device && cudaMalloc(&device, sizeof g_host) != cudaSuccess) return -1;
  int rc = cudaMemcpy(device, g_host, 1024 * n, cudaMemcpyHostToDevice);
  asm volatile("" ::: "memory");
  return rc;
}

__attribute__((noinline)) int Outer(int n) {
  int rc = Inner(n);
  asm volatile("" ::: "memory");
  return rc;
}

// 16 frames of its own between the caller and Outer: two callers of
// stacks_py_copy_deep differ only below the stack cache's innermost frames.
__attribute__((noinline)) int Deep(int n, int levels) {
  int rc = levels > 0 ? Deep(n, levels - 1) : Outer(n);
  asm volatile("" ::: "memory");
  return rc;
}

// Two callers of Outer with frames of one size: under one Python call,
// the stack cache's key cannot tell them apart (stacks.cc: under Python
// frames it holds the hook's return address and the depth, not the frames
// between).
__attribute__((noinline)) int TwinA(int n) {
  volatile char pad[64];
  pad[0] = static_cast<char>(n);
  int rc = Outer(n);
  asm volatile("" ::: "memory");
  return rc + pad[0] - static_cast<char>(n);
}

__attribute__((noinline)) int TwinB(int n) {
  volatile char pad[64];
  pad[0] = static_cast<char>(n);
  int rc = Outer(n);
  asm volatile("" ::: "memory");
  return rc + pad[0] - static_cast<char>(n);
}

}  // namespace pyhelper

extern "C" __attribute__((visibility("default"))) int stacks_py_copy(int n) {
  int rc = pyhelper::Outer(n);
  asm volatile("" ::: "memory");
  return rc;
}

extern "C" __attribute__((visibility("default"))) int stacks_py_copy_deep(int n) {
  int rc = pyhelper::Deep(n, 16);
  asm volatile("" ::: "memory");
  return rc;
}

// n KiB through TwinA when n is odd, else through TwinB.
extern "C" __attribute__((visibility("default"))) int stacks_py_copy_twin(int n) {
  int rc = n % 2 ? pyhelper::TwinA(n) : pyhelper::TwinB(n);
  asm volatile("" ::: "memory");
  return rc;
}
