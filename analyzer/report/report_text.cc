// The text report for a person: header, verdict, what to change, then the
// evidence sections (copies, staging estimate, largest pageable copies,
// processes, shared memory, large allocations) and the notices and reader
// problems. Fits 100 columns; colour only when asked for.
#include <algorithm>
#include <ctime>
#include <functional>
#include <ostream>
#include <sstream>

#include "analyzer/common/doc_path.h"
#include "analyzer/common/format.h"
#include "analyzer/common/trace_names.h"
#include "analyzer/report/loader_knobs.h"
#include "analyzer/report/own_cost_text.h"
#include "analyzer/report/report.h"
#include "analyzer/report/run_facts.h"

namespace pinscope {

namespace {

std::string Wrap(const std::string& text, size_t first_width, size_t width,
                 const std::string& indent) {
  return WrapWords(text, first_width, width, indent);
}

std::string Offset(uint64_t time_ns, uint64_t start_ns) {
  const uint64_t ns = time_ns > start_ns ? time_ns - start_ns : 0;
  return StringPrintf("+%.3f s", static_cast<double>(ns) / 1e9);
}

// Why and how kernels were recorded only part of the time: "auto mode: up to
// 31,000 kernels/s", "PINSCOPE_CUPTI_KERNELS=off", "another tool took CUPTI".
std::string KernelRecordingText(const device::KernelRecording& r) {
  std::string text;
  if (r.mode == "auto") {
    text = "auto mode";
    if (r.peak_kernel_rate > 0) {
      text +=
          ": up to " + FormatCount(static_cast<uint64_t>(r.peak_kernel_rate + 0.5)) + " kernels/s";
    }
  } else if (r.mode == "off") {
    text = "PINSCOPE_CUPTI_KERNELS=off";
  } else if (r.mode == "step_aside") {
    text = "another tool took CUPTI";
  } else {
    text = "reason: " + (r.mode.empty() ? std::string("unknown") : r.mode);
  }
  return text;
}

class TextWriter {
 public:
  TextWriter(const Report& report, bool color, std::ostream& out)
      : report_(report), style_(color), out_(out) {}

  void Write() {
    Header();
    VerdictSection();
    if (report_.ranks() != nullptr) {  // each rank's model, and the job's (job_ranks.h)
      WriteRanksText(*report_.ranks(), style_.color(), out_);
    } else {
      ChangeSection();
      PipelineSection();
    }
    CopySection();
    StagingSection();
    LargestSection();
    CallSiteSection();
    ProcessSection();
    ShmSection();
    PinningSection();
    DeviceSection();
    AllocSection();
    NoticeSection();
  }

 private:
  void Title(const std::string& title) { out_ << '\n' << style_.Bold(title) << '\n'; }
  void Field(const std::string& label, const std::string& value) {
    const std::string prefix = StringPrintf("%-10s ", label.c_str());
    out_ << prefix
         << Wrap(value, kReportWidth - prefix.size(), kReportWidth - prefix.size(),
                 std::string(prefix.size(), ' '))
         << '\n';
  }
  void Para(const std::string& text, const std::string& indent = "  ") {
    out_ << indent << Wrap(text, kReportWidth - indent.size(), kReportWidth - indent.size(), indent)
         << '\n';
  }
  std::string Severe(Severity severity, const std::string& text) const {
    switch (severity) {
      case Severity::kError:
        return style_.Bad(text);
      case Severity::kWarning:
        return style_.Warn(text);
      default:
        return text;
    }
  }

  void Header();
  void VerdictSection();
  void ChangeSection();
  void PipelineSection();
  void ModelChanges();
  void CopySection();
  void StagingSection();
  void LargestSection();
  void CallSiteSection();
  void ProcessSection();
  void ShmSection();
  void PinningSection();
  void DeviceSection();
  void AllocSection();
  void NoticeSection();

  const Report& report_;
  Style style_;
  std::ostream& out_;
};

void TextWriter::Header() {
  out_ << style_.Bold("pinscope report: " + report_.run_dir()) << '\n';
  for (const RunFact& fact : RunFacts(report_)) Field(fact.name, fact.value);
}

void TextWriter::VerdictSection() {
  Title("Verdict");
  const Verdict& verdict = report_.verdict();
  std::string text = Wrap(verdict.text, kReportWidth - 2, kReportWidth - 2, "  ");
  if (verdict.severity == Severity::kInfo) text = style_.Good(text);
  out_ << "  " << Severe(verdict.severity, text) << '\n';
}

// The pipeline model's predictions: each change's re-timed step.
void TextWriter::ModelChanges() {
  const model::Result& m = report_.model();
  const double step = report_.model_inputs().main.step_ns;
  const int batch = report_.model_inputs().loader.batch_size;
  int n = 0;
  for (const model::Prediction& p : m.predictions) {
    const double saved = step - p.step_ns;
    if (saved < m.floor_ns && p.speedup < 1.02) continue;
    if (m.verdict == model::Class::kGpuBound) break;  // no input change is worth it
    ++n;
    std::string head = std::to_string(n) + ". " + p.change.what + ": step " +
                       FormatDuration(static_cast<uint64_t>(step)) + " -> " +
                       FormatDuration(static_cast<uint64_t>(p.step_ns)) +
                       StringPrintf(" (%.2fx", p.speedup);
    if (batch > 0) head += StringPrintf(", %.0f samples/s", p.speedup * batch * 1e9 / step);
    head += ")";
    out_ << "  "
         << Severe(n == 1 ? Severity::kWarning : Severity::kInfo,
                   Wrap(head, kReportWidth - 2, kReportWidth - 5, "     "))
         << '\n';
    const std::string where = WhereToChange(p.change, report_.model_inputs().loader);
    if (!where.empty()) Para("Where: " + where + ".", "     ");
    Para("How: " + p.basis + "." +
             (p.limit_next.empty() ? "" : " Then the limit is " + p.limit_next + ".") +
             (p.uncertain ? " Part of this is calibrated, not measured in this run: check it with "
                            "`pinscope diff`."
                          : ""),
         "     ");
    const std::string measured = MeasuredInRun(report_, p.change.id);
    if (!measured.empty()) Para(measured, "     ");
    if (n == 5) break;
  }
  if (n == 0) {
    const std::string rest = GpuBoundRest(m, step);
    Para(m.verdict == model::Class::kGpuBound
             ? (rest.empty() ? "Nothing in the input pipeline: the GPU sets the pace. Faster "
                               "kernels (bf16/TF32, fused ops, torch.compile) are what would help."
                             : "The GPU sets the pace: faster kernels (bf16/TF32, fused ops, "
                               "torch.compile) are what would help most." +
                                   rest)
             : "No change pinscope can time saves more than " +
                   FormatDuration(static_cast<uint64_t>(m.floor_ns)) + " a step.",
         "  ");
  }
  for (const std::string& advice : m.advice) Para(advice, "  ");
  for (const Finding& finding : report_.findings()) {
    if (finding.kind == Finding::Kind::kTime) continue;
    ++n;
    out_ << "  "
         << Severe(finding.severity,
                   std::to_string(n) + ". " + finding.title +
                       (finding.kind == Finding::Kind::kRisk ? ": risk of failure"
                                                             : ": the job failed"))
         << '\n';
    Para(finding.action, "     ");
    Para("Evidence: " + finding.evidence, "     ");
  }
}

void TextWriter::PipelineSection() {
  const model::Result& m = report_.model();
  const model::Inputs& in = report_.model_inputs();
  // A loop the model saw but could not time: said, not left out silently.
  if (!m.valid && (in.main.largest_copies_burst || in.main.loader_thread_apart)) {
    Title("The step as a pipeline");
    Para("Not modelled: " + m.why_not + ".", "  ");
  }
  if (!m.valid || m.stages.empty()) return;
  Title("The step as a pipeline (" + FormatCount(in.main.steps) + " steady steps, " +
        (in.main.timed_by_hook ? "DataLoader timed by pinscope's Python hook"
                               : "steps inferred from the batch copies") +
        ")");
  for (const std::string& note : SteadyWindowNotes(report_)) Para(note, "  ");
  out_ << "  Stage service time per step, and its share of the "
       << FormatDuration(static_cast<uint64_t>(in.main.step_ns)) << " step:\n";
  for (const model::Stage& st : m.stages) {
    const bool critical = st.id == m.critical;
    std::string line = StringPrintf("    %-52s %10s  %4.0f%%", st.name.c_str(),
                                    FormatDuration(static_cast<uint64_t>(st.service_ns)).c_str(),
                                    100 * st.utilization);
    if (critical) line += "  <- limits the step";
    out_ << (critical ? style_.Warn(line) : line) << '\n';
  }
  out_ << "  The main thread's step:\n";
  for (const model::Part& part : m.parts) {
    out_ << StringPrintf("    %-52s %10s  %4.0f%%\n", part.name.c_str(),
                         FormatDuration(static_cast<uint64_t>(part.ns)).c_str(),
                         100 * part.ns / in.main.step_ns);
  }
}

void TextWriter::ChangeSection() {
  Title("What to change (in order of expected gain)");
  if (report_.model().valid) {
    ModelChanges();
    return;
  }
  int n = 0;
  for (const Finding& finding : report_.findings()) {
    if (finding.kind == Finding::Kind::kTime && !finding.significant) continue;
    ++n;
    std::string head = std::to_string(n) + ". " + finding.title;
    if (finding.kind == Finding::Kind::kTime) {
      head += ": save about " + FormatDuration(finding.saving_ns);
    } else if (finding.kind == Finding::Kind::kRisk) {
      head += ": risk of failure";
    } else {
      head += ": the job failed";
    }
    out_ << "  " << Severe(finding.severity, head) << '\n';
    Para(finding.action, "     ");
    Para("Evidence: " + finding.evidence, "     ");
  }
  if (n == 0) out_ << "  Nothing the recorded data says is worth changing.\n";
  if (!report_.pending().empty()) {
    out_ << "  Not assessed yet (needs data a later recorder brings):\n";
    for (const PendingCheck& check : report_.pending()) {
      out_ << "    - "
           << Wrap(check.title + ": needs " + check.needs, kReportWidth - 6, kReportWidth - 6,
                   "      ")
           << '\n';
    }
  }
}

void TextWriter::CopySection() {
  Title("Copies by direction and host memory (achieved = bytes / host-blocked time)");
  const CopyAnalysis& copies = report_.copies();
  if (copies.rows().empty()) {
    out_ << "  No copies recorded.\n";
    return;
  }
  TextTable table({{"Direction"},
                   {"Memory"},
                   {"Count", TextTable::Align::kRight},
                   {"Bytes", TextTable::Align::kRight},
                   {"Blocked", TextTable::Align::kRight},
                   {"Achieved", TextTable::Align::kRight},
                   {"Pinned (calibrated)", TextTable::Align::kRight},
                   {"Failed", TextTable::Align::kRight}});
  for (const CopyRow& row : copies.rows()) {
    table.AddRow({DirectionName(row.direction), MemoryKindName(row.kind), FormatCount(row.count),
                  FormatBytes(row.bytes), FormatDuration(row.blocked_ns),
                  row.kind == trace::PAGEABLE ? FormatGbps(row.AchievedGbps()) : "n/a",
                  FormatGbps(copies.CalibratedPinnedGbps(row)),
                  row.failed == 0 ? "" : FormatCount(row.failed)});
  }
  const CopyRow& total = copies.total();
  table.AddRow({"total", "", FormatCount(total.count), FormatBytes(total.bytes),
                FormatDuration(total.blocked_ns), "", "",
                total.failed == 0 ? "" : FormatCount(total.failed)});
  table.Render(out_, style_);
  Para(
      "Pinned (calibrated): the pinned bandwidth at the row's mean copy size. Achieved is shown "
      "for pageable rows only: copies from pinned or device memory can return before the "
      "transfer ends, so their host-blocked time is not a transfer time.");
}

void TextWriter::StagingSection() {
  Title("Time lost to pageable staging");
  const CopyAnalysis& copies = report_.copies();
  out_ << "  "
       << Wrap("Pinned bandwidth from: " + copies.calibration().source, kReportWidth - 2,
               kReportWidth - 2, "  ")
       << '\n';
  const CopyRow total = copies.PageableTotal();
  if (total.count == 0) {
    out_ << "  No pageable H2D or D2H copies: nothing is lost to staging.\n";
    return;
  }
  TextTable table({{"Direction"},
                   {"Copies", TextTable::Align::kRight},
                   {"Bytes", TextTable::Align::kRight},
                   {"Blocked", TextTable::Align::kRight},
                   {"At pinned", TextTable::Align::kRight},
                   {"Lost", TextTable::Align::kRight}});
  for (bool h2d : {true, false}) {
    const CopyRow& row = copies.pageable(h2d);
    if (row.count == 0) continue;
    table.AddRow({h2d ? "H2D" : "D2H", FormatCount(row.count), FormatBytes(row.bytes),
                  FormatDuration(row.blocked_ns), FormatDuration(row.pinned_estimate_ns),
                  FormatDuration(row.loss_ns)});
  }
  table.AddRow({"total", FormatCount(total.count), FormatBytes(total.bytes),
                FormatDuration(total.blocked_ns), FormatDuration(total.pinned_estimate_ns),
                FormatDuration(total.loss_ns)});
  table.Render(out_, style_);
  const uint64_t run = report_.duration_ns();
  Para("Estimated loss: " + FormatDuration(total.loss_ns) + " (" +
       FormatPercent(run == 0 ? 0 : static_cast<double>(total.loss_ns) / run) + " of the run's " +
       FormatDuration(run) +
       "), per copy: host-blocked time minus bytes / pinned bandwidth, never "
       "below zero.");
  const auto& threads = copies.threads();
  TextTable by_thread({{"Thread"},
                       {"Pageable copies", TextTable::Align::kRight},
                       {"Blocked", TextTable::Align::kRight},
                       {"Lost", TextTable::Align::kRight},
                       {"Share of its life", TextTable::Align::kRight}});
  for (const ThreadCopies& thread : threads) {
    if (thread.pageable_copies == 0) continue;
    const uint64_t life = report_.ProcessDuration(thread.process_index);
    by_thread.AddRow({report_.ThreadLabel(thread.process_index, thread.tid),
                      FormatCount(thread.pageable_copies),
                      FormatDuration(thread.pageable_blocked_ns), FormatDuration(thread.loss_ns),
                      life == 0 ? "-" : FormatPercent(static_cast<double>(thread.loss_ns) / life)});
    if (by_thread.rows() >= static_cast<size_t>(report_.options().top)) break;
  }
  if (by_thread.rows() > 0) by_thread.Render(out_, style_);
}

void TextWriter::LargestSection() {
  const auto& largest = report_.copies().largest_pageable();
  Title("Largest pageable copies (top " + std::to_string(report_.options().top) +
        ", with the buffer that fed each)");
  if (largest.empty()) {
    out_ << "  None.\n";
    return;
  }
  TextTable table({{"#", TextTable::Align::kRight},
                   {"When", TextTable::Align::kRight},
                   {"PID", TextTable::Align::kRight},
                   {"Dir"},
                   {"Bytes", TextTable::Align::kRight},
                   {"Blocked", TextTable::Align::kRight},
                   {"Achieved", TextTable::Align::kRight},
                   {"Buffer", TextTable::Align::kLeft, true}});
  int n = 0;
  for (const LargeCopy& record : largest) {
    table.AddRow({std::to_string(++n), Offset(record.time_ns, report_.start_ns()),
                  std::to_string(record.pid), DirectionName(record.direction),
                  FormatBytes(record.bytes), FormatDuration(record.blocked_ns),
                  FormatGbps(record.blocked_ns == 0 ? 0
                                                    : static_cast<double>(record.bytes) /
                                                          static_cast<double>(record.blocked_ns)),
                  record.buffer.Describe()});
  }
  table.Render(out_, style_);
  // Where these copies were made: the "Call sites" section below, which
  // aggregates every pageable copy by its site.
  if (!report_.call_sites().sites().empty()) {
    out_ << "  Their call sites and buffer origins: see \"Call sites\" below.\n";
  }
}

// Keeps the end of a frame (file:line function) when it is too wide: the
// path's head is the least telling part.
std::string CutLeft(const std::string& text, size_t width) {
  if (text.size() <= width || width < 4) return text;
  return "..." + text.substr(text.size() - (width - 3));
}

std::string PidList(const std::vector<uint32_t>& pids) {
  std::string text;
  for (size_t i = 0; i < pids.size() && i < 8; ++i) {
    text += (text.empty() ? "" : " ") + std::to_string(pids[i]);
  }
  if (pids.size() > 8) text += " ...";
  return text;
}

void TextWriter::CallSiteSection() {
  const CallSiteAnalysis& calls = report_.call_sites();
  Title("Call sites (top " + std::to_string(report_.options().top) +
        " by time lost to pageable staging)");
  if (calls.sites().empty()) {
    out_ << "  None: no pageable H2D or D2H copies.\n";
    return;
  }
  Para(
      "Site: the innermost Python frame of the copy's stack, then its innermost native frame "
      "(module+offset). " +
      FormatCount(calls.total_sites()) + " sites; " + FormatCount(calls.copies_with_stack()) +
      " pageable copies with a recorded stack, " + FormatCount(calls.copies_without_stack()) +
      " without.");
  TextTable table({{"#", TextTable::Align::kRight},
                   {"Copies", TextTable::Align::kRight},
                   {"Bytes", TextTable::Align::kRight},
                   {"Blocked", TextTable::Align::kRight},
                   {"Lost", TextTable::Align::kRight},
                   {"Site", TextTable::Align::kLeft, true}});
  int n = 0;
  for (const CallSite& site : calls.sites()) {
    const std::string& where = !site.python.empty()   ? site.python
                               : !site.native.empty() ? site.native
                                                      : std::string("(no stack recorded)");
    table.AddRow({std::to_string(++n), FormatCount(site.copies), FormatBytes(site.bytes),
                  FormatDuration(site.blocked_ns), FormatDuration(site.loss_ns),
                  CutLeft(where, 48)});
  }
  table.Render(out_, style_);
  const size_t width = kReportWidth - 13;
  n = 0;
  for (const CallSite& site : calls.sites()) {
    out_ << StringPrintf("  %3d  ", ++n);
    std::string head = "pid " + PidList(site.pids);
    if (site.h2d > 0) head += ", " + FormatCount(site.h2d) + " H2D";
    if (site.d2h > 0) head += ", " + FormatCount(site.d2h) + " D2H";
    if (site.copies > 0) head += ", " + FormatBytes(site.bytes / site.copies) + " each on average";
    out_ << Truncate(head, kReportWidth - 7) << '\n';
    for (size_t i = 0; i < site.frames.size(); ++i) {
      out_ << "       " << (i == 0 ? "at   " : "from ") << CutLeft(site.frames[i], width) << '\n';
    }
    if (!site.native.empty() && !site.python.empty()) {
      out_ << "       "
           << "in   " << CutLeft(site.native, width) << '\n';
    }
    const BufferSite& buffer = site.buffer;
    std::string fed;
    if (buffer.kind == HostBuffer::Kind::kNone) {
      fed = "not a recorded buffer";
    } else if (buffer.pool) {
      fed = "slots of pinscope's pool (PINSCOPE_PIN_POOL; the workers wrote the batches there)";
    } else {
      fed = std::string(buffer.kind == HostBuffer::Kind::kShm ? "shm segment created at "
                                                              : "allocated at ") +
            (buffer.site.empty() ? std::string("(no stack recorded)") : CutLeft(buffer.site, 60));
      if (!buffer.pids.empty()) {
        fed += buffer.in_workers ? " in workers (pid " : " (pid ";
        fed += PidList(buffer.pids) + ")";
      }
    }
    fed += ": " + FormatCount(buffer.copies) + " of " + FormatCount(site.copies) + " copies";
    if (site.buffer_sites > 1) {
      fed += "; " + FormatCount(site.buffer_sites - 1) + " other buffer site" +
             (site.buffer_sites == 2 ? "" : "s");
    }
    out_ << "       buffers "
         << Wrap(fed, kReportWidth - 15, kReportWidth - 15, std::string(15, ' ')) << '\n';
  }
}

void TextWriter::ProcessSection() {
  const auto& processes = report_.processes();
  const bool show_helpers = report_.options().show_helpers;
  size_t folded = 0;
  TextTable table({{"PID", TextTable::Align::kLeft},
                   {"Role"},
                   {"Life", TextTable::Align::kRight},
                   {"Copies", TextTable::Align::kRight},
                   {"Copied", TextTable::Align::kRight},
                   {"Blocked", TextTable::Align::kRight},
                   {"Allocs", TextTable::Align::kRight},
                   {"Shm made", TextTable::Align::kRight},
                   {"Shm mapped", TextTable::Align::kRight}});
  // Command lines go below the table (they would not fit beside it); a
  // forked worker's is the same as its parent's and is not repeated.
  std::vector<int> commands;
  const auto bytes_or_dash = [](uint64_t bytes) { return bytes == 0 ? "-" : FormatBytes(bytes); };
  std::function<void(int, const std::string&, const std::string&)> visit =
      [&](int index, const std::string& lead, const std::string& next_lead) {
        const ProcessSummary& p = processes[index];
        table.AddRow(
            {lead + std::to_string(p.pid), p.Role(),
             FormatDuration(p.end_ns > p.start_ns ? p.end_ns - p.start_ns : 0),
             FormatCount(p.copies), bytes_or_dash(p.h2d_bytes + p.d2h_bytes + p.other_bytes),
             p.copies == 0 ? "-" : FormatDuration(p.blocked_ns),
             p.allocs == 0 ? "-" : FormatCount(p.allocs) + " / " + FormatBytes(p.alloc_bytes),
             p.shm_created == 0
                 ? "-"
                 : FormatCount(p.shm_created) + " / " + FormatBytes(p.shm_created_bytes),
             bytes_or_dash(p.shm_mapped_bytes)});
        if (p.parent_index < 0 || processes[p.parent_index].command != p.command) {
          commands.push_back(index);
        }
        std::vector<int> shown;
        for (int child : p.children) {
          if (!show_helpers && processes[child].helper) {
            ++folded;
            continue;
          }
          shown.push_back(child);
        }
        for (size_t i = 0; i < shown.size(); ++i) {
          const bool last = i + 1 == shown.size();
          visit(shown[i], next_lead + (last ? "`- " : "|- "), next_lead + (last ? "   " : "|  "));
        }
      };
  for (const ProcessSummary& p : processes) {
    if (p.parent_index >= 0) continue;
    if (!show_helpers && p.helper) {
      ++folded;
      continue;
    }
    visit(p.index, "", "");
  }
  std::string title = "Processes";
  if (folded > 0) {
    title += " (" + std::to_string(folded) + " helper" + (folded == 1 ? "" : "s") +
             " folded; --all-processes shows them)";
  }
  Title(title);
  table.Render(out_, style_);
  out_ << "  Copied: bytes of all copies. Allocs: large host allocations, Shm made: segments\n"
          "  created (count / bytes). Workers not listed below run their parent's command.\n";
  TextTable command_table(
      {{"PID", TextTable::Align::kRight}, {"Command", TextTable::Align::kLeft, true}});
  for (int index : commands) {
    command_table.AddRow({std::to_string(processes[index].pid), processes[index].command});
  }
  command_table.Render(out_, style_);
  // pinscope's own cost (analyzer/report/own_cost_text.h).
  for (const OwnCostParagraph& p : OwnCostParagraphs(report_))
    Para(p.text, p.indented ? "    " : "  ");
}

void TextWriter::ShmSection() {
  Title("Shared memory (/dev/shm)");
  const ShmAnalysis& shm = report_.shm();
  const uint64_t capacity = shm.capacity_bytes();
  if (shm.segments() == 0 && shm.sigbus().empty()) {
    Para("No shared-memory segments of the job" +
         std::string(shm.driver_segments() > 0 ? " (only the CUDA driver's own)" : "") + "; " +
         (capacity == 0 ? "capacity unknown." : FormatBytes(capacity) + " capacity."));
    return;
  }
  std::string peak = "Peak in use: " + FormatBytes(shm.peak_bytes()) + " at " +
                     Offset(shm.peak_time_ns(), report_.start_ns()) + " (" +
                     FormatCount(shm.peak_segments()) + " segments alive)";
  if (capacity > 0) {
    peak += ", " + FormatPercent(static_cast<double>(shm.peak_bytes()) / capacity) + " of the " +
            FormatBytes(capacity) + " capacity";
    const uint64_t room = shm.free_bytes_at_start() > 0 ? shm.free_bytes_at_start() : capacity;
    peak += room > shm.peak_bytes() ? "; headroom " + FormatBytes(room - shm.peak_bytes())
                                    : "; no headroom";
    peak += " of the " + FormatBytes(room) + " free at start.";
  } else {
    peak += "; /dev/shm capacity unknown.";
  }
  Para(peak);
  if (shm.warning()) {
    out_ << "  " << style_.Warn("WARNING: the peak passes half of /dev/shm.") << '\n';
  }
  Para("Use --shm-size=" + std::to_string(shm.RecommendedShmSize() / kMiB) +
       "m (peak x 2, rounded up to a power of two, at least 64 MiB).");
  std::string made = FormatCount(shm.segments()) + " segments made over the run (" +
                     FormatBytes(shm.bytes_created()) + ")";
  if (shm.leaked_segments() > 0) {
    made += "; " + FormatCount(shm.leaked_segments()) + " never unlinked (" +
            FormatBytes(shm.leaked_bytes()) + " left in /dev/shm)";
  }
  if (shm.driver_segments() > 0 || shm.memfd_segments() > 0) {
    made += "; not counted: " + FormatCount(shm.driver_segments()) + " CUDA driver segment" +
            (shm.driver_segments() == 1 ? "" : "s") + ", " + FormatCount(shm.memfd_segments()) +
            " memfd";
  }
  if (shm.failed_calls() > 0) made += "; " + FormatCount(shm.failed_calls()) + " shm calls failed";
  Para(made + ".");
  TextTable table({{"PID", TextTable::Align::kRight},
                   {"Segments made", TextTable::Align::kRight},
                   {"Bytes made", TextTable::Align::kRight},
                   {"At peak", TextTable::Align::kRight},
                   {"Share of peak", TextTable::Align::kRight},
                   {"Maps", TextTable::Align::kRight},
                   {"Bytes mapped", TextTable::Align::kRight}});
  for (const ShmShare& share : shm.shares()) {
    table.AddRow({share.process_index < 0 ? "untraced" : std::to_string(share.pid),
                  FormatCount(share.segments_created), FormatBytes(share.bytes_created),
                  FormatBytes(share.bytes_at_peak),
                  shm.peak_bytes() == 0
                      ? "-"
                      : FormatPercent(static_cast<double>(share.bytes_at_peak) / shm.peak_bytes()),
                  FormatCount(share.maps), FormatBytes(share.bytes_mapped)});
  }
  table.Render(out_, style_);
  for (const ShmSigbus& bus : shm.sigbus()) {
    std::string text = "SIGBUS in pid " + std::to_string(bus.pid) + " at " +
                       Offset(bus.time_ns, report_.start_ns());
    if (!bus.segment.empty()) text += " in " + bus.segment;
    if (!bus.diagnosis.empty()) text += ": " + bus.diagnosis;
    out_ << "  " << style_.Bad(Wrap(text, kReportWidth - 2, kReportWidth - 2, "  ")) << '\n';
  }
}

// Only when PinEvents exist (PINSCOPE_PIN=1): what pinscope pinned, what it
// cost and what it saved against the calibrated pageable bandwidth.
void TextWriter::PinningSection() {
  const PinStats& pins = report_.input().pins();
  const BatchLoop& loop = report_.input().loop();
  // Batches the pool served while no batch copy ran pinned by pinscope:
  // pin_memory=True's pin thread reading plain slots (zero-copy-pool.md,
  // "Plain slots").
  const bool plain_pool = loop.pool_maps > 0 && loop.pinscope_batches == 0;
  const std::string plain_line =
      FormatCount(loop.pool_maps) + " batch segments the program received came from " +
      "pinscope's pool (PINSCOPE_PIN_POOL), and no batch copy read them by DMA (with " +
      "pin_memory=True torch's pin thread copies each batch on the host first): plain slots, " +
      "never registered. The workers wrote into pages made once and recycled, and the " +
      "program's munmap kept them: no fresh pages and no unmap per batch.";
  if (!report_.input().has_pins() && plain_pool) {
    Title("Pinning (PINSCOPE_PIN)");
    Para(plain_line);
    return;
  }
  if (!report_.input().has_pins()) {
    // Pinning off: what fresh batch buffers cost, which the recycle list saves.
    if (!loop.found || loop.fresh_mmap_batches == 0) return;
    Title("Pinning (PINSCOPE_PIN)");
    Para("Pinning is off. " + FormatCount(loop.fresh_mmap_batches) + " of " +
         FormatCount(loop.batches) + " batch copies read a buffer allocated anew since the " +
         "previous batch, above glibc's 32 MiB mmap threshold: glibc maps each one fresh and " +
         "unmaps it at free, so writing it page-faults every page again, about " +
         FormatDuration(loop.fresh_fault_ns) + " per " + FormatBytes(loop.batch_bytes) +
         " batch (first touch of fresh memory at " + FormatGbps(loop.first_touch_gbps) +
         "). PINSCOPE_PIN=1 keeps the freed block registered and hands it to the next batch: " +
         "one registration, no faults after the first batch (docs/pinning.md).");
    return;
  }
  Title("Pinning (PINSCOPE_PIN)");
  Para("Registered " + FormatCount(pins.registers) + " buffers (" +
       FormatBytes(pins.register_bytes) + "): " + FormatCount(pins.shm_registers) + " shm (" +
       FormatBytes(pins.shm_bytes) + "), " + FormatCount(pins.alloc_registers) + " malloc (" +
       FormatBytes(pins.alloc_bytes) + "), " +
       (pins.pool_registers > 0 ? FormatCount(pins.pool_registers) + " slots of pinscope's pool (" +
                                      FormatBytes(pins.pool_bytes) + "), "
                                : std::string()) +
       FormatCount(pins.other_registers) + " other (" + FormatBytes(pins.other_bytes) + ").");
  const double gib = static_cast<double>(pins.register_bytes) / (1024.0 * 1024 * 1024);
  Para("Registration time " + FormatDuration(pins.register_ns) +
       (gib > 0 ? " (" + FormatDuration(static_cast<uint64_t>(pins.register_ns / gib)) + " per GiB)"
                : std::string()) +
       "; peak pinned " + FormatBytes(pins.peak_pinned_bytes) + "; " +
       FormatCount(pins.register_failed) + " failed, budget full " + FormatCount(pins.budget_full) +
       " times.");
  if (loop.found && loop.pinscope_batches > 0) {
    const uint64_t per = loop.dma_bytes / loop.pinscope_batches;
    Para("Per batch (" + FormatCount(loop.batches) + " batch copies): " +
         FormatCount(loop.pinscope_batches) + " ran pinned thanks to pinscope, each " +
         FormatBytes(per) + " at DMA speed (" + FormatBytes(loop.dma_bytes) + " in all) and " +
         "a host copy avoided against pin_memory=True, whose pin thread copies every batch into " +
         "pinned memory first. Registration paid on " + FormatCount(loop.registered_at_copy) +
         " at the copy and " + FormatCount(loop.registered_ahead) +
         " ahead (pin-ahead thread); saved on " + FormatCount(loop.reused) +
         " by reuse of a freed block" +
         (loop.pool > 0 ? ", " + FormatCount(loop.pool) +
                              " by pinscope's pool (the worker wrote the batch into memory "
                              "registered once: PINSCOPE_PIN_POOL)"
                        : std::string()) +
         " and " + FormatCount(loop.cached) + " already registered.");
  }
  if (plain_pool) Para(plain_line);
  // The first batch's buffer is always fresh (the one the recycle list then keeps).
  if (loop.found && loop.fresh_mmap_batches > 1) {
    Para(FormatCount(loop.fresh_mmap_batches) + " batch copies read a fresh buffer above glibc's " +
         "32 MiB mmap threshold that pinscope did not reuse (PINSCOPE_PIN_KEEP): about " +
         FormatDuration(loop.fresh_fault_ns) + " of page faults each (first touch at " +
         FormatGbps(loop.first_touch_gbps) + ").");
  }
  if (pins.ahead_registers > 0) {
    Para(FormatCount(pins.ahead_registers) + " of the registrations (" +
         FormatDuration(pins.ahead_register_ns) +
         ") were made ahead, on pinscope's pin-ahead thread as the shm batch was mapped, not on "
         "the copying thread (PINSCOPE_PIN_AHEAD).");
  }
  if (pins.recycles > 0 || pins.reuses > 0) {
    Para("Kept " + FormatCount(pins.recycles) + " freed blocks registered for reuse; " +
         FormatCount(pins.reuses) + " registrations saved by reuse.");
  }
  if (!pins.unpin_reasons.empty()) {
    std::string reasons;
    for (const auto& [reason, count] : pins.unpin_reasons) {
      reasons += (reasons.empty() ? "" : ", ") + FormatCount(count) + " " + reason;
    }
    Para("Unpinned " + FormatCount(pins.unregisters) + ": " + reasons + ".");
  }
  if (pins.failed_unregisters > 0) {
    std::string errors;
    for (const auto& [error, count] : pins.failed_unregister_errors) {
      errors += (errors.empty() ? "" : ", ") + std::to_string(error);
    }
    Para(FormatCount(pins.failed_unregisters) +
         (pins.failed_unregisters == 1 ? " unregistration" : " unregistrations") +
         " failed (CUDA error " + errors + "): " + FormatBytes(pins.stayed_pinned_bytes) +
         " stayed pinned.");
  }
  if (pins.pinned_copies > 0) {
    const double achieved =
        pins.pinned_copy_blocked_ns == 0
            ? 0
            : static_cast<double>(pins.pinned_copy_bytes) / pins.pinned_copy_blocked_ns;
    const double calibrated =
        pins.pinned_copy_at_pinned_ns == 0
            ? 0
            : static_cast<double>(pins.pinned_copy_bytes) / pins.pinned_copy_at_pinned_ns;
    const int64_t saved = static_cast<int64_t>(pins.pinned_copy_at_pageable_ns) -
                          static_cast<int64_t>(pins.pinned_copy_blocked_ns) -
                          static_cast<int64_t>(pins.register_ns - pins.ahead_register_ns);
    Para(FormatCount(pins.pinned_copies) + " copies ran pinned thanks to pinscope (" +
         FormatCount(pins.pinned_registered) + " registered, " + FormatCount(pins.pinned_cached) +
         " cached), " + FormatBytes(pins.pinned_copy_bytes) + " at " + FormatGbps(achieved) +
         " host-blocked (calibrated pinned " + FormatGbps(calibrated) + "). Time saved vs the " +
         "calibrated pageable bandwidth, minus registration on the copying threads: " +
         (saved >= 0 ? FormatDuration(static_cast<uint64_t>(saved))
                     : "-" + FormatDuration(static_cast<uint64_t>(-saved))) +
         ".");
  }
}

// Only when DeviceActivity packets exist (CUPTI).
void TextWriter::DeviceSection() {
  const auto& devices = report_.input().devices();
  if (devices.empty()) return;
  Title("Device activity (CUPTI)");
  for (const ProcessDevice& p : devices) {
    // Without correlation records the join is by time and order: said once,
    // and on each line ("joined" alone: by correlation).
    const bool by_order = p.result.join_method == device::JoinMethod::kOrder;
    if (by_order) {
      const uint64_t corr = p.result.join.correlations;
      Para("pid " + std::to_string(p.pid) +
           (corr == 0 ? ": the trace has no correlation records; device records"
                      : ": device records (--join=order: the trace's " + FormatCount(corr) +
                            " correlation records not used)") +
           " joined to their host calls by time and order (" + DocPath("device-activity.md") +
           ").");
    }
    if (const device::DeviceWindows& w = p.result.windows; w.sampled()) {
      Para(DeviceWindowsSentence(p.pid, w));
    }
    for (const device::CopyClassStats& c : p.result.copy_classes) {
      Para("pid " + std::to_string(p.pid) + " " +
           DirectionName(static_cast<trace::Direction>(c.key.direction)) + " " +
           MemoryKindName(static_cast<trace::MemoryKind>(c.key.host_kind)) + ": " +
           FormatCount(c.count) + " copies, " + FormatBytes(c.bytes) + ", device " +
           FormatDuration(c.device_ns) + " (" + FormatGbps(c.device_gbps()) + "), host blocked " +
           FormatDuration(c.host_blocked_ns) + " (" + FormatCount(c.joined) +
           (by_order ? " joined by order)" : " joined)"));
    }
    for (const device::DeviceBusy& busy : p.result.devices) {
      const std::string gpu =
          "pid " + std::to_string(p.pid) + " GPU " + std::to_string(busy.device_id);
      if (!busy.measured() && busy.kernels_sampled()) {
        // Kernels off for the whole window: copies and memsets alone say
        // nothing about how busy the GPU was.
        Para(gpu + ": kernels were not recorded (" + KernelRecordingText(p.result.recording) +
             "): no busy figure; " + FormatCount(busy.records) + " memcpy/memset records only.");
        continue;
      }
      const bool nvml = busy.source == device::BusySource::kUtilization;
      std::string chunks;
      bool unknown = false;
      for (double f : busy.chunk_busy_fraction) {
        static const char* kBars[] = {"_", ".", ":", "-", "=", "+", "*", "#"};
        if (f < 0) {
          chunks += "?";
          unknown = true;
          continue;
        }
        chunks += kBars[std::min(7, static_cast<int>(f * 8))];
      }
      if (nvml) {
        // Kernels off (the default): NVML's utilization samples say how busy
        // the GPU was, not when it was idle or why.
        Para(gpu + ": busy " + FormatPercent(busy.busy_fraction) + " of the sampled time, " +
             FormatPercent(busy.active_busy_fraction) +
             " from the first to the last busy sample; per chunk [" + chunks +
             "] (_ idle .. # busy" + (unknown ? ", ? not sampled)" : ")"));
        Para("From NVML utilization samples (" + FormatCount(busy.utilization_samples) +
             ", one every " + FormatDuration(busy.utilization_period_ns) + ", " +
             FormatPercent(busy.covered_fraction()) +
             " of the process's life): the share of time a kernel ran. Kernels were not recorded (" +
             KernelRecordingText(p.result.recording) +
             "), so idle gaps are not known; PINSCOPE_CUPTI_KERNELS=all records them, at a cost "
             "(docs/environment.md).");
        continue;
      }
      Para(gpu + ": busy " + FormatPercent(busy.busy_fraction) +
           (busy.kernels_sampled() ? " of the recorded time, " : " of the process's life, ") +
           FormatPercent(busy.active_busy_fraction) + " from first to last activity; per chunk [" +
           chunks + "] (_ idle .. # busy" + (unknown ? ", ? not recorded)" : ")"));
      if (busy.kernels_sampled()) {
        Para("Kernels recorded in sampled windows: " + FormatPercent(busy.covered_fraction()) +
             " of the time (" + KernelRecordingText(p.result.recording) + ", " +
             FormatCount(p.result.recording.windows) +
             (p.result.recording.windows == 1 ? " window" : " windows") + "); the " +
             FormatDuration(busy.blind_ns) + " not recorded count as neither busy nor idle.");
      }
      std::string causes;
      for (int i = 0; i < device::kGapCauses; ++i) {
        if (busy.by_cause[i].gaps == 0) continue;
        causes += (causes.empty() ? "" : ", ") + FormatCount(busy.by_cause[i].gaps) + " " +
                  device::GapCauseName(static_cast<device::GapCause>(i)) + " (" +
                  FormatDuration(busy.by_cause[i].idle_ns) + ")";
      }
      Para("Idle gaps over 1 ms: " + FormatCount(busy.gap_count) + ", " +
           FormatDuration(busy.gap_ns) + (causes.empty() ? "" : "; host was in: " + causes) + ".");
    }
  }
}

void TextWriter::AllocSection() {
  Title("Large host allocations (at or above PINSCOPE_TRACE_MIN)");
  const AllocAnalysis& allocs = report_.allocs();
  if (allocs.count() == 0) {
    out_ << "  None recorded.\n";
    return;
  }
  Para(FormatCount(allocs.count()) + (allocs.count() == 1 ? " allocation (" : " allocations (") +
       FormatBytes(allocs.bytes()) + "), at most " + FormatBytes(allocs.peak_live_bytes()) +
       " live at once; " + FormatCount(allocs.fed_allocations()) + " of them fed " +
       FormatCount(allocs.copies_fed()) + (allocs.copies_fed() == 1 ? " copy (" : " copies (") +
       FormatCount(allocs.pageable_copies_fed()) + " pageable, " + FormatBytes(allocs.bytes_fed()) +
       " copied).");
  TextTable table({{"Size"},
                   {"Count", TextTable::Align::kRight},
                   {"Bytes", TextTable::Align::kRight},
                   {"Fed copies", TextTable::Align::kRight}});
  for (const AllocBucket& bucket : allocs.histogram()) {
    if (bucket.count == 0) continue;
    std::string range = bucket.max_bytes == 0
                            ? ">= " + FormatBytes(bucket.min_bytes)
                            : (bucket.min_bytes == 0 ? "< " + FormatBytes(bucket.max_bytes)
                                                     : FormatBytes(bucket.min_bytes) + " - " +
                                                           FormatBytes(bucket.max_bytes));
    table.AddRow({range, FormatCount(bucket.count), FormatBytes(bucket.bytes),
                  FormatCount(bucket.fed_copies)});
  }
  table.Render(out_, style_);
  std::string apis;
  for (const auto& [api, stats] : allocs.by_api()) {
    apis += (apis.empty() ? "" : ", ") + std::string(AllocApiName(api)) + " " +
            FormatCount(stats.count) + " (" + FormatBytes(stats.bytes) + ")";
  }
  Para("By API: " + apis + ".");
}

void TextWriter::NoticeSection() {
  const auto& notices = report_.process_analysis().notices();
  const auto& problems = report_.problems();
  Title("Notices and problems");
  if (notices.empty() && problems.empty()) {
    out_ << "  None.\n";
    return;
  }
  for (const NoticeRecord& notice : notices) {
    const Severity severity = notice.severity == trace::Notice::ERROR     ? Severity::kError
                              : notice.severity == trace::Notice::WARNING ? Severity::kWarning
                                                                          : Severity::kInfo;
    std::string text = std::string(NoticeSeverityName(notice.severity)) + " pid " +
                       std::to_string(notice.pid) + " [" + notice.code + "] " + notice.text;
    if (notice.count > 1) text += " (x" + FormatCount(notice.count) + ")";
    out_ << "  " << Severe(severity, Wrap(text, kReportWidth - 2, kReportWidth - 4, "    "))
         << '\n';
  }
  for (const Problem& problem : problems) {
    const std::string text = std::string(SeverityName(problem.severity)) + " " + problem.message;
    out_ << "  " << Severe(problem.severity, Wrap(text, kReportWidth - 2, kReportWidth - 4, "    "))
         << '\n';
  }
}

}  // namespace

void WriteTextReport(const Report& report, bool color, std::ostream& out) {
  TextWriter(report, color, out).Write();
}

}  // namespace pinscope
