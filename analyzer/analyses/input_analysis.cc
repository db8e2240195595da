// Input-pipeline facts for the rules (input_analysis.h). Batch copies are
// detected after the replay from the root main thread's H2D copies; device
// records are fed to one device::ProcessDeviceAnalysis per process, which
// joins them to the intercepted calls and measures busy time and gaps.
#include "analyzer/analyses/input_analysis.h"

#include <algorithm>

#include "analyzer/analyses/callsite_analysis.h"
#include "analyzer/analyses/device_from_trace.h"
#include "analyzer/common/trace_names.h"

namespace pinscope {

namespace {

// Main-thread copies and syncs SyncWaits holds at once, not yet final (56
// bytes each): those of the device join's horizon (60 s) with CUPTI, one per
// thread without it. A call past it is counted in dropped_calls.
constexpr uint64_t kMaxWaitCalls = 1 << 21;
// A sync without a stack is named by the copy just before it on its thread
// (`.item()`, `.cpu()`: cudaMemcpyAsync then cudaStreamSynchronize) when
// that copy returned this recently.
constexpr uint64_t kSyncAfterCopyNs = 1000000;  // 1 ms

uint64_t AtGbps(uint64_t bytes, double gbps) {
  return gbps <= 0 ? 0 : static_cast<uint64_t>(static_cast<double>(bytes) / gbps);
}

}  // namespace

InputAnalysis::InputAnalysis(const Calibration& calibration, device::JoinMode join)
    : calibration_(calibration), gbps_(calibration), join_(join) {}
InputAnalysis::~InputAnalysis() = default;

std::unique_ptr<device::ProcessDeviceAnalysis> InputAnalysis::NewDevice() const {
  return std::make_unique<device::ProcessDeviceAnalysis>(device::BusyOptions(), 60 * device::kSec,
                                                         join_);
}

// Copies and syncs come from one process for long stretches (map nodes do
// not move).
InputAnalysis::PerProcess& InputAnalysis::Process(int index) {
  if (last_process_ == nullptr || last_process_index_ != index) {
    last_process_ = &per_process_[index];
    last_process_index_ = index;
  }
  return *last_process_;
}

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
  PerProcess& state = Process(process.index());
  // The main thread's copies get their device time from the device
  // analysis's join (SyncWaits, JoinDevice).
  if (state.device) {
    if (tid == process.pid()) state.device->KeepJoinedCopies();
    AdvanceDevice(state, ctx.event.time_ns);
  }
  if (static_cast<int>(process.pid()) == root_pid_ && tid == process.pid() &&
      copy.direction() == trace::H2D && ctx.blocked_ns > 0) {
    // Only copies that may still be a batch: at least half the largest yet.
    if (copy.bytes() * 2 >= root_copies_.largest()) {
      const bool pinned = copy.src_kind() == trace::PINNED && copy.pin() == trace::PIN_BY_PROGRAM;
      uint64_t base = 0;
      if (ctx.buffer.kind == HostBuffer::Kind::kAlloc) base = ctx.buffer.alloc->address;
      if (ctx.buffer.kind == HostBuffer::Kind::kShm) base = ctx.buffer.mapping->base_address;
      // A registration made ahead, or a reuse, is consumed by the buffer's next copy.
      const bool ahead = base != 0 && root_ahead_.erase(base) > 0;
      const bool reused = base != 0 && root_reused_.erase(base) > 0;
      const bool fresh_mmap = ctx.buffer.kind == HostBuffer::Kind::kAlloc && !reused &&
                              ctx.buffer.alloc->size >= BatchLoop::kGlibcMmapMax &&
                              ctx.buffer.alloc->time_ns >= last_root_copy_ns_;
      last_root_copy_ns_ = ctx.event.time_ns;
      root_copies_.Add({ctx.event.time_ns, ctx.event.time_ns + ctx.blocked_ns, copy.bytes(), pinned,
                        static_cast<uint8_t>(copy.pin()), ahead, reused, fresh_mmap,
                        ctx.buffer.kind == HostBuffer::Kind::kShm && ctx.buffer.mapping->pool});
    }
  }
  // The main loop between two batch-sized H2D copies of the root's main
  // thread is getting the next batch (making it with num_workers=0, waiting
  // for a worker otherwise): GPU idle gaps there are input-bound time.
  if (static_cast<int>(process.pid()) == root_pid_ && tid == process.pid() &&
      copy.direction() == trace::H2D && copy.bytes() >= kMinBatchBytes) {
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
    pins_.pinned_copy_at_pageable_ns += AtGbps(copy.bytes(), gbps_.Pageable(h2d, copy.bytes()));
    pins_.pinned_copy_at_pinned_ns += AtGbps(copy.bytes(), gbps_.Pinned(h2d, copy.bytes()));
  } else if (copy.pin() == trace::PIN_SKIPPED_BUDGET) {
    ++pins_.skipped_budget;
  }
  // Device join: every copy call is a host call of its process.
  const device::HostCall call = device::CopyCallOf(ctx);
  if (state.device) state.device->OnHostCall(call);

  // Main threads' H2D/D2H copies for SyncWaits, with their transfer time at
  // the calibrated bandwidth until a device record says better.
  const bool h2d = copy.direction() == trace::H2D;
  if (tid == process.pid() && (h2d || copy.direction() == trace::D2H) && copy.result() == 0) {
    if (wait_calls_ >= kMaxWaitCalls) {
      ++sync_.dropped_calls;
      return;
    }
    WaitThread& thread = WaitThreadOf(state, process);
    FoldFinal(thread, false);
    const uint32_t host_kind = h2d ? copy.src_kind() : copy.dst_kind();
    const double gbps = host_kind == trace::PAGEABLE ? gbps_.Pageable(h2d, copy.bytes())
                                                     : gbps_.Pinned(h2d, copy.bytes());
    WaitCall wait{};
    wait.start_ns = call.start_ns;
    wait.end_ns = call.end_ns;
    wait.call_id = copy.call_id();
    wait.transfer_ns = AtGbps(copy.bytes(), gbps);
    wait.bytes = copy.bytes();
    wait.site = WaitSite(process, copy.stack_id());
    wait.kind = h2d ? 1 : 2;
    wait.pageable = host_kind == trace::PAGEABLE;
    wait.joinable = state.device != nullptr;
    if (wait.joinable)
      thread.by_call.try_emplace(copy.call_id(), thread.front_seq + thread.calls.size());
    AddWaitCall(thread, wait);
    JoinDevice(state);
  }
}

void InputAnalysis::AddWaitCall(WaitThread& thread, const WaitCall& call) {
  thread.last = call;
  thread.has_last = true;
  if (!call.joinable && thread.calls.empty()) {
    Fold(thread, call);  // final already, and nothing before it waits
    return;
  }
  thread.calls.push_back(call);
  ++wait_calls_;
  peak_wait_calls_ = std::max(peak_wait_calls_, wait_calls_);
}

// A call is final when no device record can join it any more: it never went
// to a device analysis, or the calls of its call id all ended before the
// cut of the device analysis's last Advance (which then dropped the id).
// Calls fold in order, so the front waits for the calls before it.
void InputAnalysis::FoldFinal(WaitThread& thread, bool all) {
  std::deque<WaitCall>& calls = thread.calls;
  while (!calls.empty()) {
    const WaitCall& front = calls.front();
    size_t group = 1;
    if (!all && front.joinable) {
      uint64_t end = front.end_ns;
      while (group < calls.size() && calls[group].joinable &&
             calls[group].call_id == front.call_id) {
        end = std::max(end, calls[group].end_ns);
        ++group;
      }
      // The last call of the group may have more of its id to come.
      if (end >= thread.cut_ns || group == calls.size()) return;
    }
    for (size_t i = 0; i < group; ++i) {
      const WaitCall& c = calls.front();
      auto it = thread.by_call.find(c.call_id);
      if (it != thread.by_call.end() && it->second == thread.front_seq) thread.by_call.erase(it);
      Fold(thread, c);
      calls.pop_front();
      ++thread.front_seq;
      --wait_calls_;
    }
  }
}

// One final call: its wait, and the saving of the waiting call before it
// (up to this one's start, when this one waits too).
void InputAnalysis::Fold(WaitThread& thread, const WaitCall& c) {
  SyncThread& out = thread.out;
  if (out.calls == 0) thread.first_start_ns = c.start_ns;
  ++out.calls;
  thread.last_end_ns = std::max(thread.last_end_ns, c.end_ns);
  const uint64_t blocked = c.end_ns - c.start_ns;
  const uint64_t own = (c.kind == 0 ? 0 : c.transfer_ns) + SyncWaits::kCallOverheadNs;
  uint64_t wait = blocked > own ? blocked - own : 0;
  if (c.kind != 0 && c.pageable && !c.joined) wait = 0;
  if (c.kind != 0) (c.joined ? out.copies_joined : out.copies_calibrated)++;
  if (wait == 0) return;
  if (thread.has_waiting) {
    const WaitCall& before = thread.waiting;
    const uint64_t host = c.start_ns > before.end_ns ? c.start_ns - before.end_ns : 0;
    FoldWaiting(thread, std::min(thread.waiting_ns, host));
  }
  thread.has_waiting = true;
  thread.waiting = c;
  thread.waiting_ns = wait;
}

void InputAnalysis::FoldWaiting(WaitThread& thread, uint64_t saving) {
  const WaitCall& c = thread.waiting;
  const uint64_t wait = thread.waiting_ns;
  SyncThread& out = thread.out;
  ++out.waiting_calls;
  out.wait_ns += wait;
  (c.kind == 0 ? out.sync_wait_ns : out.copy_wait_ns) += wait;
  out.saving_ns += saving;
  const int32_t index = c.site <= -2 ? -2 - c.site : c.site;
  SyncSite& site = thread.sites[index];
  if (index >= 0 && site.site.empty()) site.site = wait_sites_[index];
  if (c.site <= -2) site.via_copy = true;
  ++site.calls;
  site.wait_ns += wait;
  site.saving_ns += saving;
  if (c.kind == 0) {
    ++site.syncs;
    const std::string api = SyncApiName(static_cast<trace::SyncApi>(c.api));
    if (std::find(site.apis.begin(), site.apis.end(), api) == site.apis.end())
      site.apis.push_back(api);
  } else {
    ++site.copies;
    ++(c.kind == 1 ? site.h2d : site.d2h);
    site.copy_bytes += c.bytes;
  }
  thread.has_waiting = false;
}

InputAnalysis::WaitThread& InputAnalysis::WaitThreadOf(PerProcess& state,
                                                       const ProcessState& process) {
  if (state.wait_thread < 0) {
    state.wait_thread = static_cast<int>(wait_threads_.size());
    WaitThread thread;
    thread.process_index = process.index();
    thread.pid = thread.tid = process.pid();
    wait_threads_.push_back(std::move(thread));
  }
  return wait_threads_[state.wait_thread];
}

int32_t InputAnalysis::WaitSite(const ProcessState& process, uint64_t stack_id) {
  if (stack_id == 0) return -1;
  std::string site = InnermostPythonFrame(process, stack_id);
  if (site.empty()) site = InnermostNativeFrame(process, stack_id);
  if (site.empty()) return -1;
  auto [it, inserted] =
      wait_site_index_.try_emplace(site, static_cast<int32_t>(wait_sites_.size()));
  if (inserted) wait_sites_.push_back(site);
  return it->second;
}

// Device times of the main thread's copies: the sum of the memcpy records
// joined to each (a batch copy's records go to its CopyEvents in order).
void InputAnalysis::JoinDevice(PerProcess& state) {
  if (!state.device) return;
  std::vector<device::Joined> copies = state.device->TakeJoinedCopies();
  if (state.wait_thread < 0) return;
  WaitThread& thread = wait_threads_[state.wait_thread];
  for (const device::Joined& joined : copies) {
    auto it = thread.by_call.find(joined.host->call_id);
    if (it == thread.by_call.end() || it->second < thread.front_seq) continue;
    const size_t from = it->second - thread.front_seq;
    for (size_t i = from; i < thread.calls.size() && i < from + 64u; ++i) {
      WaitCall& call = thread.calls[i];
      if (call.call_id != joined.host->call_id || call.start_ns != joined.host->start_ns) continue;
      if (!call.joined) call.transfer_ns = 0;
      call.joined = true;
      call.transfer_ns += joined.device.duration_ns();
      break;
    }
  }
}

void InputAnalysis::OnSync(const Event& event, const trace::SyncEvent& sync) {
  PerProcess& state = Process(event.process.index());
  const ProcessState& process = event.process;
  if (event.packet.tid() == process.pid() && sync.result() == 0) {
    if (wait_calls_ >= kMaxWaitCalls) {
      ++sync_.dropped_calls;
    } else {
      WaitThread& thread = WaitThreadOf(state, process);
      FoldFinal(thread, false);
      WaitCall wait{};
      wait.start_ns = event.time_ns;
      wait.end_ns = std::max(sync.end_ns(), event.time_ns);
      wait.call_id = sync.call_id();
      wait.kind = 0;
      wait.api = static_cast<uint8_t>(sync.api());
      wait.site = WaitSite(process, sync.stack_id());
      if (wait.site < 0 && thread.has_last) {
        // Named by the copy just before it: encoded as -2 - site.
        const WaitCall& before = thread.last;
        if (before.kind != 0 && before.site >= 0 && before.end_ns <= wait.start_ns &&
            wait.start_ns - before.end_ns <= kSyncAfterCopyNs) {
          wait.site = -2 - before.site;
        }
      }
      AddWaitCall(thread, wait);
    }
  }
  if (!state.device) return;
  AdvanceDevice(state, event.time_ns);
  const device::HostCall call = device::SyncCallOf(event, sync);
  state.device->OnHostCall(call);
}

void InputAnalysis::OnShm(const ShmContext& ctx) {
  const ProcessState& process = ctx.event.process;
  const uint32_t tid = ctx.event.packet.tid();
  if (ctx.shm.op() == trace::SHM_MAP && ctx.shm.pool() &&
      static_cast<int>(process.pid()) == root_pid_)
    ++loop_.pool_maps;
  if (ctx.shm.op() == trace::SHM_MAP && !ctx.implicit &&
      static_cast<int>(process.pid()) == root_pid_ && tid != 0 && tid != process.pid()) {
    ++root_shm_maps_[tid];
  }
}

void InputAnalysis::OnPin(const Event& event, const trace::PinEvent& pin) {
  ++pins_.events;
  PerProcess& state = Process(event.process.index());
  state.peak_pinned = std::max(state.peak_pinned, pin.pinned_bytes());
  if (static_cast<int>(event.process.pid()) == root_pid_) {
    if (pin.op() == trace::REGISTER && pin.reason() == "shm_ahead")
      root_ahead_.insert(pin.address());
    if (pin.op() == trace::REUSE) root_reused_.insert(pin.address());
    if (pin.op() == trace::UNREGISTER || pin.op() == trace::RECYCLE) {
      root_ahead_.erase(pin.address());
      root_reused_.erase(pin.address());
    }
  }
  switch (pin.op()) {
    case trace::REGISTER: {
      ++pins_.registers;
      pins_.register_bytes += pin.size();
      pins_.register_ns += pin.duration_ns();
      if (pin.reason() == "shm_ahead") {
        ++pins_.ahead_registers;
        pins_.ahead_register_ns += pin.duration_ns();
      }
      const HostBuffer buffer = event.process.ResolveHost(pin.address());
      if (pin.reason() == "pool") {
        ++pins_.pool_registers;
        pins_.pool_bytes += pin.size();
      } else if (buffer.kind == HostBuffer::Kind::kShm) {
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
      if (pin.result() != 0) {
        // CUDA refused: the block stays registered (docs/pinning.md).
        ++pins_.failed_unregisters;
        ++pins_.failed_unregister_errors[pin.result()];
        state.stuck_pins[pin.address()] = pin.size();
        break;
      }
      state.stuck_pins.erase(pin.address());
      ++pins_.unregisters;
      ++pins_.unpin_reasons[pin.reason().empty() ? "unknown" : pin.reason()];
      if (pin.reason() == "fork") ++fork_unpins_;
      break;
    case trace::REGISTER_FAILED:
      ++pins_.register_failed;
      break;
    case trace::BUDGET_FULL:
      ++pins_.budget_full;
      break;
    case trace::RECYCLE:
      ++pins_.recycles;
      break;
    case trace::REUSE:
      ++pins_.reuses;
      break;
    default:
      break;
  }
}

void InputAnalysis::OnDevice(const Event& event, const trace::DeviceActivity& a) {
  PerProcess& state = Process(event.process.index());
  // Created at the first record: host calls before it are not needed for
  // the join of later records except their own, which arrive first; the
  // copies recorded before CUPTI started have no device records anyway.
  if (!state.device) state.device = NewDevice();
  ++state.records;
  const device::DeviceRecord record = device::DeviceRecordOf(a);
  state.device->OnDevice(record);
  AdvanceDevice(state, event.time_ns);
  JoinDevice(state);
}

void InputAnalysis::OnCorrelation(const Event& event, const trace::ExternalCorrelation& c) {
  PerProcess& state = Process(event.process.index());
  if (!state.device) state.device = NewDevice();
  state.device->OnCorrelation(c.correlation_id(), c.call_id(), event.time_ns);
  JoinDevice(state);
}

// The device analysis starts when CUPTI does (the "cupti_started" notice,
// written before the first copy it covers), not at the first device record,
// which CUPTI hands over a flush period later: the host calls and DataLoader
// waits in between are what the first gaps are attributed to. Processes
// without CUPTI get none, so their host calls cost nothing here.
void InputAnalysis::OnNotice(const Event& event, const trace::Notice& notice) {
  if (notice.code() != "cupti_started") return;
  PerProcess& state = Process(event.process.index());
  if (!state.device) state.device = NewDevice();
  if (device::NoticeSaysNoCorrelations(notice.text())) state.device->NoCorrelations();
}

// Lets the device analysis give up what is older than its horizons also
// while no device record arrives (CUPTI stepped aside), so memory stays
// bounded by time, not by the run's length.
void InputAnalysis::AdvanceDevice(PerProcess& state, uint64_t now_ns) {
  if (now_ns <= state.last_advance_ns + device::kSec) return;
  state.device->Advance(now_ns);
  state.last_advance_ns = now_ns;
  // What the join gave up on is final for SyncWaits.
  const uint64_t horizon = state.device->join_horizon_ns();
  if (state.wait_thread >= 0 && now_ns >= horizon) {
    WaitThread& thread = wait_threads_[state.wait_thread];
    thread.cut_ns = std::max(thread.cut_ns, now_ns - horizon);
    FoldFinal(thread, false);
  }
}

void InputAnalysis::OnRecording(const Event& event, const trace::DeviceRecording& r) {
  PerProcess& state = Process(event.process.index());
  // Kernels off before the first device record: the blind time starts here.
  if (!state.device) state.device = NewDevice();
  device::RecordingSwitch change;
  change.time_ns = event.time_ns;
  change.kernels = r.kernels();
  change.reason = r.reason();
  change.kernel_rate = r.kernel_rate();
  change.planned_ns = r.planned_ns();
  change.detached = r.detached();
  state.device->OnRecording(change);
  if (r.no_correlations()) state.device->NoCorrelations();
}

void InputAnalysis::OnUtilization(const Event& event, const trace::GpuUtilization& u) {
  if (u.cuda_device() < 0) return;  // a GPU this process does not see as a CUDA device
  PerProcess& state = Process(event.process.index());
  if (!state.device) state.device = NewDevice();
  const int n = std::min(u.sample_ns_size(), u.percent_size());
  for (int i = 0; i < n; ++i)
    state.device->OnUtilization(static_cast<uint32_t>(u.cuda_device()), u.sample_ns(i),
                                u.percent(i));
}

void InputAnalysis::OnProcessEnd(const ProcessState& process) {
  auto it = per_process_.find(process.index());
  if (it == per_process_.end()) return;
  PerProcess& state = it->second;
  pins_.peak_pinned_bytes += state.peak_pinned;
  for (const auto& [address, size] : state.stuck_pins) pins_.stayed_pinned_bytes += size;
  if (state.device && state.records > 0) {
    ProcessDevice out;
    out.process_index = process.index();
    out.pid = process.pid();
    out.records = state.records;
    out.result = state.device->Finish({process.start_ns(), process.end_ns()});
    JoinDevice(state);  // the joins the end of the stream resolved
    devices_.push_back(std::move(out));
  }
  state.device.reset();
  if (state.wait_thread >= 0) FoldFinal(wait_threads_[state.wait_thread], true);
}

const device::DeviceBusy* InputAnalysis::MainDevice(std::optional<int> process_index) const {
  const device::DeviceBusy* best = nullptr;
  for (const ProcessDevice& p : devices_) {
    if (process_index && p.process_index != *process_index) continue;
    for (const device::DeviceBusy& busy : p.result.devices) {
      if (best == nullptr || busy.busy_ns > best->busy_ns) best = &busy;
    }
  }
  return best;
}

void InputAnalysis::FinishSyncWaits() {
  for (WaitThread& thread : wait_threads_) {
    FoldFinal(thread, true);
    if (thread.has_waiting) FoldWaiting(thread, 0);  // no waiting call after it
    SyncThread& out = thread.out;
    if (out.calls == 0) continue;
    out.process_index = thread.process_index;
    out.pid = thread.pid;
    out.tid = thread.tid;
    out.span_ns = thread.last_end_ns - thread.first_start_ns;
    out.host_ns = out.span_ns - std::min(out.span_ns, out.wait_ns);
    for (auto& [index, site] : thread.sites) out.sites.push_back(std::move(site));
    std::stable_sort(out.sites.begin(), out.sites.end(), [](const SyncSite& a, const SyncSite& b) {
      return a.saving_ns != b.saving_ns ? a.saving_ns > b.saving_ns : a.wait_ns > b.wait_ns;
    });
    sync_.threads.push_back(std::move(out));
  }
  wait_threads_.clear();
  std::stable_sort(
      sync_.threads.begin(), sync_.threads.end(),
      [](const SyncThread& a, const SyncThread& b) { return a.saving_ns > b.saving_ns; });
}

void InputAnalysis::Finish(const RunInfo& run) {
  FinishSyncWaits();
  for (const auto& [tid, maps] : root_shm_maps_) {
    if (maps > pin_thread_.shm_maps) pin_thread_ = {tid, maps};
  }
  if (!root_copies_.Finish(&loop_)) return;
  loop_.host_copy_gbps = calibration_.HostCopyGbps(loop_.batch_bytes);
  loop_.pin_cost_ns = AtGbps(loop_.batch_bytes, loop_.host_copy_gbps);
  if (loop_.fresh_mmap_batches > 0) {
    loop_.first_touch_gbps = calibration_.FirstTouchGbps(loop_.batch_bytes);
    if (loop_.first_touch_gbps <= 0)
      loop_.first_touch_gbps = DefaultCalibration().FirstTouchGbps(loop_.batch_bytes);
    loop_.fresh_fault_ns = AtGbps(loop_.batch_bytes, loop_.first_touch_gbps);
  }
}

}  // namespace pinscope
