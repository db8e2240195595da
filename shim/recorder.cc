// Process lifecycle and event encoding; see recorder.h.
#include "recorder.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>

#include "clock.h"
#include "cupti.h"
#include "guard.h"
#include "host_facts.h"
#include "log.h"
#include "pinning.h"
#include "stacks.h"
#include "trace_writer.h"

#ifndef PINSCOPE_VERSION
#define PINSCOPE_VERSION "0.1.0"
#endif

namespace pinscope::shim {

PINSCOPE_TLS int t_hook_depth = 0;
PINSCOPE_TLS uint32_t t_tid = 0;

namespace {

enum State : int { kUninit = 0, kActive = 1, kPassive = 2 };

Config g_config;
std::atomic<int> g_state{kUninit};
std::atomic<bool> g_open{false};
std::atomic<bool> g_final{false};
std::atomic<bool> g_said_passive{false};
TraceWriter g_writer;
pthread_mutex_t g_open_mu = PTHREAD_MUTEX_INITIALIZER;
uint32_t g_pid = 0;
uint32_t g_parent_pid = 0;
uint32_t g_origin = fields::kOriginUnknown;
uint64_t g_start_wall = 0;
uint64_t g_start_mono = 0;
std::atomic<uint64_t> g_call_id{0};
std::atomic<uint64_t> g_dropped{0};
std::atomic<uint64_t> g_copies{0};
std::atomic<uint64_t> g_allocs{0};
bool g_flusher_started = false;
// The status exit() got, seen by an on_exit handler: a return from main (and
// Python's sys.exit) reaches exit() inside libc, past the exported hook.
std::atomic<bool> g_exit_status_known{false};
int g_exit_status = 0;
bool g_on_exit_registered = false;  // forked children inherit the registration

void OnExit(int status, void*) {
  g_exit_status = status;
  g_exit_status_known.store(true);
}
PINSCOPE_TLS bool t_thread_announced = false;

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

const char* ErrorText(int e) {
  const char* s = strerrordesc_np(e);
  return s ? s : "unknown error";
}

void EncodeHeader(Encoder* e) {
  namespace h = fields::header;
  e->Varint(h::kFormatVersion, 1);
  e->String(h::kRunId, g_config.run_id);
  e->Varint(h::kPid, g_pid);
  e->Varint(h::kPpid, static_cast<uint64_t>(getppid()));
  e->Varint(h::kOrigin, g_origin);
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
  e->Varint(h::kStartWall, g_start_wall);
  e->Varint(h::kStartMono, g_start_mono);
  size_t m = e->BeginNested(h::kHost);
  EncodeHostFacts(e);
  e->EndNested(m);
  m = e->BeginNested(h::kConfig);
  namespace c = fields::config;
  e->Varint(c::kTraceMin, g_config.trace_min);
  e->Varint(c::kPinMode, static_cast<uint32_t>(g_config.pin));
  e->Varint(c::kPinMin, g_config.pin_min);
  // The budget in force (derived when PINSCOPE_PIN_BUDGET is unset).
  e->Varint(c::kPinBudget, g_config.pin == PinMode::kOff ? g_config.pin_budget : PinBudget());
  e->Varint(c::kStackDepth, g_config.stack_depth);
  e->Bool(c::kCupti, g_config.cupti);
  e->Varint(c::kFlushMs, g_config.flush_ms);
  e->EndNested(m);
  e->String(h::kShimVersion, PINSCOPE_VERSION);
  e->Bool(h::kHelper, IsHelperExe(exe));
  e->Varint(h::kParentPid, g_parent_pid);
}

void WriteCounters() {
  Packet p(fields::packet::kCounters, MonoNs());
  namespace c = fields::counters;
  p.e().Varint(c::kCopies, g_copies.load(std::memory_order_relaxed));
  p.e().Varint(c::kAllocsRecorded, g_allocs.load(std::memory_order_relaxed));
  p.e().Varint(c::kBytesWritten, g_writer.bytes_written());
  p.e().Varint(c::kDropped, g_dropped.load(std::memory_order_relaxed));
  p.e().Varint(c::kPinnedBytes, PinnedBytes());
  StackCost stacks = GetStackCost();
  p.e().Varint(c::kStacksCaptured, stacks.captured);
  p.e().Varint(c::kStackCaptureNs, stacks.ns);
  p.Commit();
}

void CheckWriter() {
  if (int e = g_writer.failure()) {
    char why[512];
    snprintf(why, sizeof why, "cannot write the trace file %s: %s%s", g_writer.path(), ErrorText(e),
             e == ENOSPC ? " (disk full)" : "");
    GoPassive(e == ENOSPC ? "disk_full" : "write_failed", why);
  }
}

void* FlusherMain(void*) {
  ++t_hook_depth;  // nothing this thread does is the program's
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  for (;;) {
    uint64_t ms = g_config.flush_ms;
    timespec ts{static_cast<time_t>(ms / 1000), static_cast<long>((ms % 1000) * 1000000)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    PinPeriodic();  // idle kept pinned blocks, even once passive (no lock held here)
    if (g_state.load(std::memory_order_relaxed) != kActive || !g_open.load()) continue;
    CuptiFlushPeriodic();  // device records: a crash loses at most one period
    WriteCounters();
    g_writer.Flush();
    CheckWriter();
  }
  return nullptr;
}

void StartFlusherLocked() {
  if (g_flusher_started) return;
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

// Opens this process's file and writes its header; false if passive.
bool EnsureOpen() {
  if (g_open.load(std::memory_order_acquire)) return true;
  HookScope scope;
  pthread_mutex_lock(&g_open_mu);
  bool ok = g_open.load(std::memory_order_relaxed);
  if (!ok && g_state.load() == kActive) {
    int err = g_writer.Open(g_config.out_dir, g_pid);
    if (err) {
      pthread_mutex_unlock(&g_open_mu);
      char why[4400];
      snprintf(why, sizeof why, "cannot create a trace file in %s: %s", g_config.out_dir,
               ErrorText(err));
      GoPassive("trace_open", why);
      return false;
    }
    static uint8_t hbuf[32768];  // under g_open_mu
    Encoder e(hbuf, sizeof hbuf);
    size_t outer = e.BeginNested(fields::kTracePacket);
    e.Varint(fields::packet::kTimestamp, g_start_mono);
    e.Varint(fields::packet::kTid, CurrentTid());
    size_t m = e.BeginNested(fields::packet::kHeader);
    EncodeHeader(&e);
    e.EndNested(m);
    e.EndNested(outer);
    g_writer.Append(hbuf, e.size());
    g_open.store(true, std::memory_order_release);
    StartFlusherLocked();
    // Registered after libc registered the dynamic linker's finalizer (which
    // runs our destructor and FinishProcess): exit handlers run in reverse
    // order, so OnExit sees the status first.
    if (!g_on_exit_registered) {
      g_on_exit_registered = true;
      on_exit(OnExit, nullptr);
    }
    ok = true;
  }
  pthread_mutex_unlock(&g_open_mu);
  return ok;
}

void AnnounceThread() {
  t_thread_announced = true;
  char name[17] = {};
  prctl(PR_GET_NAME, name, 0, 0, 0);
  Packet p(fields::packet::kThread, MonoNs());
  p.e().Varint(fields::thread::kTid, CurrentTid());
  p.e().String(fields::thread::kName, name);
  p.Commit();
}

}  // namespace

// --- lifecycle ------------------------------------------------------------

void InitProcess() {
  int expected = kUninit;
  if (g_state.load() != kUninit) return;
  HookScope scope;
  LoadConfig(&g_config);
  g_pid = static_cast<uint32_t>(getpid());
  g_start_wall = WallNs();
  g_start_mono = MonoNs();
  if (g_config.disabled) {
    g_state.store(kPassive);
    return;
  }
  // The first traced process of a run names the run and its folder; the
  // environment carries both to exec'd descendants (forks share memory).
  char num[24];
  if (g_config.root_pid == 0) {
    g_config.root_pid = g_pid;
    FormatU64(num, sizeof num, g_pid);
    setenv("PINSCOPE_ROOT_PID", num, 1);
  }
  g_origin = g_config.root_pid == g_pid ? fields::kOriginRoot : fields::kOriginExec;
  if (!g_config.run_id[0]) {
    char host[64] = {};
    gethostname(host, sizeof host - 1);
    snprintf(g_config.run_id, sizeof g_config.run_id, "%s-%u-%llu", host, g_pid,
             static_cast<unsigned long long>(g_start_wall / 1000000));
    setenv("PINSCOPE_RUN_ID", g_config.run_id, 1);
  }
  if (!g_config.out_dir[0] || g_config.out_dir[0] != '/') {
    char rel[4096];
    if (g_config.out_dir[0]) {
      CopyString(rel, sizeof rel, g_config.out_dir);
    } else {
      snprintf(rel, sizeof rel, "pinscope-%u", g_config.root_pid);
    }
    char cwd[4096];
    if (!getcwd(cwd, sizeof cwd)) CopyString(cwd, sizeof cwd, "/tmp");
    snprintf(g_config.out_dir, sizeof g_config.out_dir, "%s/%s", cwd, rel);
    setenv("PINSCOPE_OUT", g_config.out_dir, 1);
  }
  if (int err = MkdirP(g_config.out_dir); err != 0 || access(g_config.out_dir, W_OK) != 0) {
    if (!err) err = errno;
    g_state.store(kPassive);
    char why[4400];
    snprintf(why, sizeof why, "the trace folder %s is not writable: %s", g_config.out_dir,
             ErrorText(err));
    LogOnce(&g_said_passive, "%s; pinscope stays passive (the job runs untraced)", why);
    return;
  }
  pthread_atfork(ForkPrepare, ForkParent, ForkChild);
  StacksInit();  // loads libunwind here, not inside the first event's hook
  g_state.compare_exchange_strong(expected, kActive);
}

bool Recording() { return g_state.load(std::memory_order_relaxed) == kActive; }
const Config& GetConfig() { return g_config; }
uint32_t ProcessId() { return g_pid; }
uint64_t NextCallId() { return g_call_id.fetch_add(1, std::memory_order_relaxed) + 1; }

void GoPassive(const char* code, const char* why) {
  if (g_state.exchange(kPassive) == kPassive) return;
  LogOnce(&g_said_passive, "%s; pinscope stays passive in process %u (the job goes on untraced)",
          why, g_pid);
  if (g_open.load()) {
    // Best effort: the notice reaches the file unless the disk is the problem.
    HookScope scope;
    static uint8_t nbuf[2048];
    Encoder e(nbuf, sizeof nbuf);
    size_t outer = e.BeginNested(fields::kTracePacket);
    e.Varint(fields::packet::kTimestamp, MonoNs());
    e.Varint(fields::packet::kTid, CurrentTid());
    size_t m = e.BeginNested(fields::packet::kNotice);
    e.Varint(fields::notice::kSeverity, fields::kError);
    e.String(fields::notice::kCode, code);
    e.String(fields::notice::kText, why);
    e.EndNested(m);
    e.EndNested(outer);
    if (e.ok()) {
      g_writer.Append(nbuf, e.size());
      g_writer.Flush();
    }
  }
}

void ForkPrepare() {
  // Before taking the writer lock: unpinning records PinEvents.
  PinForkPrepare();
  // From here until the parent/child handler, this thread records nothing:
  // an atfork handler of another library that runs after ours (and may
  // free a recorded block) must not wait for the writer lock we hold.
  ++t_hook_depth;
  pthread_mutex_lock(&g_open_mu);
  g_writer.LockForFork();
}

void ForkParent() {
  g_writer.UnlockInParent();
  pthread_mutex_unlock(&g_open_mu);
  --t_hook_depth;
}

void ForkChild() {
  --t_hook_depth;
  g_writer.ResetInChild();
  pthread_mutex_init(&g_open_mu, nullptr);
  g_open.store(false);
  g_final.store(false);
  g_flusher_started = false;
  g_parent_pid = g_pid;
  g_pid = static_cast<uint32_t>(getpid());
  g_origin = fields::kOriginFork;
  g_start_wall = WallNs();
  g_start_mono = MonoNs();
  g_call_id.store(0);
  g_dropped.store(0);
  g_copies.store(0);
  g_allocs.store(0);
  t_tid = 0;
  t_thread_announced = false;
  PinForkChild();
  StacksResetInChild();
}

void FinishProcess(uint32_t how, int status) {
  if (!g_open.load() || g_state.load() != kActive) return;
  HookScope scope;
  if (how == fields::kExit && g_exit_status_known.load()) status = g_exit_status;
  if (how != fields::kSignal) CuptiFinish();  // last device records, before the exit packet
  WriteCounters();
  Packet p(fields::packet::kExit, MonoNs());
  p.e().Varint(fields::exit::kHow, how);
  p.e().Int32(fields::exit::kStatus, status);
  p.e().Varint(fields::exit::kDropped, g_dropped.load());
  p.Commit();
  g_final.store(true);
  g_writer.Flush();
  CheckWriter();
  if (how == fields::kExec || how == fields::kUnderscoreExit) g_writer.CloseFile();
}

void FlushTrace() {
  if (!g_open.load()) return;
  g_writer.Flush();
  CheckWriter();
}

bool AppendFromSignal(const uint8_t* framed, size_t n) {
  if (g_state.load(std::memory_order_relaxed) != kActive ||
      !g_open.load(std::memory_order_acquire))
    return false;
  return g_writer.TryAppendAndFlush(framed, n);
}

// --- packets --------------------------------------------------------------

Packet::Packet(uint32_t data_field, uint64_t timestamp_ns) : enc_(buf_, kCapacity) {
  outer_mark_ = enc_.BeginNested(fields::kTracePacket);
  enc_.Varint(fields::packet::kTimestamp, timestamp_ns);
  enc_.Varint(fields::packet::kTid, CurrentTid());
  data_mark_ = enc_.BeginNested(data_field);
}

bool Packet::Commit() {
  enc_.EndNested(data_mark_);
  enc_.EndNested(outer_mark_);
  if (!enc_.ok()) {
    g_dropped.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  if (g_state.load(std::memory_order_relaxed) != kActive || !EnsureOpen()) return false;
  if (!t_thread_announced) AnnounceThread();
  if (!g_writer.Append(buf_, enc_.size())) {
    CheckWriter();
    return false;
  }
  if (g_final.load(std::memory_order_relaxed)) g_writer.Flush();
  return true;
}

// --- events ---------------------------------------------------------------

void RecordCopy(const CopyRecord& r) {
  if (!Recording()) return;
  g_copies.fetch_add(1, std::memory_order_relaxed);
  namespace c = fields::copy;
  Packet p(fields::packet::kCopy, r.t_enter);
  Encoder& e = p.e();
  e.Varint(c::kApi, r.api);
  e.Bool(c::kPerThread, r.per_thread);
  e.Varint(c::kDirection, r.direction);
  e.Int32(c::kRequestedKind, r.requested_kind);
  e.Varint(c::kBytes, r.bytes);
  e.Varint(c::kSrcKind, r.src_kind);
  e.Varint(c::kDstKind, r.dst_kind);
  e.Varint(c::kSrcAddress, r.src_address);
  e.Varint(c::kDstAddress, r.dst_address);
  e.SInt(c::kSrcDevice, r.src_device);
  e.SInt(c::kDstDevice, r.dst_device);
  e.Varint(c::kStream, r.stream);
  e.Varint(c::kEnd, r.t_exit);
  e.Int32(c::kResult, r.result);
  e.Varint(c::kCallId, r.call_id);
  e.Varint(c::kStackId, r.stack_id);
  e.Varint(c::kPin, r.pin);
  e.Varint(c::kBatchIndex, r.batch_index);
  e.Varint(c::kHeight, r.height);
  p.Commit();
}

void RecordSync(const SyncRecord& r) {
  if (!Recording()) return;
  namespace s = fields::sync;
  Packet p(fields::packet::kSync, r.t_enter);
  p.e().Varint(s::kApi, r.api);
  p.e().Varint(s::kStream, r.stream);
  p.e().Varint(s::kEnd, r.t_exit);
  p.e().Int32(s::kResult, r.result);
  p.e().Varint(s::kStackId, r.stack_id);
  p.e().Varint(s::kCallId, r.call_id);
  p.Commit();
}

void RecordAlloc(uint32_t api, uint64_t address, uint64_t size, uint64_t alignment,
                 uint64_t old_address, uint64_t stack_id, uint64_t t) {
  if (!Recording()) return;
  g_allocs.fetch_add(1, std::memory_order_relaxed);
  namespace a = fields::alloc;
  Packet p(fields::packet::kAlloc, t);
  p.e().Varint(a::kApi, api);
  p.e().Varint(a::kAddress, address);
  p.e().Varint(a::kSize, size);
  p.e().Varint(a::kAlignment, alignment);
  p.e().Varint(a::kOldAddress, old_address);
  p.e().Varint(a::kStackId, stack_id);
  p.Commit();
}

void RecordFree(uint64_t address, bool by_realloc, uint64_t t) {
  if (!Recording()) return;
  Packet p(fields::packet::kFree, t);
  p.e().Varint(fields::free_::kAddress, address);
  p.e().Bool(fields::free_::kByRealloc, by_realloc);
  p.Commit();
}

void RecordShm(const ShmRecord& r) {
  if (!Recording()) return;
  namespace s = fields::shm;
  Packet p(fields::packet::kShm, r.t_enter);
  Encoder& e = p.e();
  e.Varint(s::kOp, r.op);
  e.String(s::kName, r.name);
  e.Int32(s::kFd, r.fd);
  e.Varint(s::kSize, r.size);
  e.Varint(s::kOffset, r.offset);
  e.Varint(s::kAddress, r.address);
  e.Int32(s::kFlags, r.flags);
  e.Int32(s::kProt, r.prot);
  e.Int32(s::kError, r.error);
  e.Varint(s::kDevice, r.device);
  e.Varint(s::kInode, r.inode);
  e.Bool(s::kDriverInternal, r.driver_internal);
  e.Varint(s::kStackId, r.stack_id);
  e.Varint(s::kEnd, r.t_exit);
  p.Commit();
}

void RecordPin(const PinRecord& r) {
  if (!Recording()) return;
  namespace s = fields::pin;
  Packet p(fields::packet::kPin, r.t);
  p.e().Varint(s::kOp, r.op);
  p.e().Varint(s::kAddress, r.address);
  p.e().Varint(s::kSize, r.size);
  p.e().Varint(s::kDuration, r.duration_ns);
  p.e().Int32(s::kResult, r.result);
  p.e().Varint(s::kPinnedBytes, r.pinned_bytes);
  p.e().String(s::kReason, r.reason);
  p.Commit();
}

void RecordNotice(uint32_t severity, const char* code, const char* text) {
  if (!Recording()) return;
  Packet p(fields::packet::kNotice, MonoNs());
  p.e().Varint(fields::notice::kSeverity, severity);
  p.e().String(fields::notice::kCode, code);
  p.e().String(fields::notice::kText, text);
  p.Commit();
}

}  // namespace pinscope::shim
