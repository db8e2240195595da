// Everything in device_activity.h for one process, fed packet by packet;
// see device_activity.h.
#include "analyzer/analyses/device_activity.h"

#include <algorithm>
#include <utility>

namespace pinscope::device {

ProcessDeviceAnalysis::ProcessDeviceAnalysis(BusyOptions options, uint64_t join_horizon_ns)
    : joiner_(join_horizon_ns), busy_(options), chunks_(options.chunks) {}

void ProcessDeviceAnalysis::Pump() {
  for (Joined& j : joiner_.Take()) {
    classes_.Add(j);
    if (keep_copies_ && j.host && j.host->type == HostCall::Type::kCopy &&
        j.device.kind == kActMemcpy)
      joined_copies_.push_back(std::move(j));
  }
}

void ProcessDeviceAnalysis::OnHostCall(const HostCall& call) {
  joiner_.AddHostCall(call);
  busy_.AddHostInterval(call.type == HostCall::Type::kCopy ? GapCause::kCopy : GapCause::kSync,
                        {call.start_ns, call.end_ns});
  Pump();
}

void ProcessDeviceAnalysis::OnLoaderWait(Interval wait) {
  busy_.AddHostInterval(GapCause::kDataLoader, wait);
}

void ProcessDeviceAnalysis::OnCorrelation(uint32_t correlation_id, uint64_t call_id,
                                          uint64_t now_ns) {
  joiner_.AddCorrelation(correlation_id, call_id, now_ns);
  Pump();
}

void ProcessDeviceAnalysis::OnDevice(const DeviceRecord& record) {
  if (record.kind == kActKernel &&
      std::find(kernel_devices_.begin(), kernel_devices_.end(), record.device_id) ==
          kernel_devices_.end())
    kernel_devices_.push_back(record.device_id);
  joiner_.AddDevice(record);
  busy_.AddDevice(record);
  Pump();
}

void ProcessDeviceAnalysis::OnRecording(const RecordingSwitch& change) {
  ++recording_.switches;
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
  joiner_.Advance(now_ns);
  busy_.Advance(now_ns);
  Pump();
}

ProcessDeviceResult ProcessDeviceAnalysis::Finish(Interval window) {
  joiner_.Finish();
  Pump();
  ProcessDeviceResult r;
  r.join = joiner_.stats();
  r.copy_classes = classes_.Results();
  r.devices = busy_.Finish(window);
  utilization_.Apply(window, chunks_, kernel_devices_, &r.devices);
  r.recording = recording_;
  return r;
}

}  // namespace pinscope::device
