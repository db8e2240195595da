// Report tests with exact numbers: the copy table, the pageable staging
// estimate against the built-in calibration, the largest copies and their
// buffers, each verdict class, JSON schema basics, exit codes and the stubs.
#include "analyzer/report/report.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "analyzer/read/run_loader.h"
#include "analyzer/report/report_command.h"
#include "trace_builder.h"

namespace pinscope {
namespace {

using testing::kMiBytes;
using testing::kMs;
using testing::MakeTempDir;
using testing::TraceBuilder;

constexpr uint64_t kT0 = 1000ull * 1000 * kMs;

// 4 H2D pageable 8 MiB copies blocked 2 ms each (from one allocation), 2 D2H
// pageable 1 MiB blocked 1 ms, a failed H2D pageable copy, a pinned H2D
// copy, a D2D copy; the main process lives `life_ms`.
std::string WriteCopies(const std::string& name, uint64_t life_ms) {
  const std::string dir = MakeTempDir(name);
  TraceBuilder main(100, "r", kT0);
  testing::SetHostFacts(&main.header(), 64 * kMiBytes, 64 * kMiBytes);
  main.Alloc(kT0 + 1 * kMs, trace::POSIX_MEMALIGN, 0x10000000, 32 * kMiBytes);
  for (uint64_t i = 0; i < 4; ++i) {
    main.Copy(kT0 + (10 + 10 * i) * kMs, 2 * kMs, trace::H2D, trace::PAGEABLE, 8 * kMiBytes,
              0x10000000 + i * 8 * kMiBytes);
  }
  main.Copy(kT0 + 50 * kMs, kMs, trace::D2H, trace::PAGEABLE, kMiBytes, 0x7ffc0000);
  main.Copy(kT0 + 52 * kMs, kMs, trace::D2H, trace::PAGEABLE, kMiBytes, 0x7ffd0000);
  main.Copy(kT0 + 60 * kMs, 1000, trace::H2D, trace::PAGEABLE, kMiBytes, 0)
      .mutable_copy()
      ->set_result(1);
  main.Alloc(kT0 + 65 * kMs, trace::CUDA_HOST_ALLOC, 0x30000000, 64 * kMiBytes);
  main.Copy(kT0 + 70 * kMs, 10000, trace::H2D, trace::PINNED, 64 * kMiBytes, 0x30000000);
  main.Copy(kT0 + 80 * kMs, 5000, trace::D2D, trace::DEVICE, 16 * kMiBytes, 0);
  main.Exit(kT0 + life_ms * kMs);
  main.Write(dir);
  return dir;
}

nlohmann::json JsonOf(const std::string& dir, int* code = nullptr) {
  ReportOptions options;
  options.run_dir = dir;
  options.json = true;
  std::ostringstream out, err;
  const int rc = RunReport(options, out, err);
  if (code != nullptr) *code = rc;
  return nlohmann::json::parse(out.str());
}

TEST(ReportTest, CopyTableNumbersAreExact) {
  int code = -1;
  const nlohmann::json report = JsonOf(WriteCopies("report_copies", 1000), &code);
  EXPECT_EQ(code, 0);
  EXPECT_EQ(report["schema_version"], 1);
  const auto& rows = report["copies"]["rows"];
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0]["direction"], "H2D");
  EXPECT_EQ(rows[0]["memory"], "pageable");
  EXPECT_EQ(rows[0]["count"], 5);
  EXPECT_EQ(rows[0]["bytes"], 33554432 + 1048576);
  EXPECT_EQ(rows[0]["blocked_ns"], 8001000);
  EXPECT_EQ(rows[0]["failed"], 1);
  EXPECT_EQ(rows[0]["loss_ns"], 4 * (2000000 - 165455));  // 8 MiB at 50.7 GB/s
  EXPECT_EQ(rows[0]["calibrated_pinned_gbps"], 49.368);   // mean size 6.6 MiB, interpolated
  EXPECT_EQ(rows[1]["direction"], "H2D");
  EXPECT_EQ(rows[1]["memory"], "pinned");
  EXPECT_EQ(rows[1]["count"], 1);
  EXPECT_EQ(rows[1]["blocked_ns"], 10000);
  EXPECT_EQ(rows[1]["loss_ns"], 0);
  EXPECT_EQ(rows[2]["direction"], "D2H");
  EXPECT_EQ(rows[2]["memory"], "pageable");
  EXPECT_EQ(rows[2]["count"], 2);
  EXPECT_EQ(rows[2]["bytes"], 2097152);
  EXPECT_EQ(rows[2]["blocked_ns"], 2000000);
  EXPECT_EQ(rows[2]["achieved_gbps"], 1.049);
  EXPECT_EQ(rows[2]["loss_ns"], 2 * (1000000 - 27594));  // 1 MiB at 38.0 GB/s
  EXPECT_EQ(rows[3]["direction"], "D2D");
  EXPECT_EQ(rows[3]["memory"], "device");
  EXPECT_EQ(report["copies"]["total"]["count"], 9);
  EXPECT_EQ(report["copies"]["total"]["bytes"], 33554432 + 1048576 + 67108864 + 2097152 + 16777216);

  const auto& staging = report["pageable_staging"];
  EXPECT_EQ(staging["by_direction"][0]["count"], 4);  // the failed copy is not staging
  EXPECT_EQ(staging["by_direction"][0]["blocked_ns"], 8000000);
  EXPECT_EQ(staging["by_direction"][0]["pinned_estimate_ns"], 4 * 165455);
  EXPECT_EQ(staging["by_direction"][1]["pinned_estimate_ns"], 2 * 27594);
  EXPECT_EQ(staging["loss_ns"], 4 * (2000000 - 165455) + 2 * (1000000 - 27594));
  EXPECT_EQ(staging["by_buffer"]["alloc"]["count"], 4);
  EXPECT_EQ(staging["by_buffer"]["unknown"]["count"], 2);
  EXPECT_EQ(staging["pinned_bandwidth_source"],
            "built-in default: H200 PCIe Gen5 x16, pinscope facts 2026-11-29");

  const auto& largest = report["largest_pageable_copies"];
  ASSERT_EQ(largest.size(), 6u);
  EXPECT_EQ(largest[0]["bytes"], 8388608);
  EXPECT_EQ(largest[0]["time_offset_ns"], 10 * kMs);
  EXPECT_EQ(largest[0]["buffer"]["kind"], "alloc");
  EXPECT_EQ(largest[0]["buffer"]["api"], "posix_memalign");
  EXPECT_EQ(largest[0]["buffer"]["size"], 33554432);
  EXPECT_EQ(largest[0]["buffer"]["description"], "posix_memalign 32.0 MiB");
  EXPECT_EQ(largest[3]["buffer"]["offset"], 3 * 8 * kMiBytes);
  EXPECT_EQ(largest[4]["buffer"]["kind"], "unknown");

  EXPECT_EQ(report["allocations"]["count"], 2);
  EXPECT_EQ(report["allocations"]["fed_allocations"], 2);
  EXPECT_EQ(report["allocations"]["copies_fed"], 5);
  EXPECT_EQ(report["allocations"]["pageable_copies_fed"], 4);
}

TEST(ReportTest, SmallLossIsNotInputBound) {
  const nlohmann::json report = JsonOf(WriteCopies("report_not_bound", 1000));
  EXPECT_EQ(report["verdict"]["id"], "not_input_bound");
  EXPECT_EQ(report["verdict"]["text"],
            "not input-bound: host<->device copies blocked pid 100 main thread for 10.0 ms (1.0% "
            "of its 1.00 s); pinned memory would save at most 9.28 ms");
  ASSERT_EQ(report["findings"].size(), 1u);
  EXPECT_EQ(report["findings"][0]["id"], "pageable_staging");
  EXPECT_EQ(report["findings"][0]["significant"], false);
}

TEST(ReportTest, LargeLossIsPageableStaging) {
  const nlohmann::json report = JsonOf(WriteCopies("report_staging", 100));
  EXPECT_EQ(report["verdict"]["id"], "pageable_staging");
  EXPECT_EQ(report["verdict"]["severity"], "warning");
  EXPECT_EQ(report["verdict"]["text"],
            "pageable staging: 10.0% of pid 100 main thread's time is spent in 6 H2D/D2H copies "
            "from pageable memory at 3.6 GB/s; pinned would take 0.7%");
  const auto& finding = report["findings"][0];
  EXPECT_EQ(finding["saving_ns"], 4 * (2000000 - 165455) + 2 * (1000000 - 27594));
  EXPECT_EQ(finding["saving_fraction"], 0.09283);
  EXPECT_NE(finding["action"].get<std::string>().find("PINSCOPE_PIN=1"), std::string::npos);
}

TEST(ReportTest, NoCopiesIsSaidPlainly) {
  const std::string dir = MakeTempDir("report_no_copies");
  TraceBuilder main(100, "r", kT0);
  main.Exit(kT0 + 10 * kMs);
  main.Write(dir);
  const nlohmann::json report = JsonOf(dir);
  EXPECT_EQ(report["verdict"]["id"], "no_copies");
  EXPECT_EQ(report["verdict"]["text"],
            "no copies recorded: the shim saw no host<->device copy in 1 process (did the job use "
            "CUDA? see the notices)");
  EXPECT_TRUE(report["findings"].empty());
  EXPECT_EQ(report["cuda"], nullptr);
}

TEST(ReportTest, ShmRiskAndSigbusVerdicts) {
  const std::string dir = MakeTempDir("report_shm_risk");
  TraceBuilder main(100, "r", kT0);
  testing::SetHostFacts(&main.header(), 64 * kMiBytes, 64 * kMiBytes);
  main.Shm(kT0 + 1, trace::SHM_CREATE, "/x", 5, 0, 0, 10);
  main.Shm(kT0 + 2, trace::SHM_TRUNCATE, "", 5, 40 * kMiBytes, 0, 10);
  main.Shm(kT0 + 3, trace::SHM_UNLINK, "/x", -1, 0, 0, 10);
  main.Exit(kT0 + 10 * kMs);
  main.Write(dir);
  nlohmann::json report = JsonOf(dir);
  EXPECT_EQ(report["verdict"]["id"], "shm_capacity");
  EXPECT_EQ(report["verdict"]["text"],
            "/dev/shm risk: the job's shared memory peaked at 40.0 MiB, 62.5% of the 64.0 MiB "
            "/dev/shm; use --shm-size=128m");
  EXPECT_EQ(report["shm"]["recommended_shm_size_bytes"], 128 * kMiBytes);
  EXPECT_EQ(report["shm"]["headroom_bytes"], 24 * kMiBytes);
  EXPECT_EQ(report["shm"]["warning"], true);

  TraceBuilder crash(100, "r", kT0);
  testing::SetHostFacts(&crash.header(), 64 * kMiBytes, 64 * kMiBytes);
  crash.Shm(kT0 + 1, trace::SHM_CREATE, "/y", 5, 0, 0, 10);
  crash.Shm(kT0 + 2, trace::SHM_TRUNCATE, "", 5, 96 * kMiBytes, 0, 10);
  crash.Shm(kT0 + 3, trace::SHM_MAP, "", 5, 96 * kMiBytes, 0x1000000, 10);
  crash.Shm(kT0 + 4, trace::SHM_SIGBUS, "", -1, 0, 0x1000000 + 80 * kMiBytes, 0);
  crash.Exit(kT0 + 5, trace::ProcessExit::SIGNAL, 7);
  crash.Write(dir);
  report = JsonOf(dir);
  EXPECT_EQ(report["verdict"]["id"], "shm_sigbus");
  EXPECT_EQ(report["verdict"]["severity"], "error");
  EXPECT_EQ(report["verdict"]["text"],
            "/dev/shm ran out: pid 100 got SIGBUS (Bus error) in a shared-memory mapping; start "
            "the container with --shm-size=256m or more");
}

// A SIGBUS past the end of a segment shrunk by ftruncate, with /dev/shm
// nearly empty: the verdict is the shrink, never --shm-size. The worker
// shrinks it; the main process faults in its own mapping.
TEST(ReportTest, SigbusPastTheEndOfATruncatedSegment) {
  const std::string dir = MakeTempDir("report_shm_past_end");
  TraceBuilder main(100, "r", kT0);
  TraceBuilder worker(101, "r", kT0 + 1, trace::ORIGIN_FORK, 100);
  testing::SetHostFacts(&main.header(), 64 * kMiBytes, 64 * kMiBytes);
  worker.Shm(kT0 + 10, trace::SHM_CREATE, "/torch_7", 5, 0, 0, 10);
  worker.Shm(kT0 + 11, trace::SHM_TRUNCATE, "", 5, 8 * kMiBytes, 0, 10);
  main.Shm(kT0 + 20, trace::SHM_OPEN, "/torch_7", 6, 0, 0, 10);
  main.Shm(kT0 + 21, trace::SHM_MAP, "", 6, 8 * kMiBytes, 0x1000000, 10);
  worker.Shm(kT0 + 30, trace::SHM_TRUNCATE, "", 5, 4096, 0, 10);
  main.Shm(kT0 + 40, trace::SHM_SIGBUS, "", -1, 0, 0x1000000 + 3 * kMiBytes, 0);
  main.Exit(kT0 + 50, trace::ProcessExit::SIGNAL, 7);
  worker.Exit(kT0 + 50);
  main.Write(dir);
  worker.Write(dir);
  nlohmann::json report = JsonOf(dir);
  EXPECT_EQ(report["verdict"]["id"], "shm_past_end");
  EXPECT_EQ(report["verdict"]["severity"], "error");
  EXPECT_EQ(report["verdict"]["text"],
            "pid 100 got SIGBUS (Bus error): an access past the end of the segment /torch_7 (it "
            "was truncated to 4,096 bytes; the access was at offset 3,145,728); /dev/shm space is "
            "not the cause");
  ASSERT_EQ(report["shm"]["sigbus"].size(), 1u);
  EXPECT_EQ(report["shm"]["sigbus"][0]["offset"], 3 * kMiBytes);
  EXPECT_EQ(report["shm"]["sigbus"][0]["segment_size"], 4096);
  EXPECT_EQ(report["shm"]["sigbus"][0]["past_end"], true);

  // Inside the segment's size, the same fault is /dev/shm running out.
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  TraceBuilder full(100, "r", kT0);
  testing::SetHostFacts(&full.header(), 64 * kMiBytes, 64 * kMiBytes);
  full.Shm(kT0 + 1, trace::SHM_CREATE, "/y", 5, 0, 0, 10);
  full.Shm(kT0 + 2, trace::SHM_TRUNCATE, "", 5, 96 * kMiBytes, 0, 10);
  full.Shm(kT0 + 3, trace::SHM_MAP, "", 5, 96 * kMiBytes, 0x1000000, 10);
  full.Shm(kT0 + 4, trace::SHM_SIGBUS, "", -1, 0, 0x1000000 + 80 * kMiBytes, 0);
  full.Exit(kT0 + 5, trace::ProcessExit::SIGNAL, 7);
  full.Write(dir);
  report = JsonOf(dir);
  EXPECT_EQ(report["verdict"]["id"], "shm_sigbus");
  EXPECT_EQ(report["shm"]["sigbus"][0]["past_end"], false);
  EXPECT_EQ(report["shm"]["sigbus"][0]["segment_size"], 96 * kMiBytes);
}

TEST(ReportTest, TopLimitsTheLargestCopies) {
  const std::string dir = WriteCopies("report_top", 1000);
  ReportOptions options;
  options.run_dir = dir;
  options.json = true;
  options.top = 2;
  std::ostringstream out, err;
  ASSERT_EQ(RunReport(options, out, err), 0);
  const auto report = nlohmann::json::parse(out.str());
  ASSERT_EQ(report["largest_pageable_copies"].size(), 2u);
  EXPECT_EQ(report["largest_pageable_copies"][0]["time_offset_ns"], 10 * kMs);
  EXPECT_EQ(report["largest_pageable_copies"][1]["time_offset_ns"], 20 * kMs);
}

TEST(ReportTest, TextReportFitsOneHundredColumnsAndHasNoColorWhenOff) {
  const std::string dir = WriteCopies("report_text", 100);
  ReportOptions options;
  options.run_dir = dir;
  options.color = ColorMode::kNever;
  std::ostringstream out, err;
  ASSERT_EQ(RunReport(options, out, err), 0);
  std::istringstream lines(out.str());
  std::string line;
  while (std::getline(lines, line)) EXPECT_LE(line.size(), 100u) << line;
  EXPECT_EQ(out.str().find('\x1b'), std::string::npos);
  options.color = ColorMode::kAlways;
  std::ostringstream colored;
  ASSERT_EQ(RunReport(options, colored, err), 0);
  EXPECT_NE(colored.str().find("\x1b[1m"), std::string::npos);
}

// --- sampled kernel recording (DeviceRecording packets) ----------------------------

void AddActivity(TraceBuilder& b, uint64_t packet_ns, trace::DeviceActivityKind kind,
                 uint64_t start, uint64_t end) {
  trace::DeviceActivity* d = b.Add(packet_ns).mutable_device();
  d->set_kind(kind);
  d->set_start_ns(start);
  d->set_end_ns(end);
  if (kind == trace::ACT_MEMCPY) {
    d->set_bytes(kMiBytes);
    d->set_direction(trace::H2D);
    d->set_src_kind(trace::PINNED);
    d->set_dst_kind(trace::DEVICE);
  }
}

void AddRecording(TraceBuilder& b, uint64_t time_ns, bool kernels, const std::string& reason,
                  double rate) {
  trace::DeviceRecording* r = b.Add(time_ns).mutable_recording();
  r->set_kernels(kernels);
  r->set_reason(reason);
  r->set_kernel_rate(rate);
}

// A 100 ms process: kernels back to back in [0, 20) ms, recording paused for
// [20, 80) (auto mode, 31,000 kernels/s), a window [80, 90) busy again, then
// paused to the end; a memcpy at [50, 55) inside the pause. With `off`,
// PINSCOPE_CUPTI_KERNELS=off: kernels off from the start, memcpys only.
std::string WriteSampledRun(const std::string& name, bool off) {
  const std::string dir = MakeTempDir(name);
  TraceBuilder main(100, "r", kT0);
  testing::SetHostFacts(&main.header(), 64 * kMiBytes, 64 * kMiBytes);
  main.Notice(kT0, trace::Notice::INFO, "cupti_started", "CUPTI 13");
  main.Copy(kT0 + 2 * kMs, kMs, trace::H2D, trace::PINNED, kMiBytes, 0x30000000);
  if (off) {
    AddRecording(main, kT0, false, "disabled", 0);
    AddActivity(main, kT0 + 60 * kMs, trace::ACT_MEMCPY, kT0 + 2 * kMs, kT0 + 3 * kMs);
    AddActivity(main, kT0 + 60 * kMs, trace::ACT_MEMCPY, kT0 + 50 * kMs, kT0 + 55 * kMs);
  } else {
    for (uint64_t t = 0; t < 20; t += 5) {
      AddActivity(main, kT0 + 21 * kMs, trace::ACT_KERNEL, kT0 + t * kMs, kT0 + (t + 5) * kMs);
    }
    AddRecording(main, kT0 + 20 * kMs, false, "sampling", 31000);
    AddActivity(main, kT0 + 60 * kMs, trace::ACT_MEMCPY, kT0 + 50 * kMs, kT0 + 55 * kMs);
    AddRecording(main, kT0 + 80 * kMs, true, "window", 0);
    AddActivity(main, kT0 + 91 * kMs, trace::ACT_KERNEL, kT0 + 80 * kMs, kT0 + 85 * kMs);
    AddActivity(main, kT0 + 91 * kMs, trace::ACT_KERNEL, kT0 + 85 * kMs, kT0 + 90 * kMs);
    AddRecording(main, kT0 + 90 * kMs, false, "sampling", 32500);
  }
  main.Exit(kT0 + 100 * kMs);
  main.SortByTime();
  main.Write(dir);
  return dir;
}

// The report's text with its line breaks and indentation folded to spaces.
std::string FlatText(const std::string& dir) {
  ReportOptions options;
  options.run_dir = dir;
  options.color = ColorMode::kNever;
  std::ostringstream out, err;
  EXPECT_EQ(RunReport(options, out, err), 0) << err.str();
  std::istringstream lines(out.str());
  std::string line, flat;
  while (std::getline(lines, line)) {
    EXPECT_LE(line.size(), 100u) << line;
    const size_t first = line.find_first_not_of(' ');
    if (first != std::string::npos) flat += " " + line.substr(first);
  }
  return flat;
}

TEST(ReportTest, SampledKernelRecordingCountsOnlyTheRecordedTime) {
  const std::string dir = WriteSampledRun("report_sampled", false);
  const nlohmann::json report = JsonOf(dir);
  ASSERT_EQ(report["device_activity"].size(), 1u);
  const auto& d = report["device_activity"][0];
  EXPECT_EQ(d["pid"], 100);
  EXPECT_EQ(d["kernels"], "sampled");
  EXPECT_EQ(d["blind_ns"], 70 * kMs);  // [20, 80) and [90, 100)
  EXPECT_DOUBLE_EQ(d["covered_fraction"].get<double>(), 0.3);
  EXPECT_DOUBLE_EQ(d["busy_fraction"].get<double>(), 1.0);  // 30 busy ms of 30 recorded
  EXPECT_DOUBLE_EQ(d["active_busy_fraction"].get<double>(), 1.0);
  EXPECT_EQ(d["gap_count"], 0);
  ASSERT_EQ(d["chunk_busy_fraction"].size(), 30u);
  for (int k = 0; k < 30; ++k) {
    const bool blind = (k >= 6 && k <= 23) || k >= 27;  // 10/3 ms chunks
    if (blind) {
      EXPECT_TRUE(d["chunk_busy_fraction"][k].is_null()) << k;
    } else {
      EXPECT_NEAR(d["chunk_busy_fraction"][k].get<double>(), 1.0, 1e-9) << k;
    }
  }
  EXPECT_EQ(d["kernel_recording"]["mode"], "auto");
  EXPECT_EQ(d["kernel_recording"]["stops"], 2);
  EXPECT_EQ(d["kernel_recording"]["windows"], 1);
  EXPECT_DOUBLE_EQ(d["kernel_recording"]["peak_kernel_rate"].get<double>(), 32500.0);
  EXPECT_EQ(report["verdict"]["id"], "not_input_bound");
  EXPECT_EQ(report["verdict"]["text"],
            "not input-bound: the GPU was busy 100.0% of the time from its first to its last "
            "activity (device activity, 7 records; kernels recorded in sampled windows, 30.0% of "
            "the time); the input pipeline keeps up");

  const std::string text = FlatText(dir);
  EXPECT_NE(text.find("pid 100 GPU 0: busy 100.0% of the recorded time, 100.0% from first to last "
                      "activity; per chunk [######??????????????????###???] (_ idle .. # busy, ? "
                      "not recorded)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("Kernels recorded in sampled windows: 30.0% of the time (auto mode: up to "
                      "32,500 kernels/s, 1 window); the 70.0 ms not recorded count as neither "
                      "busy nor idle."),
            std::string::npos)
      << text;
}

TEST(ReportTest, KernelsOffGivesNoBusyFigureAndNoDeviceVerdict) {
  const std::string dir = WriteSampledRun("report_kernels_off", true);
  const nlohmann::json report = JsonOf(dir);
  ASSERT_EQ(report["device_activity"].size(), 1u);
  const auto& d = report["device_activity"][0];
  EXPECT_EQ(d["kernels"], "none");
  EXPECT_EQ(d["blind_ns"], 100 * kMs);
  EXPECT_DOUBLE_EQ(d["covered_fraction"].get<double>(), 0.0);
  EXPECT_TRUE(d["busy_fraction"].is_null());
  EXPECT_TRUE(d["active_busy_fraction"].is_null());
  for (const auto& f : d["chunk_busy_fraction"]) EXPECT_TRUE(f.is_null());
  EXPECT_EQ(d["kernel_recording"]["mode"], "off");
  // The verdict comes from the host side, not from a "0% busy" GPU.
  EXPECT_EQ(report["verdict"]["id"], "not_input_bound");
  EXPECT_EQ(report["verdict"]["text"].get<std::string>().rfind(
                "not input-bound: host<->device copies blocked", 0),
            0u)
      << report["verdict"]["text"];
  const std::string text = FlatText(dir);
  EXPECT_NE(text.find("pid 100 GPU 0: kernels were not recorded (PINSCOPE_CUPTI_KERNELS=off): no "
                      "busy figure; 2 memcpy/memset records only."),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("busy 0.0%"), std::string::npos) << text;
}

TEST(ReportTest, BadCalibrationPathIsAnError) {
  ReportOptions options;
  options.run_dir = WriteCopies("report_bad_calibration", 100);
  options.calibration_path = "/nonexistent/cal.json";
  std::ostringstream out, err;
  EXPECT_EQ(RunReport(options, out, err), 2);
  EXPECT_EQ(err.str(), "pinscope report: calibration /nonexistent/cal.json: cannot open\n");
}

// The Device activity sentence on device-record windows: the time before
// CUPTI was loaded is not recorded (a 2 s window of a 24.5 s run whose first
// CUDA call came 17.4 s in is 8.4% of it, not 79%), and a job whose loop
// never came (PINSCOPE_CUPTI_START=loop) is told it has no device records.
TEST(ReportTest, DeviceWindowsSayWhatTheRecordsCover) {
  device::DeviceWindows w;
  w.windows = 1;
  w.span_ns = 24490 * kMs;
  w.before_first_ns = 17360 * kMs;
  w.detached_ns = 5070 * kMs;
  w.host_calls_between = 1885;
  EXPECT_EQ(DeviceWindowsSentence(9857, w).substr(0, 186),
            "pid 9857: device records taken in 1 window, 8.4% of the process's life; CUPTI was "
            "loaded at the first CUDA call, 17.36 s into it, and detached for 5.07 s (its cost on "
            "every kernel launch");
  device::DeviceWindows never;
  never.span_ns = 3000 * kMs;
  never.before_first_ns = 1000 * kMs;
  never.detached_ns = 2000 * kMs;
  never.host_calls_between = 5;
  const std::string text = DeviceWindowsSentence(1, never);
  EXPECT_EQ(text.find("pid 1: no device records: CUPTI waited for the loop"), 0u) << text;
  EXPECT_NE(text.find("5 host copy and sync calls made between windows have no device record"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace pinscope
