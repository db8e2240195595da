// DataLoader spans; see loader_spans.h.
#include "shim/core/loader_spans.h"

#include "shim/base/clock.h"
#include "shim/base/guard.h"
#include "shim/base/own_cost.h"
#include "shim/base/phases.h"
#include "shim/base/usage.h"
#include "shim/pin/pool.h"
#include "shim/record/recorder.h"
#include "shim/record/trace_fields.h"

namespace pinscope::shim {
namespace {

struct OpenSpan {
  uint64_t t = 0;
  Usage usage;
  bool whole = false;
};
PINSCOPE_TLS OpenSpan t_spans[kMaxLoaderSpanDepth];
// Spans begun on this thread and not yet ended, including dropped ones.
PINSCOPE_TLS int t_depth = 0;

}  // namespace

void LoaderIter(const LoaderSettings& s) {
  if (!Recording()) return;
  HookScope scope;
  HookCostTimer cost(HookKind::kLoader);
  // The pool sizes itself to the epoch's batches in flight (pool.h).
  // The epoch's batches: an upper bound (a sampler may take fewer, drop_last
  // one fewer); 0 when the dataset's length is not known.
  if (PoolOn()) {
    const uint64_t batches = s.batch_size > 0 && s.dataset_length > 0
                                 ? (s.dataset_length + static_cast<uint64_t>(s.batch_size) - 1) /
                                       static_cast<uint64_t>(s.batch_size)
                                 : 0;
    PoolNoteLoader(s.num_workers, s.prefetch_factor, batches, s.pin_memory);
  }
  LoaderRecord r;
  r.kind = fields::kLoaderIter;
  r.loader_id = s.loader_id;
  r.t_begin = r.t_end = MonoNs();
  r.index = s.epoch;
  r.num_workers = s.num_workers;
  r.prefetch_factor = s.prefetch_factor;
  r.batch_size = s.batch_size;
  r.pin_memory = s.pin_memory;
  r.persistent_workers = s.persistent_workers;
  r.iterable = s.iterable;
  r.dataset_length = s.dataset_length;
  r.site = s.site;
  r.user_site = s.user_site;
  r.framework = s.framework;
  RecordLoader(r);
}

void LoaderSpanBegin(bool whole) {
  if (t_depth < kMaxLoaderSpanDepth) {
    if (Recording()) {
      PS_PHASE(kLoaderBegin);
      const uint64_t t0 = MonoNs();
      OpenSpan& span = t_spans[t_depth];
      span.whole = whole;
      // Read, unless it begins right after the thread's previous call or
      // span (usage.h: a PIN span after its RECV span).
      span.usage = EntryUsage(whole, &span.t);
      // The Python hook's calls are recording hooks too (own_cost.h); a span
      // counts as one, at its end.
      AddHookTime(HookKind::kLoader, span.t - t0);
    } else {
      t_spans[t_depth].t = 0;  // begun unrecorded (passive, paused): dropped at its end
    }
  }
  ++t_depth;
}

void LoaderSpanEnd(uint32_t kind, uint64_t loader_id, uint64_t index, int32_t worker_id,
                   uint32_t batch_samples) {
  if (t_depth == 0) return;  // an End without its Begin: ignored
  const int depth = --t_depth;
  if (depth >= kMaxLoaderSpanDepth || !Recording() || t_spans[depth].t == 0) return;
  HookScope scope;
  HookCostTimer cost(HookKind::kLoader);
  PS_PHASE(kLoaderEnd);
  LoaderRecord r;
  r.kind = kind;
  r.loader_id = loader_id;
  r.t_begin = t_spans[depth].t;
  r.t_end = MonoNs();
  r.has_usage = true;
  r.usage_begin = t_spans[depth].usage;
  r.usage_end = ExitUsage(t_spans[depth].whole, r.usage_begin, r.t_begin, r.t_end);
  r.index = index;
  r.worker_id = worker_id;
  r.batch_samples = batch_samples;
  RecordLoader(r);
}

void LoaderMark(uint32_t kind, uint64_t loader_id, uint64_t index) {
  if (!Recording()) return;
  HookScope scope;
  HookCostTimer cost(HookKind::kLoader);
  PS_PHASE(kLoaderEnd);
  LoaderRecord r;
  r.kind = kind;
  r.loader_id = loader_id;
  r.t_begin = r.t_end = MonoNs();
  r.index = index;
  RecordLoader(r);
}

}  // namespace pinscope::shim
