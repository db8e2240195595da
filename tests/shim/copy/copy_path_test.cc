// The copy path (shim/core/copy_path.h) driven directly, without
// LD_PRELOAD: the test process links the layers and the CUDA runtime test
// double (tests/doubles/fake_cudart), hands each real call to TracedCopy /
// TracedSync / TracedBatch as the exported hooks do, and reads its own
// trace back. Exact fields, counts and results.
#include "shim/core/copy_path.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <ctime>
#include <vector>

#include "core_test_env.h"
#include "fake_cudart.h"
#include "shim/base/guard.h"
#include "shim/cuda/real_runtime.h"
#include "shim/record/trace_fields.h"

namespace pinscope::shim {
namespace {

namespace f = fields;
using testing::ReadOwnTrace;
using testing::TraceDir;

// This process's CopyEvents / SyncEvents with call ids above `after`.
std::vector<trace::CopyEvent> CopiesAfter(uint64_t after) {
  std::vector<trace::CopyEvent> out;
  for (const auto& p : ReadOwnTrace().packets)
    if (p.has_copy() && p.copy().call_id() > after) out.push_back(p.copy());
  return out;
}
std::vector<trace::SyncEvent> SyncsAfter(uint64_t after) {
  std::vector<trace::SyncEvent> out;
  for (const auto& p : ReadOwnTrace().packets)
    if (p.has_sync() && p.sync().call_id() > after) out.push_back(p.sync());
  return out;
}

class CopyPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TraceDir();  // starts the recorder once per process
    ASSERT_TRUE(Recording());
    first_id_ = NextCallId();  // everything this test records comes after it
    ASSERT_EQ(cudaMalloc(&dev_, kBytes), cudaSuccess);
  }
  // As the cudaFree hook does: the address may come back as host memory.
  void TearDown() override {
    cudaFree(dev_);
    BumpPointerGeneration();
  }

  static constexpr size_t kBytes = 1 << 20;
  void* dev_ = nullptr;
  uint64_t first_id_ = 0;
};

TEST_F(CopyPathTest, PageableHostToDeviceIsRecordedAndMovesTheData) {
  std::vector<uint8_t> host(kBytes), back(kBytes);
  for (size_t i = 0; i < kBytes; ++i) host[i] = static_cast<uint8_t>(i * 7);
  CopyCall r = MakeCopyCall(f::kMemcpyAsync, false, cudaMemcpyHostToDevice, kBytes, 0);
  int rc = TracedCopy(r, {dev_, false}, {host.data(), false},
                      [&] { return cudaMemcpyAsync(dev_, host.data(), kBytes, cudaMemcpyHostToDevice, 0); });
  ASSERT_EQ(rc, cudaSuccess);
  ASSERT_EQ(cudaMemcpy(back.data(), dev_, kBytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, host);

  auto copies = CopiesAfter(first_id_);
  ASSERT_EQ(copies.size(), 1u);  // the plain cudaMemcpy above is not hooked here
  const trace::CopyEvent& c = copies[0];
  EXPECT_EQ(c.api(), trace::MEMCPY_ASYNC);
  EXPECT_EQ(c.direction(), trace::H2D);
  EXPECT_EQ(c.src_kind(), trace::PAGEABLE);
  EXPECT_EQ(c.dst_kind(), trace::DEVICE);
  EXPECT_EQ(c.bytes(), kBytes);
  EXPECT_EQ(c.src_address(), reinterpret_cast<uintptr_t>(host.data()));
  EXPECT_EQ(c.dst_address(), reinterpret_cast<uintptr_t>(dev_));
  EXPECT_EQ(c.src_device(), -1);
  EXPECT_EQ(c.dst_device(), 0);
  // A copy's usage is whole: its CPU time and the thread's page faults so far.
  EXPECT_GT(c.usage_exit().cpu_ns(), 0u);
  EXPECT_GT(c.usage_exit().minor_faults(), 0u);
  EXPECT_EQ(c.stream(), 0u);
  EXPECT_EQ(c.result(), 0);
  EXPECT_EQ(c.pin(), trace::PIN_NONE);
  EXPECT_EQ(c.call_id(), first_id_ + 1);
}

TEST_F(CopyPathTest, DefaultKindTakesTheDirectionFromThePointers) {
  void* pinned = nullptr;
  ASSERT_EQ(cudaHostAlloc(&pinned, kBytes, cudaHostAllocDefault), cudaSuccess);
  CopyCall r = MakeCopyCall(f::kMemcpy, false, cudaMemcpyDefault, kBytes, 0);
  ASSERT_EQ(TracedCopy(r, {pinned, false}, {dev_, false},
                       [&] { return cudaMemcpy(pinned, dev_, kBytes, cudaMemcpyDefault); }),
            cudaSuccess);
  auto copies = CopiesAfter(first_id_);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].direction(), trace::D2H);
  EXPECT_EQ(copies[0].src_kind(), trace::DEVICE);
  EXPECT_EQ(copies[0].dst_kind(), trace::PINNED);
  EXPECT_EQ(copies[0].requested_kind(), cudaMemcpyDefault);
  cudaFreeHost(pinned);
  BumpPointerGeneration();
}

TEST_F(CopyPathTest, FailedCopyReturnsAndRecordsTheRealError) {
  std::vector<uint8_t> host(64);
  // Device to device from a host pointer: the double refuses it.
  CopyCall r = MakeCopyCall(f::kMemcpy, false, cudaMemcpyDeviceToDevice, 64, 0);
  const int rc = TracedCopy(r, {dev_, false}, {host.data(), false},
                            [&] { return cudaMemcpy(dev_, host.data(), 64, cudaMemcpyDeviceToDevice); });
  EXPECT_NE(rc, cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), rc);  // the program's error state as the real call left it
  auto copies = CopiesAfter(first_id_);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].result(), rc);
  EXPECT_EQ(copies[0].direction(), trace::D2D);
}

TEST_F(CopyPathTest, PerThreadDefaultStreamIsRecordedAsStreamTwo) {
  std::vector<uint8_t> host(4096);
  CopyCall r = MakeCopyCall(f::kMemcpyAsync, true, cudaMemcpyHostToDevice, 4096, 0);
  ASSERT_EQ(TracedCopy(r, {dev_, false}, {host.data(), false},
                       [&] {
                         return cudaMemcpyAsync(dev_, host.data(), 4096, cudaMemcpyHostToDevice,
                                                cudaStreamPerThread);
                       }),
            cudaSuccess);
  auto copies = CopiesAfter(first_id_);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_TRUE(copies[0].per_thread());
  EXPECT_EQ(copies[0].stream(), kPerThreadStreamValue);
}

TEST_F(CopyPathTest, SymbolSideIsRecordedAsSymbol) {
  static uint8_t symbol[256];
  ASSERT_EQ(fakecuda_register_symbol(symbol, sizeof symbol), cudaSuccess);
  std::vector<uint8_t> host(sizeof symbol, 3);
  CopyCall r = MakeCopyCall(f::kMemcpyToSymbol, false, cudaMemcpyHostToDevice, sizeof symbol, 0);
  ASSERT_EQ(TracedCopy(r, {symbol, true}, {host.data(), false},
                       [&] {
                         return cudaMemcpyToSymbol(symbol, host.data(), sizeof symbol, 0,
                                                   cudaMemcpyHostToDevice);
                       }),
            cudaSuccess);
  fakecuda_unregister_symbol(symbol);
  auto copies = CopiesAfter(first_id_);
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].dst_kind(), trace::SYMBOL);
  EXPECT_EQ(copies[0].dst_device(), -1);
  EXPECT_EQ(copies[0].direction(), trace::H2D);
}

TEST_F(CopyPathTest, SyncIsRecordedWithItsStreamAndTimes) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  ASSERT_EQ(fakecuda_sleep_on_stream(s, 20), cudaSuccess);
  ASSERT_EQ(TracedSync(f::kStreamSynchronize, reinterpret_cast<uintptr_t>(s),
                       [&] { return cudaStreamSynchronize(s); }),
            cudaSuccess);
  auto syncs = SyncsAfter(first_id_);
  ASSERT_EQ(syncs.size(), 1u);
  EXPECT_EQ(syncs[0].api(), trace::STREAM_SYNCHRONIZE);
  EXPECT_EQ(syncs[0].stream(), reinterpret_cast<uintptr_t>(s));
  EXPECT_EQ(syncs[0].result(), 0);
  // The waiting thread's CPU time at each end, and only that (one system
  // call a reading: a wait takes no page faults).
  EXPECT_GT(syncs[0].usage_enter().cpu_ns(), 0u);
  EXPECT_GE(syncs[0].usage_exit().cpu_ns(), syncs[0].usage_enter().cpu_ns());
  EXPECT_EQ(syncs[0].usage_exit().minor_faults(), 0u);
  EXPECT_EQ(syncs[0].usage_exit().user_ns() + syncs[0].usage_exit().sys_ns(), 0u);
  // A 20 ms wait the double sleeps through: its exit is read, and says so.
  EXPECT_LT(syncs[0].usage_exit().cpu_ns() - syncs[0].usage_enter().cpu_ns(), 10'000'000u);
  cudaStreamDestroy(s);
}

// This process's SyncEvents with call ids above `after`, with their start.
std::vector<std::pair<uint64_t, trace::SyncEvent>> TimedSyncsAfter(uint64_t after) {
  std::vector<std::pair<uint64_t, trace::SyncEvent>> out;
  for (const auto& p : ReadOwnTrace().packets)
    if (p.has_sync() && p.sync().call_id() > after) out.emplace_back(p.timestamp_ns(), p.sync());
  return out;
}

// A call under 20 us whose usage is its CPU time only takes no exit reading
// (a system call, issue 16): it ran on the CPU throughout, so its exit CPU
// time is the entry's plus its wall time, exactly. A longer one is read
// (above: a sleeping wait's CPU time is not its wall time).
TEST_F(CopyPathTest, AShortWaitOrCopyTakesOneReading) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  int short_waits = 0;
  for (int k = 0; k < 20; ++k)
    ASSERT_EQ(TracedSync(f::kStreamSynchronize, reinterpret_cast<uintptr_t>(s),
                         [&] { return cudaStreamSynchronize(s); }),
              cudaSuccess);
  for (const auto& [start, w] : TimedSyncsAfter(first_id_)) {
    ASSERT_GT(w.usage_enter().cpu_ns(), 0u);
    if (w.end_ns() - start >= 20'000) continue;  // a loaded machine's preemption
    ++short_waits;
    EXPECT_EQ(w.usage_exit().cpu_ns() - w.usage_enter().cpu_ns(), w.end_ns() - start);
  }
  EXPECT_GE(short_waits, 10);  // an idle stream's wait takes a few microseconds
  cudaStreamDestroy(s);

  // An asynchronous copy from device memory to a pinned block: CPU time
  // only, one reading when short (the double's synchronous copies wait for
  // its stream thread, longer). Its whole usage (a pageable side) reads both ends.
  void* pinned = nullptr;
  ASSERT_EQ(cudaHostAlloc(&pinned, 4096, cudaHostAllocDefault), cudaSuccess);
  const uint64_t before = NextCallId();
  for (int k = 0; k < 20; ++k) {
    CopyCall r = MakeCopyCall(f::kMemcpyAsync, false, cudaMemcpyDeviceToHost, 4, 0);
    ASSERT_EQ(
        TracedCopy(r, {pinned, false}, {dev_, false},
                   [&] { return cudaMemcpyAsync(pinned, dev_, 4, cudaMemcpyDeviceToHost, 0); }),
        cudaSuccess);
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  int short_copies = 0;
  for (const auto& p : ReadOwnTrace().packets) {
    if (!p.has_copy() || p.copy().call_id() <= before) continue;
    const auto& c = p.copy();
    ASSERT_EQ(c.dst_kind(), trace::PINNED);
    EXPECT_EQ(c.usage_exit().minor_faults() + c.usage_exit().user_ns(), 0u);
    if (c.end_ns() - p.timestamp_ns() >= 20'000) continue;
    ++short_copies;
    EXPECT_EQ(c.usage_exit().cpu_ns() - c.usage_enter().cpu_ns(), c.end_ns() - p.timestamp_ns());
  }
  EXPECT_GE(short_copies, 10);
  cudaFreeHost(pinned);
}

// A wait that begins under 20 us after the thread's previous copy or wait
// returned takes no reading at its entry either: its CPU time is the
// previous exit's plus the gap, exactly (PyTorch's synchronous copy is a
// cudaMemcpyAsync and a wait a few microseconds apart). A chain of such
// calls is read again 200 us after its last reading, and a call after a
// longer gap (a sleep) is read.
TEST_F(CopyPathTest, AWaitRightAfterACallTakesNoReadingAtItsEntry) {
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  auto spin = [](uint64_t ns) {
    timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do clock_gettime(CLOCK_MONOTONIC, &b);
    while (static_cast<uint64_t>((b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec)) <
           ns);
  };
  constexpr int kWaits = 100;
  for (int k = 0; k < kWaits; ++k)
    ASSERT_EQ(TracedSync(f::kStreamSynchronize, reinterpret_cast<uintptr_t>(s),
                         [&] {
                           spin(5'000);
                           return cudaStreamSynchronize(s);
                         }),
              cudaSuccess);
  // One more after a sleep: its entry is read.
  usleep(2'000);
  ASSERT_EQ(TracedSync(f::kStreamSynchronize, reinterpret_cast<uintptr_t>(s),
                       [&] { return cudaStreamSynchronize(s); }),
            cudaSuccess);
  const auto waits = TimedSyncsAfter(first_id_);
  ASSERT_EQ(waits.size(), static_cast<size_t>(kWaits + 1));
  int derived = 0, read_in_chain = 0;
  for (size_t i = 1; i < waits.size(); ++i) {
    const auto& [prev_start, prev] = waits[i - 1];
    const auto& [start, w] = waits[i];
    const uint64_t gap = start - prev.end_ns();
    const uint64_t cpu_gap = w.usage_enter().cpu_ns() - prev.usage_exit().cpu_ns();
    if (i == waits.size() - 1) {
      // After the sleep: read, so far less CPU than wall time.
      EXPECT_GT(gap, 2'000'000u);
      EXPECT_LT(cpu_gap, gap / 2);
      continue;
    }
    if (gap >= 20'000) continue;  // a loaded machine's preemption
    (cpu_gap == gap ? derived : read_in_chain) += 1;
  }
  // Each wait spins 5 us: a chain of about 200 us holds some 30 of them.
  EXPECT_GE(derived, kWaits / 2);
  EXPECT_GE(read_in_chain, 1);
  EXPECT_LE(read_in_chain, kWaits / 5);
  cudaStreamDestroy(s);
}

TEST_F(CopyPathTest, BatchRecordsEveryElementUnderOneCall) {
  constexpr size_t kN = 3;
  std::vector<std::vector<uint8_t>> hosts(kN, std::vector<uint8_t>(4096, 1));
  void* dsts[kN];
  const void* srcs[kN];
  size_t sizes[kN];
  for (size_t i = 0; i < kN; ++i) {
    dsts[i] = static_cast<uint8_t*>(dev_) + i * 8192;
    srcs[i] = hosts[i].data();
    sizes[i] = 1024 * (i + 1);
  }
  int calls = 0;
  ASSERT_EQ(TracedBatch(false, dsts, srcs, sizes, kN, 0,
                        [&] {
                          ++calls;
                          for (size_t i = 0; i < kN; ++i)
                            if (cudaMemcpy(dsts[i], srcs[i], sizes[i], cudaMemcpyHostToDevice))
                              return 1;
                          return 0;
                        }),
            0);
  EXPECT_EQ(calls, 1);  // the real call runs exactly once
  auto copies = CopiesAfter(first_id_);
  ASSERT_EQ(copies.size(), kN);
  for (size_t i = 0; i < kN; ++i) {
    EXPECT_EQ(copies[i].api(), trace::MEMCPY_BATCH_ASYNC);
    EXPECT_EQ(copies[i].batch_index(), i);
    EXPECT_EQ(copies[i].bytes(), sizes[i]);
    EXPECT_EQ(copies[i].call_id(), copies[0].call_id());
    EXPECT_EQ(copies[i].direction(), trace::H2D);
    EXPECT_EQ(copies[i].src_kind(), trace::PAGEABLE);
  }
}

TEST_F(CopyPathTest, InsideTheShimTheCallPassesThroughUnrecorded) {
  std::vector<uint8_t> host(4096);
  int calls = 0;
  {
    HookScope scope;  // as when pinscope itself copies
    CopyCall r = MakeCopyCall(f::kMemcpy, false, cudaMemcpyHostToDevice, 4096, 0);
    TracedCopy(r, {dev_, false}, {host.data(), false}, [&] {
      ++calls;
      return cudaMemcpy(dev_, host.data(), 4096, cudaMemcpyHostToDevice);
    });
  }
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(CopiesAfter(first_id_).empty());
}

// The pointer-kind cache keeps two pointers that meet in one set: a loop
// alternating between them queries each once (direct-mapped, they evicted
// each other and were queried at every copy). A third one in the set
// replaces the least recent of the two.
TEST_F(CopyPathTest, PointerCacheKeepsTwoPointersOfOneSet) {
  // Three addresses of one set (the double answers any address: unknown
  // ones are pageable).
  const void* in_set[3];
  size_t found = 0;
  const uintptr_t base = uintptr_t{0x7f0000000000};
  const size_t set = PointerCacheSet(reinterpret_cast<void*>(base));
  for (uintptr_t a = base; found < 3; a += 16)
    if (PointerCacheSet(reinterpret_cast<void*>(a)) == set)
      in_set[found++] = reinterpret_cast<void*>(a);
  const void *a = in_set[0], *b = in_set[1], *c = in_set[2];
  BumpPointerGeneration();  // nothing cached from earlier tests
  fakecuda_reset_stats();
  auto queries = [] {
    fakecuda_stats s{};
    fakecuda_get_stats(&s);
    return s.pointer_attribute_calls;
  };
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(ClassifyPointer(a).kind, f::kPageable);
    EXPECT_EQ(ClassifyPointer(b).kind, f::kPageable);
  }
  EXPECT_EQ(queries(), 2u);
  ClassifyPointer(c);  // a, the least recent, goes
  ClassifyPointer(b);
  EXPECT_EQ(queries(), 3u);
  ClassifyPointer(a);
  EXPECT_EQ(queries(), 4u);
  EXPECT_EQ(ClassifyPointer(dev_).kind, f::kDevice);
  EXPECT_EQ(queries(), 5u);
}

// A loop's pointers a power of two apart (a caching allocator's blocks)
// spread over the cache's sets: each is queried once however often the loop
// goes round. The index before (key >> 6 ^ key >> 17, 32 sets) put
// pointers 4 MiB apart all in one set, and the Hugging Face Trainer's 41
// pointers of a step cost it 3.5 queries a step (twenty-fifth session).
TEST_F(CopyPathTest, PointerCacheHoldsALoopsPointersAPowerOfTwoApart) {
  BumpPointerGeneration();
  fakecuda_reset_stats();
  for (uintptr_t stride : {uintptr_t{1} << 16, uintptr_t{1} << 20, uintptr_t{1} << 22}) {
    SCOPED_TRACE(stride);
    BumpPointerGeneration();
    fakecuda_reset_stats();
    const uintptr_t base = uintptr_t{0x7e0000000000} + stride * 1024;
    for (int round = 0; round < 10; ++round)
      for (uintptr_t i = 0; i < 40; ++i)
        EXPECT_EQ(ClassifyPointer(reinterpret_cast<void*>(base + i * stride)).kind, f::kPageable);
    fakecuda_stats s{};
    fakecuda_get_stats(&s);
    EXPECT_EQ(s.pointer_attribute_calls, 40u);
  }
}

TEST(CopyPathDirection, EveryKindAndTheDefaultCases) {
  EXPECT_EQ(DirectionFor(cudaMemcpyHostToHost, 0, 0), f::kH2H);
  EXPECT_EQ(DirectionFor(cudaMemcpyDeviceToDevice, f::kPageable, f::kPageable), f::kD2D);
  EXPECT_EQ(DirectionFor(cudaMemcpyDefault, f::kPinned, f::kManaged), f::kH2D);
  EXPECT_EQ(DirectionFor(cudaMemcpyDefault, f::kSymbol, f::kPageable), f::kD2H);
  EXPECT_EQ(DirectionFor(cudaMemcpyDefault, f::kDevice, f::kDevice), f::kD2D);
  EXPECT_EQ(DirectionFor(cudaMemcpyDefault, f::kPageable, f::kPinned), f::kH2H);
  EXPECT_EQ(DirectionFor(cudaMemcpyDefault, f::kMemUnknown, f::kDevice), f::kDirUnknown);
}

}  // namespace
}  // namespace pinscope::shim
