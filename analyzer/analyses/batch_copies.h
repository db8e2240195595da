// The input analysis's batch loop (input_analysis.h): the root main thread's
// H2D copies that may be batches (at least half the largest yet), and what
// the rules read of them at the end (BatchLoop).
//
// Memory: the copies are kept as they are up to kExact of them (24 bytes
// each), which every figure is exact over (medians, intervals). Past that
// the loop is summed while the run streams: per copy size (at least half
// the largest: a few sizes), the counts of every kind, exactly; the batch
// bytes' median from those counts, exactly; the first and last start and
// the copies' blocked time, exactly; and each (copy, interval to the next)
// pair goes into a deterministic uniform sample (a copy's sequence number
// hashed, kept while its low `level` bits are zero; the level rises when
// the sample reaches kExact, so it holds kExact / 2 to kExact pairs of the
// whole run). The medians of the copy and interval times are the sample's:
// the middle of at least 32,768 values drawn uniformly, whose rank among
// all is within 0.83% of the middle (3 standard errors, sqrt(0.25 / n)),
// and the savings summed over the intervals (findings.cc) are the sample's
// sum scaled to all of them. A copy more than twice the largest after the
// first kExact batches drops the smaller sizes from the counts, not from
// the sample's pairs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

namespace pinscope {

// The root main thread's batch copies: H2D copies of at least half the
// largest H2D copy it made, when at least kMinBatches recur.
struct BatchLoop {
  static constexpr size_t kMinBatches = 3;
  bool found = false;
  uint64_t batches = 0;                // batch copies
  uint64_t batch_bytes = 0;            // median bytes per batch copy
  uint64_t median_interval_ns = 0;     // median time between consecutive batch copy starts
  uint64_t median_copy_ns = 0;         // median host-blocked time of a batch copy
  uint64_t total_interval_ns = 0;      // first batch copy start to last batch copy start
  uint64_t total_copy_ns = 0;          // blocked time of the batch copies in that span
  std::vector<uint64_t> intervals_ns;  // each interval (for estimates)
  std::vector<uint64_t> copies_ns;     // the copy that opens each interval
  // The intervals those stand for: intervals_ns.size(), or, past
  // BatchCopies::kExact batches, all of them (intervals_ns is then a
  // sample: a sum over it is scaled by intervals / intervals_ns.size()).
  uint64_t intervals = 0;
  // Batch copies that read memory the program pinned (PIN_BY_PROGRAM from
  // pinned memory: pin_memory=True, or pinned buffers of its own).
  uint64_t pinned_batches = 0;
  // What DataLoader's pin-memory thread costs per batch: batch_bytes at the
  // calibrated host copy bandwidth of one thread. 0 when unknown (no loop,
  // or the calibration has no host_copy_gbps).
  double host_copy_gbps = 0;
  uint64_t pin_cost_ns = 0;
  // What pinscope's pinning did to the batch copies (PINSCOPE_PIN=1), per
  // copy: `pinscope_batches` ran pinned thanks to it (PIN_REGISTERED or
  // PIN_CACHED), each one a host copy avoided against pin_memory=True's
  // path (its pin thread copies every batch into cudaHostAlloc memory
  // first) and `dma_bytes` moved at DMA speed. Their registration:
  //   registered_at_copy  paid on the copying thread (PIN_REGISTERED);
  //   registered_ahead    paid on pinscope's pin-ahead thread (the buffer's
  //                       REGISTER "shm_ahead" came before this, its first copy);
  //   reused              saved: a freed block kept registered and handed to
  //                       this batch's allocation (REUSE since its last copy);
  //   pool                saved: a worker wrote the batch into a slot of
  //                       pinscope's pool, registered once (PINSCOPE_PIN_POOL,
  //                       the mapping's ShmEvent.pool);
  //   cached              saved: the buffer was copied before and stayed registered.
  uint64_t pinscope_batches = 0;
  uint64_t registered_at_copy = 0, registered_ahead = 0, reused = 0, pool = 0, cached = 0;
  uint64_t dma_bytes = 0;
  // Batch segments the root process mapped that a pool slot served
  // (ShmEvent.pool on its SHM_MAP, any thread), registered or plain: with
  // pin_memory=True the pin thread's batches, whose copies read torch's own
  // pinned blocks, so none of them is in the counts above.
  uint64_t pool_maps = 0;
  // Batch copies from a malloc-family block of at least kGlibcMmapMax bytes
  // allocated since the previous batch copy and not a reused kept block:
  // glibc serves such a block by a fresh mmap and unmaps it at free, so the
  // program's writing of it page-faults every page anew, every batch.
  // fresh_fault_ns: that cost for one batch, batch_bytes at first_touch_gbps
  // (the calibration's first touch of fresh anonymous memory at the batch
  // size, else the built-in H200 figure). 0 when no batch was fresh.
  static constexpr uint64_t kGlibcMmapMax = 32ull << 20;  // DEFAULT_MMAP_THRESHOLD_MAX, 64-bit
  uint64_t fresh_mmap_batches = 0;
  double first_touch_gbps = 0;
  uint64_t fresh_fault_ns = 0;
  // total_interval_ns / (batches - 1): the steady rate, which a bursty
  // loader (batches queued behind one slow one) hides from the median.
  uint64_t mean_interval_ns() const { return batches > 1 ? total_interval_ns / (batches - 1) : 0; }
};

class BatchCopies {
 public:
  struct Copy {
    uint64_t start_ns, end_ns, bytes;
    bool pinned;
    uint8_t pin;  // trace::PinOutcome
    bool ahead, reused, fresh_mmap;
    bool pool = false;  // the host side is a mapping served from pinscope's pool
  };
  static constexpr size_t kExact = 1 << 16;

  // The largest copy offered so far.
  uint64_t largest() const { return largest_; }
  // A root main-thread H2D copy of at least half largest(), in order.
  void Add(const Copy& copy);
  // The loop's counts, medians and intervals (the calibration's parts are
  // the caller's); false, and nothing filled, with fewer than kMinBatches.
  bool Finish(BatchLoop* loop);
  // Whether the copies are summed and sampled (more than kExact).
  bool sampled() const { return sampled_; }

 private:
  struct Counts {
    uint64_t count = 0, pinned = 0, pinscope = 0, registered_at_copy = 0, registered_ahead = 0;
    uint64_t reused = 0, pool = 0, cached = 0, fresh_mmap = 0, blocked_ns = 0;
  };
  struct Pair {
    uint64_t seq, copy_ns, interval_ns;
  };
  void EnterSampled();
  void AddSampled(const Copy& copy);
  void Offer(uint64_t copy_ns, uint64_t interval_ns);
  bool Keeps(uint64_t seq) const;

  uint64_t largest_ = 0;
  std::vector<Copy> copies_;  // exact mode
  bool sampled_ = false;
  std::map<uint64_t, Counts> sizes_;  // sampled mode: bytes -> counts
  uint64_t first_start_ = 0, last_start_ = 0, last_blocked_ = 0;
  Copy previous_{};
  bool has_previous_ = false;
  uint64_t seq_ = 0;
  uint32_t level_ = 0;
  std::vector<Pair> sample_;
};

}  // namespace pinscope
