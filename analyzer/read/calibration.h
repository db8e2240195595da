// Host<->device bandwidth measured by `pinscope calibrate`, used by the report
// to say what a copy would cost pinned. Stored as JSON (schema below).
//
// {"version": 1, "gpu": "NVIDIA H200", "hostname": "...", "date": "2026-...",
//  "source": "pinscope calibrate" | "built-in default ...",
//  "points": [{"bytes": 1048576, "h2d_pageable_gbps": 7.0,
//              "h2d_pinned_gbps": 36.3, "d2h_pageable_gbps": 7.1,
//              "d2h_pinned_gbps": 38.0, "host_copy_gbps": 9.1,
//              "register_gbps": 20.0, "first_touch_gbps": 12.0,
//              "map_touch_gbps": 25.0, "shm_release_gbps": 6.0}, ...]}
// (host_copy_gbps, register_gbps, first_touch_gbps, map_touch_gbps and
// shm_release_gbps are optional: calibrations from before them, and the built-in table for what
// the facts do not give, leave them out.)
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pinscope {

struct BandwidthPoint {
  uint64_t bytes = 0;
  double h2d_pageable_gbps = 0;
  double h2d_pinned_gbps = 0;
  double d2h_pageable_gbps = 0;
  double d2h_pinned_gbps = 0;
  // One thread's memcpy from pageable to pinned host memory (what
  // DataLoader's pin_memory thread does to every batch); 0 = not measured
  // (calibrations from before this field, the built-in default).
  double host_copy_gbps = 0;
  // cudaHostRegister of touched pageable memory (what PINSCOPE_PIN=1 pays
  // per new buffer), bytes over the call's time; 0 = not measured.
  double register_gbps = 0;
  // The page faults of writing freshly mapped anonymous memory (what a
  // batch buffer that glibc serves by mmap costs every batch): bytes over
  // (first write - the same write on touched memory); 0 = not measured.
  double first_touch_gbps = 0;
  // The page faults of reading a shared-memory segment that was filled and
  // is mapped anew (what the main process pays on each worker batch it
  // copies from pageable shm): bytes over (first read - warm read).
  double map_touch_gbps = 0;
  // Releasing a populated shared-memory segment that nothing else holds
  // (munmap and the last close free its pages): what the thread that drops
  // a worker's batch pays; bytes over that time.
  double shm_release_gbps = 0;
};

struct Calibration {
  std::string gpu;
  std::string hostname;
  std::string date;
  std::string source;  // where the numbers come from, shown in the report
  std::vector<BandwidthPoint> points;  // sorted by bytes

  // Bandwidth for a copy of `bytes`, interpolated in log(bytes) between the
  // two nearest points, clamped at the ends. GB/s = 1e9 bytes per second.
  double PinnedGbps(bool h2d, uint64_t bytes) const;
  double PageableGbps(bool h2d, uint64_t bytes) const;
  // Pageable -> pinned memcpy of one thread, interpolated likewise over the
  // points that have it; 0 when none does.
  double HostCopyGbps(uint64_t bytes) const;
  // The optional fields likewise, over the points that have them; 0 when
  // none does.
  double RegisterGbps(uint64_t bytes) const;
  double FirstTouchGbps(uint64_t bytes) const;
  double MapTouchGbps(uint64_t bytes) const;
  double ShmReleaseGbps(uint64_t bytes) const;
};

// Built-in default: the H200 / PCIe Gen5 x16 table of
// ../shared/facts/README.md section 3, labeled as such in `source`.
Calibration DefaultCalibration();

// Parse; on failure returns nullopt and sets *error naming the problem.
std::optional<Calibration> LoadCalibration(const std::string& path, std::string* error);
bool SaveCalibration(const Calibration& calibration, const std::string& path, std::string* error);

// Where `pinscope calibrate` stores its result:
// $PINSCOPE_CALIBRATION, else $XDG_CACHE_HOME/pinscope/calibration.json,
// else $HOME/.cache/pinscope/calibration.json.
std::string DefaultCalibrationPath();

// The calibration a report of `run_dir` uses: explicit path if given
// (nullopt with *error when it cannot be used: the user named that file),
// else RUN/calibration.json, else DefaultCalibrationPath(), else
// DefaultCalibration(). A file found there that is empty, corrupt or not a
// regular file is not fatal: *warning names it and the problem, and the
// built-in table is returned (its source says which file it replaces).
std::optional<Calibration> ResolveCalibration(const std::string& explicit_path,
                                              const std::string& run_dir, std::string* error,
                                              std::string* warning = nullptr);

}  // namespace pinscope
