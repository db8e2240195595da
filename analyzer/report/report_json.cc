// The JSON report (`pinscope report --json`): everything the text report
// shows, in raw units (bytes, ns, GB/s as numbers), schema documented in
// docs/report.md. Adding keys is compatible; renaming or removing one needs
// a schema_version bump.
#include <cmath>
#include <nlohmann/json.hpp>

#include "analyzer/common/format.h"
#include "analyzer/common/trace_names.h"
#include "analyzer/report/loader_knobs.h"
#include "analyzer/report/report.h"

namespace pinscope {

namespace {

// ordered_json keeps keys in the order written: the documented order.
using json = nlohmann::ordered_json;

uint64_t Since(uint64_t time_ns, uint64_t start_ns) {
  return time_ns > start_ns ? time_ns - start_ns : 0;
}

// Rates rounded to 0.001 GB/s so the output is stable across platforms.
double Rate(double gbps) { return std::round(gbps * 1000) / 1000; }

json CopyRowJson(const CopyAnalysis& copies, const CopyRow& row, bool with_kind) {
  json j;
  if (with_kind) {
    j["direction"] = DirectionName(row.direction);
    j["memory"] = MemoryKindName(row.kind);
  }
  j["count"] = row.count;
  j["bytes"] = row.bytes;
  j["blocked_ns"] = row.blocked_ns;
  j["achieved_gbps"] = Rate(row.AchievedGbps());
  j["failed"] = row.failed;
  if (with_kind) j["calibrated_pinned_gbps"] = Rate(copies.CalibratedPinnedGbps(row));
  j["pinned_estimate_ns"] = row.pinned_estimate_ns;
  j["loss_ns"] = row.loss_ns;
  return j;
}

json BufferJson(const BufferInfo& buffer) {
  json j;
  j["kind"] = buffer.KindName();
  j["description"] = buffer.Describe();
  j["offset"] = buffer.offset;
  if (buffer.kind == HostBuffer::Kind::kAlloc) {
    j["api"] = AllocApiName(buffer.api);
    j["size"] = buffer.alloc_size;
    j["address"] = buffer.alloc_address;
    j["tid"] = buffer.alloc_tid;
  } else if (buffer.kind == HostBuffer::Kind::kShm) {
    j["segment"] = buffer.segment_name;
    j["segment_size"] = buffer.segment_size;
    j["creator_pid"] = buffer.creator_pid == 0 ? json(nullptr) : json(buffer.creator_pid);
  }
  return j;
}

json FindingJson(const Finding& finding) {
  static const char* kKinds[] = {"time", "risk", "failure"};
  return json{{"id", finding.id},
              {"kind", kKinds[static_cast<int>(finding.kind)]},
              {"severity", SeverityName(finding.severity)},
              {"significant", finding.significant},
              {"title", finding.title},
              {"verdict", finding.verdict},
              {"evidence", finding.evidence},
              {"action", finding.action},
              {"saving_ns", finding.saving_ns},
              {"saving_fraction", std::round(finding.fraction * 1e6) / 1e6}};
}

json HostJson(const trace::ProcessHeader& root) {
  const trace::HostFacts& host = root.host();
  json gpus = json::array();
  for (const std::string& name : host.gpu_names()) gpus.push_back(name);
  return json{{"hostname", root.hostname()},
              {"logical_cores", host.logical_cores()},
              {"physical_cores", host.physical_cores()},
              {"affinity_cores", host.affinity_cores()},
              {"cgroup_cpu_quota_millicores", host.cgroup_cpu_quota_millicores()},
              {"ram_bytes", host.ram_bytes()},
              {"cgroup_memory_limit_bytes", host.cgroup_memory_limit_bytes()},
              {"shm_capacity_bytes", host.shm_capacity_bytes()},
              {"shm_free_bytes", host.shm_free_bytes()},
              {"gpus", gpus},
              {"pcie_link_speed_gts", host.pcie_link_speed_gts_x10() / 10.0},
              {"pcie_link_width", host.pcie_link_width()},
              {"kernel_release", host.kernel_release()},
              {"libc_version", host.libc_version()},
              {"memlock_limit_bytes", host.memlock_limit_bytes()}};
}

}  // namespace

// The pipeline model: its inputs as measured, stages, the verdict and every
// change re-timed (docs/report.md, "pipeline").
json PipelineJson(const Report& report) {
  const model::Result& m = report.model();
  const model::Inputs& in = report.model_inputs();
  json j;
  j["valid"] = m.valid;
  // The loader as the hook saw it, also where the model cannot judge the
  // step (pinscope tune reads it).
  const model::LoaderFacts& l = in.loader;
  if (m.valid || l.present) {
    j["loader"] = {{"present", l.present},
                   {"hooked", l.hooked},
                   {"num_workers", l.num_workers},
                   {"pin_memory", l.pin_memory},
                   {"prefetch_factor", l.prefetch_factor},
                   {"persistent_workers", l.persistent_workers},
                   {"batch_size", l.batch_size},
                   {"epochs", l.epochs},
                   {"remade", l.remade},
                   {"site", l.site},
                   {"user_site", l.user_site},
                   {"framework", l.framework},
                   {"epoch_start_ns", l.epoch_start_ns},
                   {"steps_per_epoch", l.steps_per_epoch},
                   {"epochs_in_window", l.epochs_in_window},
                   {"epoch_step_ns", l.epoch_step_ns}};
  }
  if (!m.valid) {
    j["why_not"] = m.why_not;
    return j;
  }
  j["verdict"] = model::ClassId(m.verdict);
  j["critical_stage"] = m.critical;
  j["critical_share"] = m.critical_share;
  j["floor_ns"] = m.floor_ns;
  j["steps"] = in.main.steps;
  j["step_ns"] = in.main.step_ns;
  j["timed_by_hook"] = in.main.timed_by_hook;
  j["loader_thread_apart"] = in.main.loader_thread_apart;
  j["window"] = {{"start_ns", report.pipeline().window_start_ns()},
                 {"end_ns", report.pipeline().window_end_ns()},
                 {"tid", report.pipeline().step_tid()},
                 {"other_loader_segments", report.pipeline().window_breaks_inside()},
                 {"other_loader_segments_left_out", report.pipeline().window_breaks_avoided()}};
  if (report.pipeline().modelled_loop().steps > 0) {
    // The modelled loop first, then the step thread's other loops in order.
    json loops = json::array();
    const auto loop = [](const PipelineAnalysis::Loop& l, bool modelled) {
      return json{{"modelled", modelled},
                  {"site", l.site},
                  {"num_workers", l.num_workers},
                  {"pin_memory", l.pin_memory},
                  {"persistent_workers", l.persistent_workers},
                  {"batch_size", l.batch_size},
                  {"prefetch_factor", l.prefetch_factor},
                  {"next_calls", l.steps},
                  {"steps", l.steps - 1},
                  {"step_ns", l.step_ns},
                  {"steady_step_ns", l.steady_step_ns}};
    };
    loops.push_back(loop(report.pipeline().modelled_loop(), true));
    for (const auto& l : report.pipeline().other_loops()) loops.push_back(loop(l, false));
    j["loops"] = loops;
  }
  const model::MainStep& s = in.main;
  j["main"] = {{"next_ns", s.next_ns},
               {"next_cpu_ns", s.next_cpu_ns},
               {"recv_ns", s.recv_ns},
               {"recv_cpu_ns", s.recv_cpu_ns},
               {"recv_busy_off_ns", s.recv_busy_off_ns},
               {"make_ns", s.make_ns},
               {"make_cpu_ns", s.make_cpu_ns},
               {"make_faults", s.make_faults},
               {"pin_ns", s.pin_ns},
               {"copy_ns", s.copy_ns},
               {"copy_cpu_ns", s.copy_cpu_ns},
               {"copy_faults", s.copy_faults},
               {"copy_wait_ns", s.copy_wait_ns},
               {"copy_device_ns", s.copy_device_ns},
               {"batch_bytes", s.batch_bytes},
               {"batch_pinned", s.batch_pinned},
               {"batch_pinscope", s.batch_pinscope},
               {"batch_shm", s.batch_shm},
               {"batch_fresh_alloc", s.batch_fresh_alloc},
               {"other_copy_ns", s.other_copy_ns},
               {"sync_ns", s.sync_ns},
               {"cpu_ns", s.cpu_ns},
               {"pin_unregister_ns", s.pin_unregister_ns}};
  j["producers"] = {{"workers", in.producers.workers},
                    {"batches", in.producers.batches},
                    {"fetch_ns", in.producers.fetch_ns},
                    {"fetch_cpu_ns", in.producers.fetch_cpu_ns},
                    {"busy_ns", in.producers.cycle_ns}};
  j["pin_thread"] = {{"present", in.pin_thread.present},
                     {"pin_ns", in.pin_thread.pin_ns},
                     {"cycle_cpu_ns", in.pin_thread.cycle_cpu_ns},
                     {"recv_wait_ns", in.pin_thread.recv_wait_ns},
                     {"one_time_alloc_ns", in.pin_thread.one_time_alloc_ns},
                     {"one_time_allocs", in.pin_thread.one_time_allocs}};
  j["gpu"] = {
      {"measured", in.gpu.measured}, {"busy_ns", in.gpu.busy_ns}, {"covered", in.gpu.covered}};
  j["stages"] = json::array();
  for (const model::Stage& st : m.stages) {
    j["stages"].push_back({{"id", st.id},
                           {"name", st.name},
                           {"service_ns", st.service_ns},
                           {"utilization", st.utilization}});
  }
  j["parts"] = json::array();
  for (const model::Part& part : m.parts)
    j["parts"].push_back({{"id", part.id}, {"name", part.name}, {"ns", part.ns}});
  const PipelineAnalysis& pipeline = report.pipeline();
  const auto prediction_json = [&l, &pipeline](const model::Prediction& p) {
    json env = json::object();
    for (const auto& [k, v] : p.change.env) env[k] = v;
    const std::string where = WhereToChange(p.change, l);
    // The run measured this change itself (a loop of its own with it).
    json measured = nullptr;
    if (const PipelineAnalysis::Loop* loop = pipeline.LoopWith(p.change.id))
      measured = {{"steady_step_ns", loop->steady_step_ns}, {"loop_step_ns", loop->step_ns}};
    return json{{"measured_in_run", measured},
                {"change", p.change.id},
                {"what", p.change.what},
                {"env", env},
                {"code_change", p.change.code_change},
                {"step_ns", p.step_ns},
                {"speedup", p.speedup},
                {"limit_next", p.limit_next},
                {"basis", p.basis},
                {"uncertain", p.uncertain},
                {"where", where.empty() ? json(nullptr) : json(where)}};
  };
  j["all_predictions"] = json::array();
  for (const model::Prediction& p : m.all_predictions)
    j["all_predictions"].push_back(prediction_json(p));
  j["predictions"] = json::array();
  for (const model::Prediction& p : m.predictions) j["predictions"].push_back(prediction_json(p));
  j["advice"] = json::array();
  for (const std::string& a : m.advice) j["advice"].push_back(a);
  return j;
}

nlohmann::ordered_json JsonReport(const Report& report) {
  json j;
  j["schema_version"] = kReportSchemaVersion;
  j["tool"] = {{"name", "pinscope"}, {"version", PINSCOPE_VERSION}};
  const trace::ProcessHeader& root = report.root_header();
  json command = json::array();
  for (const std::string& arg : root.cmdline()) command.push_back(arg);
  size_t helpers = report.process_analysis().helpers();
  j["run"] = {{"dir", report.run_dir()},
              {"run_id", report.run_id()},
              {"command", command},
              {"start_wall_ns", root.start_wall_ns()},
              {"start_mono_ns", report.start_ns()},
              {"duration_ns", report.duration_ns()},
              {"processes", report.processes().size()},
              {"helpers", helpers},
              {"packets", report.packets()},
              {"shim_version", root.shim_version()}};
  j["host"] = HostJson(root);
  if (report.cuda()) {
    const trace::CudaRuntimeInfo& cuda = *report.cuda();
    json devices = json::array();
    for (const std::string& name : cuda.device_names()) devices.push_back(name);
    j["cuda"] = {{"runtime_path", cuda.runtime_path()},
                 {"runtime_version", cuda.runtime_version()},
                 {"driver_version", cuda.driver_version()},
                 {"device_count", cuda.device_count()},
                 {"devices", devices}};
  } else {
    j["cuda"] = nullptr;
  }
  const Calibration& calibration = report.calibration();
  json points = json::array();
  for (const BandwidthPoint& p : calibration.points) {
    points.push_back({{"bytes", p.bytes},
                      {"h2d_pageable_gbps", p.h2d_pageable_gbps},
                      {"h2d_pinned_gbps", p.h2d_pinned_gbps},
                      {"d2h_pageable_gbps", p.d2h_pageable_gbps},
                      {"d2h_pinned_gbps", p.d2h_pinned_gbps}});
  }
  j["calibration"] = {{"source", calibration.source},
                      {"gpu", calibration.gpu},
                      {"hostname", calibration.hostname},
                      {"date", calibration.date},
                      {"points", points}};

  const Verdict& verdict = report.verdict();
  j["verdict"] = {
      {"id", verdict.id}, {"severity", SeverityName(verdict.severity)}, {"text", verdict.text}};
  j["pipeline"] = PipelineJson(report);
  if (report.ranks() != nullptr) j["ranks"] = RanksJson(*report.ranks());
  j["findings"] = json::array();
  for (const Finding& finding : report.findings()) j["findings"].push_back(FindingJson(finding));
  j["not_assessed"] = json::array();
  for (const PendingCheck& check : report.pending()) {
    j["not_assessed"].push_back({{"id", check.id}, {"title", check.title}, {"needs", check.needs}});
  }

  const CopyAnalysis& copies = report.copies();
  json rows = json::array();
  for (const CopyRow& row : copies.rows()) rows.push_back(CopyRowJson(copies, row, true));
  j["copies"] = {{"rows", rows}, {"total", CopyRowJson(copies, copies.total(), false)}};

  json by_direction = json::array();
  for (bool h2d : {true, false}) {
    json row = {{"direction", h2d ? "H2D" : "D2H"}};
    row.update(CopyRowJson(copies, copies.pageable(h2d), false));
    by_direction.push_back(row);
  }
  json by_buffer = json::object();
  by_buffer["alloc"] =
      CopyRowJson(copies, copies.PageableByBuffer(HostBuffer::Kind::kAlloc), false);
  by_buffer["shm"] = CopyRowJson(copies, copies.PageableByBuffer(HostBuffer::Kind::kShm), false);
  by_buffer["unknown"] =
      CopyRowJson(copies, copies.PageableByBuffer(HostBuffer::Kind::kNone), false);
  json threads = json::array();
  for (const ThreadCopies& thread : copies.threads()) {
    threads.push_back({{"pid", thread.pid},
                       {"tid", thread.tid},
                       {"label", report.ThreadLabel(thread.process_index, thread.tid)},
                       {"life_ns", report.ProcessDuration(thread.process_index)},
                       {"copies", thread.copies},
                       {"blocked_ns", thread.blocked_ns},
                       {"pageable_copies", thread.pageable_copies},
                       {"pageable_bytes", thread.pageable_bytes},
                       {"pageable_blocked_ns", thread.pageable_blocked_ns},
                       {"pinned_estimate_ns", thread.pinned_estimate_ns},
                       {"loss_ns", thread.loss_ns}});
  }
  const CopyRow pageable = copies.PageableTotal();
  j["pageable_staging"] = {
      {"pinned_bandwidth_source", calibration.source},
      {"by_direction", by_direction},
      {"by_buffer", by_buffer},
      {"by_thread", threads},
      {"loss_ns", pageable.loss_ns},
      {"loss_fraction_of_run",
       report.duration_ns() == 0
           ? 0.0
           : std::round(static_cast<double>(pageable.loss_ns) / report.duration_ns() * 1e6) / 1e6}};

  json largest = json::array();
  for (const LargeCopy& record : copies.largest_pageable()) {
    largest.push_back({{"pid", record.pid},
                       {"tid", record.tid},
                       {"time_offset_ns", Since(record.time_ns, report.start_ns())},
                       {"direction", DirectionName(record.direction)},
                       {"api", CopyApiName(record.api)},
                       {"stream", record.stream},
                       {"bytes", record.bytes},
                       {"blocked_ns", record.blocked_ns},
                       {"loss_ns", record.loss_ns},
                       {"buffer", BufferJson(record.buffer)},
                       {"stack", record.stack}});
  }
  j["largest_pageable_copies"] = largest;

  json call_sites = json::array();
  for (const CallSite& site : report.call_sites().sites()) {
    const BufferSite& buffer = site.buffer;
    call_sites.push_back({{"python", site.python.empty() ? json(nullptr) : json(site.python)},
                          {"native", site.native.empty() ? json(nullptr) : json(site.native)},
                          {"frames", site.frames},
                          {"pids", site.pids},
                          {"copies", site.copies},
                          {"h2d", site.h2d},
                          {"d2h", site.d2h},
                          {"bytes", site.bytes},
                          {"blocked_ns", site.blocked_ns},
                          {"pinned_estimate_ns", site.pinned_estimate_ns},
                          {"loss_ns", site.loss_ns},
                          {"buffer",
                           {{"kind", buffer.kind == HostBuffer::Kind::kAlloc ? "alloc"
                                     : buffer.kind == HostBuffer::Kind::kShm ? "shm"
                                                                             : "unknown"},
                            {"site", buffer.site.empty() ? json(nullptr) : json(buffer.site)},
                            {"copies", buffer.copies},
                            {"pids", buffer.pids},
                            {"in_workers", buffer.in_workers},
                            {"pool", buffer.pool}}},
                          {"buffer_sites", site.buffer_sites}});
  }
  j["call_sites"] = call_sites;

  json processes = json::array();
  for (const ProcessSummary& p : report.processes()) {
    json children = json::array();
    for (int child : p.children) children.push_back(report.processes()[child].pid);
    json exit = nullptr;
    if (p.has_exit) exit = {{"how", ExitHowName(p.exit_how)}, {"status", p.exit_status}};
    processes.push_back(
        {{"pid", p.pid},
         {"ppid", p.ppid},
         {"parent_pid",
          p.parent_index < 0 ? json(nullptr) : json(report.processes()[p.parent_index].pid)},
         {"children", children},
         {"origin", OriginName(p.origin)},
         {"role", p.Role()},
         {"helper", p.helper},
         {"command", p.command},
         {"exe", p.exe},
         {"trace_file", p.path},
         {"start_offset_ns", Since(p.start_ns, report.start_ns())},
         {"life_ns", p.end_ns > p.start_ns ? p.end_ns - p.start_ns : 0},
         {"threads", p.threads},
         {"exit", exit},
         {"dropped_events", p.dropped_events},
         {"copies",
          {{"count", p.copies},
           {"h2d_bytes", p.h2d_bytes},
           {"d2h_bytes", p.d2h_bytes},
           {"other_bytes", p.other_bytes},
           {"blocked_ns", p.blocked_ns},
           {"pageable", p.pageable_copies}}},
         {"large_allocations", {{"count", p.allocs}, {"bytes", p.alloc_bytes}}},
         {"shm",
          {{"segments_created", p.shm_created},
           {"bytes_created", p.shm_created_bytes},
           {"maps", p.shm_maps},
           {"bytes_mapped", p.shm_mapped_bytes}}}});
  }
  j["processes"] = processes;
  // Additive (schema_version 1): only when a process took call stacks.
  const ProcessAnalysis& analysis = report.process_analysis();
  if (analysis.stacks_captured() > 0 || analysis.stack_capture_ns() > 0) {
    const auto fraction = [](uint64_t part, uint64_t whole) {
      return whole == 0 ? 0.0 : std::round(static_cast<double>(part) / whole * 1e6) / 1e6;
    };
    json by_process = json::array();
    for (const ProcessSummary& p : report.processes()) {
      if (p.stacks_captured == 0 && p.stack_capture_ns == 0) continue;
      const uint64_t life = p.end_ns > p.start_ns ? p.end_ns - p.start_ns : 0;
      by_process.push_back({{"pid", p.pid},
                            {"captured", p.stacks_captured},
                            {"capture_ns", p.stack_capture_ns},
                            {"fraction_of_life", fraction(p.stack_capture_ns, life)}});
    }
    j["stack_capture"] = {
        {"captured", analysis.stacks_captured()},
        {"capture_ns", analysis.stack_capture_ns()},
        {"fraction_of_run", fraction(analysis.stack_capture_ns(), report.duration_ns())},
        {"by_process", by_process}};
  }
  // Additive (schema_version 1): only when a shim wrote the own-cost counters.
  if (analysis.has_own_cost()) {
    const auto fraction = [](uint64_t part, uint64_t whole) {
      return whole == 0 ? 0.0 : std::round(static_cast<double>(part) / whole * 1e6) / 1e6;
    };
    json by_process = json::array();
    for (const ProcessSummary& p : report.processes()) {
      if (!p.has_own_cost()) continue;
      const uint64_t life = p.end_ns > p.start_ns ? p.end_ns - p.start_ns : 0;
      by_process.push_back({{"pid", p.pid},
                            {"hook_calls", p.hook_calls},
                            {"hook_ns", p.hook_ns},
                            {"hook_fraction_of_life", fraction(p.hook_ns, life)},
                            {"own_threads_cpu_ns", p.own_threads_cpu_ns}});
    }
    // Only the kinds that ran (none from shims before 2026-12-06).
    const auto kinds_json = [](const HookKindArray& kinds, const LoopOwnCost* loop) {
      json out = json::array();
      for (size_t k = 0; k < kinds.size(); ++k) {
        if (kinds[k].calls == 0 && kinds[k].ns == 0) continue;
        json entry = {{"kind", HookKindName(static_cast<trace::HookKind>(k))},
                      {"calls", kinds[k].calls},
                      {"ns", kinds[k].ns}};
        if (loop != nullptr) entry["ns_per_step"] = loop->PerStep(kinds[k].ns);
        out.push_back(std::move(entry));
      }
      return out;
    };
    j["own_cost"] = {{"hook_calls", analysis.hook_calls()},
                     {"hook_ns", analysis.hook_ns()},
                     {"hook_fraction_of_run", fraction(analysis.hook_ns(), report.duration_ns())},
                     {"own_threads_cpu_ns", analysis.own_threads_cpu_ns()},
                     {"stack_capture_ns", analysis.stack_capture_ns()},
                     {"pointer_queries", analysis.pointer_queries()},
                     {"pointer_query_ns", analysis.pointer_query_ns()},
                     {"cupti_switches", analysis.cupti_switches()},
                     {"cupti_switch_ns", analysis.cupti_switch_ns()},
                     {"hook_kinds", kinds_json(analysis.hook_kinds(), nullptr)},
                     {"by_process", by_process}};
    // What the device-record windows cost the loop's steps (window_cost.h).
    json windows = json::array();
    for (const WindowEffect& w : report.window_cost().windows()) {
      windows.push_back({{"attach_offset_ns", w.attach_ns - report.start_ns()},
                         {"length_ns", w.length_ns()},
                         {"baseline_interval_ns", w.baseline_interval_ns},
                         {"baseline_sides", w.baseline_sides},
                         {"intervals_in", w.intervals_in},
                         {"time_in_ns", w.time_in_ns},
                         {"excess_in_ns", w.excess_in_ns},
                         {"intervals_after", w.intervals_after},
                         {"time_after_ns", w.time_after_ns},
                         {"excess_after_ns", w.excess_after_ns},
                         {"paused", w.paused},
                         {"longest_interval_ns", w.longest_interval_ns}});
    }
    if (!windows.empty()) {
      j["own_cost"]["device_windows"] = {{"windows", windows},
                                         {"loop_ns", report.window_cost().loop_ns()},
                                         {"loop_steps", report.window_cost().loop_steps()},
                                         {"after_ns", WindowCostAnalysis::kAfterNs},
                                         {"next_gap_ns", report.window_cost().period_gap_ns()}};
    }
    if (const std::optional<LoopOwnCost> loop = LoopOwnCostOf(report)) {
      const OwnCostSpan& s = loop->span;
      j["own_cost"]["loop"] = {{"span_ns", s.length_ns()},
                               {"step_ns", loop->step_ns},
                               {"hook_calls", s.hook_calls},
                               {"hook_ns", s.hook_ns},
                               {"stack_capture_ns", s.stack_capture_ns},
                               {"pointer_queries", s.pointer_queries},
                               {"pointer_query_ns", s.pointer_query_ns},
                               {"cupti_switches", s.cupti_switches},
                               {"cupti_switch_ns", s.cupti_switch_ns},
                               {"own_threads_cpu_ns", s.own_threads_cpu_ns},
                               {"hook_ns_per_step", loop->PerStep(s.hook_ns)},
                               {"hook_fraction_of_step", fraction(s.hook_ns, s.length_ns())},
                               {"hook_kinds", kinds_json(s.hook_kinds, &*loop)}};
    }
  }

  const ShmAnalysis& shm = report.shm();
  json shares = json::array();
  for (const ShmShare& share : shm.shares()) {
    shares.push_back({{"pid", share.process_index < 0 ? json(nullptr) : json(share.pid)},
                      {"segments_created", share.segments_created},
                      {"bytes_created", share.bytes_created},
                      {"bytes_at_peak", share.bytes_at_peak},
                      {"maps", share.maps},
                      {"bytes_mapped", share.bytes_mapped}});
  }
  json sigbus = json::array();
  for (const ShmSigbus& bus : shm.sigbus()) {
    sigbus.push_back({{"pid", bus.pid},
                      {"time_offset_ns", Since(bus.time_ns, report.start_ns())},
                      {"address", bus.address},
                      {"segment", bus.segment},
                      {"offset", bus.offset},
                      {"segment_size", bus.size_known ? json(bus.segment_size) : json(nullptr)},
                      {"past_end", bus.past_end()},
                      {"diagnosis", bus.diagnosis}});
  }
  const uint64_t room =
      shm.free_bytes_at_start() > 0 ? shm.free_bytes_at_start() : shm.capacity_bytes();
  j["shm"] = {{"capacity_bytes", shm.capacity_bytes()},
              {"free_at_start_bytes", shm.free_bytes_at_start()},
              {"peak_bytes", shm.peak_bytes()},
              {"peak_time_offset_ns", Since(shm.peak_time_ns(), report.start_ns())},
              {"peak_segments", shm.peak_segments()},
              {"headroom_bytes", room > shm.peak_bytes() ? room - shm.peak_bytes() : 0},
              {"warning", shm.warning()},
              {"recommended_shm_size_bytes", shm.RecommendedShmSize()},
              {"segments", shm.segments()},
              {"bytes_created", shm.bytes_created()},
              {"leaked_segments", shm.leaked_segments()},
              {"leaked_bytes", shm.leaked_bytes()},
              {"driver_segments", shm.driver_segments()},
              {"memfd_segments", shm.memfd_segments()},
              {"memfd_bytes", shm.memfd_bytes()},
              {"failed_calls", shm.failed_calls()},
              {"by_process", shares},
              {"sigbus", sigbus}};

  const AllocAnalysis& allocs = report.allocs();
  json histogram = json::array();
  for (const AllocBucket& bucket : allocs.histogram()) {
    histogram.push_back(
        {{"min_bytes", bucket.min_bytes},
         {"max_bytes", bucket.max_bytes == 0 ? json(nullptr) : json(bucket.max_bytes)},
         {"count", bucket.count},
         {"bytes", bucket.bytes},
         {"fed_copies", bucket.fed_copies}});
  }
  json by_api = json::array();
  for (const auto& [api, stats] : allocs.by_api()) {
    by_api.push_back({{"api", AllocApiName(api)}, {"count", stats.count}, {"bytes", stats.bytes}});
  }
  j["allocations"] = {{"count", allocs.count()},
                      {"bytes", allocs.bytes()},
                      {"freed", allocs.freed()},
                      {"peak_live_bytes", allocs.peak_live_bytes()},
                      {"fed_allocations", allocs.fed_allocations()},
                      {"copies_fed", allocs.copies_fed()},
                      {"pageable_copies_fed", allocs.pageable_copies_fed()},
                      {"bytes_fed", allocs.bytes_fed()},
                      {"by_api", by_api},
                      {"histogram", histogram}};

  json notices = json::array();
  for (const NoticeRecord& notice : report.process_analysis().notices()) {
    notices.push_back({{"pid", notice.pid},
                       {"severity", NoticeSeverityName(notice.severity)},
                       {"code", notice.code},
                       {"text", notice.text},
                       {"count", notice.count},
                       {"time_offset_ns", Since(notice.first_time_ns, report.start_ns())}});
  }
  j["notices"] = notices;
  json problems = json::array();
  for (const Problem& problem : report.problems()) {
    problems.push_back({{"file", problem.file},
                        {"severity", SeverityName(problem.severity)},
                        {"message", problem.message}});
  }
  j["problems"] = problems;
  // Additive keys (schema_version 1): batch loop, pinning, device activity.
  const InputAnalysis& input = report.input();
  const BatchLoop& loop = input.loop();
  const json pin_cost = loop.host_copy_gbps > 0 ? json(loop.pin_cost_ns) : json(nullptr);
  j["batch_loop"] = {{"found", loop.found},
                     {"batches", loop.batches},
                     {"batch_bytes", loop.batch_bytes},
                     {"median_interval_ns", loop.median_interval_ns},
                     {"median_copy_ns", loop.median_copy_ns},
                     {"workers", input.workers()},
                     {"available_cores", report.AvailableCores()},
                     {"mean_interval_ns", loop.mean_interval_ns()},
                     {"pinned_batches", loop.pinned_batches},
                     {"pin_thread_tid", input.pin_thread().tid},
                     {"host_copy_gbps", loop.host_copy_gbps},
                     {"pin_cost_ns", pin_cost},
                     {"batch_pinning",
                      {{"pinscope_batches", loop.pinscope_batches},
                       {"registered_at_copy", loop.registered_at_copy},
                       {"registered_ahead", loop.registered_ahead},
                       {"reused", loop.reused},
                       {"pool", loop.pool},
                       {"cached", loop.cached},
                       {"host_copies_avoided", loop.pinscope_batches},
                       {"dma_bytes", loop.dma_bytes},
                       {"pool_maps", loop.pool_maps}}},
                     {"fresh_mmap_batches", loop.fresh_mmap_batches},
                     {"first_touch_gbps", loop.first_touch_gbps},
                     {"fresh_fault_ns", loop.fresh_fault_ns}};
  {
    nlohmann::ordered_json threads = nlohmann::ordered_json::array();
    for (const SyncThread& t : input.sync_waits().threads) {
      nlohmann::ordered_json sites = nlohmann::ordered_json::array();
      for (const SyncSite& site : t.sites) {
        sites.push_back({{"site", site.site},
                         {"via_copy", site.via_copy},
                         {"calls", site.calls},
                         {"syncs", site.syncs},
                         {"copies", site.copies},
                         {"h2d", site.h2d},
                         {"d2h", site.d2h},
                         {"copy_bytes", site.copy_bytes},
                         {"wait_ns", site.wait_ns},
                         {"saving_ns", site.saving_ns},
                         {"apis", site.apis}});
      }
      threads.push_back({{"pid", t.pid},
                         {"tid", t.tid},
                         {"span_ns", t.span_ns},
                         {"calls", t.calls},
                         {"waiting_calls", t.waiting_calls},
                         {"wait_ns", t.wait_ns},
                         {"sync_wait_ns", t.sync_wait_ns},
                         {"copy_wait_ns", t.copy_wait_ns},
                         {"host_ns", t.host_ns},
                         {"saving_ns", t.saving_ns},
                         {"copies_joined", t.copies_joined},
                         {"copies_calibrated", t.copies_calibrated},
                         {"sites", sites}});
    }
    j["sync_waits"] = {{"threads", threads}, {"dropped_calls", input.sync_waits().dropped_calls}};
  }
  if (input.has_pins()) {
    const PinStats& p = input.pins();
    nlohmann::ordered_json reasons = nlohmann::ordered_json::object();
    for (const auto& [reason, count] : p.unpin_reasons) reasons[reason] = count;
    nlohmann::ordered_json errors = nlohmann::ordered_json::object();
    for (const auto& [error, count] : p.failed_unregister_errors) {
      errors[std::to_string(error)] = count;
    }
    j["pinning"] = {{"registers", p.registers},
                    {"register_bytes", p.register_bytes},
                    {"register_ns", p.register_ns},
                    {"ahead_registers", p.ahead_registers},
                    {"ahead_register_ns", p.ahead_register_ns},
                    {"shm_registers", p.shm_registers},
                    {"shm_bytes", p.shm_bytes},
                    {"alloc_registers", p.alloc_registers},
                    {"alloc_bytes", p.alloc_bytes},
                    {"pool_registers", p.pool_registers},
                    {"pool_bytes", p.pool_bytes},
                    {"register_failed", p.register_failed},
                    {"budget_full", p.budget_full},
                    {"recycles", p.recycles},
                    {"reuses", p.reuses},
                    {"unpin_reasons", reasons},
                    {"failed_unregisters", p.failed_unregisters},
                    {"failed_unregister_errors", errors},
                    {"stayed_pinned_bytes", p.stayed_pinned_bytes},
                    {"peak_pinned_bytes", p.peak_pinned_bytes},
                    {"pinned_copies", p.pinned_copies},
                    {"pinned_registered", p.pinned_registered},
                    {"pinned_cached", p.pinned_cached},
                    {"pinned_copy_bytes", p.pinned_copy_bytes},
                    {"pinned_copy_blocked_ns", p.pinned_copy_blocked_ns},
                    {"pinned_copy_at_pageable_ns", p.pinned_copy_at_pageable_ns}};
  }
  if (!input.devices().empty()) {
    nlohmann::ordered_json devices = nlohmann::ordered_json::array();
    for (const ProcessDevice& pd : input.devices()) {
      const device::KernelRecording& rec = pd.result.recording;
      for (const device::DeviceBusy& busy : pd.result.devices) {
        // Unknown figures (no kernel recorded in the window or the chunk) are null.
        const bool none = busy.kernels_sampled() && !busy.measured();
        const auto fraction = [&](double f) {
          return f < 0 || none ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(f);
        };
        nlohmann::ordered_json chunks = nlohmann::ordered_json::array();
        for (double f : busy.chunk_busy_fraction) chunks.push_back(fraction(f));
        // Idle gaps by what the host was doing: {cause: {gaps, idle_ns}}.
        nlohmann::ordered_json by_cause = nlohmann::ordered_json::object();
        for (int c = 0; c < device::kGapCauses; ++c) {
          by_cause[device::GapCauseName(static_cast<device::GapCause>(c))] = {
              {"gaps", busy.by_cause[c].gaps}, {"idle_ns", busy.by_cause[c].idle_ns}};
        }
        devices.push_back(
            {{"pid", pd.pid},
             {"device_id", busy.device_id},
             {"busy_fraction", fraction(busy.busy_fraction)},
             {"active_busy_fraction", fraction(busy.active_busy_fraction)},
             {"chunk_busy_fraction", chunks},
             {"gap_count", busy.gap_count},
             {"gap_ns", busy.gap_ns},
             {"gaps_by_cause", by_cause},
             {"kernels", !busy.kernels_sampled() ? "all"
                         : busy.measured()       ? "sampled"
                                                 : "none"},
             {"busy_source", busy.source == device::BusySource::kUtilization ? "nvml" : "records"},
             {"nvml_samples", busy.utilization_samples},
             {"nvml_period_ns", busy.utilization_period_ns},
             {"nvml_busy_fraction", busy.utilization_samples
                                        ? nlohmann::ordered_json(busy.utilization_busy_fraction)
                                        : nlohmann::ordered_json(nullptr)},
             {"blind_ns", busy.blind_ns},
             {"covered_fraction", busy.covered_fraction()},
             {"kernel_recording",
              {{"mode", rec.mode},
               {"stops", rec.stops},
               {"windows", rec.windows},
               {"peak_kernel_rate", rec.peak_kernel_rate}}},
             {"join",
              {{"method",
                pd.result.join_method == device::JoinMethod::kOrder ? "order" : "correlation"},
               {"joined", pd.result.join.joined},
               {"device_unmatched", pd.result.join.device_unmatched},
               {"host_copies_unmatched", pd.result.join.host_copies_unmatched},
               {"correlations", pd.result.join.correlations}}}});
        if (pd.result.windows.sampled()) {
          const device::DeviceWindows& w = pd.result.windows;
          devices.back()["device_windows"] = {{"windows", w.windows},
                                              {"detached_ns", w.detached_ns},
                                              {"before_first_ns", w.before_first_ns},
                                              {"recorded_fraction", w.recorded_fraction()},
                                              {"host_calls_between", w.host_calls_between}};
        }
      }
    }
    j["device_activity"] = devices;
  }
  return j;
}

}  // namespace pinscope
