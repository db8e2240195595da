// `pinscope diff`: replays two runs into the report model, then compares
// what the reports concluded: the verdict, the time each bottleneck class
// costs (the findings' estimated savings), the copy table row by row, and the
// main loop's throughput (MainLoopAnalysis). Writes text or JSON.
#include "analyzer/diff/diff.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <sstream>
#include <tuple>

#include "analyzer/common/format.h"
#include "analyzer/common/trace_names.h"
#include "analyzer/diff/diff_ranks.h"
#include "analyzer/diff/diff_work.h"
#include "analyzer/read/calibration.h"
#include "analyzer/read/run_loader.h"
#include "analyzer/report/report.h"
#include "analyzer/report/report_command.h"

namespace pinscope {

namespace {

using json = nlohmann::ordered_json;

double Rate(double value) { return std::round(value * 1000) / 1000; }

int64_t Delta(uint64_t a, uint64_t b) { return static_cast<int64_t>(b) - static_cast<int64_t>(a); }

uint64_t Magnitude(int64_t value) {
  return value < 0 ? static_cast<uint64_t>(-(value + 1)) + 1 : static_cast<uint64_t>(value);
}

// "+1.2 ms", "-50", or the plain zero ("0 ms") when nothing changed.
std::string Signed(int64_t value, const std::string& magnitude) {
  if (value == 0) return magnitude;
  return (value < 0 ? "-" : "+") + magnitude;
}

std::string SignedCount(int64_t value) { return Signed(value, FormatCount(Magnitude(value))); }
std::string SignedBytes(int64_t value) { return Signed(value, FormatBytes(Magnitude(value))); }
std::string SignedDuration(int64_t value) {
  return Signed(value, FormatDuration(Magnitude(value)));
}

// "+50.3%" for b against a; "-" when either is 0 (nothing to compare).
std::string Change(double a, double b) {
  if (a <= 0 || b <= 0 || !std::isfinite(a) || !std::isfinite(b)) return "-";
  const double change = (b - a) / a;
  return (change >= 0 ? "+" : "") + FormatPercent(change);
}

// Word wrap at kReportWidth after `first_prefix`; lines after the first get `indent`.
std::string Wrap(const std::string& first_prefix, const std::string& text,
                 const std::string& indent) {
  return first_prefix + WrapWords(text, kReportWidth - DisplayWidth(first_prefix),
                                  kReportWidth - DisplayWidth(indent), indent);
}

// Copy rows keyed by (direction, memory kind), in the report's row order.
using RowKey = std::pair<int, int>;

std::vector<RowKey> RowKeys(const Report& a, const Report& b) {
  std::set<RowKey> keys;
  for (const Report* report : {&a, &b}) {
    for (const CopyRow& row : report->copies().rows()) keys.emplace(row.direction, row.kind);
  }
  return {keys.begin(), keys.end()};
}

CopyRow FindRow(const Report& report, const RowKey& key) {
  for (const CopyRow& row : report.copies().rows()) {
    if (row.direction == key.first && row.kind == key.second) return row;
  }
  CopyRow empty;
  empty.direction = static_cast<trace::Direction>(key.first);
  empty.kind = static_cast<trace::MemoryKind>(key.second);
  return empty;
}

std::string RowName(const RowKey& key) {
  return std::string(DirectionName(static_cast<trace::Direction>(key.first))) + " " +
         MemoryKindName(static_cast<trace::MemoryKind>(key.second));
}

// One bottleneck class present in either run.
struct ClassDelta {
  std::string id;
  std::string title;
  Finding::Kind kind = Finding::Kind::kTime;
  const Finding* a = nullptr;
  const Finding* b = nullptr;
};

std::vector<ClassDelta> Classes(const Report& a, const Report& b) {
  std::vector<ClassDelta> classes;
  const auto add = [&](const Report& report, bool is_a) {
    for (const Finding& finding : report.findings()) {
      auto it = std::find_if(classes.begin(), classes.end(),
                             [&](const ClassDelta& c) { return c.id == finding.id; });
      if (it == classes.end()) {
        classes.push_back({finding.id, finding.title, finding.kind});
        it = classes.end() - 1;
      }
      (is_a ? it->a : it->b) = &finding;
    }
  };
  add(a, true);
  add(b, false);
  return classes;
}

const char* KindName(Finding::Kind kind) {
  switch (kind) {
    case Finding::Kind::kTime:
      return "time";
    case Finding::Kind::kRisk:
      return "risk";
    case Finding::Kind::kFailure:
      return "failure";
  }
  return "time";
}

// A finding's cell: its saving for a time class, else "risk"/"failure".
std::string ClassCell(const Finding* finding) {
  if (finding == nullptr) return "-";
  if (finding->kind != Finding::Kind::kTime) return KindName(finding->kind);
  return FormatDuration(finding->saving_ns) + " (" + FormatPercent(finding->fraction) + ")";
}

std::string MainLoopLabel(const MainLoopRate& rate) {
  if (!rate.found) return "no recurring H2D copy on the root process's main thread";
  return FormatCount(rate.copies) + " H2D copies of " + FormatBytes(rate.copy_bytes) + " by pid " +
         std::to_string(rate.pid) + "'s main thread";
}

}  // namespace

// ---------------------------------------------------------------------------
// Main-loop throughput

double MainLoopRate::PerSecond() const {
  if (!found || copies < 2 || last_ns <= first_ns) return 0;
  return static_cast<double>(copies - 1) * 1e9 / static_cast<double>(last_ns - first_ns);
}

void MainLoopAnalysis::OnCopy(const CopyContext& context) {
  const ProcessState& process = context.event.process;
  const uint32_t tid = context.event.packet.tid();
  if (context.copy.direction() != trace::H2D || (tid != process.pid() && tid != 0)) return;
  if (context.copy.result() != 0) return;  // a failed call moved nothing
  auto& sizes = sizes_[process.index()];
  SizeStats& stats = sizes[context.copy.bytes()];
  const uint64_t time = context.event.packet.timestamp_ns();
  if (stats.copies == 0) stats.first_ns = time;
  stats.first_ns = std::min(stats.first_ns, time);
  stats.last_ns = std::max(stats.last_ns, time);
  ++stats.copies;
  if (sizes.size() > kMaxSizes) sizes.erase(sizes.begin());
}

void MainLoopAnalysis::Finish(const RunInfo& run) {
  rate_ = MainLoopRate();
  if (run.root == nullptr) return;
  auto it = sizes_.find(run.root->index());
  if (it == sizes_.end()) return;
  // Largest size first: the first one that recurs.
  for (auto size = it->second.rbegin(); size != it->second.rend(); ++size) {
    if (size->second.copies < 2) continue;
    rate_.found = true;
    rate_.pid = run.root->pid();
    rate_.tid = run.root->pid();
    rate_.copy_bytes = size->first;
    rate_.copies = size->second.copies;
    rate_.first_ns = size->second.first_ns;
    rate_.last_ns = size->second.last_ns;
    break;
  }
  sizes_.clear();
}

// ---------------------------------------------------------------------------
// Comparison

// What RUN_B changed relative to RUN_A, as a change of A's pipeline model
// ("num_workers=8", "PINSCOPE_PIN=1", ...), when the two ran the same
// command with one setting different; empty when none is recognized.
struct AppliedChange {
  std::string id;    // the change id of A's prediction, "" if none matches
  std::string what;  // "num_workers 2 -> 8"
  const model::Prediction* predicted = nullptr;
  double measured_step_ns = 0;  // B's step, per A-sized batch
  double measured_speedup = 0;  // A's step / that
};

AppliedChange FindAppliedChange(const Report& a, const Report& b) {
  AppliedChange out;
  const model::Result& ma = a.model();
  const model::Result& mb = b.model();
  if (!ma.valid || !mb.valid) return out;
  // The same job: the same program and script (arguments may differ, as a
  // --workers flag of the user's would).
  const auto& ca = a.root_header().cmdline();
  const auto& cb = b.root_header().cmdline();
  for (int i = 0; i < 2; ++i) {
    const std::string xa = i < ca.size() ? ca[i] : "", xb = i < cb.size() ? cb[i] : "";
    if (xa != xb) {
      out.what = "nothing A timed: the runs ran different programs (" + xa + " vs " + xb + ")";
      return out;
    }
  }
  const model::Inputs& ia = a.model_inputs();
  const model::Inputs& ib = b.model_inputs();
  std::vector<std::string> ids, whats;
  if (ia.loader.num_workers != ib.loader.num_workers ||
      ia.producers.workers != ib.producers.workers) {
    ids.push_back("num_workers=" + std::to_string(ib.producers.workers));
    whats.push_back("num_workers " + std::to_string(ia.producers.workers) + " -> " +
                    std::to_string(ib.producers.workers));
  }
  const bool pin_a = ia.pin_mode != 0, pin_b = ib.pin_mode != 0;
  if (ia.loader.pin_memory != ib.loader.pin_memory) {
    ids.push_back(std::string("pin_memory=") + (ib.loader.pin_memory ? "True" : "False") +
                  (pin_b && !pin_a ? "+PINSCOPE_PIN=1" : ""));
    whats.push_back(std::string("pin_memory ") + (ia.loader.pin_memory ? "True" : "False") +
                    " -> " + (ib.loader.pin_memory ? "True" : "False") +
                    (pin_b && !pin_a ? ", PINSCOPE_PIN 0 -> 1" : ""));
  } else if (pin_b && !pin_a) {
    ids.push_back("PINSCOPE_PIN=1");
    whats.push_back("PINSCOPE_PIN 0 -> 1");
  } else if (pin_a && pin_b && ib.pin_budget > ia.pin_budget) {
    ids.push_back("PINSCOPE_PIN_BUDGET");
    whats.push_back("PINSCOPE_PIN_BUDGET " + FormatBytes(ia.pin_budget) + " -> " +
                    FormatBytes(ib.pin_budget));
  }
  bool whole_epochs = false;
  if (ia.loader.persistent_workers != ib.loader.persistent_workers && ib.producers.workers > 0) {
    ids.push_back(std::string("persistent_workers=") +
                  (ib.loader.persistent_workers ? "True" : "False"));
    whats.push_back(std::string("persistent_workers ") +
                    (ia.loader.persistent_workers ? "True" : "False") + " -> " +
                    (ib.loader.persistent_workers ? "True" : "False"));
    whole_epochs = true;
  }
  double per_step = 1;
  if (ia.loader.batch_size != ib.loader.batch_size) {
    // Only doubling is a change A's model times.
    const bool doubled =
        ia.loader.batch_size > 0 && ib.loader.batch_size == 2 * ia.loader.batch_size;
    ids.push_back(doubled ? "batch_size_x2" : "");
    whats.push_back("batch_size " + std::to_string(ia.loader.batch_size) + " -> " +
                    std::to_string(ib.loader.batch_size));
    per_step = doubled ? 2 : 1;
  }
  if (ids.size() != 1 || ids[0].empty()) {
    if (!whats.empty()) {
      for (const std::string& w : whats) out.what += (out.what.empty() ? "" : "; ") + w;
    }
    return out;
  }
  out.id = ids[0];
  out.what = whats[0];
  for (const model::Prediction& p : ma.all_predictions)
    if (p.change.id == out.id) out.predicted = &p;
  out.measured_step_ns = ib.main.step_ns / per_step;
  out.measured_speedup = out.measured_step_ns > 0 ? ia.main.step_ns / out.measured_step_ns : 0;
  if (whole_epochs) {
    // What persistent workers change is an epoch's start: the step over
    // whole epochs, starts included, in A's steady-step units.
    const double ea = ia.loader.epoch_step_ns, eb = ib.loader.epoch_step_ns;
    out.measured_speedup = ea > 0 && eb > 0 ? ea / eb : 0;
    out.measured_step_ns = out.measured_speedup > 0 ? ia.main.step_ns / out.measured_speedup : 0;
  }
  return out;
}

std::string VerdictTitle(const Report& report) {
  const Verdict& verdict = report.verdict();
  if (report.model().valid && verdict.id == model::ClassId(report.model().verdict))
    return model::ClassName(report.model().verdict);
  for (const Finding& finding : report.findings()) {
    if (finding.id == verdict.id) return finding.title;
  }
  if (verdict.id == "not_input_bound") return "not input-bound";
  if (verdict.id == "no_copies") return "no copies";
  return verdict.id;
}

namespace {

class DiffTextWriter {
 public:
  DiffTextWriter(const DiffSide& a, const DiffSide& b, bool color, std::ostream& out)
      : a_(a),
        b_(b),
        ra_(*a.report),
        rb_(*b.report),
        work_a_(WorkOf(a)),
        work_b_(WorkOf(b)),
        style_(color),
        out_(out) {}

  void Write() {
    Header();
    WriteWorkSection(work_a_, work_b_, CompareWork(work_a_, work_b_), style_, out_);
    VerdictSection();
    if (ra_.ranks() != nullptr || rb_.ranks() != nullptr) WriteRanksDiff(ra_, rb_, style_, out_);
    PredictionSection();
    MainLoopSection();
    WriteNormalizedSection(work_a_, work_b_, style_, out_);
    ClassSection();
    CopySection();
    ProblemSection();
  }

 private:
  void Title(const std::string& title) { out_ << '\n' << style_.Bold(title) << '\n'; }

  void Header() {
    out_ << style_.Bold("pinscope diff") << '\n';
    for (const auto& [label, report] : {std::pair{"A", &ra_}, std::pair{"B", &rb_}}) {
      std::string command;
      for (const std::string& arg : report->root_header().cmdline()) {
        command += (command.empty() ? "" : " ") + arg;
      }
      const std::string line = std::string(label) + "  " + report->run_dir() + "  (" +
                               FormatDuration(report->duration_ns()) + ", " +
                               FormatCount(report->processes().size()) +
                               (report->processes().size() == 1 ? " process" : " processes") +
                               (command.empty() ? "" : ": " + command) + ")";
      out_ << Truncate(line, kReportWidth) << '\n';
    }
  }

  void VerdictSection() {
    const std::string ta = VerdictTitle(ra_);
    const std::string tb = VerdictTitle(rb_);
    const bool moved = ra_.verdict().id != rb_.verdict().id;
    out_ << '\n'
         << style_.Bold("verdict: ") << ta << " -> " << (moved ? style_.Bold(tb) : tb)
         << (moved ? "  (moved)" : "  (unchanged)") << '\n';
    out_ << Wrap("  A  ", ra_.verdict().text, "     ") << '\n';
    out_ << Wrap("  B  ", rb_.verdict().text, "     ") << '\n';
  }

  // Predicted against measured, when B applied one change A's model timed.
  void PredictionSection() {
    const AppliedChange c = FindAppliedChange(ra_, rb_);
    if (c.id.empty() && c.what.empty()) return;
    Title("A's prediction against B");
    if (c.id.empty()) {
      if (c.what.rfind("nothing A timed", 0) == 0) {
        out_ << "  " << c.what << "\n";
      } else {
        out_ << "  B changes " << c.what
             << ": more than one setting, not a change A's model timed\n";
      }
      return;
    }
    if (c.predicted == nullptr) {
      out_ << "  B changes " << c.what << "; A's report did not time that change\n";
      return;
    }
    const double step_a = ra_.model_inputs().main.step_ns;
    const double err = (c.predicted->speedup - c.measured_speedup) / c.measured_speedup;
    out_ << "  B changes " << c.what << ".\n";
    out_ << StringPrintf("  predicted: step %s -> %s (%.2fx); measured: %s (%.2fx): %+.0f%%\n",
                         FormatDuration(static_cast<uint64_t>(step_a)).c_str(),
                         FormatDuration(static_cast<uint64_t>(c.predicted->step_ns)).c_str(),
                         c.predicted->speedup,
                         FormatDuration(static_cast<uint64_t>(c.measured_step_ns)).c_str(),
                         c.measured_speedup, 100 * err);
  }

  void MainLoopSection() {
    Title("Main loop throughput (H2D copies of the largest recurring size, root main thread)");
    TextTable table({{"run"},
                     {"what", TextTable::Align::kLeft, true},
                     {"span", TextTable::Align::kRight},
                     {"per second", TextTable::Align::kRight}});
    for (const auto& [label, side] : {std::pair{"A", &a_}, std::pair{"B", &b_}}) {
      const MainLoopRate& rate = side->main_loop;
      table.AddRow({label, MainLoopLabel(rate), rate.found ? FormatDuration(rate.span_ns()) : "-",
                    rate.found ? StringPrintf("%.2f", rate.PerSecond()) : "-"});
    }
    table.AddRow({"change", "", "", Change(a_.main_loop.PerSecond(), b_.main_loop.PerSecond())});
    table.Render(out_, style_);
    if (a_.main_loop.found && b_.main_loop.found &&
        a_.main_loop.copy_bytes != b_.main_loop.copy_bytes) {
      out_ << "  note: the runs' main-loop copies differ in size; the rates may not compare\n";
    }
  }

  void ClassSection() {
    Title("Time by bottleneck class (the findings' estimated savings)");
    const std::vector<ClassDelta> classes = Classes(ra_, rb_);
    if (classes.empty()) {
      out_ << "  no bottleneck found in either run\n";
      return;
    }
    TextTable table({{"class", TextTable::Align::kLeft, true},
                     {"A", TextTable::Align::kRight},
                     {"B", TextTable::Align::kRight},
                     {"change", TextTable::Align::kRight}});
    for (const ClassDelta& c : classes) {
      std::string change = "-";
      if (c.kind == Finding::Kind::kTime) {
        change = SignedDuration(Delta(c.a ? c.a->saving_ns : 0, c.b ? c.b->saving_ns : 0));
      } else if ((c.a == nullptr) != (c.b == nullptr)) {
        change = c.a == nullptr ? "new" : "gone";
      }
      table.AddRow({c.title, ClassCell(c.a), ClassCell(c.b), change});
    }
    table.Render(out_, style_);
  }

  void CopySection() {
    Title("Copies by class (direction x host memory)");
    const std::vector<RowKey> keys = RowKeys(ra_, rb_);
    if (keys.empty()) {
      out_ << "  no copies in either run\n";
      return;
    }
    TextTable table({{"class"},
                     {"run"},
                     {"count", TextTable::Align::kRight},
                     {"bytes", TextTable::Align::kRight},
                     {"host-blocked", TextTable::Align::kRight},
                     {"GB/s", TextTable::Align::kRight},
                     {"staging loss", TextTable::Align::kRight}});
    for (const RowKey& key : keys) {
      const CopyRow a = FindRow(ra_, key);
      const CopyRow b = FindRow(rb_, key);
      const auto gbps = [](const CopyRow& row) {
        return row.blocked_ns == 0 ? std::string("-") : StringPrintf("%.1f", row.AchievedGbps());
      };
      table.AddRow({RowName(key), "A", FormatCount(a.count), FormatBytes(a.bytes),
                    FormatDuration(a.blocked_ns), gbps(a), FormatDuration(a.loss_ns)});
      table.AddRow({"", "B", FormatCount(b.count), FormatBytes(b.bytes),
                    FormatDuration(b.blocked_ns), gbps(b), FormatDuration(b.loss_ns)});
      table.AddRow({"", "change", SignedCount(Delta(a.count, b.count)),
                    SignedBytes(Delta(a.bytes, b.bytes)),
                    SignedDuration(Delta(a.blocked_ns, b.blocked_ns)),
                    Change(a.AchievedGbps(), b.AchievedGbps()),
                    SignedDuration(Delta(a.loss_ns, b.loss_ns))});
    }
    table.Render(out_, style_);
    out_ << "  GB/s: bytes / host-blocked time (meaningful for pageable rows); change in %\n";
  }

  void ProblemSection() {
    std::vector<std::string> lines;
    for (const auto& [label, report] : {std::pair{"A", &ra_}, std::pair{"B", &rb_}}) {
      for (const Problem& problem : report->problems()) {
        lines.push_back(std::string(label) + "  " + SeverityName(problem.severity) + " " +
                        problem.message);
      }
    }
    if (lines.empty()) return;
    Title("Problems");
    for (const std::string& line : lines) out_ << "  " << Truncate(line, kReportWidth - 2) << '\n';
  }

  const DiffSide& a_;
  const DiffSide& b_;
  const Report& ra_;
  const Report& rb_;
  const RunWork work_a_;
  const RunWork work_b_;
  Style style_;
  std::ostream& out_;
};

json RunJson(const Report& report) {
  json command = json::array();
  for (const std::string& arg : report.root_header().cmdline()) command.push_back(arg);
  return json{{"dir", report.run_dir()},
              {"run_id", report.run_id()},
              {"command", command},
              {"duration_ns", report.duration_ns()},
              {"processes", report.processes().size()},
              {"verdict",
               {{"id", report.verdict().id},
                {"title", VerdictTitle(report)},
                {"severity", SeverityName(report.verdict().severity)},
                {"text", report.verdict().text}}}};
}

json LoopJson(const MainLoopRate& rate, uint64_t run_start_ns) {
  if (!rate.found) return nullptr;
  return json{{"pid", rate.pid},
              {"tid", rate.tid},
              {"copy_bytes", rate.copy_bytes},
              {"copies", rate.copies},
              {"first_offset_ns", rate.first_ns > run_start_ns ? rate.first_ns - run_start_ns : 0},
              {"span_ns", rate.span_ns()},
              {"per_second", Rate(rate.PerSecond())}};
}

json ClassJson(const Finding* finding) {
  if (finding == nullptr) return nullptr;
  return json{{"severity", SeverityName(finding->severity)},
              {"significant", finding->significant},
              {"saving_ns", finding->saving_ns},
              {"saving_fraction", std::round(finding->fraction * 1e6) / 1e6}};
}

json RowJson(const CopyRow& row) {
  return json{{"count", row.count},
              {"bytes", row.bytes},
              {"blocked_ns", row.blocked_ns},
              {"achieved_gbps", Rate(row.AchievedGbps())},
              {"loss_ns", row.loss_ns}};
}

}  // namespace

void WriteTextDiff(const DiffSide& a, const DiffSide& b, bool color, std::ostream& out) {
  DiffTextWriter(a, b, color, out).Write();
}

json JsonDiff(const DiffSide& a, const DiffSide& b) {
  const Report& ra = *a.report;
  const Report& rb = *b.report;
  json j;
  j["schema_version"] = kDiffSchemaVersion;
  j["tool"] = {{"name", "pinscope"}, {"version", PINSCOPE_VERSION}};
  j["a"] = RunJson(ra);
  j["b"] = RunJson(rb);
  // What each run did, and the copy figures per batch and per second.
  const RunWork wa = WorkOf(a), wb = WorkOf(b);
  j["work"] = WorkJson(wa, wb, CompareWork(wa, wb));
  j["verdict"] = {{"moved", ra.verdict().id != rb.verdict().id},
                  {"text", "verdict: " + VerdictTitle(ra) + " -> " + VerdictTitle(rb)}};
  if (ra.ranks() != nullptr || rb.ranks() != nullptr) j["ranks"] = RanksDiffJson(ra, rb);
  // A's prediction for the one change B applied, and what B measured.
  const AppliedChange applied = FindAppliedChange(ra, rb);
  if (applied.id.empty() && applied.what.empty()) {
    j["prediction"] = nullptr;
  } else {
    j["prediction"] = {{"change", applied.id.empty() ? json(nullptr) : json(applied.id)},
                       {"what", applied.what}};
    if (applied.predicted != nullptr) {
      j["prediction"]["predicted_step_ns"] = applied.predicted->step_ns;
      j["prediction"]["predicted_speedup"] = applied.predicted->speedup;
      j["prediction"]["measured_step_ns"] = applied.measured_step_ns;
      j["prediction"]["measured_speedup"] = applied.measured_speedup;
      j["prediction"]["error"] =
          (applied.predicted->speedup - applied.measured_speedup) / applied.measured_speedup;
    }
  }
  const double pa = a.main_loop.PerSecond();
  const double pb = b.main_loop.PerSecond();
  j["main_loop"] = {
      {"a", LoopJson(a.main_loop, ra.start_ns())},
      {"b", LoopJson(b.main_loop, rb.start_ns())},
      {"change_fraction",
       pa > 0 && pb > 0 ? json(std::round((pb - pa) / pa * 1e6) / 1e6) : json(nullptr)}};
  json classes = json::array();
  for (const ClassDelta& c : Classes(ra, rb)) {
    classes.push_back(
        {{"id", c.id},
         {"title", c.title},
         {"kind", KindName(c.kind)},
         {"a", ClassJson(c.a)},
         {"b", ClassJson(c.b)},
         {"delta_saving_ns", Delta(c.a ? c.a->saving_ns : 0, c.b ? c.b->saving_ns : 0)}});
  }
  j["classes"] = classes;
  json copies = json::array();
  for (const RowKey& key : RowKeys(ra, rb)) {
    const CopyRow ca = FindRow(ra, key);
    const CopyRow cb = FindRow(rb, key);
    copies.push_back({{"direction", DirectionName(static_cast<trace::Direction>(key.first))},
                      {"memory", MemoryKindName(static_cast<trace::MemoryKind>(key.second))},
                      {"a", RowJson(ca)},
                      {"b", RowJson(cb)},
                      {"delta",
                       {{"count", Delta(ca.count, cb.count)},
                        {"bytes", Delta(ca.bytes, cb.bytes)},
                        {"blocked_ns", Delta(ca.blocked_ns, cb.blocked_ns)},
                        {"achieved_gbps", ca.blocked_ns > 0 && cb.blocked_ns > 0
                                              ? json(Rate(cb.AchievedGbps() - ca.AchievedGbps()))
                                              : json(nullptr)},
                        {"loss_ns", Delta(ca.loss_ns, cb.loss_ns)}}}});
  }
  j["copies"] = copies;
  json problems = json::array();
  for (const auto& [label, report] : {std::pair{"a", &ra}, std::pair{"b", &rb}}) {
    for (const Problem& problem : report->problems()) {
      problems.push_back({{"run", label},
                          {"file", problem.file},
                          {"severity", SeverityName(problem.severity)},
                          {"message", problem.message}});
    }
  }
  j["problems"] = problems;
  return j;
}

namespace {

// Replays one run into a report and the main-loop analysis. Returns 0, or 2
// with the reason on `err`.
int LoadSide(const std::string& run_dir, const char* side, const DiffOptions& options,
             std::ostream& err, std::unique_ptr<Report>* report, MainLoopRate* rate) {
  Progress* progress = options.progress;
  if (progress != nullptr) progress->Stage(std::string("reading run ") + side);
  RunListing listing;
  const Status scanned = ScanRun(run_dir, &listing);
  if (!scanned.ok()) {
    err << "pinscope diff: " << scanned.message << '\n';
    return 2;
  }
  if (listing.files.empty()) {
    err << "pinscope diff: no readable process file in " << run_dir << '\n';
    for (const Problem& problem : listing.problems) err << "  " << problem.message << '\n';
    return 2;
  }
  // Each run resolves its calibration as `pinscope report` would (so the
  // diff's numbers are the two reports' numbers); --calibration sets both.
  std::string error, warning;
  std::optional<Calibration> calibration =
      ResolveCalibration(options.calibration_path, run_dir, &error, &warning);
  if (!calibration) {
    err << "pinscope diff: " << error << '\n';
    return 2;
  }
  if (!warning.empty()) err << "pinscope diff: warning: " << warning << '\n';
  ReportOptions report_options;
  report_options.run_dir = run_dir;
  report_options.color = ColorMode::kNever;
  std::map<int, RunListing> by_rank = SplitByRank(listing);  // a distributed job's ranks
  const Calibration rank_calibration = by_rank.empty() ? Calibration{} : *calibration;
  *report = std::make_unique<Report>(std::move(*calibration), report_options);
  MainLoopAnalysis main_loop;
  ReplayOptions replay;
  replay.progress = progress;
  ReplayEngine engine(std::move(listing), replay);
  (*report)->Attach(&engine);
  engine.AddAnalysis(&main_loop);
  if (progress != nullptr) progress->Stage(std::string("replaying run ") + side);
  engine.Run();
  if (progress != nullptr) progress->Stage(std::string("analysing run ") + side);
  (*report)->Evaluate(engine.info());
  if (!by_rank.empty()) {
    (*report)->SetRanks(
        BuildJobRanks(std::move(by_rank), rank_calibration, report_options, **report, err));
  }
  *rate = main_loop.rate();
  return 0;
}

}  // namespace

int DiffRuns(const DiffOptions& options, bool color, std::ostream& out, std::ostream& err) {
  if (options.run_a.empty() || options.run_b.empty()) {
    err << "pinscope diff: needs two run folders\n";
    return 2;
  }
  std::unique_ptr<Report> report_a;
  std::unique_ptr<Report> report_b;
  DiffSide a;
  DiffSide b;
  if (LoadSide(options.run_a, "A", options, err, &report_a, &a.main_loop) != 0) return 2;
  if (LoadSide(options.run_b, "B", options, err, &report_b, &b.main_loop) != 0) return 2;
  if (options.progress != nullptr) options.progress->Stage("writing");
  a.report = report_a.get();
  b.report = report_b.get();
  if (options.json) {
    out << JsonDiff(a, b).dump(2) << '\n';
  } else {
    std::ostringstream text;
    WriteTextDiff(a, b, color, text);
    out << SanitizeTerminalText(text.str(), color);
  }
  for (const Report* report : {report_a.get(), report_b.get()}) {
    WriteProblems(*report, "pinscope diff", err);
  }
  return report_a->HasProblems() || report_b->HasProblems() ? 1 : 0;
}

int RunDiff(const DiffOptions& options, std::ostream& out, std::ostream& err) {
  return DiffRuns(options, UseColor(options.color, out), out, err);
}

}  // namespace pinscope
