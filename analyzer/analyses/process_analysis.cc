// Per-process summaries and the shim's notices. The tree comes from the
// engine (parent by pid at start, exec'd images under the image they
// replaced); this consumer only counts what each process did.
#include "analyzer/analyses/process_analysis.h"

#include <algorithm>

#include "analyzer/common/trace_names.h"

namespace pinscope {
namespace {

// Counters.hook_kinds as totals by kind; an unknown kind (a newer shim's)
// counts as HOOK_KIND_UNKNOWN.
HookKindArray KindsOf(const trace::Counters& counters) {
  HookKindArray kinds{};
  for (const trace::HookKindCost& h : counters.hook_kinds()) {
    const int k = trace::HookKind_IsValid(h.kind()) ? h.kind() : trace::HOOK_KIND_UNKNOWN;
    kinds[k].calls += h.calls();
    kinds[k].ns += h.ns();
  }
  return kinds;
}

}  // namespace

std::string ProcessSummary::Role() const { return ProcessRoleName(origin, helper); }

void ProcessAnalysis::OnProcess(const ProcessState& process) {
  if (processes_.size() <= static_cast<size_t>(process.index())) {
    processes_.resize(process.index() + 1);
  }
  ProcessSummary& summary = processes_[process.index()];
  summary.index = process.index();
  summary.parent_index = process.parent() != nullptr ? process.parent()->index() : -1;
  for (const ProcessState* child : process.children()) summary.children.push_back(child->index());
  summary.pid = process.pid();
  summary.ppid = process.ppid();
  summary.origin = process.origin();
  summary.helper = process.helper();
  summary.command = process.CommandLine();
  summary.exe = process.header().exe();
  summary.path = process.path();
  summary.start_ns = process.start_ns();
}

void ProcessAnalysis::OnCopy(const CopyContext& context) {
  ProcessSummary& summary = processes_[context.event.process.index()];
  const trace::CopyEvent& copy = context.copy;
  ++summary.copies;
  switch (copy.direction()) {
    case trace::H2D:
      summary.h2d_bytes += copy.bytes();
      break;
    case trace::D2H:
      summary.d2h_bytes += copy.bytes();
      break;
    default:
      summary.other_bytes += copy.bytes();
      break;
  }
  summary.blocked_ns += context.blocked_ns;
  if (IsPageableHostCopy(copy)) ++summary.pageable_copies;
}

void ProcessAnalysis::OnAlloc(const Event& event, const LiveAlloc& alloc) {
  ProcessSummary& summary = processes_[event.process.index()];
  ++summary.allocs;
  summary.alloc_bytes += alloc.size;
}

void ProcessAnalysis::OnShm(const ShmContext& context) {
  if (context.shm.error() != 0 || context.segment == nullptr) return;
  if (context.segment->memfd || context.segment->driver_internal) return;
  ProcessSummary& summary = processes_[context.event.process.index()];
  switch (context.shm.op()) {
    case trace::SHM_CREATE:
      ++summary.shm_created;
      break;
    case trace::SHM_TRUNCATE:
    case trace::SHM_FALLOCATE:
      break;
    case trace::SHM_MAP:
      ++summary.shm_maps;
      summary.shm_mapped_bytes += context.shm.size();
      break;
    default:
      break;
  }
}

void ProcessAnalysis::OnNotice(const Event& event, const trace::Notice& notice) {
  const auto key = std::make_tuple(event.process.pid(), notice.code(), notice.text());
  auto [it, inserted] = notice_index_.try_emplace(key, notices_.size());
  if (inserted) {
    NoticeRecord record;
    record.pid = event.process.pid();
    record.severity = notice.severity();
    record.code = notice.code();
    record.text = notice.text();
    record.first_time_ns = event.time_ns;
    notices_.push_back(std::move(record));
  }
  ++notices_[it->second].count;
}

void ProcessAnalysis::OnCounters(const Event& event, const trace::Counters& counters) {
  if (event.process.origin() == trace::ORIGIN_FORK) return;
  if (counters.hook_calls() == 0 && counters.own_threads_cpu_ns() == 0) return;  // older shims
  // A sample is a span of zero length at the packet's time: totals so far.
  OwnCostSpan sample;
  sample.start_ns = sample.end_ns = event.time_ns;
  sample.hook_calls = counters.hook_calls();
  sample.hook_ns = counters.hook_ns();
  sample.stack_capture_ns = counters.stack_capture_ns();
  sample.own_threads_cpu_ns = counters.own_threads_cpu_ns();
  sample.pointer_queries = counters.pointer_queries();
  sample.pointer_query_ns = counters.pointer_query_ns();
  sample.cupti_switches = counters.cupti_switches();
  sample.cupti_switch_ns = counters.cupti_switch_ns();
  sample.hook_kinds = KindsOf(counters);
  counter_samples_[event.process.index()].push_back(sample);
}

std::optional<OwnCostSpan> ProcessAnalysis::OwnCostBetween(int process_index, uint64_t start_ns,
                                                           uint64_t end_ns) const {
  auto it = counter_samples_.find(process_index);
  if (it == counter_samples_.end()) return std::nullopt;
  const std::vector<OwnCostSpan>& samples = it->second;
  const auto first = std::find_if(samples.begin(), samples.end(),
                                  [&](const OwnCostSpan& s) { return s.end_ns >= start_ns; });
  const auto last = std::find_if(samples.rbegin(), samples.rend(),
                                 [&](const OwnCostSpan& s) { return s.end_ns <= end_ns; });
  if (first == samples.end() || last == samples.rend() || last->end_ns <= first->end_ns) {
    return std::nullopt;
  }
  const auto delta = [](uint64_t a, uint64_t b) { return b > a ? b - a : 0; };
  OwnCostSpan span;
  span.start_ns = first->end_ns;
  span.end_ns = last->end_ns;
  span.hook_calls = delta(first->hook_calls, last->hook_calls);
  span.hook_ns = delta(first->hook_ns, last->hook_ns);
  span.stack_capture_ns = delta(first->stack_capture_ns, last->stack_capture_ns);
  span.own_threads_cpu_ns = delta(first->own_threads_cpu_ns, last->own_threads_cpu_ns);
  span.pointer_queries = delta(first->pointer_queries, last->pointer_queries);
  span.pointer_query_ns = delta(first->pointer_query_ns, last->pointer_query_ns);
  span.cupti_switches = delta(first->cupti_switches, last->cupti_switches);
  span.cupti_switch_ns = delta(first->cupti_switch_ns, last->cupti_switch_ns);
  for (size_t k = 0; k < span.hook_kinds.size(); ++k) {
    span.hook_kinds[k].calls = delta(first->hook_kinds[k].calls, last->hook_kinds[k].calls);
    span.hook_kinds[k].ns = delta(first->hook_kinds[k].ns, last->hook_kinds[k].ns);
  }
  return span;
}

void ProcessAnalysis::OnProcessEnd(const ProcessState& process) {
  ProcessSummary& summary = processes_[process.index()];
  summary.end_ns = process.end_ns();
  summary.threads = process.threads().size();
  if (process.exit()) {
    summary.has_exit = true;
    summary.exit_how = process.exit()->how();
    summary.exit_status = process.exit()->status();
    summary.dropped_events = process.exit()->dropped_events();
  }
  if (process.counters()) {
    const trace::Counters& counters = *process.counters();
    summary.dropped_events = std::max(summary.dropped_events, counters.dropped_events());
    // Totals the shim writes at each flush: the last packet counts.
    summary.stacks_captured = counters.stacks_captured();
    summary.stack_capture_ns = counters.stack_capture_ns();
    summary.hook_calls = counters.hook_calls();
    summary.hook_ns = counters.hook_ns();
    summary.own_threads_cpu_ns = counters.own_threads_cpu_ns();
    summary.pointer_queries = counters.pointer_queries();
    summary.pointer_query_ns = counters.pointer_query_ns();
    summary.cupti_switches = counters.cupti_switches();
    summary.cupti_switch_ns = counters.cupti_switch_ns();
    summary.hook_kinds = KindsOf(counters);
  }
  if (summary.dropped_events > 0) {
    NoticeRecord record;
    record.pid = process.pid();
    record.severity = trace::Notice::WARNING;
    record.code = "dropped_events";
    record.text = "the shim could not record " + std::to_string(summary.dropped_events) +
                  " events: counts in this report are lower bounds";
    record.count = 1;
    record.first_time_ns = process.end_ns();
    notices_.push_back(std::move(record));
  }
}

void ProcessAnalysis::Finish(const RunInfo& run) {
  root_index_ = run.root != nullptr ? run.root->index() : -1;
}

uint64_t ProcessAnalysis::Sum(uint64_t ProcessSummary::*field) const {
  uint64_t total = 0;
  for (const ProcessSummary& p : processes_) total += p.*field;
  return total;
}

uint64_t ProcessAnalysis::stacks_captured() const { return Sum(&ProcessSummary::stacks_captured); }
uint64_t ProcessAnalysis::stack_capture_ns() const { return Sum(&ProcessSummary::stack_capture_ns); }
uint64_t ProcessAnalysis::hook_calls() const { return Sum(&ProcessSummary::hook_calls); }
uint64_t ProcessAnalysis::hook_ns() const { return Sum(&ProcessSummary::hook_ns); }
uint64_t ProcessAnalysis::pointer_queries() const { return Sum(&ProcessSummary::pointer_queries); }
uint64_t ProcessAnalysis::pointer_query_ns() const {
  return Sum(&ProcessSummary::pointer_query_ns);
}
uint64_t ProcessAnalysis::cupti_switches() const { return Sum(&ProcessSummary::cupti_switches); }
uint64_t ProcessAnalysis::cupti_switch_ns() const { return Sum(&ProcessSummary::cupti_switch_ns); }
uint64_t ProcessAnalysis::own_threads_cpu_ns() const {
  return Sum(&ProcessSummary::own_threads_cpu_ns);
}
HookKindArray ProcessAnalysis::hook_kinds() const {
  HookKindArray total{};
  for (const ProcessSummary& p : processes_) {
    for (size_t k = 0; k < total.size(); ++k) {
      total[k].calls += p.hook_kinds[k].calls;
      total[k].ns += p.hook_kinds[k].ns;
    }
  }
  return total;
}

bool ProcessAnalysis::has_own_cost() const {
  return std::any_of(processes_.begin(), processes_.end(),
                     [](const ProcessSummary& p) { return p.has_own_cost(); });
}

size_t ProcessAnalysis::helpers() const {
  return static_cast<size_t>(std::count_if(processes_.begin(), processes_.end(),
                                           [](const ProcessSummary& p) { return p.helper; }));
}

}  // namespace pinscope
