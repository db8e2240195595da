// External correlation: the shim's call_id pushed around each hooked copy or
// sync, and the runtime records CUPTI needs to write the join. Push/PopSlow run
// on the program's threads inside the hooks: no lock, just the CUPTI call.
#include <cupti_activity.h>
#include <cupti_runtime_cbid.h>

#include "shim/base/guard.h"
#include "shim/device/cupti.h"
#include "shim/device/cupti_state.h"

namespace pinscope::shim::cupti_internal {

std::atomic<bool> g_pushing{false};
PINSCOPE_TLS bool t_pushed = false;

namespace {

// CUPTI writes EXTERNAL_CORRELATION records only next to runtime (or driver)
// API records, and on CUDA 13.0 only when the RUNTIME kind is on: enabling
// single callback ids without it gives no records (measured on the H200).
// So pinscope enables the kind, then switches off every runtime call but
// these (the calls its hooks push ids around), which keeps the cost of a
// record per kernel launch away. The list is what stays on.
constexpr CUpti_CallbackId kRuntimeCbids[] = {
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2D_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToSymbol_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromSymbol_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToSymbolAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromSymbolAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3D_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyPeer_v4000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyPeerAsync_v4000,
    CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_ptds_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2D_ptds_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToSymbol_ptds_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromSymbol_ptds_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DAsync_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToSymbolAsync_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromSymbolAsync_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3D_ptds_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DAsync_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyBatchAsync_v12080,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyBatchAsync_ptsz_v12080,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyBatchAsync_v13000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyBatchAsync_ptsz_v13000,
};

}  // namespace

void PushSlow(uint64_t call_id) {
  if (t_pushed) return;  // nested hook: the outer call's id stays
  HookScope scope;
  if (Cupti().api.Push(kOurKind, call_id) == CUPTI_SUCCESS) t_pushed = true;
}

void PopSlow() {
  t_pushed = false;
  CuptiState& s = Cupti();
  if (s.finalized.load(std::memory_order_relaxed)) return;
  HookScope scope;
  s.api.Pop(kOurKind, nullptr);
}

// Switches off every runtime call's records but kRuntimeCbids, where the
// CUPTI can and the program did not ask for all of them; mu held, after the
// RUNTIME kind was enabled.
void RestrictRuntimeRecordsLocked() {
  CuptiState& s = Cupti();
  if (s.api.EnableRuntimeApi && !(s.program_kinds.load() >> CUPTI_ACTIVITY_KIND_RUNTIME & 1)) {
    s.runtime_restricted = true;
    for (CUpti_CallbackId cbid = 1; cbid < CUPTI_RUNTIME_TRACE_CBID_SIZE; ++cbid) {
      bool keep = false;
      for (CUpti_CallbackId k : kRuntimeCbids) keep = keep || k == cbid;
      if (!keep) s.api.EnableRuntimeApi(cbid, 0);
    }
  }
}

}  // namespace pinscope::shim::cupti_internal
