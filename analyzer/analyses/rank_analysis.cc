// One rank's device and NCCL time; see rank_analysis.h.
#include "analyzer/analyses/rank_analysis.h"

#include <algorithm>
#include <cctype>

namespace pinscope {

bool RankAnalysis::IsNcclKernel(const std::string& name) {
  std::string lower(name.size(), '\0');
  std::transform(name.begin(), name.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return lower.find("nccl") != std::string::npos;
}

void RankAnalysis::OnProcess(const ProcessState& process) {
  // The root of the replay, as the pipeline analysis takes it.
  if (root_index_ < 0 && (process.origin() == trace::ORIGIN_ROOT || process.parent() == nullptr))
    root_index_ = process.index();
}

void RankAnalysis::OnCopy(const CopyContext& ctx) {
  const trace::CopyEvent& c = ctx.copy;
  int device = -1;
  if (c.direction() == trace::H2D) device = c.dst_device();
  if (c.direction() == trace::D2H) device = c.src_device();
  if (device >= 0) device_bytes_[device] += c.bytes();
}

void RankAnalysis::OnDevice(const Event& event, const trace::DeviceActivity& activity) {
  if (event.process.index() != root_index_ || activity.kind() != trace::ACT_KERNEL) return;
  const std::string* name = event.process.String(activity.name_id());
  if (name == nullptr || !IsNcclKernel(*name)) return;
  ++nccl_kernels_;
  if (nccl_.size() < kMaxKept && activity.end_ns() > activity.start_ns())
    nccl_.emplace_back(activity.start_ns(), activity.end_ns());
}

int RankAnalysis::device() const {
  int best = -1;
  uint64_t most = 0;
  for (const auto& [device, bytes] : device_bytes_) {
    if (bytes > most) best = device, most = bytes;
  }
  return best;
}

uint64_t RankAnalysis::NcclBusyIn(uint64_t start_ns, uint64_t end_ns) const {
  std::vector<std::pair<uint64_t, uint64_t>> in;
  for (auto [s, e] : nccl_) {
    s = std::max(s, start_ns);
    e = std::min(e, end_ns);
    if (e > s) in.emplace_back(s, e);
  }
  std::sort(in.begin(), in.end());
  uint64_t busy = 0, reach = 0;
  for (auto [s, e] : in) {  // the union: kernels on several streams overlap
    if (s < reach) s = reach;
    if (e > s) busy += e - s;
    reach = std::max(reach, e);
  }
  return busy;
}

}  // namespace pinscope
