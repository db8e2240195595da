// Reader tests: framing round trip (padded and minimal varints), chunk
// boundaries, and every way a file can be damaged: truncated, corrupt tag,
// absurd length, unparsable packet, empty, no header, newer format.
#include "analyzer/read/trace_reader.h"

#include <gtest/gtest.h>

#include "analyzer/read/text_rescue.h"

#include "trace_builder.h"

namespace pinscope {
namespace {

using testing::EncodeVarint;
using testing::FramePacket;
using testing::kMs;
using testing::MakeTempDir;
using testing::TraceBuilder;
using testing::WriteFile;

constexpr uint64_t kT0 = 1000ull * 1000 * kMs;

TraceBuilder SmallTrace() {
  TraceBuilder trace(100, "run-a", kT0);
  for (int i = 0; i < 20; ++i) {
    trace.Copy(kT0 + i * kMs, kMs / 2, trace::H2D, trace::PAGEABLE, (i + 1) * 4096,
               0x10000 + i * 0x1000);
  }
  trace.Exit(kT0 + 30 * kMs);
  return trace;
}

std::vector<trace::TracePacket> ReadAll(const std::string& path, Status* status,
                                        size_t chunk = TraceReader::kDefaultChunkBytes) {
  TraceReader reader(path, chunk);
  std::vector<trace::TracePacket> packets;
  if (reader.Open()) {
    trace::TracePacket packet;
    while (reader.Next(&packet)) packets.push_back(packet);
  }
  *status = reader.status();
  return packets;
}

TEST(VarintTest, PaddedEncodingMatchesTheShim) {
  EXPECT_EQ(EncodeVarint(5, 4), std::string("\x85\x80\x80\x00", 4));
  uint64_t value = 0;
  const std::string padded = EncodeVarint(300, 4);
  EXPECT_EQ(DecodeVarint(reinterpret_cast<const uint8_t*>(padded.data()), padded.size(), &value),
            4);
  EXPECT_EQ(value, 300u);
  const std::string ten = EncodeVarint(7, 10);
  EXPECT_EQ(DecodeVarint(reinterpret_cast<const uint8_t*>(ten.data()), ten.size(), &value), 10);
  EXPECT_EQ(value, 7u);
  const std::string eleven = std::string(10, '\x80') + '\x00';
  EXPECT_EQ(DecodeVarint(reinterpret_cast<const uint8_t*>(eleven.data()), eleven.size(), &value),
            -1);
  EXPECT_EQ(DecodeVarint(reinterpret_cast<const uint8_t*>(padded.data()), 2, &value), 0);
}

TEST(TraceReaderTest, RoundTripWithPaddedLengths) {
  const std::string dir = MakeTempDir("reader_round_trip");
  TraceBuilder trace = SmallTrace();
  const std::string path = trace.Write(dir);
  Status status;
  auto packets = ReadAll(path, &status);
  ASSERT_TRUE(status.ok()) << status.message;
  ASSERT_EQ(packets.size(), 22u);  // header + 20 copies + exit
  EXPECT_TRUE(packets[0].has_header());
  EXPECT_EQ(packets[0].header().pid(), 100u);
  EXPECT_EQ(packets[0].header().run_id(), "run-a");
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(packets[i + 1].has_copy());
    EXPECT_EQ(packets[i + 1].copy().bytes(), static_cast<uint64_t>((i + 1) * 4096));
    EXPECT_EQ(packets[i + 1].timestamp_ns(), kT0 + i * kMs);
  }
  EXPECT_TRUE(packets[21].has_exit());
}

TEST(TraceReaderTest, AcceptsMinimalAndTenByteLengths) {
  const std::string dir = MakeTempDir("reader_varints");
  TraceBuilder trace = SmallTrace();
  for (size_t width : {1u, 10u}) {
    const std::string path = dir + "/w" + std::to_string(width) + ".pstrace";
    WriteFile(path, trace.Bytes(width));
    Status status;
    auto packets = ReadAll(path, &status);
    EXPECT_TRUE(status.ok()) << status.message;
    EXPECT_EQ(packets.size(), 22u) << "length varint of " << width << " bytes";
  }
}

TEST(TraceReaderTest, SmallChunksAndLargePacketsGiveTheSamePackets) {
  const std::string dir = MakeTempDir("reader_chunks");
  TraceBuilder trace(7, "run-a", kT0);
  trace.Notice(kT0 + 1, trace::Notice::INFO, "big", std::string(300000, 'x'));
  for (int i = 0; i < 100; ++i) trace.Copy(kT0 + i, 1, trace::D2H, trace::PAGEABLE, i, 0);
  const std::string path = trace.Write(dir);
  Status status;
  auto packets = ReadAll(path, &status, 64);
  ASSERT_TRUE(status.ok()) << status.message;
  ASSERT_EQ(packets.size(), 102u);
  EXPECT_EQ(packets[1].notice().text().size(), 300000u);
  EXPECT_EQ(packets[101].copy().bytes(), 99u);
}

TEST(TraceReaderTest, TruncatedFileReadsUpToTheCut) {
  const std::string dir = MakeTempDir("reader_truncated");
  TraceBuilder trace = SmallTrace();
  const std::string bytes = trace.Bytes();
  const size_t packet_10 = trace.PacketOffset(10);
  // Cut inside packet 10's length varint, and inside its payload.
  for (size_t cut : {packet_10 + 1, packet_10 + 3, packet_10 + 9}) {
    const std::string path = dir + "/100.pstrace";
    WriteFile(path, bytes.substr(0, cut));
    Status status;
    auto packets = ReadAll(path, &status);
    EXPECT_EQ(packets.size(), 10u) << "cut at " << cut;
    EXPECT_EQ(status.code, Status::Code::kTruncated);
    EXPECT_EQ(status.severity(), Severity::kWarning);
    EXPECT_EQ(status.message, "file " + path + ": truncated after byte " +
                                  std::to_string(packet_10) + " (last packet incomplete)");
  }
}

TEST(TraceReaderTest, CorruptTagStopsWithItsOffset) {
  const std::string dir = MakeTempDir("reader_corrupt_tag");
  TraceBuilder trace = SmallTrace();
  std::string bytes = trace.Bytes();
  const size_t offset = trace.PacketOffset(5);
  bytes[offset] = '\x12';
  const std::string path = dir + "/100.pstrace";
  WriteFile(path, bytes);
  Status status;
  auto packets = ReadAll(path, &status);
  EXPECT_EQ(packets.size(), 5u);
  EXPECT_EQ(status.code, Status::Code::kCorrupt);
  EXPECT_EQ(status.severity(), Severity::kError);
  EXPECT_EQ(status.message, "file " + path + ": corrupt packet at byte " + std::to_string(offset) +
                                ": bad tag 0x12 (expected 0x0A, a Trace.packet field); reading "
                                "stopped after 5 packets");
}

TEST(TraceReaderTest, AbsurdLengthIsCorruption) {
  const std::string dir = MakeTempDir("reader_absurd");
  TraceBuilder trace = SmallTrace();
  std::string bytes = trace.Bytes();
  const size_t offset = trace.PacketOffset(3);
  const std::string huge = EncodeVarint(65ull << 20, 4);
  bytes.replace(offset + 1, 4, huge);
  const std::string path = dir + "/100.pstrace";
  WriteFile(path, bytes);
  Status status;
  auto packets = ReadAll(path, &status);
  EXPECT_EQ(packets.size(), 3u);
  EXPECT_EQ(status.code, Status::Code::kCorrupt);
  EXPECT_NE(status.message.find("corrupt packet at byte " + std::to_string(offset) +
                                ": packet length 68157440 exceeds the 64 MiB limit"),
            std::string::npos)
      << status.message;
}

TEST(TraceReaderTest, UnparsablePacketIsCorruption) {
  const std::string dir = MakeTempDir("reader_unparsable");
  TraceBuilder trace = SmallTrace();
  std::string bytes = trace.Bytes();
  const size_t offset = trace.PacketOffset(2);
  // Field 1 with wire type 7 (invalid) as the first byte of the payload.
  bytes[offset + 5] = '\x0F';
  const std::string path = dir + "/100.pstrace";
  WriteFile(path, bytes);
  Status status;
  auto packets = ReadAll(path, &status);
  EXPECT_EQ(packets.size(), 2u);
  EXPECT_EQ(status.code, Status::Code::kCorrupt);
  EXPECT_NE(status.message.find("corrupt packet at byte " + std::to_string(offset) +
                                ": protobuf parse failed"),
            std::string::npos)
      << status.message;
}

TEST(TextRescueTest, EscapesEachByteOutsideAValidSequence) {
  EXPECT_EQ(EscapeInvalidUtf8("plain \xe2\x82\xac \xf0\x9f\x98\x80"), "plain \xe2\x82\xac \xf0\x9f\x98\x80");
  EXPECT_EQ(EscapeInvalidUtf8("a\xff\xfe"), "a\\xff\\xfe");
  EXPECT_EQ(EscapeInvalidUtf8("cut\xe2\x82"), "cut\\xe2\\x82");
  EXPECT_EQ(EscapeInvalidUtf8("\xc0\xaf"), "\\xc0\\xaf");          // overlong '/'
  EXPECT_EQ(EscapeInvalidUtf8("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a surrogate
  EXPECT_EQ(EscapeInvalidUtf8(std::string("\0\x80", 2)), std::string("\0\\x80", 5));
}

// A header and a thread name with bytes that are not UTF-8 (an older shim
// copied them as they were): protobuf refuses them as `string`s; the reader
// reads them with the bytes escaped and goes on to the next packet.
TEST(TraceReaderTest, InvalidUtf8IsReadEscapedNotLost) {
  const std::string dir = MakeTempDir("reader_utf8");
  TraceBuilder trace = SmallTrace();
  trace.header().add_cmdline("in\xff" "put");
  trace.Thread(kT0 + 40 * kMs, 7, "w\xe2\x82");
  const std::string path = dir + "/100.pstrace";
  WriteFile(path, trace.Bytes());
  TraceReader reader(path);
  ASSERT_TRUE(reader.Open());
  trace::ProcessHeader header;
  ASSERT_TRUE(reader.ReadHeader(&header, nullptr)) << reader.status().message;
  EXPECT_EQ(header.cmdline(header.cmdline_size() - 1), "in\\xffput");
  EXPECT_EQ(header.run_id(), "run-a");
  trace::TracePacket packet;
  std::string thread_name;
  int copies = 0;
  while (reader.Next(&packet)) {
    if (packet.has_thread()) thread_name = packet.thread().name();
    copies += packet.has_copy();
  }
  EXPECT_TRUE(reader.status().ok()) << reader.status().message;
  EXPECT_EQ(thread_name, "w\\xe2\\x82");
  EXPECT_EQ(copies, 20);
  EXPECT_EQ(reader.rescued_packets(), 2u);
}

TEST(TraceReaderTest, EmptyFile) {
  const std::string dir = MakeTempDir("reader_empty");
  const std::string path = dir + "/5.pstrace";
  WriteFile(path, "");
  TraceReader reader(path);
  ASSERT_TRUE(reader.Open());
  trace::ProcessHeader header;
  EXPECT_FALSE(reader.ReadHeader(&header, nullptr));
  EXPECT_EQ(reader.status().code, Status::Code::kEmpty);
  EXPECT_EQ(reader.status().message,
            "file " + path +
                ": empty (0 bytes): the process wrote no trace (killed before its "
                "first flush?)");
}

TEST(TraceReaderTest, MissingFile) {
  TraceReader reader("/nonexistent/9.pstrace");
  EXPECT_FALSE(reader.Open());
  EXPECT_EQ(reader.status().code, Status::Code::kIoError);
  EXPECT_NE(reader.status().message.find("file /nonexistent/9.pstrace: cannot open"),
            std::string::npos);
}

TEST(TraceReaderTest, MissingHeader) {
  const std::string dir = MakeTempDir("reader_no_header");
  trace::TracePacket packet;
  packet.set_timestamp_ns(1);
  packet.mutable_copy()->set_bytes(10);
  const std::string path = dir + "/5.pstrace";
  WriteFile(path, FramePacket(packet));
  TraceReader reader(path);
  ASSERT_TRUE(reader.Open());
  trace::ProcessHeader header;
  EXPECT_FALSE(reader.ReadHeader(&header, nullptr));
  EXPECT_EQ(reader.status().code, Status::Code::kNoHeader);
  EXPECT_NE(reader.status().message.find("missing process header"), std::string::npos);
}

TEST(TraceReaderTest, NewerFormatVersion) {
  const std::string dir = MakeTempDir("reader_version");
  TraceBuilder trace(5, "run-a", kT0);
  trace.header().set_format_version(2);
  const std::string path = trace.Write(dir);
  TraceReader reader(path);
  ASSERT_TRUE(reader.Open());
  trace::ProcessHeader header;
  EXPECT_FALSE(reader.ReadHeader(&header, nullptr));
  EXPECT_EQ(reader.status().code, Status::Code::kNewerFormat);
  EXPECT_EQ(reader.status().message,
            "file " + path + ": written by a newer pinscope: format 2, this reader supports 1");
}

}  // namespace
}  // namespace pinscope
