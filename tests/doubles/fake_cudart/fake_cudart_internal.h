// fake_cudart_internal.h: the CUDA runtime TEST DOUBLE's shared state and
// building blocks, for its translation units only (see fake_cudart.cc for
// what the double emulates and how):
//   fake_cudart.cc     process state, the range table, fork, error strings
//   devices.cc         versions, devices, properties and attributes
//   streams.cc         streams (a worker thread each) and events
//   device_memory.cc   cudaMalloc*, cudaFree, cudaMemset*, __device__ symbols
//   host_memory.cc     pinned host memory, registration, pointer attributes,
//                      the test-only statistics
//   copies.cc          cudaMemcpy* (1D, 2D, 3D, peer, symbol)
//   batch_copies.cc    cudaMemcpyBatchAsync / cudaMemcpy3DBatchAsync, in the
//                      12.8 or the 13.0 ABI
// Everything here is hidden (CXX_VISIBILITY_PRESET hidden): the library
// exports only the cuda* and fakecuda_* entry points (FAKE_API).
#ifndef PINSCOPE_TESTS_DOUBLES_FAKE_CUDART_FAKE_CUDART_INTERNAL_H_
#define PINSCOPE_TESTS_DOUBLES_FAKE_CUDART_FAKE_CUDART_INTERNAL_H_

#ifndef FAKE_CUDART_MAJOR
#define FAKE_CUDART_MAJOR 13
#endif

#if FAKE_CUDART_MAJOR == 12
// The toolkit's 13.0 header declares the CUDA 13 ABI of the batch copies;
// the 12.x double defines the 12.8 ABI under the real names, so move the 13
// prototypes out of the way and declare the 12.8 ones below.
#define cudaMemcpyBatchAsync fake13hdr_cudaMemcpyBatchAsync
#define cudaMemcpy3DBatchAsync fake13hdr_cudaMemcpy3DBatchAsync
#endif
#include <cuda_runtime_api.h>
#if FAKE_CUDART_MAJOR == 12
#undef cudaMemcpyBatchAsync
#undef cudaMemcpy3DBatchAsync
#endif

#include "fake_cudart.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#define FAKE_API extern "C" __attribute__((visibility("default")))

namespace fakecuda {

#if FAKE_CUDART_MAJOR == 13
inline constexpr int kCudaVersion = 13000;
#elif FAKE_CUDART_MAJOR == 12
inline constexpr int kCudaVersion = 12080;
#else
#error "FAKE_CUDART_MAJOR must be 12 or 13"
#endif

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------------------
// Process state. Leaked on purpose: worker threads may still run at exit.

struct Sync {
  std::mutex m;
  std::condition_variable cv;
};

struct Stream {
  Sync* sy = new Sync;
  std::deque<std::function<void()>> q;  // pending ops (guarded by sy->m)
  uint64_t enq = 0;                     // ops ever enqueued
  uint64_t done = 0;                    // ops completed
  bool worker = false;                  // a worker thread serves q
  bool destroyed = false;               // cudaStreamDestroy'ed: drain, exit
  bool is_default = false;              // legacy / per-thread default stream
  int device = 0;
  unsigned flags = 0;
  int priority = 0;
  unsigned long long id = 0;
  ~Stream() { delete sy; }
};
using StreamP = std::shared_ptr<Stream>;

struct Event {
  Sync* sy = new Sync;
  uint64_t rec = 0;   // records issued
  uint64_t done = 0;  // latest record completed
  Clock::time_point t{};
  unsigned flags = 0;
  int device = 0;
  ~Event() { delete sy; }
};
using EventP = std::shared_ptr<Event>;

enum class RK { Device, Managed, PinnedAlloc, Registered, Symbol };

struct Range {
  size_t size;
  RK kind;
  int device;
  size_t map_size;  // PinnedAlloc: length of the mmap
  unsigned flags = 0;  // Registered / PinnedAlloc: the flags it was made with
};

struct Global {
  // Stream/event registries; also orders enqueues (implicit legacy-stream
  // dependencies are snapshotted under it). Lock order: mu, then a stream's
  // or event's sy->m, one at a time.
  std::mutex mu;
  std::map<cudaStream_t, StreamP> streams;
  std::vector<StreamP> defaults;  // per device, created on first use
  std::map<cudaEvent_t, EventP> events;
  std::vector<unsigned> device_flags;
  unsigned long long next_stream_id = 3;

  std::mutex rmu;  // range table
  std::map<uintptr_t, Range> ranges;
  unsigned long registered_bytes = 0;

  std::atomic<unsigned long> host_register_calls{0}, host_unregister_calls{0},
      host_alloc_calls{0}, free_host_calls{0}, pointer_attribute_calls{0},
      memcpy_calls{0};
};

Global& G();

// The calling thread's current device and sticky last error.
extern constinit thread_local int t_device;
extern constinit thread_local cudaError_t t_last_error;

// FAKECUDA_DEVICES (default 1, at most 64).
int device_count();
inline bool valid_device(int d) { return d >= 0 && d < device_count(); }

// Runs one API call: maps exceptions to error codes and records failures
// as the calling thread's sticky last error (cudaErrorNotReady is a status,
// not an error, as in the real runtime).
template <class F>
cudaError_t api(F&& f) {
  cudaError_t e;
  try {
    e = f();
  } catch (const std::bad_alloc&) {
    e = cudaErrorMemoryAllocation;
  } catch (...) {
    e = cudaErrorUnknown;
  }
  if (e != cudaSuccess && e != cudaErrorNotReady) t_last_error = e;
  return e;
}

#define CHECK_DEVICE()                                             \
  do {                                                             \
    if (::fakecuda::device_count() == 0) return cudaErrorNoDevice; \
  } while (0)

// --- Streams and events (streams.cc) ----------------------------------------

// 0, cudaStreamLegacy and cudaStreamPerThread all name the current device's
// default stream (the double does not separate the per-thread stream);
// nullptr for an unknown handle.
StreamP resolve_stream(cudaStream_t h);
EventP resolve_event(cudaEvent_t e);
// Appends fn to st; returns its sequence number (wait_done(st, seq) waits
// for it), with the legacy default stream's implicit synchronisation.
uint64_t enqueue(const StreamP& st, std::function<void()> fn);
void wait_done(const StreamP& st, uint64_t seq);
// Waits for everything enqueued so far on device `dev` (-1: all devices).
void sync_device(int dev);

// --- Range table (fake_cudart.cc) -------------------------------------------

using RangeIt = std::map<uintptr_t, Range>::iterator;

// Range containing p, or end(). Caller holds rmu.
RangeIt find_range(uintptr_t p);

enum class Mem { Pageable, Pinned, Device, Managed };

struct Loc {
  Mem mem = Mem::Pageable;
  int device = -1;
  bool fits = true;  // [p, p+span) inside the range
};

// What [p, p+span) lies in (Pageable when no range holds p).
Loc classify(const void* p, size_t span);
void insert_range(const void* p, Range r);

// --- Copies (copies.cc) -----------------------------------------------------

// A strided copy: depth slices of height rows of width bytes.
struct Region {
  char* dst = nullptr;
  const char* src = nullptr;
  size_t width = 0, height = 1, depth = 1;
  size_t dpitch = 0, spitch = 0, dslice = 0, sslice = 0;

  static Region linear(void* d, const void* s, size_t n) {
    Region r;
    r.dst = static_cast<char*>(d);
    r.src = static_cast<const char*>(s);
    r.width = n;
    r.dpitch = r.spitch = n;
    r.dslice = r.sslice = n;
    return r;
  }
  bool empty() const { return width == 0 || height == 0 || depth == 0; }
  size_t dst_span() const {
    return (depth - 1) * dslice + (height - 1) * dpitch + width;
  }
  size_t src_span() const {
    return (depth - 1) * sslice + (height - 1) * spitch + width;
  }
  void run() const {
    for (size_t z = 0; z < depth; ++z)
      for (size_t y = 0; y < height; ++y)
        std::memmove(dst + z * dslice + y * dpitch,
                     src + z * sslice + y * spitch, width);
  }
};

struct CopyCheck {
  bool src_pageable = false;
  bool dst_pageable = false;
  bool pageable() const { return src_pageable || dst_pageable; }
};

// Validates a copy against the range table (see copies.cc) and reports
// which host sides are pageable.
cudaError_t check_copy(const Region& r, cudaMemcpyKind kind, CopyCheck* out);
// Counts one cudaMemcpy* entry point call (fakecuda_get_stats).
void count_memcpy();

}  // namespace fakecuda

#endif  // PINSCOPE_TESTS_DOUBLES_FAKE_CUDART_FAKE_CUDART_INTERNAL_H_
