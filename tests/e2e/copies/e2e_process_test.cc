// End-to-end robustness of the preloaded shim: programs that never use CUDA,
// no GPU, an unwritable or full trace folder, a killed job, bad settings.
// In every case the job runs and exits as it would without pinscope, and
// pinscope says what happened in exactly one stderr line.
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "trace_harness.h"

namespace {

using e2e::RunOptions;
using e2e::RunResult;
using e2e::TraceFile;
namespace pt = pinscope::trace;

size_t CountLines(const RunResult& r, const std::string& needle) {
  size_t n = 0;
  for (const std::string& l : r.stderr_lines)
    if (l.find(needle) != std::string::npos) ++n;
  return n;
}

class E2EProcess : public ::testing::Test {
 protected:
  RunResult Run(const std::string& program, const RunOptions& o) {
    return e2e::Run(program, o, dir_.path());
  }
  e2e::TempDir dir_;
};

// Documented behavior: a process writes its trace file on its first event,
// so one that never calls CUDA leaves no file (the folder may exist).
TEST_F(E2EProcess, ProgramWithoutCudaWritesNoTrace) {
  RunOptions o;
  o.args = {"4"};
  RunResult r = Run(E2E_NOCUDA, o);
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_EQ(r.stdout_text, "sum=2\n");
  EXPECT_EQ(r.stderr_text, "");
  EXPECT_TRUE(e2e::TraceFiles(r.out_dir).empty());
}

TEST_F(E2EProcess, ProgramLinkedToCudaButNotCallingItWritesNoTrace) {
  RunOptions o;
  o.args = {"none"};
  RunResult r = Run(E2E_PROG13, o);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.stderr_text, "");
  EXPECT_TRUE(e2e::TraceFiles(r.out_dir).empty());
}

// No GPU: the job runs, pinscope says so once, the copies are recorded with
// the runtime's error.
TEST_F(E2EProcess, NoGpuVisible) {
  RunOptions o;
  o.args = {"nogpu"};
  o.env = {{"FAKECUDA_DEVICES", "0"}};
  RunResult r = Run(E2E_PROG13, o);
  EXPECT_EQ(r.exit_code, 0) << r.stderr_text;
  ASSERT_EQ(r.stderr_lines.size(), 1u) << r.stderr_text;
  EXPECT_EQ(CountLines(r, "no GPU is visible"), 1u) << r.stderr_text;
  EXPECT_EQ(r.stderr_lines[0].rfind("pinscope: ", 0), 0u);
  TraceFile t = e2e::SingleTrace(r);
  ExpectWellFormed(t, true);
  auto cuda = e2e::Packets(t, pt::TracePacket::kCuda);
  ASSERT_EQ(cuda.size(), 1u);
  EXPECT_EQ(cuda[0]->cuda().device_count(), 0);
  auto copies = e2e::Packets(t, pt::TracePacket::kCopy);
  ASSERT_EQ(copies.size(), 3u);
  uint64_t a = r.at("a"), c = r.at("c");
  struct {
    pt::CopyApi api;
    pt::Direction dir;
    uint64_t bytes, src, dst;
  } want[] = {{pt::MEMCPY, pt::H2D, 1001, a, c},
              {pt::MEMCPY, pt::D2H, 1002, c, a},
              {pt::MEMCPY_ASYNC, pt::H2H, 1003, a, c}};
  for (size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE("copy " + std::to_string(i));
    const pt::CopyEvent& e = copies[i]->copy();
    EXPECT_EQ(e.api(), want[i].api);
    EXPECT_EQ(e.direction(), want[i].dir);
    EXPECT_EQ(e.bytes(), want[i].bytes);
    EXPECT_EQ(e.src_address(), want[i].src);
    EXPECT_EQ(e.dst_address(), want[i].dst);
    EXPECT_EQ(e.result(), cudaErrorNoDevice);
    // Without a device every pointer is plain host memory.
    EXPECT_EQ(e.src_kind(), pt::PAGEABLE);
    EXPECT_EQ(e.dst_kind(), pt::PAGEABLE);
    EXPECT_EQ(copies[i]->tid(), r.at("main_tid"));
  }
}

// PINSCOPE_OUT below a regular file: the job runs with its exit status, and
// pinscope names the folder once.
TEST_F(E2EProcess, UnwritableTraceFolder) {
  std::string file = dir_.path() + "/file";
  int fd = open(file.c_str(), O_WRONLY | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  close(fd);
  RunOptions o;
  o.args = {"exit", "3"};
  o.out_dir = file + "/sub";
  RunResult r = Run(E2E_PROG13, o);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.at("d0"), 0u);  // the program ran to the end
  ASSERT_EQ(r.stderr_lines.size(), 1u) << r.stderr_text;
  EXPECT_NE(r.stderr_lines[0].find(o.out_dir), std::string::npos) << r.stderr_lines[0];
  EXPECT_NE(r.stderr_lines[0].find("pinscope"), std::string::npos);
  struct stat st;
  EXPECT_NE(stat(o.out_dir.c_str(), &st), 0);
}

// A folder the job may not write to: mode 0500, and for root (which
// ignores modes; CI runs as root) a read-only bind mount of it in a mount
// namespace of the job's own (EROFS).
TEST_F(E2EProcess, ReadOnlyTraceFolder) {
  std::string ro = dir_.path() + "/ro";
  ASSERT_EQ(mkdir(ro.c_str(), 0500), 0);
  RunOptions o;
  o.args = {"exit", "3"};
  o.out_dir = ro;
  if (geteuid() == 0) {
    o.child_setup = [ro] {
      if (unshare(CLONE_NEWNS) != 0) return std::string("unshare(CLONE_NEWNS): ") + strerror(errno);
      if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
        return std::string("mount --make-rprivate /: ") + strerror(errno);
      if (mount(ro.c_str(), ro.c_str(), nullptr, MS_BIND, nullptr) != 0)
        return std::string("mount --bind: ") + strerror(errno);
      if (mount(nullptr, ro.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0)
        return std::string("mount -o remount,bind,ro: ") + strerror(errno);
      return std::string();
    };
  }
  RunResult r = Run(E2E_PROG13, o);
  if (r.exit_code == e2e::kSetupFailed && r.stderr_text.rfind("SETUP: ", 0) == 0)
    GTEST_SKIP() << "root, and no read-only bind mount here: " << r.stderr_text;
  EXPECT_EQ(r.exit_code, 3);
  ASSERT_EQ(r.stderr_lines.size(), 1u) << r.stderr_text;
  EXPECT_NE(r.stderr_lines[0].find(ro), std::string::npos);
  EXPECT_TRUE(e2e::TraceFiles(ro).empty());
}

// Trace files are private to the user whatever the umask.
TEST_F(E2EProcess, TraceFileMode0600) {
  RunOptions o;
  o.args = {"one"};
  o.child_setup = [] {
    umask(0);
    return std::string();
  };
  RunResult r = Run(E2E_PROG13, o);
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  std::vector<std::string> files = e2e::TraceFiles(r.out_dir);
  ASSERT_EQ(files.size(), 1u);
  struct stat st;
  ASSERT_EQ(lstat(files[0].c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

// A shared, sticky, world-writable directory (like /tmp) where another
// user (nobody, as root simulates it) planted a pinscope-<pid> folder and a
// symbolic link: the shim refuses both, says so once, and the program runs
// unchanged; a folder it creates itself is 0700 and its trace 0600.
class PlantedFolders : public E2EProcess {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root to give files to another user";
    shared_ = dir_.path() + "/shared";
    ASSERT_EQ(mkdir(shared_.c_str(), 0777), 0);
    ASSERT_EQ(chmod(shared_.c_str(), 01777), 0);
    target_ = dir_.path() + "/target";
    ASSERT_EQ(mkdir(target_.c_str(), 0700), 0);
  }
  RunResult RunInto(const std::string& out) {
    RunOptions o;
    o.args = {"one"};
    o.out_dir = out;
    return Run(E2E_PROG13, o);
  }
  std::string shared_, target_;
  static constexpr uid_t kNobody = 65534;
};

TEST_F(PlantedFolders, AnotherUsersFolderIsRefused) {
  std::string planted = shared_ + "/pinscope-4242";
  ASSERT_EQ(mkdir(planted.c_str(), 0777), 0);
  ASSERT_EQ(chmod(planted.c_str(), 0777), 0);
  ASSERT_EQ(chown(planted.c_str(), kNobody, kNobody), 0);
  RunResult r = RunInto(planted);
  EXPECT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_EQ(r.stdout_text.find("pinscope"), std::string::npos);
  ASSERT_EQ(r.stderr_lines.size(), 1u) << r.stderr_text;
  EXPECT_NE(r.stderr_lines[0].find("belongs to another user (refused)"), std::string::npos)
      << r.stderr_lines[0];
  EXPECT_TRUE(e2e::TraceFiles(planted).empty());
}

TEST_F(PlantedFolders, ASymlinkIsNotFollowed) {
  std::string link = shared_ + "/pinscope-4243";
  ASSERT_EQ(symlink(target_.c_str(), link.c_str()), 0);
  ASSERT_EQ(lchown(link.c_str(), kNobody, kNobody), 0);
  RunResult r = RunInto(link);
  EXPECT_EQ(r.exit_code, 0) << r.stderr_text;
  ASSERT_EQ(r.stderr_lines.size(), 1u) << r.stderr_text;
  EXPECT_NE(r.stderr_lines[0].find("is a symbolic link or not a folder (refused)"),
            std::string::npos)
      << r.stderr_lines[0];
  EXPECT_TRUE(e2e::TraceFiles(target_).empty());
}

TEST_F(PlantedFolders, AFolderOthersMayWriteIsRefused) {
  std::string open_folder = shared_ + "/pinscope-4244";
  ASSERT_EQ(mkdir(open_folder.c_str(), 0700), 0);
  ASSERT_EQ(chmod(open_folder.c_str(), 0777), 0);  // ours, but anyone may plant files in it
  RunResult r = RunInto(open_folder);
  EXPECT_EQ(r.exit_code, 0) << r.stderr_text;
  ASSERT_EQ(r.stderr_lines.size(), 1u) << r.stderr_text;
  EXPECT_NE(r.stderr_lines[0].find("is writable by other users (refused)"), std::string::npos);
  EXPECT_TRUE(e2e::TraceFiles(open_folder).empty());
}

TEST_F(PlantedFolders, ANewFolderIs0700AndItsTrace0600) {
  std::string fresh = shared_ + "/pinscope-4245/run";
  RunOptions o;
  o.args = {"one"};
  o.out_dir = fresh;
  o.child_setup = [] {
    umask(0);
    return std::string();
  };
  RunResult r = Run(E2E_PROG13, o);
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_EQ(r.stderr_text, "");
  struct stat st;
  for (const std::string& d : {shared_ + "/pinscope-4245", fresh}) {
    ASSERT_EQ(lstat(d.c_str(), &st), 0) << d;
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_EQ(st.st_mode & 07777, 0700u) << d;
  }
  std::vector<std::string> files = e2e::TraceFiles(fresh);
  ASSERT_EQ(files.size(), 1u);
  ASSERT_EQ(lstat(files[0].c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

// A failed exec (no such file) does not end tracing: the process goes on
// and its later copies are in the same file, after a notice naming the
// failed exec, and the file ends with the real exit.
TEST_F(E2EProcess, FailedExecKeepsTracing) {
  RunOptions o;
  o.args = {"exec_missing"};
  RunResult r = Run(E2E_PROG13, o);
  ASSERT_EQ(r.exit_code, 0) << r.stderr_text;
  EXPECT_EQ(r.stderr_text, "");
  EXPECT_EQ(r.at("exec_rc"), 9u);  // -1
  EXPECT_EQ(r.at("exec_errno"), uint64_t{ENOENT});
  TraceFile t = e2e::SingleTrace(r);
  std::vector<uint64_t> bytes;
  for (const pt::TracePacket* p : e2e::Packets(t, pt::TracePacket::kCopy))
    bytes.push_back(p->copy().bytes());
  EXPECT_EQ(bytes, (std::vector<uint64_t>{1001, 1002, 1003}));
  int notices = 0;
  for (const pt::TracePacket* p : e2e::Packets(t, pt::TracePacket::kNotice)) {
    if (p->notice().code() != "exec_failed") continue;
    ++notices;
    EXPECT_NE(p->notice().text().find("/nonexistent/pinscope-e2e-missing"), std::string::npos);
  }
  EXPECT_EQ(notices, 1);
  ASSERT_FALSE(t.packets.empty());
  ASSERT_TRUE(t.packets.back().has_exit());
  EXPECT_EQ(t.packets.back().exit().how(), pt::ProcessExit::EXIT);
  // The counters at the end count every copy.
  const pt::TracePacket* last_counters = nullptr;
  for (const pt::TracePacket* p : e2e::Packets(t, pt::TracePacket::kCounters)) last_counters = p;
  ASSERT_NE(last_counters, nullptr);
  EXPECT_EQ(last_counters->counters().copies(), 3u);
}

// SIGKILL: the copies flushed before the kill are readable; no ProcessExit.
TEST_F(E2EProcess, KilledJobLeavesAReadableTrace) {
  RunOptions o;
  o.args = {"sleep"};
  o.env = {{"PINSCOPE_FLUSH_MS", "100"}};
  e2e::Job job(E2E_PROG13, o, dir_.path());
  ASSERT_GT(job.pid(), 0);
  std::string path = job.out_dir() + "/" + std::to_string(job.pid()) + ".pstrace";
  // Wait for the program to finish copying, then for a flush to bring the
  // five copies to disk (the flusher runs every 100 ms).
  size_t copies = 0;
  for (int i = 0; i < 1000 && copies < 5; ++i) {
    usleep(10000);
    if (job.Stdout().find("ready=1") == std::string::npos) continue;
    copies = e2e::Packets(e2e::ReadTrace(path), pt::TracePacket::kCopy).size();
  }
  ASSERT_EQ(copies, 5u) << "the copies never reached the file";
  job.Kill(SIGKILL);
  RunResult r = job.Wait();
  EXPECT_EQ(r.term_signal, SIGKILL);
  TraceFile t = e2e::SingleTrace(r);
  ExpectWellFormed(t, false);
  auto got = e2e::Packets(t, pt::TracePacket::kCopy);
  ASSERT_EQ(got.size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_EQ(got[i]->copy().bytes(), 1001 + i);
  EXPECT_TRUE(e2e::Packets(t, pt::TracePacket::kExit).empty());
  auto counters = e2e::Packets(t, pt::TracePacket::kCounters);
  ASSERT_FALSE(counters.empty());
  EXPECT_EQ(counters.back()->counters().copies(), 5u);
  // The flusher noted its own CPU time before the tick that wrote them.
  EXPECT_GT(counters.back()->counters().own_threads_cpu_ns(), 0u);
  EXPECT_EQ(counters.back()->counters().hook_calls(), 5u);
}

// Disk full: the trace folder is a 64 KiB tmpfs in a private mount
// namespace; the job keeps its exit status and pinscope says "disk full"
// once. Compressed (the default) and plain: 40000 copy packets are several
// times 64 KiB either way (about 1 MiB compressed, 4.8 MiB plain).
TEST_F(E2EProcess, DiskFull) {
  for (const char* compress : {"1", "0"}) {
    SCOPED_TRACE(std::string("PINSCOPE_COMPRESS=") + compress);
    std::string mnt = dir_.path() + "/tiny" + compress;
    ASSERT_EQ(mkdir(mnt.c_str(), 0700), 0);
    RunOptions o;
    o.args = {"many", "40000"};
    o.out_dir = mnt + "/run";
    o.env = {{"PINSCOPE_COMPRESS", compress}};
    o.child_setup = [mnt] {
      if (unshare(CLONE_NEWNS) != 0) return std::string("unshare(CLONE_NEWNS): ") + strerror(errno);
      if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
        return std::string("mount --make-rprivate /: ") + strerror(errno);
      if (mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=64k,mode=0700") != 0)
        return std::string("mount tmpfs: ") + strerror(errno);
      return std::string();
    };
    RunResult r = Run(E2E_PROG13, o);
    if (r.exit_code == e2e::kSetupFailed && r.stderr_text.rfind("SETUP: ", 0) == 0)
      GTEST_SKIP() << "no private tmpfs here: " << r.stderr_text;
    EXPECT_EQ(r.exit_code, 0) << r.stderr_text;
    EXPECT_EQ(CountLines(r, "disk full"), 1u) << r.stderr_text;
    EXPECT_EQ(r.stderr_lines.size(), 1u) << r.stderr_text;
  }
}

// Garbage settings: one line per bad variable, naming it; defaults apply.
TEST_F(E2EProcess, GarbageSettingsAreReportedOnce) {
  RunOptions o;
  o.args = {"one"};
  o.env = {{"PINSCOPE_TRACE_MIN", "lots"}, {"PINSCOPE_FLUSH_MS", "soon"}};
  RunResult r = Run(E2E_PROG13, o);
  EXPECT_EQ(r.exit_code, 0);
  ASSERT_EQ(r.stderr_lines.size(), 2u) << r.stderr_text;
  EXPECT_EQ(CountLines(r, "PINSCOPE_TRACE_MIN"), 1u) << r.stderr_text;
  EXPECT_EQ(CountLines(r, "PINSCOPE_FLUSH_MS"), 1u) << r.stderr_text;
  TraceFile t = e2e::SingleTrace(r);
  ExpectWellFormed(t, true);
  ASSERT_FALSE(t.packets.empty());
  EXPECT_EQ(t.packets[0].header().config().trace_min_bytes(), 1u << 20);
  EXPECT_EQ(t.packets[0].header().config().flush_period_ms(), 1000u);
  EXPECT_EQ(e2e::Packets(t, pt::TracePacket::kCopy).size(), 1u);
}

}  // namespace
