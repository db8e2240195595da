// Finding the real CUDA runtime at run time (the shim never links libcudart)
// and classifying pointers with cudaPointerGetAttributes behind a small
// per-thread cache. Works with the CUDA 12 and 13 runtimes.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pinscope::shim {

// The next definition of `name` after this library (RTLD_NEXT), else the
// one in an already loaded libcudart.so.*. nullptr if no runtime is loaded.
void* ResolveCuda(const char* name);

// The next definition of a CUDA driver function (libcuda) after this
// library, else the one in an already loaded libcuda.so.1; nullptr (and no
// message) if the driver is not loaded.
void* ResolveDriver(const char* name);

// An address in a page of the shim's own that is never registered, mapped
// or handed to the program: CUDA's answer for it is its answer for plain
// pageable memory. Pinscope asks about it to answer the program's queries
// on memory that pinscope registered behind its back (core/pin_queries.h).
const void* NeverRegisteredAddress();

// Caches one resolved function pointer per hook.
template <typename Fn>
class RealFn {
 public:
  explicit constexpr RealFn(const char* name) : name_(name) {}
  Fn get() {
    Fn f = __atomic_load_n(&fn_, __ATOMIC_ACQUIRE);
    if (!f) {
      f = reinterpret_cast<Fn>(ResolveCuda(name_));
      __atomic_store_n(&fn_, f, __ATOMIC_RELEASE);
    }
    return f;
  }

 private:
  const char* name_;
  Fn fn_ = nullptr;
};

struct PointerInfo {
  uint32_t kind;   // fields::MemKind
  int32_t device;  // -1 for host memory
};

// Kind of memory at p. Leaves the runtime's last-error state as it found it.
// Answers from a per-thread cache (128 pointers, two ways a set) while no
// registration or allocation has changed a kind since (BumpPointerGeneration);
// else one cudaPointerGetAttributes (Counters.pointer_queries).
PointerInfo ClassifyPointer(const void* p);
// The set of the thread's pointer cache that p maps to (tests).
size_t PointerCacheSet(const void* p);

// Invalidates every thread's pointer cache: called whenever memory may
// change kind (cudaHostRegister/Unregister, cudaHostAlloc/FreeHost,
// cudaMallocManaged, cudaFree, and pinscope's own pinning).
void BumpPointerGeneration();

// 12 or 13 (from cudaRuntimeGetVersion of the resolved runtime), 0 unknown.
int RuntimeMajor();

// Called by every CUDA hook before recording: on the first call writes the
// CudaRuntimeInfo packet, and says once if no GPU is visible. True exactly
// once, on that first call when a GPU is visible: the caller then starts
// device activity (core/copy_path.cc; CUPTI sits above this layer).
bool NoteCudaUse();

// True once any CUDA hook has run in this process.
bool CudaSeen();

}  // namespace pinscope::shim
