// Call stacks at recorded events: native frames (libunwind) and Python
// frames (CPython API resolved at run time), interned per process and
// written as Stack / PythonFrame / InternedString / Module packets.
// docs/stacks.md describes what is captured, the bounds and the cost.
#pragma once

#include <cstdint>

namespace pinscope::shim {

enum class StackSite { kCopy, kAlloc, kShm, kSync };

// Most frames of either kind a stack keeps (PINSCOPE_STACKS is clamped).
constexpr uint32_t kMaxStackDepth = 256;

// Loads libunwind (dlopen, RTLD_LOCAL: see stacks.cc for why not a link-time
// dependency), maps the intern tables, scans the module map and resolves the
// Python C API. Called once by InitProcess with the hook guard set; a no-op
// when PINSCOPE_STACKS=0. Whatever fails is said once on stderr and stacks
// go on without it.
void StacksInit();

// Captures the calling thread's stack, writes any packets it needs the
// first time a stack is seen, and returns its id; 0 when stacks are off
// (PINSCOPE_STACKS=0) or nothing could be captured. Called with the hook
// guard set; must not allocate through malloc.
uint64_t CaptureStack(StackSite site);

// Stacks taken in this process and the time spent taking them (ns of the
// calling threads, CLOCK_MONOTONIC), written in each Counters packet.
struct StackCost {
  uint64_t captured = 0;
  uint64_t ns = 0;
};
StackCost GetStackCost();

// fork(): the child's trace file is new, so every stack is new to it.
void StacksResetInChild();

}  // namespace pinscope::shim
