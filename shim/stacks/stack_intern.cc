// Lock-free intern tables for call stacks; see stack_intern.h.
// Open addressing with linear probing over mmap'd slots. A slot is claimed
// by a CAS on its first key word, then filled, then published by storing its
// value with release order; readers that find a claimed but unpublished slot
// wait a bounded while (a fork can leave a slot forever unpublished in the
// child: the waiters then just get no id for that one key).
#include "shim/stacks/stack_intern.h"

#include <sched.h>
#include <sys/mman.h>

#include <bit>
#include <cstring>

#include "shim/record/recorder.h"
#include "shim/record/trace_fields.h"

namespace pinscope::shim::intern {
namespace {

constexpr uint64_t kNoValue = ~uint64_t{0};  // claimed, but no id (table full)
constexpr size_t kMaxProbe = 512;

inline uint64_t Mum(uint64_t a, uint64_t b) {
  __uint128_t m = static_cast<__uint128_t>(a) * b;
  return static_cast<uint64_t>(m) ^ static_cast<uint64_t>(m >> 64);
}

constexpr uint64_t kP0 = 0xa0761d6478bd642full, kP1 = 0xe7037ed1a0b428dbull,
                   kP2 = 0x8ebc6af09c88c6e3ull, kP3 = 0x589965cc75374cc3ull;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

void* MapZeroed(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

std::atomic<uint32_t> g_epoch{1};
std::atomic<uint64_t> g_full_misses{0};

struct Slot {
  std::atomic<uint64_t> key_a;  // 0 = empty
  std::atomic<uint64_t> key_b;
  std::atomic<uint64_t> value;  // 0 = being filled in
  Mark mark;
  uint32_t pad;
};
static_assert(sizeof(Slot) == 32);

class Table {
 public:
  bool Init(size_t capacity) {
    if (slots_) return true;
    size_t n = 1;
    while (n < 2 * capacity) n <<= 1;
    slots_ = static_cast<Slot*>(MapZeroed(n * sizeof(Slot)));
    if (!slots_) return false;
    mask_ = n - 1;
    capacity_ = capacity;
    return true;
  }

  // Finds (a, b); when absent and `insert`, claims a slot and stores make()
  // (0 from make() means "no id"). Returns the slot or nullptr.
  template <typename Make>
  Slot* Find(uint64_t a, uint64_t b, bool insert, Make&& make) {
    size_t i = Mum(a ^ kP2, kP3) & mask_;
    for (size_t probe = 0; probe < kMaxProbe; ++probe, i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      uint64_t ka = s.key_a.load(std::memory_order_acquire);
      if (ka == 0) {
        if (!insert) return nullptr;
        if (used_.load(std::memory_order_relaxed) >= capacity_) {
          g_full_misses.fetch_add(1, std::memory_order_relaxed);
          return nullptr;
        }
        if (s.key_a.compare_exchange_strong(ka, a, std::memory_order_acq_rel)) {
          used_.fetch_add(1, std::memory_order_relaxed);
          s.key_b.store(b, std::memory_order_relaxed);
          uint64_t v = make();
          s.value.store(v ? v : kNoValue, std::memory_order_release);
          if (!v) g_full_misses.fetch_add(1, std::memory_order_relaxed);
          return v ? &s : nullptr;
        }
        // Lost the race for this slot: ka now holds the winner's key.
      }
      if (ka != a) continue;
      uint64_t v = WaitValue(s);
      if (v == 0) return nullptr;
      if (s.key_b.load(std::memory_order_relaxed) != b) continue;
      if (v == kNoValue) {
        g_full_misses.fetch_add(1, std::memory_order_relaxed);
        return nullptr;
      }
      return &s;
    }
    g_full_misses.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }

  size_t used() const { return used_.load(std::memory_order_relaxed); }

 private:
  static uint64_t WaitValue(Slot& s) {
    for (int i = 0; i < 4096; ++i) {
      uint64_t v = s.value.load(std::memory_order_acquire);
      if (v) return v;
      if (i < 1024) {
        CpuRelax();
      } else {
        sched_yield();
      }
    }
    return 0;
  }

  Slot* slots_ = nullptr;
  size_t mask_ = 0;
  size_t capacity_ = 0;
  std::atomic<size_t> used_{0};
};

struct StringEntry {
  uint64_t offset;
  uint32_t len;
  Mark mark;
};

struct FrameEntry {
  uint32_t filename_id;
  uint32_t function_id;
  uint32_t line;
  Mark mark;
};

Table g_stacks, g_strings, g_frames, g_code, g_sites;
std::atomic<uint64_t> g_next_stack{0}, g_next_string{0}, g_next_frame{0};
StringEntry* g_string_entries = nullptr;  // indexed by id (1..kMaxStrings)
FrameEntry* g_frame_entries = nullptr;    // indexed by id (1..kMaxFrames)
char* g_arena = nullptr;
std::atomic<size_t> g_arena_used{0};
std::atomic<bool> g_ready{false};

}  // namespace

// Two independent lanes (no dependency between them, so they run in
// parallel): a folding 128-bit multiply and a multiply-rotate.
Hash128 HashWords(const uint64_t* w, size_t n) {
  uint64_t a = kP0 ^ n, b = kP1 + n;
  for (size_t i = 0; i < n; ++i) {
    a = Mum(a ^ w[i], kP2);
    b = std::rotl((b ^ w[i]) * kP3, 29);
  }
  return {Mum(a, kP1) | 1, Mum(b ^ kP0, kP2 ^ a)};
}

Hash128 HashBytes(const void* data, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint64_t a = kP1 ^ n, b = kP0 + n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    a = Mum(a ^ w, kP2);
    b = Mum(b + w, kP3) ^ (a >> 29);
  }
  if (i < n) {
    uint64_t w = 0;
    memcpy(&w, p + i, n - i);
    a = Mum(a ^ w ^ 0xff, kP2);
    b = Mum(b + w, kP3) ^ (a >> 29);
  }
  return {Mum(a, kP1) | 1, Mum(b ^ kP0, kP2)};
}

bool Init() {
  if (g_ready.load(std::memory_order_acquire)) return true;
  // Called once from InitProcess (single-threaded), or from tests.
  if (!g_stacks.Init(kMaxStacks) || !g_strings.Init(kMaxStrings) || !g_frames.Init(kMaxFrames) ||
      !g_code.Init(kMaxCodeObjects) || !g_sites.Init(kMaxSites))
    return false;
  if (!g_string_entries)
    g_string_entries =
        static_cast<StringEntry*>(MapZeroed((kMaxStrings + 1) * sizeof(StringEntry)));
  if (!g_frame_entries)
    g_frame_entries = static_cast<FrameEntry*>(MapZeroed((kMaxFrames + 1) * sizeof(FrameEntry)));
  if (!g_arena) g_arena = static_cast<char*>(MapZeroed(kStringArenaBytes));
  if (!g_string_entries || !g_frame_entries || !g_arena) return false;
  g_ready.store(true, std::memory_order_release);
  return true;
}

bool Ready() { return g_ready.load(std::memory_order_relaxed); }

void ResetInChild() { g_epoch.fetch_add(1, std::memory_order_relaxed); }

bool ClaimWrite(Mark* mark) {
  const uint32_t epoch = g_epoch.load(std::memory_order_relaxed);
  const uint32_t done = 2 * epoch + 1, pending = 2 * epoch;
  uint32_t v = mark->load(std::memory_order_acquire);
  if (v == done) return false;
  for (int spin = 0;; ++spin) {
    if (v == done) return false;
    if (v != pending) {
      if (mark->compare_exchange_weak(v, pending, std::memory_order_acq_rel)) return true;
      continue;
    }
    // Another thread is writing this packet right now; wait for it so that
    // our event follows the definition in the file (bounded: it may be
    // blocked on a disk write, or be a thread that vanished in a fork).
    if (spin > 2000) return false;
    if (spin < 200) {
      CpuRelax();
    } else {
      sched_yield();
    }
    v = mark->load(std::memory_order_acquire);
  }
}

void FinishWrite(Mark* mark, bool ok) {
  const uint32_t epoch = g_epoch.load(std::memory_order_relaxed);
  mark->store(ok ? 2 * epoch + 1 : 0, std::memory_order_release);
}

uint64_t InternStack(Hash128 h, Mark** mark) {
  Slot* s = g_stacks.Find(h.a, h.b, true, [] {
    uint64_t id = g_next_stack.fetch_add(1, std::memory_order_relaxed) + 1;
    return id <= kMaxStacks ? id : 0;
  });
  if (!s) return 0;
  *mark = &s->mark;
  return s->value.load(std::memory_order_relaxed);
}

uint64_t InternString(const char* str, size_t n) {
  if (!str || n == 0 || !Ready()) return 0;
  if (n > kMaxStringBytes) {
    n = kMaxStringBytes;
    while (n > 0 && (static_cast<unsigned char>(str[n]) & 0xC0) == 0x80) --n;  // UTF-8 boundary
  }
  Hash128 h = HashBytes(str, n);
  Slot* s = g_strings.Find(h.a, h.b, true, [&]() -> uint64_t {
    size_t off = g_arena_used.fetch_add(n, std::memory_order_relaxed);
    if (off + n > kStringArenaBytes) return 0;
    uint64_t id = g_next_string.fetch_add(1, std::memory_order_relaxed) + 1;
    if (id > kMaxStrings) return 0;
    memcpy(g_arena + off, str, n);
    g_string_entries[id].offset = off;
    g_string_entries[id].len = static_cast<uint32_t>(n);
    return id;
  });
  return s ? s->value.load(std::memory_order_relaxed) : 0;
}

bool EnsureStringWritten(uint64_t id, uint64_t ts) {
  if (id == 0) return true;  // no string (the table was full): nothing to write
  if (id > kMaxStrings || !Ready()) return false;
  StringEntry& e = g_string_entries[id];
  if (!ClaimWrite(&e.mark)) return true;
  Packet p(fields::packet::kInternedString, ts);
  p.e().Varint(fields::interned_string::kId, id);
  p.e().StringN(fields::interned_string::kStr, g_arena + e.offset, e.len);
  bool ok = p.Commit();
  FinishWrite(&e.mark, ok);
  return ok;
}

uint64_t InternFrame(uint64_t filename_id, uint64_t function_id, uint32_t line) {
  if (!Ready()) return 0;
  if (line > 0x7FFFFF) line = 0x7FFFFF;
  // Exact key: string ids are < 2^20 (kMaxStrings), lines < 2^23.
  static_assert(kMaxStrings < (1u << 20));
  uint64_t key =
      (1ull << 63) | (filename_id & 0xFFFFF) << 43 | (function_id & 0xFFFFF) << 23 | line;
  Slot* s = g_frames.Find(key, 0, true, [&]() -> uint64_t {
    uint64_t id = g_next_frame.fetch_add(1, std::memory_order_relaxed) + 1;
    if (id > kMaxFrames) return 0;
    g_frame_entries[id].filename_id = static_cast<uint32_t>(filename_id);
    g_frame_entries[id].function_id = static_cast<uint32_t>(function_id);
    g_frame_entries[id].line = line;
    return id;
  });
  return s ? s->value.load(std::memory_order_relaxed) : 0;
}

bool EnsureFrameWritten(uint64_t id, uint64_t ts) {
  if (id == 0 || id > kMaxFrames || !Ready()) return false;
  FrameEntry& e = g_frame_entries[id];
  if (!ClaimWrite(&e.mark)) return true;
  bool ok = EnsureStringWritten(e.filename_id, ts) && EnsureStringWritten(e.function_id, ts);
  namespace f = fields::python_frame;
  Packet p(fields::packet::kPythonFrame, ts);
  p.e().Varint(f::kId, id);
  p.e().Varint(f::kFilenameId, e.filename_id);
  p.e().Varint(f::kFunctionId, e.function_id);
  p.e().Varint(f::kLine, e.line);
  ok = p.Commit() && ok;
  FinishWrite(&e.mark, ok);
  return ok;
}

bool LookupCode(const void* code, uint64_t tag, uint64_t* filename_id, uint64_t* function_id) {
  if (!Ready()) return false;
  Slot* s = g_code.Find(reinterpret_cast<uintptr_t>(code), tag, false, [] { return uint64_t{0}; });
  if (!s) return false;
  uint64_t v = s->value.load(std::memory_order_relaxed);
  *filename_id = v >> 32;
  *function_id = v & 0xFFFFFFFFu;
  return true;
}

bool InsertCode(const void* code, uint64_t tag, uint64_t filename_id, uint64_t function_id) {
  if (!Ready() || !filename_id || !function_id) return false;
  uint64_t v = filename_id << 32 | function_id;
  bool made = false;
  Slot* s = g_code.Find(reinterpret_cast<uintptr_t>(code), tag, true, [&] {
    made = true;
    return v;
  });
  return s && made;
}

uint64_t LookupSite(const void* code, uint64_t tag) {
  if (!Ready()) return 0;
  Slot* s = g_sites.Find(reinterpret_cast<uintptr_t>(code), tag, false, [] { return uint64_t{0}; });
  return s ? s->value.load(std::memory_order_relaxed) : 0;
}

void InsertSite(const void* code, uint64_t tag, uint64_t frame_id) {
  if (!Ready() || !frame_id) return;
  g_sites.Find(reinterpret_cast<uintptr_t>(code), tag, true, [frame_id] { return frame_id; });
}

Stats GetStats() {
  return Stats{g_stacks.used(), g_frames.used(), g_strings.used(), g_code.used(),
               g_full_misses.load(std::memory_order_relaxed)};
}

}  // namespace pinscope::shim::intern
