// The diff's work normalization; see diff_work.h.
#include "analyzer/diff/diff_work.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <ostream>

#include "analyzer/report/report.h"

namespace pinscope {
namespace {

using json = nlohmann::ordered_json;

std::string Joined(const std::vector<std::string>& argv) {
  std::string line;
  for (const std::string& arg : argv) line += (line.empty() ? "" : " ") + arg;
  return line;
}

double Ratio(double a, double b) { return a > 0 && b > 0 ? b / a : 0; }

bool Differs(double ratio) {
  return ratio > 0 && std::fabs(ratio - 1) > WorkComparison::kWorkTolerance;
}

std::string Times(double ratio) { return StringPrintf("%.2fx", ratio); }

// "+50.3%" for b against a; "-" when either is 0.
std::string ChangeText(double a, double b) {
  if (a <= 0 || b <= 0) return "-";
  return StringPrintf("%+.1f%%", (b - a) / a * 100);
}

double Per(double value, double units) { return units > 0 ? value / units : 0; }

// The figures compared per unit of work.
struct Metric {
  const char* id;  // JSON key
  const char* name;
  double (*value)(const RunWork&);
  std::string (*format)(double);
};

std::string AsCount(double v) { return StringPrintf("%.2f", v); }
std::string AsBytes(double v) { return FormatBytes(static_cast<uint64_t>(std::llround(v))); }
std::string AsDuration(double v) { return FormatDuration(static_cast<uint64_t>(std::llround(v))); }

const Metric kMetrics[] = {
    {"copies", "copies", [](const RunWork& w) { return static_cast<double>(w.copies); }, AsCount},
    {"bytes", "bytes copied", [](const RunWork& w) { return static_cast<double>(w.bytes); },
     AsBytes},
    {"blocked_ns", "host-blocked in copies",
     [](const RunWork& w) { return static_cast<double>(w.blocked_ns); }, AsDuration},
    {"loss_ns", "staging loss", [](const RunWork& w) { return static_cast<double>(w.loss_ns); },
     AsDuration},
};

double Seconds(const RunWork& w) { return static_cast<double>(w.duration_ns) / 1e9; }

}  // namespace

RunWork WorkOf(const DiffSide& side) {
  const Report& report = *side.report;
  RunWork w;
  w.duration_ns = report.duration_ns();
  if (side.main_loop.found) w.batches = side.main_loop.copies;
  if (report.model().valid) {
    w.steps = report.model_inputs().main.steps;
    w.step_ns = report.model_inputs().main.step_ns;
    w.batch_bytes = report.model_inputs().main.batch_bytes;
  }
  const CopyRow& total = report.copies().total();
  w.copies = total.count;
  w.bytes = total.bytes;
  w.blocked_ns = total.blocked_ns;
  w.loss_ns = total.loss_ns;
  w.command.assign(report.root_header().cmdline().begin(), report.root_header().cmdline().end());
  return w;
}

WorkComparison CompareWork(const RunWork& a, const RunWork& b) {
  WorkComparison c;
  c.same_command = a.command == b.command;
  for (size_t i = 0; i < 2; ++i) {
    const std::string xa = i < a.command.size() ? a.command[i] : "";
    const std::string xb = i < b.command.size() ? b.command[i] : "";
    c.same_program = c.same_program && xa == xb;
  }
  c.batches_ratio = Ratio(static_cast<double>(a.batches), static_cast<double>(b.batches));
  c.bytes_ratio = Ratio(static_cast<double>(a.bytes), static_cast<double>(b.bytes));
  c.duration_ratio = Ratio(static_cast<double>(a.duration_ns), static_cast<double>(b.duration_ns));
  // One run with batches or bytes and the other without is different work too.
  const bool one_sided = (a.batches == 0) != (b.batches == 0) || (a.bytes == 0) != (b.bytes == 0);
  c.same_work = !Differs(c.batches_ratio) && !Differs(c.bytes_ratio) && !one_sided;
  if (!c.same_work) {
    std::string what;
    if (c.batches_ratio > 0) {
      what = "B made " + Times(c.batches_ratio) + " A's batches (" + FormatCount(b.batches) +
             " vs " + FormatCount(a.batches) + ")";
    } else if (one_sided && (a.batches == 0) != (b.batches == 0)) {
      what = std::string(a.batches == 0 ? "only B" : "only A") + " has a main loop of batches";
    }
    if (c.bytes_ratio > 0) {
      what += (what.empty() ? "B copied " : " and copied ") + Times(c.bytes_ratio) +
              " A's bytes (" + FormatBytes(b.bytes) + " vs " + FormatBytes(a.bytes) + ")";
    }
    c.notes.push_back("The runs did different amounts of work: " + what +
                      ". Compare the figures per batch and per second, not the totals.");
  }
  if (!c.same_command) {
    c.notes.push_back(c.same_program ? "The runs ran different command lines (the same program "
                                       "and script, other arguments):"
                                     : "The runs ran different commands (another program or "
                                       "script): they may not be the same job.");
  }
  return c;
}

void WriteWorkSection(const RunWork& a, const RunWork& b, const WorkComparison& c,
                      const Style& style, std::ostream& out) {
  out << '\n' << style.Bold("Work (what each run did)") << '\n';
  TextTable table({{"run"},
                   {"duration", TextTable::Align::kRight},
                   {"batches", TextTable::Align::kRight},
                   {"copies", TextTable::Align::kRight},
                   {"bytes copied", TextTable::Align::kRight},
                   {"steady steps", TextTable::Align::kRight},
                   {"step", TextTable::Align::kRight}});
  for (const auto& [label, w] : {std::pair{"A", &a}, std::pair{"B", &b}}) {
    table.AddRow({label, FormatDuration(w->duration_ns),
                  w->batches > 0 ? FormatCount(w->batches) : "-", FormatCount(w->copies),
                  FormatBytes(w->bytes), w->steps > 0 ? FormatCount(w->steps) : "-",
                  w->step_ns > 0 ? AsDuration(w->step_ns) : "-"});
  }
  const auto ratio = [](double r) { return r > 0 ? Times(r) : std::string("-"); };
  table.AddRow({"B/A", ratio(c.duration_ratio), ratio(c.batches_ratio),
                ratio(Ratio(static_cast<double>(a.copies), static_cast<double>(b.copies))),
                ratio(c.bytes_ratio), "", ratio(Ratio(a.step_ns, b.step_ns))});
  table.Render(out, style);
  out << "  batches: the main loop's H2D copies of its largest recurring size (below)\n";
  for (const std::string& note : c.notes) {
    out << "  " << style.Warn("note: ")
        << WrapWords(note, kReportWidth - 8, kReportWidth - 8, "        ") << '\n';
  }
  if (!c.same_command) {
    out << "    A  " << Truncate(Joined(a.command), kReportWidth - 7) << '\n';
    out << "    B  " << Truncate(Joined(b.command), kReportWidth - 7) << '\n';
  }
}

void WriteNormalizedSection(const RunWork& a, const RunWork& b, const Style& style,
                            std::ostream& out) {
  out << '\n' << style.Bold("Per unit of work (per batch, per second of the run)") << '\n';
  TextTable table({{"figure", TextTable::Align::kLeft, true},
                   {"A/batch", TextTable::Align::kRight},
                   {"B/batch", TextTable::Align::kRight},
                   {"change", TextTable::Align::kRight},
                   {"A/s", TextTable::Align::kRight},
                   {"B/s", TextTable::Align::kRight},
                   {"change", TextTable::Align::kRight}});
  const bool batches = a.batches > 0 && b.batches > 0;
  for (const Metric& m : kMetrics) {
    const double va = m.value(a), vb = m.value(b);
    const double ba = Per(va, static_cast<double>(a.batches));
    const double bb = Per(vb, static_cast<double>(b.batches));
    const double sa = Per(va, Seconds(a)), sb = Per(vb, Seconds(b));
    table.AddRow({m.name, batches ? m.format(ba) : "-", batches ? m.format(bb) : "-",
                  batches ? ChangeText(ba, bb) : "-", m.format(sa), m.format(sb),
                  ChangeText(sa, sb)});
  }
  table.Render(out, style);
  if (!batches)
    out << "  per batch: no main loop of batches in " << (a.batches ? "B" : "A") << '\n';
  if (a.step_ns > 0 && b.step_ns > 0) {
    out << "  step (the model's steady window): A " << AsDuration(a.step_ns) << " ("
        << FormatCount(a.steps) << " steps, " << FormatBytes(a.batch_bytes) << " H2D/step), B "
        << AsDuration(b.step_ns) << " (" << FormatCount(b.steps) << " steps, "
        << FormatBytes(b.batch_bytes) << " H2D/step): " << ChangeText(a.step_ns, b.step_ns) << '\n';
  }
}

json WorkJson(const RunWork& a, const RunWork& b, const WorkComparison& c) {
  const auto side = [](const RunWork& w) {
    return json{{"duration_ns", w.duration_ns},
                {"batches", w.batches > 0 ? json(w.batches) : json(nullptr)},
                {"steps", w.steps > 0 ? json(w.steps) : json(nullptr)},
                {"step_ns", w.step_ns > 0 ? json(w.step_ns) : json(nullptr)},
                {"batch_bytes", w.steps > 0 ? json(w.batch_bytes) : json(nullptr)},
                {"copies", w.copies},
                {"bytes", w.bytes},
                {"blocked_ns", w.blocked_ns},
                {"loss_ns", w.loss_ns},
                {"command", w.command}};
  };
  const auto ratio = [](double r) {
    return r > 0 ? json(std::round(r * 1e6) / 1e6) : json(nullptr);
  };
  json j{{"a", side(a)},
         {"b", side(b)},
         {"same_command", c.same_command},
         {"same_program", c.same_program},
         {"same_work", c.same_work},
         {"batches_ratio", ratio(c.batches_ratio)},
         {"bytes_ratio", ratio(c.bytes_ratio)},
         {"duration_ratio", ratio(c.duration_ratio)},
         {"notes", c.notes}};
  for (const char* unit : {"per_batch", "per_second"}) {
    const bool batch = std::string(unit) == "per_batch";
    json figures = json::object();
    for (const Metric& m : kMetrics) {
      const double da = batch ? static_cast<double>(a.batches) : Seconds(a);
      const double db = batch ? static_cast<double>(b.batches) : Seconds(b);
      if (da <= 0 || db <= 0) {
        figures[m.id] = nullptr;
        continue;
      }
      const double va = m.value(a) / da, vb = m.value(b) / db;
      figures[m.id] = {{"a", va},
                       {"b", vb},
                       {"change_fraction",
                        va > 0 ? json(std::round((vb - va) / va * 1e6) / 1e6) : json(nullptr)}};
    }
    j[unit] = figures;
  }
  return j;
}

}  // namespace pinscope
