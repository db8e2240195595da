// Call stack capture at recorded events; see stacks.h and docs/stacks.md.
//
// libunwind is loaded with dlopen(RTLD_LOCAL), not linked: Debian's
// libunwind.so.8 also defines the C++ unwinder ABI (_Unwind_RaiseException,
// _Unwind_Resume, ...) without symbol versions, so as a NEEDED library of a
// preloaded object it lands in the global scope ahead of libgcc_s and every
// C++ exception of the job (libstdc++, libtorch) would be thrown by
// libunwind's implementation instead (checked with LD_DEBUG=bindings). Loaded
// locally, only pinscope sees it. It is looked for next to libpinscope.so
// first (the install carries it there), then on the system search path.
#include "shim/stacks/stacks.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <atomic>

#if __has_include(<libunwind.h>)
#define UNW_LOCAL_ONLY
#include <libunwind.h>
#define PINSCOPE_STR2(x) #x
#define PINSCOPE_STR(x) PINSCOPE_STR2(x)
// The local-only, architecture-prefixed names (_ULx86_64_...).
#define PINSCOPE_UNW_SET_CACHING PINSCOPE_STR(unw_set_caching_policy)
#define PINSCOPE_UNW_LOCAL_AS PINSCOPE_STR(unw_local_addr_space)
#define PINSCOPE_UNW_PER_THREAD UNW_CACHE_PER_THREAD
#elif defined(__x86_64__)
#define PINSCOPE_UNW_SET_CACHING "_ULx86_64_set_caching_policy"
#define PINSCOPE_UNW_LOCAL_AS "_ULx86_64_local_addr_space"
#define PINSCOPE_UNW_PER_THREAD 2
#elif defined(__aarch64__)
#define PINSCOPE_UNW_SET_CACHING "_ULaarch64_set_caching_policy"
#define PINSCOPE_UNW_LOCAL_AS "_ULaarch64_local_addr_space"
#define PINSCOPE_UNW_PER_THREAD 2
#endif

#include "shim/base/clock.h"
#include "shim/base/guard.h"
#include "shim/base/log.h"
#include "shim/record/recorder.h"
#include "shim/record/trace_fields.h"
#include "shim/stacks/module_map.h"
#include "shim/stacks/python_frames.h"
#include "shim/stacks/stack_intern.h"

namespace pinscope::shim {
namespace {

using BacktraceFn = int (*)(void**, int);
using SetCachingFn = int (*)(void*, int);

// Frames above the caller of CaptureStack that unw_backtrace may report
// (CaptureNative, CaptureStack, inlined helpers) and the hook's own frames.
constexpr int kSlack = 16;

BacktraceFn g_backtrace = nullptr;
bool g_python = false;
std::atomic<bool> g_ready{false};
std::atomic<bool> g_said_unwind{false};
std::atomic<bool> g_notice_unwind{false};
std::atomic<bool> g_notice_full{false};
char g_unwind_problem[512];

// Loads libunwind.so.8 locally; on failure fills g_unwind_problem.
void LoadLibunwind() {
  static const char kName[] = "libunwind.so.8";
  char path[4200];
  const char* tried[2] = {nullptr, kName};
  Dl_info di{};
  if (dladdr(reinterpret_cast<void*>(&CaptureStack), &di) && di.dli_fname) {
    const char* slash = strrchr(di.dli_fname, '/');
    if (slash) {
      size_t n =
          std::min(static_cast<size_t>(slash - di.dli_fname + 1), sizeof path - sizeof kName);
      memcpy(path, di.dli_fname, n);
      memcpy(path + n, kName, sizeof kName);
      tried[0] = path;
    }
  }
  void* h = nullptr;
  bool already_loaded = false;
  for (const char* p : tried) {
    if (!p) continue;
    if ((h = dlopen(p, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD))) {
      already_loaded = true;
      break;
    }
    if ((h = dlopen(p, RTLD_NOW | RTLD_LOCAL))) break;
  }
  if (!h) {
    const char* err = dlerror();
    snprintf(g_unwind_problem, sizeof g_unwind_problem,
             "cannot load libunwind.so.8 (%s): call stacks have Python frames only",
             err ? err : "not found");
    return;
  }
  auto bt = reinterpret_cast<BacktraceFn>(dlsym(h, "unw_backtrace"));
  if (!bt) {
    snprintf(g_unwind_problem, sizeof g_unwind_problem,
             "libunwind.so.8 has no unw_backtrace: call stacks have Python frames only");
    return;
  }
#ifdef PINSCOPE_UNW_SET_CACHING
  // Per-thread caches: the default global cache takes a lock and blocks
  // signals (two sigprocmask calls) at every step. Left alone if the program
  // loaded libunwind itself: its settings are its own.
  if (!already_loaded) {
    auto set = reinterpret_cast<SetCachingFn>(dlsym(h, PINSCOPE_UNW_SET_CACHING));
    auto as = static_cast<void**>(dlsym(h, PINSCOPE_UNW_LOCAL_AS));
    if (set && as && *as) set(*as, PINSCOPE_UNW_PER_THREAD);
  }
#endif
  // Warm up: libunwind initializes itself (and this thread's frame cache)
  // on first use; better here than inside the first event.
  void* warm[4];
  bt(warm, 4);
  g_backtrace = bt;
}

// Native return addresses of the caller of CaptureStack and up. Drops the
// shim's frames: everything above `ra` (the return address into the caller
// of CaptureStack), and then frames inside libpinscope.so.
__attribute__((noinline)) size_t CaptureNative(void* ra, uint64_t* out, uint32_t depth,
                                               bool* truncated) {
  void* raw[kMaxStackDepth + kSlack + 1];
  const int cap = static_cast<int>(depth) + kSlack + 1;
  int n = g_backtrace(raw, cap);
  if (n <= 0) return 0;
  int start = 0;
  for (int i = 0; i < n && i < kSlack; ++i) {
    if (raw[i] == ra) {
      start = i;
      break;
    }
  }
  while (start < n && modules::InShim(reinterpret_cast<uintptr_t>(raw[start]))) ++start;
  const size_t avail = static_cast<size_t>(n - start);
  *truncated = avail > depth || n == cap;
  const size_t count = std::min<size_t>(avail, depth);
  for (size_t i = 0; i < count; ++i) out[i] = reinterpret_cast<uintptr_t>(raw[start + i]);
  return count;
}

// Keys from the shim's frame chain (ProgramCaller) agree with the unwinder
// so far; cleared at the first stack where they do not.
std::atomic<bool> g_frame_key{true};

// The return address into the program of the hook that called
// CaptureStack: the shim's frames followed by their frame pointers (every
// layer is built with them, shim/CMakeLists.txt) up to the first return
// address outside libpinscope.so. On the H100 the unwinder's 12 innermost
// frames, a cached stack's native key, took 9.6 us (call 51); this reads a
// few words of this thread's stack. 0 where the chain does not look like
// one (a frame pointer not above the last, or more than 64 KiB up). Inlined:
// the walk starts at CaptureStack's own frame.
__attribute__((always_inline)) inline uint64_t ProgramCaller() {
  auto* fp = static_cast<const uintptr_t*>(__builtin_frame_address(0));
  for (int i = 0; i < 8; ++i) {
    const uintptr_t ra = fp[1];
    if (!modules::InShim(ra)) return ra;
    const auto* next = reinterpret_cast<const uintptr_t*>(fp[0]);
    if (next <= fp || next - fp > 8192 || reinterpret_cast<uintptr_t>(next) % 8 != 0) return 0;
    fp = next;
  }
  return 0;
}

// First sight of a stack in this file: its modules, its Python frames (and
// their strings), then the Stack packet itself.
__attribute__((noinline)) bool WriteStack(uint64_t id, const uint64_t* words, size_t nn, size_t np,
                                          bool ntrunc, bool ptrunc, uint64_t ts) {
  modules::EnsureWritten(words, nn, ts);
  for (size_t i = 0; i < np; ++i) intern::EnsureFrameWritten(words[nn + i], ts);
  namespace s = fields::stack;
  Packet p(fields::packet::kStack, ts);
  p.e().Varint(s::kId, id);
  p.e().PackedVarints(s::kNativePcs, words, nn);
  p.e().PackedVarints(s::kPythonFrames, words + nn, np);
  p.e().Bool(s::kTruncated, ntrunc);
  p.e().Bool(s::kPythonTruncated, ptrunc);
  return p.Commit();
}

// The stacks' own cost and the cache's answers (Counters), a cache line a
// site: copies and waits are captured on the training loop's thread, shared
// memory on the DataLoader's pin thread, on other cores; one line for all
// would move between them at every capture.
struct alignas(64) SiteCounters {
  std::atomic<uint64_t> captures{0}, capture_ns{0}, python_ns{0}, cache_hits{0}, cache_checks{0};
};
constexpr int kSites = static_cast<int>(StackSite::kSync) + 1;
SiteCounters g_site[kSites];

// The stack cache (stacks.h): per thread, two-way set-associative, keyed on
// the innermost native frames, the depth and the Python frames. An entry
// holds a stack whose packet is written in this file (a fork clears the
// forking thread's, the only one the child has). 16 bytes (initial-exec TLS is scarce
// where the shim is dlopen'ed): the key's two low bits, clear in every key,
// hold the entry's state.
struct CacheEntry {
  uint64_t key;
  uint64_t id;
};
// kNew: its next answer is checked. kChecked: a check found it right; then
// one answer in kStackCacheCheck is checked. kRefreshed: a check found
// another stack, which the entry now holds, checked again next time.
// kOff: the check right after a refresh found yet another stack (two
// callers share the key), or the entry was refreshed kMaxRefreshes times;
// this site is unwound in full from now on.
enum : uint64_t { kNew = 0, kChecked = 1, kRefreshed = 2, kOff = 3, kStateBits = 3 };
// An entry's id word: the stack id (below 2^32: kMaxStacks) and, above it,
// how many times the entry was refreshed.
constexpr uint64_t kIdMask = 0xffffffffu;
static_assert(intern::kMaxStacks < kIdMask);
constexpr uint64_t kMaxRefreshes = 8;
constexpr size_t kCacheEntries = 64;
PINSCOPE_TLS CacheEntry t_stack_cache[kCacheEntries];
// xorshift32 state for the checks at random (never 0 once seeded); its
// low bit also picks the way a miss replaces in a full pair.
PINSCOPE_TLS uint32_t t_check_rng = 0;

// True for about one answer in kStackCacheCheck, at random: a periodic
// check could keep missing a caller that alternates with that period.
bool CheckThisOne() {
  uint32_t x = t_check_rng ? t_check_rng : 0x9e3779b9u;
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  t_check_rng = x;
  return x % kStackCacheCheck == 0;
}
std::atomic<bool> g_notice_site_off{false}, g_notice_frame_key{false};

// The key of what `words` holds: the stacks' own content hash, folded to
// 64 bits; never 0 (an empty entry's key), the state bits clear.
uint64_t CacheKey(const uint64_t* words, size_t n) {
  const intern::Hash128 h = intern::HashWords(words, n);
  return ((h.a ^ h.b) & ~kStateBits) | (uint64_t{1} << 63);
}

void SayOnce(std::atomic<bool>* flag, const char* code, const char* text) {
  if (flag->exchange(true)) return;
  RecordNotice(fields::kWarning, code, text);
}

}  // namespace

void StacksInit() {
  const Config& config = GetConfig();
  if (config.stack_depth == 0 || g_ready.load()) return;
  if (!intern::Init() || !modules::Init(reinterpret_cast<void*>(&CaptureStack))) {
    Log("call stacks: cannot map the stack tables; recording without call stacks");
    return;
  }
  LoadLibunwind();
  if (!g_backtrace) LogOnce(&g_said_unwind, "%s", g_unwind_problem);
  g_python = config.python_stacks && python::Init();
  g_ready.store(g_backtrace != nullptr || g_python, std::memory_order_release);
}

__attribute__((noinline)) uint64_t CaptureStack(StackSite site) {
  if (!g_ready.load(std::memory_order_acquire) || !Recording()) return 0;
  const uint32_t depth = std::min(GetConfig().stack_depth, kMaxStackDepth);
  if (depth == 0) return 0;
  // pinscope's own cost on the job's threads (Counters.stack_capture_ns).
  SiteCounters& counters = g_site[static_cast<int>(site)];
  struct Timer {
    SiteCounters& c;
    uint64_t t0 = MonoNs();
    ~Timer() {
      c.capture_ns.fetch_add(MonoNs() - t0, std::memory_order_relaxed);
      c.captures.fetch_add(1, std::memory_order_relaxed);
    }
  } timer{counters};
  if (!g_backtrace && !g_notice_unwind.load(std::memory_order_relaxed))
    SayOnce(&g_notice_unwind, "stacks_native_unavailable", g_unwind_problem);
  // Key layout: native pcs, Python frame ids, then one word with both counts
  // and both truncation flags, so that the split is part of the identity.
  uint64_t words[2 * kMaxStackDepth + 1];
  bool ntrunc = false, ptrunc = false;
  size_t nn = 0, np = 0;
  // The Python frames first, at the end of the buffer. While the cache is
  // on, only their key where the frame walk gives one (python::CaptureKey);
  // their ids when the cache cannot answer.
  uint64_t* python_ids = words + kMaxStackDepth + 1;
  uint64_t pkey = 0;  // the Python frames' code and instructions, for the key
  const bool cache_on = g_backtrace && GetConfig().stack_cache;
  bool have_ids = false;
  if (g_python) {
    if (!cache_on || !python::CaptureKey(depth, &np, &ptrunc, &pkey)) {
      np = python::Capture(python_ids, depth, &ptrunc, &pkey);
      have_ids = true;
    }
    counters.python_ns.fetch_add(MonoNs() - timer.t0, std::memory_order_relaxed);
  }
  CacheEntry* entry = nullptr;
  uint64_t key = 0, cached = 0, state = kNew, refreshes = 0;
  uint64_t caller = 0;  // the program's return address from the hook, if the key has it
  if (cache_on) {
    // Right before the Python ids (the native part of the buffer is not
    // filled yet): the depth, the counts and flags, the Python key, then
    // the native part. Under Python frames that is the hook's return
    // address into the program (ProgramCaller); else, or where the shim's
    // frame chain does not give it, the innermost frames as unw_backtrace
    // gives them (the shim's included: they name the hook).
    uint64_t* kw = python_ids - (kStackKeyFrames + 3);
    int ni = 0;
    if (np > 0 && g_frame_key.load(std::memory_order_relaxed)) caller = ProgramCaller();
    if (caller != 0) {
      kw += kStackKeyFrames - 1;
      kw[3] = caller;
      ni = 1;
    } else {
      void* inner[kStackKeyFrames];
      ni = std::max(g_backtrace(inner, kStackKeyFrames), 0);
      kw += kStackKeyFrames - ni;
      for (int i = 0; i < ni; ++i) kw[3 + i] = reinterpret_cast<uintptr_t>(inner[i]);
    }
    kw[0] = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
    kw[1] = static_cast<uint64_t>(ni) | np << 16 | uint64_t{ptrunc} << 32 |
            uint64_t{caller != 0} << 33 | uint64_t{have_ids} << 34;
    // Two calls on one Python line share its frame ids; their instructions
    // differ, and so may the interpreter's C frames below them (the
    // Hugging Face Trainer's two D2H copies a step, one line: 2026-12-05).
    kw[2] = pkey;
    // With the ids (Capture), they are part of the key; CaptureKey's key
    // stands for them.
    key = CacheKey(kw, static_cast<size_t>(ni) + 3 + (have_ids ? np : 0));
    // Two ways: the pair of entries a key maps to (the state bits left
    // out). Direct-mapped, two sites of a loop whose keys met in one entry
    // (1 in 64 runs: a key holds the stack's address) evicted each other at
    // every call and were never answered.
    CacheEntry* set = &t_stack_cache[((key >> 2) % kCacheEntries) & ~size_t{1}];
    const bool found = (set[0].key & ~kStateBits) == key || (set[1].key & ~kStateBits) == key;
    if (found) {
      entry = (set[0].key & ~kStateBits) == key ? &set[0] : &set[1];
    } else if (set[0].key == 0 || set[1].key == 0) {  // a miss: an empty way
      entry = set[0].key == 0 ? &set[0] : &set[1];
    } else {  // else one at random
      CheckThisOne();
      entry = &set[t_check_rng & 1];
    }
    if (found) {
      state = entry->key & kStateBits;
      if (state == kChecked && !CheckThisOne()) {
        counters.cache_hits.fetch_add(1, std::memory_order_relaxed);
        return entry->id & kIdMask;
      }
      if (state == kOff) {
        entry = nullptr;  // unwound in full, nothing cached
      } else {
        cached = entry->id & kIdMask;  // this answer is checked: unwound in full below
        refreshes = entry->id >> 32;
        counters.cache_checks.fetch_add(1, std::memory_order_relaxed);
      }
    }
  }
  if (g_python && !have_ids) {  // the cache cannot answer: the frames' ids
    const uint64_t t0 = MonoNs();
    np = python::Capture(python_ids, depth, &ptrunc);
    counters.python_ns.fetch_add(MonoNs() - t0, std::memory_order_relaxed);
  }
  if (g_backtrace) nn = CaptureNative(__builtin_return_address(0), words, depth, &ntrunc);
  // words[0]: the unwinder's first frame in the program.
  if (caller != 0 && nn > 0 && caller != words[0]) {
    // The shim's frame chain named another caller than the unwinder: keys
    // from it cannot be trusted here. The innermost frames from now on.
    g_frame_key.store(false, std::memory_order_relaxed);
    entry = nullptr;
    SayOnce(&g_notice_frame_key, "stack_cache_frame_key_off",
            "the shim's frame chain named another caller than the unwinder: the stack cache "
            "keys on the innermost native frames from now on");
  }
  if (np > 0) memmove(words + nn, python_ids, np * sizeof(uint64_t));
  if (nn + np == 0) return 0;
  words[nn + np] = nn | np << 16 | uint64_t{ntrunc} << 32 | uint64_t{ptrunc} << 33;
  intern::Mark* mark = nullptr;
  uint64_t id = intern::InternStack(intern::HashWords(words, nn + np + 1), &mark);
  if (id == 0) {
    SayOnce(&g_notice_full, "stack_table_full",
            "the call stack table is full: stacks first seen from now on are not recorded");
    return 0;
  }
  // The packets' time is taken only when they are written (first sight in
  // this file); it precedes the event's own timestamp in the copy hooks.
  bool written = true;
  if (intern::ClaimWrite(mark)) {
    written = WriteStack(id, words, nn, np, ntrunc, ptrunc, MonoNs());
    intern::FinishWrite(mark, written);
  }
  if (entry == nullptr || !written) return id;
  if (cached == 0 || cached == id) {  // a first sight, or a check that agreed
    *entry = {key | (cached == id ? kChecked : kNew), id | refreshes << 32};
    return id;
  }
  // A check found another stack under the key. CPython does that below the
  // same Python frames: it specializes a call after a few runs of it (the
  // twentieth session's Hugging Face Trainer: every site, after 3 copies),
  // and it may specialize or deoptimize it again much later
  // (tools/bench/stack_cache_loop.py: one return address inside the
  // interpreter changed after 60,000-80,000 copies). Such a change stays:
  // the entry takes the new stack and its next answer is checked. Two
  // callers that share the key alternate instead: the check right after a
  // refresh finds yet another stack, and the site is unwound in full from
  // then on; so is a site refreshed kMaxRefreshes times. Between a change
  // and the check that sees it, the cache answers the previous stack: about
  // kStackCacheCheck answers, once per change.
  if (state != kRefreshed && refreshes < kMaxRefreshes) {
    *entry = {key | kRefreshed, id | (refreshes + 1) << 32};
    return id;
  }
  entry->key = key | kOff;
  SayOnce(&g_notice_site_off, "stack_cache_site_off",
          "a call site's cached call stack kept differing from a full unwind (two callers share "
          "its key): that site is unwound in full from now on (the stack cache stays on for the "
          "others)");
  return id;
}

StackCacheStats GetStackCacheStats() {
  StackCacheStats out{};
  for (const SiteCounters& c : g_site) {
    out.hits += c.cache_hits.load(std::memory_order_relaxed);
    out.checks += c.cache_checks.load(std::memory_order_relaxed);
  }
  return out;
}

StackCost GetStackCost() {
  StackCost out{};
  for (const SiteCounters& c : g_site) {
    out.captured += c.captures.load(std::memory_order_relaxed);
    out.ns += c.capture_ns.load(std::memory_order_relaxed);
    out.python_ns += c.python_ns.load(std::memory_order_relaxed);
  }
  return out;
}

void StacksResetInChild() {
  for (SiteCounters& c : g_site) {
    c.captures.store(0, std::memory_order_relaxed);
    c.capture_ns.store(0, std::memory_order_relaxed);
    c.python_ns.store(0, std::memory_order_relaxed);
    c.cache_hits.store(0, std::memory_order_relaxed);
    c.cache_checks.store(0, std::memory_order_relaxed);
  }
  intern::ResetInChild();
  modules::ResetInChild();
  // The stacks the cache names are not written in the child's file.
  memset(t_stack_cache, 0, sizeof t_stack_cache);
}

}  // namespace pinscope::shim
