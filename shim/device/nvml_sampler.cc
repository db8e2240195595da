// NVML utilization samples; see nvml.h. All calls come from the flusher
// thread or the exit path, serialized by g_mu.
//
// The few NVML types are declared here rather than taken from nvml.h: the
// CUDA toolkit does not ship that header (the driver's development package
// does), and these declarations are NVML's stable ABI (the _v2 entry points
// exist since NVML 5.319; nvmlDeviceGetSamples since 5.319 too).
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <atomic>

#include "shim/base/clock.h"
#include "shim/base/config.h"
#include "shim/base/guard.h"
#include "shim/cuda/real_runtime.h"
#include "shim/device/nvml.h"
#include "shim/record/recorder.h"
#include "shim/record/trace_fields.h"

namespace pinscope::shim {

namespace {

namespace f = fields;
namespace u = fields::utilization;

using nvmlReturn_t = int;
constexpr nvmlReturn_t kNvmlSuccess = 0;
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
union NvmlValue {
  double d;
  unsigned int ui;
  unsigned long ul;
  unsigned long long ull;
  long long sll;
  int si;
  unsigned short us;
};
struct NvmlSample {
  unsigned long long timestamp_us;  // CLOCK_REALTIME, microseconds
  NvmlValue value;
};
enum NvmlValueType { kDouble = 0, kUint = 1, kUlong = 2, kUllong = 3, kSllong = 4, kSint = 5,
                     kUshort = 6 };
constexpr int kGpuUtilizationSamples = 1;  // NVML_GPU_UTILIZATION_SAMPLES

using InitFn = nvmlReturn_t (*)();
using CountFn = nvmlReturn_t (*)(unsigned int*);
using ByIndexFn = nvmlReturn_t (*)(unsigned int, nvmlDevice_t*);
using ByPciFn = nvmlReturn_t (*)(const char*, nvmlDevice_t*);
using SamplesFn = nvmlReturn_t (*)(nvmlDevice_t, int, unsigned long long, int*, unsigned int*,
                                   NvmlSample*);
using ErrorStringFn = const char* (*)(nvmlReturn_t);
// The driver API's, for the CUDA ordinal -> PCI bus id map.
using CuCountFn = int (*)(int*);
using CuGetFn = int (*)(int*, int);
using CuPciFn = int (*)(char*, int, int);

constexpr int kMaxDevices = 16;
constexpr unsigned kMaxSamples = 256;  // per device per call; NVML keeps about 120

enum State { kIdle, kActive, kOff };

struct Device {
  nvmlDevice_t handle = nullptr;
  int cuda_ordinal = -1;
  unsigned nvml_index = 0;
  char pci[32] = {};
  unsigned long long last_us = 0;
  bool described = false;
};

pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
std::atomic<int> g_state{kIdle};
SamplesFn g_samples = nullptr;
Device g_devices[kMaxDevices];
int g_device_count = 0;
NvmlSample g_buf[kMaxSamples];

void Off(const char* why) {
  g_state.store(kOff);
  char text[600];
  snprintf(text, sizeof text,
           "GPU utilization (NVML) is not recorded: %s; GPU busy time comes from kernel records "
           "only (PINSCOPE_CUPTI_KERNELS=all)",
           why);
  RecordNotice(f::kInfo, "nvml_unavailable", text);
}

void StartLocked() {
  const Config& cfg = GetConfig();
  if (!cfg.nvml) {
    g_state.store(kOff);
    return;
  }
  const char* path = cfg.nvml_path[0] ? cfg.nvml_path : "libnvidia-ml.so.1";
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    char why[300];
    snprintf(why, sizeof why, "%s could not be loaded", path);
    Off(why);
    return;
  }
  auto init = reinterpret_cast<InitFn>(dlsym(h, "nvmlInit_v2"));
  auto count = reinterpret_cast<CountFn>(dlsym(h, "nvmlDeviceGetCount_v2"));
  auto by_index = reinterpret_cast<ByIndexFn>(dlsym(h, "nvmlDeviceGetHandleByIndex_v2"));
  auto by_pci = reinterpret_cast<ByPciFn>(dlsym(h, "nvmlDeviceGetHandleByPciBusId_v2"));
  g_samples = reinterpret_cast<SamplesFn>(dlsym(h, "nvmlDeviceGetSamples"));
  if (!init || !count || !by_index || !g_samples) {
    Off("libnvidia-ml lacks nvmlInit_v2, nvmlDeviceGetCount_v2, "
        "nvmlDeviceGetHandleByIndex_v2 or nvmlDeviceGetSamples");
    return;
  }
  nvmlReturn_t rc = init();
  if (rc != kNvmlSuccess) {
    char why[120];
    snprintf(why, sizeof why, "nvmlInit_v2 failed (%d)", rc);
    Off(why);
    return;
  }
  // The devices this process sees, by CUDA ordinal (CUDA_VISIBLE_DEVICES and
  // CUDA's own order apply), matched to NVML's by PCI bus id.
  auto cu_count = reinterpret_cast<CuCountFn>(ResolveDriver("cuDeviceGetCount"));
  auto cu_get = reinterpret_cast<CuGetFn>(ResolveDriver("cuDeviceGet"));
  auto cu_pci = reinterpret_cast<CuPciFn>(ResolveDriver("cuDeviceGetPCIBusId"));
  int n = 0;
  if (cu_count && cu_get && cu_pci && by_pci && cu_count(&n) == 0 && n > 0) {
    for (int i = 0; i < n && g_device_count < kMaxDevices; ++i) {
      Device& d = g_devices[g_device_count];
      int dev = 0;
      if (cu_get(&dev, i) != 0 || cu_pci(d.pci, sizeof d.pci, dev) != 0) continue;
      if (by_pci(d.pci, &d.handle) != kNvmlSuccess) continue;
      d.cuda_ordinal = i;
      ++g_device_count;
    }
  }
  if (g_device_count == 0 && by_pci) {  // no driver API in sight: the runtime's
    auto rt_count = reinterpret_cast<CuCountFn>(ResolveCuda("cudaGetDeviceCount"));
    auto rt_pci = reinterpret_cast<CuPciFn>(ResolveCuda("cudaDeviceGetPCIBusId"));
    if (rt_count && rt_pci && rt_count(&n) == 0) {
      for (int i = 0; i < n && g_device_count < kMaxDevices; ++i) {
        Device& d = g_devices[g_device_count];
        if (rt_pci(d.pci, sizeof d.pci, i) != 0) continue;
        if (by_pci(d.pci, &d.handle) != kNvmlSuccess) continue;
        d.cuda_ordinal = i;
        ++g_device_count;
      }
    }
  }
  if (g_device_count == 0) {  // no PCI ids: every NVML device, unmatched
    unsigned total = 0;
    if (count(&total) != kNvmlSuccess) total = 0;
    for (unsigned i = 0; i < total && g_device_count < kMaxDevices; ++i) {
      Device& d = g_devices[g_device_count];
      if (by_index(i, &d.handle) != kNvmlSuccess) continue;
      d.nvml_index = i;
      ++g_device_count;
    }
  }
  if (g_device_count == 0) {
    Off("NVML lists none of this process's GPUs");
    return;
  }
  // Samples from one period back on (CUDA was first used at most a period
  // ago); older ones describe the time before the job.
  const uint64_t since_us = WallNs() / 1000 - uint64_t{cfg.flush_ms} * 1000;
  for (int i = 0; i < g_device_count; ++i) g_devices[i].last_us = since_us;
  g_state.store(kActive);
}

uint32_t Percent(const NvmlSample& s, int type) {
  switch (type) {
    case kDouble: return static_cast<uint32_t>(s.value.d + 0.5);
    case kUint: return s.value.ui;
    case kUlong: return static_cast<uint32_t>(s.value.ul);
    case kUllong: return static_cast<uint32_t>(s.value.ull);
    case kSllong: return static_cast<uint32_t>(s.value.sll);
    case kSint: return static_cast<uint32_t>(s.value.si);
    case kUshort: return s.value.us;
  }
  return 0;
}

void SampleLocked() {
  // NVML stamps samples with the wall clock; the trace's clock is
  // CLOCK_MONOTONIC: one offset, read now (a step of the wall clock between
  // two reads shifts the samples of one period by the step).
  const uint64_t mono = MonoNs(), wall = WallNs();
  for (int i = 0; i < g_device_count; ++i) {
    Device& d = g_devices[i];
    unsigned n = kMaxSamples;
    int type = kUint;
    if (g_samples(d.handle, kGpuUtilizationSamples, d.last_us, &type, &n, g_buf) != kNvmlSuccess)
      continue;  // NVML_ERROR_NOT_FOUND: no sample since last_us
    uint64_t ns[kMaxSamples];
    uint64_t pct[kMaxSamples];
    unsigned kept = 0;
    for (unsigned j = 0; j < n && j < kMaxSamples; ++j) {
      if (g_buf[j].timestamp_us <= d.last_us) continue;
      const uint64_t t = g_buf[j].timestamp_us * 1000;
      ns[kept] = t + mono > wall ? t + mono - wall : 0;
      pct[kept] = Percent(g_buf[j], type);
      ++kept;
    }
    for (unsigned j = 0; j < n && j < kMaxSamples; ++j)
      if (g_buf[j].timestamp_us > d.last_us) d.last_us = g_buf[j].timestamp_us;
    if (!kept) continue;
    // NVML returns samples oldest first on the drivers tried; sort to be sure
    // (at most kMaxSamples, insertion sort).
    for (unsigned a = 1; a < kept; ++a)
      for (unsigned b = a; b > 0 && ns[b - 1] > ns[b]; --b) {
        std::swap(ns[b - 1], ns[b]);
        std::swap(pct[b - 1], pct[b]);
      }
    Packet p(f::packet::kUtilization, mono);
    p.e().SInt(u::kCudaDevice, d.cuda_ordinal);
    p.e().Varint(u::kNvmlIndex, d.nvml_index);
    if (!d.described && d.pci[0]) p.e().String(u::kPciBusId, d.pci);
    d.described = true;
    p.e().PackedVarints(u::kSampleNs, ns, kept);
    p.e().PackedVarints(u::kPercent, pct, kept);
    p.Commit();
  }
}

}  // namespace

void NvmlSamplePeriodic() {
  if (g_state.load(std::memory_order_relaxed) == kOff || !CudaSeen()) return;
  HookScope scope;
  pthread_mutex_lock(&g_mu);
  if (g_state.load() == kIdle) StartLocked();
  if (g_state.load() == kActive) SampleLocked();
  pthread_mutex_unlock(&g_mu);
}

void NvmlFinish() {
  if (g_state.load(std::memory_order_relaxed) == kOff || !CudaSeen()) return;
  HookScope scope;
  pthread_mutex_lock(&g_mu);
  if (g_state.load() == kIdle) StartLocked();  // a job shorter than a period
  if (g_state.load() == kActive) SampleLocked();
  pthread_mutex_unlock(&g_mu);
}

void NvmlForkChild() {
  g_state.store(kOff);
  pthread_mutex_init(&g_mu, nullptr);
}

}  // namespace pinscope::shim
