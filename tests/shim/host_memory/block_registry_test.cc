// BlockRegistry: exact and containment lookups of host blocks, mapping
// removal that trims and splits, the lock-free readers used by the SIGBUS
// handler, growth past one pool chunk, threads, and fork (entries kept and
// marked inherited, the lock usable in the child even if another thread was
// using it at the moment of fork).
#include "shim/memory/block_registry.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "shim/pin/pinning.h"

namespace pinscope::shim {
namespace {

class RegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    InstallRegistryForkHandlers();
    reg().ResetForTest();
  }
  void TearDown() override { reg().ResetForTest(); }
  static BlockRegistry& reg() { return Registry(); }
  static HostBlock Block(uint64_t addr, uint64_t size, uint32_t api = 1) {
    HostBlock b;
    b.address = addr;
    b.size = size;
    b.api = api;
    return b;
  }
  static ShmMapping Mapping(uint64_t addr, uint64_t size, uint64_t offset = 0,
                            const char* name = "/seg", uint32_t flags = 0) {
    ShmMapping m;
    m.address = addr;
    m.size = size;
    m.offset = offset;
    m.device = 7;
    m.inode = addr;
    m.flags = flags;
    m.prot = PROT_READ | PROT_WRITE;
    m.map_flags = MAP_SHARED;
    strncpy(m.name, name, sizeof m.name - 1);
    return m;
  }
};

TEST_F(RegistryTest, ExactAndContainingLookups) {
  ASSERT_TRUE(reg().AddBlock(Block(0x10000, 0x1000)));
  ASSERT_TRUE(reg().AddBlock(Block(0x20000, 0x800, 5)));
  ASSERT_TRUE(reg().AddBlock(Block(0x30000, 0)));  // zero size: holds its address only
  EXPECT_EQ(reg().live_blocks(), 3u);
  HostBlock b;
  ASSERT_TRUE(reg().FindBlock(0x20000, &b));
  EXPECT_EQ(b.size, 0x800u);
  EXPECT_EQ(b.api, 5u);
  EXPECT_EQ(b.epoch, reg().epoch());
  EXPECT_FALSE(reg().FindBlock(0x20001, &b));
  ASSERT_TRUE(reg().FindBlockContaining(0x10fff, &b));
  EXPECT_EQ(b.address, 0x10000u);
  EXPECT_FALSE(reg().FindBlockContaining(0x11000, &b));
  EXPECT_FALSE(reg().FindBlockContaining(0xffff, &b));
  ASSERT_TRUE(reg().FindBlockContaining(0x20000, &b));
  EXPECT_EQ(b.address, 0x20000u);
  ASSERT_TRUE(reg().FindBlockContaining(0x30000, &b));
  EXPECT_FALSE(reg().FindBlockContaining(0x30001, &b));
  // Same address again replaces the entry.
  ASSERT_TRUE(reg().AddBlock(Block(0x20000, 0x900)));
  EXPECT_EQ(reg().live_blocks(), 3u);
  ASSERT_TRUE(reg().RemoveBlock(0x20000, &b));
  EXPECT_EQ(b.size, 0x900u);
  EXPECT_FALSE(reg().RemoveBlock(0x20000, &b));
  EXPECT_EQ(reg().live_blocks(), 2u);
}

TEST_F(RegistryTest, FlagsPayloadAndCollect) {
  ASSERT_TRUE(reg().AddBlock(Block(0x1000, 16)));
  ASSERT_TRUE(reg().AddBlock(Block(0x2000, 16)));
  uint64_t payload[2] = {11, 22};
  ASSERT_TRUE(reg().UpdateBlock(0x2000, kFlagPinned, 0, payload));
  EXPECT_FALSE(reg().UpdateBlock(0x3000, kFlagPinned, 0, nullptr));
  HostBlock out[4];
  ASSERT_EQ(reg().CollectBlocks(kFlagPinned, out, 4), 1u);
  EXPECT_EQ(out[0].address, 0x2000u);
  EXPECT_EQ(out[0].payload[1], 22u);
  EXPECT_EQ(reg().CollectBlocks(0, out, 1), 2u);  // count beyond cap
  reg().ClearFlagsEverywhere(kFlagPinned);
  EXPECT_EQ(reg().CollectBlocks(kFlagPinned, out, 4), 0u);
}

TEST_F(RegistryTest, ManyBlocksGrowThePool) {
  // Far more nodes than one 256 KiB pool chunk holds, in random order.
  constexpr int kBlocks = 50000;
  std::vector<uint64_t> addrs;
  for (int i = 0; i < kBlocks; ++i) addrs.push_back(0x100000000ull + uint64_t(i) * 0x1000);
  std::mt19937_64 rng(7);
  std::shuffle(addrs.begin(), addrs.end(), rng);
  for (uint64_t a : addrs) ASSERT_TRUE(reg().AddBlock(Block(a, 0x800)));
  EXPECT_EQ(reg().live_blocks(), size_t(kBlocks));
  HostBlock b;
  ASSERT_TRUE(reg().FindBlockContaining(0x100000000ull + 1234 * 0x1000 + 0x7ff, &b));
  EXPECT_EQ(b.address, 0x100000000ull + 1234 * 0x1000);
  EXPECT_FALSE(reg().FindBlockContaining(0x100000000ull + 1234 * 0x1000 + 0x800, &b));
  std::shuffle(addrs.begin(), addrs.end(), rng);
  for (uint64_t a : addrs) ASSERT_TRUE(reg().RemoveBlock(a, &b));
  EXPECT_EQ(reg().live_blocks(), 0u);
}

TEST_F(RegistryTest, ThreadsAddAndRemoveConcurrently) {
  std::vector<std::thread> threads;
  std::atomic<int> errors{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([t, &errors] {
      for (int i = 0; i < 5000; ++i) {
        uint64_t a = (uint64_t(t + 1) << 40) + uint64_t(i) * 64;
        if (!Registry().AddBlock(Block(a, 64))) ++errors;
        HostBlock b;
        if (!Registry().FindBlockContaining(a + 63, &b) || b.address != a) ++errors;
        if (!Registry().RemoveBlock(a, &b)) ++errors;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(reg().live_blocks(), 0u);
}

TEST_F(RegistryTest, MappingsTrimAndSplit) {
  constexpr uint64_t P = 0x7f0000000000ull, M = 1 << 20;
  ASSERT_TRUE(reg().AddMapping(Mapping(P, 4 * M, 0, "/a")));
  ASSERT_TRUE(reg().AddMapping(Mapping(P + 8 * M, M, 5 * M, "/b")));
  EXPECT_TRUE(reg().MayOverlapMappings(P + 4 * M, M));  // inside the bounds, a gap
  EXPECT_FALSE(reg().MayOverlapMappings(P + 9 * M, M));
  EXPECT_FALSE(reg().MayOverlapMappings(P - M, M));
  RemovedPiece pieces[4];
  // A hole in the middle of /a: two mappings remain, the tail with its offset.
  ASSERT_EQ(reg().RemoveMappings(P + M, M, pieces, 4), 1u);
  EXPECT_EQ(pieces[0].address, P + M);
  EXPECT_EQ(pieces[0].size, M);
  EXPECT_FALSE(pieces[0].whole);
  EXPECT_STREQ(pieces[0].mapping.name, "/a");
  EXPECT_EQ(reg().live_mappings(), 3u);
  ShmMapping m;
  ASSERT_TRUE(reg().FindMappingContaining(P + 3 * M, &m));
  EXPECT_EQ(m.address, P + 2 * M);
  EXPECT_EQ(m.size, 2 * M);
  EXPECT_EQ(m.offset, 2 * M);
  EXPECT_FALSE(reg().FindMappingContaining(P + M + 5, &m));
  // Trim the tail's end, then remove a range covering the head and the tail.
  ASSERT_EQ(reg().RemoveMappings(P + 3 * M, M, pieces, 4), 1u);
  ASSERT_TRUE(reg().FindMappingContaining(P + 2 * M, &m));
  EXPECT_EQ(m.size, M);
  ASSERT_EQ(reg().RemoveMappings(P, 4 * M, pieces, 4), 2u);
  EXPECT_TRUE(pieces[0].whole && pieces[1].whole);
  EXPECT_EQ(reg().live_mappings(), 1u);
  // Bounds shrink to what is left.
  EXPECT_FALSE(reg().MayOverlapMappings(P, 4 * M));
  ASSERT_TRUE(reg().OverlappingMappings(P, 16 * M, &m, 1) == 1u);
  EXPECT_STREQ(m.name, "/b");
  uint64_t set_payload[2] = {3, 4};
  EXPECT_TRUE(reg().UpdateMapping(P + 8 * M, kFlagPinned, 0, set_payload));
  ASSERT_TRUE(reg().FindMappingContaining(P + 8 * M, &m));
  EXPECT_EQ(m.flags, uint32_t(kFlagPinned));
  EXPECT_EQ(m.payload[0], 3u);
}

TEST_F(RegistryTest, SignalSafeReaders) {
  ASSERT_TRUE(reg().AddMapping(Mapping(0x10000, 0x4000, 0, "/job")));
  ASSERT_TRUE(reg().AddMapping(Mapping(0x40000, 0x1000, 0, "/cuda_x", kFlagDriverInternal)));
  ShmMapping m;
  ASSERT_TRUE(reg().FindMappingContainingFromSignal(0x13fff, &m));
  EXPECT_STREQ(m.name, "/job");
  EXPECT_FALSE(reg().FindMappingContainingFromSignal(0x14000, &m));
  uint64_t count = 0, bytes = 0;
  reg().SumMappingsFromSignal(&count, &bytes);
  EXPECT_EQ(count, 1u);  // the driver's own segment is not the job's
  EXPECT_EQ(bytes, 0x4000u);
}

TEST_F(RegistryTest, TableFull) {
  for (size_t i = 0; i < BlockRegistry::kMaxMappings; ++i)
    ASSERT_TRUE(reg().AddMapping(Mapping(0x100000 + i * 0x10000, 0x1000)));
  EXPECT_FALSE(reg().AddMapping(Mapping(0x1, 0x1000)));
  RemovedPiece piece;
  // Splitting needs a slot: the tail is forgotten, the head kept.
  ASSERT_EQ(reg().RemoveMappings(0x100000 + 0x400, 0x400, &piece, 1), 1u);
  ShmMapping m;
  EXPECT_TRUE(reg().FindMappingContaining(0x100000, &m));
  EXPECT_FALSE(reg().FindMappingContaining(0x100000 + 0x900, &m));
}

TEST_F(RegistryTest, HostBufferForThePinningModule) {
  ASSERT_TRUE(reg().AddBlock(Block(0x50000, 0x2000)));
  ASSERT_TRUE(reg().AddMapping(Mapping(0x90000, 0x3000)));
  HostBuffer buf;
  ASSERT_TRUE(FindHostBuffer(0x51000, &buf));
  EXPECT_EQ(buf.base, 0x50000u);
  EXPECT_EQ(buf.size, 0x2000u);
  EXPECT_FALSE(buf.shm);
  ASSERT_TRUE(FindHostBuffer(0x92fff, &buf));
  EXPECT_EQ(buf.base, 0x90000u);
  EXPECT_TRUE(buf.shm);
  EXPECT_TRUE(buf.writable);
  EXPECT_FALSE(FindHostBuffer(0x93000, &buf));
}

TEST_F(RegistryTest, ForkKeepsEntriesAsInheritedAndAFreshLock) {
  ASSERT_TRUE(reg().AddBlock(Block(0xa0000, 0x100)));
  ASSERT_TRUE(reg().AddMapping(Mapping(0xb0000, 0x1000)));
  uint32_t parent_epoch = reg().epoch();
  // Another thread keeps using the registry while we fork.
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    for (uint64_t i = 0; !stop.load(); ++i) {
      uint64_t a = 0x5500000000ull + (i % 1000) * 16;
      Registry().AddBlock(Block(a, 16));
      HostBlock b;
      Registry().RemoveBlock(a, &b);
    }
  });
  for (int round = 0; round < 20; ++round) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int code = 0;
      HostBlock b;
      if (reg().epoch() != parent_epoch + 1) code |= 1;
      if (!reg().FindBlock(0xa0000, &b) || b.epoch != parent_epoch) code |= 2;
      ShmMapping m;
      if (!reg().FindMappingContaining(0xb0800, &m) || m.epoch != parent_epoch) code |= 4;
      if (!reg().AddBlock(Block(0xc0000, 8)) || !reg().FindBlock(0xc0000, &b) ||
          b.epoch != parent_epoch + 1)
        code |= 8;
      _exit(code);
    }
    int st = 0;
    ASSERT_EQ(waitpid(pid, &st, 0), pid);
    ASSERT_TRUE(WIFEXITED(st));
    EXPECT_EQ(WEXITSTATUS(st), 0) << "round " << round;
  }
  stop.store(true);
  busy.join();
  EXPECT_EQ(reg().epoch(), parent_epoch);
}

}  // namespace
}  // namespace pinscope::shim
