// The packet stream of one trace file, plain or from zstd frames; see
// trace_source.h.
#include "analyzer/read/trace_source.h"

#include <sys/stat.h>
#include <unistd.h>

#define ZSTD_STATIC_LINKING_ONLY  // ZSTD_getFrameHeader
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <utility>

namespace pinscope {
namespace {

constexpr size_t kInputChunk = 128 * 1024;
constexpr size_t kPreambleBytes = 24;

uint32_t Le32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

ZSTD_DCtx* Dctx(void* p) { return static_cast<ZSTD_DCtx*>(p); }

}  // namespace

TraceSource::TraceSource(std::string path) : path_(std::move(path)) {}

TraceSource::~TraceSource() { ZSTD_freeDCtx(Dctx(dctx_)); }

bool TraceSource::Start(int fd, Status* status) {
  uint8_t head[kPreambleBytes];
  ssize_t n;
  do {
    n = pread(fd, head, sizeof head, 0);
  } while (n < 0 && errno == EINTR);
  if (n < 4) return true;  // plain, or too short for anything: the parser says
  const uint32_t magic = Le32(head);
  if (magic == kZstdFrameMagic) {
    compressed_ = true;  // zstd frames without pinscope's preamble (`zstd FILE`)
  } else if (magic == kTraceSkippableMagic) {
    compressed_ = true;
    if (static_cast<size_t>(n) < kPreambleBytes) {
      cut_ = true;  // killed while writing the preamble: nothing to read
      return true;
    }
    const uint32_t version = Le32(head + 16);
    const uint32_t compression = Le32(head + 20);
    if (Le32(head + 4) != kPreambleBytes - 8 || std::memcmp(head + 8, "pinscope", 8) != 0) {
      *status = Status::Error(Status::Code::kCorrupt,
                              "file " + path_ +
                                  ": starts with a zstd skippable frame that is not pinscope's "
                                  "preamble; not a pinscope trace?");
      return false;
    }
    if (version > kTraceContainerVersion || compression != 1) {
      *status = Status::Error(Status::Code::kNewerFormat,
                              "file " + path_ +
                                  ": written by a newer pinscope: trace container version " +
                                  std::to_string(version) + " (compression " +
                                  std::to_string(compression) + "), this reader supports version " +
                                  std::to_string(kTraceContainerVersion) + " (zstd)");
      return false;
    }
    in_file_ = kPreambleBytes;
    end_file_ = kPreambleBytes;
  } else {
    return true;
  }
  if (lseek(fd, static_cast<off_t>(in_file_), SEEK_SET) < 0) {
    *status = Status::Error(Status::Code::kIoError,
                            "file " + path_ + ": cannot seek: " + std::strerror(errno));
    return false;
  }
  return true;
}

void TraceSource::Release() {
  in_.clear();
  in_.shrink_to_fit();
  in_pos_ = in_end_ = 0;
  in_eof_ = false;
  frame_.clear();
  frame_.shrink_to_fit();
  frame_pos_ = 0;
  ZSTD_freeDCtx(Dctx(dctx_));
  dctx_ = nullptr;
}

bool TraceSource::Resume(int fd, uint64_t stream_offset, Status* status) {
  uint64_t file_offset = stream_offset;
  uint64_t skip = 0;
  if (compressed_) {
    // The frame that holds the first unread byte, or the end of the last
    // whole frame when every decoded byte was consumed.
    const uint64_t decoded_end = decoded_end_;
    auto it = std::upper_bound(
        frames_.begin(), frames_.end(), stream_offset,
        [](uint64_t offset, const FrameStart& f) { return offset < f.stream_offset; });
    if (stream_offset >= decoded_end || it == frames_.begin()) {
      file_offset = end_file_;
      stream_at_ = decoded_end;
      skip = stream_offset > decoded_end ? stream_offset - decoded_end : 0;
    } else {
      --it;
      file_offset = it->file_offset;
      stream_at_ = it->stream_offset;
      skip = stream_offset - it->stream_offset;
      frames_.erase(it, frames_.end());
    }
    decoded_end_ = stream_at_;
    in_file_ = file_offset;
    in_pos_ = in_end_ = 0;
    in_eof_ = false;
    frame_.clear();
    frame_pos_ = 0;
  }
  if (lseek(fd, static_cast<off_t>(file_offset), SEEK_SET) < 0) {
    *status = Status::Error(Status::Code::kIoError, "file " + path_ + ": cannot seek to byte " +
                                                        std::to_string(file_offset) + ": " +
                                                        std::strerror(errno));
    return false;
  }
  while (skip > 0) {
    if (frame_pos_ == frame_.size() && !NextFrame(fd, status)) break;
    const size_t take = static_cast<size_t>(std::min<uint64_t>(skip, frame_.size() - frame_pos_));
    frame_pos_ += take;
    stream_at_ += take;
    skip -= take;
  }
  return status->ok();
}

size_t TraceSource::FillInput(int fd, size_t want, Status* status) {
  if (in_end_ - in_pos_ >= want || in_eof_) return in_end_ - in_pos_;
  if (in_pos_ > 0) {
    std::memmove(in_.data(), in_.data() + in_pos_, in_end_ - in_pos_);
    in_file_ += in_pos_;
    in_end_ -= in_pos_;
    in_pos_ = 0;
  }
  if (in_.size() < std::max(want, kInputChunk)) in_.resize(std::max(want, kInputChunk));
  while (in_end_ < want && !in_eof_) {
    const ssize_t n = read(fd, in_.data() + in_end_, in_.size() - in_end_);
    if (n < 0) {
      if (errno == EINTR) continue;
      *status = Status::Error(Status::Code::kIoError, "file " + path_ + ": read failed at byte " +
                                                          std::to_string(in_file_ + in_end_) +
                                                          ": " + std::strerror(errno));
      in_eof_ = true;
      break;
    }
    if (n == 0) {
      in_eof_ = true;
      break;
    }
    in_end_ += static_cast<size_t>(n);
  }
  return in_end_ - in_pos_;
}

bool TraceSource::Resync(int fd, uint64_t from, Status* status) {
  if (from < in_file_ || from > in_file_ + in_end_) {
    // Those bytes are gone from the input buffer: read them again.
    if (lseek(fd, static_cast<off_t>(from), SEEK_SET) < 0) return false;
    in_file_ = from;
    in_pos_ = in_end_ = 0;
    in_eof_ = false;
  } else {
    in_pos_ = static_cast<size_t>(from - in_file_);
  }
  const uint8_t magic[4] = {0x28, 0xB5, 0x2F, 0xFD};  // kZstdFrameMagic, little endian
  for (;;) {
    const size_t avail = FillInput(fd, 4, status);
    if (avail < 4) return false;
    const uint8_t* begin = in_.data() + in_pos_;
    const uint8_t* end = in_.data() + in_end_;
    const uint8_t* hit = std::search(begin, end, magic, magic + 4);
    if (hit != end) {
      in_pos_ += static_cast<size_t>(hit - begin);
      return true;
    }
    in_pos_ = in_end_ - 3;  // a magic may straddle the next read
    if (in_eof_) return false;
    FillInput(fd, in_end_ - in_pos_ + 1, status);
  }
}

bool TraceSource::NextFrame(int fd, Status* status) {
  if (!dctx_) dctx_ = ZSTD_createDCtx();
  for (;;) {
    frame_.clear();
    frame_pos_ = 0;
    if (cut_ || !status->ok()) return false;
    const size_t head = FillInput(fd, ZSTD_FRAMEHEADERSIZE_MAX, status);
    if (!status->ok()) return false;
    const uint64_t start = in_file_ + in_pos_;
    if (head == 0) return false;  // the end, after a whole frame
    ZSTD_DCtx_reset(Dctx(dctx_), ZSTD_reset_session_only);
    const char* damage = nullptr;
    ZSTD_frameHeader header;
    const size_t need = ZSTD_getFrameHeader(&header, in_.data() + in_pos_, head);
    unsigned long long size = header.frameContentSize;
    if (ZSTD_isError(need)) {
      damage = "not a zstd frame (bad magic number)";
    } else if (need > 0) {
      cut_ = true;  // the file ends inside a frame header
      cut_offset_ = start;
      return false;
    } else if (header.frameType == ZSTD_skippableFrame) {
      size = 0;
    } else if (size != ZSTD_CONTENTSIZE_UNKNOWN && size > kMaxFrameBytes) {
      damage = "frame content size over the 64 MiB limit";
    }
    size_t len = 0;
    if (!damage) {
      frame_.resize(size == ZSTD_CONTENTSIZE_UNKNOWN ? kInputChunk : static_cast<size_t>(size) + 1);
      for (;;) {
        ZSTD_inBuffer in{in_.data() + in_pos_, in_end_ - in_pos_, 0};
        if (len == frame_.size()) {
          if (frame_.size() >= kMaxFrameBytes) {
            damage = "frame content over the 64 MiB limit";
            break;
          }
          frame_.resize(std::min<size_t>(kMaxFrameBytes, frame_.size() * 2 + 1));
        }
        ZSTD_outBuffer out{frame_.data(), frame_.size(), len};
        const size_t r = ZSTD_decompressStream(Dctx(dctx_), &out, &in);
        in_pos_ += in.pos;
        len = out.pos;
        if (ZSTD_isError(r)) {
          damage = ZSTD_getErrorName(r);
          break;
        }
        if (r == 0) break;  // the frame is whole, its checksum right
        if (in_pos_ == in_end_ && FillInput(fd, 1, status) == 0) {
          if (!status->ok()) return false;
          cut_ = true;  // the file ends inside this frame
          cut_offset_ = start;
          frame_.clear();
          return false;
        }
      }
    }
    if (!damage) {
      end_file_ = in_file_ + in_pos_;
      if (len == 0) continue;  // a skippable frame, or an empty one
      frame_.resize(len);
      frames_.push_back(FrameStart{stream_at_, start});
      decoded_end_ = stream_at_ + len;
      return true;
    }
    const bool found = Resync(fd, start + 1, status);
    const uint64_t next = in_file_ + in_pos_;
    if (std::find(skipped_at_.begin(), skipped_at_.end(), start) == skipped_at_.end()) {
      skipped_at_.push_back(start);
      skipped_.push_back("file " + path_ + ": corrupt zstd frame at byte " + std::to_string(start) +
                         " (" + damage + "): its packets are lost; " +
                         (found
                              ? "reading went on at the next frame, at byte " + std::to_string(next)
                              : std::string("no frame follows it")));
    }
    if (!found) {
      in_pos_ = in_end_;
      in_eof_ = true;
      end_file_ = in_file_ + in_end_;
      frame_.clear();
      return false;
    }
  }
}

ssize_t TraceSource::Read(int fd, uint8_t* dst, size_t n, Status* status) {
  if (!compressed_) {
    for (;;) {
      const ssize_t got = read(fd, dst, n);
      if (got >= 0 || errno != EINTR) return got;
    }
  }
  size_t got = 0;
  while (got < n) {
    if (frame_pos_ == frame_.size()) {
      if (!NextFrame(fd, status)) break;
      continue;
    }
    const size_t take = std::min(n - got, frame_.size() - frame_pos_);
    std::memcpy(dst + got, frame_.data() + frame_pos_, take);
    frame_pos_ += take;
    stream_at_ += take;
    got += take;
  }
  if (got == 0 && !status->ok()) return -1;
  return static_cast<ssize_t>(got);
}

void TraceSource::Consumed(uint64_t stream_offset) {
  if (!compressed_ || frames_.size() < 2) return;
  size_t keep = 0;  // the last frame starting at or before the offset
  while (keep + 1 < frames_.size() && frames_[keep + 1].stream_offset <= stream_offset) ++keep;
  if (keep > 0) frames_.erase(frames_.begin(), frames_.begin() + static_cast<ptrdiff_t>(keep));
}

uint64_t TraceSource::MaxMoreBytes(int fd, uint64_t read_to) const {
  if (compressed_) return std::numeric_limits<uint64_t>::max();
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size < 0) return std::numeric_limits<uint64_t>::max();
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  return size > read_to ? size - read_to : 0;
}

uint64_t TraceSource::FileOffset(uint64_t stream_offset) const {
  if (!compressed_) return stream_offset;
  const uint64_t decoded_end = decoded_end_;
  if (stream_offset >= decoded_end || frames_.empty()) return end_file_;
  auto it = std::upper_bound(
      frames_.begin(), frames_.end(), stream_offset,
      [](uint64_t offset, const FrameStart& f) { return offset < f.stream_offset; });
  return it == frames_.begin() ? frames_.front().file_offset : std::prev(it)->file_offset;
}

}  // namespace pinscope
