// The malloc family's core, called directly (no LD_PRELOAD) in this process
// with the recorder writing a real trace: thresholds, what the registry holds,
// exactly which HostAlloc/HostFree packets each call produces (realloc across
// the threshold both ways included), calls from inside a hook or from the
// shim's own code, errno, glibc's chunk header, and a forked child that frees
// what it inherited.
#include <errno.h>
#include <sys/wait.h>

#include <cstring>

#include "core_test_env.h"
#include "shim/base/clock.h"
#include "shim/base/guard.h"
#include "shim/memory/block_registry.h"

#if defined(__SANITIZE_ADDRESS__)
// Some tests make allocations fail on purpose (sizes near SIZE_MAX): ASan's
// allocator must then return NULL with ENOMEM, as glibc's does, not abort.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }
#endif

namespace pinscope::shim {
namespace {

using testing::ReadOwnTrace;
using testing::TraceDir;
namespace a = alloc;
constexpr size_t kMiB = 1 << 20;

uint64_t U(const void* p) { return reinterpret_cast<uintptr_t>(p); }

uint64_t g_test_start = 0;  // MonoNs() when the current test began

// The alloc/free packets of the current test about the given addresses
// (glibc hands the same addresses to several tests), rendered.
std::vector<std::string> EventsAbout(const e2e::ProcessTrace& t, std::vector<const void*> ptrs) {
  std::vector<std::string> out;
  for (const auto& p : t.packets) {
    if (p.timestamp_ns() < g_test_start) continue;
    uint64_t addr = p.has_alloc() ? p.alloc().address() : p.has_free() ? p.free().address() : 0;
    if (!addr) continue;
    for (const void* q : ptrs)
      if (U(q) == addr) {
        out.push_back(e2e::Describe(p));
        break;
      }
  }
  return out;
}

std::string Alloc(const char* api, const void* p, size_t n, size_t align = 0,
                  const void* old = nullptr) {
  return std::string("alloc ") + api + " " + std::to_string(U(p)) + " " + std::to_string(n) + " " +
         std::to_string(align) + " " + std::to_string(U(old));
}
std::string Free(const void* p, bool by_realloc) {
  return "free " + std::to_string(U(p)) + (by_realloc ? " 1" : " 0");
}

class AllocCoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TraceDir();
    a::SetThresholdForTest(kMiB);
    g_test_start = MonoNs();
  }
};

TEST_F(AllocCoreTest, InitFindsGlibcAndTheThreshold) {
  // In a sanitizer build ASan's runtime serves malloc and replaces only part
  // of glibc's __libc_* names: the cores must forward to it instead.
  EXPECT_EQ(a::LibcKind(), testing::kGlibcServesMalloc ? a::Libc::kGlibc : a::Libc::kOther);
  EXPECT_TRUE(Recording());
  EXPECT_EQ(GetConfig().trace_min, kMiB);
}

TEST_F(AllocCoreTest, ChunkHeaderBoundsEveryBlock) {
  if (!testing::kGlibcServesMalloc) GTEST_SKIP() << "sanitizer build: no glibc chunk header";
  for (size_t n : {size_t(1), size_t(24), size_t(1000), size_t(200000), kMiB - 1, kMiB, 5 * kMiB}) {
    void* p = a::g_real.malloc(n);
    ASSERT_NE(p, nullptr);
    EXPECT_GE(a::ChunkSizeOf(p), n) << n;
    EXPECT_EQ(a::MaybeRecorded(p), a::ChunkSizeOf(p) >= kMiB) << n;
    a::g_real.free(p);
  }
  void* p = nullptr;
  ASSERT_EQ(posix_memalign(&p, 1 << 16, 3 * kMiB), 0);
  EXPECT_GE(a::ChunkSizeOf(p), 3 * kMiB);
  free(p);
}

TEST_F(AllocCoreTest, RecordsAtAndAboveTheThreshold) {
  void* small = a::Malloc(kMiB - 1);
  void* big = a::Malloc(kMiB);
  void* zeroed = a::Calloc(2, kMiB);
  void* aligned = nullptr;
  ASSERT_EQ(a::PosixMemalign(&aligned, 4096, 2 * kMiB + 3), 0);
  void* al = a::AlignedAlloc(1 << 16, kMiB);
  void* mem = a::Memalign(512, kMiB);
  void* va = a::Valloc(kMiB);
  void* pv = a::Pvalloc(kMiB + 1);
  HostBlock b;
  EXPECT_FALSE(Registry().FindBlock(U(small), &b));
  ASSERT_TRUE(Registry().FindBlock(U(aligned), &b));
  EXPECT_EQ(b.size, 2 * kMiB + 3);
  EXPECT_EQ(b.alignment, 4096u);
  EXPECT_EQ(b.api, uint32_t(fields::kPosixMemalign));
  EXPECT_EQ(U(aligned) % 4096, 0u);
  EXPECT_EQ(U(al) % (1 << 16), 0u);
  for (size_t i = 0; i < 2 * kMiB; i += 4093) ASSERT_EQ(static_cast<char*>(zeroed)[i], 0);
  EXPECT_GE(a::UsableSize(big), kMiB);
  std::vector<const void*> all = {small, big, zeroed, aligned, al, mem, va, pv};
  for (const void* p : all) a::Free(const_cast<void*>(p));
  EXPECT_FALSE(Registry().FindBlock(U(big), &b));
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<std::string> want = {Alloc("MALLOC", big, kMiB),
                                   Alloc("CALLOC", zeroed, 2 * kMiB),
                                   Alloc("POSIX_MEMALIGN", aligned, 2 * kMiB + 3, 4096),
                                   Alloc("ALIGNED_ALLOC", al, kMiB, 1 << 16),
                                   Alloc("MEMALIGN", mem, kMiB, 512),
                                   Alloc("VALLOC", va, kMiB, page),
                                   Alloc("PVALLOC", pv, kMiB + 1, page),
                                   Free(big, false),
                                   Free(zeroed, false),
                                   Free(aligned, false),
                                   Free(al, false),
                                   Free(mem, false),
                                   Free(va, false),
                                   Free(pv, false)};
  EXPECT_EQ(EventsAbout(ReadOwnTrace(), all), want);
}

TEST_F(AllocCoreTest, ReallocAcrossTheThreshold) {
  char* small = static_cast<char*>(a::Malloc(64));
  strcpy(small, "kept");
  char* grown = static_cast<char*>(a::Realloc(small, 2 * kMiB));  // small -> large
  ASSERT_STREQ(grown, "kept");
  char* moved = static_cast<char*>(a::Realloc(grown, 4 * kMiB));  // large -> large
  ASSERT_STREQ(moved, "kept");
  char* shrunk = static_cast<char*>(a::Realloc(moved, 128));  // large -> small
  ASSERT_STREQ(shrunk, "kept");
  char* arr = static_cast<char*>(a::Reallocarray(nullptr, 3, kMiB));
  errno = 0;
  EXPECT_EQ(a::Reallocarray(arr, SIZE_MAX / 2, 4), nullptr);  // overflow: untouched
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(a::Realloc(arr, 0), nullptr);  // glibc frees it
  HostBlock b;
  EXPECT_FALSE(Registry().FindBlock(U(arr), &b));
  a::Free(shrunk);
  EXPECT_EQ(
      EventsAbout(ReadOwnTrace(), {small, grown, moved, shrunk, arr}),
      (std::vector<std::string>{Alloc("REALLOC", grown, 2 * kMiB, 0, small), Free(grown, true),
                                Alloc("REALLOC", moved, 4 * kMiB, 0, grown), Free(moved, true),
                                Alloc("REALLOCARRAY", arr, 3 * kMiB), Free(arr, true)}));
}

TEST_F(AllocCoreTest, FailedReallocKeepsTheBlock) {
  void* p = a::Malloc(3 * kMiB);
  errno = 0;
  EXPECT_EQ(a::Realloc(p, SIZE_MAX - 4096), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  HostBlock b;
  ASSERT_TRUE(Registry().FindBlock(U(p), &b));
  EXPECT_EQ(b.size, 3 * kMiB);
  a::Free(p);
  EXPECT_EQ(EventsAbout(ReadOwnTrace(), {p}),
            (std::vector<std::string>{Alloc("MALLOC", p, 3 * kMiB), Free(p, true),
                                      Alloc("MALLOC", p, 3 * kMiB), Free(p, false)}));
}

TEST_F(AllocCoreTest, ErrnoIsTheCallersOnSuccessTheRealOneOnFailure) {
  errno = 1234;
  void* p = a::Malloc(2 * kMiB);
  EXPECT_EQ(errno, 1234);
  a::Free(p);
  EXPECT_EQ(errno, 1234);
  void* q = nullptr;
  EXPECT_EQ(a::PosixMemalign(&q, 24, 2 * kMiB), EINVAL);
  EXPECT_EQ(a::PosixMemalign(&q, 0, 16), EINVAL);
  EXPECT_EQ(q, nullptr);
  EXPECT_EQ(errno, 1234);
  EXPECT_EQ(a::Malloc(SIZE_MAX - 8192), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  errno = 0;
  EXPECT_EQ(a::Calloc(SIZE_MAX / 4, 8), nullptr);
  EXPECT_EQ(errno, ENOMEM);
}

TEST_F(AllocCoreTest, InsideAHookAndFromTheShimNothingIsRecorded) {
  void* inside;
  void* own;
  void* program = a::Malloc(2 * kMiB);
  {
    HookScope scope;
    inside = a::Malloc(2 * kMiB);
    a::Free(program);  // a program block freed by a library we wrap: still recorded
  }
  static char fake_text[64];
  a::SetShimText(U(fake_text), U(fake_text) + sizeof fake_text);
  own = a::Malloc(2 * kMiB, fake_text + 8);
  a::SetShimText(0, 0);
  HostBlock b;
  EXPECT_FALSE(Registry().FindBlock(U(inside), &b));
  EXPECT_FALSE(Registry().FindBlock(U(own), &b));
  a::Free(inside);
  a::Free(own);
  EXPECT_EQ(EventsAbout(ReadOwnTrace(), {inside, own, program}),
            (std::vector<std::string>{Alloc("MALLOC", program, 2 * kMiB), Free(program, false)}));
}

TEST_F(AllocCoreTest, OffMeansNothingRecorded) {
  a::SetThresholdForTest(SIZE_MAX);
  void* p = a::Malloc(8 * kMiB);
  a::Free(p);
  EXPECT_TRUE(EventsAbout(ReadOwnTrace(), {p}).empty());
}

TEST_F(AllocCoreTest, ForkedChildRecordsOnlyItsOwnBlocks) {
  char* inherited = static_cast<char*>(a::Malloc(2 * kMiB));
  char* grows = static_cast<char*>(a::Malloc(2 * kMiB));
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    a::Free(inherited);
    void* moved = a::Realloc(grows, 6 * kMiB);
    void* own = a::Malloc(3 * kMiB);
    a::Free(own);
    a::Free(moved);
    FinishProcess(fields::kUnderscoreExit, 0);
    _exit(0);
  }
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  e2e::ProcessTrace child = ReadOwnTrace(static_cast<uint32_t>(pid));
  EXPECT_EQ(child.header.origin(), trace::ORIGIN_FORK);
  EXPECT_EQ(child.header.ppid(), static_cast<uint32_t>(getpid()));
  std::vector<std::string> events;
  for (const auto* p : child.Allocs()) events.push_back(e2e::Describe(*p));
  ASSERT_EQ(events.size(), 4u);
  // The realloc'd inherited block appears only as the new block's origin.
  EXPECT_EQ(events[0].rfind("alloc REALLOC ", 0), 0u);
  EXPECT_NE(events[0].find(" " + std::to_string(6 * kMiB) + " 0 " + std::to_string(U(grows))),
            std::string::npos);
  EXPECT_EQ(events[1].rfind("alloc MALLOC ", 0), 0u);
  EXPECT_EQ(events[2].rfind("free ", 0), 0u);
  EXPECT_EQ(events[3].rfind("free ", 0), 0u);
  // The parent still owns both blocks.
  HostBlock b;
  EXPECT_TRUE(Registry().FindBlock(U(inherited), &b));
  a::Free(inherited);
  a::Free(grows);
}

}  // namespace
}  // namespace pinscope::shim
