// Loaded-module map for call stacks; see module_map.h.
// Entries are append-only (published by a release store of the count) so
// lookups take no lock; a rescan (under a mutex taken with trylock, never
// waited on while the loader may wait on us) appends new modules and marks
// vanished ones dead. A path loaded again at another address is a new entry;
// so is a different module at an address that an unloaded one used.
#include "shim/stacks/module_map.h"

#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "shim/record/recorder.h"
#include "shim/record/trace_fields.h"
#include "shim/stacks/stack_intern.h"

namespace pinscope::shim::modules {
namespace {

constexpr size_t kPathArenaBytes = 1u << 20;
constexpr size_t kMaxBuildIdBytes = 32;

struct Entry {
  uint64_t load, start, end;
  uint32_t path_off, path_len;
  char build_id[2 * kMaxBuildIdBytes + 1];
  std::atomic<bool> live;
  uint32_t seen_scan;
  intern::Mark mark;
};

Entry* g_entries = nullptr;
std::atomic<size_t> g_count{0};
char* g_paths = nullptr;
size_t g_paths_used = 0;  // under g_mu
pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
uint32_t g_scan = 0;  // under g_mu
std::atomic<unsigned long long> g_adds{0}, g_subs{0};
char g_exe[4096];
size_t g_exe_len = 0;
uint64_t g_self_start = 0, g_self_end = 0;
bool g_self_separate = false;
std::atomic<bool> g_ready{false};

void* MapZeroed(size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

struct Extent {
  uint64_t start = ~uint64_t{0}, end = 0;
};

Extent ExecExtent(const dl_phdr_info* info) {
  Extent x;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X) || ph.p_memsz == 0) continue;
    uint64_t s = info->dlpi_addr + ph.p_vaddr;
    if (s < x.start) x.start = s;
    if (s + ph.p_memsz > x.end) x.end = s + ph.p_memsz;
  }
  return x;
}

bool Loaded(const dl_phdr_info* info, uint64_t vaddr, uint64_t size) {
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD && vaddr >= ph.p_vaddr && vaddr + size <= ph.p_vaddr + ph.p_memsz)
      return true;
  }
  return false;
}

// GNU build id from the PT_NOTE segments in memory, as hex; "" if none.
void ReadBuildId(const dl_phdr_info* info, char* hex) {
  hex[0] = '\0';
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE || !Loaded(info, ph.p_vaddr, ph.p_memsz)) continue;
    const size_t align = ph.p_align == 8 ? 8 : 4;
    auto up = [align](size_t v) { return (v + align - 1) & ~(align - 1); };
    const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
    size_t left = ph.p_memsz;
    while (left >= sizeof(ElfW(Nhdr))) {
      ElfW(Nhdr) nh;
      memcpy(&nh, p, sizeof nh);
      size_t name_at = sizeof nh;
      size_t desc_at = name_at + up(nh.n_namesz);
      size_t next = desc_at + up(nh.n_descsz);
      if (next > left || next <= name_at) break;
      if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 && !memcmp(p + name_at, "GNU", 4) &&
          nh.n_descsz > 0 && nh.n_descsz <= kMaxBuildIdBytes) {
        static const char kHex[] = "0123456789abcdef";
        const unsigned char* d = reinterpret_cast<const unsigned char*>(p + desc_at);
        for (size_t k = 0; k < nh.n_descsz; ++k) {
          hex[2 * k] = kHex[d[k] >> 4];
          hex[2 * k + 1] = kHex[d[k] & 15];
        }
        hex[2 * nh.n_descsz] = '\0';
        return;
      }
      p += next;
      left -= next;
    }
  }
}

// The main program has an empty dlpi_name; it is the first object reported.
const char* PathOf(const dl_phdr_info* info, bool first, size_t* len) {
  if (info->dlpi_name && info->dlpi_name[0]) {
    *len = strlen(info->dlpi_name);
    return info->dlpi_name;
  }
  if (first) {
    *len = g_exe_len;
    return g_exe;
  }
  *len = 0;
  return "";
}

struct ScanState {
  bool first = true;
};

int ScanCallback(dl_phdr_info* info, size_t size, void* arg) {
  auto* st = static_cast<ScanState*>(arg);
  bool first = st->first;
  st->first = false;
  if (first && size >= offsetof(dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
    g_adds.store(info->dlpi_adds, std::memory_order_relaxed);
    g_subs.store(info->dlpi_subs, std::memory_order_relaxed);
  }
  Extent x = ExecExtent(info);
  if (x.end == 0) return 0;
  size_t path_len;
  const char* path = PathOf(info, first, &path_len);
  size_t n = g_count.load(std::memory_order_relaxed);
  for (size_t i = 0; i < n; ++i) {
    Entry& e = g_entries[i];
    if (e.load == info->dlpi_addr && e.start == x.start && e.end == x.end &&
        e.path_len == path_len && !memcmp(g_paths + e.path_off, path, path_len) &&
        e.live.load(std::memory_order_relaxed)) {
      e.seen_scan = g_scan;
      return 0;
    }
  }
  if (n >= kMaxModules || g_paths_used + path_len + 1 > kPathArenaBytes) return 0;
  Entry& e = g_entries[n];
  e.load = info->dlpi_addr;
  e.start = x.start;
  e.end = x.end;
  e.path_off = static_cast<uint32_t>(g_paths_used);
  e.path_len = static_cast<uint32_t>(path_len);
  memcpy(g_paths + g_paths_used, path, path_len);
  g_paths[g_paths_used + path_len] = '\0';
  g_paths_used += path_len + 1;
  ReadBuildId(info, e.build_id);
  e.seen_scan = g_scan;
  e.live.store(true, std::memory_order_relaxed);
  e.mark.store(0, std::memory_order_relaxed);
  g_count.store(n + 1, std::memory_order_release);
  return 0;
}

// Rescans the loaded modules. Returns false if another thread holds the lock
// for long (its scan will serve us next time).
bool Rescan() {
  int tries = 0;
  while (pthread_mutex_trylock(&g_mu) != 0) {
    if (++tries > 100) return false;
    sched_yield();
  }
  ++g_scan;
  ScanState st;
  dl_iterate_phdr(ScanCallback, &st);
  size_t n = g_count.load(std::memory_order_relaxed);
  for (size_t i = 0; i < n; ++i) {
    if (g_entries[i].seen_scan != g_scan) g_entries[i].live.store(false, std::memory_order_relaxed);
  }
  pthread_mutex_unlock(&g_mu);
  return true;
}

int CountersCallback(dl_phdr_info* info, size_t size, void* arg) {
  auto* out = static_cast<unsigned long long*>(arg);
  if (size >= offsetof(dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
    out[0] = info->dlpi_adds;
    out[1] = info->dlpi_subs;
  }
  return 1;  // the first object is enough
}

// True if modules were loaded or unloaded since the last scan.
bool LoaderChanged() {
  unsigned long long c[2] = {~0ull, ~0ull};
  dl_iterate_phdr(CountersCallback, c);
  return c[0] != g_adds.load(std::memory_order_relaxed) ||
         c[1] != g_subs.load(std::memory_order_relaxed);
}

long Lookup(uint64_t addr) {
  size_t n = g_count.load(std::memory_order_acquire);
  for (size_t i = 0; i < n; ++i) {
    const Entry& e = g_entries[i];
    if (addr >= e.start && addr < e.end && e.live.load(std::memory_order_relaxed))
      return static_cast<long>(i);
  }
  return -1;
}

bool WriteModule(const Entry& e, uint64_t ts) {
  namespace m = fields::module;
  Packet p(fields::packet::kModule, ts);
  p.e().StringN(m::kPath, g_paths + e.path_off, e.path_len);
  p.e().String(m::kBuildId, e.build_id);
  p.e().Varint(m::kLoadAddress, e.load);
  p.e().Varint(m::kStart, e.start);
  p.e().Varint(m::kEnd, e.end);
  return p.Commit();
}

}  // namespace

bool Init(const void* self) {
  if (g_ready.load(std::memory_order_acquire)) return true;
  g_entries = static_cast<Entry*>(MapZeroed(kMaxModules * sizeof(Entry)));
  g_paths = static_cast<char*>(MapZeroed(kPathArenaBytes));
  if (!g_entries || !g_paths) return false;
  ssize_t n = readlink("/proc/self/exe", g_exe, sizeof g_exe - 1);
  g_exe_len = n > 0 ? static_cast<size_t>(n) : 0;
  g_exe[g_exe_len] = '\0';
  Rescan();
  long i = Lookup(reinterpret_cast<uintptr_t>(self));
  if (i >= 0) {
    const Entry& e = g_entries[i];
    g_self_start = e.start;
    g_self_end = e.end;
    // The shim linked into the main program (tests): its frames are mixed
    // with the program's, so they cannot be dropped by address range.
    g_self_separate = !(e.path_len == g_exe_len && !memcmp(g_paths + e.path_off, g_exe, g_exe_len));
  }
  g_ready.store(true, std::memory_order_release);
  return true;
}

bool InShim(uint64_t pc) {
  return g_self_separate && pc - 1 >= g_self_start && pc - 1 < g_self_end;
}

void EnsureWritten(const uint64_t* pcs, size_t n, uint64_t ts) {
  if (!g_ready.load(std::memory_order_acquire)) return;
  long last = -1;
  bool rescanned = false;
  for (size_t k = 0; k < n; ++k) {
    // A return address may sit just past the end of its caller's code.
    uint64_t addr = pcs[k] - 1;
    long i = -1;
    if (last >= 0 && addr >= g_entries[last].start && addr < g_entries[last].end) {
      i = last;
    } else {
      i = Lookup(addr);
      if (i < 0 && !rescanned) {
        rescanned = true;
        if (LoaderChanged() && Rescan()) i = Lookup(addr);
      }
    }
    if (i < 0) continue;
    if (i == last) continue;  // just handled
    last = i;
    Entry& e = g_entries[i];
    if (intern::ClaimWrite(&e.mark)) intern::FinishWrite(&e.mark, WriteModule(e, ts));
  }
}

void ResetInChild() { pthread_mutex_init(&g_mu, nullptr); }

bool Find(uint64_t addr, Info* out) {
  if (!g_ready.load(std::memory_order_acquire)) return false;
  long i = Lookup(addr);
  if (i < 0 && LoaderChanged() && Rescan()) i = Lookup(addr);
  if (i < 0) return false;
  const Entry& e = g_entries[i];
  *out = Info{g_paths + e.path_off, e.build_id, e.load, e.start, e.end};
  return true;
}

}  // namespace pinscope::shim::modules
