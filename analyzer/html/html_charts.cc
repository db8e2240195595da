// The pipeline and timeline drawings of the HTML report; see html_charts.h.
// Coordinates are SVG user units; the page scales the drawing to its width
// (viewBox), so a screenshot and a wide screen show the same picture.
#include "analyzer/html/html_charts.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <vector>

#include "analyzer/common/format.h"
#include "analyzer/html/html_escape.h"

namespace pinscope::html {

namespace {

using Span = PipelineAnalysis::TimelineSpan;
using Kind = Span::Kind;

std::string Ms(double ns) { return FormatDuration(static_cast<uint64_t>(std::max(0.0, ns))); }

std::string Offset(uint64_t t, uint64_t start) {
  return StringPrintf("+%.3f s", t > start ? static_cast<double>(t - start) / 1e9 : 0.0);
}

// The stage id a prediction's limit_next names (pipeline_model.cc, Timing::Limit).
std::string StageOfLimit(const std::string& limit) {
  if (limit == "the main thread") return "main";
  if (limit == "the workers") return "producers";
  if (limit == "the pin thread") return "pin_thread";
  if (limit == "the GPU") return "gpu";
  return "";
}

// Part colours: waits in warm colours, work in cool ones; all at least 3:1
// against white (WCAG 1.4.11, graphics).
const char* PartColor(const std::string& id) {
  if (id == "wait_input") return "#c2410c";
  if (id == "handover") return "#b45309";
  if (id == "gpu_wait") return "#6b7280";
  if (id == "copy") return "#b91c1c";
  if (id == "make") return "#1d4ed8";
  if (id == "next") return "#7c3aed";
  if (id == "release") return "#0f766e";
  return "#15803d";  // host: the main thread's own Python and launches
}

}  // namespace

std::vector<const model::Prediction*> ShownPredictions(const Report& report) {
  std::vector<const model::Prediction*> out;
  const model::Result& m = report.model();
  if (!m.valid || m.verdict == model::Class::kGpuBound) return out;
  const double step = report.model_inputs().main.step_ns;
  // The text report's rule (report_text.cc, ModelChanges): worth a line.
  for (const model::Prediction& p : m.predictions) {
    if (step - p.step_ns < m.floor_ns && p.speedup < 1.02) continue;
    out.push_back(&p);
    if (out.size() == 5) break;
  }
  return out;
}

std::string PipelineSvg(const Report& report) {
  const model::Result& m = report.model();
  if (!m.valid || m.stages.empty()) return "";
  const model::Inputs& in = report.model_inputs();
  const double step = in.main.step_ns;
  const std::vector<const model::Prediction*> shown = ShownPredictions(report);
  const model::Prediction* top = shown.empty() ? nullptr : shown.front();
  const std::string next = top ? StageOfLimit(top->limit_next) : "";

  constexpr double kWidth = 1200, kLabel = 370, kRight = 340, kRow = 38, kBar = 24, kTop = 46;
  const double plot = kWidth - kLabel - kRight;
  double full = step;
  for (const model::Stage& st : m.stages) full = std::max(full, st.service_ns);
  if (full <= 0) full = 1;
  const auto x = [&](double ns) { return kLabel + plot * std::min(ns, full) / full; };
  const double stages_bottom = kTop + kRow * static_cast<double>(m.stages.size());
  const double parts_y = stages_bottom + 44;
  const double height = parts_y + kBar + (m.parts.empty() ? 12 : 64);

  const model::Stage* critical = nullptr;
  for (const model::Stage& st : m.stages)
    if (st.id == m.critical) critical = &st;
  std::string summary = "Each stage's service time per step against the " + Ms(step) + " step.";
  if (critical) {
    summary += " " + critical->name + " limits the step (" + Ms(critical->service_ns) +
               StringPrintf(", %.0f%% of it).", 100 * critical->utilization);
  }
  if (top) {
    summary += " After " + top->change.what + " the step would be " + Ms(top->step_ns) +
               (top->limit_next.empty() ? "." : ", limited by " + top->limit_next + ".");
  }

  std::ostringstream o;
  o << "<svg id=\"pipeline-chart\" class=\"chart\" "
       "viewBox=\"0 0 "
    << SvgNumber(kWidth) << ' ' << SvgNumber(height)
    << "\" role=\"img\" aria-labelledby=\"pipeline-title pipeline-desc\" aria-label=\""
    << HtmlEscape(summary) << "\">\n"
    << "<title id=\"pipeline-title\">The step as a pipeline of stages</title>\n"
    << "<desc id=\"pipeline-desc\">" << HtmlEscape(summary) << "</desc>\n";
  // The step's time, and the step after the top change.
  o << "<line class=\"step-line\" x1=\"" << SvgNumber(x(step)) << "\" y1=\"" << kTop - 14
    << "\" x2=\"" << SvgNumber(x(step)) << "\" y2=\"" << SvgNumber(stages_bottom)
    << "\" stroke=\"#111827\" stroke-width=\"2\"/>\n"
    << "<text x=\"" << SvgNumber(x(step)) << "\" y=\"" << kTop - 20
    << "\" text-anchor=\"middle\" class=\"axis\">step " << HtmlEscape(Ms(step)) << "</text>\n";
  if (top && top->step_ns < step) {
    o << "<line class=\"predicted-line\" x1=\"" << SvgNumber(x(top->step_ns)) << "\" y1=\""
      << kTop - 4 << "\" x2=\"" << SvgNumber(x(top->step_ns)) << "\" y2=\""
      << SvgNumber(stages_bottom) << "\" stroke=\"#047857\" stroke-width=\"2\" "
      << "stroke-dasharray=\"6 4\"><title>"
      << HtmlEscape("after " + top->change.what + ": " + Ms(top->step_ns)) << "</title></line>\n"
      << "<text x=\"" << SvgNumber(x(top->step_ns) + 4) << "\" y=\"" << kTop - 4
      << "\" class=\"axis predicted\">after the top change: " << HtmlEscape(Ms(top->step_ns))
      << "</text>\n";
  }
  for (size_t i = 0; i < m.stages.size(); ++i) {
    const model::Stage& st = m.stages[i];
    const bool is_critical = st.id == m.critical;
    const bool is_next = !next.empty() && st.id == next;
    const double y = kTop + kRow * static_cast<double>(i);
    const double w = std::max(1.0, x(st.service_ns) - kLabel);
    std::string cls = "stage";
    if (is_critical) cls += " critical";
    if (is_next) cls += " next";
    std::string value =
        Ms(st.service_ns) + StringPrintf(" a step, %.0f%% busy", 100 * st.utilization);
    o << "<g class=\"" << cls << "\" data-stage=\"" << HtmlEscape(st.id) << "\">"
      << "<title>" << HtmlEscape(st.name + ": " + value) << "</title>"
      << "<text x=\"" << SvgNumber(kLabel - 10) << "\" y=\"" << SvgNumber(y + kBar * 0.7)
      << "\" text-anchor=\"end\" class=\"label\">" << HtmlEscape(st.name) << "</text>"
      << "<rect x=\"" << SvgNumber(kLabel) << "\" y=\"" << SvgNumber(y) << "\" width=\""
      << SvgNumber(w) << "\" height=\"" << kBar << "\" rx=\"3\" fill=\""
      << (is_critical ? "#c2410c" : "#2563eb") << "\""
      << (is_next ? " stroke=\"#047857\" stroke-width=\"3\" stroke-dasharray=\"6 3\"" : "")
      << "/>"
      // Values in one column right of the scale, clear of the step's line.
      << "<text x=\"" << SvgNumber(kLabel + plot + 12) << "\" y=\"" << SvgNumber(y + kBar * 0.7)
      << "\" class=\"value\">" << HtmlEscape(value);
    if (is_critical) o << " <tspan class=\"mark\">&#9664; limits the step</tspan>";
    if (is_next) o << " <tspan class=\"mark next\">&#9664; limits next</tspan>";
    o << "</text></g>\n";
  }
  if (!m.parts.empty() && step > 0) {
    o << "<text x=\"" << SvgNumber(kLabel - 10) << "\" y=\"" << SvgNumber(parts_y + kBar * 0.7)
      << "\" text-anchor=\"end\" class=\"label\">the main thread&#39;s step</text>\n";
    double at = 0;
    double legend_x = kLabel;
    double legend_y = parts_y + kBar + 22;
    for (const model::Part& part : m.parts) {
      if (part.ns <= 0) continue;
      const double x0 = kLabel + plot * std::min(at, full) / full;
      at += part.ns;
      const double x1 = kLabel + plot * std::min(at, full) / full;
      const std::string text =
          part.name + ": " + Ms(part.ns) + StringPrintf(" (%.0f%%)", 100 * part.ns / step);
      o << "<g class=\"part\" data-part=\"" << HtmlEscape(part.id) << "\"><title>"
        << HtmlEscape(text) << "</title><rect x=\"" << SvgNumber(x0) << "\" y=\""
        << SvgNumber(parts_y) << "\" width=\"" << SvgNumber(std::max(0.5, x1 - x0))
        << "\" height=\"" << kBar << "\" fill=\"" << PartColor(part.id)
        << "\" stroke=\"#ffffff\" stroke-width=\"1\"/></g>\n";
      // A legend under the bar, wrapping at the drawing's width.
      const double item = 22 + 6.6 * static_cast<double>(text.size());
      if (legend_x + item > kWidth - 10 && legend_x > kLabel) {
        legend_x = kLabel;
        legend_y += 20;
      }
      o << "<rect x=\"" << SvgNumber(legend_x) << "\" y=\"" << SvgNumber(legend_y - 11)
        << "\" width=\"12\" height=\"12\" fill=\"" << PartColor(part.id) << "\"/>"
        << "<text x=\"" << SvgNumber(legend_x + 16) << "\" y=\"" << SvgNumber(legend_y)
        << "\" class=\"legend\">" << HtmlEscape(text) << "</text>\n";
      legend_x += item;
    }
  }
  o << "</svg>\n";
  return o.str();
}

TimelineWindow ChooseTimelineWindow(const Report& report) {
  TimelineWindow w;
  const PipelineAnalysis& p = report.pipeline();
  const double step = report.model_inputs().main.step_ns;
  if (p.window_end_ns() > p.window_start_ns() && step > 0) {
    const uint64_t length = p.window_end_ns() - p.window_start_ns();
    const uint64_t want = static_cast<uint64_t>(step * kTimelineSteps);
    if (want >= length) {
      w.start_ns = p.window_start_ns();
      w.end_ns = p.window_end_ns();
      return w;
    }
    // Where kernels were recorded (CUPTI samples them in windows when a
    // job launches many): of 17 placements from the window's start to its
    // end, the one with the least unrecorded GPU time, the middle on a tie.
    std::vector<std::pair<uint64_t, uint64_t>> blind;
    for (const Span& s : p.TimelineSpans(p.window_start_ns(), p.window_end_ns(), 1 << 20))
      if (s.kind == Kind::kGpuBlind) blind.push_back({s.start_ns, s.end_ns});
    const auto blind_in = [&](uint64_t a, uint64_t b) {
      uint64_t n = 0;
      for (auto [s, e] : blind)
        if (std::min(e, b) > std::max(s, a)) n += std::min(e, b) - std::max(s, a);
      return n;
    };
    // A long run keeps only its last copies, syncs and GPU intervals for
    // drawing (PipelineAnalysis::timeline_from_ns): the steps drawn are
    // among those, the window's last ones where fewer were kept.
    uint64_t lo = p.window_start_ns();
    if (p.timeline_from_ns() > lo) lo = std::min(p.timeline_from_ns(), p.window_end_ns() - want);
    const uint64_t room = p.window_end_ns() - want - lo;
    constexpr int kPlaces = 16;
    uint64_t best = ~0ull, best_distance = ~0ull;
    for (int i = 0; i <= kPlaces; ++i) {
      const uint64_t start = lo + room / kPlaces * i;
      const uint64_t unseen = blind_in(start, start + want);
      const uint64_t distance = i > kPlaces / 2 ? i - kPlaces / 2 : kPlaces / 2 - i;
      if (unseen < best || (unseen == best && distance < best_distance)) {
        best = unseen;
        best_distance = distance;
        w.start_ns = start;
      }
    }
    w.end_ns = w.start_ns + want;
    return w;
  }
  constexpr uint64_t kFallback = 2000000000ull;
  const uint64_t length = report.duration_ns();
  w.start_ns = report.start_ns() + (length > kFallback ? (length - kFallback) / 2 : 0);
  w.end_ns = std::min(report.end_ns(), w.start_ns + kFallback);
  return w;
}

namespace {

struct Lane {
  std::string label;
  std::string cls;  // "main", "pin", "thread", "worker", "gpu"
  uint32_t pid = 0;
  int order = 0;
  std::vector<const Span*> spans;
};

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kFetch:
      return "making a batch (fetch)";
    case Kind::kNext:
      return "in DataLoader.__next__";
    case Kind::kRecv:
      return "receiving a batch";
    case Kind::kPin:
      return "pinning a batch";
    case Kind::kCopy:
      return "copy call";
    case Kind::kSync:
      return "synchronize";
    case Kind::kGpu:
      return "GPU kernels";
    case Kind::kGpuCopy:
      return "GPU transfer";
    case Kind::kGpuBlind:
      return "kernels not recorded (CUPTI sampling)";
  }
  return "";
}

const char* KindClass(Kind k) {
  switch (k) {
    case Kind::kFetch:
      return "fetch";
    case Kind::kNext:
      return "next";
    case Kind::kRecv:
      return "recv";
    case Kind::kPin:
      return "pin";
    case Kind::kCopy:
      return "copy";
    case Kind::kSync:
      return "sync";
    case Kind::kGpu:
      return "gpu";
    case Kind::kGpuCopy:
      return "gpucopy";
    case Kind::kGpuBlind:
      return "blind";
  }
  return "";
}

// Inner spans (receiving inside __next__, a GPU transfer beside kernels) are
// drawn thinner, so the span around them stays visible.
bool Inner(Kind k) { return k == Kind::kRecv || k == Kind::kGpuCopy; }

// Share of [start, end) covered by the spans of `kinds` (their union).
double BusyShare(const std::vector<const Span*>& spans, uint64_t start, uint64_t end,
                 std::initializer_list<Kind> kinds) {
  std::vector<std::pair<uint64_t, uint64_t>> v;
  for (const Span* s : spans) {
    if (std::find(kinds.begin(), kinds.end(), s->kind) == kinds.end()) continue;
    v.push_back({std::max(s->start_ns, start), std::min(s->end_ns, end)});
  }
  std::sort(v.begin(), v.end());
  uint64_t covered = 0, at = start;
  for (auto [a, b] : v) {
    a = std::max(a, at);
    if (b > a) {
      covered += b - a;
      at = b;
    }
  }
  return end > start ? static_cast<double>(covered) / static_cast<double>(end - start) : 0;
}

// A round tick spacing giving about eight ticks over `length` ns.
double TickNs(double length) {
  const double raw = length / 8;
  const double p = std::pow(10.0, std::floor(std::log10(std::max(raw, 1.0))));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * p) return m * p;
  return 10 * p;
}

}  // namespace

std::string TimelineSvg(const Report& report, TimelineWindow window) {
  if (window.end_ns <= window.start_ns) return "";
  const PipelineAnalysis& pipeline = report.pipeline();
  // Bounded: the drawing merges what falls within a pixel anyway.
  constexpr size_t kMaxSpans = 200000;
  const std::vector<Span> spans = pipeline.TimelineSpans(window.start_ns, window.end_ns, kMaxSpans);
  if (spans.empty()) return "";
  const int root = report.root_index();
  const uint32_t step_tid = pipeline.step_tid();
  const uint32_t pin_tid = pipeline.pin_tid();
  auto summary_of = [&](int index) -> const ProcessSummary* {
    for (const ProcessSummary& p : report.processes())
      if (p.index == index) return &p;
    return nullptr;
  };

  // One lane per (process, thread), one for the GPU; the step thread first,
  // then the pin thread, the root's others, the workers by pid, the GPU.
  std::map<std::pair<int, uint32_t>, Lane> lanes;
  std::map<int, int32_t> worker_ids;
  for (const Span& s : spans)
    if (s.kind == Kind::kFetch && s.worker_id >= 0)
      worker_ids.emplace(s.process_index, s.worker_id);
  for (const Span& s : spans) {
    const bool gpu = s.kind == Kind::kGpu || s.kind == Kind::kGpuCopy || s.kind == Kind::kGpuBlind;
    const std::pair<int, uint32_t> key =
        gpu ? std::make_pair(-1, 0u) : std::make_pair(s.process_index, s.tid);
    auto [it, made] = lanes.try_emplace(key);
    Lane& lane = it->second;
    lane.spans.push_back(&s);
    if (!made) continue;
    const ProcessSummary* p = summary_of(s.process_index);
    lane.pid = p ? p->pid : 0;
    const std::string pid = p ? " · pid " + std::to_string(p->pid) : "";
    if (gpu) {
      lane.cls = "gpu";
      lane.label = "GPU";
      lane.order = 4;
    } else if (s.process_index == root && s.tid == step_tid) {
      lane.cls = "main";
      lane.label = "main thread" + pid;
      lane.order = 0;
    } else if (s.process_index == root && s.tid == pin_tid) {
      lane.cls = "pin";
      lane.label = "pin thread" + pid;
      lane.order = 1;
    } else if (s.process_index == root) {
      lane.cls = "thread";
      lane.label = "thread " + std::to_string(s.tid) + pid;
      lane.order = 2;
    } else {
      lane.cls = "worker";
      auto w = worker_ids.find(s.process_index);
      lane.label =
          (w != worker_ids.end() ? "worker " + std::to_string(w->second) : "process") + pid;
      lane.order = 3;
    }
  }
  std::vector<Lane*> order;
  for (auto& [key, lane] : lanes) order.push_back(&lane);
  std::stable_sort(order.begin(), order.end(), [](const Lane* a, const Lane* b) {
    return a->order != b->order ? a->order < b->order : a->pid < b->pid;
  });

  constexpr double kWidth = 1200, kLabel = 250, kRight = 20, kLaneH = 26, kGap = 10, kTop = 44;
  const double plot = kWidth - kLabel - kRight;
  const double length = static_cast<double>(window.end_ns - window.start_ns);
  const auto x = [&](uint64_t t) {
    const uint64_t c = std::clamp(t, window.start_ns, window.end_ns);
    return kLabel + plot * static_cast<double>(c - window.start_ns) / length;
  };
  const double height = kTop + (kLaneH + kGap) * static_cast<double>(order.size()) + 10;

  // What a reader of the page is told in words, lane by lane.
  std::string summary = "Timeline of " + Ms(length) + " from " +
                        Offset(window.start_ns, report.start_ns()) + " to " +
                        Offset(window.end_ns, report.start_ns()) + ".";
  std::vector<std::string> shares(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    const Lane& lane = *order[i];
    double share = 0;
    std::string what;
    if (lane.cls == "worker") {
      share = BusyShare(lane.spans, window.start_ns, window.end_ns, {Kind::kFetch});
      what = "making batches";
    } else if (lane.cls == "main") {
      share = BusyShare(lane.spans, window.start_ns, window.end_ns, {Kind::kNext});
      what = "in __next__";
    } else if (lane.cls == "pin") {
      share = BusyShare(lane.spans, window.start_ns, window.end_ns, {Kind::kPin});
      what = "pinning";
    } else if (lane.cls == "gpu") {
      // Busy over the part of the window in which kernels were recorded.
      const double blind = BusyShare(lane.spans, window.start_ns, window.end_ns, {Kind::kGpuBlind});
      share = BusyShare(lane.spans, window.start_ns, window.end_ns, {Kind::kGpu, Kind::kGpuCopy});
      if (blind > 0.5) {
        what = StringPrintf("kernels not recorded in %.0f%% of it", 100 * blind);
      } else if (blind > 0.005) {
        share = std::min(1.0, share / (1 - blind));
        what = StringPrintf("busy where recorded (%.0f%% not)", 100 * blind);
      } else {
        what = "busy";
      }
    } else {
      share = BusyShare(lane.spans, window.start_ns, window.end_ns,
                        {Kind::kFetch, Kind::kNext, Kind::kCopy, Kind::kSync, Kind::kPin});
      what = "busy";
    }
    shares[i] = what.rfind("kernels not recorded", 0) == 0
                    ? what
                    : StringPrintf("%.0f%% ", 100 * share) + what;
    summary += " " + lane.label + ": " + shares[i] + ".";
  }

  std::ostringstream o;
  o << "<svg id=\"timeline-chart\" class=\"chart\" "
       "viewBox=\"0 0 "
    << SvgNumber(kWidth) << ' ' << SvgNumber(height)
    << "\" role=\"img\" aria-labelledby=\"timeline-title timeline-desc\" aria-label=\""
    << HtmlEscape(summary) << "\">\n"
    << "<title id=\"timeline-title\">Timeline of a window of the steady steps</title>\n"
    << "<desc id=\"timeline-desc\">" << HtmlEscape(summary) << "</desc>\n"
    << "<defs><pattern id=\"blind-hatch\" width=\"6\" height=\"6\" "
       "patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\">"
       "<rect width=\"6\" height=\"6\" fill=\"#f3f4f6\"/>"
       "<rect width=\"2.5\" height=\"6\" fill=\"#9ca3af\"/></pattern></defs>\n";
  // The time axis: ticks relative to the window's start.
  const double tick = TickNs(length);
  o << "<g class=\"axis\">";
  for (double t = 0; t <= length + 1; t += tick) {
    const double tx = kLabel + plot * t / length;
    o << "<line x1=\"" << SvgNumber(tx) << "\" y1=\"" << kTop - 8 << "\" x2=\"" << SvgNumber(tx)
      << "\" y2=\"" << SvgNumber(height - 10) << "\" stroke=\"#d1d5db\" stroke-width=\"1\"/>"
      << "<text x=\"" << SvgNumber(tx) << "\" y=\"" << kTop - 14 << "\" text-anchor=\"middle\">"
      << HtmlEscape(Ms(t)) << "</text>";
  }
  o << "</g>\n";
  for (size_t i = 0; i < order.size(); ++i) {
    const Lane& lane = *order[i];
    const double y = kTop + (kLaneH + kGap) * static_cast<double>(i);
    o << "<g class=\"lane " << lane.cls << "\" data-pid=\"" << lane.pid << "\"><title>"
      << HtmlEscape(lane.label + ": " + shares[i]) << "</title>"
      << "<text x=\"" << SvgNumber(kLabel - 10) << "\" y=\"" << SvgNumber(y + kLaneH * 0.5)
      << "\" text-anchor=\"end\" class=\"label\">" << HtmlEscape(lane.label) << "</text>"
      << "<text x=\"" << SvgNumber(kLabel - 10) << "\" y=\"" << SvgNumber(y + kLaneH * 0.5 + 13)
      << "\" text-anchor=\"end\" class=\"share\">" << HtmlEscape(shares[i]) << "</text>"
      << "<rect x=\"" << SvgNumber(kLabel) << "\" y=\"" << SvgNumber(y) << "\" width=\""
      << SvgNumber(plot) << "\" height=\"" << kLaneH << "\" fill=\"#f3f4f6\"/>";
    // Outer spans first, inner ones over them; spans closer than half a unit
    // merge into one rectangle (what the eye would see anyway).
    for (bool inner : {false, true}) {
      std::map<Kind, std::vector<const Span*>> by_kind;
      for (const Span* s : lane.spans)
        if (Inner(s->kind) == inner) by_kind[s->kind].push_back(s);
      // The hatching of unrecorded time first: what was recorded goes over it.
      std::vector<std::pair<Kind, std::vector<const Span*>>> kinds(by_kind.begin(), by_kind.end());
      std::stable_partition(kinds.begin(), kinds.end(),
                            [](const auto& k) { return k.first == Kind::kGpuBlind; });
      for (auto& [kind, list] : kinds) {
        const double h = inner ? kLaneH * 0.4 : kLaneH;
        const double ry = inner ? y + kLaneH - h : y;
        size_t k = 0;
        while (k < list.size()) {
          double x0 = x(list[k]->start_ns), x1 = x(list[k]->end_ns);
          const uint64_t first = list[k]->start_ns;
          uint64_t last = list[k]->end_ns, total = list[k]->end_ns - list[k]->start_ns;
          size_t n = 1;
          while (k + n < list.size() && x(list[k + n]->start_ns) <= x1 + 0.5) {
            x1 = std::max(x1, x(list[k + n]->end_ns));
            last = std::max(last, list[k + n]->end_ns);
            total += list[k + n]->end_ns - list[k + n]->start_ns;
            ++n;
          }
          const std::string tip =
              n == 1
                  ? std::string(KindName(kind)) + ": " + Ms(static_cast<double>(total)) + " at " +
                        Offset(first, report.start_ns())
                  : std::to_string(n) + " × " + KindName(kind) + ", " +
                        Ms(static_cast<double>(total)) + " in all, " +
                        Offset(first, report.start_ns()) + " to " + Offset(last, report.start_ns());
          o << "<rect class=\"span " << KindClass(kind) << "\" x=\"" << SvgNumber(x0) << "\" y=\""
            << SvgNumber(ry) << "\" width=\"" << SvgNumber(std::max(1.0, x1 - x0)) << "\" height=\""
            << SvgNumber(h) << "\"><title>" << HtmlEscape(tip) << "</title></rect>";
          k += n;
        }
      }
    }
    o << "</g>\n";
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace pinscope::html
