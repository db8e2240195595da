// `pinscope export --perfetto` on the H200 DataLoader traces
// (tests/data/h200/pipeline): the job's shape is in the timeline. Each count
// is checked exactly against the trace itself, replayed by a counting
// consumer: worker names and batch slices from LOADER_FETCH, the pin-memory
// thread from LOADER_PIN, flows from the CUPTI correlations.
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "analyzer/export/export_command.h"
#include "analyzer/read/run_loader.h"
#include "analyzer/replay/replay.h"
#include "perfetto_dump.h"

namespace pinscope {
namespace {

const std::string kRuns = std::string(PINSCOPE_TEST_DATA_DIR) + "/h200/pipeline/";

// What the trace says the export must show.
struct Truth : Analysis {
  std::set<int> worker_ids;
  uint64_t fetches = 0, pins = 0;
  std::set<std::pair<int, uint64_t>> calls;           // (process, call id) of copies, syncs
  std::map<std::pair<int, uint32_t>, uint64_t> corr;  // (process, correlation) -> call id
  uint64_t correlated_device = 0;                     // device records with a host call
  void OnCopy(const CopyContext& c) override {
    calls.emplace(c.event.process.index(), c.copy.call_id());
  }
  void OnSync(const Event& e, const trace::SyncEvent& s) override {
    calls.emplace(e.process.index(), s.call_id());
  }
  void OnCorrelation(const Event& e, const trace::ExternalCorrelation& c) override {
    corr[{e.process.index(), c.correlation_id()}] = c.call_id();
  }
  void OnDevice(const Event& e, const trace::DeviceActivity& a) override {
    auto it = corr.find({e.process.index(), a.correlation_id()});
    if (it != corr.end() && calls.count({e.process.index(), it->second})) {
      ++correlated_device;
      corr.erase(it);
    }
  }
  void OnLoader(const Event& e, const trace::LoaderEvent& l) override {
    if (l.kind() == trace::LOADER_FETCH) {
      ++fetches;
      worker_ids.insert(l.worker_id());
    }
    if (l.kind() == trace::LOADER_PIN) ++pins;
  }
};

Truth Replay(const std::string& run) {
  RunListing listing;
  EXPECT_TRUE(ScanRun(run, &listing).ok());
  Truth truth;
  ReplayEngine engine(std::move(listing));
  engine.AddAnalysis(&truth);
  engine.Run();
  return truth;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

std::string Gunzip(const std::string& data) {
  z_stream zs{};
  EXPECT_EQ(inflateInit2(&zs, 15 + 16), Z_OK);
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  zs.avail_in = static_cast<uInt>(data.size());
  std::string out;
  char buffer[1 << 16];
  int result = Z_OK;
  while (result == Z_OK) {
    zs.next_out = reinterpret_cast<Bytef*>(buffer);
    zs.avail_out = sizeof(buffer);
    result = inflate(&zs, Z_NO_FLUSH);
    out.append(buffer, sizeof(buffer) - zs.avail_out);
  }
  EXPECT_EQ(result, Z_STREAM_END);
  inflateEnd(&zs);
  return out;
}

std::string Export(const std::string& run, const std::string& file, bool gzip = false) {
  ExportOptions options;
  options.run_dir = run;
  options.perfetto_path = (std::filesystem::temp_directory_path() / file).string();
  options.gzip = gzip;
  std::ostringstream out, err;
  EXPECT_EQ(RunExport(options, out, err), 0) << err.str();
  return options.perfetto_path;
}

size_t Count(const std::string& text, const std::regex& pattern) {
  return static_cast<size_t>(
      std::distance(std::sregex_iterator(text.begin(), text.end(), pattern), {}));
}

struct Expect {
  const char* run;
  int workers;
  bool pin_thread;
};

class H200Export : public ::testing::TestWithParam<Expect> {};

TEST_P(H200Export, ShowsTheJob) {
  const Expect expect = GetParam();
  const std::string run = kRuns + expect.run;
  const Truth truth = Replay(run);
  const std::string name = std::string("h200_") + expect.run;
  const std::string plain = ReadFile(Export(run, name + ".pftrace"));
  testing::PerfettoDump dump = testing::DumpPerfetto(plain);
  // Valid, every TrackEvent name and argument name interned (the dump
  // reports a name sent as a string more than once, and unknown iids).
  EXPECT_TRUE(dump.errors.empty()) << dump.errors.front();
  const std::string& text = dump.text;

  // Processes: the main process, one "DataLoader worker N" per worker id.
  EXPECT_EQ(Count(text, std::regex("  process pid=\\d+ name=\"main process\"")), 1u);
  std::set<int> named;
  const std::regex worker("  process pid=\\d+ name=\"DataLoader worker (\\d+)\"");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), worker);
       it != std::sregex_iterator(); ++it) {
    named.insert(std::stoi((*it)[1]));
  }
  std::set<int> want;
  for (int i = 0; i < expect.workers; ++i) want.insert(i);
  EXPECT_EQ(named, want);
  EXPECT_EQ(truth.worker_ids, want);
  EXPECT_EQ(Count(text, std::regex("  process pid=\\d+ name=\"forked process\"")), 0u);

  // Worker batch slices: one per LOADER_FETCH.
  ASSERT_GT(truth.fetches, 0u);
  EXPECT_EQ(Count(text, std::regex("\"make batch\" categories=\\[\"dataloader\"\\]")),
            truth.fetches);
  EXPECT_EQ(Count(text, std::regex(" name=\"main thread\" ")), 1u + expect.workers);

  // The pin-memory thread: one track, holding every PIN span.
  const std::regex pin_track("  thread pid=(\\d+) tid=(\\d+) name=\"pin-memory thread\"");
  std::smatch m;
  if (expect.pin_thread) {
    ASSERT_TRUE(std::regex_search(text, m, pin_track));
    const std::string label = "  thread " + m[1].str() + "/" + m[2].str() + " ts=";
    EXPECT_EQ(Count(text, std::regex(label + "\\d+ dur=\\d+ \"pin_memory \\(batch\\)\"")),
              truth.pins);
    EXPECT_EQ(Count(text, std::regex("\"pin_memory \\(batch\\)\"")), truth.pins);
    EXPECT_GT(truth.pins, 0u);
  } else {
    EXPECT_FALSE(std::regex_search(text, m, pin_track));
  }

  // Flows: every device record with a correlated host call ends one flow
  // started on a host call's slice (a thread track), and no other flows.
  EXPECT_GT(truth.correlated_device, 0u);
  EXPECT_EQ(dump.flows, truth.correlated_device);
  EXPECT_EQ(Count(text, std::regex("flows \\d+\n")), 1u);
  EXPECT_NE(text.find("flows " + std::to_string(truth.correlated_device) + "\n"),
            std::string::npos);

  // Counters: /dev/shm never negative, GPU busy a share in [0, 1].
  const std::regex value("  \"([^\"]+)\" ts=\\d+ value=(-?[0-9.e+-]+)");
  size_t shm = 0, busy = 0;
  double busiest = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), value);
       it != std::sregex_iterator(); ++it) {
    const std::string track = (*it)[1];
    const double v = std::stod((*it)[2]);
    if (track == "/dev/shm bytes in use (job)") {
      EXPECT_GE(v, 0);
      ++shm;
    } else if (track.find(" busy (share of each ms)") != std::string::npos) {
      EXPECT_GE(v, 0);
      EXPECT_LE(v, 1);
      busiest = std::max(busiest, v);
      ++busy;
    }
  }
  EXPECT_GT(shm, 2u);
  EXPECT_GT(busy, 2u);
  EXPECT_GT(busiest, 0.5);  // the GPU works for whole milliseconds at times

  // gzip: the same bytes once decompressed, by --gzip and by the name.
  EXPECT_EQ(Gunzip(ReadFile(Export(run, name + ".bin", /*gzip=*/true))), plain);
  EXPECT_EQ(Gunzip(ReadFile(Export(run, name + ".pftrace.gz"))), plain);
}

INSTANTIATE_TEST_SUITE_P(Runs, H200Export,
                         ::testing::Values(Expect{"imagenet", 4, true},
                                           Expect{"input_starvation", 2, false},
                                           Expect{"pin_thread", 12, true}),
                         [](const auto& info) { return std::string(info.param.run); });

}  // namespace
}  // namespace pinscope
