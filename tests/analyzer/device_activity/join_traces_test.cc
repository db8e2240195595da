// The join by time and order against the correlation join, on every trace
// recorded on the H200 that has device records (tests/data/h200/...): those
// traces have CUPTI correlation records, which are the ground truth.
// - Record by record: for at least 99% of the memcpy records that both joins
//   matched, the order join chose the same host call (call id); a different
//   call with the same direction and bytes issued within 1 ms is a swap of
//   identical copies, counted apart; the joined counts agree within 1%.
// - The report (`pinscope report --json`, and with --join=order): the same
//   verdict and top change, the same step and predictions, and on the
//   pipeline runs the figures tests/data/expected/pipeline_verdicts.json
//   holds (the same checks as tests/analyzer/model/pipeline_traces_test.cc).
// Each trace prints its agreement (docs/device-activity.md quotes them).
// And one run with its correlation packets taken out: the analyzer joins it
// by order on its own, and the report says so.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "analyzer/analyses/device_activity.h"
#include "analyzer/analyses/device_from_trace.h"
#include "analyzer/read/run_loader.h"
#include "analyzer/replay/replay.h"
#include "analyzer/report/report_command.h"

namespace pinscope {
namespace {

namespace fs = std::filesystem;
const std::string kData = PINSCOPE_TEST_DATA_DIR;

// Every folder under tests/data/h200 that holds process files, relative.
std::vector<std::string> RecordedRuns() {
  std::vector<std::string> runs;
  for (const auto& entry : fs::recursive_directory_iterator(kData + "/h200")) {
    if (!entry.is_directory()) continue;
    bool traces = false;
    for (const auto& f : fs::directory_iterator(entry.path()))
      traces = traces || f.path().extension() == ".pstrace";
    if (traces) runs.push_back(fs::relative(entry.path(), kData + "/h200").string());
  }
  std::sort(runs.begin(), runs.end());
  return runs;
}

// Both joins, fed as InputAnalysis feeds its device analysis (every thread's
// copies and syncs), from cupti_started or the first device record on.
class JoinProbe : public Analysis {
 public:
  struct Pair {
    uint64_t call_id = 0, start_ns = 0, bytes = 0;
    uint32_t direction = 0;
  };
  using RecordKey = std::tuple<uint64_t, uint64_t, uint32_t, uint32_t>;  // start, end, stream, corr
  struct Side {
    std::map<RecordKey, Pair> copies;  // memcpy record -> its host call
    device::JoinStats stats;
    device::JoinMethod method = device::JoinMethod::kCorrelation;
  };
  struct Process {
    std::unique_ptr<device::ProcessDeviceAnalysis> by[2];  // auto, order
    uint64_t last_advance_ns = 0;
    // As InputAnalysis::AdvanceDevice: at most once a second of trace time.
    void Advance(uint64_t now_ns) {
      if (now_ns <= last_advance_ns + device::kSec) return;
      for (auto& d : by) d->Advance(now_ns);
      last_advance_ns = now_ns;
    }
  };

  Side result[2];  // the run's processes together
  uint64_t device_records = 0;
  // The shim said it recorded no correlation records (DeviceRecording's
  // no_correlations: the default since CUPTI's RUNTIME kind went off):
  // such a run has no ground truth to hold the order join to.
  bool no_correlations = false;
  void OnRecording(const Event&, const trace::DeviceRecording& r) override {
    no_correlations = no_correlations || r.no_correlations();
  }

  void OnCopy(const CopyContext& c) override {
    Process* p = Find(c.event.process);
    if (p == nullptr) return;
    const device::HostCall h = device::CopyCallOf(c);
    for (auto& d : p->by) d->OnHostCall(h);
    p->Advance(c.event.time_ns);
  }
  void OnSync(const Event& e, const trace::SyncEvent& s) override {
    Process* p = Find(e.process);
    if (p == nullptr) return;
    const device::HostCall h = device::SyncCallOf(e, s);
    for (auto& d : p->by) d->OnHostCall(h);
    p->Advance(e.time_ns);
  }
  void OnDevice(const Event& e, const trace::DeviceActivity& a) override {
    Process& p = Of(e.process);
    const device::DeviceRecord r = device::DeviceRecordOf(a);
    if (r.kind == device::kActMemcpy || r.kind == device::kActSync) ++device_records;
    for (auto& d : p.by) d->OnDevice(r);
    p.Advance(e.time_ns);
  }
  void OnCorrelation(const Event& e, const trace::ExternalCorrelation& c) override {
    for (auto& d : Of(e.process).by) d->OnCorrelation(c.correlation_id(), c.call_id(), e.time_ns);
  }
  void OnNotice(const Event& e, const trace::Notice& n) override {
    if (n.code() == "cupti_started") Of(e.process);
  }
  void OnProcessEnd(const ProcessState& process) override {
    auto it = processes_.find(process.index());
    if (it == processes_.end()) return;
    for (int i = 0; i < 2; ++i) {
      device::ProcessDeviceAnalysis& d = *it->second.by[i];
      const device::ProcessDeviceResult r = d.Finish({process.start_ns(), process.end_ns()});
      Side& side = result[i];
      side.method = r.join_method;
      side.stats.joined += r.join.joined;
      side.stats.device_unmatched += r.join.device_unmatched;
      side.stats.host_copies_unmatched += r.join.host_copies_unmatched;
      side.stats.correlations += r.join.correlations;
      for (const device::Joined& j : d.TakeJoinedCopies()) {
        const RecordKey key{j.device.start_ns, j.device.end_ns, j.device.stream_id,
                            j.device.correlation_id};
        side.copies[key] = {j.host->call_id, j.host->start_ns, j.host->bytes, j.host->direction};
      }
    }
    processes_.erase(it);
  }

 private:
  Process* Find(const ProcessState& process) {
    auto it = processes_.find(process.index());
    return it == processes_.end() ? nullptr : &it->second;
  }
  Process& Of(const ProcessState& process) {
    Process& p = processes_[process.index()];
    if (!p.by[0]) {
      p.by[0] = std::make_unique<device::ProcessDeviceAnalysis>();
      p.by[1] = std::make_unique<device::ProcessDeviceAnalysis>(
          device::BusyOptions(), 60 * device::kSec, device::JoinMode::kOrder);
      for (auto& d : p.by) d->KeepJoinedCopies();
    }
    return p;
  }
  std::map<int, Process> processes_;
};

nlohmann::json ReportJson(const std::string& dir, bool by_order, int* rc) {
  ReportOptions options;
  options.run_dir = dir;
  options.json = true;
  options.color = ColorMode::kNever;
  options.calibration_path = dir + "/calibration.json";
  if (!fs::exists(options.calibration_path)) options.calibration_path.clear();
  options.join_by_order = by_order;
  std::ostringstream out, err;
  *rc = RunReport(options, out, err);
  return nlohmann::json::parse(out.str());
}

// Both joins over the run in dir (its listing must scan: *ok).
void Probe(const std::string& dir, JoinProbe* probe, bool* ok) {
  RunListing listing;
  *ok = ScanRun(dir, &listing).ok();
  if (!*ok) return;
  ReplayEngine engine(std::move(listing));
  engine.AddAnalysis(probe);
  engine.Run();
}

// Recorded without correlation records, as the shim says: no ground truth.
bool NoGroundTruth(const JoinProbe& probe) {
  return probe.no_correlations && probe.result[0].stats.correlations == 0;
}

class RecordedRun : public ::testing::TestWithParam<std::string> {};

TEST_P(RecordedRun, TheOrderJoinAgreesWithTheCorrelations) {
  JoinProbe probe;
  bool ok = false;
  Probe(kData + "/h200/" + GetParam(), &probe, &ok);
  ASSERT_TRUE(ok);
  if (probe.device_records == 0) GTEST_SKIP() << "no device memcpy or sync records";
  if (NoGroundTruth(probe)) GTEST_SKIP() << "recorded without correlation records";
  const JoinProbe::Side& corr = probe.result[0];
  const JoinProbe::Side& order = probe.result[1];
  // These traces have correlations: auto mode uses them.
  ASSERT_GT(corr.stats.correlations, 0u);
  EXPECT_EQ(corr.method, device::JoinMethod::kCorrelation);
  EXPECT_EQ(order.method, device::JoinMethod::kOrder);

  uint64_t both = 0, same = 0, swaps = 0, other = 0;
  for (const auto& [key, truth] : corr.copies) {
    auto it = order.copies.find(key);
    if (it == order.copies.end()) continue;
    ++both;
    const JoinProbe::Pair& got = it->second;
    if (got.call_id == truth.call_id) {
      ++same;
    } else if (got.direction == truth.direction && got.bytes == truth.bytes &&
               std::max(got.start_ns, truth.start_ns) - std::min(got.start_ns, truth.start_ns) <
                   device::kMs) {
      ++swaps;
    } else {
      ++other;
    }
  }
  std::printf(
      "join agreement %s: memcpy joined %zu by correlation, %zu by order, %llu both: "
      "%llu same call, %llu swaps, %llu other; memcpy+sync joined %llu / %llu\n",
      GetParam().c_str(), corr.copies.size(), order.copies.size(),
      static_cast<unsigned long long>(both), static_cast<unsigned long long>(same),
      static_cast<unsigned long long>(swaps), static_cast<unsigned long long>(other),
      static_cast<unsigned long long>(corr.stats.joined),
      static_cast<unsigned long long>(order.stats.joined));
  ASSERT_GT(both, 0u);
  EXPECT_GE(static_cast<double>(same + swaps), 0.99 * static_cast<double>(both));
  EXPECT_LE(other, both / 100);
  const auto within1 = [](double a, double b) { return std::fabs(a - b) <= 0.01 * std::max(a, b); };
  EXPECT_TRUE(
      within1(static_cast<double>(order.copies.size()), static_cast<double>(corr.copies.size())))
      << corr.copies.size() << " vs " << order.copies.size();
  EXPECT_TRUE(
      within1(static_cast<double>(order.stats.joined), static_cast<double>(corr.stats.joined)))
      << corr.stats.joined << " vs " << order.stats.joined;
}

TEST_P(RecordedRun, TheReportIsTheSameJoinedEitherWay) {
  const std::string dir = kData + "/h200/" + GetParam();
  {
    JoinProbe probe;
    bool ok = false;
    Probe(dir, &probe, &ok);
    ASSERT_TRUE(ok);
    if (NoGroundTruth(probe)) GTEST_SKIP() << "recorded without correlation records";
  }
  int rc_corr = 0, rc_order = 0;
  const nlohmann::json a = ReportJson(dir, false, &rc_corr);
  const nlohmann::json b = ReportJson(dir, true, &rc_order);
  EXPECT_EQ(rc_corr, rc_order);
  EXPECT_EQ(a["verdict"]["id"], b["verdict"]["id"]) << b["verdict"]["text"];
  if (a.contains("device_activity")) {
    ASSERT_TRUE(b.contains("device_activity"));
    ASSERT_EQ(a["device_activity"].size(), b["device_activity"].size());
    for (size_t i = 0; i < a["device_activity"].size(); ++i) {
      const nlohmann::json& ja = a["device_activity"][i]["join"];
      const nlohmann::json& jb = b["device_activity"][i]["join"];
      EXPECT_EQ(ja["method"], "correlation");
      EXPECT_EQ(jb["method"], "order");
      const double x = ja["joined"], y = jb["joined"];
      EXPECT_LE(std::fabs(x - y), 0.01 * std::max(x, y)) << x << " vs " << y;
    }
  }
  ASSERT_EQ(a.contains("pipeline"), b.contains("pipeline"));
  if (!a.contains("pipeline")) return;
  const nlohmann::json& pa = a["pipeline"];
  const nlohmann::json& pb = b["pipeline"];
  EXPECT_EQ(pa.value("critical_stage", ""), pb.value("critical_stage", ""));
  const double step_a = pa.value("step_ns", 0.0), step_b = pb.value("step_ns", 0.0);
  EXPECT_NEAR(step_a, step_b, 0.001 * step_a);
  const auto first = [](const nlohmann::json& p) {
    return p.contains("predictions") && !p["predictions"].empty()
               ? p["predictions"][0]["change"].get<std::string>()
               : std::string();
  };
  EXPECT_EQ(first(pa), first(pb));
  std::map<std::string, double> speedups;
  if (pa.contains("all_predictions"))
    for (const auto& pred : pa["all_predictions"]) speedups[pred["change"]] = pred["speedup"];
  if (pb.contains("all_predictions"))
    for (const auto& pred : pb["all_predictions"]) {
      auto it = speedups.find(pred["change"]);
      ASSERT_NE(it, speedups.end()) << pred["change"];
      EXPECT_NEAR(pred["speedup"].get<double>(), it->second, 0.005 * it->second) << pred["change"];
    }

  // What tests/data/expected/pipeline_verdicts.json holds for this run.
  std::ifstream in(kData + "/expected/pipeline_verdicts.json");
  const nlohmann::json expected = nlohmann::json::parse(in);
  for (const auto& want : expected["runs"]) {
    if ("pipeline/" + want["run"].get<std::string>() != GetParam()) continue;
    EXPECT_EQ(b["verdict"]["id"], want["verdict"]);
    if (want["top_change"].is_null()) {
      EXPECT_EQ(first(pb), "");
    } else {
      EXPECT_EQ(first(pb), want["top_change"]);
    }
    if (!want.contains("applied")) continue;
    double predicted = 0;
    for (const auto& pred : pb["all_predictions"])
      if (pred["change"] == want["applied"]) predicted = pred["speedup"];
    const double recorded = want["predicted_speedup"];
    EXPECT_NEAR(predicted, recorded, 0.02 * recorded) << want["applied"];
  }
}

std::string RunName(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(H200, RecordedRun, ::testing::ValuesIn(RecordedRuns()), RunName);

}  // namespace
}  // namespace pinscope

namespace pinscope {
namespace {

// A copy of a recorded run with its ExternalCorrelation packets left out
// (what a shim without CUPTI's RUNTIME records writes), and, with
// `notice`, the cupti_started text such a shim writes.
fs::path WithoutCorrelations(const std::string& run, bool notice) {
  const fs::path dir = fs::temp_directory_path() /
                       ("pinscope-nocorr-" + std::to_string(getpid()) + (notice ? "-n" : ""));
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& f : fs::directory_iterator(kData + "/h200/" + run)) {
    if (f.path().extension() != ".pstrace") {
      fs::copy(f.path(), dir / f.path().filename());
      continue;
    }
    std::ifstream in(f.path(), std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::string out;
    for (size_t at = 0; at < bytes.size();) {
      size_t i = at + 1, length = 0;
      for (int shift = 0;; shift += 7) {
        const unsigned char c = static_cast<unsigned char>(bytes.at(i++));
        length |= static_cast<size_t>(c & 0x7f) << shift;
        if (!(c & 0x80)) break;
      }
      trace::TracePacket packet;
      EXPECT_TRUE(packet.ParseFromString(bytes.substr(i, length)));
      if (packet.has_notice() && packet.notice().code() == "cupti_started" && notice) {
        packet.mutable_notice()->set_text(packet.notice().text() +
                                          "; runtime records off (PINSCOPE_CUPTI_RUNTIME=0): no "
                                          "correlations");
        const std::string body = packet.SerializeAsString();
        out += '\x0A';
        uint64_t v = body.size();
        for (; v >= 0x80; v >>= 7) out += static_cast<char>(v | 0x80);
        out += static_cast<char>(v);
        out += body;
      } else if (!packet.has_correlation()) {
        out += bytes.substr(at, i + length - at);
      }
      at = i + length;
    }
    std::ofstream(dir / f.path().filename(), std::ios::binary) << out;
  }
  return dir;
}

// The analyzer's own choice on such a trace: by order, as many joined as
// with the correlations, the text saying so.
TEST(NoCorrelations, ATraceWithoutThemIsJoinedByOrder) {
  int rc = 0;
  const nlohmann::json truth = ReportJson(kData + "/h200/cupti", false, &rc);
  ASSERT_EQ(truth["device_activity"][0]["join"]["method"], "correlation");
  const double joined = truth["device_activity"][0]["join"]["joined"];
  ASSERT_EQ(joined, 28);
  for (bool notice : {false, true}) {
    const fs::path dir = WithoutCorrelations("cupti", notice);
    const nlohmann::json j = ReportJson(dir.string(), false, &rc);
    const nlohmann::json& join = j["device_activity"][0]["join"];
    EXPECT_EQ(join["method"], "order") << notice;
    EXPECT_EQ(join["correlations"], 0);
    EXPECT_EQ(join["joined"], joined);
    EXPECT_EQ(j["verdict"]["id"], truth["verdict"]["id"]);

    ReportOptions options;
    options.run_dir = dir.string();
    options.color = ColorMode::kNever;
    options.calibration_path = dir.string() + "/calibration.json";
    std::ostringstream text, err;
    RunReport(options, text, err);
    std::string flat;  // the report's paragraphs are wrapped
    for (char c : text.str())
      if (!std::isspace(static_cast<unsigned char>(c)) || (!flat.empty() && flat.back() != ' '))
        flat += std::isspace(static_cast<unsigned char>(c)) ? ' ' : c;
    EXPECT_NE(flat.find(": the trace has no correlation records; device records joined to their "
                        "host calls by time and order"),
              std::string::npos)
        << text.str();
    EXPECT_NE(flat.find(" joined by order)"), std::string::npos) << text.str();
    EXPECT_EQ(flat.find(" joined)"), std::string::npos) << text.str();
    fs::remove_all(dir);
  }
}

}  // namespace
}  // namespace pinscope
