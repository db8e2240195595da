// SyncWaits (analyzer/analyses/input_analysis.h) streams: a main-thread call
// is folded into the sums once no device record can join it any more, so
// what it holds is the calls of the device join's horizon (60 s), not the
// run. These tests replay runs longer than the horizon and check both the
// figures (exactly those of the whole-run pass it replaced, recomputed here
// from the run's own numbers) and how many calls were held at once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "analyzer/analyses/input_analysis.h"
#include "analyzer/read/calibration.h"
#include "analyzer/read/run_loader.h"
#include "analyzer/replay/replay.h"
#include "trace_builder.h"

namespace pinscope {
namespace {

using testing::kMs;
using testing::TraceBuilder;

constexpr uint64_t kT0 = 1000ull * 1000 * kMs;  // 1000 s
constexpr uint64_t kSec = 1000 * kMs;
constexpr uint64_t kUs = 1000;
constexpr uint64_t kBytes = 4096;

// One main-thread call as the run has it, for the reference computation.
struct Call {
  uint64_t start = 0, end = 0;
  bool copy = false;
  uint64_t transfer_ns = 0;  // the device time when joined, else the calibrated one
  bool joined = false;
};

struct Expected {
  uint64_t calls = 0, waiting_calls = 0, wait_ns = 0, copy_wait_ns = 0, sync_wait_ns = 0;
  uint64_t saving_ns = 0, span_ns = 0, copies_joined = 0, copies_calibrated = 0;
};

// The whole-run pass SyncWaits made before it streamed (every call kept,
// then waits, then each waiting call's saving up to the next waiting call).
Expected Reference(const std::vector<Call>& calls) {
  Expected e;
  e.calls = calls.size();
  std::vector<uint64_t> waits(calls.size());
  uint64_t last_end = 0;
  for (size_t i = 0; i < calls.size(); ++i) {
    const Call& c = calls[i];
    last_end = std::max(last_end, c.end);
    const uint64_t own = (c.copy ? c.transfer_ns : 0) + SyncWaits::kCallOverheadNs;
    waits[i] = c.end - c.start > own ? c.end - c.start - own : 0;
    if (c.copy) (c.joined ? e.copies_joined : e.copies_calibrated)++;
  }
  e.span_ns = last_end - calls.front().start;
  for (size_t i = 0; i < calls.size(); ++i) {
    if (waits[i] == 0) continue;
    size_t next = i + 1;
    while (next < calls.size() && waits[next] == 0) ++next;
    const uint64_t host = next < calls.size() && calls[next].start > calls[i].end
                              ? calls[next].start - calls[i].end
                              : 0;
    ++e.waiting_calls;
    e.wait_ns += waits[i];
    (calls[i].copy ? e.copy_wait_ns : e.sync_wait_ns) += waits[i];
    e.saving_ns += std::min(waits[i], host);
  }
  return e;
}

trace::TracePacket& AddSync(TraceBuilder& b, uint64_t time_ns, uint64_t blocked_ns,
                            uint64_t call_id) {
  trace::TracePacket& packet = b.Add(time_ns);
  trace::SyncEvent* sync = packet.mutable_sync();
  sync->set_api(trace::STREAM_SYNCHRONIZE);
  sync->set_end_ns(time_ns + blocked_ns);
  sync->set_call_id(call_id);
  return packet;
}

struct SyncRun {
  std::string dir;
  std::vector<Call> calls;
};

// `steps` steps 50 ms apart on the root's main thread: a D2H copy of 4 KiB
// (pinned) that blocks 1.0 to 3.4 ms, then host work, then a stream sync
// that blocks 0 or 4 ms. With `cupti`, CUPTI's records for two copies in
// three (correlation and memcpy record) arrive 1.5 s after the copy, as a
// flushed buffer does; the third copy has none and is timed by the
// calibration.
SyncRun MakeRun(const std::string& name, int steps, bool cupti, const Calibration& calibration) {
  SyncRun run;
  run.dir = testing::MakeTempDir(name);
  TraceBuilder b(100, "sync-waits", kT0);
  testing::SetHostFacts(&b.header(), 0, 0);
  if (cupti) b.Notice(kT0, trace::Notice::INFO, "cupti_started", "CUPTI 13");
  const uint64_t calibrated = static_cast<uint64_t>(static_cast<double>(kBytes) /
                                                    calibration.PinnedGbps(/*h2d=*/false, kBytes));
  for (int i = 0; i < steps; ++i) {
    const uint64_t t = kT0 + kMs + static_cast<uint64_t>(i) * 50 * kMs;
    const uint64_t blocked = kMs + static_cast<uint64_t>(i % 7) * 400 * kUs;
    trace::TracePacket& copy =
        b.Copy(t, blocked, trace::D2H, trace::PINNED, kBytes, 0x7000000000ull);
    const uint64_t call_id = copy.copy().call_id();
    Call c{t, t + blocked, true, calibrated, false};
    if (cupti && i % 3 != 2) {
      const uint32_t correlation = static_cast<uint32_t>(i + 1);
      const uint64_t device_ns = 100 * kUs + static_cast<uint64_t>(i % 5) * 150 * kUs;
      trace::ExternalCorrelation* corr = b.Add(t + 1500 * kMs).mutable_correlation();
      corr->set_correlation_id(correlation);
      corr->set_call_id(call_id);
      trace::DeviceActivity* d = b.Add(t + 1500 * kMs).mutable_device();
      d->set_kind(trace::ACT_MEMCPY);
      d->set_start_ns(t + blocked - device_ns);
      d->set_end_ns(t + blocked);
      d->set_bytes(kBytes);
      d->set_direction(trace::D2H);
      d->set_src_kind(trace::DEVICE);
      d->set_dst_kind(trace::PINNED);
      d->set_correlation_id(correlation);
      c.joined = true;
      c.transfer_ns = device_ns;
    }
    run.calls.push_back(c);
    const uint64_t sync_at = t + blocked + static_cast<uint64_t>(1 + i % 11) * kMs;
    const uint64_t sync_blocked = i % 4 == 0 ? 0 : 4 * kMs;
    AddSync(b, sync_at, sync_blocked, 1000000 + static_cast<uint64_t>(i));
    run.calls.push_back({sync_at, sync_at + sync_blocked, false, 0, false});
  }
  b.Exit(kT0 + static_cast<uint64_t>(steps) * 50 * kMs + 10 * kSec);
  b.SortByTime();  // the device packets go where their flush put them
  b.Write(run.dir);
  return run;
}

struct Replayed {
  SyncThread thread;
  uint64_t peak = 0;
  uint64_t dropped = 0;
  size_t threads = 0;
};

Replayed Replay(const std::string& dir, const Calibration& calibration) {
  RunListing listing;
  EXPECT_TRUE(ScanRun(dir, &listing).ok());
  ReplayEngine engine(std::move(listing));
  InputAnalysis input(calibration);
  engine.AddAnalysis(&input);
  engine.Run();
  Replayed out;
  out.threads = input.sync_waits().threads.size();
  if (out.threads > 0) out.thread = input.sync_waits().threads[0];
  out.peak = input.peak_wait_calls();
  out.dropped = input.sync_waits().dropped_calls;
  return out;
}

void ExpectFigures(const SyncThread& got, const Expected& want) {
  EXPECT_EQ(got.calls, want.calls);
  EXPECT_EQ(got.waiting_calls, want.waiting_calls);
  EXPECT_EQ(got.wait_ns, want.wait_ns);
  EXPECT_EQ(got.copy_wait_ns, want.copy_wait_ns);
  EXPECT_EQ(got.sync_wait_ns, want.sync_wait_ns);
  EXPECT_EQ(got.saving_ns, want.saving_ns);
  EXPECT_EQ(got.span_ns, want.span_ns);
  EXPECT_EQ(got.copies_joined, want.copies_joined);
  EXPECT_EQ(got.copies_calibrated, want.copies_calibrated);
  EXPECT_EQ(got.host_ns, got.span_ns - std::min(got.span_ns, got.wait_ns));
}

// 6,000 steps, 300 s, CUPTI records 1.5 s late: the figures are the
// whole-run pass's, and at most the calls of the join's 60 s horizon plus
// the 1 s between its Advance calls were held (40 calls a second: 2,440),
// not the run's 12,000.
TEST(SyncWaitsTest, StreamsWithCuptiAndMatchesTheWholeRunPass) {
  const Calibration calibration = DefaultCalibration();
  const SyncRun run = MakeRun("sync_waits_cupti", 6000, /*cupti=*/true, calibration);
  const Replayed got = Replay(run.dir, calibration);
  ASSERT_EQ(got.threads, 1u);
  const Expected want = Reference(run.calls);
  EXPECT_EQ(want.copies_joined, 4000u);  // the run is what the test means it to be
  EXPECT_EQ(want.copies_calibrated, 2000u);
  EXPECT_GT(want.saving_ns, 0u);
  ExpectFigures(got.thread, want);
  ASSERT_EQ(got.thread.sites.size(), 1u);  // no stacks: one unknown site
  EXPECT_EQ(got.thread.sites[0].calls, want.waiting_calls);
  EXPECT_EQ(got.thread.sites[0].saving_ns, want.saving_ns);
  EXPECT_EQ(got.dropped, 0u);
  EXPECT_GE(got.peak, 2000u);  // the horizon's calls were held: a record may still join them
  EXPECT_LE(got.peak, 2440u + 40u);
}

// Without CUPTI no record can join a call: each is final at once.
TEST(SyncWaitsTest, WithoutCuptiHoldsNoCall) {
  const Calibration calibration = DefaultCalibration();
  const SyncRun run = MakeRun("sync_waits_plain", 3000, /*cupti=*/false, calibration);
  const Replayed got = Replay(run.dir, calibration);
  ASSERT_EQ(got.threads, 1u);
  const Expected want = Reference(run.calls);
  EXPECT_EQ(want.copies_joined, 0u);
  ExpectFigures(got.thread, want);
  EXPECT_EQ(got.peak, 0u);
}

}  // namespace
}  // namespace pinscope
