// A PyTorch DataLoader (torch on the CPU) under LD_PRELOAD=libpinscope.so,
// with num_workers 0, 2 and 4: one trace per process (the main process and
// exactly one ORIGIN_FORK file per worker), every batch an shm segment of
// exactly the batch's bytes that a worker created (shm_open O_CREAT|O_EXCL,
// ftruncate, mmap, unlink) and the main process mapped (same st_dev/st_ino),
// and the batch copies made with posix_memalign. What torch 1.13 does was
// read with strace: no posix_fallocate, the worker's feeder thread unmaps
// and closes its segment after sending the fd. Then a /dev/shm of 32 MiB
// (root: unshare -m) that the batches overflow: the job fails and
// pinscope's diagnosis names the capacity and the job's use.
#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>

#include <set>

#include "e2e_util.h"
#include "torch_fixture.h"

namespace pinscope::e2e {
namespace {

constexpr uint64_t kBatchBytes = 16ull * 3 * 64 * 64 * 4;  // 786432
constexpr int kBatches = 8;

// Runs dataloader_job.py under libpinscope.so; skips without torch.
class DataLoaderTest : public TorchJobTest {
 protected:
  DataLoaderTest() : TorchJobTest("dataloader") {}
  // `preload_after`: a library loaded after libpinscope.so (as `pinscope
  // run` orders the caller's own LD_PRELOAD).
  RunResult RunJob(const std::vector<std::string>& args, const std::string& prefix = "",
                   const std::string& preload_after = "") {
    std::vector<std::string> argv;
    if (!prefix.empty()) argv = {"unshare", "-m", "sh", "-c", prefix + " && exec \"$0\" \"$@\""};
    argv.push_back(PINSCOPE_PYTHON);
    argv.push_back(DATALOADER_JOB);
    argv.insert(argv.end(), args.begin(), args.end());
    // 512 KiB: the 768 KiB batches are recorded, the 48 KiB samples not.
    return RunCommand(
        argv,
        {PreloadPinscope(PINSCOPE_LIB, preload_after), "PINSCOPE_OUT=" + dir_.path() + "/run",
         "PINSCOPE_TRACE_MIN=512K", "PINSCOPE_STACKS=0", "PINSCOPE_CUPTI=0"},
        dir_.path());
  }
  std::map<uint32_t, ProcessTrace> Traces() {
    std::string error;
    auto run = ReadRun(dir_.path() + "/run", &error);
    EXPECT_EQ(error, "");
    return run;
  }
};

class DataLoaderJob : public DataLoaderTest, public ::testing::WithParamInterface<int> {};

using Identity = std::pair<uint64_t, uint64_t>;  // st_dev, st_ino

// Batch-sized storage from posix_memalign(64) in the main process: the clone
// of a batch (with no workers, also the collated batch itself).
bool IsBatchClone(const trace::TracePacket& p) {
  return p.has_alloc() && p.alloc().api() == trace::POSIX_MEMALIGN &&
         p.alloc().size() == kBatchBytes && p.alloc().alignment() == 64;
}

TEST_P(DataLoaderJob, OneTracePerProcessAndEveryBatchSegment) {
  const int workers = GetParam();
  RunResult r = RunJob({"--workers", std::to_string(workers), "--batch", "16", "--batches",
                        std::to_string(kBatches), "--shape", "3,64,64", "--clone"});
  ASSERT_TRUE(r.Exited(0)) << r.err;
  EXPECT_EQ(r.out, "batches 8\n");
  auto run = Traces();
  ASSERT_EQ(run.size(), static_cast<size_t>(1 + workers));
  uint32_t main_pid = 0;
  int forks = 0;
  for (const auto& [pid, t] : run) {
    if (t.header.origin() == trace::ORIGIN_ROOT) main_pid = pid;
    if (t.header.origin() == trace::ORIGIN_FORK) ++forks;
  }
  ASSERT_NE(main_pid, 0u);
  EXPECT_EQ(forks, workers);
  const ProcessTrace& main = run.at(main_pid);
  ASSERT_NE(main.Exit(), nullptr);
  EXPECT_EQ(main.Exit()->how(), trace::ProcessExit::EXIT);

  // Batch-sized storage from posix_memalign(64) in the main process: the
  // clone of each batch, and with no workers the collated batch itself.
  auto memalign = main.Select(IsBatchClone);
  EXPECT_EQ(memalign.size(), static_cast<size_t>(workers == 0 ? 2 * kBatches : kBatches));

  // Segments: created, sized, mapped and unlinked by a worker.
  std::set<Identity> created;
  for (const auto& [pid, t] : run) {
    if (pid == main_pid) continue;
    SCOPED_TRACE(t.path);
    EXPECT_EQ(t.header.ppid(), main_pid);
    EXPECT_EQ(t.header.parent_pid(), main_pid);
    EXPECT_EQ(t.header.run_id(), main.header.run_id());
    ASSERT_NE(t.Exit(), nullptr);
    EXPECT_EQ(t.Exit()->how(), trace::ProcessExit::UNDERSCORE_EXIT);
    EXPECT_TRUE(t.Allocs().empty());  // workers collate straight into shm
    std::map<Identity, std::vector<trace::ShmOp>> life;
    for (const auto* p : t.Shm()) {
      const auto& s = p->shm();
      EXPECT_EQ(s.error(), 0) << Describe(*p);
      EXPECT_EQ(s.name().rfind("/torch_" + std::to_string(pid) + "_", 0), 0u) << s.name();
      EXPECT_FALSE(s.driver_internal());
      if (s.op() == trace::SHM_CREATE) {
        EXPECT_EQ(s.flags() & (O_CREAT | O_EXCL), O_CREAT | O_EXCL);
      }
      if (s.op() == trace::SHM_TRUNCATE || s.op() == trace::SHM_FALLOCATE ||
          s.op() == trace::SHM_MAP || s.op() == trace::SHM_UNMAP) {
        EXPECT_EQ(s.size(), kBatchBytes) << Describe(*p);
      }
      life[{s.device(), s.inode()}].push_back(s.op());
    }
    for (auto [id, ops] : life) {
      // shm_open(O_CREAT|O_EXCL), ftruncate, mmap, shm_unlink in the worker's
      // main thread, then close and munmap once the fd was sent. torch 2.x
      // (the GPU machine, PINSCOPE_TEST_PYTHON) adds posix_fallocate after
      // ftruncate (facts §2).
      if (ops.size() > 2 && ops[2] == trace::SHM_FALLOCATE) ops.erase(ops.begin() + 2);
      // The munmap's end (SHM_UNMAP_DONE, its duration) after the unmap.
      std::vector<trace::ShmOp> want = {trace::SHM_CREATE,    trace::SHM_TRUNCATE, trace::SHM_MAP,
                                        trace::SHM_UNLINK,    trace::SHM_CLOSE,    trace::SHM_UNMAP,
                                        trace::SHM_UNMAP_DONE};
      EXPECT_EQ(ops, want);
      EXPECT_TRUE(created.insert(id).second);
    }
  }
  EXPECT_EQ(created.size(), static_cast<size_t>(workers == 0 ? 0 : kBatches));

  // The main process maps each segment it received, once, whole.
  std::set<Identity> mapped;
  for (const auto* p : main.Shm()) {
    const auto& s = p->shm();
    if (s.op() != trace::SHM_MAP) continue;
    EXPECT_EQ(s.size(), kBatchBytes);
    EXPECT_EQ(s.offset(), 0u);
    EXPECT_EQ(s.name().rfind("/torch_", 0), 0u) << s.name();
    EXPECT_TRUE(mapped.insert({s.device(), s.inode()}).second);
  }
  EXPECT_EQ(mapped, created);
}

INSTANTIATE_TEST_SUITE_P(Workers, DataLoaderJob, ::testing::Values(0, 2, 4),
                         [](const auto& info) { return "workers" + std::to_string(info.param); });

// A faster allocator preloaded by the user (`pinscope run` keeps it after
// libpinscope.so). jemalloc defines malloc and C++ operator new/delete but
// none of glibc's __libc_* names: pinscope calls jemalloc's functions
// (taking glibc's instead would pair glibc's malloc with jemalloc's
// operator delete: the job died in libproj's start-up with "free():
// invalid pointer") and filters frees by its malloc_usable_size.
// tcmalloc replaces the __libc_* names too. Either way the job runs and
// its batch clones are recorded exactly as with glibc.
class PreloadedAllocator : public DataLoaderTest,
                           public ::testing::WithParamInterface<std::string> {};

TEST_P(PreloadedAllocator, BatchClonesAreRecorded) {
  const bool jemalloc = GetParam() == "jemalloc";
  const std::string lib = jemalloc ? JEMALLOC_LIB : TCMALLOC_LIB;
  if (lib.empty())
    GTEST_SKIP() << "no " << (jemalloc ? "libjemalloc2" : "libtcmalloc-minimal4")
                 << " (tools/deps.sh installs it)";
  RunResult r = RunJob({"--workers", "2", "--batch", "16", "--batches", "8", "--clone"}, "", lib);
  ASSERT_TRUE(r.Exited(0)) << r.err;
  EXPECT_EQ(r.out, "batches 8\n");
  EXPECT_EQ(r.err, "");
  int maps = 0, clones = 0, frees = 0;
  std::set<uint64_t> clone_addresses;
  for (const auto& [pid, t] : Traces()) {
    if (t.header.origin() != trace::ORIGIN_ROOT) continue;
    for (const auto* p : t.Shm()) maps += p->shm().op() == trace::SHM_MAP;
    for (const auto* p : t.Allocs()) {
      if (IsBatchClone(*p)) {
        ++clones;
        clone_addresses.insert(p->alloc().address());
      }
      if (p->has_free() && clone_addresses.count(p->free().address())) ++frees;
    }
  }
  EXPECT_EQ(maps, 8);
  EXPECT_EQ(clones, 8);
  EXPECT_EQ(frees, 8);  // each clone's free reached the registry
}
INSTANTIATE_TEST_SUITE_P(Allocators, PreloadedAllocator, ::testing::Values("jemalloc", "tcmalloc"),
                         [](const auto& info) { return info.param; });

class SmallShmDataLoader : public DataLoaderTest {};

TEST_F(SmallShmDataLoader, OverflowFailsWithTheDiagnosis) {
  TempDir probe("probe");
  if (!RunCommand({"unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=32m tmpfs /dev/shm"}, {},
                  probe.path())
           .Exited(0))
    GTEST_SKIP() << "needs root for unshare -m and mount -t tmpfs";
  // 12 MiB batches, all kept alive by the main process (--hold): the third
  // one cannot fit in 32 MiB whatever the timing. (Without --hold, how many
  // are alive at once depends on how fast the main process consumes them,
  // and a fast machine got through all 8.)
  RunResult r = RunJob(
      {"--workers", "2", "--batch", "16", "--batches", "8", "--shape", "3,256,256", "--hold"},
      "mount -t tmpfs -o size=32m tmpfs /dev/shm");
  EXPECT_FALSE(r.Exited(0));
  // torch 1.13 sizes segments with ftruncate only (sparse), so the worker
  // that writes past the space left gets SIGBUS; torch 2.x calls
  // posix_fallocate, which fails with ENOSPC. Either way: one diagnosis.
  size_t at = r.err.find("pinscope: Bus error at 0x");
  const bool sigbus_path = at != std::string::npos;
  if (!sigbus_path)
    at = r.err.find("pinscope: posix_fallocate of 12 MiB for shared-memory segment");
  ASSERT_NE(at, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("pinscope: Bus error", at + 1), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("pinscope: posix_fallocate", at + 1), std::string::npos) << r.err;
  std::string line = r.err.substr(at, r.err.find('\n', at) - at);
  if (sigbus_path) {
    EXPECT_NE(line.find(" inside shared-memory segment /torch_"), std::string::npos) << line;
    EXPECT_NE(line.find(" (12 MiB): /dev/shm is full: 32 MiB capacity, 32 MiB in use by "),
              std::string::npos)
        << line;
    // How many of the job's segments are alive when the page faults
    // depends on timing (1 or more): "1 segment" or "N segments".
    EXPECT_TRUE(line.find(" segments of this job (") != std::string::npos ||
                line.find(" by 1 segment of this job (") != std::string::npos)
        << line;
  } else {
    EXPECT_NE(line.find(" /torch_"), std::string::npos) << line;
    EXPECT_NE(line.find(" failed with ENOSPC: /dev/shm is full: 32 MiB capacity, "),
              std::string::npos)
        << line;
  }
  EXPECT_NE(line.find("; start the container with --shm-size of at least "), std::string::npos)
      << line;
  // And in the trace of the worker that met it.
  int events = 0;
  for (const auto& [pid, t] : Traces()) {
    for (const auto* p : t.Shm()) {
      const auto& s = p->shm();
      if (sigbus_path ? s.op() == trace::SHM_SIGBUS
                      : (s.op() == trace::SHM_FALLOCATE && s.error() == ENOSPC)) {
        ++events;
        EXPECT_EQ(s.size(), 12ull << 20);
        EXPECT_EQ(t.header.origin(), trace::ORIGIN_FORK);
      }
    }
  }
  EXPECT_GE(events, 1);
}

}  // namespace
}  // namespace pinscope::e2e
