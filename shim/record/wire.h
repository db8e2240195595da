// Protobuf wire-format encoder over a caller-supplied buffer, for the shim,
// which must not link libprotobuf nor allocate on the recording path.
// Nested messages get a 4-byte padded varint length (the protozero trick:
// a non-minimal varint is valid protobuf), so no second pass is needed.
// Not thread-safe: each event encodes into its own stack buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace pinscope::shim {

class Encoder {
 public:
  Encoder(uint8_t* buf, size_t cap) : buf_(buf), cap_(cap) {}

  // Scalars: proto3 omits zero values, so do we.
  void Varint(uint32_t field, uint64_t v) {
    if (v == 0) return;
    Tag(field, 0);
    RawVarint(v);
  }
  void Int32(uint32_t field, int32_t v) { Varint(field, Int32Value(v)); }
  void SInt(uint32_t field, int64_t v) { Varint(field, ZigZag(v)); }
  // The varint of an int32 field (negatives take 10 bytes) and of a
  // sint32/sint64 field (zigzag), for VarintRun.
  static uint64_t Int32Value(int32_t v) { return static_cast<uint64_t>(static_cast<int64_t>(v)); }
  static uint64_t ZigZag(int64_t v) {
    return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
  }
  // Varint fields first_field, first_field + 1, ... in that order, zeros
  // left out as Varint does; values already varints (Int32Value, ZigZag,
  // a bool as 0 or 1). Out of line on purpose: one loop's code for a
  // packet's many fields. Inlined field by field, a copy's 19 fields were
  // 46 of a cold copy hook's 184 instruction-cache misses (cachegrind,
  // tools/bench/cold_hook_misses.py; issue 16).
  __attribute__((noinline)) void VarintRun(uint32_t first_field, const uint64_t* values,
                                           size_t n) {
    for (size_t i = 0; i < n; ++i) Varint(first_field + static_cast<uint32_t>(i), values[i]);
  }
  void Bool(uint32_t field, bool v) { Varint(field, v ? 1 : 0); }
  void Double(uint32_t field, double v) {  // fixed64, little-endian (x86-64, aarch64)
    if (v == 0) return;
    Tag(field, 1);
    Raw(&v, sizeof v);
  }
  void Bytes(uint32_t field, const void* data, size_t n) {
    Tag(field, 2);
    RawVarint(n);
    Raw(data, n);
  }
  // proto3 `string` fields must hold valid UTF-8 (a parser rejects the
  // whole packet otherwise), but argv, file, shm and thread names are
  // arbitrary bytes: each byte of an invalid sequence is written as the four
  // characters \xHH (0xFF -> "\xff"), as the report prints control bytes.
  // Where that would leave less than a quarter of the buffer (a packet is
  // 4 KiB), each bad byte becomes '?' instead, which keeps the length.
  // docs/trace-format.md, "Text fields".
  void String(uint32_t field, const char* s) {
    if (s && *s) StringN(field, s, strlen(s));
  }
  void StringN(uint32_t field, const char* s, size_t n) {
    if (!n) return;
    const uint8_t* u = reinterpret_cast<const uint8_t*>(s);
    size_t bad = 0;
    for (size_t i = 0; i < n;) {
      const size_t len = Utf8SeqLen(u + i, n - i);
      bad += len == 0;
      i += len == 0 ? 1 : len;
    }
    if (bad == 0) {
      Bytes(field, s, n);
      return;
    }
    const size_t escaped = n + 3 * bad;
    const bool escape = ok_ && escaped + cap_ / 4 <= cap_ - pos_;
    Tag(field, 2);
    RawVarint(escape ? escaped : n);
    for (size_t i = 0; i < n;) {
      const size_t len = Utf8SeqLen(u + i, n - i);
      if (len != 0) {
        Raw(u + i, len);
        i += len;
        continue;
      }
      static constexpr char kHex[] = "0123456789abcdef";
      const char hex[4] = {'\\', 'x', kHex[u[i] >> 4], kHex[u[i] & 0xF]};
      if (escape) {
        Raw(hex, 4);
      } else {
        Raw("?", 1);
      }
      ++i;
    }
  }
  // Length of the valid UTF-8 sequence at p, 0 if invalid.
  static size_t Utf8SeqLen(const uint8_t* p, size_t avail) {
    uint8_t c = p[0];
    if (c < 0x80) return 1;
    size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (len == 0 || len > avail) return 0;
    for (size_t k = 1; k < len; ++k)
      if ((p[k] & 0xC0) != 0x80) return 0;
    uint32_t cp = c & (0x7F >> len);
    for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (p[k] & 0x3F);
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      return 0;
    return len;
  }
  static bool ValidUtf8(const uint8_t* p, size_t n) {
    for (size_t i = 0; i < n;) {
      if (p[i] < 0x80) {
        ++i;
        continue;
      }
      size_t len = Utf8SeqLen(p + i, n - i);
      if (!len) return false;
      i += len;
    }
    return true;
  }
  // A packed repeated varint field.
  void PackedVarints(uint32_t field, const uint64_t* v, size_t n) {
    if (n == 0) return;
    size_t mark = BeginNested(field);
    for (size_t i = 0; i < n; ++i) RawVarint(v[i]);
    EndNested(mark);
  }

  // Starts a length-delimited field; returns a mark for EndNested.
  size_t BeginNested(uint32_t field) {
    Tag(field, 2);
    size_t mark = pos_;
    uint8_t pad[4] = {0x80, 0x80, 0x80, 0x00};
    Raw(pad, 4);
    return mark;
  }
  void EndNested(size_t mark) {
    if (!ok_) return;
    size_t len = pos_ - mark - 4;
    if (len >= (1u << 28)) {
      ok_ = false;
      return;
    }
    buf_[mark + 0] = static_cast<uint8_t>(0x80 | (len & 0x7f));
    buf_[mark + 1] = static_cast<uint8_t>(0x80 | ((len >> 7) & 0x7f));
    buf_[mark + 2] = static_cast<uint8_t>(0x80 | ((len >> 14) & 0x7f));
    buf_[mark + 3] = static_cast<uint8_t>((len >> 21) & 0x7f);
  }

  void Tag(uint32_t field, uint32_t wire_type) { RawVarint((field << 3) | wire_type); }
  void RawVarint(uint64_t v) {
    // Straight into the buffer where any varint fits (all but a full
    // packet's last bytes); else through tmp, which Raw bounds.
    uint8_t tmp[10];
    const bool direct = ok_ && cap_ - pos_ >= sizeof tmp;
    uint8_t* const start = direct ? buf_ + pos_ : tmp;
    uint8_t* out = start;
    while (v >= 0x80) {
      *out++ = static_cast<uint8_t>(v | 0x80);
      v >>= 7;
    }
    *out++ = static_cast<uint8_t>(v);
    if (direct) {
      pos_ += static_cast<size_t>(out - start);
    } else {
      Raw(tmp, static_cast<size_t>(out - tmp));
    }
  }
  void Raw(const void* data, size_t n) {
    if (!ok_ || n > cap_ - pos_) {
      ok_ = false;
      return;
    }
    memcpy(buf_ + pos_, data, n);
    pos_ += n;
  }

  bool ok() const { return ok_; }
  size_t size() const { return pos_; }
  const uint8_t* data() const { return buf_; }

 private:
  uint8_t* buf_;
  size_t cap_;
  size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace pinscope::shim
