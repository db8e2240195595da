// Kernel recording (PINSCOPE_CUPTI_KERNELS): on, off, or sampled in windows
// above PINSCOPE_CUPTI_KERNEL_RATE (CuptiState::kernels). Under mu, at start
// and from the flusher; each switch is a DeviceRecording packet.
#include <algorithm>

#include "shim/base/clock.h"
#include "shim/base/config.h"
#include "shim/device/cupti_state.h"
#include "shim/record/recorder.h"
#include "shim/record/trace_fields.h"

namespace pinscope::shim::cupti_internal {

namespace {

namespace f = fields;

constexpr uint64_t kMaxBlindPeriods = 30;

}  // namespace

void WriteRecording(bool kernels, const char* reason, double rate, uint64_t planned_ns,
                    uint64_t now, bool detached) {
  namespace r = f::recording;
  Packet p(f::packet::kRecording, now);
  p.e().Bool(r::kKernels, kernels);
  p.e().String(r::kReason, reason);
  p.e().Double(r::kKernelRate, rate);
  p.e().Varint(r::kPlannedNs, planned_ns);
  if (detached) p.e().Bool(r::kDetached, true);
  // Without the RUNTIME kind, CUDA 13's CUPTI writes no correlation records:
  // said on every switch, so the analyzer joins device records by order from
  // the process's first packet on (a notice could come later, or be lost).
  if (!GetConfig().cupti_runtime) p.e().Bool(r::kNoCorrelations, true);
  p.Commit();
}

// At start, the kinds enabled: kernels on unless PINSCOPE_CUPTI_KERNELS=0.
void StartKernelsLocked(bool kernels) {
  CuptiState::Kernels& k = Cupti().kernels;
  k.on = kernels;
  k.phase_start_ns = MonoNs();
  k.phase_records = k.records.load();
  if (!kernels) WriteRecording(false, "disabled", 0, 0, k.phase_start_ns);
}

// Auto kernel recording (see CuptiState::kernels); mu held, state active.
void SampleKernelsLocked() {
  const Config& cfg = GetConfig();
  if (cfg.cupti_kernels != KernelRecording::kAuto) return;
  CuptiState& s = Cupti();
  CuptiState::Kernels& k = s.kernels;
  const uint64_t now = MonoNs();
  const uint64_t period = uint64_t{cfg.flush_ms} * 1000000;
  const uint64_t total = k.records.load(std::memory_order_relaxed);
  if (k.on) {
    uint64_t elapsed = now - k.phase_start_ns;
    if (elapsed < period / 2) return;
    // Records arrive when a CUPTI buffer completes, so a low rate is seen
    // late; averaging over up to ten periods smooths that out. A high rate
    // fills buffers several times a period, so the last period alone is
    // trusted when it is well above the limit (a job's start-up, with few
    // kernels, must not delay the first switch).
    double rate = static_cast<double>(total - k.phase_records) * 1e9 / static_cast<double>(elapsed);
    const double limit = cfg.cupti_kernel_rate;
    if (k.tick_ns > k.phase_start_ns && now > k.tick_ns) {
      double recent =
          static_cast<double>(total - k.tick_records) * 1e9 / static_cast<double>(now - k.tick_ns);
      if (recent > 2 * limit && recent > rate) {
        rate = recent;
        elapsed = now - k.tick_ns;
      }
    }
    k.tick_ns = now;
    k.tick_records = total;
    if (rate <= limit) {
      if (elapsed >= 10 * period) {
        k.phase_start_ns = now;
        k.phase_records = total;
      }
      return;
    }
    double blind = static_cast<double>(elapsed) * (rate / limit - 1.0);
    uint64_t blind_ns = static_cast<uint64_t>(
        std::clamp(blind, static_cast<double>(period), static_cast<double>(kMaxBlindPeriods * period)));
    if (s.api.Disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS) return;
    k.on = false;
    k.blind_until_ns = now + blind_ns;
    WriteRecording(false, "sampling", rate, blind_ns, now);
  } else if (now + period / 2 >= k.blind_until_ns) {
    if (s.api.Enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS)
      return;  // next period
    k.on = true;
    k.phase_start_ns = now;
    k.phase_records = total;
    WriteRecording(true, "window", 0, period, now);
  }
}

}  // namespace pinscope::shim::cupti_internal
