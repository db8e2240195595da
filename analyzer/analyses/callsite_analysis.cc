// Call sites of the pageable staging loss: aggregates CopyAnalysis's per-copy
// cost by (innermost Python frame, innermost native frame) and joins each
// copy to the site that made its buffer. Native frames are spelled by
// DescribeNativeStack (replay/native_names.h): module + offset, with the
// function and line from the names the engine was given (the run's symbols
// file, else the binaries where the report is read).
#include "analyzer/analyses/callsite_analysis.h"

#include <algorithm>
#include <cstdio>
#include <tuple>

namespace pinscope {

namespace {

void AddPid(std::vector<uint32_t>* pids, uint32_t pid) {
  auto at = std::lower_bound(pids->begin(), pids->end(), pid);
  if (at == pids->end() || *at != pid) pids->insert(at, pid);
}

}  // namespace

std::vector<std::string> NativeFrames(const ProcessState& process, uint64_t stack_id, int depth) {
  return DescribeNativeStack(process, stack_id, depth);
}

std::string InnermostPythonFrame(const ProcessState& process, uint64_t stack_id) {
  const trace::Stack* stack = stack_id == 0 ? nullptr : process.Stack(stack_id);
  if (stack == nullptr || stack->python_frames_size() == 0) return std::string();
  std::vector<std::string> frames = process.DescribeStack(stack_id, 1);
  return frames.empty() ? std::string() : frames[0];
}

std::string InnermostNativeFrame(const ProcessState& process, uint64_t stack_id) {
  std::vector<std::string> frames = NativeFrames(process, stack_id, 1);
  return frames.empty() ? std::string() : frames[0];
}

CallSiteAnalysis::CallSiteAnalysis(const CopyAnalysis& copies, int top, int stack_depth)
    : copies_(copies), top_(top > 0 ? static_cast<size_t>(top) : 0), stack_depth_(stack_depth) {}

// Where a buffer was made, for a person: the innermost Python frame that is
// not PyTorch's own plumbing (torch/storage.py's _new_shared and the like)
// - but the DataLoader's collate is where a batch is made, so frames under
// torch/utils/data count.
static bool IsTorchPlumbing(const std::string& frame) {
  const bool in_torch = frame.find("/torch/") != std::string::npos || frame.rfind("torch/", 0) == 0;
  return in_torch && frame.find("torch/utils/data/") == std::string::npos;
}

std::string CallSiteAnalysis::SiteOf(const ProcessState& process, uint64_t stack_id) const {
  if (stack_id == 0) return std::string();
  const trace::Stack* stack = process.Stack(stack_id);
  if (stack != nullptr && stack->python_frames_size() > 0) {
    std::vector<std::string> python = process.DescribeStack(stack_id, 64);
    for (const std::string& frame : python)
      if (!IsTorchPlumbing(frame)) return frame;
    if (!python.empty()) return python[0];
  }
  return InnermostNativeFrame(process, stack_id);
}

void CallSiteAnalysis::OnShm(const ShmContext& context) {
  const trace::ShmOp op = context.shm.op();
  if (op != trace::SHM_CREATE && op != trace::MEMFD_CREATE) return;
  if (context.segment == nullptr || context.shm.error() != 0) return;
  const ProcessState& process = context.event.process;
  Creation& creation = created_[context.segment->id];
  creation.site = SiteOf(process, context.shm.stack_id());
  creation.pid = process.pid();
  creation.forked = process.origin() == trace::ORIGIN_FORK;
}

void CallSiteAnalysis::OnShmForgotten(const ShmSegment& segment) { created_.erase(segment.id); }

void CallSiteAnalysis::OnCopy(const CopyContext& context) {
  const CopyAnalysis::Cost cost = copies_.CostOf(context);
  if (!cost.pageable) return;
  const ProcessState& process = context.event.process;
  const uint64_t stack_id = context.copy.stack_id();
  Accumulator* found = nullptr;
  if (last_site_.acc != nullptr && last_site_.process_index == process.index() &&
      last_site_.stack_id == stack_id) {
    found = last_site_.acc;
    (last_site_.has_stack ? with_stack_ : without_stack_) += 1;
  } else {
    const trace::Stack* stack = stack_id == 0 ? nullptr : process.Stack(stack_id);
    (stack != nullptr ? with_stack_ : without_stack_) += 1;
    const std::string python = InnermostPythonFrame(process, stack_id);
    const std::string native = InnermostNativeFrame(process, stack_id);
    auto [it, inserted] = by_key_.try_emplace({python, native});
    found = &it->second;
    if (inserted) {
      found->order = by_key_.size();
      found->site.python = python;
      found->site.native = native;
      found->site.frames = stack != nullptr && stack->python_frames_size() > 0
                               ? process.DescribeStack(stack_id, stack_depth_)
                               : NativeFrames(process, stack_id, stack_depth_);
    }
    if (stack != nullptr || stack_id == 0)
      last_site_ = {process.index(), stack_id, stack != nullptr, found};
  }
  Accumulator& acc = *found;
  CallSite& site = acc.site;
  const CopyRow& row = cost.row;
  ++site.copies;
  ++(context.copy.direction() == trace::H2D ? site.h2d : site.d2h);
  site.bytes += row.bytes;
  site.blocked_ns += row.blocked_ns;
  site.pinned_estimate_ns += row.pinned_estimate_ns;
  site.loss_ns += row.loss_ns;
  AddPid(&site.pids, process.pid());

  // The buffer's maker, resolved now (the buffer may be freed later).
  BufferSite feed;
  feed.kind = context.buffer.kind;
  uint32_t maker_pid = 0;
  bool maker_forked = false;
  if (feed.kind == HostBuffer::Kind::kAlloc && context.buffer.alloc != nullptr) {
    feed.site = SiteOf(process, context.buffer.alloc->stack_id);
    maker_pid = process.pid();
    maker_forked = process.origin() == trace::ORIGIN_FORK;
  } else if (feed.kind == HostBuffer::Kind::kShm && context.buffer.mapping != nullptr &&
             context.buffer.mapping->pool) {
    // A slot of pinscope's pool: made by pinscope, not by the program; a
    // worker wrote the batch there.
    feed.pool = true;
  } else if (feed.kind == HostBuffer::Kind::kShm && context.buffer.segment != nullptr) {
    auto made = created_.find(context.buffer.segment->id);
    if (made != created_.end()) {
      feed.site = made->second.site;
      maker_pid = made->second.pid;
      maker_forked = made->second.forked;
    }
  } else {
    feed.kind = HostBuffer::Kind::kNone;
  }
  auto [fit, fresh] = acc.feeds.try_emplace({static_cast<int>(feed.kind), feed.pool, feed.site});
  Feed& f = fit->second;
  if (fresh) {
    f.site = feed;
    f.order = acc.feeds.size();
    f.site.in_workers = true;
  }
  ++f.site.copies;
  if (maker_pid != 0) {
    AddPid(&f.site.pids, maker_pid);
    f.site.in_workers = f.site.in_workers && maker_forked;
  } else {
    f.site.in_workers = false;
  }
}

void CallSiteAnalysis::Finish(const RunInfo& run) {
  std::vector<std::pair<size_t, CallSite>> all;
  for (auto& [key, acc] : by_key_) {
    CallSite site = acc.site;
    site.buffer_sites = acc.feeds.size();
    const Feed* best = nullptr;
    for (const auto& [feed_key, feed] : acc.feeds) {
      if (best == nullptr || feed.site.copies > best->site.copies ||
          (feed.site.copies == best->site.copies && feed.order < best->order)) {
        best = &feed;
      }
    }
    if (best != nullptr) site.buffer = best->site;
    all.emplace_back(acc.order, std::move(site));
  }
  total_sites_ = all.size();
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return std::make_tuple(b.second.loss_ns, b.second.blocked_ns, b.second.bytes, a.first) <
           std::make_tuple(a.second.loss_ns, a.second.blocked_ns, a.second.bytes, b.first);
  });
  sites_.clear();
  for (auto& entry : all) {
    if (sites_.size() == top_) break;
    sites_.push_back(std::move(entry.second));
  }
}

}  // namespace pinscope
