// A trace file's packet stream from its bytes, for tests that parse a whole
// file as one Trace message: the compressed container (24-byte preamble, zstd
// frames; docs/trace-format.md, "Compression") decompressed, a plain file as
// it is. Every test target links zstd (tests/CMakeLists.txt).
#pragma once

#include <zstd.h>

#include <cstring>
#include <string>

namespace pinscope::testing {

inline bool IsCompressedTrace(const std::string& bytes) {
  return bytes.size() >= 4 && std::memcmp(bytes.data(), "\x5A\x2A\x4D\x18", 4) == 0;
}

// The packets of `bytes`; a compressed file that does not decode whole
// (cut, damaged) gives what ZSTD_decompressStream got out of it.
inline std::string TracePackets(const std::string& bytes) {
  if (!IsCompressedTrace(bytes)) return bytes;
  std::string out;
  ZSTD_DStream* d = ZSTD_createDStream();
  ZSTD_inBuffer in{bytes.data(), bytes.size(), 0};
  std::string chunk(1 << 20, '\0');
  while (in.pos < in.size) {
    ZSTD_outBuffer o{chunk.data(), chunk.size(), 0};
    const size_t r = ZSTD_decompressStream(d, &o, &in);
    out.append(chunk.data(), o.pos);
    if (ZSTD_isError(r) || (o.pos == 0 && r != 0 && in.pos == in.size)) break;
  }
  ZSTD_freeDStream(d);
  return out;
}

}  // namespace pinscope::testing
