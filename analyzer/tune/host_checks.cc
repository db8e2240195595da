// The four physical checks: reading the machine's files and writing them as
// facts; see host_checks.h. cgroup v2 (cpu.max, memory.max) and v1
// (cpu.cfs_quota_us, memory.limit_in_bytes) are both read, at the
// process's own cgroup and every ancestor: the tightest limit wins.
#include "analyzer/tune/host_checks.h"

#include <dirent.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <sstream>

#include "analyzer/common/format.h"
#include "analyzer/tune/tune_guards.h"

namespace pinscope::tune {
namespace {

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}

uint64_t LeadingU64(const std::string& s) {
  uint64_t v = 0;
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) v = v * 10 + (s[i] - '0');
  return v;
}

// The cgroup paths of this process: v2's "0::/path", and v1's per
// controller ("4:memory:/path", "1:cpu,cpuacct:/path").
struct CgroupPaths {
  std::string v2;
  std::string cpu_v1, memory_v1;
};

CgroupPaths ReadCgroupPaths(const std::string& root) {
  CgroupPaths out;
  std::istringstream in(ReadText(root + "/proc/self/cgroup"));
  std::string line;
  while (std::getline(in, line)) {
    const size_t a = line.find(':');
    const size_t b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const std::string path = line.substr(b + 1);
    if (line.compare(0, a, "0") == 0 && controllers.empty()) out.v2 = path;
    std::stringstream names(controllers);
    std::string name;
    while (std::getline(names, name, ',')) {
      if (name == "cpu") out.cpu_v1 = path;
      if (name == "memory") out.memory_v1 = path;
    }
  }
  return out;
}

// `base` + `path` and each of its ancestors up to `base` itself.
std::vector<std::string> Levels(const std::string& base, std::string path) {
  std::vector<std::string> out;
  while (!path.empty() && path.back() == '/') path.pop_back();
  while (true) {
    out.push_back(base + path);
    if (path.empty()) break;
    const size_t slash = path.rfind('/');
    path = slash == std::string::npos ? "" : path.substr(0, slash);
  }
  return out;
}

void ReadCgroups(const std::string& root, HostFacts* h) {
  const CgroupPaths paths = ReadCgroupPaths(root);
  const std::string fs = root + "/sys/fs/cgroup";
  double cpus = 0;
  uint64_t mem = 0, current = 0;
  const auto take_cpu = [&cpus](double c) {
    if (c > 0 && (cpus == 0 || c < cpus)) cpus = c;
  };
  const auto take_mem = [&mem, &current](uint64_t limit, uint64_t used) {
    if (limit > 0 && (mem == 0 || limit < mem)) mem = limit, current = used;
  };
  // v2: the unified hierarchy at /sys/fs/cgroup (or /sys/fs/cgroup/unified
  // on a hybrid host, where it holds no limits of its own).
  for (const std::string& dir : Levels(fs, paths.v2)) {
    take_cpu(ParseCpuMax(ReadText(dir + "/cpu.max")));
    take_mem(ParseMemoryMax(ReadText(dir + "/memory.max")),
             LeadingU64(ReadText(dir + "/memory.current")));
  }
  // v1: per controller.
  for (const char* mount : {"/cpu", "/cpu,cpuacct", "/cpuacct,cpu"}) {
    for (const std::string& dir : Levels(fs + mount, paths.cpu_v1)) {
      const std::string quota = Trim(ReadText(dir + "/cpu.cfs_quota_us"));
      const std::string period = Trim(ReadText(dir + "/cpu.cfs_period_us"));
      if (!quota.empty() && quota[0] != '-' && !period.empty())
        take_cpu(ParseCpuMax(quota + " " + period));
    }
  }
  for (const std::string& dir : Levels(fs + "/memory", paths.memory_v1)) {
    take_mem(ParseMemoryMax(ReadText(dir + "/memory.limit_in_bytes")),
             LeadingU64(ReadText(dir + "/memory.usage_in_bytes")));
  }
  h->cgroup_cpus = cpus;
  h->cgroup_memory_max = mem;
  h->cgroup_memory_current = current;
}

void ReadCpus(const std::string& root, HostFacts* h) {
  const std::string online = Trim(ReadText(root + "/sys/devices/system/cpu/online"));
  const std::vector<int> cpus = ParseCpuList(online);
  h->logical_cores = static_cast<uint32_t>(cpus.size());
  std::set<std::pair<uint64_t, uint64_t>> cores;
  for (int cpu : cpus) {
    const std::string dir =
        root + "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology";
    const std::string core = ReadText(dir + "/core_id");
    if (core.empty()) continue;
    cores.insert({LeadingU64(ReadText(dir + "/physical_package_id")), LeadingU64(core)});
  }
  h->physical_cores = static_cast<uint32_t>(cores.size());
  std::istringstream status(ReadText(root + "/proc/self/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Cpus_allowed_list:", 0) == 0) h->affinity_cores = CountCpuList(line.substr(18));
  }
}

void ReadPci(const std::string& root, HostFacts* h) {
  const std::string dir = root + "/sys/bus/pci/devices";
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return;
  h->pci_readable = true;
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') names.push_back(e->d_name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const std::string dev = dir + "/" + name;
    if (Trim(ReadText(dev + "/vendor")) != "0x10de") continue;
    // Display controllers only: an NVIDIA GPU's audio function, its bridges
    // and NVSwitches are other classes.
    const std::string cls = Trim(ReadText(dev + "/class"));
    if (cls.rfind("0x03", 0) != 0) continue;
    PcieLink link;
    link.address = name;
    link.name = cls.rfind("0x0302", 0) == 0 ? "3D controller" : "display controller";
    link.speed_gts = ParseLinkSpeed(ReadText(dev + "/current_link_speed"));
    link.max_speed_gts = ParseLinkSpeed(ReadText(dev + "/max_link_speed"));
    link.width = static_cast<int>(LeadingU64(ReadText(dev + "/current_link_width")));
    link.max_width = static_cast<int>(LeadingU64(ReadText(dev + "/max_link_width")));
    h->nvidia.push_back(link);
  }
}

std::string Gen(int gen, double gts) {
  if (gen > 0) return "gen" + std::to_string(gen);
  if (gts > 0) return StringPrintf("%.1f GT/s", gts);
  return "gen ?";
}

std::string Width(int w) { return w > 0 ? "x" + std::to_string(w) : "x?"; }

std::string LinkText(const PcieLink& l) {
  std::string text = l.address + ": " + Gen(l.Gen(), l.speed_gts) + " " + Width(l.width);
  if (l.speed_gts > 0) text += StringPrintf(" (%.1f GT/s)", l.speed_gts);
  text += ", max " + Gen(l.MaxGen(), l.max_speed_gts) + " " + Width(l.max_width);
  if (l.BelowMax()) {
    text +=
        ": below its maximum (an idle GPU lowers its link speed to save power: read it again "
        "under load; a width below the maximum is the slot or the riser)";
  }
  return text;
}

std::string CpusText(double cpus) {
  return cpus > 0 ? StringPrintf("%.2f CPUs", cpus) : std::string("none");
}

}  // namespace

int PcieLink::Gen() const { return GenOfSpeed(speed_gts); }
int PcieLink::MaxGen() const { return GenOfSpeed(max_speed_gts); }
bool PcieLink::BelowMax() const {
  return (speed_gts > 0 && max_speed_gts > 0 && speed_gts + 0.01 < max_speed_gts) ||
         (width > 0 && max_width > 0 && width < max_width);
}

uint32_t HostFacts::UsableCores() const {
  uint32_t cores = affinity_cores > 0 ? affinity_cores : logical_cores;
  if (cgroup_cpus > 0) {
    const uint32_t quota = std::max<uint32_t>(1, static_cast<uint32_t>(std::floor(cgroup_cpus)));
    cores = cores > 0 ? std::min(cores, quota) : quota;
  }
  return cores;
}

std::string HostFacts::CoresWhy() const {
  std::string text = "affinity " + (affinity_cores > 0 ? std::to_string(affinity_cores) : "?");
  return text + ", cgroup quota " + CpusText(cgroup_cpus);
}

uint64_t HostFacts::AvailableMemory() const {
  uint64_t avail = mem_available_bytes;
  if (cgroup_memory_max > 0) {
    const uint64_t left =
        cgroup_memory_max > cgroup_memory_current ? cgroup_memory_max - cgroup_memory_current : 0;
    avail = avail > 0 ? std::min(avail, left) : left;
  }
  return avail;
}

HostFacts ReadHostFacts(const std::string& root_in, const std::string& shm_path) {
  const std::string root = root_in == "/" ? "" : root_in;
  HostFacts h;
  if (!shm_path.empty()) {
    struct statvfs sv;
    if (statvfs(shm_path.c_str(), &sv) == 0) {
      h.shm_known = true;
      h.shm_capacity_bytes = static_cast<uint64_t>(sv.f_blocks) * sv.f_frsize;
      h.shm_free_bytes = static_cast<uint64_t>(sv.f_bavail) * sv.f_frsize;
    }
  }
  ReadCpus(root, &h);
  const std::string meminfo = ReadText(root + "/proc/meminfo");
  h.mem_total_bytes = MeminfoValue(meminfo, "MemTotal");
  h.mem_available_bytes = MeminfoValue(meminfo, "MemAvailable");
  ReadCgroups(root, &h);
  ReadPci(root, &h);
  return h;
}

std::vector<int> ParseCpuList(const std::string& list) {
  std::vector<int> out;
  std::stringstream in(Trim(list));
  std::string item;
  while (std::getline(in, item, ',')) {
    item = Trim(item);
    if (item.empty() || item[0] < '0' || item[0] > '9') continue;
    const size_t dash = item.find('-');
    const int a = static_cast<int>(LeadingU64(item));
    const int b =
        dash == std::string::npos ? a : static_cast<int>(LeadingU64(item.substr(dash + 1)));
    for (int c = a; c <= b && c < (1 << 16); ++c) out.push_back(c);
  }
  return out;
}

uint32_t CountCpuList(const std::string& list) {
  return static_cast<uint32_t>(ParseCpuList(list).size());
}

uint64_t MeminfoValue(const std::string& meminfo, const std::string& key) {
  std::istringstream in(meminfo);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size(), key) == 0 && line.size() > key.size() &&
        line[key.size()] == ':') {
      const std::string rest = line.substr(key.size() + 1);
      const uint64_t v = LeadingU64(rest);
      return rest.find("kB") != std::string::npos ? v * 1024 : v;
    }
  }
  return 0;
}

double ParseCpuMax(const std::string& text) {
  const std::string t = Trim(text);
  if (t.empty() || t[0] < '0' || t[0] > '9') return 0;  // "max ..." or nothing
  const uint64_t quota = LeadingU64(t);
  const size_t space = t.find(' ');
  const uint64_t period = space == std::string::npos ? 100000 : LeadingU64(t.substr(space));
  return period > 0 ? static_cast<double>(quota) / static_cast<double>(period) : 0;
}

uint64_t ParseMemoryMax(const std::string& text) {
  const std::string t = Trim(text);
  if (t.empty() || t[0] < '0' || t[0] > '9') return 0;
  const uint64_t v = LeadingU64(t);
  // cgroup v1 writes "no limit" as the largest page-aligned int64.
  return v >= (uint64_t{1} << 62) ? 0 : v;
}

double ParseLinkSpeed(const std::string& text) {
  const std::string t = Trim(text);
  if (t.empty() || t[0] < '0' || t[0] > '9') return 0;  // "Unknown"
  return std::strtod(t.c_str(), nullptr);
}

int GenOfSpeed(double gts) {
  static const double kGen[] = {2.5, 5, 8, 16, 32, 64};
  for (int i = 0; i < 6; ++i)
    if (std::abs(gts - kGen[i]) < 0.5) return i + 1;
  return 0;
}

int CountNvidiaSmiGpus(const std::string& output) {
  std::istringstream in(output);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) n += line.rfind("GPU ", 0) == 0;
  return n;
}

void WriteHostChecks(const HostFacts& h, const RunModel& base, uint64_t pin_budget,
                     std::ostream& out) {
  out << "Four physical checks (this machine, before the first trial)\n";
  // 1. /dev/shm against the batches the workers hold.
  Limits limits;
  limits.batch_bytes = base.batch_bytes;
  const uint64_t held = ShmNeed(limits, base.settings);
  std::string shm = h.shm_known ? FormatBytes(h.shm_capacity_bytes) + ", " +
                                      FormatBytes(h.shm_free_bytes) + " free"
                                : std::string("unknown (statvfs failed)");
  if (base.settings.num_workers > 0 && base.batch_bytes > 0) {
    const int w = base.settings.num_workers;
    shm += "; batches of " + FormatBytes(base.batch_bytes) + " x " + std::to_string(w) +
           (w == 1 ? " worker" : " workers") + " x prefetch " +
           std::to_string(EffectivePrefetch(base.settings)) + " = " + FormatBytes(held);
    if (h.shm_known && h.shm_free_bytes > 0) {
      shm += StringPrintf(" (%.0f%% of the free space; room for %llu batches)",
                          100.0 * static_cast<double>(held) / static_cast<double>(h.shm_free_bytes),
                          static_cast<unsigned long long>(h.shm_free_bytes / base.batch_bytes));
    }
  } else if (base.settings.num_workers == 0) {
    shm += "; no workers in the baseline (batches are made in the main process)";
  }
  out << "  /dev/shm     " << shm << "\n";
  // 2. Cores and GPUs.
  std::string gpus = h.gpus < 0 ? "unknown" : std::to_string(h.gpus);
  if (h.gpus >= 0 && !h.gpus_source.empty()) gpus += " (" + h.gpus_source + ")";
  out << "  cores        " << (h.physical_cores ? std::to_string(h.physical_cores) : "?")
      << " physical, " << h.logical_cores << " logical, "
      << (h.affinity_cores ? std::to_string(h.affinity_cores) : "?")
      << " in the affinity mask, cgroup quota " << CpusText(h.cgroup_cpus) << ": the job may use "
      << h.UsableCores() << "; GPUs: " << gpus << "\n";
  // 3. Memory for pinning.
  out << "  memory       " << FormatBytes(h.mem_available_bytes) << " available of "
      << FormatBytes(h.mem_total_bytes) << ", cgroup limit "
      << (h.cgroup_memory_max ? FormatBytes(h.cgroup_memory_max) + " (" +
                                    FormatBytes(h.cgroup_memory_current) + " in use)"
                              : std::string("none"))
      << "; pinscope's pinning budget " << FormatBytes(pin_budget) << "\n";
  // 4. PCIe.
  if (h.nvidia.empty()) {
    out << "  PCIe         "
        << (h.pci_readable ? "no NVIDIA GPU on the PCI bus" : "unknown (/sys/bus/pci unreadable)")
        << "\n";
  }
  for (const PcieLink& l : h.nvidia) out << "  PCIe         " << LinkText(l) << "\n";
}

nlohmann::ordered_json HostChecksJson(const HostFacts& h, const RunModel& base,
                                      uint64_t pin_budget) {
  using json = nlohmann::ordered_json;
  Limits limits;
  limits.batch_bytes = base.batch_bytes;
  json links = json::array();
  for (const PcieLink& l : h.nvidia) {
    links.push_back({{"address", l.address},
                     {"speed_gts", l.speed_gts},
                     {"max_speed_gts", l.max_speed_gts},
                     {"gen", l.Gen()},
                     {"max_gen", l.MaxGen()},
                     {"width", l.width},
                     {"max_width", l.max_width},
                     {"below_max", l.BelowMax()}});
  }
  return json{{"shm",
               {{"capacity_bytes", h.shm_capacity_bytes},
                {"free_bytes", h.shm_free_bytes},
                {"batch_bytes", base.batch_bytes},
                {"baseline_held_bytes", ShmNeed(limits, base.settings)}}},
              {"cores",
               {{"physical", h.physical_cores},
                {"logical", h.logical_cores},
                {"affinity", h.affinity_cores},
                {"cgroup_cpus", h.cgroup_cpus},
                {"usable", h.UsableCores()}}},
              {"gpus", h.gpus},
              {"gpus_source", h.gpus_source},
              {"memory",
               {{"total_bytes", h.mem_total_bytes},
                {"available_bytes", h.mem_available_bytes},
                {"cgroup_max_bytes", h.cgroup_memory_max},
                {"cgroup_current_bytes", h.cgroup_memory_current},
                {"for_trials_bytes", h.AvailableMemory()},
                {"pin_budget_bytes", pin_budget}}},
              {"pcie", links}};
}

}  // namespace pinscope::tune
