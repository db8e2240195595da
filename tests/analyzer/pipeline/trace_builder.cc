// Test helper implementation: protobuf-built packets in the shim's framing,
// temp folders, and a consumer that logs the replay as text lines.
#include "trace_builder.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "analyzer/common/trace_names.h"

namespace pinscope::testing {

std::string EncodeVarint(uint64_t value, size_t min_bytes) {
  std::string out;
  do {
    uint8_t byte = value & 0x7F;
    value >>= 7;
    if (value != 0 || out.size() + 1 < min_bytes) byte |= 0x80;
    out.push_back(static_cast<char>(byte));
  } while (value != 0);
  while (out.size() < min_bytes) {
    out.push_back(static_cast<char>(out.size() + 1 < min_bytes ? 0x80 : 0x00));
  }
  return out;
}

std::string FramePacket(const trace::TracePacket& packet, size_t length_bytes) {
  const std::string body = packet.SerializeAsString();
  return std::string(1, '\x0A') + EncodeVarint(body.size(), length_bytes) + body;
}

TraceBuilder::TraceBuilder(uint32_t pid, const std::string& run_id, uint64_t start_ns,
                           trace::ProcessOrigin origin, uint32_t ppid)
    : start_ns_(start_ns) {
  header_.set_format_version(1);
  header_.set_run_id(run_id);
  header_.set_pid(pid);
  header_.set_ppid(ppid);
  header_.set_origin(origin);
  if (origin == trace::ORIGIN_FORK) header_.set_parent_pid(ppid);
  header_.add_cmdline("python");
  header_.add_cmdline("train.py");
  header_.set_exe("/usr/bin/python3.12");
  header_.set_hostname("h200-test");
  header_.set_start_wall_ns(1795946400ull * 1000000000ull + (start_ns % 1000000000ull));
  header_.set_start_mono_ns(start_ns);
  header_.set_shim_version("0.1.0");
}

trace::TracePacket& TraceBuilder::Add(uint64_t time_ns, uint32_t tid) {
  packets_.emplace_back();
  trace::TracePacket& packet = packets_.back();
  packet.set_timestamp_ns(time_ns);
  packet.set_tid(tid == 0 ? header_.pid() : tid);
  return packet;
}

trace::TracePacket& TraceBuilder::Copy(uint64_t time_ns, uint64_t blocked_ns,
                                       trace::Direction direction, trace::MemoryKind host_kind,
                                       uint64_t bytes, uint64_t host_address, uint32_t tid,
                                       trace::CopyApi api) {
  trace::TracePacket& packet = Add(time_ns, tid);
  trace::CopyEvent* copy = packet.mutable_copy();
  copy->set_api(api);
  copy->set_direction(direction);
  copy->set_requested_kind(direction == trace::H2D ? 1 : direction == trace::D2H ? 2 : 3);
  copy->set_bytes(bytes);
  const uint64_t device_address = 0x7e0000000000ull + bytes;
  if (direction == trace::H2D || direction == trace::H2H) {
    copy->set_src_kind(host_kind);
    copy->set_dst_kind(direction == trace::H2H ? trace::PAGEABLE : trace::DEVICE);
    copy->set_src_address(host_address);
    copy->set_dst_address(device_address);
    copy->set_src_device(-1);
    copy->set_dst_device(0);
  } else if (direction == trace::D2H) {
    copy->set_src_kind(trace::DEVICE);
    copy->set_dst_kind(host_kind);
    copy->set_src_address(device_address);
    copy->set_dst_address(host_address);
    copy->set_src_device(0);
    copy->set_dst_device(-1);
  } else {
    copy->set_src_kind(trace::DEVICE);
    copy->set_dst_kind(trace::DEVICE);
    copy->set_src_address(device_address);
    copy->set_dst_address(device_address + bytes);
  }
  copy->set_end_ns(time_ns + blocked_ns);
  copy->set_call_id(++call_id_);
  return packet;
}

trace::TracePacket& TraceBuilder::Alloc(uint64_t time_ns, trace::AllocApi api, uint64_t address,
                                        uint64_t size, uint32_t tid) {
  trace::TracePacket& packet = Add(time_ns, tid);
  trace::HostAlloc* alloc = packet.mutable_alloc();
  alloc->set_api(api);
  alloc->set_address(address);
  alloc->set_size(size);
  if (api == trace::POSIX_MEMALIGN) alloc->set_alignment(64);
  return packet;
}

trace::TracePacket& TraceBuilder::Free(uint64_t time_ns, uint64_t address, uint32_t tid) {
  trace::TracePacket& packet = Add(time_ns, tid);
  packet.mutable_free()->set_address(address);
  return packet;
}

trace::TracePacket& TraceBuilder::Shm(uint64_t time_ns, trace::ShmOp op, const std::string& name,
                                      int32_t fd, uint64_t size, uint64_t address, uint64_t inode,
                                      uint64_t offset) {
  trace::TracePacket& packet = Add(time_ns);
  trace::ShmEvent* shm = packet.mutable_shm();
  shm->set_op(op);
  shm->set_name(name);
  shm->set_fd(fd);
  shm->set_size(size);
  shm->set_offset(offset);
  shm->set_address(address);
  shm->set_device(inode == 0 ? 0 : 0x1a);
  shm->set_inode(inode);
  shm->set_end_ns(time_ns + 2000);
  return packet;
}

trace::TracePacket& TraceBuilder::Notice(uint64_t time_ns, trace::Notice::Severity severity,
                                         const std::string& code, const std::string& text) {
  trace::TracePacket& packet = Add(time_ns);
  packet.mutable_notice()->set_severity(severity);
  packet.mutable_notice()->set_code(code);
  packet.mutable_notice()->set_text(text);
  return packet;
}

trace::TracePacket& TraceBuilder::Exit(uint64_t time_ns, trace::ProcessExit::How how,
                                       int32_t status) {
  trace::TracePacket& packet = Add(time_ns);
  packet.mutable_exit()->set_how(how);
  packet.mutable_exit()->set_status(status);
  return packet;
}

trace::TracePacket& TraceBuilder::Thread(uint64_t time_ns, uint32_t tid, const std::string& name) {
  trace::TracePacket& packet = Add(time_ns, tid);
  packet.mutable_thread()->set_tid(tid);
  packet.mutable_thread()->set_name(name);
  return packet;
}

void TraceBuilder::SortByTime() {
  std::stable_sort(packets_.begin(), packets_.end(),
                   [](const trace::TracePacket& a, const trace::TracePacket& b) {
                     return a.timestamp_ns() < b.timestamp_ns();
                   });
}

std::string TraceBuilder::Bytes(size_t length_bytes) const {
  trace::TracePacket head;
  head.set_timestamp_ns(start_ns_);
  head.set_tid(header_.pid());
  *head.mutable_header() = header_;
  std::string bytes = FramePacket(head, length_bytes);
  for (const trace::TracePacket& packet : packets_) bytes += FramePacket(packet, length_bytes);
  return bytes;
}

size_t TraceBuilder::PacketOffset(size_t i, size_t length_bytes) const {
  trace::TracePacket head;
  head.set_timestamp_ns(start_ns_);
  head.set_tid(header_.pid());
  *head.mutable_header() = header_;
  size_t offset = 0;
  if (i == 0) return 0;
  offset += FramePacket(head, length_bytes).size();
  for (size_t k = 0; k + 1 < i; ++k) offset += FramePacket(packets_[k], length_bytes).size();
  return offset;
}

std::string TraceBuilder::Write(const std::string& dir, const std::string& file_name) const {
  const std::string path =
      dir + "/" + (file_name.empty() ? std::to_string(header_.pid()) + ".pstrace" : file_name);
  WriteFile(path, Bytes());
  return path;
}

void SetHostFacts(trace::ProcessHeader* header, uint64_t shm_capacity, uint64_t shm_free) {
  trace::HostFacts* host = header->mutable_host();
  host->set_logical_cores(16);
  host->set_physical_cores(16);
  host->set_affinity_cores(16);
  host->set_ram_bytes(125ull * 1024 * 1024 * 1024);
  host->set_shm_capacity_bytes(shm_capacity);
  host->set_shm_free_bytes(shm_free);
  host->add_gpu_names("NVIDIA H200");
  host->set_pcie_link_speed_gts_x10(320);
  host->set_pcie_link_width(16);
  host->set_kernel_release("6.18.0");
  host->set_libc_version("2.39");
}

std::string MakeTempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::filesystem::path dir = std::filesystem::path(base != nullptr ? base : "/tmp") /
                              ("pinscope_analyzer_" + std::to_string(getpid())) / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

// --- RecordingAnalysis

void RecordingAnalysis::OnProcess(const ProcessState& process) {
  lines.push_back("process " + std::to_string(process.pid()) + " parent " +
                  (process.parent() ? std::to_string(process.parent()->pid()) : "-"));
}

void RecordingAnalysis::OnCopy(const CopyContext& context) {
  std::string buffer = "none";
  if (context.buffer.kind == HostBuffer::Kind::kAlloc) {
    buffer = std::string("alloc ") + AllocApiName(context.buffer.alloc->api) + " " +
             std::to_string(context.buffer.alloc->size) + " +" +
             std::to_string(context.buffer.offset);
  } else if (context.buffer.kind == HostBuffer::Kind::kShm) {
    buffer =
        "shm " + context.buffer.segment->name + " " + std::to_string(context.buffer.segment->size) +
        " by " +
        (context.buffer.segment->creator ? std::to_string(context.buffer.segment->creator->pid())
                                         : std::string("?")) +
        " +" + std::to_string(context.buffer.offset);
  }
  const std::string line = std::to_string(context.event.process.pid()) + " " +
                           DirectionName(context.copy.direction()) + " " +
                           std::to_string(context.copy.bytes()) + " -> " + buffer;
  copies.push_back(line);
  lines.push_back("copy " + line + " @" + std::to_string(context.event.time_ns));
}

void RecordingAnalysis::OnAlloc(const Event& event, const LiveAlloc& alloc) {
  lines.push_back("alloc " + std::to_string(event.process.pid()) + " " +
                  std::to_string(alloc.size) + " @" + std::to_string(event.time_ns));
}

void RecordingAnalysis::OnFree(const Event& event, const LiveAlloc& freed, bool by_realloc) {
  lines.push_back("free " + std::to_string(event.process.pid()) + " " + std::to_string(freed.size) +
                  (by_realloc ? " realloc" : ""));
}

void RecordingAnalysis::OnShm(const ShmContext& context) {
  lines.push_back(
      "shm " + std::to_string(context.event.process.pid()) + " " + ShmOpName(context.shm.op()) +
      " " +
      (context.segment ? context.segment->name + "#" + std::to_string(context.segment->id)
                       : std::string("?")) +
      (context.implicit ? " implicit" : "") + " @" + std::to_string(context.event.time_ns));
}

void RecordingAnalysis::OnNotice(const Event& event, const trace::Notice& notice) {
  lines.push_back("notice " + std::to_string(event.process.pid()) + " " + notice.code());
}

void RecordingAnalysis::OnExit(const Event& event, const trace::ProcessExit& exit) {
  lines.push_back("exit " + std::to_string(event.process.pid()));
}

void RecordingAnalysis::OnProcessEnd(const ProcessState& process) {
  lines.push_back("end " + std::to_string(process.pid()) + " @" + std::to_string(process.end_ns()));
}

void RecordingAnalysis::Finish(const RunInfo& run) { finished = true; }

}  // namespace pinscope::testing
