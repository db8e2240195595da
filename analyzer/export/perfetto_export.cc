// Perfetto export: turns replay events into Perfetto packets as they come
// (track descriptors on first use, slices as BEGIN/END pairs, counter values
// on change) and frames each packet as a Trace.packet field, so the output is
// written while the replay streams and never held in memory.
#include "analyzer/export/perfetto_export.h"

#include <algorithm>
#include <fstream>
#include <ostream>
#include <string_view>
#include <vector>

#include "analyzer/analyses/copy_analysis.h"
#include "analyzer/common/format.h"
#include "analyzer/common/private_file.h"
#include "analyzer/common/trace_names.h"
#include "analyzer/export/gzip_stream.h"
#include "analyzer/read/run_loader.h"
#include "perfetto_subset.pb.h"

namespace pinscope {

namespace {

using perfetto::CounterDescriptor;
using perfetto::DebugAnnotation;
using perfetto::TrackDescriptor;
using perfetto::TrackEvent;
using PerfettoPacket = perfetto::TracePacket;

// High byte of a track uuid: the kind of track (see ProcessUuid).
constexpr uint64_t kHostTrackTag = 1ull << 56;
constexpr uint64_t kCounterTrackTag = 2ull << 56;
constexpr uint64_t kDeviceTrackTag = 3ull << 56;
constexpr uint64_t kShmCounterUuid = kCounterTrackTag | 1;
// Process and thread uuids keep 24 bits for the process index.
constexpr int kMaxProcessIndex = (1 << 24) - 2;

// A sync slice's name and "api" annotation: SyncApiName, spelled
// "sync (unknown API)" when the API is not known.
const char* SyncSliceName(trace::SyncApi api) {
  const char* name = SyncApiName(api);
  return std::string_view(name) == "unknown" ? "sync (unknown API)" : name;
}

const char* PinOutcomeName(trace::PinOutcome pin) {
  switch (pin) {
    case trace::PIN_NONE:
      return "none";
    case trace::PIN_BY_PROGRAM:
      return "pinned by the program";
    case trace::PIN_REGISTERED:
      return "registered by pinscope";
    case trace::PIN_CACHED:
      return "already registered by pinscope";
    case trace::PIN_SKIPPED_BUDGET:
      return "skipped: budget full";
    case trace::PIN_SKIPPED_SMALL:
      return "skipped: below PINSCOPE_PIN_MIN";
    case trace::PIN_SKIPPED_UNKNOWN_BUFFER:
      return "skipped: not a recorded buffer";
    case trace::PIN_FAILED:
      return "cudaHostRegister failed";
    case trace::PIN_SKIPPED_CAPTURE:
      return "skipped: stream capture";
    default:
      return "unknown";
  }
}

const char* ActivityKindName(trace::DeviceActivityKind kind) {
  switch (kind) {
    case trace::ACT_MEMCPY:
      return "memcpy";
    case trace::ACT_MEMSET:
      return "memset";
    case trace::ACT_KERNEL:
      return "kernel";
    case trace::ACT_SYNC:
      return "sync";
    default:
      return "unknown";
  }
}

// "worker" etc., as ProcessSummary::Role() spells them.
const char* RoleOf(const ProcessState& process) {
  return ProcessRoleName(process.origin(), process.helper());
}

DebugAnnotation* Annotation(EventArgs& args, const char* name) {
  DebugAnnotation* annotation = args.event.add_debug_annotations();
  annotation->set_name_iid(args.names.Annotation(name));
  return annotation;
}

void AddString(EventArgs& args, const char* name, const std::string& value) {
  Annotation(args, name)->set_string_value(value);
}

void AddUint(EventArgs& args, const char* name, uint64_t value) {
  Annotation(args, name)->set_uint_value(value);
}

void AddInt(EventArgs& args, const char* name, int64_t value) {
  Annotation(args, name)->set_int_value(value);
}

void AddDouble(EventArgs& args, const char* name, double value) {
  Annotation(args, name)->set_double_value(value);
}

// Frames innermost first, "; "-joined: Python "file:line function" frames
// when the stack has them, else native return addresses (hex).
std::string StackText(const ProcessState& process, uint64_t stack_id) {
  std::string text;
  for (const std::string& frame : process.DescribeStack(stack_id, PerfettoExport::kStackFrames)) {
    if (!text.empty()) text += "; ";
    text += frame;
  }
  return text;
}

// bytes per ns is GB/s; rounded to 0.001 like the JSON report.
double Gbps(uint64_t bytes, uint64_t ns) {
  if (ns == 0) return 0;
  return static_cast<double>(static_cast<int64_t>(static_cast<double>(bytes) / ns * 1000 + 0.5)) /
         1000;
}

}  // namespace

uint64_t PerfettoExport::ProcessUuid(int process_index) {
  const uint64_t index = static_cast<uint64_t>(std::clamp(process_index, 0, kMaxProcessIndex));
  return kHostTrackTag | ((index + 1) << 32);
}

uint64_t PerfettoExport::ThreadUuid(int process_index, uint32_t tid) {
  // Low 32 bits 0 are the process track's: a thread 0 (only a header with
  // pid 0 makes one) takes 0xFFFFFFFF, above any Linux thread id.
  return ProcessUuid(process_index) | (tid == 0 ? 0xFFFFFFFFu : tid);
}

PerfettoExport::PerfettoExport(std::ostream* out)
    : out_(out), packet_(std::make_unique<PerfettoPacket>()) {}

PerfettoExport::~PerfettoExport() = default;

PerfettoPacket& PerfettoExport::NewPacket(uint64_t time_ns) {
  packet_->Clear();
  names_.SetPacket(packet_.get());
  packet_->set_timestamp(time_ns);
  packet_->set_trusted_packet_sequence_id(kSequenceId);
  if (first_packet_) {
    // Readers drop a sequence's packets until its incremental state is
    // known to be clean; say so on the first packet.
    packet_->set_sequence_flags(PerfettoPacket::SEQ_INCREMENTAL_STATE_CLEARED);
    packet_->set_first_packet_on_sequence(true);
    first_packet_ = false;
  }
  return *packet_;
}

void PerfettoExport::Write() {
  packet_->SerializeToString(&buffer_);
  // Trace.packet (field 1, length-delimited): tag, varint length, bytes.
  char head[11];
  size_t n = 0;
  head[n++] = 0x0A;
  uint64_t length = buffer_.size();
  do {
    uint8_t byte = length & 0x7F;
    length >>= 7;
    if (length != 0) byte |= 0x80;
    head[n++] = static_cast<char>(byte);
  } while (length != 0);
  out_->write(head, static_cast<std::streamsize>(n));
  out_->write(buffer_.data(), static_cast<std::streamsize>(buffer_.size()));
  ++stats_.packets;
}

void PerfettoExport::WriteProcessTrack(const ProcessState& process) {
  PerfettoPacket& packet = NewPacket(process.start_ns());
  TrackDescriptor* track = packet.mutable_track_descriptor();
  track->set_uuid(ProcessUuid(process.index()));
  perfetto::ProcessDescriptor* descriptor = track->mutable_process();
  descriptor->set_pid(static_cast<int32_t>(process.pid()));
  for (const std::string& arg : process.header().cmdline()) descriptor->add_cmdline(arg);
  const std::string name = ProcessName(process);
  process_names_[process.index()] = name;
  descriptor->set_process_name(name);
  descriptor->set_start_timestamp_ns(static_cast<int64_t>(process.start_ns()));
  descriptor->add_process_labels(RoleOf(process));
  Write();
}

void PerfettoExport::WriteThreadDescriptor(const ProcessState& process, uint32_t tid,
                                           const ThreadTrack& thread, uint64_t time_ns) {
  PerfettoPacket& packet = NewPacket(time_ns);
  TrackDescriptor* track = packet.mutable_track_descriptor();
  track->set_uuid(thread.uuid);
  track->set_parent_uuid(ProcessUuid(process.index()));
  perfetto::ThreadDescriptor* descriptor = track->mutable_thread();
  descriptor->set_pid(static_cast<int32_t>(process.pid()));
  descriptor->set_tid(tid);
  if (!thread.name.empty()) descriptor->set_thread_name(thread.name);
  Write();
}

PerfettoExport::ThreadTrack& PerfettoExport::Thread(const ProcessState& process, uint32_t tid,
                                                    uint64_t time_ns) {
  if (tid == 0) tid = process.pid();
  const uint64_t key = (static_cast<uint64_t>(process.index()) << 32) | tid;
  auto [it, inserted] = threads_.try_emplace(key);
  if (inserted) {
    it->second.uuid = ThreadUuid(process.index(), tid);
    it->second.name = ThreadName(process, tid);
    WriteThreadDescriptor(process, tid, it->second, std::min(time_ns, process.start_ns()));
    ++stats_.thread_tracks;
  }
  return it->second;
}

uint64_t PerfettoExport::CounterTrack(uint64_t uuid, uint64_t parent_uuid, const std::string& name,
                                      uint64_t time_ns, bool bytes) {
  if (counters_.emplace(uuid, true).second) {
    PerfettoPacket& packet = NewPacket(time_ns);
    TrackDescriptor* track = packet.mutable_track_descriptor();
    track->set_uuid(uuid);
    if (parent_uuid != 0) track->set_parent_uuid(parent_uuid);
    track->set_name(name);
    track->mutable_counter()->set_unit(bytes ? CounterDescriptor::UNIT_SIZE_BYTES
                                             : CounterDescriptor::UNIT_UNSPECIFIED);
    Write();
    ++stats_.counter_tracks;
    // Start the graph at zero where the track's scope begins.
    WriteCounter(uuid, time_ns, 0);
  }
  return uuid;
}

void PerfettoExport::WriteCounter(uint64_t track_uuid, uint64_t time_ns, int64_t value) {
  PerfettoPacket& packet = NewPacket(time_ns);
  packet.set_sequence_flags(PerfettoPacket::SEQ_NEEDS_INCREMENTAL_STATE);
  TrackEvent* event = packet.mutable_track_event();
  event->set_type(TrackEvent::TYPE_COUNTER);
  event->set_track_uuid(track_uuid);
  event->set_counter_value(value);
  Write();
  ++stats_.counter_values;
}

uint64_t PerfettoExport::DeviceStreamTrack(uint32_t device, uint32_t stream, uint64_t time_ns) {
  const uint64_t key = (static_cast<uint64_t>(device) << 32) | stream;
  auto it = device_streams_.find(key);
  if (it != device_streams_.end()) return it->second.uuid;
  auto [parent, inserted] = devices_.try_emplace(device, 0);
  if (inserted) {
    // uuids in order of first use: device and stream ids are 32 bits each.
    parent->second = kDeviceTrackTag | (devices_.size() + device_streams_.size());
    PerfettoPacket& packet = NewPacket(time_ns);
    TrackDescriptor* track = packet.mutable_track_descriptor();
    track->set_uuid(parent->second);
    track->set_name("GPU " + std::to_string(device));
    track->set_child_ordering(TrackDescriptor::LEXICOGRAPHIC);
    Write();
  }
  DeviceTrack& track_entry = device_streams_[key];
  track_entry.uuid = kDeviceTrackTag | (devices_.size() + device_streams_.size());
  PerfettoPacket& packet = NewPacket(time_ns);
  TrackDescriptor* track = packet.mutable_track_descriptor();
  track->set_uuid(track_entry.uuid);
  track->set_parent_uuid(parent->second);
  track->set_name("GPU " + std::to_string(device) + " stream " + std::to_string(stream));
  Write();
  ++stats_.device_tracks;
  return track_entry.uuid;
}

void PerfettoExport::HostSlice(const ProcessState& process, uint32_t tid, uint64_t begin,
                               uint64_t end, const std::string& name, const char* category,
                               const std::function<void(EventArgs&)>& annotate, bool call,
                               uint64_t flow_id) {
  ThreadTrack& thread = Thread(process, tid, begin);
  // One thread makes one call at a time; a call that starts inside the
  // previous one (only a damaged or hand-made trace has it) would nest
  // wrongly, so it starts where the previous one ended. DataLoader spans
  // (Python) enclose the calls made inside them on the same thread and
  // clock, so they nest properly as recorded.
  if (call) {
    if (begin < thread.last_end) {
      begin = thread.last_end;
      ++stats_.clamped_slices;
    }
    end = std::max(end, begin);
    thread.last_end = end;
  }
  end = std::max(end, begin);

  PerfettoPacket& packet = NewPacket(begin);
  packet.set_sequence_flags(PerfettoPacket::SEQ_NEEDS_INCREMENTAL_STATE);
  TrackEvent* event = packet.mutable_track_event();
  event->set_type(TrackEvent::TYPE_SLICE_BEGIN);
  event->set_track_uuid(thread.uuid);
  event->add_category_iids(names_.Category(category));
  event->set_name_iid(names_.Event(name));
  if (flow_id != 0) event->add_flow_ids(flow_id);
  EventArgs args{*event, names_};
  annotate(args);
  Write();

  // END right after BEGIN in the file: readers sort by time, and a thread's
  // next call begins no earlier than this end.
  PerfettoPacket& end_packet = NewPacket(end);
  end_packet.set_sequence_flags(PerfettoPacket::SEQ_NEEDS_INCREMENTAL_STATE);
  TrackEvent* end_event = end_packet.mutable_track_event();
  end_event->set_type(TrackEvent::TYPE_SLICE_END);
  end_event->set_track_uuid(thread.uuid);
  Write();
}

void PerfettoExport::OnProcess(const ProcessState& process) {
  if (!run_start_known_ || process.start_ns() < run_start_ns_) {
    run_start_ns_ = process.start_ns();
    run_start_known_ = true;
  }
  WriteProcessTrack(process);
  ++stats_.process_tracks;
  // The main thread's track, so every process shows at least one thread.
  Thread(process, process.pid(), process.start_ns());
}

uint64_t PerfettoExport::OpenFlow(uint64_t flow, uint64_t now_ns) {
  while (!flow_order_.empty() && flow_order_.front().first + kFlowHorizonNs < now_ns) {
    const auto [opened, id] = flow_order_.front();
    flow_order_.pop_front();
    auto it = open_flows_.find(id);
    if (it != open_flows_.end() && it->second == opened) open_flows_.erase(it);
  }
  if (!open_flows_.emplace(flow, now_ns).second) return 0;
  flow_order_.emplace_back(now_ns, flow);
  return flow;
}

void PerfettoExport::OnCopy(const CopyContext& context) {
  const trace::CopyEvent& copy = context.copy;
  const trace::TracePacket& packet = context.event.packet;
  const trace::MemoryKind host_kind = HostKind(copy);
  std::string name = DirectionName(copy.direction());
  if (host_kind != trace::MEM_UNKNOWN) name += std::string(" ") + MemoryKindName(host_kind);
  name += " " + FormatBytes(copy.bytes());
  if (copy.result() != 0) name += " (failed)";
  const uint64_t begin = packet.timestamp_ns();
  const uint64_t end = copy.end_ns() > begin ? copy.end_ns() : begin;
  const int index = context.event.process.index();
  // A batch copy (one call id, several CopyEvents) starts its flow once.
  const uint64_t flow = copy.call_id() != 0 ? OpenFlow(FlowId(index, copy.call_id()), begin) : 0;
  HostSlice(
      context.event.process, packet.tid(), begin, end, name, "copy",
      [&](EventArgs& event) {
        AddUint(event, "bytes", copy.bytes());
        AddString(event, "direction", DirectionName(copy.direction()));
        AddString(event, "src_kind", MemoryKindName(copy.src_kind()));
        AddString(event, "dst_kind", MemoryKindName(copy.dst_kind()));
        // Achieved = bytes over the time the call held the host; for an async
        // copy from pinned memory that is the enqueue, not the transfer.
        if (context.blocked_ns > 0)
          AddDouble(event, "GB/s", Gbps(copy.bytes(), context.blocked_ns));
        AddUint(event, "stream", copy.stream());
        AddString(event, "api",
                  std::string(CopyApiName(copy.api())) + (copy.per_thread() ? "_ptds" : ""));
        AddString(event, "pin", PinOutcomeName(copy.pin()));
        if (host_kind != trace::MEM_UNKNOWN) {
          AddString(event, "buffer", BufferInfo::From(context.buffer).Describe());
        }
        if (copy.result() != 0) AddInt(event, "result", copy.result());
        AddUint(event, "call_id", copy.call_id());
        const std::string stack = StackText(context.event.process, copy.stack_id());
        if (!stack.empty()) AddString(event, "stack", stack);
      },
      /*call=*/true, flow);
  ++stats_.copy_slices;
}

void PerfettoExport::OnSync(const Event& event, const trace::SyncEvent& sync) {
  const uint64_t begin = event.packet.timestamp_ns();
  const uint64_t end = sync.end_ns() > begin ? sync.end_ns() : begin;
  const uint64_t flow =
      sync.call_id() != 0 ? OpenFlow(FlowId(event.process.index(), sync.call_id()), begin) : 0;
  HostSlice(
      event.process, event.packet.tid(), begin, end, SyncSliceName(sync.api()), "sync",
      [&](EventArgs& slice) {
        AddString(slice, "api", SyncSliceName(sync.api()));
        AddUint(slice, "stream", sync.stream());
        if (sync.result() != 0) AddInt(slice, "result", sync.result());
        AddUint(slice, "call_id", sync.call_id());
        const std::string stack = StackText(event.process, sync.stack_id());
        if (!stack.empty()) AddString(slice, "stack", stack);
      },
      /*call=*/true, flow);
  ++stats_.sync_slices;
}

void PerfettoExport::OnShm(const ShmContext& context) {
  if (context.segment == nullptr || context.shm.error() != 0) return;
  ShmBatch(context);
  const ShmSegment& segment = *context.segment;
  auto [it, inserted] = shm_lives_.try_emplace(segment.id);
  ShmLife& life = it->second;
  if (inserted) life.counted = !segment.memfd && !segment.driver_internal;
  life.size = std::max(life.size, segment.size);
  if (life.start_ns == 0 && segment.sized_ns != 0) life.start_ns = segment.sized_ns;
  life.end_ns = std::max(life.end_ns, context.event.time_ns);
  shm_now_ns_ = std::max(shm_now_ns_, context.event.time_ns);
  if (context.shm.op() == trace::SHM_UNLINK) life.unlinked = true;
}

void PerfettoExport::AddShmLife(const ShmLife& life, uint64_t end_ns) {
  if (!life.counted || life.size == 0 || life.start_ns == 0) return;
  // A change before what is written already (a clock raised by the replay)
  // goes at the written edge: the counter's values stay in time order.
  const uint64_t start = std::max(life.start_ns, shm_flushed_ns_);
  shm_deltas_[start] += static_cast<int64_t>(life.size);
  shm_deltas_[std::max(end_ns, start)] -= static_cast<int64_t>(life.size);
}

void PerfettoExport::OnShmForgotten(const ShmSegment& segment) {
  auto it = shm_lives_.find(segment.id);
  if (it == shm_lives_.end()) return;
  const ShmLife& life = it->second;
  if (life.unlinked) {
    AddShmLife(life, life.end_ns);
  } else if (life.counted && life.size != 0 && life.start_ns != 0) {
    // Not unlinked: its bytes stay in use to the run's end (WriteShmCounter).
    shm_deltas_[std::max(life.start_ns, shm_flushed_ns_)] += static_cast<int64_t>(life.size);
    shm_to_end_.emplace_back(std::max(life.end_ns, life.start_ns), life.size);
  }
  shm_lives_.erase(it);
  if (++shm_forgotten_ % kShmFlushEvery != 0) return;
  // No change can come before the earliest start of a life still open, nor
  // before the latest shm event (a segment not seen yet starts after it).
  uint64_t until = shm_now_ns_;
  for (const auto& [id, open] : shm_lives_)
    if (open.counted && open.start_ns != 0) until = std::min(until, open.start_ns);
  WriteShmChanges(until);
}

void PerfettoExport::WriteShmChanges(uint64_t until_ns) {
  if (shm_deltas_.empty()) return;
  if (!shm_track_) {
    CounterTrack(kShmCounterUuid, 0, "/dev/shm bytes in use (job)", run_start_ns_);
    shm_track_ = true;
  }
  auto it = shm_deltas_.begin();
  for (; it != shm_deltas_.end() && it->first < until_ns; ++it) {
    // One value per instant, after every change at that instant.
    shm_bytes_ += it->second;
    if (shm_bytes_ == shm_written_) continue;
    WriteCounter(kShmCounterUuid, it->first, shm_bytes_);
    shm_written_ = shm_bytes_;
  }
  shm_deltas_.erase(shm_deltas_.begin(), it);
  if (until_ns != UINT64_MAX) shm_flushed_ns_ = std::max(shm_flushed_ns_, until_ns);
}

void PerfettoExport::WriteShmCounter(const RunInfo& run) {
  for (const auto& [id, life] : shm_lives_)
    AddShmLife(life, life.unlinked ? life.end_ns : std::max(life.end_ns, run.end_ns));
  shm_lives_.clear();
  for (const auto& [end, size] : shm_to_end_)
    shm_deltas_[std::max(end, run.end_ns)] -= static_cast<int64_t>(size);
  shm_to_end_.clear();
  WriteShmChanges(UINT64_MAX);
}

void PerfettoExport::OnPin(const Event& event, const trace::PinEvent& pin) {
  const ProcessState& process = event.process;
  const uint64_t uuid = kCounterTrackTag | (ProcessUuid(process.index()) & ~kHostTrackTag) | 2;
  CounterTrack(uuid, ProcessUuid(process.index()), "pinned bytes (pinscope)", process.start_ns());
  WriteCounter(uuid, event.time_ns, static_cast<int64_t>(pin.pinned_bytes()));
}

void PerfettoExport::OnDevice(const Event& event, const trace::DeviceActivity& activity) {
  const uint64_t track =
      DeviceStreamTrack(activity.device_id(), activity.stream_id(), activity.start_ns());
  const uint64_t begin = activity.start_ns();
  const uint64_t end = std::max(activity.end_ns(), begin);
  std::string name;
  switch (activity.kind()) {
    case trace::ACT_MEMCPY: {
      name = DirectionName(activity.direction());
      const trace::MemoryKind host =
          activity.direction() == trace::D2H ? activity.dst_kind() : activity.src_kind();
      if (activity.direction() == trace::H2D || activity.direction() == trace::D2H) {
        name += std::string(" ") + MemoryKindName(host);
      }
      name += " " + FormatBytes(activity.bytes());
      break;
    }
    case trace::ACT_MEMSET:
      name = "memset " + FormatBytes(activity.bytes());
      break;
    case trace::ACT_KERNEL: {
      const std::string* kernel = event.process.String(activity.name_id());
      name = kernel != nullptr && !kernel->empty() ? *kernel : "kernel";
      break;
    }
    default:
      name = ActivityKindName(activity.kind());
      break;
  }

  // The host call CUPTI correlates this record with (ExternalCorrelation):
  // the record ends the flow its call's slice started.
  uint64_t flow = 0;
  const uint64_t corr_key =
      (static_cast<uint64_t>(event.process.index()) << 32) | activity.correlation_id();
  if (auto corr = correlations_.find(corr_key); corr != correlations_.end()) {
    const uint64_t id = FlowId(event.process.index(), corr->second);
    if (open_flows_.erase(id) != 0) flow = id;
    correlations_.erase(corr);
  }
  if (activity.kind() != trace::ACT_SYNC) busy_[activity.device_id()].emplace_back(begin, end);

  PerfettoPacket& packet = NewPacket(begin);
  packet.set_sequence_flags(PerfettoPacket::SEQ_NEEDS_INCREMENTAL_STATE);
  TrackEvent* slice = packet.mutable_track_event();
  slice->set_type(TrackEvent::TYPE_SLICE_BEGIN);
  slice->set_track_uuid(track);
  slice->add_category_iids(names_.Category("device"));
  slice->set_name_iid(names_.Event(name));
  if (flow != 0) {
    slice->add_terminating_flow_ids(flow);
    ++stats_.flows;
  }
  EventArgs args{*slice, names_};
  AddString(args, "kind", ActivityKindName(activity.kind()));
  if (activity.kind() == trace::ACT_MEMCPY || activity.kind() == trace::ACT_MEMSET) {
    AddUint(args, "bytes", activity.bytes());
    if (end > begin) AddDouble(args, "GB/s", Gbps(activity.bytes(), end - begin));
  }
  if (activity.kind() == trace::ACT_MEMCPY) {
    AddString(args, "direction", DirectionName(activity.direction()));
    AddString(args, "src_kind", MemoryKindName(activity.src_kind()));
    AddString(args, "dst_kind", MemoryKindName(activity.dst_kind()));
  }
  AddUint(args, "correlation_id", activity.correlation_id());
  AddUint(args, "pid", event.process.pid());
  Write();

  PerfettoPacket& end_packet = NewPacket(end);
  end_packet.set_sequence_flags(PerfettoPacket::SEQ_NEEDS_INCREMENTAL_STATE);
  TrackEvent* end_event = end_packet.mutable_track_event();
  end_event->set_type(TrackEvent::TYPE_SLICE_END);
  end_event->set_track_uuid(track);
  Write();
  ++stats_.device_slices;
}

void PerfettoExport::OnNotice(const Event& event, const trace::Notice& notice) {
  if (notice.code() == "cupti_started")
    cupti_started_.try_emplace(event.process.index(), event.time_ns);
}

void PerfettoExport::OnRecording(const Event& event, const trace::DeviceRecording& recording) {
  // "kernels recorded (pinscope)": 0 before CUPTI started, 1 from the
  // cupti_started notice, then 1/0 at each DeviceRecording packet. Only for
  // processes that have such packets (sampled kernel recording).
  const ProcessState& process = event.process;
  const uint64_t uuid = kCounterTrackTag | (ProcessUuid(process.index()) & ~kHostTrackTag) | 3;
  if (!counters_.count(uuid)) {
    CounterTrack(uuid, ProcessUuid(process.index()), "kernels recorded (pinscope)",
                 process.start_ns(), /*bytes=*/false);
    auto started = cupti_started_.find(process.index());
    if (started != cupti_started_.end() && started->second < event.time_ns) {
      WriteCounter(uuid, started->second, 1);
    }
  }
  WriteCounter(uuid, event.time_ns, recording.kernels() ? 1 : 0);
}

void PerfettoExport::OnProcessEnd(const ProcessState& process) {
  // A thread named (ThreadInfo) after its first event: write its descriptor
  // again with the name, now that the process's stream is over.
  const uint64_t first = static_cast<uint64_t>(process.index()) << 32;
  for (const auto& [tid, unused] : process.threads()) {
    auto it = threads_.find(first | tid);
    if (it == threads_.end()) continue;
    const std::string name = ThreadName(process, tid);
    if (name == it->second.name) continue;
    it->second.name = name;
    WriteThreadDescriptor(process, tid, it->second, process.start_ns());
  }
  // Its threads are done: forget their tracks (memory follows live threads).
  for (const auto& [tid, unused] : process.threads()) {
    threads_.erase(first | tid);
    pin_threads_.erase(first | tid);
  }
  threads_.erase(first | process.pid());
  cupti_started_.erase(process.index());
  worker_ids_.erase(process.index());
  process_names_.erase(process.index());
  program_pinned_.erase(process.index());
  worker_batch_end_.erase(process.index());
  for (auto it = open_flows_.begin(); it != open_flows_.end();) {
    it = (it->first >> 40) == static_cast<uint64_t>(process.index() + 1) ? open_flows_.erase(it)
                                                                         : std::next(it);
  }
  // Its calls' device records, if any, have been replayed.
  for (auto it = correlations_.begin(); it != correlations_.end();) {
    it = (it->first >> 32) == static_cast<uint64_t>(process.index()) ? correlations_.erase(it)
                                                                     : std::next(it);
  }
}

void PerfettoExport::Finish(const RunInfo& run) {
  WriteShmCounter(run);
  WriteBusyCounters();
  stats_.interned_names = names_.count();
  out_->flush();
}

// ---------------------------------------------------------------------------

int RunExport(const ExportOptions& options, std::ostream& out, std::ostream& err) {
  if (options.run_dir.empty()) {
    err << "pinscope export: no run folder given\n";
    return 2;
  }
  if (options.perfetto_path.empty()) {
    err << "pinscope export: no output file given (--perfetto FILE)\n";
    return 2;
  }
  if (options.progress != nullptr) options.progress->Stage("reading the run folder");
  RunListing listing;
  const Status scanned = ScanRun(options.run_dir, &listing);
  if (!scanned.ok()) {
    err << "pinscope export: " << scanned.message << '\n';
    return 2;
  }
  if (listing.files.empty()) {
    err << "pinscope export: no readable process file in " << options.run_dir << '\n';
    for (const Problem& problem : listing.problems) err << "  " << problem.message << '\n';
    return 2;
  }
  const std::string& path = options.perfetto_path;
  const bool gzip =
      options.gzip || (path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0);
  std::ofstream file;
  GzipFileBuf gzip_buffer;
  std::ostream gzip_stream(&gzip_buffer);
  // A large buffer: the export is a long run of small writes.
  std::vector<char> buffer(1 << 20);
  if (gzip) {
    if (!gzip_buffer.Open(path)) {
      err << "pinscope export: cannot write " << path << '\n';
      return 2;
    }
  } else {
    std::string error;
    if (!CreatePrivateFile(path, &error)) {
      err << "pinscope export: " << error << '\n';
      return 2;
    }
    file.open(path, std::ios::binary | std::ios::trunc);
    if (!file) {
      err << "pinscope export: cannot write " << path << '\n';
      return 2;
    }
    file.rdbuf()->pubsetbuf(buffer.data(), static_cast<std::streamsize>(buffer.size()));
  }
  std::ostream& stream = gzip ? gzip_stream : file;

  PerfettoExport exporter(&stream);
  std::string warning;
  std::unique_ptr<NativeNames> names = OpenRunNames(options.run_dir, options.symbols, &warning);
  if (!warning.empty()) err << "pinscope export: warning: " << warning << '\n';
  ReplayOptions replay;
  replay.names = names.get();
  replay.progress = options.progress;
  ReplayEngine engine(std::move(listing), replay);
  engine.AddAnalysis(&exporter);
  // The export is written while the run replays; what is left after is
  // the counters (Finish) and the file's close (gzip's last block).
  if (options.progress != nullptr) options.progress->Stage("replaying");
  engine.Run();
  if (options.progress != nullptr) options.progress->Stage("writing");
  bool failed = stream.fail();
  if (gzip) {
    failed = !gzip_buffer.Close() || failed;
  } else {
    file.close();
    failed = file.fail() || failed;
  }
  if (failed) {
    err << "pinscope export: writing " << options.perfetto_path << " failed\n";
    return 2;
  }
  bool errors = false;
  for (const Problem& problem : engine.info().problems) {
    err << "pinscope export: " << SeverityName(problem.severity) << ": "
        << SanitizeTerminalText(problem.message, false) << '\n';
    errors = errors || problem.severity != Severity::kInfo;
  }
  const ExportStats& stats = exporter.stats();
  out << "wrote " << options.perfetto_path << ": " << FormatCount(stats.process_tracks)
      << (stats.process_tracks == 1 ? " process, " : " processes, ")
      << FormatCount(stats.thread_tracks) << (stats.thread_tracks == 1 ? " thread, " : " threads, ")
      << FormatCount(stats.copy_slices) << " copies, " << FormatCount(stats.sync_slices)
      << " syncs, " << FormatCount(stats.worker_batches) << " worker batches, "
      << FormatCount(stats.loader_slices) << " DataLoader spans, "
      << FormatCount(stats.device_slices) << " device activities, " << FormatCount(stats.flows)
      << " flows, " << FormatCount(stats.counter_tracks) << " counter tracks"
      << (gzip ? " (gzip)" : "") << "\n"
      << "open it at https://ui.perfetto.dev (Open trace file) or with trace_processor\n";
  return errors ? 1 : 0;
}

}  // namespace pinscope
