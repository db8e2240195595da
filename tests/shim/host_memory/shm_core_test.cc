// shm_core without LD_PRELOAD: names and identities, the /dev/shm-full
// diagnosis text (exact strings), the job table shared with forked children,
// and the entry points driven directly against the real /dev/shm, checked
// in the registry, the fd table and the trace.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "core_test_env.h"
#include "shim/base/clock.h"
#include "shim/base/own_cost.h"
#include "shim/core/shm_state.h"
#include "shim/core/sigbus.h"
#include "shim/memory/block_registry.h"
#include "shim/record/trace_fields.h"

namespace pinscope::shim {
namespace {

using shm::FormatShmDiagnosis;
using shm::JobUsage;
using shm::ShmFailure;
using shm::ShmSpace;
constexpr uint64_t kMiB = 1ull << 20;

TEST(ShmNames, DriverInternal) {
  EXPECT_TRUE(shm::IsDriverInternalName("/cuda_injection_path_shm"));
  EXPECT_TRUE(shm::IsDriverInternalName("cuda.shm.0"));
  EXPECT_TRUE(shm::IsDriverInternalName("//cudaipc"));
  EXPECT_FALSE(shm::IsDriverInternalName("/torch_1_2_3"));
  EXPECT_FALSE(shm::IsDriverInternalName("/my_cuda"));
  EXPECT_FALSE(shm::IsDriverInternalName(nullptr));
}

TEST(ShmNames, FromFdLink) {
  char out[32];
  bool memfd = true;
  ASSERT_TRUE(shm::NameFromFdLink("/dev/shm/torch_1_2_3 (deleted)", out, sizeof out, &memfd));
  EXPECT_STREQ(out, "/torch_1_2_3");
  EXPECT_FALSE(memfd);
  ASSERT_TRUE(shm::NameFromFdLink("/dev/shm/live", out, sizeof out, &memfd));
  EXPECT_STREQ(out, "/live");
  ASSERT_TRUE(shm::NameFromFdLink("/memfd:a label (deleted)", out, sizeof out, &memfd));
  EXPECT_STREQ(out, "a label");
  EXPECT_TRUE(memfd);
  ASSERT_TRUE(shm::NameFromFdLink("/dev/shm/0123456789012345678901234567890123456789", out,
                                  sizeof out, &memfd));
  EXPECT_EQ(strlen(out), sizeof out - 1);  // cut, terminated
  EXPECT_FALSE(shm::NameFromFdLink("/tmp/file (deleted)", out, sizeof out, &memfd));
  EXPECT_FALSE(shm::NameFromFdLink("socket:[123]", out, sizeof out, &memfd));
}

TEST(ShmDiagnosis, SuggestedSize) {
  EXPECT_EQ(shm::SuggestShmSize(0), 64 * kMiB);
  EXPECT_EQ(shm::SuggestShmSize(32 * kMiB), 64 * kMiB);
  EXPECT_EQ(shm::SuggestShmSize(33 * kMiB), 128 * kMiB);
  EXPECT_EQ(shm::SuggestShmSize(600 * kMiB), 2048 * kMiB);
}

TEST(ShmDiagnosis, LooksFull) {
  EXPECT_FALSE(shm::LooksFull({false, 0, 0}));
  EXPECT_TRUE(shm::LooksFull({true, 32 * kMiB, 0}));
  EXPECT_TRUE(shm::LooksFull({true, 32 * kMiB, kMiB - 1}));
  EXPECT_FALSE(shm::LooksFull({true, 32 * kMiB, kMiB}));
  EXPECT_TRUE(shm::LooksFull({true, 1000 * kMiB, 19 * kMiB}));
  EXPECT_FALSE(shm::LooksFull({true, 1000 * kMiB, 21 * kMiB}));
}

std::string Format(const ShmFailure& f, const ShmSpace& s, const JobUsage& j) {
  char buf[768];
  size_t n = FormatShmDiagnosis(buf, sizeof buf, f, s, j);
  EXPECT_EQ(n, strlen(buf));
  return std::string(buf, n);
}

TEST(ShmDiagnosis, SigbusWhenFull) {
  ShmFailure f;
  f.fault_address = 0x7f0012345000;
  f.segment = "/torch_10_20_3";
  f.segment_bytes = 12 * kMiB;
  EXPECT_EQ(Format(f, {true, 32 * kMiB, 0}, {4, 48 * kMiB}),
            "pinscope: Bus error at 0x7f0012345000 inside shared-memory segment /torch_10_20_3 "
            "(12 MiB): /dev/shm is full: 32 MiB capacity, 32 MiB in use by 4 segments of this "
            "job (48 MiB mapped); start the container with --shm-size of at least 128m\n");
  EXPECT_EQ(Format(f, {true, 32 * kMiB, 0}, {1, 12 * kMiB}),
            "pinscope: Bus error at 0x7f0012345000 inside shared-memory segment /torch_10_20_3 "
            "(12 MiB): /dev/shm is full: 32 MiB capacity, 32 MiB in use by 1 segment of this "
            "job (12 MiB mapped); start the container with --shm-size of at least 64m\n");
  // Sizes below 10 MiB keep a decimal; large suggestions are given in g.
  f.segment_bytes = 786432;
  f.segment = "";
  EXPECT_EQ(Format(f, {true, 1024 * kMiB, 512 * 1024}, {0, 0}),
            "pinscope: Bus error at 0x7f0012345000 inside shared-memory segment (unnamed) "
            "(0.8 MiB): /dev/shm is full: 1024 MiB capacity, 1024 MiB in use; start the "
            "container with --shm-size of at least 2g\n");
}

TEST(ShmDiagnosis, SigbusWithRoomLeftOrOutsideDevShm) {
  ShmFailure f;
  f.fault_address = 0x1000;
  f.segment = "/seg";
  f.segment_bytes = 2 * kMiB;
  EXPECT_EQ(Format(f, {true, 64 * kMiB, 40 * kMiB}, {1, 2 * kMiB}),
            "pinscope: Bus error at 0x1000 inside shared-memory segment /seg (2 MiB): /dev/shm "
            "has 40 MiB free of 64 MiB, so the access lies past the end of the segment (was it "
            "shrunk by ftruncate?)\n");
  f.on_dev_shm = false;
  f.segment = "label";
  EXPECT_EQ(Format(f, {true, 64 * kMiB, 0}, {}),
            "pinscope: Bus error at 0x1000 inside memfd segment label (2 MiB): its memory could "
            "not be allocated (a memory or cgroup limit), or the access lies past the end of the "
            "segment\n");
  f.on_dev_shm = true;
  EXPECT_EQ(Format(f, {false, 0, 0}, {3, 6 * kMiB}),
            "pinscope: Bus error at 0x1000 inside shared-memory segment label (2 MiB): /dev/shm "
            "could not be read; this job maps 3 segments (6 MiB)\n");
}

TEST(ShmDiagnosis, FailedCall) {
  ShmFailure f;
  f.call = "posix_fallocate";
  f.segment = "/torch_1_2_3";
  f.segment_bytes = 12 * kMiB + kMiB / 2;
  EXPECT_EQ(Format(f, {true, 64 * kMiB, 2 * kMiB}, {5, 60 * kMiB}),
            "pinscope: posix_fallocate of 13 MiB for shared-memory segment /torch_1_2_3 failed "
            "with ENOSPC: /dev/shm is full: 64 MiB capacity, 62 MiB in use by 5 segments of this "
            "job (60 MiB mapped); start the container with --shm-size of at least 256m\n");
}

TEST(ShmDiagnosis, TruncatedToTheBuffer) {
  ShmFailure f;
  f.segment = "/x";
  char buf[40];
  size_t n = FormatShmDiagnosis(buf, sizeof buf, f, {true, kMiB, 0}, {});
  EXPECT_EQ(n, sizeof buf - 1);
  EXPECT_EQ(strlen(buf), n);
}

// --- job table ----------------------------------------------------------------

TEST(JobTable, DistinctLiveSegmentsAcrossProcesses) {
  shm::JobTable job;
  ASSERT_TRUE(job.Create());
  uint32_t me = static_cast<uint32_t>(getpid());
  job.Add(me, 0x1000, 5, 100, 4 * kMiB);
  job.Add(me, 0x9000, 5, 100, 8 * kMiB);  // the same segment mapped twice: counted once, largest
  job.Add(me, 0x2000, 5, 101, kMiB);
  // A process that is gone does not count.
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  job.Add(static_cast<uint32_t>(dead), 0x3000, 5, 102, 64 * kMiB);
  JobUsage u = job.Usage();
  EXPECT_EQ(u.segments, 2u);
  EXPECT_EQ(u.bytes, 9 * kMiB);
  // A forked child's mapping is seen by the parent (the table is shared).
  pid_t child = fork();
  if (child == 0) {
    job.Add(static_cast<uint32_t>(getpid()), 0x4000, 5, 103, 2 * kMiB);
    raise(SIGSTOP);  // stay alive until the parent has looked
    _exit(0);
  }
  int st;
  ASSERT_EQ(waitpid(child, &st, WUNTRACED), child);
  u = job.Usage();
  EXPECT_EQ(u.segments, 3u);
  EXPECT_EQ(u.bytes, 11 * kMiB);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  job.Remove(me, 5, 100);  // one of the two mappings of 100
  job.Remove(me, 5, 101);
  job.Remove(me, 5, 999);  // not there: nothing happens
  u = job.Usage();
  EXPECT_EQ(u.segments, 1u);
  EXPECT_EQ(u.bytes, 8 * kMiB);  // the first slot of 100 went, the 8 MiB one is left
  EXPECT_TRUE(job.FirstDiagnosis());
  EXPECT_FALSE(job.FirstDiagnosis());
}

// The job's names by identity (what a process mapping a received fd takes
// instead of readlink): the newest of the last kNames, across fork.
TEST(JobTable, NamesOfTheNewestSegmentsByIdentity) {
  shm::JobTable job;
  ASSERT_TRUE(job.Create());
  char out[ShmMapping::kNameCap];
  EXPECT_FALSE(job.FindName(5, 100, out, sizeof out));
  job.PublishName(5, 100, "/torch_1_a");
  job.PublishName(5, 101, "/torch_1_b");
  ASSERT_TRUE(job.FindName(5, 100, out, sizeof out));
  EXPECT_STREQ(out, "/torch_1_a");
  EXPECT_FALSE(job.FindName(6, 100, out, sizeof out));  // another device
  job.PublishName(5, 100, "/torch_1_c");                // the inode again: the newest wins
  ASSERT_TRUE(job.FindName(5, 100, out, sizeof out));
  EXPECT_STREQ(out, "/torch_1_c");
  // Cut to the caller's room, and to kNameCap - 1 where published longer.
  char small[6];
  ASSERT_TRUE(job.FindName(5, 101, small, sizeof small));
  EXPECT_STREQ(small, "/torc");
  std::string longest(200, 'x');
  job.PublishName(5, 102, longest.c_str());
  ASSERT_TRUE(job.FindName(5, 102, out, sizeof out));
  EXPECT_EQ(std::string(out), longest.substr(0, ShmMapping::kNameCap - 1));
  // A child's name is seen by the parent (the table is shared).
  pid_t child = fork();
  if (child == 0) {
    job.PublishName(5, 200, "/torch_child");
    _exit(0);
  }
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  ASSERT_TRUE(job.FindName(5, 200, out, sizeof out));
  EXPECT_STREQ(out, "/torch_child");
  // Only the last kNames: 101 is gone after kNames more.
  for (uint64_t i = 0; i < shm::JobTable::kNames; ++i) job.PublishName(7, 1000 + i, "/n");
  EXPECT_FALSE(job.FindName(5, 101, out, sizeof out));
  EXPECT_TRUE(job.FindName(7, 1000, out, sizeof out));
  // Nothing without a name or an inode.
  job.PublishName(5, 300, "");
  job.PublishName(5, 0, "/zero");
  EXPECT_FALSE(job.FindName(5, 300, out, sizeof out));
  EXPECT_FALSE(job.FindName(5, 0, out, sizeof out));
}

// --- entry points against the real /dev/shm ------------------------------------

class ShmCoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::TraceDir();
    Registry().ResetForTest();
    snprintf(name_, sizeof name_, "/pinscope_core_%d", static_cast<int>(getpid()));
  }
  char name_[64];
};

TEST_F(ShmCoreTest, DevicesFound) {
  struct stat st;
  ASSERT_EQ(stat("/dev/shm", &st), 0);
  EXPECT_EQ(shm::ShmDevice(), st.st_dev);
  EXPECT_NE(shm::MemfdDevice(), 0u);
}

TEST_F(ShmCoreTest, SegmentLifeIsRecorded) {
  int fd = shm::ShmOpen(name_, O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  EXPECT_TRUE(shm::FdTracked(fd));
  ASSERT_EQ(shm::Ftruncate(fd, 2 * kMiB, true), 0);
  ASSERT_EQ(shm::PosixFallocate(fd, 0, 2 * kMiB, false), 0);
  void* p = shm::Mmap(nullptr, 2 * kMiB, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0, true);
  ASSERT_NE(p, MAP_FAILED);
  ShmMapping m;
  ASSERT_TRUE(Registry().FindMappingContaining(reinterpret_cast<uintptr_t>(p) + kMiB, &m));
  EXPECT_STREQ(m.name, name_);
  EXPECT_EQ(m.size, 2 * kMiB);
  // The SIGBUS handler is in place now, and its diagnosis would name the segment.
  struct sigaction sa;
  ASSERT_EQ(sigaction(SIGBUS, nullptr, &sa), 0);
  EXPECT_EQ(sa.sa_sigaction, SigbusHandler);
  char text[768];
  ASSERT_GT(FormatSigbusDiagnosis(reinterpret_cast<uintptr_t>(p) + 5, text, sizeof text), 0u);
  EXPECT_NE(strstr(text, name_), nullptr) << text;
  EXPECT_EQ(FormatSigbusDiagnosis(0x10, text, sizeof text), 0u);
  ASSERT_EQ(shm::ShmUnlink(name_), 0);
  ASSERT_EQ(shm::Munmap(p, 2 * kMiB), 0);
  EXPECT_FALSE(Registry().FindMappingContaining(reinterpret_cast<uintptr_t>(p), &m));
  ASSERT_EQ(shm::Close(fd), 0);
  EXPECT_FALSE(shm::FdTracked(fd));

  std::vector<trace::ShmOp> ops;
  std::string me = name_;
  e2e::ProcessTrace own = testing::ReadOwnTrace();
  for (const auto* pk : own.Shm())
    if (pk->shm().name() == me) ops.push_back(pk->shm().op());
  // The munmap's end after the unmap (SHM_UNMAP_DONE: its duration), of
  // the same mapping, at the same address and page-rounded size.
  EXPECT_EQ(ops,
            (std::vector<trace::ShmOp>{trace::SHM_CREATE, trace::SHM_TRUNCATE, trace::SHM_FALLOCATE,
                                       trace::SHM_MAP, trace::SHM_UNLINK, trace::SHM_UNMAP,
                                       trace::SHM_UNMAP_DONE, trace::SHM_CLOSE}));
  for (const auto* pk : own.Shm()) {
    if (pk->shm().name() != me || pk->shm().op() != trace::SHM_UNMAP_DONE) continue;
    EXPECT_EQ(pk->shm().address(), reinterpret_cast<uintptr_t>(p));
    EXPECT_EQ(pk->shm().size(), 2 * kMiB);
    EXPECT_GE(pk->shm().end_ns(), pk->timestamp_ns());
  }
}

// pinscope's own time in a shared-memory hook (Counters.hook_ns): its whole
// slow path, but not what runs aside (the real call, pinning's and the
// pool's work). Here 200 ms aside and a 5 ms spin of its own, one record.
TEST_F(ShmCoreTest, OwnTimeLeavesOutWhatRunsAside) {
  const OwnCost before = GetOwnCost();
  {
    shm::ShmOwnTime own;
    shm::Aside([] { usleep(200 * 1000); });
    const uint64_t t0 = MonoNs();
    while (MonoNs() - t0 < 5000000) {
    }
    shm::Identity id;
    shm::Record(fields::kShmOpen, id, -1, 0, 0, 0, 0, 0, 0, t0);
    // errno and results pass through
    errno = 0;
    EXPECT_EQ(shm::Aside([] {
                errno = EINTR;
                return 7;
              }),
              7);
    EXPECT_EQ(errno, EINTR);
  }
  const OwnCost after = GetOwnCost();
  EXPECT_EQ(after.hook_calls - before.hook_calls, 1u);  // the record
  const uint64_t ns = after.hook_ns - before.hook_ns;
  EXPECT_GE(ns, 5000000u);
  EXPECT_LT(ns, 150000000u);  // the 200 ms aside are not in it
}

TEST_F(ShmCoreTest, OtherFilesAndAnonymousMemoryPassThrough) {
  char path[] = "/tmp/pinscope-core-file-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  unlink(path);
  ASSERT_EQ(ftruncate(fd, kMiB), 0);
  EXPECT_FALSE(shm::FdTracked(fd));
  void* p = shm::Mmap(nullptr, kMiB, PROT_READ, MAP_SHARED, fd, 0, false);
  ASSERT_NE(p, MAP_FAILED);
  void* q = shm::Mmap(nullptr, kMiB, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0, false);
  ASSERT_NE(q, MAP_FAILED);
  EXPECT_EQ(Registry().live_mappings(), 0u);
  EXPECT_EQ(shm::Munmap(p, kMiB), 0);
  EXPECT_EQ(shm::Munmap(q, kMiB), 0);
  EXPECT_EQ(shm::Close(fd), 0);
  errno = 0;
  EXPECT_EQ(shm::Close(fd), -1);  // the real close's errno reaches the caller
  EXPECT_EQ(errno, EBADF);
}

TEST_F(ShmCoreTest, MemfdIsRecognized) {
  int fd = shm::MemfdCreate("core-memfd", 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(shm::Ftruncate(fd, kMiB, false), 0);
  void* p = shm::Mmap(nullptr, kMiB, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0, false);
  ASSERT_NE(p, MAP_FAILED);
  ShmMapping m;
  ASSERT_TRUE(Registry().FindMappingContaining(reinterpret_cast<uintptr_t>(p), &m));
  EXPECT_TRUE(m.flags & kFlagMemfd);
  EXPECT_STREQ(m.name, "core-memfd");
  // An untracked duplicate is still recognized by its filesystem, and named
  // from its /proc link.
  int dup_fd = dup(fd);
  void* q = shm::Mmap(nullptr, kMiB, PROT_READ, MAP_SHARED, dup_fd, 0, false);
  ASSERT_NE(q, MAP_FAILED);
  ASSERT_TRUE(Registry().FindMappingContaining(reinterpret_cast<uintptr_t>(q), &m));
  EXPECT_STREQ(m.name, "core-memfd");
  EXPECT_TRUE(m.flags & kFlagMemfd);
  shm::Munmap(p, kMiB);
  shm::Munmap(q, kMiB);
  shm::Close(dup_fd);
  shm::Close(fd);
  EXPECT_EQ(Registry().live_mappings(), 0u);
}

}  // namespace
}  // namespace pinscope::shim
