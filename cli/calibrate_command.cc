// `pinscope calibrate`: measures pageable and pinned host<->device bandwidth
// on this machine's GPU and saves it (analyzer/read/calibration.h) for the report.
// Exit status: 0 measured and saved; 1 a measurement or the save failed;
// 2 bad usage, or no CUDA runtime / GPU found.
#include <getopt.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string>

#include "analyzer/read/calibration.h"
#include "cli/cli_common.h"
#include "cli/commands.h"
#include "cli/cuda_bench.h"
#include "cli/cuda_loader.h"

namespace pinscope::cli {

const char kCalibrateUsage[] =
    "Usage: pinscope calibrate [options]\n"
    "\n"
    "Measures host->device (H2D) and device->host (D2H) copy bandwidth from pageable\n"
    "and from pinned memory on this machine's GPU, prints the table and saves it for\n"
    "`pinscope report` (which states the pinned bandwidth its estimates assume).\n"
    "\n"
    "Options:\n"
    "  -o, --output FILE  where to save (default: $PINSCOPE_CALIBRATION, else\n"
    "                     $XDG_CACHE_HOME/pinscope/calibration.json, else\n"
    "                     ~/.cache/pinscope/calibration.json)\n"
    "      --sizes LIST   copy sizes, comma-separated, K/M/G suffixes are binary\n"
    "                     (default: 1M,8M,64M,256M)\n"
    "      --repeats N    timed copies per measurement, median taken (1 to 1000;\n"
    "                     default 10), after 2 warm-up copies\n"
    "      --device N     CUDA device number (default 0)\n"
    "      --cudart PATH  the CUDA runtime library to load (default: $PINSCOPE_CUDART,\n"
    "                     else libcudart.so.13/.12 from the loader path, python3's\n"
    "                     nvidia wheels, /usr/local/cuda/lib64)\n"
    "  -h, --help         this help\n"
    "\n"
    "Exit status: 0 saved; 1 a measurement or the save failed; 2 bad usage, or no\n"
    "CUDA runtime / GPU found.\n";

namespace {

constexpr int kExitFailed = 1;
constexpr int kExitNoGpu = 2;

std::string VersionText(int v) {
  // CUDA encodes 13.0 as 13000, 12.8 as 12080.
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

std::string UtcNow() {
  std::time_t now = std::time(nullptr);
  struct tm tm_now;
  gmtime_r(&now, &tm_now);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm_now);
  return buf;
}

// mkdir -p of the folder that will hold `file` (new folders 0700).
bool MakeParentDirs(const std::string& file, std::string* error) {
  size_t slash = file.rfind('/');
  if (slash == std::string::npos || slash == 0) return true;
  const std::string dir = file.substr(0, slash);
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i != dir.size() && dir[i] != '/') continue;
    const std::string prefix = dir.substr(0, i);
    if (mkdir(prefix.c_str(), 0700) != 0 && errno != EEXIST) {
      *error = "cannot create " + prefix + ": " + std::strerror(errno);
      return false;
    }
  }
  return true;
}

void PrintRow(const BandwidthPoint& p) {
  std::printf("%10s  %12.1f  %10.1f  %12.1f  %10.1f  %10.1f  %9.1f  %8.1f  %8.1f  %8.1f\n",
              FormatBytes(p.bytes).c_str(), p.h2d_pageable_gbps, p.h2d_pinned_gbps,
              p.d2h_pageable_gbps, p.d2h_pinned_gbps, p.host_copy_gbps, p.register_gbps,
              p.first_touch_gbps, p.map_touch_gbps, p.shm_release_gbps);
  std::fflush(stdout);
}

}  // namespace

int CalibrateCommand(int argc, char** argv) {
  enum { kSizes = 1000, kRepeats, kCudart, kDevice };
  static const struct option kLong[] = {
      {"output", required_argument, nullptr, 'o'},
      {"sizes", required_argument, nullptr, kSizes},
      {"repeats", required_argument, nullptr, kRepeats},
      {"cudart", required_argument, nullptr, kCudart},
      {"device", required_argument, nullptr, kDevice},
      {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0},
  };
  std::string output, cudart;
  BenchSettings settings;
  settings.sizes = {1ull << 20, 8ull << 20, 64ull << 20, 256ull << 20};
  ResetGetopt();
  int c;
  long value = 0;
  while ((c = getopt_long(argc, argv, ":o:h", kLong, nullptr)) != -1) {
    switch (c) {
      case 'o':
        if (!*optarg) {
          PrintUsageError("calibrate", "--output needs a file name");
          return kExitUsage;
        }
        output = optarg;
        break;
      case kSizes: {
        std::string bad;
        if (!ParseSizeList(optarg, &settings.sizes, &bad)) {
          PrintUsageError("calibrate", "--sizes expects sizes such as 1M,8M,64M,256M; '" + bad +
                                           "' is not a size above 0");
          return kExitUsage;
        }
        std::sort(settings.sizes.begin(), settings.sizes.end());
        settings.sizes.erase(std::unique(settings.sizes.begin(), settings.sizes.end()),
                             settings.sizes.end());
        break;
      }
      case kRepeats:
        if (!ParseIntOption("calibrate", "--repeats", optarg, 1, 1000, &value)) return kExitUsage;
        settings.repeats = static_cast<int>(value);
        break;
      case kCudart:
        if (!*optarg) {
          PrintUsageError("calibrate", "--cudart needs a path");
          return kExitUsage;
        }
        cudart = optarg;
        break;
      case kDevice:
        if (!ParseIntOption("calibrate", "--device", optarg, 0, 1023, &value)) return kExitUsage;
        settings.device = static_cast<int>(value);
        break;
      case 'h':
        std::fputs(kCalibrateUsage, stdout);
        return 0;
      default:
        PrintGetoptError("calibrate", c, argv);
        return kExitUsage;
    }
  }
  if (optind < argc) {
    PrintUsageError("calibrate", std::string("unexpected argument '") + argv[optind] + "'");
    return kExitUsage;
  }
  if (output.empty()) output = DefaultCalibrationPath();
  if (output.empty()) {
    PrintUsageError("calibrate", "no place to save the result (HOME is unset): use --output FILE");
    return kExitUsage;
  }

  CudaApi api;
  std::string error;
  if (!LoadCudaRuntime(CudartCandidates(cudart), &api, &error)) {
    std::fprintf(stderr, "pinscope calibrate: no CUDA runtime / GPU found (%s)\n", error.c_str());
    return kExitNoGpu;
  }
  int count = 0;
  if (cudaError_t status = api.GetDeviceCount(&count); status != cudaSuccess || count <= 0) {
    std::string why = status != cudaSuccess ? "cudaGetDeviceCount: " + api.ErrorText(status)
                                            : std::string("cudaGetDeviceCount found 0 devices");
    std::fprintf(stderr, "pinscope calibrate: no CUDA runtime / GPU found (%s; runtime %s)\n",
                 why.c_str(), api.path.c_str());
    return kExitNoGpu;
  }
  if (settings.device >= count) {
    PrintUsageError("calibrate", "--device " + std::to_string(settings.device) +
                                     ": this machine has " + std::to_string(count) +
                                     " CUDA device(s), numbered from 0");
    return kExitUsage;
  }
  int runtime_version = 0, driver_version = 0;
  api.RuntimeGetVersion(&runtime_version);
  api.DriverGetVersion(&driver_version);
  const std::string gpu = GpuName(api, settings.device);

  std::printf("pinscope calibrate: %s (device %d), CUDA runtime %s (%s), driver supports %s\n",
              gpu.c_str(), settings.device, VersionText(runtime_version).c_str(), api.path.c_str(),
              VersionText(driver_version).c_str());
  std::printf(
      "cudaMemcpyAsync timed with CUDA events: median of %d copies after %d warm-up; "
      "GB/s = 1e9 bytes/s\n\n",
      settings.repeats, settings.warmup);
  std::printf("%10s  %12s  %10s  %12s  %10s  %10s  %9s  %8s  %8s  %8s\n", "size",
              "H2D pageable", "H2D pinned", "D2H pageable", "D2H pinned", "host->pin",
              "register", "1st touch", "shm map", "release");
  std::fflush(stdout);

  std::vector<BandwidthPoint> points;
  if (!MeasureBandwidth(api, settings, &points, &error, PrintRow)) {
    std::fprintf(stderr, "pinscope calibrate: %s\n", error.c_str());
    return kExitFailed;
  }

  Calibration calibration;
  calibration.gpu = gpu;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  calibration.hostname = host;
  calibration.date = UtcNow();
  calibration.source =
      "pinscope calibrate " PINSCOPE_VERSION ": median of " + std::to_string(settings.repeats) +
      " CUDA-event-timed cudaMemcpyAsync copies, CUDA runtime " + VersionText(runtime_version);
  calibration.points = points;
  if (!MakeParentDirs(output, &error) || !SaveCalibration(calibration, output, &error)) {
    std::fprintf(stderr, "pinscope calibrate: cannot save the calibration to %s: %s\n",
                 output.c_str(), error.c_str());
    return kExitFailed;
  }
  std::printf(
      "\nsaved to %s (read by `pinscope report`; `pinscope run` copies it into each run "
      "folder)\n",
      output.c_str());
  return 0;
}

}  // namespace pinscope::cli
