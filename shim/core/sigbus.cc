// SIGBUS diagnosis for shared memory; see sigbus.h. Everything the handler
// does is async-signal-safe: the registry's seqlocked mapping slots, the
// job table, statfs, write(2), kill(pid, 0), sigaction, and the recorder's
// try-lock append (skipped when another thread holds the writer's lock).
#include "shim/core/sigbus.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "shim/base/clock.h"
#include "shim/base/guard.h"
#include "shim/core/shm_core.h"
#include "shim/memory/block_registry.h"
#include "shim/record/recorder.h"
#include "shim/record/trace_fields.h"
#include "shim/record/wire.h"

namespace pinscope::shim {
namespace {

namespace f = fields;

struct sigaction g_prev;                    // the action we replaced
std::atomic<uint32_t> g_installed_pid{0};   // process that installed us
std::atomic<uint32_t> g_installing_pid{0};  // process installing now
std::atomic<bool> g_said{false};            // one diagnosis per process (trace)

bool IsOurs(const struct sigaction& sa) {
  return (sa.sa_flags & SA_SIGINFO) && sa.sa_sigaction == SigbusHandler;
}

void WriteAll(const char* s, size_t n) {
  while (n > 0) {
    ssize_t w = write(2, s, n);
    if (w <= 0) {
      if (w < 0 && errno == EINTR) continue;
      return;
    }
    s += w;
    n -= static_cast<size_t>(w);
  }
}

size_t Diagnose(uint64_t address, const ShmMapping& m, char* buf, size_t cap) {
  shm::ShmFailure fl;
  fl.fault_address = address;
  fl.segment = m.name;
  fl.segment_bytes = m.size;
  fl.on_dev_shm = !(m.flags & kFlagMemfd);
  shm::JobUsage job = shm::Job().Usage();
  if (job.segments == 0) {
    // No job table (it could not be mapped): this process's mappings.
    Registry().SumMappingsFromSignal(&job.segments, &job.bytes);
  }
  return shm::FormatShmDiagnosis(buf, cap, fl, shm::ReadShmSpace(), job);
}

void RecordSigbus(uint64_t address, const ShmMapping& m, const char* text, size_t text_len) {
  uint8_t buf[2048];
  Encoder e(buf, sizeof buf);
  uint64_t now = MonoNs();
  size_t outer = e.BeginNested(f::kTracePacket);
  e.Varint(f::packet::kTimestamp, now);
  e.Varint(f::packet::kTid, CurrentTid());
  size_t d = e.BeginNested(f::packet::kShm);
  e.Varint(f::shm::kOp, f::kShmSigbus);
  e.String(f::shm::kName, m.name);
  e.Varint(f::shm::kSize, m.size);
  e.Varint(f::shm::kOffset, m.offset + (address - m.address));
  e.Varint(f::shm::kAddress, address);
  e.Varint(f::shm::kDevice, m.device);
  e.Varint(f::shm::kInode, m.inode);
  e.Bool(f::shm::kDriverInternal, (m.flags & kFlagDriverInternal) != 0);
  e.Varint(f::shm::kEnd, now);
  e.EndNested(d);
  e.EndNested(outer);
  outer = e.BeginNested(f::kTracePacket);
  e.Varint(f::packet::kTimestamp, now);
  e.Varint(f::packet::kTid, CurrentTid());
  d = e.BeginNested(f::packet::kNotice);
  e.Varint(f::notice::kSeverity, f::kError);
  e.String(f::notice::kCode, "sigbus_shm");
  // The stderr line without "pinscope: " and the newline.
  const char* body = text;
  size_t len = text_len;
  if (len >= 10 && !strncmp(body, "pinscope: ", 10)) {
    body += 10;
    len -= 10;
  }
  if (len && body[len - 1] == '\n') --len;
  e.StringN(f::notice::kText, body, len);
  e.EndNested(d);
  e.EndNested(outer);
  if (e.ok()) AppendFromSignal(buf, e.size());
}

// Lets the signal take the course it had without pinscope.
void Chain(int sig, siginfo_t* info, void* ctx) {
  struct sigaction prev = g_prev;
  bool has_handler = (prev.sa_flags & SA_SIGINFO)
                         ? prev.sa_sigaction != nullptr
                         : (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN);
  if (!has_handler) {
    // Put the old disposition back. A fault re-executes the instruction on
    // return and takes the default action; a SIGBUS sent with kill() is
    // sent again (it stays blocked until we return).
    sigaction(sig, &prev, nullptr);
    if (info == nullptr || info->si_code <= 0) raise(sig);
    return;
  }
  if (prev.sa_flags & SA_RESETHAND) {
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigaction(sig, &dfl, nullptr);
  }
  if (prev.sa_flags & SA_SIGINFO) {
    prev.sa_sigaction(sig, info, ctx);
  } else {
    prev.sa_handler(sig);
  }
}

}  // namespace

void SigbusHandler(int sig, siginfo_t* info, void* ctx) {
  int saved_errno = errno;
  ++t_hook_depth;  // anything the chained handler allocates is not the program's
  uint64_t address = info ? reinterpret_cast<uintptr_t>(info->si_addr) : 0;
  ShmMapping m;
  // Only a fault (si_code > 0) has a meaningful si_addr.
  bool ours = info && info->si_code > 0 && Registry().FindMappingContainingFromSignal(address, &m);
  if (ours && !g_said.exchange(true)) {
    char text[768];
    size_t n = Diagnose(address, m, text, sizeof text);
    // Once per job on stderr (every worker may hit it); in every trace.
    if (shm::Job().FirstDiagnosis()) WriteAll(text, n);
    RecordSigbus(address, m, text, n);  // flushed with it, before anything can kill us
  } else {
    ours = false;
  }
  Chain(sig, info, ctx);
  if (ours) {
    // Back from the chain with the default action in place: the process
    // dies when we return (re-fault or the pending raise), so say how.
    struct sigaction now;
    if (sigaction(sig, nullptr, &now) == 0 && !(now.sa_flags & SA_SIGINFO) &&
        (now.sa_handler == SIG_DFL || now.sa_handler == SIG_IGN))
      RecorderFinishFromSignal(f::kSignal, sig);
  }
  --t_hook_depth;
  errno = saved_errno;
}

void EnsureSigbusHandler() {
  uint32_t pid = ProcessId();
  if (g_installed_pid.load(std::memory_order_acquire) == pid) return;
  // One installer per process; a value left by a parent that forked in the
  // middle of installing is another pid, so the child proceeds.
  uint32_t busy = g_installing_pid.load();
  if (busy == pid || !g_installing_pid.compare_exchange_strong(busy, pid)) return;
  struct sigaction cur;
  if (sigaction(SIGBUS, nullptr, &cur) == 0) {
    if (!IsOurs(cur)) {
      // A forked child whose code (torch's worker loop) replaced the handler
      // it inherited, or a first install: chain to whatever is there now.
      g_prev = cur;
      struct sigaction sa;
      memset(&sa, 0, sizeof sa);
      sa.sa_sigaction = SigbusHandler;
      sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
      sigemptyset(&sa.sa_mask);
      struct sigaction old;
      if (sigaction(SIGBUS, &sa, &old) == 0 && !IsOurs(old)) g_prev = old;
    }
    g_installed_pid.store(pid, std::memory_order_release);
  }
  g_installing_pid.store(0);
}

size_t FormatSigbusDiagnosis(uint64_t address, char* buf, size_t cap) {
  ShmMapping m;
  if (!Registry().FindMappingContainingFromSignal(address, &m)) return 0;
  return Diagnose(address, m, buf, cap);
}

}  // namespace pinscope::shim
