// Bottleneck rules. Each rule is one class of bottleneck (issue 5): it reads
// the analyses and writes a Finding with evidence, action and saving. Rules
// whose data no recorder writes yet report what they need instead.
#include "analyzer/findings.h"

#include <algorithm>

#include "analyzer/format.h"
#include "analyzer/report.h"
#include "analyzer/trace_names.h"

namespace pinscope {

namespace {

double Share(uint64_t part, uint64_t whole) {
  return whole == 0 ? 0 : static_cast<double>(part) / static_cast<double>(whole);
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
    Finding finding;
    finding.id = id();
    finding.title = title();
    finding.kind = Finding::Kind::kTime;
    finding.saving_ns = total.loss_ns;
    finding.fraction = Share(worst.loss_ns, life);
    finding.significant = finding.fraction >= kSignificantFraction;
    finding.severity = finding.significant ? Severity::kWarning : Severity::kInfo;

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
          "adds a host copy of every batch).";
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
 public:
  const char* id() const override { return "shm_capacity"; }
  const char* title() const override { return "/dev/shm capacity"; }

  void Evaluate(const Report& report, std::vector<Finding>* findings) const override {
    const ShmAnalysis& shm = report.shm();
    const std::string size_flag =
        "--shm-size=" + std::to_string(shm.RecommendedShmSize() / kMiB) + "m";
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

// Classes of bottleneck that need data a later recorder brings. Each is a
// rule already, so adding its Evaluate() is the whole change.
class PendingRule : public BottleneckRule {
 public:
  PendingRule(const char* id, const char* title, const char* needs)
      : id_(id), title_(title), needs_(needs) {}
  const char* id() const override { return id_; }
  const char* title() const override { return title_; }
  std::string MissingData(const Report& report) const override { return needs_; }

 private:
  const char* id_;
  const char* title_;
  const char* needs_;
};

}  // namespace

std::vector<std::unique_ptr<BottleneckRule>> DefaultRules() {
  std::vector<std::unique_ptr<BottleneckRule>> rules;
  rules.push_back(std::make_unique<ShmCapacityRule>());
  rules.push_back(std::make_unique<PageableStagingRule>());
  rules.push_back(std::make_unique<PendingRule>(
      "sync_copies", "synchronous copies blocking the host",
      "device activity (CUPTI) to tell time waiting on the stream from time copying"));
  rules.push_back(
      std::make_unique<PendingRule>("input_starvation", "input starvation (workers cannot keep up)",
                                    "per-batch timing of the workers and of the main loop"));
  rules.push_back(std::make_unique<PendingRule>(
      "main_process_bound", "main-process-bound (collate, pin thread, copy thread)",
      "per-thread CPU time and call stacks"));
  rules.push_back(std::make_unique<PendingRule>("pinned_overuse", "pinned memory over-use",
                                                "the pinning recorder (PinEvent)"));
  rules.push_back(std::make_unique<PendingRule>(
      "fork_cost", "costly worker forks (persistent_workers)", "fork timing of the workers"));
  return rules;
}

}  // namespace pinscope
