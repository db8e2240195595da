// Copy statistics of a run, a replay consumer: copies by direction x host
// memory kind, the time pageable staging cost against the calibrated pinned
// bandwidth (per thread and per kind of buffer), and the largest pageable
// copies with the buffer that fed each.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "analyzer/analyses/gbps_memo.h"
#include "analyzer/read/calibration.h"
#include "analyzer/replay/replay.h"

namespace pinscope {

// One row of the copy table.
struct CopyRow {
  trace::Direction direction = trace::DIR_UNKNOWN;
  // Host side's kind for H2D/D2H/H2H; DEVICE for device-only copies.
  trace::MemoryKind kind = trace::MEM_UNKNOWN;
  uint64_t count = 0;
  uint64_t bytes = 0;
  uint64_t blocked_ns = 0;
  uint64_t failed = 0;  // result != cudaSuccess
  // Sum over the row's copies of bytes / calibrated pinned bandwidth
  // (H2D/D2H rows only), and of max(0, blocked - that) for pageable rows.
  uint64_t pinned_estimate_ns = 0;
  uint64_t loss_ns = 0;

  // bytes / host-blocked time, GB/s; 0 when nothing blocked.
  double AchievedGbps() const;
  void Add(const CopyRow& other);
};

// What fed a copy, captured when it happened (the buffer may be freed later).
struct BufferInfo {
  HostBuffer::Kind kind = HostBuffer::Kind::kNone;
  // kAlloc
  trace::AllocApi api = trace::ALLOC_UNKNOWN;
  uint64_t alloc_size = 0;
  uint64_t alloc_address = 0;
  uint32_t alloc_tid = 0;
  // kShm
  std::string segment_name;
  uint32_t creator_pid = 0;  // 0: made by an untraced process
  uint64_t segment_size = 0;
  uint64_t offset = 0;

  static BufferInfo From(const HostBuffer& buffer);
  // "posix_memalign 100.0 MiB", "shm /torch_1001_1 24.0 MiB by pid 1001".
  std::string Describe() const;
  // "alloc", "shm", "unknown" (JSON spelling).
  const char* KindName() const;
};

// One copy kept for the "largest pageable copies" table.
struct LargeCopy {
  int process_index = 0;
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint64_t time_ns = 0;  // CLOCK_MONOTONIC entry time
  trace::Direction direction = trace::DIR_UNKNOWN;
  trace::CopyApi api = trace::API_UNKNOWN;
  uint64_t stream = 0;
  uint64_t bytes = 0;
  uint64_t blocked_ns = 0;
  uint64_t loss_ns = 0;
  uint64_t stack_id = 0;
  // Call site, innermost first (ProcessState::DescribeStack).
  std::vector<std::string> stack;
  BufferInfo buffer;
};

// Pageable copies of one thread: where staging costs the host its time.
struct ThreadCopies {
  int process_index = 0;
  uint32_t pid = 0;
  uint32_t tid = 0;
  uint64_t copies = 0;  // all copies of the thread
  uint64_t blocked_ns = 0;
  uint64_t pageable_copies = 0;
  uint64_t pageable_h2d = 0;
  uint64_t pageable_d2h = 0;
  uint64_t pageable_bytes = 0;
  uint64_t pageable_blocked_ns = 0;
  uint64_t pinned_estimate_ns = 0;
  uint64_t loss_ns = 0;
};

class CopyAnalysis : public Analysis {
 public:
  // `calibration` must outlive the analysis; `top` rows are kept, each with
  // up to `stack_depth` frames of its call site.
  CopyAnalysis(const Calibration& calibration, int top, int stack_depth = 6);

  void OnCopy(const CopyContext& copy) override;
  void Finish(const RunInfo& run) override;

  // One copy's row (count 1, bytes, blocked, failed, pinned estimate, loss)
  // and whether it is a successful pageable H2D/D2H copy: the staging
  // estimate's single code path, shared with the call-site analysis.
  struct Cost {
    CopyRow row;
    bool pageable = false;
  };
  Cost CostOf(const CopyContext& copy) const;

  // Rows sorted by direction then kind, and their sum.
  const std::vector<CopyRow>& rows() const { return rows_; }
  const CopyRow& total() const { return total_; }
  // Pageable H2D and D2H rows only (the staging estimate), and their sum.
  const CopyRow& pageable(bool h2d) const { return h2d ? pageable_h2d_ : pageable_d2h_; }
  CopyRow PageableTotal() const;
  // Pageable staging loss split by what fed the copies (alloc, shm, none).
  const CopyRow& PageableByBuffer(HostBuffer::Kind kind) const {
    return by_buffer_[static_cast<size_t>(kind)];
  }
  // Largest pageable copies, by bytes (ties: earlier first).
  const std::vector<LargeCopy>& largest_pageable() const { return largest_; }
  // Threads that made copies, most staging loss first.
  const std::vector<ThreadCopies>& threads() const { return threads_; }
  // Calibrated pinned GB/s for a row's mean copy size (0 if not H2D/D2H).
  double CalibratedPinnedGbps(const CopyRow& row) const;
  const Calibration& calibration() const { return calibration_; }

 private:
  const Calibration& calibration_;
  GbpsMemo gbps_;  // CostOf's pinned bandwidths (twice per copy: here and the call sites)
  size_t top_;
  int stack_depth_;
  std::map<std::pair<int, int>, CopyRow> by_key_;
  std::vector<CopyRow> rows_;
  CopyRow total_;
  CopyRow pageable_h2d_;
  CopyRow pageable_d2h_;
  std::array<CopyRow, 3> by_buffer_;
  std::vector<LargeCopy> largest_;  // kept sorted, at most top_
  std::map<std::pair<int, uint32_t>, ThreadCopies> by_thread_;
  ThreadCopies* last_thread_ = nullptr;  // the last copy's thread
  std::pair<int, uint32_t> last_thread_key_;
  std::vector<ThreadCopies> threads_;
};

}  // namespace pinscope
