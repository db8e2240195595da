/* Processes: a thread allocates and frees large blocks while the main
   thread forks (allocations in flight across fork); each quick child
   allocates one block and leaves with _exit (the trace must be flushed by
   the _exit hook); one child frees and reallocs blocks it inherited (not
   its own events: only the new block appears in its trace); one child
   execs this program again ("exec-child") and writes its own file. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>

#include "expect.h"

#define MiB (1024u * 1024u)

static atomic_int g_stop;
static atomic_ulong g_thread_allocs;

static void* Churn(void* arg) {
  (void)arg;
  while (!atomic_load(&g_stop)) {
    void* p = malloc(MiB + MiB / 2);
    CHECK(p);
    ((volatile char*)p)[0] = 1;
    atomic_fetch_add(&g_thread_allocs, 1);
    free(p);
  }
  return NULL;
}

static int Wait(pid_t pid) {
  int st;
  CHECK(waitpid(pid, &st, 0) == pid);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int main(int argc, char** argv) {
  if (argc > 1 && !strcmp(argv[1], "exec-child")) {
    void* x = malloc(6 * MiB);
    CHECK(x);
    Expect("alloc MALLOC %llu %u 0 0", U(x), 6 * MiB);
    Touch(x, 6 * MiB);
    free(x);
    Expect("free %llu 0", U(x));
    return 0;
  }
  char* a1 = malloc(2 * MiB);
  char* a2 = malloc(3 * MiB);
  CHECK(a1 && a2);
  memset(a2, 5, 3 * MiB);
  Expect("alloc MALLOC %llu %u 0 0", U(a1), 2 * MiB);
  Expect("alloc MALLOC %llu %u 0 0", U(a2), 3 * MiB);

  pthread_t churn;
  CHECK(pthread_create(&churn, NULL, Churn, NULL) == 0);
  int quick = argc > 1 ? atoi(argv[1]) : 10;
  for (int i = 0; i < quick; ++i) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
      void* q = malloc(2 * MiB + MiB / 2);
      CHECK(q);
      Expect("alloc MALLOC %llu %u 0 0", U(q), 2 * MiB + MiB / 2);
      free(q);
      Expect("free %llu 0", U(q));
      _exit(0);
    }
    CHECK(Wait(pid) == 0);
  }

  pid_t inherit = fork();
  CHECK(inherit >= 0);
  if (inherit == 0) {
    free(a1); /* the parent's block: not an event of this process */
    char* moved = realloc(a2, 8 * MiB);
    CHECK(moved && moved[3 * MiB - 1] == 5);
    Expect("alloc REALLOC %llu %u 0 %llu", U(moved), 8 * MiB, U(a2));
    void* c = malloc(5 * MiB);
    CHECK(c);
    Expect("alloc MALLOC %llu %u 0 0", U(c), 5 * MiB);
    Touch(c, 5 * MiB);
    free(c);
    Expect("free %llu 0", U(c));
    free(moved);
    Expect("free %llu 0", U(moved));
    _exit(0);
  }
  CHECK(Wait(inherit) == 0);

  pid_t ex = fork();
  CHECK(ex >= 0);
  if (ex == 0) {
    char* args[] = {argv[0], (char*)"exec-child", NULL};
    execv("/proc/self/exe", args);
    _exit(91);
  }
  CHECK(Wait(ex) == 0);

  atomic_store(&g_stop, 1);
  pthread_join(churn, NULL);
  free(a1);
  Expect("free %llu 0", U(a1));
  free(a2);
  Expect("free %llu 0", U(a2));
  Expect("thread_allocs %lu", (unsigned long)atomic_load(&g_thread_allocs));
  return 0;
}
