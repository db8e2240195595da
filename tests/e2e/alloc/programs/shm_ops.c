/* Shared memory: shm_open (create, open, O_CREAT on an existing name,
   failure), ftruncate, posix_fallocate, mmap/mmap64 at offsets, partial
   munmap (a hole in the middle), MAP_FIXED replacement, shm_unlink, close;
   an fd passed to a forked child over a socket (SCM_RIGHTS) and mapped
   there; memfd_create; a segment named like the CUDA driver's; and what
   must not be recorded (regular files, anonymous memory, a number dup2'd
   over a tracked fd). Each expected ShmEvent is one line of expect.<pid>:
   shm OP NAME FD SIZE OFFSET ADDRESS FLAGS PROT ERROR DEV INO DRIVER. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "expect.h"

#define MiB (1024u * 1024u)

static struct stat Stat(int fd) {
  struct stat st;
  CHECK(fstat(fd, &st) == 0);
  return st;
}

static void ExpectShm(const char* op, const char* name, int fd, unsigned long long size,
                      unsigned long long offset, const void* addr, int flags, int prot, int error,
                      const struct stat* st, int driver) {
  Expect("shm %s %s %d %llu %llu %llu %d %d %d %llu %llu %d", op, name && *name ? name : "-", fd,
         size, offset, U(addr), flags, prot, error, st ? (unsigned long long)st->st_dev : 0ull,
         st ? (unsigned long long)st->st_ino : 0ull, driver);
}

static void SendFd(int sock, int fd) {
  char byte = 1;
  struct iovec iov = {&byte, 1};
  char ctrl[CMSG_SPACE(sizeof(int))];
  memset(ctrl, 0, sizeof ctrl);
  struct msghdr msg = {0};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = ctrl;
  msg.msg_controllen = sizeof ctrl;
  struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof fd);
  CHECK(sendmsg(sock, &msg, 0) == 1);
}

static int RecvFd(int sock) {
  char byte;
  struct iovec iov = {&byte, 1};
  char ctrl[CMSG_SPACE(sizeof(int))];
  struct msghdr msg = {0};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = ctrl;
  msg.msg_controllen = sizeof ctrl;
  CHECK(recvmsg(sock, &msg, 0) == 1);
  int fd;
  memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&msg)), sizeof fd);
  return fd;
}

int main(void) {
  const int rw = PROT_READ | PROT_WRITE;
  char name[64], cuda[64];
  snprintf(name, sizeof name, "/pinscope_e2e_%d", (int)getpid());
  snprintf(cuda, sizeof cuda, "/cuda_pinscope_e2e_%d", (int)getpid());

  /* Create, size, fill, map whole and at an offset. */
  errno = 321;
  int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
  CHECK(fd >= 0 && errno == 321);
  struct stat st = Stat(fd);
  ExpectShm("SHM_CREATE", name, fd, 0, 0, NULL, O_RDWR | O_CREAT | O_EXCL, 0, 0, &st, 0);
  CHECK(ftruncate(fd, 4 * MiB) == 0);
  ExpectShm("SHM_TRUNCATE", name, fd, 4 * MiB, 0, NULL, 0, 0, 0, &st, 0);
  CHECK(posix_fallocate(fd, 0, 4 * MiB) == 0);
  ExpectShm("SHM_FALLOCATE", name, fd, 4 * MiB, 0, NULL, 0, 0, 0, &st, 0);
  char* p = mmap(NULL, 4 * MiB, rw, MAP_SHARED, fd, 0);
  CHECK(p != MAP_FAILED && errno == 321);
  ExpectShm("SHM_MAP", name, fd, 4 * MiB, 0, p, MAP_SHARED, rw, 0, &st, 0);
  char* q = mmap64(NULL, MiB, PROT_READ, MAP_SHARED, fd, MiB);
  CHECK(q != MAP_FAILED);
  ExpectShm("SHM_MAP", name, fd, MiB, MiB, q, MAP_SHARED, PROT_READ, 0, &st, 0);
  memset(p, 0x5a, 4 * MiB);
  CHECK(q[0] == 0x5a);

  /* A failing map of a shm fd is recorded with its errno. */
  errno = 0;
  CHECK(mmap(NULL, MiB, rw, MAP_SHARED, fd, 100) == MAP_FAILED && errno == EINVAL);
  ExpectShm("SHM_MAP", name, fd, MiB, 100, NULL, MAP_SHARED, rw, EINVAL, &st, 0);

  /* A hole in the middle of the big mapping. */
  CHECK(munmap(p + MiB, MiB) == 0);
  ExpectShm("SHM_UNMAP", name, -1, MiB, MiB, p + MiB, 0, 0, 0, &st, 0);
  /* After the real call, its duration: the range and the first piece's identity. */
  ExpectShm("SHM_UNMAP_DONE", name, -1, MiB, 0, p + MiB, 0, 0, 0, &st, 0);

  /* Opening the same object again, with and without O_CREAT. */
  int fd2 = shm_open(name, O_RDWR, 0);
  CHECK(fd2 >= 0);
  ExpectShm("SHM_OPEN", name, fd2, 4 * MiB, 0, NULL, O_RDWR, 0, 0, &st, 0);
  int fd3 = shm_open(name, O_RDWR | O_CREAT, 0600);
  CHECK(fd3 >= 0);
  ExpectShm("SHM_OPEN", name, fd3, 4 * MiB, 0, NULL, O_RDWR | O_CREAT, 0, 0, &st, 0);
  CHECK(close(fd2) == 0);
  ExpectShm("SHM_CLOSE", name, fd2, 0, 0, NULL, 0, 0, 0, &st, 0);
  CHECK(close(fd3) == 0);
  ExpectShm("SHM_CLOSE", name, fd3, 0, 0, NULL, 0, 0, 0, &st, 0);
  char missing[80];
  snprintf(missing, sizeof missing, "%s_missing", name);
  errno = 0;
  CHECK(shm_open(missing, O_RDWR, 0) == -1 && errno == ENOENT);
  ExpectShm("SHM_OPEN", missing, -1, 0, 0, NULL, O_RDWR, 0, ENOENT, NULL, 0);

  /* Unlinked at once, as torch does; the mappings and the fd live on. */
  CHECK(shm_unlink(name) == 0);
  ExpectShm("SHM_UNLINK", name, -1, 0, 0, NULL, 0, 0, 0, &st, 0);
  errno = 0;
  CHECK(shm_unlink(name) == -1 && errno == ENOENT);
  ExpectShm("SHM_UNLINK", name, -1, 0, 0, NULL, 0, 0, ENOENT, NULL, 0);

  /* A second segment, renamed in /dev/shm after it was made (rename(2) is
     not hooked): the child's map of it below takes the name it was made
     under from the job's name table, not from readlink. */
  char made[64], moved[64], moved_path[80];
  snprintf(made, sizeof made, "/pinscope_e2e_made_%d", (int)getpid());
  snprintf(moved, sizeof moved, "/pinscope_e2e_moved_%d", (int)getpid());
  snprintf(moved_path, sizeof moved_path, "/dev/shm%s", moved);
  int rfd = shm_open(made, O_RDWR | O_CREAT | O_EXCL, 0600);
  CHECK(rfd >= 0);
  struct stat rst = Stat(rfd);
  ExpectShm("SHM_CREATE", made, rfd, 0, 0, NULL, O_RDWR | O_CREAT | O_EXCL, 0, 0, &rst, 0);
  CHECK(ftruncate(rfd, MiB) == 0);
  ExpectShm("SHM_TRUNCATE", made, rfd, MiB, 0, NULL, 0, 0, 0, &rst, 0);
  char made_path[80];
  snprintf(made_path, sizeof made_path, "/dev/shm%s", made);
  CHECK(rename(made_path, moved_path) == 0);

  /* The fd travels to a forked child, which maps it: the DataLoader path. */
  int sv[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  pid_t child = fork();
  CHECK(child >= 0);
  if (child == 0) {
    close(sv[0]);
    int got = RecvFd(sv[1]);
    char* c = mmap64(NULL, 4 * MiB, rw, MAP_SHARED, got, 0);
    CHECK(c != MAP_FAILED && c[4 * MiB - 1] == 0x5a);
    ExpectShm("SHM_MAP", name, got, 4 * MiB, 0, c, MAP_SHARED, rw, 0, &st, 0);
    c[0] = 0x11;
    CHECK(close(got) == 0); /* received, not opened here: no event */
    CHECK(munmap(c, 4 * MiB) == 0);
    ExpectShm("SHM_UNMAP", name, -1, 4 * MiB, 0, c, 0, 0, 0, &st, 0);
    ExpectShm("SHM_UNMAP_DONE", name, -1, 4 * MiB, 0, c, 0, 0, 0, &st, 0);
    /* The renamed one: its name as made (readlink would say moved). */
    int got2 = RecvFd(sv[1]);
    char* r = mmap(NULL, MiB, PROT_READ, MAP_SHARED, got2, 0);
    CHECK(r != MAP_FAILED);
    ExpectShm("SHM_MAP", made, got2, MiB, 0, r, MAP_SHARED, PROT_READ, 0, &rst, 0);
    CHECK(close(got2) == 0);
    CHECK(munmap(r, MiB) == 0);
    ExpectShm("SHM_UNMAP", made, -1, MiB, 0, r, 0, 0, 0, &rst, 0);
    ExpectShm("SHM_UNMAP_DONE", made, -1, MiB, 0, r, 0, 0, 0, &rst, 0);
    /* The parent's mappings, inherited: unmapping them is not our event. */
    CHECK(munmap(q, MiB) == 0);
    _exit(0);
  }
  close(sv[1]);
  SendFd(sv[0], fd);
  SendFd(sv[0], rfd);
  int cst;
  CHECK(waitpid(child, &cst, 0) == child && WIFEXITED(cst) && WEXITSTATUS(cst) == 0);
  CHECK(p[0] == 0x11);
  close(sv[0]);
  CHECK(close(rfd) == 0);
  ExpectShm("SHM_CLOSE", made, rfd, 0, 0, NULL, 0, 0, 0, &rst, 0);
  CHECK(shm_unlink(moved) == 0);
  ExpectShm("SHM_UNLINK", moved, -1, 0, 0, NULL, 0, 0, 0, &rst, 0);

  /* MAP_FIXED anonymous memory over part of the mapping replaces it. */
  char* fixed = mmap(p + 3 * MiB, MiB, rw, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  CHECK(fixed == p + 3 * MiB);
  ExpectShm("SHM_UNMAP", name, -1, MiB, 3 * MiB, p + 3 * MiB, 0, 0, 0, &st, 0);
  CHECK(munmap(fixed, MiB) == 0);

  /* What is left of the big mapping goes in one munmap: two pieces. */
  CHECK(munmap(p, 4 * MiB) == 0);
  ExpectShm("SHM_UNMAP", name, -1, MiB, 0, p, 0, 0, 0, &st, 0);
  ExpectShm("SHM_UNMAP", name, -1, MiB, 2 * MiB, p + 2 * MiB, 0, 0, 0, &st, 0);
  ExpectShm("SHM_UNMAP_DONE", name, -1, 4 * MiB, 0, p, 0, 0, 0, &st, 0);
  CHECK(munmap(q, MiB) == 0);
  ExpectShm("SHM_UNMAP", name, -1, MiB, MiB, q, 0, 0, 0, &st, 0);
  ExpectShm("SHM_UNMAP_DONE", name, -1, MiB, 0, q, 0, 0, 0, &st, 0);

  /* dup2 puts a regular file under the tracked number: no longer shm. */
  char tmp[] = "/tmp/pinscope-e2e-XXXXXX";
  int reg = mkstemp(tmp);
  CHECK(reg >= 0);
  unlink(tmp);
  int spare = dup(fd);
  CHECK(dup2(reg, fd) == fd);
  CHECK(ftruncate(fd, MiB) == 0); /* not recorded: fd is a regular file now */
  char* file_map = mmap(NULL, MiB, rw, MAP_SHARED, fd, 0); /* not recorded */
  CHECK(file_map != MAP_FAILED);
  CHECK(munmap(file_map, MiB) == 0);
  void* anon = mmap(NULL, 8 * MiB, rw, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0); /* not recorded */
  CHECK(anon != MAP_FAILED);
  CHECK(munmap(anon, 8 * MiB) == 0);
  CHECK(close(fd) == 0); /* not recorded: the tracked entry was dropped */
  CHECK(close(reg) == 0);
  CHECK(close(spare) == 0); /* a dup of a tracked fd is not tracked */

  /* memfd_create: recorded, mapped, closed. */
  int mfd = memfd_create("pinscope-e2e", MFD_CLOEXEC);
  CHECK(mfd >= 0);
  struct stat mst = Stat(mfd);
  ExpectShm("MEMFD_CREATE", "pinscope-e2e", mfd, 0, 0, NULL, MFD_CLOEXEC, 0, 0, &mst, 0);
  CHECK(ftruncate64(mfd, 2 * MiB) == 0);
  ExpectShm("SHM_TRUNCATE", "pinscope-e2e", mfd, 2 * MiB, 0, NULL, 0, 0, 0, &mst, 0);
  char* mm = mmap(NULL, 2 * MiB, rw, MAP_SHARED, mfd, 0);
  CHECK(mm != MAP_FAILED);
  ExpectShm("SHM_MAP", "pinscope-e2e", mfd, 2 * MiB, 0, mm, MAP_SHARED, rw, 0, &mst, 0);
  CHECK(munmap(mm, 2 * MiB) == 0);
  ExpectShm("SHM_UNMAP", "pinscope-e2e", -1, 2 * MiB, 0, mm, 0, 0, 0, &mst, 0);
  ExpectShm("SHM_UNMAP_DONE", "pinscope-e2e", -1, 2 * MiB, 0, mm, 0, 0, 0, &mst, 0);
  CHECK(close(mfd) == 0);
  ExpectShm("SHM_CLOSE", "pinscope-e2e", mfd, 0, 0, NULL, 0, 0, 0, &mst, 0);

  /* A segment named like the CUDA driver's is recorded as driver-internal. */
  int cfd = shm_open(cuda, O_RDWR | O_CREAT | O_EXCL, 0600);
  CHECK(cfd >= 0);
  struct stat cst2 = Stat(cfd);
  ExpectShm("SHM_CREATE", cuda, cfd, 0, 0, NULL, O_RDWR | O_CREAT | O_EXCL, 0, 0, &cst2, 1);
  CHECK(ftruncate(cfd, 64 * 1024) == 0);
  ExpectShm("SHM_TRUNCATE", cuda, cfd, 64 * 1024, 0, NULL, 0, 0, 0, &cst2, 1);
  char* cm = mmap(NULL, 64 * 1024, rw, MAP_SHARED, cfd, 0);
  CHECK(cm != MAP_FAILED);
  ExpectShm("SHM_MAP", cuda, cfd, 64 * 1024, 0, cm, MAP_SHARED, rw, 0, &cst2, 1);
  CHECK(munmap(cm, 64 * 1024) == 0);
  ExpectShm("SHM_UNMAP", cuda, -1, 64 * 1024, 0, cm, 0, 0, 0, &cst2, 1);
  ExpectShm("SHM_UNMAP_DONE", cuda, -1, 64 * 1024, 0, cm, 0, 0, 0, &cst2, 1);
  CHECK(close(cfd) == 0);
  ExpectShm("SHM_CLOSE", cuda, cfd, 0, 0, NULL, 0, 0, 0, &cst2, 1);
  CHECK(shm_unlink(cuda) == 0);
  ExpectShm("SHM_UNLINK", cuda, -1, 0, 0, NULL, 0, 0, 0, &cst2, 1);

  /* A /dev/shm file made with open(2), which is not hooked: nobody
     published its name, and the map takes it from readlink. */
  char opened[64], opened_path[80];
  snprintf(opened, sizeof opened, "/pinscope_e2e_open_%d", (int)getpid());
  snprintf(opened_path, sizeof opened_path, "/dev/shm%s", opened);
  int ofd = open(opened_path, O_RDWR | O_CREAT | O_EXCL, 0600);
  CHECK(ofd >= 0);
  CHECK(ftruncate(ofd, MiB) == 0); /* not recorded: an fd no hook made */
  struct stat ost = Stat(ofd);
  char* om = mmap(NULL, MiB, rw, MAP_SHARED, ofd, 0);
  CHECK(om != MAP_FAILED);
  ExpectShm("SHM_MAP", opened, ofd, MiB, 0, om, MAP_SHARED, rw, 0, &ost, 0);
  CHECK(munmap(om, MiB) == 0);
  ExpectShm("SHM_UNMAP", opened, -1, MiB, 0, om, 0, 0, 0, &ost, 0);
  ExpectShm("SHM_UNMAP_DONE", opened, -1, MiB, 0, om, 0, 0, 0, &ost, 0);
  CHECK(close(ofd) == 0); /* not recorded */
  CHECK(unlink(opened_path) == 0);

  /* dup, dup2, dup3, fcntl and fcntl64 are hooked (the pool's check of a
     slot fd's copies): each answers as without pinscope, its third
     argument an int or a pointer; nothing is recorded. */
  char ftmp[] = "/tmp/pinscope-e2e-fcntl-XXXXXX";
  int ffd = mkstemp(ftmp);
  CHECK(ffd >= 0);
  unlink(ftmp);
  int d100 = fcntl(ffd, F_DUPFD, 100);
  CHECK(d100 >= 100 && fcntl(d100, F_GETFD) == 0);
  int d200 = fcntl64(ffd, F_DUPFD_CLOEXEC, 200);
  CHECK(d200 >= 200 && fcntl64(d200, F_GETFD) == FD_CLOEXEC);
  CHECK(fcntl(ffd, F_SETFL, O_NONBLOCK) == 0 && (fcntl(ffd, F_GETFL) & O_NONBLOCK));
  struct flock lk = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 10};
  CHECK(fcntl(ffd, F_SETLK, &lk) == 0);
  lk.l_type = F_WRLCK;
  CHECK(fcntl64(ffd, F_GETLK, &lk) == 0 && lk.l_type == F_UNLCK); /* our own lock */
  CHECK(dup2(ffd, ffd) == ffd);
  errno = 0;
  CHECK(dup3(ffd, ffd, 0) == -1 && errno == EINVAL);
  int d3 = dup3(ffd, 300, O_CLOEXEC);
  CHECK(d3 == 300 && fcntl(d3, F_GETFD) == FD_CLOEXEC);
  errno = 0;
  CHECK(dup(-1) == -1 && errno == EBADF);
  errno = 0;
  CHECK(fcntl(-1, F_GETFD) == -1 && errno == EBADF);
  CHECK(close(d100) == 0 && close(d200) == 0 && close(d3) == 0 && close(ffd) == 0);

  /* errno survives successful calls. */
  errno = 4242;
  int efd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
  CHECK(efd >= 0 && errno == 4242);
  struct stat est = Stat(efd);
  ExpectShm("SHM_CREATE", name, efd, 0, 0, NULL, O_RDWR | O_CREAT | O_EXCL, 0, 0, &est, 0);
  CHECK(shm_unlink(name) == 0 && errno == 4242);
  ExpectShm("SHM_UNLINK", name, -1, 0, 0, NULL, 0, 0, 0, &est, 0);
  CHECK(close(efd) == 0 && errno == 4242);
  ExpectShm("SHM_CLOSE", name, efd, 0, 0, NULL, 0, 0, 0, &est, 0);
  return 0;
}
