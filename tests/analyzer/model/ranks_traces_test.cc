// The report of a distributed job on real traces (issue 20, docs/report.md
// "Ranks"), with NCCL kernels as the collectives: the H200 run
// input_starvation (tests/data/h200/pipeline) copied twice into one run
// folder as ranks 0 and 1 of a job (pids, tids and shm inodes moved apart,
// the roots made exec'd ranks, every file labelled), and NCCL all-reduce
// kernels planted on rank 0's GPU, 9 ms of every 10 ms: rank 0 spends its
// step waiting inside NCCL kernels for rank 1, which arrives last. Rank 1
// is the straggler for its input, rank 0 waits on it, and fixing rank 1
// gains the job down to its top change's step.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "recorded_report.h"
#include "trace.pb.h"

namespace pinscope {
namespace {

namespace fs = std::filesystem;
const std::string kRun = std::string(PINSCOPE_TEST_DATA_DIR) + "/h200/pipeline/input_starvation";
constexpr uint64_t kNcclName = 0x7fff0001;

trace::Trace Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  trace::Trace t;
  EXPECT_TRUE(t.ParseFromString(s.str())) << path;
  return t;
}

// NCCL kernels of 9 ms every 10 ms from `start` to `end`, each stamped
// when it ends (a device record reaches the trace after its kernel), slid
// into the file's packets without reordering them.
void PlantNccl(trace::Trace* t, uint32_t pid, uint64_t start, uint64_t end) {
  std::vector<trace::TracePacket> kernels;
  trace::TracePacket name;
  name.set_timestamp_ns(start);
  name.set_tid(pid);
  name.mutable_interned_string()->set_id(kNcclName);
  name.mutable_interned_string()->set_str(
      "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)");
  kernels.push_back(name);
  for (uint64_t s = start; s + 9000000 < end; s += 10000000) {
    trace::TracePacket k;
    k.set_timestamp_ns(s + 9000000);
    k.set_tid(pid);
    trace::DeviceActivity* a = k.mutable_device();
    a->set_kind(trace::ACT_KERNEL);
    a->set_start_ns(s);
    a->set_end_ns(s + 9000000);
    a->set_device_id(0);
    a->set_stream_id(99);
    a->set_name_id(kNcclName);
    kernels.push_back(k);
  }
  trace::Trace out;
  size_t next = 0;
  for (int i = 0; i < t->packet_size(); ++i) {
    const trace::TracePacket& p = t->packet(i);
    while (i > 0 && next < kernels.size() && kernels[next].timestamp_ns() <= p.timestamp_ns() &&
           !p.has_exit())
      *out.add_packet() = kernels[next++];
    *out.add_packet() = p;
  }
  *t = out;
}

// The run as rank `rank` of a 2-rank job, written into `dir`.
void WriteRank(const std::string& dir, uint32_t rank, bool nccl) {
  const uint32_t shift = 100000 * rank;
  for (const auto& entry : fs::directory_iterator(kRun)) {
    if (entry.path().extension() != ".pstrace") continue;
    trace::Trace t = Read(entry.path());
    uint64_t first = 0, last = 0;
    for (trace::TracePacket& p : *t.mutable_packet()) {
      if (p.tid() != 0) p.set_tid(p.tid() + shift);
      if (first == 0) first = p.timestamp_ns();
      last = std::max(last, p.timestamp_ns());
      if (p.has_header()) {
        trace::ProcessHeader* h = p.mutable_header();
        h->set_pid(h->pid() + shift);
        if (h->parent_pid() != 0) h->set_parent_pid(h->parent_pid() + shift);
        if (h->origin() == trace::ORIGIN_FORK) {
          h->set_ppid(h->ppid() + shift);
        } else {
          h->set_origin(trace::ORIGIN_EXEC);  // started by the launcher's agent
          h->set_ppid(1);
        }
        trace::RankLabel* label = h->mutable_rank();
        label->set_rank(rank);
        label->set_local_rank(static_cast<int32_t>(rank));
        label->set_world_size(2);
        label->set_group_rank(0);
        label->set_local_world_size(2);
      }
      if (p.has_thread()) p.mutable_thread()->set_tid(p.thread().tid() + shift);
      if (p.has_thread_sample())
        for (auto& e : *p.mutable_thread_sample()->mutable_threads()) e.set_tid(e.tid() + shift);
      if (p.has_shm() && p.shm().inode() != 0) p.mutable_shm()->set_inode(p.shm().inode() + shift);
    }
    // By value: PlantNccl replaces the packets a reference would point into.
    const uint32_t pid = t.packet(0).header().pid();
    if (nccl && t.packet(0).header().origin() == trace::ORIGIN_EXEC) PlantNccl(&t, pid, first, last);
    std::ofstream out(dir + "/" + std::to_string(pid) + ".pstrace", std::ios::binary);
    out << t.SerializeAsString();
  }
}

TEST(RanksTraces, NcclWaitsPutOnTheStragglerRank) {
  const std::string dir = ::testing::TempDir() + "/pinscope-ranks-nccl";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms::owner_all);
  WriteRank(dir, 0, true);
  WriteRank(dir, 1, false);
  fs::copy_file(kRun + "/calibration.json", dir + "/calibration.json");
  const nlohmann::json j = test_util::RecordedReport(dir);
  ASSERT_TRUE(j.contains("ranks"));
  const nlohmann::json& ranks = j["ranks"];
  ASSERT_EQ(ranks["count"], 2);
  EXPECT_EQ(j["verdict"]["id"], "straggler");
  ASSERT_FALSE(ranks["straggler"].is_null()) << ranks.dump(1);
  EXPECT_EQ(ranks["straggler"]["rank"], 1);
  EXPECT_EQ(ranks["straggler"]["reason"], "input");
  const nlohmann::json& r0 = ranks["ranks"][0];
  const nlohmann::json& r1 = ranks["ranks"][1];
  EXPECT_EQ(r0["pids"].size(), r1["pids"].size());
  EXPECT_EQ(r0["collective_source"], "nccl_kernels");
  EXPECT_EQ(r1["collective_source"], "nccl_kernels");
  EXPECT_EQ(r1["collective_ns"], 0.0);
  // The planted kernels cover 90% of any stretch of rank 0's run.
  const double step = r0["step_ns"];
  EXPECT_NEAR(r0["collective_ns"].get<double>(), 0.9 * step, 0.02 * step);
  EXPECT_EQ(r0["collective_wait_ns"], r0["collective_ns"]);
  EXPECT_EQ(r0["verdict"]["id"], "waits_on_rank");
  EXPECT_EQ(r1["verdict"]["id"], "input_starvation");  // the run's planted class
  EXPECT_EQ(r1["step_ns"], step) << "the same trace: the same step";
  // The fix: rank 1's top change; the job then runs at the slower of it
  // and rank 0's own step.
  ASSERT_FALSE(r1["top_change"].is_null());
  const double fixed = r1["top_change"]["step_ns"];
  EXPECT_EQ(ranks["straggler"]["fixed_step_ns"], fixed);
  EXPECT_EQ(ranks["straggler"]["fixed_job_step_ns"].get<double>(),
            std::max(fixed, r0["own_step_ns"].get<double>()));
  EXPECT_DOUBLE_EQ(ranks["straggler"]["gain_ns"].get<double>(),
                   ranks["job_step_ns"].get<double>() -
                       ranks["straggler"]["fixed_job_step_ns"].get<double>());
  fs::remove_all(dir);
}

// The same run as it was recorded, one process tree, no labels: no ranks.
TEST(RanksTraces, AnUnlabelledRunHasNoRanks) {
  const nlohmann::json j = test_util::RecordedReport(kRun);
  EXPECT_FALSE(j.contains("ranks"));
  EXPECT_EQ(j["verdict"]["id"], "input_starvation");
}

}  // namespace
}  // namespace pinscope
