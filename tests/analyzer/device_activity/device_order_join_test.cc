// Unit tests of the join by time and order (analyzer/analyses/
// device_order_join.h) and of how ProcessDeviceAnalysis chooses it per
// process: synthetic records, every match and count exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <vector>

#include "analyzer/analyses/device_activity.h"

namespace pinscope::device {
namespace {

constexpr uint64_t us = kUs;
constexpr uint64_t t0 = 100 * kSec;  // the scenario's origin
constexpr uint64_t kStreamA = 0x10, kStreamB = 0x20;
constexpr uint32_t kApiMemcpy = 1, kApiMemcpyAsync = 2;  // trace CopyApi

HostCall Copy(uint64_t id, uint32_t tid, uint64_t stream, uint32_t api, uint64_t start_us,
              uint64_t end_us, uint64_t bytes, uint32_t direction, uint32_t src, uint32_t dst) {
  HostCall c;
  c.type = HostCall::Type::kCopy;
  c.call_id = id;
  c.tid = tid;
  c.stream = stream;
  c.api = api;
  c.start_ns = t0 + start_us * us;
  c.end_ns = t0 + end_us * us;
  c.bytes = bytes;
  c.direction = direction;
  c.src_kind = src;
  c.dst_kind = dst;
  return c;
}

HostCall Sync(uint64_t id, uint32_t tid, uint64_t stream, uint64_t start_us, uint64_t end_us) {
  HostCall c;
  c.type = HostCall::Type::kSync;
  c.call_id = id;
  c.tid = tid;
  c.stream = stream;
  c.api = kStreamSynchronize;
  c.start_ns = t0 + start_us * us;
  c.end_ns = t0 + end_us * us;
  return c;
}

DeviceRecord Record(uint32_t kind, uint64_t start_us, uint64_t end_us, uint64_t bytes = 0,
                    uint32_t direction = kDirUnknown, uint32_t src = kMemUnknown,
                    uint32_t dst = kMemUnknown, uint32_t stream = 0) {
  DeviceRecord r;
  r.kind = kind;
  r.start_ns = t0 + start_us * us;
  r.end_ns = t0 + end_us * us;
  r.bytes = bytes;
  r.direction = direction;
  r.src_kind = src;
  r.dst_kind = dst;
  r.stream_id = stream;
  return r;
}

constexpr uint64_t k4M = 4 << 20, k1M = 1 << 20, k64K = 64 << 10, k2M = 2 << 20;

// The scenario. Thread 1 issues on stream A, thread 2 on stream B (CUPTI
// streams 7 and 8). Stream A is busy with kernels until 5 ms, so its async
// copies run late; stream B's 4 MiB copy runs at once, before stream A's
// two identical ones.
//   call 1  t1 A async H2D 4 MiB  host [0,20] us      device [5000,5400]
//   call 2  t1 A async H2D 4 MiB  host [50,70]        device [5400,5800]
//   call 3  t1 A async H2D 1 MiB  host [100,120]      device [5800,5900]
//   call 4  t2 B async H2D 4 MiB  host [80,100]       device [200,600]
//   call 6  t2 B async D2H 64 KiB host [300,310]      no device record
//   call 5  t1 0 sync  D2H 64 KiB host [6000,6500]    device [6300,6450] (inside its call)
//   call 7  t1 A async H2D 1 MiB  host [6600,6620]    no device record (dropped)
//   call 8  t1 cudaStreamSynchronize(A) [6700,7000]   sync record [6702,6999]; a stray
//           sync record [6690,6700] (an unhooked call) fits it worse
//   call 9  t1 A async H2D 1 MiB  host [7100,7120]    device [7200,7300]
//   no call                                           D2D 2 MiB [8000,8100]; a memset; a kernel
std::vector<HostCall> Calls() {
  return {Copy(1, 1, kStreamA, kApiMemcpyAsync, 0, 20, k4M, kH2D, kPageable, kDevice),
          Copy(2, 1, kStreamA, kApiMemcpyAsync, 50, 70, k4M, kH2D, kPageable, kDevice),
          Copy(4, 2, kStreamB, kApiMemcpyAsync, 80, 100, k4M, kH2D, kPageable, kDevice),
          Copy(3, 1, kStreamA, kApiMemcpyAsync, 100, 120, k1M, kH2D, kPageable, kDevice),
          Copy(6, 2, kStreamB, kApiMemcpyAsync, 300, 310, k64K, kD2H, kDevice, kPageable),
          Copy(5, 1, 0, kApiMemcpy, 6000, 6500, k64K, kD2H, kDevice, kPageable),
          Copy(7, 1, kStreamA, kApiMemcpyAsync, 6600, 6620, k1M, kH2D, kPageable, kDevice),
          Sync(8, 1, kStreamA, 6700, 7000),
          Copy(9, 1, kStreamA, kApiMemcpyAsync, 7100, 7120, k1M, kH2D, kPageable, kDevice)};
}

// Device records in the order a flush could deliver them (stream by stream).
std::vector<DeviceRecord> Records() {
  return {Record(kActMemcpy, 5000, 5400, k4M, kH2D, kPinned /* pinscope pinned it */, kDevice, 7),
          Record(kActMemcpy, 5400, 5800, k4M, kH2D, kPageable, kDevice, 7),
          Record(kActMemcpy, 5800, 5900, k1M, kH2D, kPageable, kDevice, 7),
          Record(kActMemcpy, 200, 600, k4M, kH2D, kPageable, kDevice, 8),
          Record(kActMemcpy, 6300, 6450, k64K, kD2H, kDevice, kPageable, 0),
          Record(kActSync, 6690, 6700),
          Record(kActSync, 6702, 6999),
          Record(kActMemcpy, 7200, 7300, k1M, kH2D, kPageable, kDevice, 7),
          Record(kActMemcpy, 8000, 8100, k2M, kD2D, kDevice, kDevice, 7),
          Record(kActMemset, 8200, 8210, 4096),
          Record(kActKernel, 100, 5000)};
}

// Device start (us from t0) -> the call id it joined (0: none), kernels left out.
std::map<uint64_t, uint64_t> Matches(const std::vector<Joined>& joined) {
  std::map<uint64_t, uint64_t> m;
  for (const Joined& j : joined) {
    if (j.device.kind == kActKernel) continue;
    m[(j.device.start_ns - t0) / us] = j.host ? j.host->call_id : 0;
  }
  return m;
}

const std::map<uint64_t, uint64_t> kExpected = {
    // The 4 MiB class in device start order takes its calls in issue order:
    // stream B's copy (call 4) ran first and takes call 1; streams reordered
    // identical copies, which changes no per-class figure (test below).
    {200, 1},
    {5000, 2},
    {5400, 4},
    {5800, 3},
    // The sync copy's record lies inside call 5: preferred over call 6,
    // which is older but got no record.
    {6300, 5},
    // The stray sync record lost call 8 to the tighter one.
    {6690, 0},
    {6702, 8},
    // Call 7 was proved complete by call 8 (stream A synchronized) before
    // this record began: call 9's record does not fall to it.
    {7200, 9},
    {8000, 0},  // no D2D call
};

void ExpectScenarioStats(const JoinStats& s) {
  EXPECT_EQ(s.joined, 7u);                 // six memcpys and the sync
  EXPECT_EQ(s.device_unmatched, 3u);       // D2D, stray sync, memset
  EXPECT_EQ(s.host_copies_unmatched, 2u);  // calls 6 and 7
  EXPECT_EQ(s.correlations, 0u);
}

TEST(OrderJoin, TwoStreamsLateCopiesASyncCopyAndStrays) {
  OrderJoiner j;
  for (const HostCall& c : Calls()) j.AddHostCall(c);
  for (const DeviceRecord& r : Records()) j.AddDevice(r);
  j.Finish();
  const std::vector<Joined> out = j.Take();
  EXPECT_EQ(Matches(out), kExpected);
  ExpectScenarioStats(j.stats());
  // The memset is counted, not handed out; the kernel passes through.
  EXPECT_EQ(out.size(), kExpected.size() + 1);
}

TEST(OrderJoin, StreamingWithAdvanceEqualsAllAtOnce) {
  // Host calls as the replay gives them, device records one flush (1 s)
  // later, Advance every 500 ms: the same matches.
  OrderJoiner j;
  std::vector<Joined> out;
  for (const HostCall& c : Calls()) j.AddHostCall(c);
  for (uint64_t now = t0; now < t0 + 4 * kSec; now += 500 * kMs) {
    if (now == t0 + kSec)
      for (const DeviceRecord& r : Records()) j.AddDevice(r);
    j.Advance(now);
    for (Joined& x : j.Take()) out.push_back(x);
  }
  // Every record settled (2 s after it arrived) before the last Advance;
  // the sync call's match is final only at the horizon or the end.
  EXPECT_EQ(out.size(), kExpected.size());  // the kernel, and all but the sync's
  j.Finish();
  const std::vector<Joined> last = j.Take();
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].host->call_id, 8u);
  out.push_back(last[0]);
  EXPECT_EQ(Matches(out), kExpected);
  ExpectScenarioStats(j.stats());
}

TEST(OrderJoin, DeviceRecordsBeforeTheirHostCallsStillMatch) {
  OrderJoiner j;
  std::vector<DeviceRecord> records = Records();
  std::reverse(records.begin(), records.end());
  for (const DeviceRecord& r : records) j.AddDevice(r);
  for (const HostCall& c : Calls()) j.AddHostCall(c);
  j.Finish();
  EXPECT_EQ(Matches(j.Take()), kExpected);
  ExpectScenarioStats(j.stats());
}

TEST(OrderJoin, ReorderedIdenticalCopiesKeepTheClassFigures) {
  // The per-class figures the report prints are the same as with the true
  // pairs (the correlation join's): count, bytes, device time, host-blocked
  // time.
  OrderJoiner j;
  for (const HostCall& c : Calls()) j.AddHostCall(c);
  for (const DeviceRecord& r : Records()) j.AddDevice(r);
  j.Finish();
  CopyClassAccumulator order;
  for (const Joined& x : j.Take()) order.Add(x);

  const std::map<uint64_t, uint64_t> truth = {{200, 4},  {5000, 1}, {5400, 2},
                                              {5800, 3}, {6300, 5}, {7200, 9}};
  std::map<uint64_t, HostCall> by_id;
  for (const HostCall& c : Calls()) by_id[c.call_id] = c;
  CopyClassAccumulator correct;
  for (const DeviceRecord& r : Records()) {
    if (r.kind != kActMemcpy) continue;
    auto t = truth.find((r.start_ns - t0) / us);
    if (t == truth.end()) {
      correct.Add({r, std::nullopt});
    } else {
      correct.Add({r, by_id[t->second]});
    }
  }
  const std::vector<CopyClassStats> a = order.Results(), b = correct.Results();
  ASSERT_EQ(a.size(), 3u);  // H2D pageable, D2H pageable, D2D
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].count, b[i].count);
    EXPECT_EQ(a[i].joined, b[i].joined);
    EXPECT_EQ(a[i].bytes, b[i].bytes);
    EXPECT_EQ(a[i].device_ns, b[i].device_ns);
    EXPECT_EQ(a[i].host_blocked_ns, b[i].host_blocked_ns);
  }
  EXPECT_EQ(a[0].key.direction, kH2D);
  EXPECT_EQ(a[0].count, 5u);
  EXPECT_EQ(a[0].host_blocked_ns, 5 * 20 * us);
}

TEST(OrderJoin, KindsAndDirectionMustFit) {
  OrderJoiner j;
  // Host pinned by the program, device pageable: not the same copy.
  j.AddHostCall(Copy(1, 1, 0, kApiMemcpyAsync, 0, 10, k1M, kH2D, kPinned, kDevice));
  // Same bytes, other direction.
  j.AddHostCall(Copy(2, 1, 0, kApiMemcpyAsync, 20, 30, k1M, kD2H, kDevice, kPinned));
  j.AddDevice(Record(kActMemcpy, 100, 200, k1M, kH2D, kPageable, kDevice));
  // A device record earlier than its only candidate by more than 50 us.
  j.AddHostCall(Copy(3, 1, 0, kApiMemcpyAsync, 1000, 1010, k2M, kH2D, kPageable, kDevice));
  j.AddDevice(Record(kActMemcpy, 949, 990, k2M, kH2D, kPageable, kDevice));
  // 40 us early is within the clock tolerance.
  j.AddHostCall(Copy(4, 1, 0, kApiMemcpyAsync, 2000, 2010, k64K, kH2D, kPageable, kDevice));
  j.AddDevice(Record(kActMemcpy, 1960, 1970, k64K, kH2D, kPageable, kDevice));
  j.Finish();
  EXPECT_EQ(Matches(j.Take()), (std::map<uint64_t, uint64_t>{{100, 0}, {949, 0}, {1960, 4}}));
  EXPECT_EQ(j.stats().joined, 1u);
  EXPECT_EQ(j.stats().device_unmatched, 2u);
  EXPECT_EQ(j.stats().host_copies_unmatched, 3u);
}

TEST(OrderJoin, FailedCallsAndTheHorizon) {
  OrderJoiner j(10 * kSec);
  HostCall failed = Copy(1, 1, 0, kApiMemcpyAsync, 0, 10, k1M, kH2D, kPageable, kDevice);
  failed.result = 1;  // cudaErrorInvalidValue: no record will come
  j.AddHostCall(failed);
  j.AddHostCall(Copy(2, 1, 0, kApiMemcpyAsync, 20, 30, k1M, kH2D, kPageable, kDevice));
  EXPECT_EQ(j.stats().host_copies_unmatched, 1u);
  // Its record never came: given up once older than the horizon.
  j.Advance(t0 + 11 * kSec);
  EXPECT_EQ(j.stats().host_copies_unmatched, 2u);
  // A record arriving now has no call left.
  j.AddDevice(Record(kActMemcpy, 100, 200, k1M, kH2D, kPageable, kDevice));
  j.Finish();
  EXPECT_EQ(Matches(j.Take()), (std::map<uint64_t, uint64_t>{{100, 0}}));
  EXPECT_EQ(j.stats().joined, 0u);
  EXPECT_EQ(j.stats().device_unmatched, 1u);
}

// --- ProcessDeviceAnalysis: which join, per process --------------------------

void Feed(ProcessDeviceAnalysis& p, bool with_correlations) {
  uint32_t corr = 1;
  for (const HostCall& c : Calls()) p.OnHostCall(c);
  for (DeviceRecord r : Records()) {
    r.correlation_id = corr++;
    p.OnDevice(r);
  }
  if (with_correlations) p.OnCorrelation(1, 1, t0 + kSec);  // the first record is call 1's
}

TEST(JoinChoice, NoCorrelationsWithinFiveSecondsMeansByOrder) {
  ProcessDeviceAnalysis p;
  p.KeepJoinedCopies();
  p.Advance(t0 + kSec);
  Feed(p, false);
  p.Advance(t0 + 3 * kSec);
  EXPECT_FALSE(p.join_decided());
  EXPECT_TRUE(p.TakeJoinedCopies().empty());  // both joins hold their results until then
  p.Advance(t0 + 6 * kSec + 1);
  EXPECT_TRUE(p.join_decided());
  EXPECT_EQ(p.join_method(), JoinMethod::kOrder);
  EXPECT_EQ(p.TakeJoinedCopies().size(), 6u);
  const ProcessDeviceResult r = p.Finish({t0, t0 + 10 * kSec});
  EXPECT_EQ(r.join_method, JoinMethod::kOrder);
  ExpectScenarioStats(r.join);
}

TEST(JoinChoice, ACorrelationMeansByCorrelation) {
  ProcessDeviceAnalysis p;
  Feed(p, true);
  EXPECT_TRUE(p.join_decided());
  const ProcessDeviceResult r = p.Finish({t0, t0 + 10 * kSec});
  EXPECT_EQ(r.join_method, JoinMethod::kCorrelation);
  EXPECT_EQ(r.join.joined, 1u);  // only the record whose correlation came
  EXPECT_EQ(r.join.correlations, 1u);
}

TEST(JoinChoice, TheTraceSayingNoCorrelationsDecidesAtOnce) {
  ProcessDeviceAnalysis p;
  p.NoCorrelations();
  EXPECT_TRUE(p.join_decided());
  EXPECT_EQ(p.join_method(), JoinMethod::kOrder);
  Feed(p, false);
  ExpectScenarioStats(p.Finish({t0, t0 + 10 * kSec}).join);
  EXPECT_TRUE(NoticeSaysNoCorrelations(
      "device activity from libcupti.so.13 (CUPTI API version 130001); runtime records off "
      "(PINSCOPE_CUPTI_RUNTIME=0): no correlations"));
  EXPECT_FALSE(
      NoticeSaysNoCorrelations("device activity from libcupti.so.13 (CUPTI API "
                               "version 130001)"));
}

TEST(JoinChoice, ForcedOrderIgnoresCorrelations) {
  ProcessDeviceAnalysis p(BusyOptions(), 60 * kSec, JoinMode::kOrder);
  Feed(p, true);
  const ProcessDeviceResult r = p.Finish({t0, t0 + 10 * kSec});
  EXPECT_EQ(r.join_method, JoinMethod::kOrder);
  EXPECT_EQ(r.join.joined, 7u);
  EXPECT_EQ(r.join.correlations, 1u);  // counted, not used
}

TEST(JoinChoice, ShortProcessWithoutCorrelationsJoinsByOrderAtFinish) {
  ProcessDeviceAnalysis p;
  Feed(p, false);
  EXPECT_FALSE(p.join_decided());
  const ProcessDeviceResult r = p.Finish({t0, t0 + 10 * kSec});
  EXPECT_EQ(r.join_method, JoinMethod::kOrder);
  ExpectScenarioStats(r.join);
  // Nothing joinable at all (kernels and memsets): the correlation join's
  // figures, as before.
  ProcessDeviceAnalysis q;
  q.OnDevice(Record(kActKernel, 0, 10));
  q.OnDevice(Record(kActMemset, 20, 30, 4096));
  const ProcessDeviceResult s = q.Finish({t0, t0 + kSec});
  EXPECT_EQ(s.join_method, JoinMethod::kCorrelation);
  EXPECT_EQ(s.join.device_unmatched, 1u);
}

}  // namespace
}  // namespace pinscope::device
