// fake_cudart.cc: a TEST DOUBLE of the CUDA runtime (libcudart) for
// pinscope's CPU-only CI. It is NOT NVIDIA's runtime and drives no GPU.
//
// Built twice from the same sources:
//   libcudart.so.13 (FAKE_CUDART_MAJOR=13, CUDA 13.0 ABI, version node
//                    libcudart.so.13, cudaRuntimeGetVersion() == 13000)
//   libcudart.so.12 (FAKE_CUDART_MAJOR=12, CUDA 12.8 ABI of the batch copies,
//                    version node libcudart.so.12, version 12080)
//
// Everything lives in host memory: "device" allocations are aligned_alloc
// blocks tracked in a range table, pinned host memory is a MAP_SHARED
// anonymous mapping (like the real cudaHostAlloc) or a cudaHostRegister'ed
// range, every stream is a FIFO run by its own worker thread so that work is
// really asynchronous. Copies follow the real runtime's host-synchronisation
// rules (pinscope facts, section 6):
//   - blocking copies (cudaMemcpy, cudaMemcpy2D, ...) wait for prior work on
//     the default stream, copy, and return;
//   - an async copy whose host side is pageable (not in the range table)
//     waits for prior work on its stream and completes before returning;
//   - an async copy whose host side is pinned (or device to device) is only
//     enqueued: the copy happens later on the stream's worker.
// Streams created without cudaStreamNonBlocking synchronise with the legacy
// default stream both ways, like the real legacy stream.
//
// Every exported entry point is a thin wrapper over internal functions: the
// library never calls its own exported symbols, so an LD_PRELOADed shim sees
// exactly the calls the program made (as with the real runtime).
//
// The sources, one area each (fake_cudart_internal.h lists them): this file
// holds the process state, the range table of tracked memory, fork and the
// error strings.

#include "fake_cudart_internal.h"

#include <pthread.h>

#include <algorithm>
#include <cstdlib>

namespace fakecuda {

// ---------------------------------------------------------------------------
// Process state. Leaked on purpose: worker threads may still run at exit.

Global& G() {
  static Global* g = new Global;
  return *g;
}

constinit thread_local int t_device = 0;
constinit thread_local cudaError_t t_last_error = cudaSuccess;

int device_count() {
  static const int n = [] {
    const char* e = std::getenv("FAKECUDA_DEVICES");
    if (e == nullptr || *e == '\0') return 1;
    char* end = nullptr;
    long v = std::strtol(e, &end, 10);
    if (*end != '\0' || v < 0) return 1;
    return static_cast<int>(std::min(v, 64L));
  }();
  return n;
}

// ---------------------------------------------------------------------------
// Range table

RangeIt find_range(uintptr_t p) {
  auto& r = G().ranges;
  auto it = r.upper_bound(p);
  if (it == r.begin()) return r.end();
  --it;
  if (p < it->first + it->second.size) return it;
  return r.end();
}

Loc classify(const void* p, size_t span) {
  Global& g = G();
  std::lock_guard<std::mutex> lk(g.rmu);
  Loc l;
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto it = find_range(a);
  if (it == g.ranges.end()) return l;
  const Range& r = it->second;
  l.device = r.device;
  l.fits = span <= it->first + r.size - a;
  switch (r.kind) {
    case RK::Device:
    case RK::Symbol: l.mem = Mem::Device; break;
    case RK::Managed: l.mem = Mem::Managed; break;
    case RK::PinnedAlloc:
    case RK::Registered: l.mem = Mem::Pinned; break;
  }
  return l;
}

void insert_range(const void* p, Range r) {
  Global& g = G();
  std::lock_guard<std::mutex> lk(g.rmu);
  g.ranges[reinterpret_cast<uintptr_t>(p)] = r;
}

namespace {

// ---------------------------------------------------------------------------
// fork(): worker threads do not survive it. The prepare handler takes every
// lock so the child inherits consistent state; the child then gives every
// stream and event fresh synchronisation objects (the inherited condition
// variables may count waiters that no longer exist), drops pending work (it
// belonged to the parent) and lets enqueue() start workers again on demand.

void atfork_prepare() {
  Global& g = G();
  g.mu.lock();
  g.rmu.lock();
  for (auto& s : g.defaults)
    if (s) s->sy->m.lock();
  for (auto& kv : g.streams) kv.second->sy->m.lock();
  for (auto& kv : g.events) kv.second->sy->m.lock();
}

void atfork_parent() {
  Global& g = G();
  for (auto& kv : g.events) kv.second->sy->m.unlock();
  for (auto& kv : g.streams) kv.second->sy->m.unlock();
  for (auto& s : g.defaults)
    if (s) s->sy->m.unlock();
  g.rmu.unlock();
  g.mu.unlock();
}

void reset_stream_in_child(Stream* s) {
  s->sy = new Sync;  // the old one is leaked on purpose
  // Leak the parent's pending ops too: destroying their captures could
  // release objects whose locks were held by threads that are gone.
  new std::deque<std::function<void()>>(std::move(s->q));
  s->q.clear();
  s->done = s->enq;
  s->worker = false;
}

void atfork_child() {
  Global& g = G();
  for (auto& s : g.defaults)
    if (s) reset_stream_in_child(s.get());
  for (auto& kv : g.streams) reset_stream_in_child(kv.second.get());
  for (auto& kv : g.events) {
    kv.second->sy = new Sync;
    kv.second->done = kv.second->rec;
  }
  g.rmu.unlock();
  g.mu.unlock();
}

__attribute__((constructor)) void fake_cudart_init() {
  G();
  pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

// ---------------------------------------------------------------------------
// Error strings

struct ErrorText {
  cudaError_t code;
  const char* name;
  const char* text;
};

constexpr ErrorText kErrors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError",
     "initialization error"},
    {cudaErrorInvalidPitchValue, "cudaErrorInvalidPitchValue",
     "invalid pitch argument"},
    {cudaErrorInvalidSymbol, "cudaErrorInvalidSymbol", "invalid device symbol"},
    {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer",
     "invalid device pointer"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection",
     "invalid copy direction for memcpy"},
    {cudaErrorNoDevice, "cudaErrorNoDevice",
     "no CUDA-capable device is detected"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle",
     "invalid resource handle"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorIllegalAddress, "cudaErrorIllegalAddress",
     "an illegal memory access was encountered"},
    {cudaErrorHostMemoryAlreadyRegistered, "cudaErrorHostMemoryAlreadyRegistered",
     "part or all of the requested memory range is already mapped"},
    {cudaErrorHostMemoryNotRegistered, "cudaErrorHostMemoryNotRegistered",
     "pointer does not correspond to a registered memory region"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
    {cudaErrorUnknown, "cudaErrorUnknown", "unknown error"},
};

const ErrorText* find_error(cudaError_t e) {
  for (const ErrorText& t : kErrors)
    if (t.code == e) return &t;
  return nullptr;
}

}  // namespace
}  // namespace fakecuda

using fakecuda::ErrorText;
using fakecuda::find_error;
using fakecuda::t_last_error;

// --- Errors ---------------------------------------------------------------

FAKE_API cudaError_t cudaGetLastError(void) {
  cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}

FAKE_API cudaError_t cudaPeekAtLastError(void) { return t_last_error; }

FAKE_API const char* cudaGetErrorName(cudaError_t e) {
  const ErrorText* t = find_error(e);
  return t ? t->name : "unrecognized error code";
}

FAKE_API const char* cudaGetErrorString(cudaError_t e) {
  const ErrorText* t = find_error(e);
  return t ? t->text : "unrecognized error code";
}
