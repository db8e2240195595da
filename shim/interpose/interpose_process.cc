// Exported process-lifecycle hooks: the library destructor (the constructor
// is in interpose_alloc.cc, which must run first),
// exit/_exit (flush and write ProcessExit), and the exec family (flush
// before the image is replaced). fork is handled by pthread_atfork handlers
// registered in InitProcess, plus fork() itself for pinning (below).
#include <alloca.h>
#include <dlfcn.h>
#include <stdarg.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>

#include "shim/base/guard.h"
#include "shim/base/log.h"
#include "shim/base/signal_context.h"
#include "shim/cuda/real_runtime.h"
#include "shim/pin/pinning.h"
#include "shim/process/process.h"
#include "shim/record/recorder.h"
#include "shim/record/trace_fields.h"

#define PINSCOPE_EXPORT extern "C" __attribute__((visibility("default")))

namespace pinscope::shim {
namespace {

int g_exit_status = 0;

// exec from a vfork child (or a raw clone) shares the parent's memory: it
// must not touch the parent's writer. Such a child has another pid.
bool IsTracedProcess() { return static_cast<uint32_t>(getpid()) == ProcessId(); }

void BeforeExec() {
  if (!IsTracedProcess()) return;
  HookScope scope;
  FinishProcess(fields::kExec, 0);
}

// The exec returned: it failed, and the process goes on (errno is the
// exec's, kept for the caller).
int AfterFailedExec(int rc, const char* path) {
  if (IsTracedProcess()) ResumeAfterFailedExec(path, errno);
  return rc;
}

template <typename Fn>
Fn Next(const char* name) {
  HookScope scope;
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

__attribute__((destructor)) void Fini() {
  if (!IsTracedProcess()) return;
  FinishProcess(fields::kExit, g_exit_status);
}

}  // namespace
}  // namespace pinscope::shim

using namespace pinscope::shim;

PINSCOPE_EXPORT void exit(int status) {
  g_exit_status = status;
  static auto real = Next<void (*)(int)>("exit");
  real(status);
  __builtin_unreachable();
}

// From a signal handler (PyTorch's DataLoader workers leave so, on their
// parent's SIGTERM) or from inside a hook, the interrupted frame may hold a
// lock the full finish takes: then only the exit packet, with try-locks.
// Waiting there hung a worker, and the parent joining it, for ever
// (PyTorch's test_large_sampler_indices on the H200, 2026-12-05).
PINSCOPE_EXPORT void _exit(int status) {
  if (IsTracedProcess()) {
    if (InHook() || InSignalHandler())
      FinishProcessFromSignal(fields::kUnderscoreExit, status);
    else
      FinishProcess(fields::kUnderscoreExit, status);
  }
  static auto real = Next<void (*)(int)>("_exit");
  if (real) real(status);
  syscall(SYS_exit_group, status);
  __builtin_unreachable();
}

PINSCOPE_EXPORT void _Exit(int status) { _exit(status); }

// Pinning must unpin private blocks before fork copies their pages, and
// that needs CUDA calls, which are unsafe inside pthread_atfork handlers
// (glibc runs them under its atfork lock; the CUDA driver, loaded after
// pinscope, has its prepare handlers run before ours). So: here, before
// the real fork and before any atfork handler.
PINSCOPE_EXPORT pid_t fork(void) {
  static auto real = Next<pid_t (*)()>("fork");
  if (InHook()) return real();
  PinBeforeFork();
  pid_t pid = real();
  if (pid != 0) PinAfterForkParent();  // the parent, or fork failed
  return pid;
}

PINSCOPE_EXPORT int execve(const char* path, char* const argv[], char* const envp[]) {
  BeforeExec();
  static auto real = Next<int (*)(const char*, char* const[], char* const[])>("execve");
  return AfterFailedExec(real(path, argv, envp), path);
}

PINSCOPE_EXPORT int execv(const char* path, char* const argv[]) {
  BeforeExec();
  static auto real = Next<int (*)(const char*, char* const[])>("execv");
  return AfterFailedExec(real(path, argv), path);
}

PINSCOPE_EXPORT int execvp(const char* file, char* const argv[]) {
  BeforeExec();
  static auto real = Next<int (*)(const char*, char* const[])>("execvp");
  return AfterFailedExec(real(file, argv), file);
}

PINSCOPE_EXPORT int execvpe(const char* file, char* const argv[], char* const envp[]) {
  BeforeExec();
  static auto real = Next<int (*)(const char*, char* const[], char* const[])>("execvpe");
  return AfterFailedExec(real(file, argv, envp), file);
}

PINSCOPE_EXPORT int fexecve(int fd, char* const argv[], char* const envp[]) {
  BeforeExec();
  static auto real = Next<int (*)(int, char* const[], char* const[])>("fexecve");
  return AfterFailedExec(real(fd, argv, envp), "a file descriptor");
}

// The variadic exec forms collect their arguments on the stack (as glibc
// does) and go through the vector forms above.
namespace {
size_t CountArgs(const char* first, va_list ap) {
  size_t n = 1;
  if (!first) return 0;
  while (va_arg(ap, const char*)) ++n;
  return n;
}
}  // namespace

#define PS_COLLECT_ARGS(ARG0, ARGV, ENVP_OUT)                  \
  va_list ap;                                                  \
  va_start(ap, ARG0);                                          \
  va_list ap2;                                                 \
  va_copy(ap2, ap);                                            \
  size_t argc = CountArgs(ARG0, ap2);                          \
  va_end(ap2);                                                 \
  char** ARGV = static_cast<char**>(alloca((argc + 1) * sizeof(char*))); \
  if (argc) ARGV[0] = const_cast<char*>(ARG0);                 \
  for (size_t i = 1; i < argc; ++i) ARGV[i] = va_arg(ap, char*); \
  if (argc) (void)va_arg(ap, char*);                           \
  ARGV[argc] = nullptr;                                        \
  ENVP_OUT;                                                    \
  va_end(ap)

PINSCOPE_EXPORT int execl(const char* path, const char* arg, ...) {
  PS_COLLECT_ARGS(arg, argv, (void)0);
  return execv(path, argv);
}

PINSCOPE_EXPORT int execlp(const char* file, const char* arg, ...) {
  PS_COLLECT_ARGS(arg, argv, (void)0);
  return execvp(file, argv);
}

PINSCOPE_EXPORT int execle(const char* path, const char* arg, ...) {
  char* const* envp = nullptr;
  PS_COLLECT_ARGS(arg, argv, envp = va_arg(ap, char* const*));
  return execve(path, argv, envp);
}
