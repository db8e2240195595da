// `pinscope export --perfetto`: a replay consumer that streams the run out as
// a Perfetto trace (a TracePacket stream; schema subset in
// analyzer/export/perfetto/perfetto_subset.proto) while the replay runs. Memory: one
// entry per live thread and per device stream, one per interned name, plus,
// as in the report, a few bytes per shm segment for the /dev/shm counter,
// 16 bytes per device record for the GPU busy counter and one entry per host
// call awaiting its device record (flows). docs/perfetto-export.md.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "analyzer/export/export_command.h"
#include "analyzer/replay/replay.h"

namespace pinscope {

namespace perfetto {
class TracePacket;
class TrackEvent;
}  // namespace perfetto

// Names interned on the export's one packet sequence: the first use of a
// name adds it to the current packet's interned_data, later uses send its id.
class NameInterner {
 public:
  void SetPacket(perfetto::TracePacket* packet) { packet_ = packet; }
  void Clear() { events_.clear(), annotations_.clear(), categories_.clear(); }
  uint64_t Event(const std::string& name);
  uint64_t Annotation(const std::string& name);
  uint64_t Category(const std::string& name);
  uint64_t count() const { return events_.size() + annotations_.size() + categories_.size(); }

 private:
  perfetto::TracePacket* packet_ = nullptr;
  std::unordered_map<std::string, uint64_t> events_, annotations_, categories_;
};

// A TrackEvent being filled and the interner its names go through.
struct EventArgs {
  perfetto::TrackEvent& event;
  NameInterner& names;
};

// What an export wrote, for the CLI's summary line and the tests.
struct ExportStats {
  uint64_t packets = 0;
  uint64_t process_tracks = 0;
  uint64_t thread_tracks = 0;
  uint64_t counter_tracks = 0;
  uint64_t device_tracks = 0;  // one per (device, stream)
  uint64_t copy_slices = 0;
  uint64_t sync_slices = 0;
  uint64_t device_slices = 0;
  uint64_t counter_values = 0;
  uint64_t loader_slices = 0;   // DataLoader __next__ / recv / pin / fetch spans
  uint64_t worker_batches = 0;  // worker batch slices (LOADER_FETCH, or shm fallback)
  uint64_t flows = 0;           // host call -> device record arrows
  uint64_t interned_names = 0;  // event, category and argument names
  // Host slices moved to start at the end of the thread's previous slice
  // (the calls of one thread cannot overlap; only a damaged trace does).
  uint64_t clamped_slices = 0;
};

// Writes every hook's event as Perfetto packets on one packet sequence.
// Not thread safe (the replay calls it on one thread). `out` must be a binary
// stream that outlives the export; write errors show in out->fail().
class PerfettoExport : public Analysis {
 public:
  // Sequence id of every packet (any non-zero value not used by Perfetto's
  // own service, which takes 1 for its packets).
  static constexpr uint32_t kSequenceId = 0x7073;  // "ps"
  // Frames of a call stack put in a slice's "stack" argument.
  static constexpr int kStackFrames = 16;

  explicit PerfettoExport(std::ostream* out);
  ~PerfettoExport() override;
  PerfettoExport(const PerfettoExport&) = delete;
  PerfettoExport& operator=(const PerfettoExport&) = delete;

  void OnProcess(const ProcessState& process) override;
  void OnCopy(const CopyContext& copy) override;
  void OnSync(const Event& event, const trace::SyncEvent& sync) override;
  void OnShm(const ShmContext& shm) override;
  void OnShmForgotten(const ShmSegment& segment) override;
  void OnPin(const Event& event, const trace::PinEvent& pin) override;
  void OnAlloc(const Event& event, const LiveAlloc& alloc) override;
  void OnFree(const Event& event, const LiveAlloc& freed, bool by_realloc) override;
  void OnDevice(const Event& event, const trace::DeviceActivity& activity) override;
  void OnCorrelation(const Event& event, const trace::ExternalCorrelation& correlation) override;
  void OnLoader(const Event& event, const trace::LoaderEvent& loader) override;
  void OnNotice(const Event& event, const trace::Notice& notice) override;
  void OnRecording(const Event& event, const trace::DeviceRecording& recording) override;
  void OnProcessEnd(const ProcessState& process) override;
  void Finish(const RunInfo& run) override;

  const ExportStats& stats() const { return stats_; }

  // Track uuids (stable, documented in docs/report.md): the high byte says
  // the kind of track, so the kinds never collide.
  static uint64_t ProcessUuid(int process_index);
  static uint64_t ThreadUuid(int process_index, uint32_t tid);
  // Flow id of a host call (per-process call id), shared with its device record.
  static uint64_t FlowId(int process_index, uint64_t call_id);
  // Width of a GPU busy counter bucket.
  static constexpr uint64_t kBusyBucketNs = 1000000;

 private:
  struct ThreadTrack {
    uint64_t uuid = 0;
    std::string name;       // as last written in a descriptor
    uint64_t last_end = 0;  // end of the thread's last call slice (copy, sync)
  };
  struct DeviceTrack {
    uint64_t uuid = 0;
  };

  // Starts a packet on the sequence (the first one clears incremental state).
  perfetto::TracePacket& NewPacket(uint64_t time_ns);
  void Write();
  void WriteProcessTrack(const ProcessState& process);
  // "main process", "DataLoader worker N", "helper: ...": see ProcessName.
  std::string ProcessName(const ProcessState& process) const;
  std::string ThreadName(const ProcessState& process, uint32_t tid) const;
  // Writes the thread's descriptor again if its name changed.
  void RenameThread(const ProcessState& process, uint32_t tid);
  ThreadTrack& Thread(const ProcessState& process, uint32_t tid, uint64_t time_ns);
  void WriteThreadDescriptor(const ProcessState& process, uint32_t tid, const ThreadTrack& track,
                             uint64_t time_ns);
  // `bytes`: the unit is bytes, else unspecified (a 0/1 state).
  uint64_t CounterTrack(uint64_t uuid, uint64_t parent_uuid, const std::string& name,
                        uint64_t time_ns, bool bytes = true);
  void WriteCounter(uint64_t track_uuid, uint64_t time_ns, int64_t value);
  uint64_t DeviceStreamTrack(uint32_t device, uint32_t stream, uint64_t time_ns);
  // Host slice [begin, end] on a thread track; `annotate` adds the BEGIN
  // event's arguments. A call (`call`: copy, sync) is clamped after the
  // thread's previous call; DataLoader spans nest around calls as they are.
  // `flow_id`, if not 0, starts a flow at the slice.
  void HostSlice(const ProcessState& process, uint32_t tid, uint64_t begin, uint64_t end,
                 const std::string& name, const char* category,
                 const std::function<void(EventArgs&)>& annotate, bool call = true,
                 uint64_t flow_id = 0);
  // The shm fallback for worker batches (no Python hook): see OnShm.
  void ShmBatch(const ShmContext& context);
  void WriteBusyCounters();

  std::ostream* out_;
  std::unique_ptr<perfetto::TracePacket> packet_;  // reused for every packet
  std::string buffer_;                             // reused serialization buffer
  bool first_packet_ = true;
  ExportStats stats_;
  uint64_t run_start_ns_ = 0;
  bool run_start_known_ = false;
  // (process index << 32 | tid) -> its track.
  std::unordered_map<uint64_t, ThreadTrack> threads_;
  // Counter tracks already described.
  std::unordered_map<uint64_t, bool> counters_;
  // Process index -> time of its "cupti_started" notice (where the
  // "kernels recorded" counter goes to 1).
  std::unordered_map<int, uint64_t> cupti_started_;
  // (device << 32 | stream) -> track; device ids with a parent track written.
  std::map<uint64_t, DeviceTrack> device_streams_;
  std::map<uint32_t, uint64_t> devices_;
  // Job-wide /dev/shm bytes in use, counted as the report counts them
  // (shm_analysis.cc): a segment holds its size from its first size to the
  // later of its unlink and its last event (never unlinked: the run's end).
  // That end is known once the replay engine forgets the segment (no later
  // event can be about it) or at Finish(): each finished life adds its two
  // changes to shm_deltas_, and the counter is written up to the earliest
  // start of a life still open (no later change can come before it) every
  // kShmFlushEvery forgotten segments. Memory: the segments the engine
  // knows (its closed-segment cache) and their changes, not the run's.
  struct ShmLife {
    uint64_t start_ns = 0;
    uint64_t end_ns = 0;
    uint64_t size = 0;
    bool unlinked = false;
    bool counted = true;  // not memfd, not the CUDA driver's own
  };
  void WriteShmCounter(const RunInfo& run);
  void AddShmLife(const ShmLife& life, uint64_t end_ns);
  // Writes the counter's changes before `until_ns` (all with UINT64_MAX).
  void WriteShmChanges(uint64_t until_ns);
  std::unordered_map<uint64_t, ShmLife> shm_lives_;
  static constexpr uint64_t kShmFlushEvery = 1024;
  std::map<uint64_t, int64_t> shm_deltas_;  // time -> bytes in use changed by
  // Forgotten segments never unlinked: they hold their bytes to the run's
  // end, (last event, size) until Finish().
  std::vector<std::pair<uint64_t, uint64_t>> shm_to_end_;
  int64_t shm_bytes_ = 0, shm_written_ = 0;
  bool shm_track_ = false;
  uint64_t shm_flushed_ns_ = 0;  // changes before it are written
  uint64_t shm_now_ns_ = 0;      // the latest shm event's time
  uint64_t shm_forgotten_ = 0;

  NameInterner names_;
  // Process index -> DataLoader worker id (from LOADER_FETCH).
  std::unordered_map<int, int> worker_ids_;
  // Process index -> its name as last written.
  std::unordered_map<int, std::string> process_names_;
  // (process index << 32 | tid) of pin-memory threads (LOADER_PIN spans).
  std::unordered_map<uint64_t, bool> pin_threads_;
  // A LOADER_ITER was seen: the hook times the batches, no shm fallback.
  bool loader_hook_ = false;
  // Flows: host calls written with a flow id, by FlowId, and CUPTI
  // correlation ids -> call id, (process index << 32 | correlation id).
  // A flow not ended by a device record within kFlowHorizonNs of its call
  // is forgotten (the device join gives up after as long:
  // analyses/device_join.h), so a run without CUPTI keeps only the last
  // minute's calls here; flow_order_ holds (opened at, flow id) in order.
  static constexpr uint64_t kFlowHorizonNs = 60ull * 1000 * 1000 * 1000;
  uint64_t OpenFlow(uint64_t flow, uint64_t now_ns);   // 0 when `flow` is open already
  std::unordered_map<uint64_t, uint64_t> open_flows_;  // flow id -> opened at
  std::deque<std::pair<uint64_t, uint64_t>> flow_order_;
  std::unordered_map<uint64_t, uint64_t> correlations_;
  // Program-pinned host bytes (cudaHostAlloc) live per process index.
  std::unordered_map<int, int64_t> program_pinned_;
  // Device id -> its activity intervals [start, end), for the busy counter.
  std::map<uint32_t, std::vector<std::pair<uint64_t, uint64_t>>> busy_;
  // Shm fallback: segment id -> creation time, for worker-made segments
  // not yet handed over; worker process index -> end of its last batch slice.
  std::unordered_map<uint64_t, uint64_t> worker_segments_;
  std::unordered_map<int, uint64_t> worker_batch_end_;
};

}  // namespace pinscope
