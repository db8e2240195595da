// Run folder tests: which files make up the run, and the message for every
// file left out (empty, no header, newer format, other run, duplicate), with
// the other files still reported by `pinscope report`.
#include "analyzer/read/run_loader.h"

#include <gtest/gtest.h>

#include <sstream>

#include "analyzer/report/report_command.h"
#include "trace_builder.h"

namespace pinscope {
namespace {

using testing::kMs;
using testing::MakeTempDir;
using testing::TraceBuilder;
using testing::WriteFile;

constexpr uint64_t kT0 = 1000ull * 1000 * kMs;

std::vector<uint32_t> Pids(const RunListing& listing) {
  std::vector<uint32_t> pids;
  for (const RunFile& file : listing.files) pids.push_back(file.header.pid());
  return pids;
}

TEST(RunLoaderTest, MissingFolderAndNoTraceFiles) {
  RunListing listing;
  Status status = ScanRun("/nonexistent/run", &listing);
  EXPECT_EQ(status.code, Status::Code::kNoRun);
  EXPECT_EQ(status.message, "run folder /nonexistent/run does not exist or is not a folder");
  const std::string dir = MakeTempDir("loader_no_files");
  WriteFile(dir + "/notes.txt", "hello");
  status = ScanRun(dir, &listing);
  EXPECT_EQ(status.code, Status::Code::kNoRun);
  EXPECT_EQ(status.message, "run folder " + dir + " holds no *.pstrace trace file");
}

TEST(RunLoaderTest, MixedRunIdsReportTheMajorityAndNameTheOddFiles) {
  const std::string dir = MakeTempDir("loader_mixed");
  TraceBuilder(100, "run-a", kT0).Write(dir);
  TraceBuilder(101, "run-a", kT0 + 1, trace::ORIGIN_FORK, 100).Write(dir);
  TraceBuilder(102, "run-a", kT0 + 2, trace::ORIGIN_FORK, 100).Write(dir);
  TraceBuilder(900, "run-b", kT0 + 3).Write(dir);
  RunListing listing;
  ASSERT_TRUE(ScanRun(dir, &listing).ok());
  EXPECT_EQ(listing.run_id, "run-a");
  EXPECT_EQ(Pids(listing), (std::vector<uint32_t>{100, 101, 102}));
  ASSERT_EQ(listing.problems.size(), 1u);
  EXPECT_EQ(listing.problems[0].file, dir + "/900.pstrace");
  EXPECT_EQ(listing.problems[0].message,
            "file " + dir +
                "/900.pstrace: belongs to run 'run-b', not to run 'run-a' reported "
                "here (3 of 4 readable files): left out");
}

TEST(RunLoaderTest, DuplicateFileIsLeftOut) {
  const std::string dir = MakeTempDir("loader_duplicate");
  TraceBuilder main(100, "run-a", kT0);
  main.Write(dir);
  main.Write(dir, "100.1.pstrace");
  RunListing listing;
  ASSERT_TRUE(ScanRun(dir, &listing).ok());
  EXPECT_EQ(listing.files.size(), 1u);
  ASSERT_EQ(listing.problems.size(), 1u);
  EXPECT_EQ(listing.problems[0].message,
            "file " + dir + "/100.1.pstrace: duplicates " + dir +
                "/100.pstrace (same pid 100 and start time): left out");
}

TEST(RunLoaderTest, BadFilesAreListedInNameOrderAndTheRestKept) {
  const std::string dir = MakeTempDir("loader_bad_files");
  TraceBuilder(100, "run-a", kT0).Write(dir);
  WriteFile(dir + "/101.pstrace", "");
  TraceBuilder newer(102, "run-a", kT0);
  newer.header().set_format_version(3);
  newer.Write(dir);
  WriteFile(dir + "/103.pstrace", std::string("\x0A\x02\x08", 3));  // cut inside the header
  TraceBuilder(20, "run-a", kT0 + 5, trace::ORIGIN_FORK, 100).Write(dir);
  RunListing listing;
  ASSERT_TRUE(ScanRun(dir, &listing).ok());
  EXPECT_EQ(Pids(listing), (std::vector<uint32_t>{100, 20}));
  ASSERT_EQ(listing.problems.size(), 3u);
  EXPECT_EQ(listing.problems[0].severity, Severity::kWarning);
  EXPECT_NE(listing.problems[0].message.find("101.pstrace: empty (0 bytes)"), std::string::npos);
  EXPECT_EQ(listing.problems[1].message,
            "file " + dir +
                "/102.pstrace: written by a newer pinscope: format 3, this reader "
                "supports 1");
  EXPECT_EQ(listing.problems[2].message,
            "file " + dir + "/103.pstrace: truncated after byte 0 (last packet incomplete)");
}

TEST(RunLoaderTest, ReportStillPrintsWithACorruptFileAndExitsOne) {
  const std::string dir = MakeTempDir("loader_report_corrupt");
  TraceBuilder main(100, "run-a", kT0);
  main.Copy(kT0 + kMs, kMs, trace::H2D, trace::PAGEABLE, 1 << 20, 0);
  main.Exit(kT0 + 10 * kMs);
  main.Write(dir);
  TraceBuilder worker(101, "run-a", kT0 + 1, trace::ORIGIN_FORK, 100);
  worker.Copy(kT0 + 2 * kMs, kMs, trace::H2D, trace::PAGEABLE, 1 << 20, 0);
  worker.Copy(kT0 + 3 * kMs, kMs, trace::H2D, trace::PAGEABLE, 1 << 20, 0);
  std::string bytes = worker.Bytes();
  const size_t offset = worker.PacketOffset(2);
  bytes[offset] = '\x7F';
  WriteFile(dir + "/101.pstrace", bytes);
  ReportOptions options;
  options.run_dir = dir;
  options.color = ColorMode::kNever;
  std::ostringstream out, err;
  EXPECT_EQ(RunReport(options, out, err), 1);
  // Undo the report's word wrap before searching.
  std::string text;
  for (char c : out.str()) {
    if (c == '\n') c = ' ';
    if (c == ' ' && !text.empty() && text.back() == ' ') continue;
    text += c;
  }
  EXPECT_NE(text.find("error file " + dir + "/101.pstrace: corrupt packet at byte " +
                      std::to_string(offset) + ": bad tag 0x7F"),
            std::string::npos)
      << text;
  // Both processes' copies are in the table: 1 from each before the damage.
  EXPECT_NE(out.str().find("H2D        pageable      2"), std::string::npos) << out.str();
}

TEST(RunLoaderTest, NothingReadableExitsTwo) {
  const std::string dir = MakeTempDir("loader_nothing");
  WriteFile(dir + "/1.pstrace", "");
  ReportOptions options;
  options.run_dir = dir;
  std::ostringstream out, err;
  EXPECT_EQ(RunReport(options, out, err), 2);
  EXPECT_EQ(out.str(), "");
  EXPECT_NE(err.str().find("no readable process file in " + dir), std::string::npos);
  EXPECT_NE(err.str().find("1.pstrace: empty"), std::string::npos);
}

}  // namespace
}  // namespace pinscope

namespace pinscope {
namespace {

// Damage a valid run at random places (fixed seed): every report must come
// back with exit code 0, 1 or 2, never a crash or a hang.
TEST(RunLoaderTest, RandomDamageNeverCrashes) {
  const std::string dir = MakeTempDir("loader_random_damage");
  TraceBuilder main(100, "run-a", kT0);
  TraceBuilder worker(101, "run-a", kT0 + 1, trace::ORIGIN_FORK, 100);
  for (uint64_t i = 0; i < 30; ++i) {
    worker.Shm(kT0 + i * kMs, trace::SHM_CREATE, "/s" + std::to_string(i), 5, 0, 0, 100 + i);
    worker.Shm(kT0 + i * kMs + 1, trace::SHM_TRUNCATE, "", 5, 1 << 20, 0, 100 + i);
    worker.Shm(kT0 + i * kMs + 2, trace::SHM_MAP, "", 5, 1 << 20, 0x1000000 * (i + 1), 100 + i);
    worker.Shm(kT0 + i * kMs + 3, trace::SHM_UNLINK, "", -1, 0, 0, 100 + i);
    main.Shm(kT0 + i * kMs + 4, trace::SHM_MAP, "", 9, 1 << 20, 0x2000000 * (i + 1), 100 + i);
    main.Alloc(kT0 + i * kMs + 5, trace::MALLOC, 0x90000000 + i * 0x200000, 1 << 20);
    main.Copy(kT0 + i * kMs + 6, 1000, trace::H2D, trace::PAGEABLE, 1 << 20, 0x2000000 * (i + 1));
    main.Copy(kT0 + i * kMs + 7, 1000, trace::D2H, trace::PAGEABLE, 1 << 19,
              0x90000000 + i * 0x200000);
    main.Shm(kT0 + i * kMs + 8, trace::SHM_UNMAP, "", -1, 1 << 19, 0x2000000 * (i + 1), 0);
  }
  const std::string main_bytes = main.Bytes();
  const std::string worker_bytes = worker.Bytes();
  uint64_t state = 12345;
  const auto next = [&]() {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return state >> 33;
  };
  for (int round = 0; round < 200; ++round) {
    std::string a = main_bytes;
    std::string b = worker_bytes;
    for (int k = 0; k < 1 + round % 4; ++k) {
      std::string& victim = next() % 2 == 0 ? a : b;
      victim[next() % victim.size()] = static_cast<char>(next() & 0xFF);
    }
    if (round % 5 == 0) b.resize(next() % b.size());
    WriteFile(dir + "/100.pstrace", a);
    WriteFile(dir + "/101.pstrace", b);
    ReportOptions options;
    options.run_dir = dir;
    options.json = round % 2 == 0;
    std::ostringstream out, err;
    const int code = RunReport(options, out, err);
    EXPECT_TRUE(code == 0 || code == 1 || code == 2) << "round " << round;
  }
}

}  // namespace
}  // namespace pinscope
