/* A worker killed as PyTorch's DataLoader kills its workers: the child's
   SIGTERM handler (torch/csrc/DataLoader.cpp's handler_SIGTERM: SA_SIGINFO,
   SA_NODEFER) calls _exit(0) when its parent sent the signal. The signal
   lands wherever the child is, here in a loop of recorded allocations:
   often inside pinscope's malloc hook, holding the trace writer's lock.
   pinscope's _exit hook must not wait on a lock the interrupted frame
   holds: every child must be gone within 5 s of its SIGTERM.
   Prints "children N hung H"; exit 0 when none hung, 1 otherwise. A child
   that hangs is killed with SIGKILL. */
#define _GNU_SOURCE
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "expect.h"

static void OnTerm(int sig, siginfo_t* info, void* ctx) {
  (void)sig;
  (void)ctx;
  if (info->si_pid == getppid()) _exit(0);
  _exit(3);
}

/* Installed before the forks, so that each child has it from its first
   instruction: a child that installed it itself could be killed by the
   default action before it did, on a loaded machine (CI, 2026-12-06). */
static void InstallHandler(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = OnTerm;
  sa.sa_flags = SA_RESTART | SA_SIGINFO | SA_NOCLDSTOP | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  CHECK(sigaction(SIGTERM, &sa, NULL) == 0);
}

static void Allocate(void) {
  /* Above PINSCOPE_TRACE_MIN (the test sets 4K): each block is a packet. */
  volatile char* p = malloc(64 * 1024);
  CHECK(p);
  p[0] = 1;
  free((void*)p);
}

/* Says on `ready` that it recorded its first block (its trace file is
   made), then allocates until the signal comes: the parent's wait starts
   there, not at the fork, which a loaded machine may not run for longer
   than the wait (CI, 2026-12-06). */
static void Child(int ready) {
  Allocate();
  CHECK(write(ready, "r", 1) == 1);
  close(ready);
  for (;;) Allocate();
}

static void SleepMs(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 40;
  int hung = 0;
  srand(12345);
  InstallHandler();
  for (int i = 0; i < n; ++i) {
    int ready[2];
    CHECK(pipe(ready) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
      close(ready[0]);
      Child(ready[1]);
    }
    close(ready[1]);
    char byte = 0;
    CHECK(read(ready[0], &byte, 1) == 1);
    close(ready[0]);
    SleepMs(5 + rand() % 10);
    CHECK(kill(pid, SIGTERM) == 0);
    int st = 0, waited_ms = 0;
    pid_t got = 0;
    while ((got = waitpid(pid, &st, WNOHANG)) == 0 && waited_ms < 5000) {
      SleepMs(5);
      waited_ms += 5;
    }
    if (got == 0) {
      ++hung;
      kill(pid, SIGKILL);
      CHECK(waitpid(pid, &st, 0) == pid);
    } else {
      CHECK(got == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
  }
  printf("children %d hung %d\n", n, hung);
  return hung ? 1 : 0;
}
