// Per-thread re-entrancy guard and thread id cache for the hooks.
// Must not allocate: the TLS uses the initial-exec model (the library is
// loaded at start-up through LD_PRELOAD), so touching it never calls malloc.
// It is constant-initialized (constinit), so other files read an extern one
// directly, not through C++'s TLS wrapper and its test for a dynamic
// initializer (after which GCC 12's -fsanitize=null check read stale flags:
// a false "load of null pointer" in the sanitizer build).
#pragma once

#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#define PINSCOPE_TLS __attribute__((tls_model("initial-exec"))) constinit thread_local

namespace pinscope::shim {

// Depth of hooks on this thread: > 0 while the shim itself is running, so
// allocations made by the shim or by the real function it calls pass
// straight through.
extern PINSCOPE_TLS int t_hook_depth;
// Cached gettid(); 0 until first use, reset in a forked child.
extern PINSCOPE_TLS uint32_t t_tid;

inline uint32_t CurrentTid() {
  if (t_tid == 0) t_tid = static_cast<uint32_t>(syscall(SYS_gettid));
  return t_tid;
}

inline bool InHook() { return t_hook_depth > 0; }

// Marks the current thread as inside the shim and preserves errno.
class HookScope {
 public:
  HookScope() : saved_errno_(errno) { ++t_hook_depth; }
  ~HookScope() {
    --t_hook_depth;
    errno = saved_errno_;
  }
  HookScope(const HookScope&) = delete;
  HookScope& operator=(const HookScope&) = delete;
  // For hooks whose real function sets errno that the caller must see.
  void KeepErrno(int e) { saved_errno_ = e; }

 private:
  int saved_errno_;
};

}  // namespace pinscope::shim
