// A thread's readings around its calls; see usage.h.
#include "shim/base/usage.h"

#include "shim/base/clock.h"
#include "shim/base/guard.h"

namespace pinscope::shim {
namespace {

// The thread's CPU time where its last call or span returned, and when the
// last real reading behind it was taken. A forked child's thread starts a
// new CPU clock, but its first call comes long after kShortCallNs.
struct LastCpu {
  uint64_t exit_ns = 0;    // the return (MonoNs)
  uint64_t cpu_ns = 0;     // the thread's CPU time there (0: none)
  uint64_t anchor_ns = 0;  // the real reading it follows from (MonoNs)
};
PINSCOPE_TLS LastCpu t_last_cpu;

}  // namespace

Usage EntryUsage(bool whole, uint64_t* t_enter) {
  if (!whole) {
    const uint64_t now = MonoNs();
    const LastCpu& last = t_last_cpu;
    if (last.cpu_ns != 0 && now - last.exit_ns < kShortCallNs && now - last.anchor_ns < kChainNs) {
      Usage u;
      u.cpu_ns = last.cpu_ns + (now - last.exit_ns);
      *t_enter = now;
      return u;
    }
  }
  const Usage u = whole ? ThreadUsageNow() : ThreadCpuNow();
  *t_enter = MonoNs();
  if (u.cpu_ns != 0) t_last_cpu.anchor_ns = *t_enter;
  return u;
}

Usage ExitUsage(bool whole, const Usage& enter, uint64_t t_enter, uint64_t t_exit) {
  LastCpu& last = t_last_cpu;
  Usage u;
  if (whole || t_exit - t_enter >= kShortCallNs || enter.cpu_ns == 0) {
    u = whole ? ThreadUsageNow() : ThreadCpuNow();
    last.anchor_ns = t_exit;
  } else {
    u = enter;
    u.cpu_ns += t_exit - t_enter;
  }
  last.exit_ns = t_exit;
  last.cpu_ns = u.cpu_ns;
  return u;
}

}  // namespace pinscope::shim
