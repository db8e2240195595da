// Where the device tracing's host time goes (issue 16): each of the shim's
// own costs on the program's threads and on the flusher, measured alone -
// the copy hook's CUPTI push/pop and whole fast path with CUPTI off and on,
// one activity record handled per kind, the clock reads per event, a call
// stack at a copy, and the flusher's tick with nothing and with records
// queued. Prints a Markdown table for docs/benchmarks.md with what each
// costs per step of a loop of K kernels and C hooked copies/syncs.
//
//   device_cost_bench --cudart LIBCUDART --cupti LIBCUPTI [--smoke]
//                     [--kernels K] [--copies C] [--step-ms MS] [--records N]
//
// Links the shim's layers (no LD_PRELOAD) and no CUDA library: LIBCUDART is
// dlopen'ed RTLD_GLOBAL (where the shim's ResolveCuda finds it) and LIBCUPTI
// is handed to the shim as PINSCOPE_CUPTI_PATH. On CPU-only CI they are the
// test doubles (tests/doubles), so CUPTI's rows time the double's push/pop
// and record making, not NVIDIA's; on the GPU machine they are the real
// libraries (tools/gpu_cost_probe.sh). Each configuration runs in a fresh
// process (settings are read once per process), as stack_bench does.
// Times are the calling thread's CPU time, median of 5 runs.
#include <cupti_activity.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "shim/base/clock.h"
#include "shim/base/guard.h"
#include "shim/base/own_cost.h"
#include "shim/base/usage.h"
#include "shim/core/copy_path.h"
#include "shim/device/cupti.h"
#include "shim/device/cupti_state.h"  // white box: HandleRecord, BufferRequested/Completed
#include "shim/process/process.h"
#include "shim/record/recorder.h"
#include "shim/record/trace_fields.h"
#include "tools/bench/stack_capture_loop.h"

namespace pinscope {
namespace {

namespace ci = shim::cupti_internal;
using bench::Median;
using bench::ThreadCpuNs;

int g_n = 100000;       // calls per run
int g_records = 20000;  // records per synthesized buffer / queued for a full tick
int g_ticks = 50;       // flusher ticks per run

using MallocFn = int (*)(void**, size_t);
using MemcpyAsyncFn = int (*)(void*, const void*, size_t, int, void*);
MallocFn g_cuda_malloc;
MemcpyAsyncFn g_memcpy_async;
void* g_dev = nullptr;
alignas(64) char g_host[256];

void Out(const char* key, double ns) { printf("%s %.2f\n", key, ns); }

// Median over 5 runs of fn(n) -> ns per call.
template <typename F>
double Runs(F fn) {
  std::vector<double> v;
  for (int r = 0; r < 5; ++r) v.push_back(fn());
  return Median(v);
}

// The copy hook's whole path (shim/core/copy_path.cc TracedCopy) around a
// real call that does nothing: classify, call id, stack (off unless the
// configuration turns it on), pinning's check, clocks, CUPTI push/pop, the
// CopyEvent packet.
double TracedCopyLoop(int n) {
  uint64_t t0 = ThreadCpuNs();
  for (int i = 0; i < n; ++i) {
    shim::CopyCall r = shim::MakeCopyCall(shim::fields::kMemcpyAsync, false, 1, 64, 0);
    shim::TracedCopy(r, {g_dev, false}, {g_host, false}, [] { return 0; });
  }
  return double(ThreadCpuNs() - t0) / n;
}

// The same path with a host pointer new to the thread's pointer cache at
// every call (kMissAddresses addresses 64 B apart in one buffer against the
// cache's 64 entries): one driver query (cudaPointerGetAttributes) a copy,
// as a loop whose batches and .item() results land at changing addresses
// pays it. `host`: pageable (malloc) or pinned (cudaHostAlloc).
constexpr size_t kMissAddresses = 4096;

double TracedCopyMissLoop(int n, char* host) {
  uint64_t t0 = ThreadCpuNs();
  for (int i = 0; i < n; ++i) {
    char* p = host + (static_cast<size_t>(i) % kMissAddresses) * 64;
    shim::CopyCall r = shim::MakeCopyCall(shim::fields::kMemcpyAsync, false, 1, 64, 0);
    shim::TracedCopy(r, {g_dev, false}, {p, false}, [] { return 0; });
  }
  return double(ThreadCpuNs() - t0) / n;
}

// A real copy through the loaded runtime, as the hook would run it: device
// records (memcpy, runtime, correlation) for the flusher to handle.
void RealCopies(int n) {
  for (int i = 0; i < n; ++i) {
    shim::CopyCall r = shim::MakeCopyCall(shim::fields::kMemcpyAsync, false, 1, 64, 0);
    shim::TracedCopy(r, {g_dev, false}, {g_host, false},
                     [] { return g_memcpy_async(g_dev, g_host, 64, 1, nullptr); });
  }
}

// Synthesized activity records in the layouts cupti_buffers.cc parses
// (CUDA 13 versions), one array per kind.

// Kernel names as torch's look: long mangled templates; 12 of them, so each
// is interned once and then hashed again at every record.
std::vector<std::string> KernelNames() {
  std::vector<std::string> v;
  for (int i = 0; i < 12; ++i) {
    v.push_back(
        "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_"
        "6detail5ArrayIPcLi" +
        std::to_string(i) +
        "EEEEEviT0_T1_ZNS0_21GeluCUDAKernelImplERNS_18TensorIteratorBaseENS0_8GeluTypeEENKUlvE_"
        "clEvENKUlvE0_clEvEUlfE_");
  }
  return v;
}

template <typename T>
double HandleLoop(std::vector<T>& recs) {
  uint64_t t0 = ThreadCpuNs();
  for (T& r : recs) ci::HandleRecord(reinterpret_cast<const CUpti_Activity*>(&r));
  double ns = double(ThreadCpuNs() - t0) / recs.size();
  shim::FlushTrace();  // the next run starts with an empty trace buffer
  return ns;
}

void MeasureRecords() {
  uint64_t now = 0;
  ci::Cupti().api.GetTimestamp(&now);
  static std::vector<std::string> names = KernelNames();
  std::vector<CUpti_ActivityKernel10> k(g_records);
  std::vector<CUpti_ActivityMemcpy6> m(g_records);
  std::vector<CUpti_ActivityAPI> rt(g_records);
  std::vector<CUpti_ActivityExternalCorrelation> xc(g_records);
  memset(k.data(), 0, sizeof(k[0]) * k.size());
  memset(m.data(), 0, sizeof(m[0]) * m.size());
  memset(rt.data(), 0, sizeof(rt[0]) * rt.size());
  memset(xc.data(), 0, sizeof(xc[0]) * xc.size());
  for (int i = 0; i < g_records; ++i) {
    uint64_t t = now + uint64_t(i) * 2000;
    k[i].kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    k[i].start = t;
    k[i].end = t + 1500;
    k[i].streamId = 7;
    k[i].correlationId = 1000 + i;
    k[i].name = names[i % names.size()].c_str();
    m[i].kind = CUPTI_ACTIVITY_KIND_MEMCPY;
    m[i].copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
    m[i].srcKind = CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
    m[i].dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
    m[i].bytes = 262144;
    m[i].start = t;
    m[i].end = t + 1500;
    m[i].streamId = 7;
    m[i].correlationId = 1000 + i;
    rt[i].kind = CUPTI_ACTIVITY_KIND_RUNTIME;
    rt[i].cbid = 41;  // cudaMemcpyAsync_v3020
    rt[i].start = t;
    rt[i].end = t + 900;
    rt[i].correlationId = 1000 + i;
    xc[i].kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
    xc[i].externalKind = ci::kOurKind;
    xc[i].externalId = 5000 + i;
    xc[i].correlationId = 1000 + i;
  }
  HandleLoop(k);  // warm: names interned, pages touched
  Out("record_kernel", Runs([&] { return HandleLoop(k); }));
  Out("record_memcpy", Runs([&] { return HandleLoop(m); }));
  Out("record_runtime", Runs([&] { return HandleLoop(rt); }));
  Out("record_correlation", Runs([&] { return HandleLoop(xc); }));

  // The whole buffer callback (GetNextRecord over the buffer, each record
  // handled, the buffer back to the pool), only where the buffer framing is
  // known: the double's (8-byte length, record padded to 8). NVIDIA's is not
  // documented, so on the real CUPTI this row is absent.
  if (!dlsym(ci::Cupti().handle, "fakecupti_get_stats")) return;
  auto one = [&] {
    uint8_t* buf = nullptr;
    size_t size = 0, max_records = 0;
    ci::BufferRequested(&buf, &size, &max_records);
    if (!buf) return 0.0;
    size_t used = 0;
    int n = 0;
    auto put = [&](const void* rec, uint64_t len) {
      if (used + 8 + ((len + 7) & ~uint64_t{7}) > size) return false;
      memcpy(buf + used, &len, 8);
      memcpy(buf + used + 8, rec, len);
      used += 8 + ((len + 7) & ~uint64_t{7});
      ++n;
      return true;
    };
    // The mix of a launch-bound step: per copy a runtime, correlation and
    // memcpy record; the rest kernels.
    for (int i = 0; i < g_records; ++i) {
      bool ok = i % 80 == 0   ? put(&m[i], sizeof m[i])
                : i % 80 == 1 ? put(&rt[i], sizeof rt[i])
                : i % 80 == 2 ? put(&xc[i], sizeof xc[i])
                              : put(&k[i], sizeof k[i]);
      if (!ok) break;
    }
    uint64_t t0 = ThreadCpuNs();
    ci::BufferCompleted(nullptr, 0, buf, size, used);
    double ns = double(ThreadCpuNs() - t0) / n;
    shim::FlushTrace();
    return ns;
  };
  Out("buffer_completed", Runs(one));
}

// With CUPTI off or on (the configuration): push/pop and the copy hook.
void MeasureCopyPath(bool cupti) {
  const int n = g_n;
  for (int i = 0; i < 1000; ++i) {
    shim::CuptiPushCall(i);
    shim::CuptiPopCall();
  }
  auto pushpop = [&] {
    uint64_t total = 0;
    // In chunks, with the double's queued records delivered in between
    // (untimed), so its queue stays small as CUPTI's buffers would.
    for (int done = 0; done < n; done += 1000) {
      uint64_t t0 = ThreadCpuNs();
      for (int i = 0; i < 1000; ++i) {
        shim::CuptiPushCall(uint64_t(done + i));
        shim::CuptiPopCall();
      }
      total += ThreadCpuNs() - t0;
      if (cupti) shim::CuptiFlushPeriodic();
    }
    shim::FlushTrace();
    return double(total) / n;
  };
  Out(cupti ? "pushpop_on" : "pushpop_off", Runs(pushpop));
  auto copies = [&] {
    uint64_t total = 0;
    for (int done = 0; done < n / 10; done += 1000) {
      total += uint64_t(TracedCopyLoop(1000) * 1000);
      if (cupti) shim::CuptiFlushPeriodic();
      shim::FlushTrace();
    }
    return double(total) / (n / 10);
  };
  Out(cupti ? "copy_hook_on" : "copy_hook_off", Runs(copies));
  if (cupti) return;
  // The cache-miss path, pageable and pinned host memory; and the queries
  // the shim counted per call (1.0: every call missed).
  using HostAllocFn = int (*)(void**, size_t, unsigned int);
  auto host_alloc = reinterpret_cast<HostAllocFn>(dlsym(RTLD_DEFAULT, "cudaHostAlloc"));
  void* pinned = nullptr;
  std::vector<char> pageable(kMissAddresses * 64);
  const char* keys[2] = {"copy_hook_miss_pageable", "copy_hook_miss_pinned"};
  char* hosts[2] = {pageable.data(), nullptr};
  if (host_alloc && host_alloc(&pinned, kMissAddresses * 64, 0) == 0)
    hosts[1] = static_cast<char*>(pinned);
  for (int h = 0; h < 2; ++h) {
    if (!hosts[h]) continue;
    const uint64_t queries_before = shim::GetOwnCost().pointer_queries;
    uint64_t calls = 0;
    Out(keys[h], Runs([&] {
          uint64_t total = 0;
          int done = 0;
          for (; done < n / 10; done += 1000) {
            total += uint64_t(TracedCopyMissLoop(1000, hosts[h]) * 1000);
            shim::FlushTrace();
          }
          calls += static_cast<uint64_t>(done);
          return double(total) / done;
        }));
    printf("%s_queries_per_call %.3f\n", keys[h],
           double(shim::GetOwnCost().pointer_queries - queries_before) / double(calls));
  }
}

// The clocks a copy or sync reads: CLOCK_MONOTONIC at enter and exit (and
// for each correlation packet), the thread's usage at enter and exit
// (clock_gettime(CLOCK_THREAD_CPUTIME_ID) + getrusage), and CUPTI's clock,
// which the flusher reads 3 times per tick (MeasureOffset).
void MeasureClocks(bool cupti) {
  const int n = g_n;
  Out("clock_mono", Runs([&] {
        uint64_t t0 = ThreadCpuNs(), s = 0;
        for (int i = 0; i < n; ++i) s += shim::MonoNs();
        bench::g_sink = s;
        return double(ThreadCpuNs() - t0) / n;
      }));
  Out("clock_usage", Runs([&] {
        uint64_t t0 = ThreadCpuNs(), s = 0;
        for (int i = 0; i < n / 10; ++i) s += shim::ThreadUsageNow().cpu_ns;
        bench::g_sink = s;
        return double(ThreadCpuNs() - t0) / (n / 10);
      }));
  if (!cupti) return;
  Out("clock_cupti", Runs([&] {
        uint64_t t0 = ThreadCpuNs(), s = 0, c = 0;
        for (int i = 0; i < n; ++i) {
          ci::Cupti().api.GetTimestamp(&c);
          s += c;
        }
        bench::g_sink = s;
        return double(ThreadCpuNs() - t0) / n;
      }));
}

// The flusher's tick (shim/process FlusherTick), called here on this thread
// while the real flusher sleeps (PINSCOPE_FLUSH_MS=3600000): nothing new,
// then after real copies left their device records in CUPTI's buffers.
void MeasureTicks() {
  Out("tick_empty", Runs([&] {
        uint64_t t0 = ThreadCpuNs();
        for (int i = 0; i < g_ticks; ++i) shim::FlusherTick();
        return double(ThreadCpuNs() - t0) / g_ticks;
      }));
  const int copies = g_records / 4;
  Out("tick_full", Runs([&] {
        RealCopies(copies);
        uint64_t t0 = ThreadCpuNs();
        shim::FlusherTick();
        return double(ThreadCpuNs() - t0);
      }));
  printf("tick_full_copies %d\n", copies);
}

int Child(const char* what) {
  shim::InitProcess();
  if (!shim::Recording()) {
    fprintf(stderr, "device_cost_bench: the recorder did not start\n");
    return 1;
  }
  g_cuda_malloc = reinterpret_cast<MallocFn>(dlsym(RTLD_DEFAULT, "cudaMalloc"));
  g_memcpy_async = reinterpret_cast<MemcpyAsyncFn>(dlsym(RTLD_DEFAULT, "cudaMemcpyAsync"));
  if (!g_cuda_malloc || !g_memcpy_async || g_cuda_malloc(&g_dev, 1 << 20) != 0) {
    fprintf(stderr, "device_cost_bench: no CUDA runtime (pass --cudart)\n");
    return 1;
  }
  RealCopies(1);  // the first CUDA hook: runtime facts, CUPTI started
  const bool cupti = shim::GetConfig().cupti;
  if (cupti && ci::Cupti().state.load() != ci::kActive) {
    fprintf(stderr, "device_cost_bench: CUPTI did not start (see the message above)\n");
    return 1;
  }
  if (!strcmp(what, "off") || !strcmp(what, "on")) {
    MeasureCopyPath(cupti);
    MeasureClocks(cupti);
    if (cupti) {
      MeasureRecords();
      MeasureTicks();
    }
  } else if (!strcmp(what, "stacks")) {
    bench::CaptureLoop(16, 1000);  // warm: interned, written
    Out("stack_16", Runs([&] { return bench::CaptureLoop(16, g_n / 10); }));
    auto copies = [&] {
      double ns = TracedCopyLoop(g_n / 10);
      shim::FlushTrace();
      return ns;
    };
    Out("copy_hook_stacks", Runs(copies));
  }
  shim::FinishProcess(shim::fields::kExit, 0);
  return 0;
}

struct Row {
  const char* key;
  const char* operation;
  const char* per_step;  // the formula, in words
  double (*ops)(double k, double c, double ticks);
};

const Row kRows[] = {
    {"pushpop_off", "CuptiPushCall+CuptiPopCall, CUPTI off (PINSCOPE_CUPTI=0)", "C",
     [](double, double c, double) { return c; }},
    {"pushpop_on", "CuptiPushCall+CuptiPopCall, CUPTI on", "C",
     [](double, double c, double) { return c; }},
    {"copy_hook_off", "copy hook, whole path, no-op real call, stacks off, CUPTI off", "C",
     [](double, double c, double) { return c; }},
    {"copy_hook_on", "copy hook, whole path, no-op real call, stacks off, CUPTI on", "C",
     [](double, double c, double) { return c; }},
    {"copy_hook_stacks", "copy hook, whole path, no-op real call, stacks on (32), CUPTI off", "C",
     [](double, double c, double) { return c; }},
    {"copy_hook_miss_pageable",
     "copy hook, whole path, host pointer not in the cache (pageable): a pointer query", "C",
     [](double, double c, double) { return c; }},
    {"copy_hook_miss_pinned",
     "copy hook, whole path, host pointer not in the cache (pinned): a pointer query", "C",
     [](double, double c, double) { return c; }},
    {"stack_16", "CaptureStack, same stack again, 16 frames below", "C",
     [](double, double c, double) { return c; }},
    {"record_kernel", "HandleRecord: kernel record (name hashed, packet)", "K",
     [](double k, double, double) { return k; }},
    {"record_memcpy", "HandleRecord: memcpy record (packet)", "C",
     [](double, double c, double) { return c; }},
    {"record_runtime", "HandleRecord: runtime API record (skipped)", "C",
     [](double, double c, double) { return c; }},
    {"record_correlation", "HandleRecord: external correlation record (packet)", "C",
     [](double, double c, double) { return c; }},
    {"buffer_completed", "BufferCompleted per record, GetNextRecord included (CUPTI double only)",
     "K+3C", [](double k, double c, double) { return k + 3 * c; }},
    {"clock_mono", "MonoNs (CLOCK_MONOTONIC, vDSO)", "2C",
     [](double, double c, double) { return 2 * c; }},
    {"clock_usage", "ThreadUsageNow (CLOCK_THREAD_CPUTIME_ID + getrusage)", "2C",
     [](double, double c, double) { return 2 * c; }},
    {"clock_cupti", "cuptiGetTimestamp (MeasureOffset: 3 per tick)", "3 per tick",
     [](double, double, double t) { return 3 * t; }},
    {"tick_empty", "flusher tick, nothing new (FlusherTick)", "ticks",
     [](double, double, double t) { return t; }},
    {"tick_full", "flusher tick after N copies' device records", "ticks",
     [](double, double, double t) { return t; }},
};

}  // namespace
}  // namespace pinscope

int main(int argc, char** argv) {
  using namespace pinscope;
  const char* cudart = nullptr;
  const char* cupti = nullptr;
  const char* child = nullptr;
  double k = 300, c = 4, step_ms = 4.43, flush_ms = 1000;
  for (int i = 1; i < argc; ++i) {
    auto arg = [&](const char* name) { return !strcmp(argv[i], name) && i + 1 < argc; };
    if (arg("--cudart")) {
      cudart = argv[++i];
    } else if (arg("--cupti")) {
      cupti = argv[++i];
    } else if (arg("--kernels")) {
      k = atof(argv[++i]);
    } else if (arg("--copies")) {
      c = atof(argv[++i]);
    } else if (arg("--step-ms")) {
      step_ms = atof(argv[++i]);
    } else if (arg("--records")) {
      g_records = atoi(argv[++i]);
    } else if (arg("--child")) {
      child = argv[++i];
    } else if (!strcmp(argv[i], "--smoke")) {
      g_n = 2000;
      g_records = 2000;
      g_ticks = 3;
    } else if (arg("--calls")) {
      g_n = atoi(argv[++i]);
    }
  }
  if (!cudart || !cupti) {
    fprintf(stderr,
            "usage: device_cost_bench --cudart LIBCUDART --cupti LIBCUPTI [--smoke] [--kernels K]\n"
            "       [--copies C] [--step-ms MS] [--records N] [--calls N]\n");
    return 2;
  }
  if (child) {
    if (!dlopen(cudart, RTLD_NOW | RTLD_GLOBAL)) {
      fprintf(stderr, "device_cost_bench: %s\n", dlerror());
      return 1;
    }
    return Child(child);
  }

  char dir[] = "/tmp/device_cost_bench_XXXXXX";
  if (!mkdtemp(dir)) return 1;
  struct Config {
    const char* name;
    std::vector<std::string> env;
  };
  const Config configs[] = {
      {"off", {"PINSCOPE_CUPTI=0", "PINSCOPE_STACKS=0"}},
      {"on", {"PINSCOPE_CUPTI=1", "PINSCOPE_STACKS=0"}},
      {"stacks", {"PINSCOPE_CUPTI=0", "PINSCOPE_STACKS=32"}},
  };
  std::map<std::string, double> values;
  bool failed = false;
  for (const Config& cfg : configs) {
    int pipefd[2];
    if (pipe(pipefd) != 0) return 1;
    pid_t pid = fork();
    if (pid == 0) {
      dup2(pipefd[1], 1);
      close(pipefd[0]);
      setenv("PINSCOPE_OUT", dir, 1);
      setenv("PINSCOPE_CUPTI_PATH", cupti, 1);
      setenv("PINSCOPE_FLUSH_MS", "3600000", 1);  // the bench ticks the flusher itself
      unsetenv("PINSCOPE_ROOT_PID");
      unsetenv("PINSCOPE_RUN_ID");
      unsetenv("PINSCOPE_CUPTI_KERNELS");
      unsetenv("PINSCOPE_CUPTI_RUNTIME");
      for (const std::string& e : cfg.env) putenv(const_cast<char*>(e.c_str()));
      std::vector<std::string> args = {argv[0],
                                       "--cudart",
                                       cudart,
                                       "--cupti",
                                       cupti,
                                       "--child",
                                       cfg.name,
                                       "--calls",
                                       std::to_string(g_n),
                                       "--records",
                                       std::to_string(g_records)};
      if (g_ticks == 3) args.push_back("--smoke");
      std::vector<char*> cargs;
      for (std::string& a : args) cargs.push_back(a.data());
      cargs.push_back(nullptr);
      execv("/proc/self/exe", cargs.data());
      _exit(127);
    }
    close(pipefd[1]);
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = read(pipefd[0], buf, sizeof buf)) > 0) out.append(buf, n);
    close(pipefd[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "device_cost_bench: configuration %s failed (status %d)\n", cfg.name, status);
      failed = true;
    }
    size_t at = 0;
    while (at < out.size()) {
      size_t end = out.find('\n', at);
      if (end == std::string::npos) end = out.size();
      std::string line = out.substr(at, end - at);
      at = end + 1;
      size_t sp = line.find(' ');
      if (sp != std::string::npos) values[line.substr(0, sp)] = atof(line.c_str() + sp + 1);
    }
  }
  const double ticks = step_ms / flush_ms;
  printf(
      "K = %.0f kernels, C = %.0f hooked copies/syncs per step; step %.2f ms, flush period %.0f ms "
      "(%.4f ticks per step); tick_full after %.0f copies\n\n",
      k, c, step_ms, flush_ms, ticks,
      values.count("tick_full_copies") ? values["tick_full_copies"] : 0);
  printf("| operation | ns per op | ops per step | ops per step (K=%.0f, C=%.0f) | ms per step |\n",
         k, c);
  printf("|---|---|---|---|---|\n");
  for (const Row& r : kRows) {
    auto it = values.find(r.key);
    double ops = r.ops(k, c, ticks);
    if (it == values.end()) {
      printf("| %s | (not measured) | %s | %.4g | |\n", r.operation, r.per_step, ops);
      continue;
    }
    printf("| %s | %.1f | %s | %.4g | %.3g |\n", r.operation, it->second, r.per_step, ops,
           it->second * ops / 1e6);
  }
  // The shim's own count of the miss rows' driver queries (Counters.pointer_queries).
  for (const char* key :
       {"copy_hook_miss_pageable_queries_per_call", "copy_hook_miss_pinned_queries_per_call"}) {
    if (values.count(key)) printf("\n%s %.3f", key, values[key]);
  }
  printf("\n");
  return failed ? 1 : 0;
}
