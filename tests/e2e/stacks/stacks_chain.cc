// Test program for tests/e2e/stacks: known native call chains that end in a
// recorded event (cudaMemcpy through the fake CUDA runtime), run under
// LD_PRELOAD=libpinscope.so by stacks_e2e_test. The "// @name" markers name
// the lines the test expects in the symbolized stacks.
//   stacks_chain chain | deep N | fork | threads | twins | twins-deep | twins-settle |
//                twins-churn
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace chain {

void* g_device = nullptr;
char g_host[4096];

// The empty asm after each call keeps it from becoming a tail call (which
// would drop the caller's frame from any unwinder's view).
__attribute__((noinline)) int Inner(int n) {
  int rc = cudaMemcpy(g_device, g_host, 1024, cudaMemcpyHostToDevice);  // @inner
  asm volatile("" ::: "memory");
  return rc + n;
}

__attribute__((noinline)) int Middle(int n) {
  int rc = Inner(n);  // @middle
  asm volatile("" ::: "memory");
  return rc;
}

__attribute__((noinline)) int Outer(int n) {
  int rc = Middle(n);  // @outer
  asm volatile("" ::: "memory");
  return rc;
}

__attribute__((noinline)) int Recurse(int n) {
  int rc = n > 0 ? Recurse(n - 1) : Inner(0);  // @recurse
  asm volatile("" ::: "memory");
  return rc;
}

// One call site for both rounds of the fork test (a loop in main with the
// fork inside would be split by the compiler into two call sites).
__attribute__((noinline)) pid_t Round(bool do_fork) {
  pid_t pid = do_fork ? fork() : 1;
  if (pid >= 0) Outer(0);  // @fork-round
  asm volatile("" ::: "memory");
  return pid;
}

// Twins: the same code, so the same frame size: a copy below either is at
// the same stack depth. `deep`: through Recurse(kTwinDepth), so that the
// innermost frames below both twins are alike too (the stack cache's key,
// shim/stacks/stacks.h, then cannot tell them apart: its check must).
constexpr int kTwinDepth = 16;
__attribute__((noinline)) int TwinA(bool deep) {
  int rc = deep ? Recurse(kTwinDepth) : Inner(0);  // @twin-a
  asm volatile("" ::: "memory");
  return rc;
}
__attribute__((noinline)) int TwinB(bool deep) {
  int rc = deep ? Recurse(kTwinDepth) : Inner(0);  // @twin-b
  asm volatile("" ::: "memory");
  return rc;
}

void* Worker(void*) {
  for (int i = 0; i < 50; ++i) Outer(0);  // @worker
  return nullptr;
}

}  // namespace chain

int main(int argc, char** argv) {
  using namespace chain;
  if (argc < 2 || cudaMalloc(&g_device, sizeof g_host) != cudaSuccess) return 2;
  if (!strcmp(argv[1], "chain")) {
    Outer(0);  // @main
  } else if (!strcmp(argv[1], "deep")) {
    Recurse(argc > 2 ? atoi(argv[2]) : 500);
  } else if (!strcmp(argv[1], "fork")) {
    // The same call site before and after fork(): the child meets a stack its
    // parent already wrote, and must write it again into its own file.
    // Volatile: a loop of known trip count would be unrolled into two sites.
    volatile int rounds = 2, fork_round = 1;
    pid_t pid;
    int i = 0;
    do {
      pid = Round(i == fork_round);  // @fork-loop
    } while (++i < rounds && pid != 0);
    if (pid == 0) exit(0);
    if (pid < 0) return 3;
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return 4;
  } else if (!strcmp(argv[1], "twins") || !strcmp(argv[1], "twins-deep")) {
    // 200 rounds of TwinA then TwinB, from one loop (volatile: not unrolled).
    const bool deep = !strcmp(argv[1], "twins-deep");
    volatile int rounds = 200;
    for (int i = 0; i < rounds; ++i) {
      TwinA(deep);
      TwinB(deep);
    }
  } else if (!strcmp(argv[1], "twins-settle")) {
    // One copy below TwinA, then 399 below TwinB, deep: one key whose stack
    // changes once and then stays (as CPython's frames do once it has
    // specialized a call).
    TwinA(true);
    volatile int copies = 399;
    for (int i = 0; i < copies; ++i) TwinB(true);
  } else if (!strcmp(argv[1], "twins-churn")) {
    // One key whose stack changes twice, long apart: one copy below TwinA,
    // 1,000 below TwinB, then 1,000 below TwinA again, from another line
    // (as CPython's frames do when it specializes a call, and deoptimizes
    // and specializes it again much later).
    TwinA(true);
    volatile int copies = 1000;
    for (int i = 0; i < copies; ++i) TwinB(true);
    for (int i = 0; i < copies; ++i) TwinA(true);  // @churn-again
  } else if (!strcmp(argv[1], "threads")) {
    pthread_t t[4];
    for (auto& th : t) pthread_create(&th, nullptr, Worker, nullptr);
    for (auto& th : t) pthread_join(th, nullptr);
  } else {
    return 2;
  }
  return 0;
}
