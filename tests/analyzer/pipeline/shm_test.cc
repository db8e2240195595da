// Shared-memory accounting tests with exact numbers: segment lifetimes across
// processes (create/truncate to the later of unlink and last unmap or exit),
// the job-wide peak and each process's share of it, leaked, memfd and
// driver segments, the --shm-size advice, and SIGBUS diagnoses; and the
// streaming peak against the sweep over every segment's life it replaced, on
// random runs and the H200 runs, with the engine forgetting closed segments
// early and late; late maps of closed segments; the state kept stays bounded.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>
#include <tuple>
#include <unordered_map>

#include "analyzer/analyses/shm_analysis.h"
#include "analyzer/read/run_loader.h"
#include "trace_builder.h"

namespace pinscope {
namespace {

using testing::kMiBytes;
using testing::kMs;
using testing::MakeTempDir;
using testing::TraceBuilder;

constexpr uint64_t kT0 = 1000ull * 1000 * kMs;

void Replay(const std::string& dir, Analysis* analysis, ReplayOptions options = ReplayOptions()) {
  RunListing listing;
  ASSERT_TRUE(ScanRun(dir, &listing).ok());
  ReplayEngine engine(std::move(listing), options);
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
  // The CUDA driver probes for a segment that is not there (every CUDA
  // job does): not one of the job's failed calls. The job's own is.
  auto& probe = *main.Shm(ms(4), trace::SHM_OPEN, "/cuda_injection_path_shm", -1, 0, 0, 0)
                     .mutable_shm();
  probe.set_driver_internal(true);
  probe.set_error(2);
  main.Shm(ms(4.5), trace::SHM_OPEN, "/gone", -1, 0, 0, 0).mutable_shm()->set_error(2);
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
  EXPECT_EQ(shm.failed_calls(), 1u);  // "/gone"; not the driver's probe
  EXPECT_TRUE(shm.warning());         // 90 MiB > 64 MiB
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

// A closed segment mapped again through an fd the trace never saw opened
// (received over a socket): while the engine still knows the segment, the
// map joins it and its life runs on through the gap; once forgotten, the map
// starts a new segment of an untraced creator.
std::string WriteLateMap() {
  const std::string dir = MakeTempDir("shm_late_map");
  TraceBuilder main(100, "r", kT0);
  TraceBuilder worker(101, "r", kT0 + kMs, trace::ORIGIN_FORK, 100);
  const auto ms = [](uint64_t v) { return kT0 + v * kMs; };
  // A 10 MiB [10, 60) with a gap [14, 40) where only an untracked fd holds it.
  worker.Shm(ms(10), trace::SHM_CREATE, "/A", 7, 0, 0, 1);
  worker.Shm(ms(11), trace::SHM_TRUNCATE, "", 7, 10 * kMiBytes, 0, 1);
  worker.Shm(ms(12), trace::SHM_UNLINK, "/A", -1, 0, 0, 1);
  worker.Shm(ms(13), trace::SHM_CLOSE, "", 7, 0, 0, 0);
  // B 4 MiB [20, 22) and C 8 MiB [30, 35): closed before A's late map.
  worker.Shm(ms(20), trace::SHM_CREATE, "/B", 8, 4 * kMiBytes, 0, 2);
  worker.Shm(ms(21), trace::SHM_TRUNCATE, "", 8, 4 * kMiBytes, 0, 2);
  worker.Shm(ms(22), trace::SHM_UNLINK, "/B", 8, 0, 0, 2);
  worker.Shm(ms(22), trace::SHM_CLOSE, "", 8, 0, 0, 0);
  worker.Shm(ms(30), trace::SHM_CREATE, "/C", 9, 0, 0, 3);
  worker.Shm(ms(30), trace::SHM_TRUNCATE, "", 9, 8 * kMiBytes, 0, 3);
  worker.Shm(ms(34), trace::SHM_UNLINK, "/C", 9, 0, 0, 3);
  worker.Shm(ms(35), trace::SHM_CLOSE, "", 9, 0, 0, 0);
  worker.Exit(ms(36));
  main.Shm(ms(40), trace::SHM_MAP, "", 30, 12 * kMiBytes, 0x9000000, 1);  // A, now 12 MiB
  main.Shm(ms(60), trace::SHM_UNMAP, "", -1, 12 * kMiBytes, 0x9000000, 0);
  main.Exit(ms(100));
  main.Write(dir);
  worker.Write(dir);
  return dir;
}

TEST(ShmTest, LateMapJoinsAClosedSegmentTheEngineStillKnows) {
  ShmAnalysis shm;
  Replay(WriteLateMap(), &shm);
  // A (12 MiB, its largest size, over [11, 60)) and C overlap in [30, 35).
  EXPECT_EQ(shm.segments(), 3u);
  EXPECT_EQ(shm.bytes_created(), 24 * kMiBytes);
  EXPECT_EQ(shm.peak_bytes(), 20 * kMiBytes);
  EXPECT_EQ(shm.peak_time_ns(), kT0 + 30 * kMs);
  EXPECT_EQ(shm.peak_segments(), 2u);
  EXPECT_EQ(shm.leaked_segments(), 0u);
  ASSERT_EQ(shm.shares().size(), 2u);
  EXPECT_EQ(shm.shares()[0].pid, 101u);
  EXPECT_EQ(shm.shares()[0].segments_created, 3u);
  EXPECT_EQ(shm.shares()[0].bytes_at_peak, 20 * kMiBytes);
  EXPECT_EQ(shm.shares()[1].pid, 100u);  // a mapper only
  EXPECT_EQ(shm.shares()[1].segments_created, 0u);
  EXPECT_EQ(shm.shares()[1].maps, 1u);
}

TEST(ShmTest, LateMapOfAForgottenSegmentStartsANewOne) {
  ShmAnalysis shm;
  ReplayOptions options;
  options.closed_segments_kept = 2;  // A is forgotten when C closes
  Replay(WriteLateMap(), &shm, options);
  // A [11, 13) 10 MiB, B, C, and A' (untraced creator, never unlinked as
  // far as the trace shows: held to the end) 12 MiB [40, 100).
  EXPECT_EQ(shm.segments(), 4u);
  EXPECT_EQ(shm.leaked_segments(), 1u);
  EXPECT_EQ(shm.leaked_bytes(), 12 * kMiBytes);
  EXPECT_EQ(shm.bytes_created(), 34 * kMiBytes);
  EXPECT_EQ(shm.peak_bytes(), 12 * kMiBytes);
  EXPECT_EQ(shm.peak_time_ns(), kT0 + 40 * kMs);
  EXPECT_EQ(shm.peak_segments(), 1u);
  ASSERT_EQ(shm.shares().size(), 3u);
  EXPECT_EQ(shm.shares()[0].pid, 101u);
  EXPECT_EQ(shm.shares()[0].bytes_at_peak, 0u);
  EXPECT_EQ(shm.shares()[1].pid, 100u);
  EXPECT_EQ(shm.shares()[2].process_index, -1);
  EXPECT_EQ(shm.shares()[2].segments_created, 1u);
  EXPECT_EQ(shm.shares()[2].bytes_at_peak, 12 * kMiBytes);
}

// What the analysis keeps stays bounded by the engine's closed-segment cache
// however many segments the run makes, late maps included.
TEST(ShmTest, KeepsOnlyTheSegmentsTheEngineKnows) {
  const std::string dir = MakeTempDir("shm_bounded");
  TraceBuilder main(100, "r", kT0);
  TraceBuilder worker(101, "r", kT0 + 1, trace::ORIGIN_FORK, 100);
  // Batch i: made by the worker over [t+1, t+5], mapped by the main process
  // through a received fd at t+6 after the worker closed it, unmapped at
  // t+8; the next batch is made while the main process still holds it.
  for (uint64_t i = 0; i < 1000; ++i) {
    const uint64_t t = kT0 + 10 + i * 5;
    const uint64_t inode = 100 + i;
    worker.Shm(t, trace::SHM_CREATE, "/b" + std::to_string(i), 7, 0, 0, inode);
    worker.Shm(t + 1, trace::SHM_TRUNCATE, "", 7, kMiBytes, 0, inode);
    worker.Shm(t + 2, trace::SHM_MAP, "", 7, kMiBytes, 0x10000000, inode);
    worker.Shm(t + 3, trace::SHM_UNLINK, "/b" + std::to_string(i), -1, 0, 0, inode);
    worker.Shm(t + 4, trace::SHM_UNMAP, "", -1, kMiBytes, 0x10000000, 0);
    worker.Shm(t + 5, trace::SHM_CLOSE, "", 7, 0, 0, 0);
    main.Shm(t + 6, trace::SHM_MAP, "", 30, kMiBytes, 0x20000000 + i * 0x100000, inode);
    main.Shm(t + 8, trace::SHM_UNMAP, "", -1, kMiBytes, 0x20000000 + i * 0x100000, 0);
  }
  main.Write(dir);
  worker.Write(dir);
  struct Probe : Analysis {
    const ShmAnalysis* shm = nullptr;
    size_t most_open = 0, most_pieces = 0;
    void OnShm(const ShmContext&) override {
      most_open = std::max(most_open, shm->open_segments());
      most_pieces = std::max(most_pieces, shm->timeline_pieces());
    }
  };
  ShmAnalysis shm;
  Probe probe;
  probe.shm = &shm;
  RunListing listing;
  ASSERT_TRUE(ScanRun(dir, &listing).ok());
  ReplayOptions options;
  options.closed_segments_kept = 4;
  ReplayEngine engine(std::move(listing), options);
  engine.AddAnalysis(&shm);
  engine.AddAnalysis(&probe);
  engine.Run();
  EXPECT_EQ(shm.segments(), 1000u);
  EXPECT_EQ(shm.peak_bytes(), 2 * kMiBytes);  // batch i+1 made while i is mapped
  EXPECT_EQ(shm.peak_time_ns(), kT0 + 10 + 5 + 1);
  EXPECT_EQ(shm.peak_segments(), 2u);
  EXPECT_EQ(shm.shares()[0].bytes_at_peak, 2 * kMiBytes);
  // The 4 segments of the engine's closed-segment cache (the newest mapped
  // again by the main process meanwhile) and the one being made; a start
  // and an end cut for each, plus the piece before them all.
  EXPECT_EQ(probe.most_open, 5u);
  EXPECT_EQ(probe.most_pieces, 11u);
}

// The accounting as it was before it streamed: a life record per segment of
// the run and a sweep over all of them at the end (-1 before +1 at the same
// instant, the first time of the peak). The streaming ShmAnalysis must give
// exactly its numbers.
class SweepShm : public Analysis {
 public:
  struct Result {
    uint64_t segments = 0, bytes_created = 0, peak_bytes = 0, peak_time_ns = 0, peak_segments = 0,
             leaked_segments = 0, leaked_bytes = 0, driver_segments = 0, memfd_segments = 0,
             memfd_bytes = 0, failed_calls = 0;
    // process index -> (segments created, bytes created, bytes at peak, maps, bytes mapped)
    std::map<int, std::tuple<uint64_t, uint64_t, uint64_t, uint64_t, uint64_t>> shares;
  };

  void OnShm(const ShmContext& context) override {
    const trace::ShmEvent& shm = context.shm;
    if (shm.error() != 0) {
      result.failed_calls += !shm.driver_internal();
      return;
    }
    const ShmSegment* segment = context.segment;
    if (segment == nullptr) return;
    auto [it, inserted] = lives_.try_emplace(segment->id);
    Life& life = it->second;
    if (inserted) {
      life.creator = segment->creator != nullptr ? segment->creator->index() : -1;
      life.memfd = segment->memfd;
      life.driver = segment->driver_internal;
    }
    life.size = std::max(life.size, segment->size);
    if (life.start_ns == 0 && segment->sized_ns != 0) life.start_ns = segment->sized_ns;
    life.end_ns = std::max(life.end_ns, context.event.time_ns);
    if (shm.op() == trace::SHM_UNLINK) life.unlinked = true;
    if (shm.op() == trace::SHM_MAP && !life.memfd && !life.driver) {
      auto& share = result.shares[context.event.process.index()];
      ++std::get<3>(share);
      std::get<4>(share) += shm.size();
    }
  }

  void Finish(const RunInfo& run) override {
    struct Step {
      uint64_t time_ns;
      int sign;
      uint64_t size;
      int creator;
    };
    std::vector<Step> steps;
    for (auto& [id, life] : lives_) {
      if (life.driver) {
        ++result.driver_segments;
        continue;
      }
      if (life.memfd) {
        ++result.memfd_segments;
        result.memfd_bytes += life.size;
        continue;
      }
      if (life.size == 0 || life.start_ns == 0) continue;
      if (!life.unlinked) {
        life.end_ns = std::max(life.end_ns, run.end_ns);
        ++result.leaked_segments;
        result.leaked_bytes += life.size;
      }
      ++result.segments;
      result.bytes_created += life.size;
      auto& share = result.shares[life.creator];
      ++std::get<0>(share);
      std::get<1>(share) += life.size;
      if (life.end_ns > life.start_ns) {
        steps.push_back({life.start_ns, +1, life.size, life.creator});
        steps.push_back({life.end_ns, -1, life.size, life.creator});
      }
    }
    std::sort(steps.begin(), steps.end(), [](const Step& a, const Step& b) {
      return std::tie(a.time_ns, a.sign) < std::tie(b.time_ns, b.sign);
    });
    uint64_t live = 0, live_segments = 0;
    size_t peak_index = steps.size();
    for (size_t i = 0; i < steps.size(); ++i) {
      if (steps[i].sign > 0) {
        live += steps[i].size;
        ++live_segments;
      } else {
        live -= steps[i].size;
        --live_segments;
      }
      if (live > result.peak_bytes) {
        result.peak_bytes = live;
        result.peak_time_ns = steps[i].time_ns;
        result.peak_segments = live_segments;
        peak_index = i;
      }
    }
    for (size_t i = 0; peak_index < steps.size() && i <= peak_index; ++i) {
      uint64_t& held = std::get<2>(result.shares[steps[i].creator]);
      held = steps[i].sign > 0 ? held + steps[i].size : held - steps[i].size;
    }
  }

  Result result;

 private:
  struct Life {
    uint64_t start_ns = 0, end_ns = 0, size = 0;
    int creator = -1;
    bool unlinked = false, memfd = false, driver = false;
  };
  std::unordered_map<uint64_t, Life> lives_;
};

SweepShm::Result ResultOf(const ShmAnalysis& shm) {
  SweepShm::Result r;
  r.segments = shm.segments();
  r.bytes_created = shm.bytes_created();
  r.peak_bytes = shm.peak_bytes();
  r.peak_time_ns = shm.peak_time_ns();
  r.peak_segments = shm.peak_segments();
  r.leaked_segments = shm.leaked_segments();
  r.leaked_bytes = shm.leaked_bytes();
  r.driver_segments = shm.driver_segments();
  r.memfd_segments = shm.memfd_segments();
  r.memfd_bytes = shm.memfd_bytes();
  r.failed_calls = shm.failed_calls();
  for (const ShmShare& s : shm.shares()) {
    r.shares[s.process_index] = {s.segments_created, s.bytes_created, s.bytes_at_peak, s.maps,
                                 s.bytes_mapped};
  }
  return r;
}

std::string Describe(const SweepShm::Result& r) {
  std::string text =
      "segments " + std::to_string(r.segments) + " bytes " + std::to_string(r.bytes_created) +
      " peak " + std::to_string(r.peak_bytes) + " at " + std::to_string(r.peak_time_ns) + " of " +
      std::to_string(r.peak_segments) + " leaked " + std::to_string(r.leaked_segments) + "/" +
      std::to_string(r.leaked_bytes) + " driver " + std::to_string(r.driver_segments) + " memfd " +
      std::to_string(r.memfd_segments) + "/" + std::to_string(r.memfd_bytes) + " failed " +
      std::to_string(r.failed_calls) + "\n";
  for (const auto& [index, s] : r.shares) {
    const auto& [made, bytes, at_peak, maps, mapped] = s;
    if (made == 0 && bytes == 0 && at_peak == 0 && maps == 0 && mapped == 0) continue;
    text += "  share " + std::to_string(index) + ": " + std::to_string(made) + " " +
            std::to_string(bytes) + " " + std::to_string(at_peak) + " " + std::to_string(maps) +
            " " + std::to_string(mapped) + "\n";
  }
  return text;
}

// A random DataLoader-like run: a main process and workers that create,
// size (and grow), map, unlink, unmap and close segments, pass them to the
// main process through fds it never saw opened (late maps of closed
// segments included), fail calls, exit with live mappings, and reuse the
// inodes of dead segments; timestamps collide often.
std::string WriteRandomRun(uint32_t seed) {
  std::mt19937 random(seed);
  const auto pick = [&](size_t n) { return static_cast<size_t>(random() % n); };
  const std::string dir = MakeTempDir("shm_random_" + std::to_string(seed));
  const size_t workers = 1 + pick(3);
  std::vector<TraceBuilder> builders;
  builders.emplace_back(100, "r", kT0);
  for (size_t w = 0; w < workers; ++w) {
    builders.emplace_back(101 + w, "r", kT0 + 1, trace::ORIGIN_FORK, 100);
  }
  struct Known {
    std::string name;
    uint64_t inode;
  };
  std::vector<Known> known;  // every segment made, by inode
  struct Process {
    std::map<int32_t, uint64_t> fds;        // fd -> inode
    std::map<uint64_t, uint64_t> mappings;  // address -> length
    bool exited = false;
  };
  std::vector<Process> state(builders.size());
  uint64_t t = kT0 + 10;
  uint64_t next_address = 0x10000000;
  int32_t next_fd = 10;
  const int steps = 60 + static_cast<int>(pick(200));
  for (int step = 0; step < steps; ++step) {
    t += pick(3) * 1000;  // a third of the events share their time with the one before
    const size_t p = pick(builders.size());
    if (state[p].exited) continue;
    TraceBuilder& b = builders[p];
    Process& process = state[p];
    const auto some_fd = [&]() -> int32_t {
      if (process.fds.empty()) return -1;
      auto it = process.fds.begin();
      std::advance(it, pick(process.fds.size()));
      return it->first;
    };
    switch (pick(12)) {
      case 0:
      case 1: {  // create (sometimes a recycled inode, a memfd or the driver's)
        const uint64_t inode =
            !known.empty() && pick(6) == 0 ? known[pick(known.size())].inode : 1000 + known.size();
        const std::string name = "/s" + std::to_string(known.size());
        const int32_t fd = next_fd++;
        const size_t kind = pick(10);
        const trace::ShmOp op = kind == 0 ? trace::MEMFD_CREATE : trace::SHM_CREATE;
        trace::TracePacket& packet = b.Shm(t, op, name, fd, 0, 0, inode);
        if (kind == 1) packet.mutable_shm()->set_driver_internal(true);
        known.push_back({name, inode});
        process.fds[fd] = inode;
        break;
      }
      case 2: {  // truncate / fallocate, sometimes growing
        const int32_t fd = some_fd();
        if (fd < 0) break;
        b.Shm(t, pick(4) == 0 ? trace::SHM_FALLOCATE : trace::SHM_TRUNCATE, "", fd,
              (1 + pick(16)) * kMiBytes, 0, process.fds[fd]);
        break;
      }
      case 3:
      case 4: {  // map through a tracked fd, or an fd received from elsewhere
        uint64_t inode = 0;
        int32_t fd = some_fd();
        if (fd >= 0 && pick(2) == 0) {
          inode = process.fds[fd];
        } else if (!known.empty()) {
          inode = known[pick(known.size())].inode;
          fd = 500 + static_cast<int32_t>(pick(4));
        } else {
          break;
        }
        const uint64_t length = (1 + pick(16)) * kMiBytes;
        b.Shm(t, trace::SHM_MAP, "", fd, length, next_address, inode);
        process.mappings[next_address] = length;
        next_address += 0x10000000;
        break;
      }
      case 5:
      case 6: {  // unmap, sometimes half of it
        if (process.mappings.empty()) break;
        auto it = process.mappings.begin();
        std::advance(it, pick(process.mappings.size()));
        const uint64_t length = pick(3) == 0 ? it->second / 2 : it->second;
        b.Shm(t, trace::SHM_UNMAP, "", -1, length, it->first, 0);
        if (length == it->second) {
          process.mappings.erase(it);
        } else {
          const uint64_t rest = it->first + length;
          process.mappings[rest] = it->second - length;
          process.mappings.erase(it);
        }
        break;
      }
      case 7:
      case 8: {  // unlink by name (no inode), or by fd and inode
        if (known.empty()) break;
        const Known& k = known[pick(known.size())];
        if (pick(2) == 0) {
          b.Shm(t, trace::SHM_UNLINK, k.name, -1, 0, 0, 0);
        } else {
          b.Shm(t, trace::SHM_UNLINK, k.name, -1, 0, 0, k.inode);
        }
        break;
      }
      case 9: {  // close
        const int32_t fd = some_fd();
        if (fd < 0) break;
        b.Shm(t, trace::SHM_CLOSE, "", fd, 0, 0, 0);
        process.fds.erase(fd);
        break;
      }
      case 10: {  // a failed call (ENOSPC)
        const int32_t fd = some_fd();
        if (fd < 0) break;
        b.Shm(t, trace::SHM_FALLOCATE, "", fd, 64 * kMiBytes, 0, process.fds[fd])
            .mutable_shm()
            ->set_error(28);
        break;
      }
      case 11:  // a worker exits, maybe with live mappings and open fds
        if (p == 0 || pick(4) != 0) break;
        b.Exit(t);
        process.exited = true;
        break;
    }
  }
  for (TraceBuilder& b : builders) b.Write(dir);
  return dir;
}

// Both analyses fed by one replay of `dir`; the engine keeps `kept` closed
// segments.
void ExpectSameAsTheSweep(const std::string& dir, size_t kept) {
  SCOPED_TRACE(dir + ", closed segments kept " + std::to_string(kept));
  ShmAnalysis shm;
  SweepShm sweep;
  RunListing listing;
  ASSERT_TRUE(ScanRun(dir, &listing).ok());
  ReplayOptions options;
  options.closed_segments_kept = kept;
  ReplayEngine engine(std::move(listing), options);
  engine.AddAnalysis(&shm);
  engine.AddAnalysis(&sweep);
  engine.Run();
  ASSERT_EQ(Describe(ResultOf(shm)), Describe(sweep.result));
}

TEST(ShmTest, StreamingPeakEqualsTheSweepOnRandomRuns) {
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    const std::string dir = WriteRandomRun(seed);
    for (size_t kept : {size_t{1}, size_t{3}, size_t{65536}}) ExpectSameAsTheSweep(dir, kept);
  }
}

// The runs recorded on the H200 machine (examples/, tests/data/h200/).
TEST(ShmTest, StreamingPeakEqualsTheSweepOnTheRecordedRuns) {
  const std::string data = PINSCOPE_TEST_DATA_DIR;
  size_t runs = 0;
  // A run is a folder of .pstrace files; a folder of runs is looked into
  // (tests/data/h200/pipeline).
  const auto is_run = [](const std::filesystem::path& dir) {
    for (const auto& f : std::filesystem::directory_iterator(dir))
      if (f.path().extension() == ".pstrace") return true;
    return false;
  };
  std::vector<std::filesystem::path> folders;
  for (const std::string& parent : {data + "/../../examples", data + "/h200"}) {
    for (const auto& entry : std::filesystem::directory_iterator(parent)) {
      if (!entry.is_directory()) continue;
      if (is_run(entry.path())) {
        folders.push_back(entry.path());
        continue;
      }
      for (const auto& inner : std::filesystem::directory_iterator(entry.path()))
        if (inner.is_directory() && is_run(inner.path())) folders.push_back(inner.path());
    }
  }
  for (const auto& dir : folders) {
    ExpectSameAsTheSweep(dir.string(), 1);
    ExpectSameAsTheSweep(dir.string(), ReplayOptions().closed_segments_kept);
    ++runs;
  }
  // examples/ (2), tests/data/h200 (its runs and the 16 of pipeline/).
  EXPECT_GE(runs, 20u);
}

}  // namespace
}  // namespace pinscope
