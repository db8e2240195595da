// The shim's trace writer (shim/record/trace_writer.h), driven in the test
// process: the compressed container (preamble, one zstd frame per flushed
// buffer, decoding to exactly the bytes appended), the plain format, and the
// hand-off of a full buffer to the flusher instead of the appending thread.
#include "shim/record/trace_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zstd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "shim/base/clock.h"

namespace pinscope::shim {
namespace {

namespace fs = std::filesystem;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// `n` bytes standing for one framed packet, distinct per `seed`.
std::string Chunk(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i)
    s[i] = static_cast<char>((i * 7 + static_cast<size_t>(seed) * 13) % 251);
  return s;
}

// The sizes of the zstd frames after the 24-byte preamble.
std::vector<size_t> FrameSizes(const std::string& file) {
  std::vector<size_t> sizes;
  size_t at = kTracePreambleBytes;
  while (at < file.size()) {
    const size_t n = ZSTD_findFrameCompressedSize(file.data() + at, file.size() - at);
    if (ZSTD_isError(n)) {
      ADD_FAILURE() << "bad frame at " << at << ": " << ZSTD_getErrorName(n);
      break;
    }
    sizes.push_back(n);
    at += n;
  }
  return sizes;
}

// The whole file through libzstd (which skips the preamble, a skippable frame).
std::string Decompress(const std::string& file) {
  std::string out(64u << 20, '\0');
  const size_t n = ZSTD_decompress(out.data(), out.size(), file.data(), file.size());
  if (ZSTD_isError(n)) {
    ADD_FAILURE() << ZSTD_getErrorName(n);
    return {};
  }
  out.resize(n);
  return out;
}

class TraceWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "pinscope-writer-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  static bool Append(TraceWriter& w, const std::string& s) {
    return w.Append(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }
  std::string dir_;
};

TEST_F(TraceWriterTest, CompressedFileIsThePreambleThenOneFramePerFlush) {
  TraceWriter w;
  ASSERT_EQ(w.Open(-1, dir_.c_str(), 42, /*compress=*/true), 0);
  const std::string path = w.path();
  EXPECT_EQ(path, dir_ + "/42.pstrace");
  std::string expected;
  for (int i = 0; i < 3; ++i) {
    expected += Chunk(100 + i, i);
    ASSERT_TRUE(Append(w, Chunk(100 + i, i)));
  }
  EXPECT_EQ(ReadAll(path).size(), 0u);  // nothing written before a flush
  ASSERT_TRUE(w.Flush());
  ASSERT_TRUE(w.Flush());  // nothing new: no empty frame
  for (int i = 3; i < 5; ++i) {
    expected += Chunk(4000, i);
    ASSERT_TRUE(Append(w, Chunk(4000, i)));
  }
  w.CloseFile();
  const std::string file = ReadAll(path);
  ASSERT_GE(file.size(), kTracePreambleBytes);
  // Magic 0x184D2A5A, payload size 16, "pinscope", version 1, zstd (1).
  EXPECT_EQ(file.substr(0, kTracePreambleBytes),
            std::string("\x5A\x2A\x4D\x18\x10\0\0\0pinscope\x01\0\0\0\x01\0\0\0", 24));
  EXPECT_EQ(FrameSizes(file).size(), 2u);
  EXPECT_EQ(Decompress(file), expected);
  EXPECT_EQ(w.bytes_written(), file.size());
  EXPECT_EQ(w.packet_bytes_written(), expected.size());
}

TEST_F(TraceWriterTest, UncompressedFileIsThePacketsAsAppended) {
  TraceWriter w;
  ASSERT_EQ(w.Open(-1, dir_.c_str(), 43, /*compress=*/false), 0);
  std::string expected;
  for (int i = 0; i < 4; ++i) {
    expected += Chunk(300, i);
    ASSERT_TRUE(Append(w, Chunk(300, i)));
    if (i == 1) {
      ASSERT_TRUE(w.Flush());
    }
  }
  w.CloseFile();
  EXPECT_EQ(ReadAll(dir_ + "/43.pstrace"), expected);
}

// A process killed before its first flush leaves 0 bytes, compressed too:
// the preamble goes out with the first frame.
TEST_F(TraceWriterTest, NothingFlushedLeavesAnEmptyFile) {
  TraceWriter w;
  ASSERT_EQ(w.Open(-1, dir_.c_str(), 44, /*compress=*/true), 0);
  ASSERT_TRUE(w.Flush());
  w.CloseFile();
  EXPECT_EQ(fs::file_size(dir_ + "/44.pstrace"), 0u);
}

// A buffer that fills is left to the flusher (WaitForFullBuffer,
// WriteFullBuffer): the appending thread writes nothing. Only when the
// flusher is a whole buffer behind does an append write (inline_writes).
TEST_F(TraceWriterTest, AFullBufferIsWrittenByTheFlusherNotTheAppender) {
  TraceWriter w;
  ASSERT_EQ(w.Open(-1, dir_.c_str(), 45, /*compress=*/true), 0);
  const std::string path = w.path();
  const size_t packet = 4096;
  const size_t per_buffer = TraceWriter::kBufferSize / packet;  // 256
  std::string expected;
  int seed = 0;
  EXPECT_FALSE(w.WaitForFullBuffer(MonoNs()));  // nothing waits: back at the deadline
  for (size_t i = 0; i < per_buffer + 1; ++i) {
    expected += Chunk(packet, seed);
    ASSERT_TRUE(Append(w, Chunk(packet, seed++)));
  }
  EXPECT_EQ(w.bytes_written(), 0u);  // the full buffer waits for the flusher
  EXPECT_TRUE(w.WaitForFullBuffer(MonoNs() + 1000000000ull));
  ASSERT_TRUE(w.WriteFullBuffer());
  std::string file = ReadAll(path);
  ASSERT_EQ(FrameSizes(file).size(), 1u);
  EXPECT_EQ(Decompress(file), expected.substr(0, per_buffer * packet));
  EXPECT_EQ(w.inline_writes(), 0u);
  // Two more buffers without the flusher: the second fill finds the first
  // still queued and writes it from the appending thread, in order.
  for (size_t i = 0; i < 2 * per_buffer; ++i) {
    expected += Chunk(packet, seed);
    ASSERT_TRUE(Append(w, Chunk(packet, seed++)));
  }
  EXPECT_EQ(w.inline_writes(), 1u);
  w.CloseFile();
  file = ReadAll(path);
  EXPECT_EQ(FrameSizes(file).size(), 4u);
  EXPECT_EQ(Decompress(file), expected);
}

}  // namespace
}  // namespace pinscope::shim
