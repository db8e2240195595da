// A TEST DOUBLE of NVIDIA's libnvidia-ml.so.1 (the subset pinscope's NVML
// sampler uses, shim/device/nvml_sampler.cc), for CPU-only CI.
//
//   FAKENVML_DEVICES  devices (default 1), PCI bus 0x17 + index, domain 0,
//                     as tests/doubles/fake_cudart answers cudaDeviceGetPCIBusId
//   FAKENVML_PERCENT  every sample's utilization (default 40)
//   FAKENVML_MODE     ok (default), noinit (nvmlInit_v2 fails)
//
// Samples fall on every 10 ms boundary of the wall clock (NVML stamps them
// in CLOCK_REALTIME microseconds; the double's wall clock does not step);
// nvmlDeviceGetSamples returns those after lastSeenTimeStamp up to now, at
// most 120 (the newest), oldest first.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FAKE_API extern "C" __attribute__((visibility("default")))

namespace {

struct Device {
  int index;
};
Device g_devices[8] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};

int Env(const char* name, int def) {
  const char* s = getenv(name);
  return s && *s ? atoi(s) : def;
}
int Count() {
  int n = Env("FAKENVML_DEVICES", 1);
  return n < 0 ? 0 : n > 8 ? 8 : n;
}
unsigned long long ClockUs(clockid_t id) {
  timespec ts;
  clock_gettime(id, &ts);
  return static_cast<unsigned long long>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}
// NVML's wall clock, without the CI machine's steps (as in fake_cupti.cc):
// CLOCK_REALTIME read once, at load, advanced by CLOCK_MONOTONIC.
const unsigned long long g_wall_offset_us = ClockUs(CLOCK_REALTIME) - ClockUs(CLOCK_MONOTONIC);
unsigned long long NowUs() { return ClockUs(CLOCK_MONOTONIC) + g_wall_offset_us; }

union Value {
  double d;
  unsigned int ui;
  unsigned long long ull;
};
struct Sample {
  unsigned long long ts;
  Value v;
};

}  // namespace

FAKE_API int nvmlInit_v2() {
  const char* m = getenv("FAKENVML_MODE");
  return m && !strcmp(m, "noinit") ? 999 : 0;
}
FAKE_API int nvmlShutdown() { return 0; }
FAKE_API int nvmlDeviceGetCount_v2(unsigned* n) {
  *n = static_cast<unsigned>(Count());
  return 0;
}
FAKE_API int nvmlDeviceGetHandleByIndex_v2(unsigned i, Device** d) {
  if (static_cast<int>(i) >= Count()) return 2;  // NVML_ERROR_INVALID_ARGUMENT
  *d = &g_devices[i];
  return 0;
}
// "00000000:17:00.0" or "0000:17:00.0": the bus after the domain.
FAKE_API int nvmlDeviceGetHandleByPciBusId_v2(const char* id, Device** d) {
  const char* c = id ? strchr(id, ':') : nullptr;
  unsigned bus = 0;
  if (!c || sscanf(c + 1, "%x", &bus) != 1) return 2;
  int i = static_cast<int>(bus) - 0x17;
  if (i < 0 || i >= Count()) return 6;  // NVML_ERROR_NOT_FOUND
  *d = &g_devices[i];
  return 0;
}
FAKE_API int nvmlDeviceGetSamples(Device* d, int type, unsigned long long last, int* value_type,
                                  unsigned* count, Sample* out) {
  if (!d || type != 1 || !count) return 2;
  const unsigned long long now = NowUs(), step = 10000;
  unsigned long long first = (last / step + 1) * step;
  if (now > 120 * step && first < now - 120 * step) first = (now / step - 119) * step;
  if (first > now) return 6;  // NVML_ERROR_NOT_FOUND: nothing new
  unsigned n = static_cast<unsigned>((now - first) / step + 1);
  if (!out) {
    *count = n;
    return 0;
  }
  if (n > *count) n = *count;
  *value_type = 1;  // NVML_VALUE_TYPE_UNSIGNED_INT
  const unsigned pct = static_cast<unsigned>(Env("FAKENVML_PERCENT", 40));
  for (unsigned i = 0; i < n; ++i) {
    out[i].ts = first + i * step;
    out[i].v.ui = pct;
  }
  *count = n;
  return 0;
}
