// Helpers for tests that run programs under LD_PRELOAD=libpinscope.so and
// check the trace files they leave: running a command with extra
// environment, reading a run folder with the generated protobuf classes
// (each file is a stream of Trace.packet fields, so it parses as one Trace),
// and reading the expectation files the test programs write.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "trace.pb.h"
#include "trace_bytes.h"

extern char** environ;

namespace pinscope::e2e {

namespace trace = ::pinscope::trace;

struct ProcessTrace {
  std::string path;
  trace::ProcessHeader header;
  std::vector<trace::TracePacket> packets;  // all, the header included

  template <typename Pred>
  std::vector<const trace::TracePacket*> Select(Pred pred) const {
    std::vector<const trace::TracePacket*> out;
    for (const auto& p : packets)
      if (pred(p)) out.push_back(&p);
    return out;
  }
  std::vector<const trace::TracePacket*> Allocs() const {
    return Select([](const trace::TracePacket& p) { return p.has_alloc() || p.has_free(); });
  }
  std::vector<const trace::TracePacket*> Shm() const {
    return Select([](const trace::TracePacket& p) { return p.has_shm(); });
  }
  const trace::ProcessExit* Exit() const {
    for (const auto& p : packets)
      if (p.has_exit()) return &p.exit();
    return nullptr;
  }
};

inline std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Every *.pstrace file of a run folder, keyed by pid.
inline std::map<uint32_t, ProcessTrace> ReadRun(const std::string& dir, std::string* error) {
  std::map<uint32_t, ProcessTrace> out;
  DIR* d = opendir(dir.c_str());
  if (!d) {
    *error = "cannot open " + dir;
    return out;
  }
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.size() < 8 || name.substr(name.size() - 8) != ".pstrace") continue;
    ProcessTrace t;
    t.path = dir + "/" + name;
    trace::Trace whole;
    if (!whole.ParseFromString(::pinscope::testing::TracePackets(ReadWholeFile(t.path)))) {
      *error += "cannot parse " + t.path + "; ";
      continue;
    }
    for (auto& p : *whole.mutable_packet()) t.packets.push_back(std::move(p));
    if (t.packets.empty() || !t.packets[0].has_header()) {
      *error += t.path + " does not start with a header; ";
      continue;
    }
    t.header = t.packets[0].header();
    uint32_t pid = t.header.pid();
    out.emplace(pid, std::move(t));
  }
  closedir(d);
  return out;
}

struct RunResult {
  int status = -1;  // wait status
  std::string out, err;
  bool Exited(int code) const { return WIFEXITED(status) && WEXITSTATUS(status) == code; }
  bool Signaled(int sig) const { return WIFSIGNALED(status) && WTERMSIG(status) == sig; }
};

// The LD_PRELOAD setting that loads libpinscope.so (`lib`) first and
// `after`, if any, behind it.
inline std::string PreloadPinscope(const std::string& lib, const std::string& after) {
  return "LD_PRELOAD=" + lib + (after.empty() ? "" : ":" + after);
}

// Runs argv with the environment plus `env` (NAME=VALUE each), stdout and
// stderr captured in files under `dir`.
inline RunResult RunCommand(const std::vector<std::string>& argv,
                            const std::vector<std::string>& env, const std::string& dir) {
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    bool overridden = false;
    for (const auto& x : env)
      if (kv.compare(0, x.find('=') + 1, x, 0, x.find('=') + 1) == 0) overridden = true;
    // A run id or root pid from an outer pinscope would join that run.
    if (kv.rfind("PINSCOPE_", 0) == 0 || kv.rfind("LD_PRELOAD=", 0) == 0) overridden = true;
    if (!overridden) envs.push_back(kv);
  }
  for (const auto& x : env) envs.push_back(x);
  std::vector<char*> cargv, cenv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const auto& e : envs) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  std::string out_path = dir + "/stdout.txt", err_path = dir + "/stderr.txt";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  RunResult r;
  pid_t pid;
  if (posix_spawnp(&pid, cargv[0], &fa, nullptr, cargv.data(), cenv.data()) != 0) {
    r.err = "spawn failed";
    posix_spawn_file_actions_destroy(&fa);
    return r;
  }
  posix_spawn_file_actions_destroy(&fa);
  waitpid(pid, &r.status, 0);
  r.out = ReadWholeFile(out_path);
  r.err = ReadWholeFile(err_path);
  return r;
}

// A fresh folder under $TMPDIR (or /tmp), removed by the destructor unless
// the test failed (to look at).
class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    const char* base = getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/pinscope-" + tag + "-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (mkdtemp(buf.data())) path_ = buf.data();
  }
  ~TempDir() {
    if (!keep_ && !path_.empty()) {
      std::string cmd = "rm -rf '" + path_ + "'";
      if (system(cmd.c_str()) != 0) {
      }
    }
  }
  const std::string& path() const { return path_; }
  void Keep() { keep_ = true; }

 private:
  std::string path_;
  bool keep_ = false;
};

// Expectation files: one event per line, written by the test programs.
inline std::vector<std::vector<std::string>> ReadLines(const std::string& path) {
  std::vector<std::vector<std::string>> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    std::vector<std::string> words;
    std::string w;
    while (s >> w) words.push_back(w);
    if (!words.empty()) out.push_back(words);
  }
  return out;
}

// Renders an alloc/free/shm packet as an expectation line would read.
inline std::string Describe(const trace::TracePacket& p) {
  std::ostringstream s;
  if (p.has_alloc()) {
    const auto& a = p.alloc();
    s << "alloc " << trace::AllocApi_Name(a.api()) << " " << a.address() << " " << a.size() << " "
      << a.alignment() << " " << a.old_address();
  } else if (p.has_free()) {
    s << "free " << p.free().address() << " " << (p.free().by_realloc() ? 1 : 0);
  } else if (p.has_shm()) {
    const auto& m = p.shm();
    s << "shm " << trace::ShmOp_Name(m.op()) << " " << (m.name().empty() ? "-" : m.name()) << " "
      << m.fd() << " " << m.size() << " " << m.offset() << " " << m.address() << " " << m.flags()
      << " " << m.prot() << " " << m.error() << " " << m.device() << " " << m.inode() << " "
      << (m.driver_internal() ? 1 : 0);
  }
  return s.str();
}

inline std::string Join(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

}  // namespace pinscope::e2e
