// Shared memory by mapping: the slow paths of mmap (of an fd, or MAP_FIXED)
// and munmap (near a recorded mapping), shm_core.h. Recorded inside other
// pinscope hooks too, as in shm_fds.cc; no malloc, no stdio.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "shim/base/clock.h"
#include "shim/base/guard.h"
#include "shim/core/shm_core.h"
#include "shim/core/shm_fds.h"
#include "shim/core/shm_state.h"
#include "shim/core/sigbus.h"
#include "shim/memory/block_registry.h"
#include "shim/pin/pinning.h"
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
// called before the real munmap / MAP_FIXED mmap.
void ForgetRange(uint64_t addr, uint64_t len, uint64_t t0) {
  constexpr size_t kCap = 64;
  ShmMapping over[kCap];
  size_t n = Registry().OverlappingMappings(addr, len, over, kCap);
  if (n == 0) return;
  // The pinning module unregisters before the pages go away (one relaxed
  // load when it pinned nothing).
  PinOnUnmap(reinterpret_cast<void*>(addr), len);
  RemovedPiece pieces[kCap];
  size_t m = Registry().RemoveMappings(addr, len, pieces, kCap);
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
    Record(f::kShmUnmap, id, -1, p.size, p.mapping.offset + (p.address - p.mapping.address),
           p.address, 0, 0, 0, t0);
  }
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
  uint64_t t0 = MonoNs();
  uint64_t a = reinterpret_cast<uintptr_t>(addr);
  // MAP_FIXED replaces whatever lay there: those mappings end now.
  if ((flags & MAP_FIXED) && Registry().MayOverlapMappings(a, length)) ForgetRange(a, length, t0);
  Identity id;
  bool shm = fd >= 0 && !(flags & MAP_ANONYMOUS) && IdentifyShm(fd, &id);
  void* p = call();
  int err = p == MAP_FAILED ? errno : 0;
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
      if (Registry().AddMapping(m)) {
        if (!(id.flags & kFlagDriverInternal))
          State().job.Add(ProcessId(), at, id.device, id.inode, length);
        EnsureSigbusHandler();
        // A DataLoader batch arriving: registered ahead if its size is one
        // this process copies (docs/pinning.md, pin-ahead).
        if ((flags & MAP_SHARED) && !(id.flags & kFlagDriverInternal))
          PinAheadOnMap(p, length, (prot & PROT_WRITE) != 0);
      }
    }
    Record(f::kShmMap, id, fd, length, static_cast<uint64_t>(offset), at, flags, prot, err, t0);
  }
  if (err) scope.KeepErrno(err);
  return p;
}

int MunmapSlow(void* addr, size_t length) {
  uint64_t a = reinterpret_cast<uintptr_t>(addr);
  static const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  // Invalid arguments change nothing: let the real call say EINVAL.
  if (length == 0 || (a & (page - 1)) || InForeignChild()) return g_real.munmap(addr, length);
  HookScope scope;
  uint64_t t0 = MonoNs();
  uint64_t len = (length + page - 1) & ~(page - 1);
  ForgetRange(a, len, t0);
  int rc = g_real.munmap(addr, length);
  if (rc < 0) scope.KeepErrno(errno);
  return rc;
}

}  // namespace pinscope::shim::shm
