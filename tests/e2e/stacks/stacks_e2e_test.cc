// End-to-end tests of call stacks: programs with known call chains run under
// LD_PRELOAD=libpinscope.so with the fake CUDA runtime; their traces are read
// back with the generated protobuf classes and symbolized with libdw
// (analyzer/symbolizer), and the recorded frames are compared exactly.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "tests/common/stacks_trace_file.h"

extern char** environ;

namespace pinscope::stacks_test {
namespace {

struct RunResult {
  std::string dir;
  std::vector<TraceFile> files;
};

// Runs argv with the shim preloaded and `env` added; expects exit status 0.
RunResult RunTraced(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  static int counter = 0;
  char tmpl[] = "/tmp/pinscope-stacks-XXXXXX";
  RunResult r;
  r.dir = mkdtemp(tmpl);
  r.dir += "/run" + std::to_string(++counter);
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e) {
    std::string s = *e;
    if (s.rfind("PINSCOPE_", 0) == 0 || s.rfind("LD_PRELOAD=", 0) == 0) continue;
    envs.push_back(s);
  }
  envs.push_back(std::string("LD_PRELOAD=") + PINSCOPE_SHIM_PATH);
  envs.push_back("PINSCOPE_OUT=" + r.dir);
  envs.push_back("PINSCOPE_CUPTI=0");
  for (const std::string& e : env) envs.push_back(e);
  std::vector<char*> cargv, cenv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  for (const std::string& e : envs) cenv.push_back(const_cast<char*>(e.c_str()));
  cenv.push_back(nullptr);
  pid_t pid;
  EXPECT_EQ(posix_spawn(&pid, cargv[0], nullptr, nullptr, cargv.data(), cenv.data()), 0) << argv[0];
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << argv[0] << " status " << status;
  for (const std::string& f : TraceFiles(r.dir)) r.files.push_back(ReadTraceFile(f));
  return r;
}

const trace::Counters* LastCounters(const TraceFile& t) {
  const trace::Counters* last = nullptr;
  for (const trace::TracePacket& p : t.packets)
    if (p.has_counters()) last = &p.counters();
  return last;
}

std::vector<std::string> Names(const std::vector<SymbolizedFrame>& frames, size_t n) {
  std::vector<std::string> out;
  for (size_t i = 0; i < frames.size() && i < n; ++i) out.push_back(frames[i].function);
  return out;
}

const std::string kChainSource = PINSCOPE_STACKS_SOURCE_DIR "/stacks_chain.cc";
const std::string kPyScript = PINSCOPE_STACKS_SOURCE_DIR "/py_stacks.py";

TEST(StacksE2E, NativeChainGivesExactFunctionsFilesAndLines) {
  RunResult run = RunTraced({PINSCOPE_CHAIN_PATH, "chain"}, {});
  ASSERT_EQ(run.files.size(), 1u);
  const TraceFile& t = run.files[0];
  ExpectSelfContained(t);
  ASSERT_EQ(t.copies.size(), 1u);
  ASSERT_NE(t.copies[0].stack_id(), 0u);
  ASSERT_EQ(t.stacks.size(), 1u);
  EXPECT_FALSE(t.stacks.begin()->second.truncated());
  Symbolizer sym;
  auto frames = NativeFrames(sym, t, t.copies[0].stack_id());
  ASSERT_GE(frames.size(), 4u);
  EXPECT_EQ(Names(frames, 4), (std::vector<std::string>{"chain::Inner(int)", "chain::Middle(int)",
                                                        "chain::Outer(int)", "main"}));
  const char* markers[] = {"// @inner", "// @middle", "// @outer", "// @main"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(Basename(frames[i].file), "stacks_chain.cc") << frames[i].ToString();
    EXPECT_EQ(frames[i].line, MarkerLine(kChainSource, markers[i])) << frames[i].ToString();
    EXPECT_EQ(frames[i].module, PINSCOPE_CHAIN_PATH);
    EXPECT_FALSE(frames[i].build_id_mismatch);
  }
  // No frame of the shim itself; every frame is in a recorded module.
  for (const SymbolizedFrame& f : frames) {
    EXPECT_EQ(Basename(f.module).find("libpinscope"), std::string::npos) << f.ToString();
    EXPECT_FALSE(f.module.empty()) << f.ToString();
  }
  EXPECT_TRUE(t.stacks.begin()->second.python_frames().empty());
  // The shim counts its own cost: one capture per recorded event, and the
  // time it took (well under a second for a handful of captures).
  const trace::Counters* counters = LastCounters(t);
  ASSERT_NE(counters, nullptr);
  uint64_t with_stack = 0, events = 0;
  for (const auto& c : t.copies) with_stack += c.stack_id() != 0, ++events;
  for (const auto& a : t.allocs) with_stack += a.stack_id() != 0, ++events;
  for (const auto& m : t.shm) with_stack += m.stack_id() != 0, ++events;
  EXPECT_GE(counters->stacks_captured(), with_stack);
  EXPECT_LE(counters->stacks_captured(), events);
  EXPECT_GT(counters->stack_capture_ns(), 0u);
  EXPECT_LT(counters->stack_capture_ns(), 1000000000u);
  // No Python in this program: no time walking its frames.
  EXPECT_EQ(counters->stack_python_ns(), 0u);
}

TEST(StacksE2E, StrippedBinaryGivesModuleAndOffset) {
  RunResult run = RunTraced({PINSCOPE_CHAIN_STRIPPED_PATH, "chain"}, {});
  ASSERT_EQ(run.files.size(), 1u);
  const TraceFile& t = run.files[0];
  ExpectSelfContained(t);
  ASSERT_EQ(t.copies.size(), 1u);
  Symbolizer sym;
  auto frames = NativeFrames(sym, t, t.copies[0].stack_id());
  ASSERT_GE(frames.size(), 4u);
  // The unstripped twin has the same layout: the offsets land in the same
  // functions there.
  trace::Module twin;
  twin.set_path(PINSCOPE_CHAIN_PATH);
  const char* expected[] = {"chain::Inner(int)", "chain::Middle(int)", "chain::Outer(int)"};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(frames[i].module, PINSCOPE_CHAIN_STRIPPED_PATH);
    EXPECT_EQ(frames[i].function, "") << frames[i].ToString();
    EXPECT_EQ(frames[i].file, "");
    EXPECT_NE(frames[i].ToString().find("stacks_chain_stripped+0x"), std::string::npos)
        << frames[i].ToString();
    SymbolizedFrame in_twin = sym.Symbolize(&twin, frames[i].module_offset);
    EXPECT_EQ(in_twin.function, expected[i]) << frames[i].ToString();
  }
}

TEST(StacksE2E, DeepRecursionHitsTheDepthLimitCleanly) {
  for (int depth : {32, 8}) {
    RunResult run = RunTraced({PINSCOPE_CHAIN_PATH, "deep", "500"},
                              {"PINSCOPE_STACKS=" + std::to_string(depth)});
    ASSERT_EQ(run.files.size(), 1u);
    const TraceFile& t = run.files[0];
    ExpectSelfContained(t);
    ASSERT_EQ(t.copies.size(), 1u);
    const trace::Stack& s = t.stacks.at(t.copies[0].stack_id());
    EXPECT_EQ(s.native_pcs_size(), depth);
    EXPECT_TRUE(s.truncated());
    Symbolizer sym;
    auto frames = NativeFrames(sym, t, s.id());
    EXPECT_EQ(frames[0].function, "chain::Inner(int)");
    for (int i = 1; i < depth; ++i) {
      EXPECT_EQ(frames[i].function, "chain::Recurse(int)") << i;
      EXPECT_EQ(frames[i].line, MarkerLine(kChainSource, "// @recurse")) << i;
    }
  }
}

TEST(StacksE2E, StacksOffRecordsNoStack) {
  RunResult run = RunTraced({PINSCOPE_CHAIN_PATH, "chain"}, {"PINSCOPE_STACKS=0"});
  ASSERT_EQ(run.files.size(), 1u);
  const TraceFile& t = run.files[0];
  ASSERT_EQ(t.copies.size(), 1u);
  EXPECT_EQ(t.copies[0].stack_id(), 0u);
  EXPECT_TRUE(t.stacks.empty());
  EXPECT_EQ(t.modules.size(), 0u);
  const trace::Counters* counters = LastCounters(t);
  ASSERT_NE(counters, nullptr);
  EXPECT_EQ(counters->stacks_captured(), 0u);
  EXPECT_EQ(counters->stack_capture_ns(), 0u);
}

TEST(StacksE2E, ForkedChildWritesItsOwnCompleteStacks) {
  RunResult run = RunTraced({PINSCOPE_CHAIN_PATH, "fork"}, {});
  ASSERT_EQ(run.files.size(), 2u);
  const TraceFile* parent = nullptr;
  const TraceFile* child = nullptr;
  for (const TraceFile& t : run.files) {
    (t.header.origin() == trace::ORIGIN_FORK ? child : parent) = &t;
  }
  ASSERT_TRUE(parent && child);
  ExpectSelfContained(*parent);
  ExpectSelfContained(*child);
  ASSERT_EQ(parent->copies.size(), 2u);
  ASSERT_EQ(child->copies.size(), 1u);
  // One call site: one stack in each file, with the same id (ids are stable
  // across fork), each file carrying its own definition and modules.
  EXPECT_EQ(parent->copies[0].stack_id(), parent->copies[1].stack_id());
  EXPECT_EQ(child->copies[0].stack_id(), parent->copies[0].stack_id());
  ASSERT_EQ(parent->stacks.size(), 1u);
  ASSERT_EQ(child->stacks.size(), 1u);
  Symbolizer sym;
  for (const TraceFile* t : {parent, child}) {
    auto frames = NativeFrames(sym, *t, t->copies[0].stack_id());
    EXPECT_EQ(Names(frames, 5),
              (std::vector<std::string>{"chain::Inner(int)", "chain::Middle(int)",
                                        "chain::Outer(int)", "chain::Round(bool)", "main"}))
        << t->path;
    ASSERT_GE(frames.size(), 5u);
    EXPECT_EQ(frames[3].line, MarkerLine(kChainSource, "// @fork-round"));
    EXPECT_EQ(frames[4].line, MarkerLine(kChainSource, "// @fork-loop"));
  }
  EXPECT_EQ(parent->stacks.begin()->second.native_pcs_size(),
            child->stacks.begin()->second.native_pcs_size());
}

// The stack cache (shim/stacks/stacks.h): a call site met again is answered
// without a full unwind, and each twin keeps its own stack. 400 copies: 2
// first sights and 398 answers; each entry's first answer is checked by a
// full unwind, then about one in 64 at random.
TEST(StacksE2E, TheStackCacheKeepsTwinCallersApart) {
  for (const char* cache : {"1", "0"}) {
    SCOPED_TRACE(std::string("PINSCOPE_STACK_CACHE=") + cache);
    RunResult run =
        RunTraced({PINSCOPE_CHAIN_PATH, "twins"}, {std::string("PINSCOPE_STACK_CACHE=") + cache});
    ASSERT_EQ(run.files.size(), 1u);
    const TraceFile& t = run.files[0];
    ExpectSelfContained(t);
    ASSERT_EQ(t.copies.size(), 400u);
    ASSERT_EQ(t.stacks.size(), 2u);
    Symbolizer sym;
    const uint64_t a = t.copies[0].stack_id(), b = t.copies[1].stack_id();
    ASSERT_NE(a, b);
    EXPECT_EQ(Names(NativeFrames(sym, t, a), 3),
              (std::vector<std::string>{"chain::Inner(int)", "chain::TwinA(bool)", "main"}));
    EXPECT_EQ(Names(NativeFrames(sym, t, b), 3),
              (std::vector<std::string>{"chain::Inner(int)", "chain::TwinB(bool)", "main"}));
    int wrong = 0;
    for (size_t i = 0; i < t.copies.size(); ++i) wrong += t.copies[i].stack_id() != (i % 2 ? b : a);
    EXPECT_EQ(wrong, 0);
    const trace::Counters* counters = LastCounters(t);
    ASSERT_NE(counters, nullptr);
    EXPECT_EQ(counters->stacks_captured(), 400u);
    const bool on = cache[0] == '1';
    EXPECT_EQ(counters->stack_cache_hits() + counters->stack_cache_checks(), on ? 398u : 0u);
    if (on) {
      EXPECT_GE(counters->stack_cache_checks(), 2u);
      EXPECT_LE(counters->stack_cache_checks(), 2u + 396 / 16);  // about 6 expected
    }
  }
}

// The one trace of a twins run (400 copies from two callers, two stacks),
// checked self-contained; nullptr, with the failure said, otherwise.
const TraceFile* TwinTrace(const RunResult& run) {
  if (run.files.size() != 1u) {
    ADD_FAILURE() << run.files.size() << " trace files, expected 1";
    return nullptr;
  }
  const TraceFile& t = run.files[0];
  ExpectSelfContained(t);
  if (t.copies.size() != 400u || t.stacks.size() != 2u) {
    ADD_FAILURE() << t.copies.size() << " copies and " << t.stacks.size()
                  << " stacks, expected 400 and 2";
    return nullptr;
  }
  return &t;
}

// No stack cache site was turned off (notice stack_cache_site_off).
void ExpectNoSiteTurnedOff(const TraceFile& t) {
  for (const trace::TracePacket& p : t.packets) {
    EXPECT_FALSE(p.has_notice() && p.notice().code() == "stack_cache_site_off");
    // Nor the key from the shim's frame chain (stacks.cc, ProgramCaller):
    // checked against the unwinder at every full unwind.
    EXPECT_FALSE(p.has_notice() && p.notice().code() == "stack_cache_frame_key_off");
  }
}

// Twins whose innermost frames are alike (16 frames of Recurse below each)
// at the same depth: the cache's key is the same, so TwinB's first copy finds
// TwinA's entry. That entry's first answer is checked: the full unwind finds
// the difference and the entry takes TwinB's stack; TwinA's next copy finds
// it wrong again, and the site is unwound in full from then on, said once.
// Two checks, no answer from the cache, no copy naming the wrong twin.
TEST(StacksE2E, TheStackCacheTurnsASiteOffWhenTwoCallersShareItsKey) {
  RunResult run = RunTraced({PINSCOPE_CHAIN_PATH, "twins-deep"}, {});
  const TraceFile* twins = TwinTrace(run);
  ASSERT_NE(twins, nullptr);
  const TraceFile& t = *twins;
  const uint64_t a = t.copies[0].stack_id();
  uint64_t b = 0;
  for (const auto& [id, stack] : t.stacks) b = id != a ? id : b;
  ASSERT_NE(b, 0u);
  Symbolizer sym;
  auto names = [&](uint64_t id) {
    std::string all;
    for (const SymbolizedFrame& f : NativeFrames(sym, t, id)) all += f.function + ";";
    return all;
  };
  EXPECT_NE(names(a).find(";chain::TwinA(bool);main;"), std::string::npos) << names(a);
  EXPECT_NE(names(b).find(";chain::TwinB(bool);main;"), std::string::npos) << names(b);
  int wrong = 0;
  for (size_t i = 0; i < t.copies.size(); ++i) wrong += t.copies[i].stack_id() != (i % 2 ? b : a);
  EXPECT_EQ(wrong, 0);
  const trace::Counters* counters = LastCounters(t);
  ASSERT_NE(counters, nullptr);
  EXPECT_EQ(counters->stack_cache_checks(), 2u);
  EXPECT_EQ(counters->stack_cache_hits(), 0u);
  int notices = 0;
  for (const trace::TracePacket& p : t.packets)
    notices += p.has_notice() && p.notice().code() == "stack_cache_site_off";
  EXPECT_EQ(notices, 1);
}

// One key whose stack changes once and then stays (TwinA's copy, then 399
// below TwinB, alike in their innermost frames), as CPython's C frames do
// under the same Python frames once it has specialized a call (the
// Hugging Face Trainer on the GPU machine, 2026-12-05: before this, the
// cache went off for the whole process there, and 98% of its stacks were
// unwound in full). The first check refreshes the entry, the second agrees,
// and the rest are answered from the cache: every copy names its twin.
TEST(StacksE2E, TheStackCacheSettlesOnAStackThatChangedOnce) {
  RunResult run = RunTraced({PINSCOPE_CHAIN_PATH, "twins-settle"}, {});
  const TraceFile* twins = TwinTrace(run);
  ASSERT_NE(twins, nullptr);
  const TraceFile& t = *twins;
  const uint64_t a = t.copies[0].stack_id(), b = t.copies[1].stack_id();
  ASSERT_NE(a, b);
  int wrong = 0;
  for (size_t i = 1; i < t.copies.size(); ++i) wrong += t.copies[i].stack_id() != b;
  EXPECT_EQ(wrong, 0);
  const trace::Counters* counters = LastCounters(t);
  ASSERT_NE(counters, nullptr);
  EXPECT_EQ(counters->stack_cache_hits() + counters->stack_cache_checks(), 399u);
  EXPECT_GE(counters->stack_cache_checks(), 2u);
  EXPECT_LE(counters->stack_cache_checks(), 2u + 397 / 16);  // about 8 expected
  ExpectNoSiteTurnedOff(t);
}

// One key whose stack changes twice, long apart (TwinA's copy, 1,000 below
// TwinB, 1,000 below TwinA from another line), as CPython's C frames do when
// it specializes a call and, much later, deoptimizes and specializes it
// again (tools/bench/stack_cache_loop.py: one return address in the
// interpreter changed after 60,000-80,000 copies). Before, the second change
// turned the site off, and every copy after it was unwound in full. Each
// change is seen by the next check (one answer in 64, at random) and the
// entry follows it; the answers in between name the previous stack.
TEST(StacksE2E, TheStackCacheFollowsAStackThatChangesAgainLater) {
  RunResult run = RunTraced({PINSCOPE_CHAIN_PATH, "twins-churn"}, {});
  ASSERT_EQ(run.files.size(), 1u);
  const TraceFile& t = run.files[0];
  ExpectSelfContained(t);
  ASSERT_EQ(t.copies.size(), 2001u);
  ASSERT_EQ(t.stacks.size(), 3u);
  const uint64_t a = t.copies[0].stack_id(), b = t.copies[1].stack_id();
  const uint64_t again = t.copies[2000].stack_id();
  ASSERT_NE(a, b);
  ASSERT_NE(again, a);
  ASSERT_NE(again, b);
  Symbolizer sym;
  auto frames = NativeFrames(sym, t, again);
  bool from_churn_line = false;
  for (const SymbolizedFrame& f : frames)
    from_churn_line |=
        f.function == "main" && f.line == MarkerLine(kChainSource, "// @churn-again");
  EXPECT_TRUE(from_churn_line);
  // Stale answers: each change is seen within 640 answers but about once in
  // 25,000 runs ((63/64)^640); the last copies all name TwinA's second line.
  int stale_b = 0, stale_again = 0;
  for (size_t i = 1; i <= 1000; ++i) stale_b += t.copies[i].stack_id() != b;
  for (size_t i = 1001; i <= 2000; ++i) stale_again += t.copies[i].stack_id() != again;
  EXPECT_EQ(stale_b, 0);  // the first copy below TwinB is checked (a new entry)
  EXPECT_LE(stale_again, 640);
  for (size_t i = 1001; i <= 2000; ++i)
    if (t.copies[i].stack_id() == again) {
      for (size_t j = i; j <= 2000; ++j) EXPECT_EQ(t.copies[j].stack_id(), again) << j;
      break;
    }
  const trace::Counters* counters = LastCounters(t);
  ASSERT_NE(counters, nullptr);
  EXPECT_EQ(counters->stack_cache_hits() + counters->stack_cache_checks(), 2000u);
  EXPECT_GE(counters->stack_cache_hits(), 1800u);
  ExpectNoSiteTurnedOff(t);
}

TEST(StacksE2E, ThreadsShareOneInternedStack) {
  RunResult run = RunTraced({PINSCOPE_CHAIN_PATH, "threads"}, {});
  ASSERT_EQ(run.files.size(), 1u);
  const TraceFile& t = run.files[0];
  ExpectSelfContained(t);
  ASSERT_EQ(t.copies.size(), 200u);
  ASSERT_EQ(t.stacks.size(), 1u);
  for (const trace::CopyEvent& c : t.copies) EXPECT_EQ(c.stack_id(), t.stacks.begin()->first);
  Symbolizer sym;
  auto frames = NativeFrames(sym, t, t.stacks.begin()->first);
  EXPECT_EQ(Names(frames, 4),
            (std::vector<std::string>{"chain::Inner(int)", "chain::Middle(int)",
                                      "chain::Outer(int)", "chain::Worker(void*)"}));
}

// --- Python -------------------------------------------------------------

class StacksPython : public ::testing::TestWithParam<const char*> {};

const std::string kTorchScript = PINSCOPE_STACKS_SOURCE_DIR "/py_torch_loader.py";

bool HasTorch(const std::string& python) {
  std::string cmd = python + " -c 'import torch' >/dev/null 2>&1";
  return access(python.c_str(), X_OK) == 0 && system(cmd.c_str()) == 0;
}

// The PyTorch case the issue is about: tensors are allocated by C++ with the
// GIL released (PyTorch drops it around its operators), in forked DataLoader
// workers, and reach the main process through shared memory. Every one of
// those events names the Python line that caused it.
TEST(StacksTorch, DataLoaderWorkersNameTheAllocatingLines) {
  const std::string python = "/usr/bin/python3";
  if (!HasTorch(python)) GTEST_SKIP() << "no PyTorch for " << python;
  RunResult run = RunTraced({python, kTorchScript}, {});
  ASSERT_GE(run.files.size(), 3u);
  const PyFrame item{kTorchScript, "__getitem__", uint32_t(MarkerLine(kTorchScript, "# @item"))};
  const PyFrame batch{kTorchScript, "collate", uint32_t(MarkerLine(kTorchScript, "# @collate"))};
  const PyFrame loop{kTorchScript, "main", uint32_t(MarkerLine(kTorchScript, "# @loop"))};
  Symbolizer sym;
  int workers = 0;
  bool main_maps_batch = false;
  for (const TraceFile& t : run.files) {
    ExpectSelfContained(t);
    if (t.header.origin() != trace::ORIGIN_FORK) {
      for (const trace::ShmEvent& e : t.shm) {
        if (e.op() != trace::SHM_MAP || e.stack_id() == 0) continue;
        for (const PyFrame& f : PythonFrames(t, e.stack_id())) main_maps_batch |= f == loop;
      }
      continue;
    }
    ++workers;
    int items = 0, batches = 0;
    for (const trace::HostAlloc& a : t.allocs) {
      if (a.size() != (2u << 20) && a.size() != (8u << 20)) continue;
      std::vector<PyFrame> py = PythonFrames(t, a.stack_id());
      ASSERT_FALSE(py.empty()) << t.path << " alloc of " << a.size();
      EXPECT_EQ(py[0], a.size() == (2u << 20) ? item : batch) << t.path;
      (a.size() == (2u << 20) ? items : batches)++;
      bool alloc_cpu = false;
      for (const SymbolizedFrame& f : NativeFrames(sym, t, a.stack_id()))
        alloc_cpu |= f.function == "c10::alloc_cpu(unsigned long)";
      EXPECT_TRUE(alloc_cpu) << t.path;
    }
    EXPECT_EQ(items, 4 * batches) << t.path;
    EXPECT_GE(batches, 1) << t.path;
  }
  EXPECT_EQ(workers, 2);
  EXPECT_TRUE(main_maps_batch) << "no shm mapping in the main process names " << loop;
}

// Both ways of reading Python frames (python_frames.h): the frame walk (the
// default for 3.10-3.13) sees the frames whether or not the thread holds the
// GIL; the C API path (PINSCOPE_PY_WALK=0) only while it holds it. Both must
// give exactly the same frames.
TEST_P(StacksPython, ExactFramesWithAndWithoutTheGil) {
  const std::string python = GetParam();
  if (access(python.c_str(), X_OK) != 0) GTEST_SKIP() << python << " not installed";
  struct Mode {
    std::vector<std::string> env;
    bool with_gil, without_gil;
  };
  const Mode modes[] = {
      {{}, true, true},
      {{"PINSCOPE_PY_WALK=0"}, true, false},
      {{"PINSCOPE_PY_STACKS=0"}, false, false},
  };
  const std::vector<PyFrame> with_gil = {
      {kPyScript, "copy_with_gil", uint32_t(MarkerLine(kPyScript, "# @py-with-gil"))},
      {kPyScript, "main", uint32_t(MarkerLine(kPyScript, "# @py-main-gil"))},
      {kPyScript, "<module>", uint32_t(MarkerLine(kPyScript, "# @py-module"))},
  };
  const std::vector<PyFrame> without_gil = {
      {kPyScript, "copy_without_gil", uint32_t(MarkerLine(kPyScript, "# @py-without-gil"))},
      {kPyScript, "main", uint32_t(MarkerLine(kPyScript, "# @py-main-nogil"))},
      {kPyScript, "<module>", uint32_t(MarkerLine(kPyScript, "# @py-module"))},
  };
  for (const Mode& mode : modes) {
    SCOPED_TRACE(mode.env.empty() ? "default" : mode.env[0]);
    RunResult run = RunTraced({python, kPyScript, PINSCOPE_PY_HELPER_PATH}, mode.env);
    ASSERT_EQ(run.files.size(), 1u);
    const TraceFile& t = run.files[0];
    ExpectSelfContained(t);
    ASSERT_EQ(t.copies.size(), 2u);
    Symbolizer sym;
    for (const trace::CopyEvent& c : t.copies) {
      ASSERT_NE(c.stack_id(), 0u);
      auto frames = NativeFrames(sym, t, c.stack_id());
      EXPECT_EQ(Names(frames, 3),
                (std::vector<std::string>{"pyhelper::Inner(int)", "pyhelper::Outer(int)",
                                          "stacks_py_copy"}));
      EXPECT_FALSE(t.stacks.at(c.stack_id()).python_truncated());
      // 1 KiB: ctypes.PyDLL, the GIL is held; 2 KiB: ctypes.CDLL releases it.
      const bool gil = c.bytes() == 1024;
      const bool expect = gil ? mode.with_gil : mode.without_gil;
      std::vector<PyFrame> py = PythonFrames(t, c.stack_id());
      if (expect) {
        EXPECT_EQ(py, gil ? with_gil : without_gil);
      } else {
        EXPECT_TRUE(py.empty()) << c.bytes();
      }
    }
  }
}

// Two calls on one Python line, 200 times each: one frame of Python alike
// (file, function, line), native frames alike for 20 frames near the copy,
// the interpreter's C frames different below, and on 3.13 different again
// after the first run (a warm-up the cache refreshes its entry for; before,
// it turned the cache off for the whole process). The stack cache answers
// most of them, and every copy keeps its own stack.
TEST_P(StacksPython, TwoCallsOnOneLineKeepTheirOwnStacks) {
  const std::string python = GetParam();
  if (access(python.c_str(), X_OK) != 0) GTEST_SKIP() << python << " not installed";
  RunResult run = RunTraced({python, kPyScript, PINSCOPE_PY_HELPER_PATH, "sameline"}, {});
  ASSERT_EQ(run.files.size(), 1u);
  const TraceFile& t = run.files[0];
  ExpectSelfContained(t);
  ASSERT_EQ(t.copies.size(), 400u);
  // bytes -> stack ids after each call's first copy: the first may differ
  // (3.13 specializes the call after its first run, and its C frames
  // change under the same Python frames).
  std::map<uint64_t, std::set<uint64_t>> ids;
  for (size_t i = 2; i < t.copies.size(); ++i)
    ids[t.copies[i].bytes()].insert(t.copies[i].stack_id());
  ASSERT_EQ(ids.size(), 2u);
  ASSERT_EQ(ids[5120].size(), 1u);
  ASSERT_EQ(ids[6144].size(), 1u);
  const uint64_t five = *ids[5120].begin(), six = *ids[6144].begin();
  ASSERT_NE(five, six);
  const PyFrame line{kPyScript, "sameline", uint32_t(MarkerLine(kPyScript, "@py-sameline"))};
  for (uint64_t id : {five, six}) {
    std::vector<PyFrame> py = PythonFrames(t, id);
    ASSERT_FALSE(py.empty());
    EXPECT_EQ(py[0], line);
  }
  const trace::Counters* counters = LastCounters(t);
  ASSERT_NE(counters, nullptr);
  EXPECT_EQ(counters->stacks_captured(), 400u);
  EXPECT_GE(counters->stack_cache_hits(), 300u);
  // The Python frames' walk is part of every capture's time, never all of it.
  EXPECT_GT(counters->stack_python_ns(), 0u);
  EXPECT_LT(counters->stack_python_ns(), counters->stack_capture_ns());
  ExpectNoSiteTurnedOff(t);
}

// Two callers one Python frame out of the same line, in turn: the cache's
// key walks every Python frame (python::CaptureKey), so each copy keeps the
// stack of its own caller, and the cache still answers most of them.
TEST_P(StacksPython, TwoPythonCallersOfOneLineKeepTheirStacks) {
  const std::string python = GetParam();
  if (access(python.c_str(), X_OK) != 0) GTEST_SKIP() << python << " not installed";
  RunResult run = RunTraced({python, kPyScript, PINSCOPE_PY_HELPER_PATH, "outers"}, {});
  ASSERT_EQ(run.files.size(), 1u);
  const TraceFile& t = run.files[0];
  ExpectSelfContained(t);
  ASSERT_EQ(t.copies.size(), 400u);
  const PyFrame inner{kPyScript, "inner", uint32_t(MarkerLine(kPyScript, "# @py-inner"))};
  const PyFrame a{kPyScript, "outer_a", uint32_t(MarkerLine(kPyScript, "# @py-outer-a"))};
  const PyFrame b{kPyScript, "outer_b", uint32_t(MarkerLine(kPyScript, "# @py-outer-b"))};
  int wrong = 0;
  std::set<uint64_t> ids;
  for (size_t i = 2; i < t.copies.size(); ++i) {  // after each caller's first
    const trace::CopyEvent& c = t.copies[i];
    std::vector<PyFrame> py = PythonFrames(t, c.stack_id());
    ids.insert(c.stack_id());
    wrong += py.size() < 2 || !(py[0] == inner) || !(py[1] == (c.bytes() == 1024 ? a : b));
  }
  EXPECT_EQ(wrong, 0);
  EXPECT_EQ(ids.size(), 2u);
  const trace::Counters* counters = LastCounters(t);
  ASSERT_NE(counters, nullptr);
  EXPECT_GE(counters->stack_cache_hits(), 300u);
  ExpectNoSiteTurnedOff(t);
}

// Under Python frames the cache's key holds the hook's return address into
// the program and the depth, not the native frames between (stacks.cc,
// ProgramCaller: a few words of the stack instead of a partial unwind).
// Two native callers of one frame size under one Python call share it: the
// checks must keep each copy named by its own caller, turn the site off
// once, and the frame chain must agree with the unwinder throughout.
TEST_P(StacksPython, TwinNativeCallersUnderOnePythonCallKeepTheirStacks) {
  const std::string python = GetParam();
  if (access(python.c_str(), X_OK) != 0) GTEST_SKIP() << python << " not installed";
  RunResult run = RunTraced({python, kPyScript, PINSCOPE_PY_HELPER_PATH, "twins"}, {});
  ASSERT_EQ(run.files.size(), 1u);
  const TraceFile& t = run.files[0];
  ExpectSelfContained(t);
  ASSERT_EQ(t.copies.size(), 400u);
  Symbolizer sym;
  std::map<uint64_t, std::string> twin_of;  // stack id -> its twin
  for (const auto& [id, stack] : t.stacks)
    for (const SymbolizedFrame& f : NativeFrames(sym, t, id))
      if (f.function.find("pyhelper::Twin") == 0) twin_of[id] = f.function;
  int wrong = 0;
  for (const trace::CopyEvent& c : t.copies) {
    const std::string want = c.bytes() == 1024 ? "pyhelper::TwinA(int)" : "pyhelper::TwinB(int)";
    wrong += twin_of[c.stack_id()] != want;
  }
  EXPECT_EQ(wrong, 0);
  const trace::Counters* counters = LastCounters(t);
  ASSERT_NE(counters, nullptr);
  EXPECT_GE(counters->stack_cache_checks(), 2u);
  EXPECT_LE(counters->stack_cache_hits(), 4u);  // 3.13 may re-key once, after its warm-up
  int site_off = 0, frame_key_off = 0;
  for (const trace::TracePacket& p : t.packets) {
    site_off += p.has_notice() && p.notice().code() == "stack_cache_site_off";
    frame_key_off += p.has_notice() && p.notice().code() == "stack_cache_frame_key_off";
  }
  EXPECT_EQ(site_off, 1);
  EXPECT_EQ(frame_key_off, 0);
}

TEST_P(StacksPython, GeneratorFramesAndThePythonDepthLimit) {
  const std::string python = GetParam();
  if (access(python.c_str(), X_OK) != 0) GTEST_SKIP() << python << " not installed";
  const PyFrame gen{kPyScript, "gen_copy", uint32_t(MarkerLine(kPyScript, "# @py-gen"))};
  const PyFrame extra_gen{kPyScript, "extra", uint32_t(MarkerLine(kPyScript, "# @py-extra-gen"))};
  const PyFrame module{kPyScript, "<module>",
                       uint32_t(MarkerLine(kPyScript, "# @py-extra-module"))};
  const PyFrame leaf{kPyScript, "recurse", uint32_t(MarkerLine(kPyScript, "# @py-recurse-leaf"))};
  const PyFrame level{kPyScript, "recurse", uint32_t(MarkerLine(kPyScript, "# @py-recurse"))};
  for (const char* walk : {"PINSCOPE_PY_WALK=1", "PINSCOPE_PY_WALK=0"}) {
    SCOPED_TRACE(walk);
    RunResult run = RunTraced({python, kPyScript, PINSCOPE_PY_HELPER_PATH, "extra"},
                              {walk, "PINSCOPE_STACKS=8"});
    ASSERT_EQ(run.files.size(), 1u);
    const TraceFile& t = run.files[0];
    ExpectSelfContained(t);
    ASSERT_EQ(t.copies.size(), 2u);
    for (const trace::CopyEvent& c : t.copies) {
      const trace::Stack& s = t.stacks.at(c.stack_id());
      EXPECT_LE(s.native_pcs_size(), 8);
      std::vector<PyFrame> py = PythonFrames(t, c.stack_id());
      if (c.bytes() == 4096) {
        EXPECT_EQ(py, (std::vector<PyFrame>{gen, extra_gen, module}));
        EXPECT_FALSE(s.python_truncated());
      } else {
        ASSERT_EQ(c.bytes(), 3072u);
        std::vector<PyFrame> expected(8, level);
        expected[0] = leaf;
        EXPECT_EQ(py, expected);
        EXPECT_TRUE(s.python_truncated());
      }
    }
  }
}

std::vector<const char*> Interpreters() {
  // PINSCOPE_TEST_PYTHONS: ':'-separated interpreters found at configure time
  // (/usr/bin/python3 and pyenv's 3.10+), each skipped if gone.
  static std::vector<std::string> list;
  std::vector<const char*> out;
  if (list.empty()) {
    std::string all = PINSCOPE_TEST_PYTHONS;
    for (size_t at = 0; at <= all.size();) {
      size_t end = all.find(':', at);
      if (end == std::string::npos) end = all.size();
      if (end > at) list.push_back(all.substr(at, end - at));
      at = end + 1;
    }
  }
  for (const std::string& p : list) out.push_back(p.c_str());
  return out;
}

INSTANTIATE_TEST_SUITE_P(Interpreters, StacksPython, ::testing::ValuesIn(Interpreters()),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name;
                           for (const char* c = info.param; *c; ++c)
                             name += isalnum(static_cast<unsigned char>(*c)) ? *c : '_';
                           return name;
                         });

}  // namespace
}  // namespace pinscope::stacks_test
