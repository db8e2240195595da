// Everything in device_activity.h for one process, fed packet by packet;
// see device_activity.h.
#include "analyzer/analyses/device_activity.h"

#include <algorithm>
#include <utility>

namespace pinscope::device {

bool NoticeSaysNoCorrelations(std::string_view text) {
  return text.find("runtime records off") != std::string_view::npos;
}

ProcessDeviceAnalysis::ProcessDeviceAnalysis(BusyOptions options, uint64_t join_horizon_ns,
                                             JoinMode mode)
    : join_horizon_ns_(join_horizon_ns), busy_(options), chunks_(options.chunks) {
  OrderJoinOptions order;
  order.horizon_ns = join_horizon_ns;
  order_.emplace(order);
  if (mode == JoinMode::kAuto) correlation_.emplace(join_horizon_ns);
}

void ProcessDeviceAnalysis::Decide(JoinMethod method) {
  if (join_decided()) return;
  if (method == JoinMethod::kOrder) {
    correlation_.reset();
  } else {
    order_.reset();
  }
}

void ProcessDeviceAnalysis::Pump() {
  if (!join_decided()) return;  // both joins hold their results until then
  for (Joined& j : correlation_ ? correlation_->Take() : order_->Take()) {
    classes_.Add(j);
    if (keep_copies_ && j.host && j.host->type == HostCall::Type::kCopy &&
        j.device.kind == kActMemcpy)
      joined_copies_.push_back(std::move(j));
  }
}

void ProcessDeviceAnalysis::OnHostCall(const HostCall& call) {
  now_ns_ = std::max(now_ns_, call.start_ns);
  if (detached_) {
    ++windows_.host_calls_between;  // no device record will come for it
  } else {
    if (correlation_) correlation_->AddHostCall(call);
    if (order_) order_->AddHostCall(call);
  }
  busy_.AddHostInterval(call.type == HostCall::Type::kCopy ? GapCause::kCopy : GapCause::kSync,
                        {call.start_ns, call.end_ns});
  Pump();
}

void ProcessDeviceAnalysis::OnLoaderWait(Interval wait) {
  busy_.AddHostInterval(GapCause::kDataLoader, wait);
}

void ProcessDeviceAnalysis::OnCorrelation(uint32_t correlation_id, uint64_t call_id,
                                          uint64_t now_ns) {
  now_ns_ = std::max(now_ns_, now_ns);
  if (correlation_) {
    correlation_->AddCorrelation(correlation_id, call_id, now_ns);
    Decide(JoinMethod::kCorrelation);
  } else {
    order_->AddCorrelation(correlation_id, call_id, now_ns);  // counted
  }
  Pump();
}

void ProcessDeviceAnalysis::NoCorrelations() {
  if (correlation_ && correlation_->stats().correlations == 0) Decide(JoinMethod::kOrder);
  Pump();
}

void ProcessDeviceAnalysis::OnDevice(const DeviceRecord& record) {
  if (record.kind == kActKernel &&
      std::find(kernel_devices_.begin(), kernel_devices_.end(), record.device_id) ==
          kernel_devices_.end())
    kernel_devices_.push_back(record.device_id);
  busy_.AddDevice(record);
  // Kernels join nothing (the joins would only pass them through).
  if (record.kind != kActMemcpy && record.kind != kActMemset && record.kind != kActSync) return;
  if (!seen_record_ && record.kind != kActMemset) {
    seen_record_ = true;
    first_record_now_ = now_ns_;
  }
  if (correlation_) correlation_->AddDevice(record);
  if (order_) order_->AddDevice(record);
  Pump();
}

void ProcessDeviceAnalysis::OnRecording(const RecordingSwitch& change) {
  ++recording_.switches;
  if (change.detached && !detached_) {
    detached_ = true;
    detached_since_ns_ = change.time_ns;
  } else if (!change.detached && detached_) {
    detached_ = false;
    detached_spans_.push_back({detached_since_ns_, change.time_ns});
  }
  first_switch_ns_ = std::min(first_switch_ns_, change.time_ns);
  if (change.reason == "attached") ++windows_.windows;
  recording_.peak_kernel_rate = std::max(recording_.peak_kernel_rate, change.kernel_rate);
  if (!change.kernels && !busy_.blind_open()) {
    ++recording_.stops;
    if (recording_.mode.empty()) {
      recording_.mode = change.reason == "sampling"   ? "auto"
                        : change.reason == "disabled" ? "off"
                        : change.reason.empty()       ? "unknown"
                                                      : change.reason;
    }
    busy_.BeginBlind(change.time_ns);
  } else if (change.kernels && busy_.blind_open()) {
    ++recording_.windows;
    busy_.EndBlind(change.time_ns);
  }
}

void ProcessDeviceAnalysis::Advance(uint64_t now_ns) {
  now_ns_ = std::max(now_ns_, now_ns);
  if (seen_record_ && now_ns_ >= first_record_now_ + kDecideNs) Decide(JoinMethod::kOrder);
  if (correlation_) correlation_->Advance(now_ns);
  if (order_) order_->Advance(now_ns);
  busy_.Advance(now_ns);
  Pump();
}

ProcessDeviceResult ProcessDeviceAnalysis::Finish(Interval window) {
  // No correlation came: by order if there was anything to join.
  Decide(seen_record_ ? JoinMethod::kOrder : JoinMethod::kCorrelation);
  if (correlation_) correlation_->Finish();
  if (order_) order_->Finish();
  Pump();
  ProcessDeviceResult r;
  r.join_method = join_method();
  r.join = correlation_ ? correlation_->stats() : order_->stats();
  r.copy_classes = classes_.Results();
  r.devices = busy_.Finish(window);
  utilization_.Apply(window, chunks_, kernel_devices_, &r.devices);
  r.recording = recording_;
  r.windows = windows_;
  r.windows.span_ns = window.length();
  if (detached_) detached_spans_.push_back({detached_since_ns_, std::max(window.end_ns, detached_since_ns_)});
  for (const Interval& span : detached_spans_) {
    const uint64_t a = std::max(span.start_ns, window.start_ns);
    const uint64_t b = std::min(span.end_ns, window.end_ns);
    if (b > a) r.windows.detached_ns += b - a;
  }
  const bool windowed = windows_.windows > 0 || r.windows.detached_ns > 0;
  if (windowed && first_switch_ns_ != UINT64_MAX && first_switch_ns_ > window.start_ns) {
    r.windows.before_first_ns = std::min(first_switch_ns_, window.end_ns) - window.start_ns;
  }
  return r;
}

}  // namespace pinscope::device
