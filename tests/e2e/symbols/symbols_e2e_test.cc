// End to end: native frames named in `pinscope report`. Each test starts the
// real `pinscope run` on sym_job (LD_PRELOAD'ed shim, CUDA runtime test
// double), which dlopens a library made with or without debug info, and
// reads the report's call site (--json) by function name; then moves the run
// folder away from the binaries, or replaces the binary with another build.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "analyzer/symbols/symbols_file.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int MarkerLine(const std::string& path, const std::string& marker) {
  std::ifstream in(path);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n)
    if (line.find(marker) != std::string::npos) return n;
  return -1;
}

struct Result {
  int status = -1;
  std::string out;
  std::string err;
};

// Runs `pinscope ARGS` in `cwd` with a clean pinscope environment.
Result Pinscope(const std::vector<std::string>& args, const std::string& cwd) {
  const std::string out_path = cwd + "/.out", err_path = cwd + "/.err";
  pid_t pid = fork();
  if (pid == 0) {
    if (chdir(cwd.c_str()) != 0) _exit(120);
    for (const char* name : {"LD_PRELOAD", "PINSCOPE_OUT", "PINSCOPE_RUN_ID", "PINSCOPE_ROOT_PID",
                             "PINSCOPE_PIN", "PINSCOPE_DISABLE", "PINSCOPE_CUDART"}) {
      unsetenv(name);
    }
    setenv("PINSCOPE_LIB", PINSCOPE_SHIM, 1);
    setenv("PINSCOPE_CUPTI", "0", 1);
    setenv("PINSCOPE_CALIBRATION", (cwd + "/no-calibration.json").c_str(), 1);
    int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(out, 1);
    dup2(err, 2);
    std::vector<char*> argv{const_cast<char*>(PINSCOPE_BIN)};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(PINSCOPE_BIN, argv.data());
    _exit(127);
  }
  Result r;
  int status = 0;
  waitpid(pid, &status, 0);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = ReadFile(out_path);
  r.err = ReadFile(err_path);
  return r;
}

class SymbolsE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/pinscope-symbols-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // `pinscope run -o RUN -- sym_job LIB` with `library` copied to
  // DIR/bin/libsymcase.so first (so the test can move or replace it).
  std::string RunJob(const std::string& library) {
    fs::create_directories(dir_ + "/bin");
    lib_ = dir_ + "/bin/libsymcase.so";
    fs::copy_file(library, lib_, fs::copy_options::overwrite_existing);
    const std::string run = dir_ + "/run";
    Result r = Pinscope({"run", "--no-report", "-o", run, "--", SYM_JOB, lib_}, dir_);
    EXPECT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(fs::exists(run + "/symbols.pb")) << r.err;
    return run;
  }

  // The report's first call site, native frame (JSON).
  std::string NativeSite(const std::string& run, const std::string& symbols = "auto") {
    Result r = Pinscope({"report", "--json", "--symbols", symbols, run}, dir_);
    EXPECT_EQ(r.status, 0) << r.err;
    json report = json::parse(r.out, nullptr, false);
    if (report.is_discarded() || !report.contains("call_sites") || report["call_sites"].empty() ||
        !report["call_sites"][0]["native"].is_string()) {
      ADD_FAILURE() << "no native call site in\n" << r.out.substr(0, 2000) << r.err;
      return std::string();
    }
    return report["call_sites"][0]["native"].get<std::string>();
  }

  std::string dir_;
  std::string lib_;
};

const int kCopyLine = MarkerLine(SYM_SOURCE, "// @copy");

TEST_F(SymbolsE2E, DebugInfoGivesFunctionFileAndLine) {
  const std::string run = RunJob(SYM_LIB_DEBUG);
  ASSERT_GT(kCopyLine, 0);
  const std::string site = NativeSite(run);
  EXPECT_EQ(site.rfind("symcase::CopyBatch(int) at sym_lib.cc:" + std::to_string(kCopyLine) +
                           " (libsymcase.so+0x",
                       0),
            0u)
      << site;
  // The text report prints the same name.
  Result text = Pinscope({"report", "--no-color", run}, dir_);
  EXPECT_NE(text.out.find("symcase::CopyBatch(int) at sym_lib.cc:"), std::string::npos) << text.out;
  // Without names, the trace's own spelling.
  const std::string off = NativeSite(run, "off");
  EXPECT_EQ(off.rfind("libsymcase.so+0x", 0), 0u) << off;
  EXPECT_EQ(off.find("CopyBatch"), std::string::npos) << off;
}

TEST_F(SymbolsE2E, NoDebugInfoGivesTheDynamicSymbolWithoutALine) {
  const std::string run = RunJob(SYM_LIB_NODEBUG);
  const std::string site = NativeSite(run);
  EXPECT_EQ(site.rfind("symcase::CopyBatch(int) (libsymcase.so+0x", 0), 0u) << site;
  EXPECT_EQ(site.find(" at "), std::string::npos) << site;
}

TEST_F(SymbolsE2E, RunMovedAwayFromTheBinariesKeepsTheNames) {
  const std::string run = RunJob(SYM_LIB_DEBUG);
  const std::string moved = dir_ + "/elsewhere/run";
  fs::create_directories(dir_ + "/elsewhere");
  fs::rename(run, moved);
  fs::remove_all(dir_ + "/bin");  // the binary is gone: only the stored names remain
  for (const char* source : {"stored", "auto"}) {
    const std::string site = NativeSite(moved, source);
    EXPECT_EQ(site.rfind("symcase::CopyBatch(int) at sym_lib.cc:", 0), 0u)
        << source << ": " << site;
  }
  // Without the symbols file and without the binary: module+offset, no guess.
  fs::remove(moved + "/symbols.pb");
  const std::string bare = NativeSite(moved);
  EXPECT_EQ(bare.rfind("libsymcase.so+0x", 0), 0u) << bare;
}

TEST_F(SymbolsE2E, ChangedBinaryIsDetectedAndNotMisnamed) {
  const std::string run = RunJob(SYM_LIB_DEBUG);
  const std::string stored = ReadFile(run + "/symbols.pb");
  // Another build at the path the job loaded.
  fs::copy_file(SYM_LIB_OTHER, lib_, fs::copy_options::overwrite_existing);

  // The names stored when the job ended are still the right ones.
  EXPECT_EQ(NativeSite(run).rfind("symcase::CopyBatch(int) at sym_lib.cc:", 0), 0u);

  // On the spot (no symbols file): the build id differs, the file is not read.
  fs::remove(run + "/symbols.pb");
  std::string site = NativeSite(run);
  EXPECT_EQ(site.rfind("libsymcase.so+0x", 0), 0u) << site;
  EXPECT_NE(site.find("(binary differs from the run's)"), std::string::npos) << site;
  EXPECT_EQ(site.find("othercase"), std::string::npos) << site;

  // `pinscope symbolize` after the fact says so and stores it as changed.
  Result r = Pinscope({"symbolize", run}, dir_);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find("changed since the run (another build id; not named): " + lib_),
            std::string::npos)
      << r.err;
  pinscope::symbols::SymbolFile file;
  bool exists = false;
  ASSERT_TRUE(pinscope::ReadSymbolsFile(run + "/symbols.pb", &file, &exists).ok());
  bool found = false;
  for (const auto& module : file.modules()) {
    if (module.path() != lib_) continue;
    found = true;
    EXPECT_EQ(module.status(), pinscope::symbols::MODULE_CHANGED);
    EXPECT_EQ(module.frames_size(), 0);
    EXPECT_FALSE(module.build_id().empty());
  }
  EXPECT_TRUE(found);
  site = NativeSite(run, "stored");
  EXPECT_NE(site.find("(binary differs from the run's)"), std::string::npos) << site;
  EXPECT_EQ(site.find("othercase"), std::string::npos) << site;
  EXPECT_NE(stored, ReadFile(run + "/symbols.pb"));
}

TEST_F(SymbolsE2E, BadSymbolsFileIsNamedAndTheReportGoesOn) {
  const std::string run = RunJob(SYM_LIB_DEBUG);
  { std::ofstream(run + "/symbols.pb", std::ios::trunc) << "not a protobuf \xff\xff\xff"; }
  Result r = Pinscope({"report", "--json", run}, dir_);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.err.find(run + "/symbols.pb: not a pinscope symbols file"), std::string::npos)
      << r.err;
  // The binary is here: named on the spot.
  EXPECT_NE(r.out.find("symcase::CopyBatch(int) at sym_lib.cc:"), std::string::npos);

  pinscope::symbols::SymbolFile newer;
  newer.set_format_version(pinscope::kSymbolsFormatVersion + 1);
  ASSERT_TRUE(pinscope::WriteSymbolsFile(run + "/symbols.pb", newer).ok());
  r = Pinscope({"report", "--json", run}, dir_);
  EXPECT_NE(
      r.err.find("symbols format version " + std::to_string(pinscope::kSymbolsFormatVersion + 1) +
                 " is newer than this pinscope reads"),
      std::string::npos)
      << r.err;
}

TEST_F(SymbolsE2E, SymbolizeNeedsARunFolder) {
  Result r = Pinscope({"symbolize", dir_ + "/nothing"}, dir_);
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("nothing"), std::string::npos) << r.err;
}

}  // namespace
