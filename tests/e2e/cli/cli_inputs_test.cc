// End-to-end tests of the `pinscope` binary on run folders a user or a long
// job can leave (issue 17): thousands of process files under a low fd limit,
// empty or corrupt calibration files, a FIFO named *.pstrace, escape bytes in
// a trace, truncated files and clocks that step back; the modes of the files
// it writes; and `pinscope run` refusing a bad PINSCOPE_* value before the
// job starts; the progress line of report, export and diff (on a terminal,
// forced, never in a pipe). Traces are written with the test TraceBuilder (the shim's
// framing); each command runs as its own process with a deadline, so a hang
// fails the test instead of ctest.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "analyzer/read/trace_reader.h"
#include "shim/record/trace_writer.h"
#include "tests/common/trace_bytes.h"
#include "trace_builder.h"

namespace pinscope {
namespace {

namespace fs = std::filesystem;
using testing::kMiBytes;
using testing::kMs;
using testing::TraceBuilder;

constexpr uint64_t kT0 = 1000ull * 1000 * kMs;

struct Result {
  int status = 0;
  std::string out, err;
  bool exited(int code) const { return WIFEXITED(status) && WEXITSTATUS(status) == code; }
  std::string Describe() const {
    std::string s = WIFEXITED(status)     ? "exit " + std::to_string(WEXITSTATUS(status))
                    : WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status))
                                          : "?";
    return s + "\n--- stdout:\n" + out.substr(0, 4000) + "--- stderr:\n" + err.substr(0, 4000);
  }
};

struct Limits {
  rlim_t nofile = 0;  // 0: as inherited
  int timeout_ms = 60000;
  std::vector<std::pair<std::string, std::string>> env;
  bool stderr_terminal = false;  // stderr on a pseudo-terminal, read into Result::err
};

class CliInputsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "pinscope-inputs-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  // Runs `pinscope args...` in the temp folder, as from a plain shell with
  // umask 022 and none of pinscope's variables; kills it at the deadline.
  // $PINSCOPE_TEST_BIN runs them against another build (one from before a
  // fix, to see them fail).
  Result Run(const std::vector<std::string>& args, const Limits& limits = {}) {
    const char* other = std::getenv("PINSCOPE_TEST_BIN");
    std::vector<std::string> argv = {other != nullptr && *other ? other : PINSCOPE_BIN};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    const std::string out_path = Path(".stdout"), err_path = Path(".stderr");
    int terminal = -1;
    std::string terminal_name;
    if (limits.stderr_terminal) {
      terminal = posix_openpt(O_RDWR | O_NOCTTY | O_NONBLOCK);
      if (terminal < 0 || grantpt(terminal) != 0 || unlockpt(terminal) != 0) {
        ADD_FAILURE() << "no pseudo-terminal";
        return {};
      }
      terminal_name = ptsname(terminal);
    }
    const pid_t pid = fork();
    if (pid == 0) {
      for (const char* name :
           {"LD_PRELOAD", "PINSCOPE_OUT", "PINSCOPE_RUN_ID", "PINSCOPE_ROOT_PID", "PINSCOPE_PIN",
            "PINSCOPE_PIN_MIN", "NO_COLOR", "PINSCOPE_DISABLE"}) {
        unsetenv(name);
      }
      setenv("PINSCOPE_CALIBRATION", Path("no-calibration.json").c_str(), 1);
      for (const auto& [name, value] : limits.env) setenv(name.c_str(), value.c_str(), 1);
      umask(022);
      if (limits.nofile != 0) {
        struct rlimit limit = {limits.nofile, limits.nofile};
        if (setrlimit(RLIMIT_NOFILE, &limit) != 0) _exit(200);
      }
      if (chdir(dir_.c_str()) != 0) _exit(201);
      const int in = open("/dev/null", O_RDONLY);
      const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      const int err = limits.stderr_terminal
                          ? open(terminal_name.c_str(), O_RDWR | O_NOCTTY)
                          : open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (in < 0 || out < 0 || err < 0) _exit(202);
      dup2(in, 0);
      dup2(out, 1);
      dup2(err, 2);
      execv(cargv[0], cargv.data());
      _exit(203);
    }
    Result r;
    std::string terminal_text;
    const auto drain = [&] {
      char chunk[4096];
      ssize_t n;
      while (terminal >= 0 && (n = read(terminal, chunk, sizeof(chunk))) > 0) {
        terminal_text.append(chunk, static_cast<size_t>(n));
      }
    };
    bool done = false;
    for (int waited = 0; waited < limits.timeout_ms; waited += 5) {
      drain();  // a full terminal would block the command
      if (waitpid(pid, &r.status, WNOHANG) == pid) {
        done = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (!done) {
      kill(pid, SIGKILL);
      waitpid(pid, &r.status, 0);
      ADD_FAILURE() << "pinscope " << args[0] << " did not finish in " << limits.timeout_ms
                    << " ms";
    }
    r.out = testing::ReadFile(out_path);
    if (terminal >= 0) {
      drain();
      close(terminal);
      r.err = terminal_text;
    } else {
      r.err = testing::ReadFile(err_path);
    }
    return r;
  }

  // A small run: the root and `workers` forked workers, each making one
  // 4 MiB pageable copy; workers live 1 ms each, one after the other.
  std::string WriteRun(const std::string& name, int workers) {
    const std::string run = Path(name);
    fs::create_directories(run);
    TraceBuilder root(1000, "long-job", kT0);
    root.Copy(kT0 + 5 * kMs, 2 * kMs, trace::H2D, trace::PAGEABLE, 4 * kMiBytes, 0x10000);
    for (int i = 0; i < workers; ++i) {
      const uint64_t start = kT0 + (10 + 2 * static_cast<uint64_t>(i)) * kMs;
      TraceBuilder worker(1001 + i, "long-job", start, trace::ORIGIN_FORK, 1000);
      worker.Copy(start + kMs / 2, kMs / 4, trace::H2D, trace::PAGEABLE, kMiBytes, 0x20000);
      worker.Exit(start + kMs);
      worker.Write(run);
    }
    root.Exit(kT0 + (20 + 2 * static_cast<uint64_t>(workers)) * kMs);
    root.Write(run);
    return run;
  }

  static nlohmann::json Json(const Result& r) {
    return nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  }

  std::string dir_;
};

// --- a long job's run folder ------------------------------------------------

// 3,001 process files with 256 fds allowed: every process counted, no
// "Too many open files" (the reader kept every file open: 2,700+ errors).
TEST_F(CliInputsTest, ThreeThousandProcessFilesUnderALowFdLimit) {
  const std::string run = WriteRun("long", 3000);
  Limits limits;
  limits.nofile = 256;
  Result r = Run({"report", "--json", run}, limits);
  ASSERT_TRUE(r.exited(0)) << r.Describe();
  const nlohmann::json report = Json(r);
  ASSERT_FALSE(report.is_discarded()) << r.out.substr(0, 2000);
  EXPECT_EQ(report["run"]["processes"], 3001);
  EXPECT_EQ(report["problems"].size(), 0u) << report["problems"].dump();
  EXPECT_EQ(report["copies"]["total"]["count"], 3001) << report["copies"].dump();
  EXPECT_EQ(r.err, "");
  // The diff replays both folders, one after the other, under the same limit.
  r = Run({"diff", "--json", run, run}, limits);
  EXPECT_TRUE(r.exited(0)) << r.Describe();
}

// --- the progress line -----------------------------------------------------

// A line "\r<text><padding>" is drawn over itself; "\r<spaces>\r" erases it.
bool EndsErased(const std::string& err) {
  const size_t last = err.find_last_not_of(' ', err.size() - 2);
  return err.size() > 2 && err.back() == '\r' && last != std::string::npos && err[last] == '\r' &&
         last < err.size() - 2;
}

// Forced (PINSCOPE_PROGRESS=1) and drawn at once (the 2 s lowered to 0): the
// stages on stderr, erased at the end; stdout and the written files are
// byte for byte those of a run without it.
TEST_F(CliInputsTest, ForcedProgressLineIsOnStderrOnlyAndErasedAtTheEnd) {
  const std::string run = WriteRun("progress", 3);
  Limits forced;
  forced.env = {{"PINSCOPE_PROGRESS", "1"}, {"PINSCOPE_PROGRESS_AFTER_MS", "0"}};
  struct Case {
    std::vector<std::string> args;
    std::string file;  // written by the command, compared too
    std::vector<std::string> stages;
  };
  const std::vector<Case> cases = {
      {{"report", run}, "", {"reading the run folder", "replaying 0.0 of", "(100%)", "analysing"}},
      {{"report", "--json", run}, "", {"replaying", "(100%)", "writing"}},
      {{"report", "--html", "page.html", run}, "page.html", {"replaying", "writing"}},
      {{"export", "--perfetto", "t.pftrace", run}, "t.pftrace", {"replaying", "(100%)", "writing"}},
      {{"diff", run, run},
       "",
       {"replaying run A", "replaying run B", "analysing run B", "writing"}},
  };
  for (const Case& c : cases) {
    const std::string what = c.args[0] + " " + c.args[1];
    const Result plain = Run(c.args);
    ASSERT_TRUE(plain.exited(0)) << what << plain.Describe();
    const std::string plain_file = c.file.empty() ? "" : testing::ReadFile(Path(c.file));
    const Result shown = Run(c.args, forced);
    ASSERT_TRUE(shown.exited(0)) << what << shown.Describe();
    EXPECT_EQ(shown.out, plain.out) << what;
    if (!c.file.empty()) {
      EXPECT_EQ(testing::ReadFile(Path(c.file)), plain_file) << what;
    }
    EXPECT_EQ(plain.err.find('\r'), std::string::npos) << what << plain.Describe();
    const std::string prefix = "\rpinscope " + c.args[0] + ": ";
    for (const std::string& stage : c.stages) {
      EXPECT_NE(shown.err.find(stage), std::string::npos) << what << ": no '" << stage << "' in\n"
                                                          << shown.err;
    }
    EXPECT_EQ(shown.err.rfind(prefix, 0), 0u) << what << shown.err;
    EXPECT_TRUE(EndsErased(shown.err)) << what << ": not erased at the end:\n" << shown.err;
    EXPECT_EQ(shown.err.find('\n'), std::string::npos) << what << shown.err;
  }
}

// A warning printed while the line is shown erases it first.
TEST_F(CliInputsTest, AWarningNeverLandsOnTheProgressLine) {
  const std::string run = WriteRun("progress-warning", 1);
  testing::WriteFile(run + "/calibration.json", "");  // a warning, found after the line shows
  Limits forced;
  forced.env = {{"PINSCOPE_PROGRESS", "1"}, {"PINSCOPE_PROGRESS_AFTER_MS", "0"}};
  const Result r = Run({"report", "--json", run}, forced);
  ASSERT_TRUE(r.exited(0)) << r.Describe();
  const size_t warning = r.err.find("pinscope report: warning: ");
  ASSERT_NE(warning, std::string::npos) << r.err;
  // Just before the warning: the erasing "\r<spaces>\r".
  ASSERT_GT(warning, 2u);
  EXPECT_EQ(r.err[warning - 1], '\r') << r.err;
  EXPECT_EQ(r.err[warning - 2], ' ') << r.err;
}

// Without a terminal and without PINSCOPE_PROGRESS=1, nothing (the 2 s
// lowered to 0 changes nothing); on a terminal it shows, and
// PINSCOPE_PROGRESS=0 turns it off there.
TEST_F(CliInputsTest, ProgressLineOnATerminalOnly) {
  const std::string run = WriteRun("progress-terminal", 1);
  Limits pipe;
  pipe.env = {{"PINSCOPE_PROGRESS_AFTER_MS", "0"}};
  Result r = Run({"report", "--json", run}, pipe);
  ASSERT_TRUE(r.exited(0)) << r.Describe();
  EXPECT_EQ(r.err, "");
  Limits terminal = pipe;
  terminal.stderr_terminal = true;
  r = Run({"report", "--json", run}, terminal);
  ASSERT_TRUE(r.exited(0)) << r.Describe();
  EXPECT_NE(r.err.find("\rpinscope report: replaying"), std::string::npos) << r.err;
  EXPECT_TRUE(EndsErased(r.err)) << r.err;
  terminal.env.emplace_back("PINSCOPE_PROGRESS", "0");
  r = Run({"report", "--json", run}, terminal);
  ASSERT_TRUE(r.exited(0)) << r.Describe();
  EXPECT_EQ(r.err, "");
}

// --- calibration files ------------------------------------------------------

TEST_F(CliInputsTest, EmptyOrCorruptCalibrationIsAWarningAndTheReportGoesOn) {
  const std::string run = WriteRun("run", 2);
  const std::string cache = Path("cache/calibration.json");
  fs::create_directories(Path("cache"));
  testing::WriteFile(cache, "");
  Limits limits;
  limits.env = {{"PINSCOPE_CALIBRATION", cache}};
  Result r = Run({"report", "--json", run}, limits);
  ASSERT_TRUE(r.exited(0)) << r.Describe();
  EXPECT_EQ(r.err, "pinscope report: warning: calibration " + cache +
                       ": empty (0 bytes); the built-in table is used instead\n");
  nlohmann::json report = Json(r);
  EXPECT_EQ(report["calibration"]["source"],
            "built-in default: H200 PCIe Gen5 x16, pinscope facts 2026-11-29 (" + cache +
                " is unusable)");
  r = Run({"report", "--no-color", run}, limits);
  EXPECT_TRUE(r.exited(0)) << r.Describe();
  EXPECT_NE(r.out.find("Verdict"), std::string::npos) << r.out;

  // The run folder's own file, corrupt: the same, for report and diff.
  testing::WriteFile(run + "/calibration.json", "{\"version\": 1, \"points\": [{\"bytes\": ");
  r = Run({"report", "--json", run}, limits);
  ASSERT_TRUE(r.exited(0)) << r.Describe();
  EXPECT_EQ(r.err, "pinscope report: warning: calibration " + run +
                       "/calibration.json: not valid JSON; the built-in table is used instead\n");
  r = Run({"diff", "--no-color", run, run}, limits);
  EXPECT_TRUE(r.exited(0)) << r.Describe();
  EXPECT_NE(r.err.find("pinscope diff: warning: calibration " + run +
                       "/calibration.json: not valid JSON; the built-in table is used instead\n"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("verdict: "), std::string::npos) << r.out;
  // Named with --calibration, the file is what was asked for: an error.
  r = Run({"report", "--calibration", cache, run}, limits);
  EXPECT_TRUE(r.exited(2)) << r.Describe();
  EXPECT_EQ(r.err, "pinscope report: calibration " + cache + ": empty (0 bytes)\n");
}

#ifdef COPY_JOB
// `pinscope run` with an empty saved calibration still prints the report.
TEST_F(CliInputsTest, RunPrintsItsReportDespiteAnEmptyCalibration) {
  const std::string cache = Path("calibration.json");
  testing::WriteFile(cache, "");
  Limits limits;
  limits.env = {{"PINSCOPE_CALIBRATION", cache}};
  Result r = Run({"run", "-o", "copies", "--", COPY_JOB, "3"}, limits);
  EXPECT_TRUE(r.exited(3)) << r.Describe();
  EXPECT_NE(r.err.find("Verdict"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("pinscope report: warning: calibration " + cache +
                       ": empty (0 bytes); the built-in table is used instead"),
            std::string::npos)
      << r.err;
}
#endif

// --- what a run folder can hold ---------------------------------------------

// A FIFO named like a trace: skipped with a warning, never opened for a
// read that waits for a writer (report, export and diff hung).
TEST_F(CliInputsTest, FifoNamedLikeATraceIsSkipped) {
  const std::string run = WriteRun("run", 1);
  ASSERT_EQ(mkfifo((run + "/4242.pstrace").c_str(), 0600), 0);
  Limits limits;
  limits.timeout_ms = 20000;
  const std::string warning =
      "warning: file " + run + "/4242.pstrace: is a FIFO, not a regular file: skipped\n";
  Result r = Run({"report", "--json", run}, limits);
  EXPECT_TRUE(r.exited(1)) << r.Describe();
  EXPECT_EQ(r.err, "pinscope report: " + warning);
  EXPECT_EQ(Json(r)["run"]["processes"], 2);
  r = Run({"export", "--perfetto", Path("t.pftrace"), run}, limits);
  EXPECT_TRUE(r.exited(1)) << r.Describe();
  EXPECT_EQ(r.err, "pinscope export: " + warning);
  r = Run({"diff", "--json", run, run}, limits);
  EXPECT_TRUE(r.exited(1)) << r.Describe();
  EXPECT_NE(r.err.find("pinscope diff: " + warning), std::string::npos) << r.err;
}

// Escape sequences in a trace (run id, command line, thread name, Python
// frame) reach the text report as visible \xHH; the JSON keeps them exact.
TEST_F(CliInputsTest, EscapeBytesFromATraceAreSanitizedInText) {
  const std::string run = Path("run");
  fs::create_directories(run);
  const std::string run_id = "r\x1b]0;owned\x07";
  // \xc2\x9b: U+009B, the C1 CSI (the trace's strings are UTF-8).
  const std::string arg = "train.py\x1b[2J\x1b[H\r\xc2\x9b";
  TraceBuilder root(100, run_id, kT0);
  root.header().clear_cmdline();
  root.header().add_cmdline("python");
  root.header().add_cmdline(arg);
  root.Thread(kT0 + 1, 101, "pin\x1b[31m\x08");
  root.Copy(kT0 + 2 * kMs, kMs, trace::H2D, trace::PAGEABLE, 4 * kMiBytes, 0x10000, 101);
  root.Exit(kT0 + 10 * kMs);
  root.Write(run);
  Result r = Run({"report", "--color=always", run});
  ASSERT_TRUE(r.exited(0)) << r.Describe();
  // Only the report's own colour codes: ESC [ digits m.
  for (size_t at = r.out.find('\x1b'); at != std::string::npos; at = r.out.find('\x1b', at + 1)) {
    const size_t end = r.out.find_first_not_of("0123456789;", at + 2);
    ASSERT_TRUE(r.out.compare(at, 2, "\x1b[") == 0 && end != std::string::npos && r.out[end] == 'm')
        << "raw escape at " << at << ": " << r.out.substr(at, 20);
  }
  EXPECT_EQ(r.out.find("\x1b]"), std::string::npos);
  EXPECT_EQ(r.out.find("\x1b[2J"), std::string::npos);
  EXPECT_EQ(r.out.find('\x07'), std::string::npos);
  EXPECT_EQ(r.out.find('\r'), std::string::npos);
  EXPECT_NE(r.out.find("train.py\\x1b[2J\\x1b[H\\x0d\\xc2\\x9b"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("r\\x1b]0;owned\\x07"), std::string::npos) << r.out;
  r = Run({"report", "--no-color", run});
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos);
  r = Run({"report", "--json", run});
  ASSERT_TRUE(r.exited(0)) << r.Describe();
  const nlohmann::json report = Json(r);
  EXPECT_EQ(report["run"]["run_id"], run_id);
  EXPECT_EQ(report["run"]["command"][1], arg);
}

// Bytes that are not UTF-8 in a trace written by an older shim (which copied
// argv and names as they were): the header and thread packets used to fail
// protobuf's parse and the whole file was lost. Now read, the bytes shown as
// \xHH in the text and the JSON, the copy counted.
TEST_F(CliInputsTest, InvalidUtf8FromAnOlderShimIsReadWithTheBytesVisible) {
  const std::string run = Path("run");
  fs::create_directories(run);
  TraceBuilder root(100, "r1", kT0);
  root.header().clear_cmdline();
  root.header().add_cmdline("python");
  root.header().add_cmdline("train\xff\xfe.py");
  root.header().set_exe("/opt/\xc3(bin");
  root.Thread(kT0 + 1, 101, "worker\xe2\x82");  // a name cut mid-character
  root.Copy(kT0 + 2 * kMs, kMs, trace::H2D, trace::PAGEABLE, 4 * kMiBytes, 0x10000, 101);
  root.Exit(kT0 + 10 * kMs);
  root.Write(run);
  Result r = Run({"report", "--json", run});
  ASSERT_TRUE(r.exited(0)) << r.Describe();
  EXPECT_EQ(r.err, "");
  const nlohmann::json report = Json(r);
  EXPECT_EQ(report["run"]["processes"], 1);
  EXPECT_EQ(report["run"]["command"][1], "train\\xff\\xfe.py");
  EXPECT_EQ(report["copies"]["total"]["count"], 1);
  EXPECT_EQ(report["processes"][0]["exe"], "/opt/\\xc3(bin");
  r = Run({"report", "--no-color", run});
  ASSERT_TRUE(r.exited(0)) << r.Describe();
  EXPECT_NE(r.out.find("train\\xff\\xfe.py"), std::string::npos) << r.out;
}

#ifdef COPY_JOB
// A job exec'd with an argument that is not UTF-8, under the preload: the
// shim writes the bytes as \xHH (it wrote '?' before, and older shims the raw
// bytes, which lost the file), and the report counts the job's two copies.
TEST_F(CliInputsTest, InvalidUtf8InAJobsCommandLineIsRecordedVisibly) {
  Result r = Run({"run", "-o", "bad", "--", COPY_JOB, "0", "in\xff\xfeput"});
  ASSERT_TRUE(r.exited(0)) << r.Describe();
  EXPECT_NE(r.err.find("in\\xff\\xfeput"), std::string::npos) << r.err;
  r = Run({"report", "--json", Path("bad")});
  ASSERT_TRUE(r.exited(0)) << r.Describe();
  const nlohmann::json report = Json(r);
  EXPECT_EQ(report["run"]["processes"], 1);
  EXPECT_EQ(report["run"]["command"][2], "in\\xff\\xfeput");
  EXPECT_EQ(report["copies"]["total"]["count"], 2);
}
#endif

// An UNREGISTER that CUDA refused (its error recorded) unpinned nothing: the
// report counts it apart, says which error, and how many bytes stayed
// pinned; a later successful UNREGISTER of the block gives them back.
TEST_F(CliInputsTest, FailedUnregisterLeavesItsBytesPinnedInTheReport) {
  const std::string run = Path("run");
  fs::create_directories(run);
  TraceBuilder root(100, "r1", kT0);
  uint64_t t = kT0;
  const auto pin = [&](trace::PinOp op, uint64_t address, uint64_t size, int32_t result,
                       const std::string& reason, uint64_t pinned_after) {
    trace::PinEvent* p = root.Add(t += kMs, 100).mutable_pin();
    p->set_op(op);
    p->set_address(address);
    p->set_size(size);
    p->set_result(result);
    p->set_reason(reason);
    p->set_pinned_bytes(pinned_after);
  };
  pin(trace::REGISTER, 0x100000, 4 * kMiBytes, 0, "malloc", 4 * kMiBytes);
  pin(trace::UNREGISTER, 0x100000, 4 * kMiBytes, 999, "free", 4 * kMiBytes);  // stays
  pin(trace::REGISTER, 0x900000, 8 * kMiBytes, 0, "malloc", 12 * kMiBytes);
  pin(trace::UNREGISTER, 0x900000, 8 * kMiBytes, 0, "free", 4 * kMiBytes);
  pin(trace::REGISTER, 0x2000000, 2 * kMiBytes, 0, "malloc", 6 * kMiBytes);
  pin(trace::UNREGISTER, 0x2000000, 2 * kMiBytes, 999, "fork", 6 * kMiBytes);
  pin(trace::UNREGISTER, 0x2000000, 2 * kMiBytes, 0, "program_register", 4 * kMiBytes);
  root.Copy(t += kMs, kMs, trace::H2D, trace::PAGEABLE, 4 * kMiBytes, 0x4000000, 100);
  root.Exit(t += kMs);
  root.Write(run);
  Result r = Run({"report", "--json", run});
  ASSERT_TRUE(r.exited(0)) << r.Describe();
  const nlohmann::json pinning = Json(r)["pinning"];
  EXPECT_EQ(pinning["failed_unregisters"], 2) << pinning.dump();
  EXPECT_EQ(pinning["failed_unregister_errors"], nlohmann::json({{"999", 2}})) << pinning.dump();
  EXPECT_EQ(pinning["stayed_pinned_bytes"], 4 * kMiBytes);
  EXPECT_EQ(pinning["unpin_reasons"], nlohmann::json({{"free", 1}, {"program_register", 1}}));
  EXPECT_EQ(pinning["peak_pinned_bytes"], 12 * kMiBytes);
  r = Run({"report", "--no-color", run});
  ASSERT_TRUE(r.exited(0)) << r.Describe();
  EXPECT_NE(r.out.find("2 unregistrations failed (CUDA error 999): 4.0 MiB stayed pinned."),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("Unpinned 2: 1 free, 1 program_register."), std::string::npos) << r.out;
  // The refused "fork" unregister left the block pinned: no fork cost.
  EXPECT_EQ(r.out.find("costly forks"), std::string::npos) << r.out;
}

// A truncated file: exit 1 and the problem on stderr (docs/cli.md), with
// everything before the cut reported.
TEST_F(CliInputsTest, TruncatedFileExitsOneWithTheProblemOnStderr) {
  const std::string run = WriteRun("run", 1);
  const std::string file = run + "/1001.pstrace";
  const std::string bytes = testing::ReadFile(file);
  testing::WriteFile(file, bytes.substr(0, bytes.size() - 3));
  for (const char* format : {"--json", "--no-color"}) {
    Result r = Run({"report", format, run});
    EXPECT_TRUE(r.exited(1)) << format << ": " << r.Describe();
    EXPECT_NE(r.err.find("pinscope report: warning: file " + file + ": truncated after byte "),
              std::string::npos)
        << format << ": " << r.err;
  }
  Result r = Run({"report", "--json", run});
  EXPECT_EQ(Json(r)["run"]["processes"], 2);
  r = Run({"export", "--perfetto", Path("t.pftrace"), run});
  EXPECT_TRUE(r.exited(1)) << r.Describe();
}

// Clocks that step back: a copy, a sync and a device copy whose end precedes
// their start are taken as 0 long (never a wrapped 18446744073 s) and
// counted as a problem of their file.
TEST_F(CliInputsTest, IntervalsEndingBeforeTheyStartAreClampedAndCounted) {
  const std::string run = Path("run");
  fs::create_directories(run);
  TraceBuilder root(100, "r", kT0 + 3600ull * 1000 * kMs);
  const uint64_t t = kT0 + 3600ull * 1000 * kMs;
  for (int i = 0; i < 8; ++i) {
    const uint64_t at = t + (1 + static_cast<uint64_t>(i)) * 10 * kMs;
    trace::TracePacket& copy =
        root.Copy(at, kMs, trace::H2D, trace::PAGEABLE, 64 * kMiBytes, 0x10000);
    if (i == 3) copy.mutable_copy()->set_end_ns(at - 3384ull * 1000 * kMs);
    trace::TracePacket& device = root.Add(at + kMs);
    device.mutable_device()->set_kind(trace::ACT_MEMCPY);
    device.mutable_device()->set_direction(trace::H2D);
    device.mutable_device()->set_bytes(64 * kMiBytes);
    device.mutable_device()->set_start_ns(at);
    device.mutable_device()->set_end_ns(i == 5 ? at - 3384ull * 1000 * kMs : at + kMs / 2);
    trace::TracePacket& sync = root.Add(at + 2 * kMs);
    sync.mutable_sync()->set_end_ns(i == 6 ? kT0 : at + 3 * kMs);
  }
  root.Exit(t + 100 * kMs);
  root.Write(run);
  Result r = Run({"report", "--no-color", run});
  EXPECT_TRUE(r.exited(1)) << r.Describe();
  EXPECT_EQ(r.out.find("1844674"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("pinscope report: warning: file " + run +
                       "/100.pstrace: 3 intervals end before they start (1 copy, 1 sync, 1 "
                       "device activity): taken as 0 long"),
            std::string::npos)
      << r.err;
  r = Run({"report", "--json", run});
  EXPECT_TRUE(r.exited(1)) << r.Describe();
  EXPECT_EQ(r.out.find("1844674"), std::string::npos);
}

// --- files pinscope writes --------------------------------------------------

TEST_F(CliInputsTest, OutputFilesAreWrittenReadableByTheOwnerOnly) {
  const std::string run = WriteRun("run", 1);
  const auto mode = [](const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0 ? static_cast<int>(st.st_mode & 07777) : -1;
  };
  testing::WriteFile(Path("old.pftrace"), "x");
  ASSERT_EQ(chmod(Path("old.pftrace").c_str(), 0644), 0);
  for (const std::string name : {"t.pftrace", "t.pftrace.gz", "old.pftrace"}) {
    Result r = Run({"export", "--perfetto", Path(name), run});
    EXPECT_TRUE(r.exited(0)) << r.Describe();
    EXPECT_EQ(mode(Path(name)), 0600) << name;
  }
  Result r = Run({"report", "--html", Path("r.html"), run});
  EXPECT_TRUE(r.exited(0)) << r.Describe();
  EXPECT_EQ(mode(Path("r.html")), 0600);
}

// --- pinscope run checks the shim's variables first -------------------------

TEST_F(CliInputsTest, RunRefusesABadShimVariableBeforeStartingTheJob) {
  Limits limits;
  limits.env = {{"PINSCOPE_PIN_MIN", "lots"}, {"PINSCOPE_STACKS", "999"}};
  Result r = Run({"run", "-o", "out", "--", "/bin/sh", "-c", "touch started"}, limits);
  EXPECT_TRUE(r.exited(125)) << r.Describe();
  EXPECT_EQ(r.err,
            "pinscope run: PINSCOPE_STACKS=\"999\" is not a whole number from 0 to 256\n"
            "pinscope run: PINSCOPE_PIN_MIN=\"lots\" is not a size (use e.g. 1048576, 512K, 4M, "
            "2G)\n"
            "pinscope run: the job was not started (docs/environment.md)\n");
  EXPECT_FALSE(fs::exists(Path("started")));
  EXPECT_FALSE(fs::exists(Path("out")));
  // --pin sets PINSCOPE_PIN for the job: the environment's value is not used.
  limits.env = {{"PINSCOPE_PIN", "maybe"}};
  r = Run({"run", "--pin", "--no-report", "-o", "out", "--", "/bin/sh", "-c", "touch started"},
          limits);
  EXPECT_TRUE(r.exited(0)) << r.Describe();
  EXPECT_TRUE(fs::exists(Path("started")));
  r = Run({"run", "--no-report", "-o", "out2", "--", "/bin/sh", "-c", "exit 4"}, limits);
  EXPECT_TRUE(r.exited(125)) << r.Describe();
  EXPECT_EQ(r.err,
            "pinscope run: PINSCOPE_PIN=\"maybe\" is not 0, 1 or async\n"
            "pinscope run: the job was not started (docs/environment.md)\n");
}

// `pinscope tune` checks them the same way before its first trial: exit 125,
// each bad variable named, no trial run, no trial folder.
TEST_F(CliInputsTest, TuneRefusesABadShimVariableBeforeItsFirstTrial) {
  Limits limits;
  limits.env = {{"PINSCOPE_PIN_MIN", "lots"}, {"PINSCOPE_PIN", "maybe"}};
  Result r = Run({"tune", "-o", "out", "--", "/bin/sh", "-c", "touch started"}, limits);
  EXPECT_TRUE(r.exited(125)) << r.Describe();
  EXPECT_EQ(r.err,
            "pinscope tune: PINSCOPE_PIN=\"maybe\" is not 0, 1 or async\n"
            "pinscope tune: PINSCOPE_PIN_MIN=\"lots\" is not a size (use e.g. 1048576, 512K, 4M, "
            "2G)\n"
            "pinscope tune: no trial was started (docs/environment.md)\n");
  EXPECT_FALSE(fs::exists(Path("started")));
  EXPECT_FALSE(fs::exists(Path("out")));
}

// --- compressed traces (issue 18) -------------------------------------------

// `raw` (a plain trace) rewritten by the shim's own writer, compressed, one
// zstd frame per packet (a flush after each), as a long job's file is.
std::string CompressOneFramePerPacket(const std::string& raw, const std::string& scratch) {
  fs::create_directories(scratch);
  shim::TraceWriter writer;
  EXPECT_EQ(writer.Open(-1, scratch.c_str(), 7, /*compress=*/true), 0);
  const std::string path = writer.path();
  const auto* p = reinterpret_cast<const uint8_t*>(raw.data());
  size_t at = 0;
  while (at < raw.size()) {
    uint64_t length = 0;
    const int varint = DecodeVarint(p + at + 1, raw.size() - at - 1, &length);
    EXPECT_GT(varint, 0);
    const size_t packet = 1 + static_cast<size_t>(varint) + static_cast<size_t>(length);
    EXPECT_TRUE(writer.Append(p + at, packet));
    EXPECT_TRUE(writer.Flush());
    at += packet;
  }
  writer.CloseFile();
  std::string bytes = testing::ReadFile(path);
  fs::remove(path);
  return bytes;
}

// Where each zstd frame of a compressed trace begins (after the preamble).
std::vector<size_t> FrameOffsets(const std::string& file) {
  std::vector<size_t> offsets;
  size_t at = shim::kTracePreambleBytes;
  while (at < file.size()) {
    offsets.push_back(at);
    const size_t n = ZSTD_findFrameCompressedSize(file.data() + at, file.size() - at);
    if (ZSTD_isError(n)) break;
    at += n;
  }
  return offsets;
}

#ifdef COPY_JOB
// The same recorded job, read from its compressed files and from their
// decompressed packets: the text report and the JSON are the same bytes.
TEST_F(CliInputsTest, CompressedAndUncompressedTracesGiveByteIdenticalReports) {
  Limits limits;
  Result r = Run({"run", "-o", "job", "--", COPY_JOB, "0"}, limits);
  ASSERT_TRUE(r.exited(0)) << r.Describe();
  const std::string run = Path("job");
  int traces = 0;
  for (const auto& entry : fs::directory_iterator(run)) {
    if (entry.path().extension() != ".pstrace") continue;
    ++traces;
    EXPECT_TRUE(testing::IsCompressedTrace(testing::ReadFile(entry.path().string())))
        << entry.path();
  }
  ASSERT_GE(traces, 1);
  std::vector<std::string> compressed_out;
  for (const char* format : {"--no-color", "--json"}) {
    Result c = Run({"report", format, "job"});
    EXPECT_TRUE(c.exited(0)) << c.Describe();
    compressed_out.push_back(c.out);
  }
  EXPECT_EQ(Json(Run({"report", "--json", "job"}))["copies"]["total"]["count"], 2);
  // The same folder name, now holding each file's packets uncompressed.
  fs::rename(run, Path("job.zst"));
  fs::create_directories(run);
  for (const auto& entry : fs::directory_iterator(Path("job.zst"))) {
    const std::string bytes = testing::ReadFile(entry.path().string());
    const std::string to = run + "/" + entry.path().filename().string();
    testing::WriteFile(
        to, entry.path().extension() == ".pstrace" ? testing::TracePackets(bytes) : bytes);
    EXPECT_FALSE(testing::IsCompressedTrace(testing::ReadFile(to)));
  }
  size_t i = 0;
  for (const char* format : {"--no-color", "--json"}) {
    Result u = Run({"report", format, "job"});
    EXPECT_TRUE(u.exited(0)) << u.Describe();
    EXPECT_EQ(u.out, compressed_out[i++]) << format;
  }
  // PINSCOPE_COMPRESS=0: the plain packets, the first byte a packet's tag.
  limits.env.push_back({"PINSCOPE_COMPRESS", "0"});
  r = Run({"run", "-o", "plain", "--", COPY_JOB, "0"}, limits);
  ASSERT_TRUE(r.exited(0)) << r.Describe();
  for (const auto& entry : fs::directory_iterator(Path("plain"))) {
    if (entry.path().extension() != ".pstrace") continue;
    const std::string bytes = testing::ReadFile(entry.path().string());
    ASSERT_FALSE(bytes.empty());
    EXPECT_EQ(bytes[0], '\x0A') << entry.path();
  }
  EXPECT_EQ(Json(Run({"report", "--json", "plain"}))["copies"]["total"]["count"], 2);
}
#endif

// A compressed file cut mid-frame (a killed job): every whole frame's
// packets are read, and the report says and exits as for a plain file cut
// in its last packet.
TEST_F(CliInputsTest, CompressedFileCutMidFrameReportsAsAPlainFileCut) {
  const std::string plain_run = WriteRun("plain", 1);
  const std::string file = plain_run + "/1001.pstrace";
  const std::string raw = testing::ReadFile(file);
  const std::string compressed = CompressOneFramePerPacket(raw, Path("scratch"));
  const std::vector<size_t> frames = FrameOffsets(compressed);
  ASSERT_GE(frames.size(), 3u);
  testing::WriteFile(file, raw.substr(0, raw.size() - 3));
  const std::string zst_run = Path("zst");
  fs::create_directories(zst_run);
  testing::WriteFile(
      zst_run + "/1000.pstrace",
      CompressOneFramePerPacket(testing::ReadFile(plain_run + "/1000.pstrace"), Path("scratch")));
  const std::string zst_file = zst_run + "/1001.pstrace";
  testing::WriteFile(zst_file, compressed.substr(0, compressed.size() - 3));
  for (const char* format : {"--json", "--no-color"}) {
    Result plain = Run({"report", format, plain_run});
    Result zst = Run({"report", format, zst_run});
    EXPECT_TRUE(plain.exited(1)) << plain.Describe();
    EXPECT_TRUE(zst.exited(1)) << zst.Describe();
    EXPECT_NE(
        zst.err.find("pinscope report: warning: file " + zst_file + ": truncated after byte " +
                     std::to_string(frames.back()) + " (last zstd frame incomplete"),
        std::string::npos)
        << zst.err;
    if (std::string(format) == "--json") {
      EXPECT_EQ(Json(zst)["run"]["processes"], 2);
      EXPECT_EQ(Json(zst)["copies"], Json(plain)["copies"]);
    }
  }
}

// A damaged frame: an error naming the file and the frame's offset; the
// frames after it are still read (their copies counted), exit 1.
TEST_F(CliInputsTest, CorruptFrameIsNamedWithItsOffsetAndTheOtherFramesCount) {
  const std::string run = Path("run");
  fs::create_directories(run);
  TraceBuilder root(1000, "long-job", kT0);
  for (int i = 0; i < 3; ++i) {
    root.Copy(kT0 + (5 + 5 * static_cast<uint64_t>(i)) * kMs, 2 * kMs, trace::H2D, trace::PAGEABLE,
              4 * kMiBytes, 0x10000);
  }
  root.Exit(kT0 + 40 * kMs);
  const std::string raw = root.Bytes();
  std::string compressed = CompressOneFramePerPacket(raw, Path("scratch"));
  const std::vector<size_t> frames = FrameOffsets(compressed);
  // header, thread?, copies...: find the frame of the second copy by
  // decoding each frame alone.
  size_t copy_frames = 0, victim = 0, next = 0;
  for (size_t i = 0; i < frames.size(); ++i) {
    const size_t end = i + 1 < frames.size() ? frames[i + 1] : compressed.size();
    trace::TracePacket packet;
    const std::string one = testing::TracePackets(compressed.substr(0, shim::kTracePreambleBytes) +
                                                  compressed.substr(frames[i], end - frames[i]));
    ASSERT_TRUE(packet.ParseFromString(one.substr(5)));
    if (packet.has_copy() && ++copy_frames == 2) {
      victim = frames[i];
      next = end;
    }
  }
  ASSERT_EQ(copy_frames, 3u);
  compressed[victim + (next - victim) / 2] ^= 0x5A;  // inside the frame's block
  const std::string file = run + "/1000.pstrace";
  testing::WriteFile(file, compressed);
  Result r = Run({"report", "--json", run});
  EXPECT_TRUE(r.exited(1)) << r.Describe();
  EXPECT_NE(r.err.find("pinscope report: error: file " + file + ": corrupt zstd frame at byte " +
                       std::to_string(victim) + " ("),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("reading went on at the next frame, at byte " + std::to_string(next)),
            std::string::npos)
      << r.err;
  EXPECT_EQ(Json(r)["copies"]["total"]["count"], 2) << r.out;
}

}  // namespace
}  // namespace pinscope
