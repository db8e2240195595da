// Whether the calling thread is running a signal handler: the question the
// _exit hook asks before it finishes the trace. PyTorch's DataLoader
// workers leave with _exit(0) from their SIGTERM handler
// (torch/csrc/DataLoader.cpp, handler_SIGTERM, installed with SA_NODEFER,
// so the signal mask does not tell); the interrupted frame may hold a
// lock that a normal finish takes (the trace writer's, malloc's, the CUDA
// driver's), and waiting for it hangs the worker, and the parent that
// joins it, for ever.
#pragma once

namespace pinscope::shim {

// True when a signal frame (the kernel's return trampoline, glibc's
// __restore_rt) is on this thread's stack within its innermost 64 frames.
// Callable from a signal handler as glibc's backtrace() is: it walks the
// stack with the same unwinder (_Unwind_Backtrace; libgcc finds frames
// through _dl_find_object, without a lock, since glibc 2.35 and GCC 12),
// reads code bytes only where they cannot fault, allocates nothing. False
// where the architecture is not known (x86_64 and aarch64 are).
bool InSignalHandler();

}  // namespace pinscope::shim
