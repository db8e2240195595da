// The input verdict; see device_verdict.h.
#include "analyzer/analyses/device_verdict.h"

#include <cstdint>

#include "analyzer/analyses/device_gaps.h"

namespace pinscope::device {

InputVerdict JudgeInput(const DeviceBusy& busy, double busy_threshold) {
  InputVerdict v;
  const uint64_t known = busy.known_ns();
  v.measured = known > 0;
  v.busy_fraction = busy.active_busy_fraction;
  v.not_input_bound = v.measured && busy.active_busy_fraction >= busy_threshold;
  uint64_t input = busy.by_cause[static_cast<int>(GapCause::kCopy)].idle_ns +
                   busy.by_cause[static_cast<int>(GapCause::kDataLoader)].idle_ns;
  v.input_idle_fraction = known ? static_cast<double>(input) / static_cast<double>(known) : 0.0;
  return v;
}

}  // namespace pinscope::device
