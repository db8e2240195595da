// Exported CUDA runtime hooks: each resolves the real function, builds a
// CopyCall from its arguments and hands the real call to the copy path
// (shim/core/copy_path.h), where everything else happens
// (heaptrack_preload.cpp style). The runtime's host-memory calls
// (cudaHostAlloc and friends, cudaHostRegister/Unregister, cudaMallocManaged,
// cudaFree) are short enough to do their own recording and tell pinning
// here, under the same guard.
// Each hook is defined under a C++ name with an asm label giving the CUDA
// symbol, so our definitions never clash with the header's prototypes (the
// _ptds/_ptsz variants and cudaMemcpyBatchAsync differ between CUDA 12 and 13).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "shim/base/clock.h"
#include "shim/base/guard.h"
#include "shim/core/copy_path.h"
#include "shim/cuda/real_runtime.h"
#include "shim/pin/pinning.h"
#include "shim/record/recorder.h"
#include "shim/record/trace_fields.h"
#include "shim/stacks/stacks.h"

#define PINSCOPE_EXPORT extern "C" __attribute__((visibility("default")))

namespace pinscope::shim {
namespace {

uint64_t StreamValue(cudaStream_t s) { return reinterpret_cast<uintptr_t>(s); }
// Non-async entry points: the legacy stream, or the per-thread default one.
uint64_t DefaultStream(bool per_thread) { return per_thread ? kPerThreadStreamValue : 0; }

uint64_t Bytes3D(const cudaMemcpy3DParms* p) {
  return p ? static_cast<uint64_t>(p->extent.width) * p->extent.height * p->extent.depth : 0;
}
CopySide Src3D(const cudaMemcpy3DParms* p) { return {p ? p->srcPtr.ptr : nullptr, false}; }
CopySide Dst3D(const cudaMemcpy3DParms* p) { return {p ? p->dstPtr.ptr : nullptr, false}; }

cudaError_t Copy(CopyCall& r, CopySide dst, CopySide src, RealCall call) {
  return static_cast<cudaError_t>(TracedCopy(r, dst, src, call));
}

}  // namespace
}  // namespace pinscope::shim

using namespace pinscope::shim;
namespace f = pinscope::shim::fields;

// ---------------------------------------------------------------------------
// 1D copies

#define PS_MEMCPY(NAME, PER_THREAD)                                                     \
  PINSCOPE_EXPORT cudaError_t ps_##NAME(void* dst, const void* src, size_t n,           \
                                        cudaMemcpyKind k) __asm__(#NAME);               \
  cudaError_t ps_##NAME(void* dst, const void* src, size_t n, cudaMemcpyKind k) {       \
    using Fn = cudaError_t (*)(void*, const void*, size_t, cudaMemcpyKind);             \
    static RealFn<Fn> real(#NAME);                                                      \
    Fn fn = real.get();                                                                 \
    if (!fn) return cudaErrorInitializationError;                                       \
    CopyCall r = MakeCopyCall(f::kMemcpy, PER_THREAD, k, n, DefaultStream(PER_THREAD)); \
    return Copy(r, CopySide{dst, false}, CopySide{src, false},                          \
                [&] { return fn(dst, src, n, k); });                                    \
  }
PS_MEMCPY(cudaMemcpy, false)
PS_MEMCPY(cudaMemcpy_ptds, true)

#define PS_MEMCPY_ASYNC(NAME, PER_THREAD)                                                         \
  PINSCOPE_EXPORT cudaError_t ps_##NAME(void* dst, const void* src, size_t n, cudaMemcpyKind k,   \
                                        cudaStream_t s) __asm__(#NAME);                           \
  cudaError_t ps_##NAME(void* dst, const void* src, size_t n, cudaMemcpyKind k, cudaStream_t s) { \
    using Fn = cudaError_t (*)(void*, const void*, size_t, cudaMemcpyKind, cudaStream_t);         \
    static RealFn<Fn> real(#NAME);                                                                \
    Fn fn = real.get();                                                                           \
    if (!fn) return cudaErrorInitializationError;                                                 \
    CopyCall r = MakeCopyCall(f::kMemcpyAsync, PER_THREAD, k, n, StreamValue(s));                 \
    return Copy(r, CopySide{dst, false}, CopySide{src, false},                                    \
                [&] { return fn(dst, src, n, k, s); });                                           \
  }
PS_MEMCPY_ASYNC(cudaMemcpyAsync, false)
PS_MEMCPY_ASYNC(cudaMemcpyAsync_ptsz, true)

// ---------------------------------------------------------------------------
// 2D and 3D copies

#define PS_MEMCPY_2D(NAME, PER_THREAD)                                                         \
  PINSCOPE_EXPORT cudaError_t ps_##NAME(void* dst, size_t dp, const void* src, size_t sp,      \
                                        size_t w, size_t h, cudaMemcpyKind k) __asm__(#NAME);  \
  cudaError_t ps_##NAME(void* dst, size_t dp, const void* src, size_t sp, size_t w, size_t h,  \
                        cudaMemcpyKind k) {                                                    \
    using Fn =                                                                                 \
        cudaError_t (*)(void*, size_t, const void*, size_t, size_t, size_t, cudaMemcpyKind);   \
    static RealFn<Fn> real(#NAME);                                                             \
    Fn fn = real.get();                                                                        \
    if (!fn) return cudaErrorInitializationError;                                              \
    CopyCall r =                                                                               \
        MakeCopyCall(f::kMemcpy2D, PER_THREAD, k, uint64_t{w} * h, DefaultStream(PER_THREAD)); \
    r.height = h;                                                                              \
    return Copy(r, CopySide{dst, false}, CopySide{src, false},                                 \
                [&] { return fn(dst, dp, src, sp, w, h, k); });                                \
  }
PS_MEMCPY_2D(cudaMemcpy2D, false)
PS_MEMCPY_2D(cudaMemcpy2D_ptds, true)

#define PS_MEMCPY_2D_ASYNC(NAME, PER_THREAD)                                                       \
  PINSCOPE_EXPORT cudaError_t ps_##NAME(void* dst, size_t dp, const void* src, size_t sp,          \
                                        size_t w, size_t h, cudaMemcpyKind k,                      \
                                        cudaStream_t s) __asm__(#NAME);                            \
  cudaError_t ps_##NAME(void* dst, size_t dp, const void* src, size_t sp, size_t w, size_t h,      \
                        cudaMemcpyKind k, cudaStream_t s) {                                        \
    using Fn = cudaError_t (*)(void*, size_t, const void*, size_t, size_t, size_t, cudaMemcpyKind, \
                               cudaStream_t);                                                      \
    static RealFn<Fn> real(#NAME);                                                                 \
    Fn fn = real.get();                                                                            \
    if (!fn) return cudaErrorInitializationError;                                                  \
    CopyCall r = MakeCopyCall(f::kMemcpy2DAsync, PER_THREAD, k, uint64_t{w} * h, StreamValue(s));  \
    r.height = h;                                                                                  \
    return Copy(r, CopySide{dst, false}, CopySide{src, false},                                     \
                [&] { return fn(dst, dp, src, sp, w, h, k, s); });                                 \
  }
PS_MEMCPY_2D_ASYNC(cudaMemcpy2DAsync, false)
PS_MEMCPY_2D_ASYNC(cudaMemcpy2DAsync_ptsz, true)

#define PS_MEMCPY_3D(NAME, PER_THREAD)                                               \
  PINSCOPE_EXPORT cudaError_t ps_##NAME(const cudaMemcpy3DParms* p) __asm__(#NAME);  \
  cudaError_t ps_##NAME(const cudaMemcpy3DParms* p) {                                \
    using Fn = cudaError_t (*)(const cudaMemcpy3DParms*);                            \
    static RealFn<Fn> real(#NAME);                                                   \
    Fn fn = real.get();                                                              \
    if (!fn) return cudaErrorInitializationError;                                    \
    CopyCall r = MakeCopyCall(f::kMemcpy3D, PER_THREAD, p ? p->kind : 0, Bytes3D(p), \
                              DefaultStream(PER_THREAD));                            \
    r.height = p ? p->extent.height * p->extent.depth : 0;                           \
    return Copy(r, Dst3D(p), Src3D(p), [&] { return fn(p); });                       \
  }
PS_MEMCPY_3D(cudaMemcpy3D, false)
PS_MEMCPY_3D(cudaMemcpy3D_ptds, true)

#define PS_MEMCPY_3D_ASYNC(NAME, PER_THREAD)                                                      \
  PINSCOPE_EXPORT cudaError_t ps_##NAME(const cudaMemcpy3DParms* p,                               \
                                        cudaStream_t s) __asm__(#NAME);                           \
  cudaError_t ps_##NAME(const cudaMemcpy3DParms* p, cudaStream_t s) {                             \
    using Fn = cudaError_t (*)(const cudaMemcpy3DParms*, cudaStream_t);                           \
    static RealFn<Fn> real(#NAME);                                                                \
    Fn fn = real.get();                                                                           \
    if (!fn) return cudaErrorInitializationError;                                                 \
    CopyCall r =                                                                                  \
        MakeCopyCall(f::kMemcpy3DAsync, PER_THREAD, p ? p->kind : 0, Bytes3D(p), StreamValue(s)); \
    r.height = p ? p->extent.height * p->extent.depth : 0;                                        \
    return Copy(r, Dst3D(p), Src3D(p), [&] { return fn(p, s); });                                 \
  }
PS_MEMCPY_3D_ASYNC(cudaMemcpy3DAsync, false)
PS_MEMCPY_3D_ASYNC(cudaMemcpy3DAsync_ptsz, true)

// ---------------------------------------------------------------------------
// Peer copies

PINSCOPE_EXPORT cudaError_t ps_cudaMemcpyPeer(void* dst, int dd, const void* src, int sd,
                                              size_t n) __asm__("cudaMemcpyPeer");
cudaError_t ps_cudaMemcpyPeer(void* dst, int dd, const void* src, int sd, size_t n) {
  using Fn = cudaError_t (*)(void*, int, const void*, int, size_t);
  static RealFn<Fn> real("cudaMemcpyPeer");
  Fn fn = real.get();
  if (!fn) return cudaErrorInitializationError;
  CopyCall r = MakeCopyCall(f::kMemcpyPeer, false, cudaMemcpyDeviceToDevice, n, 0);
  return Copy(r, CopySide{dst, false}, CopySide{src, false},
              [&] { return fn(dst, dd, src, sd, n); });
}

PINSCOPE_EXPORT cudaError_t ps_cudaMemcpyPeerAsync(void* dst, int dd, const void* src, int sd,
                                                   size_t n,
                                                   cudaStream_t s) __asm__("cudaMemcpyPeerAsync");
cudaError_t ps_cudaMemcpyPeerAsync(void* dst, int dd, const void* src, int sd, size_t n,
                                   cudaStream_t s) {
  using Fn = cudaError_t (*)(void*, int, const void*, int, size_t, cudaStream_t);
  static RealFn<Fn> real("cudaMemcpyPeerAsync");
  Fn fn = real.get();
  if (!fn) return cudaErrorInitializationError;
  CopyCall r =
      MakeCopyCall(f::kMemcpyPeerAsync, false, cudaMemcpyDeviceToDevice, n, StreamValue(s));
  return Copy(r, CopySide{dst, false}, CopySide{src, false},
              [&] { return fn(dst, dd, src, sd, n, s); });
}

// ---------------------------------------------------------------------------
// Symbol copies

#define PS_TO_SYMBOL(NAME, PER_THREAD)                                                          \
  PINSCOPE_EXPORT cudaError_t ps_##NAME(const void* sym, const void* src, size_t n, size_t off, \
                                        cudaMemcpyKind k) __asm__(#NAME);                       \
  cudaError_t ps_##NAME(const void* sym, const void* src, size_t n, size_t off,                 \
                        cudaMemcpyKind k) {                                                     \
    using Fn = cudaError_t (*)(const void*, const void*, size_t, size_t, cudaMemcpyKind);       \
    static RealFn<Fn> real(#NAME);                                                              \
    Fn fn = real.get();                                                                         \
    if (!fn) return cudaErrorInitializationError;                                               \
    CopyCall r = MakeCopyCall(f::kMemcpyToSymbol, PER_THREAD, k, n, DefaultStream(PER_THREAD)); \
    return Copy(r, CopySide{sym, true}, CopySide{src, false},                                   \
                [&] { return fn(sym, src, n, off, k); });                                       \
  }
PS_TO_SYMBOL(cudaMemcpyToSymbol, false)
PS_TO_SYMBOL(cudaMemcpyToSymbol_ptds, true)

#define PS_TO_SYMBOL_ASYNC(NAME, PER_THREAD)                                                      \
  PINSCOPE_EXPORT cudaError_t ps_##NAME(const void* sym, const void* src, size_t n, size_t off,   \
                                        cudaMemcpyKind k, cudaStream_t s) __asm__(#NAME);         \
  cudaError_t ps_##NAME(const void* sym, const void* src, size_t n, size_t off, cudaMemcpyKind k, \
                        cudaStream_t s) {                                                         \
    using Fn =                                                                                    \
        cudaError_t (*)(const void*, const void*, size_t, size_t, cudaMemcpyKind, cudaStream_t);  \
    static RealFn<Fn> real(#NAME);                                                                \
    Fn fn = real.get();                                                                           \
    if (!fn) return cudaErrorInitializationError;                                                 \
    CopyCall r = MakeCopyCall(f::kMemcpyToSymbolAsync, PER_THREAD, k, n, StreamValue(s));         \
    return Copy(r, CopySide{sym, true}, CopySide{src, false},                                     \
                [&] { return fn(sym, src, n, off, k, s); });                                      \
  }
PS_TO_SYMBOL_ASYNC(cudaMemcpyToSymbolAsync, false)
PS_TO_SYMBOL_ASYNC(cudaMemcpyToSymbolAsync_ptsz, true)

#define PS_FROM_SYMBOL(NAME, PER_THREAD)                                                          \
  PINSCOPE_EXPORT cudaError_t ps_##NAME(void* dst, const void* sym, size_t n, size_t off,         \
                                        cudaMemcpyKind k) __asm__(#NAME);                         \
  cudaError_t ps_##NAME(void* dst, const void* sym, size_t n, size_t off, cudaMemcpyKind k) {     \
    using Fn = cudaError_t (*)(void*, const void*, size_t, size_t, cudaMemcpyKind);               \
    static RealFn<Fn> real(#NAME);                                                                \
    Fn fn = real.get();                                                                           \
    if (!fn) return cudaErrorInitializationError;                                                 \
    CopyCall r = MakeCopyCall(f::kMemcpyFromSymbol, PER_THREAD, k, n, DefaultStream(PER_THREAD)); \
    return Copy(r, CopySide{dst, false}, CopySide{sym, true},                                     \
                [&] { return fn(dst, sym, n, off, k); });                                         \
  }
PS_FROM_SYMBOL(cudaMemcpyFromSymbol, false)
PS_FROM_SYMBOL(cudaMemcpyFromSymbol_ptds, true)

#define PS_FROM_SYMBOL_ASYNC(NAME, PER_THREAD)                                                    \
  PINSCOPE_EXPORT cudaError_t ps_##NAME(void* dst, const void* sym, size_t n, size_t off,         \
                                        cudaMemcpyKind k, cudaStream_t s) __asm__(#NAME);         \
  cudaError_t ps_##NAME(void* dst, const void* sym, size_t n, size_t off, cudaMemcpyKind k,       \
                        cudaStream_t s) {                                                         \
    using Fn = cudaError_t (*)(void*, const void*, size_t, size_t, cudaMemcpyKind, cudaStream_t); \
    static RealFn<Fn> real(#NAME);                                                                \
    Fn fn = real.get();                                                                           \
    if (!fn) return cudaErrorInitializationError;                                                 \
    CopyCall r = MakeCopyCall(f::kMemcpyFromSymbolAsync, PER_THREAD, k, n, StreamValue(s));       \
    return Copy(r, CopySide{dst, false}, CopySide{sym, true},                                     \
                [&] { return fn(dst, sym, n, off, k, s); });                                      \
  }
PS_FROM_SYMBOL_ASYNC(cudaMemcpyFromSymbolAsync, false)
PS_FROM_SYMBOL_ASYNC(cudaMemcpyFromSymbolAsync_ptsz, true)

// ---------------------------------------------------------------------------
// cudaMemcpyBatchAsync: CUDA 12.8/12.9 take a `size_t* failIdx` before the
// stream (9 arguments), CUDA 13 does not (8). The hook takes 9 and reads
// the stream from the 8th or 9th according to the loaded runtime; with an
// 8-argument caller the 9th is an unused stack/register slot, never
// dereferenced.

namespace {
using Batch13 = cudaError_t (*)(void* const*, const void* const*, const size_t*, size_t,
                                cudaMemcpyAttributes*, size_t*, size_t, cudaStream_t);
using Batch12 = cudaError_t (*)(void* const*, const void* const*, const size_t*, size_t,
                                cudaMemcpyAttributes*, size_t*, size_t, size_t*, cudaStream_t);

cudaError_t BatchHook(void* real_fn, bool per_thread, void* const* dsts, const void* const* srcs,
                      const size_t* sizes, size_t count, cudaMemcpyAttributes* attrs, size_t* idxs,
                      size_t nattrs, void* arg8, void* arg9) {
  bool v12 = RuntimeMajor() == 12;
  cudaStream_t stream = static_cast<cudaStream_t>(v12 ? arg9 : arg8);
  auto call = [&] {
    if (v12)
      return reinterpret_cast<Batch12>(real_fn)(dsts, srcs, sizes, count, attrs, idxs, nattrs,
                                                static_cast<size_t*>(arg8), stream);
    return reinterpret_cast<Batch13>(real_fn)(dsts, srcs, sizes, count, attrs, idxs, nattrs,
                                              stream);
  };
  return static_cast<cudaError_t>(
      TracedBatch(per_thread, dsts, srcs, sizes, count, StreamValue(stream), call));
}
}  // namespace

#define PS_BATCH(NAME, PER_THREAD)                                                              \
  PINSCOPE_EXPORT cudaError_t ps_##NAME(void* const* d, const void* const* s, const size_t* z,  \
                                        size_t c, cudaMemcpyAttributes* a, size_t* i, size_t n, \
                                        void* a8, void* a9) __asm__(#NAME);                     \
  cudaError_t ps_##NAME(void* const* d, const void* const* s, const size_t* z, size_t c,        \
                        cudaMemcpyAttributes* a, size_t* i, size_t n, void* a8, void* a9) {     \
    static RealFn<void*> real(#NAME);                                                           \
    void* fn = real.get();                                                                      \
    if (!fn) return cudaErrorInitializationError;                                               \
    return BatchHook(fn, PER_THREAD, d, s, z, c, a, i, n, a8, a9);                              \
  }
PS_BATCH(cudaMemcpyBatchAsync, false)
PS_BATCH(cudaMemcpyBatchAsync_ptsz, true)

// ---------------------------------------------------------------------------
// Host waits on the device

PINSCOPE_EXPORT cudaError_t
ps_cudaStreamSynchronize(cudaStream_t s) __asm__("cudaStreamSynchronize");
cudaError_t ps_cudaStreamSynchronize(cudaStream_t s) {
  static RealFn<cudaError_t (*)(cudaStream_t)> real("cudaStreamSynchronize");
  auto fn = real.get();
  if (!fn) return cudaErrorInitializationError;
  return static_cast<cudaError_t>(
      TracedSync(f::kStreamSynchronize, StreamValue(s), [&] { return fn(s); }));
}

PINSCOPE_EXPORT cudaError_t
ps_cudaStreamSynchronize_ptsz(cudaStream_t s) __asm__("cudaStreamSynchronize_ptsz");
cudaError_t ps_cudaStreamSynchronize_ptsz(cudaStream_t s) {
  static RealFn<cudaError_t (*)(cudaStream_t)> real("cudaStreamSynchronize_ptsz");
  auto fn = real.get();
  if (!fn) return cudaErrorInitializationError;
  // Stream 0 here is the per-thread default stream (see MakeCopyCall).
  return static_cast<cudaError_t>(TracedSync(
      f::kStreamSynchronize, s ? StreamValue(s) : kPerThreadStreamValue, [&] { return fn(s); }));
}

PINSCOPE_EXPORT cudaError_t ps_cudaDeviceSynchronize() __asm__("cudaDeviceSynchronize");
cudaError_t ps_cudaDeviceSynchronize() {
  static RealFn<cudaError_t (*)()> real("cudaDeviceSynchronize");
  auto fn = real.get();
  if (!fn) return cudaErrorInitializationError;
  return static_cast<cudaError_t>(TracedSync(f::kDeviceSynchronize, 0, [&] { return fn(); }));
}

PINSCOPE_EXPORT cudaError_t ps_cudaEventSynchronize(cudaEvent_t e) __asm__("cudaEventSynchronize");
cudaError_t ps_cudaEventSynchronize(cudaEvent_t e) {
  static RealFn<cudaError_t (*)(cudaEvent_t)> real("cudaEventSynchronize");
  auto fn = real.get();
  if (!fn) return cudaErrorInitializationError;
  return static_cast<cudaError_t>(TracedSync(f::kEventSynchronize, 0, [&] { return fn(e); }));
}

// ---------------------------------------------------------------------------
// Calls that change what kind of memory an address is. They invalidate the
// pointer cache, record the program's own pinned allocations, and let the
// pinning module keep its registrations out of the program's way.

PINSCOPE_EXPORT cudaError_t ps_cudaHostRegister(void* p, size_t n,
                                                unsigned int flags) __asm__("cudaHostRegister");
cudaError_t ps_cudaHostRegister(void* p, size_t n, unsigned int flags) {
  static RealFn<cudaError_t (*)(void*, size_t, unsigned int)> real("cudaHostRegister");
  auto fn = real.get();
  if (!fn) return cudaErrorInitializationError;
  if (InHook()) return fn(p, n, flags);
  HookScope scope;
  PinReleaseRange(p, n, "program_register");
  cudaError_t rc = fn(p, n, flags);
  BumpPointerGeneration();
  return rc;
}

PINSCOPE_EXPORT cudaError_t ps_cudaHostUnregister(void* p) __asm__("cudaHostUnregister");
cudaError_t ps_cudaHostUnregister(void* p) {
  static RealFn<cudaError_t (*)(void*)> real("cudaHostUnregister");
  auto fn = real.get();
  if (!fn) return cudaErrorInitializationError;
  if (InHook()) return fn(p);
  HookScope scope;
  int pin_rc = 0;
  if (PinProgramUnregister(p, &pin_rc)) return static_cast<cudaError_t>(pin_rc);  // pinscope's
  cudaError_t rc = fn(p);
  BumpPointerGeneration();
  return rc;
}

namespace {
cudaError_t TracedHostAlloc(void** pp, size_t n, unsigned int flags, bool with_flags) {
  static RealFn<cudaError_t (*)(void**, size_t, unsigned int)> real_flags("cudaHostAlloc");
  static RealFn<cudaError_t (*)(void**, size_t)> real_plain("cudaMallocHost");
  auto call = [&]() -> cudaError_t {
    if (with_flags) {
      auto fn = real_flags.get();
      return fn ? fn(pp, n, flags) : cudaErrorInitializationError;
    }
    auto fn = real_plain.get();
    return fn ? fn(pp, n) : cudaErrorInitializationError;
  };
  if (InHook() || !Recording()) return call();
  HookScope scope;
  uint64_t t = MonoNs();
  cudaError_t rc = call();
  const uint64_t took = MonoNs() - t;
  BumpPointerGeneration();
  if (rc == cudaSuccess && pp && *pp && n >= GetConfig().trace_min)
    RecordAlloc(f::kCudaHostAlloc, reinterpret_cast<uintptr_t>(*pp), n, 0, 0,
                CaptureStack(StackSite::kAlloc), t, took);
  return rc;
}
}  // namespace

PINSCOPE_EXPORT cudaError_t ps_cudaHostAlloc(void** pp, size_t n,
                                             unsigned int flags) __asm__("cudaHostAlloc");
cudaError_t ps_cudaHostAlloc(void** pp, size_t n, unsigned int flags) {
  return TracedHostAlloc(pp, n, flags, true);
}

PINSCOPE_EXPORT cudaError_t ps_cudaMallocHost(void** pp, size_t n) __asm__("cudaMallocHost");
cudaError_t ps_cudaMallocHost(void** pp, size_t n) { return TracedHostAlloc(pp, n, 0, false); }

PINSCOPE_EXPORT cudaError_t ps_cudaFreeHost(void* p) __asm__("cudaFreeHost");
cudaError_t ps_cudaFreeHost(void* p) {
  static RealFn<cudaError_t (*)(void*)> real("cudaFreeHost");
  auto fn = real.get();
  if (!fn) return cudaErrorInitializationError;
  if (InHook() || !Recording()) return fn(p);
  HookScope scope;
  // Recorded before the real free: the address may be reused at once.
  if (p) RecordFree(reinterpret_cast<uintptr_t>(p), false, MonoNs());
  cudaError_t rc = fn(p);
  BumpPointerGeneration();
  return rc;
}

PINSCOPE_EXPORT cudaError_t ps_cudaMallocManaged(void** pp, size_t n,
                                                 unsigned int flags) __asm__("cudaMallocManaged");
cudaError_t ps_cudaMallocManaged(void** pp, size_t n, unsigned int flags) {
  static RealFn<cudaError_t (*)(void**, size_t, unsigned int)> real("cudaMallocManaged");
  auto fn = real.get();
  if (!fn) return cudaErrorInitializationError;
  cudaError_t rc = fn(pp, n, flags);
  BumpPointerGeneration();
  return rc;
}

PINSCOPE_EXPORT cudaError_t ps_cudaFree(void* p) __asm__("cudaFree");
cudaError_t ps_cudaFree(void* p) {
  static RealFn<cudaError_t (*)(void*)> real("cudaFree");
  auto fn = real.get();
  if (!fn) return cudaErrorInitializationError;
  cudaError_t rc = fn(p);
  if (p) BumpPointerGeneration();
  return rc;
}
