// Starts the job of `pinscope run` and waits for it, forwarding signals.
//
// Forwarding: SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGINT, SIGCONT and
// SIGWINCH that another process sends to the launcher (si_code SI_USER,
// SI_QUEUE or SI_TKILL) are sent on to the job. Signals the kernel generates
// (si_code > 0, e.g. Ctrl-C or a window resize from the terminal) already
// reach the job, which shares the launcher's process group, so they are not
// sent twice. A signal ignored when the launcher started stays ignored (and
// is not forwarded). While the job runs the launcher itself never dies of
// these signals; afterwards its original dispositions are back.
// Contract: call from a single-threaded process (the child calls setenv
// between fork and exec).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace pinscope::cli {

struct LaunchSpec {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH (execvp)
  // Set in the job's environment (overriding the launcher's).
  std::vector<std::pair<std::string, std::string>> env;
  // Also set PINSCOPE_ROOT_PID to the job's own pid, in the child, before exec.
  bool set_root_pid = true;
};

struct LaunchResult {
  enum class Kind { kExited, kSignaled, kExecFailed, kForkFailed };
  Kind kind = Kind::kForkFailed;
  int exit_code = 0;  // kExited
  int signal = 0;     // kSignaled
  bool core_dumped = false;
  int error = 0;  // errno of exec (kExecFailed) or fork (kForkFailed)
};

// Runs the job to completion. Never throws; returns kExecFailed (with errno)
// if the command could not be executed, without having run anything.
LaunchResult Launch(const LaunchSpec& spec);

// Ends the launcher with the same status as a job killed by `sig`: restores
// SIG_DFL, unblocks and raises it (no core file of the launcher itself:
// RLIMIT_CORE is set to 0 first). Falls back to _exit(128 + sig).
[[noreturn]] void DieOfSignal(int sig);

// The signals forwarded, for docs and tests.
const std::vector<int>& ForwardedSignals();

}  // namespace pinscope::cli
