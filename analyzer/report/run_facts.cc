// The run's facts; see run_facts.h.
#include "analyzer/report/run_facts.h"

#include <cstdint>
#include <ctime>

#include "analyzer/common/format.h"

namespace pinscope {
namespace {

std::string CudaVersion(int32_t version) {
  if (version <= 0) return "unknown";
  return StringPrintf("%d.%d", version / 1000, (version % 1000) / 10);
}

std::string PcieLink(const trace::HostFacts& host) {
  if (host.pcie_link_speed_gts_x10() == 0) return "PCIe link unknown";
  // Per-lane rates of PCIe generations 1 to 6, GT/s x10.
  static constexpr uint32_t kGenerationSpeeds[] = {25, 50, 80, 160, 320, 640};
  int generation = 0;
  for (int i = 0; i < 6; ++i) {
    if (host.pcie_link_speed_gts_x10() == kGenerationSpeeds[i]) generation = i + 1;
  }
  std::string text = "PCIe ";
  if (generation > 0) text += "Gen" + std::to_string(generation) + " ";
  text += "x" + std::to_string(host.pcie_link_width()) +
          StringPrintf(" (%.1f GT/s)", host.pcie_link_speed_gts_x10() / 10.0);
  return text;
}

std::string UtcTime(uint64_t wall_ns) {
  if (wall_ns == 0) return "unknown time";
  const time_t seconds = static_cast<time_t>(wall_ns / 1000000000ull);
  struct tm tm_utc;
  gmtime_r(&seconds, &tm_utc);
  char text[64];
  std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M:%S UTC", &tm_utc);
  return text;
}

}  // namespace

std::vector<RunFact> RunFacts(const Report& report_) {
  std::vector<RunFact> facts;
  const auto add = [&](std::string name, std::string value) {
    facts.push_back({std::move(name), std::move(value)});
  };
  const trace::ProcessHeader& root = report_.root_header();
  const trace::HostFacts& host = root.host();
  const int root_index = report_.root_index() < 0 ? 0 : report_.root_index();
  add("Command", report_.processes().empty() ? "-" : report_.processes()[root_index].command);
  add("Run", "id " + (report_.run_id().empty() ? std::string("-") : report_.run_id()) + " on " +
                 (root.hostname().empty() ? std::string("unknown host") : root.hostname()) +
                 ", started " + UtcTime(root.start_wall_ns()) + ", lasted " +
                 FormatDuration(report_.duration_ns()));
  size_t workers = 0, execs = 0, helpers = 0;
  for (const ProcessSummary& p : report_.processes()) {
    if (p.helper)
      ++helpers;
    else if (p.origin == trace::ORIGIN_FORK)
      ++workers;
    else if (p.origin == trace::ORIGIN_EXEC)
      ++execs;
  }
  add("Processes", std::to_string(report_.processes().size()) + " (" + std::to_string(workers) +
                       " forked, " + std::to_string(execs) + " exec'd, " + std::to_string(helpers) +
                       " helper" + (helpers == 1 ? "" : "s") + ")");
  std::string cores = std::to_string(host.logical_cores()) + " logical / " +
                      std::to_string(host.physical_cores()) + " physical cores, " +
                      std::to_string(host.affinity_cores()) + " in affinity, ";
  cores +=
      host.cgroup_cpu_quota_millicores() == 0
          ? "no cgroup CPU quota"
          : StringPrintf("cgroup CPU quota %.2f CPUs", host.cgroup_cpu_quota_millicores() / 1000.0);
  cores += "; " + FormatBytes(host.ram_bytes()) + " RAM";
  if (host.cgroup_memory_limit_bytes() != 0) {
    cores += ", cgroup memory limit " + FormatBytes(host.cgroup_memory_limit_bytes());
  }
  add("Host", cores);
  add("/dev/shm", host.shm_capacity_bytes() == 0
                      ? "capacity unknown"
                      : FormatBytes(host.shm_capacity_bytes()) + " capacity, " +
                            FormatBytes(host.shm_free_bytes()) + " free at start");
  std::string gpus;
  for (const std::string& name : host.gpu_names()) gpus += (gpus.empty() ? "" : ", ") + name;
  add("GPU", (gpus.empty() ? std::string("none seen") : gpus) + "; " + PcieLink(host));
  if (report_.cuda()) {
    const trace::CudaRuntimeInfo& cuda = *report_.cuda();
    add("CUDA", "runtime " + CudaVersion(cuda.runtime_version()) + ", driver " +
                    CudaVersion(cuda.driver_version()) + ", " +
                    std::to_string(cuda.device_count()) +
                    (cuda.device_count() == 1 ? " device" : " devices") +
                    (cuda.runtime_path().empty() ? "" : " (" + cuda.runtime_path() + ")"));
  } else {
    add("CUDA", "no CUDA runtime loaded");
  }
  add("Trace", FormatCount(report_.packets()) + " packets replayed; shim " +
                   (root.shim_version().empty() ? std::string("unknown") : root.shim_version()) +
                   ", kernel " + host.kernel_release() + ", glibc " + host.libc_version());
  return facts;
}

}  // namespace pinscope
