// The CUDA calls of pinning (pin_cuda.h) and PinWaitStream: the real
// functions resolved once each, every call quiet. Never takes the pinning
// lock; its only state is the resolved functions and a per-thread event.
#include "shim/pin/pin_cuda.h"

#include <cstring>

#include "shim/base/clock.h"
#include "shim/base/guard.h"
#include "shim/cuda/real_runtime.h"
#include "shim/pin/pinning.h"

namespace pinscope::shim {
namespace pinning {
namespace {

RealFn<cudaError_t (*)(void*, size_t, unsigned int)> g_register("cudaHostRegister");
RealFn<cudaError_t (*)(void*)> g_unregister("cudaHostUnregister");
RealFn<cudaError_t (*)(cudaEvent_t*, unsigned int)> g_event_create("cudaEventCreateWithFlags");
RealFn<cudaError_t (*)(cudaEvent_t, cudaStream_t)> g_event_record("cudaEventRecord");
RealFn<cudaError_t (*)(cudaEvent_t)> g_event_sync("cudaEventSynchronize");
RealFn<cudaError_t (*)(cudaEvent_t)> g_event_destroy("cudaEventDestroy");
RealFn<cudaError_t (*)(cudaStream_t)> g_stream_sync("cudaStreamSynchronize");
RealFn<cudaError_t (*)(cudaStream_t, cudaStreamCaptureStatus*)> g_is_capturing(
    "cudaStreamIsCapturing");
RealFn<cudaError_t (*)(int*)> g_get_device("cudaGetDevice");
RealFn<cudaError_t (*)()> g_peek("cudaPeekAtLastError");
RealFn<cudaError_t (*)()> g_get_last("cudaGetLastError");
RealFn<cudaError_t (*)(int)> g_set_device("cudaSetDevice");
RealFn<cudaError_t (*)(cudaStreamCaptureMode*)> g_exchange_capture_mode(
    "cudaThreadExchangeStreamCaptureMode");

// One event per thread and device for PinWaitStream.
PINSCOPE_TLS cudaEvent_t t_events[16];

// Runs a CUDA call that may fail without leaving its error in the
// program's last-error slot (unless one of the program's was pending).
template <typename Call>
cudaError_t Quiet(Call&& call) {
  auto peek = g_peek.get();
  auto get_last = g_get_last.get();
  bool clean = peek && peek() == cudaSuccess;
  cudaError_t rc = call();
  if (rc != cudaSuccess && clean && get_last) get_last();
  return rc;
}

cudaEvent_t ThreadEvent() {
  int dev = 0;
  if (auto gd = g_get_device.get()) Quiet([&] { return gd(&dev); });
  if (dev < 0 || dev >= 16) return nullptr;
  if (!t_events[dev]) {
    if (auto create = g_event_create.get())
      Quiet([&] { return create(&t_events[dev], cudaEventDisableTiming); });
  }
  return t_events[dev];
}

}  // namespace

RelaxedCapture::RelaxedCapture() {
  if (auto exchange = g_exchange_capture_mode.get())
    ok_ = Quiet([&] { return exchange(&mode_); }) == cudaSuccess;
}

RelaxedCapture::~RelaxedCapture() {
  if (!ok_) return;
  if (auto exchange = g_exchange_capture_mode.get()) Quiet([&] { return exchange(&mode_); });
}

cudaError_t RegisterRange(uintptr_t base, size_t size, bool writable, uint64_t* t0, uint64_t* t1) {
  unsigned flags = cudaHostRegisterPortable | (writable ? 0u : cudaHostRegisterReadOnly);
  RelaxedCapture relaxed;
  cudaError_t rc = cudaErrorUnknown;
  *t0 = MonoNs();
  if (auto reg = g_register.get())
    rc = Quiet([&] { return reg(reinterpret_cast<void*>(base), size, flags); });
  *t1 = MonoNs();
  return rc;
}

cudaError_t UnregisterRange(uintptr_t base, uint64_t* t0, uint64_t* t1) {
  RelaxedCapture relaxed;
  cudaError_t rc = cudaErrorUnknown;
  *t0 = MonoNs();
  if (auto unreg = g_unregister.get())
    rc = Quiet([&] { return unreg(reinterpret_cast<void*>(base)); });
  *t1 = MonoNs();
  return rc;
}

cudaError_t UnregisterNeverRegistered() {
  auto unreg = g_unregister.get();
  return unreg ? unreg(const_cast<void*>(NeverRegisteredAddress()))
               : cudaErrorHostMemoryNotRegistered;
}

void UseDeviceOnOwnThread(int device) {
  if (device < 0) return;
  int cur = -1;
  if (auto gd = g_get_device.get()) Quiet([&] { return gd(&cur); });
  if (cur != device)
    if (auto sd = g_set_device.get()) Quiet([&] { return sd(device); });
}

void QuietGetDevice(int* device) {
  if (auto gd = g_get_device.get()) Quiet([&] { return gd(device); });
}

bool Capturing(uint64_t stream) {
  auto cap = g_is_capturing.get();
  if (!cap) return false;
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  cudaError_t rc = Quiet([&] { return cap(reinterpret_cast<cudaStream_t>(stream), &st); });
  return rc != cudaSuccess || st != cudaStreamCaptureStatusNone;
}

cudaError_t QuietEventCreate(cudaEvent_t* ev) {
  auto create = g_event_create.get();
  if (!create) return cudaErrorUnknown;
  return Quiet([&] { return create(ev, cudaEventDisableTiming); });
}

cudaError_t QuietEventRecord(cudaEvent_t ev, uint64_t stream) {
  auto rec = g_event_record.get();
  if (!rec) return cudaErrorUnknown;
  return Quiet([&] { return rec(ev, reinterpret_cast<cudaStream_t>(stream)); });
}

void QuietEventSynchronize(cudaEvent_t ev) {
  if (auto sync = g_event_sync.get()) Quiet([&] { return sync(ev); });
}

void QuietEventDestroy(cudaEvent_t ev) {
  if (auto destroy = g_event_destroy.get()) Quiet([&] { return destroy(ev); });
}

void ForgetThreadEvents() { memset(static_cast<void*>(t_events), 0, sizeof t_events); }

}  // namespace pinning

void PinWaitStream(uint64_t stream_value) {
  using pinning::Quiet;
  cudaStream_t stream = reinterpret_cast<cudaStream_t>(stream_value);
  cudaEvent_t ev = pinning::ThreadEvent();
  auto rec = pinning::g_event_record.get();
  auto sync = pinning::g_event_sync.get();
  if (ev && rec && sync && Quiet([&] { return rec(ev, stream); }) == cudaSuccess &&
      Quiet([&] { return sync(ev); }) == cudaSuccess)
    return;
  if (auto ss = pinning::g_stream_sync.get()) Quiet([&] { return ss(stream); });
}

}  // namespace pinscope::shim
