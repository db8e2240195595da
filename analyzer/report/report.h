// A report of one run: the analyses fed by one replay, the findings of the
// rule engine and the verdict, ready for the text and JSON writers. Owns its
// data once Evaluate() has run, so it outlives the replay engine.
#pragma once

#include <iosfwd>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "analyzer/analyses/alloc_analysis.h"
#include "analyzer/analyses/callsite_analysis.h"
#include "analyzer/analyses/copy_analysis.h"
#include "analyzer/analyses/input_analysis.h"
#include "analyzer/analyses/pipeline_analysis.h"
#include "analyzer/analyses/process_analysis.h"
#include "analyzer/analyses/shm_analysis.h"
#include "analyzer/analyses/window_cost.h"
#include "analyzer/model/pipeline_model.h"
#include "analyzer/read/calibration.h"
#include "analyzer/replay/replay.h"
#include "analyzer/report/findings.h"
#include "analyzer/report/job_ranks.h"
#include "analyzer/report/report_options.h"

namespace pinscope {

// Version of the JSON report schema (docs/report.md).
inline constexpr int kReportSchemaVersion = 1;

struct Verdict {
  std::string id;  // a finding id, "not_input_bound" or "no_copies"
  Severity severity = Severity::kInfo;
  std::string text;
};

class Report {
 public:
  Report(Calibration calibration, const ReportOptions& options);
  ~Report();
  Report(const Report&) = delete;
  Report& operator=(const Report&) = delete;

  // Adds the report's analyses to the engine (before engine->Run()).
  void Attach(ReplayEngine* engine);
  // After the replay: copies the run facts, runs the rules, picks the verdict.
  void Evaluate(const RunInfo& run);

  const ReportOptions& options() const { return options_; }
  const Calibration& calibration() const { return calibration_; }
  const CopyAnalysis& copies() const { return *copies_; }
  // Call sites of the pageable staging loss (top N by loss).
  const CallSiteAnalysis& call_sites() const { return *call_sites_; }
  const AllocAnalysis& allocs() const { return *allocs_; }
  const ShmAnalysis& shm() const { return *shm_; }
  // Batch loop, pinning and device activity (input_analysis.h).
  const InputAnalysis& input() const { return *input_; }
  // The step as a pipeline (analyzer/model/pipeline_model.h): its inputs as
  // measured and the model built from them.
  const PipelineAnalysis& pipeline() const { return *pipeline_; }
  const model::Inputs& model_inputs() const { return model_inputs_; }
  const model::Result& model() const { return model_; }
  // Cores the job may use: min(affinity, cgroup quota), 0 if unknown.
  uint32_t AvailableCores() const;
  const ProcessAnalysis& process_analysis() const { return *processes_; }
  // What the device-record windows cost the root's loop (window_cost.h).
  const WindowCostAnalysis& window_cost() const { return *window_cost_; }
  const std::vector<ProcessSummary>& processes() const { return processes_->processes(); }
  const std::vector<Finding>& findings() const { return findings_; }
  const std::vector<PendingCheck>& pending() const { return pending_; }
  const Verdict& verdict() const { return verdict_; }
  // The ranks of a distributed job (job_ranks.h); nullptr when no process
  // carries a rank label, and the report is then the one-process report.
  const JobRanks* ranks() const { return ranks_.get(); }
  // Sets them; the job's verdict (the straggler) replaces the run's.
  void SetRanks(std::unique_ptr<JobRanks> ranks);

  // Run facts (copied from the RunInfo).
  const std::string& run_dir() const { return run_dir_; }
  const std::string& run_id() const { return run_id_; }
  const std::vector<Problem>& problems() const { return problems_; }
  uint64_t start_ns() const { return start_ns_; }
  uint64_t end_ns() const { return end_ns_; }
  uint64_t duration_ns() const { return end_ns_ - start_ns_; }
  uint64_t packets() const { return packets_; }
  // The root process's header (host facts, command line); empty if none.
  const trace::ProcessHeader& root_header() const { return root_header_; }
  int root_index() const { return processes_->root_index(); }
  const std::optional<trace::CudaRuntimeInfo>& cuda() const { return cuda_; }
  // A problem of error severity: `pinscope report` exits 1.
  bool HasErrors() const;
  // Any problem with a file of the run, warnings (truncated, empty,
  // skipped) included: what makes report, diff and export exit 1.
  bool HasProblems() const;
  // Life of a process (end - start), 0 if unknown.
  uint64_t ProcessDuration(int process_index) const;
  // "pid 1000 main thread", "pid 1000 thread 1002 (pin_memory)".
  std::string ThreadLabel(int process_index, uint32_t tid) const;

 private:
  void PickVerdict();
  void BuildModel();

  ReportOptions options_;
  Calibration calibration_;
  std::unique_ptr<CopyAnalysis> copies_;
  std::unique_ptr<CallSiteAnalysis> call_sites_;
  std::unique_ptr<AllocAnalysis> allocs_;
  std::unique_ptr<ShmAnalysis> shm_;
  std::unique_ptr<ProcessAnalysis> processes_;
  std::unique_ptr<WindowCostAnalysis> window_cost_;
  std::unique_ptr<InputAnalysis> input_;
  std::unique_ptr<PipelineAnalysis> pipeline_;
  model::Inputs model_inputs_;
  model::Result model_;
  std::vector<Finding> findings_;
  std::vector<PendingCheck> pending_;
  Verdict verdict_;
  std::string run_dir_;
  std::string run_id_;
  std::vector<Problem> problems_;
  uint64_t start_ns_ = 0;
  uint64_t end_ns_ = 0;
  uint64_t packets_ = 0;
  trace::ProcessHeader root_header_;
  std::optional<trace::CudaRuntimeInfo> cuda_;
  // Thread names by (process index, tid), for labels after the replay.
  std::vector<std::map<uint32_t, std::string>> thread_names_;
  std::unique_ptr<JobRanks> ranks_;
};

// What the steady window left out or holds of another DataLoader's batches
// on the loop's thread (an evaluation pass), a sentence each; none when the
// loop took only its own (the text and the HTML report say them).
std::vector<std::string> SteadyWindowNotes(const Report& report);
// "Measured in this run: ..." for a change the run measured itself (a loop
// of its own with it: PipelineAnalysis::LoopWith), else empty; text and HTML.
std::string MeasuredInRun(const Report& report, const std::string& change);

// A GPU-bound step's rest, for the text and HTML reports: where the best
// input change still shortens it by 5% or more (the main thread's own work
// serialized with the GPU's by a wait each step), " The rest of the step
// ..." with that change and its step; else empty.
std::string GpuBoundRest(const model::Result& m, double step_ns);

// What a process's device-record windows covered (Device activity): how
// many, their share of its life, when CUPTI was loaded, the detached time.
std::string DeviceWindowsSentence(uint32_t pid, const device::DeviceWindows& w);

// pinscope's own cost per step of the modelled loop: the root's own-cost
// counters between two of its flushes inside the pipeline's steady window,
// scaled to its steady step. What the run's totals hide where start-up is
// long and the loop short (a run's 0.3% can be 2% of each step).
struct LoopOwnCost {
  OwnCostSpan span;    // the counters' span inside the steady window
  double step_ns = 0;  // the model's steady step
  double PerStep(uint64_t total) const {
    return static_cast<double>(total) * step_ns / static_cast<double>(span.length_ns());
  }
  // The hooks' time as a share of the step (of the job's threads' time in
  // them, whichever thread; most are the loop's own).
  double HookShare() const {
    return static_cast<double>(span.hook_ns) / static_cast<double>(span.length_ns());
  }
};
// Nothing without the counters (older shims), without a steady step, or
// when the window holds less than two steps between two flushes.
std::optional<LoopOwnCost> LoopOwnCostOf(const Report& report);

// The text report for a person (100 columns, colour when `color`).
void WriteTextReport(const Report& report, bool color, std::ostream& out);
// The JSON report (schema_version 1, docs/report.md).
nlohmann::ordered_json JsonReport(const Report& report);

}  // namespace pinscope
