// The CUDA runtime double's streams and events. Every stream is a FIFO run
// by its own worker thread (started on first use, and again in a forked
// child), so that work is really asynchronous; streams created without
// cudaStreamNonBlocking synchronise with the legacy default stream both
// ways. Events complete in stream order and carry the time they did.
#include "fake_cudart_internal.h"

#include <algorithm>
#include <thread>
#include <utility>

namespace fakecuda {
namespace {

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

cudaError_t event_create(cudaEvent_t* out, unsigned flags) {
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

// The double never captures, so the mode only has to round-trip per thread
// (the real call swaps the thread's mode with *mode).
thread_local cudaStreamCaptureMode t_capture_mode = cudaStreamCaptureModeGlobal;

}  // namespace

void wait_done(const StreamP& st, uint64_t seq) {
  std::unique_lock<std::mutex> lk(st->sy->m);
  st->sy->cv.wait(lk, [&] { return st->done >= seq; });
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

}  // namespace fakecuda

using fakecuda::api;
using fakecuda::Clock;
using fakecuda::enqueue;
using fakecuda::event_create;
using fakecuda::event_record;
using fakecuda::EventP;
using fakecuda::G;
using fakecuda::Global;
using fakecuda::launch_host_func;
using fakecuda::resolve_event;
using fakecuda::resolve_stream;
using fakecuda::stream_create;
using fakecuda::stream_destroy;
using fakecuda::stream_get;
using fakecuda::stream_is_capturing;
using fakecuda::stream_query;
using fakecuda::stream_synchronize;
using fakecuda::stream_wait_event;
using fakecuda::StreamP;
using fakecuda::t_capture_mode;

// Names without a prototype in the 13.0 header.
extern "C" {
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
}  // extern "C"

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
