// Call sites of the pageable staging loss, a replay consumer: every
// successful pageable H2D/D2H copy is charged (with CopyAnalysis's own
// per-copy cost) to its site - the innermost Python frame of its stack, then
// the innermost native frame outside the shim - together with the site that
// made the buffer it read or wrote (the HostAlloc's stack, or the stack of
// the SHM_CREATE of the segment, possibly in another process).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "analyzer/analyses/copy_analysis.h"
#include "analyzer/replay/replay.h"

namespace pinscope {

// Where the buffers that fed a call site's copies were made.
struct BufferSite {
  HostBuffer::Kind kind = HostBuffer::Kind::kNone;  // kAlloc or kShm; kNone: unrecorded
  // Innermost Python frame of the allocation / creation stack, else its
  // innermost native frame; empty when that stack was not recorded.
  std::string site;
  uint64_t copies = 0;         // copies of the call site it fed
  std::vector<uint32_t> pids;  // processes that made those buffers, sorted
  bool in_workers = false;     // every one of them is a forked process
  bool pool = false;           // slots of pinscope's pool (PINSCOPE_PIN_POOL)
};

struct CallSite {
  // Innermost Python frame "file:line function"; empty without one.
  std::string python;
  // Innermost native frame outside libpinscope, spelled by SpellNativeFrame
  // (replay/native_names.h): "fn at file.cc:12 (libx.so+0x1a2b)",
  // "fn (libx.so+0x1a2b)", "libx.so+0x1a2b" (module basename + offset of the
  // call instruction) or "0x7f.." outside every module; empty without native pcs.
  std::string native;
  // Up to ReportOptions.stack_depth frames of the first copy's stack,
  // innermost first: its Python frames when it has any, else native ones.
  std::vector<std::string> frames;
  uint64_t copies = 0;
  uint64_t h2d = 0;
  uint64_t d2h = 0;
  uint64_t bytes = 0;
  uint64_t blocked_ns = 0;
  uint64_t pinned_estimate_ns = 0;
  uint64_t loss_ns = 0;
  std::vector<uint32_t> pids;  // processes that copied here, sorted
  // The most common buffer site (most copies; ties: first seen), and how
  // many distinct buffer sites fed this call site.
  BufferSite buffer;
  size_t buffer_sites = 0;
};

class CallSiteAnalysis : public Analysis {
 public:
  // `copies` supplies the per-copy cost and must outlive the analysis; the
  // `top` sites by loss are kept, each with up to `stack_depth` frames.
  CallSiteAnalysis(const CopyAnalysis& copies, int top, int stack_depth);

  void OnCopy(const CopyContext& copy) override;
  void OnShm(const ShmContext& shm) override;
  void OnShmForgotten(const ShmSegment& segment) override;
  void Finish(const RunInfo& run) override;

  // Most loss first (ties: blocked time, bytes, then key); at most `top`.
  const std::vector<CallSite>& sites() const { return sites_; }
  // Distinct sites seen (before the cut to `top`).
  size_t total_sites() const { return total_sites_; }
  // Pageable copies whose stack was recorded / not recorded.
  uint64_t copies_with_stack() const { return with_stack_; }
  uint64_t copies_without_stack() const { return without_stack_; }

 private:
  struct Feed {
    BufferSite site;
    size_t order = 0;  // first seen, for ties
  };
  struct Accumulator {
    CallSite site;
    size_t order = 0;
    std::map<std::tuple<int, bool, std::string>, Feed> feeds;  // (kind, pool, site)
  };
  // The site of a stack of `process`: innermost Python frame, else the
  // innermost native frame outside the shim; empty for an unknown stack.
  std::string SiteOf(const ProcessState& process, uint64_t stack_id) const;

  const CopyAnalysis& copies_;
  size_t top_;
  int stack_depth_;
  std::map<std::pair<std::string, std::string>, Accumulator> by_key_;
  // The last copy's site: the next copies of a loop have the same stack
  // (map nodes do not move). Only for a stack that exists (or none): one
  // not seen yet could still arrive and name itself.
  struct LastSite {
    int process_index = -1;
    uint64_t stack_id = 0;
    bool has_stack = false;
    Accumulator* acc = nullptr;
  };
  LastSite last_site_;
  // Segment id -> (creation site, creator pid, creator forked), for the
  // segments the engine tracks (a forgotten one can feed no copy).
  struct Creation {
    std::string site;
    uint32_t pid = 0;
    bool forked = false;
  };
  std::unordered_map<uint64_t, Creation> created_;
  std::vector<CallSite> sites_;
  size_t total_sites_ = 0;
  uint64_t with_stack_ = 0;
  uint64_t without_stack_ = 0;
};

// Innermost Python frame of `stack_id`, "file:line function"; empty when the
// stack is unknown or has no Python frames.
std::string InnermostPythonFrame(const ProcessState& process, uint64_t stack_id);
// Innermost native frame of `stack_id` outside libpinscope, spelled as
// CallSite::native; empty when the stack is unknown or has no native pcs.
std::string InnermostNativeFrame(const ProcessState& process, uint64_t stack_id);
// Up to `depth` native frames (innermost first, shim frames skipped) in the
// same spelling.
std::vector<std::string> NativeFrames(const ProcessState& process, uint64_t stack_id, int depth);

}  // namespace pinscope
