// End-to-end tests of the `pinscope` binary: each test starts it as a user
// would (fork/exec, fresh temp folder as cwd, a clean environment) and
// asserts exit statuses, signal forwarding, the job's environment, run
// folders, the install tree and the calibrate error path. Jobs are small
// /bin/sh scripts; the real libpinscope.so is preloaded into them.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "analyzer/read/calibration.h"

namespace {

namespace fs = std::filesystem;
using Env = std::vector<std::pair<std::string, std::string>>;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string Real(const std::string& path) {
  char buf[PATH_MAX];
  return realpath(path.c_str(), buf) ? std::string(buf) : std::string();
}

bool WaitForFile(const std::string& path, int timeout_ms = 20000) {
  for (int waited = 0; waited < timeout_ms; waited += 10) {
    if (fs::exists(path)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

struct SpawnOptions {
  std::string cwd;
  Env env;                      // set in the child
  std::string controlling_tty;  // if set: new session with this tty as stdin
};

// Starts argv[0] (a path) with stdout/stderr to files; returns its pid.
pid_t Spawn(const std::vector<std::string>& argv, const SpawnOptions& options,
            const std::string& out_path, const std::string& err_path) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = fork();
  if (pid != 0) return pid;
  // As if started from a plain shell: default dispositions, nothing blocked,
  // none of the variables pinscope sets or reads.
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) signal(sig, SIG_DFL);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  for (const char* name :
       {"LD_PRELOAD", "PINSCOPE_LIB", "PINSCOPE_OUT", "PINSCOPE_RUN_ID", "PINSCOPE_ROOT_PID",
        "PINSCOPE_PIN", "PINSCOPE_CUDART", "NO_COLOR", "PINSCOPE_DISABLE"}) {
    unsetenv(name);
  }
  // Never read the user's own calibration.
  setenv("PINSCOPE_CALIBRATION", (options.cwd + "/no-calibration.json").c_str(), 1);
  for (const auto& [name, value] : options.env) setenv(name.c_str(), value.c_str(), 1);
  if (!options.cwd.empty() && chdir(options.cwd.c_str()) != 0) _exit(200);
  int in = open("/dev/null", O_RDONLY);
  if (!options.controlling_tty.empty()) {
    setsid();
    // A session leader opening a terminal makes it its controlling one, and
    // its process group the terminal's foreground group.
    in = open(options.controlling_tty.c_str(), O_RDWR);
    if (in < 0) _exit(201);
  }
  int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (in < 0 || out < 0 || err < 0) _exit(202);
  dup2(in, 0);
  dup2(out, 1);
  dup2(err, 2);
  execv(args[0], args.data());
  _exit(203);
}

// waitpid with a deadline: a hung launcher fails the test instead of ctest.
int WaitStatus(pid_t pid, int timeout_ms = 60000) {
  int status = 0;
  for (int waited = 0; waited < timeout_ms; waited += 5) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  ADD_FAILURE() << "process " << pid << " did not finish in time";
  return status;
}

struct Result {
  int status = 0;
  std::string out, err;
  bool exited(int code) const { return WIFEXITED(status) && WEXITSTATUS(status) == code; }
};

std::string Describe(const Result& r) {
  std::ostringstream s;
  if (WIFEXITED(r.status)) s << "exit " << WEXITSTATUS(r.status);
  if (WIFSIGNALED(r.status)) s << "signal " << WTERMSIG(r.status);
  s << "\n--- stdout:\n" << r.out << "--- stderr:\n" << r.err;
  return s.str();
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "pinscope-cli-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = Real(tmpl);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  std::string Path(const std::string& name) const { return dir_ + "/" + name; }

  pid_t Start(const std::vector<std::string>& args, Env env = {}, std::string bin = PINSCOPE_BIN,
              std::string tty = "") {
    std::vector<std::string> argv = {bin};
    argv.insert(argv.end(), args.begin(), args.end());
    SpawnOptions options{dir_, std::move(env), std::move(tty)};
    return Spawn(argv, options, Path(".stdout"), Path(".stderr"));
  }
  Result Finish(pid_t pid) {
    Result r;
    r.status = WaitStatus(pid);
    r.out = ReadFile(Path(".stdout"));
    r.err = ReadFile(Path(".stderr"));
    return r;
  }
  Result Run(const std::vector<std::string>& args, Env env = {}, std::string bin = PINSCOPE_BIN) {
    return Finish(Start(args, std::move(env), std::move(bin)));
  }

  // Run folders `pinscope run` made in the temp cwd.
  std::vector<std::string> RunFolders() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) {
      std::string name = e.path().filename().string();
      if (name.rfind("pinscope-", 0) == 0) out.push_back(name);
    }
    return out;
  }

  std::string dir_;
};

// --- exit status -----------------------------------------------------------

TEST_F(CliTest, TrueExitsZeroAndSaysNoTrace) {
  Result r = Run({"run", "--", "/bin/true"});
  ASSERT_TRUE(r.exited(0)) << Describe(r);
  std::vector<std::string> folders = RunFolders();
  ASSERT_EQ(folders.size(), 1u);
  EXPECT_EQ(folders[0].size(), std::string("pinscope-20261129-101500").size()) << folders[0];
  EXPECT_NE(r.err.find("no trace recorded in " + folders[0] +
                       ": the job made no CUDA call that pinscope records"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out, "");
}

TEST_F(CliTest, ExitCodePassesThrough) {
  Result r = Run({"run", "--", "/bin/sh", "-c", "exit 7"});
  EXPECT_TRUE(r.exited(7)) << Describe(r);
  r = Run({"run", "--no-report", "sh", "-c", "exit 255"});  // PATH lookup, no "--"
  EXPECT_TRUE(r.exited(255)) << Describe(r);
}

TEST_F(CliTest, JobKilledBySignalKillsLauncherTheSameWay) {
  for (int sig : {SIGTERM, SIGKILL, SIGINT}) {
    Result r = Run({"run", "--", "/bin/sh", "-c", "kill -" + std::to_string(sig) + " $$; sleep 5"});
    ASSERT_TRUE(WIFSIGNALED(r.status)) << Describe(r);
    EXPECT_EQ(WTERMSIG(r.status), sig) << Describe(r);
    EXPECT_NE(r.err.find("the job was killed by signal " + std::to_string(sig)), std::string::npos)
        << r.err;
    // The summary comes before the launcher dies.
    EXPECT_NE(r.err.find("no trace recorded"), std::string::npos) << r.err;
  }
}

TEST_F(CliTest, CommandNotFoundIs127) {
  Result r = Run({"run", "--", "no-such-command-pinscope-test", "arg"});
  EXPECT_TRUE(r.exited(127)) << Describe(r);
  EXPECT_NE(r.err.find("pinscope run: no-such-command-pinscope-test: command not found"),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(RunFolders().empty());  // nothing ran, nothing left behind
  r = Run({"run", "--", Path("missing/prog")});
  EXPECT_TRUE(r.exited(127)) << Describe(r);
  EXPECT_NE(r.err.find("cannot execute " + Path("missing/prog") + ": No such file or directory"),
            std::string::npos)
      << r.err;
}

TEST_F(CliTest, NotExecutableIs126) {
  std::ofstream(Path("script.sh")) << "#!/bin/sh\nexit 0\n";
  chmod(Path("script.sh").c_str(), 0644);
  Result r = Run({"run", "--", Path("script.sh")});
  EXPECT_TRUE(r.exited(126)) << Describe(r);
  EXPECT_NE(r.err.find("cannot execute " + Path("script.sh") + ": Permission denied"),
            std::string::npos)
      << r.err;
}

// --- signals ---------------------------------------------------------------

struct SignalCase {
  int sig;
  const char* name;
};
// Names the case in test listings (ctest names come from them).
void PrintTo(const SignalCase& c, std::ostream* os) { *os << "SIG" << c.name; }

class ForwardTest : public CliTest, public ::testing::WithParamInterface<SignalCase> {};

TEST_P(ForwardTest, SignalSentToLauncherReachesJob) {
  const SignalCase c = GetParam();
  // The job traps the signal, writes a marker and exits 0: the launcher must
  // forward it and must not die of it.
  const std::string script = std::string("trap 'echo ") + c.name + " >> marker; exit 0' " + c.name +
                             "; touch ready; while :; do sleep 0.05; done";
  pid_t launcher = Start({"run", "--no-report", "--", "/bin/sh", "-c", script});
  ASSERT_TRUE(WaitForFile(Path("ready"))) << ReadFile(Path(".stderr"));
  ASSERT_EQ(kill(launcher, c.sig), 0);
  Result r = Finish(launcher);
  EXPECT_TRUE(r.exited(0)) << Describe(r);
  EXPECT_EQ(ReadFile(Path("marker")), std::string(c.name) + "\n");
}

INSTANTIATE_TEST_SUITE_P(AllForwarded, ForwardTest,
                         ::testing::Values(SignalCase{SIGTERM, "TERM"}, SignalCase{SIGHUP, "HUP"},
                                           SignalCase{SIGQUIT, "QUIT"}, SignalCase{SIGUSR1, "USR1"},
                                           SignalCase{SIGUSR2, "USR2"}, SignalCase{SIGINT, "INT"},
                                           SignalCase{SIGCONT, "CONT"},
                                           SignalCase{SIGWINCH, "WINCH"}),
                         [](const ::testing::TestParamInfo<SignalCase>& info) {
                           return std::string(info.param.name);
                         });

TEST_F(CliTest, TerminalCtrlCReachesJobOnce) {
  int master = posix_openpt(O_RDWR | O_NOCTTY);
  ASSERT_GE(master, 0);
  ASSERT_EQ(grantpt(master), 0);
  ASSERT_EQ(unlockpt(master), 0);
  const std::string tty = ptsname(master);
  const std::string script =
      "trap 'echo INT >> marker' INT; trap 'exit 0' TERM; touch ready; "
      "while :; do sleep 0.05; done";
  pid_t launcher =
      Start({"run", "--no-report", "--", "/bin/sh", "-c", script}, {}, PINSCOPE_BIN, tty);
  ASSERT_TRUE(WaitForFile(Path("ready"))) << ReadFile(Path(".stderr"));
  // Ctrl-C: the terminal sends SIGINT (si_code SI_KERNEL) to its whole
  // foreground process group, launcher and job alike.
  ASSERT_EQ(write(master, "\x03", 1), 1);
  ASSERT_TRUE(WaitForFile(Path("marker")));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // room for a duplicate
  ASSERT_EQ(kill(launcher, SIGTERM), 0);                        // forwarded: the job exits 0
  Result r = Finish(launcher);
  close(master);
  EXPECT_TRUE(r.exited(0)) << Describe(r);       // the launcher survived Ctrl-C
  EXPECT_EQ(ReadFile(Path("marker")), "INT\n");  // once, not forwarded again
}

// --- the job's environment -------------------------------------------------

TEST_F(CliTest, UserLdPreloadIsKeptAfterTheShim) {
  Result r = Run({"run", "--", "/bin/sh", "-c", "printf %s \"$LD_PRELOAD\" > preload"},
                 {{"LD_PRELOAD", USER_PRELOAD}});
  ASSERT_TRUE(r.exited(0)) << Describe(r);
  EXPECT_EQ(ReadFile(Path("preload")), Real(PINSCOPE_SHIM) + ":" + USER_PRELOAD);
}

TEST_F(CliTest, BuildTreeFindsTheShimWithoutHelp) {
  Result r = Run({"run", "--", "/bin/sh", "-c", "printf %s \"$LD_PRELOAD\" > preload"});
  ASSERT_TRUE(r.exited(0)) << Describe(r);
  EXPECT_EQ(ReadFile(Path("preload")), Real(PINSCOPE_SHIM));
}

TEST_F(CliTest, JobEnvironment) {
  const std::string script =
      "printf '%s\\n' \"$PINSCOPE_OUT\" \"$PINSCOPE_RUN_ID\" \"$PINSCOPE_ROOT_PID\" $$ "
      "\"${PINSCOPE_PIN-unset}\" > env.txt";
  Result r = Run({"run", "-o", "runs/a", "--pin=async", "--", "/bin/sh", "-c", script});
  ASSERT_TRUE(r.exited(0)) << Describe(r);
  std::istringstream lines(ReadFile(Path("env.txt")));
  std::string out, run_id, root_pid, pid, pin;
  std::getline(lines, out);
  std::getline(lines, run_id);
  std::getline(lines, root_pid);
  std::getline(lines, pid);
  std::getline(lines, pin);
  EXPECT_EQ(out, Path("runs/a"));  // absolute
  EXPECT_FALSE(run_id.empty());
  EXPECT_EQ(root_pid, pid);  // the job's own pid
  EXPECT_EQ(pin, "async");

  r = Run({"run", "-o", "runs/b", "--pin", "--", "/bin/sh", "-c", script});
  ASSERT_TRUE(r.exited(0)) << Describe(r);
  std::istringstream lines2(ReadFile(Path("env.txt")));
  std::string run_id2;
  std::getline(lines2, out);
  std::getline(lines2, run_id2);
  for (int i = 0; i < 3; ++i) std::getline(lines2, pin);
  EXPECT_EQ(out, Path("runs/b"));
  EXPECT_NE(run_id2, run_id);  // fresh per run
  EXPECT_EQ(pin, "1");

  r = Run({"run", "-o", "runs/c", "--", "/bin/sh", "-c", script});
  ASSERT_TRUE(r.exited(0)) << Describe(r);
  std::istringstream lines3(ReadFile(Path("env.txt")));
  for (int i = 0; i < 5; ++i) std::getline(lines3, pin);
  EXPECT_EQ(pin, "unset");  // no --pin: the shim's default (off)

  r = Run({"run", "--pin=sometimes", "--", "/bin/true"});
  EXPECT_TRUE(r.exited(125)) << Describe(r);
  EXPECT_NE(r.err.find("--pin expects 1, async or 0, not 'sometimes'"), std::string::npos) << r.err;
}

TEST_F(CliTest, PinscopeLibOverrides) {
  fs::create_directories(Path("alt"));
  fs::copy_file(PINSCOPE_SHIM, Path("alt/libpinscope.so"));
  Result r = Run({"run", "--", "/bin/sh", "-c", "printf %s \"$LD_PRELOAD\" > preload"},
                 {{"PINSCOPE_LIB", Path("alt/libpinscope.so")}});
  ASSERT_TRUE(r.exited(0)) << Describe(r);
  EXPECT_EQ(ReadFile(Path("preload")), Path("alt/libpinscope.so"));
  r = Run({"run", "--", "/bin/true"}, {{"PINSCOPE_LIB", Path("nowhere/libpinscope.so")}});
  EXPECT_TRUE(r.exited(125)) << Describe(r);
  EXPECT_NE(r.err.find("PINSCOPE_LIB=" + Path("nowhere/libpinscope.so") + " is not a file"),
            std::string::npos)
      << r.err;
}

// --- run folders -----------------------------------------------------------

mode_t ModeOf(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & 07777;
}

TEST_F(CliTest, RunFoldersArePrivate) {
  Result r = Run({"run", "--", "/bin/true"});
  ASSERT_TRUE(r.exited(0)) << Describe(r);
  ASSERT_EQ(RunFolders().size(), 1u);
  EXPECT_EQ(ModeOf(Path(RunFolders()[0])), 0700u);
  r = Run({"run", "-o", "deep/er/run", "--", "/bin/true"});
  ASSERT_TRUE(r.exited(0)) << Describe(r);
  EXPECT_EQ(ModeOf(Path("deep/er/run")), 0700u);
  // Two runs in the same second get distinct folders.
  r = Run({"run", "--", "/bin/true"});
  ASSERT_TRUE(r.exited(0)) << Describe(r);
  r = Run({"run", "--", "/bin/true"});
  ASSERT_TRUE(r.exited(0)) << Describe(r);
  EXPECT_EQ(RunFolders().size(), 3u);
}

TEST_F(CliTest, FolderWithTracesNeedsForce) {
  fs::create_directories(Path("old"));
  std::ofstream(Path("old/4242.pstrace")) << "previous run";
  Result r = Run({"run", "-o", "old", "--", "/bin/true"});
  EXPECT_TRUE(r.exited(125)) << Describe(r);
  EXPECT_NE(r.err.find("old already holds 1 trace file(s) of an earlier run"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("--force"), std::string::npos) << r.err;
  r = Run({"run", "-f", "-o", "old", "--", "/bin/true"});
  EXPECT_TRUE(r.exited(0)) << Describe(r);
  EXPECT_NE(r.err.find("warning: old already holds 1 trace file(s)"), std::string::npos) << r.err;
  // The old file is untouched, and this run (no CUDA) added none.
  EXPECT_EQ(ReadFile(Path("old/4242.pstrace")), "previous run");
  EXPECT_NE(r.err.find("no trace recorded in old"), std::string::npos) << r.err;
}

TEST_F(CliTest, CalibrationIsCopiedIntoTheRun) {
  pinscope::Calibration c = pinscope::DefaultCalibration();
  c.source = "cli test";
  std::string error;
  ASSERT_TRUE(pinscope::SaveCalibration(c, Path("cal.json"), &error)) << error;
  Result r =
      Run({"run", "-o", "r1", "--", "/bin/true"}, {{"PINSCOPE_CALIBRATION", Path("cal.json")}});
  ASSERT_TRUE(r.exited(0)) << Describe(r);
  EXPECT_EQ(ReadFile(Path("r1/calibration.json")), ReadFile(Path("cal.json")));
  EXPECT_EQ(ModeOf(Path("r1/calibration.json")), 0600u);
  // An unreadable calibration is not copied, and said so.
  std::ofstream(Path("bad.json")) << "{ not json";
  r = Run({"run", "-o", "r2", "--", "/bin/true"}, {{"PINSCOPE_CALIBRATION", Path("bad.json")}});
  ASSERT_TRUE(r.exited(0)) << Describe(r);
  EXPECT_FALSE(fs::exists(Path("r2/calibration.json")));
  EXPECT_NE(r.err.find("ignoring the calibration " + Path("bad.json")), std::string::npos) << r.err;
}

// --- install tree ----------------------------------------------------------

TEST_F(CliTest, WorksFromTheInstallTree) {
  Result install =
      Run({"--install", BUILD_DIR, "--prefix", Path("prefix")}, {}, CMAKE_COMMAND_PATH);
  ASSERT_TRUE(install.exited(0)) << Describe(install);
  const std::string bin = Path(std::string("prefix/") + INSTALL_BINDIR + "/pinscope");
  const std::string lib = Path(std::string("prefix/") + INSTALL_LIBDIR + "/libpinscope.so");
  ASSERT_TRUE(fs::exists(bin));
  ASSERT_TRUE(fs::exists(lib));
  Result r =
      Run({"run", "--", "/bin/sh", "-c", "printf %s \"$LD_PRELOAD\" > preload; exit 3"}, {}, bin);
  EXPECT_TRUE(r.exited(3)) << Describe(r);
  EXPECT_EQ(ReadFile(Path("preload")), Real(lib));
  // The docs the messages name are installed, and the installed CLI names
  // them there; the build tree's names docs/ (issue 18).
  const std::string docs = Real(Path("prefix/share/doc/pinscope"));
  EXPECT_TRUE(fs::exists(docs + "/cli.md"));
  EXPECT_TRUE(fs::exists(docs + "/pinning.md"));
  EXPECT_TRUE(fs::exists(docs + "/python-hook.md"));
  r = Run({"help"}, {}, bin);
  EXPECT_NE(r.out.find("See " + docs + "/cli.md for every option"), std::string::npos) << r.out;
  r = Run({"help"});
  EXPECT_NE(r.out.find("See docs/cli.md for every option"), std::string::npos) << r.out;
}

TEST_F(CliTest, FindsTheShimInAMultiarchLibdir) {
  fs::create_directories(Path("usr/bin"));
  fs::create_directories(Path("usr/lib/x86_64-linux-gnu"));
  fs::copy_file(PINSCOPE_BIN, Path("usr/bin/pinscope"));
  fs::copy_file(PINSCOPE_SHIM, Path("usr/lib/x86_64-linux-gnu/libpinscope.so"));
  Result r = Run({"run", "--", "/bin/sh", "-c", "printf %s \"$LD_PRELOAD\" > preload"}, {},
                 Path("usr/bin/pinscope"));
  ASSERT_TRUE(r.exited(0)) << Describe(r);
  EXPECT_EQ(ReadFile(Path("preload")), Path("usr/lib/x86_64-linux-gnu/libpinscope.so"));
  // Without the library anywhere near: a clear error, not a job run untraced.
  fs::remove(Path("usr/lib/x86_64-linux-gnu/libpinscope.so"));
  r = Run({"run", "--", "/bin/true"}, {}, Path("usr/bin/pinscope"));
  EXPECT_TRUE(r.exited(125)) << Describe(r);
  EXPECT_NE(r.err.find("cannot find libpinscope.so next to this executable"), std::string::npos)
      << r.err;
}

// --- other subcommands: argument checks ------------------------------------

TEST_F(CliTest, ReportOnMissingFolder) {
  Result r = Run({"report", Path("nope")});
  EXPECT_TRUE(r.exited(2)) << Describe(r);
  EXPECT_NE(r.err.find("no such run folder: " + Path("nope")), std::string::npos) << r.err;
  r = Run({"diff", Path("nope"), dir_});
  EXPECT_TRUE(r.exited(2)) << Describe(r);
  EXPECT_NE(r.err.find("no such run folder: " + Path("nope")), std::string::npos) << r.err;
  r = Run({"export", "--perfetto", Path("x.pftrace"), Path("nope")});
  EXPECT_TRUE(r.exited(2)) << Describe(r);
  EXPECT_NE(r.err.find("no such run folder: " + Path("nope")), std::string::npos) << r.err;
}

// --html FILE: the page goes to the file, nothing to stdout; a file that
// cannot be written is exit 2 with the reason.
TEST_F(CliTest, ReportHtmlWritesThePage) {
  const std::string run = std::string(PINSCOPE_TEST_DATA_DIR) + "/h200/pipeline/imagenet";
  Result r =
      Run({"report", "--html", Path("page.html"), "--calibration", run + "/calibration.json", run});
  EXPECT_TRUE(r.exited(0)) << Describe(r);
  EXPECT_EQ(r.out, "");
  const std::string page = ReadFile(Path("page.html"));
  EXPECT_EQ(page.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(page.find("data-verdict=\"input_starvation\""), std::string::npos);
  EXPECT_NE(page.find("<svg id=\"timeline-chart\""), std::string::npos);
  r = Run({"report", "--html", Path("no/such/folder/page.html"), run});
  EXPECT_TRUE(r.exited(2)) << Describe(r);
  EXPECT_NE(r.err.find("cannot write " + Path("no/such/folder/page.html")), std::string::npos)
      << r.err;
}

TEST_F(CliTest, BadNumbersAreNamed) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  const Case cases[] = {
      {{"report", "--top", "abc", "."}, "--top expects a whole number from 1 to 100000, not 'abc'"},
      {{"report", "--top=0", "."}, "--top expects a whole number from 1 to 100000, not '0'"},
      {{"report", "--stacks", "-1", "."},
       "--stacks expects a whole number from 0 to 256, not '-1'"},
      {{"report", "--stacks", "7x", "."}, "not '7x'"},
      {{"report", "--color=sometimes", "."}, "--color expects auto, always or never"},
      {{"report", "--frobnicate", "."}, "unknown option --frobnicate"},
      {{"report", "--top"}, "option --top needs a value"},
      {{"report"}, "no run folder given"},
      {{"report", "a", "b"}, "one run folder at a time"},
      {{"report", "--html"}, "option --html needs a value"},
      {{"report", "--json", "--html", "x.html", "."}, "--json and --html are two reports"},
      {{"calibrate", "--repeats", "0"}, "--repeats expects a whole number from 1 to 1000, not '0'"},
      {{"calibrate", "--sizes", "1M,big"}, "'big' is not a size above 0"},
      {{"calibrate", "--device", "x"}, "not 'x'"},
      {{"export", "."}, "--perfetto FILE"},
      {{"diff", "."}, "needs two run folders"},
      {{"frob"}, "unknown command 'frob'"},
      {{"help", "frob"}, "unknown command 'frob'"},
  };
  for (const Case& c : cases) {
    Result r = Run(c.args);
    EXPECT_TRUE(r.exited(2)) << c.args[0] << " " << Describe(r);
    EXPECT_NE(r.err.find(c.message), std::string::npos) << "expected: " << c.message << "\n"
                                                        << r.err;
  }
  Result r = Run({"run"});
  EXPECT_TRUE(r.exited(125)) << Describe(r);
  EXPECT_NE(r.err.find("no command given"), std::string::npos) << r.err;
  r = Run({"run", "--bogus", "--", "/bin/true"});
  EXPECT_TRUE(r.exited(125)) << Describe(r);
  EXPECT_NE(r.err.find("unknown option --bogus"), std::string::npos) << r.err;
  r = Run({"run", "-o"});
  EXPECT_TRUE(r.exited(125)) << Describe(r);
  EXPECT_NE(r.err.find("option -o needs a value"), std::string::npos) << r.err;
  EXPECT_TRUE(RunFolders().empty());
}

TEST_F(CliTest, HelpAndVersion) {
  Result r = Run({"--version"});
  EXPECT_TRUE(r.exited(0)) << Describe(r);
  EXPECT_EQ(r.out.rfind("pinscope ", 0), 0u) << r.out;
  r = Run({"help"});
  EXPECT_TRUE(r.exited(0)) << Describe(r);
  for (const char* cmd : {"run", "report", "export", "diff", "calibrate"}) {
    EXPECT_NE(r.out.find(std::string("  ") + cmd + " "), std::string::npos) << cmd;
    Result h = Run({"help", cmd});
    EXPECT_TRUE(h.exited(0)) << Describe(h);
    EXPECT_EQ(h.out.rfind(std::string("Usage: pinscope ") + cmd, 0), 0u) << h.out;
    Result h2 = Run({cmd, "--help"});
    EXPECT_EQ(h2.out, h.out);
  }
  r = Run({});
  EXPECT_TRUE(r.exited(2)) << Describe(r);
  EXPECT_NE(r.err.find("Usage: pinscope COMMAND"), std::string::npos) << r.err;
  // A job's own --help is the job's: options stop at the command.
  r = Run({"run", "--no-report", "/bin/sh", "-c", "exit 4", "--help"});
  EXPECT_TRUE(r.exited(4)) << Describe(r);
}

// --- calibrate -------------------------------------------------------------

TEST_F(CliTest, CalibrateWithoutRuntimeExits2) {
  Result r = Run({"calibrate", "--cudart", Path("nowhere/libcudart.so.13"), "-o", Path("c.json")});
  EXPECT_TRUE(r.exited(2)) << Describe(r);
  EXPECT_NE(r.err.find("pinscope calibrate: no CUDA runtime / GPU found ("), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(Path("nowhere/libcudart.so.13")), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(Path("c.json")));
  r = Run({"calibrate", "-o", Path("c.json")}, {{"PINSCOPE_CUDART", Path("none.so")}});
  EXPECT_TRUE(r.exited(2)) << Describe(r);
  EXPECT_NE(r.err.find("$PINSCOPE_CUDART"), std::string::npos) << r.err;
}

TEST_F(CliTest, CalibrateOnAMachineWithoutGpu) {
  if (fs::exists("/dev/nvidiactl")) GTEST_SKIP() << "this machine has an NVIDIA driver";
  // Whatever runtime the default search finds (or none): no GPU, exit 2.
  Result r = Run({"calibrate", "-o", Path("c.json")});
  EXPECT_TRUE(r.exited(2)) << Describe(r);
  EXPECT_NE(r.err.find("pinscope calibrate: no CUDA runtime / GPU found ("), std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(Path("c.json")));
}

#ifdef FAKE_CUDART13
TEST_F(CliTest, CalibrateWithTheRuntimeTestDouble) {
  Result r = Run({"calibrate", "--cudart", FAKE_CUDART13, "--sizes", "256K,1M,64K", "--repeats",
                  "3", "-o", Path("cal/c.json")});
  ASSERT_TRUE(r.exited(0)) << Describe(r);
  EXPECT_NE(r.out.find("CUDA runtime 13.0"), std::string::npos) << r.out;
  std::string error;
  std::optional<pinscope::Calibration> c = pinscope::LoadCalibration(Path("cal/c.json"), &error);
  ASSERT_TRUE(c) << error;
  ASSERT_EQ(c->points.size(), 3u);
  EXPECT_EQ(c->points[0].bytes, 64u << 10);  // sorted
  EXPECT_EQ(c->points[1].bytes, 256u << 10);
  EXPECT_EQ(c->points[2].bytes, 1u << 20);
  for (const auto& p : c->points) {
    EXPECT_GT(p.h2d_pageable_gbps, 0);
    EXPECT_GT(p.h2d_pinned_gbps, 0);
    EXPECT_GT(p.d2h_pageable_gbps, 0);
    EXPECT_GT(p.d2h_pinned_gbps, 0);
    EXPECT_GT(p.host_copy_gbps, 0);  // a real memcpy, timed on the host
  }
  EXPECT_NE(r.out.find("host->pin"), std::string::npos) << r.out;
  EXPECT_NE(c->source.find("pinscope calibrate"), std::string::npos) << c->source;
  EXPECT_FALSE(c->date.empty());
  // The double with no device: the no-GPU path.
  r = Run({"calibrate", "--cudart", FAKE_CUDART13, "-o", Path("c2.json")},
          {{"FAKECUDA_DEVICES", "0"}});
  EXPECT_TRUE(r.exited(2)) << Describe(r);
  EXPECT_NE(r.err.find("no CUDA runtime / GPU found (cudaGetDeviceCount"), std::string::npos)
      << r.err;
  r = Run({"calibrate", "--cudart", FAKE_CUDART13, "--device", "3", "-o", Path("c3.json")});
  EXPECT_TRUE(r.exited(2)) << Describe(r);
  EXPECT_NE(r.err.find("this machine has 1 CUDA device(s)"), std::string::npos) << r.err;
}

TEST_F(CliTest, RunOfACopyingJobReportsItsTrace) {
  Result r = Run({"run", "-o", "copies", "--", COPY_JOB, "5"});
  EXPECT_TRUE(r.exited(5)) << Describe(r);
  size_t traces = 0;
  for (const auto& e : fs::directory_iterator(Path("copies"))) {
    if (e.path().extension() == ".pstrace") ++traces;
  }
  EXPECT_EQ(traces, 1u);
  EXPECT_NE(r.err.find("pinscope: trace in copies (pinscope report copies)"), std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("no trace recorded"), std::string::npos) << r.err;
  // The report again, from the saved trace; JSON for programs.
  Result report = Run({"report", "--no-color", "copies"});
  EXPECT_TRUE(report.exited(0)) << Describe(report);
  EXPECT_FALSE(report.out.empty());
  Result json = Run({"report", "--json", "copies"});
  EXPECT_TRUE(json.exited(0)) << Describe(json);
  EXPECT_EQ(json.out.rfind("{", 0), 0u) << json.out;
  // --no-report: only where the trace is.
  r = Run({"run", "--no-report", "-o", "copies2", "--", COPY_JOB});
  EXPECT_TRUE(r.exited(0)) << Describe(r);
  EXPECT_NE(r.err.find("pinscope: trace in copies2 (pinscope report copies2)"), std::string::npos);
}
#endif

}  // namespace
