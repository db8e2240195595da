// pinscope's own cost in this process; see own_cost.h.
#include "shim/base/own_cost.h"

#include <atomic>

#include "shim/base/usage.h"

namespace pinscope::shim {
namespace {

constexpr int kThreads = static_cast<int>(OwnThread::kCount);

// A kind's two counters on a cache line of their own: the loop's thread
// (copies, waits) and the DataLoader's pin thread (shared memory, spans)
// hook in turn on different cores, and kinds sharing a line would move it
// between them at every hook.
struct alignas(64) KindCounters {
  std::atomic<uint64_t> calls{0}, ns{0};
};
KindCounters g_hook[kHookKinds];
std::atomic<uint64_t> g_pointer_queries{0}, g_pointer_query_ns{0};
std::atomic<uint64_t> g_cupti_switches{0}, g_cupti_switch_ns{0};
std::atomic<uint64_t> g_thread_cpu[kThreads] = {};

}  // namespace

void AddHookCost(HookKind kind, uint64_t ns) {
  const int k = static_cast<int>(kind);
  g_hook[k].calls.fetch_add(1, std::memory_order_relaxed);
  g_hook[k].ns.fetch_add(ns, std::memory_order_relaxed);
}

void AddHookTime(HookKind kind, uint64_t ns) {
  g_hook[static_cast<int>(kind)].ns.fetch_add(ns, std::memory_order_relaxed);
}

void AddPointerQueryCost(uint64_t ns) {
  g_pointer_queries.fetch_add(1, std::memory_order_relaxed);
  g_pointer_query_ns.fetch_add(ns, std::memory_order_relaxed);
}

void AddCuptiSwitchCost(uint64_t ns) {
  g_cupti_switches.fetch_add(1, std::memory_order_relaxed);
  g_cupti_switch_ns.fetch_add(ns, std::memory_order_relaxed);
}

void NoteOwnThreadCpu(OwnThread which) {
  const uint64_t ns = ThreadCpuNow().cpu_ns;
  if (ns == 0) return;  // the clock failed
  g_thread_cpu[static_cast<int>(which)].store(ns, std::memory_order_relaxed);
}

OwnCost GetOwnCost() {
  OwnCost c;
  for (int k = 1; k < kHookKinds; ++k) {
    c.kinds[k].calls = g_hook[k].calls.load(std::memory_order_relaxed);
    c.kinds[k].ns = g_hook[k].ns.load(std::memory_order_relaxed);
    c.hook_calls += c.kinds[k].calls;
    c.hook_ns += c.kinds[k].ns;
  }
  for (const auto& t : g_thread_cpu) c.threads_cpu_ns += t.load(std::memory_order_relaxed);
  c.pointer_queries = g_pointer_queries.load(std::memory_order_relaxed);
  c.pointer_query_ns = g_pointer_query_ns.load(std::memory_order_relaxed);
  c.cupti_switches = g_cupti_switches.load(std::memory_order_relaxed);
  c.cupti_switch_ns = g_cupti_switch_ns.load(std::memory_order_relaxed);
  return c;
}

void OwnCostResetInChild() {
  for (auto& h : g_hook) {
    h.calls.store(0, std::memory_order_relaxed);
    h.ns.store(0, std::memory_order_relaxed);
  }
  g_pointer_queries.store(0, std::memory_order_relaxed);
  g_pointer_query_ns.store(0, std::memory_order_relaxed);
  g_cupti_switches.store(0, std::memory_order_relaxed);
  g_cupti_switch_ns.store(0, std::memory_order_relaxed);
  for (auto& t : g_thread_cpu) t.store(0, std::memory_order_relaxed);
}

}  // namespace pinscope::shim
