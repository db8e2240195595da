// `pinscope export --perfetto`: the scenario's export read back through the
// schema subset must equal the expected canonical text (the same text
// perfetto_schema_check.py gets with Perfetto's own schema), obey the rules
// trace_processor applies, and survive damaged runs.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "analyzer/export/export_command.h"
#include "analyzer/export/perfetto_export.h"
#include "perfetto_dump.h"
#include "scenarios.h"
#include "trace_builder.h"

namespace pinscope {
namespace {

namespace fs = std::filesystem;
using testing::DumpPerfetto;
using testing::kMs;
using testing::kScenarioT0;
using testing::MakeTempDir;
using testing::ReadFile;
using testing::TraceBuilder;

const std::string kExpectedDir = PINSCOPE_EXPORT_EXPECTED_DIR;
const std::string kDataDir = PINSCOPE_TEST_DATA_DIR;

// Exports `run_dir` to <run_dir>.pftrace; returns the exit code.
int Export(const std::string& run_dir, std::string* bytes, std::string* out_text = nullptr,
           std::string* err_text = nullptr) {
  ExportOptions options;
  options.run_dir = run_dir;
  options.perfetto_path = run_dir + ".pftrace";
  std::ostringstream out, err;
  const int code = RunExport(options, out, err);
  if (bytes != nullptr) *bytes = ReadFile(options.perfetto_path);
  if (out_text != nullptr) *out_text = out.str();
  if (err_text != nullptr) *err_text = err.str();
  return code;
}

TEST(PerfettoExportTest, ScenarioMatchesExpectedText) {
  const std::string dir = MakeTempDir("export_scenario");
  testing::WriteExportScenario(dir);
  std::string bytes, out, err;
  ASSERT_EQ(Export(dir, &bytes, &out, &err), 0) << err;
  EXPECT_EQ(out, "wrote " + dir +
                     ".pftrace: 2 processes, 3 threads, 3 copies, 1 syncs, 1 worker batches, 0 "
                     "DataLoader spans, 2 device activities, 0 flows, 3 counter tracks\nopen it at "
                     "https://ui.perfetto.dev (Open trace file) or "
                     "with trace_processor\n");
  const testing::PerfettoDump dump = DumpPerfetto(bytes);
  EXPECT_TRUE(dump.errors.empty()) << ::testing::PrintToString(dump.errors);
  EXPECT_EQ(dump.slices,
            7u);  // 3 copies, 1 sync, 1 worker batch (from /dev/shm), 2 device activities
  // shm 0, 1 MiB, 0; pinned 0, 73.5 MiB, 0; GPU busy 0 and 6 changes per ms.
  EXPECT_EQ(dump.counter_values, 13u);
  const std::string expected_path = kExpectedDir + "/scenario_perfetto.txt";
  const char* update = std::getenv("PINSCOPE_UPDATE_GOLDEN");
  if (update != nullptr && std::string(update) == "1") {
    testing::WriteFile(expected_path, dump.text);
    GTEST_SKIP() << "updated " << expected_path;
  }
  EXPECT_EQ(ReadFile(expected_path), dump.text) << "export differs from " << expected_path;
}

TEST(PerfettoExportTest, KeyValuesOfTheScenario) {
  // The expected file is reviewed once; these are the numbers that matter.
  const std::string dir = MakeTempDir("export_scenario_values");
  testing::WriteExportScenario(dir);
  std::string bytes;
  ASSERT_EQ(Export(dir, &bytes), 0);
  const std::string text = DumpPerfetto(bytes).text;
  const auto has = [&](const std::string& line) {
    return text.find(line + "\n") != std::string::npos;
  };
  const std::string t0 = std::to_string(kScenarioT0);
  EXPECT_TRUE(
      has("  process pid=100 name=\"main process\" cmdline=[\"python\",\"train.py\"] "
          "labels=[\"root\"] start=" +
          t0))
      << text;
  EXPECT_TRUE(has("  thread pid=100 tid=102 name=\"pin_memory\" parent=process 100")) << text;
  EXPECT_TRUE(has("  thread pid=101 tid=101 name=\"main thread\" parent=process 101")) << text;
  EXPECT_TRUE(has("  thread 100/100 ts=" + std::to_string(kScenarioT0 + 10 * kMs) +
                  " dur=12845000 \"H2D pageable 73.5 MiB\" categories=[\"copy\"]"))
      << text;
  EXPECT_TRUE(has("    GB/s=6")) << text;
  EXPECT_TRUE(has("    stack=\"train.py:42 train_step; train.py:80 main\"")) << text;
  EXPECT_TRUE(has("    buffer=\"posix_memalign 73.5 MiB\"")) << text;
  EXPECT_TRUE(has("    pin=\"registered by pinscope\"")) << text;
  EXPECT_TRUE(has("  \"GPU 0 stream 7\" ts=" + std::to_string(kScenarioT0 + 25 * kMs) +
                  " dur=2000000 \"volta_sgemm_128x64_nn\" categories=[\"device\"]"))
      << text;
  EXPECT_TRUE(has("  \"/dev/shm bytes in use (job)\" ts=" +
                  std::to_string(kScenarioT0 + 5 * kMs + 1000) + " value=1048576"))
      << text;
  EXPECT_TRUE(has("  \"/dev/shm bytes in use (job)\" ts=" + std::to_string(kScenarioT0 + 60 * kMs) +
                  " value=0"))
      << text;
  EXPECT_TRUE(has("  \"pinned bytes (pinscope)\" ts=" + std::to_string(kScenarioT0 + 39 * kMs) +
                  " value=77070336"))
      << text;
}

TEST(PerfettoExportTest, GoldenRunsExportCleanly) {
  for (const char* name : {"dataloader", "no_cuda"}) {
    const std::string copy = MakeTempDir(std::string("export_golden_") + name);
    fs::copy(kDataDir + "/runs/" + name, copy, fs::copy_options::recursive);
    std::string bytes;
    EXPECT_EQ(Export(copy, &bytes), 0) << name;
    const testing::PerfettoDump dump = DumpPerfetto(bytes);
    EXPECT_TRUE(dump.errors.empty()) << name << ": " << ::testing::PrintToString(dump.errors);
    EXPECT_GT(dump.packets, 0u) << name;
  }
}

TEST(PerfettoExportTest, OverlappingCallsOfOneThreadAreClamped) {
  // A damaged or hand-made file: the second copy starts inside the first.
  const std::string dir = MakeTempDir("export_overlap");
  TraceBuilder main(100, "run-a", kScenarioT0);
  main.Copy(kScenarioT0 + 10 * kMs, 5 * kMs, trace::H2D, trace::PAGEABLE, 1 << 20, 0);
  main.Copy(kScenarioT0 + 12 * kMs, 5 * kMs, trace::H2D, trace::PAGEABLE, 1 << 20, 0);
  main.Write(dir);
  std::string bytes;
  ASSERT_EQ(Export(dir, &bytes), 0);
  const testing::PerfettoDump dump = DumpPerfetto(bytes);
  EXPECT_TRUE(dump.errors.empty()) << ::testing::PrintToString(dump.errors);
  // The second slice starts where the first ended and keeps its end.
  EXPECT_NE(dump.text.find("ts=" + std::to_string(kScenarioT0 + 15 * kMs) + " dur=2000000 "),
            std::string::npos)
      << dump.text;
}

TEST(PerfettoExportTest, UnwritableOutputAndMissingRun) {
  const std::string dir = MakeTempDir("export_unwritable");
  TraceBuilder(100, "run-a", kScenarioT0).Write(dir);
  ExportOptions options;
  options.run_dir = dir;
  options.perfetto_path = "/nonexistent/dir/out.pftrace";
  std::ostringstream out, err;
  EXPECT_EQ(RunExport(options, out, err), 2);
  EXPECT_EQ(err.str(),
            "pinscope export: cannot write /nonexistent/dir/out.pftrace: No such file or "
            "directory\n");
  std::ostringstream err2;
  options.run_dir = "/nonexistent/run";
  options.perfetto_path = dir + "/x.pftrace";
  EXPECT_EQ(RunExport(options, out, err2), 2);
  EXPECT_EQ(err2.str(),
            "pinscope export: run folder /nonexistent/run does not exist or is not a folder\n");
  EXPECT_FALSE(fs::exists(dir + "/x.pftrace"));
}

TEST(PerfettoExportTest, KernelRecordingWindowsAreACounter) {
  // Sampled kernel recording: CUPTI starts at +1 ms, kernels off at +20 ms,
  // back on at +80 ms. A process without DeviceRecording packets has no
  // such track (the scenario above).
  const std::string dir = MakeTempDir("export_recording");
  const uint64_t t0 = kScenarioT0;
  TraceBuilder main(100, "run-recording", t0);
  main.Notice(t0 + kMs, trace::Notice::INFO, "cupti_started", "CUPTI");
  const auto recording = [&](uint64_t t, bool kernels, const char* reason) {
    trace::DeviceRecording* r = main.Add(t).mutable_recording();
    r->set_kernels(kernels);
    r->set_reason(reason);
  };
  recording(t0 + 20 * kMs, false, "sampling");
  recording(t0 + 80 * kMs, true, "window");
  main.Exit(t0 + 100 * kMs);
  main.Write(dir);
  std::string bytes, out;
  ASSERT_EQ(Export(dir, &bytes, &out), 0);
  const testing::PerfettoDump dump = DumpPerfetto(bytes);
  EXPECT_TRUE(dump.errors.empty()) << ::testing::PrintToString(dump.errors);
  const auto has = [&](const std::string& line) {
    return dump.text.find(line + "\n") != std::string::npos;
  };
  EXPECT_TRUE(
      has("  counter name=\"kernels recorded (pinscope)\" unit=UNIT_UNSPECIFIED "
          "parent=process 100"))
      << dump.text;
  const std::string track = "  \"kernels recorded (pinscope)\" ts=";
  EXPECT_TRUE(has(track + std::to_string(t0) + " value=0")) << dump.text;
  EXPECT_TRUE(has(track + std::to_string(t0 + kMs) + " value=1")) << dump.text;
  EXPECT_TRUE(has(track + std::to_string(t0 + 20 * kMs) + " value=0")) << dump.text;
  EXPECT_TRUE(has(track + std::to_string(t0 + 80 * kMs) + " value=1")) << dump.text;
  EXPECT_EQ(dump.counter_values, 4u);
}

// A cudaHostAlloc the shim timed (HostAlloc.duration_ns) is a slice on its
// thread, the time the driver took to pin the block; one without a
// duration (an older shim) is only the program's pinned-bytes counter.
TEST(PerfettoExportTest, TimedHostAllocsAreSlices) {
  const std::string dir = MakeTempDir("export_host_alloc");
  const uint64_t t0 = kScenarioT0;
  TraceBuilder main(100, "run-host-alloc", t0);
  main.Alloc(t0 + 10 * kMs, trace::CUDA_HOST_ALLOC, 0x7f0000000000ull, 128ull << 20, 150)
      .mutable_alloc()
      ->set_duration_ns(40 * kMs);
  main.Alloc(t0 + 60 * kMs, trace::CUDA_HOST_ALLOC, 0x7f1000000000ull, 64ull << 20, 150);
  main.Exit(t0 + 100 * kMs);
  main.Write(dir);
  std::string bytes;
  ASSERT_EQ(Export(dir, &bytes), 0);
  const testing::PerfettoDump dump = DumpPerfetto(bytes);
  EXPECT_TRUE(dump.errors.empty()) << ::testing::PrintToString(dump.errors);
  EXPECT_NE(dump.text.find("ts=" + std::to_string(t0 + 10 * kMs) + " dur=40000000 "),
            std::string::npos)
      << dump.text;
  EXPECT_NE(dump.text.find("\"cudaHostAlloc 128.0 MiB\""), std::string::npos) << dump.text;
  EXPECT_EQ(dump.text.find("cudaHostAlloc 64.0 MiB"), std::string::npos) << dump.text;
}

TEST(PerfettoExportTest, TrackUuidsNeverCollide) {
  EXPECT_NE(PerfettoExport::ProcessUuid(0), PerfettoExport::ProcessUuid(1));
  EXPECT_NE(PerfettoExport::ThreadUuid(0, 0xFFFFFFFFu), PerfettoExport::ProcessUuid(1));
  EXPECT_EQ(PerfettoExport::ThreadUuid(3, 7) & ~0xFFFFFFFFull, PerfettoExport::ProcessUuid(3));
}

}  // namespace
}  // namespace pinscope
