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
  // The job's stdout and stderr go to these files (created 0600, truncated)
  // when set; else they are the launcher's.
  std::string stdout_path, stderr_path;
  // `pinscope tune`: the job runs in a process group of its own, so a
  // terminal's Ctrl-C reaches the launcher only. The first SIGINT (from the
  // terminal or kill) is noted, not forwarded: the trial runs to its end
  // (StopSignal() says it came); a second one goes to the job's group.
  // SIGTERM, SIGHUP and SIGQUIT, whoever sent them, go to the job's group at
  // once and are noted too. Other forwarded signals go to the group as well.
  bool own_process_group = false;
  // With own_process_group: after this many seconds the job's group gets
  // SIGTERM, and SIGKILL 5 s later (LaunchResult::timed_out). 0: no limit.
  unsigned timeout_s = 0;
};

struct LaunchResult {
  enum class Kind { kExited, kSignaled, kExecFailed, kForkFailed };
  Kind kind = Kind::kForkFailed;
  int exit_code = 0;  // kExited
  int signal = 0;     // kSignaled
  bool core_dumped = false;
  int error = 0;           // errno of exec (kExecFailed) or fork (kForkFailed)
  bool timed_out = false;  // the timeout_s limit ended it
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

// `pinscope tune` between its trials: SIGINT, SIGTERM, SIGHUP and SIGQUIT
// only note that a stop was asked for (a Launch with own_process_group
// notes them too, see LaunchSpec). StopSignal() is the first one noted, 0
// none; StopCount() how many.
void InstallStopHandlers();
int StopSignal();
int StopCount();

}  // namespace pinscope::cli
