// The HTML page of a report; see html_report.h. Sections in the text
// report's order, every number from the Report (the model, the analyses),
// every trace string escaped. Colours keep WCAG AA contrast on white.
#include "analyzer/html/html_report.h"

#include <ctime>
#include <fstream>
#include <ostream>
#include <sstream>

#include "analyzer/common/format.h"
#include "analyzer/common/private_file.h"
#include "analyzer/common/trace_names.h"
#include "analyzer/html/html_charts.h"
#include "analyzer/html/html_escape.h"
#include "analyzer/report/loader_knobs.h"
#include "analyzer/report/report_command.h"
#include "analyzer/report/run_facts.h"

namespace pinscope::html {

namespace {

const char kStyle[] = R"css(
:root { color-scheme: light; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
       color: #111827; background: #ffffff; margin: 0; }
main { max-width: 1240px; margin: 0 auto; padding: 16px 24px 48px; }
h1 { font-size: 1.6em; margin: 0.2em 0; }
h2 { font-size: 1.25em; margin: 1.6em 0 0.5em; border-bottom: 1px solid #d1d5db; padding-bottom: 4px; }
h3 { font-size: 1.05em; margin: 1.2em 0 0.4em; }
.run { color: #374151; margin: 0 0 8px; word-break: break-all; }
.verdict { font-size: 1.15em; padding: 12px 16px; border-radius: 6px; border-left: 6px solid; }
.sev-warning { background: #fff7ed; border-color: #c2410c; }
.sev-error { background: #fef2f2; border-color: #b91c1c; }
.sev-info { background: #f0fdf4; border-color: #15803d; }
.verdict .id { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 0.8em;
               color: #374151; }
ol.changes > li { margin-bottom: 0.8em; }
.gain { font-weight: 600; }
.how { color: #1f2937; margin: 0.2em 0; }
.chart { width: 100%; height: auto; display: block; margin: 8px 0;
         font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
.chart .label { font-size: 14px; fill: #111827; }
.chart .value, .chart .axis, .chart .legend { font-size: 13px; fill: #1f2937; }
.chart .share { font-size: 12px; fill: #374151; }
.chart .mark { font-weight: 700; fill: #9a3412; }
.chart .mark.next, .chart .predicted { fill: #047857; font-weight: 600; }
.span.fetch { fill: #1d4ed8; } .span.next { fill: #f59e0b; } .span.recv { fill: #92400e; }
.span.pin { fill: #7c3aed; } .span.copy { fill: #b91c1c; } .span.sync { fill: #4b5563; }
.span.gpu { fill: #15803d; } .span.gpucopy { fill: #b91c1c; }
.span.blind { fill: #9ca3af; fill: url(#blind-hatch); }
ul.legend { list-style: none; padding: 0; display: flex; flex-wrap: wrap; gap: 4px 18px; }
ul.legend li::before { content: ""; display: inline-block; width: 12px; height: 12px;
                       margin-right: 6px; vertical-align: -1px; background: var(--c); }
table { border-collapse: collapse; margin: 8px 0 12px; font-size: 14px; }
caption { text-align: left; font-weight: 600; padding: 4px 0; }
th, td { border: 1px solid #d1d5db; padding: 4px 8px; vertical-align: top; }
th { background: #f3f4f6; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.critical td { background: #fff7ed; font-weight: 600; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px; }
dl.facts dt { font-weight: 600; } dl.facts dd { margin: 0; word-break: break-word; }
code, pre { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 13px; }
pre { background: #f9fafb; border: 1px solid #e5e7eb; padding: 12px; overflow-x: auto; }
.note { color: #374151; font-size: 0.92em; }
a { color: #1d4ed8; }
:focus-visible { outline: 3px solid #1d4ed8; outline-offset: 2px; }
)css";

std::string E(const std::string& s) { return HtmlEscape(s); }
std::string Ms(double ns) { return FormatDuration(static_cast<uint64_t>(ns > 0 ? ns : 0)); }

const char* SeverityClass(Severity s) {
  switch (s) {
    case Severity::kError:
      return "sev-error";
    case Severity::kWarning:
      return "sev-warning";
    default:
      return "sev-info";
  }
}

class HtmlWriter {
 public:
  HtmlWriter(const Report& report, std::ostream& out) : report_(report), out_(out) {}
  void Write();

 private:
  void Verdict();
  void Changes();
  void Pipeline();
  void Timeline();
  void Evidence();
  void Facts();
  void Notices();
  void TextReport();
  // A <table> with a caption and a header row; cells already escaped.
  void Table(const std::string& caption, const std::vector<std::string>& head,
             const std::vector<std::vector<std::string>>& rows,
             const std::vector<bool>& numeric = {}, const std::vector<std::string>& row_class = {});

  const Report& report_;
  std::ostream& out_;
};

void HtmlWriter::Write() {
  const std::string& command =
      report_.processes().empty()
          ? std::string()
          : report_.processes()[report_.root_index() < 0 ? 0 : report_.root_index()].command;
  out_ << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
       << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
       << "<meta name=\"generator\" content=\"pinscope report --html\">\n"
       << "<title>pinscope report: " << E(report_.run_dir()) << "</title>\n<style>" << kStyle
       << "</style>\n</head>\n<body>\n<main>\n"
       << "<h1>pinscope report</h1>\n<p class=\"run\">Run <code>" << E(report_.run_dir())
       << "</code>" << (command.empty() ? "" : ": <code>" + E(command) + "</code>") << "</p>\n";
  Verdict();
  Changes();
  Pipeline();
  Timeline();
  Evidence();
  Facts();
  Notices();
  TextReport();
  out_ << "</main>\n</body>\n</html>\n";
}

void HtmlWriter::Table(const std::string& caption, const std::vector<std::string>& head,
                       const std::vector<std::vector<std::string>>& rows,
                       const std::vector<bool>& numeric,
                       const std::vector<std::string>& row_class) {
  out_ << "<table>\n<caption>" << caption << "</caption>\n<thead><tr>";
  for (const std::string& h : head) out_ << "<th scope=\"col\">" << h << "</th>";
  out_ << "</tr></thead>\n<tbody>\n";
  for (size_t r = 0; r < rows.size(); ++r) {
    out_ << "<tr"
         << (r < row_class.size() && !row_class[r].empty() ? " class=\"" + row_class[r] + "\"" : "")
         << ">";
    for (size_t c = 0; c < rows[r].size(); ++c) {
      const bool num = c < numeric.size() && numeric[c];
      if (c == 0)
        out_ << "<th scope=\"row\">" << rows[r][c] << "</th>";
      else
        out_ << (num ? "<td class=\"num\">" : "<td>") << rows[r][c] << "</td>";
    }
    out_ << "</tr>\n";
  }
  out_ << "</tbody>\n</table>\n";
}

void HtmlWriter::Verdict() {
  const pinscope::Verdict& v = report_.verdict();
  out_ << "<section id=\"verdict\" aria-labelledby=\"verdict-h\">\n"
       << "<h2 id=\"verdict-h\">Verdict</h2>\n"
       << "<p class=\"verdict " << SeverityClass(v.severity) << "\" data-verdict=\"" << E(v.id)
       << "\">" << E(v.text) << " <span class=\"id\">(" << E(v.id) << ")</span></p>\n"
       << "</section>\n";
}

void HtmlWriter::Changes() {
  out_ << "<section id=\"changes\" aria-labelledby=\"changes-h\">\n"
       << "<h2 id=\"changes-h\">What to change (in order of expected gain)</h2>\n";
  const model::Result& m = report_.model();
  const model::Inputs& in = report_.model_inputs();
  int n = 0;
  out_ << "<ol class=\"changes\">\n";
  if (m.valid) {
    const double step = in.main.step_ns;
    const int batch = in.loader.batch_size;
    for (const model::Prediction* p : ShownPredictions(report_)) {
      ++n;
      std::string gain = "step " + Ms(step) + " &#8594; " + E(Ms(p->step_ns)) +
                         StringPrintf(" (%.2fx", p->speedup);
      if (batch > 0) gain += StringPrintf(", %.0f samples/s", p->speedup * batch * 1e9 / step);
      gain += ")";
      const std::string where = WhereToChange(p->change, in.loader);
      out_ << "<li class=\"prediction\" data-change=\"" << E(p->change.id) << "\"><strong>"
           << E(p->change.what) << "</strong>: <span class=\"gain\">" << gain << "</span>"
           << (where.empty() ? "" : "<p class=\"where\">Where: " + E(where) + ".</p>")
           << "<p class=\"how\">How: " << E(p->basis) << "."
           << (p->limit_next.empty()
                   ? ""
                   : " Then the limit is <strong>" + E(p->limit_next) + "</strong>.")
           << (p->uncertain ? " Part of this is calibrated, not measured in this run: check it "
                              "with <code>pinscope diff</code>."
                            : "")
           << "</p>";
      const std::string measured = MeasuredInRun(report_, p->change.id);
      if (!measured.empty()) out_ << "<p class=\"measured\">" << E(measured) << "</p>";
      out_ << "</li>\n";
    }
  }
  for (const Finding& f : report_.findings()) {
    // With a model, its predictions are the time findings' gains.
    if (f.kind == Finding::Kind::kTime && (m.valid || !f.significant)) continue;
    ++n;
    std::string head = E(f.title);
    if (f.kind == Finding::Kind::kTime)
      head += ": save about " + E(FormatDuration(f.saving_ns));
    else
      head += f.kind == Finding::Kind::kRisk ? ": risk of failure" : ": the job failed";
    out_ << "<li class=\"finding " << SeverityClass(f.severity) << "\" data-finding=\"" << E(f.id)
         << "\"><strong>" << head << "</strong><p class=\"how\">" << E(f.action)
         << "</p><p class=\"how\">Evidence: " << E(f.evidence) << "</p></li>\n";
  }
  out_ << "</ol>\n";
  if (n == 0) {
    const std::string rest = GpuBoundRest(m, report_.model_inputs().main.step_ns);
    if (m.valid && m.verdict == model::Class::kGpuBound && !rest.empty())
      out_ << "<p>The GPU sets the pace: faster kernels (bf16/TF32, fused ops, torch.compile) "
              "are what would help most."
           << E(rest) << "</p>\n";
    else if (m.valid && m.verdict == model::Class::kGpuBound)
      out_ << "<p>Nothing in the input pipeline: the GPU sets the pace. Faster kernels "
              "(bf16/TF32, fused ops, torch.compile) are what would help.</p>\n";
    else
      out_ << "<p>Nothing the recorded data says is worth changing.</p>\n";
  }
  for (const std::string& advice : m.advice) out_ << "<p>" << E(advice) << "</p>\n";
  if (!report_.pending().empty()) {
    out_ << "<p class=\"note\">Not assessed yet (needs data a later recorder brings):</p>\n<ul>";
    for (const PendingCheck& c : report_.pending())
      out_ << "<li>" << E(c.title) << ": needs " << E(c.needs) << "</li>";
    out_ << "</ul>\n";
  }
  out_ << "</section>\n";
}

void HtmlWriter::Pipeline() {
  const model::Result& m = report_.model();
  const model::Inputs& in = report_.model_inputs();
  out_ << "<section id=\"pipeline\" aria-labelledby=\"pipeline-h\">\n"
       << "<h2 id=\"pipeline-h\">The step as a pipeline</h2>\n";
  if (!m.valid || m.stages.empty()) {
    out_ << "<p>No step loop found: " << E(m.why_not.empty() ? "no steps" : m.why_not)
         << ".</p>\n</section>\n";
    return;
  }
  out_ << "<p>" << E(FormatCount(in.main.steps)) << " steady steps of " << E(Ms(in.main.step_ns))
       << ", "
       << (in.main.timed_by_hook ? "the DataLoader timed by pinscope's Python hook"
                                 : "steps inferred from the batch copies")
       << ". Each stage's service time per step: the step can go no faster than its slowest "
          "stage, the one marked.</p>\n";
  for (const std::string& note : SteadyWindowNotes(report_))
    out_ << "<p class=\"window-note\">" << E(note) << "</p>\n";
  out_ << PipelineSvg(report_);
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> classes;
  for (const model::Stage& st : m.stages) {
    const bool critical = st.id == m.critical;
    rows.push_back({E(st.name), E(Ms(st.service_ns)), StringPrintf("%.0f%%", 100 * st.utilization),
                    critical ? "limits the step" : ""});
    classes.push_back(critical ? "critical" : "");
  }
  Table("Stages: service time per step and busy share", {"Stage", "Per step", "Busy", ""}, rows,
        {false, true, true, false}, classes);
  rows.clear();
  for (const model::Part& part : m.parts) {
    rows.push_back(
        {E(part.name), E(Ms(part.ns)),
         StringPrintf("%.0f%%", in.main.step_ns > 0 ? 100 * part.ns / in.main.step_ns : 0.0)});
  }
  if (!rows.empty())
    Table("The main thread's step", {"Part", "Per step", "Share"}, rows, {false, true, true});
  out_ << "</section>\n";
}

void HtmlWriter::Timeline() {
  out_ << "<section id=\"timeline\" aria-labelledby=\"timeline-h\">\n"
       << "<h2 id=\"timeline-h\">Timeline</h2>\n";
  const TimelineWindow w = ChooseTimelineWindow(report_);
  const std::string svg = TimelineSvg(report_, w);
  if (svg.empty()) {
    out_ << "<p>Nothing recorded to draw in the run's steady window.</p>\n</section>\n";
    return;
  }
  const uint64_t t0 = report_.start_ns();
  out_ << "<p>"
       << E(StringPrintf("From +%.3f s to +%.3f s of the run (%s)",
                         static_cast<double>(w.start_ns - std::min(w.start_ns, t0)) / 1e9,
                         static_cast<double>(w.end_ns - std::min(w.end_ns, t0)) / 1e9,
                         FormatDuration(w.end_ns - w.start_ns).c_str()))
       << ": about " << kTimelineSteps
       << " steady steps (where the GPU's kernels were recorded, nearest the middle of the "
          "steady window), one lane per thread that worked in it. "
          "Hover a bar for its times.</p>\n"
       << "<ul class=\"legend\" aria-label=\"Legend\">"
       << "<li style=\"--c:#1d4ed8\">making a batch (a worker's fetch)</li>"
       << "<li style=\"--c:#f59e0b\">main thread in <code>__next__</code> (waiting for a "
          "batch)</li>"
       << "<li style=\"--c:#92400e\">receiving a batch (thin)</li>"
       << "<li style=\"--c:#7c3aed\">pin thread pinning</li>"
       << "<li style=\"--c:#b91c1c\">copy (host call; on the GPU lane, thin: the transfer)</li>"
       << "<li style=\"--c:#4b5563\">synchronize</li>"
       << "<li style=\"--c:#15803d\">GPU kernels</li>"
       << "<li style=\"--c:repeating-linear-gradient(45deg,#9ca3af 0 2px,#f3f4f6 2px 4px)\">"
          "GPU kernels not recorded (CUPTI samples them in windows)</li></ul>\n"
       << svg << "</section>\n";
}

void HtmlWriter::Evidence() {
  out_ << "<section id=\"evidence\" aria-labelledby=\"evidence-h\">\n"
       << "<h2 id=\"evidence-h\">Evidence</h2>\n";
  const CopyAnalysis& copies = report_.copies();
  if (copies.rows().empty()) {
    out_ << "<p>No copies recorded.</p>\n";
  } else {
    std::vector<std::vector<std::string>> rows;
    for (const CopyRow& row : copies.rows()) {
      rows.push_back({E(DirectionName(row.direction)), E(MemoryKindName(row.kind)),
                      FormatCount(row.count), E(FormatBytes(row.bytes)),
                      E(FormatDuration(row.blocked_ns)),
                      row.kind == trace::PAGEABLE ? E(FormatGbps(row.AchievedGbps())) : "n/a",
                      E(FormatGbps(copies.CalibratedPinnedGbps(row))),
                      row.loss_ns == 0 ? "" : E(FormatDuration(row.loss_ns)),
                      row.failed == 0 ? "" : FormatCount(row.failed)});
    }
    const CopyRow& t = copies.total();
    rows.push_back({"total", "", FormatCount(t.count), E(FormatBytes(t.bytes)),
                    E(FormatDuration(t.blocked_ns)), "", "",
                    t.loss_ns == 0 ? "" : E(FormatDuration(t.loss_ns)),
                    t.failed == 0 ? "" : FormatCount(t.failed)});
    Table("Copies by direction and host memory (achieved = bytes / host-blocked time)",
          {"Direction", "Memory", "Count", "Bytes", "Blocked", "Achieved", "Pinned (calibrated)",
           "Lost to staging", "Failed"},
          rows, {false, false, true, true, true, true, true, true, true});
    out_ << "<p class=\"note\">Pinned (calibrated): the pinned bandwidth at the row's mean copy "
            "size. Achieved is shown for pageable rows only: copies from pinned or device memory "
            "can return before the transfer ends.</p>\n";
  }
  if (!report_.findings().empty()) {
    out_ << "<h3>What the rules found</h3>\n<ul>\n";
    for (const Finding& f : report_.findings())
      out_ << "<li data-finding=\"" << E(f.id) << "\"><strong>" << E(f.title) << "</strong>"
           << (f.verdict.empty() ? "" : ": " + E(f.verdict)) << "<br><span class=\"note\">"
           << E(f.evidence) << "</span></li>\n";
    out_ << "</ul>\n";
  }
  std::vector<std::vector<std::string>> rows;
  const auto bytes_or_dash = [](uint64_t b) { return b == 0 ? std::string("-") : FormatBytes(b); };
  for (const ProcessSummary& p : report_.processes()) {
    if (p.helper && !report_.options().show_helpers) continue;
    rows.push_back({std::to_string(p.pid), E(p.Role()),
                    E(FormatDuration(p.end_ns > p.start_ns ? p.end_ns - p.start_ns : 0)),
                    FormatCount(p.copies),
                    E(bytes_or_dash(p.h2d_bytes + p.d2h_bytes + p.other_bytes)),
                    p.copies == 0 ? "-" : E(FormatDuration(p.blocked_ns)),
                    p.shm_created == 0
                        ? "-"
                        : FormatCount(p.shm_created) + " / " + E(FormatBytes(p.shm_created_bytes)),
                    E(bytes_or_dash(p.shm_mapped_bytes)), E(p.command)});
  }
  Table("Processes",
        {"PID", "Role", "Life", "Copies", "Copied", "Blocked", "Shm made", "Shm mapped", "Command"},
        rows, {false, false, true, true, true, true, true, true, false});
  const ShmAnalysis& shm = report_.shm();
  if (!shm.shares().empty()) {
    rows.clear();
    for (const ShmShare& s : shm.shares()) {
      rows.push_back({s.pid ? std::to_string(s.pid) : "untraced", FormatCount(s.segments_created),
                      E(FormatBytes(s.bytes_created)), E(FormatBytes(s.bytes_at_peak)),
                      FormatCount(s.maps), E(FormatBytes(s.bytes_mapped))});
    }
    Table("Shared memory (/dev/shm): peak " + E(FormatBytes(shm.peak_bytes())) + " of " +
              E(shm.capacity_bytes() ? FormatBytes(shm.capacity_bytes()) : "unknown") + " capacity",
          {"PID", "Segments made", "Bytes made", "At peak", "Maps", "Bytes mapped"}, rows,
          {false, true, true, true, true, true});
  }
  out_ << "</section>\n";
}

void HtmlWriter::Facts() {
  out_ << "<section id=\"facts\" aria-labelledby=\"facts-h\">\n"
       << "<h2 id=\"facts-h\">The run</h2>\n<dl class=\"facts\">\n";
  const auto field = [&](const std::string& name, const std::string& value) {
    out_ << "<dt>" << E(name) << "</dt><dd>" << E(value) << "</dd>\n";
  };
  for (const RunFact& fact : RunFacts(report_)) field(fact.name, fact.value);
  field("Calibration", report_.calibration().source);
  out_ << "</dl>\n</section>\n";
}

void HtmlWriter::Notices() {
  if (report_.problems().empty()) return;
  out_ << "<section id=\"problems\" aria-labelledby=\"problems-h\">\n"
       << "<h2 id=\"problems-h\">Problems reading the run</h2>\n<ul>\n";
  for (const Problem& p : report_.problems())
    out_ << "<li class=\"" << SeverityClass(p.severity) << "\">" << E(p.message) << "</li>\n";
  out_ << "</ul>\n</section>\n";
}

void HtmlWriter::TextReport() {
  std::ostringstream text;
  WriteTextReport(report_, false, text);
  out_ << "<section id=\"text-report\" aria-labelledby=\"text-report-h\">\n"
       << "<h2 id=\"text-report-h\">The text report</h2>\n"
       << "<details><summary>Every section of <code>pinscope report</code> (call sites, largest "
          "copies, device activity, allocations, notices)</summary>\n<pre>"
       << E(text.str()) << "</pre>\n</details>\n</section>\n";
}

}  // namespace

void WriteHtmlReport(const Report& report, std::ostream& out) { HtmlWriter(report, out).Write(); }

int RunHtmlReport(const ReportOptions& options, std::ostream& out, std::ostream& err) {
  std::unique_ptr<Report> report = BuildReport(options, err);
  if (!report) return 2;
  if (options.html_path == "-") {
    WriteHtmlReport(*report, out);
  } else {
    std::string error;
    if (!CreatePrivateFile(options.html_path, &error)) {
      err << "pinscope report: " << error << '\n';
      return 2;
    }
    std::ofstream file(options.html_path, std::ios::binary | std::ios::trunc);
    if (!file) {
      err << "pinscope report: cannot write " << options.html_path << '\n';
      return 2;
    }
    WriteHtmlReport(*report, file);
    file.flush();
    if (!file) {
      err << "pinscope report: writing " << options.html_path << " failed\n";
      return 2;
    }
  }
  WriteProblems(*report, "pinscope report", err);
  return report->HasProblems() ? 1 : 0;
}

}  // namespace pinscope::html
