// Another build of tests/e2e/symbols' library (other code, so another build
// id and other names at the same offsets): put at the path the job loaded,
// it must be detected as changed, never read for names.
#include <cuda_runtime_api.h>

namespace othercase {

__attribute__((noinline)) int WrongName(int n) {
  static char host[4096];
  void* device = nullptr;
  if (cudaMalloc(&device, sizeof host) != cudaSuccess) return 90;
  int rc = cudaMemcpy(device, host, sizeof host, cudaMemcpyHostToDevice);
  asm volatile("" ::: "memory");
  return rc + n;
}

__attribute__((noinline)) int WrongNameToo(int n) { return WrongName(n) + 1; }

}  // namespace othercase

extern "C" int symcase_run(int n) { return othercase::WrongNameToo(n); }
