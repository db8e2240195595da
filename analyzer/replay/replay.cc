// Replay engine: k-way merge of the per-process streams by time, the
// per-process state (interned data, live allocations, shm mappings) and the
// run-wide shm segment registry joined on (device, inode).
#include "analyzer/replay/replay.h"

#include <google/protobuf/arena.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <limits>
#include <queue>
#include <tuple>
#include <utility>

#include "analyzer/common/trace_names.h"
#include "analyzer/read/trace_reader.h"

namespace pinscope {

// ---------------------------------------------------------------------------
// ProcessState

ProcessState::ProcessState(int index, const RunFile& file)
    : index_(index), path_(file.path), header_(file.header) {
  start_ns_ = file.start_ns;
  end_ns_ = file.start_ns;
}

std::string ProcessState::CommandLine() const {
  std::string line;
  for (const std::string& arg : header_.cmdline()) {
    if (!line.empty()) line += ' ';
    line += arg;
  }
  if (line.empty()) line = header_.exe();
  return line;
}

std::string ProcessState::ThreadName(uint32_t tid) const {
  if (tid == pid()) return "main thread";
  auto it = threads_.find(tid);
  if (it != threads_.end() && !it->second.empty()) {
    return "thread " + std::to_string(tid) + " (" + it->second + ")";
  }
  return "thread " + std::to_string(tid);
}

const std::string* ProcessState::String(uint64_t id) const {
  auto it = strings_.find(id);
  return it == strings_.end() ? nullptr : &it->second;
}

const trace::Stack* ProcessState::Stack(uint64_t id) const {
  auto it = stacks_.find(id);
  return it == stacks_.end() ? nullptr : &it->second;
}

const trace::PythonFrame* ProcessState::PythonFrame(uint64_t id) const {
  auto it = frames_.find(id);
  return it == frames_.end() ? nullptr : &it->second;
}

HostBuffer ProcessState::ResolveHost(uint64_t address) const {
  HostBuffer buffer;
  if (address == 0) return buffer;
  uint64_t start = 0;
  if (const LiveAlloc* alloc = allocations_.Find(address, &start)) {
    buffer.kind = HostBuffer::Kind::kAlloc;
    buffer.alloc = alloc;
    buffer.offset = address - start;
    return buffer;
  }
  if (const ShmMapping* mapping = mappings_.Find(address, &start)) {
    buffer.kind = HostBuffer::Kind::kShm;
    buffer.mapping = mapping;
    buffer.segment = mapping->segment;
    buffer.offset = mapping->offset + (address - mapping->base_address);
  }
  return buffer;
}

std::vector<std::string> ProcessState::DescribeStack(uint64_t stack_id, int depth) const {
  std::vector<std::string> frames;
  const trace::Stack* stack = stack_id == 0 ? nullptr : Stack(stack_id);
  if (stack == nullptr || depth <= 0) return frames;
  const auto limit = static_cast<size_t>(depth);
  for (uint64_t frame_id : stack->python_frames()) {
    if (frames.size() == limit) break;
    const trace::PythonFrame* frame = PythonFrame(frame_id);
    if (frame == nullptr) continue;
    const std::string* file = String(frame->filename_id());
    const std::string* function = String(frame->function_id());
    frames.push_back((file != nullptr ? *file : std::string("?")) + ":" +
                     std::to_string(frame->line()) + " " +
                     (function != nullptr ? *function : std::string("?")));
  }
  if (!frames.empty()) return frames;
  return DescribeNativeStack(*this, stack_id, depth);
}

// ---------------------------------------------------------------------------
// Merge

// One process file being streamed; `next` is its lookahead packet.
struct ReplayEngine::Stream {
  // The packets are parsed into an arena, reset every kPacketsPerArena (64)
  // packets: a packet's sub-messages (the event, its ThreadUsage) are then
  // bump-allocated instead of a malloc and a free each (docs/benchmarks.md,
  // "Replay speed"). Memory: a 16 KiB block per stream not finished (more
  // only while 64 packets do not fit in it), none after its end.
  static constexpr int kPacketsPerArena = 64;
  static constexpr size_t kArenaBlockBytes = 16 * 1024;
  ProcessState* process = nullptr;
  std::unique_ptr<TraceReader> reader;
  // Position in open_streams_ while the reader holds its file open.
  std::optional<std::list<size_t>::iterator> open_at;
  std::unique_ptr<char[]> block;  // the arena's first block (declared first: outlives it)
  std::unique_ptr<google::protobuf::Arena> arena;
  trace::TracePacket* next = nullptr;
  int packets_in_arena = 0;
  // Merge key of `next`: its timestamp, raised to the previous key of this
  // file. Events are appended when calls return but stamped at entry, so a
  // file's timestamps can step back a little; the file's own order is the
  // truth within a process, and this keeps it.
  uint64_t key = 0;

  bool Advance() {
    if (next == nullptr || ++packets_in_arena >= kPacketsPerArena) {
      // The previous packet was dispatched: nothing points into the arena.
      if (arena == nullptr) {
        // Its first block is the stream's own and survives Reset: a copy
        // packet takes about 200 bytes, so 64 fit and Reset frees nothing.
        block = std::make_unique<char[]>(kArenaBlockBytes);
        google::protobuf::ArenaOptions options;
        options.initial_block = block.get();
        options.initial_block_size = kArenaBlockBytes;
        arena = std::make_unique<google::protobuf::Arena>(options);
      }
      arena->Reset();
      next = google::protobuf::Arena::CreateMessage<trace::TracePacket>(arena.get());
      packets_in_arena = 0;
    }
    if (!reader->Next(next)) return false;
    key = std::max(key, next->timestamp_ns());
    return true;
  }
  void Release() {
    next = nullptr;
    arena.reset();
    block.reset();
  }
};

ReplayEngine::ReplayEngine(RunListing listing, ReplayOptions options)
    : listing_(std::move(listing)), options_(options) {
  info_.run_dir = listing_.run_dir;
  info_.run_id = listing_.run_id;
  info_.problems = listing_.problems;
  for (size_t i = 0; i < listing_.files.size(); ++i) {
    processes_.push_back(std::make_unique<ProcessState>(static_cast<int>(i), listing_.files[i]));
    processes_.back()->names_ = options_.names;
  }
}

ReplayEngine::~ReplayEngine() = default;

void ReplayEngine::BuildTree() {
  for (size_t i = 0; i < processes_.size(); ++i) {
    ProcessState& child = *processes_[i];
    ProcessState* parent = nullptr;
    // Only earlier processes can be parents: that rules out cycles.
    if (child.origin() == trace::ORIGIN_EXEC) {
      // exec without fork keeps the pid: the previous image is the parent.
      for (size_t j = 0; j < i; ++j) {
        if (processes_[j]->pid() == child.pid()) parent = processes_[j].get();
      }
    }
    const uint32_t parent_pid =
        child.header().parent_pid() != 0 ? child.header().parent_pid() : child.ppid();
    if (parent == nullptr && parent_pid != 0) {
      for (size_t j = 0; j < i; ++j) {
        if (processes_[j]->pid() == parent_pid) parent = processes_[j].get();
      }
    }
    child.parent_ = parent;
    if (parent != nullptr) parent->children_.push_back(&child);
  }
  for (const auto& process : processes_) {
    if (process->origin() == trace::ORIGIN_ROOT && process->parent() == nullptr) {
      info_.root = process.get();
      break;
    }
  }
  if (info_.root == nullptr && !processes_.empty()) info_.root = processes_[0].get();
}

ScopedOpenFileLimit::ScopedOpenFileLimit(uint64_t want) {
  struct rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const auto value = [](rlim_t v) {
    return v == RLIM_INFINITY ? std::numeric_limits<uint64_t>::max() : static_cast<uint64_t>(v);
  };
  soft_ = value(limit.rlim_cur);
  if (soft_ >= want || limit.rlim_cur == limit.rlim_max) return;
  saved_ = static_cast<uint64_t>(limit.rlim_cur);
  limit.rlim_cur = value(limit.rlim_max) > want ? static_cast<rlim_t>(want) : limit.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  raised_ = true;
  soft_ = value(limit.rlim_cur);
}

ScopedOpenFileLimit::~ScopedOpenFileLimit() {
  if (!raised_) return;
  struct rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  limit.rlim_cur = static_cast<rlim_t>(saved_);
  setrlimit(RLIMIT_NOFILE, &limit);
}

void ReplayEngine::TouchStream(std::vector<Stream>& streams, size_t i) {
  Stream& stream = streams[i];
  if (stream.open_at) {
    open_streams_.splice(open_streams_.end(), open_streams_, *stream.open_at);
  } else {
    stream.open_at = open_streams_.insert(open_streams_.end(), i);
  }
  while (open_streams_.size() > open_limit_) {
    Stream& oldest = streams[open_streams_.front()];
    oldest.reader->Release();
    oldest.open_at.reset();
    open_streams_.pop_front();
  }
  peak_open_files_ = std::max(peak_open_files_, open_streams_.size());
}

void ReplayEngine::ForgetStream(Stream& stream) {
  if (stream.open_at) open_streams_.erase(*stream.open_at);
  stream.open_at.reset();
}

void ReplayEngine::TellProgress(const std::vector<Stream>& streams) const {
  // O(open streams) every kProgressEveryPackets packets; a released
  // reader keeps its offset, an ended stream is in finished_bytes_.
  uint64_t done = finished_bytes_;
  for (const Stream& stream : streams) {
    if (stream.reader) done += stream.reader->consumed_bytes();
  }
  options_.progress->Bytes(done, std::max(done, total_bytes_), info_.packets);
}

void ReplayEngine::Run() {
  // Every file opens once, for its header and first packet, and then
  // stays open while the limit allows; see ReplayOptions::max_open_files.
  ScopedOpenFileLimit fd_limit(
      std::min<uint64_t>(processes_.size() + ReplayOptions::kReservedFds,
                         ReplayOptions::kMaxOpenFiles + ReplayOptions::kReservedFds));
  open_streams_.clear();
  open_limit_ = options_.max_open_files;
  if (open_limit_ == 0) {
    const uint64_t soft = fd_limit.soft();
    open_limit_ = soft > ReplayOptions::kReservedFds + 8
                      ? static_cast<size_t>(std::min<uint64_t>(soft - ReplayOptions::kReservedFds,
                                                               ReplayOptions::kMaxOpenFiles))
                      : 8;
  }
  BuildTree();
  info_.start_ns = std::numeric_limits<uint64_t>::max();
  for (const auto& process : processes_) {
    info_.processes.push_back(process.get());
    info_.start_ns = std::min(info_.start_ns, process->start_ns());
  }
  if (processes_.empty()) info_.start_ns = 0;
  for (const auto& process : processes_) {
    for (Analysis* analysis : analyses_) analysis->OnProcess(*process);
  }

  std::vector<Stream> streams(processes_.size());
  total_bytes_ = 0;
  finished_bytes_ = 0;
  for (const RunFile& file : listing_.files) total_bytes_ += file.bytes;
  if (options_.progress != nullptr) options_.progress->Bytes(0, total_bytes_, 0);
  // Min-heap on (key, process index): ties go to the earlier-started process.
  using Item = std::pair<uint64_t, size_t>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> heap;
  const auto finish_stream = [&](Stream& stream) {
    const Status& status = stream.reader->status();
    if (!status.ok()) info_.problems.push_back(ProblemFrom(stream.process->path(), status));
    const ProcessState& p = *stream.process;
    if (const uint64_t reversed = p.reversed_copies_ + p.reversed_syncs_ + p.reversed_device_) {
      std::string kinds;
      for (auto [n, one, many] :
           {std::tuple{p.reversed_copies_, "copy", "copies"},
            std::tuple{p.reversed_syncs_, "sync", "syncs"},
            std::tuple{p.reversed_device_, "device activity", "device activities"}}) {
        if (n == 0) continue;
        kinds += (kinds.empty() ? "" : ", ") + std::to_string(n) + " " + (n == 1 ? one : many);
      }
      info_.problems.push_back(Problem{p.path(), Severity::kWarning,
                                       "file " + p.path() + ": " + std::to_string(reversed) +
                                           (reversed == 1 ? " interval ends before it starts ("
                                                          : " intervals end before they start (") +
                                           kinds + "): taken as 0 long"});
    }
    EndProcess(*stream.process);
    EvictClosedSegments();
    ForgetStream(stream);
    finished_bytes_ += stream.reader->consumed_bytes();
    stream.reader.reset();  // releases the file and its buffer
    stream.Release();
  };
  for (size_t i = 0; i < processes_.size(); ++i) {
    Stream& stream = streams[i];
    stream.process = processes_[i].get();
    stream.key = stream.process->start_ns();
    stream.reader = std::make_unique<TraceReader>(stream.process->path(), options_.chunk_bytes);
    trace::ProcessHeader header;
    if (!stream.reader->Open() || !stream.reader->ReadHeader(&header, nullptr)) {
      finish_stream(stream);  // the file changed since the listing
      continue;
    }
    TouchStream(streams, i);
    if (stream.Advance()) {
      ClampReversed(*stream.process, stream.next);
      heap.emplace(stream.key, i);
    } else {
      finish_stream(stream);
    }
  }

  // A countdown, not a modulo of info_.packets: one decrement and branch per
  // packet is all the progress line costs the loop.
  uint64_t until_progress = ReplayOptions::kProgressEveryPackets;
  while (!heap.empty()) {
    if (--until_progress == 0) {
      until_progress = ReplayOptions::kProgressEveryPackets;
      if (options_.progress != nullptr) TellProgress(streams);
    }
    const size_t i = heap.top().second;
    heap.pop();
    Stream& stream = streams[i];
    Dispatch(*stream.process, *stream.next, stream.key);
    EvictClosedSegments();  // only between events: handlers hold segment pointers
    ++info_.packets;
    TouchStream(streams, i);  // may reopen it below, so it must count as open
    if (stream.Advance()) {
      ClampReversed(*stream.process, stream.next);
      heap.emplace(stream.key, i);
    } else {
      finish_stream(stream);
    }
  }

  if (options_.progress != nullptr) TellProgress(streams);
  info_.end_ns = info_.start_ns;
  for (const auto& process : processes_) info_.end_ns = std::max(info_.end_ns, process->end_ns());
  info_.segments = next_segment_id_ - 1;
  for (Analysis* analysis : analyses_) analysis->Finish(info_);
}

// ---------------------------------------------------------------------------
// Dispatch

void ReplayEngine::ClampReversed(ProcessState& process, trace::TracePacket* packet) {
  if (packet->has_copy()) {
    trace::CopyEvent* copy = packet->mutable_copy();
    if (copy->end_ns() != 0 && copy->end_ns() < packet->timestamp_ns()) {
      copy->set_end_ns(packet->timestamp_ns());
      ++process.reversed_copies_;
    }
  } else if (packet->has_sync()) {
    trace::SyncEvent* sync = packet->mutable_sync();
    if (sync->end_ns() != 0 && sync->end_ns() < packet->timestamp_ns()) {
      sync->set_end_ns(packet->timestamp_ns());
      ++process.reversed_syncs_;
    }
  } else if (packet->has_device()) {
    trace::DeviceActivity* activity = packet->mutable_device();
    if (activity->end_ns() < activity->start_ns()) {
      if (activity->end_ns() != 0) ++process.reversed_device_;  // 0: no end recorded
      activity->set_end_ns(activity->start_ns());
    }
  }
}

void ReplayEngine::Dispatch(ProcessState& process, const trace::TracePacket& packet,
                            uint64_t time_ns) {
  ++process.packets_;
  process.end_ns_ = std::max(process.end_ns_, time_ns);
  if (packet.tid() != 0) process.threads_.try_emplace(packet.tid());
  const Event event{process, packet, time_ns};
  switch (packet.data_case()) {
    case trace::TracePacket::kHeader:
      info_.problems.push_back(
          Problem{process.path(), Severity::kWarning,
                  "file " + process.path() + ": a second process header was ignored"});
      break;
    case trace::TracePacket::kCopy:
      HandleCopy(event);
      break;
    case trace::TracePacket::kSync:
      for (Analysis* a : analyses_) a->OnSync(event, packet.sync());
      break;
    case trace::TracePacket::kAlloc:
      HandleAlloc(process, event);
      break;
    case trace::TracePacket::kFree:
      HandleFree(process, event);
      break;
    case trace::TracePacket::kShm:
      HandleShm(process, event);
      break;
    case trace::TracePacket::kInternedString:
      process.strings_[packet.interned_string().id()] = packet.interned_string().str();
      break;
    case trace::TracePacket::kStack:
      process.stacks_[packet.stack().id()] = packet.stack();
      break;
    case trace::TracePacket::kPythonFrame:
      process.frames_[packet.python_frame().id()] = packet.python_frame();
      break;
    case trace::TracePacket::kModule:
      process.modules_.push_back(packet.module());
      break;
    case trace::TracePacket::kDevice:
      for (Analysis* a : analyses_) a->OnDevice(event, packet.device());
      break;
    case trace::TracePacket::kCorrelation:
      for (Analysis* a : analyses_) a->OnCorrelation(event, packet.correlation());
      break;
    case trace::TracePacket::kPin:
      for (Analysis* a : analyses_) a->OnPin(event, packet.pin());
      break;
    case trace::TracePacket::kThread:
      process.threads_[packet.thread().tid()] = packet.thread().name();
      break;
    case trace::TracePacket::kNotice:
      for (Analysis* a : analyses_) a->OnNotice(event, packet.notice());
      break;
    case trace::TracePacket::kExit:
      process.exit_ = packet.exit();
      for (Analysis* a : analyses_) a->OnExit(event, packet.exit());
      break;
    case trace::TracePacket::kCuda:
      if (!process.cuda_) process.cuda_ = packet.cuda();
      break;
    case trace::TracePacket::kCounters:
      process.counters_ = packet.counters();
      for (Analysis* a : analyses_) a->OnCounters(event, packet.counters());
      break;
    case trace::TracePacket::kRecording:
      for (Analysis* a : analyses_) a->OnRecording(event, packet.recording());
      break;
    case trace::TracePacket::kUtilization:
      for (Analysis* a : analyses_) a->OnUtilization(event, packet.utilization());
      break;
    case trace::TracePacket::kThreadSample:
      for (Analysis* a : analyses_) a->OnThreadSample(event, packet.thread_sample());
      break;
    case trace::TracePacket::kLoader:
      for (Analysis* a : analyses_) a->OnLoader(event, packet.loader());
      break;
    case trace::TracePacket::DATA_NOT_SET:
      break;  // a newer shim's packet kind: skipped, as the format allows
  }
}

void ReplayEngine::HandleCopy(const Event& event) {
  const trace::CopyEvent& copy = event.packet.copy();
  CopyContext context{event, copy, HostBuffer(), HostAddress(copy), 0};
  if (copy.end_ns() > event.packet.timestamp_ns()) {
    context.blocked_ns = copy.end_ns() - event.packet.timestamp_ns();
  }
  context.buffer = event.process.ResolveHost(context.host_address);
  for (Analysis* a : analyses_) a->OnCopy(context);
}

void ReplayEngine::HandleAlloc(ProcessState& process, const Event& event) {
  const trace::HostAlloc& message = event.packet.alloc();
  if (message.address() == 0) return;  // a failed allocation holds nothing
  if ((message.api() == trace::REALLOC || message.api() == trace::REALLOCARRAY) &&
      message.old_address() != 0) {
    IntervalMap<LiveAlloc>::Removed old;
    if (process.allocations_.EraseExact(message.old_address(), &old)) {
      for (Analysis* a : analyses_) a->OnFree(event, old.value, /*by_realloc=*/true);
    }
  }
  LiveAlloc alloc;
  alloc.id = next_alloc_id_++;
  alloc.api = message.api();
  alloc.address = message.address();
  alloc.size = message.size();
  alloc.alignment = message.alignment();
  alloc.old_address = message.old_address();
  alloc.time_ns = event.time_ns;
  alloc.tid = event.packet.tid();
  alloc.stack_id = message.stack_id();
  alloc.duration_ns = message.duration_ns();
  const uint64_t end = message.address() + std::max<uint64_t>(message.size(), 1);
  // Blocks it overlaps were freed without a record: drop them as freed.
  for (auto& stale : process.allocations_.Insert(message.address(), end, alloc)) {
    for (Analysis* a : analyses_) a->OnFree(event, stale.value, /*by_realloc=*/false);
  }
  for (Analysis* a : analyses_) a->OnAlloc(event, alloc);
}

void ReplayEngine::HandleFree(ProcessState& process, const Event& event) {
  const trace::HostFree& message = event.packet.free();
  const LiveAlloc* live = process.allocations_.FindExact(message.address());
  if (live == nullptr) return;  // below the threshold, or already replaced
  // realloc in place: its HostAlloc (old_address == address) already
  // replaced the block; this free is about the old one.
  if (message.by_realloc() && live->old_address == message.address() &&
      (live->api == trace::REALLOC || live->api == trace::REALLOCARRAY)) {
    return;
  }
  IntervalMap<LiveAlloc>::Removed removed;
  process.allocations_.EraseExact(message.address(), &removed);
  for (Analysis* a : analyses_) a->OnFree(event, removed.value, message.by_realloc());
}

// ---------------------------------------------------------------------------
// Shared memory

ShmSegment* ReplayEngine::FindSegment(ProcessState& process, const trace::ShmEvent& shm) {
  if (shm.inode() != 0) {
    auto it = segment_by_inode_.find({shm.device(), shm.inode()});
    if (it != segment_by_inode_.end()) return segments_.at(it->second).get();
  }
  if (shm.fd() >= 0) {
    auto it = process.fds_.find(shm.fd());
    // An fd now naming another object (dup3 over it: pinscope's pool swaps
    // a worker's batch segment for a slot so) is not its old segment.
    if (it != process.fds_.end() &&
        (shm.inode() == 0 || it->second->inode == 0 ||
         (it->second->device == shm.device() && it->second->inode == shm.inode())))
      return it->second;
  }
  return nullptr;
}

ShmSegment* ReplayEngine::NewSegment(const ProcessState& process, const trace::ShmEvent& shm,
                                     uint64_t time_ns) {
  auto segment = std::make_unique<ShmSegment>();
  segment->id = next_segment_id_++;
  segment->device = shm.device();
  segment->inode = shm.inode();
  segment->name = shm.name();
  const bool created = shm.op() == trace::SHM_CREATE || shm.op() == trace::MEMFD_CREATE;
  segment->creator = created ? &process : nullptr;
  // pinscope's pool slots are memfds too (made by raw system calls, so
  // first seen at a map that carries `pool`): never /dev/shm space.
  segment->memfd = shm.op() == trace::MEMFD_CREATE || shm.pool();
  segment->driver_internal = shm.driver_internal();
  segment->first_seen_ns = time_ns;
  ShmSegment* raw = segment.get();
  segments_.emplace(raw->id, std::move(segment));
  if (raw->inode != 0) segment_by_inode_[{raw->device, raw->inode}] = raw->id;
  // memfd names are labels, not /dev/shm paths: they cannot be opened or
  // unlinked by name.
  if (!raw->name.empty() && !raw->memfd) segment_by_name_[raw->name] = raw->id;
  return raw;
}

void ReplayEngine::BindFd(ProcessState& process, int fd, ShmSegment* segment) {
  auto [it, inserted] = process.fds_.try_emplace(fd, segment);
  if (inserted) {
    ++segment->open_fds;
  } else if (it->second != segment) {
    ShmSegment* previous = it->second;
    --previous->open_fds;
    it->second = segment;
    ++segment->open_fds;
    SegmentMaybeClosed(previous);
  }
}

void ReplayEngine::SegmentMaybeClosed(ShmSegment* segment) {
  if (segment == nullptr || !segment->closed() || segment->eviction_queued) return;
  segment->eviction_queued = true;
  closed_order_.push_back(segment->id);
}

void ReplayEngine::EvictClosedSegments() {
  // Forget the oldest closed segments beyond the cache size, so memory
  // follows the live segments and not the run's length. Run() calls it
  // between events only: a segment forgotten while a handler's loop still
  // held pointers to it (the pieces of one munmap, the mappings a process
  // left) was read after it was freed.
  while (closed_order_.size() - closed_head_ > options_.closed_segments_kept) {
    const uint64_t id = closed_order_[closed_head_++];
    auto it = segments_.find(id);
    if (it == segments_.end()) continue;
    ShmSegment* old = it->second.get();
    old->eviction_queued = false;
    if (!old->closed()) continue;  // mapped again since: keep
    auto by_inode = segment_by_inode_.find({old->device, old->inode});
    if (by_inode != segment_by_inode_.end() && by_inode->second == id) {
      segment_by_inode_.erase(by_inode);
    }
    auto by_name = segment_by_name_.find(old->name);
    if (by_name != segment_by_name_.end() && by_name->second == id) segment_by_name_.erase(by_name);
    for (Analysis* a : analyses_) a->OnShmForgotten(*old);
    segments_.erase(it);
  }
  if (closed_head_ > 4096 && closed_head_ * 2 > closed_order_.size()) {
    closed_order_.erase(closed_order_.begin(), closed_order_.begin() + closed_head_);
    closed_head_ = 0;
  }
}

void ReplayEngine::HandleShm(ProcessState& process, const Event& event) {
  const trace::ShmEvent& shm = event.packet.shm();
  ShmContext context{event, shm};
  ShmSegment* segment = nullptr;
  const auto grow = [&](ShmSegment* s, uint64_t extent) {
    s->size = std::max(s->size, extent);
    if (s->sized_ns == 0 && s->size > 0) s->sized_ns = event.time_ns;
  };
  const auto notify = [&]() {
    context.segment = segment;
    for (Analysis* a : analyses_) a->OnShm(context);
  };
  if (shm.error() != 0 && shm.op() != trace::SHM_SIGBUS) {
    // A failed call changed nothing; consumers still see it (ENOSPC matters).
    segment = FindSegment(process, shm);
    notify();
    return;
  }
  switch (shm.op()) {
    case trace::SHM_CREATE:
    case trace::MEMFD_CREATE:
    case trace::SHM_OPEN: {
      // Join on the inode; an open without one joins a live segment by name.
      // Never on the fd: a number reused after an unrecorded close would
      // join the wrong object.
      if (shm.inode() != 0) {
        auto it = segment_by_inode_.find({shm.device(), shm.inode()});
        if (it != segment_by_inode_.end()) segment = segments_.at(it->second).get();
      } else if (shm.op() == trace::SHM_OPEN && !shm.name().empty()) {
        auto it = segment_by_name_.find(shm.name());
        if (it != segment_by_name_.end()) segment = segments_.at(it->second).get();
      }
      // A create makes a new object even when a dead one's inode comes back.
      if (segment != nullptr && shm.op() != trace::SHM_OPEN && segment->closed()) segment = nullptr;
      if (segment == nullptr) segment = NewSegment(process, shm, event.time_ns);
      if (segment->name.empty()) segment->name = shm.name();
      // An fd already known was closed without a record and reused.
      if (shm.fd() >= 0) BindFd(process, shm.fd(), segment);
      break;
    }
    case trace::SHM_TRUNCATE:
    case trace::SHM_FALLOCATE:
      segment = FindSegment(process, shm);
      if (segment != nullptr) {
        grow(segment, shm.op() == trace::SHM_TRUNCATE ? shm.size() : shm.offset() + shm.size());
      }
      break;
    case trace::SHM_MAP: {
      segment = FindSegment(process, shm);
      // Mapped through an fd we never saw opened (received from another
      // process, or from before tracing): the segment starts here.
      if (segment == nullptr) segment = NewSegment(process, shm, event.time_ns);
      // A worker's swap: the program's fd now names the slot.
      if (shm.pool() && shm.fd() >= 0 && process.fds_.count(shm.fd()) > 0)
        BindFd(process, shm.fd(), segment);
      grow(segment, shm.offset() + shm.size());
      ShmMapping mapping{segment, shm.address(), shm.offset(), event.time_ns, shm.pool()};
      const uint64_t end = shm.address() + std::max<uint64_t>(shm.size(), 1);
      for (auto& stale : process.mappings_.Insert(shm.address(), end, mapping)) {
        --stale.value.segment->live_mappings;
        SegmentMaybeClosed(stale.value.segment);
      }
      ++segment->live_mappings;
      break;
    }
    case trace::SHM_UNMAP:
      RemoveMappings(process, event, shm.address(), shm.address() + shm.size(), false);
      return;  // RemoveMappings notifies per segment
    case trace::SHM_UNLINK: {
      segment = FindSegment(process, shm);
      if (segment == nullptr && !shm.name().empty()) {
        // Unlink by name: the live segment of that name.
        auto it = segment_by_name_.find(shm.name());
        if (it != segment_by_name_.end()) segment = segments_.at(it->second).get();
      }
      if (segment != nullptr && !segment->unlinked) {
        segment->unlinked = true;
        segment->unlinked_ns = event.time_ns;
        auto it = segment_by_name_.find(segment->name);
        if (it != segment_by_name_.end() && it->second == segment->id) segment_by_name_.erase(it);
      }
      break;
    }
    case trace::SHM_CLOSE: {
      auto it = process.fds_.find(shm.fd());
      if (it != process.fds_.end()) {
        segment = it->second;
        --segment->open_fds;
        process.fds_.erase(it);
      }
      break;
    }
    case trace::SHM_UNMAP_DONE:
      break;  // the munmap's duration only (PipelineAnalysis): no segment
    case trace::SHM_SIGBUS: {
      if (const ShmMapping* mapping = process.mappings_.Find(shm.address())) {
        segment = mapping->segment;
      }
      break;
    }
    default:
      break;
  }
  notify();
  SegmentMaybeClosed(segment);
}

void ReplayEngine::RemoveMappings(ProcessState& process, const Event& event, uint64_t start,
                                  uint64_t end, bool implicit) {
  std::vector<ShmMapping> kept;
  auto removed = process.mappings_.EraseRange(start, end, &kept);
  for (const ShmMapping& remainder : kept) ++remainder.segment->live_mappings;
  if (removed.empty() && !implicit) {
    ShmContext context{event, event.packet.shm()};
    for (Analysis* a : analyses_) a->OnShm(context);
    return;
  }
  for (auto& piece : removed) {
    ShmSegment* segment = piece.value.segment;
    --segment->live_mappings;
    trace::TracePacket synthetic;
    const trace::TracePacket* packet = &event.packet;
    if (implicit) {
      synthetic.set_timestamp_ns(event.time_ns);
      synthetic.set_tid(process.pid());
      trace::ShmEvent* shm = synthetic.mutable_shm();
      shm->set_op(trace::SHM_UNMAP);
      shm->set_name(segment->name);
      shm->set_address(piece.start);
      shm->set_size(piece.end - piece.start);
      shm->set_device(segment->device);
      shm->set_inode(segment->inode);
      packet = &synthetic;
    }
    const Event piece_event{process, *packet, event.time_ns};
    ShmContext context{piece_event, packet->shm(), segment, implicit, piece.end - piece.start};
    for (Analysis* a : analyses_) a->OnShm(context);
  }
  for (auto& piece : removed) SegmentMaybeClosed(piece.value.segment);
}

void ReplayEngine::EndProcess(ProcessState& process) {
  process.ended_ = true;
  trace::TracePacket end_packet;
  end_packet.set_timestamp_ns(process.end_ns_);
  const Event event{process, end_packet, process.end_ns_};
  // Whatever the process still had mapped went away with it.
  RemoveMappings(process, event, 0, std::numeric_limits<uint64_t>::max(), /*implicit=*/true);
  std::vector<ShmSegment*> closed;
  for (auto& [fd, segment] : process.fds_) {
    --segment->open_fds;
    closed.push_back(segment);
  }
  process.fds_.clear();
  for (ShmSegment* segment : closed) SegmentMaybeClosed(segment);
  for (Analysis* a : analyses_) a->OnProcessEnd(process);
  // Live allocations die with the process; consumers saw them in OnProcessEnd.
  process.allocations_.Clear();
}

}  // namespace pinscope
