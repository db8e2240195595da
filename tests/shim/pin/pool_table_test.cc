// The pool's slot state machine (shim/pin/pool_table.h), driven directly:
// a slot is free again only once the worker and the program are both done
// with it and nothing else can reach it; escaped slots are never reused;
// a dead worker's slot is reclaimed only if the program had mapped it.
// Plus a table shared with forked processes taking slots at once, and
// PINSCOPE_PIN_POOL's parsing.
#include "shim/pin/pool_table.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <new>

#include "shim/base/config.h"

namespace pinscope::shim::pool {
namespace {

constexpr uint64_t kSize = 6u << 20;

// A table with `n` free slots of kSize (inodes 100, 101, ...).
class PoolTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    void* p =
        mmap(nullptr, sizeof(Table), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    t_ = new (p) Table();
    t_->owner = 1;
  }
  void TearDown() override { munmap(t_, sizeof(Table)); }
  void AddFree(int n, uint64_t size = kSize) {
    for (int k = 0; k < n; ++k) {
      Slot& s = t_->slots[used_];
      s.size = size;
      s.device = 7;
      s.inode = 100 + used_;
      MarkMaking(*t_, used_);  // as the owner does before it makes one
      Word w;
      w.state = kFree;
      s.word.store(Pack(w));
      ++used_;
    }
  }
  uint8_t State(int i) { return Load(*t_, i).state; }
  uint8_t Flags(int i) { return Load(*t_, i).flags; }

  Table* t_ = nullptr;
  int used_ = 0;
};

TEST_F(PoolTableTest, FreeAgainOnlyWhenWorkerAndProgramAreDoneEitherOrder) {
  AddFree(1);
  uint16_t gen = 0;
  ASSERT_EQ(TryTake(*t_, kSize, 42, &gen), 0);
  EXPECT_EQ(gen, 1);
  EXPECT_EQ(Load(*t_, 0).pid, 42u);
  EXPECT_EQ(TryTake(*t_, kSize, 43, &gen), -1);  // the only slot is taken
  ASSERT_TRUE(Serve(*t_, 0));
  EXPECT_FALSE(Serve(*t_, 0));                         // once per take
  EXPECT_FALSE(SetFlag(*t_, 0, 1, false, kMainDone));  // the worker still maps it
  EXPECT_EQ(State(0), kTaken);
  EXPECT_TRUE(SetFlag(*t_, 0, 1, false, kWorkerDone));
  EXPECT_EQ(State(0), kFree);
  EXPECT_EQ(Flags(0), 0);

  // The worker first, then the program.
  ASSERT_EQ(TryTake(*t_, kSize, 44, &gen), 0);
  EXPECT_EQ(gen, 2);
  EXPECT_FALSE(SetFlag(*t_, 0, gen, false, kWorkerDone));  // never mapped by the program yet
  ASSERT_TRUE(Serve(*t_, 0));
  EXPECT_TRUE(SetFlag(*t_, 0, gen, false, kMainDone));
  EXPECT_EQ(State(0), kFree);
  EXPECT_EQ(t_->takes.load(), 2u);
}

TEST_F(PoolTableTest, TakesOnlyAFreeSlotOfTheExactSize) {
  AddFree(1, kSize);
  AddFree(1, kSize + 4096);
  uint16_t gen = 0;
  EXPECT_EQ(TryTake(*t_, kSize - 1, 1, &gen), -1);
  EXPECT_EQ(TryTake(*t_, kSize + 4096, 1, &gen), 1);
  EXPECT_EQ(TryTake(*t_, kSize + 4096, 1, &gen), -1);
  EXPECT_EQ(TryTake(*t_, kSize, 1, &gen), 0);
}

TEST_F(PoolTableTest, AStaleGenerationChangesNothing) {
  AddFree(1);
  uint16_t gen = 0;
  ASSERT_EQ(TryTake(*t_, kSize, 5, &gen), 0);
  ASSERT_TRUE(Serve(*t_, 0));
  EXPECT_FALSE(SetFlag(*t_, 0, static_cast<uint16_t>(gen + 1), false, kWorkerDone));
  EXPECT_EQ(Flags(0), kMainMapped);
  // Untake only before anything happened to the take.
  EXPECT_FALSE(Untake(*t_, 0, gen));
  EXPECT_EQ(State(0), kTaken);
}

TEST_F(PoolTableTest, UntakeReturnsAnUntouchedTake) {
  AddFree(1);
  uint16_t gen = 0;
  ASSERT_EQ(TryTake(*t_, kSize, 5, &gen), 0);
  EXPECT_TRUE(Untake(*t_, 0, gen));
  EXPECT_EQ(State(0), kFree);
  EXPECT_EQ(TryTake(*t_, kSize, 6, &gen), 0);
  EXPECT_EQ(gen, 2);
}

TEST_F(PoolTableTest, AnEscapedSlotIsNeverFreedAndIsRetiredOnceTheProgramLetGo) {
  AddFree(1);
  uint16_t gen = 0;
  ASSERT_EQ(TryTake(*t_, kSize, 9, &gen), 0);
  ASSERT_TRUE(Serve(*t_, 0));
  EXPECT_FALSE(Escape(*t_, 0));  // taken: flagged, not retired by this call
  EXPECT_EQ(t_->escapes.load(), 1u);
  EXPECT_FALSE(Escape(*t_, 0));
  EXPECT_EQ(t_->escapes.load(), 1u);         // counted once
  EXPECT_FALSE(BeginRetire(*t_, 0, false));  // the program holds it
  EXPECT_FALSE(SetFlag(*t_, 0, gen, false, kWorkerDone));
  EXPECT_FALSE(SetFlag(*t_, 0, gen, false, kMainDone));
  EXPECT_EQ(State(0), kTaken);              // done on both sides, yet not free
  EXPECT_FALSE(BeginRetire(*t_, 0, true));  // not free: not idle
  EXPECT_TRUE(BeginRetire(*t_, 0, false));
  EXPECT_EQ(State(0), kRetiring);
  EXPECT_EQ(TryTake(*t_, kSize, 9, &gen), -1);
  EXPECT_EQ(FindByInode(*t_, 7, 100), 0);  // still known until the owner clears it
}

TEST_F(PoolTableTest, AFreeSlotWhoseFdEscapesGoesStraightToRetiring) {
  AddFree(1);
  EXPECT_TRUE(Escape(*t_, 0));
  EXPECT_EQ(State(0), kRetiring);
  uint16_t gen = 0;
  EXPECT_EQ(TryTake(*t_, kSize, 1, &gen), -1);
}

TEST_F(PoolTableTest, AServedSlotIsNotServedAgainAndAnUnservedEscapedOneRetiresAtOnce) {
  AddFree(1);
  uint16_t gen = 0;
  ASSERT_EQ(TryTake(*t_, kSize, 9, &gen), 0);
  Escape(*t_, 0);
  EXPECT_FALSE(Serve(*t_, 0));  // the program gets a real mapping instead
  EXPECT_TRUE(BeginRetire(*t_, 0, false));
}

TEST_F(PoolTableTest, TheSecondSendOfASlotsFdEscapesIt) {
  AddFree(1);
  uint16_t gen = 0;
  ASSERT_EQ(TryTake(*t_, kSize, 9, &gen), 0);
  NoteSent(*t_, 0);
  EXPECT_EQ(Flags(0), kSent);
  NoteSent(*t_, 0);
  EXPECT_EQ(Flags(0), kSent | kEscaped);
  ASSERT_FALSE(Serve(*t_, 0));
}

// The owner's program copies a slot's fd: before its map (torch's receive
// path dups the fd it got) nothing changes; while it holds the mapping the
// slot escapes, so the program's munmap cannot free it for a worker while
// the copy is out; after the munmap, and for a free slot, nothing changes.
TEST_F(PoolTableTest, AnFdCopiedWhileTheProgramHoldsTheSlotEscapesIt) {
  AddFree(2);
  uint16_t gen = 0;
  ASSERT_EQ(TryTake(*t_, kSize, 9, &gen), 0);
  EXPECT_FALSE(EscapeHandedOut(*t_, 0));  // before the map
  EXPECT_EQ(Flags(0), 0);
  ASSERT_TRUE(Serve(*t_, 0));
  EXPECT_EQ(t_->escapes.load(), 0u);
  EXPECT_TRUE(EscapeHandedOut(*t_, 0));
  EXPECT_FALSE(EscapeHandedOut(*t_, 0));  // once
  EXPECT_EQ(Flags(0), kMainMapped | kEscaped);
  EXPECT_EQ(t_->escapes.load(), 1u);
  EXPECT_FALSE(SetFlag(*t_, 0, gen, false, kWorkerDone));
  EXPECT_FALSE(SetFlag(*t_, 0, gen, false, kMainDone));  // never free again
  EXPECT_EQ(State(0), kTaken);
  EXPECT_TRUE(BeginRetire(*t_, 0, false));

  // Unmapped by the program first: the copy came after, from a kept fd
  // (docs/zero-copy-pool.md, Limits); the slot is free and stays so.
  ASSERT_EQ(TryTake(*t_, kSize, 9, &gen), 1);
  ASSERT_TRUE(Serve(*t_, 1));
  ASSERT_FALSE(SetFlag(*t_, 1, gen, false, kMainDone));
  EXPECT_FALSE(EscapeHandedOut(*t_, 1));
  EXPECT_TRUE(SetFlag(*t_, 1, gen, false, kWorkerDone));
  EXPECT_EQ(State(1), kFree);
  EXPECT_FALSE(EscapeHandedOut(*t_, 1));
  EXPECT_EQ(State(1), kFree);
  EXPECT_EQ(t_->escapes.load(), 1u);
}

// A worker dies before the program mapped its batch: the program may still
// hold the fd (delivered just before the death), so the slot escapes.
TEST_F(PoolTableTest, AWorkerDeadBeforeTheMapEscapesTheSlot) {
  AddFree(1);
  uint16_t gen = 0;
  ASSERT_EQ(TryTake(*t_, kSize, 77, &gen), 0);
  EXPECT_FALSE(WorkerDied(*t_, 0, 78));  // another pid: nothing
  EXPECT_EQ(Flags(0), 0);
  EXPECT_FALSE(WorkerDied(*t_, 0, 77));
  EXPECT_EQ(Flags(0), kWorkerDone | kEscaped);
  EXPECT_FALSE(Serve(*t_, 0));
  EXPECT_TRUE(BeginRetire(*t_, 0, false));
}

// ... after the map: the slot comes back once the program lets go.
TEST_F(PoolTableTest, AWorkerDeadAfterTheMapFreesTheSlotWithTheProgramsUnmap) {
  AddFree(1);
  uint16_t gen = 0;
  ASSERT_EQ(TryTake(*t_, kSize, 77, &gen), 0);
  ASSERT_TRUE(Serve(*t_, 0));
  EXPECT_FALSE(WorkerDied(*t_, 0, 77));
  EXPECT_EQ(Flags(0), kWorkerDone | kMainMapped);
  EXPECT_FALSE(WorkerDied(*t_, 0, 77));  // said once
  EXPECT_TRUE(SetFlag(*t_, 0, gen, false, kMainDone));
  EXPECT_EQ(State(0), kFree);
  // The program unmapped first and the worker then died.
  ASSERT_EQ(TryTake(*t_, kSize, 78, &gen), 0);
  ASSERT_TRUE(Serve(*t_, 0));
  EXPECT_FALSE(SetFlag(*t_, 0, 0, true, kMainDone));
  EXPECT_TRUE(WorkerDied(*t_, 0, 78));
  EXPECT_EQ(State(0), kFree);
}

// Scans stop one past the highest entry ever made: a slot is found there
// and not past it, and an entry made later raises the mark.
TEST_F(PoolTableTest, ScansReachEveryEntryEverMadeAndNoFurther) {
  EXPECT_EQ(Scanned(*t_), 0);
  AddFree(3);
  EXPECT_EQ(Scanned(*t_), 3);
  EXPECT_EQ(FindByInode(*t_, 7, 102), 2);
  // An entry past the mark, filled in behind the owner's back: not read.
  Slot& far = t_->slots[10];
  far.size = kSize;
  far.device = 7;
  far.inode = 500;
  Word w;
  w.state = kFree;
  far.word.store(Pack(w));
  EXPECT_EQ(FindByInode(*t_, 7, 500), -1);
  MarkMaking(*t_, 10);
  EXPECT_EQ(Scanned(*t_), 11);
  EXPECT_EQ(FindByInode(*t_, 7, 500), 10);
  MarkMaking(*t_, 4);  // a lower entry made again: the mark stays
  EXPECT_EQ(Scanned(*t_), 11);
  MarkMaking(*t_, kSlots - 1);
  EXPECT_EQ(Scanned(*t_), kSlots);
}

TEST_F(PoolTableTest, FindByInodeSkipsEmptyAndMakingSlots) {
  AddFree(2);
  EXPECT_EQ(FindByInode(*t_, 7, 101), 1);
  EXPECT_EQ(FindByInode(*t_, 8, 101), -1);
  Word w;
  w.state = kMaking;
  t_->slots[1].word.store(Pack(w));
  EXPECT_EQ(FindByInode(*t_, 7, 101), -1);
}

// Processes sharing the table take, serve and release slots at once: no
// slot is ever held by two takes, and every slot ends free.
TEST_F(PoolTableTest, ForkedProcessesTakeAndReleaseWithoutDoubleTakes) {
  AddFree(4);
  // Per slot, a counter of current holders in the shared page after the table.
  auto* holders = static_cast<std::atomic<int>*>(
      mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(holders, MAP_FAILED);
  std::atomic<int>* bad = holders + kSlots;
  constexpr int kProcs = 4, kRounds = 2000;
  pid_t pids[kProcs];
  for (int p = 0; p < kProcs; ++p) {
    pids[p] = fork();
    if (pids[p] == 0) {
      for (int r = 0; r < kRounds; ++r) {
        uint16_t gen = 0;
        int i = TryTake(*t_, kSize, static_cast<uint32_t>(getpid()), &gen);
        if (i < 0) continue;
        if (holders[i].fetch_add(1) != 0) bad->fetch_add(1);
        bool main_first = r % 2;
        if (!Serve(*t_, i)) bad->fetch_add(1);
        holders[i].fetch_sub(1);  // before the last flag: then it may be taken again
        if (main_first) {
          SetFlag(*t_, i, gen, false, kMainDone);
          SetFlag(*t_, i, gen, false, kWorkerDone);
        } else {
          SetFlag(*t_, i, gen, false, kWorkerDone);
          SetFlag(*t_, i, gen, false, kMainDone);
        }
      }
      _exit(0);
    }
  }
  for (pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  EXPECT_EQ(bad->load(), 0);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(State(i), kFree) << i;
  EXPECT_GT(t_->takes.load(), 0u);
  munmap(holders, 4096);
}

// PINSCOPE_PIN_POOL: on with pinning, off without; 0 turns it off; 1
// without pinning is said and leaves it off; a bad value is said and leaves
// the default (on with pinning).
TEST(PoolConfig, ParsedAndValidated) {
  auto load = [](const char* pin, const char* pool) {
    if (pin)
      setenv("PINSCOPE_PIN", pin, 1);
    else
      unsetenv("PINSCOPE_PIN");
    if (pool)
      setenv("PINSCOPE_PIN_POOL", pool, 1);
    else
      unsetenv("PINSCOPE_PIN_POOL");
    Config c;
    LoadConfig(&c);
    return c.pin_pool;
  };
  EXPECT_TRUE(load("1", nullptr));
  EXPECT_TRUE(load("async", nullptr));
  EXPECT_FALSE(load(nullptr, nullptr));
  EXPECT_FALSE(load("0", nullptr));
  EXPECT_TRUE(load("1", "1"));
  EXPECT_TRUE(load("async", "on"));
  EXPECT_FALSE(load("1", "0"));
  testing::internal::CaptureStderr();
  EXPECT_TRUE(load("1", "maybe"));
  EXPECT_FALSE(load(nullptr, "1"));
  std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("PINSCOPE_PIN_POOL=\"maybe\" is not 0 or 1"), std::string::npos) << err;
  EXPECT_NE(err.find("PINSCOPE_PIN_POOL=1 needs PINSCOPE_PIN=1"), std::string::npos) << err;
  unsetenv("PINSCOPE_PIN");
  unsetenv("PINSCOPE_PIN_POOL");
}

}  // namespace
}  // namespace pinscope::shim::pool
