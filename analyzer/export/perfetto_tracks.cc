// Perfetto export, the job's shape: process and thread names (main process,
// DataLoader workers, pin-memory thread), DataLoader spans and worker batches
// as slices, host-call -> device-record flows, the program-pinned and GPU
// busy counters, and the interned names every TrackEvent refers to.
#include <algorithm>
#include <string_view>

#include "analyzer/common/format.h"
#include "analyzer/export/perfetto_export.h"
#include "perfetto_subset.pb.h"

namespace pinscope {

namespace {

using perfetto::TrackEvent;
using PerfettoPacket = perfetto::TracePacket;

constexpr uint64_t kCounterTrackTag = 2ull << 56;  // as in perfetto_export.cc
constexpr uint64_t kBusyTrackTag = 4ull << 56;     // GPU busy counters, by device id
constexpr size_t kProcessNameWidth = 100;
// Two hand-overs of one worker's segments closer than this are one batch's
// tensors (the main process unpickles a batch's tensors together).
constexpr uint64_t kHandOverGapNs = 1000000;

// Its id, adding `name` to the packet's interned data on first use.
template <typename Add>
uint64_t Intern(std::unordered_map<std::string, uint64_t>& table, const std::string& name,
                PerfettoPacket* packet, Add add) {
  auto [it, inserted] = table.try_emplace(name, table.size() + 1);
  if (inserted) {
    auto* entry = add(packet->mutable_interned_data());
    entry->set_iid(it->second);
    entry->set_name(name);
  }
  return it->second;
}

std::string Basename(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

const char* LoaderSliceName(trace::LoaderEventKind kind) {
  switch (kind) {
    case trace::LOADER_NEXT:
      return "DataLoader __next__";
    case trace::LOADER_RECV:
      return "DataLoader recv (wait for a worker's batch)";
    case trace::LOADER_PIN:
      return "pin_memory (batch)";
    case trace::LOADER_FETCH:
      return "make batch";
    default:
      return nullptr;
  }
}

}  // namespace

uint64_t NameInterner::Event(const std::string& name) {
  return Intern(events_, name, packet_, [](auto* data) { return data->add_event_names(); });
}

uint64_t NameInterner::Annotation(const std::string& name) {
  return Intern(annotations_, name, packet_,
                [](auto* data) { return data->add_debug_annotation_names(); });
}

uint64_t NameInterner::Category(const std::string& name) {
  return Intern(categories_, name, packet_,
                [](auto* data) { return data->add_event_categories(); });
}

uint64_t PerfettoExport::FlowId(int process_index, uint64_t call_id) {
  // 24 bits of process index above 40 bits of call id: unique in the run.
  return (static_cast<uint64_t>(process_index + 1) << 40) | (call_id & ((1ull << 40) - 1));
}

std::string PerfettoExport::ProcessName(const ProcessState& process) const {
  if (process.helper()) {
    const std::string exe = process.header().cmdline().empty()
                                ? process.CommandLine()
                                : Basename(process.header().cmdline(0));
    return Truncate("helper: " + exe, kProcessNameWidth);
  }
  if (auto it = worker_ids_.find(process.index()); it != worker_ids_.end()) {
    return "DataLoader worker " + std::to_string(it->second);
  }
  switch (process.origin()) {
    case trace::ORIGIN_ROOT:
      return "main process";
    case trace::ORIGIN_FORK:
      return "forked process";  // a worker until its first LOADER_FETCH says which
    case trace::ORIGIN_EXEC:
      return Truncate("exec: " + process.CommandLine(), kProcessNameWidth);
    default:
      return Truncate(process.CommandLine(), kProcessNameWidth);
  }
}

std::string PerfettoExport::ThreadName(const ProcessState& process, uint32_t tid) const {
  const uint64_t key = (static_cast<uint64_t>(process.index()) << 32) | tid;
  if (pin_threads_.count(key)) return "pin-memory thread";
  if (tid == process.pid()) return "main thread";
  auto it = process.threads().find(tid);
  if (it != process.threads().end() && !it->second.empty()) return it->second;
  return "thread " + std::to_string(tid);
}

void PerfettoExport::RenameThread(const ProcessState& process, uint32_t tid) {
  const uint64_t key = (static_cast<uint64_t>(process.index()) << 32) | tid;
  auto it = threads_.find(key);
  if (it == threads_.end()) return;  // named when its track is first written
  const std::string name = ThreadName(process, tid);
  if (name == it->second.name) return;
  it->second.name = name;
  WriteThreadDescriptor(process, tid, it->second, process.start_ns());
}

void PerfettoExport::OnLoader(const Event& event, const trace::LoaderEvent& loader) {
  const ProcessState& process = event.process;
  const uint32_t tid = event.packet.tid() == 0 ? process.pid() : event.packet.tid();
  if (loader.kind() == trace::LOADER_ITER) loader_hook_ = true;
  if (loader.kind() == trace::LOADER_FETCH && loader.worker_id() >= 0 &&
      worker_ids_.try_emplace(process.index(), loader.worker_id()).second &&
      process_names_[process.index()] != ProcessName(process)) {
    WriteProcessTrack(process);  // the same track, now named "DataLoader worker N"
  }
  if (loader.kind() == trace::LOADER_PIN &&
      pin_threads_.try_emplace((static_cast<uint64_t>(process.index()) << 32) | tid, true).second) {
    RenameThread(process, tid);
  }
  const char* name = LoaderSliceName(loader.kind());
  if (name == nullptr) return;
  const uint64_t begin = event.packet.timestamp_ns();
  const uint64_t end = std::max(loader.end_ns(), begin);
  HostSlice(
      process, tid, begin, end, name, "dataloader",
      [&](EventArgs& args) {
        auto annotate = [&](const char* key, uint64_t value) {
          auto* a = args.event.add_debug_annotations();
          a->set_name_iid(args.names.Annotation(key));
          a->set_uint_value(value);
        };
        annotate("batch", loader.index());
        if (loader.kind() == trace::LOADER_FETCH) {
          if (loader.worker_id() >= 0) annotate("worker_id", loader.worker_id());
          if (loader.batch_samples() != 0) annotate("samples", loader.batch_samples());
        }
        if (loader.has_usage_begin() && loader.has_usage_end() &&
            loader.usage_end().cpu_ns() >= loader.usage_begin().cpu_ns()) {
          annotate("cpu_ns", loader.usage_end().cpu_ns() - loader.usage_begin().cpu_ns());
        }
      },
      /*call=*/false);
  ++stats_.loader_slices;
  if (loader.kind() == trace::LOADER_FETCH) ++stats_.worker_batches;
}

void PerfettoExport::ShmBatch(const ShmContext& context) {
  // Without the Python hook a worker's batch is seen through /dev/shm: the
  // collated tensors are made in a segment the worker creates, and handed
  // over when the main process maps it. The slice runs from the segment's
  // creation to that hand-over, on the worker's main thread.
  if (loader_hook_) return;
  const ShmSegment& segment = *context.segment;
  const ProcessState* creator = segment.creator;
  if (creator == nullptr || creator->origin() != trace::ORIGIN_FORK || creator->helper() ||
      segment.memfd || segment.driver_internal) {
    return;
  }
  const ProcessState& process = context.event.process;
  if (&process == creator) {
    worker_segments_.try_emplace(segment.id, segment.first_seen_ns);
    return;
  }
  if (context.shm.op() != trace::SHM_MAP) return;
  auto it = worker_segments_.find(segment.id);
  if (it == worker_segments_.end()) return;
  const uint64_t created = it->second;
  worker_segments_.erase(it);
  const uint64_t handed = context.event.time_ns;
  uint64_t& last = worker_batch_end_[creator->index()];
  if (last != 0 && handed < last + kHandOverGapNs) {
    last = std::max(last, handed);  // another tensor of the batch just drawn
    return;
  }
  last = handed;
  HostSlice(*creator, creator->pid(), created, handed, "make batch (from /dev/shm)", "dataloader",
            [&](EventArgs& args) {
              auto* a = args.event.add_debug_annotations();
              a->set_name_iid(args.names.Annotation("segment"));
              a->set_string_value(segment.name);
            });
  ++stats_.worker_batches;
}

void PerfettoExport::OnCorrelation(const Event& event,
                                   const trace::ExternalCorrelation& correlation) {
  correlations_[(static_cast<uint64_t>(event.process.index()) << 32) |
                correlation.correlation_id()] = correlation.call_id();
}

void PerfettoExport::OnAlloc(const Event& event, const LiveAlloc& alloc) {
  if (alloc.api != trace::CUDA_HOST_ALLOC) return;
  const ProcessState& process = event.process;
  // The call itself where the shim timed it (HostAlloc.duration_ns): the
  // driver pins the block's pages inside it, on the calling thread (torch's
  // pin thread, inside pin_memory(), when its caching allocator grows).
  if (alloc.duration_ns > 0) {
    HostSlice(process, alloc.tid, event.time_ns, event.time_ns + alloc.duration_ns,
              "cudaHostAlloc " + FormatBytes(alloc.size), "pinning", [&](EventArgs& args) {
                auto* a = args.event.add_debug_annotations();
                a->set_name_iid(args.names.Annotation("bytes"));
                a->set_uint_value(alloc.size);
              });
  }
  const uint64_t uuid = kCounterTrackTag | (ProcessUuid(process.index()) & ~(1ull << 56)) | 4;
  CounterTrack(uuid, ProcessUuid(process.index()), "pinned bytes (program, cudaHostAlloc)",
               process.start_ns());
  int64_t& bytes = program_pinned_[process.index()];
  bytes += static_cast<int64_t>(alloc.size);
  WriteCounter(uuid, event.time_ns, bytes);
}

void PerfettoExport::OnFree(const Event& event, const LiveAlloc& freed, bool by_realloc) {
  if (freed.api != trace::CUDA_HOST_ALLOC) return;
  auto it = program_pinned_.find(event.process.index());
  if (it == program_pinned_.end()) return;  // allocated before the trace: not counted
  const uint64_t uuid = kCounterTrackTag | (ProcessUuid(event.process.index()) & ~(1ull << 56)) | 4;
  it->second = std::max<int64_t>(0, it->second - static_cast<int64_t>(freed.size));
  WriteCounter(uuid, event.time_ns, it->second);
}

void PerfettoExport::WriteBusyCounters() {
  // GPU busy per kBusyBucketNs bucket: the share of the bucket in which the
  // device ran at least one copy, memset or kernel (streams merged).
  for (auto& [device, intervals] : busy_) {
    if (intervals.empty()) continue;
    std::sort(intervals.begin(), intervals.end());
    const uint64_t parent = devices_[device];
    const uint64_t uuid = kBusyTrackTag | device;
    const uint64_t first = intervals.front().first / kBusyBucketNs * kBusyBucketNs;
    CounterTrack(uuid, parent, "GPU " + std::to_string(device) + " busy (share of each ms)", first,
                 /*bytes=*/false);
    std::vector<uint64_t> busy;  // ns per bucket
    uint64_t run_begin = intervals.front().first, run_end = intervals.front().second;
    auto add = [&](uint64_t b, uint64_t e) {
      while (b < e) {
        const size_t bucket = (b - first) / kBusyBucketNs;
        const uint64_t bucket_end = first + (bucket + 1) * kBusyBucketNs;
        if (busy.size() <= bucket) busy.resize(bucket + 1, 0);
        const uint64_t upto = std::min(e, bucket_end);
        busy[bucket] += upto - b;
        b = upto;
      }
    };
    for (const auto& [b, e] : intervals) {
      if (b > run_end) {
        add(run_begin, run_end);
        run_begin = b;
      }
      run_end = std::max(run_end, e);
    }
    add(run_begin, run_end);
    double written = 0;
    for (size_t i = 0; i < busy.size(); ++i) {
      const double share = std::min(1.0, static_cast<double>(busy[i]) / kBusyBucketNs);
      if (share == written) continue;
      PerfettoPacket& packet = NewPacket(first + i * kBusyBucketNs);
      packet.set_sequence_flags(PerfettoPacket::SEQ_NEEDS_INCREMENTAL_STATE);
      TrackEvent* event = packet.mutable_track_event();
      event->set_type(TrackEvent::TYPE_COUNTER);
      event->set_track_uuid(uuid);
      event->set_double_counter_value(share);
      Write();
      ++stats_.counter_values;
      written = share;
    }
    if (written != 0) WriteCounter(uuid, first + busy.size() * kBusyBucketNs, 0);
  }
  busy_.clear();
}

}  // namespace pinscope
