// fake_cupti.h: test-only extensions of pinscope's CUPTI TEST DOUBLE.
//
// tests/doubles/fake_cupti builds a libcupti.so.13 look-alike (NOT NVIDIA's
// CUPTI) for CPU-only CI: it implements the activity-API calls pinscope makes
// and fails them on demand (FAKECUPTI_MODE), so the shim's degradation paths
// can be tested. The functions below exist only in the double.
//
// How it makes records: CUPTI records device work the program launched; the
// double has no device, so it makes one "API call" whenever an
// external-correlation region closes (cuptiActivityPopExternalCorrelationId)
// or a test calls fakecupti_simulate_api(). Each such call yields, if the
// kinds are enabled:
//   - one CUpti_ActivityExternalCorrelation per non-empty id stack of the
//     calling thread, only while the kind CUPTI_ACTIVITY_KIND_RUNTIME is on
//     (as CUDA 13.0's CUPTI does: per-call cuptiActivityEnableRuntimeApi
//     alone gives none),
//   - one CUpti_ActivityMemcpy6 (H2D, pageable -> device, FAKECUPTI_BYTES
//     bytes, default 4096, stream 7, device 0),
//   - one CUpti_ActivityKernel10 named "fake_kernel_a" / "fake_kernel_b"
//     alternately,
// all with the same new correlation id, timed with cuptiGetTimestamp()
// (CLOCK_REALTIME's reading at load, advanced by CLOCK_MONOTONIC: as far
// from the host timeline as CUPTI's CLOCK_REALTIME on Linux, without the
// steps of the machine's wall clock) from the region's push to its pop.
// Records are delivered on cuptiActivityFlushAll, on the calling thread.
//
// FAKECUPTI_MODE: ok (default) | taken (register/enable fail with
// CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) | fail_enable
// (cuptiActivityEnable fails with CUPTI_ERROR_NOT_INITIALIZED) |
// old_version (cuptiGetVersion says 18, CUDA 11.8).
#ifndef PINSCOPE_TESTS_FAKE_CUPTI_H_
#define PINSCOPE_TESTS_FAKE_CUPTI_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct fakecupti_stats {
  unsigned long loads;            // times the library's constructor ran
  unsigned long registrations;    // successful cuptiActivityRegisterCallbacks
  unsigned long pushes[8];        // by CUpti_ExternalCorrelationKind
  unsigned long pops[8];
  unsigned long api_calls;        // records made (see above)
  unsigned long flushes;          // cuptiActivityFlushAll calls
  unsigned long records_delivered;
  unsigned long runtime_cbids_off;  // runtime callback ids switched off one by
                                    // one (enabling the RUNTIME kind resets)
  unsigned long finalizes;          // cuptiFinalize calls
  // CUPTI calls (other than cuptiActivityRegisterCallbacks and
  // cuptiGetVersion) made after a cuptiFinalize and before the next
  // registration: each would attach the real CUPTI again.
  unsigned long calls_while_finalized;
};
void fakecupti_get_stats(struct fakecupti_stats* out);

// Bit k set: CUpti_ActivityKind k is enabled now.
uint64_t fakecupti_enabled_kinds(void);

// One simulated CUDA API call on this thread (see above).
void fakecupti_simulate_api(void);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // PINSCOPE_TESTS_FAKE_CUPTI_H_
