// The Report: wires the analyses into a replay, then turns their results
// into findings (rules in findings.cc) and one verdict. The verdict is the
// most severe thing the data shows: a failure, else the biggest significant
// saving, else a risk, else an honest "no copies" or "not input-bound".
#include "analyzer/report/report.h"

#include <algorithm>
#include <utility>

#include "analyzer/common/doc_path.h"
#include "analyzer/common/format.h"

namespace pinscope {

namespace {

device::JoinMode JoinModeOf(const ReportOptions& options) {
  return options.join_by_order ? device::JoinMode::kOrder : device::JoinMode::kAuto;
}

}  // namespace

Report::Report(Calibration calibration, const ReportOptions& options)
    : options_(options),
      calibration_(std::move(calibration)),
      copies_(std::make_unique<CopyAnalysis>(calibration_, options.top, options.stack_depth)),
      call_sites_(std::make_unique<CallSiteAnalysis>(*copies_, options.top, options.stack_depth)),
      allocs_(std::make_unique<AllocAnalysis>()),
      shm_(std::make_unique<ShmAnalysis>()),
      processes_(std::make_unique<ProcessAnalysis>()),
      window_cost_(std::make_unique<WindowCostAnalysis>()),
      input_(std::make_unique<InputAnalysis>(calibration_, JoinModeOf(options))),
      pipeline_(std::make_unique<PipelineAnalysis>(JoinModeOf(options))) {}

Report::~Report() = default;

void Report::Attach(ReplayEngine* engine) {
  engine->AddAnalysis(processes_.get());
  engine->AddAnalysis(window_cost_.get());
  engine->AddAnalysis(copies_.get());
  engine->AddAnalysis(call_sites_.get());
  engine->AddAnalysis(allocs_.get());
  engine->AddAnalysis(shm_.get());
  engine->AddAnalysis(input_.get());
  engine->AddAnalysis(pipeline_.get());
}

uint32_t Report::AvailableCores() const {
  const trace::HostFacts& host = root_header_.host();
  uint32_t cores = host.affinity_cores() > 0 ? host.affinity_cores() : host.logical_cores();
  const uint32_t quota = host.cgroup_cpu_quota_millicores() / 1000;
  if (host.cgroup_cpu_quota_millicores() > 0) cores = std::min(cores, std::max(quota, 1u));
  return cores;
}

bool Report::HasErrors() const {
  return std::any_of(problems_.begin(), problems_.end(),
                     [](const Problem& p) { return p.severity == Severity::kError; });
}

bool Report::HasProblems() const {
  return std::any_of(problems_.begin(), problems_.end(),
                     [](const Problem& p) { return p.severity != Severity::kInfo; });
}

uint64_t Report::ProcessDuration(int process_index) const {
  if (process_index < 0 || static_cast<size_t>(process_index) >= processes().size()) return 0;
  const ProcessSummary& process = processes()[process_index];
  return process.end_ns > process.start_ns ? process.end_ns - process.start_ns : 0;
}

std::string Report::ThreadLabel(int process_index, uint32_t tid) const {
  if (process_index < 0 || static_cast<size_t>(process_index) >= processes().size()) {
    return "tid " + std::to_string(tid);
  }
  const uint32_t pid = processes()[process_index].pid;
  std::string label = "pid " + std::to_string(pid) + " ";
  if (tid == pid) return label + "main thread";
  label += "thread " + std::to_string(tid);
  const auto& names = thread_names_[process_index];
  auto it = names.find(tid);
  if (it != names.end() && !it->second.empty()) label += " (" + it->second + ")";
  return label;
}

void Report::Evaluate(const RunInfo& run) {
  run_dir_ = run.run_dir;
  run_id_ = run.run_id;
  problems_ = run.problems;
  start_ns_ = run.start_ns;
  end_ns_ = std::max(run.end_ns, run.start_ns);
  packets_ = run.packets;
  if (run.root != nullptr) root_header_ = run.root->header();
  if (run.root != nullptr && run.root->cuda()) cuda_ = run.root->cuda();
  thread_names_.assign(run.processes.size(), {});
  for (const ProcessState* process : run.processes) {
    if (!cuda_ && process->cuda()) cuda_ = process->cuda();
    thread_names_[process->index()] = process->threads();
  }
  // Bytes of the segments each process created, from the shm ledger.
  for (const ShmShare& share : shm_->shares()) {
    if (ProcessSummary* summary = processes_->mutable_process(share.process_index)) {
      summary->shm_created_bytes = share.bytes_created;
    }
  }

  findings_.clear();
  pending_.clear();
  for (const auto& rule : DefaultRules()) {
    const std::string missing = rule->MissingData(*this);
    if (!missing.empty()) {
      pending_.push_back({rule->id(), rule->title(), missing});
      continue;
    }
    rule->Evaluate(*this, &findings_);
  }
  // Failures, then significant savings (largest first), then risks.
  const auto rank = [](const Finding& f) {
    if (f.kind == Finding::Kind::kFailure) return 0;
    if (f.kind == Finding::Kind::kTime && f.significant) return 1;
    if (f.kind == Finding::Kind::kRisk) return 2;
    return 3;
  };
  std::stable_sort(findings_.begin(), findings_.end(), [&](const Finding& a, const Finding& b) {
    if (rank(a) != rank(b)) return rank(a) < rank(b);
    return a.saving_ns > b.saving_ns;
  });
  BuildModel();
  PickVerdict();
}

void Report::SetRanks(std::unique_ptr<JobRanks> ranks) {
  ranks_ = std::move(ranks);
  if (!ranks_ || (!findings_.empty() && findings_[0].kind == Finding::Kind::kFailure)) return;
  verdict_.id = ranks_->verdict_id;
  verdict_.severity = ranks_->warn ? Severity::kWarning : Severity::kInfo;
  verdict_.text = ranks_->verdict_text;
}

void Report::BuildModel() {
  model::Inputs in = pipeline_->inputs();
  in.host.cores = AvailableCores();
  in.pin_mode = root_header_.config().pin_mode();
  in.pin_budget = root_header_.config().pin_budget_bytes();
  in.pin_budget_full = input_->pins().budget_full;
  in.shm_failed = !shm_->sigbus().empty() || shm_->space_failures() > 0;
  in.shm_capacity = shm_->capacity_bytes();
  in.shm_peak = shm_->peak_bytes();
  in.gpu_used = cuda_.has_value() || copies_->total().count > 0 || in.gpu.measured;
  model_inputs_ = in;
  model_ = model::Build(in, calibration_);
  if (!model_.valid) return;
  // Findings of a stage the step does not wait on claim no saving: their
  // evidence stays, their significance goes (advice follows evidence).
  static const std::pair<model::Class, const char*> kFindingOf[] = {
      {model::Class::kInputStarvation, "input_starvation"},
      {model::Class::kMainProcess, "main_process_bound"},
      {model::Class::kFreshFaults, "main_process_bound"},
      {model::Class::kPinThread, "pin_thread_bound"},
      {model::Class::kPageableStaging, "pageable_staging"},
      {model::Class::kPinnedOveruse, "pageable_staging"},
      {model::Class::kSyncCopies, "sync_copies"},
  };
  std::string on_path;
  for (auto [cls, id] : kFindingOf)
    if (cls == model_.verdict) on_path = id;
  for (Finding& f : findings_) {
    if (f.kind != Finding::Kind::kTime || f.id == on_path) continue;
    if (f.significant) {
      f.significant = false;
      f.severity = Severity::kInfo;
      f.evidence += " Not on the critical path: the step waits on " + model_.critical + ".";
    }
  }
}

std::string GpuBoundRest(const model::Result& m, double step_ns) {
  if (m.predictions.empty() || m.predictions.front().speedup < 1.05) return {};
  const model::Prediction& p = m.predictions.front();
  return StringPrintf(
      " The rest of the step is the main thread's own work, which the GPU waits "
      "for: the best change there, %s, takes the step from %s to %s (%.2fx)%s.",
      p.change.what.c_str(), FormatDuration(static_cast<uint64_t>(step_ns)).c_str(),
      FormatDuration(static_cast<uint64_t>(p.step_ns)).c_str(), p.speedup,
      p.limit_next.empty() ? "" : (", then the limit is " + p.limit_next).c_str());
}

std::string DeviceWindowsSentence(uint32_t pid, const device::DeviceWindows& w) {
  const std::string loaded = w.before_first_ns > 0 ? "CUPTI was loaded at the first CUDA call, " +
                                                         FormatDuration(w.before_first_ns) +
                                                         " into it, and detached for "
                                                   : "CUPTI was detached for the other ";
  const std::string taken =
      w.windows == 0 ? ": no device records: CUPTI waited for the loop (hooked copies and syncs in "
                       "three flush periods; PINSCOPE_CUPTI_START) and it did not come; "
                     : ": device records taken in " + FormatCount(w.windows) +
                           (w.windows == 1 ? " window" : " windows") + ", " +
                           FormatPercent(w.recorded_fraction()) + " of the process's life; ";
  return "pid " + std::to_string(pid) + taken + loaded + FormatDuration(w.detached_ns) +
         " (its cost on every kernel launch with it; PINSCOPE_CUPTI_WINDOW_MS, "
         "PINSCOPE_CUPTI_PERIOD_S, " +
         DocPath("device-activity.md") + "). " + FormatCount(w.host_calls_between) +
         " host copy and sync calls made between windows have no device record: the figures "
         "below are the windows'.";
}

std::optional<LoopOwnCost> LoopOwnCostOf(const Report& report) {
  const double step_ns = report.model_inputs().main.step_ns;
  const PipelineAnalysis& pipeline = report.pipeline();
  if (step_ns <= 0 || report.root_index() < 0 ||
      pipeline.window_end_ns() <= pipeline.window_start_ns()) {
    return std::nullopt;
  }
  const std::optional<OwnCostSpan> span = report.process_analysis().OwnCostBetween(
      report.root_index(), pipeline.window_start_ns(), pipeline.window_end_ns());
  if (!span || static_cast<double>(span->length_ns()) < 2 * step_ns) return std::nullopt;
  return LoopOwnCost{*span, step_ns};
}

std::string MeasuredInRun(const Report& report, const std::string& change) {
  const PipelineAnalysis::Loop* loop = report.pipeline().LoopWith(change);
  if (loop == nullptr) return {};
  const std::string whole = FormatDuration(static_cast<uint64_t>(loop->step_ns));
  return "Measured in this run: its loop with " + change + " ran at " +
         (loop->steady_step_ns > 0
              ? FormatDuration(static_cast<uint64_t>(loop->steady_step_ns)) +
                    " a step in its steady state (" + whole +
                    " over the whole loop, its start included)."
              : whole +
                    " a step over the whole loop, its start included (too short for a "
                    "steady step: its workers' prefetched batches are much of it).");
}

std::vector<std::string> SteadyWindowNotes(const Report& report) {
  std::vector<std::string> notes;
  const PipelineAnalysis& pipeline = report.pipeline();
  if (report.model_inputs().main.loader_thread_apart) {
    notes.push_back(
        "The DataLoader is iterated on a thread apart from the training loop's (a prefetching "
        "wrapper): the steps are the loop's batch copies, and its wait for a batch is the time "
        "it neither ran nor waited in a CUDA call.");
  }
  if (pipeline.window_breaks_avoided() > 0) {
    notes.push_back(
        "These steps run between passes of another DataLoader on the loop's thread (an "
        "evaluation?), which are left out: " +
        FormatCount(pipeline.window_breaks_avoided()) +
        " of its __next__ calls fell among the epoch's steps.");
  }
  if (!pipeline.other_loops().empty()) {
    // The run measured other settings itself: say so, with what each
    // loop's step was, so the advice below can be set against them.
    const PipelineAnalysis::Loop& own = pipeline.modelled_loop();
    const auto setting = [&](const PipelineAnalysis::Loop& l) {
      std::string s = "num_workers=" + std::to_string(l.num_workers) +
                      ", pin_memory=" + (l.pin_memory ? "True" : "False");
      if (l.batch_size != own.batch_size) s += ", batch_size=" + std::to_string(l.batch_size);
      if (l.persistent_workers) s += ", persistent_workers=True";
      if (l.site != own.site && !l.site.empty()) s += " (" + l.site + ")";
      return s;
    };
    const auto measured = [&](const PipelineAnalysis::Loop& l) {
      return setting(l) + ": " + FormatCount(l.steps - 1) + " steps, " +
             FormatDuration(static_cast<uint64_t>(l.step_ns)) + " a step" +
             (l.steady_step_ns > 0
                  ? " (steady " + FormatDuration(static_cast<uint64_t>(l.steady_step_ns)) + ")"
                  : " (too short for a steady step)");
    };
    const size_t n = pipeline.other_loops().size();
    std::string text = "This run iterated " + FormatCount(n) + " other DataLoader" +
                       (n == 1 ? "" : "s") +
                       " on the loop's thread, one after another (a sweep of settings?). The "
                       "figures here are the loop with " +
                       setting(own) +
                       ". Each loop as this run measured it, over its whole length (its start "
                       "included): " +
                       measured(own);
    for (const PipelineAnalysis::Loop& l : pipeline.other_loops()) text += "; " + measured(l);
    notes.push_back(text + ".");
  }
  const uint64_t inside = pipeline.window_breaks_inside();
  if (inside > 0 && 2 * inside >= report.model_inputs().main.steps) {
    // About one per step: loaders taken together (zip), not an evaluation.
    notes.push_back(
        "Another DataLoader is taken along with this one in the steps (" + FormatCount(inside) +
        " of its batches in " + FormatCount(report.model_inputs().main.steps) +
        " steps: zip?). pinscope models the loader with the most batches; the other's wait for "
        "its batches counts as the loop's own time.");
  } else if (inside > 0) {
    notes.push_back("Another DataLoader's batches ran among these steps on the loop's thread (" +
                    FormatCount(inside) +
                    "; an evaluation?): their time counts in the step, too often to leave out.");
  }
  return notes;
}

void Report::PickVerdict() {
  // A failure of the job comes first; then the pipeline model's verdict.
  if (!findings_.empty() && findings_[0].kind == Finding::Kind::kFailure) {
    const Finding& top = findings_[0];
    verdict_ = {top.id, top.severity, top.verdict};
    return;
  }
  // A corrupt root trace: what was read before the damage may not be the
  // job, and the report says so instead of judging a fragment.
  const Problem* root_damage = nullptr;
  if (root_index() >= 0) {
    const std::string& root_file = processes()[root_index()].path;
    for (const Problem& problem : problems_)
      if (problem.severity == Severity::kError && problem.file == root_file) root_damage = &problem;
  }
  if (root_damage != nullptr && !model_.valid) {
    verdict_.id = "root_trace_corrupt";
    verdict_.severity = Severity::kError;
    verdict_.text = "the root process's trace is damaged: " + root_damage->message +
                    "; what was read before it cannot say what limits the job";
    return;
  }
  if (model_.valid && model_.verdict != model::Class::kNone) {
    verdict_.id = model::ClassId(model_.verdict);
    // Per step's worth of samples, as the model ranks its changes: a larger
    // batch lengthens the step and still saves per sample.
    const double top = model_.predictions.empty() ? 0 : model_.predictions.front().speedup;
    const double gain = top > 0 ? model_inputs_.main.step_ns * (1 - 1 / top) : 0;
    verdict_.severity = model_.verdict == model::Class::kGpuBound || gain < model_.floor_ns
                            ? Severity::kInfo
                            : Severity::kWarning;
    verdict_.text = model_.verdict_text;
    if (gain < model_.floor_ns && model_.verdict != model::Class::kGpuBound) {
      verdict_.text += "; no change pinscope can time saves more than " +
                       FormatDuration(static_cast<uint64_t>(model_.floor_ns)) + " a step";
    }
    if (root_damage != nullptr) {
      verdict_.severity = Severity::kError;
      verdict_.text +=
          " (from the steps read before the root's trace is damaged: " + root_damage->message + ")";
    }
    return;
  }
  if (!findings_.empty() &&
      (findings_[0].kind != Finding::Kind::kTime || findings_[0].significant)) {
    const Finding& top = findings_[0];
    verdict_ = {top.id, top.severity, top.verdict};
    return;
  }
  const CopyRow& total = copies_->total();
  if (total.count == 0) {
    verdict_.id = "no_copies";
    verdict_.severity = Severity::kInfo;
    verdict_.text = "no copies recorded: the shim saw no host<->device copy in " +
                    std::to_string(processes().size()) +
                    (processes().size() == 1 ? " process" : " processes") +
                    " (did the job use CUDA? see the notices)";
    return;
  }
  // The thread that spent the most time in copies, against its life.
  const ThreadCopies* busiest = nullptr;
  for (const ThreadCopies& thread : copies_->threads()) {
    if (busiest == nullptr || thread.blocked_ns > busiest->blocked_ns) busiest = &thread;
  }
  const CopyRow pageable = copies_->PageableTotal();
  verdict_.id = "not_input_bound";
  verdict_.severity = Severity::kInfo;
  // Device activity, when recorded, is the direct evidence: the GPU's busy
  // share from its first to its last activity.
  if (const device::DeviceBusy* busy = input_->MainDevice()) {
    const device::InputVerdict judged = device::JudgeInput(*busy);
    if (judged.not_input_bound) {
      verdict_.text = "not input-bound: the GPU was busy " + FormatPercent(judged.busy_fraction) +
                      " of the time from its first to its last activity (device activity, " +
                      FormatCount(busy->records) + " records";
      if (busy->kernels_sampled()) {
        verdict_.text += "; kernels recorded in sampled windows, " +
                         FormatPercent(busy->covered_fraction()) + " of the time";
      }
      verdict_.text += "); the input pipeline keeps up";
      return;
    }
  }
  const uint64_t life = busiest != nullptr ? ProcessDuration(busiest->process_index) : 0;
  verdict_.text = "not input-bound: host<->device copies blocked " +
                  (busiest != nullptr ? ThreadLabel(busiest->process_index, busiest->tid)
                                      : std::string("the host")) +
                  " for " + FormatDuration(busiest != nullptr ? busiest->blocked_ns : 0);
  if (life > 0) {
    verdict_.text += " (" + FormatPercent(static_cast<double>(busiest->blocked_ns) / life) +
                     " of its " + FormatDuration(life) + ")";
  }
  verdict_.text += "; pinned memory would save at most " + FormatDuration(pageable.loss_ns);
}

}  // namespace pinscope
