// InitProcess under secure execution (AT_SECURE: a setuid, setgid or
// privileged program). ld.so does not preload a library from a path under
// secure execution unless it is installed setuid in a system folder, so the
// check is driven here through InitProcessIn(secure), in a fresh process
// with stderr captured: the shim stays passive, creates no folder from
// PINSCOPE_OUT and says so in exactly one line.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "shim/process/process.h"
#include "shim/record/recorder.h"

namespace {

struct Outcome {
  int status = -1;
  std::string err;
};

Outcome InitIn(bool secure, const std::string& out) {
  char tmpl[] = "/tmp/pinscope-secure-XXXXXX";
  int efd = mkstemp(tmpl);
  EXPECT_GE(efd, 0);
  pid_t pid = fork();
  if (pid == 0) {
    dup2(efd, 2);
    setenv("PINSCOPE_OUT", out.c_str(), 1);
    pinscope::shim::InitProcessIn(secure);
    _exit(pinscope::shim::Recording() ? 1 : 0);
  }
  Outcome o;
  waitpid(pid, &o.status, 0);
  char buf[4096];
  ssize_t n = pread(efd, buf, sizeof buf, 0);
  o.err.assign(buf, n > 0 ? static_cast<size_t>(n) : 0);
  close(efd);
  unlink(tmpl);
  return o;
}

TEST(SecureExecution, StaysPassiveAndCreatesNothing) {
  std::string out = "/tmp/pinscope-secure-out-" + std::to_string(getpid());
  Outcome o = InitIn(true, out);
  ASSERT_TRUE(WIFEXITED(o.status));
  EXPECT_EQ(WEXITSTATUS(o.status), 0) << "recording under AT_SECURE";
  struct stat st;
  EXPECT_NE(stat(out.c_str(), &st), 0) << out << " was created";
  EXPECT_EQ(o.err,
            "pinscope: secure execution (a setuid, setgid or privileged program); pinscope stays "
            "passive and reads none of its variables (the program runs untraced)\n");
}

TEST(SecureExecution, WithoutItTheFolderIsMade) {
  std::string out = "/tmp/pinscope-secure-out2-" + std::to_string(getpid());
  Outcome o = InitIn(false, out);
  ASSERT_TRUE(WIFEXITED(o.status));
  EXPECT_EQ(WEXITSTATUS(o.status), 1) << "not recording: " << o.err;
  struct stat st;
  EXPECT_EQ(stat(out.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_EQ(o.err, "");
  rmdir(out.c_str());
}

}  // namespace
