// Base-128 varints as the trace's framing and packets hold them: the
// checked byte-by-byte decoder, and an inline one for the hot path that
// reads 8 bytes at once where they are there (packet_decoder.cc, the
// reader's framing; docs/benchmarks.md, "Hand-decoded hot packets").
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace pinscope {

// Decodes a base-128 varint of at most 10 bytes from [data, data + size).
// Returns the bytes used, 0 if the input ends before the varint does, or -1 if
// the varint is longer than 10 bytes or overflows 64 bits.
int DecodeVarint(const uint8_t* data, size_t size, uint64_t* value);

// DecodeVarint's result for the varint at p, reading no byte at or past
// `end`, with 0 for every failure (cut, too long, over 64 bits). A varint
// of up to 8 bytes with 8 bytes there is read as one word and its 7-bit
// groups packed with three shifts (timestamps and addresses take 6 to 8
// bytes, the shim's lengths 4).
inline int ReadVarint(const uint8_t* p, const uint8_t* end, uint64_t* value) {
  if (p < end && *p < 0x80) {
    *value = *p;
    return 1;
  }
  if (end - p >= 8) {
    static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the word is read little-endian");
    uint64_t word = 0;
    std::memcpy(&word, p, sizeof(word));
    const uint64_t stops = ~word & 0x8080808080808080ull;
    if (stops != 0) {
      // The first byte without its continuation bit ends the varint.
      const int bytes = (__builtin_ctzll(stops) + 1) / 8;
      const int drop = 64 - 8 * bytes;
      uint64_t x = ((word << drop) >> drop) & 0x7F7F7F7F7F7F7F7Full;
      x = ((x & 0x7F007F007F007F00ull) >> 1) | (x & 0x007F007F007F007Full);
      x = ((x & 0x3FFF00003FFF0000ull) >> 2) | (x & 0x00003FFF00003FFFull);
      x = ((x & 0x0FFFFFFF00000000ull) >> 4) | (x & 0x000000000FFFFFFFull);
      *value = x;
      return bytes;
    }
  }
  if (end - p < 8) {
    // A short tail (the last field of a message): under 8 bytes cannot
    // overflow 64 bits.
    uint64_t result = 0;
    for (int i = 0; p + i < end; ++i) {
      const uint64_t byte = p[i];
      result |= (byte & 0x7F) << (7 * i);
      if (byte < 0x80) {
        *value = result;
        return i + 1;
      }
    }
    return 0;
  }
  const int n = DecodeVarint(p, static_cast<size_t>(end - p), value);  // 9 or 10 bytes
  return n > 0 ? n : 0;
}

}  // namespace pinscope
