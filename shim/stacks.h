// Call stacks at recorded events: native frames (libunwind) and Python
// frames (CPython API resolved at run time), interned per process and
// written as Stack / PythonFrame / InternedString / Module packets.
#pragma once

#include <cstdint>

namespace pinscope::shim {

enum class StackSite { kCopy, kAlloc, kShm, kSync };

// Captures the calling thread's stack, writes any packets it needs the
// first time a stack is seen, and returns its id; 0 when stacks are off
// (PINSCOPE_STACKS=0) or nothing could be captured. Called with the hook
// guard set; must not allocate through malloc.
uint64_t CaptureStack(StackSite site);

// fork(): the child's trace file is new, so every stack is new to it.
void StacksResetInChild();

}  // namespace pinscope::shim
