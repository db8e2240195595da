// pinscope's own cost in the text report; see own_cost_text.h.
#include "analyzer/report/own_cost_text.h"

#include <algorithm>
#include <iterator>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "analyzer/common/doc_path.h"
#include "analyzer/common/format.h"

namespace pinscope {
namespace {

std::string Share(uint64_t part, uint64_t whole) {
  return whole == 0 ? std::string("-") : FormatPercent(static_cast<double>(part) / whole);
}

uint64_t Life(const ProcessSummary& p) { return p.end_ns > p.start_ns ? p.end_ns - p.start_ns : 0; }

// Shims before the hooks were timed wrote only the stacks' cost.
std::vector<OwnCostParagraph> StacksOnly(const Report& report) {
  const ProcessAnalysis& analysis = report.process_analysis();
  std::vector<OwnCostParagraph> out;
  if (analysis.stacks_captured() == 0 && analysis.stack_capture_ns() == 0) return out;
  out.push_back({"pinscope's call stacks: " + FormatCount(analysis.stacks_captured()) +
                 " captured, " + FormatDuration(analysis.stack_capture_ns()) +
                 " of the job's thread time (" +
                 Share(analysis.stack_capture_ns(), report.duration_ns()) + " of the run's " +
                 FormatDuration(report.duration_ns()) + " wall time)"});
  const auto& processes = report.processes();
  const auto taking = std::count_if(
      processes.begin(), processes.end(),
      [](const ProcessSummary& p) { return p.stacks_captured > 0 || p.stack_capture_ns > 0; });
  if (taking < 2) return out;
  for (const ProcessSummary& p : processes) {
    if (p.stacks_captured == 0 && p.stack_capture_ns == 0) continue;
    out.push_back({"pid " + std::to_string(p.pid) + ": " + FormatCount(p.stacks_captured) +
                       " captured, " + FormatDuration(p.stack_capture_ns) + " (" +
                       Share(p.stack_capture_ns, Life(p)) + " of its " + FormatDuration(Life(p)) +
                       ")",
                   true});
  }
  return out;
}

// A per-step figure: microseconds below a millisecond.
std::string PerStep(double ns) {
  return ns < 1e6 ? StringPrintf("%.1f us", ns / 1e3) : FormatDuration(static_cast<uint64_t>(ns));
}

std::string LoopLine(const LoopOwnCost& loop) {
  const OwnCostSpan& s = loop.span;
  return "In the steady loop (" + FormatDuration(s.length_ns()) +
         " of it between two of the shim's flushes, about " +
         FormatCount(static_cast<uint64_t>(s.length_ns() / loop.step_ns + 0.5)) + " steps of " +
         FormatDuration(static_cast<uint64_t>(loop.step_ns)) + "): the hooks took " +
         PerStep(loop.PerStep(s.hook_ns)) + " of each step (" + FormatPercent(loop.HookShare()) +
         " of it, " + StringPrintf("%.1f", loop.PerStep(s.hook_calls)) +
         " calls a step), call stacks " + PerStep(loop.PerStep(s.stack_capture_ns)) +
         (s.pointer_queries > 0
              ? " and pointer queries " + PerStep(loop.PerStep(s.pointer_query_ns)) + " a step (" +
                    StringPrintf("%.1f", loop.PerStep(s.pointer_queries)) +
                    " queries; both inside the hooks' time)"
              : " a step (the copies' inside the hooks' time)") +
         (s.cupti_switches > 0
              ? "; of the hooks' time, CUPTI switched on or off " + FormatCount(s.cupti_switches) +
                    (s.cupti_switches == 1 ? " time, " : " times, ") +
                    FormatDuration(s.cupti_switch_ns) + " (" +
                    PerStep(loop.PerStep(s.cupti_switch_ns)) +
                    " a step over this span; once a device-record window)"
              : std::string()) +
         ", pinscope's own threads " + PerStep(loop.PerStep(s.own_threads_cpu_ns)) +
         " of CPU a step (on other cores). The hooks' own time is less than what they cost the "
         "loop: each leaves the program's caches colder, and a thread that runs hooks holding "
         "the GIL (a DataLoader's pin thread) holds the loop's thread back meanwhile; on the "
         "Hugging Face Trainer (H100) the loop slowed by 1.6-1.8 times its hooks' own time (" +
         DocPath("benchmarks.md") + ", twenty-sixth session).";
}

std::string Signed(int64_t ns) {
  return (ns < 0 ? "-" : "+") + FormatDuration(static_cast<uint64_t>(ns < 0 ? -ns : ns));
}

// What the device-record windows cost the loop's steps (window_cost.h).
std::optional<std::string> WindowsLine(const Report& report) {
  const WindowCostAnalysis& wc = report.window_cost();
  std::vector<WindowEffect> ws;  // the windows measured; paused ones apart
  uint64_t paused = 0, longest = 0;
  for (const WindowEffect& w : wc.windows()) {
    if (!w.paused) {
      ws.push_back(w);
      continue;
    }
    ++paused;
    longest = std::max(longest, w.longest_interval_ns);
  }
  if (ws.empty() && paused == 0) return std::nullopt;
  const std::string paused_text =
      paused == 0 ? std::string()
                  : "The loop paused near " +
                        (paused == 1 ? std::string("a device-record window")
                                     : FormatCount(paused) + " device-record windows") +
                        " (a gap of " + FormatDuration(longest) +
                        " between its copies): what a window cost there cannot be told from "
                        "the pause, and is not stated.";
  if (ws.empty()) return "Measured in the loop: nothing. " + paused_text;
  int64_t in = 0, after = 0;
  uint64_t length = 0;
  for (const WindowEffect& w : ws) {
    in += w.excess_in_ns;
    after += w.excess_after_ns;
    length += w.length_ns();
  }
  const int64_t total = in + after;
  const std::string after_s = FormatDuration(WindowCostAnalysis::kAfterNs);
  std::string text;
  auto slower = [](double s) {
    return s >= 0 ? FormatPercent(s) + " slower" : FormatPercent(-s) + " faster";
  };
  if (ws.size() == 1) {
    const WindowEffect& w = ws[0];
    text = "Measured in the loop: the device-record window (" + FormatDuration(w.length_ns()) +
           ", " + FormatDuration(w.attach_ns - report.start_ns()) +
           " into the run) made the loop run " + slower(w.SlowdownIn()) + " than around it (" +
           Signed(w.excess_in_ns) + ") while it was open, and " + slower(w.SlowdownAfter()) +
           " over the " + after_s + " after it (" + Signed(w.excess_after_ns) + ")";
  } else {
    text = "Measured in the loop: " + FormatCount(ws.size()) + " device-record windows (" +
           FormatDuration(length) + " in all) slowed its steps by " + Signed(in) + " in them and " +
           Signed(after) + " in the " + after_s + " after each";
  }
  text += ": " + Signed(total) + " in all";
  if (wc.loop_ns() > 0) {
    text += ", " + FormatPercent(static_cast<double>(total) / wc.loop_ns()) + " of the loop's " +
            FormatDuration(wc.loop_ns()) + " (timed by its copies from one call site)";
  }
  text +=
      ". CUPTI's switches on the job's thread are part of it; the loop's pace around a "
      "window is its baseline (" +
      DocPath("device-activity.md") + ")";
  if (wc.period_gap_ns() > 0 && total > 0) {
    const uint64_t per = length / ws.size() + wc.period_gap_ns();
    const double share = static_cast<double>(total) / ws.size() / per;
    text += ". The next window was planned " + FormatDuration(wc.period_gap_ns()) +
            " later: at one window in that period, " +
            (share < 0.0005 ? std::string("under 0.1%") : "about " + FormatPercent(share)) +
            " of a longer run";
  }
  return text + "." + (paused_text.empty() ? "" : " " + paused_text);
}

// " (by kind: copies 2,087 at 6.1 us, waits ...)": the hooks by kind, where the shim
// counted them (since 2026-12-06); "" otherwise.
std::string KindsText(const HookKindArray& kinds) {
  static constexpr const char* kWhat[] = {
      "other hooks",          "copies",          "waits", "allocations and frees",
      "shared-memory events", "DataLoader spans"};
  static_assert(std::size(kWhat) == std::tuple_size_v<HookKindArray>);
  std::string parts;
  // The known kinds first, the unknown (a newer shim's) last.
  for (size_t i = 1; i <= kinds.size(); ++i) {
    const size_t k = i % kinds.size();
    if (kinds[k].calls == 0) continue;
    parts += (parts.empty() ? "" : ", ") + std::string(kWhat[k]) + " " +
             FormatCount(kinds[k].calls) + " at " +
             StringPrintf("%.1f us", kinds[k].ns / static_cast<double>(kinds[k].calls) / 1e3);
  }
  return parts.empty() ? "" : " (by kind: " + parts + ")";
}

}  // namespace

std::vector<OwnCostParagraph> OwnCostParagraphs(const Report& report) {
  const ProcessAnalysis& analysis = report.process_analysis();
  if (!analysis.has_own_cost()) return StacksOnly(report);
  std::vector<OwnCostParagraph> out;
  const uint64_t calls = analysis.hook_calls(), hook_ns = analysis.hook_ns();
  std::string text = "pinscope's own cost: " + FormatDuration(hook_ns) +
                     " of the job's threads in " + FormatCount(calls) + " recording hook" +
                     (calls == 1 ? "" : "s");
  if (calls > 0) {
    const uint64_t each = hook_ns / calls;  // microseconds, where ms would read 0.005
    text += " (" + (each < 1000000 ? StringPrintf("%.1f us", each / 1e3) : FormatDuration(each)) +
            " a call)";
  }
  text += ", " + Share(hook_ns, report.duration_ns()) + " of the run's " +
          FormatDuration(report.duration_ns()) + " wall time";
  text += KindsText(analysis.hook_kinds());
  if (analysis.stacks_captured() > 0 || analysis.stack_capture_ns() > 0) {
    text += "; call stacks " + FormatDuration(analysis.stack_capture_ns()) + " (" +
            FormatCount(analysis.stacks_captured()) +
            " captured; the copies' are part of the hooks' time)";
  }
  if (const uint64_t queries = analysis.pointer_queries(); queries > 0) {
    const uint64_t each = analysis.pointer_query_ns() / queries;
    text += "; pointer queries " + FormatDuration(analysis.pointer_query_ns()) + " (" +
            FormatCount(queries) + " driver queries classifying a copy's memory, " +
            StringPrintf("%.1f us", each / 1e3) + " each; part of the hooks' time)";
  }
  if (const uint64_t switches = analysis.cupti_switches(); switches > 0) {
    text += "; CUPTI switched on or off on the job's threads " + FormatCount(switches) +
            (switches == 1 ? " time, " : " times, ") + FormatDuration(analysis.cupti_switch_ns()) +
            " (its start at the first CUDA call, and each device-record window's start and end; "
            "part of the hooks' time)";
  }
  text += "; pinscope's own threads " + FormatDuration(analysis.own_threads_cpu_ns()) +
          " of CPU (trace writing and compression, device records, GPU samples, pin-ahead "
          "registrations). Not timed per call: the malloc family's hooks, about 1 ns a call "
          "below PINSCOPE_TRACE_MIN (" +
          DocPath("benchmarks.md") + ").";
  out.push_back({text});
  if (const std::optional<LoopOwnCost> loop = LoopOwnCostOf(report))
    out.push_back({LoopLine(*loop)});
  if (const std::optional<std::string> windows = WindowsLine(report)) out.push_back({*windows});
  const auto& processes = report.processes();
  const auto with_cost = std::count_if(processes.begin(), processes.end(),
                                       [](const ProcessSummary& p) { return p.has_own_cost(); });
  if (with_cost < 2) return out;
  for (const ProcessSummary& p : processes) {
    if (!p.has_own_cost()) continue;
    out.push_back({"pid " + std::to_string(p.pid) + ": hooks " + FormatDuration(p.hook_ns) + " (" +
                       FormatCount(p.hook_calls) + " calls, " + Share(p.hook_ns, Life(p)) +
                       " of its " + FormatDuration(Life(p)) + "), own threads " +
                       FormatDuration(p.own_threads_cpu_ns) + " of CPU",
                   true});
  }
  return out;
}

}  // namespace pinscope
