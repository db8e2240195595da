// Hand decoding of the hot packet kinds. The project reads its trace with
// libprotobuf's generated code and prefers it; this file is the exception,
// for speed (packet_decoder.h says how much). It follows the generated
// _InternalParse of libprotobuf 3.21 field by field, where it matters:
//   - a scalar field seen twice keeps its last value; a sub-message seen
//     twice (ThreadUsage) is merged, by decoding into the one already there;
//   - uint64 fields take the varint as it is; uint32 and int32 its low 32
//     bits (ReadVarint32); sint32 the zigzag of its low 32 bits
//     (ReadVarintZigZag32); bool whether it is not 0; an enum the value cast
//     (proto3 enums are open: any number is kept);
//   - non-minimal varints (the shim pads nested lengths to 4 bytes) are
//     valid;
//   - a `string` (ShmEvent.name) is taken only when it is ASCII, which any
//     UTF-8 check passes; libprotobuf refuses invalid UTF-8, and the reader
//     then rescues the packet (text_rescue.h).
// Anything else it does not decode (packet_decoder.h): libprotobuf then
// parses the packet, with its own rules for the unusual cases.
#include "analyzer/read/packet_decoder.h"

#include "analyzer/read/varint.h"

namespace pinscope {

namespace {

constexpr uint32_t VarintTag(uint32_t field) { return field << 3; }
constexpr uint32_t LengthTag(uint32_t field) { return (field << 3) | 2; }

// The bytes of one message being decoded.
struct Cursor {
  const uint8_t* p;
  const uint8_t* end;

  bool more() const { return p < end; }

  bool Varint(uint64_t* value) {
    const int n = ReadVarint(p, end, value);
    p += n;
    return n != 0;
  }

  // Reads a tag of 1 or 2 bytes in its minimal form (every field decoded
  // here is below 32); a zero tag, a longer or padded one is unusual.
  bool Tag(uint32_t* tag) {
    const uint32_t first = *p;  // more() was checked
    if (first < 0x80) {
      if (first == 0) return false;
      *tag = first;
      ++p;
      return true;
    }
    if (end - p < 2) return false;
    const uint32_t second = p[1];
    if (second == 0 || second >= 0x80) return false;
    *tag = (first & 0x7F) | (second << 7);
    p += 2;
    return true;
  }

  // Reads a length-delimited field's length and splits its bytes off into
  // *inner. libprotobuf reads lengths of at most 5 bytes (ReadSize).
  bool Nested(Cursor* inner) {
    uint64_t length = 0;
    const int n = ReadVarint(p, end, &length);
    if (n == 0 || n > 5 || length > static_cast<uint64_t>(end - p - n)) return false;
    inner->p = p + n;
    inner->end = inner->p + length;
    p = inner->end;
    return true;
  }
};

uint32_t Low32(uint64_t value) { return static_cast<uint32_t>(value); }

int32_t ZigZag32(uint64_t value) {
  const uint32_t n = static_cast<uint32_t>(value);
  return static_cast<int32_t>((n >> 1) ^ (~(n & 1) + 1));
}

bool DecodeUsage(Cursor c, trace::ThreadUsage* usage) {
  while (c.more()) {
    uint32_t tag = 0;
    uint64_t v = 0;
    if (!c.Tag(&tag)) return false;
    if ((tag & 7) != 0 || tag > VarintTag(5) || !c.Varint(&v)) return false;
    switch (tag >> 3) {
      case 1:
        usage->set_user_ns(v);
        break;
      case 2:
        usage->set_sys_ns(v);
        break;
      case 3:
        usage->set_minor_faults(v);
        break;
      case 4:
        usage->set_major_faults(v);
        break;
      case 5:
        usage->set_cpu_ns(v);
        break;
      default:
        return false;  // field 0
    }
  }
  return true;
}

bool DecodeCopy(Cursor c, trace::CopyEvent* copy) {
  while (c.more()) {
    uint32_t tag = 0;
    uint64_t v = 0;
    if (!c.Tag(&tag)) return false;
    if (tag == LengthTag(20) || tag == LengthTag(21)) {
      Cursor inner{};
      if (!c.Nested(&inner)) return false;
      if (!DecodeUsage(inner, tag == LengthTag(20) ? copy->mutable_usage_enter()
                                                   : copy->mutable_usage_exit())) {
        return false;
      }
      continue;
    }
    if ((tag & 7) != 0 || tag > VarintTag(19) || !c.Varint(&v)) return false;
    switch (tag >> 3) {
      case 1:
        copy->set_api(static_cast<trace::CopyApi>(v));
        break;
      case 2:
        copy->set_per_thread(v != 0);
        break;
      case 3:
        copy->set_direction(static_cast<trace::Direction>(v));
        break;
      case 4:
        copy->set_requested_kind(static_cast<int32_t>(Low32(v)));
        break;
      case 5:
        copy->set_bytes(v);
        break;
      case 6:
        copy->set_src_kind(static_cast<trace::MemoryKind>(v));
        break;
      case 7:
        copy->set_dst_kind(static_cast<trace::MemoryKind>(v));
        break;
      case 8:
        copy->set_src_address(v);
        break;
      case 9:
        copy->set_dst_address(v);
        break;
      case 10:
        copy->set_src_device(ZigZag32(v));
        break;
      case 11:
        copy->set_dst_device(ZigZag32(v));
        break;
      case 12:
        copy->set_stream(v);
        break;
      case 13:
        copy->set_end_ns(v);
        break;
      case 14:
        copy->set_result(static_cast<int32_t>(Low32(v)));
        break;
      case 15:
        copy->set_call_id(v);
        break;
      case 16:
        copy->set_stack_id(v);
        break;
      case 17:
        copy->set_pin(static_cast<trace::PinOutcome>(v));
        break;
      case 18:
        copy->set_batch_index(Low32(v));
        break;
      case 19:
        copy->set_height(v);
        break;
      default:
        return false;  // field 0
    }
  }
  return true;
}

bool DecodeSync(Cursor c, trace::SyncEvent* sync) {
  while (c.more()) {
    uint32_t tag = 0;
    uint64_t v = 0;
    if (!c.Tag(&tag)) return false;
    if (tag == LengthTag(7) || tag == LengthTag(8)) {
      Cursor inner{};
      if (!c.Nested(&inner)) return false;
      if (!DecodeUsage(inner, tag == LengthTag(7) ? sync->mutable_usage_enter()
                                                  : sync->mutable_usage_exit())) {
        return false;
      }
      continue;
    }
    if ((tag & 7) != 0 || tag > VarintTag(6) || !c.Varint(&v)) return false;
    switch (tag >> 3) {
      case 1:
        sync->set_api(static_cast<trace::SyncApi>(v));
        break;
      case 2:
        sync->set_stream(v);
        break;
      case 3:
        sync->set_end_ns(v);
        break;
      case 4:
        sync->set_result(static_cast<int32_t>(Low32(v)));
        break;
      case 5:
        sync->set_stack_id(v);
        break;
      case 6:
        sync->set_call_id(v);
        break;
      default:
        return false;
    }
  }
  return true;
}

bool DecodeAlloc(Cursor c, trace::HostAlloc* alloc) {
  while (c.more()) {
    uint32_t tag = 0;
    uint64_t v = 0;
    if (!c.Tag(&tag)) return false;
    if ((tag & 7) != 0 || tag > VarintTag(7) || !c.Varint(&v)) return false;
    switch (tag >> 3) {
      case 1:
        alloc->set_api(static_cast<trace::AllocApi>(v));
        break;
      case 2:
        alloc->set_address(v);
        break;
      case 3:
        alloc->set_size(v);
        break;
      case 4:
        alloc->set_alignment(v);
        break;
      case 5:
        alloc->set_old_address(v);
        break;
      case 6:
        alloc->set_stack_id(v);
        break;
      case 7:
        alloc->set_duration_ns(v);
        break;
      default:
        return false;
    }
  }
  return true;
}

bool DecodeFree(Cursor c, trace::HostFree* free) {
  while (c.more()) {
    uint32_t tag = 0;
    uint64_t v = 0;
    if (!c.Tag(&tag)) return false;
    if ((tag & 7) != 0 || tag > VarintTag(2) || !c.Varint(&v)) return false;
    switch (tag >> 3) {
      case 1:
        free->set_address(v);
        break;
      case 2:
        free->set_by_realloc(v != 0);
        break;
      default:
        return false;
    }
  }
  return true;
}

// Whether [p, end) is ASCII: valid UTF-8 by any reading, so libprotobuf's
// check of a `string` field passes it. Other text is left to libprotobuf
// (and its rules for invalid UTF-8 to the reader's rescue).
bool IsAscii(const uint8_t* p, const uint8_t* end) {
  uint8_t any = 0;
  for (; p < end; ++p) any |= *p;
  return any < 0x80;
}

// A ShmEvent (the shim names the segment in each one) whose name is ASCII,
// as shm_open's and torch's names are.
bool DecodeShm(Cursor c, trace::ShmEvent* shm) {
  while (c.more()) {
    uint32_t tag = 0;
    uint64_t v = 0;
    if (!c.Tag(&tag)) return false;
    if (tag == LengthTag(2)) {
      Cursor text{};
      if (!c.Nested(&text) || !IsAscii(text.p, text.end)) return false;
      shm->set_name(reinterpret_cast<const char*>(text.p), static_cast<size_t>(text.end - text.p));
      continue;
    }
    if (tag == LengthTag(15)) {
      Cursor inner{};
      if (!c.Nested(&inner) || !DecodeUsage(inner, shm->mutable_usage())) return false;
      continue;
    }
    if ((tag & 7) != 0 || tag > VarintTag(16) || !c.Varint(&v)) return false;
    switch (tag >> 3) {
      case 1:
        shm->set_op(static_cast<trace::ShmOp>(v));
        break;
      case 3:
        shm->set_fd(static_cast<int32_t>(Low32(v)));
        break;
      case 4:
        shm->set_size(v);
        break;
      case 5:
        shm->set_offset(v);
        break;
      case 6:
        shm->set_address(v);
        break;
      case 7:
        shm->set_flags(static_cast<int32_t>(Low32(v)));
        break;
      case 8:
        shm->set_prot(static_cast<int32_t>(Low32(v)));
        break;
      case 9:
        shm->set_error(static_cast<int32_t>(Low32(v)));
        break;
      case 10:
        shm->set_device(v);
        break;
      case 11:
        shm->set_inode(v);
        break;
      case 12:
        shm->set_driver_internal(v != 0);
        break;
      case 13:
        shm->set_stack_id(v);
        break;
      case 14:
        shm->set_end_ns(v);
        break;
      case 16:
        shm->set_pool(v != 0);
        break;
      default:
        return false;  // field 0, the name (2) or the usage (15) as a varint
    }
  }
  return true;
}

bool DecodeDevice(Cursor c, trace::DeviceActivity* device) {
  while (c.more()) {
    uint32_t tag = 0;
    uint64_t v = 0;
    if (!c.Tag(&tag)) return false;
    if ((tag & 7) != 0 || tag > VarintTag(11) || !c.Varint(&v)) return false;
    switch (tag >> 3) {
      case 1:
        device->set_kind(static_cast<trace::DeviceActivityKind>(v));
        break;
      case 2:
        device->set_start_ns(v);
        break;
      case 3:
        device->set_end_ns(v);
        break;
      case 4:
        device->set_bytes(v);
        break;
      case 5:
        device->set_direction(static_cast<trace::Direction>(v));
        break;
      case 6:
        device->set_src_kind(static_cast<trace::MemoryKind>(v));
        break;
      case 7:
        device->set_dst_kind(static_cast<trace::MemoryKind>(v));
        break;
      case 8:
        device->set_device_id(Low32(v));
        break;
      case 9:
        device->set_stream_id(Low32(v));
        break;
      case 10:
        device->set_correlation_id(Low32(v));
        break;
      case 11:
        device->set_name_id(v);
        break;
      default:
        return false;
    }
  }
  return true;
}

bool DecodeCorrelation(Cursor c, trace::ExternalCorrelation* correlation) {
  while (c.more()) {
    uint32_t tag = 0;
    uint64_t v = 0;
    if (!c.Tag(&tag)) return false;
    if ((tag & 7) != 0 || tag > VarintTag(2) || !c.Varint(&v)) return false;
    switch (tag >> 3) {
      case 1:
        correlation->set_correlation_id(Low32(v));
        break;
      case 2:
        correlation->set_call_id(v);
        break;
      default:
        return false;
    }
  }
  return true;
}

}  // namespace

bool DecodeHotPacket(const uint8_t* data, size_t size, trace::TracePacket* packet) {
  packet->Clear();
  Cursor c{data, data + size};
  bool has_data = false;
  while (c.more()) {
    uint32_t tag = 0;
    if (!c.Tag(&tag)) return false;
    if (tag == VarintTag(1) || tag == VarintTag(2)) {
      uint64_t v = 0;
      if (!c.Varint(&v)) return false;
      if (tag == VarintTag(1)) {
        packet->set_timestamp_ns(v);
      } else {
        packet->set_tid(Low32(v));
      }
      continue;
    }
    // One `data` field: a second one (merged if the same kind, replacing
    // the first otherwise) is left to libprotobuf.
    if (has_data) return false;
    has_data = true;
    Cursor inner{};
    bool ok = false;
    switch (tag) {
      case LengthTag(11):
        ok = c.Nested(&inner) && DecodeCopy(inner, packet->mutable_copy());
        break;
      case LengthTag(12):
        ok = c.Nested(&inner) && DecodeSync(inner, packet->mutable_sync());
        break;
      case LengthTag(13):
        ok = c.Nested(&inner) && DecodeAlloc(inner, packet->mutable_alloc());
        break;
      case LengthTag(14):
        ok = c.Nested(&inner) && DecodeFree(inner, packet->mutable_free());
        break;
      case LengthTag(15):
        ok = c.Nested(&inner) && DecodeShm(inner, packet->mutable_shm());
        break;
      case LengthTag(20):
        ok = c.Nested(&inner) && DecodeDevice(inner, packet->mutable_device());
        break;
      case LengthTag(21):
        ok = c.Nested(&inner) && DecodeCorrelation(inner, packet->mutable_correlation());
        break;
      default:
        return false;  // another kind, or an unknown field
    }
    if (!ok) return false;
  }
  return true;
}

}  // namespace pinscope
