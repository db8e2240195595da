// Process lifecycle: start, fork, exit and the flusher; see process.h.
#include "shim/process/process.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>

#include "shim/base/clock.h"
#include "shim/base/config.h"
#include "shim/base/guard.h"
#include "shim/base/log.h"
#include "shim/base/own_cost.h"
#include "shim/base/phases.h"
#include "shim/device/cupti.h"
#include "shim/device/nvml.h"
#include "shim/pin/pinning.h"
#include "shim/process/thread_sampler.h"
#include "shim/record/host_facts.h"
#include "shim/record/recorder.h"
#include "shim/stacks/stacks.h"

#ifndef PINSCOPE_VERSION
#define PINSCOPE_VERSION "0.1.0"
#endif

namespace pinscope::shim {

namespace {

std::atomic<bool> g_said_passive{false};
bool g_flusher_started = false;  // under the recorder's open lock (on_open)
// The status exit() got, seen by an on_exit handler: a return from main (and
// Python's sys.exit) reaches exit() inside libc, past the exported hook.
std::atomic<bool> g_exit_status_known{false};
int g_exit_status = 0;
bool g_on_exit_registered = false;  // forked children inherit the registration

void OnExit(int status, void*) {
  g_exit_status = status;
  g_exit_status_known.store(true);
}

// Programs whose traces the report folds away by default.
bool IsHelperExe(const char* exe) {
  const char* base = strrchr(exe, '/');
  base = base ? base + 1 : exe;
  static const char* const kHelpers[] = {
      "torch_shm_manager", "sh", "bash", "dash", "cc", "c++", "gcc", "g++", "ld", "ld.bfd",
      "ld.gold", "as", "nvcc", "cicc", "ptxas", "fatbinary", "nvlink", "ldconfig",
      "ldconfig.real", "uname", "nvidia-smi", "git", "which", "lscpu", "cat", "ls"};
  for (const char* h : kHelpers)
    if (!strcmp(base, h)) return true;
  return !strncmp(base, "gcc-", 4) || !strncmp(base, "g++-", 4) || !strncmp(base, "x86_64-linux-gnu-", 17);
}

int MkdirP(char* path) {
  for (char* p = path + 1; *p; ++p) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(path, 0700) != 0 && errno != EEXIST) {
      int e = errno;
      *p = '/';
      return e;
    }
    *p = '/';
  }
  if (mkdir(path, 0700) != 0 && errno != EEXIST) return errno;
  return 0;
}

// Opens the run folder (made 0700 if missing) without following a link,
// and checks that this user owns it and that no other user may write in
// it: a folder or link planted in a shared (sticky, world-writable)
// directory by another user is refused. Returns the folder's fd (O_CLOEXEC)
// or -1 with *why set.
int OpenRunFolder(char* path, char* why, size_t cap) {
  char* slash = strrchr(path, '/');
  if (slash && slash != path) {
    *slash = '\0';  // the parents, mkdir -p (0700 each)
    int err = MkdirP(path);
    *slash = '/';
    if (err) {
      snprintf(why, cap, "cannot create the trace folder %s: %s", path, strerrordesc_np(err));
      return -1;
    }
  }
  if (mkdir(path, 0700) != 0 && errno != EEXIST) {
    snprintf(why, cap, "cannot create the trace folder %s: %s", path, strerrordesc_np(errno));
    return -1;
  }
  int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    snprintf(why, cap, "the trace folder %s %s", path,
             e == ELOOP || e == ENOTDIR ? "is a symbolic link or not a folder (refused)"
                                        : strerrordesc_np(e));
    return -1;
  }
  struct stat st;
  const char* bad = nullptr;
  if (fstat(fd, &st) != 0) bad = "cannot be examined";
  else if (st.st_uid != geteuid()) bad = "belongs to another user (refused)";
  else if (st.st_mode & (S_IWGRP | S_IWOTH)) bad = "is writable by other users (refused)";
  else if (faccessat(fd, ".", W_OK, AT_EACCESS) != 0) bad = "is not writable";
  if (bad) {
    snprintf(why, cap, "the trace folder %s %s", path, bad);
    close(fd);
    return -1;
  }
  return fd;
}

const char* ErrorText(int e) {
  const char* s = strerrordesc_np(e);
  return s ? s : "unknown error";
}

// The recorder's header callback (recorder.h): runs under its open lock.
void EncodeHeader(Encoder* e) {
  namespace h = fields::header;
  const Config& config = GetConfig();
  const ProcessIdentity& id = Identity();
  e->Varint(h::kFormatVersion, 1);
  e->String(h::kRunId, config.run_id);
  e->Varint(h::kPid, id.pid);
  e->Varint(h::kPpid, static_cast<uint64_t>(getppid()));
  e->Varint(h::kOrigin, id.origin);
  char buf[8192];
  long n = ReadSmallFile("/proc/self/cmdline", buf, sizeof buf);
  for (long i = 0; i < n;) {
    size_t len = strnlen(buf + i, static_cast<size_t>(n - i));
    if (len) e->StringN(h::kCmdline, buf + i, len); else e->Bytes(h::kCmdline, "", 0);
    i += static_cast<long>(len) + 1;
  }
  char exe[4096];
  ssize_t el = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[el > 0 ? el : 0] = '\0';
  e->String(h::kExe, exe);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  e->String(h::kHostname, host);
  e->Varint(h::kStartWall, id.start_wall_ns);
  e->Varint(h::kStartMono, id.start_mono_ns);
  size_t m = e->BeginNested(h::kHost);
  EncodeHostFacts(e);
  e->EndNested(m);
  m = e->BeginNested(h::kConfig);
  namespace c = fields::config;
  e->Varint(c::kTraceMin, config.trace_min);
  e->Varint(c::kPinMode, static_cast<uint32_t>(config.pin));
  e->Varint(c::kPinMin, config.pin_min);
  // The budget in force (derived when PINSCOPE_PIN_BUDGET is unset).
  e->Varint(c::kPinBudget, config.pin == PinMode::kOff ? config.pin_budget : PinBudget());
  e->Varint(c::kStackDepth, config.stack_depth);
  e->Bool(c::kCupti, config.cupti);
  e->Varint(c::kFlushMs, config.flush_ms);
  e->EndNested(m);
  e->String(h::kShimVersion, PINSCOPE_VERSION);
  e->Bool(h::kHelper, IsHelperExe(exe));
  e->Varint(h::kParentPid, id.parent_pid);
  if (config.rank.labelled()) {  // a rank of a distributed job (docs/trace-format.md)
    namespace r = fields::rank;
    m = e->BeginNested(h::kRank);
    e->Varint(r::kRank, static_cast<uint32_t>(config.rank.rank));
    e->SInt(r::kLocalRank, config.rank.local_rank);
    e->SInt(r::kWorldSize, config.rank.world_size);
    e->SInt(r::kGroupRank, config.rank.group_rank);
    e->SInt(r::kLocalWorldSize, config.rank.local_world_size);
    e->EndNested(m);
  }
}

void WriteCounters() {
  Packet p(fields::packet::kCounters, MonoNs());
  namespace c = fields::counters;
  const RecorderCounts counts = Counts();
  p.e().Varint(c::kCopies, counts.copies);
  p.e().Varint(c::kAllocsRecorded, counts.allocs);
  p.e().Varint(c::kBytesWritten, counts.bytes_written);
  p.e().Varint(c::kDropped, counts.dropped);
  p.e().Varint(c::kPinnedBytes, PinnedBytes());
  StackCost stacks = GetStackCost();
  p.e().Varint(c::kStacksCaptured, stacks.captured);
  p.e().Varint(c::kStackCaptureNs, stacks.ns);
  p.e().Varint(c::kStackPythonNs, stacks.python_ns);
  const OwnCost own = GetOwnCost();
  p.e().Varint(c::kHookCalls, own.hook_calls);
  p.e().Varint(c::kHookNs, own.hook_ns);
  p.e().Varint(c::kOwnThreadsCpuNs, own.threads_cpu_ns);
  p.e().Varint(c::kPointerQueries, own.pointer_queries);
  p.e().Varint(c::kPointerQueryNs, own.pointer_query_ns);
  p.e().Varint(c::kCuptiSwitches, own.cupti_switches);
  p.e().Varint(c::kCuptiSwitchNs, own.cupti_switch_ns);
  for (int k = 1; k < kHookKinds; ++k) {
    if (own.kinds[k].calls == 0 && own.kinds[k].ns == 0) continue;
    namespace h = fields::hook_kind_cost;
    const size_t m = p.e().BeginNested(c::kHookKinds);
    p.e().Varint(h::kKind, static_cast<uint64_t>(k));
    p.e().Varint(h::kCalls, own.kinds[k].calls);
    p.e().Varint(h::kNs, own.kinds[k].ns);
    p.e().EndNested(m);
  }
  const StackCacheStats cache = GetStackCacheStats();
  p.e().Varint(c::kStackCacheHits, cache.hits);
  p.e().Varint(c::kStackCacheChecks, cache.checks);
  p.Commit();
}

void* FlusherMain(void*) {
  ++t_hook_depth;  // nothing this thread does is the program's
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  for (;;) {
    // Between ticks, each trace buffer the program's threads fill is
    // compressed and written here, not in their hooks (trace_writer.h).
    const uint64_t deadline = MonoNs() + uint64_t{GetConfig().flush_ms} * 1000000;
    while (WaitForFullTraceBuffer(deadline)) WriteFullTraceBuffer();
    NoteOwnThreadCpu(OwnThread::kFlusher);  // this tick's Counters carry it
    FlusherTick();
  }
  return nullptr;
}

// The recorder's on_open callback: the flusher, and the exit-status handler.
void OnTraceOpen() {
  if (!g_flusher_started) {
    g_flusher_started = true;
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    // 256 KiB: the thread runs cuptiActivityFlushAll and CUPTI's buffer callback.
    pthread_attr_setstacksize(&attr, 256 * 1024);
    if (pthread_create(&t, &attr, FlusherMain, nullptr) == 0) pthread_setname_np(t, "pinscope-flush");
    pthread_attr_destroy(&attr);
  }
  // Registered after libc registered the dynamic linker's finalizer (which
  // runs our destructor and FinishProcess): exit handlers run in reverse
  // order, so OnExit sees the status first.
  if (!g_on_exit_registered) {
    g_on_exit_registered = true;
    on_exit(OnExit, nullptr);
  }
}

}  // namespace

void FlusherTick() {
  PinPeriodic();  // idle kept pinned blocks, even once passive (no lock held here)
  // Paused (PauseRecording): no window begins, no sample is taken.
  if (!Recording() || !RecorderOpen()) return;
  CuptiFlushPeriodic();  // device records: a crash loses at most one period
  NvmlSamplePeriodic();  // GPU utilization samples since the last tick
  WriteThreadSample();
  WriteCounters();
  FlushTrace();
}

int PauseProcessRecording(bool pause) {
  if (!PauseRecording(pause)) return -1;
  return pause && !CuptiEndWindow() ? 1 : 0;
}

void InitProcess() { InitProcessIn(getauxval(AT_SECURE) != 0); }

void InitProcessIn(bool secure) {
  if (!RecorderUninitialized()) return;
  HookScope scope;
  if (secure) {
    // A setuid/setgid program (or one with file capabilities): its
    // environment is its caller's, and a folder made from it would be made
    // with the program's privileges. ld.so ignores the environment's
    // dangerous variables here; so does pinscope, and records nothing.
    RecorderStayPassive();
    LogOnce(&g_said_passive,
            "secure execution (a setuid, setgid or privileged program); pinscope stays passive "
            "and reads none of its variables (the program runs untraced)");
    return;
  }
  Config* config = MutableConfig();
  LoadConfig(config);
  const uint32_t pid = static_cast<uint32_t>(getpid());
  if (config->disabled) {
    RecorderStayPassive();
    return;
  }
  // The first traced process of a run names the run and its folder; the
  // environment carries both to exec'd descendants (forks share memory).
  char num[24];
  if (config->root_pid == 0) {
    config->root_pid = pid;
    FormatU64(num, sizeof num, pid);
    setenv("PINSCOPE_ROOT_PID", num, 1);
  }
  const uint32_t origin = config->root_pid == pid ? fields::kOriginRoot : fields::kOriginExec;
  if (!config->run_id[0]) {
    char host[64] = {};
    gethostname(host, sizeof host - 1);
    snprintf(config->run_id, sizeof config->run_id, "%s-%u-%llu", host, pid,
             static_cast<unsigned long long>(WallNs() / 1000000));
    setenv("PINSCOPE_RUN_ID", config->run_id, 1);
  }
  if (!config->out_dir[0] || config->out_dir[0] != '/') {
    char rel[4096];
    if (config->out_dir[0]) {
      CopyString(rel, sizeof rel, config->out_dir);
    } else {
      snprintf(rel, sizeof rel, "pinscope-%u", config->root_pid);
    }
    char cwd[4096];
    if (!getcwd(cwd, sizeof cwd)) CopyString(cwd, sizeof cwd, "/tmp");
    snprintf(config->out_dir, sizeof config->out_dir, "%s/%s", cwd, rel);
    setenv("PINSCOPE_OUT", config->out_dir, 1);
  }
  // Forked children inherit the checked fd; an exec'd image (O_CLOEXEC)
  // opens and checks the folder again.
  char why[4400];
  config->out_fd = OpenRunFolder(config->out_dir, why, sizeof why);
  if (config->out_fd < 0) {
    RecorderStayPassive();
    LogOnce(&g_said_passive, "%s; pinscope stays passive (the job runs untraced)", why);
    return;
  }
  pthread_atfork(ForkPrepare, ForkParent, ForkChild);
  StacksInit();  // loads libunwind here, not inside the first event's hook
  RecorderCallbacks callbacks;
  callbacks.encode_header = EncodeHeader;
  callbacks.on_open = OnTraceOpen;
  RecorderStart(origin, callbacks);
}

void ForkPrepare() {
  // Before the recorder takes its writer lock: pinning notes whether this
  // process used CUDA, for the child.
  PinForkPrepare();
  RecorderForkPrepare();
}

void ForkParent() { RecorderForkParent(); }

void ForkChild() {
  RecorderForkChild();
  g_flusher_started = false;
  PinForkChild();
  NvmlForkChild();
  StacksResetInChild();
  OwnCostResetInChild();
  PS_PHASE_RESET_IN_CHILD();
}

void FinishProcess(uint32_t how, int status) {
  if (!RecorderOpen() || !RecorderLive()) return;
  HookScope scope;
  if (how == fields::kExit && g_exit_status_known.load()) status = g_exit_status;
  if (how != fields::kSignal) {
    CuptiFinish();  // last device records, before the exit packet
    NvmlFinish();
    WriteThreadSample();  // each thread's CPU time and faults over its life
  }
  WriteCounters();
  RecorderFinish(how, status);
  PS_PHASE_DUMP();
}

void FinishProcessFromSignal(uint32_t how, int status) {
  if (!RecorderOpen() || !RecorderLive()) return;
  HookScope scope;
  RecorderFinishFromSignal(how, status);
}

void ResumeAfterFailedExec(const char* path, int err) {
  if (!RecorderOpen() || !RecorderLive()) return;
  HookScope scope;
  RecorderResume();
  char text[4400];
  snprintf(text, sizeof text, "exec of %s failed (%s); the process goes on and so does its trace",
           path ? path : "(null)", ErrorText(err));
  RecordNotice(fields::kWarning, "exec_failed", text);
}

}  // namespace pinscope::shim
