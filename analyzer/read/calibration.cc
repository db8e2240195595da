// Calibration tables (calibration.h): the built-in H200 default, JSON load
// and save, the search order a report uses, and log-size interpolation.
#include "analyzer/read/calibration.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <system_error>

#include "analyzer/common/private_file.h"

namespace pinscope {

namespace {

constexpr int kCalibrationVersion = 1;

// Linear in log(bytes) between the two points around `bytes`, clamped at the
// ends of the table.
double Interpolate(const std::vector<BandwidthPoint>& points, uint64_t bytes,
                   double BandwidthPoint::*field) {
  if (points.empty()) return 0;
  if (bytes <= points.front().bytes) return points.front().*field;
  if (bytes >= points.back().bytes) return points.back().*field;
  for (size_t i = 1; i < points.size(); ++i) {
    const BandwidthPoint& hi = points[i];
    if (bytes > hi.bytes) continue;
    const BandwidthPoint& lo = points[i - 1];
    if (hi.bytes == lo.bytes) return hi.*field;
    const double t =
        (std::log(static_cast<double>(bytes)) - std::log(static_cast<double>(lo.bytes))) /
        (std::log(static_cast<double>(hi.bytes)) - std::log(static_cast<double>(lo.bytes)));
    return lo.*field + t * (hi.*field - lo.*field);
  }
  return points.back().*field;
}

// Anything at `path`, a broken file included (it is warned about, not
// skipped silently as a missing one).
bool Exists(const std::string& path) {
  std::error_code ec;
  return !path.empty() && std::filesystem::exists(path, ec);
}

}  // namespace

double Calibration::PinnedGbps(bool h2d, uint64_t bytes) const {
  return Interpolate(points, bytes,
                     h2d ? &BandwidthPoint::h2d_pinned_gbps : &BandwidthPoint::d2h_pinned_gbps);
}

double Calibration::PageableGbps(bool h2d, uint64_t bytes) const {
  return Interpolate(points, bytes,
                     h2d ? &BandwidthPoint::h2d_pageable_gbps : &BandwidthPoint::d2h_pageable_gbps);
}

namespace {
// Interpolates an optional field over the points that have it.
double Optional(const std::vector<BandwidthPoint>& points, uint64_t bytes,
                double BandwidthPoint::*field) {
  std::vector<BandwidthPoint> with;
  for (const BandwidthPoint& p : points)
    if (p.*field > 0) with.push_back(p);
  if (with.empty()) return 0;
  return Interpolate(with, bytes, field);
}
}  // namespace

double Calibration::HostCopyGbps(uint64_t bytes) const {
  return Optional(points, bytes, &BandwidthPoint::host_copy_gbps);
}
double Calibration::RegisterGbps(uint64_t bytes) const {
  return Optional(points, bytes, &BandwidthPoint::register_gbps);
}
double Calibration::FirstTouchGbps(uint64_t bytes) const {
  return Optional(points, bytes, &BandwidthPoint::first_touch_gbps);
}
double Calibration::MapTouchGbps(uint64_t bytes) const {
  return Optional(points, bytes, &BandwidthPoint::map_touch_gbps);
}
double Calibration::ShmReleaseGbps(uint64_t bytes) const {
  return Optional(points, bytes, &BandwidthPoint::shm_release_gbps);
}

Calibration DefaultCalibration() {
  Calibration calibration;
  calibration.gpu = "NVIDIA H200";
  calibration.hostname = "";
  calibration.date = "2026-11-29";
  calibration.source = "built-in default: H200 PCIe Gen5 x16, pinscope facts 2026-11-29";
  // ../shared/facts/README.md section 3: median of 10, CUDA events.
  calibration.points = {
      {1 * 1024 * 1024, 7.0, 36.3, 7.1, 38.0},    {8 * 1024 * 1024, 10.7, 50.7, 10.8, 50.8},
      {77070336, 6.0, 52.9, 12.2, 53.8},  // 128x3x224x224 fp32 = 73.5 MiB
      {256 * 1024 * 1024, 5.4, 52.1, 12.8, 54.0}, {1024ull * 1024 * 1024, 5.2, 49.9, 13.3, 54.4},
  };
  // Section 4: cudaHostRegister of touched memory and first touch (ms).
  const double kRegisterMs[] = {0.43, 0.81, 3.7, 12.1, 48.9};
  const double kFirstTouchMs[] = {0.07, 0.56, 6.3, 26.7, 104};
  for (size_t i = 0; i < calibration.points.size(); ++i) {
    const double bytes = static_cast<double>(calibration.points[i].bytes);
    calibration.points[i].register_gbps = bytes / (kRegisterMs[i] * 1e6);
    calibration.points[i].first_touch_gbps = bytes / (kFirstTouchMs[i] * 1e6);
  }
  return calibration;
}

std::optional<Calibration> LoadCalibration(const std::string& path, std::string* error) {
  const auto fail = [&](const std::string& why) -> std::optional<Calibration> {
    if (error != nullptr) *error = "calibration " + path + ": " + why;
    return std::nullopt;
  };
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) return fail("cannot open");
  // A FIFO would block the open; a folder opens and reads as nothing.
  if (!std::filesystem::is_regular_file(status)) return fail("not a regular file");
  std::ifstream in(path);
  if (!in) return fail("cannot open");
  if (in.peek() == std::ifstream::traits_type::eof()) return fail("empty (0 bytes)");
  nlohmann::json doc = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return fail("not valid JSON");
  if (!doc.is_object()) return fail("not a JSON object");
  if (!doc.contains("version") || !doc["version"].is_number_integer()) {
    return fail("missing \"version\"");
  }
  if (doc["version"].get<int>() != kCalibrationVersion) {
    return fail("version " + doc["version"].dump() + " is not supported (this pinscope reads 1)");
  }
  Calibration calibration;
  const auto text = [&](const char* key) -> std::string {
    return doc.contains(key) && doc[key].is_string() ? doc[key].get<std::string>() : "";
  };
  calibration.gpu = text("gpu");
  calibration.hostname = text("hostname");
  calibration.date = text("date");
  calibration.source = text("source");
  if (calibration.source.empty()) calibration.source = "pinscope calibrate";
  calibration.source += " (" + path + ")";
  if (!doc.contains("points") || !doc["points"].is_array() || doc["points"].empty()) {
    return fail("\"points\" must be a non-empty array");
  }
  for (const auto& item : doc["points"]) {
    BandwidthPoint point;
    const auto number = [&](const char* key, double* out) {
      if (!item.is_object() || !item.contains(key) || !item[key].is_number()) return false;
      *out = item[key].get<double>();
      return std::isfinite(*out) && *out > 0;
    };
    double bytes = 0;
    if (!number("bytes", &bytes) || !number("h2d_pageable_gbps", &point.h2d_pageable_gbps) ||
        !number("h2d_pinned_gbps", &point.h2d_pinned_gbps) ||
        !number("d2h_pageable_gbps", &point.d2h_pageable_gbps) ||
        !number("d2h_pinned_gbps", &point.d2h_pinned_gbps)) {
      return fail("point " + item.dump() +
                  " needs positive bytes, h2d_pageable_gbps, h2d_pinned_gbps, "
                  "d2h_pageable_gbps and d2h_pinned_gbps");
    }
    for (auto [key, field] : {std::pair{"host_copy_gbps", &point.host_copy_gbps},
                              std::pair{"register_gbps", &point.register_gbps},
                              std::pair{"first_touch_gbps", &point.first_touch_gbps},
                              std::pair{"map_touch_gbps", &point.map_touch_gbps},
                              std::pair{"shm_release_gbps", &point.shm_release_gbps}}) {
      if (item.contains(key) && !number(key, field)) {
        return fail("point " + item.dump() + ": " + key + " must be a positive number");
      }
    }
    point.bytes = static_cast<uint64_t>(bytes);
    calibration.points.push_back(point);
  }
  std::sort(calibration.points.begin(), calibration.points.end(),
            [](const BandwidthPoint& a, const BandwidthPoint& b) { return a.bytes < b.bytes; });
  return calibration;
}

bool SaveCalibration(const Calibration& calibration, const std::string& path, std::string* error) {
  nlohmann::json doc;
  doc["version"] = kCalibrationVersion;
  doc["gpu"] = calibration.gpu;
  doc["hostname"] = calibration.hostname;
  doc["date"] = calibration.date;
  doc["source"] = calibration.source;
  doc["points"] = nlohmann::json::array();
  for (const BandwidthPoint& point : calibration.points) {
    doc["points"].push_back({{"bytes", point.bytes},
                             {"h2d_pageable_gbps", point.h2d_pageable_gbps},
                             {"h2d_pinned_gbps", point.h2d_pinned_gbps},
                             {"d2h_pageable_gbps", point.d2h_pageable_gbps},
                             {"d2h_pinned_gbps", point.d2h_pinned_gbps}});
    if (point.host_copy_gbps > 0) doc["points"].back()["host_copy_gbps"] = point.host_copy_gbps;
    if (point.register_gbps > 0) doc["points"].back()["register_gbps"] = point.register_gbps;
    if (point.first_touch_gbps > 0) doc["points"].back()["first_touch_gbps"] = point.first_touch_gbps;
    if (point.map_touch_gbps > 0) doc["points"].back()["map_touch_gbps"] = point.map_touch_gbps;
    if (point.shm_release_gbps > 0)
      doc["points"].back()["shm_release_gbps"] = point.shm_release_gbps;
  }
  std::error_code ec;
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent, ec);
  // Write beside the target and rename, so a reader never sees half a file.
  const std::string temporary = path + ".tmp";
  if (!CreatePrivateFile(temporary, error)) {
    if (error != nullptr) *error = "calibration " + path + ": " + *error;
    return false;
  }
  {
    std::ofstream out(temporary, std::ios::trunc);
    if (!out) {
      if (error != nullptr) *error = "calibration " + path + ": cannot write " + temporary;
      return false;
    }
    out << doc.dump(2) << '\n';
    if (!out.flush()) {
      if (error != nullptr) *error = "calibration " + path + ": write failed";
      return false;
    }
  }
  std::filesystem::rename(temporary, path, ec);
  if (ec) {
    if (error != nullptr) *error = "calibration " + path + ": " + ec.message();
    return false;
  }
  return true;
}

std::string DefaultCalibrationPath() {
  const auto env = [](const char* name) -> std::string {
    const char* value = std::getenv(name);
    return value != nullptr ? value : "";
  };
  if (std::string path = env("PINSCOPE_CALIBRATION"); !path.empty()) return path;
  if (std::string cache = env("XDG_CACHE_HOME"); !cache.empty()) {
    return cache + "/pinscope/calibration.json";
  }
  if (std::string home = env("HOME"); !home.empty()) {
    return home + "/.cache/pinscope/calibration.json";
  }
  return "";
}

std::optional<Calibration> ResolveCalibration(const std::string& explicit_path,
                                              const std::string& run_dir, std::string* error,
                                              std::string* warning) {
  if (!explicit_path.empty()) return LoadCalibration(explicit_path, error);
  // The first file found is the one meant; if it cannot be used, the next
  // in the order may be another machine's, so the built-in table stands in
  // and the warning says which file to fix. A report never fails for it.
  const auto use = [&](const std::string& path) -> std::optional<Calibration> {
    std::string problem;
    if (std::optional<Calibration> loaded = LoadCalibration(path, &problem)) return loaded;
    Calibration fallback = DefaultCalibration();
    fallback.source += " (" + path + " is unusable)";
    if (warning != nullptr) *warning = problem + "; the built-in table is used instead";
    return fallback;
  };
  if (!run_dir.empty()) {
    const std::string in_run = run_dir + "/calibration.json";
    if (Exists(in_run)) return use(in_run);
  }
  const std::string cached = DefaultCalibrationPath();
  if (Exists(cached)) return use(cached);
  return DefaultCalibration();
}

}  // namespace pinscope
