// Shared memory's start-up and shared state; see shm_core.h. The hooks'
// slow paths live in shm_fds.cc (fds) and shm_map.cc (mappings), the
// /dev/shm diagnosis in shm_space.cc, the job table in shm_job.cc.
#include "shim/core/shm_core.h"

#include <sys/stat.h>
#include <sys/statfs.h>

#include <atomic>

#include "shim/base/clock.h"
#include "shim/base/guard.h"
#include "shim/base/own_cost.h"
#include "shim/base/phases.h"
#include "shim/core/shm_fds.h"
#include "shim/core/shm_real.h"
#include "shim/core/shm_state.h"
#include "shim/memory/block_registry.h"
#include "shim/pin/pool.h"
#include "shim/record/recorder.h"
#include "shim/record/trace_fields.h"
#include "shim/stacks/stacks.h"

#ifndef TMPFS_MAGIC
#define TMPFS_MAGIC 0x01021994
#endif

namespace pinscope::shim::shm {

// Constant-initialized (constinit): a hook may run before any constructor.
constinit ShmState g_state;

JobTable& Job() { return State().job; }
uint64_t ShmDevice() { return State().shm_dev; }
uint64_t MemfdDevice() { return State().memfd_dev; }

void InitShm() {
  static std::atomic<bool> done{false};
  if (done.exchange(true)) return;
  HookScope scope;
  ResolveAll();
  InstallRegistryForkHandlers();
  struct stat st;
  struct statfs sf;
  // Only a tmpfs /dev/shm identifies shared memory by device: a plain
  // directory there would share its device with every file of the root fs.
  if (stat("/dev/shm", &st) == 0 && statfs("/dev/shm", &sf) == 0 &&
      static_cast<unsigned long>(sf.f_type) == TMPFS_MAGIC)
    State().shm_dev = st.st_dev;
  int mfd = RawMemfd("pinscope-probe", 1u /* MFD_CLOEXEC */);
  if (mfd >= 0) {
    if (fstat(mfd, &st) == 0) State().memfd_dev = st.st_dev;
    RawClose(mfd);
  }
  FdTable();
  State().job.Create();
  // The pool's table (PINSCOPE_PIN_POOL): this image owns a new one; forked
  // children never get here and share it.
  PoolInit();
}

namespace {
PINSCOPE_TLS ShmOwnTime* t_own = nullptr;
}  // namespace

ShmOwnTime::ShmOwnTime() : t0_(MonoNs()), outer_(t_own == nullptr) {
  if (outer_) t_own = this;
}

ShmOwnTime::~ShmOwnTime() {
  if (!outer_) return;
  t_own = nullptr;
  const uint64_t total = MonoNs() - t0_;
  AddHookTime(HookKind::kShm, total > aside_ns_ ? total - aside_ns_ : 0);
}

ShmOwnTime* ShmOwnTime::Current() { return t_own; }

namespace {
// Which maps take a stack: a thread's first kMapStacksFirst, then one in
// kMapStacksEvery. Nothing in the analyzer reads a map's stack (a segment's
// place in the program is where it is made or opened); the trace keeps
// where batches arrive on a thread, at a stack (1.5-2.5 us on the H100,
// docs/benchmarks.md) for about one batch tensor in 64 instead of each
// (issue 16: the DataLoader's pin thread maps them holding the GIL, which
// the training loop waits for). A forked child goes on with its forking
// thread's count.
constexpr uint32_t kMapStacksFirst = 32;
constexpr uint32_t kMapStacksEvery = 64;
PINSCOPE_TLS uint32_t t_maps = 0;

bool MapTakesStack() {
  const uint32_t n = t_maps;
  if (n != UINT32_MAX) t_maps = n + 1;
  return n < kMapStacksFirst || n % kMapStacksEvery == 0;
}
}  // namespace

void Record(uint32_t op, const Identity& id, int fd, uint64_t size, uint64_t offset,
            uint64_t address, int flags, int prot, int error, uint64_t t0) {
  if (!Recording()) return;
  // One hook a record. Its time (the stack and the record) is the slow
  // path's (ShmOwnTime), unless it runs aside (the pool's records) or
  // outside one: then its own.
  const ShmOwnTime* own = ShmOwnTime::Current();
  const bool self_timed = own == nullptr || own->in_aside();
  const uint64_t t_record = MonoNs();
  ShmRecord r;
  r.op = op;
  r.name = id.name;
  r.fd = fd;
  r.size = size;
  r.offset = offset;
  r.address = address;
  r.flags = flags;
  r.prot = prot;
  r.error = error;
  r.device = id.device;
  r.inode = id.inode;
  r.driver_internal = (id.flags & kFlagDriverInternal) != 0;
  r.pool = id.pool;
  // A stack where it names a place in the program: where a segment is made
  // or opened (the report's "where a batch is made") and where it is mapped
  // (where a batch arrives; sampled, MapTakesStack). The rest follow from
  // those, once per batch in a DataLoader job, and their stacks named no
  // more than the map's: the truncate and unlink of a creation, the close
  // and unmap wherever the batch's last reference went (issue 16: each
  // stack costs the job's threads microseconds, docs/stacks.md).
  const bool stack = op == fields::kShmCreate || op == fields::kShmOpen ||
                     op == fields::kMemfdCreate || (op == fields::kShmMap && MapTakesStack());
  if (stack) {
    PS_PHASE(kShmStack);
    r.stack_id = CaptureStack(StackSite::kShm);
  }
  r.t_enter = t0;
  r.t_exit = MonoNs();
  {
    PS_PHASE(kShmPacket);
    RecordShm(r);
  }
  AddHookCost(HookKind::kShm, self_timed ? MonoNs() - t_record : 0);
}

}  // namespace pinscope::shim::shm
