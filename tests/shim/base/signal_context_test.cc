// InSignalHandler: false in ordinary code, true inside a handler however
// it was installed (SA_NODEFER as PyTorch's worker handlers, SA_SIGINFO or
// not, on an alternate signal stack), and false again after it returned.
#include "shim/base/signal_context.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <cstdlib>
#include <vector>

namespace pinscope::shim {
namespace {

volatile sig_atomic_t g_seen = -1;

__attribute__((noinline)) void Record() { g_seen = InSignalHandler() ? 1 : 0; }

void Plain(int) { Record(); }
void WithInfo(int, siginfo_t*, void*) { Record(); }

int RaiseWith(int flags, bool info) {
  struct sigaction sa {
  }, old{};
  if (info) {
    sa.sa_sigaction = WithInfo;
    flags |= SA_SIGINFO;
  } else {
    sa.sa_handler = Plain;
  }
  sa.sa_flags = flags;
  sigemptyset(&sa.sa_mask);
  EXPECT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
  g_seen = -1;
  raise(SIGUSR1);
  EXPECT_EQ(sigaction(SIGUSR1, &old, nullptr), 0);
  return g_seen;
}

TEST(SignalContext, OrdinaryCodeIsNotAHandler) { EXPECT_FALSE(InSignalHandler()); }

TEST(SignalContext, AHandlerIsSeenHoweverItWasInstalled) {
  EXPECT_EQ(RaiseWith(0, false), 1);
  EXPECT_EQ(RaiseWith(0, true), 1);
  // PyTorch's DataLoader workers' handlers: the signal mask does not tell.
  EXPECT_EQ(RaiseWith(SA_RESTART | SA_NODEFER | SA_NOCLDSTOP, true), 1);
  EXPECT_FALSE(InSignalHandler());
}

TEST(SignalContext, AHandlerOnAnAlternateStackIsSeen) {
  std::vector<char> stack(256 * 1024);
  stack_t ss{}, old{};
  ss.ss_sp = stack.data();
  ss.ss_size = stack.size();
  ASSERT_EQ(sigaltstack(&ss, &old), 0);
  EXPECT_EQ(RaiseWith(SA_ONSTACK, true), 1);
  ASSERT_EQ(sigaltstack(&old, nullptr), 0);
}

}  // namespace
}  // namespace pinscope::shim
