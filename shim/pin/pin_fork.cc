// fork() and pinning (pinning.h): PinBeforeFork unpins and releases from
// the fork() hook; the pthread_atfork handlers (PinForkPrepare,
// PinForkChild) make no CUDA call and take no lock.
#include <pthread.h>

#include <cstring>

#include "shim/cuda/real_runtime.h"
#include "shim/pin/pin_ahead.h"
#include "shim/pin/pin_cuda.h"
#include "shim/pin/pin_keep.h"
#include "shim/pin/pin_state.h"
#include "shim/pin/pin_unpin.h"
#include "shim/pin/pinning.h"
#include "shim/pin/pool.h"

namespace pinscope::shim {

using pinning::Pins;
using pinning::PinState;
using pinning::ReleaseKeptWhere;
using pinning::UnpinWhere;
using pinning::WaitAheadOutOfCuda;

void PinBeforeFork() {
  PinState& s = Pins();
  // New registrations are refused from here on (PinBeforeCopy checks under
  // the lock); those already under way finish first and are unpinned too.
  s.forking.fetch_add(1, std::memory_order_acq_rel);
  // Slots the program holds now escape: the child inherits their mappings.
  if (PoolOn()) PoolBeforeFork();
  // The kernel copies pinned private pages at fork (facts section 5: 8 GiB
  // made one fork take 3.4 s): unpin them first. Shared mappings are not
  // copied and stay pinned. The parent pins them again on their next copy.
  UnpinWhere(0, 0, true, "fork");
  // The pin-ahead thread starts no registration now (forking); one under
  // way finishes first, so no CUDA call of pinscope's overlaps the fork.
  // The thread checks forking and raises ahead_in_cuda under the lock:
  // once this lock/unlock is done, a registration that passed the check
  // shows.
  pthread_mutex_lock(&s.mu);
  pthread_mutex_unlock(&s.mu);
  WaitAheadOutOfCuda();
  // Kept blocks are idle pinned private memory: released (unregistered and
  // freed), so the child neither inherits nor hands one out. After the
  // unpin above, which waited for a free that was moving its block onto
  // the list; no block joins the list while forking is set.
  ReleaseKeptWhere(0, 0, 0, "fork", false);
}

void PinAfterForkParent() { Pins().forking.fetch_sub(1, std::memory_order_acq_rel); }

void PinForkPrepare() {
  // No CUDA call here (see pinning.h): remember whether this process used
  // CUDA, for the child.
  Pins().cuda_at_fork = CudaSeen();
}

void PinForkChild() {
  PinState& s = Pins();
  // The blocks belong to the parent's CUDA context; the child never
  // unregisters them (its free/munmap of an inherited block is not
  // pinscope's business) and never pins if the parent used CUDA: the
  // parent's context does not survive fork and the child has none.
  pthread_mutex_init(&s.mu, nullptr);
  memset(static_cast<void*>(s.blocks), 0, sizeof s.blocks);
  s.high = 0;
  s.count.store(0);
  s.pinned_bytes.store(0);
  s.budget_noted = false;
  s.forking.store(0);
  // Normally empty (PinBeforeFork released them); after a fork that
  // bypassed the hook the parent's kept blocks stay allocated, unused.
  s.kept_n = 0;
  s.kept_bytes = 0;
  g_pin_kept.store(0);
  pinning::ForgetThreadEvents();
  PoolForkChild();
  // The pin-ahead thread is the parent's (threads do not survive fork).
  pthread_cond_init(&s.ahead_cv, nullptr);
  s.ahead_head = s.ahead_n = 0;
  s.ahead_sizes_n = s.ahead_sizes_next = 0;
  s.ahead_started = false;
  s.pin_thread.store(false);
  s.pool_req_n = 0;
  for (bool& b : s.pool_busy) b = false;
  s.ahead_learned.store(false);
  s.ahead_pending.store(0);
  s.ahead_stop.store(false);
  s.ahead_in_cuda.store(false);
  if (s.cuda_at_fork || CudaSeen()) s.forked_from_cuda = true;
}

}  // namespace pinscope::shim
