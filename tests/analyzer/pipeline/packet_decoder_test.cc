// Differential test of the hand decoder of the hot packet kinds
// (analyzer/read/packet_decoder.h) against libprotobuf's parse: random
// packets of every field combination, encoded canonically by libprotobuf and
// as the shim encodes them (padded lengths, non-minimal varints, fields in
// any order and repeated), edge values (64-bit, negative, out-of-range
// enums, values over 32 bits in 32-bit fields), and what the decoder must
// leave to libprotobuf (unknown fields, other wire types, a oneof set twice,
// padded tags, other kinds, over-long varints, truncation, flipped bytes).
// Wherever the decoder says it decoded a packet, the result must be exactly
// libprotobuf's; the fields are taken from the schema's descriptors, so a
// field added to a hot kind without the decoder fails here.
#include "analyzer/read/packet_decoder.h"

#include <google/protobuf/arena.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/message_differencer.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "analyzer/read/text_rescue.h"
#include "analyzer/read/trace_reader.h"
#include "trace.pb.h"
#include "trace_builder.h"

namespace pinscope {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using testing::EncodeVarint;
using testing::FramePacket;
using testing::MakeTempDir;
using testing::ReadFile;
using testing::WriteFile;

// The `data` fields of TracePacket the decoder handles.
const std::vector<const FieldDescriptor*>& HotFields() {
  static const std::vector<const FieldDescriptor*> fields = [] {
    const Descriptor* packet = trace::TracePacket::descriptor();
    std::vector<const FieldDescriptor*> out;
    for (const char* name : {"copy", "sync", "alloc", "free", "shm", "device", "correlation"}) {
      out.push_back(packet->FindFieldByName(name));
    }
    return out;
  }();
  return fields;
}

// Text fields of the hot kinds (ShmEvent.name): libprotobuf checks them as
// UTF-8; the decoder takes ASCII text and leaves any other to libprotobuf.
bool IsText(const FieldDescriptor* field) { return field->type() == FieldDescriptor::TYPE_STRING; }

// Values that trip decoders: the varint length boundaries, the 32-bit ones,
// negatives as int32 writes them (10 bytes), the top of 64 bits.
const std::vector<uint64_t>& EdgeValues() {
  static const std::vector<uint64_t> values = {0,
                                               1,
                                               2,
                                               127,
                                               128,
                                               300,
                                               16383,
                                               16384,
                                               0x7FFFFFFFull,
                                               0x80000000ull,
                                               0xFFFFFFFFull,
                                               0x100000000ull,
                                               0x1234567890ull,
                                               0x7FFFFFFFFFFFFFFFull,
                                               0x8000000000000000ull,
                                               std::numeric_limits<uint64_t>::max(),
                                               static_cast<uint64_t>(int64_t{-1}),
                                               static_cast<uint64_t>(int64_t{-2}),
                                               static_cast<uint64_t>(int64_t{INT32_MIN})};
  return values;
}

class Random {
 public:
  explicit Random(uint32_t seed) : engine_(seed) {}
  uint64_t Below(uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(engine_); }
  bool OneIn(uint64_t n) { return Below(n) == 0; }
  uint64_t Value() {
    switch (Below(3)) {
      case 0:
        return EdgeValues()[Below(EdgeValues().size())];
      case 1:
        return Below(1000);
      default:
        return engine_() >> Below(64);
    }
  }

 private:
  std::mt19937_64 engine_;
};

size_t MinimalVarintBytes(uint64_t value) {
  size_t n = 1;
  while (value >= 0x80) {
    value >>= 7;
    ++n;
  }
  return n;
}

// The test's own wire writer, freer than the shim's: any field order,
// repeats, padded varints and lengths.
struct Wire {
  std::string bytes;
  void Varint(uint64_t value, size_t min_bytes = 1) { bytes += EncodeVarint(value, min_bytes); }
  void Tag(uint32_t field, uint32_t wire_type) { Varint((field << 3) | wire_type); }
  void Nested(uint32_t field, const std::string& body, size_t length_bytes) {
    Tag(field, 2);
    Varint(body.size(), length_bytes);
    bytes += body;
  }
};

// A random body of `message` (a hot kind or ThreadUsage) as the shim could
// write it, with fields repeated and in any order, varints padded.
std::string RandomBody(const Descriptor* message, Random& random) {
  Wire wire;
  const int count = static_cast<int>(random.Below(2 * message->field_count() + 2));
  for (int i = 0; i < count; ++i) {
    const FieldDescriptor* field =
        message->field(static_cast<int>(random.Below(message->field_count())));
    if (IsText(field)) {
      // ASCII, NUL included, of 0 to 23 bytes.
      std::string text(random.Below(24), '\0');
      for (char& c : text) c = static_cast<char>(random.Below(128));
      wire.Nested(field->number(), text, 1 + random.Below(2));
      continue;
    }
    if (field->type() == FieldDescriptor::TYPE_MESSAGE) {
      wire.Nested(field->number(), RandomBody(field->message_type(), random),
                  1 + random.Below(5));  // up to ReadSize's 5 bytes
      continue;
    }
    const uint64_t value = random.Value();
    wire.Tag(field->number(), 0);
    const size_t minimal = MinimalVarintBytes(value);
    wire.Varint(value, random.OneIn(3) ? minimal + random.Below(11 - minimal) : minimal);
  }
  return wire.bytes;
}

// A random packet: timestamp and tid (maybe twice, maybe none) around at
// most one hot `data` field.
std::string RandomPacket(Random& random) {
  Wire wire;
  const auto scalars = [&]() {
    for (uint32_t field : {1u, 2u}) {
      if (random.OneIn(3)) continue;
      wire.Tag(field, 0);
      const uint64_t value = random.Value();
      wire.Varint(value, random.OneIn(4) ? 10 : 1);
    }
  };
  scalars();
  if (!random.OneIn(10)) {
    const FieldDescriptor* kind = HotFields()[random.Below(HotFields().size())];
    wire.Nested(kind->number(), RandomBody(kind->message_type(), random), random.OneIn(2) ? 4 : 1);
  }
  if (random.OneIn(2)) scalars();
  return wire.bytes;
}

std::string Hex(const std::string& bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
    out += ' ';
  }
  return out;
}

// Feeds `bytes` to both parsers. Returns whether the decoder took it; where
// it did, its packet must be libprotobuf's.
bool Differential(const std::string& bytes) {
  trace::TracePacket reference;
  const bool reference_ok = reference.ParseFromString(bytes);
  // Into an arena packet that held another one before, as the reader
  // decodes (analyzer/replay reuses a packet until its arena is reset).
  google::protobuf::Arena arena;
  auto* hand = google::protobuf::Arena::CreateMessage<trace::TracePacket>(&arena);
  hand->set_tid(77);
  hand->mutable_shm()->set_name("previous");
  const bool hand_ok =
      DecodeHotPacket(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), hand);
  if (!hand_ok) return false;
  EXPECT_TRUE(reference_ok) << "decoded what libprotobuf refuses: " << Hex(bytes);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*hand, reference))
      << "bytes: " << Hex(bytes) << "\nhand: " << hand->ShortDebugString()
      << "\nlibprotobuf: " << reference.ShortDebugString();
  EXPECT_EQ(hand->SerializeAsString(), reference.SerializeAsString()) << Hex(bytes);
  return true;
}

// Sets every field of `message` (recursively) to a nonzero value.
void SetEveryField(google::protobuf::Message* message, Random& random) {
  const Descriptor* descriptor = message->GetDescriptor();
  const google::protobuf::Reflection* reflection = message->GetReflection();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const FieldDescriptor* field = descriptor->field(i);
    const uint64_t value = 1 + random.Below(1u << 30);
    switch (field->cpp_type()) {
      case FieldDescriptor::CPPTYPE_MESSAGE:
        SetEveryField(reflection->MutableMessage(message, field), random);
        break;
      case FieldDescriptor::CPPTYPE_UINT64:
        reflection->SetUInt64(message, field, value << 20);
        break;
      case FieldDescriptor::CPPTYPE_UINT32:
        reflection->SetUInt32(message, field, static_cast<uint32_t>(value));
        break;
      case FieldDescriptor::CPPTYPE_INT32:
        reflection->SetInt32(message, field, -static_cast<int32_t>(value));
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        reflection->SetBool(message, field, true);
        break;
      case FieldDescriptor::CPPTYPE_ENUM:
        reflection->SetEnumValue(message, field, static_cast<int>(value % 5) + 1);
        break;
      case FieldDescriptor::CPPTYPE_STRING:
        reflection->SetString(message, field, "/torch_" + std::to_string(value));
        break;
      default:
        ADD_FAILURE() << field->full_name() << ": a field type the decoder does not handle";
    }
  }
}

TEST(PacketDecoderTest, EveryFieldOfEveryHotKind) {
  Random random(1);
  for (const FieldDescriptor* kind : HotFields()) {
    trace::TracePacket packet;
    packet.set_timestamp_ns(123456789012345ull);
    packet.set_tid(4242);
    SetEveryField(packet.GetReflection()->MutableMessage(&packet, kind), random);
    EXPECT_TRUE(Differential(packet.SerializeAsString()))
        << kind->name()
        << ": a field the decoder leaves to libprotobuf: " << packet.ShortDebugString();
  }
}

TEST(PacketDecoderTest, CanonicalRandomPacketsAreAllDecoded) {
  // libprotobuf's own encoding of random messages (from random field
  // settings through its setters).
  Random random(2);
  int decoded = 0;
  constexpr int kPackets = 5000;
  for (int i = 0; i < kPackets; ++i) {
    trace::TracePacket reference;
    ASSERT_TRUE(reference.ParseFromString(RandomPacket(random)));
    decoded += Differential(reference.SerializeAsString()) ? 1 : 0;
  }
  EXPECT_EQ(decoded, kPackets);
}

TEST(PacketDecoderTest, ShimStyleRandomPacketsAreAllDecoded) {
  // Repeated fields (last wins), repeated ThreadUsage (merged), padded
  // varints and lengths, any order, values over 32 bits in 32-bit fields.
  Random random(3);
  int decoded = 0;
  constexpr int kPackets = 20000;
  for (int i = 0; i < kPackets; ++i) decoded += Differential(RandomPacket(random)) ? 1 : 0;
  EXPECT_EQ(decoded, kPackets);
}

TEST(PacketDecoderTest, EdgeValuesOfEveryField) {
  // Each edge value in each varint field of each hot kind, and in the
  // packet's timestamp and tid, minimal and padded to 10 bytes.
  int decoded = 0;
  int fed = 0;
  for (const FieldDescriptor* kind : HotFields()) {
    const Descriptor* message = kind->message_type();
    for (int f = 0; f < message->field_count(); ++f) {
      const FieldDescriptor* field = message->field(f);
      if (IsText(field)) continue;
      for (uint64_t value : EdgeValues()) {
        for (size_t pad : {size_t{1}, size_t{10}}) {
          Wire body;
          if (field->type() == FieldDescriptor::TYPE_MESSAGE) {
            Wire usage;
            usage.Tag(1 + static_cast<uint32_t>(value % 5), 0);
            usage.Varint(value, pad);
            body.Nested(field->number(), usage.bytes, 4);
          } else {
            body.Tag(field->number(), 0);
            body.Varint(value, pad);
          }
          Wire packet;
          packet.Tag(1, 0);
          packet.Varint(value, pad);
          packet.Tag(2, 0);
          packet.Varint(value, pad);
          packet.Nested(kind->number(), body.bytes, 4);
          ++fed;
          decoded += Differential(packet.bytes) ? 1 : 0;
        }
      }
    }
  }
  EXPECT_EQ(decoded, fed);
}

// A copy event's field (TracePacket.copy) as the shim writes it, with
// `extra` appended inside the event.
std::string CopyField(const std::string& extra = "") {
  Wire copy;
  copy.Tag(1, 0);
  copy.Varint(2);
  copy.Tag(5, 0);
  copy.Varint(8 << 20);
  copy.Tag(10, 0);
  copy.Varint(1);  // sint32 -1
  Wire usage;
  usage.Tag(5, 0);
  usage.Varint(123456);
  copy.Nested(20, usage.bytes, 4);
  copy.bytes += extra;
  Wire field;
  field.Nested(11, copy.bytes, 4);
  return field.bytes;
}

// A copy packet as the shim writes it, to be spoiled by the tests below:
// `extra_in_copy` appended inside the event, `extra` after it.
std::string ShimCopy(const std::string& extra_in_copy = "", const std::string& extra = "") {
  Wire packet;
  packet.Tag(1, 0);
  packet.Varint(1000000000000ull);
  packet.Tag(2, 0);
  packet.Varint(100);
  packet.bytes += CopyField(extra_in_copy);
  packet.bytes += extra;
  return packet.bytes;
}

// An shm packet with `name`.
std::string NamedShm(const std::string& name) {
  Wire shm;
  shm.Tag(1, 0);
  shm.Varint(trace::SHM_CREATE);
  shm.Nested(2, name, 1);
  shm.Tag(3, 0);
  shm.Varint(20);
  Wire packet;
  packet.Nested(15, shm.bytes, 4);
  return packet.bytes;
}

TEST(PacketDecoderTest, LeavesTheUnusualToLibprotobuf) {
  ASSERT_TRUE(Differential(ShimCopy()));
  const auto varint_field = [](uint32_t field, uint64_t value) {
    Wire wire;
    wire.Tag(field, 0);
    wire.Varint(value);
    return wire.bytes;
  };
  // Each of these parses with libprotobuf, and the decoder declines it.
  struct Case {
    const char* what;
    std::string bytes;
  };
  Wire fixed64;
  fixed64.Tag(5, 1);
  fixed64.bytes += std::string(8, '\x01');
  Wire fixed32_packet;
  fixed32_packet.Tag(1, 5);
  fixed32_packet.bytes += std::string(4, '\x02');
  Wire sync;
  sync.Nested(12, varint_field(2, 7), 1);
  Wire header;
  header.Nested(10, varint_field(1, 1), 1);
  Wire unknown_nested;
  unknown_nested.Nested(31, "abc", 1);
  const std::vector<Case> cases = {
      {"an unknown field in the copy", ShimCopy(varint_field(22, 5))},
      {"an unknown length-delimited field in the copy", ShimCopy(unknown_nested.bytes)},
      {"an unknown field in the packet", ShimCopy("", varint_field(99, 5))},
      {"an unknown field in a ThreadUsage",
       [&] {
         Wire usage;
         usage.Nested(21, varint_field(6, 1), 4);
         return ShimCopy(usage.bytes);
       }()},
      {"a known field as fixed64", ShimCopy(fixed64.bytes)},
      {"the timestamp as fixed32", ShimCopy("", fixed32_packet.bytes)},
      {"a second copy (merged)", ShimCopy("", CopyField())},
      {"a sync after the copy (replaces it)", ShimCopy("", sync.bytes)},
      {"a header after the copy", ShimCopy("", header.bytes)},
      {"a padded tag", ShimCopy(std::string("\xa8\x00\x05", 3))},  // field 5, 2 bytes
      {"a header packet", header.bytes},
      {"an shm name in UTF-8 beyond ASCII", NamedShm("/donn\xc3\xa9es_\xe2\x82\xac")},
  };
  for (const Case& one : cases) {
    trace::TracePacket reference;
    EXPECT_TRUE(reference.ParseFromString(one.bytes)) << one.what;
    EXPECT_FALSE(Differential(one.bytes)) << one.what << ": decoded, should be left to libprotobuf";
  }
  // An ASCII name is decoded (NUL is ASCII); invalid UTF-8, which
  // libprotobuf refuses (the reader rescues it), is declined.
  EXPECT_TRUE(Differential(NamedShm("/torch_100_7")));
  EXPECT_TRUE(Differential(NamedShm(std::string("a\0b", 3))));
  EXPECT_TRUE(Differential(NamedShm("")));
  EXPECT_FALSE(Differential(NamedShm("/bad\xff")));
  // 10-byte varints are decoded: the top bit set, or padded.
  EXPECT_TRUE(Differential(ShimCopy(std::string("\x28") + std::string(9, '\xff') + '\x01')));
  EXPECT_TRUE(Differential(ShimCopy(std::string("\x28") + std::string(9, '\xff') + '\x00')));
  // Declined (libprotobuf refuses most of them too): an 11-byte varint, a
  // 10th byte over 1, a length past the end, a 6-byte length, field 0.
  for (const std::string& bad :
       {ShimCopy(std::string("\x28") + std::string(10, '\x80') + '\x00'),
        ShimCopy(std::string("\x28") + std::string(9, '\xff') + '\x02'),
        ShimCopy("", std::string("\x62\x7f\x10\x01", 4)),
        ShimCopy("", std::string("\x62\x82\x80\x80\x80\x80\x00\x10\x01", 9)),
        ShimCopy(std::string("\x00\x01", 2))}) {
    EXPECT_FALSE(Differential(bad)) << Hex(bad);
  }
}

TEST(PacketDecoderTest, TruncatedAndFlippedPackets) {
  // Every cut of some random packets, and random bytes flipped or inserted:
  // whatever the decoder accepts must be libprotobuf's.
  Random random(4);
  int cuts = 0;
  int cuts_decoded = 0;
  for (int i = 0; i < 300; ++i) {
    const std::string bytes = RandomPacket(random);
    for (size_t cut = 0; cut < bytes.size(); ++cut) {
      ++cuts;
      cuts_decoded += Differential(bytes.substr(0, cut)) ? 1 : 0;
    }
  }
  // Cuts at a field boundary of the packet (after the timestamp, before
  // the event) are whole packets; the rest are not.
  EXPECT_GT(cuts_decoded, 0);
  EXPECT_LT(cuts_decoded, cuts);
  for (int i = 0; i < 20000; ++i) {
    std::string bytes = RandomPacket(random);
    if (bytes.empty()) continue;
    const int changes = 1 + static_cast<int>(random.Below(3));
    for (int c = 0; c < changes; ++c) {
      const size_t at = random.Below(bytes.size());
      if (random.OneIn(2)) {
        bytes[at] = static_cast<char>(random.Below(256));
      } else {
        bytes.insert(bytes.begin() + static_cast<std::ptrdiff_t>(at),
                     static_cast<char>(random.Below(256)));
      }
    }
    Differential(bytes);
  }
}

TEST(PacketDecoderTest, ReaderGivesLibprotobufsPackets) {
  // A file of hot and other packets through TraceReader (which decodes the
  // hot ones by hand), against libprotobuf's parse of each packet's bytes.
  Random random(5);
  trace::TracePacket header_packet;
  header_packet.set_timestamp_ns(1);
  header_packet.mutable_header()->set_format_version(1);
  header_packet.mutable_header()->set_run_id("run");
  std::string file = FramePacket(header_packet);
  std::vector<std::string> bodies;
  for (int i = 0; i < 3000; ++i) {
    std::string body;
    if (random.OneIn(5)) {
      trace::TracePacket other;  // a kind libprotobuf reads
      other.set_timestamp_ns(i);
      other.mutable_thread()->set_name("worker " + std::to_string(i));
      other.mutable_thread()->set_tid(static_cast<uint32_t>(random.Value()));
      body = other.SerializeAsString();
    } else {
      body = RandomPacket(random);
    }
    bodies.push_back(body);
    file += '\x0a' + EncodeVarint(body.size(), 4) + body;
  }
  const std::string path = MakeTempDir("packet_decoder") + "/1.pstrace";
  WriteFile(path, file);
  TraceReader reader(path, 4096);  // small chunks: packets across refills
  ASSERT_TRUE(reader.Open());
  trace::ProcessHeader header;
  ASSERT_TRUE(reader.ReadHeader(&header, nullptr));
  google::protobuf::Arena arena;
  auto* packet = google::protobuf::Arena::CreateMessage<trace::TracePacket>(&arena);
  size_t read = 0;
  while (reader.Next(packet)) {
    ASSERT_LT(read, bodies.size());
    trace::TracePacket reference;
    ASSERT_TRUE(reference.ParseFromString(bodies[read]));
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*packet, reference))
        << "packet " << read << ": " << packet->ShortDebugString() << " vs "
        << reference.ShortDebugString();
    ++read;
  }
  EXPECT_TRUE(reader.status().ok()) << reader.status().message;
  EXPECT_EQ(read, bodies.size());
}

TEST(PacketDecoderTest, TheShimsPacketsAreDecodedByHand) {
  // Every trace recorded on the H200 (tests/data/h200, written by the shim's
  // own encoder): through the reader, each packet is libprotobuf's parse of
  // its bytes, and every packet of a hot kind was decoded by hand.
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (const auto& run : fs::directory_iterator(std::string(PINSCOPE_TEST_DATA_DIR) + "/h200")) {
    if (!run.is_directory()) continue;
    for (const auto& file : fs::directory_iterator(run.path())) {
      if (file.path().extension() == ".pstrace") files.push_back(file.path());
    }
  }
  ASSERT_GE(files.size(), 20u);
  uint64_t packets = 0;
  uint64_t hot = 0;
  uint64_t copies = 0;
  uint64_t syncs = 0;
  uint64_t device = 0;
  uint64_t correlations = 0;
  uint64_t shm = 0;
  for (const fs::path& path : files) {
    const std::string bytes = ReadFile(path.string());
    TraceReader reader(path.string());
    ASSERT_TRUE(reader.Open()) << path;
    trace::TracePacket packet;
    uint64_t file_hot = 0;
    size_t at = 0;
    while (reader.Next(&packet)) {
      // The packet's bytes, from the file's framing.
      ASSERT_EQ(static_cast<uint8_t>(bytes[at]), 0x0A) << path << " byte " << at;
      uint64_t length = 0;
      const int n = DecodeVarint(reinterpret_cast<const uint8_t*>(bytes.data()) + at + 1,
                                 bytes.size() - at - 1, &length);
      ASSERT_GT(n, 0);
      const std::string body = bytes.substr(at + 1 + n, length);
      at += 1 + n + length;
      trace::TracePacket reference;
      if (!reference.ParseFromString(body)) {
        ASSERT_TRUE(ParseRescuingText(reinterpret_cast<const uint8_t*>(body.data()), body.size(),
                                      &reference));
      }
      EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(packet, reference))
          << path << " at byte " << at << ": " << packet.ShortDebugString();
      ++packets;
      copies += packet.has_copy();
      syncs += packet.has_sync();
      device += packet.has_device();
      correlations += packet.has_correlation();
      // An shm name beyond ASCII is libprotobuf's to read.
      const std::string& name = packet.shm().name();
      const bool ascii_shm = packet.has_shm() && std::all_of(name.begin(), name.end(), [](char c) {
                               return static_cast<unsigned char>(c) < 0x80;
                             });
      shm += ascii_shm;
      file_hot += packet.has_copy() || packet.has_sync() || packet.has_alloc() ||
                  packet.has_free() || ascii_shm || packet.has_device() || packet.has_correlation();
    }
    EXPECT_EQ(reader.hand_decoded_packets(), file_hot) << path;
    hot += file_hot;
  }
  // The decoder saw each hot kind the shim writes on the H200 runs (short
  // runs: their interned strings, stacks, frames, modules and pin events,
  // read by libprotobuf, are a quarter of the packets; 23,401 of 31,895 hot).
  EXPECT_GT(copies, 0u);
  EXPECT_GT(syncs, 0u);
  EXPECT_GT(device, 0u);
  EXPECT_GT(correlations, 0u);
  EXPECT_GT(shm, 0u);
  EXPECT_GT(hot, packets / 2) << hot << " of " << packets << " packets hand-decoded";
}

}  // namespace
}  // namespace pinscope
