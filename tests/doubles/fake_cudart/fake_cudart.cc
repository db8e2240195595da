// fake_cudart.cc: a TEST DOUBLE of the CUDA runtime (libcudart) for
// pinscope's CPU-only CI. It is NOT NVIDIA's runtime and drives no GPU.
//
// Built twice from this file:
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

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <utility>
#include <vector>

#if FAKE_CUDART_MAJOR == 13
static constexpr int kCudaVersion = 13000;
#elif FAKE_CUDART_MAJOR == 12
static constexpr int kCudaVersion = 12080;
#else
#error "FAKE_CUDART_MAJOR must be 12 or 13"
#endif

#define FAKE_API extern "C" __attribute__((visibility("default")))

namespace {

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

Global& G() {
  static Global* g = new Global;
  return *g;
}

thread_local int t_device = 0;
thread_local cudaError_t t_last_error = cudaSuccess;

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

bool valid_device(int d) { return d >= 0 && d < device_count(); }

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

#define CHECK_DEVICE()                                   \
  do {                                                   \
    if (device_count() == 0) return cudaErrorNoDevice;   \
  } while (0)

// ---------------------------------------------------------------------------
// Streams

void worker_main(StreamP st) {
  Sync* sy = st->sy;
  std::unique_lock<std::mutex> lk(sy->m);
  for (;;) {
    sy->cv.wait(lk, [&] { return !st->q.empty() || st->destroyed; });
    if (st->q.empty()) {
      st->worker = false;
      lk.unlock();
      return;
    }
    std::function<void()> fn = std::move(st->q.front());
    st->q.pop_front();
    lk.unlock();
    fn();
    fn = nullptr;
    lk.lock();
    ++st->done;
    sy->cv.notify_all();
  }
}

void wait_done(const StreamP& st, uint64_t seq) {
  std::unique_lock<std::mutex> lk(st->sy->m);
  st->sy->cv.wait(lk, [&] { return st->done >= seq; });
}

StreamP default_stream(int dev) {
  Global& g = G();
  std::lock_guard<std::mutex> lk(g.mu);
  if (g.defaults.size() < static_cast<size_t>(device_count()))
    g.defaults.resize(device_count());
  StreamP& s = g.defaults[dev];
  if (!s) {
    s = std::make_shared<Stream>();
    s->is_default = true;
    s->device = dev;
    s->id = 1;
  }
  return s;
}

// 0, cudaStreamLegacy and cudaStreamPerThread all name the current device's
// default stream (the double does not separate the per-thread stream).
StreamP resolve_stream(cudaStream_t h) {
  if (h == nullptr || h == cudaStreamLegacy || h == cudaStreamPerThread)
    return default_stream(t_device);
  Global& g = G();
  std::lock_guard<std::mutex> lk(g.mu);
  auto it = g.streams.find(h);
  return it == g.streams.end() ? nullptr : it->second;
}

// Appends fn to st; returns its sequence number (wait_done(st, seq) waits
// for it). Implements the legacy default stream's implicit synchronisation:
// work on the default stream waits for prior work on every blocking stream
// of its device, and work on a blocking stream waits for prior work on the
// default stream.
uint64_t enqueue(const StreamP& st, std::function<void()> fn) {
  Global& g = G();
  std::lock_guard<std::mutex> order(g.mu);
  std::vector<std::pair<StreamP, uint64_t>> deps;
  auto note = [&](const StreamP& o) {
    std::lock_guard<std::mutex> l(o->sy->m);
    if (o->enq > o->done) deps.emplace_back(o, o->enq);
  };
  if (st->is_default) {
    for (auto& kv : g.streams) {
      const StreamP& o = kv.second;
      if (o->device == st->device && !(o->flags & cudaStreamNonBlocking))
        note(o);
    }
  } else if (!(st->flags & cudaStreamNonBlocking)) {
    if (static_cast<size_t>(st->device) < g.defaults.size() &&
        g.defaults[st->device])
      note(g.defaults[st->device]);
  }
  std::function<void()> op;
  if (deps.empty()) {
    op = std::move(fn);
  } else {
    op = [deps = std::move(deps), fn = std::move(fn)] {
      for (auto& d : deps) wait_done(d.first, d.second);
      fn();
    };
  }
  std::lock_guard<std::mutex> l(st->sy->m);
  if (!st->worker) {
    // Also the lazy restart in a forked child, where workers do not exist.
    std::thread(worker_main, st).detach();
    st->worker = true;
  }
  st->q.push_back(std::move(op));
  uint64_t seq = ++st->enq;
  st->sy->cv.notify_all();
  return seq;
}

void sync_stream(const StreamP& st) {
  uint64_t seq;
  if (st->is_default) {
    // A marker picks up the implicit dependencies on blocking streams.
    seq = enqueue(st, [] {});
  } else {
    std::lock_guard<std::mutex> l(st->sy->m);
    seq = st->enq;
  }
  wait_done(st, seq);
}

bool stream_idle(const StreamP& st) {
  std::lock_guard<std::mutex> l(st->sy->m);
  return st->done >= st->enq;
}

// Waits for everything enqueued so far on device `dev` (-1: all devices).
void sync_device(int dev) {
  Global& g = G();
  std::vector<std::pair<StreamP, uint64_t>> snap;
  {
    std::lock_guard<std::mutex> lk(g.mu);
    auto add = [&](const StreamP& o) {
      if (!o || (dev >= 0 && o->device != dev)) return;
      std::lock_guard<std::mutex> l(o->sy->m);
      snap.emplace_back(o, o->enq);
    };
    for (auto& s : g.defaults) add(s);
    for (auto& kv : g.streams) add(kv.second);
  }
  for (auto& s : snap) wait_done(s.first, s.second);
}

EventP resolve_event(cudaEvent_t e) {
  Global& g = G();
  std::lock_guard<std::mutex> lk(g.mu);
  auto it = g.events.find(e);
  return it == g.events.end() ? nullptr : it->second;
}

// ---------------------------------------------------------------------------
// Range table

using RangeIt = std::map<uintptr_t, Range>::iterator;

// Range containing p, or end(). Caller holds rmu.
RangeIt find_range(uintptr_t p) {
  auto& r = G().ranges;
  auto it = r.upper_bound(p);
  if (it == r.begin()) return r.end();
  --it;
  if (p < it->first + it->second.size) return it;
  return r.end();
}

enum class Mem { Pageable, Pinned, Device, Managed };

struct Loc {
  Mem mem = Mem::Pageable;
  int device = -1;
  bool fits = true;  // [p, p+span) inside the range
};

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

// ---------------------------------------------------------------------------
// Copies

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

// Validates a copy against the range table, loosely: a side the kind calls
// "device" must be tracked memory (device, managed, symbol or pinned host,
// which the device can address), tracked device memory must contain the
// whole span, and the kind must be a cudaMemcpyKind. Reports which host
// sides are pageable (untracked, or only partly inside a pinned range).
cudaError_t check_copy(const Region& r, cudaMemcpyKind kind, CopyCheck* out) {
  if (static_cast<unsigned>(kind) > cudaMemcpyDefault)
    return cudaErrorInvalidMemcpyDirection;
  if (r.dst == nullptr || r.src == nullptr) return cudaErrorInvalidValue;
  Loc s = classify(r.src, r.src_span());
  Loc d = classify(r.dst, r.dst_span());
  for (Loc* l : {&s, &d}) {
    if (l->fits) continue;
    if (l->mem == Mem::Pinned)
      l->mem = Mem::Pageable;
    else
      return cudaErrorInvalidValue;
  }
  bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  if (src_dev && s.mem == Mem::Pageable) return cudaErrorInvalidValue;
  if (dst_dev && d.mem == Mem::Pageable) return cudaErrorInvalidValue;
  out->src_pageable = s.mem == Mem::Pageable;
  out->dst_pageable = d.mem == Mem::Pageable;
  return cudaSuccess;
}

// Submits a validated-or-not copy. blocking: cudaMemcpy-style (always waits).
// Otherwise cudaMemcpyAsync-style: waits only when a host side is pageable.
cudaError_t submit_copy(const Region& r, cudaMemcpyKind kind, cudaStream_t h,
                        bool blocking) {
  CHECK_DEVICE();
  if (static_cast<unsigned>(kind) > cudaMemcpyDefault)
    return cudaErrorInvalidMemcpyDirection;
  StreamP st = resolve_stream(h);
  if (!st) return cudaErrorInvalidResourceHandle;
  if (r.empty()) return cudaSuccess;
  CopyCheck cc;
  cudaError_t e = check_copy(r, kind, &cc);
  if (e != cudaSuccess) return e;
  uint64_t seq = enqueue(st, [r] { r.run(); });
  if (blocking || cc.pageable()) wait_done(st, seq);
  return cudaSuccess;
}

void count_memcpy() { G().memcpy_calls.fetch_add(1, std::memory_order_relaxed); }

cudaError_t copy1d(void* dst, const void* src, size_t n, cudaMemcpyKind kind,
                   cudaStream_t h, bool blocking) {
  count_memcpy();
  return submit_copy(Region::linear(dst, src, n), kind, h, blocking);
}

cudaError_t copy2d(void* dst, size_t dpitch, const void* src, size_t spitch,
                   size_t width, size_t height, cudaMemcpyKind kind,
                   cudaStream_t h, bool blocking) {
  count_memcpy();
  CHECK_DEVICE();
  if (width > dpitch || width > spitch)
    return cudaErrorInvalidPitchValue;
  Region r;
  r.dst = static_cast<char*>(dst);
  r.src = static_cast<const char*>(src);
  r.width = width;
  r.height = height;
  r.dpitch = dpitch;
  r.spitch = spitch;
  return submit_copy(r, kind, h, blocking);
}

// Region of a pitched 3D copy; arrays are not emulated.
cudaError_t region3d(cudaArray_t sa, const cudaPos& sp, const cudaPitchedPtr& s,
                     cudaArray_t da, const cudaPos& dp, const cudaPitchedPtr& d,
                     const cudaExtent& ext, Region* out) {
  if (sa != nullptr || da != nullptr) return cudaErrorInvalidValue;
  Region r;
  r.width = ext.width;
  r.height = ext.height;
  r.depth = ext.depth;
  if (r.empty()) {
    *out = r;
    return cudaSuccess;
  }
  if (s.ptr == nullptr || d.ptr == nullptr) return cudaErrorInvalidValue;
  if (sp.x + ext.width > s.pitch || dp.x + ext.width > d.pitch)
    return cudaErrorInvalidPitchValue;
  if (ext.depth > 1 && (sp.y + ext.height > s.ysize || dp.y + ext.height > d.ysize))
    return cudaErrorInvalidValue;
  r.spitch = s.pitch;
  r.dpitch = d.pitch;
  r.sslice = s.pitch * s.ysize;
  r.dslice = d.pitch * d.ysize;
  r.src = static_cast<const char*>(s.ptr) + sp.z * r.sslice + sp.y * r.spitch + sp.x;
  r.dst = static_cast<char*>(d.ptr) + dp.z * r.dslice + dp.y * r.dpitch + dp.x;
  *out = r;
  return cudaSuccess;
}

cudaError_t copy3d(const cudaMemcpy3DParms* p, cudaStream_t h, bool blocking) {
  count_memcpy();
  CHECK_DEVICE();
  if (p == nullptr) return cudaErrorInvalidValue;
  Region r;
  cudaError_t e = region3d(p->srcArray, p->srcPos, p->srcPtr, p->dstArray,
                           p->dstPos, p->dstPtr, p->extent, &r);
  if (e != cudaSuccess) return e;
  return submit_copy(r, p->kind, h, blocking);
}

cudaError_t copy3d_peer(const cudaMemcpy3DPeerParms* p, cudaStream_t h,
                        bool blocking) {
  count_memcpy();
  CHECK_DEVICE();
  if (p == nullptr) return cudaErrorInvalidValue;
  if (!valid_device(p->srcDevice) || !valid_device(p->dstDevice))
    return cudaErrorInvalidDevice;
  Region r;
  cudaError_t e = region3d(p->srcArray, p->srcPos, p->srcPtr, p->dstArray,
                           p->dstPos, p->dstPtr, p->extent, &r);
  if (e != cudaSuccess) return e;
  return submit_copy(r, cudaMemcpyDeviceToDevice, h, blocking);
}

cudaError_t copy_peer(void* dst, int dd, const void* src, int sd, size_t n,
                      cudaStream_t h, bool blocking) {
  count_memcpy();
  CHECK_DEVICE();
  if (!valid_device(dd) || !valid_device(sd)) return cudaErrorInvalidDevice;
  return submit_copy(Region::linear(dst, src, n), cudaMemcpyDeviceToDevice, h,
                     blocking);
}

// Device address of a fakecuda_register_symbol'ed symbol plus offset.
cudaError_t symbol_address(const void* sym, size_t count, size_t offset,
                           char** out) {
  Global& g = G();
  std::lock_guard<std::mutex> lk(g.rmu);
  auto it = g.ranges.find(reinterpret_cast<uintptr_t>(sym));
  if (sym == nullptr || it == g.ranges.end() || it->second.kind != RK::Symbol)
    return cudaErrorInvalidSymbol;
  if (offset > it->second.size || count > it->second.size - offset)
    return cudaErrorInvalidValue;
  *out = const_cast<char*>(static_cast<const char*>(sym)) + offset;
  return cudaSuccess;
}

cudaError_t copy_to_symbol(const void* sym, const void* src, size_t n,
                           size_t offset, cudaMemcpyKind kind, cudaStream_t h,
                           bool blocking) {
  count_memcpy();
  CHECK_DEVICE();
  if (kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToDevice &&
      kind != cudaMemcpyDefault)
    return cudaErrorInvalidMemcpyDirection;
  char* d = nullptr;
  cudaError_t e = symbol_address(sym, n, offset, &d);
  if (e != cudaSuccess) return e;
  return submit_copy(Region::linear(d, src, n), kind, h, blocking);
}

cudaError_t copy_from_symbol(void* dst, const void* sym, size_t n,
                             size_t offset, cudaMemcpyKind kind, cudaStream_t h,
                             bool blocking) {
  count_memcpy();
  CHECK_DEVICE();
  if (kind != cudaMemcpyDeviceToHost && kind != cudaMemcpyDeviceToDevice &&
      kind != cudaMemcpyDefault)
    return cudaErrorInvalidMemcpyDirection;
  char* s = nullptr;
  cudaError_t e = symbol_address(sym, n, offset, &s);
  if (e != cudaSuccess) return e;
  return submit_copy(Region::linear(dst, s, n), kind, h, blocking);
}

// One copy of a batch, after validation.
struct BatchItem {
  Region r;
  std::shared_ptr<std::vector<char>> staging;  // srcAccessOrderDuringApiCall
};

// Validates one batch copy and decides how it is ordered:
//   Stream: like cudaMemcpyAsync (waits when a host side is pageable);
//   DuringApiCall: the source is read (staged) before the call returns, the
//     destination is written in stream order (waits if it is pageable);
//   Any: the source may be read after the call returns; waits only for a
//     pageable destination.
cudaError_t batch_item(Region r, cudaMemcpySrcAccessOrder order,
                       unsigned flags, std::vector<BatchItem>* items,
                       bool* must_wait) {
  if (order != cudaMemcpySrcAccessOrderStream &&
      order != cudaMemcpySrcAccessOrderDuringApiCall &&
      order != cudaMemcpySrcAccessOrderAny)
    return cudaErrorInvalidValue;
  if (flags & ~static_cast<unsigned>(cudaMemcpyFlagPreferOverlapWithCompute))
    return cudaErrorInvalidValue;
  if (r.empty()) return cudaErrorInvalidValue;
  CopyCheck cc;
  cudaError_t e = check_copy(r, cudaMemcpyDefault, &cc);
  if (e != cudaSuccess) return e;
  BatchItem it;
  if (order == cudaMemcpySrcAccessOrderDuringApiCall) {
    it.staging = std::make_shared<std::vector<char>>(r.width * r.height * r.depth);
    Region stage = r;
    stage.dst = it.staging->data();
    stage.dpitch = r.width;
    stage.dslice = r.width * r.height;
    stage.run();
    r.src = it.staging->data();
    r.spitch = stage.dpitch;
    r.sslice = stage.dslice;
    if (cc.dst_pageable) *must_wait = true;
  } else if (order == cudaMemcpySrcAccessOrderAny) {
    if (cc.dst_pageable) *must_wait = true;
  } else if (cc.pageable()) {
    *must_wait = true;
  }
  it.r = r;
  items->push_back(std::move(it));
  return cudaSuccess;
}

cudaError_t run_batch(std::vector<BatchItem> items, const StreamP& st,
                      bool must_wait) {
  auto shared = std::make_shared<std::vector<BatchItem>>(std::move(items));
  uint64_t seq = enqueue(st, [shared] {
    for (const BatchItem& it : *shared) it.r.run();
  });
  if (must_wait) wait_done(st, seq);
  return cudaSuccess;
}

cudaError_t batch_stream(cudaStream_t h, bool ptsz, StreamP* st) {
  // "Must not be legacy NULL stream" (0 means the per-thread stream in the
  // _ptsz entry point).
  if (!ptsz && (h == nullptr || h == cudaStreamLegacy)) return cudaErrorInvalidValue;
  *st = resolve_stream(h);
  return *st ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

cudaError_t copy_batch(void* const* dsts, const void* const* srcs,
                       const size_t* sizes, size_t count,
                       cudaMemcpyAttributes* attrs, size_t* attrsIdxs,
                       size_t numAttrs, size_t* failIdx, cudaStream_t h,
                       bool ptsz) {
  count_memcpy();
  if (failIdx) *failIdx = SIZE_MAX;
  CHECK_DEVICE();
  if (count == 0 || !dsts || !srcs || !sizes || !attrs || !attrsIdxs ||
      numAttrs == 0 || numAttrs > count || attrsIdxs[0] != 0)
    return cudaErrorInvalidValue;
  for (size_t k = 1; k < numAttrs; ++k)
    if (attrsIdxs[k] <= attrsIdxs[k - 1] || attrsIdxs[k] >= count)
      return cudaErrorInvalidValue;
  StreamP st;
  cudaError_t e = batch_stream(h, ptsz, &st);
  if (e != cudaSuccess) return e;
  std::vector<BatchItem> items;
  items.reserve(count);
  bool must_wait = false;
  size_t a = 0;
  for (size_t i = 0; i < count; ++i) {
    while (a + 1 < numAttrs && attrsIdxs[a + 1] <= i) ++a;
    e = batch_item(Region::linear(dsts[i], srcs[i], sizes[i]),
                   attrs[a].srcAccessOrder, attrs[a].flags, &items, &must_wait);
    if (e != cudaSuccess) {
      if (failIdx) *failIdx = i;
      return e;
    }
  }
  return run_batch(std::move(items), st, must_wait);
}

cudaError_t copy_3d_batch(size_t numOps, cudaMemcpy3DBatchOp* ops,
                          size_t* failIdx, unsigned long long flags,
                          cudaStream_t h, bool ptsz) {
  count_memcpy();
  if (failIdx) *failIdx = SIZE_MAX;
  CHECK_DEVICE();
  if (numOps == 0 || ops == nullptr || flags != 0) return cudaErrorInvalidValue;
  StreamP st;
  cudaError_t e = batch_stream(h, ptsz, &st);
  if (e != cudaSuccess) return e;
  std::vector<BatchItem> items;
  bool must_wait = false;
  for (size_t i = 0; i < numOps; ++i) {
    const cudaMemcpy3DBatchOp& op = ops[i];
    e = cudaSuccess;
    if (op.src.type != cudaMemcpyOperandTypePointer ||
        op.dst.type != cudaMemcpyOperandTypePointer) {
      e = cudaErrorInvalidValue;  // CUDA arrays are not emulated
    } else {
      // Pointer operands: rowLength/layerHeight in elements of 1 byte,
      // 0 meaning tightly packed.
      Region r;
      r.width = op.extent.width;
      r.height = op.extent.height;
      r.depth = op.extent.depth;
      r.src = static_cast<const char*>(op.src.op.ptr.ptr);
      r.dst = static_cast<char*>(op.dst.op.ptr.ptr);
      r.spitch = op.src.op.ptr.rowLength ? op.src.op.ptr.rowLength : r.width;
      r.dpitch = op.dst.op.ptr.rowLength ? op.dst.op.ptr.rowLength : r.width;
      size_t sh = op.src.op.ptr.layerHeight ? op.src.op.ptr.layerHeight : r.height;
      size_t dh = op.dst.op.ptr.layerHeight ? op.dst.op.ptr.layerHeight : r.height;
      r.sslice = r.spitch * sh;
      r.dslice = r.dpitch * dh;
      if (r.spitch < r.width || r.dpitch < r.width || sh < r.height || dh < r.height)
        e = cudaErrorInvalidValue;
      else
        e = batch_item(r, op.srcAccessOrder, op.flags, &items, &must_wait);
    }
    if (e != cudaSuccess) {
      if (failIdx) *failIdx = i;
      return e;
    }
  }
  return run_batch(std::move(items), st, must_wait);
}

// cudaMemset*: asynchronous for device/managed memory, synchronous for
// pinned host memory (as documented for the real runtime).
cudaError_t memset_impl(void* p, int value, size_t n, cudaStream_t h) {
  CHECK_DEVICE();
  StreamP st = resolve_stream(h);
  if (!st) return cudaErrorInvalidResourceHandle;
  if (n == 0) return cudaSuccess;
  if (p == nullptr) return cudaErrorInvalidValue;
  Loc l = classify(p, n);
  if (l.mem == Mem::Pageable || !l.fits) return cudaErrorInvalidValue;
  uint64_t seq = enqueue(st, [p, value, n] { std::memset(p, value, n); });
  if (l.mem == Mem::Pinned) wait_done(st, seq);
  return cudaSuccess;
}

// ---------------------------------------------------------------------------
// Streams and events (API level)

cudaError_t stream_create(cudaStream_t* out, unsigned flags, int priority) {
  CHECK_DEVICE();
  if (out == nullptr || (flags & ~static_cast<unsigned>(cudaStreamNonBlocking)))
    return cudaErrorInvalidValue;
  auto s = std::make_shared<Stream>();
  s->device = t_device;
  s->flags = flags;
  s->priority = std::clamp(priority, -5, 0);
  Global& g = G();
  std::lock_guard<std::mutex> lk(g.mu);
  s->id = g.next_stream_id++;
  cudaStream_t h = reinterpret_cast<cudaStream_t>(s.get());
  g.streams[h] = s;
  *out = h;
  return cudaSuccess;
}

cudaError_t stream_destroy(cudaStream_t h) {
  CHECK_DEVICE();
  StreamP s;
  {
    Global& g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    auto it = g.streams.find(h);
    if (it == g.streams.end()) return cudaErrorInvalidResourceHandle;
    s = it->second;
    g.streams.erase(it);
  }
  // Like the real call, returns at once; pending work still completes.
  std::lock_guard<std::mutex> l(s->sy->m);
  s->destroyed = true;
  s->sy->cv.notify_all();
  return cudaSuccess;
}

cudaError_t stream_synchronize(cudaStream_t h) {
  CHECK_DEVICE();
  StreamP s = resolve_stream(h);
  if (!s) return cudaErrorInvalidResourceHandle;
  sync_stream(s);
  return cudaSuccess;
}

cudaError_t stream_query(cudaStream_t h) {
  CHECK_DEVICE();
  StreamP s = resolve_stream(h);
  if (!s) return cudaErrorInvalidResourceHandle;
  if (!stream_idle(s)) return cudaErrorNotReady;
  if (s->is_default) {
    std::vector<StreamP> blocking;
    {
      Global& g = G();
      std::lock_guard<std::mutex> lk(g.mu);
      for (auto& kv : g.streams)
        if (kv.second->device == s->device &&
            !(kv.second->flags & cudaStreamNonBlocking))
          blocking.push_back(kv.second);
    }
    for (auto& b : blocking)
      if (!stream_idle(b)) return cudaErrorNotReady;
  }
  return cudaSuccess;
}

cudaError_t stream_is_capturing(cudaStream_t h, cudaStreamCaptureStatus* st) {
  CHECK_DEVICE();
  if (st == nullptr) return cudaErrorInvalidValue;
  if (!resolve_stream(h)) return cudaErrorInvalidResourceHandle;
  *st = cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

cudaError_t stream_wait_event(cudaStream_t h, cudaEvent_t e, unsigned flags) {
  CHECK_DEVICE();
  if (flags & ~static_cast<unsigned>(cudaEventWaitExternal))
    return cudaErrorInvalidValue;
  StreamP s = resolve_stream(h);
  EventP ev = resolve_event(e);
  if (!s || !ev) return cudaErrorInvalidResourceHandle;
  uint64_t gen;
  {
    std::lock_guard<std::mutex> l(ev->sy->m);
    gen = ev->rec;
  }
  if (gen == 0) return cudaSuccess;  // never recorded: nothing to wait for
  enqueue(s, [ev, gen] {
    std::unique_lock<std::mutex> l(ev->sy->m);
    ev->sy->cv.wait(l, [&] { return ev->done >= gen; });
  });
  return cudaSuccess;
}

cudaError_t stream_get(cudaStream_t h, unsigned* flags, int* prio, int* dev,
                       unsigned long long* id) {
  CHECK_DEVICE();
  StreamP s = resolve_stream(h);
  if (!s) return cudaErrorInvalidResourceHandle;
  if (flags) *flags = s->flags;
  if (prio) *prio = s->priority;
  if (dev) *dev = s->device;
  if (id) *id = s->id;
  return cudaSuccess;
}

cudaError_t event_record(cudaEvent_t e, cudaStream_t h, unsigned flags) {
  CHECK_DEVICE();
  if (flags & ~static_cast<unsigned>(cudaEventRecordExternal))
    return cudaErrorInvalidValue;
  EventP ev = resolve_event(e);
  StreamP s = resolve_stream(h);
  if (!ev || !s) return cudaErrorInvalidResourceHandle;
  uint64_t gen;
  {
    std::lock_guard<std::mutex> l(ev->sy->m);
    gen = ++ev->rec;
  }
  enqueue(s, [ev, gen] {
    std::lock_guard<std::mutex> l(ev->sy->m);
    if (gen > ev->done) {
      ev->done = gen;
      ev->t = Clock::now();
    }
    ev->sy->cv.notify_all();
  });
  return cudaSuccess;
}

cudaError_t launch_host_func(cudaStream_t h, cudaHostFn_t fn, void* user) {
  CHECK_DEVICE();
  if (fn == nullptr) return cudaErrorInvalidValue;
  StreamP s = resolve_stream(h);
  if (!s) return cudaErrorInvalidResourceHandle;
  enqueue(s, [fn, user] { fn(user); });
  return cudaSuccess;
}

// ---------------------------------------------------------------------------
// Device properties

void fill_props(cudaDeviceProp* p, int dev) {
  std::memset(p, 0, sizeof(*p));
  std::snprintf(p->name, sizeof(p->name), "%s",
                "pinscope fake CUDA device (test double)");
  std::memcpy(p->uuid.bytes, "FAKECUDA-DEVICE", 15);
  p->uuid.bytes[15] = static_cast<char>(dev);
  p->totalGlobalMem = size_t{1} << 34;
  p->sharedMemPerBlock = 48 * 1024;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->memPitch = SIZE_MAX >> 1;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024;
  p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = INT_MAX;
  p->maxGridSize[1] = 65535;
  p->maxGridSize[2] = 65535;
  p->totalConstMem = 65536;
  p->major = 9;
  p->minor = 0;
  p->textureAlignment = 512;
  p->texturePitchAlignment = 32;
  p->multiProcessorCount = 132;
  p->integrated = 0;
  p->canMapHostMemory = 1;
  p->concurrentKernels = 1;
  p->pciBusID = 0x10 + dev;
  p->pciDeviceID = 0;
  p->pciDomainID = 0;
  p->asyncEngineCount = 2;
  p->unifiedAddressing = 1;
  p->memoryBusWidth = 5120;
  p->l2CacheSize = 50 * 1024 * 1024;
  p->maxThreadsPerMultiProcessor = 2048;
  p->streamPrioritiesSupported = 1;
  p->sharedMemPerMultiprocessor = 228 * 1024;
  p->regsPerMultiprocessor = 65536;
  p->managedMemory = 1;
  p->concurrentManagedAccess = 1;
  p->canUseHostPointerForRegisteredMem = 1;
  p->maxBlocksPerMultiProcessor = 32;
  p->hostRegisterSupported = 1;
  p->hostRegisterReadOnlySupported = 1;
  p->memoryPoolsSupported = 1;
}

int device_attribute(cudaDeviceAttr a, int dev) {
  switch (a) {
    case cudaDevAttrMaxThreadsPerBlock: return 1024;
    case cudaDevAttrMaxBlockDimX:
    case cudaDevAttrMaxBlockDimY: return 1024;
    case cudaDevAttrMaxBlockDimZ: return 64;
    case cudaDevAttrMaxGridDimX: return INT_MAX;
    case cudaDevAttrMaxGridDimY:
    case cudaDevAttrMaxGridDimZ: return 65535;
    case cudaDevAttrWarpSize: return 32;
    case cudaDevAttrMultiProcessorCount: return 132;
    case cudaDevAttrComputeCapabilityMajor: return 9;
    case cudaDevAttrComputeCapabilityMinor: return 0;
    case cudaDevAttrPciBusId: return 0x10 + dev;
    case cudaDevAttrPciDeviceId: return 0;
    case cudaDevAttrPciDomainId: return 0;
    case cudaDevAttrAsyncEngineCount: return 2;
    case cudaDevAttrUnifiedAddressing: return 1;
    case cudaDevAttrCanMapHostMemory: return 1;
    case cudaDevAttrConcurrentKernels: return 1;
    case cudaDevAttrManagedMemory: return 1;
    case cudaDevAttrConcurrentManagedAccess: return 1;
    case cudaDevAttrPageableMemoryAccess: return 0;
    case cudaDevAttrCanUseHostPointerForRegisteredMem: return 1;
    case cudaDevAttrHostRegisterSupported: return 1;
    case cudaDevAttrHostRegisterReadOnlySupported: return 1;
    case cudaDevAttrMemoryPoolsSupported: return 1;
    case cudaDevAttrIntegrated: return 0;
    case cudaDevAttrL2CacheSize: return 50 * 1024 * 1024;
    case cudaDevAttrMaxThreadsPerMultiProcessor: return 2048;
    case cudaDevAttrGlobalMemoryBusWidth: return 5120;
    default: return 0;
  }
}

// ---------------------------------------------------------------------------
// Host memory

cudaError_t host_alloc(void** out, size_t size, unsigned flags) {
  G().host_alloc_calls.fetch_add(1, std::memory_order_relaxed);
  CHECK_DEVICE();
  if (out == nullptr || (flags & ~0x7u)) return cudaErrorInvalidValue;
  *out = nullptr;
  if (size == 0) return cudaSuccess;
  long page = sysconf(_SC_PAGESIZE);
  size_t len = (size + page - 1) / page * page;
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                 -1, 0);
  if (p == MAP_FAILED) return cudaErrorMemoryAllocation;
  insert_range(p, Range{size, RK::PinnedAlloc, t_device, len});
  *out = p;
  return cudaSuccess;
}

cudaError_t free_host(void* p) {
  G().free_host_calls.fetch_add(1, std::memory_order_relaxed);
  CHECK_DEVICE();
  if (p == nullptr) return cudaSuccess;
  {
    Global& g = G();
    std::lock_guard<std::mutex> lk(g.rmu);
    auto it = g.ranges.find(reinterpret_cast<uintptr_t>(p));
    if (it == g.ranges.end() || it->second.kind != RK::PinnedAlloc)
      return cudaErrorInvalidValue;
  }
  sync_device(-1);  // like the real call: no pending copy may touch it
  size_t len;
  {
    Global& g = G();
    std::lock_guard<std::mutex> lk(g.rmu);
    auto it = g.ranges.find(reinterpret_cast<uintptr_t>(p));
    if (it == g.ranges.end() || it->second.kind != RK::PinnedAlloc)
      return cudaErrorInvalidValue;
    len = it->second.map_size;
    g.ranges.erase(it);
  }
  munmap(p, len);
  return cudaSuccess;
}

std::atomic<unsigned> g_register_delay_ms{0};  // fakecuda_set_register_delay_ms

cudaError_t host_register(void* p, size_t size, unsigned flags) {
  Global& g = G();
  g.host_register_calls.fetch_add(1, std::memory_order_relaxed);
  CHECK_DEVICE();
  // The real call takes milliseconds for a batch-sized range (4-14 ms for
  // 73.5 MiB on the H200); the range is registered only when it returns.
  if (unsigned ms = g_register_delay_ms.load(std::memory_order_relaxed))
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  if (p == nullptr || size == 0 || (flags & ~0xFu)) return cudaErrorInvalidValue;
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (a + size < a) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> lk(g.rmu);
  // Scan every range overlapping [a, a+size).
  auto it = g.ranges.upper_bound(a);
  if (it != g.ranges.begin()) {
    auto prev = std::prev(it);
    if (prev->first + prev->second.size > a) it = prev;
  }
  bool registered = false, other = false;
  for (; it != g.ranges.end() && it->first < a + size; ++it) {
    if (it->first + it->second.size <= a) continue;
    if (it->second.kind == RK::Registered)
      registered = true;
    else
      other = true;
  }
  // Measured (facts section 4): overlapping a registered range -> 712;
  // registering cudaHostAlloc (or device) memory -> cudaErrorInvalidValue.
  if (registered) return cudaErrorHostMemoryAlreadyRegistered;
  if (other) return cudaErrorInvalidValue;
  g.ranges[a] = Range{size, RK::Registered, t_device, 0};
  g.registered_bytes += size;
  return cudaSuccess;
}

cudaError_t host_unregister(void* p) {
  Global& g = G();
  g.host_unregister_calls.fetch_add(1, std::memory_order_relaxed);
  CHECK_DEVICE();
  if (p == nullptr) return cudaErrorInvalidValue;
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  {
    std::lock_guard<std::mutex> lk(g.rmu);
    auto it = find_range(a);
    if (it == g.ranges.end() || it->second.kind != RK::Registered)
      return cudaErrorHostMemoryNotRegistered;
    if (it->first != a) return cudaErrorInvalidValue;  // interior pointer
  }
  sync_device(-1);  // no pending copy may still use the pages
  std::lock_guard<std::mutex> lk(g.rmu);
  auto it = g.ranges.find(a);
  if (it == g.ranges.end() || it->second.kind != RK::Registered)
    return cudaErrorHostMemoryNotRegistered;
  g.registered_bytes -= it->second.size;
  g.ranges.erase(it);
  return cudaSuccess;
}

cudaError_t device_alloc(void** out, size_t size, RK kind) {
  CHECK_DEVICE();
  if (out == nullptr) return cudaErrorInvalidValue;
  *out = nullptr;
  if (size == 0) return cudaSuccess;
  if (size > (size_t{1} << 40)) return cudaErrorMemoryAllocation;
  size_t len = (size + 255) / 256 * 256;
  void* p = std::aligned_alloc(256, len);
  if (p == nullptr) return cudaErrorMemoryAllocation;
  insert_range(p, Range{size, kind, t_device, len});
  *out = p;
  return cudaSuccess;
}

cudaError_t device_free(void* p) {
  CHECK_DEVICE();
  if (p == nullptr) return cudaSuccess;
  auto is_dev = [](const Range& r) {
    return r.kind == RK::Device || r.kind == RK::Managed;
  };
  Global& g = G();
  {
    std::lock_guard<std::mutex> lk(g.rmu);
    auto it = g.ranges.find(reinterpret_cast<uintptr_t>(p));
    if (it == g.ranges.end() || !is_dev(it->second)) return cudaErrorInvalidValue;
  }
  sync_device(-1);  // cudaFree synchronises, like the real one
  {
    std::lock_guard<std::mutex> lk(g.rmu);
    auto it = g.ranges.find(reinterpret_cast<uintptr_t>(p));
    if (it == g.ranges.end() || !is_dev(it->second)) return cudaErrorInvalidValue;
    g.ranges.erase(it);
  }
  std::free(p);
  return cudaSuccess;
}

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

// ===========================================================================
// Exported entry points (C ABI). Names without a prototype in the 13.0
// header (the _ptds/_ptsz variants, the 12.x ABI) are declared here.

extern "C" {
cudaError_t cudaMemcpy_ptds(void*, const void*, size_t, cudaMemcpyKind);
cudaError_t cudaMemcpyAsync_ptsz(void*, const void*, size_t, cudaMemcpyKind, cudaStream_t);
cudaError_t cudaMemcpy2D_ptds(void*, size_t, const void*, size_t, size_t, size_t, cudaMemcpyKind);
cudaError_t cudaMemcpy2DAsync_ptsz(void*, size_t, const void*, size_t, size_t, size_t, cudaMemcpyKind, cudaStream_t);
cudaError_t cudaMemcpy3D_ptds(const cudaMemcpy3DParms*);
cudaError_t cudaMemcpy3DAsync_ptsz(const cudaMemcpy3DParms*, cudaStream_t);
cudaError_t cudaMemcpy3DPeer_ptds(const cudaMemcpy3DPeerParms*);
cudaError_t cudaMemcpy3DPeerAsync_ptsz(const cudaMemcpy3DPeerParms*, cudaStream_t);
cudaError_t cudaMemcpyToSymbol_ptds(const void*, const void*, size_t, size_t, cudaMemcpyKind);
cudaError_t cudaMemcpyFromSymbol_ptds(void*, const void*, size_t, size_t, cudaMemcpyKind);
cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void*, const void*, size_t, size_t, cudaMemcpyKind, cudaStream_t);
cudaError_t cudaMemcpyFromSymbolAsync_ptsz(void*, const void*, size_t, size_t, cudaMemcpyKind, cudaStream_t);
cudaError_t cudaMemset_ptds(void*, int, size_t);
cudaError_t cudaMemsetAsync_ptsz(void*, int, size_t, cudaStream_t);
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t);
cudaError_t cudaStreamQuery_ptsz(cudaStream_t);
cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t, cudaStreamCaptureStatus*);
cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t, cudaEvent_t, unsigned int);
cudaError_t cudaStreamGetFlags_ptsz(cudaStream_t, unsigned int*);
cudaError_t cudaStreamGetPriority_ptsz(cudaStream_t, int*);
cudaError_t cudaStreamGetDevice_ptsz(cudaStream_t, int*);
cudaError_t cudaStreamGetId_ptsz(cudaStream_t, unsigned long long*);
cudaError_t cudaEventRecord_ptsz(cudaEvent_t, cudaStream_t);
cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t, cudaStream_t, unsigned int);
cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t, cudaHostFn_t, void*);
#if FAKE_CUDART_MAJOR == 12
// CUDA 12.8 ABI (the 13.0 header has the 13 one).
cudaError_t cudaMemcpyBatchAsync(void** dsts, void** srcs, size_t* sizes, size_t count,
                                 cudaMemcpyAttributes* attrs, size_t* attrsIdxs,
                                 size_t numAttrs, size_t* failIdx, cudaStream_t stream);
cudaError_t cudaMemcpyBatchAsync_ptsz(void** dsts, void** srcs, size_t* sizes, size_t count,
                                      cudaMemcpyAttributes* attrs, size_t* attrsIdxs,
                                      size_t numAttrs, size_t* failIdx, cudaStream_t stream);
cudaError_t cudaMemcpy3DBatchAsync(size_t numOps, cudaMemcpy3DBatchOp* opList, size_t* failIdx,
                                   unsigned long long flags, cudaStream_t stream);
cudaError_t cudaMemcpy3DBatchAsync_ptsz(size_t numOps, cudaMemcpy3DBatchOp* opList,
                                        size_t* failIdx, unsigned long long flags,
                                        cudaStream_t stream);
cudaError_t cudaGetDeviceProperties_v2(cudaDeviceProp* prop, int device);
#else
cudaError_t cudaMemcpyBatchAsync_ptsz(void* const* dsts, const void* const* srcs,
                                      const size_t* sizes, size_t count,
                                      cudaMemcpyAttributes* attrs, size_t* attrsIdxs,
                                      size_t numAttrs, cudaStream_t stream);
cudaError_t cudaMemcpy3DBatchAsync_ptsz(size_t numOps, cudaMemcpy3DBatchOp* opList,
                                        unsigned long long flags, cudaStream_t stream);
#endif
}  // extern "C"

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

// --- Versions and devices -------------------------------------------------

FAKE_API cudaError_t cudaRuntimeGetVersion(int* v) {
  return api([&]() -> cudaError_t {
    if (v == nullptr) return cudaErrorInvalidValue;
    *v = kCudaVersion;
    return cudaSuccess;
  });
}

FAKE_API cudaError_t cudaDriverGetVersion(int* v) {
  return api([&]() -> cudaError_t {
    if (v == nullptr) return cudaErrorInvalidValue;
    *v = kCudaVersion;
    return cudaSuccess;
  });
}

FAKE_API cudaError_t cudaGetDeviceCount(int* count) {
  return api([&]() -> cudaError_t {
    if (count == nullptr) return cudaErrorInvalidValue;
    *count = device_count();
    return *count == 0 ? cudaErrorNoDevice : cudaSuccess;
  });
}

FAKE_API cudaError_t cudaGetDevice(int* d) {
  return api([&]() -> cudaError_t {
    CHECK_DEVICE();
    if (d == nullptr) return cudaErrorInvalidValue;
    *d = t_device;
    return cudaSuccess;
  });
}

FAKE_API cudaError_t cudaSetDevice(int d) {
  return api([&]() -> cudaError_t {
    CHECK_DEVICE();
    if (!valid_device(d)) return cudaErrorInvalidDevice;
    t_device = d;
    return cudaSuccess;
  });
}

FAKE_API cudaError_t cudaInitDevice(int d, unsigned deviceFlags, unsigned flags) {
  return api([&]() -> cudaError_t {
    CHECK_DEVICE();
    if (!valid_device(d)) return cudaErrorInvalidDevice;
    if (flags != 0 || (deviceFlags & ~static_cast<unsigned>(cudaDeviceMask)))
      return cudaErrorInvalidValue;
    return cudaSuccess;
  });
}

FAKE_API cudaError_t cudaSetDeviceFlags(unsigned flags) {
  return api([&]() -> cudaError_t {
    CHECK_DEVICE();
    if (flags & ~static_cast<unsigned>(cudaDeviceMask)) return cudaErrorInvalidValue;
    Global& g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    g.device_flags.resize(device_count());
    g.device_flags[t_device] = flags;
    return cudaSuccess;
  });
}

FAKE_API cudaError_t cudaGetDeviceFlags(unsigned* flags) {
  return api([&]() -> cudaError_t {
    CHECK_DEVICE();
    if (flags == nullptr) return cudaErrorInvalidValue;
    Global& g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    g.device_flags.resize(device_count());
    *flags = g.device_flags[t_device] | cudaDeviceMapHost;
    return cudaSuccess;
  });
}

FAKE_API cudaError_t cudaDeviceSynchronize(void) {
  return api([&]() -> cudaError_t {
    CHECK_DEVICE();
    sync_device(t_device);
    return cudaSuccess;
  });
}

static cudaError_t get_props(cudaDeviceProp* prop, int d) {
  CHECK_DEVICE();
  if (prop == nullptr) return cudaErrorInvalidValue;
  if (!valid_device(d)) return cudaErrorInvalidDevice;
  fill_props(prop, d);
  return cudaSuccess;
}

// In the 12.x double the struct is the 13.0 layout: fields up to maxGridSize
// match the 12.x layout, the rest do not (the 12.x struct is larger, so this
// never writes past the caller's struct).
FAKE_API cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int d) {
  return api([&] { return get_props(prop, d); });
}
#if FAKE_CUDART_MAJOR == 12
FAKE_API cudaError_t cudaGetDeviceProperties_v2(cudaDeviceProp* prop, int d) {
  return api([&] { return get_props(prop, d); });
}
#endif

FAKE_API cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int d) {
  return api([&]() -> cudaError_t {
    CHECK_DEVICE();
    if (value == nullptr || attr < 1 || attr >= cudaDevAttrMax)
      return cudaErrorInvalidValue;
    if (!valid_device(d)) return cudaErrorInvalidDevice;
    *value = device_attribute(attr, d);
    return cudaSuccess;
  });
}

FAKE_API cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  return api([&]() -> cudaError_t {
    CHECK_DEVICE();
    if (least) *least = 0;
    if (greatest) *greatest = -5;
    return cudaSuccess;
  });
}

// --- Memory -----------------------------------------------------------------

FAKE_API cudaError_t cudaMalloc(void** p, size_t size) {
  return api([&] { return device_alloc(p, size, RK::Device); });
}

FAKE_API cudaError_t cudaMallocManaged(void** p, size_t size, unsigned flags) {
  return api([&]() -> cudaError_t {
    if (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost)
      return device_count() == 0 ? cudaErrorNoDevice : cudaErrorInvalidValue;
    return device_alloc(p, size, RK::Managed);
  });
}

FAKE_API cudaError_t cudaMallocPitch(void** p, size_t* pitch, size_t width, size_t height) {
  return api([&]() -> cudaError_t {
    CHECK_DEVICE();
    if (pitch == nullptr) return cudaErrorInvalidValue;
    size_t w = (width + 511) / 512 * 512;
    cudaError_t e = device_alloc(p, w * height, RK::Device);
    if (e == cudaSuccess) *pitch = w;
    return e;
  });
}

FAKE_API cudaError_t cudaFree(void* p) {
  return api([&] { return device_free(p); });
}

FAKE_API cudaError_t cudaHostAlloc(void** p, size_t size, unsigned flags) {
  return api([&] { return host_alloc(p, size, flags); });
}

FAKE_API cudaError_t cudaMallocHost(void** p, size_t size) {
  return api([&] { return host_alloc(p, size, cudaHostAllocDefault); });
}

FAKE_API cudaError_t cudaFreeHost(void* p) {
  return api([&] { return free_host(p); });
}

FAKE_API cudaError_t cudaHostRegister(void* p, size_t size, unsigned flags) {
  return api([&] { return host_register(p, size, flags); });
}

FAKE_API cudaError_t cudaHostUnregister(void* p) {
  return api([&] { return host_unregister(p); });
}

FAKE_API cudaError_t cudaHostGetDevicePointer(void** dev, void* host, unsigned flags) {
  return api([&]() -> cudaError_t {
    CHECK_DEVICE();
    if (dev == nullptr || host == nullptr || flags != 0) return cudaErrorInvalidValue;
    Loc l = classify(host, 1);
    if (l.mem != Mem::Pinned) return cudaErrorInvalidValue;
    *dev = host;
    return cudaSuccess;
  });
}

FAKE_API cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* ptr) {
  G().pointer_attribute_calls.fetch_add(1, std::memory_order_relaxed);
  return api([&]() -> cudaError_t {
    CHECK_DEVICE();
    if (attr == nullptr || ptr == nullptr) return cudaErrorInvalidValue;
    std::memset(attr, 0, sizeof(*attr));
    Loc l = classify(ptr, 1);
    void* p = const_cast<void*>(ptr);
    switch (l.mem) {
      case Mem::Pageable:
        attr->type = cudaMemoryTypeUnregistered;
        attr->device = -2;
        attr->devicePointer = nullptr;
        attr->hostPointer = p;
        break;
      case Mem::Device:
        attr->type = cudaMemoryTypeDevice;
        attr->device = l.device;
        attr->devicePointer = p;
        attr->hostPointer = nullptr;
        break;
      case Mem::Managed:
        attr->type = cudaMemoryTypeManaged;
        attr->device = l.device;
        attr->devicePointer = p;
        attr->hostPointer = p;
        break;
      case Mem::Pinned:
        attr->type = cudaMemoryTypeHost;
        attr->device = l.device;
        attr->devicePointer = p;  // unified addressing: same address
        attr->hostPointer = p;
        break;
    }
    return cudaSuccess;
  });
}

FAKE_API cudaError_t cudaMemset(void* p, int v, size_t n) {
  return api([&] { return memset_impl(p, v, n, nullptr); });
}
FAKE_API cudaError_t cudaMemset_ptds(void* p, int v, size_t n) {
  return api([&] { return memset_impl(p, v, n, cudaStreamPerThread); });
}
FAKE_API cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t s) {
  return api([&] { return memset_impl(p, v, n, s); });
}
FAKE_API cudaError_t cudaMemsetAsync_ptsz(void* p, int v, size_t n, cudaStream_t s) {
  return api([&] { return memset_impl(p, v, n, s); });
}

// --- Copies -----------------------------------------------------------------

FAKE_API cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind k) {
  return api([&] { return copy1d(d, s, n, k, nullptr, true); });
}
FAKE_API cudaError_t cudaMemcpy_ptds(void* d, const void* s, size_t n, cudaMemcpyKind k) {
  return api([&] { return copy1d(d, s, n, k, cudaStreamPerThread, true); });
}
FAKE_API cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind k,
                                     cudaStream_t st) {
  return api([&] { return copy1d(d, s, n, k, st, false); });
}
FAKE_API cudaError_t cudaMemcpyAsync_ptsz(void* d, const void* s, size_t n, cudaMemcpyKind k,
                                          cudaStream_t st) {
  return api([&] { return copy1d(d, s, n, k, st, false); });
}

FAKE_API cudaError_t cudaMemcpy2D(void* d, size_t dp, const void* s, size_t sp, size_t w,
                                  size_t h, cudaMemcpyKind k) {
  return api([&] { return copy2d(d, dp, s, sp, w, h, k, nullptr, true); });
}
FAKE_API cudaError_t cudaMemcpy2D_ptds(void* d, size_t dp, const void* s, size_t sp, size_t w,
                                       size_t h, cudaMemcpyKind k) {
  return api([&] { return copy2d(d, dp, s, sp, w, h, k, cudaStreamPerThread, true); });
}
FAKE_API cudaError_t cudaMemcpy2DAsync(void* d, size_t dp, const void* s, size_t sp, size_t w,
                                       size_t h, cudaMemcpyKind k, cudaStream_t st) {
  return api([&] { return copy2d(d, dp, s, sp, w, h, k, st, false); });
}
FAKE_API cudaError_t cudaMemcpy2DAsync_ptsz(void* d, size_t dp, const void* s, size_t sp,
                                            size_t w, size_t h, cudaMemcpyKind k,
                                            cudaStream_t st) {
  return api([&] { return copy2d(d, dp, s, sp, w, h, k, st, false); });
}

FAKE_API cudaError_t cudaMemcpy3D(const cudaMemcpy3DParms* p) {
  return api([&] { return copy3d(p, nullptr, true); });
}
FAKE_API cudaError_t cudaMemcpy3D_ptds(const cudaMemcpy3DParms* p) {
  return api([&] { return copy3d(p, cudaStreamPerThread, true); });
}
FAKE_API cudaError_t cudaMemcpy3DAsync(const cudaMemcpy3DParms* p, cudaStream_t st) {
  return api([&] { return copy3d(p, st, false); });
}
FAKE_API cudaError_t cudaMemcpy3DAsync_ptsz(const cudaMemcpy3DParms* p, cudaStream_t st) {
  return api([&] { return copy3d(p, st, false); });
}

FAKE_API cudaError_t cudaMemcpy3DPeer(const cudaMemcpy3DPeerParms* p) {
  return api([&] { return copy3d_peer(p, nullptr, true); });
}
FAKE_API cudaError_t cudaMemcpy3DPeer_ptds(const cudaMemcpy3DPeerParms* p) {
  return api([&] { return copy3d_peer(p, cudaStreamPerThread, true); });
}
FAKE_API cudaError_t cudaMemcpy3DPeerAsync(const cudaMemcpy3DPeerParms* p, cudaStream_t st) {
  return api([&] { return copy3d_peer(p, st, false); });
}
FAKE_API cudaError_t cudaMemcpy3DPeerAsync_ptsz(const cudaMemcpy3DPeerParms* p,
                                                cudaStream_t st) {
  return api([&] { return copy3d_peer(p, st, false); });
}

// The real libcudart.so.13 exports no _ptds/_ptsz variant of these two.
FAKE_API cudaError_t cudaMemcpyPeer(void* d, int dd, const void* s, int sd, size_t n) {
  return api([&] { return copy_peer(d, dd, s, sd, n, nullptr, true); });
}
FAKE_API cudaError_t cudaMemcpyPeerAsync(void* d, int dd, const void* s, int sd, size_t n,
                                         cudaStream_t st) {
  return api([&] { return copy_peer(d, dd, s, sd, n, st, false); });
}

FAKE_API cudaError_t cudaMemcpyToSymbol(const void* sym, const void* s, size_t n, size_t off,
                                        cudaMemcpyKind k) {
  return api([&] { return copy_to_symbol(sym, s, n, off, k, nullptr, true); });
}
FAKE_API cudaError_t cudaMemcpyToSymbol_ptds(const void* sym, const void* s, size_t n,
                                             size_t off, cudaMemcpyKind k) {
  return api([&] { return copy_to_symbol(sym, s, n, off, k, cudaStreamPerThread, true); });
}
FAKE_API cudaError_t cudaMemcpyToSymbolAsync(const void* sym, const void* s, size_t n,
                                             size_t off, cudaMemcpyKind k, cudaStream_t st) {
  return api([&] { return copy_to_symbol(sym, s, n, off, k, st, false); });
}
FAKE_API cudaError_t cudaMemcpyToSymbolAsync_ptsz(const void* sym, const void* s, size_t n,
                                                  size_t off, cudaMemcpyKind k,
                                                  cudaStream_t st) {
  return api([&] { return copy_to_symbol(sym, s, n, off, k, st, false); });
}
FAKE_API cudaError_t cudaMemcpyFromSymbol(void* d, const void* sym, size_t n, size_t off,
                                          cudaMemcpyKind k) {
  return api([&] { return copy_from_symbol(d, sym, n, off, k, nullptr, true); });
}
FAKE_API cudaError_t cudaMemcpyFromSymbol_ptds(void* d, const void* sym, size_t n, size_t off,
                                               cudaMemcpyKind k) {
  return api([&] { return copy_from_symbol(d, sym, n, off, k, cudaStreamPerThread, true); });
}
FAKE_API cudaError_t cudaMemcpyFromSymbolAsync(void* d, const void* sym, size_t n, size_t off,
                                               cudaMemcpyKind k, cudaStream_t st) {
  return api([&] { return copy_from_symbol(d, sym, n, off, k, st, false); });
}
FAKE_API cudaError_t cudaMemcpyFromSymbolAsync_ptsz(void* d, const void* sym, size_t n,
                                                    size_t off, cudaMemcpyKind k,
                                                    cudaStream_t st) {
  return api([&] { return copy_from_symbol(d, sym, n, off, k, st, false); });
}

#if FAKE_CUDART_MAJOR == 12
FAKE_API cudaError_t cudaMemcpyBatchAsync(void** dsts, void** srcs, size_t* sizes, size_t count,
                                          cudaMemcpyAttributes* attrs, size_t* attrsIdxs,
                                          size_t numAttrs, size_t* failIdx,
                                          cudaStream_t st) {
  return api([&] {
    return copy_batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, st, false);
  });
}
FAKE_API cudaError_t cudaMemcpyBatchAsync_ptsz(void** dsts, void** srcs, size_t* sizes,
                                               size_t count, cudaMemcpyAttributes* attrs,
                                               size_t* attrsIdxs, size_t numAttrs,
                                               size_t* failIdx, cudaStream_t st) {
  return api([&] {
    return copy_batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, st, true);
  });
}
FAKE_API cudaError_t cudaMemcpy3DBatchAsync(size_t numOps, cudaMemcpy3DBatchOp* ops,
                                            size_t* failIdx, unsigned long long flags,
                                            cudaStream_t st) {
  return api([&] { return copy_3d_batch(numOps, ops, failIdx, flags, st, false); });
}
FAKE_API cudaError_t cudaMemcpy3DBatchAsync_ptsz(size_t numOps, cudaMemcpy3DBatchOp* ops,
                                                 size_t* failIdx, unsigned long long flags,
                                                 cudaStream_t st) {
  return api([&] { return copy_3d_batch(numOps, ops, failIdx, flags, st, true); });
}
#else
FAKE_API cudaError_t cudaMemcpyBatchAsync(void* const* dsts, const void* const* srcs,
                                          const size_t* sizes, size_t count,
                                          cudaMemcpyAttributes* attrs, size_t* attrsIdxs,
                                          size_t numAttrs, cudaStream_t st) {
  return api([&] {
    return copy_batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, nullptr, st, false);
  });
}
FAKE_API cudaError_t cudaMemcpyBatchAsync_ptsz(void* const* dsts, const void* const* srcs,
                                               const size_t* sizes, size_t count,
                                               cudaMemcpyAttributes* attrs, size_t* attrsIdxs,
                                               size_t numAttrs, cudaStream_t st) {
  return api([&] {
    return copy_batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, nullptr, st, true);
  });
}
FAKE_API cudaError_t cudaMemcpy3DBatchAsync(size_t numOps, cudaMemcpy3DBatchOp* ops,
                                            unsigned long long flags, cudaStream_t st) {
  return api([&] { return copy_3d_batch(numOps, ops, nullptr, flags, st, false); });
}
FAKE_API cudaError_t cudaMemcpy3DBatchAsync_ptsz(size_t numOps, cudaMemcpy3DBatchOp* ops,
                                                 unsigned long long flags, cudaStream_t st) {
  return api([&] { return copy_3d_batch(numOps, ops, nullptr, flags, st, true); });
}
#endif

// --- Streams ----------------------------------------------------------------

FAKE_API cudaError_t cudaStreamCreate(cudaStream_t* s) {
  return api([&] { return stream_create(s, cudaStreamDefault, 0); });
}
FAKE_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
  return api([&] { return stream_create(s, flags, 0); });
}
FAKE_API cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned flags, int prio) {
  return api([&] { return stream_create(s, flags, prio); });
}
FAKE_API cudaError_t cudaStreamDestroy(cudaStream_t s) {
  return api([&] { return stream_destroy(s); });
}
FAKE_API cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  return api([&] { return stream_synchronize(s); });
}
FAKE_API cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t s) {
  return api([&] { return stream_synchronize(s); });
}
FAKE_API cudaError_t cudaStreamQuery(cudaStream_t s) {
  return api([&] { return stream_query(s); });
}
FAKE_API cudaError_t cudaStreamQuery_ptsz(cudaStream_t s) {
  return api([&] { return stream_query(s); });
}
FAKE_API cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* st) {
  return api([&] { return stream_is_capturing(s, st); });
}
FAKE_API cudaError_t cudaStreamIsCapturing_ptsz(cudaStream_t s, cudaStreamCaptureStatus* st) {
  return api([&] { return stream_is_capturing(s, st); });
}
// The double never captures, so the mode only has to round-trip per thread
// (the real call swaps the thread's mode with *mode).
thread_local cudaStreamCaptureMode t_capture_mode = cudaStreamCaptureModeGlobal;
FAKE_API cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  return api([&]() -> cudaError_t {
    if (!mode || *mode < cudaStreamCaptureModeGlobal || *mode > cudaStreamCaptureModeRelaxed)
      return cudaErrorInvalidValue;
    std::swap(*mode, t_capture_mode);
    return cudaSuccess;
  });
}
FAKE_API cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) {
  return api([&] { return stream_wait_event(s, e, flags); });
}
FAKE_API cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t s, cudaEvent_t e, unsigned flags) {
  return api([&] { return stream_wait_event(s, e, flags); });
}
FAKE_API cudaError_t cudaStreamGetFlags(cudaStream_t s, unsigned* f) {
  return api([&] { return f ? stream_get(s, f, nullptr, nullptr, nullptr) : cudaErrorInvalidValue; });
}
FAKE_API cudaError_t cudaStreamGetFlags_ptsz(cudaStream_t s, unsigned* f) {
  return api([&] { return f ? stream_get(s, f, nullptr, nullptr, nullptr) : cudaErrorInvalidValue; });
}
FAKE_API cudaError_t cudaStreamGetPriority(cudaStream_t s, int* p) {
  return api([&] { return p ? stream_get(s, nullptr, p, nullptr, nullptr) : cudaErrorInvalidValue; });
}
FAKE_API cudaError_t cudaStreamGetPriority_ptsz(cudaStream_t s, int* p) {
  return api([&] { return p ? stream_get(s, nullptr, p, nullptr, nullptr) : cudaErrorInvalidValue; });
}
FAKE_API cudaError_t cudaStreamGetDevice(cudaStream_t s, int* d) {
  return api([&] { return d ? stream_get(s, nullptr, nullptr, d, nullptr) : cudaErrorInvalidValue; });
}
FAKE_API cudaError_t cudaStreamGetDevice_ptsz(cudaStream_t s, int* d) {
  return api([&] { return d ? stream_get(s, nullptr, nullptr, d, nullptr) : cudaErrorInvalidValue; });
}
FAKE_API cudaError_t cudaStreamGetId(cudaStream_t s, unsigned long long* id) {
  return api([&] { return id ? stream_get(s, nullptr, nullptr, nullptr, id) : cudaErrorInvalidValue; });
}
FAKE_API cudaError_t cudaStreamGetId_ptsz(cudaStream_t s, unsigned long long* id) {
  return api([&] { return id ? stream_get(s, nullptr, nullptr, nullptr, id) : cudaErrorInvalidValue; });
}
FAKE_API cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void* user) {
  return api([&] { return launch_host_func(s, fn, user); });
}
FAKE_API cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t s, cudaHostFn_t fn, void* user) {
  return api([&] { return launch_host_func(s, fn, user); });
}

// --- Events -----------------------------------------------------------------

static cudaError_t event_create(cudaEvent_t* out, unsigned flags) {
  CHECK_DEVICE();
  constexpr unsigned kAll = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if (out == nullptr || (flags & ~kAll)) return cudaErrorInvalidValue;
  if ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming))
    return cudaErrorInvalidValue;
  auto ev = std::make_shared<Event>();
  ev->flags = flags;
  ev->device = t_device;
  cudaEvent_t h = reinterpret_cast<cudaEvent_t>(ev.get());
  Global& g = G();
  std::lock_guard<std::mutex> lk(g.mu);
  g.events[h] = ev;
  *out = h;
  return cudaSuccess;
}

FAKE_API cudaError_t cudaEventCreate(cudaEvent_t* e) {
  return api([&] { return event_create(e, cudaEventDefault); });
}
FAKE_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags) {
  return api([&] { return event_create(e, flags); });
}
FAKE_API cudaError_t cudaEventDestroy(cudaEvent_t e) {
  return api([&]() -> cudaError_t {
    CHECK_DEVICE();
    Global& g = G();
    std::lock_guard<std::mutex> lk(g.mu);
    auto it = g.events.find(e);
    if (it == g.events.end()) return cudaErrorInvalidResourceHandle;
    g.events.erase(it);  // pending records keep the object alive
    return cudaSuccess;
  });
}
FAKE_API cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  return api([&] { return event_record(e, s, 0); });
}
FAKE_API cudaError_t cudaEventRecord_ptsz(cudaEvent_t e, cudaStream_t s) {
  return api([&] { return event_record(e, s, 0); });
}
FAKE_API cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned flags) {
  return api([&] { return event_record(e, s, flags); });
}
FAKE_API cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t e, cudaStream_t s,
                                                   unsigned flags) {
  return api([&] { return event_record(e, s, flags); });
}
FAKE_API cudaError_t cudaEventQuery(cudaEvent_t e) {
  return api([&]() -> cudaError_t {
    CHECK_DEVICE();
    EventP ev = resolve_event(e);
    if (!ev) return cudaErrorInvalidResourceHandle;
    std::lock_guard<std::mutex> l(ev->sy->m);
    return ev->done >= ev->rec ? cudaSuccess : cudaErrorNotReady;
  });
}
FAKE_API cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  return api([&]() -> cudaError_t {
    CHECK_DEVICE();
    EventP ev = resolve_event(e);
    if (!ev) return cudaErrorInvalidResourceHandle;
    std::unique_lock<std::mutex> l(ev->sy->m);
    uint64_t gen = ev->rec;
    ev->sy->cv.wait(l, [&] { return ev->done >= gen; });
    return cudaSuccess;
  });
}
FAKE_API cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  return api([&]() -> cudaError_t {
    CHECK_DEVICE();
    if (ms == nullptr) return cudaErrorInvalidValue;
    EventP a = resolve_event(start), b = resolve_event(end);
    if (!a || !b) return cudaErrorInvalidResourceHandle;
    if ((a->flags | b->flags) & cudaEventDisableTiming)
      return cudaErrorInvalidResourceHandle;
    Clock::time_point ta, tb;
    for (auto [ev, t] : {std::pair{a.get(), &ta}, std::pair{b.get(), &tb}}) {
      std::lock_guard<std::mutex> l(ev->sy->m);
      if (ev->rec == 0) return cudaErrorInvalidResourceHandle;
      if (ev->done < ev->rec) return cudaErrorNotReady;
      *t = ev->t;
    }
    *ms = std::chrono::duration<float, std::milli>(tb - ta).count();
    return cudaSuccess;
  });
}

// --- Test-only extensions (fake_cudart.h) ------------------------------------

FAKE_API cudaError_t fakecuda_sleep_on_stream(cudaStream_t s, unsigned ms) {
  return api([&]() -> cudaError_t {
    CHECK_DEVICE();
    StreamP st = resolve_stream(s);
    if (!st) return cudaErrorInvalidResourceHandle;
    enqueue(st, [ms] { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); });
    return cudaSuccess;
  });
}

FAKE_API cudaError_t fakecuda_register_symbol(const void* sym, size_t size) {
  return api([&]() -> cudaError_t {
    if (sym == nullptr || size == 0) return cudaErrorInvalidValue;
    Global& g = G();
    uintptr_t a = reinterpret_cast<uintptr_t>(sym);
    std::lock_guard<std::mutex> lk(g.rmu);
    auto it = g.ranges.lower_bound(a);
    if (it != g.ranges.end() && it->first < a + size) return cudaErrorInvalidValue;
    if (find_range(a) != g.ranges.end()) return cudaErrorInvalidValue;
    g.ranges[a] = Range{size, RK::Symbol, t_device, 0};
    return cudaSuccess;
  });
}

FAKE_API cudaError_t fakecuda_unregister_symbol(const void* sym) {
  return api([&]() -> cudaError_t {
    Global& g = G();
    std::lock_guard<std::mutex> lk(g.rmu);
    auto it = g.ranges.find(reinterpret_cast<uintptr_t>(sym));
    if (it == g.ranges.end() || it->second.kind != RK::Symbol)
      return cudaErrorInvalidSymbol;
    g.ranges.erase(it);
    return cudaSuccess;
  });
}

FAKE_API void fakecuda_get_stats(struct fakecuda_stats* out) {
  if (out == nullptr) return;
  Global& g = G();
  out->host_register_calls = g.host_register_calls.load();
  out->host_unregister_calls = g.host_unregister_calls.load();
  out->host_alloc_calls = g.host_alloc_calls.load();
  out->free_host_calls = g.free_host_calls.load();
  out->pointer_attribute_calls = g.pointer_attribute_calls.load();
  out->memcpy_calls = g.memcpy_calls.load();
  std::lock_guard<std::mutex> lk(g.rmu);
  out->registered_bytes = g.registered_bytes;
}

FAKE_API void fakecuda_reset_stats(void) {
  Global& g = G();
  g.host_register_calls = 0;
  g.host_unregister_calls = 0;
  g.host_alloc_calls = 0;
  g.free_host_calls = 0;
  g.pointer_attribute_calls = 0;
  g.memcpy_calls = 0;
}

FAKE_API void fakecuda_set_register_delay_ms(unsigned ms) {
  g_register_delay_ms.store(ms, std::memory_order_relaxed);
}

FAKE_API int fakecuda_is_registered(const void* p) {
  Global& g = G();
  std::lock_guard<std::mutex> lk(g.rmu);
  auto it = find_range(reinterpret_cast<uintptr_t>(p));
  return it != g.ranges.end() && it->second.kind == RK::Registered ? 1 : 0;
}
