// Per-event cost of call-stack capture (shim/stacks/stacks.h CaptureStack), the work
// a recorded copy, allocation or shm event adds when PINSCOPE_STACKS is on.
// Links pinscope_shim_process and starts the recorder itself (no LD_PRELOAD); runs
// each configuration in a fresh process (the settings are read once per
// process) and prints a Markdown table for docs/benchmarks.md. Times are the
// calling thread's CPU time per capture (median of 5 runs).
//
//   stack_bench [--libpython PATH [--pythonhome DIR]] [--calls N]
//
// With --libpython, Python is embedded (dlopen RTLD_GLOBAL, so the shim finds
// its C API as in a python process) and the capture runs under 10 nested
// Python functions that call into this program through ctypes.PyDLL (the GIL
// stays held, so the Python frames are read).
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "shim/process/process.h"
#include "shim/record/recorder.h"
#include "shim/stacks/stacks.h"
#include "tools/bench/stack_capture_loop.h"

namespace pinscope {
namespace {

using shim::CaptureStack;
using shim::StackSite;

using bench::g_sink;
using bench::Median;
using bench::ThreadCpuNs;
// Captures `calls` times from `depth` frames below the caller; returns ns/call.
double Nest(int depth, int calls) { return bench::CaptureLoop(depth, calls); }

// First sight of a stack: 8 levels of PathA/PathB chosen by the bits of
// `bits` make 256 distinct stacks, each captured once (so each is interned
// and written as a Stack packet, with Module packets the first time).
__attribute__((noinline)) uint64_t PathB(int bits, int level);
__attribute__((noinline)) uint64_t PathA(int bits, int level) {
  uint64_t r = level == 0 ? CaptureStack(StackSite::kCopy)
                          : (bits & 1 ? PathA : PathB)(bits >> 1, level - 1);
  asm volatile("" ::: "memory");
  return r;
}
__attribute__((noinline)) uint64_t PathB(int bits, int level) {
  uint64_t r = level == 0 ? CaptureStack(StackSite::kCopy)
                          : (bits & 1 ? PathA : PathB)(bits >> 1, level - 1);
  asm volatile("" ::: "memory");
  return r;
}

int g_calls = 100000;

}  // namespace

// Called from Python through ctypes.PyDLL (the GIL is held).
extern "C" __attribute__((visibility("default"))) double stack_bench_loop(int calls) {
  std::vector<double> runs;
  for (int r = 0; r < 5; ++r) runs.push_back(Nest(0, calls));
  return Median(runs);
}

namespace {

const char kPythonDriver[] = R"(
import ctypes, os
# PyDLL keeps the GIL during the call; CDLL releases it, as PyTorch does.
lib = (ctypes.CDLL if os.environ.get("STACK_BENCH_NOGIL") else ctypes.PyDLL)(None)
lib.stack_bench_loop.restype = ctypes.c_double
def f0(n): return lib.stack_bench_loop(n)
def f1(n): return f0(n)
def f2(n): return f1(n)
def f3(n): return f2(n)
def f4(n): return f3(n)
def f5(n): return f4(n)
def f6(n): return f5(n)
def f7(n): return f6(n)
def f8(n): return f7(n)
def f9(n): return f8(n)
f9(1000)
with open(RESULT, "w") as out:
    out.write(repr(f9(CALLS)))
)";

// The measurement inside one configured process; prints "name value" lines.
int Child(const char* libpython) {
  pinscope::shim::InitProcess();
  if (!pinscope::shim::Recording()) {
    fprintf(stderr, "stack_bench: the recorder did not start\n");
    return 1;
  }
  if (!libpython) {
    for (int depth : {8, 24, 60}) {
      Nest(depth, 1000);  // warm: interned, written
      std::vector<double> runs;
      for (int r = 0; r < 5; ++r) runs.push_back(Nest(depth, g_calls));
      printf("native_depth_%d %.1f\n", depth, Median(runs));
    }
    // Warm the unwinder's per-pc cache for PathA/PathB with 8-level paths,
    // then time 9-level paths: new stacks made of known return addresses.
    for (int bits = 0; bits < 256; ++bits) g_sink = PathA(bits, 8);
    uint64_t t0 = ThreadCpuNs();
    for (int bits = 0; bits < 512; ++bits) g_sink = PathB(bits, 9);
    printf("first_sight %.1f\n", double(ThreadCpuNs() - t0) / 512);
  } else {
    auto run = reinterpret_cast<int (*)(const char*)>(dlsym(RTLD_DEFAULT, "PyRun_SimpleString"));
    auto init = reinterpret_cast<void (*)(int)>(dlsym(RTLD_DEFAULT, "Py_InitializeEx"));
    if (!run || !init) return 1;
    init(0);
    char result[] = "/tmp/stack_bench_XXXXXX";
    int fd = mkstemp(result);
    close(fd);
    std::string code = std::string("RESULT = '") + result +
                       "'\nCALLS = " + std::to_string(g_calls / 10) + "\n" + kPythonDriver;
    if (run(code.c_str()) != 0) return 1;
    char buf[64] = {};
    FILE* f = fopen(result, "r");
    if (!f || !fgets(buf, sizeof buf, f)) return 1;
    fclose(f);
    unlink(result);
    printf("python %.1f\n", atof(buf));
  }
  pinscope::shim::FinishProcess(pinscope::shim::fields::kExit, 0);
  return 0;
}

struct Config {
  const char* label;
  std::vector<std::string> env;
  bool python;
};

}  // namespace

}  // namespace pinscope

int main(int argc, char** argv) {
  using namespace pinscope;
  const char* libpython = nullptr;
  const char* pythonhome = "/usr";
  bool child = false;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--libpython") && i + 1 < argc)
      libpython = argv[++i];
    else if (!strcmp(argv[i], "--pythonhome") && i + 1 < argc)
      pythonhome = argv[++i];
    else if (!strcmp(argv[i], "--calls") && i + 1 < argc)
      g_calls = atoi(argv[++i]);
    else if (!strcmp(argv[i], "--child"))
      child = true;
  }
  if (child) {
    const char* py = getenv("STACK_BENCH_PYTHON");
    if (py && *py) {
      if (!dlopen(py, RTLD_NOW | RTLD_GLOBAL)) {
        fprintf(stderr, "stack_bench: %s\n", dlerror());
        return 1;
      }
    }
    return Child(py && *py ? py : nullptr);
  }

  char dir[] = "/tmp/stack_bench_run_XXXXXX";
  if (!mkdtemp(dir)) return 1;
  std::vector<Config> configs = {
      {"stacks off (PINSCOPE_STACKS=0)", {"PINSCOPE_STACKS=0"}, false},
      {"native (PINSCOPE_STACKS=32)", {"PINSCOPE_STACKS=32"}, false},
  };
  if (libpython) {
    configs.push_back({"in Python, stacks off (PINSCOPE_STACKS=0)", {"PINSCOPE_STACKS=0"}, true});
    configs.push_back({"in Python, native frames only (PINSCOPE_PY_STACKS=0)",
                       {"PINSCOPE_STACKS=32", "PINSCOPE_PY_STACKS=0"},
                       true});
    configs.push_back({"in Python, native + Python frames, frame walk (default), GIL held",
                       {"PINSCOPE_STACKS=32"},
                       true});
    configs.push_back({"in Python, native + Python frames, frame walk (default), GIL released",
                       {"PINSCOPE_STACKS=32", "STACK_BENCH_NOGIL=1"},
                       true});
    configs.push_back(
        {"in Python, native + Python frames, C API path (PINSCOPE_PY_WALK=0), GIL held",
         {"PINSCOPE_STACKS=32", "PINSCOPE_PY_WALK=0"},
         true});
  }
  printf("| configuration | measurement | ns per event |\n|---|---|---|\n");
  for (const Config& c : configs) {
    int pipefd[2];
    if (pipe(pipefd) != 0) return 1;
    pid_t pid = fork();
    if (pid == 0) {
      dup2(pipefd[1], 1);
      close(pipefd[0]);
      setenv("PINSCOPE_OUT", dir, 1);
      setenv("PINSCOPE_CUPTI", "0", 1);
      unsetenv("PINSCOPE_ROOT_PID");
      unsetenv("PINSCOPE_RUN_ID");
      unsetenv("PINSCOPE_PY_STACKS");
      unsetenv("PINSCOPE_PY_WALK");
      unsetenv("STACK_BENCH_NOGIL");
      for (const std::string& e : c.env) putenv(const_cast<char*>(e.c_str()));
      setenv("STACK_BENCH_PYTHON", c.python ? libpython : "", 1);
      if (c.python && !getenv("PYTHONHOME")) setenv("PYTHONHOME", pythonhome, 1);
      std::string calls = std::to_string(g_calls);
      execl("/proc/self/exe", argv[0], "--child", "--calls", calls.c_str(), (char*)nullptr);
      _exit(127);
    }
    close(pipefd[1]);
    char buf[4096];
    std::string out;
    ssize_t n;
    while ((n = read(pipefd[0], buf, sizeof buf)) > 0) out.append(buf, n);
    close(pipefd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      printf("| %s | (failed, status %d) | |\n", c.label, status);
      continue;
    }
    size_t at = 0;
    while (at < out.size()) {
      size_t end = out.find('\n', at);
      if (end == std::string::npos) end = out.size();
      std::string line = out.substr(at, end - at);
      at = end + 1;
      size_t sp = line.find(' ');
      if (sp == std::string::npos) continue;
      std::string what = line.substr(0, sp);
      std::string label = what;
      if (what.rfind("native_depth_", 0) == 0) {
        label = "same stack again, " + what.substr(13) + " frames below the event";
      } else if (what == "first_sight") {
        label = "first sight of a stack in the file (stacks on: interned, packets written)";
      } else if (what == "python") {
        label = "same stack again, 10 Python functions + interpreter frames";
      }
      printf("| %s | %s | %s |\n", c.label, label.c_str(), line.substr(sp + 1).c_str());
    }
  }
  return 0;
}
