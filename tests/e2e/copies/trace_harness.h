// Harness of the e2e_copies checker: runs a test program (fork + execve)
// with libpinscope.so preloaded and PINSCOPE_OUT set to a fresh folder,
// captures its exit status, stdout manifest and stderr, and reads the trace
// files it left (framing: 0x0A, varint length, TracePacket).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "trace.pb.h"

namespace e2e {

namespace pt = pinscope::trace;

// A folder under /tmp, removed with its contents on destruction (kept, and
// named on stderr, when the current test failed).
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct TraceFile {
  std::string path;
  std::vector<pt::TracePacket> packets;
  bool truncated = false;  // the last packet was cut off
  std::string error;       // corrupt framing or packet (with byte offset)
  size_t size = 0;
  bool compressed = false;  // the zstd container (PINSCOPE_COMPRESS, the default)
};

// Reads one trace file packet by packet.
TraceFile ReadTrace(const std::string& path);
// Every *.pstrace file in dir, sorted by name.
std::vector<std::string> TraceFiles(const std::string& dir);

struct RunOptions {
  std::vector<std::string> args;
  // Set in the program's environment (after the defaults below).
  std::vector<std::pair<std::string, std::string>> env;
  // Removed from the program's environment (after the defaults).
  std::vector<std::string> unset;
  bool preload = true;
  // PINSCOPE_OUT; empty: <work dir>/run.
  std::string out_dir;
  // Runs in the child between fork and exec; a non-empty return value
  // aborts the child with exit code kSetupFailed and that text on stderr.
  std::function<std::string()> child_setup;
  int timeout_ms = 20000;
};

constexpr int kSetupFailed = 97;

struct RunResult {
  pid_t pid = -1;
  int exit_code = -1;    // -1 if killed by a signal
  int term_signal = 0;   // the signal that ended it, 0 if it exited
  bool timed_out = false;
  std::string out_dir;
  std::string stdout_text;
  std::string stderr_text;
  std::map<std::string, uint64_t> manifest;  // "key=value" lines of stdout
  std::vector<std::string> stderr_lines;

  uint64_t at(const std::string& key) const;
};

// A started program. The defaults in its environment: the parent's
// environment minus PINSCOPE_*, FAKECUDA_* and LD_PRELOAD, then
// LD_PRELOAD=libpinscope.so (if preload), PINSCOPE_OUT, and PINSCOPE_STACKS=0,
// PINSCOPE_CUPTI=0 so that traces hold only what these tests assert.
class Job {
 public:
  Job(const std::string& program, const RunOptions& options, const std::string& work_dir);
  pid_t pid() const { return pid_; }
  const std::string& out_dir() const { return out_dir_; }
  std::string Stdout() const;
  // Waits for the end (killing it at the timeout) and collects the result.
  RunResult Wait();
  void Kill(int sig);

 private:
  pid_t pid_ = -1;
  int timeout_ms_;
  std::string out_dir_, stdout_path_, stderr_path_;
};

// Starts and waits.
RunResult Run(const std::string& program, const RunOptions& options,
              const std::string& work_dir);

// Packets of one data case, in file order.
std::vector<const pt::TracePacket*> Packets(const TraceFile& t, pt::TracePacket::DataCase c);

std::string ReadWholeFile(const std::string& path);

// The run folder holds exactly one file, <pid>.pstrace, that reads to the
// end without error; returns it (empty packets on failure, with a gtest
// failure added).
TraceFile SingleTrace(const RunResult& r);

// Invariants of every complete trace: a ProcessHeader first and only there;
// a ThreadInfo for each thread before its first event; one CudaRuntimeInfo
// before the first CUDA event; copies and syncs with entry <= exit time;
// when `exited`, Counters then ProcessExit last, with Counters.copies equal
// to the copies in the file.
void ExpectWellFormed(const TraceFile& t, bool exited);

}  // namespace e2e
