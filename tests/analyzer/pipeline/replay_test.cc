// Replay engine tests: merge order across and within files, the process
// tree, and the link from each copy to the buffer that fed it (an allocation
// in the process, or an shm segment made by another process).
#include "analyzer/replay/replay.h"

#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <filesystem>
#include <string_view>
#include <tuple>

#include "analyzer/read/run_loader.h"
#include "trace_builder.h"

namespace pinscope {
namespace {

using testing::kMiBytes;
using testing::kMs;
using testing::MakeTempDir;
using testing::RecordingAnalysis;
using testing::TraceBuilder;

constexpr uint64_t kT0 = 1000ull * 1000 * kMs;

// What a test keeps of RunInfo (its process pointers die with the engine).
struct RunFacts {
  std::vector<Problem> problems;
  uint32_t root_pid = 0;
};

RecordingAnalysis Replay(const std::string& dir, RunFacts* facts = nullptr) {
  RunListing listing;
  EXPECT_TRUE(ScanRun(dir, &listing).ok());
  ReplayEngine engine(std::move(listing));
  RecordingAnalysis recording;
  engine.AddAnalysis(&recording);
  engine.Run();
  if (facts != nullptr) {
    facts->problems = engine.info().problems;
    facts->root_pid = engine.info().root != nullptr ? engine.info().root->pid() : 0;
  }
  EXPECT_TRUE(recording.finished);
  return recording;
}

std::vector<std::string> Matching(const std::vector<std::string>& lines,
                                  const std::string& prefix) {
  std::vector<std::string> out;
  for (const auto& line : lines) {
    if (line.rfind(prefix, 0) == 0) out.push_back(line);
  }
  return out;
}

TEST(ReplayTest, MergesByTimeAndKeepsEachFilesOrder) {
  const std::string dir = MakeTempDir("replay_merge");
  TraceBuilder a(100, "r", kT0 + 1);
  a.Notice(kT0 + 10, trace::Notice::INFO, "a1", "");
  a.Notice(kT0 + 30, trace::Notice::INFO, "a2", "");
  a.Notice(kT0 + 25, trace::Notice::INFO, "a3", "");  // entered earlier, returned later
  a.Notice(kT0 + 40, trace::Notice::INFO, "a4", "");
  TraceBuilder b(200, "r", kT0 + 2, trace::ORIGIN_FORK, 100);
  b.Notice(kT0 + 20, trace::Notice::INFO, "b1", "");
  b.Notice(kT0 + 28, trace::Notice::INFO, "b2", "");
  b.Notice(kT0 + 35, trace::Notice::INFO, "b3", "");
  a.Write(dir);
  b.Write(dir);
  RecordingAnalysis recording = Replay(dir);
  EXPECT_EQ(
      Matching(recording.lines, "notice"),
      (std::vector<std::string>{"notice 100 a1", "notice 200 b1", "notice 200 b2", "notice 100 a2",
                                "notice 100 a3", "notice 200 b3", "notice 100 a4"}));
  // Processes announced first, in start order, with the tree.
  EXPECT_EQ(recording.lines[0], "process 100 parent -");
  EXPECT_EQ(recording.lines[1], "process 200 parent 100");
}

// More processes overlapping in time than files may be open: every packet
// of this round robin needs a file that was closed to make room, reopened
// where it stopped (64-byte chunks: in the middle of what was buffered).
TEST(ReplayTest, StreamsMoreFilesThanItKeepsOpen) {
  const std::string dir = MakeTempDir("replay_open_limit");
  constexpr int kProcesses = 12;
  constexpr int kNotices = 200;
  std::vector<std::string> expected;
  for (int p = 0; p < kProcesses; ++p) {
    TraceBuilder process(100 + p, "r", kT0 + p, p == 0 ? trace::ORIGIN_ROOT : trace::ORIGIN_FORK,
                         100);
    for (int k = 0; k < kNotices; ++k) {
      process.Notice(kT0 + 100 + k * 100 + p, trace::Notice::INFO, "n" + std::to_string(k), "");
    }
    process.Write(dir);
  }
  for (int k = 0; k < kNotices; ++k) {
    for (int p = 0; p < kProcesses; ++p) {
      expected.push_back("notice " + std::to_string(100 + p) + " n" + std::to_string(k));
    }
  }
  RunListing listing;
  ASSERT_TRUE(ScanRun(dir, &listing).ok());
  ReplayOptions options;
  options.max_open_files = 3;
  options.chunk_bytes = 64;
  ReplayEngine engine(std::move(listing), options);
  RecordingAnalysis recording;
  engine.AddAnalysis(&recording);
  engine.Run();
  EXPECT_TRUE(engine.info().problems.empty()) << engine.info().problems[0].message;
  EXPECT_EQ(Matching(recording.lines, "notice"), expected);
  EXPECT_EQ(Matching(recording.lines, "end ").size(), static_cast<size_t>(kProcesses));
  EXPECT_EQ(engine.info().packets, static_cast<uint64_t>(kProcesses * kNotices));
  EXPECT_EQ(engine.peak_open_files(), 3u);
}

// The progress hook (the CLI's progress line) hears the bytes read of the
// listed files' sizes: at the start, every kProgressEveryPackets packets,
// and at the end, never per packet; released and ended files still count.
TEST(ReplayTest, TellsProgressTheBytesReadEveryNPackets) {
  const std::string dir = MakeTempDir("replay_progress");
  constexpr int kProcesses = 3;
  constexpr int kNotices = 12000;
  uint64_t file_bytes = 0;
  for (int p = 0; p < kProcesses; ++p) {
    TraceBuilder process(100 + p, "r", kT0 + p, p == 0 ? trace::ORIGIN_ROOT : trace::ORIGIN_FORK,
                         100);
    // The third process starts late and ends early: its file ends mid-run.
    const int notices = p == 2 ? kNotices / 4 : kNotices;
    for (int k = 0; k < notices; ++k) {
      process.Notice(kT0 + 100 + k * 100 + p, trace::Notice::INFO, "n", "");
    }
    process.Write(dir);
    file_bytes += std::filesystem::file_size(dir + "/" + std::to_string(100 + p) + ".pstrace");
  }
  struct Calls : Progress {
    std::vector<std::tuple<uint64_t, uint64_t, uint64_t>> bytes;
    void Stage(std::string_view) override {}
    void Bytes(uint64_t done, uint64_t total, uint64_t packets) override {
      bytes.emplace_back(done, total, packets);
    }
  } calls;
  RunListing listing;
  ASSERT_TRUE(ScanRun(dir, &listing).ok());
  ReplayOptions options;
  options.max_open_files = 2;  // one file is always released and reopened
  options.progress = &calls;
  ReplayEngine engine(std::move(listing), options);
  engine.Run();
  const uint64_t packets = engine.info().packets;
  ASSERT_EQ(packets, static_cast<uint64_t>(2 * kNotices + kNotices / 4));
  ASSERT_EQ(calls.bytes.size(), 2 + packets / ReplayOptions::kProgressEveryPackets);
  EXPECT_EQ(calls.bytes.front(), std::make_tuple(uint64_t{0}, file_bytes, uint64_t{0}));
  EXPECT_EQ(calls.bytes.back(), std::make_tuple(file_bytes, file_bytes, packets));
  for (size_t i = 1; i + 1 < calls.bytes.size(); ++i) {
    const auto [done, total, seen] = calls.bytes[i];
    EXPECT_EQ(total, file_bytes);
    EXPECT_EQ(seen, i * ReplayOptions::kProgressEveryPackets - 1) << i;
    EXPECT_GT(done, std::get<0>(calls.bytes[i - 1])) << i;
    EXPECT_LT(done, file_bytes) << i;
  }
}

// The soft fd limit is raised for the replay only: a job started after it
// (pinscope run, tune) must see the limit it would have had.
TEST(ReplayTest, RestoresTheSoftFileLimit) {
  struct rlimit before;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &before), 0);
  if (before.rlim_max != RLIM_INFINITY && before.rlim_max < 200) GTEST_SKIP() << "hard limit";
  struct rlimit lowered = before;
  lowered.rlim_cur = 100;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &lowered), 0);
  const std::string dir = MakeTempDir("replay_rlimit");
  for (int p = 0; p < 150; ++p) {
    TraceBuilder process(100 + p, "r", kT0 + p, p == 0 ? trace::ORIGIN_ROOT : trace::ORIGIN_FORK,
                         100);
    process.Notice(kT0 + 1000 + p, trace::Notice::INFO, "late", "");  // all open till then
    process.Write(dir);
  }
  RunListing listing;
  ASSERT_TRUE(ScanRun(dir, &listing).ok());
  ReplayEngine engine(std::move(listing));
  RecordingAnalysis recording;
  engine.AddAnalysis(&recording);
  engine.Run();
  struct rlimit after;
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &after), 0);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &before), 0);
  EXPECT_EQ(after.rlim_cur, 100u);
  EXPECT_TRUE(engine.info().problems.empty());
  EXPECT_EQ(Matching(recording.lines, "end ").size(), 150u);
  // Raised to 150 files + the reserve, all of them open at once.
  EXPECT_EQ(engine.peak_open_files(), 150u);
}

TEST(ReplayTest, ProcessTreeWithExecAndHelpers) {
  const std::string dir = MakeTempDir("replay_tree");
  TraceBuilder root(100, "r", kT0);
  TraceBuilder worker(101, "r", kT0 + kMs, trace::ORIGIN_FORK, 100);
  TraceBuilder helper(102, "r", kT0 + 2 * kMs, trace::ORIGIN_EXEC, 100);
  helper.header().set_helper(true);
  // 103 is a shell that exec'd itself into python: same pid, two images.
  TraceBuilder shell(103, "r", kT0 + 3 * kMs, trace::ORIGIN_FORK, 101);
  shell.Exit(kT0 + 4 * kMs, trace::ProcessExit::EXEC);
  TraceBuilder image(103, "r", kT0 + 5 * kMs, trace::ORIGIN_EXEC, 101);
  root.Write(dir);
  worker.Write(dir);
  helper.Write(dir);
  shell.Write(dir);
  image.Write(dir, "103.1.pstrace");
  RunFacts info;
  RecordingAnalysis recording = Replay(dir, &info);
  EXPECT_EQ(Matching(recording.lines, "process"),
            (std::vector<std::string>{"process 100 parent -", "process 101 parent 100",
                                      "process 102 parent 100", "process 103 parent 101",
                                      "process 103 parent 103"}));
  EXPECT_EQ(info.root_pid, 100u);
  EXPECT_TRUE(info.problems.empty());
}

TEST(ReplayTest, CopyLinksToTheAllocationThatFedIt) {
  const std::string dir = MakeTempDir("replay_alloc");
  TraceBuilder main(100, "r", kT0);
  const uint64_t block = 0x10000000;
  main.Alloc(kT0 + 1 * kMs, trace::POSIX_MEMALIGN, block, 4 * kMiBytes);
  main.Copy(kT0 + 2 * kMs, kMs, trace::H2D, trace::PAGEABLE, kMiBytes, block + 4096);
  main.Copy(kT0 + 3 * kMs, kMs, trace::D2H, trace::PAGEABLE, kMiBytes, block + 3 * kMiBytes);
  main.Copy(kT0 + 4 * kMs, kMs, trace::H2D, trace::PAGEABLE, 16, 0x7ffc0000);  // stack
  // realloc moves the block: the old one is freed by the realloc.
  trace::TracePacket& grown = main.Alloc(kT0 + 5 * kMs, trace::REALLOC, 0x20000000, 8 * kMiBytes);
  grown.mutable_alloc()->set_old_address(block);
  main.Copy(kT0 + 6 * kMs, kMs, trace::H2D, trace::PAGEABLE, kMiBytes, block);
  main.Copy(kT0 + 7 * kMs, kMs, trace::H2D, trace::PAGEABLE, kMiBytes, 0x20000000 + 100);
  main.Free(kT0 + 8 * kMs, 0x20000000);
  main.Copy(kT0 + 9 * kMs, kMs, trace::H2D, trace::PAGEABLE, kMiBytes, 0x20000000);
  main.Write(dir);
  RecordingAnalysis recording = Replay(dir);
  EXPECT_EQ(recording.copies, (std::vector<std::string>{
                                  "100 H2D 1048576 -> alloc posix_memalign 4194304 +4096",
                                  "100 D2H 1048576 -> alloc posix_memalign 4194304 +3145728",
                                  "100 H2D 16 -> none",
                                  "100 H2D 1048576 -> none",
                                  "100 H2D 1048576 -> alloc realloc 8388608 +100",
                                  "100 H2D 1048576 -> none",
                              }));
  EXPECT_EQ(Matching(recording.lines, "free"),
            (std::vector<std::string>{"free 100 4194304 realloc", "free 100 8388608"}));
}

TEST(ReplayTest, InPlaceReallocIsNotFreedByItsOwnFreeRecord) {
  const std::string dir = MakeTempDir("replay_realloc_in_place");
  TraceBuilder main(100, "r", kT0);
  main.Alloc(kT0 + 1, trace::MALLOC, 0x1000, 2 * kMiBytes);
  main.Alloc(kT0 + 2, trace::REALLOC, 0x1000, 3 * kMiBytes)
      .mutable_alloc()
      ->set_old_address(0x1000);
  main.Free(kT0 + 3, 0x1000).mutable_free()->set_by_realloc(true);
  main.Copy(kT0 + 4, 10, trace::H2D, trace::PAGEABLE, 100, 0x1000 + 2 * kMiBytes + 8);
  main.Write(dir);
  RecordingAnalysis recording = Replay(dir);
  EXPECT_EQ(recording.copies,
            (std::vector<std::string>{"100 H2D 100 -> alloc realloc 3145728 +2097160"}));
}

TEST(ReplayTest, CopyLinksToShmSegmentMadeByAWorker) {
  const std::string dir = MakeTempDir("replay_shm");
  const uint64_t size = 3 * kMiBytes;
  TraceBuilder main(100, "r", kT0);
  TraceBuilder worker(101, "r", kT0 + kMs, trace::ORIGIN_FORK, 100);
  worker.Shm(kT0 + 10 * kMs, trace::SHM_CREATE, "/torch_101_0", 7, 0, 0, 42);
  worker.Shm(kT0 + 11 * kMs, trace::SHM_TRUNCATE, "", 7, size, 0, 42);
  worker.Shm(kT0 + 12 * kMs, trace::SHM_FALLOCATE, "", 7, size, 0, 42);
  worker.Shm(kT0 + 13 * kMs, trace::SHM_MAP, "", 7, size, 0x7000000, 42);
  worker.Shm(kT0 + 14 * kMs, trace::SHM_UNLINK, "/torch_101_0", -1, 0, 0, 0);
  worker.Shm(kT0 + 15 * kMs, trace::SHM_UNMAP, "", -1, size, 0x7000000, 0);
  worker.Shm(kT0 + 16 * kMs, trace::SHM_CLOSE, "", 7, 0, 0, 0);
  // The main process got the fd over a socket: only its map is recorded.
  main.Shm(kT0 + 20 * kMs, trace::SHM_MAP, "", 30, size, 0x9000000, 42);
  main.Copy(kT0 + 21 * kMs, kMs, trace::H2D, trace::PAGEABLE, kMiBytes, 0x9000000 + kMiBytes);
  main.Shm(kT0 + 22 * kMs, trace::SHM_UNMAP, "", -1, size, 0x9000000, 0);
  main.Copy(kT0 + 23 * kMs, kMs, trace::H2D, trace::PAGEABLE, kMiBytes, 0x9000000);
  main.Write(dir);
  worker.Write(dir);
  RecordingAnalysis recording = Replay(dir);
  EXPECT_EQ(recording.copies,
            (std::vector<std::string>{"100 H2D 1048576 -> shm /torch_101_0 3145728 by 101 +1048576",
                                      "100 H2D 1048576 -> none"}));
  // One segment (#1) through all of it.
  EXPECT_EQ(Matching(recording.lines, "shm"),
            (std::vector<std::string>{
                "shm 101 create /torch_101_0#1 @" + std::to_string(kT0 + 10 * kMs),
                "shm 101 truncate /torch_101_0#1 @" + std::to_string(kT0 + 11 * kMs),
                "shm 101 fallocate /torch_101_0#1 @" + std::to_string(kT0 + 12 * kMs),
                "shm 101 map /torch_101_0#1 @" + std::to_string(kT0 + 13 * kMs),
                "shm 101 unlink /torch_101_0#1 @" + std::to_string(kT0 + 14 * kMs),
                "shm 101 unmap /torch_101_0#1 @" + std::to_string(kT0 + 15 * kMs),
                "shm 101 close /torch_101_0#1 @" + std::to_string(kT0 + 16 * kMs),
                "shm 100 map /torch_101_0#1 @" + std::to_string(kT0 + 20 * kMs),
                "shm 100 unmap /torch_101_0#1 @" + std::to_string(kT0 + 22 * kMs),
            }));
}

TEST(ReplayTest, PartialUnmapSplitsTheMapping) {
  const std::string dir = MakeTempDir("replay_partial_unmap");
  TraceBuilder main(100, "r", kT0);
  main.Shm(kT0 + 1, trace::SHM_CREATE, "/seg", 5, 0, 0, 77);
  main.Shm(kT0 + 2, trace::SHM_TRUNCATE, "", 5, 3 * 4096, 0, 77);
  main.Shm(kT0 + 3, trace::SHM_MAP, "", 5, 3 * 4096, 0x100000, 77);
  main.Shm(kT0 + 4, trace::SHM_UNMAP, "", -1, 4096, 0x101000, 0);
  main.Copy(kT0 + 5, 1, trace::H2D, trace::PAGEABLE, 10, 0x100010);
  main.Copy(kT0 + 6, 1, trace::H2D, trace::PAGEABLE, 10, 0x101010);
  main.Copy(kT0 + 7, 1, trace::H2D, trace::PAGEABLE, 10, 0x102010);
  main.Write(dir);
  RecordingAnalysis recording = Replay(dir);
  EXPECT_EQ(recording.copies, (std::vector<std::string>{
                                  "100 H2D 10 -> shm /seg 12288 by 100 +16", "100 H2D 10 -> none",
                                  "100 H2D 10 -> shm /seg 12288 by 100 +8208"}));
  // Both remaining pieces go away with the process, implicitly.
  EXPECT_EQ(
      Matching(recording.lines, "shm 100 unmap"),
      (std::vector<std::string>{"shm 100 unmap /seg#1 @" + std::to_string(kT0 + 4),
                                "shm 100 unmap /seg#1 implicit @" + std::to_string(kT0 + 7),
                                "shm 100 unmap /seg#1 implicit @" + std::to_string(kT0 + 7)}));
}

TEST(ReplayTest, UnlinkByNameAndCreateAfterDeathMakesANewSegment) {
  const std::string dir = MakeTempDir("replay_unlink_name");
  TraceBuilder main(100, "r", kT0);
  main.Shm(kT0 + 1, trace::SHM_CREATE, "/a", 5, 0, 0, 0);  // no inode known
  main.Shm(kT0 + 2, trace::SHM_TRUNCATE, "", 5, 4096, 0, 0);
  main.Shm(kT0 + 3, trace::SHM_UNLINK, "/a", -1, 0, 0, 0);
  main.Shm(kT0 + 4, trace::SHM_CLOSE, "", 5, 0, 0, 0);
  main.Shm(kT0 + 5, trace::SHM_CREATE, "/a", 5, 0, 0, 0);
  main.Write(dir);
  RecordingAnalysis recording = Replay(dir);
  EXPECT_EQ(Matching(recording.lines, "shm"),
            (std::vector<std::string>{"shm 100 create /a#1 @" + std::to_string(kT0 + 1),
                                      "shm 100 truncate /a#1 @" + std::to_string(kT0 + 2),
                                      "shm 100 unlink /a#1 @" + std::to_string(kT0 + 3),
                                      "shm 100 close /a#1 @" + std::to_string(kT0 + 4),
                                      "shm 100 create /a#2 @" + std::to_string(kT0 + 5)}));
}

TEST(ReplayTest, CorruptFileStillEndsItsProcessAndOthersReplay) {
  const std::string dir = MakeTempDir("replay_corrupt");
  TraceBuilder good(100, "r", kT0);
  good.Copy(kT0 + 5, 1, trace::H2D, trace::PAGEABLE, 10, 0);
  TraceBuilder bad(101, "r", kT0 + 1, trace::ORIGIN_FORK, 100);
  bad.Copy(kT0 + 2, 1, trace::H2D, trace::PAGEABLE, 20, 0);
  bad.Copy(kT0 + 3, 1, trace::H2D, trace::PAGEABLE, 30, 0);
  std::string bytes = bad.Bytes();
  bytes[bad.PacketOffset(2)] = '\x00';
  good.Write(dir);
  testing::WriteFile(dir + "/101.pstrace", bytes);
  RunFacts info;
  RecordingAnalysis recording = Replay(dir, &info);
  EXPECT_EQ(recording.copies,
            (std::vector<std::string>{"101 H2D 20 -> none", "100 H2D 10 -> none"}));
  ASSERT_EQ(info.problems.size(), 1u);
  EXPECT_EQ(info.problems[0].severity, Severity::kError);
  EXPECT_NE(info.problems[0].message.find("101.pstrace: corrupt packet at byte " +
                                          std::to_string(bad.PacketOffset(2))),
            std::string::npos);
  EXPECT_EQ(Matching(recording.lines, "end"),
            (std::vector<std::string>{"end 101 @" + std::to_string(kT0 + 2),
                                      "end 100 @" + std::to_string(kT0 + 5)}));
}

}  // namespace
}  // namespace pinscope
