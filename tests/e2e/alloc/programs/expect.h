/* Shared by the end-to-end test programs: each program states the events it
   expects in the trace, one line each, in <PINSCOPE_E2E_DIR>/expect.<pid>
   (written with write(2), so the file itself allocates nothing large), and
   checks what it can observe itself with CHECK (exit code 90 on failure).
   Compiled with -fno-builtin so the compiler keeps every malloc/free call. */
#ifndef PINSCOPE_E2E_EXPECT_H_
#define PINSCOPE_E2E_EXPECT_H_

#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      char m_[512];                                                              \
      int n_ = snprintf(m_, sizeof m_, "CHECK failed at %s:%d: %s\n", __FILE__, \
                        __LINE__, #cond);                                        \
      if (write(2, m_, (size_t)n_) < 0) {                                        \
      }                                                                          \
      _exit(90);                                                                 \
    }                                                                            \
  } while (0)

static inline void Expect(const char* fmt, ...) {
  const char* dir = getenv("PINSCOPE_E2E_DIR");
  if (!dir) return;
  char path[4096], line[1024];
  snprintf(path, sizeof path, "%s/expect.%d", dir, (int)getpid());
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line - 1, fmt, ap);
  va_end(ap);
  line[n++] = '\n';
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  CHECK(fd >= 0);
  CHECK(write(fd, line, (size_t)n) == n);
  close(fd);
}

static inline unsigned long long U(const void* p) { return (unsigned long long)(uintptr_t)p; }

/* Keeps the compiler from reasoning about a block's contents. */
static inline void Touch(void* p, size_t n) {
  volatile unsigned char* c = (volatile unsigned char*)p;
  for (size_t i = 0; i < n; i += 4096) c[i] = (unsigned char)i;
  if (n) c[n - 1] = 1;
}

#endif
