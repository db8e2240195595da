// The recording layer: the trace file, packets and events; see recorder.h.
#include "shim/record/recorder.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>

#include "shim/base/clock.h"
#include "shim/base/guard.h"
#include "shim/base/log.h"
#include "shim/record/trace_writer.h"

namespace pinscope::shim {

namespace {

// kPaused: started, and events are not recorded for now (PauseRecording);
// the file, the exit packet and what the flusher and CUPTI's buffers write
// go on as while active.
enum State : int { kUninit = 0, kActive = 1, kPassive = 2, kPaused = 3 };

std::atomic<int> g_state{kUninit};
std::atomic<bool> g_open{false};
std::atomic<bool> g_final{false};
std::atomic<bool> g_said_passive{false};
TraceWriter g_writer;
pthread_mutex_t g_open_mu = PTHREAD_MUTEX_INITIALIZER;
ProcessIdentity g_id;
RecorderCallbacks g_callbacks;
std::atomic<uint64_t> g_call_id{0};
std::atomic<uint64_t> g_dropped{0};
std::atomic<uint64_t> g_copies{0};
std::atomic<uint64_t> g_allocs{0};
PINSCOPE_TLS bool t_thread_announced = false;

bool Live(int state) { return state == kActive || state == kPaused; }

const char* ErrorText(int e) {
  const char* s = strerrordesc_np(e);
  return s ? s : "unknown error";
}

void CheckWriter() {
  if (int e = g_writer.failure()) {
    char why[512];
    snprintf(why, sizeof why, "cannot write the trace file %s: %s%s", g_writer.path(), ErrorText(e),
             e == ENOSPC ? " (disk full)" : "");
    GoPassive(e == ENOSPC ? "disk_full" : "write_failed", why);
  }
}

// Opens this process's file and writes its header; false if passive.
bool EnsureOpen() {
  if (g_open.load(std::memory_order_acquire)) return true;
  HookScope scope;
  pthread_mutex_lock(&g_open_mu);
  bool ok = g_open.load(std::memory_order_relaxed);
  if (!ok && Live(g_state.load())) {
    int err =
        g_writer.Open(GetConfig().out_fd, GetConfig().out_dir, g_id.pid, GetConfig().compress);
    if (err) {
      pthread_mutex_unlock(&g_open_mu);
      char why[4400];
      snprintf(why, sizeof why, "cannot create a trace file in %s: %s", GetConfig().out_dir,
               ErrorText(err));
      GoPassive("trace_open", why);
      return false;
    }
    static uint8_t hbuf[32768];  // under g_open_mu
    Encoder e(hbuf, sizeof hbuf);
    size_t outer = e.BeginNested(fields::kTracePacket);
    e.Varint(fields::packet::kTimestamp, g_id.start_mono_ns);
    e.Varint(fields::packet::kTid, CurrentTid());
    size_t m = e.BeginNested(fields::packet::kHeader);
    if (g_callbacks.encode_header) g_callbacks.encode_header(&e);
    e.EndNested(m);
    e.EndNested(outer);
    g_writer.Append(hbuf, e.size());
    // The header on disk at once (one write a process): a process that
    // ends in a signal handler before its first flush, holding the
    // buffer's lock, can still leave a trace of its header and its exit
    // (RecorderFinishFromSignal) instead of an empty file.
    g_writer.Flush();
    g_open.store(true, std::memory_order_release);
    if (g_callbacks.on_open) g_callbacks.on_open();
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

void RecorderStart(uint32_t origin, const RecorderCallbacks& callbacks) {
  g_id.pid = static_cast<uint32_t>(getpid());
  g_id.origin = origin;
  g_id.start_wall_ns = WallNs();
  g_id.start_mono_ns = MonoNs();
  g_callbacks = callbacks;
  int expected = kUninit;
  g_state.compare_exchange_strong(expected, kActive);
}

void RecorderStayPassive() {
  g_id.pid = static_cast<uint32_t>(getpid());
  g_state.store(kPassive);
}

bool Recording() { return g_state.load(std::memory_order_relaxed) == kActive; }
bool RecorderUninitialized() { return g_state.load() == kUninit; }
bool RecorderLive() { return Live(g_state.load(std::memory_order_relaxed)); }

bool PauseRecording(bool pause) {
  int from = pause ? kActive : kPaused;
  const int to = pause ? kPaused : kActive;
  // From `from` only: a passive recorder stays passive.
  return g_state.compare_exchange_strong(from, to) || from == to;
}
bool RecorderOpen() { return g_open.load(std::memory_order_acquire); }
const ProcessIdentity& Identity() { return g_id; }
uint32_t ProcessId() { return g_id.pid; }
uint64_t NextCallId() { return g_call_id.fetch_add(1, std::memory_order_relaxed) + 1; }

RecorderCounts Counts() {
  RecorderCounts c;
  c.copies = g_copies.load(std::memory_order_relaxed);
  c.allocs = g_allocs.load(std::memory_order_relaxed);
  c.dropped = g_dropped.load(std::memory_order_relaxed);
  c.bytes_written = g_writer.bytes_written();
  return c;
}

void GoPassive(const char* code, const char* why) {
  if (g_state.exchange(kPassive) == kPassive) return;
  LogOnce(&g_said_passive, "%s; pinscope stays passive in process %u (the job goes on untraced)",
          why, g_id.pid);
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

void RecorderForkPrepare() {
  // From here until the parent/child handler, this thread records nothing:
  // an atfork handler of another library that runs after ours (and may
  // free a recorded block) must not wait for the writer lock we hold.
  ++t_hook_depth;
  pthread_mutex_lock(&g_open_mu);
  g_writer.LockForFork();
}

void RecorderForkParent() {
  g_writer.UnlockInParent();
  pthread_mutex_unlock(&g_open_mu);
  --t_hook_depth;
}

void RecorderForkChild() {
  --t_hook_depth;
  g_writer.ResetInChild();
  pthread_mutex_init(&g_open_mu, nullptr);
  g_open.store(false);
  g_final.store(false);
  g_id.parent_pid = g_id.pid;
  g_id.pid = static_cast<uint32_t>(getpid());
  g_id.origin = fields::kOriginFork;
  g_id.start_wall_ns = WallNs();
  g_id.start_mono_ns = MonoNs();
  g_call_id.store(0);
  g_dropped.store(0);
  g_copies.store(0);
  g_allocs.store(0);
  t_tid = 0;
  t_thread_announced = false;
}

void RecorderFinish(uint32_t how, int status) {
  if (!g_open.load() || !Live(g_state.load())) return;
  HookScope scope;
  Packet p(fields::packet::kExit, MonoNs());
  p.e().Varint(fields::exit::kHow, how);
  p.e().Int32(fields::exit::kStatus, status);
  p.e().Varint(fields::exit::kDropped, g_dropped.load());
  p.Commit();
  g_final.store(true);
  g_writer.Flush();
  CheckWriter();
  // Before an exec the file stays open: O_CLOEXEC closes it when the exec
  // succeeds, and a failed exec goes on writing to it (RecorderResume).
  if (how == fields::kUnderscoreExit) g_writer.CloseFile();
}

void RecorderResume() {
  if (!g_open.load() || !Live(g_state.load())) return;
  g_final.store(false);
}

void FlushTrace() {
  if (!g_open.load()) return;
  g_writer.Flush();
  CheckWriter();
}

bool WaitForFullTraceBuffer(uint64_t deadline_mono_ns) {
  return g_writer.WaitForFullBuffer(deadline_mono_ns);
}

void WriteFullTraceBuffer() {
  g_writer.WriteFullBuffer();
  CheckWriter();
}

uint64_t TraceInlineWrites() { return g_writer.inline_writes(); }

bool AppendFromSignal(const uint8_t* framed, size_t n) {
  // A lock another thread holds is released soon (that thread runs): up to
  // 250 tries 2 ms apart. One this thread holds never is (kNever).
  for (int attempt = 0; attempt < 250; ++attempt) {
    if (!Live(g_state.load(std::memory_order_relaxed)) || !g_open.load(std::memory_order_acquire))
      return false;
    switch (g_writer.TryWriteFromSignal(framed, n)) {
      case TraceWriter::SignalWrite::kWritten:
        return true;
      case TraceWriter::SignalWrite::kNever:
        return false;
      case TraceWriter::SignalWrite::kBusy:
        break;
    }
    timespec ts{0, 2 * 1000 * 1000};
    nanosleep(&ts, nullptr);
  }
  return false;
}

bool RecorderFinishFromSignal(uint32_t how, int status) {
  uint8_t buf[128];
  Encoder e(buf, sizeof buf);
  const size_t outer = e.BeginNested(fields::kTracePacket);
  e.Varint(fields::packet::kTimestamp, MonoNs());
  e.Varint(fields::packet::kTid, CurrentTid());
  const size_t d = e.BeginNested(fields::packet::kExit);
  e.Varint(fields::exit::kHow, how);
  e.Int32(fields::exit::kStatus, status);
  e.Varint(fields::exit::kDropped, g_dropped.load(std::memory_order_relaxed));
  e.EndNested(d);
  e.EndNested(outer);
  return e.ok() && AppendFromSignal(buf, e.size());
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
  if (!Live(g_state.load(std::memory_order_relaxed)) || !EnsureOpen()) return false;
  if (!t_thread_announced) AnnounceThread();
  if (!g_writer.Append(buf_, enc_.size())) {
    CheckWriter();
    return false;
  }
  if (g_final.load(std::memory_order_relaxed)) g_writer.Flush();
  return true;
}

// --- events ---------------------------------------------------------------

void RecordCopy(const CopyCall& r) {
  if (!Recording()) return;
  g_copies.fetch_add(1, std::memory_order_relaxed);
  namespace c = fields::copy;
  Packet p(fields::packet::kCopy, r.t_enter);
  Encoder& e = p.e();
  // Fields 1-19 in their order, through one loop (Encoder::VarintRun).
  static_assert(c::kApi == 1 && c::kPerThread == 2 && c::kDirection == 3 &&
                c::kRequestedKind == 4 && c::kBytes == 5 && c::kSrcKind == 6 && c::kDstKind == 7 &&
                c::kSrcAddress == 8 && c::kDstAddress == 9 && c::kSrcDevice == 10 &&
                c::kDstDevice == 11 && c::kStream == 12 && c::kEnd == 13 && c::kResult == 14 &&
                c::kCallId == 15 && c::kStackId == 16 && c::kPin == 17 && c::kBatchIndex == 18 &&
                c::kHeight == 19);
  const uint64_t values[] = {r.api,
                             r.per_thread ? 1u : 0u,
                             r.direction,
                             Encoder::Int32Value(r.requested_kind),
                             r.bytes,
                             r.src_kind,
                             r.dst_kind,
                             r.src_address,
                             r.dst_address,
                             Encoder::ZigZag(r.src_device),
                             Encoder::ZigZag(r.dst_device),
                             r.stream,
                             r.t_exit,
                             Encoder::Int32Value(r.result),
                             r.call_id,
                             r.stack_id,
                             r.pin,
                             r.batch_index,
                             r.height};
  e.VarintRun(c::kApi, values, sizeof values / sizeof values[0]);
  EncodeUsage(e, c::kUsageEnter, r.usage_enter);
  EncodeUsage(e, c::kUsageExit, r.usage_exit);
  p.Commit();
}

void RecordSync(const SyncCall& r) {
  if (!Recording()) return;
  namespace s = fields::sync;
  Packet p(fields::packet::kSync, r.t_enter);
  static_assert(s::kApi == 1 && s::kStream == 2 && s::kEnd == 3 && s::kResult == 4 &&
                s::kStackId == 5 && s::kCallId == 6);
  const uint64_t values[] = {r.api,  r.stream,   r.t_exit, Encoder::Int32Value(r.result),
                             r.stack_id, r.call_id};
  p.e().VarintRun(s::kApi, values, sizeof values / sizeof values[0]);
  EncodeUsage(p.e(), s::kUsageEnter, r.usage_enter);
  EncodeUsage(p.e(), s::kUsageExit, r.usage_exit);
  p.Commit();
}

void RecordAlloc(uint32_t api, uint64_t address, uint64_t size, uint64_t alignment,
                 uint64_t old_address, uint64_t stack_id, uint64_t t, uint64_t duration_ns) {
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
  if (duration_ns) p.e().Varint(a::kDurationNs, duration_ns);
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
  e.Bool(s::kPool, r.pool);
  e.Varint(s::kStackId, r.stack_id);
  e.Varint(s::kEnd, r.t_exit);
  // A worker's CPU time per batch (consecutive creations). Not on the maps
  // and unmaps: two system calls each, on the thread that receives every
  // batch, which nothing read (issue 16; before the twenty-fifth session).
  if (r.op == fields::kShmCreate) EncodeUsage(e, s::kUsage, ThreadUsageNow());
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

void EncodeUsage(Encoder& e, uint32_t field, const Usage& u) {
  namespace t = fields::usage;
  static_assert(t::kUserNs == 1 && t::kSysNs == 2 && t::kMinorFaults == 3 &&
                t::kMajorFaults == 4 && t::kCpuNs == 5);
  size_t m = e.BeginNested(field);
  const uint64_t values[] = {u.user_ns, u.sys_ns, u.minor_faults, u.major_faults, u.cpu_ns};
  e.VarintRun(t::kUserNs, values, sizeof values / sizeof values[0]);
  e.EndNested(m);
}

void RecordLoader(const LoaderRecord& r) {
  if (!Recording()) return;
  namespace l = fields::loader;
  Packet p(fields::packet::kLoader, r.t_begin);
  Encoder& e = p.e();
  e.Varint(l::kKind, r.kind);
  e.Varint(l::kLoaderId, r.loader_id);
  e.Varint(l::kEnd, r.t_end);
  e.Varint(l::kIndex, r.index);
  if (r.has_usage) {
    EncodeUsage(e, l::kUsageBegin, r.usage_begin);
    EncodeUsage(e, l::kUsageEnd, r.usage_end);
  }
  e.Int32(l::kNumWorkers, r.num_workers);
  e.Bool(l::kPinMemory, r.pin_memory);
  e.Int32(l::kPrefetchFactor, r.prefetch_factor);
  e.Bool(l::kPersistentWorkers, r.persistent_workers);
  e.Int32(l::kBatchSize, r.batch_size);
  e.Varint(l::kDatasetLength, r.dataset_length);
  e.Bool(l::kIterable, r.iterable);
  e.String(l::kSite, r.site);
  e.String(l::kUserSite, r.user_site);
  e.String(l::kFramework, r.framework);
  e.SInt(l::kWorkerId, r.worker_id);
  e.Varint(l::kBatchSamples, r.batch_samples);
  p.Commit();
}

}  // namespace pinscope::shim
