// Core tests of call-stack capture, without LD_PRELOAD: this program links
// pinscope_shim_process, starts the recorder itself, calls CaptureStack from
// known functions and reads its own trace file back. It also counts malloc
// calls (it defines malloc) to check that unwinding does not allocate once
// warm.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "shim/process/process.h"
#include "shim/record/recorder.h"
#include "shim/stacks/stack_intern.h"
#include "shim/stacks/stacks.h"
#include "tests/common/stacks_trace_file.h"

// --- malloc counting (not under sanitizers, which bring their own malloc) ---
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define PINSCOPE_COUNT_MALLOC 0
#else
#define PINSCOPE_COUNT_MALLOC 1
#endif
extern "C" void* __libc_malloc(size_t);
extern "C" void* __libc_calloc(size_t, size_t);
extern "C" void* __libc_realloc(void*, size_t);
extern "C" void* __libc_memalign(size_t, size_t);

namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_mallocs{0};
inline void Count() {
  if (g_counting.load(std::memory_order_relaxed)) g_mallocs.fetch_add(1);
}
}  // namespace

#if PINSCOPE_COUNT_MALLOC
extern "C" void* malloc(size_t n) {
  Count();
  return __libc_malloc(n);
}
extern "C" void* calloc(size_t a, size_t b) {
  Count();
  return __libc_calloc(a, b);
}
extern "C" void* realloc(void* p, size_t n) {
  Count();
  return __libc_realloc(p, n);
}
extern "C" void* memalign(size_t a, size_t n) {
  Count();
  return __libc_memalign(a, n);
}
#endif

namespace pinscope::stacks_test {

std::string g_out_dir;

namespace shim = pinscope::shim;

// Call sites with known names (noinline, no tail calls).
namespace sites {
__attribute__((noinline)) uint64_t SiteA() {
  uint64_t id = shim::CaptureStack(shim::StackSite::kCopy);
  asm volatile("" ::: "memory");
  return id;
}
__attribute__((noinline)) uint64_t SiteB() {
  uint64_t id = shim::CaptureStack(shim::StackSite::kCopy);
  asm volatile("" ::: "memory");
  return id;
}
__attribute__((noinline)) uint64_t Recurse(int n) {
  uint64_t id = n > 0 ? Recurse(n - 1) : SiteA();
  asm volatile("" ::: "memory");
  return id;
}
}  // namespace sites

TraceFile ReadOwnTrace(pid_t pid = getpid()) {
  shim::FlushTrace();
  return ReadTraceFile(g_out_dir + "/" + std::to_string(pid) + ".pstrace");
}

TEST(StacksCore, SameSiteSameIdOtherSiteOtherId) {
  // One call site: the return addresses, hence the stack, are the same.
  uint64_t a[2], r[2];
  volatile int n = 2;  // volatile: an unrolled loop would make two call sites
  for (int i = 0; i < n; ++i) {
    a[i] = sites::SiteA();
    r[i] = sites::Recurse(5);
  }
  EXPECT_NE(a[0], 0u);
  EXPECT_EQ(a[0], a[1]);
  EXPECT_EQ(r[0], r[1]);
  EXPECT_NE(a[0], r[0]);
  EXPECT_NE(sites::SiteB(), a[0]);
  EXPECT_NE(sites::Recurse(3), sites::Recurse(4));
}

TEST(StacksCore, CallerOfCaptureStackIsTheFirstFrame) {
  uint64_t a = sites::SiteA();
  uint64_t r = sites::Recurse(2);
  TraceFile t = ReadOwnTrace();
  ExpectSelfContained(t);
  Symbolizer sym;
  auto fa = NativeFrames(sym, t, a);
  ASSERT_GE(fa.size(), 2u);
  EXPECT_EQ(fa[0].function, "pinscope::stacks_test::sites::SiteA()");
  EXPECT_EQ(
      fa[1].function,
      "pinscope::stacks_test::StacksCore_CallerOfCaptureStackIsTheFirstFrame_Test::TestBody()");
  auto fr = NativeFrames(sym, t, r);
  ASSERT_GE(fr.size(), 4u);
  EXPECT_EQ(fr[0].function, "pinscope::stacks_test::sites::SiteA()");
  for (int i = 1; i <= 3; ++i)
    EXPECT_EQ(fr[i].function, "pinscope::stacks_test::sites::Recurse(int)");
}

TEST(StacksCore, EachStackIsWrittenOnceUnderConcurrency) {
  constexpr int kThreads = 8;
  std::vector<std::vector<uint64_t>> ids(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([i, &ids] {
      for (int k = 0; k < 300; ++k) {
        ids[i].push_back(sites::SiteB());
        ids[i].push_back(sites::Recurse(k % 7));
      }
    });
  }
  for (auto& t : threads) t.join();
  std::set<uint64_t> distinct;
  for (int i = 0; i < kThreads; ++i) {
    EXPECT_EQ(ids[i][0], ids[0][0]);  // every thread runs the same code
    for (uint64_t id : ids[i]) {
      EXPECT_NE(id, 0u);
      distinct.insert(id);
    }
  }
  EXPECT_EQ(distinct.size(), 8u);  // SiteB + Recurse(0..6)
  TraceFile t = ReadOwnTrace();
  ExpectSelfContained(t);
  for (uint64_t id : distinct) EXPECT_EQ(t.definitions["stack " + std::to_string(id)], 1) << id;
}

TEST(StacksCore, StringsAreInternedOnceAndCutAtUtf8Boundaries) {
  using namespace shim::intern;
  uint64_t a = InternString("hello.py", 8);
  EXPECT_NE(a, 0u);
  EXPECT_EQ(InternString("hello.py", 8), a);
  EXPECT_NE(InternString("hello.pz", 8), a);
  std::string euros;
  for (int i = 0; i < 2000; ++i) euros += "\xe2\x82\xac";  // 3-byte UTF-8
  uint64_t e = InternString(euros.data(), euros.size());
  ASSERT_NE(e, 0u);
  EXPECT_TRUE(EnsureStringWritten(e, 1));
  EXPECT_TRUE(EnsureStringWritten(e, 2));  // already written: no second packet
  TraceFile t = ReadOwnTrace();
  ASSERT_TRUE(t.strings.count(e));
  EXPECT_EQ(t.strings[e].size(), 1023u);  // 341 whole characters of the first 1024 bytes
  EXPECT_EQ(t.strings[e], euros.substr(0, 1023));
  EXPECT_EQ(t.definitions["string " + std::to_string(e)], 1);
}

TEST(StacksCore, FullTableGivesNoIdAndCountsIt) {
  using namespace shim::intern;
  uint64_t file = InternString("full.py", 7), fn = InternString("f", 1);
  Stats before = GetStats();
  size_t room = kMaxFrames - before.frames;
  std::set<uint64_t> ids;
  for (uint32_t line = 1; line <= room + 100; ++line) {
    uint64_t id = InternFrame(file, fn, line);
    if (line <= room) {
      EXPECT_NE(id, 0u) << line;
      ids.insert(id);
    } else {
      EXPECT_EQ(id, 0u) << line;
    }
  }
  EXPECT_EQ(ids.size(), room);
  EXPECT_EQ(InternFrame(file, fn, 1), *ids.begin());  // existing keys still resolve
  Stats after = GetStats();
  EXPECT_EQ(after.frames, kMaxFrames);
  EXPECT_EQ(after.full_misses - before.full_misses, 100u);
}

TEST(StacksCore, NoMallocOnceWarm) {
  if (!PINSCOPE_COUNT_MALLOC) GTEST_SKIP() << "sanitizer build: malloc is not counted";
  sites::SiteA();  // warm: this thread's libunwind caches exist, the stack is interned
  g_mallocs = 0;
  g_counting = true;
  for (int i = 0; i < 1000; ++i) {
    sites::SiteA();
    sites::Recurse(i % 20);
  }
  g_counting = false;
  EXPECT_EQ(g_mallocs.load(), 0);
  // First capture on a new thread: libunwind's thread-local state. Reported,
  // not asserted (it depends on the libunwind build); see docs/stacks.md.
  long first = 0;
  std::thread([&first] {
    g_mallocs = 0;
    g_counting = true;
    sites::SiteA();
    g_counting = false;
    first = g_mallocs.load();
  }).join();
  std::printf("mallocs at a thread's first capture: %ld\n", first);
}

TEST(StacksCore, ForkedChildWritesKnownStacksAgain) {
  // The same call site before fork() and, in the child, after it. The loop
  // reads volatile data so the compiler cannot split it into two call sites.
  volatile int n = 2;
  volatile bool fork_at[2] = {false, true};
  uint64_t ids[2] = {0, 0};
  pid_t pid = -1;
  for (int i = 0; i < n; ++i) {
    if (fork_at[i]) {
      ASSERT_EQ(ReadOwnTrace().definitions["stack " + std::to_string(ids[0])], 1);
      pid = fork();
    }
    ids[i] = sites::SiteA();
    if (pid == 0) {
      shim::FinishProcess(shim::fields::kExit, 0);
      _exit(ids[i] == ids[0] ? 0 : 1);
    }
  }
  const uint64_t a = ids[0];
  ASSERT_NE(a, 0u);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child got another id for the same stack";
  TraceFile child = ReadTraceFile(g_out_dir + "/" + std::to_string(pid) + ".pstrace");
  ExpectSelfContained(child);
  EXPECT_EQ(child.header.origin(), trace::ORIGIN_FORK);
  ASSERT_EQ(child.stacks.size(), 1u);
  EXPECT_EQ(child.stacks.begin()->first, a);
  Symbolizer sym;
  auto frames = NativeFrames(sym, child, a);
  ASSERT_FALSE(frames.empty());
  EXPECT_EQ(frames[0].function, "pinscope::stacks_test::sites::SiteA()");
}

// A module loaded after start-up, unloaded, and loaded again from the same
// path at another address: each load gets its own Module packet, and the
// pcs of each stack resolve in the module that was there at the time.
TEST(StacksCore, ModulesLoadedLaterAndAgainElsewhere) {
  using CallFn = uint64_t (*)(uint64_t(*)());
  uint64_t ids[2];
  uintptr_t bases[2];
  void* blocker = nullptr;
  size_t blocked = 0;
  for (int round = 0; round < 2; ++round) {
    void* h = dlopen(PINSCOPE_DL_HELPER_PATH, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(h, nullptr) << dlerror();
    auto call = reinterpret_cast<CallFn>(dlsym(h, "stacks_dl_call"));
    ASSERT_NE(call, nullptr);
    Dl_info info{};
    ASSERT_TRUE(dladdr(reinterpret_cast<void*>(call), &info));
    bases[round] = reinterpret_cast<uintptr_t>(info.dli_fbase);
    ids[round] = call(&sites::SiteB);
    ASSERT_NE(ids[round], 0u);
    ASSERT_EQ(dlclose(h), 0);
    if (round == 0) {
      // Keep the loader from mapping it at the same place again.
      blocked = 4096;  // its first page is enough: the loader maps it whole
      blocker = mmap(info.dli_fbase, blocked, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
      ASSERT_NE(blocker, MAP_FAILED);
    }
  }
  munmap(blocker, blocked);
  ASSERT_NE(bases[0], bases[1]);
  EXPECT_NE(ids[0], ids[1]);
  TraceFile t = ReadOwnTrace();
  ExpectSelfContained(t);
  int helper_modules = 0;
  for (const trace::TracePacket& p : t.packets) {
    if (p.has_module() && p.module().path() == PINSCOPE_DL_HELPER_PATH) {
      ++helper_modules;
      EXPECT_TRUE(p.module().load_address() == bases[0] || p.module().load_address() == bases[1]);
      EXPECT_FALSE(p.module().build_id().empty());
    }
  }
  EXPECT_EQ(helper_modules, 2);
  Symbolizer sym;
  for (int round = 0; round < 2; ++round) {
    auto frames = NativeFrames(sym, t, ids[round]);
    ASSERT_GE(frames.size(), 2u);
    EXPECT_EQ(frames[0].function, "pinscope::stacks_test::sites::SiteB()");
    EXPECT_EQ(frames[1].function, "stacks_dl_call") << frames[1].ToString();
    EXPECT_EQ(frames[1].module, PINSCOPE_DL_HELPER_PATH);
    const trace::Module* m = t.modules.Find(t.stacks.at(ids[round]).native_pcs(1) - 1);
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(m->load_address(), bases[round]);
  }
}

}  // namespace pinscope::stacks_test

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  char tmpl[] = "/tmp/pinscope-stacks-core-XXXXXX";
  pinscope::stacks_test::g_out_dir = mkdtemp(tmpl);
  setenv("PINSCOPE_OUT", pinscope::stacks_test::g_out_dir.c_str(), 1);
  setenv("PINSCOPE_CUPTI", "0", 1);
  unsetenv("PINSCOPE_STACKS");
  unsetenv("PINSCOPE_DISABLE");
  unsetenv("PINSCOPE_ROOT_PID");
  unsetenv("PINSCOPE_RUN_ID");
  pinscope::shim::InitProcess();
  if (!pinscope::shim::Recording()) {
    std::fprintf(stderr, "the recorder did not start\n");
    return 1;
  }
  return RUN_ALL_TESTS();
}
