// Streaming reader of one trace file: chunked reads, packet framing
// (0x0A, varint length, TracePacket), and the problems a killed or damaged
// file can have, each turned into a Status naming the file and byte offset.
#include "analyzer/read/trace_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "analyzer/read/packet_decoder.h"
#include "analyzer/read/text_rescue.h"

namespace pinscope {

namespace {

// Tag of field 1 (Trace.packet), wire type 2 (length-delimited).
constexpr uint8_t kPacketTag = 0x0A;
constexpr size_t kMaxVarintBytes = 10;

}  // namespace

int DecodeVarint(const uint8_t* data, size_t size, uint64_t* value) {
  uint64_t result = 0;
  for (size_t i = 0; i < kMaxVarintBytes; ++i) {
    if (i >= size) return 0;
    const uint64_t byte = data[i];
    // The 10th byte may only carry the top bit of a 64-bit value.
    if (i == kMaxVarintBytes - 1 && byte > 1) return -1;
    result |= (byte & 0x7F) << (7 * i);
    if ((byte & 0x80) == 0) {
      *value = result;
      return static_cast<int>(i + 1);
    }
  }
  return -1;
}

TraceReader::TraceReader(std::string path, size_t chunk_bytes)
    : path_(std::move(path)), chunk_bytes_(chunk_bytes < 64 ? 64 : chunk_bytes), source_(path_) {}

TraceReader::~TraceReader() {
  if (fd_ >= 0) close(fd_);
}

int TraceReader::OpenRegular() {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer
  // forever. It changes nothing for a regular file, which is all we read.
  const int fd = open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    status_ = Status::Error(Status::Code::kIoError,
                            "file " + path_ + ": cannot open: " + std::strerror(errno));
    return -1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    status_ = Status::Error(Status::Code::kIoError,
                            "file " + path_ + ": cannot stat: " + std::strerror(errno));
    close(fd);
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    const char* kind = S_ISFIFO(st.st_mode)   ? "a FIFO"
                       : S_ISDIR(st.st_mode)  ? "a folder"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "a device";
    status_ = Status::Error(Status::Code::kNotRegular,
                            "file " + path_ + ": is " + kind + ", not a regular file: skipped");
    close(fd);
    return -1;
  }
  if (released_ &&
      (static_cast<uint64_t>(st.st_dev) != device_ || static_cast<uint64_t>(st.st_ino) != inode_)) {
    status_ = Status::Error(Status::Code::kIoError,
                            "file " + path_ + ": replaced while being read (after byte " +
                                std::to_string(consumed_bytes()) + "): reading stopped");
    close(fd);
    return -1;
  }
  device_ = static_cast<uint64_t>(st.st_dev);
  inode_ = static_cast<uint64_t>(st.st_ino);
  file_bytes_ = static_cast<uint64_t>(st.st_size);
  return fd;
}

bool TraceReader::Open() {
  fd_ = OpenRegular();
  if (fd_ < 0) {
    done_ = true;
    return false;
  }
  if (!source_.Start(fd_, &status_)) {
    close(fd_);
    fd_ = -1;
    done_ = true;
    return false;
  }
  buffer_.resize(chunk_bytes_);
  return true;
}

void TraceReader::Release() {
  if (fd_ < 0 || done_) return;
  close(fd_);
  fd_ = -1;
  released_ = true;
  // Unread bytes are read again after the reopen: the buffer goes.
  buffer_offset_ += begin_;
  begin_ = 0;
  end_ = 0;
  eof_ = false;
  buffer_.clear();
  buffer_.shrink_to_fit();
  source_.Release();
}

bool TraceReader::Reopen() {
  fd_ = OpenRegular();
  if (fd_ < 0) {
    done_ = true;
    return false;
  }
  if (!source_.Resume(fd_, buffer_offset_, &status_)) {
    close(fd_);
    fd_ = -1;
    done_ = true;
    return false;
  }
  buffer_.resize(chunk_bytes_);
  return true;
}

size_t TraceReader::Fill(size_t want) {
  if (end_ - begin_ >= want || eof_) return end_ - begin_;
  // Move the unread tail to the front, then grow only if one packet needs it.
  if (begin_ > 0) {
    std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
    buffer_offset_ += begin_;
    end_ -= begin_;
    begin_ = 0;
    source_.Consumed(buffer_offset_);
  }
  // After a large packet, shrink back so memory follows the chunk size.
  if (buffer_.size() > chunk_bytes_ && end_ <= chunk_bytes_ && want <= chunk_bytes_) {
    buffer_.resize(chunk_bytes_);
    buffer_.shrink_to_fit();
  }
  if (buffer_.size() < want) {
    // Grow only as far as the file can fill: a corrupt length (up to
    // kMaxPacketBytes) must not allocate and zero memory for bytes that are
    // not there. Next() then sees fewer bytes than wanted: truncated.
    size_t grow_to = want;
    const uint64_t more = source_.MaxMoreBytes(fd_, buffer_offset_ + end_);
    if (more < want - end_) {  // (want > end_ here; compressed: more is UINT64_MAX)
      grow_to = std::max(buffer_.size(), static_cast<size_t>(end_ + more));
    }
    buffer_.resize(grow_to);
  }
  while (end_ < want && end_ < buffer_.size() && !eof_) {
    // Read at least a chunk when there is room, to keep syscalls few.
    const ssize_t n = source_.Read(fd_, buffer_.data() + end_, buffer_.size() - end_, &status_);
    if (n < 0) {
      eof_ = true;
      if (!status_.ok()) break;  // the source said where
      status_ = Status::Error(Status::Code::kIoError, "file " + path_ + ": read failed at byte " +
                                                          std::to_string(buffer_offset_ + end_) +
                                                          ": " + std::strerror(errno));
      break;
    }
    if (n == 0) {
      eof_ = true;
      break;
    }
    end_ += static_cast<size_t>(n);
  }
  return end_ - begin_;
}

bool TraceReader::Fail(Status::Code code, const std::string& reason) {
  done_ = true;
  status_ = Status::Error(code, "file " + path_ + ": corrupt packet at " + Where() + ": " + reason +
                                    "; reading stopped after " + std::to_string(packets_read_) +
                                    " packets");
  return false;
}

std::string TraceReader::Where() const {
  if (!source_.compressed()) return "byte " + std::to_string(stream_offset());
  return "byte " + std::to_string(stream_offset()) +
         " of the decompressed stream (in the zstd frame at file byte " +
         std::to_string(consumed_bytes()) + ")";
}

void TraceReader::ReportSkippedFrames() {
  if (skipped_reported_ || source_.skipped().empty()) return;
  skipped_reported_ = true;
  // A damaged frame is an error of its file; the packets of the other
  // frames were all read. A cut or other problem after it is said too.
  std::string message;
  for (const std::string& one : source_.skipped()) message += (message.empty() ? "" : "; ") + one;
  if (!status_.ok()) message += "; " + status_.message;
  status_ = Status::Error(Status::Code::kCorrupt, message);
}

bool TraceReader::Next(trace::TracePacket* packet) {
  if (NextPacket(packet)) return true;
  ReportSkippedFrames();
  return false;
}

bool TraceReader::NextPacket(trace::TracePacket* packet) {
  if (done_) return false;
  if (fd_ < 0 && (!released_ || !Reopen())) return false;
  // The common case first, without Fill: a whole packet already in the
  // buffer. Anything else (a refill, a cut, damage, a read error to
  // report) takes the checked path below.
  if (end_ - begin_ > 1 && buffer_[begin_] == kPacketTag && status_.ok()) {
    const uint8_t* head = buffer_.data() + begin_ + 1;
    uint64_t length = 0;
    const int varint_bytes = ReadVarint(head, buffer_.data() + end_, &length);
    if (varint_bytes > 0 && length <= kMaxPacketBytes &&
        length <= end_ - begin_ - 1 - static_cast<size_t>(varint_bytes)) {
      return ParsePacket(head + varint_bytes, 1 + static_cast<size_t>(varint_bytes),
                         static_cast<size_t>(length), packet);
    }
  }
  const size_t available = Fill(1);
  if (!status_.ok()) {
    done_ = true;
    return false;
  }
  if (available == 0) {
    done_ = true;
    if (source_.cut()) {
      status_ = Status::Error(Status::Code::kTruncated,
                              "file " + path_ + ": truncated after byte " +
                                  std::to_string(source_.cut_offset()) +
                                  " (last zstd frame incomplete: the packets before it were read)");
    } else if (stream_offset() == 0 && source_.skipped().empty()) {
      status_ =
          Status::Error(Status::Code::kEmpty, "file " + path_ +
                                                  ": empty (0 bytes): the process wrote no trace "
                                                  "(killed before its first flush?)");
    }
    return false;
  }
  const uint8_t tag = buffer_[begin_];
  if (tag != kPacketTag) {
    char reason[96];
    std::snprintf(reason, sizeof(reason), "bad tag 0x%02X (expected 0x0A, a Trace.packet field)",
                  tag);
    return Fail(Status::Code::kCorrupt, reason);
  }
  const size_t head_available = Fill(1 + kMaxVarintBytes);
  uint64_t length = 0;
  const int varint_bytes = DecodeVarint(buffer_.data() + begin_ + 1, head_available - 1, &length);
  const auto truncated = [&]() {
    done_ = true;
    status_ = Status::Error(Status::Code::kTruncated, "file " + path_ + ": truncated after byte " +
                                                          std::to_string(consumed_bytes()) +
                                                          " (last packet incomplete)");
    return false;
  };
  const auto stop = [&]() {
    done_ = true;
    return status_.ok() ? truncated() : false;
  };
  if (varint_bytes < 0) return Fail(Status::Code::kCorrupt, "packet length varint is malformed");
  if (varint_bytes == 0) return stop();
  if (length > kMaxPacketBytes) {
    return Fail(Status::Code::kCorrupt,
                "packet length " + std::to_string(length) + " exceeds the 64 MiB limit");
  }
  const size_t frame = 1 + static_cast<size_t>(varint_bytes);
  const size_t total = frame + static_cast<size_t>(length);
  if (Fill(total) < total) return stop();
  return ParsePacket(buffer_.data() + begin_ + frame, frame, static_cast<size_t>(length), packet);
}

bool TraceReader::ParsePacket(const uint8_t* bytes, size_t frame, size_t length,
                              trace::TracePacket* packet) {
  // The hot kinds (copy, sync, alloc, free, shm, device, correlation) are
  // decoded by hand, for speed (packet_decoder.h); libprotobuf parses the rest.
  if (DecodeHotPacket(bytes, length, packet)) {
    ++hand_decoded_packets_;
  } else if (!packet->ParseFromArray(bytes, static_cast<int>(length))) {
    // Invalid UTF-8 in a text field fails the strict parse: read it again
    // with those bytes made visible as \xHH (text_rescue.h).
    if (ParseRescuingText(bytes, length, packet)) {
      ++rescued_packets_;
    } else {
      return Fail(Status::Code::kCorrupt,
                  "protobuf parse failed (" + std::to_string(length) + "-byte packet)");
    }
  }
  packet_offset_ = stream_offset();
  begin_ += frame + length;
  ++packets_read_;
  return true;
}

bool TraceReader::ReadHeader(trace::ProcessHeader* header, uint64_t* timestamp_ns) {
  trace::TracePacket packet;
  if (!Next(&packet)) {
    if (status_.ok()) {
      // Only possible when Next() stopped for a reason already reported.
      status_ = Status::Error(Status::Code::kNoHeader, "file " + path_ + ": no packets");
    }
    return false;
  }
  if (!packet.has_header()) {
    done_ = true;
    status_ = Status::Error(Status::Code::kNoHeader,
                            "file " + path_ +
                                ": missing process header (the first packet must be a "
                                "ProcessHeader); not a pinscope trace?");
    return false;
  }
  const uint32_t version = packet.header().format_version();
  if (version > kSupportedFormatVersion) {
    done_ = true;
    status_ = Status::Error(Status::Code::kNewerFormat,
                            "file " + path_ + ": written by a newer pinscope: format " +
                                std::to_string(version) + ", this reader supports " +
                                std::to_string(kSupportedFormatVersion));
    return false;
  }
  if (version == 0) {
    done_ = true;
    status_ = Status::Error(Status::Code::kBadHeader, "file " + path_ +
                                                          ": process header has format version 0 "
                                                          "(not written by pinscope?)");
    return false;
  }
  *header = packet.header();
  if (timestamp_ns != nullptr) *timestamp_ns = packet.timestamp_ns();
  return true;
}

}  // namespace pinscope
