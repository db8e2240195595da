// The replay engine: streams every process file of a run, merges them by
// time (k-way, bounded memory), rebuilds per-process state (threads, interned
// stacks, live allocations and shm mappings) and hands each event to the
// Analysis consumers. Each report section and output format is a consumer.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "analyzer/common/interval_map.h"
#include "analyzer/common/progress.h"
#include "analyzer/common/status.h"
#include "analyzer/read/run_loader.h"
#include "analyzer/replay/native_names.h"
#include "trace.pb.h"

namespace pinscope {

class ProcessState;

// A live host allocation (HostAlloc not yet freed).
struct LiveAlloc {
  uint64_t id = 0;  // run-wide sequence number, stable for consumers
  trace::AllocApi api = trace::ALLOC_UNKNOWN;
  uint64_t address = 0;
  uint64_t size = 0;
  uint64_t alignment = 0;
  uint64_t old_address = 0;
  uint64_t time_ns = 0;
  uint32_t tid = 0;
  uint64_t stack_id = 0;
  uint64_t duration_ns = 0;  // cudaHostAlloc's wall time (HostAlloc.duration_ns)
};

// A shared-memory object, identified across processes by (device, inode).
struct ShmSegment {
  uint64_t id = 0;  // run-wide sequence number
  uint64_t device = 0;
  uint64_t inode = 0;
  std::string name;
  const ProcessState* creator = nullptr;  // nullptr: made by an untraced process
  bool memfd = false;                     // memfd_create: not in /dev/shm
  bool driver_internal = false;           // the CUDA driver's own segment
  uint64_t first_seen_ns = 0;
  uint64_t sized_ns = 0;  // first truncate/fallocate/map giving it a size
  uint64_t size = 0;      // largest extent seen (truncate, fallocate, map)
  bool unlinked = false;
  uint64_t unlinked_ns = 0;
  int live_mappings = 0;         // mapping ranges in all processes
  int open_fds = 0;              // tracked fds in all processes
  bool eviction_queued = false;  // engine bookkeeping (closed-segment cache)
  // Unlinked, unmapped and closed: gone unless an untracked fd maps it again.
  bool closed() const { return unlinked && live_mappings == 0 && open_fds == 0; }
};

// One live mapping range of a segment in a process.
struct ShmMapping {
  ShmSegment* segment = nullptr;
  uint64_t base_address = 0;  // address the mmap returned
  uint64_t offset = 0;        // object offset of base_address
  uint64_t time_ns = 0;
  bool pool = false;  // served from pinscope's pool of registered slots (ShmEvent.pool)
};

// The host memory a copy's host side falls in, resolved at the copy's time.
struct HostBuffer {
  enum class Kind { kNone, kAlloc, kShm };
  Kind kind = Kind::kNone;
  const LiveAlloc* alloc = nullptr;     // kAlloc
  const ShmMapping* mapping = nullptr;  // kShm
  const ShmSegment* segment = nullptr;  // kShm
  uint64_t offset = 0;                  // of the host address into the allocation / object
};

class ProcessState {
 public:
  explicit ProcessState(int index, const RunFile& file);

  int index() const { return index_; }
  const std::string& path() const { return path_; }
  const trace::ProcessHeader& header() const { return header_; }
  uint32_t pid() const { return header_.pid(); }
  uint32_t ppid() const { return header_.ppid(); }
  trace::ProcessOrigin origin() const { return header_.origin(); }
  bool helper() const { return header_.helper(); }
  // argv joined by spaces.
  std::string CommandLine() const;

  uint64_t start_ns() const { return start_ns_; }
  // Time of the last event replayed so far (the exit, once ended).
  uint64_t end_ns() const { return end_ns_; }
  bool ended() const { return ended_; }
  const std::optional<trace::ProcessExit>& exit() const { return exit_; }
  const std::optional<trace::Counters>& counters() const { return counters_; }
  const std::optional<trace::CudaRuntimeInfo>& cuda() const { return cuda_; }
  uint64_t packets() const { return packets_; }

  // Tree, set before any event is replayed.
  const ProcessState* parent() const { return parent_; }
  const std::vector<const ProcessState*>& children() const { return children_; }

  // Thread names (ThreadInfo) and thread ids seen.
  const std::map<uint32_t, std::string>& threads() const { return threads_; }
  // "main" for tid == pid, the ThreadInfo name, else "tid N".
  std::string ThreadName(uint32_t tid) const;

  // Interned data; nullptr / empty when the id is unknown.
  const std::string* String(uint64_t id) const;
  const trace::Stack* Stack(uint64_t id) const;
  const trace::PythonFrame* PythonFrame(uint64_t id) const;
  const std::vector<trace::Module>& modules() const { return modules_; }
  // Names of native frames (ReplayOptions::names); nullptr: none, frames are
  // spelled module+offset.
  NativeNames* names() const { return names_; }

  const IntervalMap<LiveAlloc>& allocations() const { return allocations_; }
  const IntervalMap<ShmMapping>& mappings() const { return mappings_; }

  // The buffer containing host address `address` now.
  HostBuffer ResolveHost(uint64_t address) const;

  // Up to `depth` frames of an interned stack, innermost first: its Python
  // frames as "file:line function" when it has any, else its native frames
  // (DescribeNativeStack, native_names.h). Empty for an unknown stack.
  std::vector<std::string> DescribeStack(uint64_t stack_id, int depth) const;

 private:
  friend class ReplayEngine;

  int index_;
  std::string path_;
  trace::ProcessHeader header_;
  uint64_t start_ns_ = 0;
  uint64_t end_ns_ = 0;
  bool ended_ = false;
  std::optional<trace::ProcessExit> exit_;
  std::optional<trace::Counters> counters_;
  std::optional<trace::CudaRuntimeInfo> cuda_;
  uint64_t packets_ = 0;
  const ProcessState* parent_ = nullptr;
  std::vector<const ProcessState*> children_;
  std::map<uint32_t, std::string> threads_;
  std::unordered_map<uint64_t, std::string> strings_;
  std::unordered_map<uint64_t, trace::Stack> stacks_;
  std::unordered_map<uint64_t, trace::PythonFrame> frames_;
  std::vector<trace::Module> modules_;
  NativeNames* names_ = nullptr;
  IntervalMap<LiveAlloc> allocations_;
  IntervalMap<ShmMapping> mappings_;
  std::unordered_map<int32_t, ShmSegment*> fds_;
  // Intervals whose end precedes their start (a clock stepped back, a
  // damaged file), set to 0 long before any consumer sees them.
  uint64_t reversed_copies_ = 0;
  uint64_t reversed_syncs_ = 0;
  uint64_t reversed_device_ = 0;
};

// What every hook receives: the process, the packet and the merge time (the
// packet's timestamp, raised to keep each file's order; see replay.cc).
struct Event {
  const ProcessState& process;
  const trace::TracePacket& packet;
  uint64_t time_ns;
};

struct CopyContext {
  Event event;
  const trace::CopyEvent& copy;
  // The host side (src for H2D/H2H, dst for D2H) resolved at the copy's time.
  HostBuffer buffer;
  uint64_t host_address = 0;
  uint64_t blocked_ns = 0;  // end_ns - timestamp_ns, 0 if end_ns is missing
};

struct ShmContext {
  Event event;
  const trace::ShmEvent& shm;
  // The segment the event is about; nullptr if it could not be resolved
  // (unmap of an unrecorded range, unlink of an unknown name, open failure).
  const ShmSegment* segment = nullptr;
  // True for the unmaps the engine makes when a process ends with live
  // mappings (exit or killed): no packet in the trace says so.
  bool implicit = false;
  // For SHM_UNMAP: bytes of mappings removed.
  uint64_t unmapped_bytes = 0;
};

// Run-wide facts available at Finish(). The process pointers live as long as
// the ReplayEngine; copy what must outlive it.
struct RunInfo {
  std::string run_dir;
  std::string run_id;
  std::vector<Problem> problems;               // listing problems, then replay problems
  std::vector<const ProcessState*> processes;  // in replay (start) order
  const ProcessState* root = nullptr;          // ORIGIN_ROOT, else the first process
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint64_t packets = 0;
  uint64_t segments = 0;  // shm segments seen
};

// A consumer of the replay. Hooks are called in merged time order, on one
// thread. References are valid only during the call; copy what you keep.
class Analysis {
 public:
  virtual ~Analysis() = default;
  // Every process, in start order, before any event is replayed.
  virtual void OnProcess(const ProcessState& process) {}
  virtual void OnCopy(const CopyContext& copy) {}
  virtual void OnSync(const Event& event, const trace::SyncEvent& sync) {}
  virtual void OnAlloc(const Event& event, const LiveAlloc& alloc) {}
  // `freed` is the allocation being removed (already out of the map).
  virtual void OnFree(const Event& event, const LiveAlloc& freed, bool by_realloc) {}
  virtual void OnShm(const ShmContext& shm) {}
  // The engine forgot a closed segment (unlinked, unmapped, no tracked fd)
  // to keep its closed-segment cache at ReplayOptions::closed_segments_kept:
  // no later event is about it (a later map of its inode starts a new one).
  virtual void OnShmForgotten(const ShmSegment& segment) {}
  virtual void OnPin(const Event& event, const trace::PinEvent& pin) {}
  virtual void OnDevice(const Event& event, const trace::DeviceActivity& activity) {}
  virtual void OnCorrelation(const Event& event, const trace::ExternalCorrelation& correlation) {}
  // Which device records the process collects from event.time_ns on
  // (sampled kernel recording; docs/device-activity.md).
  virtual void OnRecording(const Event& event, const trace::DeviceRecording& recording) {}
  virtual void OnUtilization(const Event& event, const trace::GpuUtilization& utilization) {}
  virtual void OnNotice(const Event& event, const trace::Notice& notice) {}
  // Every thread's CPU time and faults at one instant (the flusher's sample).
  virtual void OnThreadSample(const Event& event, const trace::ThreadSample& sample) {}
  // A DataLoader event from pinscope's Python hook (settings, spans).
  virtual void OnLoader(const Event& event, const trace::LoaderEvent& loader) {}
  virtual void OnExit(const Event& event, const trace::ProcessExit& exit) {}
  virtual void OnCounters(const Event& event, const trace::Counters& counters) {}
  // The process's stream ended (after its exit, or at its last packet).
  virtual void OnProcessEnd(const ProcessState& process) {}
  virtual void Finish(const RunInfo& run) {}
};

struct ReplayOptions {
  size_t chunk_bytes = 256 * 1024;  // per-file read buffer
  // Names for native frames (analyzer/symbols OpenRunNames); must outlive
  // the engine. nullptr: frames are spelled module+offset.
  NativeNames* names = nullptr;
  // Closed shm segments kept so a later map of the same inode (through an
  // untracked fd) joins the same segment; older ones are forgotten. A
  // DataLoader's main process maps a batch's segments (one per tensor)
  // within about prefetch_factor x num_workers batches of a worker closing
  // them: 4096 covers 64 workers x 2 x 32 tensors. Each costs about 300 bytes here
  // and as much in ShmAnalysis (docs/benchmarks.md, "Replay speed"); a map
  // later than that counts as a new segment of an untraced creator.
  size_t closed_segments_kept = 4096;
  // Process files open at once; the others wait closed, their lookahead
  // packet and offset kept, and the least recently read is closed when one
  // must be reopened (a long job leaves thousands of files, mostly of
  // processes that do not overlap in time). 0: as many as the soft
  // RLIMIT_NOFILE allows (raised to the hard limit for the replay, then
  // restored), less kReservedFds, at most kMaxOpenFiles.
  size_t max_open_files = 0;
  static constexpr size_t kMaxOpenFiles = 1024;
  static constexpr size_t kReservedFds = 64;
  // Told the bytes read so far (Progress::Bytes): at the start, every
  // kProgressEveryPackets packets and at the end of the replay, never
  // per packet (about 3 ms of replay apart at 6 M packets/s). Not owned;
  // nullptr: nothing is told.
  Progress* progress = nullptr;
  static constexpr uint64_t kProgressEveryPackets = 16384;
};

// Raises the soft RLIMIT_NOFILE towards the hard limit (to `want` at most)
// for its lifetime and restores it after, so that a job `pinscope run` or
// `pinscope tune` starts later inherits the limit it would have had.
class ScopedOpenFileLimit {
 public:
  explicit ScopedOpenFileLimit(uint64_t want);
  ~ScopedOpenFileLimit();
  ScopedOpenFileLimit(const ScopedOpenFileLimit&) = delete;
  ScopedOpenFileLimit& operator=(const ScopedOpenFileLimit&) = delete;
  // The soft limit in force (unlimited reads as UINT64_MAX).
  uint64_t soft() const { return soft_; }

 private:
  uint64_t saved_ = 0;
  uint64_t soft_ = 0;
  bool raised_ = false;
};

// Replays one run. Memory: one read buffer per file, the live state of each
// process, and the analyses' own state; not the trace length.
class ReplayEngine {
 public:
  explicit ReplayEngine(RunListing listing, ReplayOptions options = ReplayOptions());
  ~ReplayEngine();
  ReplayEngine(const ReplayEngine&) = delete;
  ReplayEngine& operator=(const ReplayEngine&) = delete;

  // Consumers are called in the order added. Not owned.
  void AddAnalysis(Analysis* analysis) { analyses_.push_back(analysis); }

  // Replays the whole run, then calls Finish() on every analysis.
  void Run();

  // Most process files that were open at once during Run() (for tests).
  size_t peak_open_files() const { return peak_open_files_; }

  const RunInfo& info() const { return info_; }

 private:
  struct Stream;

  void BuildTree();
  // Marks stream `i` as the one read now: it goes to the back of the open
  // list, and the least recently read beyond the limit are released.
  void TouchStream(std::vector<Stream>& streams, size_t i);
  void ForgetStream(Stream& stream);
  void Dispatch(ProcessState& process, const trace::TracePacket& packet, uint64_t time_ns);
  // Makes an interval that ends before it starts 0 long, and counts it: no
  // consumer then computes a duration that wraps (docs/trace-format.md).
  static void ClampReversed(ProcessState& process, trace::TracePacket* packet);
  void HandleCopy(const Event& event);
  void HandleAlloc(ProcessState& process, const Event& event);
  void HandleFree(ProcessState& process, const Event& event);
  void HandleShm(ProcessState& process, const Event& event);
  void EndProcess(ProcessState& process);
  void RemoveMappings(ProcessState& process, const Event& event, uint64_t start, uint64_t end,
                      bool implicit);
  ShmSegment* FindSegment(ProcessState& process, const trace::ShmEvent& shm);
  ShmSegment* NewSegment(const ProcessState& process, const trace::ShmEvent& shm, uint64_t time_ns);
  // Queues a segment that has no fd and no mapping left for forgetting;
  // EvictClosedSegments, called by Run() between events, forgets the
  // oldest beyond closed_segments_kept.
  void SegmentMaybeClosed(ShmSegment* segment);
  // `fd` of `process` names `segment` from now on; a segment it named before
  // (closed without a record, or dup'd over) loses that fd.
  void BindFd(ProcessState& process, int fd, ShmSegment* segment);
  void EvictClosedSegments();
  // Tells options_.progress the bytes consumed of every file so far.
  void TellProgress(const std::vector<Stream>& streams) const;

  RunListing listing_;
  ReplayOptions options_;
  std::vector<Analysis*> analyses_;
  std::vector<std::unique_ptr<ProcessState>> processes_;
  RunInfo info_;
  // Segments by id; (device, inode) -> id for the cross-process join.
  std::unordered_map<uint64_t, std::unique_ptr<ShmSegment>> segments_;
  std::map<std::pair<uint64_t, uint64_t>, uint64_t> segment_by_inode_;
  // Named segments not yet unlinked, for unlink/open by name without inode.
  std::unordered_map<std::string, uint64_t> segment_by_name_;
  std::vector<uint64_t> closed_order_;
  size_t closed_head_ = 0;
  uint64_t next_segment_id_ = 1;
  uint64_t next_alloc_id_ = 1;
  // Open streams, least recently read first (indices into Run()'s streams).
  std::list<size_t> open_streams_;
  size_t open_limit_ = 0;
  size_t peak_open_files_ = 0;
  // For the progress line: the listed files' sizes, and the bytes of the
  // files whose stream has ended (their reader is gone).
  uint64_t total_bytes_ = 0;
  uint64_t finished_bytes_ = 0;
};

}  // namespace pinscope
