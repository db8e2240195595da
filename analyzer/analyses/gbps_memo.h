// The calibrated copy bandwidths of one replay, remembered per (direction,
// memory) for the last size asked: a run's copies repeat a few sizes, and
// each lookup otherwise costs three log() calls (Calibration's interpolation
// in log(bytes)). Returns exactly what the calibration returns. The
// calibration must not change while the memo is in use (an analysis holds
// both for one replay).
#pragma once

#include <cstdint>

#include "analyzer/read/calibration.h"

namespace pinscope {

class GbpsMemo {
 public:
  explicit GbpsMemo(const Calibration& calibration) : calibration_(calibration) {}

  double Pinned(bool h2d, uint64_t bytes) const { return Lookup(h2d, true, bytes); }
  double Pageable(bool h2d, uint64_t bytes) const { return Lookup(h2d, false, bytes); }

 private:
  struct Slot {
    uint64_t bytes = 0;
    double gbps = 0;
    bool valid = false;
  };
  double Lookup(bool h2d, bool pinned, uint64_t bytes) const {
    Slot& slot = slots_[(h2d ? 2 : 0) + (pinned ? 1 : 0)];
    if (!slot.valid || slot.bytes != bytes) {
      slot.gbps =
          pinned ? calibration_.PinnedGbps(h2d, bytes) : calibration_.PageableGbps(h2d, bytes);
      slot.bytes = bytes;
      slot.valid = true;
    }
    return slot.gbps;
  }

  const Calibration& calibration_;
  mutable Slot slots_[4];
};

}  // namespace pinscope
