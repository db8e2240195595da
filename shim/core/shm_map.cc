// Shared memory by mapping: the slow paths of mmap (of an fd, or MAP_FIXED)
// and munmap (near a recorded mapping), shm_core.h. Recorded inside other
// pinscope hooks too, as in shm_fds.cc; no malloc, no stdio.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "shim/base/clock.h"
#include "shim/base/guard.h"
#include "shim/base/phases.h"
#include "shim/core/shm_core.h"
#include "shim/core/shm_fds.h"
#include "shim/core/shm_pool.h"
#include "shim/core/shm_state.h"
#include "shim/core/sigbus.h"
#include "shim/memory/block_registry.h"
#include "shim/pin/pinning.h"
#include "shim/pin/pool.h"
#include "shim/record/recorder.h"
#include "shim/record/trace_fields.h"

namespace pinscope::shim::shm {
namespace {

namespace f = fields;

// Ordering, as for free(): a range that goes away (munmap, MAP_FIXED
// replacement) is recorded BEFORE the real call, because another thread may
// get the same address the moment the call returns, and its event must
// follow ours in the trace.

// Drops recorded mappings in [addr, addr+len) and records their unmaps;
// called before the real munmap / MAP_FIXED mmap (`replace`). Returns true
// when the range is a pool slot's mapping that the pool keeps (a munmap
// only): the caller must not unmap it.
// Slot mappings are served only while the registry has this many entries
// free (MmapSlow).
constexpr size_t kServeMargin = 64;

bool ForgetRange(uint64_t addr, uint64_t len, uint64_t t0, bool replace, Identity* recorded) {
  constexpr size_t kCap = 64;
  // A slot the program unmaps goes back to the pool, registered; a
  // mapping over it takes it out of the pool first (shim/pin/pool.h).
  // Without the pool the registry is scanned once, by RemoveMappings
  // (issue 16: a received batch's munmap is on the pin thread, GIL held).
  bool kept = false;
  if (PoolOn()) {
    ShmMapping over[kCap];
    if (Registry().OverlappingMappings(addr, len, over, kCap) == 0) return false;
    Aside([&] {
      if (replace) PoolDetachRange(addr, len);
      kept = PoolOnUnmap(addr, len) && !replace;
    });
  }
  RemovedPiece pieces[kCap];
  size_t m = Registry().RemoveMappings(addr, len, pieces, kCap);
  if (m == 0) return kept;
  // The pinning module unregisters before the pages go away (one relaxed
  // load when it pinned nothing).
  if (!kept) Aside([&] { PinOnUnmap(reinterpret_cast<void*>(addr), len); });
  uint32_t epoch = Registry().epoch();
  for (size_t i = 0; i < m && i < kCap; ++i) {
    const RemovedPiece& p = pieces[i];
    if (p.whole) State().job.Remove(ProcessId(), p.mapping.device, p.mapping.inode);
    // A forked child unmapping what it inherited: the parent's mapping, not
    // an event of this process.
    if (p.mapping.epoch != epoch) continue;
    Identity id;
    id.device = p.mapping.device;
    id.inode = p.mapping.inode;
    id.flags = p.mapping.flags;
    memcpy(id.name, p.mapping.name, sizeof id.name);
    id.pool = kept;
    PS_PHASE(kUnmapRecord);
    Record(f::kShmUnmap, id, -1, p.size, p.mapping.offset + (p.address - p.mapping.address),
           p.address, 0, 0, 0, t0);
    if (recorded && recorded->inode == 0) *recorded = id;
  }
  return kept;
}

// Received /dev/shm mappings of `size` bytes alive in this process (the
// pool's demand, PoolNoteMiss). A scan of at most 64 mappings; misses only.
int LiveBatchesOf(uint64_t size) {
  constexpr size_t kCap = 64;
  ShmMapping all[kCap];
  size_t n = Registry().OverlappingMappings(0, ~uint64_t{0} >> 1, all, kCap);
  int live = 0;
  for (size_t i = 0; i < n && i < kCap; ++i)
    if (all[i].size == size && all[i].device == State().shm_dev && (all[i].map_flags & MAP_SHARED))
      ++live;
  return live;
}

}  // namespace

void* MmapSlow(void* addr, size_t length, int prot, int flags, int fd, off_t offset, bool is64) {
  auto call = [&] {
    return is64 ? g_real.mmap64(addr, length, prot, flags, fd, offset)
                : g_real.mmap(addr, length, prot, flags, fd, offset);
  };
  // Not recording: the registry holds no mapping a MAP_FIXED could replace.
  if (!Recording() || InForeignChild()) return call();
  HookScope scope;
  ShmOwnTime own;
  uint64_t t0 = MonoNs();
  uint64_t a = reinterpret_cast<uintptr_t>(addr);
  // MAP_FIXED replaces whatever lay there: those mappings end now.
  if ((flags & MAP_FIXED) && Registry().MayOverlapMappings(a, length))
    ForgetRange(a, length, t0, true, nullptr);
  Identity id;
  bool shm;
  {
    PS_PHASE(kMapIdentify);
    shm = fd >= 0 && !(flags & MAP_ANONYMOUS) && IdentifyShm(fd, &id);
  }
  // A pool slot's fd: its batch is the owner's registered mapping already.
  // Served only while the registry has room for it (with a margin for
  // threads mapping at once): the program's munmap finds the slot there,
  // and must, or the real munmap would take the owner's registered mapping.
  void* served = nullptr;
  if (shm && PoolOn() && !(flags & MAP_FIXED) &&
      Registry().live_mappings() + kServeMargin < BlockRegistry::kMaxMappings)
    served = Aside([&] { return PoolServeMap(id.device, id.inode, length, prot, flags, offset); });
  void* p = served ? served : Aside(call);
  int err = p == MAP_FAILED ? errno : 0;
  if (shm && !served && p != MAP_FAILED && PoolOn()) {
    Aside([&] {
      PoolSegmentMapped(fd, reinterpret_cast<uintptr_t>(p), length, static_cast<uint64_t>(offset),
                        prot, flags);
      // A batch that a worker could not put in a slot (received: not an fd
      // this process opened; on /dev/shm): the pool may need one more.
      if ((flags & MAP_SHARED) && offset == 0 && !FdTracked(fd) && id.device == State().shm_dev &&
          !(id.flags & kFlagDriverInternal) && PoolOwner())
        PoolNoteMiss(length, LiveBatchesOf(length) + 1);
    });
  }
  if (shm) {
    uint64_t at = p == MAP_FAILED ? 0 : reinterpret_cast<uintptr_t>(p);
    if (at) {
      ShmMapping m;
      m.address = at;
      m.size = length;
      m.offset = static_cast<uint64_t>(offset);
      m.device = id.device;
      m.inode = id.inode;
      m.flags = id.flags;
      m.prot = prot;
      m.map_flags = flags;
      memcpy(m.name, id.name, sizeof m.name);
      if (served && !Registry().AddMapping(m)) {
        // The margin was not enough: the program gets a mapping of its own
        // instead, and the slot escapes (a second map of it: never reused;
        // the owner's mapping stays until the process ends).
        Aside([&] { PoolServeMap(id.device, id.inode, length, prot, flags, offset); });
        served = nullptr;
        p = Aside(call);
        err = p == MAP_FAILED ? errno : 0;
        at = p == MAP_FAILED ? 0 : reinterpret_cast<uintptr_t>(p);
        m.address = at;
      }
      bool added;
      {
        PS_PHASE(kMapTables);
        added = at && (served || Registry().AddMapping(m));
        // A pool slot is not on /dev/shm, and is registered already.
        if (added && !(id.flags & kFlagDriverInternal) && !served)
          State().job.Add(ProcessId(), at, id.device, id.inode, length);
      }
      if (added) {
        EnsureSigbusHandler();
        // A DataLoader batch arriving: registered ahead if its size is one
        // this process copies (docs/pinning.md, pin-ahead).
        if ((flags & MAP_SHARED) && !(id.flags & kFlagDriverInternal) && !served)
          Aside([&] { PinAheadOnMap(p, length, (prot & PROT_WRITE) != 0); });
      }
    }
    id.pool = served != nullptr;
    PS_PHASE(kMapRecord);
    Record(f::kShmMap, id, fd, length, static_cast<uint64_t>(offset), at, flags, prot, err, t0);
  }
  if (err) scope.KeepErrno(err);
#ifdef PINSCOPE_PHASES
  if (shm) phases::Add(phases::kMapOwn, own.own_ns_so_far());
#endif
  return p;
}

int MunmapSlow(void* addr, size_t length) {
  uint64_t a = reinterpret_cast<uintptr_t>(addr);
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  // Invalid arguments change nothing: let the real call say EINVAL.
  if (length == 0 || (a & (page - 1)) || InForeignChild()) return g_real.munmap(addr, length);
  HookScope scope;
  ShmOwnTime own;
  uint64_t t0 = MonoNs();
  uint64_t len = (length + page - 1) & ~(page - 1);
  // A pool slot kept by the pool stays mapped: the program's munmap of it
  // is done as far as the program can tell.
  Identity recorded;  // the first mapping recorded as unmapped here
  bool kept;
  {
    PS_PHASE(kUnmapForget);
    kept = ForgetRange(a, len, t0, false, &recorded);
  }
  if (kept) return 0;
  const uint64_t t1 = MonoNs();
  int rc = Aside([&] { return g_real.munmap(addr, length); });
  if (rc < 0) scope.KeepErrno(errno);
  // How long the call took: the pages freed, when this was the segment's
  // last mapping (the pipeline model's release of a batch).
  if (recorded.inode != 0 && rc == 0) {
    PS_PHASE(kUnmapDone);
    Record(f::kShmUnmapDone, recorded, -1, len, 0, a, 0, 0, 0, t1);
  }
#ifdef PINSCOPE_PHASES
  if (recorded.inode != 0) phases::Add(phases::kUnmapOwn, own.own_ns_so_far());
#endif
  return rc;
}

}  // namespace pinscope::shim::shm
