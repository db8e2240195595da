// The hooks' phases (diagnostic build); see phases.h.
#include "shim/base/phases.h"

#ifdef PINSCOPE_PHASES
#include <stdio.h>
#include <unistd.h>

#include <atomic>

namespace pinscope::shim::phases {
namespace {

std::atomic<uint64_t> g_calls[kCount] = {}, g_ns[kCount] = {};
const char* const kNames[kCount] = {
    "copy_own",    "copy_cupti", "copy_classify", "copy_stack",   "copy_pin",     "copy_usage",
    "copy_record", "sync_own",   "sync_usage",    "sync_record",  "map_own",      "map_identify",
    "map_tables",  "map_record", "unmap_own",     "unmap_forget", "unmap_record", "unmap_done",
    "shm_stack",   "shm_packet", "loader_begin",  "loader_end"};

}  // namespace

void Add(Phase p, uint64_t ns) {
  g_calls[p].fetch_add(1, std::memory_order_relaxed);
  g_ns[p].fetch_add(ns, std::memory_order_relaxed);
}

void Dump() {
  char line[160];
  for (int p = 0; p < kCount; ++p) {
    const uint64_t calls = g_calls[p].load(), ns = g_ns[p].load();
    if (calls == 0) continue;
    // snprintf into a stack buffer, write(2): no stdio stream, no malloc.
    int n = snprintf(
        line, sizeof line, "pinscope phases %d: %s %llu calls %.3f us a call %.3f ms\n",
        static_cast<int>(getpid()), kNames[p], static_cast<unsigned long long>(calls),
        static_cast<double>(ns) / static_cast<double>(calls) / 1e3, static_cast<double>(ns) / 1e6);
    if (n > 0 && write(2, line, static_cast<size_t>(n)) < 0) return;
  }
}

void ResetInChild() {
  for (auto& c : g_calls) c.store(0, std::memory_order_relaxed);
  for (auto& c : g_ns) c.store(0, std::memory_order_relaxed);
}

}  // namespace pinscope::shim::phases
#endif
