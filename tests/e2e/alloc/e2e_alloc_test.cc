// End-to-end: the programs in programs/ run under LD_PRELOAD=libpinscope.so
// and the trace each process wrote must hold exactly the events the program
// says it caused (expect.<pid>), nothing of its parent's, with the right
// process header; shared memory running out must produce pinscope's
// diagnosis. Built and run by ctest; the small-/dev/shm cases need root
// (unshare -m + mount) and are skipped without it.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "e2e_util.h"

namespace pinscope::e2e {
namespace {

constexpr uint64_t kMiB = 1ull << 20;

std::string Program(const std::string& name) {
  return std::string(E2E_BIN_DIR) + "/e2e_alloc_" + name;
}

class E2eAlloc : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    run_ = dir_.path() + "/run";
  }
  void TearDown() override {
    if (HasFailure()) {
      dir_.Keep();
      std::cerr << "kept " << dir_.path() << "\n";
    }
  }
  // `preload_after`: a library loaded after libpinscope.so.
  RunResult RunPreloaded(const std::vector<std::string>& argv, std::vector<std::string> env = {},
                         const std::string& preload_after = "") {
    env.push_back(PreloadPinscope(PINSCOPE_LIB, preload_after));
    env.push_back("PINSCOPE_OUT=" + run_);
    env.push_back("PINSCOPE_E2E_DIR=" + dir_.path());
    env.push_back("PINSCOPE_CUPTI=0");
    RunResult r = RunCommand(argv, env, dir_.path());
    if (!r.err.empty()) std::cerr << "stderr of " << argv[0] << ":\n" << r.err;
    return r;
  }
  // `pinscope report --json` of the run folder, as a user would ask.
  RunResult Report() {
    return RunCommand({PINSCOPE_BIN, "report", "--json", run_},
                      {"PINSCOPE_CALIBRATION=/nonexistent/calibration.json"}, dir_.path());
  }
  std::map<uint32_t, ProcessTrace> Traces() {
    std::string error;
    auto run = ReadRun(run_, &error);
    EXPECT_EQ(error, "");
    return run;
  }
  std::vector<std::vector<std::string>> ExpectFor(uint32_t pid) {
    return ReadLines(dir_.path() + "/expect." + std::to_string(pid));
  }
  // Expected lines of one kind ("alloc"/"free" or "shm"), rendered.
  std::vector<std::string> Expected(uint32_t pid, bool shm) {
    std::vector<std::string> out;
    for (const auto& words : ExpectFor(pid)) {
      bool is_shm = words[0] == "shm";
      bool is_alloc = words[0] == "alloc" || words[0] == "free";
      if (shm ? is_shm : is_alloc) out.push_back(Join(words));
    }
    return out;
  }
  static std::vector<std::string> Rendered(const std::vector<const trace::TracePacket*>& packets) {
    std::vector<std::string> out;
    for (const auto* p : packets) out.push_back(Describe(*p));
    return out;
  }
  static uint64_t Count(const std::vector<std::vector<std::string>>& lines,
                        const std::string& key) {
    for (const auto& w : lines)
      if (w.size() == 2 && w[0] == key) return std::stoull(w[1]);
    return ~0ull;
  }

  TempDir dir_{"e2e-alloc"};
  std::string run_;
};

// Every HostAlloc is followed by exactly one HostFree of its address, and
// nothing is freed that was not allocated. Returns the number of pairs.
size_t CheckPairs(const std::vector<const trace::TracePacket*>& events) {
  std::set<uint64_t> live;
  size_t pairs = 0;
  for (const auto* p : events) {
    if (p->has_alloc()) {
      EXPECT_TRUE(live.insert(p->alloc().address()).second) << "allocated twice: " << Describe(*p);
    } else if (p->has_free()) {
      EXPECT_EQ(live.erase(p->free().address()), 1u) << "freed, never allocated: " << Describe(*p);
      ++pairs;
    }
  }
  EXPECT_TRUE(live.empty()) << live.size() << " recorded blocks never freed";
  return pairs;
}

// pinscope's own cost (the last Counters packet): every recorded event's
// hook is counted, so its calls are the events, exactly; nullptr-safe.
uint64_t HookCalls(const ProcessTrace& t, uint64_t* ns) {
  const trace::Counters* last = nullptr;
  for (const auto& p : t.packets)
    if (p.has_counters()) last = &p.counters();
  *ns = last ? last->hook_ns() : 0;
  return last ? last->hook_calls() : ~0ull;
}

// The last Counters packet's hook calls of one kind (Counters.hook_kinds).
uint64_t KindCalls(const ProcessTrace& t, trace::HookKind kind) {
  const trace::Counters* last = nullptr;
  for (const auto& p : t.packets)
    if (p.has_counters()) last = &p.counters();
  uint64_t calls = 0;
  if (last)
    for (const trace::HookKindCost& h : last->hook_kinds())
      if (h.kind() == kind) calls += h.calls();
  return calls;
}

TEST_F(E2eAlloc, EveryEntryPointRecordsExactly) {
  RunResult r = RunPreloaded({Program("alloc_apis")}, {"PINSCOPE_TRACE_MIN=1M"});
  ASSERT_TRUE(r.Exited(0)) << r.err;
  auto run = Traces();
  ASSERT_EQ(run.size(), 1u);
  const ProcessTrace& t = run.begin()->second;
  EXPECT_EQ(t.header.origin(), trace::ORIGIN_ROOT);
  EXPECT_EQ(t.header.config().trace_min_bytes(), kMiB);
  std::vector<std::string> expected = Expected(t.header.pid(), false);
  ASSERT_GT(expected.size(), 30u);
  EXPECT_EQ(Rendered(t.Allocs()), expected);
  ASSERT_NE(t.Exit(), nullptr);
  EXPECT_EQ(t.Exit()->how(), trace::ProcessExit::EXIT);
  // Each recorded allocation and free is one hook in pinscope's own cost
  // (since the twentieth session; before, only copies and waits were).
  uint64_t ns = 0;
  EXPECT_EQ(HookCalls(t, &ns), t.Allocs().size());
  EXPECT_EQ(KindCalls(t, trace::HOOK_ALLOC), t.Allocs().size());
  EXPECT_GT(ns, 0u);
}

// A library after pinscope that replaces part of glibc's allocator names
// (the sanitizer runtimes export __libc_memalign and no other __libc_*):
// pinscope calls that library's own functions, consistently, instead of
// freeing its blocks with glibc's free (the job aborted), and records
// through them.
TEST_F(E2eAlloc, PartialAllocatorReplacementGetsEveryCall) {
  RunResult r =
      RunPreloaded({Program("partial_alloc_job")}, {"PINSCOPE_TRACE_MIN=1M"}, PARTIAL_ALLOCATOR);
  ASSERT_TRUE(r.Exited(0)) << r.err;
  EXPECT_EQ(r.err, "");
  // 3 rounds of 7 blocks of 2-5 MiB (a strdup and the arena start-up too),
  // all from the double.
  ASSERT_EQ(r.out.rfind("blocks ", 0), 0u) << r.out;
  EXPECT_GE(std::stoul(r.out.substr(7)), 24u) << r.out;
  auto run = Traces();
  ASSERT_EQ(run.size(), 1u);
  const ProcessTrace& t = run.begin()->second;
  std::map<trace::AllocApi, int> apis;
  for (const auto* p : t.Allocs())
    if (p->has_alloc()) ++apis[p->alloc().api()];
  EXPECT_EQ(apis[trace::POSIX_MEMALIGN], 3);
  EXPECT_EQ(apis[trace::MALLOC], 3);
  EXPECT_EQ(apis[trace::CALLOC], 3);
  EXPECT_EQ(apis[trace::REALLOC], 3);
  EXPECT_EQ(apis[trace::ALIGNED_ALLOC], 3);
  EXPECT_EQ(apis[trace::MEMALIGN], 3);
  EXPECT_EQ(apis[trace::VALLOC], 3);
  EXPECT_EQ(apis.size(), 7u);
  EXPECT_EQ(CheckPairs(t.Allocs()), 21u);
}

TEST_F(E2eAlloc, ThresholdFollowsTheEnvironment) {
  // With a 64 KiB threshold the 1 MiB - 1 block is recorded too.
  RunResult r = RunPreloaded({Program("alloc_apis")}, {"PINSCOPE_TRACE_MIN=64K"});
  ASSERT_TRUE(r.Exited(0)) << r.err;
  auto run = Traces();
  ASSERT_EQ(run.size(), 1u);
  const ProcessTrace& t = run.begin()->second;
  EXPECT_EQ(t.header.config().trace_min_bytes(), 64u * 1024);
  auto allocs = t.Allocs();
  auto below = t.Select([](const trace::TracePacket& p) {
    return p.has_alloc() && p.alloc().size() == kMiB - 1 && p.alloc().api() == trace::MALLOC;
  });
  EXPECT_EQ(below.size(), 1u);
  // Everything the 1 MiB run records, and more.
  EXPECT_GT(allocs.size(), Expected(t.header.pid(), false).size());
  CheckPairs(allocs);
}

class StressThreads : public E2eAlloc, public ::testing::WithParamInterface<std::string> {};

// With glibc's allocator, and with jemalloc or tcmalloc loaded after
// pinscope (as `pinscope run` orders a user's LD_PRELOAD): jemalloc
// defines malloc but none of glibc's __libc_* names, so pinscope calls its
// functions and filters frees by its malloc_usable_size; tcmalloc replaces
// the __libc_* names too (the same filter: no glibc chunk header there).
TEST_P(StressThreads, FixedSeed) {
  const std::string lib = GetParam() == "jemalloc"   ? JEMALLOC_LIB
                          : GetParam() == "tcmalloc" ? TCMALLOC_LIB
                                                     : "";
  if (GetParam() != "glibc" && lib.empty())
    GTEST_SKIP() << "no " << GetParam() << " (tools/deps.sh installs it)";
  // 4 rounds of 8 threads created and destroyed, 2000 operations each.
  RunResult r = RunPreloaded({Program("alloc_stress"), "42", "4", "8", "2000"},
                             {"PINSCOPE_TRACE_MIN=1M", "PINSCOPE_STACKS=0"}, lib);
  ASSERT_TRUE(r.Exited(0)) << r.err;
  EXPECT_EQ(r.err, "");
  auto run = Traces();
  ASSERT_EQ(run.size(), 1u);
  const ProcessTrace& t = run.begin()->second;
  uint64_t large = Count(ExpectFor(t.header.pid()), "count");
  ASSERT_NE(large, ~0ull);
  ASSERT_GT(large, 100u);
  auto events = t.Allocs();
  size_t allocs = std::count_if(events.begin(), events.end(),
                                [](const trace::TracePacket* p) { return p->has_alloc(); });
  EXPECT_EQ(allocs, large);
  EXPECT_EQ(CheckPairs(events), large);
  std::set<uint32_t> tids;
  for (const auto* p : events) tids.insert(p->tid());
  EXPECT_GE(tids.size(), 8u);  // events come from the worker threads
  ASSERT_NE(t.Exit(), nullptr);
  EXPECT_EQ(t.Exit()->dropped_events(), 0u);
}
INSTANTIATE_TEST_SUITE_P(Allocators, StressThreads,
                         ::testing::Values("glibc", "jemalloc", "tcmalloc"),
                         [](const auto& info) { return info.param; });

TEST_F(E2eAlloc, ForkExecAndUnderscoreExit) {
  constexpr int kQuick = 10;
  RunResult r = RunPreloaded({Program("fork_exec"), std::to_string(kQuick)},
                             {"PINSCOPE_TRACE_MIN=1M", "PINSCOPE_STACKS=0"});
  ASSERT_TRUE(r.Exited(0)) << r.err;
  auto run = Traces();
  // The parent, 10 quick children, the child that frees inherited blocks,
  // and the exec'd child.
  ASSERT_EQ(run.size(), static_cast<size_t>(kQuick + 3));
  uint32_t parent = 0;
  for (const auto& [pid, t] : run)
    if (t.header.origin() == trace::ORIGIN_ROOT) parent = pid;
  ASSERT_NE(parent, 0u);
  int forks = 0, execs = 0;
  for (const auto& [pid, t] : run) {
    SCOPED_TRACE(t.path);
    if (pid == parent) continue;
    EXPECT_EQ(t.header.ppid(), parent);
    EXPECT_EQ(t.header.run_id(), run.at(parent).header.run_id());
    // A child's trace holds its own events only, exactly.
    EXPECT_EQ(Rendered(t.Allocs()), Expected(pid, false));
    ASSERT_NE(t.Exit(), nullptr);
    if (t.header.origin() == trace::ORIGIN_FORK) {
      ++forks;
      EXPECT_EQ(t.header.parent_pid(), parent);
      EXPECT_EQ(t.Exit()->how(), trace::ProcessExit::UNDERSCORE_EXIT);
    } else {
      ++execs;
      EXPECT_EQ(t.header.origin(), trace::ORIGIN_EXEC);
      ASSERT_GE(t.header.cmdline_size(), 2);
      EXPECT_EQ(t.header.cmdline(1), "exec-child");
      EXPECT_EQ(t.Exit()->how(), trace::ProcessExit::EXIT);
    }
  }
  EXPECT_EQ(forks, kQuick + 1);
  EXPECT_EQ(execs, 1);

  // The parent: its own blocks in order, plus the churn thread's pairs.
  const ProcessTrace& p = run.at(parent);
  auto events = p.Allocs();
  std::vector<std::string> own;
  size_t churn = 0;
  for (const auto* e : events) {
    if (e->has_alloc() && e->alloc().size() == kMiB + kMiB / 2) {
      ++churn;
      continue;
    }
    if (e->has_alloc() || e->tid() == p.header.pid()) own.push_back(Describe(*e));
  }
  EXPECT_EQ(own, Expected(parent, false));
  EXPECT_EQ(churn, Count(ExpectFor(parent), "thread_allocs"));
  CheckPairs(events);
}

// PyTorch's DataLoader workers leave with _exit(0) from their SIGTERM
// handler (SA_NODEFER). The signal lands anywhere, often inside a recorded
// allocation with the trace writer's lock held; before the _exit hook
// told a signal handler apart, about 4 children in 100 hung there for ever
// (8 of 200 on the 2-core VM; on the H200, PyTorch's
// test_large_sampler_indices). Now none may, and a child's trace still
// ends with its exit where the writer's lock was free.
TEST_F(E2eAlloc, AnUnderscoreExitFromASignalHandlerNeverHangs) {
  constexpr int kChildren = 150;
  RunResult r = RunPreloaded({Program("sigterm_exit"), std::to_string(kChildren)},
                             {"PINSCOPE_TRACE_MIN=4K", "PINSCOPE_STACKS=0"});
  EXPECT_EQ(r.out, "children 150 hung 0\n");
  ASSERT_TRUE(r.Exited(0)) << r.err;
  // The header reaches the disk when the file is made, so a file is empty
  // only where the signal came inside that first write (as SIGKILL there
  // would leave it): the reader says so; every other file is whole.
  int empty = 0, files = 0;
  for (const auto& f : std::filesystem::directory_iterator(run_)) {
    ++files;
    if (std::filesystem::file_size(f.path()) == 0) ++empty;
  }
  EXPECT_EQ(files, kChildren + 1);
  std::string error;
  auto run = ReadRun(run_, &error);
  size_t problems = 0;
  for (size_t at = 0; (at = error.find(" does not start with a header; ", at)) != std::string::npos;
       ++at)
    ++problems;
  EXPECT_EQ(problems, static_cast<size_t>(empty)) << error;
  EXPECT_EQ(run.size() + empty, static_cast<size_t>(kChildren + 1));
  int children = 0, ended = 0;
  for (const auto& [pid, t] : run) {
    if (t.header.origin() != trace::ORIGIN_FORK) continue;
    ++children;
    if (t.Exit() == nullptr) continue;
    SCOPED_TRACE(t.path);
    EXPECT_EQ(t.Exit()->how(), trace::ProcessExit::UNDERSCORE_EXIT);
    EXPECT_EQ(t.Exit()->status(), 0);
    ++ended;
  }
  EXPECT_EQ(children + empty, kChildren);
  // The exit packet is lost only where the interrupted frame was writing
  // (it holds the compressor): none in 150 alone, 9 in 150 with three busy
  // loops on the 2-core VM; where it was appending, the exit is written
  // alone and the buffered events are lost.
  EXPECT_GE(ended, kChildren * 8 / 10);
  EXPECT_LE(empty, kChildren / 10);
}

// A thread's maps take a stack on its first 32, then on one in 64 (issue
// 16: a DataLoader's pin thread maps every batch tensor holding the GIL,
// which the training loop waits for); the segment's creation keeps its own.
// 200 maps on one thread: maps 0-31, 64, 128 and 192, exactly.
TEST_F(E2eAlloc, AThreadsMapsTakeAStackFirstThenOneIn64) {
  RunResult r = RunPreloaded({Program("shm_maps")});
  ASSERT_TRUE(r.Exited(0)) << r.err;
  auto run = Traces();
  ASSERT_EQ(run.size(), 1u);
  const ProcessTrace& t = run.begin()->second;
  std::vector<int> with_stack;
  int maps = 0, creations = 0;
  for (const auto* p : t.Shm()) {
    if (p->shm().name().rfind("/pinscope_e2e_maps_", 0) != 0) continue;
    if (p->shm().op() == trace::SHM_CREATE) creations += p->shm().stack_id() != 0;
    if (p->shm().op() != trace::SHM_MAP) continue;
    if (p->shm().stack_id() != 0) with_stack.push_back(maps);
    ++maps;
  }
  EXPECT_EQ(maps, 200);
  EXPECT_EQ(creations, 1);
  std::vector<int> expected;
  for (int i = 0; i < 32; ++i) expected.push_back(i);
  expected.insert(expected.end(), {64, 128, 192});
  EXPECT_EQ(with_stack, expected);
}

TEST_F(E2eAlloc, SharedMemoryEvents) {
  RunResult r = RunPreloaded({Program("shm_ops")});
  ASSERT_TRUE(r.Exited(0)) << r.err;
  auto run = Traces();
  ASSERT_EQ(run.size(), 2u);  // the program and the child that maps the received fd
  for (const auto& [pid, t] : run) {
    SCOPED_TRACE(t.path);
    std::vector<std::string> expected = Expected(pid, true);
    EXPECT_EQ(Rendered(t.Shm()), expected);
    // Each shared-memory event and recorded allocation is one hook in
    // pinscope's own cost.
    uint64_t ns = 0;
    EXPECT_EQ(HookCalls(t, &ns), t.Shm().size() + t.Allocs().size());
    EXPECT_GT(ns, 0u);
    // ... and counted as the kind it is.
    EXPECT_EQ(KindCalls(t, trace::HOOK_SHM), t.Shm().size());
    EXPECT_EQ(KindCalls(t, trace::HOOK_ALLOC), t.Allocs().size());
    // A call stack where a segment is made, opened or mapped; none on the
    // ops that follow from those (issue 16: a stack costs microseconds).
    size_t with_stack = 0;
    for (const auto* p : t.Shm()) {
      const trace::ShmOp op = p->shm().op();
      const bool site = op == trace::SHM_CREATE || op == trace::SHM_OPEN ||
                        op == trace::MEMFD_CREATE || op == trace::SHM_MAP;
      EXPECT_EQ(p->shm().stack_id() != 0, site) << trace::ShmOp_Name(op);
      with_stack += site;
      // The thread's usage on a creation only (two system calls a reading).
      EXPECT_EQ(p->shm().has_usage(), op == trace::SHM_CREATE) << trace::ShmOp_Name(op);
    }
    EXPECT_GE(with_stack, 1u);
    if (t.header.origin() == trace::ORIGIN_FORK) {
      // The maps of the two received fds, their unmaps and the unmaps' ends.
      EXPECT_EQ(expected.size(), 6u);
    } else {
      EXPECT_GT(expected.size(), 30u);
    }
  }
}

// --- /dev/shm too small ------------------------------------------------------

// Runs a program in a private mount namespace whose /dev/shm is a 32 MiB tmpfs.
class SmallShm : public E2eAlloc {
 protected:
  static void SetUpTestSuite() {
    TempDir probe("probe");
    RunResult r =
        RunCommand({"unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=32m tmpfs /dev/shm"}, {},
                   probe.path());
    available_ = r.Exited(0);
    if (!available_) why_ = r.err;
  }
  void SetUp() override {
    E2eAlloc::SetUp();
    if (!available_)
      GTEST_SKIP() << "needs root for unshare -m and mount -t tmpfs (" << why_ << ")";
  }
  RunResult RunSmall(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {
        "unshare", "-m", "sh", "-c",
        "mount -t tmpfs -o size=32m tmpfs /dev/shm && exec \"$0\" \"$@\""};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunPreloaded(argv, {"PINSCOPE_STACKS=0"});
  }
  const ProcessTrace* Only() {
    traces_ = Traces();
    EXPECT_EQ(traces_.size(), 1u);
    return traces_.empty() ? nullptr : &traces_.begin()->second;
  }
  static size_t Occurrences(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  }
  static std::string Notice(const ProcessTrace& t, const std::string& code) {
    for (const auto& p : t.packets)
      if (p.has_notice() && p.notice().code() == code) return p.notice().text();
    return "<none>";
  }

  static bool available_;
  static std::string why_;
  std::map<uint32_t, ProcessTrace> traces_;
};
bool SmallShm::available_ = false;
std::string SmallShm::why_;

TEST_F(SmallShm, SigbusGivesOneDiagnosisThenTheDefaultAction) {
  RunResult r = RunSmall({Program("shm_full"), "sigbus", "64"});
  EXPECT_TRUE(r.Signaled(SIGBUS)) << "status " << r.status;
  const ProcessTrace* t = Only();
  ASSERT_NE(t, nullptr);
  std::string name = "/pinscope_full_" + std::to_string(t->header.pid());
  std::string tail = " inside shared-memory segment " + name +
                     " (64 MiB): /dev/shm is full: 32 MiB capacity, 32 MiB in use by 1 segment "
                     "of this job (64 MiB mapped); start the container with --shm-size of at "
                     "least 128m\n";
  EXPECT_EQ(Occurrences(r.err, "pinscope: Bus error at 0x"), 1u) << r.err;
  EXPECT_EQ(Occurrences(r.err, tail), 1u) << r.err;
  // In the trace: the event, the notice with the same text, and the exit.
  uint64_t mapped = std::stoull(r.out.substr(r.out.find("mapped=") + 7));
  auto shm = t->Select(
      [](const trace::TracePacket& p) { return p.has_shm() && p.shm().op() == trace::SHM_SIGBUS; });
  ASSERT_EQ(shm.size(), 1u);
  EXPECT_EQ(shm[0]->shm().name(), name);
  EXPECT_EQ(shm[0]->shm().size(), 64 * kMiB);
  EXPECT_GE(shm[0]->shm().address(), mapped);
  EXPECT_LT(shm[0]->shm().address(), mapped + 64 * kMiB);
  EXPECT_EQ(shm[0]->shm().offset(), shm[0]->shm().address() - mapped);
  std::string line = r.err.substr(r.err.find("pinscope: Bus error"));
  line = line.substr(10, line.find('\n') - 10);
  EXPECT_EQ(Notice(*t, "sigbus_shm"), line);
  ASSERT_NE(t->Exit(), nullptr);
  EXPECT_EQ(t->Exit()->how(), trace::ProcessExit::SIGNAL);
  EXPECT_EQ(t->Exit()->status(), SIGBUS);
  // The report's verdict follows the same evidence: /dev/shm was full.
  RunResult report = Report();
  EXPECT_NE(report.out.find("\"id\": \"shm_sigbus\""), std::string::npos) << report.out;
  EXPECT_NE(report.out.find("start the container with --shm-size="), std::string::npos);
}

TEST_F(SmallShm, ChainsToTheProgramsHandler) {
  RunResult r = RunSmall({Program("shm_full"), "chain", "64"});
  EXPECT_TRUE(r.Exited(42)) << "status " << r.status;
  EXPECT_EQ(Occurrences(r.err, "pinscope: Bus error at 0x"), 1u) << r.err;
  EXPECT_EQ(Occurrences(r.err, "/dev/shm is full: 32 MiB capacity"), 1u) << r.err;
  // Ours first, then the program's.
  EXPECT_LT(r.err.find("pinscope: Bus error"), r.err.find("program handler ran"));
  const ProcessTrace* t = Only();
  ASSERT_NE(t, nullptr);
  EXPECT_NE(Notice(*t, "sigbus_shm"), "<none>");
  ASSERT_NE(t->Exit(), nullptr);
  EXPECT_EQ(t->Exit()->how(), trace::ProcessExit::UNDERSCORE_EXIT);
  EXPECT_EQ(t->Exit()->status(), 42);
}

TEST_F(SmallShm, AHandlerInstalledLaterWins) {
  // pinscope does not hook sigaction: the program's own handler replaces ours.
  RunResult r = RunSmall({Program("shm_full"), "replaced", "64"});
  EXPECT_TRUE(r.Exited(42)) << "status " << r.status;
  EXPECT_EQ(Occurrences(r.err, "pinscope: Bus error"), 0u) << r.err;
  EXPECT_EQ(Occurrences(r.err, "program handler ran"), 1u) << r.err;
}

TEST_F(SmallShm, FallocateEnospcGivesTheDiagnosis) {
  RunResult r = RunSmall({Program("shm_full"), "enospc", "64"});
  EXPECT_TRUE(r.Exited(0)) << "status " << r.status << " " << r.out;
  EXPECT_EQ(r.out, "posix_fallocate=28\n");
  const ProcessTrace* t = Only();
  ASSERT_NE(t, nullptr);
  std::string name = "/pinscope_full_" + std::to_string(t->header.pid());
  EXPECT_EQ(
      Occurrences(r.err, "pinscope: posix_fallocate of 64 MiB for shared-memory segment " + name +
                             " failed with ENOSPC: /dev/shm is full: 32 MiB capacity, "),
      1u)
      << r.err;
  EXPECT_EQ(Occurrences(r.err, "; start the container with --shm-size of at least 128m\n"), 1u)
      << r.err;
  auto fall = t->Select([](const trace::TracePacket& p) {
    return p.has_shm() && p.shm().op() == trace::SHM_FALLOCATE;
  });
  ASSERT_EQ(fall.size(), 1u);
  EXPECT_EQ(fall[0]->shm().error(), ENOSPC);
  EXPECT_EQ(fall[0]->shm().size(), 64 * kMiB);
  EXPECT_EQ(fall[0]->shm().name(), name);
  EXPECT_NE(Notice(*t, "shm_full"), "<none>");
}

TEST_F(SmallShm, SigbusSentByKillIsNotDiagnosed) {
  RunResult r = RunSmall({Program("shm_full"), "kill", "4"});
  EXPECT_TRUE(r.Signaled(SIGBUS)) << "status " << r.status;
  EXPECT_EQ(Occurrences(r.err, "pinscope:"), 0u) << r.err;
}

TEST_F(E2eAlloc, SigbusPastTheEndOfASegmentSaysSo) {
  // The real /dev/shm, not full: the fault is a shrunk segment.
  RunResult r = RunPreloaded({Program("shm_full"), "truncated", "2"}, {"PINSCOPE_STACKS=0"});
  EXPECT_TRUE(r.Signaled(SIGBUS)) << "status " << r.status;
  auto run = Traces();
  ASSERT_EQ(run.size(), 1u);
  std::string name = "/pinscope_full_" + std::to_string(run.begin()->first);
  EXPECT_NE(r.err.find(" inside shared-memory segment " + name + " (2 MiB): /dev/shm has "),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("so the access lies past the end of the segment"), std::string::npos)
      << r.err;
  // The report's verdict is the shrink (offset 1 MiB of a segment truncated
  // to 0), not --shm-size: /dev/shm had room.
  RunResult report = Report();
  EXPECT_NE(report.out.find("\"id\": \"shm_past_end\""), std::string::npos) << report.out;
  EXPECT_NE(
      report.out.find("pid " + std::to_string(run.begin()->first) +
                      " got SIGBUS (Bus error): an access past the end of the segment " + name +
                      " (it was truncated to 0 bytes; the access was at offset 1,048,576); "
                      "/dev/shm space is not the cause"),
      std::string::npos)
      << report.out;
  EXPECT_EQ(report.out.find("start the container with"), std::string::npos) << report.out;
}

}  // namespace
}  // namespace pinscope::e2e
