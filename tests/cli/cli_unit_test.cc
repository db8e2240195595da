// Unit tests of the CLI's pieces (pinscope_cli_lib), without starting a job:
// size and number parsing, LD_PRELOAD composition, run-folder naming and
// creation, where the shim is looked for, the median of the bandwidth loop.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_common.h"
#include "cli/cuda_bench.h"
#include "cli/launcher.h"
#include "cli/progress_line.h"
#include "cli/run_setup.h"

namespace pinscope::cli {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "pinscope-cli-unit-XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

mode_t ModeOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

TEST(ParseByteSize, AcceptsSuffixes) {
  uint64_t v = 0;
  ASSERT_TRUE(ParseByteSize("4096", &v));
  EXPECT_EQ(v, 4096u);
  ASSERT_TRUE(ParseByteSize("1M", &v));
  EXPECT_EQ(v, 1u << 20);
  ASSERT_TRUE(ParseByteSize("8MiB", &v));
  EXPECT_EQ(v, 8u << 20);
  ASSERT_TRUE(ParseByteSize("64mb", &v));
  EXPECT_EQ(v, 64u << 20);
  ASSERT_TRUE(ParseByteSize("512k", &v));
  EXPECT_EQ(v, 512u << 10);
  ASSERT_TRUE(ParseByteSize("2G", &v));
  EXPECT_EQ(v, 2ull << 30);
  ASSERT_TRUE(ParseByteSize("100B", &v));
  EXPECT_EQ(v, 100u);
}

TEST(ParseByteSize, RejectsJunk) {
  uint64_t v = 0;
  for (const char* bad : {"", "M", "-1M", "1.5M", "1X", "1Mx", "1 M", "0x10",
                          "99999999999999999999", "20000000000T", "1iB"}) {
    EXPECT_FALSE(ParseByteSize(bad, &v)) << bad;
  }
}

TEST(ParseSizeList, NamesTheBadItem) {
  std::vector<uint64_t> sizes;
  std::string bad;
  ASSERT_TRUE(ParseSizeList("1M,8M,64M,256M", &sizes, &bad));
  EXPECT_EQ(sizes, (std::vector<uint64_t>{1u << 20, 8u << 20, 64u << 20, 256u << 20}));
  EXPECT_FALSE(ParseSizeList("1M,eight,64M", &sizes, &bad));
  EXPECT_EQ(bad, "eight");
  EXPECT_FALSE(ParseSizeList("1M,,64M", &sizes, &bad));
  EXPECT_EQ(bad, "");
  EXPECT_FALSE(ParseSizeList("0", &sizes, &bad));
  EXPECT_EQ(bad, "0");
}

TEST(FormatBytes, HumanUnits) {
  EXPECT_EQ(FormatBytes(123), "123 B");
  EXPECT_EQ(FormatBytes(1u << 20), "1 MiB");
  EXPECT_EQ(FormatBytes(3u << 29), "1.5 GiB");
  EXPECT_EQ(FormatBytes(256u << 20), "256 MiB");
}

TEST(ParseColorWhen, Words) {
  ColorMode mode = ColorMode::kAuto;
  ASSERT_TRUE(ParseColorWhen(nullptr, &mode));  // bare --color
  EXPECT_EQ(mode, ColorMode::kAlways);
  ASSERT_TRUE(ParseColorWhen("never", &mode));
  EXPECT_EQ(mode, ColorMode::kNever);
  ASSERT_TRUE(ParseColorWhen("auto", &mode));
  EXPECT_EQ(mode, ColorMode::kAuto);
  EXPECT_FALSE(ParseColorWhen("sometimes", &mode));
}

TEST(ResolveColor, NoColorAndNonTerminal) {
  EXPECT_EQ(ResolveColor(ColorMode::kAlways, -1), ColorMode::kAlways);
  EXPECT_EQ(ResolveColor(ColorMode::kNever, -1), ColorMode::kNever);
  EXPECT_EQ(ResolveColor(ColorMode::kAuto, -1), ColorMode::kNever);  // not a terminal
  setenv("NO_COLOR", "1", 1);
  EXPECT_EQ(ResolveColor(ColorMode::kAuto, STDIN_FILENO), ColorMode::kNever);
  unsetenv("NO_COLOR");
}

TEST(BuildLdPreload, ShimFirstUserEntriesKept) {
  EXPECT_EQ(BuildLdPreload("/p/libpinscope.so", nullptr), "/p/libpinscope.so");
  EXPECT_EQ(BuildLdPreload("/p/libpinscope.so", ""), "/p/libpinscope.so");
  EXPECT_EQ(BuildLdPreload("/p/libpinscope.so", "/u/a.so"), "/p/libpinscope.so:/u/a.so");
  EXPECT_EQ(BuildLdPreload("/p/libpinscope.so", "/u/a.so /u/b.so:libc.so.6"),
            "/p/libpinscope.so:/u/a.so:/u/b.so:libc.so.6");
  // A nested `pinscope run`: the shim stays once, first.
  EXPECT_EQ(BuildLdPreload("/p/libpinscope.so", "/u/a.so:/p/libpinscope.so"),
            "/p/libpinscope.so:/u/a.so");
}

TEST(ShimCandidates, InstallAndBuildLayouts) {
  std::vector<std::string> c = ShimCandidates("/opt/ps/bin/pinscope");
  ASSERT_FALSE(c.empty());
  auto has = [&](const std::string& p) { return std::find(c.begin(), c.end(), p) != c.end(); };
  EXPECT_TRUE(has("/opt/ps/bin/../lib/libpinscope.so"));
  EXPECT_TRUE(has("/opt/ps/bin/../lib/x86_64-linux-gnu/libpinscope.so"));
  EXPECT_TRUE(ShimCandidates("").empty());
}

TEST(RunId, FreshEachTime) {
  std::string a = NewRunId(), b = NewRunId();
  EXPECT_NE(a, b);
  EXPECT_LT(a.size(), 128u);  // fits the shim's Config::run_id
  EXPECT_EQ(a.find_first_of(" /\n"), std::string::npos);
}

TEST(RunFolder, DefaultNameAndSuffixes) {
  TempDir tmp;
  char old_cwd[4096];
  ASSERT_NE(getcwd(old_cwd, sizeof old_cwd), nullptr);
  ASSERT_EQ(chdir(tmp.path().c_str()), 0);
  struct tm tm_fixed = {};
  tm_fixed.tm_year = 126;
  tm_fixed.tm_mon = 10;
  tm_fixed.tm_mday = 29;
  tm_fixed.tm_hour = 10;
  tm_fixed.tm_min = 15;
  tm_fixed.tm_sec = 7;
  tm_fixed.tm_isdst = -1;
  std::time_t t = mktime(&tm_fixed);
  EXPECT_EQ(DefaultRunDirName(t), "pinscope-20261129-101507");
  std::string error;
  RunFolder a, b, c;
  ASSERT_TRUE(CreateDefaultRunFolder(t, &a, &error)) << error;
  ASSERT_TRUE(CreateDefaultRunFolder(t, &b, &error)) << error;
  ASSERT_TRUE(CreateDefaultRunFolder(t, &c, &error)) << error;
  EXPECT_EQ(a.path, "pinscope-20261129-101507");
  EXPECT_EQ(b.path, "pinscope-20261129-101507-2");
  EXPECT_EQ(c.path, "pinscope-20261129-101507-3");
  EXPECT_EQ(a.absolute, fs::canonical(tmp.path()).string() + "/pinscope-20261129-101507");
  EXPECT_TRUE(a.created);
  EXPECT_EQ(ModeOf(a.absolute), 0700u);
  ASSERT_EQ(chdir(old_cwd), 0);
}

TEST(RunFolder, OutputCreatedPrivateWithParents) {
  TempDir tmp;
  mode_t old = umask(0);
  std::string error;
  RunFolder f;
  const std::string dir = tmp.path() + "/x/y/run";
  ASSERT_TRUE(PrepareRunFolder(dir + "/", false, &f, &error)) << error;
  umask(old);
  EXPECT_TRUE(f.created);
  EXPECT_EQ(ModeOf(dir), 0700u);
  EXPECT_EQ(ModeOf(tmp.path() + "/x"), 0700u);
  EXPECT_EQ(f.absolute, fs::canonical(dir).string());
}

TEST(RunFolder, ExistingFolderWithTracesNeedsForce) {
  TempDir tmp;
  std::ofstream(tmp.path() + "/1234.pstrace") << "x";
  std::ofstream(tmp.path() + "/notes.txt") << "y";
  std::string error;
  RunFolder f;
  EXPECT_FALSE(PrepareRunFolder(tmp.path(), false, &f, &error));
  EXPECT_NE(error.find("--force"), std::string::npos) << error;
  EXPECT_NE(error.find("1 trace file"), std::string::npos) << error;
  ASSERT_TRUE(PrepareRunFolder(tmp.path(), true, &f, &error)) << error;
  EXPECT_FALSE(f.created);
  EXPECT_EQ(f.existing_traces, std::vector<std::string>{"1234.pstrace"});
  EXPECT_TRUE(fs::exists(tmp.path() + "/1234.pstrace"));  // nothing deleted
}

TEST(RunFolder, ExistingEmptyFolderIsUsedAsIs) {
  TempDir tmp;
  chmod(tmp.path().c_str(), 0750);
  std::string error;
  RunFolder f;
  ASSERT_TRUE(PrepareRunFolder(tmp.path(), false, &f, &error)) << error;
  EXPECT_FALSE(f.created);
  EXPECT_EQ(ModeOf(tmp.path()), 0750u);  // the user's folder keeps its mode
}

TEST(RunFolder, FileInTheWay) {
  TempDir tmp;
  std::ofstream(tmp.path() + "/file") << "x";
  std::string error;
  RunFolder f;
  EXPECT_FALSE(PrepareRunFolder(tmp.path() + "/file", false, &f, &error));
  EXPECT_NE(error.find("not a folder"), std::string::npos) << error;
  EXPECT_FALSE(PrepareRunFolder(tmp.path() + "/file/sub", false, &f, &error));
}

TEST(ShellQuote, QuotesOnlyWhenNeeded) {
  EXPECT_EQ(ShellQuote("runs/base-1"), "runs/base-1");
  EXPECT_EQ(ShellQuote("my run"), "'my run'");
  EXPECT_EQ(ShellQuote("it's"), "'it'\\''s'");
  EXPECT_EQ(ShellQuote(""), "''");
}

TEST(Bench, MedianAndRate) {
  EXPECT_DOUBLE_EQ(Median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(Median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(Median({}), 0);
  EXPECT_DOUBLE_EQ(GbPerSecond(1000000000, 1000), 1.0);
  EXPECT_DOUBLE_EQ(GbPerSecond(1 << 20, 0), 0);
}

TEST(Launcher, ForwardsTheDocumentedSignals) {
  std::vector<int> expected = {SIGTERM, SIGHUP, SIGQUIT, SIGUSR1,
                               SIGUSR2, SIGINT, SIGCONT, SIGWINCH};
  EXPECT_EQ(ForwardedSignals(), expected);
}

// The progress line: nothing before the threshold, one line redrawn in
// place (\r, padded over the longer text before), at most every kRedrawMs
// except a new stage and its first and last bytes, erased at the end.
TEST(ProgressLineTest, DrawsAfterTheThresholdInPlaceAndErasesItself) {
  uint64_t now = 1000;
  std::ostringstream out;
  {
    ProgressLine line("pinscope report", &out, 2000, [&] { return now; });
    line.Stage("replaying");
    line.Bytes(0, 100 << 20, 0);
    now += 1999;
    line.Bytes(10 << 20, 100 << 20, 1000);
    EXPECT_EQ(out.str(), "") << "drawn before 2 s";
    now += 1;  // 2 s since the start, 2 s into the stage
    line.Bytes(50 << 20, 100 << 20, 4'000'000);
    EXPECT_EQ(out.str(),
              "\rpinscope report: replaying 50 of 100 MiB (50%), 25 MiB/s, 2.0 M events/s");
    out.str("");
    now += ProgressLine::kRedrawMs - 1;
    line.Bytes(60 << 20, 100 << 20, 5'000'000);
    EXPECT_EQ(out.str(), "") << "redrawn within " << ProgressLine::kRedrawMs << " ms";
    line.Bytes(100 << 20, 100 << 20, 6'000'000);  // the end of the stage: drawn now
    const std::string end =
        "\rpinscope report: replaying 100 of 100 MiB (100%), 45 MiB/s, "
        "2.7 M events/s";
    EXPECT_EQ(out.str(), end);
    out.str("");
    line.Stage("analysing");  // shorter: padded over the rest of the line before
    const std::string text = "pinscope report: analysing (2.2 s)";
    EXPECT_EQ(out.str(), "\r" + text + std::string(end.size() - 1 - text.size(), ' '));
    out.str("");
  }
  EXPECT_EQ(out.str(), "\r" + std::string(34, ' ') + "\r") << "not erased at the end";
}

TEST(ProgressLineTest, NeverWiderThanAnEightyColumnTerminal) {
  uint64_t now = 0;
  std::ostringstream out;
  ProgressLine line("pinscope diff", &out, 0, [&] { return now; });
  line.Stage("replaying run A");
  now = 1000;
  line.Bytes(uint64_t{12345} << 20, uint64_t{23456} << 20, 3'000'000'000);
  const std::string full =
      "pinscope diff: replaying run A 12345 of 23456 MiB (52%), 12345 MiB/s, "
      "3000.0 M events/s";
  EXPECT_EQ(out.str().substr(out.str().rfind('\r')), "\r" + full.substr(0, 79));
}

TEST(ProgressLineTest, ShortCommandsDrawNothingAndClearNothing) {
  uint64_t now = 0;
  std::ostringstream out;
  {
    ProgressLine line("pinscope diff", &out, 2000, [&] { return now; });
    line.Stage("replaying run A");
    line.Bytes(1 << 20, 1 << 20, 10);
    now = 1500;
    line.Stage("writing");
  }
  EXPECT_EQ(out.str(), "");
}

TEST(ProgressLineTest, WritesThroughTheClearingBufferEraseTheLineFirst) {
  uint64_t now = 0;
  std::ostringstream terminal, report;
  ProgressLine line("pinscope export", &terminal, 0, [&] { return now; });
  ClearingBuf buffer(&line, report.rdbuf());
  std::ostream stream(&buffer);
  line.Stage("writing");
  ASSERT_TRUE(line.shown());
  stream << "wrote x.pftrace" << '\n';
  EXPECT_FALSE(line.shown());
  EXPECT_EQ(report.str(), "wrote x.pftrace\n");
  EXPECT_EQ(terminal.str(), "\rpinscope export: writing (0.0 s)\r" + std::string(32, ' ') + "\r");
}

TEST(ProgressLineTest, ShownOnATerminalOrWhenForced) {
  std::string warning;
  EXPECT_TRUE(WantProgress(nullptr, true, &warning));
  EXPECT_FALSE(WantProgress(nullptr, false, &warning));
  EXPECT_FALSE(WantProgress("", false, &warning));
  EXPECT_TRUE(WantProgress("1", false, &warning));
  EXPECT_FALSE(WantProgress("0", true, &warning));
  EXPECT_EQ(warning, "");
  EXPECT_TRUE(WantProgress("yes", true, &warning));
  EXPECT_EQ(warning, "PINSCOPE_PROGRESS=\"yes\" is not 0 or 1; ignored");
}

}  // namespace
}  // namespace pinscope::cli
