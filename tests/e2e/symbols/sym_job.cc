// The job of tests/e2e/symbols: dlopens the library given as argv[1] and
// calls its symcase_run, which makes the copy. Linked to the CUDA runtime
// test double itself (and calling it) so the runtime is in the global scope,
// where the shim finds the real functions.
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>

int main(int argc, char** argv) {
  int devices = 0;
  if (argc < 2 || cudaGetDeviceCount(&devices) != cudaSuccess) return 2;
  void* lib = dlopen(argv[1], RTLD_NOW);
  if (lib == nullptr) {
    std::fprintf(stderr, "sym_job: %s\n", dlerror());
    return 3;
  }
  auto run = reinterpret_cast<int (*)(int)>(dlsym(lib, "symcase_run"));
  if (run == nullptr) return 4;
  return run(1) == 0 ? 0 : 5;
}
