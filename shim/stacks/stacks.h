// Call stacks at recorded events: native frames (libunwind) and Python
// frames (CPython API resolved at run time), interned per process and
// written as Stack / PythonFrame / InternedString / Module packets.
// docs/stacks.md describes what is captured, the bounds and the cost.
#pragma once

#include <cstddef>
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
//
// A per-thread cache answers a repeated call site without unwinding all the
// native frames (the costly part: 6-34 us a copy on the H100 in a training
// loop, docs/stacks.md). Its key: the Python frames' code objects and
// instructions (python::CaptureKey), the stack's depth (this function's
// frame address) and, under Python frames, the hook's return address into
// the program (found through the shim's frame pointers, checked against the
// unwinder at every full unwind: notice `stack_cache_frame_key_off` if they
// ever differ), else the innermost kStackKeyFrames native frames (the
// shim's and the program's); the same key is taken as the same stack. The
// first answer of each entry, and then one answer in
// kStackCacheCheck at random, is checked against a full unwind. A check
// that finds another stack refreshes the entry (CPython changes its own C
// frames under the same Python frames when it specializes or deoptimizes a
// call), and the next answer is checked too. A mismatch right after a
// refresh (two callers share the key), or after 8 refreshes, turns that
// site's entry off, unwound in full from then on, and says so once (notice
// `stack_cache_site_off`). PINSCOPE_STACK_CACHE=0: off.
uint64_t CaptureStack(StackSite site);
constexpr int kStackKeyFrames = 12;
constexpr uint32_t kStackCacheCheck = 64;

// Answers of the stack cache so far (process-wide): Counters'
// stack_cache_hits and stack_cache_checks. A site turned off is said by its
// notice.
struct StackCacheStats {
  uint64_t hits = 0;
  uint64_t checks = 0;
};
StackCacheStats GetStackCacheStats();

// Stacks taken in this process and the time spent taking them (ns of the
// calling threads, CLOCK_MONOTONIC), of it the Python frames' walk, written
// in each Counters packet.
struct StackCost {
  uint64_t captured = 0;
  uint64_t ns = 0;
  uint64_t python_ns = 0;  // of ns: the Python frames' walk
};
StackCost GetStackCost();

// fork(): the child's trace file is new, so every stack is new to it.
void StacksResetInChild();

}  // namespace pinscope::shim
