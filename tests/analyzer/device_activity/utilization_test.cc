// GPU busy figures from NVML utilization samples (device_utilization.h):
// exact sums over sample periods, the kernel records' precedence, and the
// path through ProcessDeviceAnalysis.
#include <gtest/gtest.h>

#include "analyzer/analyses/device_activity.h"

namespace pinscope::device {
namespace {

constexpr uint64_t ms = kMs;

DeviceBusy Only(const std::vector<DeviceBusy>& v, uint32_t id) {
  for (const DeviceBusy& d : v)
    if (d.device_id == id) return d;
  ADD_FAILURE() << "no device " << id;
  return {};
}

TEST(Utilization, BusyIsPercentTimesPeriodOverTheCoveredTime) {
  UtilizationSeries u;
  // Every 100 ms from 100 to 1000: 0% twice, then 80%. The first sample's
  // period is the median one (100 ms), so the samples cover 0-1000 ms.
  for (int i = 1; i <= 10; ++i) u.Add(0, i * 100 * ms, i <= 2 ? 0 : 80);
  u.Add(0, 1000 * ms, 5);  // repeated time: dropped
  EXPECT_EQ(u.samples(), 10u);
  std::vector<DeviceBusy> devices;
  u.Apply({0, 1000 * ms}, 10, {}, &devices);
  DeviceBusy d = Only(devices, 0);
  EXPECT_EQ(d.source, BusySource::kUtilization);
  EXPECT_TRUE(d.measured());
  EXPECT_EQ(d.utilization_samples, 10u);
  EXPECT_EQ(d.utilization_period_ns, 100 * ms);
  EXPECT_DOUBLE_EQ(d.busy_fraction, 0.64);         // 8 x 80% of 10 periods
  EXPECT_DOUBLE_EQ(d.active_busy_fraction, 0.80);  // from the first busy sample on
  EXPECT_EQ(d.busy_ns, 640 * ms);
  EXPECT_DOUBLE_EQ(d.covered_fraction(), 1.0);
  ASSERT_EQ(d.chunk_busy_fraction.size(), 10u);
  EXPECT_DOUBLE_EQ(d.chunk_busy_fraction[0], 0.0);
  EXPECT_DOUBLE_EQ(d.chunk_busy_fraction[9], 0.8);
}

TEST(Utilization, ClippedToTheWindowAndUncoveredChunksUnknown) {
  UtilizationSeries u;
  for (int i = 1; i <= 5; ++i) u.Add(0, i * 100 * ms, 50);  // covers 0-500 ms
  std::vector<DeviceBusy> devices;
  u.Apply({250 * ms, 1250 * ms}, 4, {}, &devices);
  DeviceBusy d = Only(devices, 0);
  EXPECT_EQ(d.utilization_covered_ns, 250 * ms);
  EXPECT_DOUBLE_EQ(d.busy_fraction, 0.5);
  EXPECT_DOUBLE_EQ(d.covered_fraction(), 0.25);
  ASSERT_EQ(d.chunk_busy_fraction.size(), 4u);
  EXPECT_DOUBLE_EQ(d.chunk_busy_fraction[0], 0.5);
  EXPECT_LT(d.chunk_busy_fraction[1], 0);  // kUnknownFraction
}

TEST(Utilization, KernelRecordsKeepTheirFigures) {
  ProcessDeviceAnalysis a;
  DeviceRecord k;
  k.kind = kActKernel;
  k.start_ns = 100 * ms;
  k.end_ns = 200 * ms;
  a.OnDevice(k);
  for (int i = 1; i <= 10; ++i) a.OnUtilization(0, i * 100 * ms, 90);
  ProcessDeviceResult r = a.Finish({0, 1000 * ms});
  DeviceBusy d = Only(r.devices, 0);
  EXPECT_EQ(d.source, BusySource::kRecords);
  EXPECT_EQ(d.utilization_samples, 10u);  // counted, not used
  EXPECT_DOUBLE_EQ(d.utilization_busy_fraction, 0.9);  // beside the records' figure
  EXPECT_DOUBLE_EQ(d.busy_fraction, 0.1);
}

TEST(Utilization, KernelsOffGivesTheSamplesFigures) {
  ProcessDeviceAnalysis a;
  RecordingSwitch off;
  off.time_ns = 0;
  off.kernels = false;
  off.reason = "disabled";
  a.OnRecording(off);
  RecordingSwitch on = off;  // a moment of kernels on, with none launched
  on.time_ns = 50 * ms;
  on.kernels = true;
  a.OnRecording(on);
  off.time_ns = 60 * ms;
  a.OnRecording(off);
  DeviceRecord c;  // a copy: recorded, but kernels are not
  c.kind = kActMemcpy;
  c.start_ns = 300 * ms;
  c.end_ns = 301 * ms;
  a.OnDevice(c);
  for (int i = 1; i <= 10; ++i) a.OnUtilization(0, i * 100 * ms, 25);
  for (int i = 1; i <= 10; ++i) a.OnUtilization(1, i * 100 * ms, 75);  // samples only
  ProcessDeviceResult r = a.Finish({0, 1000 * ms});
  ASSERT_EQ(r.devices.size(), 2u);
  EXPECT_EQ(Only(r.devices, 0).source, BusySource::kUtilization);
  EXPECT_DOUBLE_EQ(Only(r.devices, 0).busy_fraction, 0.25);
  EXPECT_DOUBLE_EQ(Only(r.devices, 1).busy_fraction, 0.75);
  EXPECT_TRUE(Only(r.devices, 1).measured());
}

TEST(Utilization, LongSeriesAreCompactedNotCut) {
  UtilizationSeries u;
  const uint64_t n = (1 << 18) + 10;
  for (uint64_t i = 1; i <= n; ++i) u.Add(0, i * ms, i % 2 ? 20 : 60);
  std::vector<DeviceBusy> devices;
  u.Apply({0, n * ms}, 1, {}, &devices);
  DeviceBusy d = Only(devices, 0);
  EXPECT_NEAR(d.busy_fraction, 0.40, 0.001);
  EXPECT_NEAR(d.covered_fraction(), 1.0, 1e-6);
}

}  // namespace
}  // namespace pinscope::device
