// Harness of the e2e_copies checker; see trace_harness.h.
#include "trace_harness.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "tests/common/trace_bytes.h"

extern char** environ;

namespace e2e {

TempDir::TempDir() {
  char tmpl[] = "/tmp/pinscope-e2e-XXXXXX";
  if (!mkdtemp(tmpl)) {
    ADD_FAILURE() << "mkdtemp: " << strerror(errno);
    return;
  }
  path_ = tmpl;
}

TempDir::~TempDir() {
  if (path_.empty()) return;
  if (::testing::Test::HasFailure()) {
    fprintf(stderr, "e2e_copies: keeping %s for inspection\n", path_.c_str());
    return;
  }
  std::error_code ec;
  // A test may have left a folder without permissions; give them back first.
  for (auto it = std::filesystem::recursive_directory_iterator(path_, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_directory(ec) && !it->is_symlink(ec)) chmod(it->path().c_str(), 0700);
  }
  std::filesystem::remove_all(path_, ec);
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TraceFile ReadTrace(const std::string& path) {
  TraceFile t;
  t.path = path;
  std::string data = ReadWholeFile(path);
  t.size = data.size();
  t.compressed = ::pinscope::testing::IsCompressedTrace(data);
  data = ::pinscope::testing::TracePackets(data);
  const uint8_t* p = reinterpret_cast<const uint8_t*>(data.data());
  size_t n = data.size(), off = 0;
  while (off < n) {
    if (p[off] != 0x0A) {
      t.error = "byte " + std::to_string(off) + ": expected 0x0A, found " + std::to_string(p[off]);
      return t;
    }
    size_t q = off + 1;
    uint64_t len = 0;
    int shift = 0;
    bool done = false;
    while (q < n && shift < 64) {
      len |= uint64_t{p[q] & 0x7fu} << shift;
      shift += 7;
      if (!(p[q++] & 0x80)) {
        done = true;
        break;
      }
    }
    if (!done || len > n - q) {
      t.truncated = true;
      return t;
    }
    pt::TracePacket packet;
    if (!packet.ParseFromArray(p + q, static_cast<int>(len))) {
      t.error = "byte " + std::to_string(off) + ": packet does not parse";
      return t;
    }
    t.packets.push_back(std::move(packet));
    off = q + len;
  }
  return t;
}

std::vector<std::string> TraceFiles(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.size() > 8 && name.compare(name.size() - 8, 8, ".pstrace") == 0)
      out.push_back(dir + "/" + name);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<const pt::TracePacket*> Packets(const TraceFile& t, pt::TracePacket::DataCase c) {
  std::vector<const pt::TracePacket*> out;
  for (const pt::TracePacket& p : t.packets)
    if (p.data_case() == c) out.push_back(&p);
  return out;
}

uint64_t RunResult::at(const std::string& key) const {
  auto it = manifest.find(key);
  if (it == manifest.end()) {
    ADD_FAILURE() << "the program did not report " << key << "; stdout:\n" << stdout_text;
    return 0;
  }
  return it->second;
}

namespace {

bool Dropped(const std::string& entry) {
  return entry.rfind("PINSCOPE_", 0) == 0 || entry.rfind("FAKECUDA_", 0) == 0 ||
         entry.rfind("LD_PRELOAD=", 0) == 0;
}

void SetVar(std::vector<std::string>* env, const std::string& name, const std::string& value) {
  std::string prefix = name + "=";
  env->erase(std::remove_if(env->begin(), env->end(),
                            [&](const std::string& e) { return e.rfind(prefix, 0) == 0; }),
             env->end());
  env->push_back(prefix + value);
}

uint64_t NowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000 + static_cast<uint64_t>(ts.tv_nsec) / 1000000;
}

}  // namespace

Job::Job(const std::string& program, const RunOptions& o, const std::string& work_dir)
    : timeout_ms_(o.timeout_ms) {
  out_dir_ = o.out_dir.empty() ? work_dir + "/run" : o.out_dir;
  stdout_path_ = work_dir + "/stdout.txt";
  stderr_path_ = work_dir + "/stderr.txt";

  std::vector<std::string> env;
  for (char** e = environ; *e; ++e)
    if (!Dropped(*e)) env.push_back(*e);
  if (o.preload) SetVar(&env, "LD_PRELOAD", PINSCOPE_SHIM_PATH);
  SetVar(&env, "PINSCOPE_OUT", out_dir_);
  SetVar(&env, "PINSCOPE_STACKS", "0");
  SetVar(&env, "PINSCOPE_CUPTI", "0");
  for (const auto& [k, v] : o.env) SetVar(&env, k, v);
  for (const std::string& k : o.unset) {
    std::string prefix = k + "=";
    env.erase(std::remove_if(env.begin(), env.end(),
                             [&](const std::string& e) { return e.rfind(prefix, 0) == 0; }),
              env.end());
  }
  std::vector<std::string> args = {program};
  args.insert(args.end(), o.args.begin(), o.args.end());
  std::vector<char*> argv, envp;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  int out_fd = open(stdout_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  int err_fd = open(stderr_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (out_fd < 0 || err_fd < 0) {
    ADD_FAILURE() << "cannot create " << stdout_path_;
    return;
  }
  fflush(nullptr);
  pid_ = fork();
  if (pid_ == 0) {
    dup2(out_fd, 1);
    dup2(err_fd, 2);
    if (o.child_setup) {
      std::string why = o.child_setup();
      if (!why.empty()) {
        why = "SETUP: " + why + "\n";
        ssize_t ignored = write(2, why.data(), why.size());
        (void)ignored;
        _exit(kSetupFailed);
      }
    }
    execve(program.c_str(), argv.data(), envp.data());
    _exit(127);
  }
  close(out_fd);
  close(err_fd);
  if (pid_ < 0) ADD_FAILURE() << "fork: " << strerror(errno);
}

std::string Job::Stdout() const { return ReadWholeFile(stdout_path_); }

void Job::Kill(int sig) {
  if (pid_ > 0) kill(pid_, sig);
}

RunResult Job::Wait() {
  RunResult r;
  r.pid = pid_;
  r.out_dir = out_dir_;
  if (pid_ <= 0) return r;
  int status = 0;
  uint64_t deadline = NowMs() + static_cast<uint64_t>(timeout_ms_);
  for (;;) {
    pid_t w = waitpid(pid_, &status, WNOHANG);
    if (w == pid_) break;
    if (w < 0 && errno != EINTR) {
      ADD_FAILURE() << "waitpid: " << strerror(errno);
      return r;
    }
    if (NowMs() > deadline && !r.timed_out) {
      r.timed_out = true;
      kill(pid_, SIGKILL);
      ADD_FAILURE() << "the program ran past " << timeout_ms_ << " ms and was killed";
    }
    usleep(2000);
  }
  pid_ = -1;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.term_signal = WTERMSIG(status);
  r.stdout_text = ReadWholeFile(stdout_path_);
  r.stderr_text = ReadWholeFile(stderr_path_);
  std::istringstream out(r.stdout_text);
  for (std::string line; std::getline(out, line);) {
    size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    r.manifest[line.substr(0, eq)] = strtoull(line.c_str() + eq + 1, nullptr, 10);
  }
  std::istringstream err(r.stderr_text);
  for (std::string line; std::getline(err, line);) r.stderr_lines.push_back(line);
  return r;
}

RunResult Run(const std::string& program, const RunOptions& options, const std::string& work_dir) {
  Job job(program, options, work_dir);
  return job.Wait();
}

}  // namespace e2e

namespace e2e {

TraceFile SingleTrace(const RunResult& r) {
  std::vector<std::string> files = TraceFiles(r.out_dir);
  std::string want = r.out_dir + "/" + std::to_string(r.pid) + ".pstrace";
  if (files.size() != 1 || files[0] != want) {
    ADD_FAILURE() << "expected exactly " << want << " in the run folder, found "
                  << files.size() << " trace files; stderr:\n" << r.stderr_text;
    return TraceFile{};
  }
  TraceFile t = ReadTrace(want);
  EXPECT_EQ(t.error, "") << want;
  EXPECT_FALSE(t.truncated) << want;
  return t;
}

void ExpectWellFormed(const TraceFile& t, bool exited) {
  ASSERT_FALSE(t.packets.empty()) << t.path;
  ASSERT_TRUE(t.packets[0].has_header()) << "first packet of " << t.path;
  std::set<uint32_t> announced;
  bool cuda_seen = false;
  size_t copies = 0;
  for (size_t i = 1; i < t.packets.size(); ++i) {
    const pt::TracePacket& p = t.packets[i];
    SCOPED_TRACE("packet " + std::to_string(i));
    EXPECT_FALSE(p.has_header());
    EXPECT_NE(p.tid(), 0u);
    if (p.has_thread()) {
      EXPECT_EQ(p.thread().tid(), p.tid());
      EXPECT_TRUE(announced.insert(p.tid()).second) << "thread " << p.tid() << " announced twice";
      continue;
    }
    EXPECT_TRUE(announced.count(p.tid())) << "event of thread " << p.tid() << " before its ThreadInfo";
    if (p.has_cuda()) {
      EXPECT_FALSE(cuda_seen) << "a second CudaRuntimeInfo";
      cuda_seen = true;
    }
    if (p.has_copy() || p.has_sync()) {
      EXPECT_TRUE(cuda_seen) << "a CUDA event before CudaRuntimeInfo";
      uint64_t end = p.has_copy() ? p.copy().end_ns() : p.sync().end_ns();
      EXPECT_LE(p.timestamp_ns(), end);
      EXPECT_GT(p.timestamp_ns(), 0u);
    }
    if (p.has_copy()) ++copies;
  }
  if (exited) {
    size_t n = t.packets.size();
    ASSERT_GE(n, 3u);
    EXPECT_TRUE(t.packets[n - 1].has_exit()) << "last packet of " << t.path;
    ASSERT_TRUE(t.packets[n - 2].has_counters()) << "packet before the exit";
    EXPECT_EQ(t.packets[n - 2].counters().copies(), copies);
  }
}

}  // namespace e2e
