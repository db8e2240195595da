// The bytes of one trace file's packet stream, below TraceReader's packet
// parser: the file as it is (the plain format), or decompressed from its
// zstd frames (the compressed container, docs/trace-format.md,
// "Compression"). A compressed file is decoded one whole frame at a time,
// checked (content size, checksum) before any of its bytes are handed out:
// a damaged frame is skipped, named with its file offset, and reading goes
// on at the next frame; a frame cut by the end of the file is the cut.
// Not thread-safe; owned by one TraceReader.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "analyzer/common/status.h"

namespace pinscope {

// The compressed container's preamble (shim/record/trace_writer.h writes it).
inline constexpr uint32_t kTraceSkippableMagic = 0x184D2A5Au;
inline constexpr uint32_t kTraceContainerVersion = 1;
inline constexpr uint32_t kZstdFrameMagic = 0xFD2FB528u;

class TraceSource {
 public:
  // A decoded frame above this is taken as corruption.
  static constexpr uint64_t kMaxFrameBytes = 64ull * 1024 * 1024;

  explicit TraceSource(std::string path);
  ~TraceSource();
  TraceSource(const TraceSource&) = delete;
  TraceSource& operator=(const TraceSource&) = delete;

  // After the first open (fd at offset 0): tells the plain format from the
  // compressed container by the first bytes (read with pread). False with
  // *status set for a container of a newer version.
  bool Start(int fd, Status* status);
  // After a reopen (TraceReader::Release): goes back to stream offset
  // `stream_offset`, the first byte not yet handed to the parser.
  bool Resume(int fd, uint64_t stream_offset, Status* status);
  // Frees the memory held between Release and Resume.
  void Release();

  // Up to n bytes of the packet stream; 0 at its end, -1 on a read error
  // (*status set, naming the file offset).
  ssize_t Read(int fd, uint8_t* dst, size_t n, Status* status);
  // The parser has consumed the stream before `stream_offset`: frames
  // wholly before it are forgotten (Resume needs only the later ones).
  void Consumed(uint64_t stream_offset);

  bool compressed() const { return compressed_; }
  // Plain: at most how many more stream bytes the file holds past the
  // stream offset `read_to` (its size), so a corrupt length allocates
  // nothing; compressed: UINT64_MAX (unknown before decoding).
  uint64_t MaxMoreBytes(int fd, uint64_t read_to) const;
  // The file offset reached with the parser at `stream_offset` (the
  // progress line's count; plain: the same offset). Compressed: the start
  // of the frame holding that byte, or the end of the last frame.
  uint64_t FileOffset(uint64_t stream_offset) const;

  // The end of the file cut a frame (or its header): `cut_offset()` is
  // where that frame begins, the bytes before it all read.
  bool cut() const { return cut_; }
  uint64_t cut_offset() const { return cut_offset_; }
  // Damaged frames skipped, each a sentence naming its file offset.
  const std::vector<std::string>& skipped() const { return skipped_; }

 private:
  struct FrameStart {
    uint64_t stream_offset;
    uint64_t file_offset;
  };
  // Decodes the next whole frame into frame_; false at the end (or cut).
  bool NextFrame(int fd, Status* status);
  // Makes `want` more input bytes available if the file has them.
  size_t FillInput(int fd, size_t want, Status* status);
  // From input offset `from`, moves to the next zstd frame magic; false if none.
  bool Resync(int fd, uint64_t from, Status* status);

  std::string path_;
  bool compressed_ = false;
  void* dctx_ = nullptr;  // ZSTD_DCtx
  // Compressed input: in_[in_pos_, in_end_) is at file offset in_file_ + in_pos_.
  std::vector<uint8_t> in_;
  size_t in_pos_ = 0, in_end_ = 0;
  uint64_t in_file_ = 0;
  bool in_eof_ = false;
  // The frame being handed out: frame_[frame_pos_, frame_.size()).
  std::vector<uint8_t> frame_;
  size_t frame_pos_ = 0;
  uint64_t stream_at_ = 0;          // stream offset of frame_[frame_pos_]
  uint64_t decoded_end_ = 0;        // stream offset after the last frame decoded (kept by Release)
  std::vector<FrameStart> frames_;  // frames handed out, not yet consumed
  uint64_t end_file_ = 0;           // file offset after the last whole frame
  bool cut_ = false;
  uint64_t cut_offset_ = 0;
  std::vector<std::string> skipped_;
  std::vector<uint64_t> skipped_at_;  // their file offsets, each reported once
};

}  // namespace pinscope
