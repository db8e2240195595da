// Unit tests of analyzer/device_activity: the correlation join, copy classes,
// GPU busy/idle math, gap attribution and the input verdict, on synthetic
// records with exact expected numbers.
#include "analyzer/analyses/device_activity.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>

namespace pinscope::device {
namespace {

constexpr uint64_t ms = kMs;
constexpr uint64_t us = 1000;

DeviceRecord Rec(uint32_t kind, uint64_t start, uint64_t end, uint32_t corr = 0,
                 uint32_t device = 0) {
  DeviceRecord r;
  r.kind = kind;
  r.start_ns = start;
  r.end_ns = end;
  r.correlation_id = corr;
  r.device_id = device;
  return r;
}

DeviceRecord Memcpy(uint64_t start, uint64_t end, uint64_t bytes, uint32_t corr,
                    uint32_t direction = kH2D, uint32_t src = kPageable, uint32_t dst = kDevice) {
  DeviceRecord r = Rec(kActMemcpy, start, end, corr);
  r.bytes = bytes;
  r.direction = direction;
  r.src_kind = src;
  r.dst_kind = dst;
  return r;
}

HostCall Copy(uint64_t call_id, uint64_t start, uint64_t end, uint64_t bytes,
              uint32_t direction = kH2D, uint32_t src = kPageable, uint32_t dst = kDevice) {
  HostCall c;
  c.type = HostCall::Type::kCopy;
  c.call_id = call_id;
  c.start_ns = start;
  c.end_ns = end;
  c.bytes = bytes;
  c.direction = direction;
  c.src_kind = src;
  c.dst_kind = dst;
  return c;
}

// One DeviceRecording packet's switch.
RecordingSwitch Switch(uint64_t t, bool kernels, const char* reason, double rate = 0,
                       bool detached = false) {
  RecordingSwitch c;
  c.time_ns = t;
  c.kernels = kernels;
  c.reason = reason;
  c.kernel_rate = rate;
  c.detached = detached;
  return c;
}

HostCall Sync(uint64_t call_id, uint64_t start, uint64_t end) {
  HostCall c;
  c.type = HostCall::Type::kSync;
  c.call_id = call_id;
  c.start_ns = start;
  c.end_ns = end;
  return c;
}

// --- intervals --------------------------------------------------------------

TEST(Intervals, OverlapAndUnion) {
  EXPECT_EQ(Overlap({0, 10}, {5, 20}), 5u);
  EXPECT_EQ(Overlap({0, 10}, {10, 20}), 0u);
  std::vector<Interval> u = Union({{5, 7}, {0, 2}, {2, 3}, {6, 9}, {20, 20}});
  ASSERT_EQ(u.size(), 2u);
  EXPECT_EQ(u[0].start_ns, 0u);
  EXPECT_EQ(u[0].end_ns, 3u);
  EXPECT_EQ(u[1].start_ns, 5u);
  EXPECT_EQ(u[1].end_ns, 9u);
}

TEST(Intervals, ReferenceBusyAndChunks) {
  // 10 ms window, busy [0,2) [1,3) [6,7): 4 ms busy.
  std::vector<Interval> s = {{0, 2 * ms}, {1 * ms, 3 * ms}, {6 * ms, 7 * ms}};
  EXPECT_DOUBLE_EQ(BusyFraction(s, {0, 10 * ms}), 0.4);
  std::vector<double> c = ChunkBusyFractions(s, {0, 10 * ms}, 5);
  ASSERT_EQ(c.size(), 5u);
  EXPECT_DOUBLE_EQ(c[0], 1.0);
  EXPECT_DOUBLE_EQ(c[1], 0.5);
  EXPECT_DOUBLE_EQ(c[2], 0.0);
  EXPECT_DOUBLE_EQ(c[3], 0.5);
  EXPECT_DOUBLE_EQ(c[4], 0.0);
}

// --- join ---------------------------------------------------------------------

TEST(Join, AnyArrivalOrderGivesTheSameMatch) {
  std::array<int, 3> order = {0, 1, 2};  // host, correlation, device
  int permutations = 0;
  do {
    CorrelationJoiner j;
    for (int step : order) {
      if (step == 0) j.AddHostCall(Copy(42, 100, 200, 4096));
      if (step == 1) j.AddCorrelation(7, 42, 300);
      if (step == 2) j.AddDevice(Memcpy(150, 180, 4096, 7));
    }
    std::vector<Joined> out = j.Take();
    ASSERT_EQ(out.size(), 1u);
    ASSERT_TRUE(out[0].host.has_value());
    EXPECT_EQ(out[0].host->call_id, 42u);
    EXPECT_EQ(out[0].device.correlation_id, 7u);
    EXPECT_EQ(j.stats().joined, 1u);
    EXPECT_EQ(j.CallIdFor(7).value_or(0), 42u);
    j.Finish();
    EXPECT_EQ(j.Take().size(), 0u);
    EXPECT_EQ(j.stats().host_copies_unmatched, 0u);
    EXPECT_EQ(j.stats().device_unmatched, 0u);
    ++permutations;
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(permutations, 6);
}

TEST(Join, BatchRecordsMatchCopiesInOrder) {
  CorrelationJoiner j;
  j.AddDevice(Memcpy(10, 20, 100, 9));
  j.AddDevice(Memcpy(20, 30, 200, 9));
  HostCall a = Copy(5, 0, 40, 100), b = Copy(5, 0, 40, 200);
  j.AddHostCall(a);
  j.AddHostCall(b);
  EXPECT_TRUE(j.Take().empty());  // no correlation yet
  j.AddCorrelation(9, 5, 50);
  std::vector<Joined> out = j.Take();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].host->bytes, 100u);
  EXPECT_EQ(out[1].host->bytes, 200u);
  EXPECT_EQ(j.stats().joined, 2u);
}

TEST(Join, KernelsPassThroughAndSyncRecordsJoin) {
  CorrelationJoiner j;
  j.AddDevice(Rec(kActKernel, 0, 10, 3));
  std::vector<Joined> out = j.Take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FALSE(out[0].host.has_value());
  j.AddHostCall(Sync(8, 0, 100));
  j.AddCorrelation(4, 8, 100);
  j.AddDevice(Rec(kActSync, 5, 90, 4));
  out = j.Take();
  ASSERT_EQ(out.size(), 1u);
  ASSERT_TRUE(out[0].host.has_value());
  EXPECT_EQ(out[0].host->type, HostCall::Type::kSync);
  EXPECT_EQ(j.stats().joined, 1u);
}

TEST(Join, UnmatchedRecordsAndCallsAreGivenUpAfterTheHorizon) {
  CorrelationJoiner j(10 * ms);
  j.AddDevice(Memcpy(1 * ms, 2 * ms, 64, 11));       // no correlation ever
  j.AddHostCall(Copy(1, 1 * ms, 3 * ms, 64));        // no device record ever
  j.AddHostCall(Sync(2, 3 * ms, 4 * ms));            // syncs are not counted
  j.Advance(12 * ms);                                // cut at 2 ms: nothing yet (ends at 2, 3)
  EXPECT_TRUE(j.Take().empty());
  j.Advance(20 * ms);                                // cut at 10 ms
  std::vector<Joined> out = j.Take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_FALSE(out[0].host.has_value());
  EXPECT_EQ(j.stats().device_unmatched, 1u);
  EXPECT_EQ(j.stats().host_copies_unmatched, 1u);
  EXPECT_EQ(j.stats().joined, 0u);
  // A correlation for the expired call no longer joins anything.
  j.AddCorrelation(11, 1, 21 * ms);
  EXPECT_TRUE(j.Take().empty());
}

// --- copy classes ---------------------------------------------------------------

TEST(CopyClasses, DeviceTimeBandwidthAndHostBlockedTime) {
  EXPECT_TRUE((ClassOf(kH2D, kPageable, kDevice) == CopyClassKey{kH2D, kPageable}));
  EXPECT_TRUE((ClassOf(kD2H, kDevice, kPinned) == CopyClassKey{kD2H, kPinned}));
  EXPECT_TRUE((ClassOf(kD2D, kDevice, kDevice) == CopyClassKey{kD2D, kDevice}));
  EXPECT_TRUE((ClassOf(kPeer, kDevice, kDevice) == CopyClassKey{kPeer, kDevice}));

  CopyClassAccumulator acc;
  const uint64_t mib8 = 8u << 20;
  // Two pageable H2D copies of 8 MiB: 1 ms and 3 ms on the device, the host
  // blocked 2 ms and 5 ms.
  acc.Add({Memcpy(0, 1 * ms, mib8, 1), Copy(1, 0, 2 * ms, mib8)});
  acc.Add({Memcpy(10 * ms, 13 * ms, mib8, 2), Copy(2, 9 * ms, 14 * ms, mib8)});
  // One pinned D2H copy joined; one without host call classed by CUPTI's kinds.
  acc.Add({Memcpy(20 * ms, 20 * ms + 500 * us, 1u << 20, 3, kD2H, kDevice, kPinned),
           Copy(3, 20 * ms, 20 * ms + 10 * us, 1u << 20, kD2H, kDevice, kPinned)});
  acc.Add({Memcpy(30 * ms, 31 * ms, 4096, 4, kD2H, kDevice, kPageable), std::nullopt});
  acc.Add({Rec(kActKernel, 0, 5), std::nullopt});  // ignored
  // pinscope pinned the buffer behind the program's back: CUPTI says pinned,
  // the program's memory is pageable; the class is the program's view.
  acc.Add({Memcpy(40 * ms, 41 * ms, 1000, 5, kH2D, kPinned, kDevice),
           Copy(5, 40 * ms, 42 * ms, 1000, kH2D, kPageable, kDevice)});

  std::vector<CopyClassStats> r = acc.Results();
  ASSERT_EQ(r.size(), 3u);
  // Sorted by (direction, host kind): H2D pageable, D2H pageable, D2H pinned.
  EXPECT_TRUE((r[0].key == CopyClassKey{kH2D, kPageable}));
  EXPECT_EQ(r[0].count, 3u);
  EXPECT_EQ(r[0].bytes, 2 * mib8 + 1000);
  EXPECT_EQ(r[0].device_ns, 5 * ms);
  EXPECT_EQ(r[0].joined, 3u);
  EXPECT_EQ(r[0].host_blocked_ns, 9 * ms);
  EXPECT_DOUBLE_EQ(r[0].device_gbps(), (2.0 * mib8 + 1000) / 5e6);
  EXPECT_TRUE((r[1].key == CopyClassKey{kD2H, kPageable}));
  EXPECT_EQ(r[1].count, 1u);
  EXPECT_EQ(r[1].joined, 0u);
  EXPECT_EQ(r[1].host_blocked_ns, 0u);
  EXPECT_TRUE((r[2].key == CopyClassKey{kD2H, kPinned}));
  EXPECT_EQ(r[2].device_ns, 500 * us);
  EXPECT_EQ(r[2].host_blocked_ns, 10 * us);
  EXPECT_DOUBLE_EQ(r[2].device_gbps(), 1048576.0 / 500000.0);
}

// --- busy / idle ------------------------------------------------------------------

BusyOptions AlignedOptions() {
  BusyOptions o;
  o.origin_ns = 0;
  o.bin_ns = 1 * ms;
  o.chunks = 30;
  o.gap_threshold_ns = 1 * ms;
  return o;
}

TEST(Busy, UnionOfKernelsCopiesAndMemsetsPerChunk) {
  GpuBusyTracker t(AlignedOptions());
  t.AddDevice(Rec(kActKernel, 0, 10 * ms));
  t.AddDevice(Rec(kActKernel, 5 * ms, 12 * ms));        // overlaps: union
  t.AddDevice(Memcpy(20 * ms, 25 * ms, 1, 0));
  t.AddDevice(Rec(kActMemset, 25 * ms, 26 * ms));       // touches: one run
  t.AddDevice(Rec(kActSync, 12 * ms, 20 * ms));         // host-side wait: not busy
  std::vector<DeviceBusy> r = t.Finish({0, 30 * ms});
  ASSERT_EQ(r.size(), 1u);
  const DeviceBusy& b = r[0];
  EXPECT_EQ(b.records, 4u);
  EXPECT_EQ(b.busy_ns, 18 * ms);
  EXPECT_DOUBLE_EQ(b.busy_fraction, 0.6);
  ASSERT_EQ(b.chunk_busy_fraction.size(), 30u);
  for (int k = 0; k < 30; ++k) {
    double want = (k < 12 || (k >= 20 && k < 26)) ? 1.0 : 0.0;
    EXPECT_DOUBLE_EQ(b.chunk_busy_fraction[k], want) << "chunk " << k;
  }
  // The exact reference agrees.
  std::vector<double> ref = ChunkBusyFractions(
      {{0, 10 * ms}, {5 * ms, 12 * ms}, {20 * ms, 25 * ms}, {25 * ms, 26 * ms}}, {0, 30 * ms}, 30);
  EXPECT_EQ(ref, b.chunk_busy_fraction);
  EXPECT_EQ(b.leading_idle_ns, 0u);
  EXPECT_EQ(b.trailing_idle_ns, 4 * ms);
  EXPECT_DOUBLE_EQ(b.active_busy_fraction, 18.0 / 26.0);
  EXPECT_EQ(b.gap_count, 1u);
  EXPECT_EQ(b.gap_ns, 8 * ms);
  ASSERT_EQ(b.longest_gaps.size(), 1u);
  EXPECT_EQ(b.longest_gaps[0].start_ns, 12 * ms);
  EXPECT_EQ(b.longest_gaps[0].end_ns, 20 * ms);
  EXPECT_EQ(b.longest_gaps[0].cause, GapCause::kUnknown);  // no host intervals given
  EXPECT_EQ(b.by_cause[static_cast<int>(GapCause::kUnknown)].idle_ns, 8 * ms);
}

TEST(Busy, GapThresholdIsStrictAndAParameter) {
  BusyOptions o = AlignedOptions();
  GpuBusyTracker t(o);
  t.AddDevice(Rec(kActKernel, 0, 1 * ms));
  t.AddDevice(Rec(kActKernel, 2 * ms, 3 * ms));          // 1 ms gap: not longer than 1 ms
  t.AddDevice(Rec(kActKernel, 4 * ms + 1, 5 * ms));      // 1 ms + 1 ns: a gap
  t.AddDevice(Rec(kActKernel, 600 * ms, 601 * ms));      // 595 ms gap
  std::vector<DeviceBusy> r = t.Finish({0, 601 * ms});
  EXPECT_EQ(r[0].gap_count, 2u);
  EXPECT_EQ(r[0].gap_ns, 1 * ms + 1 + 595 * ms);
  ASSERT_EQ(r[0].longest_gaps.size(), 2u);
  EXPECT_EQ(r[0].longest_gaps[0].length(), 595 * ms);  // longest first

  o.gap_threshold_ns = 500 * ms;  // nsys gpu_gaps
  GpuBusyTracker n(o);
  n.AddDevice(Rec(kActKernel, 0, 1 * ms));
  n.AddDevice(Rec(kActKernel, 2 * ms, 3 * ms));
  n.AddDevice(Rec(kActKernel, 4 * ms + 1, 5 * ms));
  n.AddDevice(Rec(kActKernel, 600 * ms, 601 * ms));
  EXPECT_EQ(n.Finish({0, 601 * ms})[0].gap_count, 1u);
}

TEST(Busy, GapsAreAttributedToWhatTheHostWasDoing) {
  GpuBusyTracker t(AlignedOptions());
  for (uint64_t s : {0ull, 20ull, 50ull, 80ull, 100ull}) t.AddDevice(Rec(kActKernel, s * ms, (s + 10) * ms));
  // Gap [10,20): a blocking copy covers 5.5 of 10 ms, a sync 1 ms.
  t.AddHostInterval(GapCause::kCopy, {12 * ms, 17 * ms + 500 * us});
  t.AddHostInterval(GapCause::kSync, {18 * ms, 19 * ms});
  // Gap [30,50): DataLoader wait 12 of 20 ms, a copy 4 ms.
  t.AddHostInterval(GapCause::kDataLoader, {29 * ms, 42 * ms});
  t.AddHostInterval(GapCause::kCopy, {42 * ms, 46 * ms});
  // Gap [60,80): copy 4 ms and sync 4 ms (20% each): unknown.
  t.AddHostInterval(GapCause::kCopy, {60 * ms, 64 * ms});
  t.AddHostInterval(GapCause::kSync, {64 * ms, 68 * ms});
  // Gap [90,100): copy 5 ms and DataLoader 5 ms: a tie goes to the copy.
  t.AddHostInterval(GapCause::kCopy, {90 * ms, 95 * ms});
  t.AddHostInterval(GapCause::kDataLoader, {95 * ms, 100 * ms});
  std::vector<DeviceBusy> r = t.Finish({0, 110 * ms});
  const DeviceBusy& b = r[0];
  ASSERT_EQ(b.gap_count, 4u);
  std::vector<Gap> gaps = b.longest_gaps;
  std::sort(gaps.begin(), gaps.end(), [](const Gap& x, const Gap& y) { return x.start_ns < y.start_ns; });
  EXPECT_EQ(gaps[0].cause, GapCause::kCopy);
  EXPECT_EQ(gaps[0].overlap_ns[0], 5 * ms + 500 * us);
  EXPECT_EQ(gaps[0].overlap_ns[1], 1 * ms);
  EXPECT_EQ(gaps[0].overlap_ns[3], 3 * ms + 500 * us);  // covered by nothing
  EXPECT_EQ(gaps[1].cause, GapCause::kDataLoader);
  EXPECT_EQ(gaps[1].overlap_ns[2], 12 * ms);
  EXPECT_EQ(gaps[1].overlap_ns[0], 4 * ms);
  EXPECT_EQ(gaps[2].cause, GapCause::kUnknown);
  EXPECT_EQ(gaps[3].cause, GapCause::kCopy);
  EXPECT_EQ(b.by_cause[0].gaps, 2u);
  EXPECT_EQ(b.by_cause[0].idle_ns, 20 * ms);
  EXPECT_EQ(b.by_cause[2].idle_ns, 20 * ms);
  EXPECT_EQ(b.by_cause[3].idle_ns, 20 * ms);
  EXPECT_EQ(b.busy_ns, 50 * ms);

  InputVerdict v = JudgeInput(b);
  EXPECT_FALSE(v.not_input_bound);
  EXPECT_DOUBLE_EQ(v.busy_fraction, 50.0 / 110.0);  // no leading or trailing idle here
  EXPECT_DOUBLE_EQ(v.input_idle_fraction, 40.0 / 110.0);
}

TEST(Busy, AttributeGapDirectly) {
  Gap g;
  g.start_ns = 100;
  g.end_ns = 200;
  // Overlapping copy calls on two threads count once.
  AttributeGap(&g, {{90, 150}, {120, 160}}, {}, {}, 0.5);
  EXPECT_EQ(g.cause, GapCause::kCopy);
  EXPECT_EQ(g.overlap_ns[0], 60u);
  EXPECT_EQ(g.overlap_ns[3], 40u);
  AttributeGap(&g, {{90, 149}}, {}, {}, 0.5);  // 49%
  EXPECT_EQ(g.cause, GapCause::kUnknown);
  AttributeGap(&g, {{90, 149}}, {}, {}, 0.4);
  EXPECT_EQ(g.cause, GapCause::kCopy);
  EXPECT_STREQ(GapCauseName(GapCause::kDataLoader), "dataloader");
}

TEST(Busy, DevicesAreSeparate) {
  GpuBusyTracker t(AlignedOptions());
  t.AddDevice(Rec(kActKernel, 0, 10 * ms, 0, 0));
  t.AddDevice(Rec(kActKernel, 0, 5 * ms, 0, 1));
  t.AddDevice(Rec(kActKernel, 10 * ms, 20 * ms, 0, 1));
  std::vector<DeviceBusy> r = t.Finish({0, 20 * ms});
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].device_id, 0u);
  EXPECT_DOUBLE_EQ(r[0].busy_fraction, 0.5);
  EXPECT_EQ(r[0].gap_count, 0u);  // trailing idle is not a gap
  EXPECT_EQ(r[0].trailing_idle_ns, 10 * ms);
  EXPECT_EQ(r[1].device_id, 1u);
  EXPECT_DOUBLE_EQ(r[1].busy_fraction, 0.75);
  EXPECT_EQ(r[1].gap_count, 1u);
}

// 100 records over ~300 ms, some overlapping; `mixed`: every fifth a memcpy
// and every eleventh 9 ms longer.
std::vector<DeviceRecord> StreamingRecords(bool mixed) {
  std::vector<DeviceRecord> recs;
  for (uint64_t i = 0; i < 100; ++i) {
    uint64_t base = i * 3 * ms + (i % 7 == 0 ? 2 * ms : 0);
    uint64_t end = base + 1 * ms + (i % 3) * 300 * us + (mixed && i % 11 == 0 ? 9 * ms : 0);
    recs.push_back(Rec(mixed && i % 5 == 0 ? kActMemcpy : kActKernel, base, end));
  }
  return recs;
}

// The streaming tracker's result equals the batch one's.
void ExpectSameBusy(const DeviceBusy& a, const DeviceBusy& b) {
  EXPECT_EQ(a.busy_ns, b.busy_ns);
  EXPECT_EQ(a.gap_count, b.gap_count);
  EXPECT_EQ(a.gap_ns, b.gap_ns);
  EXPECT_EQ(a.chunk_busy_fraction, b.chunk_busy_fraction);
}

TEST(Busy, StreamingOutOfOrderEqualsBatch) {
  BusyOptions o = AlignedOptions();
  o.reorder_ns = 50 * ms;
  GpuBusyTracker s(o), batch(o);
  // Records of 3 streams, delivered a buffer at a time, out of order.
  std::vector<DeviceRecord> recs = StreamingRecords(false);
  for (const DeviceRecord& r : recs) batch.AddDevice(r);
  for (size_t i = 0; i < recs.size(); i += 10) {
    for (size_t k = std::min(recs.size(), i + 10); k-- > i;) s.AddDevice(recs[k]);  // reversed
    s.Advance(recs[i].end_ns + 20 * ms);  // trace time runs ahead of device time
  }
  Interval w{0, 310 * ms};
  DeviceBusy a = s.Finish(w)[0], b = batch.Finish(w)[0];
  EXPECT_EQ(a.late_records, 0u);
  ExpectSameBusy(a, b);
  std::vector<Interval> ivs;
  for (const DeviceRecord& r : recs) ivs.push_back({r.start_ns, r.end_ns});
  EXPECT_EQ(a.busy_ns, static_cast<uint64_t>(BusyFraction(ivs, w) * w.length() + 0.5));
}

TEST(Busy, RecordsLaterThanTheReorderWindowAreCounted) {
  BusyOptions o = AlignedOptions();
  o.reorder_ns = 10 * ms;
  GpuBusyTracker t(o);
  t.AddDevice(Rec(kActKernel, 0, 1 * ms));
  t.AddDevice(Rec(kActKernel, 50 * ms, 51 * ms));
  t.Advance(100 * ms);                              // everything before 90 ms is final
  t.AddDevice(Rec(kActKernel, 20 * ms, 22 * ms));   // too late: inside a closed gap
  std::vector<DeviceBusy> r = t.Finish({0, 100 * ms});
  EXPECT_EQ(r[0].late_records, 1u);
  EXPECT_EQ(r[0].busy_ns, 4 * ms);  // still counted as busy
  EXPECT_EQ(r[0].gap_count, 1u);    // the gap it falls in stays as found
}

TEST(Busy, BinsCoarsenForLongRunsAndStayExactOnAlignedChunks) {
  BusyOptions o = AlignedOptions();
  o.max_bins = 4;  // 1 ms bins -> 4 ms bins for a 16 ms run
  o.chunks = 4;
  GpuBusyTracker t(o);
  t.AddDevice(Rec(kActKernel, 1 * ms, 3 * ms));
  t.AddDevice(Rec(kActKernel, 9 * ms, 16 * ms));
  std::vector<DeviceBusy> r = t.Finish({0, 16 * ms});
  EXPECT_EQ(r[0].busy_ns, 9 * ms);
  ASSERT_EQ(r[0].chunk_busy_fraction.size(), 4u);
  EXPECT_DOUBLE_EQ(r[0].chunk_busy_fraction[0], 0.5);
  EXPECT_DOUBLE_EQ(r[0].chunk_busy_fraction[1], 0.0);
  EXPECT_DOUBLE_EQ(r[0].chunk_busy_fraction[2], 0.75);
  EXPECT_DOUBLE_EQ(r[0].chunk_busy_fraction[3], 1.0);
}

TEST(Busy, WindowSmallerThanTheActivityUsesTheBins) {
  GpuBusyTracker t(AlignedOptions());
  t.AddDevice(Rec(kActKernel, 0, 10 * ms));
  std::vector<DeviceBusy> r = t.Finish({5 * ms, 15 * ms});
  EXPECT_EQ(r[0].busy_ns, 5 * ms);
  EXPECT_DOUBLE_EQ(r[0].busy_fraction, 0.5);
  EXPECT_EQ(r[0].trailing_idle_ns, 5 * ms);
}

TEST(Busy, LongHostIntervalsSurvivePruning) {
  BusyOptions o = AlignedOptions();
  o.reorder_ns = 1 * kSec;
  GpuBusyTracker t(o);
  t.AddHostInterval(GapCause::kDataLoader, {0, 100 * kSec});  // one long wait
  t.AddHostInterval(GapCause::kCopy, {1 * ms, 2 * ms});       // long gone before the gap
  for (uint64_t s = 0; s < 50; ++s) {
    t.AddDevice(Rec(kActKernel, s * kSec, s * kSec + 500 * ms));
    t.Advance((s + 3) * kSec);
  }
  t.AddDevice(Rec(kActKernel, 60 * kSec, 61 * kSec));  // 10.5 s gap after 49.5 s
  t.Advance(70 * kSec);
  std::vector<DeviceBusy> r = t.Finish({0, 61 * kSec});
  const Gap& longest = r[0].longest_gaps.at(0);
  EXPECT_EQ(longest.start_ns, 49 * kSec + 500 * ms);
  EXPECT_EQ(longest.end_ns, 60 * kSec);
  EXPECT_EQ(longest.cause, GapCause::kDataLoader);
  EXPECT_EQ(r[0].gap_count, 50u);  // 49 half-second gaps and the long one
}

TEST(Verdict, BusyGpuIsNotInputBound) {
  DeviceBusy b;
  b.window = {0, 100 * ms};
  b.active_busy_fraction = 0.9;
  EXPECT_TRUE(JudgeInput(b).not_input_bound);
  b.active_busy_fraction = 0.899;
  EXPECT_FALSE(JudgeInput(b).not_input_bound);
  EXPECT_TRUE(JudgeInput(b, 0.8).not_input_bound);
  DeviceBusy empty;
  EXPECT_FALSE(JudgeInput(empty).not_input_bound);
}

TEST(Verdict, StartUpAndTeardownDoNotDiluteAGpuBoundLoop) {
  // 2 s of start-up after CUPTI started, 8 s of back-to-back matmuls with
  // 50 us launch gaps every 10 ms, 1 s of teardown.
  GpuBusyTracker t(AlignedOptions());
  for (uint64_t s = 2 * kSec; s < 10 * kSec; s += 10 * ms) t.AddDevice(Rec(kActKernel, s, s + 10 * ms - 50 * us));
  DeviceBusy b = t.Finish({0, 11 * kSec})[0];
  EXPECT_EQ(b.leading_idle_ns, 2 * kSec);
  EXPECT_EQ(b.trailing_idle_ns, 1 * kSec + 50 * us);
  EXPECT_EQ(b.busy_ns, 800 * (10 * ms - 50 * us));
  EXPECT_NEAR(b.busy_fraction, 0.7236, 1e-4);
  EXPECT_EQ(b.gap_count, 0u);  // 50 us gaps are below the 1 ms threshold
  InputVerdict v = JudgeInput(b);
  EXPECT_TRUE(v.not_input_bound);
  EXPECT_NEAR(v.busy_fraction, 0.995, 1e-4);
  EXPECT_DOUBLE_EQ(v.input_idle_fraction, 0.0);
}

// --- sampled kernel recording: blind time ----------------------------------------

TEST(Blind, FractionsAreOverTheRecordedTimeOnly) {
  GpuBusyTracker t(AlignedOptions());
  t.AddDevice(Rec(kActKernel, 0, 10 * ms));
  t.AddBlind({10 * ms, 20 * ms});  // kernels not recorded
  t.AddDevice(Rec(kActKernel, 20 * ms, 25 * ms));
  std::vector<DeviceBusy> r = t.Finish({0, 30 * ms});
  ASSERT_EQ(r.size(), 1u);
  const DeviceBusy& b = r[0];
  EXPECT_EQ(b.busy_ns, 15 * ms);
  EXPECT_EQ(b.blind_ns, 10 * ms);
  EXPECT_EQ(b.known_ns(), 20 * ms);
  EXPECT_DOUBLE_EQ(b.busy_fraction, 0.75);  // 15 of 20 recorded ms, not 15 of 30
  EXPECT_DOUBLE_EQ(b.covered_fraction(), 20.0 / 30.0);
  EXPECT_TRUE(b.kernels_sampled());
  EXPECT_TRUE(b.measured());
  ASSERT_EQ(b.chunk_busy_fraction.size(), 30u);
  for (int k = 0; k < 30; ++k) {
    double want = k < 10 ? 1.0 : k < 20 ? kUnknownFraction : k < 25 ? 1.0 : 0.0;
    EXPECT_DOUBLE_EQ(b.chunk_busy_fraction[k], want) << "chunk " << k;
  }
  EXPECT_EQ(b.gap_count, 0u);  // the pause [10, 20) is all blind: not idle
  EXPECT_EQ(b.leading_idle_ns, 0u);
  EXPECT_EQ(b.trailing_idle_ns, 5 * ms);
  EXPECT_DOUBLE_EQ(b.active_busy_fraction, 1.0);  // (30 - 10 blind - 5 trailing) ms, all busy
  EXPECT_TRUE(JudgeInput(b).not_input_bound);
}

TEST(Blind, PartlyBlindChunkIsOverItsKnownPart) {
  BusyOptions o = AlignedOptions();
  o.chunks = 4;
  GpuBusyTracker t(o);
  t.AddBlind({4 * ms, 6 * ms});
  t.AddDevice(Rec(kActKernel, 6 * ms, 7 * ms));
  t.AddDevice(Rec(kActKernel, 12 * ms, 16 * ms));
  std::vector<DeviceBusy> r = t.Finish({0, 16 * ms});
  ASSERT_EQ(r[0].chunk_busy_fraction.size(), 4u);
  EXPECT_DOUBLE_EQ(r[0].chunk_busy_fraction[0], 0.0);
  EXPECT_DOUBLE_EQ(r[0].chunk_busy_fraction[1], 0.5);  // 1 busy ms of 2 recorded ms in [4, 8)
  EXPECT_DOUBLE_EQ(r[0].chunk_busy_fraction[2], 0.0);
  EXPECT_DOUBLE_EQ(r[0].chunk_busy_fraction[3], 1.0);
  EXPECT_EQ(r[0].leading_idle_ns, 4 * ms);  // [0, 6) less the blind [4, 6)
  EXPECT_EQ(r[0].gap_count, 1u);            // [7, 12)
  EXPECT_EQ(r[0].gap_ns, 5 * ms);
  EXPECT_DOUBLE_EQ(r[0].busy_fraction, 5.0 / 14.0);
  EXPECT_DOUBLE_EQ(r[0].active_busy_fraction, 5.0 / 10.0);  // [6, 16)
}

TEST(Blind, APauseIsSplitIntoGapsOutsideTheBlindTime) {
  GpuBusyTracker t(AlignedOptions());
  t.AddDevice(Rec(kActKernel, 0, 1 * ms));
  t.AddBlind({5 * ms, 15 * ms});
  t.AddDevice(Rec(kActKernel, 20 * ms, 21 * ms));
  t.AddHostInterval(GapCause::kCopy, {2 * ms, 4 * ms});  // half of [1, 5)
  std::vector<DeviceBusy> r = t.Finish({0, 21 * ms});
  const DeviceBusy& b = r[0];
  // [1, 5): known idle up to the blind edge, a gap. [15, 20) opens a
  // sampling window before its first activity: kernels launched while
  // recording was off may be running there unrecorded, so it is blind too.
  EXPECT_EQ(b.gap_count, 1u);
  EXPECT_EQ(b.gap_ns, 4 * ms);
  ASSERT_EQ(b.longest_gaps.size(), 1u);
  const Gap& gap = b.longest_gaps[0];
  EXPECT_EQ(gap.start_ns, 1 * ms);
  EXPECT_EQ(gap.end_ns, 5 * ms);
  EXPECT_EQ(gap.cause, GapCause::kCopy);
  EXPECT_EQ(gap.overlap_ns[0], 2 * ms);
  EXPECT_EQ(b.by_cause[static_cast<int>(GapCause::kCopy)].idle_ns, 4 * ms);
  EXPECT_EQ(b.by_cause[static_cast<int>(GapCause::kUnknown)].idle_ns, 0u);
  EXPECT_EQ(b.busy_ns, 2 * ms);
  EXPECT_EQ(b.blind_ns, 15 * ms);
  EXPECT_DOUBLE_EQ(b.busy_fraction, 2.0 / 6.0);
  EXPECT_DOUBLE_EQ(JudgeInput(b).input_idle_fraction, 4.0 / 6.0);

  // Pieces at or under the threshold are not gaps.
  GpuBusyTracker n(AlignedOptions());
  n.AddDevice(Rec(kActKernel, 0, 1 * ms));
  n.AddBlind({1 * ms + 500 * us, 19 * ms});
  n.AddDevice(Rec(kActKernel, 20 * ms, 21 * ms));
  EXPECT_EQ(n.Finish({0, 21 * ms})[0].gap_count, 0u);  // 0.5 ms and 1 ms pieces
}

TEST(Blind, CopiesInsideBlindTimeAreNotBusy) {
  GpuBusyTracker t(AlignedOptions());
  t.AddBlind({10 * ms, 20 * ms});
  t.AddDevice(Rec(kActKernel, 0, 5 * ms));
  t.AddDevice(Memcpy(8 * ms, 12 * ms, 1, 0));      // [8, 10) counts
  t.AddDevice(Memcpy(12 * ms, 18 * ms, 1, 0));     // all blind: ignored
  t.AddDevice(Rec(kActMemset, 18 * ms, 22 * ms));  // [20, 22) counts
  std::vector<DeviceBusy> r = t.Finish({0, 30 * ms});
  const DeviceBusy& b = r[0];
  EXPECT_EQ(b.records, 4u);  // received, blind ones too
  EXPECT_EQ(b.busy_ns, 9 * ms);
  EXPECT_DOUBLE_EQ(b.busy_fraction, 9.0 / 20.0);
  EXPECT_EQ(b.gap_count, 1u);  // [5, 8); [10, 20) is blind
  EXPECT_EQ(b.gap_ns, 3 * ms);
  EXPECT_EQ(b.trailing_idle_ns, 8 * ms);
  EXPECT_DOUBLE_EQ(b.active_busy_fraction, 9.0 / 12.0);
  EXPECT_DOUBLE_EQ(b.chunk_busy_fraction[9], 1.0);
  EXPECT_DOUBLE_EQ(b.chunk_busy_fraction[15], kUnknownFraction);
  EXPECT_DOUBLE_EQ(b.chunk_busy_fraction[21], 1.0);
}

TEST(Blind, ARecordAcrossBlindTimeCountsOnBothSides) {
  GpuBusyTracker t(AlignedOptions());
  t.AddBlind({10 * ms, 20 * ms});
  t.AddBlind({22 * ms, 24 * ms});
  t.AddDevice(Memcpy(9 * ms, 26 * ms, 1, 0));            // [9,10) [20,22) [24,26)
  t.AddDevice(Rec(kActKernel, 21 * ms, 23 * ms, 0, 0));  // [21, 22)
  t.AddDevice(Rec(kActKernel, 0, 1 * ms));
  std::vector<DeviceBusy> r = t.Finish({0, 30 * ms});
  const DeviceBusy& b = r[0];
  EXPECT_EQ(b.busy_ns, 6 * ms);
  EXPECT_EQ(b.blind_ns, 12 * ms);
  EXPECT_EQ(b.late_records, 0u);
  EXPECT_EQ(b.gap_count, 1u);  // [1, 9)
  EXPECT_EQ(b.gap_ns, 8 * ms);
  EXPECT_EQ(b.trailing_idle_ns, 4 * ms);
}

TEST(Blind, AnOpenBlindIntervalEndsAtTheWindowEnd) {
  BusyOptions o = AlignedOptions();
  o.reorder_ns = 1 * ms;
  GpuBusyTracker t(o);
  t.AddDevice(Rec(kActKernel, 0, 10 * ms));
  t.BeginBlind(20 * ms);
  EXPECT_TRUE(t.blind_open());
  t.AddDevice(Memcpy(25 * ms, 26 * ms, 1, 0));  // after the open start: not counted
  t.AddDevice(Memcpy(18 * ms, 22 * ms, 1, 0));  // [18, 20) counts
  t.Advance(30 * ms);                           // merges while still open
  t.AddDevice(Memcpy(35 * ms, 36 * ms, 1, 0));
  std::vector<DeviceBusy> r = t.Finish({0, 40 * ms});
  const DeviceBusy& b = r[0];
  EXPECT_EQ(b.blind_ns, 20 * ms);
  EXPECT_EQ(b.busy_ns, 12 * ms);
  EXPECT_DOUBLE_EQ(b.busy_fraction, 12.0 / 20.0);
  EXPECT_EQ(b.gap_count, 1u);  // [10, 18)
  EXPECT_EQ(b.trailing_idle_ns, 0u);
  EXPECT_DOUBLE_EQ(b.active_busy_fraction, 12.0 / 20.0);
  EXPECT_DOUBLE_EQ(b.chunk_busy_fraction[29], kUnknownFraction);

  // Closed: the time after it counts again.
  GpuBusyTracker c(o);
  c.AddDevice(Rec(kActKernel, 0, 10 * ms));
  c.BeginBlind(20 * ms);
  c.BeginBlind(22 * ms);  // already open: nothing
  c.EndBlind(30 * ms);
  c.EndBlind(31 * ms);  // none open: nothing
  EXPECT_FALSE(c.blind_open());
  c.AddDevice(Memcpy(35 * ms, 36 * ms, 1, 0));
  DeviceBusy cb = c.Finish({0, 40 * ms})[0];
  EXPECT_EQ(cb.blind_ns, 15 * ms);  // [20, 30) and the window's settling [30, 35)
  EXPECT_EQ(cb.busy_ns, 11 * ms);
  EXPECT_EQ(cb.gap_count, 1u);  // [10, 20)
  EXPECT_EQ(cb.gap_ns, 10 * ms);
}

TEST(Blind, WholeWindowBlindHasNoVerdict) {
  GpuBusyTracker t(AlignedOptions());
  t.BeginBlind(0);  // PINSCOPE_CUPTI_KERNELS=off: copies only
  t.AddDevice(Memcpy(5 * ms, 10 * ms, 1, 0));
  t.AddDevice(Memcpy(50 * ms, 95 * ms, 1, 0));
  std::vector<DeviceBusy> r = t.Finish({0, 100 * ms});
  ASSERT_EQ(r.size(), 1u);
  const DeviceBusy& b = r[0];
  EXPECT_EQ(b.records, 2u);
  EXPECT_EQ(b.busy_ns, 0u);
  EXPECT_EQ(b.blind_ns, 100 * ms);
  EXPECT_FALSE(b.measured());
  EXPECT_TRUE(b.kernels_sampled());
  EXPECT_DOUBLE_EQ(b.covered_fraction(), 0.0);
  EXPECT_DOUBLE_EQ(b.busy_fraction, 0.0);
  EXPECT_DOUBLE_EQ(b.active_busy_fraction, 0.0);
  EXPECT_EQ(b.leading_idle_ns, 0u);
  EXPECT_EQ(b.gap_count, 0u);
  for (double f : b.chunk_busy_fraction) EXPECT_DOUBLE_EQ(f, kUnknownFraction);
  InputVerdict v = JudgeInput(b);
  EXPECT_FALSE(v.measured);
  EXPECT_FALSE(v.not_input_bound);
  EXPECT_DOUBLE_EQ(v.input_idle_fraction, 0.0);

  // Whatever the figures say, a window without recorded time gives no verdict.
  DeviceBusy forged;
  forged.window = {0, 100 * ms};
  forged.blind_ns = 100 * ms;
  forged.active_busy_fraction = 1.0;
  EXPECT_FALSE(JudgeInput(forged).not_input_bound);
}

TEST(Blind, WithoutBlindTimeNothingChanges) {
  // An EndBlind with none open and an empty blind interval are no blind time:
  // every figure equals the tracker's without them (traces before sampling).
  auto feed = [](GpuBusyTracker& t) {
    t.AddDevice(Rec(kActKernel, 2 * ms, 9 * ms));
    t.AddDevice(Memcpy(12 * ms, 14 * ms, 1, 0));
    t.AddDevice(Rec(kActKernel, 20 * ms, 27 * ms));
    t.AddHostInterval(GapCause::kSync, {9 * ms, 12 * ms});
  };
  GpuBusyTracker plain(AlignedOptions()), touched(AlignedOptions());
  feed(plain);
  touched.EndBlind(5 * ms);
  touched.AddBlind({15 * ms, 15 * ms});
  feed(touched);
  DeviceBusy a = plain.Finish({0, 30 * ms})[0], b = touched.Finish({0, 30 * ms})[0];
  EXPECT_EQ(a.blind_ns, 0u);
  EXPECT_FALSE(a.kernels_sampled());
  EXPECT_DOUBLE_EQ(a.covered_fraction(), 1.0);
  EXPECT_EQ(a.busy_ns, 16 * ms);
  EXPECT_DOUBLE_EQ(a.busy_fraction, 16.0 / 30.0);
  EXPECT_DOUBLE_EQ(a.active_busy_fraction, 16.0 / 25.0);
  EXPECT_EQ(a.gap_count, 2u);
  EXPECT_EQ(b.blind_ns, a.blind_ns);
  EXPECT_EQ(b.busy_ns, a.busy_ns);
  EXPECT_EQ(b.busy_fraction, a.busy_fraction);
  EXPECT_EQ(b.active_busy_fraction, a.active_busy_fraction);
  EXPECT_EQ(b.chunk_busy_fraction, a.chunk_busy_fraction);
  EXPECT_EQ(b.gap_count, a.gap_count);
  EXPECT_EQ(b.gap_ns, a.gap_ns);
  EXPECT_EQ(b.leading_idle_ns, a.leading_idle_ns);
  EXPECT_EQ(b.trailing_idle_ns, a.trailing_idle_ns);

  ProcessDeviceAnalysis p(AlignedOptions());
  p.OnDevice(Rec(kActKernel, 2 * ms, 9 * ms));
  ProcessDeviceResult r = p.Finish({0, 10 * ms});
  EXPECT_EQ(r.recording.switches, 0u);
  EXPECT_EQ(r.recording.mode, "");
  EXPECT_EQ(r.devices[0].blind_ns, 0u);
  EXPECT_DOUBLE_EQ(r.devices[0].busy_fraction, 0.7);
}

TEST(Blind, StreamingWithBlindTimeEqualsBatch) {
  BusyOptions o = AlignedOptions();
  o.reorder_ns = 50 * ms;
  GpuBusyTracker s(o), batch(o);
  std::vector<DeviceRecord> recs = StreamingRecords(true);
  const std::vector<Interval> blinds = {
      {40 * ms, 95 * ms}, {150 * ms, 151 * ms + 500 * us}, {200 * ms, 260 * ms}};
  for (const Interval& b : blinds) batch.AddBlind(b);
  for (const DeviceRecord& r : recs) batch.AddDevice(r);
  // Streaming: each blind edge is given when trace time passes it.
  size_t edge = 0;  // 2 per blind interval
  for (size_t i = 0; i < recs.size(); i += 10) {
    for (size_t k = std::min(recs.size(), i + 10); k-- > i;) s.AddDevice(recs[k]);
    uint64_t now = recs[i].end_ns + 20 * ms;
    for (; edge < 2 * blinds.size(); ++edge) {
      const Interval& b = blinds[edge / 2];
      uint64_t at = edge % 2 ? b.end_ns : b.start_ns;
      if (at > now) break;
      if (edge % 2) {
        s.EndBlind(at);
      } else {
        s.BeginBlind(at);
      }
    }
    s.Advance(now);
  }
  for (; edge < 2 * blinds.size(); ++edge) {
    const Interval& b = blinds[edge / 2];
    if (edge % 2) {
      s.EndBlind(b.end_ns);
    } else {
      s.BeginBlind(b.start_ns);
    }
  }
  Interval w{0, 310 * ms};
  DeviceBusy a = s.Finish(w)[0], b = batch.Finish(w)[0];
  EXPECT_EQ(a.late_records, 0u);
  // The blind intervals, plus each window's settling time up to its first
  // activity: [95, 96) after the first (record 32 starts at 96 ms) and
  // [260, 261) after the third (record 87 at 261 ms); the second ends
  // inside a record.
  EXPECT_EQ(a.blind_ns, 55 * ms + 1 * ms + 500 * us + 60 * ms + 2 * ms);
  EXPECT_EQ(a.blind_ns, b.blind_ns);
  ExpectSameBusy(a, b);
  // The exact reference: the records' union less the blind time.
  std::vector<Interval> ivs;
  for (const DeviceRecord& r : recs) ivs.push_back({r.start_ns, r.end_ns});
  uint64_t busy = static_cast<uint64_t>(BusyFraction(ivs, w) * w.length() + 0.5);
  for (const Interval& bl : blinds) {
    busy -= static_cast<uint64_t>(BusyFraction(ivs, bl) * bl.length() + 0.5);
  }
  EXPECT_EQ(a.busy_ns, busy);
}

TEST(Process, RecordingSwitchesMakeBlindTimeAndASummary) {
  ProcessDeviceAnalysis p(AlignedOptions(), 1 * kSec);
  auto change = [](uint64_t t, bool kernels, const char* reason, double rate) {
    return Switch(t, kernels, reason, rate);
  };
  p.OnDevice(Rec(kActKernel, 0, 10 * ms));
  p.OnRecording(change(10 * ms, false, "sampling", 31000));
  p.OnRecording(change(12 * ms, false, "sampling", 0));  // already off: nothing
  p.OnRecording(change(30 * ms, true, "window", 0));
  p.OnDevice(Rec(kActKernel, 30 * ms, 35 * ms));
  p.OnRecording(change(35 * ms, false, "sampling", 40000));
  p.OnDevice(Memcpy(36 * ms, 38 * ms, 1, 0));  // blind: not busy
  ProcessDeviceResult r = p.Finish({0, 40 * ms});
  EXPECT_EQ(r.recording.switches, 4u);
  EXPECT_EQ(r.recording.stops, 2u);
  EXPECT_EQ(r.recording.windows, 1u);
  EXPECT_DOUBLE_EQ(r.recording.peak_kernel_rate, 40000.0);
  EXPECT_EQ(r.recording.mode, "auto");
  ASSERT_EQ(r.copy_classes.size(), 1u);  // copies are always recorded
  EXPECT_EQ(r.copy_classes[0].count, 1u);
  const DeviceBusy& b = r.devices.at(0);
  EXPECT_EQ(b.blind_ns, 25 * ms);  // [10, 30) and [35, 40)
  EXPECT_EQ(b.busy_ns, 15 * ms);
  EXPECT_DOUBLE_EQ(b.busy_fraction, 1.0);
  EXPECT_DOUBLE_EQ(b.covered_fraction(), 15.0 / 40.0);
  EXPECT_EQ(b.gap_count, 0u);

  ProcessDeviceAnalysis off(AlignedOptions());
  off.OnRecording(change(0, false, "disabled", 0));
  off.OnDevice(Memcpy(1 * ms, 2 * ms, 1, 0));
  ProcessDeviceResult o = off.Finish({0, 10 * ms});
  EXPECT_EQ(o.recording.mode, "off");
  EXPECT_FALSE(o.devices.at(0).measured());
  EXPECT_FALSE(JudgeInput(o.devices[0]).not_input_bound);
}

// Device records in windows (DeviceRecording.detached): host calls made while
// CUPTI was detached are counted apart, never as unmatched, and the time
// between windows is what the records do not cover.
TEST(Process, CallsBetweenWindowsAreNotUnmatched) {
  ProcessDeviceAnalysis p(AlignedOptions(), 1 * kSec);
  auto change = [](uint64_t t, const char* reason, bool detached) {
    return Switch(t, false, reason, 0, detached);
  };
  p.NoCorrelations();  // the default: joined by order
  p.OnRecording(change(0, "attached", false));
  p.OnHostCall(Copy(1, 10 * ms, 12 * ms, 4096));
  p.OnDevice(Memcpy(10 * ms + 100 * us, 11 * ms, 4096, 0));
  p.OnRecording(change(100 * ms, "detached", true));
  EXPECT_TRUE(p.detached());
  for (uint64_t i = 0; i < 5; ++i) p.OnHostCall(Copy(2 + i, (200 + 100 * i) * ms, (201 + 100 * i) * ms, 4096));
  p.OnRecording(change(1000 * ms, "attached", false));
  EXPECT_FALSE(p.detached());
  EXPECT_TRUE(p.windowed());
  p.OnHostCall(Copy(7, 1010 * ms, 1012 * ms, 4096));
  p.OnDevice(Memcpy(1010 * ms + 100 * us, 1011 * ms, 4096, 0));
  p.OnRecording(change(1100 * ms, "detached", true));
  p.OnHostCall(Copy(8, 1200 * ms, 1201 * ms, 4096));
  ProcessDeviceResult r = p.Finish({0, 1500 * ms});
  EXPECT_EQ(r.join_method, JoinMethod::kOrder);
  EXPECT_EQ(r.join.joined, 2u);
  EXPECT_EQ(r.join.host_copies_unmatched, 0u);
  EXPECT_EQ(r.join.device_unmatched, 0u);
  EXPECT_EQ(r.windows.windows, 2u);
  EXPECT_EQ(r.windows.host_calls_between, 6u);
  EXPECT_EQ(r.windows.detached_ns, 900 * ms + 400 * ms);  // [100, 1000) and [1100, 1500)
  EXPECT_DOUBLE_EQ(r.windows.recorded_fraction(), 200.0 / 1500.0);
  EXPECT_EQ(r.windows.before_first_ns, 0u);  // attached at the process's start
  EXPECT_TRUE(r.windows.sampled());
  ASSERT_EQ(r.copy_classes.size(), 1u);
  EXPECT_EQ(r.copy_classes[0].count, 2u);

  // A long start-up: the first CUDA hook, and the first window, 4 s in.
  // The time before it is not recorded either (it was counted as recorded
  // before 2026-12-05: "79% of the process's life" for a 2 s window of 24 s).
  ProcessDeviceAnalysis late(AlignedOptions(), 1 * kSec);
  late.NoCorrelations();
  late.OnRecording(change(4000 * ms, "attached", false));
  late.OnRecording(change(6000 * ms, "detached", true));
  ProcessDeviceResult l = late.Finish({0, 10000 * ms});
  EXPECT_EQ(l.windows.before_first_ns, 4000 * ms);
  EXPECT_EQ(l.windows.detached_ns, 4000 * ms);
  EXPECT_EQ(l.windows.unrecorded_ns(), 8000 * ms);
  EXPECT_DOUBLE_EQ(l.windows.recorded_fraction(), 0.2);

  // A shim that waits for the loop (PINSCOPE_CUPTI_START=loop): loaded at
  // the first CUDA call (1 s), detached until the loop shows (4 s), a
  // window of 100 ms. And one whose job never showed a loop: no window.
  ProcessDeviceAnalysis loop(AlignedOptions(), 1 * kSec);
  loop.NoCorrelations();
  loop.OnRecording(change(1000 * ms, "awaiting_loop", true));
  loop.OnHostCall(Copy(1, 1010 * ms, 1011 * ms, 4096));
  loop.OnRecording(change(4000 * ms, "attached", false));
  loop.OnRecording(change(4100 * ms, "detached", true));
  ProcessDeviceResult w = loop.Finish({0, 10000 * ms});
  EXPECT_EQ(w.windows.windows, 1u);
  EXPECT_EQ(w.windows.before_first_ns, 1000 * ms);
  EXPECT_EQ(w.windows.detached_ns, 3000 * ms + 5900 * ms);
  EXPECT_EQ(w.windows.host_calls_between, 1u);
  EXPECT_NEAR(w.windows.recorded_fraction(), 0.01, 1e-12);
  ProcessDeviceAnalysis never(AlignedOptions(), 1 * kSec);
  never.NoCorrelations();
  never.OnRecording(change(1000 * ms, "awaiting_loop", true));
  never.OnHostCall(Copy(1, 1010 * ms, 1011 * ms, 4096));
  ProcessDeviceResult n = never.Finish({0, 2000 * ms});
  EXPECT_EQ(n.windows.windows, 0u);
  EXPECT_EQ(n.windows.before_first_ns, 1000 * ms);
  EXPECT_EQ(n.windows.detached_ns, 1000 * ms);
  EXPECT_EQ(n.join.host_copies_unmatched, 0u);
  EXPECT_TRUE(n.windows.sampled());
  EXPECT_DOUBLE_EQ(n.windows.recorded_fraction(), 0.0);

  // Attached throughout: nothing of this shows.
  ProcessDeviceAnalysis q(AlignedOptions(), 1 * kSec);
  q.OnRecording(change(0, "attached", false));
  q.OnHostCall(Copy(1, 10 * ms, 12 * ms, 4096));
  ProcessDeviceResult o = q.Finish({0, 100 * ms});
  EXPECT_FALSE(o.windows.sampled());
  EXPECT_FALSE(q.windowed());
  EXPECT_EQ(o.windows.windows, 1u);
}

// --- all together --------------------------------------------------------------

TEST(Process, FeedsJoinClassesAndBusyFromPackets) {
  ProcessDeviceAnalysis p(AlignedOptions(), 1 * kSec);
  // Host: copy 1 (H2D pageable, 4 MiB) at [0, 3 ms), sync 2 at [3, 9 ms),
  // a DataLoader wait [10, 20 ms), copy 3 (D2H pinned) at [20, 21 ms).
  p.OnHostCall(Copy(1, 0, 3 * ms, 4u << 20));
  p.OnHostCall(Sync(2, 3 * ms, 9 * ms));
  p.OnLoaderWait({10 * ms, 20 * ms});
  p.OnHostCall(Copy(3, 20 * ms, 21 * ms, 1u << 20, kD2H, kDevice, kPinned));
  // Device records arrive later, correlations after their records.
  p.OnDevice(Memcpy(1 * ms, 3 * ms, 4u << 20, 100));
  p.OnDevice(Rec(kActKernel, 3 * ms, 9 * ms, 101));
  p.OnDevice(Rec(kActSync, 3 * ms, 9 * ms, 102));
  p.OnDevice(Memcpy(20 * ms, 20 * ms + 500 * us, 1u << 20, 103, kD2H, kDevice, kPinned));
  p.OnCorrelation(100, 1, 30 * ms);
  p.OnCorrelation(102, 2, 30 * ms);
  p.OnCorrelation(103, 3, 30 * ms);
  ProcessDeviceResult r = p.Finish({0, 30 * ms});
  EXPECT_EQ(r.join.joined, 3u);  // two memcpys and the sync
  EXPECT_EQ(r.join.device_unmatched, 0u);
  EXPECT_EQ(r.join.host_copies_unmatched, 0u);
  EXPECT_EQ(r.join.correlations, 3u);
  ASSERT_EQ(r.copy_classes.size(), 2u);
  EXPECT_EQ(r.copy_classes[0].device_ns, 2 * ms);
  EXPECT_EQ(r.copy_classes[0].host_blocked_ns, 3 * ms);
  EXPECT_EQ(r.copy_classes[1].host_blocked_ns, 1 * ms);
  ASSERT_EQ(r.devices.size(), 1u);
  const DeviceBusy& b = r.devices[0];
  EXPECT_EQ(b.busy_ns, 8 * ms + 500 * us);
  EXPECT_EQ(b.leading_idle_ns, 1 * ms);  // before the first record: not a gap
  EXPECT_EQ(b.gap_count, 1u);            // [9, 20) ms
  EXPECT_EQ(b.longest_gaps[0].cause, GapCause::kDataLoader);
  EXPECT_EQ(b.longest_gaps[0].overlap_ns[2], 10 * ms);
}

}  // namespace
}  // namespace pinscope::device
