// End-to-end: test programs linked against the CUDA runtime double run under
// LD_PRELOAD=libpinscope.so; each test asserts the exact copy and sync
// events of the trace (API, direction, requested kind, bytes, memory kinds,
// addresses, devices, stream, per-thread flag, result, batch index, height)
// and the process packets (header, CUDA runtime, threads, exit).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "trace_harness.h"

namespace {

using e2e::RunOptions;
using e2e::RunResult;
using e2e::TraceFile;
namespace pt = pinscope::trace;

// One expected CopyEvent. Devices are -1 for host memory and symbols.
struct WantCopy {
  pt::CopyApi api;
  pt::Direction dir;
  int requested_kind;
  uint64_t bytes;
  pt::MemoryKind src;
  pt::MemoryKind dst;
  uint64_t src_address;
  uint64_t dst_address;
  int src_device = -1;
  int dst_device = -1;
  uint64_t stream = 0;
  bool per_thread = false;
  int result = cudaSuccess;
  uint64_t height = 0;
  uint32_t batch_index = 0;
};

void ExpectCopy(const pt::TracePacket& p, const WantCopy& w) {
  ASSERT_TRUE(p.has_copy());
  const pt::CopyEvent& c = p.copy();
  EXPECT_EQ(pt::CopyApi_Name(c.api()), pt::CopyApi_Name(w.api));
  EXPECT_EQ(pt::Direction_Name(c.direction()), pt::Direction_Name(w.dir));
  EXPECT_EQ(c.requested_kind(), w.requested_kind);
  EXPECT_EQ(c.bytes(), w.bytes);
  EXPECT_EQ(pt::MemoryKind_Name(c.src_kind()), pt::MemoryKind_Name(w.src));
  EXPECT_EQ(pt::MemoryKind_Name(c.dst_kind()), pt::MemoryKind_Name(w.dst));
  EXPECT_EQ(c.src_address(), w.src_address);
  EXPECT_EQ(c.dst_address(), w.dst_address);
  EXPECT_EQ(c.src_device(), w.src_device);
  EXPECT_EQ(c.dst_device(), w.dst_device);
  EXPECT_EQ(c.stream(), w.stream);
  EXPECT_EQ(c.per_thread(), w.per_thread);
  EXPECT_EQ(c.result(), w.result);
  EXPECT_EQ(c.height(), w.height);
  EXPECT_EQ(c.batch_index(), w.batch_index);
  EXPECT_EQ(c.stack_id(), 0u);  // PINSCOPE_STACKS=0
  // PINSCOPE_PIN is off: pinscope pins nothing, and PIN_BY_PROGRAM marks at
  // most a copy whose host side the program pinned itself.
  bool program_pinned = (w.dir == pt::H2D && w.src == pt::PINNED) ||
                        (w.dir == pt::D2H && w.dst == pt::PINNED);
  if (program_pinned) {
    EXPECT_TRUE(c.pin() == pt::PIN_NONE || c.pin() == pt::PIN_BY_PROGRAM) << c.pin();
  } else {
    EXPECT_EQ(pt::PinOutcome_Name(c.pin()), "PIN_NONE");
  }
  EXPECT_GT(c.call_id(), 0u);
}

// The copies of t are exactly `want`, in order, all made by thread `tid`;
// call ids count up from 1 with one id per call (a batch shares one).
void ExpectCopies(const TraceFile& t, const std::vector<WantCopy>& want, uint64_t tid) {
  auto copies = e2e::Packets(t, pt::TracePacket::kCopy);
  ASSERT_EQ(copies.size(), want.size());
  uint64_t call_id = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("copy #" + std::to_string(i));
    ExpectCopy(*copies[i], want[i]);
    EXPECT_EQ(copies[i]->tid(), tid);
    if (want[i].api != pt::MEMCPY_BATCH_ASYNC || want[i].batch_index == 0) ++call_id;
    EXPECT_EQ(copies[i]->copy().call_id(), call_id);
  }
}

class E2ECopies : public ::testing::Test {
 protected:
  RunResult Run(const std::string& program, RunOptions o) { return e2e::Run(program, o, dir_.path()); }
  RunResult Run13(std::vector<std::string> args,
                  std::vector<std::pair<std::string, std::string>> env = {}) {
    RunOptions o;
    o.args = std::move(args);
    o.env = std::move(env);
    return Run(E2E_PROG13, o);
  }
  // Runs a scenario that must succeed and returns its checked trace.
  TraceFile Scenario(const std::string& name,
                     std::vector<std::pair<std::string, std::string>> env = {}) {
    r_ = Run13({name}, std::move(env));
    EXPECT_EQ(r_.exit_code, 0) << r_.stderr_text;
    EXPECT_EQ(r_.stderr_text, "");
    TraceFile t = e2e::SingleTrace(r_);
    ExpectWellFormed(t, true);
    return t;
  }
  uint64_t M(const char* key) const { return r_.at(key); }

  e2e::TempDir dir_;
  RunResult r_;
};

TEST_F(E2ECopies, MemcpyEveryKindAndDefaultResolution) {
  TraceFile t = Scenario("kinds");
  uint64_t d0 = M("d0"), host = M("host"), host2 = M("host2"), pinned = M("pinned"),
           managed = M("managed");
  using enum pt::CopyApi;
  ExpectCopies(t,
               {
                   {MEMCPY, pt::H2D, 1, 1001, pt::PAGEABLE, pt::DEVICE, host, d0, -1, 0},
                   {MEMCPY, pt::D2H, 2, 1002, pt::DEVICE, pt::PAGEABLE, d0, host, 0, -1},
                   {MEMCPY, pt::H2D, 1, 1003, pt::PINNED, pt::DEVICE, pinned, d0, -1, 0},
                   {MEMCPY, pt::D2H, 2, 1004, pt::DEVICE, pt::PINNED, d0, pinned, 0, -1},
                   {MEMCPY, pt::D2D, 3, 1005, pt::DEVICE, pt::MANAGED, d0, managed, 0, 0},
                   {MEMCPY, pt::H2H, 0, 1006, pt::PAGEABLE, pt::PAGEABLE, host, host2},
                   // cudaMemcpyDefault (4): the direction comes from the pointers.
                   {MEMCPY, pt::H2D, 4, 1007, pt::PAGEABLE, pt::DEVICE, host, d0, -1, 0},
                   {MEMCPY, pt::D2H, 4, 1008, pt::DEVICE, pt::PINNED, d0, pinned, 0, -1},
                   {MEMCPY, pt::D2D, 4, 1009, pt::DEVICE, pt::MANAGED, d0, managed, 0, 0},
                   {MEMCPY, pt::H2H, 4, 1010, pt::PINNED, pt::PAGEABLE, pinned, host2},
                   {MEMCPY, pt::D2D, 4, 1011, pt::MANAGED, pt::DEVICE, managed, d0, 0, 0},
               },
               M("main_tid"));
  EXPECT_TRUE(e2e::Packets(t, pt::TracePacket::kSync).empty());
}

TEST_F(E2ECopies, MemcpyAsyncStreams) {
  TraceFile t = Scenario("async");
  uint64_t d0 = M("d0"), host = M("host"), pinned = M("pinned"), s = M("stream");
  ASSERT_GT(s, 2u);
  ExpectCopies(t,
               {
                   {pt::MEMCPY_ASYNC, pt::H2D, 1, 1001, pt::PINNED, pt::DEVICE, pinned, d0, -1, 0, s},
                   {pt::MEMCPY_ASYNC, pt::D2H, 2, 1002, pt::DEVICE, pt::PINNED, d0, pinned, 0, -1, 0},
                   // cudaStreamPerThread passed to the ordinary entry point.
                   {pt::MEMCPY_ASYNC, pt::H2D, 4, 1003, pt::PAGEABLE, pt::DEVICE, host, d0, -1, 0, 2},
                   // cudaStreamLegacy.
                   {pt::MEMCPY_ASYNC, pt::D2H, 2, 1004, pt::DEVICE, pt::PAGEABLE, d0, host, 0, -1, 1},
               },
               M("main_tid"));
}

TEST_F(E2ECopies, TwoDAndThreeD) {
  TraceFile t = Scenario("2d3d");
  uint64_t d0 = M("d0"), host = M("host"), pinned = M("pinned"), s = M("stream");
  ExpectCopies(
      t,
      {
          {.api = pt::MEMCPY_2D, .dir = pt::H2D, .requested_kind = 1, .bytes = 200 * 4,
           .src = pt::PAGEABLE, .dst = pt::DEVICE, .src_address = host, .dst_address = d0,
           .dst_device = 0, .height = 4},
          {.api = pt::MEMCPY_2D_ASYNC, .dir = pt::D2H, .requested_kind = 2, .bytes = 96 * 8,
           .src = pt::DEVICE, .dst = pt::PINNED, .src_address = d0, .dst_address = pinned,
           .src_device = 0, .stream = s, .height = 8},
          // 3D: bytes = width * height * depth; height = rows (height * depth).
          {.api = pt::MEMCPY_3D, .dir = pt::H2D, .requested_kind = 1, .bytes = 64 * 4 * 2,
           .src = pt::PINNED, .dst = pt::DEVICE, .src_address = pinned, .dst_address = d0,
           .dst_device = 0, .height = 4 * 2},
          {.api = pt::MEMCPY_3D_ASYNC, .dir = pt::D2H, .requested_kind = 4, .bytes = 32 * 4 * 3,
           .src = pt::DEVICE, .dst = pt::PAGEABLE, .src_address = d0, .dst_address = host,
           .src_device = 0, .stream = s, .height = 4 * 3},
      },
      M("main_tid"));
}

TEST_F(E2ECopies, PeerCopiesBetweenTwoDevices) {
  TraceFile t = Scenario("peer", {{"FAKECUDA_DEVICES", "2"}});
  uint64_t d0 = M("d0"), d1 = M("d1"), s = M("stream");
  ExpectCopies(t,
               {
                   {pt::MEMCPY_PEER, pt::PEER, 3, 1001, pt::DEVICE, pt::DEVICE, d0, d1, 0, 1, 0},
                   {pt::MEMCPY_PEER_ASYNC, pt::PEER, 3, 1002, pt::DEVICE, pt::DEVICE, d1, d0, 1, 0, s},
               },
               M("main_tid"));
  auto cuda = e2e::Packets(t, pt::TracePacket::kCuda);
  ASSERT_EQ(cuda.size(), 1u);
  EXPECT_EQ(cuda[0]->cuda().device_count(), 2);
}

TEST_F(E2ECopies, SymbolCopies) {
  TraceFile t = Scenario("symbol");
  uint64_t host = M("host"), pinned = M("pinned"), sym = M("symbol"), s = M("stream");
  ExpectCopies(t,
               {
                   {pt::MEMCPY_TO_SYMBOL, pt::H2D, 1, 64, pt::PAGEABLE, pt::SYMBOL, host, sym},
                   {pt::MEMCPY_TO_SYMBOL_ASYNC, pt::H2D, 1, 65, pt::PINNED, pt::SYMBOL, pinned, sym,
                    -1, -1, s},
                   {pt::MEMCPY_FROM_SYMBOL, pt::D2H, 2, 66, pt::SYMBOL, pt::PAGEABLE, sym, host},
                   {pt::MEMCPY_FROM_SYMBOL_ASYNC, pt::D2H, 4, 67, pt::SYMBOL, pt::PINNED, sym, pinned,
                    -1, -1, s},
               },
               M("main_tid"));
}

// One event per element, sharing the call's id, batch_index 0..n-1.
TEST_F(E2ECopies, BatchAsyncCuda13Abi) {
  TraceFile t = Scenario("batch");
  uint64_t d0 = M("d0"), host = M("host"), host2 = M("host2"), pinned = M("pinned"),
           managed = M("managed"), s = M("stream");
  auto b = [](pt::Direction dir, uint64_t bytes, pt::MemoryKind sk, pt::MemoryKind dk, uint64_t sa,
              uint64_t da, int sd, int dd, uint64_t stream, uint32_t idx, int result) {
    return WantCopy{.api = pt::MEMCPY_BATCH_ASYNC, .dir = dir, .requested_kind = 4,
                    .bytes = bytes, .src = sk, .dst = dk, .src_address = sa, .dst_address = da,
                    .src_device = sd, .dst_device = dd, .stream = stream, .result = result,
                    .batch_index = idx};
  };
  ExpectCopies(t,
               {
                   b(pt::H2D, 1001, pt::PAGEABLE, pt::DEVICE, host, d0, -1, 0, s, 0, 0),
                   b(pt::D2H, 1002, pt::DEVICE, pt::PINNED, d0, pinned, 0, -1, s, 1, 0),
                   b(pt::D2D, 1003, pt::DEVICE, pt::MANAGED, d0, managed, 0, 0, s, 2, 0),
                   b(pt::H2H, 1004, pt::PINNED, pt::PAGEABLE, pinned, host2, -1, -1, s, 3, 0),
                   // Refused (legacy stream): every element carries the error.
                   b(pt::H2D, 1001, pt::PAGEABLE, pt::DEVICE, host, d0, -1, 0, 0, 0,
                     cudaErrorInvalidValue),
                   b(pt::D2H, 1002, pt::DEVICE, pt::PINNED, d0, pinned, 0, -1, 0, 1,
                     cudaErrorInvalidValue),
               },
               M("main_tid"));
  auto copies = e2e::Packets(t, pt::TracePacket::kCopy);
  for (size_t i = 1; i < 4; ++i) {
    EXPECT_EQ(copies[i]->timestamp_ns(), copies[0]->timestamp_ns());
    EXPECT_EQ(copies[i]->copy().end_ns(), copies[0]->copy().end_ns());
  }
}

// The CUDA 12.8 ABI (failIdx before the stream) through the .so.12 double.
TEST_F(E2ECopies, BatchAsyncCuda12Abi) {
  RunOptions o;
  o.args = {"batch"};
  r_ = Run(E2E_PROG12, o);
  ASSERT_EQ(r_.exit_code, 0) << r_.stderr_text;
  EXPECT_EQ(r_.stderr_text, "");
  EXPECT_EQ(M("fail_ok"), SIZE_MAX);      // the runtime still got its failIdx
  EXPECT_EQ(M("fail_legacy"), SIZE_MAX);  // stream errors name no element
  TraceFile t = e2e::SingleTrace(r_);
  ExpectWellFormed(t, true);
  uint64_t d0 = M("d0"), host = M("host"), pinned = M("pinned"), managed = M("managed"),
           s = M("stream");
  auto b = [](pt::Direction dir, uint64_t bytes, pt::MemoryKind sk, pt::MemoryKind dk, uint64_t sa,
              uint64_t da, int sd, int dd, uint64_t stream, uint32_t idx, bool per_thread,
              int result) {
    return WantCopy{.api = pt::MEMCPY_BATCH_ASYNC, .dir = dir, .requested_kind = 4,
                    .bytes = bytes, .src = sk, .dst = dk, .src_address = sa, .dst_address = da,
                    .src_device = sd, .dst_device = dd, .stream = stream,
                    .per_thread = per_thread, .result = result, .batch_index = idx};
  };
  ExpectCopies(
      t,
      {
          {pt::MEMCPY, pt::H2D, 1, 1001, pt::PAGEABLE, pt::DEVICE, host, d0, -1, 0},
          b(pt::H2D, 2001, pt::PAGEABLE, pt::DEVICE, host, d0, -1, 0, s, 0, false, 0),
          b(pt::D2H, 2002, pt::DEVICE, pt::PINNED, d0, pinned, 0, -1, s, 1, false, 0),
          b(pt::D2D, 2003, pt::DEVICE, pt::MANAGED, d0, managed, 0, 0, s, 2, false, 0),
          // _ptsz with stream 0: the per-thread default stream.
          b(pt::H2D, 2001, pt::PAGEABLE, pt::DEVICE, host, d0, -1, 0, 2, 0, true, 0),
          b(pt::D2H, 2002, pt::DEVICE, pt::PINNED, d0, pinned, 0, -1, 2, 1, true, 0),
          b(pt::H2D, 2001, pt::PAGEABLE, pt::DEVICE, host, d0, -1, 0, 0, 0, false,
            cudaErrorInvalidValue),
          b(pt::D2H, 2002, pt::DEVICE, pt::PINNED, d0, pinned, 0, -1, 0, 1, false,
            cudaErrorInvalidValue),
      },
      M("main_tid"));
  auto cuda = e2e::Packets(t, pt::TracePacket::kCuda);
  ASSERT_EQ(cuda.size(), 1u);
  EXPECT_EQ(cuda[0]->cuda().runtime_version(), 12080);
  const std::string& path = cuda[0]->cuda().runtime_path();
  EXPECT_NE(path.find("fake_cudart12/libcudart.so.12"), std::string::npos) << path;
}

// _ptds/_ptsz entry points (CUDA_API_PER_THREAD_DEFAULT_STREAM): per_thread
// is set and stream 0 is recorded as the per-thread stream, 2.
TEST_F(E2ECopies, PerThreadEntryPoints) {
  TraceFile t = Scenario("ptsz");
  uint64_t d0 = M("d0"), host = M("host"), host2 = M("host2"), pinned = M("pinned"),
           sym = M("symbol"), s = M("stream");
  auto w = [](pt::CopyApi api, pt::Direction dir, int kind, uint64_t bytes, pt::MemoryKind sk,
              pt::MemoryKind dk, uint64_t sa, uint64_t da, int sd, int dd, uint64_t stream,
              uint64_t height = 0, uint32_t idx = 0) {
    return WantCopy{.api = api, .dir = dir, .requested_kind = kind, .bytes = bytes, .src = sk,
                    .dst = dk, .src_address = sa, .dst_address = da, .src_device = sd,
                    .dst_device = dd, .stream = stream, .per_thread = true, .height = height,
                    .batch_index = idx};
  };
  ExpectCopies(
      t,
      {
          w(pt::MEMCPY, pt::H2D, 1, 1001, pt::PAGEABLE, pt::DEVICE, host, d0, -1, 0, 2),
          w(pt::MEMCPY_ASYNC, pt::H2D, 1, 1002, pt::PINNED, pt::DEVICE, pinned, d0, -1, 0, 2),
          w(pt::MEMCPY_ASYNC, pt::D2H, 2, 1003, pt::DEVICE, pt::PINNED, d0, pinned, 0, -1, s),
          w(pt::MEMCPY_2D, pt::H2D, 1, 200, pt::PAGEABLE, pt::DEVICE, host, d0, -1, 0, 2, 2),
          w(pt::MEMCPY_2D_ASYNC, pt::D2H, 4, 150, pt::DEVICE, pt::PINNED, d0, pinned, 0, -1, 2, 3),
          w(pt::MEMCPY_3D, pt::H2D, 1, 64, pt::PAGEABLE, pt::DEVICE, host, d0, -1, 0, 2, 4),
          w(pt::MEMCPY_3D_ASYNC, pt::H2D, 1, 64, pt::PAGEABLE, pt::DEVICE, host, d0, -1, 0, 2, 4),
          w(pt::MEMCPY_TO_SYMBOL, pt::H2D, 1, 32, pt::PAGEABLE, pt::SYMBOL, host, sym, -1, -1, 2),
          w(pt::MEMCPY_TO_SYMBOL_ASYNC, pt::H2D, 1, 33, pt::PINNED, pt::SYMBOL, pinned, sym, -1, -1,
            2),
          w(pt::MEMCPY_FROM_SYMBOL, pt::D2H, 2, 34, pt::SYMBOL, pt::PAGEABLE, sym, host, -1, -1, 2),
          w(pt::MEMCPY_FROM_SYMBOL_ASYNC, pt::D2H, 2, 35, pt::SYMBOL, pt::PINNED, sym, pinned, -1,
            -1, 2),
          w(pt::MEMCPY_BATCH_ASYNC, pt::H2D, 4, 1011, pt::PINNED, pt::DEVICE, pinned, d0, -1, 0, 2,
            0, 0),
          w(pt::MEMCPY_BATCH_ASYNC, pt::D2H, 4, 1012, pt::DEVICE, pt::PAGEABLE, d0, host2, 0, -1, 2,
            0, 1),
      },
      M("main_tid"));
  auto syncs = e2e::Packets(t, pt::TracePacket::kSync);
  ASSERT_EQ(syncs.size(), 1u);
  EXPECT_EQ(syncs[0]->sync().api(), pt::STREAM_SYNCHRONIZE);
  EXPECT_EQ(syncs[0]->sync().stream(), 2u);
}

// Failing copies are recorded with the runtime's error code.
TEST_F(E2ECopies, FailingCopiesRecordTheirError) {
  TraceFile t = Scenario("errors");
  uint64_t d0 = M("d0"), host = M("host"), host2 = M("host2"), pinned = M("pinned");
  ExpectCopies(
      t,
      {
          // An invalid kind: recorded as passed; the direction is read from
          // the pointers, as for cudaMemcpyDefault.
          {.api = pt::MEMCPY, .dir = pt::H2D, .requested_kind = 7, .bytes = 1001,
           .src = pt::PAGEABLE, .dst = pt::DEVICE, .src_address = host, .dst_address = d0,
           .dst_device = 0, .result = cudaErrorInvalidMemcpyDirection},
          {.api = pt::MEMCPY, .dir = pt::D2H, .requested_kind = 2, .bytes = 1002,
           .src = pt::PAGEABLE, .dst = pt::PAGEABLE, .src_address = host, .dst_address = host2,
           .result = cudaErrorInvalidValue},
          {.api = pt::MEMCPY_ASYNC, .dir = pt::H2D, .requested_kind = 1, .bytes = 1003,
           .src = pt::PINNED, .dst = pt::DEVICE, .src_address = pinned, .dst_address = d0,
           .dst_device = 0, .stream = 0x7777, .result = cudaErrorInvalidResourceHandle},
          {.api = pt::MEMCPY, .dir = pt::H2D, .requested_kind = 1, .bytes = 1004,
           .src = pt::PAGEABLE, .dst = pt::DEVICE, .src_address = host, .dst_address = d0,
           .dst_device = 0},
      },
      M("main_tid"));
}

TEST_F(E2ECopies, SyncEvents) {
  TraceFile t = Scenario("sync");
  uint64_t s = M("stream"), tid = M("main_tid");
  ExpectCopies(t,
               {{pt::MEMCPY_ASYNC, pt::H2D, 1, 1001, pt::PINNED, pt::DEVICE, M("pinned"), M("d0"),
                 -1, 0, s}},
               tid);
  struct WantSync {
    pt::SyncApi api;
    uint64_t stream;
    int result;
  };
  std::vector<WantSync> want = {
      {pt::STREAM_SYNCHRONIZE, s, cudaSuccess},
      {pt::DEVICE_SYNCHRONIZE, 0, cudaSuccess},
      {pt::EVENT_SYNCHRONIZE, 0, cudaSuccess},
      {pt::STREAM_SYNCHRONIZE, 0, cudaSuccess},
      {pt::STREAM_SYNCHRONIZE, 0x7777, cudaErrorInvalidResourceHandle},
  };
  auto syncs = e2e::Packets(t, pt::TracePacket::kSync);
  ASSERT_EQ(syncs.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("sync #" + std::to_string(i));
    const pt::SyncEvent& e = syncs[i]->sync();
    EXPECT_EQ(pt::SyncApi_Name(e.api()), pt::SyncApi_Name(want[i].api));
    EXPECT_EQ(e.stream(), want[i].stream);
    EXPECT_EQ(e.result(), want[i].result);
    EXPECT_EQ(e.call_id(), i + 2);  // after the copy's id 1
    EXPECT_EQ(syncs[i]->tid(), tid);
    EXPECT_EQ(e.stack_id(), 0u);
  }
}

// Host-blocked time as recorded (checks the timestamps, not performance):
// a pageable async copy waits for the busy stream, a pinned one does not.
TEST_F(E2ECopies, HostBlockedTimeOfPageableAndPinnedAsync) {
  TraceFile t = Scenario("blocking");
  auto copies = e2e::Packets(t, pt::TracePacket::kCopy);
  auto syncs = e2e::Packets(t, pt::TracePacket::kSync);
  ASSERT_EQ(copies.size(), 2u);
  ASSERT_EQ(syncs.size(), 2u);
  EXPECT_EQ(copies[0]->copy().src_kind(), pt::PAGEABLE);
  EXPECT_EQ(copies[1]->copy().src_kind(), pt::PINNED);
  const uint64_t ms = 1000000;
  uint64_t pageable = copies[0]->copy().end_ns() - copies[0]->timestamp_ns();
  uint64_t pinned = copies[1]->copy().end_ns() - copies[1]->timestamp_ns();
  // The stream is busy for 100 ms before each copy (margins for a loaded CI).
  EXPECT_GE(pageable, 90 * ms);
  EXPECT_LT(pinned, 50 * ms);
  // ... and the pinned copy's stream was still busy when it returned.
  EXPECT_GE(syncs[1]->sync().end_ns() - copies[1]->copy().end_ns(), 40 * ms);
  // The thread's usage: whole for the pageable copy (its faults so far),
  // its CPU time only for the pinned one (nothing in it can fault).
  EXPECT_GT(copies[0]->copy().usage_exit().minor_faults(), 0u);
  EXPECT_GT(copies[1]->copy().usage_exit().cpu_ns(), 0u);
  EXPECT_EQ(copies[1]->copy().usage_exit().minor_faults(), 0u);
  EXPECT_EQ(copies[1]->copy().usage_enter().user_ns() + copies[1]->copy().usage_enter().sys_ns(),
            0u);
  // pinscope's own cost (Counters): the four hooks, counted exactly, and
  // their time besides the real calls, which waited over 200 ms together:
  // what is left is pinscope's classifying, clock reads and recording.
  auto counters = e2e::Packets(t, pt::TracePacket::kCounters);
  ASSERT_FALSE(counters.empty());
  const pt::Counters& c = counters.back()->counters();
  EXPECT_EQ(c.hook_calls(), 4u);
  EXPECT_GT(c.hook_ns(), 0u);
  EXPECT_LT(c.hook_ns(), 20 * ms);
  // By kind: the two copies and the two waits, adding up to the totals.
  std::map<int, std::pair<uint64_t, uint64_t>> kinds;  // kind -> calls, ns
  for (const pt::HookKindCost& h : c.hook_kinds()) kinds[h.kind()] = {h.calls(), h.ns()};
  ASSERT_EQ(kinds.size(), 2u);
  EXPECT_EQ(kinds[pt::HOOK_COPY].first, 2u);
  EXPECT_EQ(kinds[pt::HOOK_SYNC].first, 2u);
  EXPECT_EQ(kinds[pt::HOOK_COPY].second + kinds[pt::HOOK_SYNC].second, c.hook_ns());
  // Of it, the driver queries classifying the copies' pointers: the device
  // buffer and the pageable one at the first copy, the pinned one at the
  // second (the device buffer's answer is in the thread's cache by then).
  EXPECT_EQ(c.pointer_queries(), 3u);
  EXPECT_GT(c.pointer_query_ns(), 0u);
  EXPECT_LE(c.pointer_query_ns(), c.hook_ns());
}

// Recording paused and resumed from inside the program (the control ABI
// that tools/bench/turns.py's paired sides call): what runs while paused
// passes through unrecorded and uncounted (the calls still reach the
// runtime: the program checks each result); the
// process paused at its exit still ends its trace with its counters and
// exit packet. Without the shim there is no such symbol.
TEST_F(E2ECopies, PausedRecordingPassesThroughAndTheTraceStillEnds) {
  TraceFile t = Scenario("paused");
  EXPECT_EQ(M("pause_rc"), 10u);        // 0: paused
  EXPECT_EQ(M("pause_again_rc"), 10u);  // 0: already as asked
  EXPECT_EQ(M("resume_rc"), 10u);
  EXPECT_EQ(M("last_pause_rc"), 10u);
  auto copies = e2e::Packets(t, pt::TracePacket::kCopy);
  ASSERT_EQ(copies.size(), 2u);
  EXPECT_EQ(copies[0]->copy().bytes(), 1001u);
  EXPECT_EQ(copies[1]->copy().bytes(), 1003u);
  EXPECT_EQ(copies[1]->copy().direction(), pt::D2H);
  EXPECT_TRUE(e2e::Packets(t, pt::TracePacket::kSync).empty());
  ASSERT_FALSE(t.packets.empty());
  ASSERT_TRUE(t.packets.back().has_exit());
  EXPECT_EQ(t.packets.back().exit().how(), pt::ProcessExit::EXIT);
  auto counters = e2e::Packets(t, pt::TracePacket::kCounters);
  ASSERT_FALSE(counters.empty());
  const pt::Counters& c = counters.back()->counters();
  EXPECT_EQ(c.hook_calls(), 2u);  // the two recorded copies, nothing while paused
  ASSERT_EQ(c.hook_kinds_size(), 1);
  EXPECT_EQ(c.hook_kinds(0).kind(), pt::HOOK_COPY);
  EXPECT_EQ(c.hook_kinds(0).calls(), 2u);

  RunOptions o;
  o.args = {"paused"};
  o.preload = false;
  e2e::TempDir dir;
  RunResult bare = e2e::Run(E2E_PROG13, o, dir.path());
  EXPECT_EQ(bare.exit_code, 0) << bare.stderr_text;
  EXPECT_EQ(bare.at("pause_missing"), 1u);
}

// cudaHostRegister / cudaHostUnregister change a pointer's kind between two
// copies of the same address: the pointer cache must not hide it.
TEST_F(E2ECopies, PointerKindCacheFollowsHostRegister) {
  TraceFile t = Scenario("register");
  uint64_t d0 = M("d0"), buf = M("buf");
  ExpectCopies(t,
               {
                   {pt::MEMCPY, pt::H2D, 1, 1001, pt::PAGEABLE, pt::DEVICE, buf, d0, -1, 0},
                   {pt::MEMCPY, pt::H2D, 1, 1002, pt::PINNED, pt::DEVICE, buf, d0, -1, 0},
                   {pt::MEMCPY, pt::D2H, 4, 1003, pt::DEVICE, pt::PINNED, d0, buf, 0, -1},
                   {pt::MEMCPY, pt::H2D, 1, 1004, pt::PAGEABLE, pt::DEVICE, buf, d0, -1, 0},
                   {pt::MEMCPY, pt::D2H, 4, 1005, pt::DEVICE, pt::PAGEABLE, d0, buf, 0, -1},
               },
               M("main_tid"));
}

TEST_F(E2ECopies, CudaRuntimeInfoNamesTheDouble) {
  TraceFile t = Scenario("one");
  auto cuda = e2e::Packets(t, pt::TracePacket::kCuda);
  ASSERT_EQ(cuda.size(), 1u);
  const pt::CudaRuntimeInfo& c = cuda[0]->cuda();
  EXPECT_EQ(c.runtime_version(), 13000);
  EXPECT_EQ(c.driver_version(), 13000);
  EXPECT_EQ(c.device_count(), 1);
  char real[PATH_MAX];
  ASSERT_NE(realpath(c.runtime_path().c_str(), real), nullptr) << c.runtime_path();
  char want[PATH_MAX];
  ASSERT_NE(realpath(FAKE_CUDART13_PATH, want), nullptr);
  EXPECT_STREQ(real, want);
  EXPECT_NE(c.runtime_path().find("fake_cudart13/libcudart.so.13"), std::string::npos)
      << c.runtime_path();
}

TEST_F(E2ECopies, ProcessHeader) {
  timespec w0, m0, w1, m1;
  clock_gettime(CLOCK_REALTIME, &w0);
  clock_gettime(CLOCK_MONOTONIC, &m0);
  TraceFile t = Scenario("one", {{"PINSCOPE_RUN_ID", "e2e-run-42"}});
  clock_gettime(CLOCK_REALTIME, &w1);
  clock_gettime(CLOCK_MONOTONIC, &m1);
  auto ns = [](const timespec& ts) { return ts.tv_sec * 1000000000ull + ts.tv_nsec; };
  ASSERT_FALSE(t.packets.empty());
  const pt::ProcessHeader& h = t.packets[0].header();
  EXPECT_EQ(h.format_version(), 1u);
  EXPECT_EQ(h.run_id(), "e2e-run-42");
  EXPECT_EQ(h.pid(), static_cast<uint32_t>(r_.pid));
  EXPECT_EQ(h.ppid(), static_cast<uint32_t>(getpid()));
  EXPECT_EQ(h.origin(), pt::ORIGIN_ROOT);
  EXPECT_EQ(h.parent_pid(), 0u);
  ASSERT_EQ(h.cmdline_size(), 2);
  EXPECT_EQ(h.cmdline(0), E2E_PROG13);
  EXPECT_EQ(h.cmdline(1), "one");
  char exe[PATH_MAX];
  ASSERT_NE(realpath(E2E_PROG13, exe), nullptr);
  EXPECT_EQ(h.exe(), exe);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  EXPECT_EQ(h.hostname(), host);
  EXPECT_GE(h.start_wall_ns(), ns(w0));
  EXPECT_LE(h.start_wall_ns(), ns(w1));
  EXPECT_GE(h.start_mono_ns(), ns(m0));
  EXPECT_LE(h.start_mono_ns(), ns(m1));
  EXPECT_FALSE(h.shim_version().empty());
  EXPECT_FALSE(h.helper());
  ASSERT_TRUE(h.has_host());
  EXPECT_EQ(h.host().logical_cores(), static_cast<uint32_t>(sysconf(_SC_NPROCESSORS_ONLN)));
  EXPECT_GT(h.host().ram_bytes(), 0u);
  EXPECT_FALSE(h.host().kernel_release().empty());
  EXPECT_FALSE(h.host().libc_version().empty());
  ASSERT_TRUE(h.has_config());
  EXPECT_EQ(h.config().trace_min_bytes(), 1u << 20);
  EXPECT_EQ(h.config().flush_period_ms(), 1000u);
  EXPECT_EQ(h.config().stack_depth(), 0u);
  EXPECT_FALSE(h.config().cupti());
  // Copies happen after the header's start instant.
  for (auto* p : e2e::Packets(t, pt::TracePacket::kCopy))
    EXPECT_GE(p->timestamp_ns(), h.start_mono_ns());
}

// Without PINSCOPE_RUN_ID the root process names the run.
TEST_F(E2ECopies, RunIdIsGeneratedWhenUnset) {
  TraceFile t = Scenario("one");
  ASSERT_FALSE(t.packets.empty());
  const std::string& id = t.packets[0].header().run_id();
  EXPECT_NE(id.find("-" + std::to_string(r_.pid) + "-"), std::string::npos) << id;
}

// Each thread that copies is announced once, with its name, before its
// first event; its events carry its tid.
TEST_F(E2ECopies, ThreadInfoForEachCopyingThread) {
  TraceFile t = Scenario("threads");
  uint64_t main_tid = M("main_tid"), a = M("tid_a"), b = M("tid_b");
  ASSERT_NE(a, b);
  auto copies = e2e::Packets(t, pt::TracePacket::kCopy);
  ASSERT_EQ(copies.size(), 5u);
  std::vector<uint64_t> tids = {main_tid, a, a, b, b};
  std::vector<uint64_t> bytes = {1001, 2001, 2002, 2011, 2012};
  for (size_t i = 0; i < copies.size(); ++i) {
    EXPECT_EQ(copies[i]->tid(), tids[i]) << "copy " << i;
    EXPECT_EQ(copies[i]->copy().bytes(), bytes[i]) << "copy " << i;
  }
  auto syncs = e2e::Packets(t, pt::TracePacket::kSync);
  ASSERT_EQ(syncs.size(), 2u);
  EXPECT_EQ(syncs[0]->tid(), a);
  EXPECT_EQ(syncs[1]->tid(), b);
  std::map<uint64_t, std::string> names;
  for (auto* p : e2e::Packets(t, pt::TracePacket::kThread)) {
    if (p->thread().name() == "pinscope-flush") continue;  // the shim's flusher, if it ran
    EXPECT_TRUE(names.emplace(p->thread().tid(), p->thread().name()).second);
  }
  std::string comm = std::string(E2E_PROG13).substr(std::string(E2E_PROG13).rfind('/') + 1);
  comm.resize(std::min<size_t>(comm.size(), 15));
  std::map<uint64_t, std::string> want = {{main_tid, comm}, {a, "copier-a"}, {b, "copier-b"}};
  EXPECT_EQ(names, want);
}

// exit(3), _exit(5) and a return from main with 7: ProcessExit says how and
// with which status, and the job's own exit status is unchanged.
TEST_F(E2ECopies, ExitPaths) {
  struct Case {
    std::string scenario;
    int status;
    pt::ProcessExit::How how;
  } cases[] = {
      {"exit", 3, pt::ProcessExit::EXIT},
      {"_exit", 5, pt::ProcessExit::UNDERSCORE_EXIT},
      {"one", 7, pt::ProcessExit::EXIT},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.scenario);
    e2e::TempDir dir;
    RunOptions o;
    o.args = {c.scenario, std::to_string(c.status)};
    r_ = e2e::Run(E2E_PROG13, o, dir.path());
    EXPECT_EQ(r_.exit_code, c.status) << r_.stderr_text;
    EXPECT_EQ(r_.stderr_text, "");
    TraceFile t = e2e::SingleTrace(r_);
    ExpectWellFormed(t, true);
    ASSERT_FALSE(t.packets.empty());
    const pt::TracePacket& last = t.packets.back();
    ASSERT_TRUE(last.has_exit());
    EXPECT_EQ(pt::ProcessExit::How_Name(last.exit().how()), pt::ProcessExit::How_Name(c.how));
    EXPECT_EQ(last.exit().status(), c.status);
    EXPECT_EQ(last.exit().dropped_events(), 0u);
    EXPECT_EQ(e2e::Packets(t, pt::TracePacket::kCopy).size(), 1u);
  }
}

}  // namespace
