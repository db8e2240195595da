// Every CUDA call that pinning makes, on the real runtime resolved at run
// time (cuda/real_runtime.h). Each is quiet: it leaves no error of its own
// in the program's last-error slot. Never called with PinState::mu held.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace pinscope::shim::pinning {

// pinscope registers and unregisters whenever the program's buffers come
// and go - at a copy, free, munmap or fork, on the pin-ahead and flusher
// threads - perhaps while a program thread captures a CUDA graph in the
// default (global) mode, which prohibits "potentially unsafe" calls in
// every thread: such a call would fail and could cost the program its
// capture. So those calls run in relaxed capture mode, the thread's own
// mode restored after (PyTorch guards its host allocations the same way).
class RelaxedCapture {
 public:
  RelaxedCapture();
  ~RelaxedCapture();
  RelaxedCapture(const RelaxedCapture&) = delete;
  RelaxedCapture& operator=(const RelaxedCapture&) = delete;

 private:
  cudaStreamCaptureMode mode_ = cudaStreamCaptureModeRelaxed;
  bool ok_ = false;
};

// cudaHostRegister of [base, base+size) (read-only for a read-only
// mapping), timed; relaxed capture mode.
cudaError_t RegisterRange(uintptr_t base, size_t size, bool writable, uint64_t* t0, uint64_t* t1);

// cudaHostUnregister of base, timed; relaxed capture mode.
cudaError_t UnregisterRange(uintptr_t base, uint64_t* t0, uint64_t* t1);

// cudaHostUnregister of memory that surely is not registered: CUDA's
// answer (and last-error state) for unregistered memory. Not quiet, on
// purpose: PinProgramUnregister hands both to the program.
cudaError_t UnregisterNeverRegistered();

// On one of pinscope's own threads (flusher, pin-ahead): makes `device`
// current, so that a call for a block lands in the program's context.
void UseDeviceOnOwnThread(int device);

// cudaGetDevice into *device (left as it was without a runtime).
void QuietGetDevice(int* device);

// True if `stream` is capturing a graph (or the runtime cannot tell).
bool Capturing(uint64_t stream);

// A block's completion events (async mode). Without a runtime:
// cudaErrorUnknown, or nothing.
cudaError_t QuietEventCreate(cudaEvent_t* ev);  // cudaEventDisableTiming
cudaError_t QuietEventRecord(cudaEvent_t ev, uint64_t stream);
void QuietEventSynchronize(cudaEvent_t ev);
void QuietEventDestroy(cudaEvent_t ev);

// A forked child: forgets the calling thread's PinWaitStream events (they
// belong to the parent's CUDA context). No CUDA call.
void ForgetThreadEvents();

}  // namespace pinscope::shim::pinning
