// The copy path: what every CUDA copy and host-wait hook does between the
// guard and the real call - classify both sides, take the call stack (copies
// only: the report names a host wait by the copy before it), let pinning
// decide (and keep pageable semantics), push the call id to CUPTI, time the
// call and record it. The exported hooks (interpose/interpose_cuda.cc)
// only build a CopyCall from their arguments and hand the real call here as
// a callable; tests drive these functions directly with the CUDA runtime
// test double, without LD_PRELOAD (tests/shim/copy).
//
// Contract: thread-safe; never allocates through malloc; returns exactly
// what the real call returned and leaves the runtime's error state as the
// real call left it; with the recorder passive and no pinned memory, the
// real call runs alone (one relaxed load each).
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "shim/record/recorder.h"

namespace pinscope::shim {

// A callable `int ()` by reference: the real CUDA call, run at most once.
// It refers to the caller's callable (a lambda temporary lives until the
// end of the full expression that hands it in).
class RealCall {
 public:
  template <typename F>
  RealCall(F&& f)  // NOLINT: implicit, like a function_ref
      : obj_(const_cast<void*>(static_cast<const void*>(&f))),
        fn_([](void* o) { return static_cast<int>((*static_cast<std::remove_reference_t<F>*>(o))()); }) {}
  int operator()() const { return fn_(obj_); }

 private:
  void* obj_;
  int (*fn_)(void*);
};

// One side of a copy: a pointer, or a __device__ symbol (cudaMemcpy*Symbol).
struct CopySide {
  const void* ptr = nullptr;
  bool symbol = false;
};

// The stream value the trace records for cudaStreamPerThread (2).
inline constexpr uint64_t kPerThreadStreamValue = 2;

// A copy record with the caller's arguments. In a _ptds/_ptsz entry point
// stream 0 is the calling thread's default stream: recorded as
// cudaStreamPerThread (2), not the legacy stream.
CopyCall MakeCopyCall(uint32_t api, bool per_thread, int kind, uint64_t bytes, uint64_t stream);

// cudaMemcpy* (1D, 2D, 3D, peer, symbol): classifies dst and src, records
// the copy, returns the real call's result.
int TracedCopy(CopyCall& r, CopySide dst, CopySide src, RealCall call);

// cudaStreamSynchronize / cudaDeviceSynchronize / cudaEventSynchronize.
int TracedSync(uint32_t api, uint64_t stream, RealCall call);

// cudaMemcpyBatchAsync: one CopyEvent per element, all with the call's
// times and call id. `stream` is the batch's stream.
int TracedBatch(bool per_thread, void* const* dsts, const void* const* srcs, const size_t* sizes,
                size_t count, uint64_t stream, RealCall call);

// The direction a copy moves data, from the requested cudaMemcpyKind, else
// (cudaMemcpyDefault) from the two sides' memory kinds.
uint32_t DirectionFor(int requested_kind, uint32_t src_kind, uint32_t dst_kind);

}  // namespace pinscope::shim
