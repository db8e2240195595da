// The C ABI that pinscope's Python hook (python/pinscope_hook.py) calls
// through ctypes: plain arguments handed to core/loader_spans.h. Exported
// from libpinscope.so (interpose/pinscope.map); the hook looks for
// pinscope_loader_abi and does nothing when the shim is not loaded.
#include <cstdint>

#include "shim/core/loader_spans.h"

#define PINSCOPE_EXPORT extern "C" __attribute__((visibility("default")))

using namespace pinscope::shim;

// Bumped when an argument list below changes.
PINSCOPE_EXPORT int pinscope_loader_abi(void) { return 3; }

PINSCOPE_EXPORT void pinscope_loader_iter(uint64_t loader_id, uint64_t epoch, int32_t num_workers,
                                          int32_t pin_memory, int32_t prefetch_factor,
                                          int32_t persistent_workers, int32_t batch_size,
                                          uint64_t dataset_length, int32_t iterable,
                                          const char* site, const char* user_site,
                                          const char* framework) {
  LoaderSettings s;
  s.loader_id = loader_id;
  s.epoch = epoch;
  s.num_workers = num_workers;
  s.pin_memory = pin_memory != 0;
  s.prefetch_factor = prefetch_factor;
  s.persistent_workers = persistent_workers != 0;
  s.batch_size = batch_size;
  s.dataset_length = dataset_length;
  s.iterable = iterable != 0;
  s.site = site;
  s.user_site = user_site;
  s.framework = framework;
  LoaderIter(s);
}

// ABI 3: a span reads the thread's CPU time only at both ends (NEXT, RECV,
// PIN), or its whole usage (`_fetch`: a batch being made, whose faults
// count). Few arguments: ctypes converts each (about 70 ns on the
// development machine, where a call without any takes 40 ns).
PINSCOPE_EXPORT void pinscope_loader_begin(void) { LoaderSpanBegin(false); }
PINSCOPE_EXPORT void pinscope_loader_begin_fetch(void) { LoaderSpanBegin(true); }

PINSCOPE_EXPORT void pinscope_loader_end(uint32_t kind, uint64_t loader_id, uint64_t index,
                                         int32_t worker_id, uint32_t batch_samples) {
  LoaderSpanEnd(kind, loader_id, index, worker_id, batch_samples);
}

// The same without a worker id (-1) or a batch's samples (0).
PINSCOPE_EXPORT void pinscope_loader_end_at(uint32_t kind, uint64_t loader_id, uint64_t index) {
  LoaderSpanEnd(kind, loader_id, index, -1, 0);
}

PINSCOPE_EXPORT void pinscope_loader_mark(uint32_t kind, uint64_t loader_id, uint64_t index) {
  LoaderMark(kind, loader_id, index);
}
