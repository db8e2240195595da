/* /dev/shm running out, in the ways a job meets it (run inside a private
   mount namespace with a small tmpfs on /dev/shm, except "truncated"):
     sigbus       a segment larger than the tmpfs, touched: SIGBUS, default action
     chain        the same with the program's own SIGBUS handler installed first
     replaced     the program installs its handler after mapping (replaces ours)
     enospc       posix_fallocate beyond the tmpfs: ENOSPC, no signal
     kill         SIGBUS sent with kill() while a mapping exists: not ours
     truncated    a segment shrunk under its mapping: SIGBUS, /dev/shm not full
   argv[2] is the segment size in MiB (default 64). */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "expect.h"

#define MiB (1024ull * 1024ull)

static void ProgramHandler(int sig, siginfo_t* info, void* ctx) {
  (void)info;
  (void)ctx;
  static const char msg[] = "program handler ran\n";
  if (write(2, msg, sizeof msg - 1) < 0) {
  }
  _exit(sig == SIGBUS ? 42 : 43);
}

static void InstallProgramHandler(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = ProgramHandler;
  sa.sa_flags = SA_SIGINFO;
  CHECK(sigaction(SIGBUS, &sa, NULL) == 0);
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "sigbus";
  size_t size = (argc > 2 ? strtoull(argv[2], NULL, 10) : 64) * MiB;
  char name[64];
  snprintf(name, sizeof name, "/pinscope_full_%d", (int)getpid());
  if (!strcmp(mode, "chain")) InstallProgramHandler();
  int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
  CHECK(fd >= 0);
  shm_unlink(name);
  if (!strcmp(mode, "enospc")) {
    int rc = posix_fallocate(fd, 0, (off_t)size);
    printf("posix_fallocate=%d\n", rc);
    return rc == ENOSPC ? 0 : 1;
  }
  CHECK(ftruncate(fd, (off_t)size) == 0); /* sparse: succeeds whatever the size */
  char* p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  CHECK(p != MAP_FAILED);
  printf("mapped=%llu\n", U(p));
  fflush(stdout);
  if (!strcmp(mode, "replaced")) InstallProgramHandler();
  if (!strcmp(mode, "kill")) {
    kill(getpid(), SIGBUS);
    return 3;
  }
  if (!strcmp(mode, "truncated")) {
    CHECK(ftruncate(fd, 0) == 0);
    p[MiB] = 1;
    return 4;
  }
  memset(p, 1, size); /* SIGBUS once the tmpfs is full */
  return 5;
}
