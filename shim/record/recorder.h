// The recording layer: one trace file per process, opened lazily on the
// first event with a header the process layer encodes (a callback handed in
// at start, as heaptrack_init takes its callbacks), and the event API that
// the cores call with plain arguments. It knows nothing of pinning, CUPTI or
// stacks: those layers sit above it (shim/process/ wires them together).
// Tests drive it directly, without LD_PRELOAD (tests/shim/record).
//
// Contract for every Record* function: thread-safe, does not allocate
// through malloc, does not use stdio, may be called with the hook guard set;
// a no-op while the recorder is passive.
#pragma once

#include <cstddef>
#include <cstdint>

#include "shim/base/config.h"
#include "shim/base/usage.h"
#include "shim/record/trace_fields.h"
#include "shim/record/wire.h"

namespace pinscope::shim {

// Who this process is in the run, as the header and the fork logic need it.
struct ProcessIdentity {
  uint32_t pid = 0;
  uint32_t parent_pid = 0;  // the process whose fork made this one, else 0
  uint32_t origin = fields::kOriginUnknown;
  uint64_t start_wall_ns = 0;
  uint64_t start_mono_ns = 0;
};

// What the layers above hand the recorder at start. Both run with the
// recorder's open lock held and the guard set; neither may record events.
struct RecorderCallbacks {
  // Writes the ProcessHeader fields (proto ProcessHeader) into `e`.
  void (*encode_header)(Encoder* e) = nullptr;
  // The file was just opened (the process layer starts its flusher here).
  void (*on_open)() = nullptr;
};

// Starts recording for this process (the configuration is GetConfig()).
void RecorderStart(uint32_t origin, const RecorderCallbacks& callbacks);
// Never records in this process (PINSCOPE_DISABLE, unwritable folder).
void RecorderStayPassive();
// True while events are being recorded (cheap: one relaxed load).
bool Recording();
// Started and not passive: recording, or paused. The process's file, its
// Counters and exit packets and the device records already asked for are
// written while paused.
bool RecorderLive();
// Stops recording events for now (pause), or starts again: every hook
// passes through as when passive, and nothing else changes. For measuring
// what recording costs inside one process (tools/bench/turns.py's paired
// sides, through pinscope_recording_pause). True when the recorder is now
// as asked; false when it is not started or passive. A child forked while
// paused starts paused.
bool PauseRecording(bool pause);
// True while the recorder has not yet been started or made passive.
bool RecorderUninitialized();
// The trace file of this process is open (its first event was recorded).
bool RecorderOpen();
const ProcessIdentity& Identity();
uint32_t ProcessId();

// Fork: prepare locks the writer (no event is recorded by the forking
// thread until parent/child), the child forgets the parent's file and
// starts its own on its first event, as ORIGIN_FORK.
void RecorderForkPrepare();
void RecorderForkParent();
void RecorderForkChild();

// Writes ProcessExit and flushes. `how` is a fields::ExitHow. After
// kUnderscoreExit the file is closed; after kExec it stays open (O_CLOEXEC)
// for RecorderResume. No-op unless recording with the file open.
void RecorderFinish(uint32_t how, int status);
// An exec failed and the process goes on: recording resumes in the same
// file (the ProcessExit that the exec wrote is followed by the process's
// later events and its real ProcessExit, which the reader takes as final).
void RecorderResume();
// Flushes buffered packets now (periodic flusher, before exec) and goes
// passive if the writer failed (disk full).
void FlushTrace();
// The flusher thread, between its periodic ticks: waits until the program's
// threads filled a trace buffer (true) or the deadline (CLOCK_MONOTONIC)
// passes, and compresses and writes that buffer off the program's threads.
bool WaitForFullTraceBuffer(uint64_t deadline_mono_ns);
void WriteFullTraceBuffer();
// Buffers a program's thread had to write itself (the flusher a whole
// buffer behind; trace_writer.h): 0 in a healthy run.
uint64_t TraceInlineWrites();
// Async-signal-safe (the SIGBUS diagnosis, an _exit from a signal handler):
// writes already framed packets out through TraceWriter::TryWriteFromSignal
// (try-locks; alone as their own frame where this thread was interrupted
// inside an append), only if the trace file is open; never opens it.
// Retries for at most 0.5 s while another thread holds a lock; false when
// the packets could not be written.
bool AppendFromSignal(const uint8_t* framed, size_t n);
// RecorderFinish for a context that must not block: a signal handler (the
// SIGBUS diagnosis; a program's handler that calls _exit, as PyTorch's
// DataLoader workers' SIGTERM handler does), where the interrupted frame
// may hold the writer's lock. Only the ProcessExit packet, through
// AppendFromSignal; false when it could not be written (the reader then
// sees a trace without its end).
bool RecorderFinishFromSignal(uint32_t how, int status);

// Goes passive for the rest of the process, saying why once on stderr and
// (if the file is open) in the trace.
void GoPassive(const char* code, const char* why);

// The recorder's own counts, for the Counters packet (process layer).
struct RecorderCounts {
  uint64_t copies = 0, allocs = 0, dropped = 0, bytes_written = 0;
};
RecorderCounts Counts();

// One packet under construction, in a stack buffer. Usage:
//   Packet p(fields::packet::kCopy, t_enter);
//   p.e().Varint(...); ...
//   p.Commit();
class Packet {
 public:
  static constexpr size_t kCapacity = 4096;
  Packet(uint32_t data_field, uint64_t timestamp_ns);
  Encoder& e() { return enc_; }
  // Frames and appends the packet; opens the trace file on first use.
  // Returns false if it was dropped.
  bool Commit();

 private:
  uint8_t buf_[kCapacity];
  Encoder enc_;
  size_t outer_mark_;
  size_t data_mark_;
};

// --- events -------------------------------------------------------------

// One copy call as the trace records it (CopyEvent). Filled by the copy path
// (shim/core/copy_path.h); pinning sets `pin` and the host side's kind.
struct CopyCall {
  uint32_t api = 0;  // fields::CopyApi
  bool per_thread = false;
  uint32_t direction = 0;  // fields::Direction
  int32_t requested_kind = 0;
  uint64_t bytes = 0;
  uint32_t src_kind = 0, dst_kind = 0;  // fields::MemKind
  uint64_t src_address = 0, dst_address = 0;
  int32_t src_device = -1, dst_device = -1;
  uint64_t stream = 0;
  uint64_t t_enter = 0, t_exit = 0;
  int32_t result = 0;
  uint64_t call_id = 0;
  uint64_t stack_id = 0;
  uint32_t pin = 0;  // fields::PinOutcome
  uint32_t batch_index = 0;
  uint64_t height = 0;
  Usage usage_enter, usage_exit;  // the calling thread's, at t_enter / t_exit
};
void RecordCopy(const CopyCall& r);

struct SyncCall {
  uint32_t api = 0;  // fields::SyncApi
  uint64_t stream = 0;
  uint64_t t_enter = 0, t_exit = 0;
  int32_t result = 0;
  uint64_t stack_id = 0;
  uint64_t call_id = 0;
  Usage usage_enter, usage_exit;
};
void RecordSync(const SyncCall& r);

// duration_ns: cudaHostAlloc's wall time (0: not timed, the malloc family).
void RecordAlloc(uint32_t api, uint64_t address, uint64_t size, uint64_t alignment,
                 uint64_t old_address, uint64_t stack_id, uint64_t t, uint64_t duration_ns = 0);
void RecordFree(uint64_t address, bool by_realloc, uint64_t t);

struct ShmRecord {
  uint32_t op = 0;  // fields::ShmOp
  const char* name = nullptr;
  int32_t fd = -1;
  uint64_t size = 0, offset = 0, address = 0;
  int32_t flags = 0, prot = 0, error = 0;
  uint64_t device = 0, inode = 0;
  bool driver_internal = false;
  bool pool = false;  // a slot of pinscope's pool (PINSCOPE_PIN_POOL)
  uint64_t stack_id = 0;
  uint64_t t_enter = 0, t_exit = 0;
};
// SHM_CREATE, SHM_MAP and SHM_UNMAP also carry the calling thread's usage,
// read here (the call has returned).
void RecordShm(const ShmRecord& r);

struct PinRecord {
  uint32_t op = 0;  // fields::PinOp
  uint64_t address = 0, size = 0, duration_ns = 0;
  int32_t result = 0;
  uint64_t pinned_bytes = 0;
  const char* reason = nullptr;
  uint64_t t = 0;
};
void RecordPin(const PinRecord& r);

void RecordNotice(uint32_t severity, const char* code, const char* text);

// One DataLoader event from pinscope's Python hook (LoaderEvent).
struct LoaderRecord {
  uint32_t kind = 0;  // fields::LoaderKind
  uint64_t loader_id = 0;
  uint64_t t_begin = 0, t_end = 0;
  uint64_t index = 0;
  bool has_usage = false;
  Usage usage_begin, usage_end;
  int32_t num_workers = 0, prefetch_factor = 0, batch_size = 0;
  bool pin_memory = false, persistent_workers = false, iterable = false;
  uint64_t dataset_length = 0;
  const char* site = nullptr;
  const char* user_site = nullptr;
  const char* framework = nullptr;
  int32_t worker_id = -1;
  uint32_t batch_samples = 0;
};
void RecordLoader(const LoaderRecord& r);

// Encodes `u` as a nested ThreadUsage in field `field`.
void EncodeUsage(Encoder& e, uint32_t field, const Usage& u);

// Per-process sequence for API calls (CopyEvent.call_id / CUPTI external id).
uint64_t NextCallId();

}  // namespace pinscope::shim
