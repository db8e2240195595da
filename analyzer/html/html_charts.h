// The HTML report's two drawings, as inline SVG strings: the step as a
// pipeline of stages (the model's stages and the main thread's parts), and
// a timeline of a window of the run, one lane per thread that worked in it
// and one for the GPU. Pure formatting over the report's objects; every
// string from the trace is escaped (html_escape.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "analyzer/report/report.h"

namespace pinscope::html {

// <svg id="pipeline-chart">: one bar per model stage (class "stage", the
// one the step waits on also "critical", the one limiting after the top
// change "next"), the step's time as a line, and the main thread's step
// as one bar cut into its parts. Empty when the model found no step loop.
std::string PipelineSvg(const Report& report);

// The model's predictions worth a line, most gain first (at most five): the
// text report's rule (report_text.cc). Empty for a GPU-bound step.
std::vector<const model::Prediction*> ShownPredictions(const Report& report);

// The window the timeline shows: about kTimelineSteps steps of the model's
// steady window (all of it when shorter), placed where the GPU's kernels
// were recorded, nearest the middle; without a steady window, up to two
// seconds from the middle of the run.
struct TimelineWindow {
  uint64_t start_ns = 0, end_ns = 0;
};
inline constexpr int kTimelineSteps = 12;
TimelineWindow ChooseTimelineWindow(const Report& report);

// <svg id="timeline-chart">: lanes (class "lane" plus "main", "pin",
// "worker", "thread" or "gpu") of the spans PipelineAnalysis kept in
// `window`, on a time axis. Empty when no span falls in it.
std::string TimelineSvg(const Report& report, TimelineWindow window);

}  // namespace pinscope::html
