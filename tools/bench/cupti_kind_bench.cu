// What each CUPTI activity kind costs a launch-bound loop, with no shim and
// no Python (issue 16, docs/benchmarks.md "Which CUPTI kind costs").
//
// A step is K launches of an empty kernel, one small pageable H2D copy and a
// stream synchronize - the shape of a launch-bound training step. Each mode
// runs in a fresh process (CUPTI's state is per process, and the eighth
// session saw a kind's cost stay after the kind was disabled), the modes
// interleaved over R rounds; the table gives each mode's median ms per step
// and its overhead over the run without CUPTI of the same round.
//
//   cupti_kind_bench --cupti LIBCUPTI [--kernels K] [--steps S] [--rounds R]
//                    [--modes a,b,...]            run the table
//   cupti_kind_bench --cupti LIBCUPTI --mode M   one process, one JSON line
//
// Modes: none; init (buffer callbacks registered, no kind); one kind alone:
// extcorr, memcpy, memset, sync, kernel, runtime, driver; default (what the
// shim enables by default: extcorr, memcpy, memset, sync); default+kernel;
// disabled (default on for the first half, then disabled; the second half
// timed); finalized (the same, then flushed and cuptiFinalize'd); window
// (default on, then finalized, then on again for 2% of the steps and off
// again: the cost of attaching and detaching).
//
// CUPTI is dlopen'ed from LIBCUPTI (the runtime's own: torch's wheel ships it),
// so the binary links the CUDA runtime only. Built by hand with nvcc (no CI
// target: CI machines have no GPU):
//   nvcc -O2 -std=c++17 -arch=sm_90 -gencode arch=compute_90,code=compute_90 \
//        -cudart shared -I/usr/local/cuda/include -o cupti_kind_bench \
//        tools/bench/cupti_kind_bench.cu -ldl
#include <cuda_runtime.h>
#include <cupti_activity.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace {

__global__ void Empty() {}

struct Cupti {
  CUptiResult (*RegisterCallbacks)(CUpti_BuffersCallbackRequestFunc,
                                   CUpti_BuffersCallbackCompleteFunc);
  CUptiResult (*Enable)(CUpti_ActivityKind);
  CUptiResult (*Disable)(CUpti_ActivityKind);
  CUptiResult (*FlushAll)(uint32_t);
  CUptiResult (*Finalize)();
  CUptiResult (*GetNextRecord)(uint8_t*, size_t, CUpti_Activity**);
  CUptiResult (*Push)(CUpti_ExternalCorrelationKind, uint64_t);
  CUptiResult (*Pop)(CUpti_ExternalCorrelationKind, uint64_t*);
} g_api;
unsigned long long g_records = 0;

void CUPTIAPI Requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 1 << 20;
  *buffer = static_cast<uint8_t*>(aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI Completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* r = nullptr;
  while (g_api.GetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) ++g_records;
  free(buffer);
}

template <typename F>
void Need(void* lib, F* f, const char* name) {
  *f = reinterpret_cast<F>(dlsym(lib, name));
  if (!*f) {
    fprintf(stderr, "cupti_kind_bench: %s not in the CUPTI library\n", name);
    exit(2);
  }
}

void LoadCupti(const char* path) {
  void* lib = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
  if (!lib) {
    fprintf(stderr, "cupti_kind_bench: dlopen %s: %s\n", path, dlerror());
    exit(2);
  }
  Need(lib, &g_api.RegisterCallbacks, "cuptiActivityRegisterCallbacks");
  Need(lib, &g_api.Enable, "cuptiActivityEnable");
  Need(lib, &g_api.Disable, "cuptiActivityDisable");
  Need(lib, &g_api.FlushAll, "cuptiActivityFlushAll");
  Need(lib, &g_api.Finalize, "cuptiFinalize");
  Need(lib, &g_api.GetNextRecord, "cuptiActivityGetNextRecord");
  Need(lib, &g_api.Push, "cuptiActivityPushExternalCorrelationId");
  Need(lib, &g_api.Pop, "cuptiActivityPopExternalCorrelationId");
}

std::vector<CUpti_ActivityKind> KindsOf(const std::string& mode) {
  const std::vector<CUpti_ActivityKind> def = {
      CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION, CUPTI_ACTIVITY_KIND_MEMCPY,
      CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_SYNCHRONIZATION};
  if (mode == "extcorr") return {CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION};
  if (mode == "memcpy") return {CUPTI_ACTIVITY_KIND_MEMCPY};
  if (mode == "memset") return {CUPTI_ACTIVITY_KIND_MEMSET};
  if (mode == "sync") return {CUPTI_ACTIVITY_KIND_SYNCHRONIZATION};
  if (mode == "kernel") return {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL};
  if (mode == "runtime") return {CUPTI_ACTIVITY_KIND_RUNTIME};
  if (mode == "driver") return {CUPTI_ACTIVITY_KIND_DRIVER};
  if (mode == "default+kernel") {
    auto k = def;
    k.push_back(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    return k;
  }
  if (mode == "default" || mode == "disabled" || mode == "finalized" || mode == "window")
    return def;
  return {};
}

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    fprintf(stderr, "cupti_kind_bench: %s: %s\n", what, cudaGetErrorString(e));
    exit(2);
  }
}

void Enable(const std::vector<CUpti_ActivityKind>& kinds) {
  for (CUpti_ActivityKind k : kinds)
    if (g_api.Enable(k) != CUPTI_SUCCESS) fprintf(stderr, "cuptiActivityEnable(%d) failed\n", k);
}

// One process, one mode: ms per step, median over the timed steps.
int RunOne(const std::string& mode, int kernels, int steps) {
  Check(cudaFree(nullptr), "cudaFree(0)");
  void* dev = nullptr;
  Check(cudaMalloc(&dev, 4096), "cudaMalloc");
  std::vector<char> host(4096, 1);
  cudaStream_t stream;
  Check(cudaStreamCreate(&stream), "cudaStreamCreate");
  const auto kinds = KindsOf(mode);
  const bool cupti = mode != "none";
  if (cupti) {
    if (g_api.RegisterCallbacks(Requested, Completed) != CUPTI_SUCCESS) {
      fprintf(stderr, "cuptiActivityRegisterCallbacks failed\n");
      return 2;
    }
    Enable(kinds);
  }
  const bool push = mode == "default" || mode == "extcorr" || mode == "default+kernel";
  auto step = [&] {
    for (int i = 0; i < kernels; ++i) Empty<<<1, 1, 0, stream>>>();
    if (push) g_api.Push(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, 1);
    cudaMemcpyAsync(dev, host.data(), host.size(), cudaMemcpyHostToDevice, stream);
    if (push) {
      uint64_t id;
      g_api.Pop(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &id);
    }
    cudaStreamSynchronize(stream);
  };
  const int warmup = steps / 5;
  for (int i = 0; i < warmup; ++i) step();
  if (mode == "disabled" || mode == "finalized" || mode == "window") {
    for (int i = 0; i < steps / 2; ++i) step();  // the kinds on for a while
    cudaDeviceSynchronize();
    for (CUpti_ActivityKind k : kinds) g_api.Disable(k);
    g_api.FlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    if (mode != "disabled" && g_api.Finalize() != CUPTI_SUCCESS)
      fprintf(stderr, "cuptiFinalize failed\n");
  }
  std::vector<double> ms;
  ms.reserve(steps);
  double window_on_ms = 0;
  for (int i = 0; i < steps; ++i) {
    // window: steps [steps/2, steps/2 + steps/50) with the kinds on again.
    const bool reattach = mode == "window" && i == steps / 2;
    const bool detach = mode == "window" && i == steps / 2 + std::max(1, steps / 50);
    const auto t0 = std::chrono::steady_clock::now();
    if (reattach) {
      g_api.RegisterCallbacks(Requested, Completed);
      Enable(kinds);
    }
    if (detach) {
      cudaDeviceSynchronize();
      for (CUpti_ActivityKind k : kinds) g_api.Disable(k);
      g_api.FlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
      g_api.Finalize();
    }
    step();
    const double t = std::chrono::duration<double, std::milli>(
                         std::chrono::steady_clock::now() - t0).count();
    ms.push_back(t);
    if (reattach || detach) window_on_ms += t;
  }
  if (cupti && mode != "finalized" && mode != "window") g_api.FlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  double sum = 0;
  for (double t : ms) sum += t;
  printf("{\"mode\": \"%s\", \"kernels\": %d, \"steps\": %d, \"step_ms_median\": %.4f, "
         "\"step_ms_mean\": %.4f, \"step_ms_p90\": %.4f, \"records\": %llu, "
         "\"attach_detach_steps_ms\": %.3f}\n",
         mode.c_str(), kernels, steps, sorted[sorted.size() / 2], sum / ms.size(),
         sorted[sorted.size() * 9 / 10], g_records, window_on_ms);
  fflush(stdout);
  return 0;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::string cupti, mode;
  std::string modes =
      "none,init,extcorr,memcpy,memset,sync,kernel,runtime,default,default+kernel,disabled,"
      "finalized,window";
  int kernels = 300, steps = 400, rounds = 5;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        fprintf(stderr, "cupti_kind_bench: %s needs a value\n", a.c_str());
        exit(2);
      }
      return argv[++i];
    };
    if (a == "--cupti") cupti = next();
    else if (a == "--mode") mode = next();
    else if (a == "--modes") modes = next();
    else if (a == "--kernels") kernels = atoi(next().c_str());
    else if (a == "--steps") steps = atoi(next().c_str());
    else if (a == "--rounds") rounds = atoi(next().c_str());
    else {
      fprintf(stderr, "cupti_kind_bench: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (cupti.empty() || kernels < 1 || steps < 10 || rounds < 1) {
    fprintf(stderr, "usage: cupti_kind_bench --cupti LIBCUPTI [--kernels K>=1] [--steps S>=10] "
                    "[--rounds R>=1] [--modes a,b] | --mode M\n");
    return 2;
  }
  LoadCupti(cupti.c_str());
  if (!mode.empty()) return RunOne(mode, kernels, steps);

  std::vector<std::string> list;
  for (size_t p = 0; p <= modes.size();) {
    size_t q = modes.find(',', p);
    if (q == std::string::npos) q = modes.size();
    if (q > p) list.push_back(modes.substr(p, q - p));
    p = q + 1;
  }
  std::map<std::string, std::vector<double>> step_ms, over;
  for (int r = 0; r < rounds; ++r) {
    std::map<std::string, double> this_round;
    for (const std::string& m : list) {
      int fds[2];
      if (pipe(fds) != 0) return 2;
      pid_t pid = fork();
      if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        const std::string k = std::to_string(kernels), s = std::to_string(steps);
        execl("/proc/self/exe", argv[0], "--cupti", cupti.c_str(), "--mode", m.c_str(),
              "--kernels", k.c_str(), "--steps", s.c_str(), static_cast<char*>(nullptr));
        _exit(127);
      }
      close(fds[1]);
      std::string out;
      char buf[512];
      for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, n);
      close(fds[0]);
      int status = 0;
      waitpid(pid, &status, 0);
      printf("round %d %s", r + 1, out.c_str());
      const size_t at = out.find("\"step_ms_median\": ");
      if (at == std::string::npos || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        printf("round %d %s: failed (status %d)\n", r + 1, m.c_str(), status);
        continue;
      }
      this_round[m] = atof(out.c_str() + at + 18);
      step_ms[m].push_back(this_round[m]);
    }
    if (this_round.count("none"))
      for (auto& [m, t] : this_round) over[m].push_back(100.0 * (t / this_round["none"] - 1));
    fflush(stdout);
  }
  printf("\n| mode | ms/step, median of %d rounds | overhead over none, median of rounds | "
         "range of rounds |\n|---|---|---|---|\n",
         rounds);
  for (const std::string& m : list) {
    auto& o = over[m];
    std::sort(o.begin(), o.end());
    printf("| %s | %.4f | %+.1f%% | %s |\n", m.c_str(), Median(step_ms[m]), Median(o),
           o.empty() ? "-"
                     : (std::to_string(o.front()).substr(0, 6) + "% .. " +
                        std::to_string(o.back()).substr(0, 6) + "%")
                           .c_str());
  }
  return 0;
}
