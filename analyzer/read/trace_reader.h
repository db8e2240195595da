// Streaming reader of one pinscope trace file (a concatenation of Trace.packet
// fields, see proto/trace.proto), plain or compressed (zstd frames, read
// through TraceSource). Reads in fixed-size chunks so memory stays bounded by
// the chunk size plus the largest packet (plus one decoded frame, 1 MiB as
// the shim writes them), never the file size.
// Not thread safe; one reader per file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "analyzer/common/status.h"
#include "analyzer/read/trace_source.h"
#include "analyzer/read/varint.h"  // DecodeVarint
#include "trace.pb.h"

namespace pinscope {

// The trace format version this reader understands (ProcessHeader.format_version).
inline constexpr uint32_t kSupportedFormatVersion = 1;

class TraceReader {
 public:
  static constexpr size_t kDefaultChunkBytes = 256 * 1024;
  // A length above this is taken as corruption, not as a packet to allocate.
  static constexpr uint64_t kMaxPacketBytes = 64ull * 1024 * 1024;

  // `path` also names the file in messages; `chunk_bytes` is the read size.
  explicit TraceReader(std::string path, size_t chunk_bytes = kDefaultChunkBytes);
  ~TraceReader();
  TraceReader(const TraceReader&) = delete;
  TraceReader& operator=(const TraceReader&) = delete;

  // Opens the file. On failure returns false; status() says why. A FIFO,
  // device or folder is refused without blocking (kNotRegular).
  bool Open();

  // Closes the file and frees the read buffer, remembering where the next
  // packet starts; the next Next() reopens the same file (checked by device
  // and inode) and goes on from there. Lets a replay stream more files than
  // it keeps open (ReplayOptions::max_open_files). No-op when not open.
  void Release();
  // True between a successful Open() (or a reopen) and Release() or the end.
  bool is_open() const { return fd_ >= 0; }

  // Reads the next packet into *packet. Returns false at the end of the
  // stream: status().ok() for a clean end, otherwise a truncated last packet
  // (a warning: everything before it was returned), an empty file, a read
  // error or a corrupt packet (reading stops there).
  bool Next(trace::TracePacket* packet);

  // Reads the first packet and checks it is a usable ProcessHeader.
  // Returns false with status() set otherwise.
  bool ReadHeader(trace::ProcessHeader* header, uint64_t* timestamp_ns);

  const Status& status() const { return status_; }
  const std::string& path() const { return path_; }
  // Offset in the packet stream (the file's, if not compressed) where the
  // packet last returned by Next() begins.
  uint64_t packet_offset() const { return packet_offset_; }
  // Bytes of the file consumed so far: of complete packets, or (compressed)
  // of the frames read up to the one holding the next packet.
  uint64_t consumed_bytes() const { return source_.FileOffset(stream_offset()); }
  // Whether the file is the compressed container (zstd frames).
  bool compressed() const { return source_.compressed(); }
  uint64_t packets_read() const { return packets_read_; }
  // Packets whose text fields held invalid UTF-8, read with those bytes
  // escaped as \xHH (written by a shim that copied them as they were).
  uint64_t rescued_packets() const { return rescued_packets_; }
  // Packets read by the hand decoder of the hot kinds (packet_decoder.h),
  // not by libprotobuf.
  uint64_t hand_decoded_packets() const { return hand_decoded_packets_; }
  // The file's size when it was last opened (0 before Open): what a
  // progress line counts consumed_bytes() against.
  uint64_t file_bytes() const { return file_bytes_; }

 private:
  // Makes at least `want` unread bytes available if the file has them;
  // returns how many are available (fewer only at end of file or on error).
  size_t Fill(size_t want);
  bool Fail(Status::Code code, const std::string& reason);
  bool NextPacket(trace::TracePacket* packet);
  // Parses the packet whose `length` bytes start at `bytes`, `frame` bytes
  // (tag and length) after the first unread byte, and consumes it.
  bool ParsePacket(const uint8_t* bytes, size_t frame, size_t length, trace::TracePacket* packet);
  // At the end: the damaged frames skipped on the way join status_.
  void ReportSkippedFrames();
  // The packet stream's offset of the first unread byte.
  uint64_t stream_offset() const { return buffer_offset_ + begin_; }
  // "byte N" of a message: the file's, or the stream's and its frame's.
  std::string Where() const;
  // Opens path_ without blocking and checks it is a regular file; sets
  // status_ and returns -1 otherwise.
  int OpenRegular();
  bool Reopen();

  std::string path_;
  size_t chunk_bytes_;
  int fd_ = -1;
  std::vector<uint8_t> buffer_;
  size_t begin_ = 0;            // first unread byte in buffer_
  size_t end_ = 0;              // one past the last valid byte in buffer_
  uint64_t buffer_offset_ = 0;  // stream offset of buffer_[0] (the file's, if plain)
  bool eof_ = false;
  bool done_ = false;
  uint64_t packet_offset_ = 0;
  uint64_t packets_read_ = 0;
  uint64_t rescued_packets_ = 0;
  uint64_t hand_decoded_packets_ = 0;
  bool released_ = false;
  uint64_t device_ = 0;  // identity of the file opened first, for reopening
  uint64_t inode_ = 0;
  uint64_t file_bytes_ = 0;
  Status status_;
  bool skipped_reported_ = false;
  TraceSource source_;
};

}  // namespace pinscope
