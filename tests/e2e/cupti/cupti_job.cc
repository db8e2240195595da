// A small "job" for the CUPTI end-to-end tests, linked against the CUDA
// runtime test double (fake_cudart13) and run under LD_PRELOAD=libpinscope.so.
// It makes 3 copies (call ids 1-3) and 2 synchronizations (4-5), prints a
// checksum on stdout and exits with status 3, so a test can check that
// pinscope changed neither. What the test needs to know about the process
// itself goes to the file named by $JOB_DIAG, never to stdout/stderr.
//   cupti_job [fork] [sleep]
//     fork:  a forked child makes one copy (it must not touch CUPTI)
//     sleep: waits 300 ms after the copies (periodic flushes happen)
//     storm: then 1500 simulated API calls (each a memcpy and a kernel
//            record in the double), one per millisecond: a job that launches
//            many kernels, for the sampled kernel recording
//     paced: then 130 copies of 512 bytes, one every 10 ms (1.3 s): for the
//            device-record windows (PINSCOPE_CUPTI_WINDOW_MS)
//     pause: then recording paused (pinscope_recording_pause), 5 copies of
//            256 bytes and 100 ms, resumed, one copy of 128 bytes
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

#include "fake_cupti.h"

namespace {

// True if a libcupti is mapped into this process.
int CuptiMapped() {
  FILE* f = fopen("/proc/self/maps", "r");
  if (!f) return -1;
  char line[4096];
  int found = 0;
  while (fgets(line, sizeof line, f))
    if (strstr(line, "libcupti")) found = 1;
  fclose(f);
  return found;
}

// The test double's counters, when pinscope loaded it (by path, privately).
bool FakeStats(fakecupti_stats* s) {
  const char* path = getenv("PINSCOPE_CUPTI_PATH");
  if (!path || !*path) return false;
  void* h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (!h) return false;
  auto get = reinterpret_cast<void (*)(fakecupti_stats*)>(dlsym(h, "fakecupti_get_stats"));
  if (get) get(s);
  dlclose(h);
  return get != nullptr;
}

constexpr int kCustom2 = 5;  // CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2

}  // namespace

int main(int argc, char** argv) {
  bool do_fork = false, do_sleep = false, do_storm = false, do_paced = false, do_pause = false;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "storm")) do_storm = true;
    if (!strcmp(argv[i], "fork")) do_fork = true;
    if (!strcmp(argv[i], "sleep")) do_sleep = true;
    if (!strcmp(argv[i], "paced")) do_paced = true;
    if (!strcmp(argv[i], "pause")) do_pause = true;
  }
  FILE* diag = fopen(getenv("JOB_DIAG") ? getenv("JOB_DIAG") : "/dev/null", "w");
  fprintf(diag, "cupti_loaded_before=%d\n", CuptiMapped());

  void* dev = nullptr;
  cudaMalloc(&dev, 1 << 16);  // without a GPU the copies fail: the job goes on
  std::vector<unsigned char> host(1 << 16);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<unsigned char>(i * 7);
  std::vector<unsigned char> back(4000, 0);
  cudaMemcpy(dev, host.data(), 1000, cudaMemcpyHostToDevice);
  cudaMemcpy(static_cast<char*>(dev) + 1000, host.data() + 1000, 2000, cudaMemcpyHostToDevice);
  cudaMemcpyAsync(back.data(), dev, 3000, cudaMemcpyDeviceToHost, nullptr);
  cudaStreamSynchronize(nullptr);
  cudaDeviceSynchronize();
  unsigned long sum = 0;
  for (unsigned char c : back) sum = sum * 31 + c;

  if (do_sleep) usleep(300 * 1000);
  if (do_storm) {
    void* h = dlopen(getenv("PINSCOPE_CUPTI_PATH"), RTLD_NOW | RTLD_NOLOAD);
    auto api = h ? reinterpret_cast<void (*)()>(dlsym(h, "fakecupti_simulate_api")) : nullptr;
    for (int i = 0; api && i < 1500; ++i) {
      api();
      usleep(1000);
    }
    fprintf(diag, "storm_calls=%d\n", api ? 1500 : 0);
  }
  if (do_paced) {
    for (int i = 0; i < 130; ++i) {
      cudaMemcpy(dev, host.data(), 512, cudaMemcpyHostToDevice);
      usleep(10 * 1000);
    }
    fprintf(diag, "paced_copies=130\n");
  }
  if (do_pause) {
    auto pause = reinterpret_cast<int (*)(int)>(dlsym(RTLD_DEFAULT, "pinscope_recording_pause"));
    fprintf(diag, "pause_rc=%d\n", pause ? pause(1) : -9);
    for (int i = 0; i < 5; ++i) cudaMemcpy(dev, host.data(), 256, cudaMemcpyHostToDevice);
    usleep(100 * 1000);
    fprintf(diag, "resume_rc=%d\n", pause ? pause(0) : -9);
    cudaMemcpy(dev, host.data(), 128, cudaMemcpyHostToDevice);
  }
  fakecupti_stats s{};
  if (FakeStats(&s)) {
    fprintf(diag, "fake_pushes=%lu\nfake_pops=%lu\nfake_flushes=%lu\nfake_runtime_off=%lu\n",
            s.pushes[kCustom2], s.pops[kCustom2], s.flushes, s.runtime_cbids_off);
    fprintf(diag, "fake_registrations=%lu\nfake_finalizes=%lu\nfake_calls_while_finalized=%lu\n",
            s.registrations, s.finalizes, s.calls_while_finalized);
  }
  if (do_fork) {
    fflush(stdout);
    fflush(diag);
    pid_t pid = fork();
    if (pid == 0) {
      fakecupti_stats before{}, after{};
      bool have = FakeStats(&before);
      cudaMemcpy(dev, host.data(), 500, cudaMemcpyHostToDevice);
      FakeStats(&after);
      fprintf(diag, "child_pushes_delta=%lu\n",
              have ? after.pushes[kCustom2] - before.pushes[kCustom2] : 0ul);
      fclose(diag);
      _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    fprintf(diag, "child_status=%d\n", status);
  }
  fprintf(diag, "cupti_loaded_after=%d\n", CuptiMapped());
  fclose(diag);
  printf("checksum=%lu\n", sum);
  return 3;
}
