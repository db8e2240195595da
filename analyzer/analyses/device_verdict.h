// The "not input-bound" verdict from one device's busy figures
// (device_activity.h). Pure.
#pragma once

#include "analyzer/analyses/device_busy.h"

namespace pinscope::device {

struct InputVerdict {
  // Kernels were recorded in some of the window (DeviceBusy::measured()):
  // without that there is no verdict either way.
  bool measured = false;
  bool not_input_bound = false;  // the GPU is busy: the input pipeline keeps up
  double busy_fraction = 0;      // DeviceBusy::active_busy_fraction
  // Idle time in gaps attributed to input (copies + DataLoader), as a
  // fraction of the known (not blind) time of the window.
  double input_idle_fraction = 0;
};
// "Not input-bound" when kernels were recorded and active_busy_fraction >=
// `busy_threshold` (90%).
InputVerdict JudgeInput(const DeviceBusy& busy, double busy_threshold = 0.9);

}  // namespace pinscope::device
