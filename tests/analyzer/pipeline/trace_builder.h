// Test helper: builds pinscope trace files with the generated protobuf
// classes, framed exactly as the shim frames them (0x0A, a padded 4-byte
// length varint, the TracePacket), plus a recording Analysis for replay tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "analyzer/replay/replay.h"
#include "trace.pb.h"

namespace pinscope::testing {

// Base-128 varint of `value`, padded with continuation bytes to at least
// `min_bytes` (the shim writes lengths as 4 bytes: 5 -> 85 80 80 00).
std::string EncodeVarint(uint64_t value, size_t min_bytes = 1);

// One framed packet: 0x0A, the length varint (padded to `length_bytes`),
// the serialized packet.
std::string FramePacket(const trace::TracePacket& packet, size_t length_bytes = 4);

inline constexpr uint64_t kMs = 1000000;  // ns per ms
inline constexpr uint64_t kMiBytes = 1024 * 1024;

// Builds one process file. Times are absolute CLOCK_MONOTONIC ns.
class TraceBuilder {
 public:
  TraceBuilder(uint32_t pid, const std::string& run_id, uint64_t start_ns,
               trace::ProcessOrigin origin = trace::ORIGIN_ROOT, uint32_t ppid = 1);

  // Header fields may be edited until Bytes()/Write().
  trace::ProcessHeader& header() { return header_; }
  uint32_t pid() const { return header_.pid(); }

  // Appends a packet; returns it for further edits. tid 0 means the pid.
  trace::TracePacket& Add(uint64_t time_ns, uint32_t tid = 0);

  trace::TracePacket& Copy(uint64_t time_ns, uint64_t blocked_ns, trace::Direction direction,
                           trace::MemoryKind host_kind, uint64_t bytes, uint64_t host_address,
                           uint32_t tid = 0, trace::CopyApi api = trace::MEMCPY_ASYNC);
  trace::TracePacket& Alloc(uint64_t time_ns, trace::AllocApi api, uint64_t address, uint64_t size,
                            uint32_t tid = 0);
  trace::TracePacket& Free(uint64_t time_ns, uint64_t address, uint32_t tid = 0);
  trace::TracePacket& Shm(uint64_t time_ns, trace::ShmOp op, const std::string& name, int32_t fd,
                          uint64_t size, uint64_t address, uint64_t inode, uint64_t offset = 0);
  trace::TracePacket& Notice(uint64_t time_ns, trace::Notice::Severity severity,
                             const std::string& code, const std::string& text);
  trace::TracePacket& Exit(uint64_t time_ns, trace::ProcessExit::How how = trace::ProcessExit::EXIT,
                           int32_t status = 0);
  trace::TracePacket& Thread(uint64_t time_ns, uint32_t tid, const std::string& name);

  // Orders the packets by timestamp (stable), as a shim writing one thread
  // would; tests of out-of-order files skip this.
  void SortByTime();

  // The file's bytes: the header packet, then the packets in order.
  std::string Bytes(size_t length_bytes = 4) const;
  // Byte offset of packet `i` in Bytes() (0 = the header).
  size_t PacketOffset(size_t i, size_t length_bytes = 4) const;
  size_t packet_count() const { return packets_.size() + 1; }
  // Writes <dir>/<pid>.pstrace (or `file_name`); returns the path.
  std::string Write(const std::string& dir, const std::string& file_name = "") const;

 private:
  trace::ProcessHeader header_;
  uint64_t start_ns_;
  std::vector<trace::TracePacket> packets_;
  uint64_t call_id_ = 0;
};

// Host facts of the H200 test machine (16 cores, 125 GiB, /dev/shm given).
void SetHostFacts(trace::ProcessHeader* header, uint64_t shm_capacity, uint64_t shm_free);

// A fresh empty folder under the test temp dir.
std::string MakeTempDir(const std::string& name);
void WriteFile(const std::string& path, const std::string& bytes);
std::string ReadFile(const std::string& path);

// Records what the engine hands to consumers, as lines of text.
class RecordingAnalysis : public Analysis {
 public:
  void OnProcess(const ProcessState& process) override;
  void OnCopy(const CopyContext& copy) override;
  void OnAlloc(const Event& event, const LiveAlloc& alloc) override;
  void OnFree(const Event& event, const LiveAlloc& freed, bool by_realloc) override;
  void OnShm(const ShmContext& shm) override;
  void OnNotice(const Event& event, const trace::Notice& notice) override;
  void OnExit(const Event& event, const trace::ProcessExit& exit) override;
  void OnProcessEnd(const ProcessState& process) override;
  void Finish(const RunInfo& run) override;

  std::vector<std::string> lines;
  // Per copy: "<pid> <dir> <bytes> -> <buffer>".
  std::vector<std::string> copies;
  bool finished = false;
};

}  // namespace pinscope::testing
