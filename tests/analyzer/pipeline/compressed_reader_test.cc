// The reader on compressed traces (issue 18; docs/trace-format.md,
// "Compression"): the same packets as the plain file at any chunk size and
// across Release/reopen, a file cut mid-frame, a damaged frame skipped and
// named, a container from a newer pinscope refused.
#include <gtest/gtest.h>
#include <zstd.h>

#include <string>
#include <vector>

#include "analyzer/read/trace_reader.h"
#include "trace_builder.h"

namespace pinscope {
namespace {

using testing::kMs;
using testing::MakeTempDir;
using testing::TraceBuilder;
using testing::WriteFile;

constexpr uint64_t kT0 = 1000ull * 1000 * kMs;

std::string Preamble(uint32_t version = 1, uint32_t compression = 1) {
  std::string p("\x5A\x2A\x4D\x18\x10\0\0\0pinscope", 16);
  for (uint32_t v : {version, compression}) {
    for (int i = 0; i < 4; ++i) p += static_cast<char>(v >> (8 * i));
  }
  return p;
}

// The packets of a plain trace, `per_frame` to a zstd frame (level 1 and a
// checksum, as the shim writes them); *offsets gets each frame's offset.
std::string Compress(const std::string& plain, size_t per_frame, std::vector<size_t>* offsets) {
  std::string out = Preamble();
  const auto* p = reinterpret_cast<const uint8_t*>(plain.data());
  size_t at = 0;
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_compressionLevel, 1);
  ZSTD_CCtx_setParameter(cctx, ZSTD_c_checksumFlag, 1);
  while (at < plain.size()) {
    const size_t begin = at;
    for (size_t n = 0; n < per_frame && at < plain.size(); ++n) {
      uint64_t length = 0;
      const int varint = DecodeVarint(p + at + 1, plain.size() - at - 1, &length);
      at += 1 + static_cast<size_t>(varint) + static_cast<size_t>(length);
    }
    std::string frame(ZSTD_compressBound(at - begin), '\0');
    const size_t z = ZSTD_compress2(cctx, frame.data(), frame.size(), p + begin, at - begin);
    EXPECT_FALSE(ZSTD_isError(z));
    if (offsets) offsets->push_back(out.size());
    out.append(frame.data(), z);
  }
  ZSTD_freeCCtx(cctx);
  return out;
}

TraceBuilder SmallTrace() {
  TraceBuilder trace(100, "run-a", kT0);
  for (int i = 0; i < 20; ++i) {
    trace.Copy(kT0 + i * kMs, kMs / 2, trace::H2D, trace::PAGEABLE, (i + 1) * 4096,
               0x10000 + i * 0x1000);
  }
  trace.Exit(kT0 + 30 * kMs);
  return trace;  // header + 20 copies + exit: 22 packets
}

struct Read {
  std::vector<std::string> packets;  // serialized, to compare
  Status status;
  uint64_t consumed = 0;
  bool compressed = false;
};

Read ReadAll(const std::string& path, size_t chunk = TraceReader::kDefaultChunkBytes,
             bool release_each = false) {
  Read r;
  TraceReader reader(path, chunk);
  if (reader.Open()) {
    r.compressed = reader.compressed();
    trace::TracePacket packet;
    while (reader.Next(&packet)) {
      r.packets.push_back(packet.SerializeAsString());
      if (release_each) reader.Release();
    }
  }
  r.status = reader.status();
  r.consumed = reader.consumed_bytes();
  return r;
}

TEST(CompressedReaderTest, SamePacketsAsThePlainFileAtAnyChunkAndAcrossReopens) {
  const std::string dir = MakeTempDir("reader_zstd");
  const std::string plain = SmallTrace().Bytes();
  WriteFile(dir + "/plain.pstrace", plain);
  const std::string compressed = Compress(plain, 3, nullptr);
  WriteFile(dir + "/z.pstrace", compressed);
  const Read want = ReadAll(dir + "/plain.pstrace");
  ASSERT_TRUE(want.status.ok()) << want.status.message;
  ASSERT_EQ(want.packets.size(), 22u);
  EXPECT_FALSE(want.compressed);
  for (size_t chunk : {size_t{64}, size_t{100}, TraceReader::kDefaultChunkBytes}) {
    for (bool release : {false, true}) {
      const Read got = ReadAll(dir + "/z.pstrace", chunk, release);
      EXPECT_TRUE(got.status.ok()) << got.status.message;
      EXPECT_TRUE(got.compressed);
      EXPECT_EQ(got.packets, want.packets) << "chunk " << chunk << ", release " << release;
      EXPECT_EQ(got.consumed, compressed.size());  // file bytes: the progress line's count
    }
  }
}

TEST(CompressedReaderTest, CutMidFrameKeepsEveryWholeFrame) {
  const std::string dir = MakeTempDir("reader_zstd_cut");
  const std::string plain = SmallTrace().Bytes();
  std::vector<size_t> frames;
  const std::string compressed = Compress(plain, 4, &frames);  // 6 frames: 4+4+4+4+4+2
  ASSERT_EQ(frames.size(), 6u);
  // Inside the fourth frame: the first three frames' 12 packets remain.
  const std::string path = dir + "/1.pstrace";
  WriteFile(path, compressed.substr(0, frames[3] + (frames[4] - frames[3]) / 2));
  const Read got = ReadAll(path);
  EXPECT_EQ(got.packets.size(), 12u);
  EXPECT_EQ(got.status.code, Status::Code::kTruncated);
  EXPECT_EQ(got.status.message,
            "file " + path + ": truncated after byte " + std::to_string(frames[3]) +
                " (last zstd frame incomplete: the packets before it were read)");
  // Cut inside the second frame's magic number: the first frame's 4 remain.
  WriteFile(path, compressed.substr(0, frames[1] + 2));
  EXPECT_EQ(ReadAll(path).packets.size(), 4u);
  EXPECT_EQ(ReadAll(path).status.code, Status::Code::kTruncated);
}

TEST(CompressedReaderTest, DamagedFrameIsNamedAndTheOtherFramesAreRead) {
  const std::string dir = MakeTempDir("reader_zstd_corrupt");
  const std::string plain = SmallTrace().Bytes();
  std::vector<size_t> frames;
  std::string compressed = Compress(plain, 4, &frames);
  ASSERT_EQ(frames.size(), 6u);
  compressed[frames[2] + (frames[3] - frames[2]) / 2] ^= 0x41;  // inside the third frame
  const std::string path = dir + "/1.pstrace";
  WriteFile(path, compressed);
  const Read got = ReadAll(path);
  EXPECT_EQ(got.packets.size(), 18u);  // 22 less the third frame's 4 copies
  EXPECT_EQ(got.status.code, Status::Code::kCorrupt);
  EXPECT_EQ(
      got.status.message.rfind(
          "file " + path + ": corrupt zstd frame at byte " + std::to_string(frames[2]) + " (", 0),
      0u)
      << got.status.message;
  EXPECT_NE(got.status.message.find("): its packets are lost; reading went on at the next frame, "
                                    "at byte " +
                                    std::to_string(frames[3])),
            std::string::npos)
      << got.status.message;
  // Released after every packet: the same packets, the frame named once.
  const Read again = ReadAll(path, 64, /*release_each=*/true);
  EXPECT_EQ(again.packets, got.packets);
  EXPECT_EQ(again.status.message, got.status.message);
  // The same damage in the last frame: nothing follows it.
  std::string last = Compress(plain, 4, nullptr);
  last[frames[5] + 6] ^= 0x41;
  WriteFile(path, last);
  const Read tail = ReadAll(path);
  EXPECT_EQ(tail.packets.size(), 20u);
  EXPECT_NE(tail.status.message.find("no frame follows it"), std::string::npos)
      << tail.status.message;
}

TEST(CompressedReaderTest, NewerContainerIsRefusedNamingBothVersions) {
  const std::string dir = MakeTempDir("reader_zstd_newer");
  std::string compressed = Compress(SmallTrace().Bytes(), 4, nullptr);
  const std::string path = dir + "/1.pstrace";
  WriteFile(path, Preamble(2) + compressed.substr(24));
  TraceReader reader(path);
  EXPECT_FALSE(reader.Open());
  EXPECT_EQ(reader.status().code, Status::Code::kNewerFormat);
  EXPECT_EQ(reader.status().message,
            "file " + path +
                ": written by a newer pinscope: trace container version 2 (compression 1), this "
                "reader supports version 1 (zstd)");
}

TEST(CompressedReaderTest, FramesWithoutThePreambleAreReadToo) {
  const std::string dir = MakeTempDir("reader_zstd_bare");
  const std::string plain = SmallTrace().Bytes();
  const std::string path = dir + "/1.pstrace";
  WriteFile(path, Compress(plain, 5, nullptr).substr(24));  // what `zstd FILE` would give
  WriteFile(dir + "/plain.pstrace", plain);
  const Read got = ReadAll(path);
  EXPECT_TRUE(got.status.ok()) << got.status.message;
  EXPECT_EQ(got.packets, ReadAll(dir + "/plain.pstrace").packets);
}

}  // namespace
}  // namespace pinscope
