// Copy statistics: the copy table, the pageable staging estimate (host-blocked
// time minus the time at the calibrated pinned bandwidth, per copy, never
// below zero) and the largest pageable copies with their buffers.
#include "analyzer/analyses/copy_analysis.h"

#include <algorithm>
#include <tuple>

#include "analyzer/common/format.h"
#include "analyzer/common/trace_names.h"

namespace pinscope {

double CopyRow::AchievedGbps() const {
  // bytes per ns is GB/s (1e9 bytes per second).
  return blocked_ns == 0 ? 0 : static_cast<double>(bytes) / static_cast<double>(blocked_ns);
}

void CopyRow::Add(const CopyRow& other) {
  count += other.count;
  bytes += other.bytes;
  blocked_ns += other.blocked_ns;
  failed += other.failed;
  pinned_estimate_ns += other.pinned_estimate_ns;
  loss_ns += other.loss_ns;
}

BufferInfo BufferInfo::From(const HostBuffer& buffer) {
  BufferInfo info;
  info.kind = buffer.kind;
  info.offset = buffer.offset;
  if (buffer.kind == HostBuffer::Kind::kAlloc && buffer.alloc != nullptr) {
    info.api = buffer.alloc->api;
    info.alloc_size = buffer.alloc->size;
    info.alloc_address = buffer.alloc->address;
    info.alloc_tid = buffer.alloc->tid;
  } else if (buffer.kind == HostBuffer::Kind::kShm && buffer.segment != nullptr) {
    info.segment_name = buffer.segment->name;
    info.creator_pid = buffer.segment->creator != nullptr ? buffer.segment->creator->pid() : 0;
    info.segment_size = buffer.segment->size;
  }
  return info;
}

const char* BufferInfo::KindName() const {
  switch (kind) {
    case HostBuffer::Kind::kAlloc:
      return "alloc";
    case HostBuffer::Kind::kShm:
      return "shm";
    default:
      return "unknown";
  }
}

std::string BufferInfo::Describe() const {
  switch (kind) {
    case HostBuffer::Kind::kAlloc:
      return std::string(AllocApiName(api)) + " " + FormatBytes(alloc_size);
    case HostBuffer::Kind::kShm: {
      std::string text = "shm " + (segment_name.empty() ? std::string("(unnamed)") : segment_name) +
                         " " + FormatBytes(segment_size);
      text += creator_pid != 0 ? " by pid " + std::to_string(creator_pid) : " (untraced creator)";
      return text;
    }
    default:
      return "not a recorded buffer";
  }
}

CopyAnalysis::CopyAnalysis(const Calibration& calibration, int top, int stack_depth)
    : calibration_(calibration),
      gbps_(calibration),
      top_(top > 0 ? static_cast<size_t>(top) : 0),
      stack_depth_(stack_depth) {}

CopyAnalysis::Cost CopyAnalysis::CostOf(const CopyContext& context) const {
  const trace::CopyEvent& copy = context.copy;
  const trace::Direction direction = copy.direction();
  const bool host_device = direction == trace::H2D || direction == trace::D2H;
  Cost cost;
  CopyRow& one = cost.row;
  one.count = 1;
  one.bytes = copy.bytes();
  one.blocked_ns = context.blocked_ns;
  one.failed = copy.result() != 0 ? 1 : 0;
  if (host_device) {
    const double gbps = gbps_.Pinned(direction == trace::H2D, copy.bytes());
    if (gbps > 0)
      one.pinned_estimate_ns = static_cast<uint64_t>(static_cast<double>(copy.bytes()) / gbps);
  }
  cost.pageable = IsPageableHostCopy(copy) && copy.result() == 0;
  if (cost.pageable && one.blocked_ns > one.pinned_estimate_ns) {
    one.loss_ns = one.blocked_ns - one.pinned_estimate_ns;
  }
  return cost;
}

void CopyAnalysis::OnCopy(const CopyContext& context) {
  const trace::CopyEvent& copy = context.copy;
  const trace::Direction direction = copy.direction();
  trace::MemoryKind kind = HostKind(copy);
  if (direction == trace::D2D || direction == trace::PEER) kind = trace::DEVICE;
  const Cost cost = CostOf(context);
  const CopyRow& one = cost.row;
  const bool pageable = cost.pageable;
  by_key_[{static_cast<int>(direction), static_cast<int>(kind)}].Add(one);
  const ProcessState& process = context.event.process;
  const std::pair<int, uint32_t> thread_key{process.index(), context.event.packet.tid()};
  if (last_thread_ == nullptr || last_thread_key_ != thread_key) {
    last_thread_ = &by_thread_[thread_key];  // map nodes do not move
    last_thread_key_ = thread_key;
  }
  ThreadCopies& thread = *last_thread_;
  thread.process_index = process.index();
  thread.pid = process.pid();
  thread.tid = context.event.packet.tid();
  ++thread.copies;
  thread.blocked_ns += one.blocked_ns;
  if (!pageable) return;

  (direction == trace::H2D ? pageable_h2d_ : pageable_d2h_).Add(one);
  by_buffer_[static_cast<size_t>(context.buffer.kind)].Add(one);
  ++thread.pageable_copies;
  ++(direction == trace::H2D ? thread.pageable_h2d : thread.pageable_d2h);
  thread.pageable_bytes += one.bytes;
  thread.pageable_blocked_ns += one.blocked_ns;
  thread.pinned_estimate_ns += one.pinned_estimate_ns;
  thread.loss_ns += one.loss_ns;

  if (top_ == 0) return;
  // Kept sorted by (bytes desc, time asc): a new copy enters only if it
  // beats the smallest kept one, so equal sizes keep the earliest.
  const auto before = [](const LargeCopy& a, const LargeCopy& b) {
    return std::make_tuple(b.bytes, a.time_ns, a.pid) < std::make_tuple(a.bytes, b.time_ns, b.pid);
  };
  if (largest_.size() == top_ && copy.bytes() <= largest_.back().bytes) return;
  LargeCopy record;
  record.process_index = process.index();
  record.pid = process.pid();
  record.tid = context.event.packet.tid();
  record.time_ns = context.event.packet.timestamp_ns();
  record.direction = direction;
  record.api = copy.api();
  record.stream = copy.stream();
  record.bytes = copy.bytes();
  record.blocked_ns = one.blocked_ns;
  record.loss_ns = one.loss_ns;
  record.stack_id = copy.stack_id();
  record.buffer = BufferInfo::From(context.buffer);
  record.stack = process.DescribeStack(copy.stack_id(), stack_depth_);
  largest_.insert(std::upper_bound(largest_.begin(), largest_.end(), record, before),
                  std::move(record));
  if (largest_.size() > top_) largest_.pop_back();
}

void CopyAnalysis::Finish(const RunInfo& run) {
  rows_.clear();
  total_ = CopyRow();
  for (const auto& [key, row] : by_key_) {
    CopyRow copy = row;
    copy.direction = static_cast<trace::Direction>(key.first);
    copy.kind = static_cast<trace::MemoryKind>(key.second);
    rows_.push_back(copy);
    total_.Add(copy);
  }
  pageable_h2d_.direction = trace::H2D;
  pageable_h2d_.kind = trace::PAGEABLE;
  pageable_d2h_.direction = trace::D2H;
  pageable_d2h_.kind = trace::PAGEABLE;
  threads_.clear();
  for (const auto& [key, thread] : by_thread_) threads_.push_back(thread);
  std::stable_sort(threads_.begin(), threads_.end(),
                   [](const ThreadCopies& a, const ThreadCopies& b) {
                     return std::make_tuple(b.loss_ns, b.pageable_blocked_ns, b.blocked_ns) <
                            std::make_tuple(a.loss_ns, a.pageable_blocked_ns, a.blocked_ns);
                   });
}

CopyRow CopyAnalysis::PageableTotal() const {
  CopyRow sum = pageable_h2d_;
  sum.Add(pageable_d2h_);
  sum.direction = trace::DIR_UNKNOWN;
  sum.kind = trace::PAGEABLE;
  return sum;
}

double CopyAnalysis::CalibratedPinnedGbps(const CopyRow& row) const {
  if ((row.direction != trace::H2D && row.direction != trace::D2H) || row.count == 0) return 0;
  return calibration_.PinnedGbps(row.direction == trace::H2D, row.bytes / row.count);
}

}  // namespace pinscope
