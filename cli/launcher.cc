// fork/exec of the job, exit status and signal forwarding; see launcher.h.
// The signal handler only calls kill()/sigqueue() (async-signal-safe) on a
// pid that cannot have been reaped yet: the job is waited for with WNOWAIT
// and reaped only once the handlers can no longer run.
#include "cli/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

namespace pinscope::cli {
namespace {

constexpr int kForwarded[] = {SIGTERM, SIGHUP, SIGQUIT, SIGUSR1,
                              SIGUSR2, SIGINT, SIGCONT, SIGWINCH};
constexpr int kNumForwarded = sizeof kForwarded / sizeof kForwarded[0];

volatile sig_atomic_t g_job_pid = 0;
// LaunchSpec::own_process_group (pinscope tune): the job leads its own group.
volatile sig_atomic_t g_group_mode = 0;
volatile sig_atomic_t g_stop_signal = 0, g_stop_count = 0, g_sigints = 0;
volatile sig_atomic_t g_timed_out = 0;

bool IsStopSignal(int sig) {
  return sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT;
}

void NoteStop(int sig) {
  if (!IsStopSignal(sig)) return;
  if (g_stop_signal == 0) g_stop_signal = sig;
  g_stop_count = g_stop_count + 1;
  if (sig == SIGINT) g_sigints = g_sigints + 1;
}

void OnStopSignal(int sig) {
  const int saved_errno = errno;
  NoteStop(sig);
  errno = saved_errno;
}

// The trial's time limit: SIGTERM to its group, then SIGKILL 5 s later.
void OnAlarm(int /*sig*/) {
  const int saved_errno = errno;
  const pid_t job = g_job_pid;
  if (job > 0) {
    if (!g_timed_out) {
      g_timed_out = 1;
      kill(-job, SIGTERM);
      alarm(5);
    } else {
      kill(-job, SIGKILL);
    }
  }
  errno = saved_errno;
}

void ForwardSignal(int sig, siginfo_t* info, void* /*context*/) {
  const int saved_errno = errno;
  const pid_t job = g_job_pid;
  if (g_group_mode) {
    // The job's group is not the terminal's foreground group: whatever sent
    // the signal, only the launcher got it. The first SIGINT lets the trial
    // finish; the rest go to the job's group.
    if (info != nullptr && job > 0 && info->si_pid == job && info->si_code <= 0) {
      errno = saved_errno;
      return;  // the job's own signal to its parent is not echoed back
    }
    NoteStop(sig);
    if (job > 0 && !(sig == SIGINT && g_sigints < 2)) kill(-job, sig);
    errno = saved_errno;
    return;
  }
  // Only what a process sent with kill/sigqueue/tgkill. Kernel-generated
  // signals (terminal Ctrl-C, Ctrl-\, SIGWINCH, hangup: si_code > 0) went to
  // the whole foreground process group, the job included. A signal the job
  // sent to its parent is not echoed back to it.
  if (job > 0 && info != nullptr && info->si_pid != job) {
    if (info->si_code == SI_USER || info->si_code == SI_TKILL) {
      kill(job, sig);
    } else if (info->si_code == SI_QUEUE) {
      sigqueue(job, sig, info->si_value);
    }
  }
  errno = saved_errno;
}

bool IsCoreSignal(int sig) {
  switch (sig) {
    case SIGQUIT:
    case SIGILL:
    case SIGTRAP:
    case SIGABRT:
    case SIGBUS:
    case SIGFPE:
    case SIGSEGV:
    case SIGSYS:
    case SIGXCPU:
    case SIGXFSZ:
      return true;
    default:
      return false;
  }
}

}  // namespace

const std::vector<int>& ForwardedSignals() {
  static const std::vector<int> signals(kForwarded, kForwarded + kNumForwarded);
  return signals;
}

void InstallStopHandlers() {
  struct sigaction note = {};
  note.sa_handler = OnStopSignal;
  note.sa_flags = SA_RESTART;
  sigemptyset(&note.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
    struct sigaction old;
    sigaction(sig, nullptr, &old);
    // Ignored when pinscope started (nohup, a script's background job):
    // stays ignored, as `pinscope run` leaves it.
    if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_IGN) continue;
    sigaction(sig, &note, nullptr);
  }
}

int StopSignal() { return g_stop_signal; }
int StopCount() { return g_stop_count; }

LaunchResult Launch(const LaunchSpec& spec) {
  LaunchResult result;
  if (spec.argv.empty()) {
    result.kind = LaunchResult::Kind::kExecFailed;
    result.error = ENOENT;
    return result;
  }
  // argv for execvp, built before the fork.
  std::vector<char*> argv;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  // The forwarded signals stay blocked from before the fork until the
  // handlers know the job's pid, so none is lost or kills the launcher.
  sigset_t forwarded, saved_mask;
  sigemptyset(&forwarded);
  for (int sig : kForwarded) sigaddset(&forwarded, sig);
  sigprocmask(SIG_BLOCK, &forwarded, &saved_mask);

  // Inherited SIGCHLD=SIG_IGN would auto-reap the job and lose its status;
  // the job gets the disposition back before exec.
  struct sigaction saved_chld;
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGCHLD, &dfl, &saved_chld);

  // Reports exec's errno to the launcher; closed by a successful exec.
  int exec_pipe[2];
  if (pipe2(exec_pipe, O_CLOEXEC) != 0) {
    result.kind = LaunchResult::Kind::kForkFailed;
    result.error = errno;
    sigaction(SIGCHLD, &saved_chld, nullptr);
    sigprocmask(SIG_SETMASK, &saved_mask, nullptr);
    return result;
  }
  fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    result.kind = LaunchResult::Kind::kForkFailed;
    result.error = errno;
    close(exec_pipe[0]);
    close(exec_pipe[1]);
    sigaction(SIGCHLD, &saved_chld, nullptr);
    sigprocmask(SIG_SETMASK, &saved_mask, nullptr);
    return result;
  }
  if (pid == 0) {
    // The job: the launcher's signal state as it was given to pinscope.
    close(exec_pipe[0]);
    sigaction(SIGCHLD, &saved_chld, nullptr);
    sigprocmask(SIG_SETMASK, &saved_mask, nullptr);
    if (spec.own_process_group) {
      setpgid(0, 0);
      // Not the terminal's foreground group: reading it would stop the job.
      const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
      if (null_fd >= 0) dup2(null_fd, STDIN_FILENO);
    }
    for (const auto& [path, fd] : {std::pair{&spec.stdout_path, STDOUT_FILENO},
                                   std::pair{&spec.stderr_path, STDERR_FILENO}}) {
      if (path->empty()) continue;
      const int out = open(path->c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      if (out < 0 || dup2(out, fd) < 0) {
        int err = errno;
        ssize_t ignored = write(exec_pipe[1], &err, sizeof err);
        (void)ignored;
        _exit(127);
      }
    }
    for (const auto& [name, value] : spec.env) setenv(name.c_str(), value.c_str(), 1);
    if (spec.set_root_pid) {
      char pid_text[24];
      std::snprintf(pid_text, sizeof pid_text, "%d", static_cast<int>(getpid()));
      setenv("PINSCOPE_ROOT_PID", pid_text, 1);
    }
    execvp(argv[0], argv.data());
    int err = errno;
    ssize_t ignored = write(exec_pipe[1], &err, sizeof err);
    (void)ignored;
    _exit(127);
  }

  close(exec_pipe[1]);
  // Both sides set the group, so it is in place whichever runs first.
  if (spec.own_process_group) setpgid(pid, pid);
  g_group_mode = spec.own_process_group ? 1 : 0;
  g_timed_out = 0;
  g_job_pid = pid;
  struct sigaction saved_alarm;
  const bool timed = spec.own_process_group && spec.timeout_s > 0;
  if (timed) {
    struct sigaction on_alarm = {};
    on_alarm.sa_handler = OnAlarm;
    on_alarm.sa_flags = SA_RESTART;
    sigemptyset(&on_alarm.sa_mask);
    sigaction(SIGALRM, &on_alarm, &saved_alarm);
    alarm(spec.timeout_s);
  }
  struct sigaction saved_actions[kNumForwarded];
  struct sigaction forward = {};
  forward.sa_sigaction = ForwardSignal;
  forward.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&forward.sa_mask);
  for (int i = 0; i < kNumForwarded; ++i) {
    sigaction(kForwarded[i], nullptr, &saved_actions[i]);
    // A signal ignored when pinscope started (SIGHUP under nohup, SIGINT and
    // SIGQUIT in a script's background job) is ignored by the job too; the
    // launcher keeps ignoring it rather than handing it on.
    if (!(saved_actions[i].sa_flags & SA_SIGINFO) && saved_actions[i].sa_handler == SIG_IGN) {
      continue;
    }
    sigaction(kForwarded[i], &forward, nullptr);
  }
  // Signals that arrived since the fork are delivered (and forwarded) now.
  // The job's forwarded signals are unblocked even if the launcher's caller
  // had blocked them: they are the launcher's to catch while the job runs.
  sigset_t run_mask = saved_mask;
  for (int sig : kForwarded) sigdelset(&run_mask, sig);
  sigprocmask(SIG_SETMASK, &run_mask, nullptr);

  int exec_errno = 0;
  ssize_t n;
  do {
    n = read(exec_pipe[0], &exec_errno, sizeof exec_errno);
  } while (n < 0 && errno == EINTR);
  close(exec_pipe[0]);

  // Wait without reaping, so the pid stays the job's while handlers may run.
  while (true) {
    siginfo_t info;
    std::memset(&info, 0, sizeof info);
    if (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) == 0) break;
    if (errno != EINTR) break;
  }
  sigprocmask(SIG_BLOCK, &forwarded, nullptr);
  if (timed) {
    alarm(0);
    sigaction(SIGALRM, &saved_alarm, nullptr);
  }
  g_job_pid = 0;
  g_group_mode = 0;
  int status = 0;
  pid_t reaped;
  do {
    reaped = waitpid(pid, &status, 0);
  } while (reaped < 0 && errno == EINTR);
  if (spec.own_process_group && kill(-pid, 0) == 0) {
    // What the job left running in its group (orphaned DataLoader workers)
    // would take CPU from the next trial.
    usleep(200 * 1000);
    kill(-pid, SIGKILL);
  }
  result.timed_out = g_timed_out != 0;
  for (int i = 0; i < kNumForwarded; ++i) sigaction(kForwarded[i], &saved_actions[i], nullptr);
  sigaction(SIGCHLD, &saved_chld, nullptr);
  // Pending signals sent after the job ended now act on the launcher as
  // they would have without pinscope.
  sigprocmask(SIG_SETMASK, &saved_mask, nullptr);

  if (n == static_cast<ssize_t>(sizeof exec_errno)) {
    result.kind = LaunchResult::Kind::kExecFailed;
    result.error = exec_errno;
  } else if (reaped < 0) {
    // Cannot happen unless someone else reaped the job; report it as lost.
    result.kind = LaunchResult::Kind::kForkFailed;
    result.error = errno;
  } else if (WIFSIGNALED(status)) {
    result.kind = LaunchResult::Kind::kSignaled;
    result.signal = WTERMSIG(status);
    result.core_dumped = WCOREDUMP(status);
  } else {
    result.kind = LaunchResult::Kind::kExited;
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  }
  return result;
}

void DieOfSignal(int sig) {
  std::fflush(nullptr);
  if (IsCoreSignal(sig)) {
    // The job's core (if any) is the one that matters; the launcher's would
    // only overwrite it (core_pattern "core" in the same cwd).
    struct rlimit none = {0, 0};
    setrlimit(RLIMIT_CORE, &none);
  }
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  sigset_t only;
  sigemptyset(&only);
  sigaddset(&only, sig);
  sigprocmask(SIG_UNBLOCK, &only, nullptr);
  kill(getpid(), sig);
  // SIGCONT-like signals do not terminate; the status then says 128+N.
  _exit(128 + sig);
}

}  // namespace pinscope::cli
