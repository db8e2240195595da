// A job that behaves like torch.profiler (Kineto) towards CUPTI, for the
// coexistence test: linked against the CUDA runtime and CUPTI test doubles
// (so libcupti is loaded before pinscope looks for one, as with torch), it
// makes 2 copies, then takes CUPTI's activity buffers itself, enables the
// kinds it wants (MEMCPY and RUNTIME before registering, the rest after),
// makes 3 copies inside its own CUSTOM0 correlation regions, flushes and
// counts what its callbacks got, stops "profiling", and makes 1 more copy.
// Findings go to $JOB_DIAG; stdout gets a checksum; exit status 0.
//   cupti_profiler_job [tsc]
//     tsc: first registers its own clock, as Kineto does in TSC mode (torch
//          2.11 on the H200 did so by default)
#include <cuda_runtime_api.h>
#include <cupti_activity.h>
#include <stdio.h>
#include <stdlib.h>

#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

#include "fake_cupti.h"

namespace {

int g_memcpy = 0, g_kernel = 0, g_custom0 = 0, g_custom2 = 0, g_other_corr = 0;

void CUPTIAPI Requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 1 << 16;
  *buffer = static_cast<uint8_t*>(aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI Completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_MEMCPY: ++g_memcpy; break;
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: ++g_kernel; break;
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        auto* c = reinterpret_cast<CUpti_ActivityExternalCorrelation*>(rec);
        if (c->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0) {
          ++g_custom0;
        } else if (c->externalKind == CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2) {
          ++g_custom2;
        } else {
          ++g_other_corr;
        }
        break;
      }
      default: break;
    }
  }
  free(buffer);
}

uint64_t CUPTIAPI MyClock() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
  bool tsc = argc > 1 && !strcmp(argv[1], "tsc");
  FILE* diag = fopen(getenv("JOB_DIAG") ? getenv("JOB_DIAG") : "/dev/null", "w");
  void* dev = nullptr;
  if (cudaMalloc(&dev, 1 << 16) != cudaSuccess) return 10;
  std::vector<unsigned char> host(1 << 16, 5);
  // Before the profiler: pinscope records these (call ids 1, 2).
  cudaMemcpy(dev, host.data(), 1000, cudaMemcpyHostToDevice);
  cudaMemcpy(dev, host.data(), 2000, cudaMemcpyHostToDevice);

  // The profiler starts: some kinds enabled before it registers its buffers.
  if (tsc) cuptiActivityRegisterTimestampCallback(MyClock);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME);
  CUptiResult rc = cuptiActivityRegisterCallbacks(Requested, Completed);
  fprintf(diag, "register_rc=%d\n", static_cast<int>(rc));
  uint64_t kinds = fakecupti_enabled_kinds();
  fprintf(diag, "memcpy_still_enabled=%d\n",
          static_cast<int>(kinds >> CUPTI_ACTIVITY_KIND_MEMCPY & 1));
  fprintf(diag, "runtime_still_enabled=%d\n",
          static_cast<int>(kinds >> CUPTI_ACTIVITY_KIND_RUNTIME & 1));
  fakecupti_stats st{};
  fakecupti_get_stats(&st);
  fprintf(diag, "runtime_calls_off=%lu\n", st.runtime_cbids_off);
  fprintf(diag, "pinscope_kernels_disabled=%d\n",
          static_cast<int>(!(kinds >> CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL & 1)));
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
  cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  for (int i = 0; i < 3; ++i) {  // call ids 3-5
    cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, 1000 + i);
    cudaMemcpy(dev, host.data(), 3000, cudaMemcpyHostToDevice);
    cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, nullptr);
  }
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  fprintf(diag, "program_memcpy=%d\nprogram_kernel=%d\nprogram_custom0=%d\nprogram_custom2=%d\n"
          "program_other_corr=%d\n",
          g_memcpy, g_kernel, g_custom0, g_custom2, g_other_corr);
  // The profiler stops.
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_RUNTIME);

  cudaMemcpy(dev, host.data(), 4000, cudaMemcpyHostToDevice);  // call id 6
  fakecupti_stats s{};
  fakecupti_get_stats(&s);
  fprintf(diag, "fake_pushes_custom2=%lu\nfake_pops_custom2=%lu\n", s.pushes[5], s.pops[5]);
  fclose(diag);
  printf("checksum=%d\n", host[17]);
  return 0;
}
