// Slow paths of the malloc family (the real functions: memory/real_alloc.h);
// see alloc_core.h. Recording order, as heaptrack and Perfetto do it: a new
// block is recorded after the real call returned it; a block going away is
// recorded BEFORE the real free/realloc, because the moment glibc has it back
// another thread may receive the same address and record it, and its
// HostAlloc must come after our HostFree in the trace.
#include "shim/core/alloc_core.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstring>

#include "shim/base/clock.h"
#include "shim/base/guard.h"
#include "shim/base/log.h"
#include "shim/base/own_cost.h"
#include "shim/memory/block_registry.h"
#include "shim/pin/pinning.h"
#include "shim/record/recorder.h"
#include "shim/stacks/stacks.h"

namespace pinscope::shim::alloc {
namespace {

namespace f = fields;

// --- recording ---------------------------------------------------------------

std::atomic<uint64_t> g_dropped{0};
std::atomic<bool> g_said_libc{false};

uintptr_t g_shim_begin = 0, g_shim_end = 0;

bool ShouldRecord(const void* caller) {
  auto c = reinterpret_cast<uintptr_t>(caller);
  return !InHook() && Recording() && !(c >= g_shim_begin && c < g_shim_end);
}

uint64_t PageSize() {
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  return page;
}

// Registers and records a new block (the guard is set). A block the
// registry cannot hold is not recorded either, so every HostAlloc in the
// trace gets its HostFree. False if the registry could not hold it.
bool Track(uint32_t api, void* p, size_t n, uint64_t alignment, void* old, uint64_t t) {
  HookCostTimer cost(HookKind::kAlloc);
  HostBlock b;
  b.address = reinterpret_cast<uintptr_t>(p);
  b.size = n;
  b.alignment = alignment;
  b.api = api;
  if (!Registry().AddBlock(b)) {
    g_dropped.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  uint64_t stack = CaptureStack(StackSite::kAlloc);
  RecordAlloc(api, b.address, n, alignment, reinterpret_cast<uintptr_t>(old), stack, t);
  return true;
}

// A freed block pinscope kept registered (pinning's recycle list) that fits
// a new request of n bytes at `alignment`: recorded exactly as a fresh
// allocation, then the REUSE. nullptr (the caller allocates as usual) when
// none fits. The guard is set. One relaxed load while the list is empty.
void* Reuse(uint32_t api, size_t n, size_t alignment, uint64_t t) {
  if (!PinHasKept()) return nullptr;
  KeptTake k;
  if (!PinTakeKept(n, alignment, &k)) return nullptr;
  void* p = reinterpret_cast<void*>(k.base);
  if (!Track(api, p, n, alignment, nullptr, t)) {
    // Not recorded, so its free would never reach pinning: unpin it now
    // (kept allocated if CUDA will not unregister it).
    if (!PinOnFree(p, "free")) g_real.free(p);
    return nullptr;
  }
  PinNoteReuse(k);
  return p;
}

// Forgets a block that is about to go back to glibc, unpinning it first and
// recording its free if this process recorded it (a forked child does not
// record frees of blocks it inherited: they are the parent's allocations).
// Must run before the real free/realloc. Returns false if p is not recorded.
// *kept: pinning kept the block registered - for reuse (a plain free only),
// or because CUDA would not unregister it - and the caller must then not
// free it nor realloc it.
bool Untrack(void* p, bool by_realloc, HostBlock* out, bool* kept) {
  uint64_t addr = reinterpret_cast<uintptr_t>(p);
  const uint64_t t0 = MonoNs();
  if (!Registry().RemoveBlock(addr, out)) return false;
  bool own = out->epoch == Registry().epoch();
  uint64_t spent = MonoNs() - t0;  // pinscope's own cost: not pinning's part
  // Registered memory must be unregistered before glibc may unmap or reuse
  // it (one relaxed load when pinscope pinned nothing).
  *kept = PinOnFree(p, by_realloc ? "realloc" : "free", !by_realloc && own);
  if (own) {
    const uint64_t t1 = MonoNs();
    RecordFree(addr, by_realloc, t1);
    spent += MonoNs() - t1;
  }
  AddHookCost(HookKind::kAlloc, spent);
  return true;
}

}  // namespace

std::atomic<size_t> g_trace_min{SIZE_MAX};
std::atomic<size_t> g_free_min{SIZE_MAX};
std::atomic<size_t> g_free_min_usable{SIZE_MAX};
bool g_aligned_alloc_strict = false;

bool MaybeRecordedOther(const void* p) {
  const size_t min = g_free_min_usable.load(std::memory_order_relaxed);
  return min != SIZE_MAX && UsableSize(const_cast<void*>(p)) >= min;
}

uint64_t DroppedBlocks() { return g_dropped.load(std::memory_order_relaxed); }

void InitAlloc() {
  static std::atomic<bool> done{false};
  if (done.exchange(true)) return;
  HookScope scope;
  ResolveRealAlloc();
  InstallRegistryForkHandlers();
  if (!NextHasUsableSize()) {
    LogOnce(&g_said_libc,
            "the C library is not glibc, or the allocator ahead of it has no "
            "malloc_usable_size: the malloc family passes straight through and host "
            "allocations are not recorded");
    return;
  }
  g_aligned_alloc_strict = GlibcAtLeast(2, 38);
  // How free tells a block that may be recorded: glibc's own allocator by
  // the chunk header below the pointer; any other (tcmalloc through the
  // __libc_* names, jemalloc or a sanitizer runtime through its own
  // functions) by its malloc_usable_size, which is at least the request,
  // never reading below a block.
  const bool glibc_itself = GlibcItself();
  bool chunk_ok = glibc_itself && GlibcChunkLayoutOk();
  if (!Recording()) return;
  size_t min = GetConfig().trace_min;
  // Free's filter first: once g_trace_min is set, blocks get recorded and
  // each of their frees must reach the registry.
  if (glibc_itself) {
    g_free_min.store(chunk_ok ? min : 0, std::memory_order_release);
  } else {
    g_free_min_usable.store(min, std::memory_order_release);
  }
  g_trace_min.store(min, std::memory_order_release);
}

void SetThresholdForTest(size_t min) {
  ResolveRealAlloc();
  // Free's filter as InitAlloc picks it: glibc's chunk header only when
  // glibc's own allocator serves the blocks (in a sanitizer build ASan's
  // does, and there is no header to read below its blocks).
  if (GlibcItself()) {
    g_free_min.store(min, std::memory_order_release);
  } else {
    g_free_min_usable.store(min, std::memory_order_release);
  }
  g_trace_min.store(min, std::memory_order_release);
}

void SetShimText(uintptr_t begin, uintptr_t end) {
  g_shim_begin = begin;
  g_shim_end = end;
}

void* MallocSlow(size_t n, const void* caller) {
  if (!ShouldRecord(caller)) return g_real.malloc(n);
  HookScope scope;
  uint64_t t = MonoNs();
  if (void* k = Reuse(f::kMalloc, n, 0, t)) return k;
  void* p = g_real.malloc(n);
  if (p == nullptr) {
    scope.KeepErrno(errno);
    return nullptr;
  }
  Track(f::kMalloc, p, n, 0, nullptr, t);
  return p;
}

void* CallocSlow(size_t nmemb, size_t size, const void* caller) {
  if (!ShouldRecord(caller)) return g_real.calloc(nmemb, size);
  HookScope scope;
  uint64_t t = MonoNs();
  void* p = g_real.calloc(nmemb, size);
  if (p == nullptr) {
    scope.KeepErrno(errno);
    return nullptr;
  }
  Track(f::kCalloc, p, nmemb * size, 0, nullptr, t);
  return p;
}

void* AlignedSlow(uint32_t api, size_t alignment, size_t n, const void* caller) {
  auto call = [&]() -> void* {
    switch (api) {
      case f::kValloc:
        return g_real.valloc(n);
      case f::kPvalloc:
        return g_real.pvalloc(n);
      default:
        return g_real.memalign(alignment, n);
    }
  };
  if (!ShouldRecord(caller)) return call();
  HookScope scope;
  uint64_t t = MonoNs();
  uint64_t recorded_alignment = (api == f::kValloc || api == f::kPvalloc) ? PageSize() : alignment;
  // pvalloc rounds the size up to pages: never served from the recycle list.
  if (api != f::kPvalloc)
    if (void* k = Reuse(api, n, recorded_alignment, t)) return k;
  void* p = call();
  if (p == nullptr) {
    scope.KeepErrno(errno);
    return nullptr;
  }
  Track(api, p, n, recorded_alignment, nullptr, t);
  return p;
}

void FreeSlow(void* p) {
  // A large chunk that is not recorded (made before tracing, by the shim
  // itself, or just under the threshold) costs one registry lookup. Frees
  // inside another hook still go through the registry: the block is the
  // program's even if a library we wrap frees it.
  if (Registry().live_blocks() == 0) return g_real.free(p);
  HookScope scope;
  HostBlock b;
  bool kept = false;
  Untrack(p, false, &b, &kept);
  if (!kept) g_real.free(p);
}

// realloc semantics in the trace (docs/host-memory.md):
//   old block recorded  -> HostFree(old, by_realloc) before the real call;
//   new size recorded   -> HostAlloc(REALLOC, new, old_address = old) after it,
//                          whether or not the old block was recorded or moved;
//   realloc fails       -> the old block is still live: HostAlloc of the old
//                          block again (its own api and size);
//   realloc(p, 0)       -> glibc frees p: the HostFree(by_realloc) alone.
void* ReallocSlow(void* p, size_t n, uint32_t api, const void* caller) {
  bool record_new = n >= TraceMin() && ShouldRecord(caller);
  bool maybe_old = p != nullptr && Registry().live_blocks() > 0;
  if (!record_new && !maybe_old) return g_real.realloc(p, n);
  HookScope scope;
  uint64_t t = MonoNs();
  HostBlock old;
  bool held = false;  // pinning keeps p allocated: CUDA would not unregister it
  bool had_old = maybe_old && Untrack(p, true, &old, &held);
  void* q = nullptr;
  if (!held) {
    q = g_real.realloc(p, n);
  } else if (n != 0) {
    // What realloc does when it moves the block, without giving p back
    // (realloc(p, 0) frees p and returns NULL: p just stays allocated).
    q = g_real.malloc(n);
    if (q) {
      size_t keep = UsableSize(p);
      memcpy(q, p, keep < n ? keep : n);
    }
  }
  if (q == nullptr) {
    int err = errno;
    if (had_old && n != 0 && old.epoch == Registry().epoch()) {
      HookCostTimer cost(HookKind::kAlloc);
      if (Registry().AddBlock(old)) {
        RecordAlloc(old.api, old.address, old.size, old.alignment, 0, 0, MonoNs());
      } else {
        g_dropped.fetch_add(1, std::memory_order_relaxed);
      }
    }
    scope.KeepErrno(err);
    return nullptr;
  }
  if (record_new) Track(api, q, n, 0, p, t);
  return q;
}

}  // namespace pinscope::shim::alloc
