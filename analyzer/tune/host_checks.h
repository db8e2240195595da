// The "four physical checks" `pinscope tune` prints before its first trial,
// as facts of the machine it runs on: /dev/shm against the batches the
// workers hold; physical, logical, affinity and cgroup cores, and the GPUs;
// the memory available for pinning; each NVIDIA GPU's PCIe link, current
// against maximum. Read from /proc, /sys and the cgroup files under a root
// folder ("/" on the machine, a fake tree in tests); the parsers are pure.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "analyzer/tune/tune_model.h"

namespace pinscope::tune {

struct PcieLink {
  std::string address;   // "0000:3b:00.0"
  std::string name;      // from the class: "3D controller", "VGA controller"
  double speed_gts = 0;  // current_link_speed, GT/s
  double max_speed_gts = 0;
  int width = 0, max_width = 0;
  int Gen() const;  // 1..6 from the speed, 0 unknown
  int MaxGen() const;
  bool BelowMax() const;  // a known speed or width under its maximum
};

struct HostFacts {
  bool shm_known = false;
  uint64_t shm_capacity_bytes = 0, shm_free_bytes = 0;
  uint32_t logical_cores = 0;   // online CPUs
  uint32_t physical_cores = 0;  // distinct (package, core) pairs; 0 unknown
  uint32_t affinity_cores = 0;  // Cpus_allowed_list of this process
  double cgroup_cpus = 0;       // cpu.max quota / period of the tightest ancestor; 0 none
  uint64_t mem_total_bytes = 0, mem_available_bytes = 0;
  uint64_t cgroup_memory_max = 0;      // 0 none
  uint64_t cgroup_memory_current = 0;  // of the cgroup with that limit
  int gpus = -1;                       // -1 unknown
  std::string gpus_source;             // "the trace", "nvidia-smi -L"
  bool pci_readable = false;           // /sys/bus/pci/devices could be listed
  std::vector<PcieLink> nvidia;        // vendor 0x10de, display class (0x03xxxx)

  // Cores the job may use: min(affinity (else logical), whole cores of the
  // cgroup quota, at least 1); 0 unknown.
  uint32_t UsableCores() const;
  // "affinity 16, cgroup quota none"
  std::string CoresWhy() const;
  // min(MemAvailable, cgroup memory.max - memory.current); 0 unknown.
  uint64_t AvailableMemory() const;
};

// Reads everything but /dev/shm (statvfs of `shm_path`, which is read when
// non-empty) and the GPU count under `root` ("" or "/" for this machine).
HostFacts ReadHostFacts(const std::string& root, const std::string& shm_path);

// Parsers, exposed for tests.
uint32_t CountCpuList(const std::string& list);  // "0-3,8,10-11" -> 7
std::vector<int> ParseCpuList(const std::string& list);
uint64_t MeminfoValue(const std::string& meminfo, const std::string& key);  // bytes
double ParseCpuMax(const std::string& text);        // "150000 100000" -> 1.5; "max ..." -> 0
uint64_t ParseMemoryMax(const std::string& text);   // "max" -> 0
double ParseLinkSpeed(const std::string& text);     // "16.0 GT/s PCIe" -> 16
int GenOfSpeed(double gts);                         // 2.5 -> 1 ... 64 -> 6
int CountNvidiaSmiGpus(const std::string& output);  // lines "GPU N: ..."

// The checks as text, for a baseline whose batches and workers are in
// `baseline`, and as JSON.
void WriteHostChecks(const HostFacts& host, const RunModel& baseline, uint64_t pin_budget,
                     std::ostream& out);
nlohmann::ordered_json HostChecksJson(const HostFacts& host, const RunModel& baseline,
                                      uint64_t pin_budget);

}  // namespace pinscope::tune
