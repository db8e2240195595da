#include "signal_context.h"

#include <sys/uio.h>
#include <unistd.h>
#include <unwind.h>

#include <cstdint>
#include <cstring>

namespace pinscope::shim {
namespace {

// The code of the signal return trampoline that the kernel makes a
// handler return to: the byte patterns libgcc's own unwinder matches to
// recognize a signal frame (libgcc/config/i386/linux-unwind.h,
// aarch64/linux-unwind.h). Hand-matched because no unwinder API answers
// "is this a signal frame" without libunwind, which the shim loads lazily
// and may not have (PINSCOPE_STACKS=0).
#if defined(__x86_64__)
// mov $__NR_rt_sigreturn (15), %rax; syscall
constexpr unsigned char kSigreturn[] = {0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05};
#elif defined(__aarch64__)
// mov x8, #__NR_rt_sigreturn (139); svc #0
constexpr unsigned char kSigreturn[] = {0x68, 0x11, 0x80, 0xd2, 0x01, 0x00, 0x00, 0xd4};
#else
constexpr unsigned char kSigreturn[] = {0};
#endif
constexpr bool kKnownArch =
#if defined(__x86_64__) || defined(__aarch64__)
    true;
#else
    false;
#endif

// Reads n code bytes at pc. Directly when they lie on the 4 KiB page of
// pc - 1 (the call before a return address, or the trampoline's own code,
// is mapped; 4 KiB is the smallest page, so this never reads past one);
// else through process_vm_readv, which fails with EFAULT instead of
// faulting.
bool ReadCode(uintptr_t pc, unsigned char* out, size_t n) {
  constexpr uintptr_t page = 4096;
  if (pc == 0) return false;
  if (((pc - 1) & ~(page - 1)) == ((pc + n - 1) & ~(page - 1))) {
    memcpy(out, reinterpret_cast<const void*>(pc), n);
    return true;
  }
  iovec local{out, n};
  iovec remote{reinterpret_cast<void*>(pc), n};
  return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == static_cast<ssize_t>(n);
}

struct Walk {
  int frames = 0;
  bool found = false;
};

_Unwind_Reason_Code Visit(_Unwind_Context* ctx, void* arg) {
  auto* w = static_cast<Walk*>(arg);
  unsigned char code[sizeof kSigreturn];
  const uintptr_t pc = _Unwind_GetIP(ctx);
  if (ReadCode(pc, code, sizeof code) && memcmp(code, kSigreturn, sizeof code) == 0) {
    w->found = true;
    return _URC_END_OF_STACK;
  }
  return ++w->frames >= 64 ? _URC_END_OF_STACK : _URC_NO_REASON;
}

}  // namespace

bool InSignalHandler() {
  if (!kKnownArch) return false;
  Walk w;
  _Unwind_Backtrace(Visit, &w);
  return w.found;
}

}  // namespace pinscope::shim
