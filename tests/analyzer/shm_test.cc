// Shared-memory accounting tests with exact numbers: segment lifetimes across
// processes (create/truncate to the later of unlink and last unmap or exit),
// the job-wide peak and each process's share of it, leaked, memfd and
// driver segments, the --shm-size advice, and SIGBUS diagnoses.
#include <gtest/gtest.h>

#include "analyzer/run_loader.h"
#include "analyzer/shm_analysis.h"
#include "trace_builder.h"

namespace pinscope {
namespace {

using testing::kMiBytes;
using testing::kMs;
using testing::MakeTempDir;
using testing::TraceBuilder;

constexpr uint64_t kT0 = 1000ull * 1000 * kMs;

void Replay(const std::string& dir, Analysis* analysis) {
  RunListing listing;
  ASSERT_TRUE(ScanRun(dir, &listing).ok());
  ReplayEngine engine(std::move(listing));
  engine.AddAnalysis(analysis);
  engine.Run();
}

// Segments (MiB, alive interval in ms):
//   A 10 by worker  [11, 50)   unlinked at 13, main unmaps at 50
//   B 20 by worker  [31, 100)  main maps it and exits at 100 still mapped
//   C 30 by worker  [46, 100)  never unlinked: held to the end of the run
//   F 40 by main    [55.5, 57)
//   D 50 memfd and E 1 driver segment: not /dev/shm job data
// Peak: B + C + F = 90 MiB at 55.5 ms (worker 50, main 40).
std::string WriteScenario() {
  const std::string dir = MakeTempDir("shm_peak");
  TraceBuilder main(100, "r", kT0);
  testing::SetHostFacts(&main.header(), 128 * kMiBytes, 120 * kMiBytes);
  TraceBuilder worker(101, "r", kT0 + 1 * kMs, trace::ORIGIN_FORK, 100);
  const auto ms = [](double v) { return kT0 + static_cast<uint64_t>(v * kMs); };
  worker.Shm(ms(10), trace::SHM_CREATE, "/A", 10, 0, 0, 1);
  worker.Shm(ms(11), trace::SHM_TRUNCATE, "", 10, 10 * kMiBytes, 0, 1);
  worker.Shm(ms(12), trace::SHM_MAP, "", 10, 10 * kMiBytes, 0xA0000000, 1);
  worker.Shm(ms(13), trace::SHM_UNLINK, "/A", -1, 0, 0, 1);
  worker.Shm(ms(20), trace::SHM_UNMAP, "", -1, 10 * kMiBytes, 0xA0000000, 0);
  worker.Shm(ms(30), trace::SHM_CREATE, "/B", 11, 0, 0, 2);
  worker.Shm(ms(31), trace::SHM_TRUNCATE, "", 11, 20 * kMiBytes, 0, 2);
  worker.Shm(ms(32), trace::SHM_MAP, "", 11, 20 * kMiBytes, 0xB0000000, 2);
  worker.Shm(ms(33), trace::SHM_UNLINK, "/B", -1, 0, 0, 2);
  worker.Shm(ms(45), trace::SHM_CREATE, "/C", 12, 0, 0, 3);
  worker.Shm(ms(46), trace::SHM_TRUNCATE, "", 12, 30 * kMiBytes, 0, 3);
  worker.Shm(ms(47), trace::MEMFD_CREATE, "pool", 13, 0, 0, 4);
  worker.Shm(ms(48), trace::SHM_TRUNCATE, "", 13, 50 * kMiBytes, 0, 4);
  worker.Exit(ms(60));
  main.Shm(ms(5), trace::SHM_OPEN, "/cuda_injection_path_shm", 3, 0, 0, 9)
      .mutable_shm()
      ->set_driver_internal(true);
  main.Shm(ms(6), trace::SHM_MAP, "", 3, kMiBytes, 0x90000000, 9)
      .mutable_shm()
      ->set_driver_internal(true);
  main.Shm(ms(15), trace::SHM_MAP, "", 40, 10 * kMiBytes, 0xC0000000, 1);
  main.Shm(ms(40), trace::SHM_MAP, "", 41, 20 * kMiBytes, 0xD0000000, 2);
  main.Shm(ms(50), trace::SHM_UNMAP, "", -1, 10 * kMiBytes, 0xC0000000, 0);
  main.Shm(ms(55), trace::SHM_CREATE, "/F", 42, 0, 0, 5);
  main.Shm(ms(55.5), trace::SHM_TRUNCATE, "", 42, 40 * kMiBytes, 0, 5);
  main.Shm(ms(56), trace::SHM_MAP, "", 42, 40 * kMiBytes, 0xE0000000, 5);
  main.Shm(ms(56.5), trace::SHM_UNLINK, "/F", -1, 0, 0, 5);
  main.Shm(ms(57), trace::SHM_UNMAP, "", -1, 40 * kMiBytes, 0xE0000000, 0);
  main.Exit(ms(100));
  main.Write(dir);
  worker.Write(dir);
  return dir;
}

TEST(ShmTest, PeakSharesAndAdvice) {
  ShmAnalysis shm;
  Replay(WriteScenario(), &shm);
  EXPECT_EQ(shm.capacity_bytes(), 128 * kMiBytes);
  EXPECT_EQ(shm.free_bytes_at_start(), 120 * kMiBytes);
  EXPECT_EQ(shm.segments(), 4u);
  EXPECT_EQ(shm.bytes_created(), 100 * kMiBytes);
  EXPECT_EQ(shm.peak_bytes(), 90 * kMiBytes);
  EXPECT_EQ(shm.peak_time_ns(), kT0 + 55 * kMs + kMs / 2);
  EXPECT_EQ(shm.peak_segments(), 3u);
  EXPECT_EQ(shm.leaked_segments(), 1u);
  EXPECT_EQ(shm.leaked_bytes(), 30 * kMiBytes);
  EXPECT_EQ(shm.memfd_segments(), 1u);
  EXPECT_EQ(shm.memfd_bytes(), 50 * kMiBytes);
  EXPECT_EQ(shm.driver_segments(), 1u);
  EXPECT_TRUE(shm.warning());                           // 90 MiB > 64 MiB
  EXPECT_EQ(shm.RecommendedShmSize(), 256 * kMiBytes);  // 180 MiB -> 256 MiB
  ASSERT_EQ(shm.shares().size(), 2u);
  const ShmShare& worker = shm.shares()[0];
  EXPECT_EQ(worker.pid, 101u);
  EXPECT_EQ(worker.segments_created, 3u);
  EXPECT_EQ(worker.bytes_created, 60 * kMiBytes);
  EXPECT_EQ(worker.bytes_at_peak, 50 * kMiBytes);
  EXPECT_EQ(worker.maps, 2u);
  EXPECT_EQ(worker.bytes_mapped, 30 * kMiBytes);
  const ShmShare& main = shm.shares()[1];
  EXPECT_EQ(main.pid, 100u);
  EXPECT_EQ(main.segments_created, 1u);
  EXPECT_EQ(main.bytes_created, 40 * kMiBytes);
  EXPECT_EQ(main.bytes_at_peak, 40 * kMiBytes);
  EXPECT_EQ(main.maps, 3u);
  EXPECT_EQ(main.bytes_mapped, 70 * kMiBytes);
  EXPECT_TRUE(shm.sigbus().empty());
}

TEST(ShmTest, BackToBackSegmentsDoNotOverlap) {
  const std::string dir = MakeTempDir("shm_back_to_back");
  TraceBuilder main(100, "r", kT0);
  testing::SetHostFacts(&main.header(), 32 * kMiBytes, 32 * kMiBytes);
  for (uint64_t i = 0; i < 4; ++i) {
    const uint64_t t = kT0 + i * 10 * kMs;
    main.Shm(t, trace::SHM_CREATE, "/s" + std::to_string(i), 5, 0, 0, 10 + i);
    main.Shm(t + 1, trace::SHM_TRUNCATE, "", 5, 16 * kMiBytes, 0, 10 + i);
    main.Shm(t + 2, trace::SHM_UNLINK, "/s" + std::to_string(i), -1, 0, 0, 10 + i);
    main.Shm(t + 3, trace::SHM_CLOSE, "", 5, 0, 0, 0);
  }
  main.Exit(kT0 + 100 * kMs);
  main.Write(dir);
  ShmAnalysis shm;
  Replay(dir, &shm);
  EXPECT_EQ(shm.segments(), 4u);
  EXPECT_EQ(shm.peak_bytes(), 16 * kMiBytes);
  EXPECT_EQ(shm.peak_segments(), 1u);
  EXPECT_FALSE(shm.warning());  // 16 of 32 MiB: exactly half is not past half
  EXPECT_EQ(shm.RecommendedShmSize(), 64 * kMiBytes);
}

TEST(ShmTest, RecommendedSizeRounding) {
  const std::string dir = MakeTempDir("shm_rounding");
  TraceBuilder main(100, "r", kT0);
  main.Shm(kT0 + 1, trace::SHM_CREATE, "/x", 5, 0, 0, 10);
  main.Shm(kT0 + 2, trace::SHM_TRUNCATE, "", 5, 33 * kMiBytes, 0, 10);
  main.Exit(kT0 + 10);
  main.Write(dir);
  ShmAnalysis shm;
  Replay(dir, &shm);
  EXPECT_EQ(shm.peak_bytes(), 33 * kMiBytes);
  EXPECT_EQ(shm.RecommendedShmSize(), 128 * kMiBytes);
  EXPECT_EQ(shm.capacity_bytes(), 0u);
  EXPECT_FALSE(shm.warning());  // capacity unknown
}

TEST(ShmTest, SigbusWithTheShimsDiagnosis) {
  const std::string dir = MakeTempDir("shm_sigbus");
  TraceBuilder main(100, "r", kT0);
  testing::SetHostFacts(&main.header(), 64 * kMiBytes, 64 * kMiBytes);
  main.Shm(kT0 + 1, trace::SHM_CREATE, "/torch_100_0", 5, 0, 0, 10);
  main.Shm(kT0 + 2, trace::SHM_TRUNCATE, "", 5, 96 * kMiBytes, 0, 10);
  main.Shm(kT0 + 3, trace::SHM_MAP, "", 5, 96 * kMiBytes, 0x50000000, 10);
  main.Shm(kT0 + 4, trace::SHM_SIGBUS, "", -1, 0, 0x50000000 + 70 * kMiBytes, 0);
  main.Notice(kT0 + 5, trace::Notice::ERROR, "sigbus_shm",
              "/dev/shm is full: 64 MiB capacity, 96 MiB in use by 1 segments of this job; start "
              "the container with --shm-size of at least 256m");
  main.Exit(kT0 + 6, trace::ProcessExit::SIGNAL, 7);
  main.Write(dir);
  ShmAnalysis shm;
  Replay(dir, &shm);
  ASSERT_EQ(shm.sigbus().size(), 1u);
  EXPECT_EQ(shm.sigbus()[0].pid, 100u);
  EXPECT_EQ(shm.sigbus()[0].segment, "/torch_100_0");
  EXPECT_EQ(shm.sigbus()[0].address, 0x50000000 + 70 * kMiBytes);
  EXPECT_NE(shm.sigbus()[0].diagnosis.find("/dev/shm is full"), std::string::npos);
  EXPECT_EQ(shm.leaked_segments(), 1u);
}

}  // namespace
}  // namespace pinscope
