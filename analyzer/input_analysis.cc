// Input-pipeline facts for the rules (input_analysis.h). Batch copies are
// detected after the replay from the root main thread's H2D copies; device
// records are fed to one device::ProcessDeviceAnalysis per process, which
// joins them to the intercepted calls and measures busy time and gaps.
#include "analyzer/input_analysis.h"

#include <algorithm>

namespace pinscope {

namespace {

// Root main thread H2D copies kept for the batch detection (the largest
// recurring ones are the batches; a run with more is summarised on these).
constexpr size_t kMaxRootCopies = 1 << 20;

uint64_t Median(std::vector<uint64_t> values) {
  if (values.empty()) return 0;
  std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
  return values[values.size() / 2];
}

uint64_t AtGbps(uint64_t bytes, double gbps) {
  return gbps <= 0 ? 0 : static_cast<uint64_t>(static_cast<double>(bytes) / gbps);
}

}  // namespace

InputAnalysis::InputAnalysis(const Calibration& calibration) : calibration_(calibration) {}
InputAnalysis::~InputAnalysis() = default;

InputAnalysis::PerProcess& InputAnalysis::Process(int index) { return per_process_[index]; }

void InputAnalysis::OnProcess(const ProcessState& process) {
  if (root_pid_ < 0 && (process.origin() == trace::ORIGIN_ROOT || process.parent() == nullptr)) {
    root_pid_ = static_cast<int>(process.pid());
  }
  if (process.origin() == trace::ORIGIN_FORK && !process.helper()) ++workers_;
}

void InputAnalysis::OnCopy(const CopyContext& ctx) {
  const trace::CopyEvent& copy = ctx.copy;
  const ProcessState& process = ctx.event.process;
  const uint32_t tid = ctx.event.packet.tid();
  if (static_cast<int>(process.pid()) == root_pid_ && tid == process.pid() &&
      copy.direction() == trace::H2D && ctx.blocked_ns > 0 && root_copies_.size() < kMaxRootCopies) {
    // Only copies that may still be a batch: at least half the largest yet.
    if (copy.bytes() * 2 >= largest_root_copy_) {
      root_copies_.push_back({ctx.event.time_ns, ctx.event.time_ns + ctx.blocked_ns, copy.bytes()});
      if (copy.bytes() > largest_root_copy_) {
        largest_root_copy_ = copy.bytes();
        std::erase_if(root_copies_, [&](const Copy& c) { return c.bytes * 2 < largest_root_copy_; });
      }
    }
  }
  // The main loop between two batch-sized H2D copies of the root's main
  // thread is getting the next batch (making it with num_workers=0, waiting
  // for a worker otherwise): GPU idle gaps there are input-bound time.
  if (static_cast<int>(process.pid()) == root_pid_ && tid == process.pid() &&
      copy.direction() == trace::H2D && copy.bytes() >= kMinBatchBytes) {
    PerProcess& state = Process(process.index());
    if (state.device && state.last_batch_end_ns && state.last_batch_end_ns < ctx.event.time_ns)
      state.device->OnLoaderWait({state.last_batch_end_ns, ctx.event.time_ns});
    state.last_batch_end_ns = ctx.event.time_ns + ctx.blocked_ns;
  }
  // Copies that ran pinned because pinscope pinned their host side.
  if (copy.pin() == trace::PIN_REGISTERED || copy.pin() == trace::PIN_CACHED) {
    const bool h2d = copy.direction() == trace::H2D;
    ++pins_.pinned_copies;
    (copy.pin() == trace::PIN_REGISTERED ? pins_.pinned_registered : pins_.pinned_cached)++;
    pins_.pinned_copy_bytes += copy.bytes();
    pins_.pinned_copy_blocked_ns += ctx.blocked_ns;
    pins_.pinned_copy_at_pageable_ns +=
        AtGbps(copy.bytes(), calibration_.PageableGbps(h2d, copy.bytes()));
    pins_.pinned_copy_at_pinned_ns += AtGbps(copy.bytes(), calibration_.PinnedGbps(h2d, copy.bytes()));
  } else if (copy.pin() == trace::PIN_SKIPPED_BUDGET) {
    ++pins_.skipped_budget;
  }
  // Device join: every copy call is a host call of its process.
  device::HostCall call;
  call.type = device::HostCall::Type::kCopy;
  call.call_id = copy.call_id();
  call.start_ns = ctx.event.time_ns;
  call.end_ns = ctx.event.time_ns + ctx.blocked_ns;
  call.direction = copy.direction();
  call.src_kind = copy.src_kind();
  call.dst_kind = copy.dst_kind();
  call.bytes = copy.bytes();
  call.tid = tid;
  PerProcess& state = Process(process.index());
  if (state.device) state.device->OnHostCall(call);
}

void InputAnalysis::OnSync(const Event& event, const trace::SyncEvent& sync) {
  PerProcess& state = Process(event.process.index());
  if (!state.device) return;
  device::HostCall call;
  call.type = device::HostCall::Type::kSync;
  call.call_id = sync.call_id();
  call.start_ns = event.time_ns;
  call.end_ns = std::max(sync.end_ns(), event.time_ns);
  call.tid = event.packet.tid();
  state.device->OnHostCall(call);
}

void InputAnalysis::OnPin(const Event& event, const trace::PinEvent& pin) {
  ++pins_.events;
  PerProcess& state = Process(event.process.index());
  state.peak_pinned = std::max(state.peak_pinned, pin.pinned_bytes());
  switch (pin.op()) {
    case trace::REGISTER: {
      ++pins_.registers;
      pins_.register_bytes += pin.size();
      pins_.register_ns += pin.duration_ns();
      const HostBuffer buffer = event.process.ResolveHost(pin.address());
      if (buffer.kind == HostBuffer::Kind::kShm) {
        ++pins_.shm_registers;
        pins_.shm_bytes += pin.size();
      } else if (buffer.kind == HostBuffer::Kind::kAlloc) {
        ++pins_.alloc_registers;
        pins_.alloc_bytes += pin.size();
      } else {
        ++pins_.other_registers;
        pins_.other_bytes += pin.size();
      }
      break;
    }
    case trace::UNREGISTER:
      ++pins_.unregisters;
      ++pins_.unpin_reasons[pin.reason().empty() ? "unknown" : pin.reason()];
      if (pin.reason() == "fork") ++fork_unpins_;
      break;
    case trace::REGISTER_FAILED: ++pins_.register_failed; break;
    case trace::BUDGET_FULL: ++pins_.budget_full; break;
    case trace::RECYCLE: ++pins_.recycles; break;
    case trace::REUSE: ++pins_.reuses; break;
    default: break;
  }
}

void InputAnalysis::OnDevice(const Event& event, const trace::DeviceActivity& a) {
  PerProcess& state = Process(event.process.index());
  // Created at the first record: host calls before it are not needed for
  // the join of later records except their own, which arrive first; the
  // copies recorded before CUPTI started have no device records anyway.
  if (!state.device) state.device = std::make_unique<device::ProcessDeviceAnalysis>();
  ++state.records;
  device::DeviceRecord record;
  record.kind = a.kind();
  record.start_ns = a.start_ns();
  record.end_ns = a.end_ns();
  record.bytes = a.bytes();
  record.direction = a.direction();
  record.src_kind = a.src_kind();
  record.dst_kind = a.dst_kind();
  record.device_id = a.device_id();
  record.stream_id = a.stream_id();
  record.correlation_id = a.correlation_id();
  record.name_id = a.name_id();
  state.device->OnDevice(record);
  if (event.time_ns > state.last_advance_ns + device::kSec) {
    state.device->Advance(event.time_ns);
    state.last_advance_ns = event.time_ns;
  }
}

void InputAnalysis::OnCorrelation(const Event& event, const trace::ExternalCorrelation& c) {
  PerProcess& state = Process(event.process.index());
  if (!state.device) state.device = std::make_unique<device::ProcessDeviceAnalysis>();
  state.device->OnCorrelation(c.correlation_id(), c.call_id(), event.time_ns);
}

void InputAnalysis::OnRecording(const Event& event, const trace::DeviceRecording& r) {
  PerProcess& state = Process(event.process.index());
  // Kernels off before the first device record: the blind time starts here.
  if (!state.device) state.device = std::make_unique<device::ProcessDeviceAnalysis>();
  device::RecordingSwitch change;
  change.time_ns = event.time_ns;
  change.kernels = r.kernels();
  change.reason = r.reason();
  change.kernel_rate = r.kernel_rate();
  change.planned_ns = r.planned_ns();
  state.device->OnRecording(change);
}

void InputAnalysis::OnProcessEnd(const ProcessState& process) {
  auto it = per_process_.find(process.index());
  if (it == per_process_.end()) return;
  PerProcess& state = it->second;
  pins_.peak_pinned_bytes += state.peak_pinned;
  if (state.device && state.records > 0) {
    ProcessDevice out;
    out.process_index = process.index();
    out.pid = process.pid();
    out.records = state.records;
    out.result = state.device->Finish({process.start_ns(), process.end_ns()});
    devices_.push_back(std::move(out));
  }
  state.device.reset();
}

const device::DeviceBusy* InputAnalysis::MainDevice() const {
  const device::DeviceBusy* best = nullptr;
  for (const ProcessDevice& p : devices_) {
    for (const device::DeviceBusy& busy : p.result.devices) {
      if (best == nullptr || busy.busy_ns > best->busy_ns) best = &busy;
    }
  }
  return best;
}

void InputAnalysis::Finish(const RunInfo& run) {
  std::vector<Copy> batches;
  for (const Copy& c : root_copies_) {
    if (c.bytes * 2 >= largest_root_copy_) batches.push_back(c);
  }
  root_copies_.clear();
  root_copies_.shrink_to_fit();
  if (batches.size() < BatchLoop::kMinBatches) return;
  std::sort(batches.begin(), batches.end(),
            [](const Copy& a, const Copy& b) { return a.start_ns < b.start_ns; });
  loop_.found = true;
  loop_.batches = batches.size();
  std::vector<uint64_t> bytes, copies;
  for (size_t i = 0; i < batches.size(); ++i) {
    bytes.push_back(batches[i].bytes);
    copies.push_back(batches[i].end_ns - batches[i].start_ns);
    if (i + 1 < batches.size()) {
      loop_.intervals_ns.push_back(batches[i + 1].start_ns - batches[i].start_ns);
      loop_.copies_ns.push_back(batches[i].end_ns - batches[i].start_ns);
      loop_.total_copy_ns += batches[i].end_ns - batches[i].start_ns;
    }
  }
  loop_.batch_bytes = Median(bytes);
  loop_.median_copy_ns = Median(copies);
  loop_.median_interval_ns = Median(loop_.intervals_ns);
  loop_.total_interval_ns = batches.back().start_ns - batches.front().start_ns;
}

}  // namespace pinscope
