// The physical checks (analyzer/tune/host_checks.h): the parsers, then
// ReadHostFacts on fake /proc, /sys and cgroup trees (v2 nested limits, v1
// controllers, a hybrid host), the PCIe links of NVIDIA devices only, and
// the text the checks print.
#include "analyzer/tune/host_checks.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace pinscope::tune {
namespace {

namespace fs = std::filesystem;
constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;

class FakeRoot : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "pinscope-host-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { fs::remove_all(root_); }
  void Write(const std::string& path, const std::string& text) {
    const fs::path p = fs::path(root_) / path.substr(1);
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  // 2 packages x 4 cores x 2 threads = 16 logical CPUs.
  void Cpus() {
    Write("/sys/devices/system/cpu/online", "0-15\n");
    for (int cpu = 0; cpu < 16; ++cpu) {
      const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
      Write(dir + "physical_package_id", std::to_string(cpu / 8) + "\n");
      Write(dir + "core_id", std::to_string(cpu % 4) + "\n");
    }
    Write("/proc/self/status", "Name:\tx\nCpus_allowed:\tff\nCpus_allowed_list:\t0-5,8,10-11\n");
    Write("/proc/meminfo",
          "MemTotal:       131072000 kB\nMemFree:        1000 kB\nMemAvailable:   "
          "104857600 kB\n");
  }
  void Gpu(const std::string& address, const std::string& cls, const std::string& speed,
           const std::string& max_speed, const std::string& width, const std::string& max_width,
           const std::string& vendor = "0x10de") {
    const std::string dir = "/sys/bus/pci/devices/" + address + "/";
    Write(dir + "vendor", vendor + "\n");
    Write(dir + "class", cls + "\n");
    Write(dir + "current_link_speed", speed + "\n");
    Write(dir + "max_link_speed", max_speed + "\n");
    Write(dir + "current_link_width", width + "\n");
    Write(dir + "max_link_width", max_width + "\n");
  }
  std::string root_;
};

TEST(HostParsers, CpuListsMeminfoCgroupFilesLinkSpeeds) {
  EXPECT_EQ(CountCpuList("0-3,8,10-11"), 7u);
  EXPECT_EQ(CountCpuList("0"), 1u);
  EXPECT_EQ(CountCpuList(" 0-1\n"), 2u);
  EXPECT_EQ(CountCpuList(""), 0u);
  EXPECT_EQ(ParseCpuList("2,4-5"), (std::vector<int>{2, 4, 5}));
  EXPECT_EQ(MeminfoValue("MemTotal: 100 kB\nMemAvailable:  64 kB\n", "MemAvailable"), 65536u);
  EXPECT_EQ(MeminfoValue("MemAvailableX: 1 kB\n", "MemAvailable"), 0u);
  EXPECT_DOUBLE_EQ(ParseCpuMax("150000 100000\n"), 1.5);
  EXPECT_DOUBLE_EQ(ParseCpuMax("max 100000\n"), 0);
  EXPECT_DOUBLE_EQ(ParseCpuMax(""), 0);
  EXPECT_EQ(ParseMemoryMax("8589934592\n"), 8 * kGiB);
  EXPECT_EQ(ParseMemoryMax("max\n"), 0u);
  EXPECT_EQ(ParseMemoryMax("9223372036854771712\n"), 0u);  // cgroup v1's "no limit"
  EXPECT_DOUBLE_EQ(ParseLinkSpeed("16.0 GT/s PCIe\n"), 16.0);
  EXPECT_DOUBLE_EQ(ParseLinkSpeed("2.5 GT/s PCIe"), 2.5);
  EXPECT_DOUBLE_EQ(ParseLinkSpeed("Unknown"), 0);
  EXPECT_EQ(GenOfSpeed(2.5), 1);
  EXPECT_EQ(GenOfSpeed(8.0), 3);
  EXPECT_EQ(GenOfSpeed(32.0), 5);
  EXPECT_EQ(GenOfSpeed(64.0), 6);
  EXPECT_EQ(GenOfSpeed(0), 0);
  EXPECT_EQ(CountNvidiaSmiGpus("GPU 0: NVIDIA H200 (UUID: GPU-1)\nGPU 1: NVIDIA H200 (UUID: "
                               "GPU-2)\n"),
            2);
  EXPECT_EQ(CountNvidiaSmiGpus("No devices were found\n"), 0);
}

TEST_F(FakeRoot, CoresMemoryAndANestedCgroupV2) {
  Cpus();
  Write("/proc/self/cgroup", "0::/job/step\n");
  // The tighter CPU limit is the parent's, the tighter memory the child's.
  Write("/sys/fs/cgroup/job/cpu.max", "400000 100000\n");
  Write("/sys/fs/cgroup/job/memory.max", "68719476736\n");
  Write("/sys/fs/cgroup/job/step/cpu.max", "max 100000\n");
  Write("/sys/fs/cgroup/job/step/memory.max", "34359738368\n");
  Write("/sys/fs/cgroup/job/step/memory.current", "4294967296\n");
  const HostFacts h = ReadHostFacts(root_, "");
  EXPECT_FALSE(h.shm_known);
  EXPECT_EQ(h.logical_cores, 16u);
  EXPECT_EQ(h.physical_cores, 8u);  // 2 packages x 4 cores
  EXPECT_EQ(h.affinity_cores, 9u);
  EXPECT_DOUBLE_EQ(h.cgroup_cpus, 4.0);
  EXPECT_EQ(h.UsableCores(), 4u);
  EXPECT_EQ(h.CoresWhy(), "affinity 9, cgroup quota 4.00 CPUs");
  EXPECT_EQ(h.mem_total_bytes, 131072000ull * 1024);
  EXPECT_EQ(h.mem_available_bytes, 100 * kGiB);
  EXPECT_EQ(h.cgroup_memory_max, 32 * kGiB);
  EXPECT_EQ(h.cgroup_memory_current, 4 * kGiB);
  EXPECT_EQ(h.AvailableMemory(), 28 * kGiB);  // the cgroup's room, below MemAvailable
  EXPECT_FALSE(h.pci_readable);
}

TEST_F(FakeRoot, CgroupV1ControllersAndAFractionalQuota) {
  Cpus();
  Write("/proc/self/cgroup", "4:memory:/docker/abc\n1:cpu,cpuacct:/docker/abc\n0::/\n");
  Write("/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "250000\n");
  Write("/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000\n");
  Write("/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");  // none
  Write("/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", "1073741824\n");
  Write("/sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes", "268435456\n");
  const HostFacts h = ReadHostFacts(root_, "");
  EXPECT_DOUBLE_EQ(h.cgroup_cpus, 2.5);
  EXPECT_EQ(h.UsableCores(), 2u);  // whole cores of the quota
  EXPECT_EQ(h.cgroup_memory_max, kGiB);
  EXPECT_EQ(h.AvailableMemory(), 768 * kMiB);
}

TEST_F(FakeRoot, NoLimitsAnywhere) {
  Cpus();
  Write("/proc/self/cgroup", "1:cpu:/\n0::/\n");
  Write("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "-1\n");
  Write("/sys/fs/cgroup/cpu/cpu.cfs_period_us", "100000\n");
  const HostFacts h = ReadHostFacts(root_, "");
  EXPECT_DOUBLE_EQ(h.cgroup_cpus, 0);
  EXPECT_EQ(h.UsableCores(), 9u);  // the affinity mask
  EXPECT_EQ(h.cgroup_memory_max, 0u);
  EXPECT_EQ(h.AvailableMemory(), 100 * kGiB);
}

TEST_F(FakeRoot, PcieLinksOfNvidiaGpusOnly) {
  Cpus();
  // An H200 at gen5 x16, one whose idle link dropped to gen1, its audio
  // function and a bridge (other classes), and another vendor's GPU.
  Gpu("0000:3b:00.0", "0x030200", "32.0 GT/s PCIe", "32.0 GT/s PCIe", "16", "16");
  Gpu("0000:5d:00.0", "0x030200", "2.5 GT/s PCIe", "32.0 GT/s PCIe", "16", "16");
  Gpu("0000:5d:00.1", "0x040300", "2.5 GT/s PCIe", "32.0 GT/s PCIe", "16", "16");
  Gpu("0000:00:01.0", "0x060400", "8.0 GT/s PCIe", "8.0 GT/s PCIe", "8", "8");
  Gpu("0000:af:00.0", "0x030000", "16.0 GT/s PCIe", "16.0 GT/s PCIe", "16", "16", "0x1002");
  const HostFacts h = ReadHostFacts(root_, "");
  ASSERT_TRUE(h.pci_readable);
  ASSERT_EQ(h.nvidia.size(), 2u);
  EXPECT_EQ(h.nvidia[0].address, "0000:3b:00.0");
  EXPECT_EQ(h.nvidia[0].Gen(), 5);
  EXPECT_EQ(h.nvidia[0].width, 16);
  EXPECT_FALSE(h.nvidia[0].BelowMax());
  EXPECT_EQ(h.nvidia[1].Gen(), 1);
  EXPECT_EQ(h.nvidia[1].MaxGen(), 5);
  EXPECT_TRUE(h.nvidia[1].BelowMax());

  RunModel base;
  base.settings.num_workers = 4;
  base.settings.prefetch_factor = 2;
  base.batch_bytes = 8 * kMiB;
  std::ostringstream text;
  HostFacts shown = h;
  shown.shm_known = true;
  shown.shm_capacity_bytes = 64 * kMiB;
  shown.shm_free_bytes = 32 * kMiB;
  shown.gpus = 2;
  shown.gpus_source = "nvidia-smi -L";
  WriteHostChecks(shown, base, 25 * kGiB, text);
  EXPECT_EQ(text.str(),
            "Four physical checks (this machine, before the first trial)\n"
            "  /dev/shm     64.0 MiB, 32.0 MiB free; batches of 8.0 MiB x 4 workers x prefetch 2 "
            "= 64.0 MiB (200% of the free space; room for 4 batches)\n"
            "  cores        8 physical, 16 logical, 9 in the affinity mask, cgroup quota none: "
            "the job may use 9; GPUs: 2 (nvidia-smi -L)\n"
            "  memory       100.00 GiB available of 125.00 GiB, cgroup limit none; pinscope's "
            "pinning budget 25.00 GiB\n"
            "  PCIe         0000:3b:00.0: gen5 x16 (32.0 GT/s), max gen5 x16\n"
            "  PCIe         0000:5d:00.0: gen1 x16 (2.5 GT/s), max gen5 x16: below its maximum "
            "(an idle GPU lowers its link speed to save power: read it again under load; a "
            "width below the maximum is the slot or the riser)\n");
  const nlohmann::ordered_json j = HostChecksJson(shown, base, 25 * kGiB);
  EXPECT_EQ(j["shm"]["baseline_held_bytes"], 64 * kMiB);
  EXPECT_EQ(j["cores"]["usable"], 9);
  EXPECT_EQ(j["pcie"].size(), 2u);
  EXPECT_EQ(j["pcie"][1]["below_max"], true);
}

TEST_F(FakeRoot, NoNvidiaGpuIsSaid) {
  Cpus();
  Gpu("0000:00:02.0", "0x030000", "8.0 GT/s PCIe", "8.0 GT/s PCIe", "16", "16", "0x8086");
  const HostFacts h = ReadHostFacts(root_, "");
  EXPECT_TRUE(h.nvidia.empty());
  RunModel base;  // num_workers=0
  std::ostringstream text;
  WriteHostChecks(h, base, kGiB, text);
  EXPECT_NE(text.str().find("  PCIe         no NVIDIA GPU on the PCI bus\n"), std::string::npos)
      << text.str();
  EXPECT_NE(text.str().find("GPUs: unknown"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("no workers in the baseline"), std::string::npos) << text.str();
}

TEST_F(FakeRoot, DevShmIsReadWithStatvfs) {
  const HostFacts h = ReadHostFacts(root_, root_);
  EXPECT_TRUE(h.shm_known);
  EXPECT_GT(h.shm_capacity_bytes, 0u);
  EXPECT_LE(h.shm_free_bytes, h.shm_capacity_bytes);
}

}  // namespace
}  // namespace pinscope::tune
