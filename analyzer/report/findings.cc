// Bottleneck rules. Each rule is one class of bottleneck (issue 5): it reads
// the analyses and writes a Finding with evidence, action and saving. Rules
// whose data no recorder writes yet report what they need instead.
#include "analyzer/report/findings.h"

#include <algorithm>

#include "analyzer/common/doc_path.h"
#include "analyzer/common/format.h"
#include "analyzer/common/trace_names.h"
#include "analyzer/report/report.h"

namespace pinscope {

namespace {

double Share(uint64_t part, uint64_t whole) {
  return whole == 0 ? 0 : static_cast<double>(part) / static_cast<double>(whole);
}

// A time finding's head: the saving, its share of the affected thread's
// time, and significant (a warning) from `bar` of it.
Finding TimeFinding(const char* id, const char* title, uint64_t saving_ns, double fraction,
                    double bar = kSignificantFraction) {
  Finding finding;
  finding.id = id;
  finding.title = title;
  finding.kind = Finding::Kind::kTime;
  finding.saving_ns = saving_ns;
  finding.fraction = fraction;
  finding.significant = fraction >= bar;
  finding.severity = finding.significant ? Severity::kWarning : Severity::kInfo;
  return finding;
}

// What the batch-loop rules need when the root's main thread shows no batch
// loop (BatchLoop::kMinBatches recurring batch copies).
constexpr const char* kNeedsBatchLoop =
    "recurring batch copies on the root's main thread (at least 3 large H2D copies)";
static_assert(BatchLoop::kMinBatches == 3, "kNeedsBatchLoop spells out BatchLoop::kMinBatches");

// What DataLoader's pin-memory thread costs per batch: one thread copies
// each batch into pinned memory at the calibrated host copy bandwidth
// (BatchLoop::host_copy_gbps, pin_cost_ns).
struct PinCost {
  bool known = false;  // the calibration has host_copy_gbps
  double gbps = 0;
  uint64_t per_batch_ns = 0;
};
PinCost PinCostOf(const BatchLoop& loop) {
  PinCost cost;
  cost.gbps = loop.host_copy_gbps;
  cost.known = cost.gbps > 0;
  cost.per_batch_ns = loop.pin_cost_ns;
  return cost;
}

// The pin thread is the limit when it takes at least this share of the
// interval between batches to copy one.
constexpr double kPinThreadLimitShare = 0.8;
bool PinThreadLimits(const PinCost& cost, uint64_t interval) {
  return cost.known && static_cast<double>(cost.per_batch_ns) >=
                           kPinThreadLimitShare * static_cast<double>(interval);
}

// The batches reach the GPU from memory the program pinned (pin_memory=True
// or the program's own pinned buffers): most batch copies read it.
bool BatchesPinned(const BatchLoop& loop) {
  return loop.found && loop.pinned_batches * 2 > loop.batches;
}

// "the pin thread copies each 73.5 MiB batch at the calibrated 7.40 GB/s
// host copy bandwidth: 10.4 ms per batch", or why it is unknown.
std::string PinCostText(const PinCost& cost, uint64_t batch_bytes) {
  if (!cost.known) {
    return "the pin thread's cost per batch is unknown: the calibration has no host copy "
           "bandwidth (run `pinscope calibrate`)";
  }
  return "the pin thread copies each " + FormatBytes(batch_bytes) + " batch into pinned memory " +
         "at the calibrated " + FormatGbps(cost.gbps) + " host copy bandwidth (one thread): " +
         FormatDuration(cost.per_batch_ns) + " per batch";
}

// The pin thread's cost per batch and whether it keeps up when `workers`
// workers supply a batch every `predicted` ns, or becomes the limit.
std::string PinThreadOutlook(const PinCost& cost, uint64_t batch_bytes, uint64_t workers,
                             uint64_t predicted) {
  std::string text = PinCostText(cost, batch_bytes);
  if (!cost.known) return text;
  const std::string supply =
      std::to_string(workers) + " workers supplying a batch every " + FormatDuration(predicted);
  return text + (cost.per_batch_ns >= predicted
                     ? "; with " + supply +
                           " the pin thread becomes the limit and caps the gain "
                           "(pin_memory=False with PINSCOPE_PIN=1 avoids its copy)"
                     : "; it keeps up with " + supply);
}

// Pageable staging: H2D/D2H copies from pageable memory go through the
// driver's staging buffer. Loss = host-blocked time minus the time the same
// bytes take at the calibrated pinned bandwidth, summed per copy.
class PageableStagingRule : public BottleneckRule {
 public:
  const char* id() const override { return "pageable_staging"; }
  const char* title() const override { return "pageable staging"; }

  void Evaluate(const Report& report, std::vector<Finding>* findings) const override {
    const CopyAnalysis& copies = report.copies();
    const CopyRow total = copies.PageableTotal();
    if (total.count == 0 || total.loss_ns == 0 || copies.threads().empty()) return;
    const ThreadCopies& worst = copies.threads().front();  // most loss first
    const uint64_t life = report.ProcessDuration(worst.process_index);
    Finding finding = TimeFinding(id(), title(), total.loss_ns, Share(worst.loss_ns, life));

    std::string what;
    if (worst.pageable_h2d > 0 && worst.pageable_d2h > 0) {
      what = FormatCount(worst.pageable_copies) + " H2D/D2H copies";
    } else {
      what = FormatCount(worst.pageable_copies) + (worst.pageable_h2d > 0 ? " H2D" : " D2H") +
             (worst.pageable_copies == 1 ? " copy" : " copies");
    }
    const double achieved = worst.pageable_blocked_ns == 0
                                ? 0
                                : static_cast<double>(worst.pageable_bytes) /
                                      static_cast<double>(worst.pageable_blocked_ns);
    const std::string thread = report.ThreadLabel(worst.process_index, worst.tid);
    finding.verdict = "pageable staging: " + FormatPercent(Share(worst.pageable_blocked_ns, life)) +
                      " of " + thread + "'s time is spent in " + what +
                      " from pageable memory at " + FormatGbps(achieved) + "; pinned would take " +
                      FormatPercent(Share(worst.pinned_estimate_ns, life));

    finding.evidence = FormatCount(total.count) + " pageable copies (" + FormatBytes(total.bytes) +
                       ") blocked the host for " + FormatDuration(total.blocked_ns) +
                       "; at the calibrated pinned bandwidth they would take " +
                       FormatDuration(total.pinned_estimate_ns) + ".";
    const CopyRow& shm = copies.PageableByBuffer(HostBuffer::Kind::kShm);
    const CopyRow& alloc = copies.PageableByBuffer(HostBuffer::Kind::kAlloc);
    const CopyRow& none = copies.PageableByBuffer(HostBuffer::Kind::kNone);
    std::string fed;
    const auto part = [&](const CopyRow& row, const char* label) {
      if (row.count == 0) return;
      if (!fed.empty()) fed += ", ";
      fed += FormatDuration(row.loss_ns) + " " + label;
    };
    part(shm, "from shm batches");
    part(alloc, "from recorded allocations");
    part(none, "from unrecorded buffers");
    if (!fed.empty()) finding.evidence += " Loss by buffer: " + fed + ".";

    const uint64_t largest = std::max({shm.loss_ns, alloc.loss_ns, none.loss_ns});
    if (largest == shm.loss_ns && shm.loss_ns > 0) {
      finding.action =
          "Pin the batches: pin_memory=True in the DataLoader, or run under PINSCOPE_PIN=1 so "
          "pinscope pins the shm mappings; with pin_memory, check the pin thread keeps up (it "
          "adds a host copy of every batch). PINSCOPE_PIN=1 registers every new shm batch once "
          "(measured 5-10 ms per 55 MiB on an H200, " + DocPath("pinning.md") + "), which eats into this "
          "saving: compare both with `pinscope diff`.";
      const BatchLoop& loop = report.input().loop();
      if (loop.found) {
        const PinCost pin = PinCostOf(loop);
        finding.action += " With pin_memory=True, " + PinCostText(pin, loop.batch_bytes);
        if (pin.known) {
          const uint64_t interval = loop.mean_interval_ns();
          finding.action += PinThreadLimits(pin, interval)
                                ? ", at or above 80% of the " + FormatDuration(interval) +
                                      " mean batch interval: the pin thread would be the limit; "
                                      "prefer PINSCOPE_PIN=1"
                                : ", below the " + FormatDuration(interval) +
                                      " mean batch interval: it would keep up";
        }
        finding.action += ".";
      }
    } else if (largest == alloc.loss_ns && alloc.loss_ns > 0) {
      finding.action =
          "Pin the host buffers that feed these copies: run under PINSCOPE_PIN=1 (transparent "
          "pinning), or allocate them pinned once and reuse them (tensor.pin_memory()).";
    } else {
      finding.action =
          "Run under PINSCOPE_PIN=1; the buffers are not recorded allocations (lower "
          "PINSCOPE_TRACE_MIN to name them).";
    }
    finding.action += " Estimated saving " + FormatDuration(finding.saving_ns) + " (" +
                      FormatPercent(finding.fraction) + " of " + thread + "'s time).";
    findings->push_back(std::move(finding));
  }
};

// /dev/shm: a SIGBUS in a mapping is a failure; a peak past half the
// capacity is a risk (a bigger batch or more workers will fail).
class ShmCapacityRule : public BottleneckRule {
  // The first SIGBUS lies past the end of its segment: the segment was
  // shrunk (or never sized that far) under a mapping still in use. The
  // kernel raises SIGBUS for a page past the end of the file however much
  // /dev/shm is free, so the advice is about the program, not --shm-size.
  static Finding PastTheEnd(const ShmAnalysis& shm) {
    const ShmSigbus& bus = shm.sigbus().front();
    const std::string segment = bus.segment.empty() ? "a shared-memory segment" : bus.segment;
    Finding finding;
    finding.id = "shm_past_end";
    finding.title = "access past the end of a shared-memory segment";
    finding.kind = Finding::Kind::kFailure;
    finding.severity = Severity::kError;
    finding.verdict = "pid " + std::to_string(bus.pid) +
                      " got SIGBUS (Bus error): an access past the end of the segment " + segment +
                      " (it was truncated to " + FormatCount(bus.segment_size) +
                      " bytes; the access was at offset " + FormatCount(bus.offset) +
                      "); /dev/shm space is not the cause";
    finding.evidence = "SIGBUS at offset " + FormatCount(bus.offset) + " of " + segment +
                       ", whose last ftruncate set " + FormatCount(bus.segment_size) + " bytes.";
    if (shm.capacity_bytes() > 0) {
      finding.evidence += " /dev/shm had room: the job's segments peaked at " +
                          FormatBytes(shm.peak_bytes()) + " of its " +
                          FormatBytes(shm.capacity_bytes()) + ".";
    }
    if (!bus.diagnosis.empty()) finding.evidence += " The shim said: " + bus.diagnosis;
    finding.action =
        "Find what shrinks the segment while it is still mapped and used (an ftruncate to a "
        "smaller size, often a segment reused for a smaller tensor), or map only the size it "
        "has; a larger --shm-size does not help.";
    return finding;
  }

 public:
  const char* id() const override { return "shm_capacity"; }
  const char* title() const override { return "/dev/shm capacity"; }

  void Evaluate(const Report& report, std::vector<Finding>* findings) const override {
    const ShmAnalysis& shm = report.shm();
    const std::string size_flag =
        "--shm-size=" + std::to_string(shm.RecommendedShmSize() / kMiB) + "m";
    if (!shm.sigbus().empty() && shm.sigbus().front().past_end()) {
      findings->push_back(PastTheEnd(shm));
      return;
    }
    if (!shm.sigbus().empty()) {
      const ShmSigbus& bus = shm.sigbus().front();
      Finding finding;
      finding.id = "shm_sigbus";
      finding.title = "/dev/shm exhausted";
      finding.kind = Finding::Kind::kFailure;
      finding.severity = Severity::kError;
      finding.verdict = "/dev/shm ran out: pid " + std::to_string(bus.pid) +
                        " got SIGBUS (Bus error) in a shared-memory mapping; start the container "
                        "with " +
                        size_flag + " or more";
      finding.evidence = bus.diagnosis.empty()
                             ? "SIGBUS inside a recorded shm mapping" +
                                   (bus.segment.empty() ? std::string() : " of " + bus.segment) +
                                   "."
                             : bus.diagnosis;
      finding.action = "Give the container more /dev/shm (docker run " + size_flag +
                       "), or lower num_workers / prefetch_factor / the batch size.";
      findings->push_back(std::move(finding));
      return;
    }
    if (shm.space_failures() > 0) {
      // No SIGBUS, but the shared memory the job asked for was refused: the
      // job's own error ("unable to allocate shared memory") follows.
      Finding finding;
      finding.id = "shm_full";
      finding.title = "/dev/shm exhausted";
      finding.kind = Finding::Kind::kFailure;
      finding.severity = Severity::kError;
      finding.verdict = "/dev/shm ran out: " + FormatCount(shm.space_failures()) +
                        " shared-memory calls found no space (the job's batches need " +
                        FormatBytes(shm.peak_bytes()) + " at the peak, /dev/shm holds " +
                        FormatBytes(shm.capacity_bytes()) + "); start the container with " +
                        size_flag + " or more";
      finding.evidence = FormatCount(shm.space_failures()) + " truncate/fallocate/map calls on " +
                         "segments failed with ENOSPC or ENOMEM; " +
                         FormatCount(shm.peak_segments()) + " segments were alive at the peak.";
      finding.action = "Give the container more /dev/shm (docker run " + size_flag +
                       "), or lower num_workers / prefetch_factor / the batch size.";
      findings->push_back(std::move(finding));
      return;
    }
    if (!shm.warning()) return;
    Finding finding;
    finding.id = id();
    finding.title = "/dev/shm risk";
    finding.kind = Finding::Kind::kRisk;
    finding.severity = Severity::kWarning;
    const uint64_t capacity = shm.capacity_bytes();
    finding.verdict = "/dev/shm risk: the job's shared memory peaked at " +
                      FormatBytes(shm.peak_bytes()) + ", " +
                      FormatPercent(Share(shm.peak_bytes(), capacity)) + " of the " +
                      FormatBytes(capacity) + " /dev/shm; use " + size_flag;
    const uint64_t room = shm.free_bytes_at_start() > 0 ? shm.free_bytes_at_start() : capacity;
    finding.evidence = FormatCount(shm.peak_segments()) + " segments (" +
                       FormatBytes(shm.peak_bytes()) + ") were alive at the peak; headroom " +
                       FormatBytes(room > shm.peak_bytes() ? room - shm.peak_bytes() : 0) +
                       " of the " + FormatBytes(room) + " free at start";
    if (shm.failed_calls() > 0) {
      finding.evidence += "; " + FormatCount(shm.failed_calls()) + " shm calls failed";
    }
    finding.evidence += ".";
    finding.action = "Start the container with " + size_flag +
                     " (peak x 2, rounded up to a power of two); more workers, a larger "
                     "prefetch_factor or batch will otherwise end in 'Bus error'.";
    findings->push_back(std::move(finding));
  }
};


// The device says the GPU stays busy: no input rule should claim a saving.
bool GpuBusy(const Report& report) {
  const device::DeviceBusy* busy = report.input().MainDevice();
  return busy != nullptr && device::JudgeInput(*busy).not_input_bound;
}

std::string CoresText(const Report& report) {
  const trace::HostFacts& host = report.root_header().host();
  std::string text = "cores available: " + std::to_string(report.AvailableCores()) + " (" +
                     std::to_string(host.affinity_cores()) + " in affinity, ";
  text += host.cgroup_cpu_quota_millicores() == 0
              ? std::string("no cgroup quota)")
              : "cgroup quota " + std::to_string(host.cgroup_cpu_quota_millicores() / 1000.0)
                                      .substr(0, 4) + ")";
  return text;
}

// Time saved if every interval between batch copies were scaled by num/den
// (more producers), but never below its copy nor below `floor_ns` (the pin
// thread's cost per batch, 0 if none): sum of interval - max(copy, interval
// * num / den, floor).
uint64_t SavingIfIntervalsScale(const BatchLoop& loop, uint64_t num, uint64_t den,
                                uint64_t floor_ns = 0) {
  uint64_t saving = 0;
  for (size_t i = 0; i < loop.intervals_ns.size(); ++i) {
    const uint64_t after =
        std::max({loop.copies_ns[i], loop.intervals_ns[i] * num / den, floor_ns});
    if (loop.intervals_ns[i] > after) saving += loop.intervals_ns[i] - after;
  }
  // Past BatchCopies::kExact batches the intervals are a uniform sample.
  if (!loop.intervals_ns.empty() && loop.intervals > loop.intervals_ns.size())
    saving = static_cast<uint64_t>(static_cast<double>(saving) *
                                   static_cast<double>(loop.intervals) /
                                   static_cast<double>(loop.intervals_ns.size()));
  return saving;
}

// Main-process-bound: no DataLoader workers, and the root's main thread
// spends most of the time between its batch copies making the next batch.
// Estimate: with k = cores - 1 workers making batches in parallel, each
// interval would shrink to max(copy, interval / k); an upper bound (the
// main thread's own step time is not visible to the host hooks).
class MainProcessBoundRule : public BottleneckRule {
 public:
  const char* id() const override { return "main_process_bound"; }
  const char* title() const override { return "main-process-bound (the main thread makes batches)"; }
  std::string MissingData(const Report& report) const override {
    if (!report.input().loop().found) {
      return kNeedsBatchLoop;
    }
    return "";
  }
  void Evaluate(const Report& report, std::vector<Finding>* findings) const override {
    const BatchLoop& loop = report.input().loop();
    if (report.input().workers() > 0 || loop.total_interval_ns == 0 || GpuBusy(report)) return;
    const uint64_t producing = loop.total_interval_ns - std::min(loop.total_interval_ns,
                                                                 loop.total_copy_ns);
    if (Share(producing, loop.total_interval_ns) < 0.5) return;
    const uint32_t cores = report.AvailableCores();
    const uint64_t k = cores > 1 ? cores - 1 : 1;
    // pin_memory=True: with workers, the pin thread copies every batch.
    const bool pinned = BatchesPinned(loop);
    const PinCost pin = PinCostOf(loop);
    const uint64_t pin_floor = pinned ? pin.per_batch_ns : 0;
    const uint64_t saving = SavingIfIntervalsScale(loop, 1, k, pin_floor);
    const int root = report.root_index();
    const uint64_t life = report.ProcessDuration(root);
    Finding f = TimeFinding(id(), "main-process-bound", saving, Share(saving, life));
    f.verdict = "main-process-bound: the main thread makes each batch itself (" +
                FormatDuration(loop.median_interval_ns) + " between batch copies, copy " +
                FormatDuration(loop.median_copy_ns) +
                "): move the work to DataLoader workers (num_workers > 0); " + CoresText(report);
    f.evidence = "No forked worker processes. " + FormatCount(loop.batches) +
                 " batch copies (recurring largest H2D copies of the main thread, median " +
                 FormatBytes(loop.batch_bytes) + "); " +
                 FormatPercent(Share(producing, loop.total_interval_ns)) +
                 " of the time between them is spent outside the copy, making the next batch.";
    f.action = "Set num_workers > 0 in the DataLoader (up to " + std::to_string(k) +
               ": the available cores minus the main process). Estimated saving " +
               FormatDuration(saving) + " (" + FormatPercent(f.fraction) +
               " of the main process's life), an upper bound: each interval between batch "
               "copies shrinks to max(copy, interval / " + std::to_string(k) + " workers" +
               (pinned && pin.known ? ", pin thread " + FormatDuration(pin.per_batch_ns) : "") +
               ").";
    if (pinned) {
      const uint64_t predicted = std::max(loop.median_copy_ns, loop.median_interval_ns / k);
      f.action += " The batches are pinned (pin_memory=True): with workers, " +
                  PinThreadOutlook(pin, loop.batch_bytes, k, predicted) + ".";
    }
    findings->push_back(std::move(f));
  }
};

// What the workers supply: workers alive at once (persistent_workers=False
// forks a new set every epoch, so the total count overstates it), and what
// one worker takes per batch: its life over the shm segments (batches) it
// made. segments == 0: no worker made any.
struct WorkerSupply {
  uint64_t segments = 0;
  uint64_t workers = 1;
  double per_batch_ns = 0;  // one worker
  double supply_ns = 0;     // all workers together: one batch every this
};
WorkerSupply SupplyOf(const Report& report) {
  WorkerSupply out;
  uint64_t worker_ns = 0;
  std::vector<std::pair<uint64_t, int>> edges;
  for (const ProcessSummary& p : report.processes()) {
    if (p.origin != trace::ORIGIN_FORK || p.helper || p.end_ns <= p.start_ns) continue;
    out.segments += p.shm_created;
    worker_ns += p.end_ns - p.start_ns;
    edges.push_back({p.start_ns, +1});
    edges.push_back({p.end_ns, -1});
  }
  if (out.segments == 0 || worker_ns == 0) {
    out.segments = 0;
    return out;
  }
  std::sort(edges.begin(), edges.end());
  int alive = 0, concurrent = 0;
  for (const auto& e : edges) concurrent = std::max(concurrent, alive += e.second);
  out.workers = static_cast<uint64_t>(std::max(concurrent, 1));
  out.per_batch_ns = static_cast<double>(worker_ns) / out.segments;
  out.supply_ns = out.per_batch_ns / out.workers;
  return out;
}

// pin_memory=True with workers: the batch copies read program-pinned
// memory and a non-main thread of the root maps the workers' shm batches.
bool PinThreadActive(const Report& report) {
  return report.input().workers() > 0 && BatchesPinned(report.input().loop()) &&
         report.input().pin_thread().tid != 0;
}

// Input starvation: workers exist, yet the main thread waits between batch
// copies far longer than the copy. Each worker makes a batch in its life /
// shm segments created; the interval with w workers is about that / w.
class InputStarvationRule : public BottleneckRule {
 public:
  const char* id() const override { return "input_starvation"; }
  const char* title() const override { return "input starvation (workers cannot keep up)"; }
  std::string MissingData(const Report& report) const override {
    if (!report.input().loop().found) {
      return kNeedsBatchLoop;
    }
    return "";
  }
  void Evaluate(const Report& report, std::vector<Finding>* findings) const override {
    const BatchLoop& loop = report.input().loop();
    if (report.input().workers() == 0 || loop.median_interval_ns < 2 * loop.median_copy_ns ||
        GpuBusy(report))
      return;
    const WorkerSupply supply_of = SupplyOf(report);
    if (supply_of.segments == 0) return;
    const uint64_t segments = supply_of.segments;
    const uint64_t workers = supply_of.workers;
    const double per_batch_ns = supply_of.per_batch_ns;  // one worker
    const double supply_ns = supply_of.supply_ns;        // all workers together
    const double gap_ns = static_cast<double>(loop.median_interval_ns);
    // The main thread only starves when batches arrive no faster than it
    // takes them; otherwise its own work between batches is the limit and
    // more workers cannot help (we do not see CPU time, so say both).
    if (gap_ns > 1.25 * supply_ns) {
      Finding f;
      f.id = "main_loop_bound";
      f.title = "main loop bound (not the workers)";
      f.saving_ns = 0;
      f.fraction = 0;
      f.significant = false;
      f.severity = Severity::kInfo;
      f.verdict = "main loop bound: the main thread takes " + FormatDuration(loop.median_interval_ns) +
                  " per batch while its " + std::to_string(workers) +
                  " workers can supply one every " + FormatDuration(static_cast<uint64_t>(supply_ns)) +
                  ": more workers will not help";
      f.evidence = FormatCount(segments) + " batches (shm segments) made by workers at " +
                   FormatDuration(static_cast<uint64_t>(per_batch_ns)) + " each, " +
                   std::to_string(workers) + " at once; main-thread interval between batch copies " +
                   FormatDuration(loop.median_interval_ns) + " (copy " +
                   FormatDuration(loop.median_copy_ns) + ").";
      f.action = "Look at what the main loop does between batches (the step, host-side work, "
                 "synchronization); num_workers is not the limit. pinscope does not record CPU "
                 "time, so it cannot say which.";
      findings->push_back(std::move(f));
      return;
    }
    const uint32_t cores = report.AvailableCores();
    const uint64_t max_workers = cores > 1 ? cores - 1 : 1;
    uint64_t wanted =
        static_cast<uint64_t>(per_batch_ns / std::max<uint64_t>(loop.median_copy_ns, 1)) + 1;
    wanted = std::min(std::max(wanted, workers + 1), max_workers);
    if (wanted <= workers) return;
    const bool pin_on = PinThreadActive(report);
    const PinCost pin = PinCostOf(loop);
    const uint64_t pin_floor = pin_on ? pin.per_batch_ns : 0;
    const uint64_t saving = SavingIfIntervalsScale(loop, workers, wanted, pin_floor);
    const uint64_t life = report.ProcessDuration(report.root_index());
    const ShmAnalysis& shm = report.shm();
    const uint64_t shm_needed = shm.peak_bytes() * wanted / workers;
    Finding f = TimeFinding(id(), "input starvation", saving, Share(saving, life));
    // Batches that arrive in bursts (prefetched, then a wait) have a small
    // median interval; the mean is the rate the workers really sustain.
    const uint64_t mean = loop.mean_interval_ns();
    const std::string every =
        mean > 2 * loop.median_interval_ns
            ? FormatDuration(mean) + " on average (median " +
                  FormatDuration(loop.median_interval_ns) + ": they arrive in bursts)"
            : FormatDuration(loop.median_interval_ns);
    f.verdict = "input starvation: the main thread takes a batch every " + every + " (copy " +
                FormatDuration(loop.median_copy_ns) + "), as fast as its " + std::to_string(workers) +
                " workers make them (" + FormatDuration(static_cast<uint64_t>(per_batch_ns)) +
                " each): use num_workers=" + std::to_string(wanted);
    f.evidence = FormatCount(segments) + " shm segments made by workers, " +
                 std::to_string(workers) + " at once; " + CoresText(report) + "; /dev/shm peak " +
                 FormatBytes(shm.peak_bytes()) + ", x" + std::to_string(wanted) + "/" +
                 std::to_string(workers) + " = " + FormatBytes(shm_needed) + " of " +
                 FormatBytes(shm.capacity_bytes()) + " capacity.";
    f.action = "Raise num_workers to " + std::to_string(wanted) + " (at most the available cores minus 1" +
               std::string(shm.capacity_bytes() > 0 && shm_needed > shm.capacity_bytes()
                               ? "; /dev/shm would not fit: raise --shm-size first"
                               : "") +
               "). Estimated saving " + FormatDuration(saving) + " (" + FormatPercent(f.fraction) +
               "): each interval shrinks to max(copy, interval x " + std::to_string(workers) + "/" +
               std::to_string(wanted) + (pin_on && pin.known ? ", pin thread" : "") + ").";
    if (pin_on) {
      const uint64_t predicted = std::max(
          loop.median_copy_ns, static_cast<uint64_t>(supply_ns) * workers / wanted);
      f.action +=
          " pin_memory=True: " + PinThreadOutlook(pin, loop.batch_bytes, wanted, predicted) + ".";
    }
    findings->push_back(std::move(f));
  }
};

// Main-process-bound on the pin thread: with pin_memory=True one thread of
// the main process copies every batch into pinned memory; when that takes
// about as long as the interval between batches (>= 80%), it is the limit.
// Fix: pin_memory=False with PINSCOPE_PIN=1 (pinscope pins the shm batches
// in place, no host copy). Saving = the span of the batch loop less what it
// would take at max(copy at the pinned bandwidth, the workers' interval).
class PinThreadRule : public BottleneckRule {
 public:
  const char* id() const override { return "pin_thread_bound"; }
  const char* title() const override { return "main-process-bound (pin thread)"; }
  std::string MissingData(const Report& report) const override {
    if (!report.input().loop().found) {
      return kNeedsBatchLoop;
    }
    if (PinThreadActive(report) && !PinCostOf(report.input().loop()).known) {
      return "the host copy bandwidth of one thread (host_copy_gbps: run `pinscope calibrate`)";
    }
    return "";
  }
  void Evaluate(const Report& report, std::vector<Finding>* findings) const override {
    const BatchLoop& loop = report.input().loop();
    if (!PinThreadActive(report) || loop.batches < 2 || GpuBusy(report)) return;
    const PinCost pin = PinCostOf(loop);
    const uint64_t interval = loop.mean_interval_ns();
    if (interval == 0 || !PinThreadLimits(pin, interval)) return;
    const double pinned_gbps = report.calibration().PinnedGbps(true, loop.batch_bytes);
    const uint64_t copy_pinned =
        pinned_gbps > 0 ? static_cast<uint64_t>(static_cast<double>(loop.batch_bytes) / pinned_gbps)
                        : loop.median_copy_ns;
    const WorkerSupply supply = SupplyOf(report);
    const uint64_t worker_interval = static_cast<uint64_t>(supply.supply_ns);
    const uint64_t after = std::max(copy_pinned, worker_interval);
    const uint64_t intervals = loop.batches - 1;
    const uint64_t saving =
        loop.total_interval_ns > after * intervals ? loop.total_interval_ns - after * intervals : 0;
    const uint64_t life = report.ProcessDuration(report.root_index());
    Finding f = TimeFinding(id(), title(), saving, Share(saving, life));
    f.verdict = "main-process-bound (pin thread): " + PinCostText(pin, loop.batch_bytes) + ", " +
                FormatPercent(Share(pin.per_batch_ns, interval)) + " of the " +
                FormatDuration(interval) +
                " mean batch interval: use pin_memory=False with PINSCOPE_PIN=1";
    f.evidence = FormatCount(loop.batches) + " batch copies from program-pinned memory (" +
                 FormatCount(loop.pinned_batches) + " pinned), mean interval " +
                 FormatDuration(interval) + " (median " + FormatDuration(loop.median_interval_ns) +
                 "); pid " + std::to_string(report.root_header().pid()) + " thread " +
                 std::to_string(report.input().pin_thread().tid) + " mapped " +
                 FormatCount(report.input().pin_thread().shm_maps) +
                 " worker shm segments (the pin thread); " +
                 (supply.segments > 0
                      ? std::to_string(supply.workers) + " workers supply a batch every " +
                            FormatDuration(worker_interval)
                      : std::string("worker supply unknown")) +
                 "; the copy from pinned memory takes " + FormatDuration(copy_pinned) + ".";
    f.action = "Set pin_memory=False and run under PINSCOPE_PIN=1: pinscope pins the workers' shm "
               "batches in place, so no thread copies them (it pays one registration per new "
               "batch segment, " + DocPath("pinning.md") + "). Estimated saving " +
               FormatDuration(saving) + " (" + FormatPercent(f.fraction) +
               " of the main process's life), an upper bound: each interval shrinks to max(copy "
               "at the pinned bandwidth, the workers' interval) = " + FormatDuration(after) +
               ". Compare both runs with `pinscope diff`.";
    if (saving == 0) {
      // The workers are as slow as the pin thread: removing its copy alone
      // gains nothing until there are more workers.
      f.action = "The workers supply a batch only every " + FormatDuration(worker_interval) +
                 ", so the pin thread is not the limit yet; it becomes the limit as soon as "
                 "num_workers is raised: then set pin_memory=False and run under "
                 "PINSCOPE_PIN=1 (pinscope pins the workers' shm batches in place, no thread "
                 "copies them).";
    }
    findings->push_back(std::move(f));
  }
};

// Synchronous copies blocking the host: a main thread waits for the GPU in
// copy and synchronize calls (SyncWaits in input_analysis.h), and the GPU
// idles while the host then does its own work. Only main threads count: a
// pin-memory, CUPTI or NCCL thread blocks off the training loop's path.
// Not flagged when the device says the GPU is busy (waiting is natural:
// GPU-bound). Significant from kSignificantShare of the thread's time from
// its first to its last copy or sync: the saving is an upper bound, so a
// higher bar than kSignificantFraction.
class SyncCopiesRule : public BottleneckRule {
 public:
  static constexpr double kSignificantShare = 0.05;
  const char* id() const override { return "sync_copies"; }
  const char* title() const override { return "synchronous copies blocking the host"; }
  void Evaluate(const Report& report, std::vector<Finding>* findings) const override {
    const SyncWaits& waits = report.input().sync_waits();
    if (waits.threads.empty()) return;
    const SyncThread& t = waits.threads.front();
    if (t.saving_ns == 0 || t.span_ns == 0) return;
    // The device of this process, else the run's busiest.
    const device::DeviceBusy* busy = report.input().MainDevice(t.process_index);
    if (busy == nullptr) busy = report.input().MainDevice();
    const device::InputVerdict verdict =
        busy != nullptr ? device::JudgeInput(*busy) : device::InputVerdict{};
    if (verdict.not_input_bound) return;

    const std::string thread = report.ThreadLabel(t.process_index, t.tid);
    Finding f =
        TimeFinding(id(), title(), t.saving_ns, Share(t.saving_ns, t.span_ns), kSignificantShare);
    f.verdict = "synchronous copies blocking the host: " + thread + " waited for the GPU " +
                FormatDuration(t.wait_ns) + " in " + FormatCount(t.waiting_calls) +
                " copy/synchronize calls (" + FormatPercent(Share(t.wait_ns, t.span_ns)) +
                " of its " + FormatDuration(t.span_ns) +
                " from first to last such call), and the GPU idles while the host works after "
                "each wait: overlapping would save up to " +
                FormatDuration(t.saving_ns) + " (" + FormatPercent(f.fraction) + ")";
    f.evidence = FormatCount(t.waiting_calls) + " of " + FormatCount(t.calls) +
                 " H2D/D2H copies and synchronize calls waited: synchronize calls " +
                 FormatDuration(t.sync_wait_ns) + ", copies " + FormatDuration(t.copy_wait_ns) +
                 " beyond their transfer (" + FormatCount(t.copies_joined) +
                 " copies timed by device activity, " + FormatCount(t.copies_calibrated) +
                 " at the calibrated bandwidth); host time outside the waits " +
                 FormatDuration(t.host_ns) + ".";
    if (busy != nullptr && busy->measured()) {
      f.evidence += " The GPU was busy " + FormatPercent(verdict.busy_fraction) +
                    " of the time from its first to its last activity.";
    }
    std::string sites;
    size_t shown = 0;
    for (const SyncSite& site : t.sites) {
      if (shown == 3 || site.saving_ns == 0) break;
      ++shown;
      sites += (sites.empty() ? " Sites: " : "; ") + SiteText(site) + " - " +
               FormatCount(site.calls) + " waits, " + FormatDuration(site.wait_ns) + ", saving " +
               FormatDuration(site.saving_ns);
    }
    if (!sites.empty()) f.evidence += sites + ".";
    const std::string where =
        t.sites.empty() || t.sites.front().site.empty() ? "At the waiting calls"
                                                        : SiteText(t.sites.front());
    f.action = where +
               ": read the value back every N steps or after the loop (accumulate it on the "
               "GPU); use non_blocking=True copies into pinned memory and wait (an event) only "
               "where the value is needed. Estimated saving " +
               FormatDuration(t.saving_ns) + " (" + FormatPercent(f.fraction) + " of " + thread +
               "'s time from its first to its last copy or sync), an upper bound: each wait "
               "overlaps at most the host work after it, up to the next wait.";
    if (waits.dropped_calls > 0) {
      f.evidence += " " + FormatCount(waits.dropped_calls) +
                    " later calls were not assessed (memory cap).";
    }
    findings->push_back(std::move(f));
  }

 private:
  // "tests/gpu/job.py:77 main (cudaStreamSynchronize after a 4 B D2H copy)"
  static std::string SiteText(const SyncSite& site) {
    std::string text = site.site.empty() ? std::string("unknown site (no stack)") : site.site;
    std::string what;
    if (site.syncs > 0) {
      for (size_t i = 0; i < site.apis.size(); ++i) what += (i ? "/" : "") + site.apis[i];
      if (site.via_copy) what += " after the copy there";
    }
    if (site.copies > 0) {
      if (!what.empty()) what += ", ";
      what += FormatCount(site.copies) +
              (site.h2d > 0 && site.d2h > 0 ? " H2D/D2H" : site.h2d > 0 ? " H2D" : " D2H") +
              (site.copies == 1 ? " copy" : " copies") + " of " +
              FormatBytes(site.copy_bytes / site.copies) + " on average";
    }
    return what.empty() ? text : text + " (" + what + ")";
  }
};

// Pinned memory over-use: pinscope's budget was full, copies went pageable.
class PinnedOveruseRule : public BottleneckRule {
 public:
  const char* id() const override { return "pinned_overuse"; }
  const char* title() const override { return "pinned memory over-use"; }
  std::string MissingData(const Report& report) const override {
    return report.input().has_pins() ? "" : "PinEvents (run under PINSCOPE_PIN=1)";
  }
  void Evaluate(const Report& report, std::vector<Finding>* findings) const override {
    const PinStats& pins = report.input().pins();
    const uint64_t ram = report.root_header().host().ram_bytes();
    const bool heavy = ram > 0 && pins.peak_pinned_bytes * 2 > ram;
    if (pins.budget_full == 0 && pins.skipped_budget == 0 && !heavy) return;
    Finding f;
    f.id = id();
    f.title = title();
    f.kind = Finding::Kind::kRisk;
    f.severity = Severity::kWarning;
    f.verdict = "pinned memory over-use: " + FormatBytes(pins.peak_pinned_bytes) +
                " pinned at the peak" + (ram > 0 ? " (" + FormatPercent(Share(pins.peak_pinned_bytes, ram)) + " of RAM)" : "") +
                "; the pin budget was full " + FormatCount(pins.budget_full) + " times";
    f.evidence = FormatCount(pins.skipped_budget) + " copies went pageable because the budget was full.";
    f.action = "Raise PINSCOPE_PIN_BUDGET if RAM allows, or lower the batch size / prefetch_factor.";
    findings->push_back(std::move(f));
  }
};

// Costly forks: pinscope had to unpin at fork (registrations do not survive
// into the child), and workers were forked again.
class ForkCostRule : public BottleneckRule {
 public:
  const char* id() const override { return "fork_cost"; }
  const char* title() const override { return "costly worker forks (persistent_workers)"; }
  std::string MissingData(const Report& report) const override {
    return report.input().has_pins() || report.input().workers() > 0
               ? ""
               : "forked workers or PinEvents";
  }
  void Evaluate(const Report& report, std::vector<Finding>* findings) const override {
    const uint64_t unpins = report.input().fork_unpins();
    if (unpins == 0) return;
    Finding f;
    f.id = id();
    f.title = title();
    f.kind = Finding::Kind::kTime;
    f.severity = Severity::kInfo;
    f.verdict = "costly forks: " + FormatCount(unpins) +
                " pinned buffers were unregistered at fork and must be pinned again";
    f.evidence = FormatCount(report.input().workers()) + " forked workers; " + FormatCount(unpins) +
                 " UNREGISTER events with reason \"fork\".";
    f.action = "Use persistent_workers=True so workers are forked once, not every epoch.";
    findings->push_back(std::move(f));
  }
};

}  // namespace

std::vector<std::unique_ptr<BottleneckRule>> DefaultRules() {
  std::vector<std::unique_ptr<BottleneckRule>> rules;
  rules.push_back(std::make_unique<ShmCapacityRule>());
  rules.push_back(std::make_unique<PageableStagingRule>());
  rules.push_back(std::make_unique<SyncCopiesRule>());
  rules.push_back(std::make_unique<MainProcessBoundRule>());
  rules.push_back(std::make_unique<InputStarvationRule>());
  rules.push_back(std::make_unique<PinThreadRule>());
  rules.push_back(std::make_unique<PinnedOveruseRule>());
  rules.push_back(std::make_unique<ForkCostRule>());
  return rules;
}

}  // namespace pinscope
