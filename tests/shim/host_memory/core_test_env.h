// One recorder per test process: the first test that needs it points
// PINSCOPE_OUT at a fresh folder, starts the recorder and the alloc and shm
// cores (as the library constructors would), and later reads this process's
// trace file back. Shared by the host-memory core tests.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>

#include "e2e_util.h"
#include "shim/core/alloc_core.h"
#include "shim/core/shm_core.h"
#include "shim/process/process.h"
#include "shim/record/recorder.h"

namespace pinscope::shim::testing {

// glibc's allocator serves malloc in this process; in a sanitizer build
// (PINSCOPE_SANITIZE) ASan's does, and the cores forward to it as to any
// allocator other than glibc's (shim/memory/real_alloc.cc).
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kGlibcServesMalloc = false;
#else
inline constexpr bool kGlibcServesMalloc = true;
#endif

inline const std::string& TraceDir() {
  static std::string dir = [] {
    char tmpl[] = "/tmp/pinscope-core-XXXXXX";
    std::string d = mkdtemp(tmpl);
    setenv("PINSCOPE_OUT", d.c_str(), 1);
    setenv("PINSCOPE_TRACE_MIN", "1M", 1);
    setenv("PINSCOPE_STACKS", "0", 1);
    setenv("PINSCOPE_CUPTI", "0", 1);
    unsetenv("PINSCOPE_RUN_ID");
    unsetenv("PINSCOPE_ROOT_PID");
    unsetenv("PINSCOPE_DISABLE");
    InitProcess();
    alloc::InitAlloc();
    shm::InitShm();
    // Removed when the test process ends (forked children _exit first),
    // unless PINSCOPE_KEEP_TEST_TRACES is set.
    static std::string keep = d;
    atexit(+[] {
      if (getenv("PINSCOPE_KEEP_TEST_TRACES")) return;
      std::string cmd = "rm -rf '" + keep + "'";
      if (system(cmd.c_str()) != 0) {
      }
    });
    return d;
  }();
  return dir;
}

// Every packet this process wrote so far (flushes first).
inline e2e::ProcessTrace ReadOwnTrace(uint32_t pid = 0) {
  FlushTrace();
  if (pid == 0) pid = static_cast<uint32_t>(getpid());
  std::string error;
  auto run = e2e::ReadRun(TraceDir(), &error);
  EXPECT_EQ(error, "");
  auto it = run.find(pid);
  return it == run.end() ? e2e::ProcessTrace{} : it->second;
}

}  // namespace pinscope::shim::testing
