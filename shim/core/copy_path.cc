// The copy path behind the CUDA copy and wait hooks; see copy_path.h.
#include "shim/core/copy_path.h"

#include <cuda_runtime_api.h>

#include "shim/base/clock.h"
#include "shim/base/guard.h"
#include "shim/base/own_cost.h"
#include "shim/base/phases.h"
#include "shim/cuda/real_runtime.h"
#include "shim/device/cupti.h"
#include "shim/pin/pinning.h"
#include "shim/record/trace_fields.h"
#include "shim/stacks/stacks.h"

namespace pinscope::shim {
namespace {

namespace f = fields;

// First CUDA use of the process: the runtime's facts, then device activity
// (never from the constructor), whose start is timed as a CUPTI switch
// (own_cost.h), part of the hook's time.
void NoteCuda() {
  if (!NoteCudaUse()) return;
  const uint64_t t0 = MonoNs();
  CuptiStart();
  AddCuptiSwitchCost(MonoNs() - t0);
}

// Fills the record from pointer kinds already known.
void ClassifyAs(CopyCall* r, const void* dst, const void* src, PointerInfo d, PointerInfo s) {
  r->src_kind = s.kind;
  r->dst_kind = d.kind;
  r->src_device = s.device;
  r->dst_device = d.device;
  r->src_address = reinterpret_cast<uintptr_t>(src);
  r->dst_address = reinterpret_cast<uintptr_t>(dst);
  if (r->api == f::kMemcpyPeer || r->api == f::kMemcpyPeerAsync) {
    r->direction = f::kPeer;
  } else {
    r->direction = DirectionFor(r->requested_kind, s.kind, d.kind);
  }
}

// pinscope's own time in a hook that began at `start`: all of it but
// `excluded` (the real call, and pinning's registrations and waits, which
// the pinning section reports as pinning's cost).
uint64_t OwnNs(uint64_t start, uint64_t excluded) {
  const uint64_t total = MonoNs() - start;
  return total > excluded ? total - excluded : 0;
}

// Page faults and the user/system split of a copy come from pageable host
// memory, which the driver stages on the calling thread; a copy between
// pinned, device memory and symbols reads the thread's CPU time only (one
// system call at each end instead of two). Managed and unknown memory get
// the whole usage.
bool NeedsWholeUsage(const CopyCall& r) {
  auto faultless = [](uint32_t k) { return k == f::kPinned || k == f::kDevice || k == f::kSymbol; };
  return !faultless(r.src_kind) || !faultless(r.dst_kind);
}

void Classify(CopyCall* r, CopySide dst, CopySide src) {
  PointerInfo s = src.symbol ? PointerInfo{f::kSymbol, -1} : ClassifyPointer(src.ptr);
  PointerInfo d = dst.symbol ? PointerInfo{f::kSymbol, -1} : ClassifyPointer(dst.ptr);
  ClassifyAs(r, dst.ptr, src.ptr, d, s);
}

}  // namespace

uint32_t DirectionFor(int kind, uint32_t src_kind, uint32_t dst_kind) {
  switch (kind) {
    case cudaMemcpyHostToHost: return f::kH2H;
    case cudaMemcpyHostToDevice: return f::kH2D;
    case cudaMemcpyDeviceToHost: return f::kD2H;
    case cudaMemcpyDeviceToDevice: return f::kD2D;
    default: break;
  }
  auto is_host = [](uint32_t k) { return k == f::kPageable || k == f::kPinned; };
  auto is_dev = [](uint32_t k) { return k == f::kDevice || k == f::kManaged || k == f::kSymbol; };
  if (is_host(src_kind) && is_dev(dst_kind)) return f::kH2D;
  if (is_dev(src_kind) && is_host(dst_kind)) return f::kD2H;
  if (is_dev(src_kind) && is_dev(dst_kind)) return f::kD2D;
  if (is_host(src_kind) && is_host(dst_kind)) return f::kH2H;
  return f::kDirUnknown;
}

CopyCall MakeCopyCall(uint32_t api, bool per_thread, int kind, uint64_t bytes, uint64_t stream) {
  CopyCall r;
  r.api = api;
  r.per_thread = per_thread;
  r.requested_kind = kind;
  r.bytes = bytes;
  r.stream = per_thread && stream == 0 ? kPerThreadStreamValue : stream;
  return r;
}

// The common path of every copy hook. `call()` runs the real function;
// pinning may substitute nothing (the copy always uses the program's
// pointers) but may synchronize after it to keep pageable semantics.
int TracedCopy(CopyCall& r, CopySide dst, CopySide src, RealCall call) {
  // While pinscope holds pinned memory, copies go through PinBeforeCopy
  // even when the recorder is passive: pageable semantics depend on it.
  if (InHook() || (!Recording() && !PinMayOwn())) return call();
  HookScope scope;
  const uint64_t hook_start = MonoNs();
  {
    PS_PHASE(kCopyCupti);
    NoteCuda();
  }
  {
    PS_PHASE(kCopyClassify);
    Classify(&r, dst, src);
  }
  r.call_id = NextCallId();
  {
    PS_PHASE(kCopyStack);
    r.stack_id = CaptureStack(StackSite::kCopy);
  }
  const uint64_t pin_start = MonoNs();
  PinTicket ticket = PinBeforeCopy(&r);
  const uint64_t pin_ns = MonoNs() - pin_start;
  const bool whole = NeedsWholeUsage(r);
  {
    PS_PHASE(kCopyUsage);
    r.usage_enter = EntryUsage(whole, &r.t_enter);
  }
  CuptiPushCall(r.call_id);  // device records of this call join to call_id
  int rc = call();
  CuptiPopCall();
  PinAfterCopy(&r, &ticket, rc);
  r.t_exit = MonoNs();
  {
    PS_PHASE(kCopyUsage);
    r.usage_exit = ExitUsage(whole, r.usage_enter, r.t_enter, r.t_exit);
  }
  r.result = rc;
  {
    PS_PHASE(kCopyRecord);
    RecordCopy(r);
  }
  {
    PS_PHASE(kCopyCupti);
    CuptiAfterCall();
  }
  const uint64_t own = OwnNs(hook_start, pin_ns + (r.t_exit - r.t_enter));
  AddHookCost(HookKind::kCopy, own);
#ifdef PINSCOPE_PHASES
  phases::Add(phases::kCopyOwn, own);
  phases::Add(phases::kCopyPin, pin_ns);
#endif
  return rc;
}

int TracedSync(uint32_t api, uint64_t stream, RealCall call) {
  if (InHook() || !Recording()) return call();
  HookScope scope;
  const uint64_t hook_start = MonoNs();
  NoteCuda();
  SyncCall r;
  r.api = api;
  r.stream = stream;
  r.call_id = NextCallId();
  {
    PS_PHASE(kSyncUsage);
    r.usage_enter = EntryUsage(false, &r.t_enter);  // a wait: its CPU time, no faults (trace.proto)
  }
  CuptiPushCall(r.call_id);
  int rc = call();
  CuptiPopCall();
  r.t_exit = MonoNs();
  {
    PS_PHASE(kSyncUsage);
    r.usage_exit = ExitUsage(false, r.usage_enter, r.t_enter, r.t_exit);
  }
  r.result = rc;
  {
    PS_PHASE(kSyncRecord);
    RecordSync(r);
  }
  CuptiAfterCall();
  const uint64_t own = OwnNs(hook_start, r.t_exit - r.t_enter);
  AddHookCost(HookKind::kSync, own);
#ifdef PINSCOPE_PHASES
  phases::Add(phases::kSyncOwn, own);
#endif
  return rc;
}

int TracedBatch(bool per_thread, void* const* dsts, const void* const* srcs, const size_t* sizes,
                size_t count, uint64_t stream, RealCall call) {
  if (InHook() || (!Recording() && !PinMayOwn()) || !dsts || !srcs || !sizes) return call();
  HookScope scope;
  const uint64_t hook_start = MonoNs();
  NoteCuda();
  uint64_t call_id = NextCallId();
  uint64_t stack_id = CaptureStack(StackSite::kCopy);
  // Classify before the call, as TracedCopy does: after a failed call the
  // sticky error makes ClassifyPointer refuse to query (it never overwrites
  // the program's error), so the elements would all read MEM_UNKNOWN.
  constexpr size_t kPre = 128;  // larger batches: the rest after the call
  PointerInfo pre_src[kPre], pre_dst[kPre];
  size_t npre = count < kPre ? count : kPre;
  for (size_t i = 0; i < npre; ++i) {
    pre_src[i] = ClassifyPointer(srcs[i]);
    pre_dst[i] = ClassifyPointer(dsts[i]);
  }
  // Memory pinscope pinned keeps pageable semantics here too, and stays
  // registered while the batch may use it.
  PinBatchTicket pins;
  const uint64_t pin_start = MonoNs();
  PinBeforeBatch(dsts, srcs, sizes, count, stream, &pins);
  const uint64_t pin_ns = MonoNs() - pin_start;
  const Usage u0 = ThreadUsageNow();
  uint64_t t0 = MonoNs();
  CuptiPushCall(call_id);
  int rc = call();
  CuptiPopCall();
  PinAfterBatch(&pins, rc);
  uint64_t t1 = MonoNs();
  const Usage u1 = ThreadUsageNow();
  for (size_t i = 0; i < count; ++i) {
    CopyCall r = MakeCopyCall(f::kMemcpyBatchAsync, per_thread, cudaMemcpyDefault, sizes[i], stream);
    if (i < npre) {
      ClassifyAs(&r, dsts[i], srcs[i], pre_dst[i], pre_src[i]);
    } else {
      Classify(&r, {dsts[i], false}, {srcs[i], false});
    }
    r.call_id = call_id;
    r.stack_id = stack_id;
    PinNoteBatchCopy(&pins, &r);
    r.batch_index = static_cast<uint32_t>(i);
    r.t_enter = t0;
    r.t_exit = t1;
    r.usage_enter = u0;
    r.usage_exit = u1;
    r.result = rc;
    RecordCopy(r);
  }
  CuptiAfterCall();
  AddHookCost(HookKind::kCopy, OwnNs(hook_start, pin_ns + (t1 - t0)));
  return rc;
}

}  // namespace pinscope::shim
