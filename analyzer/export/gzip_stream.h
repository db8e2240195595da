// A std::streambuf that gzips what is written to it into a file (zlib,
// deflate with a gzip header): `pinscope export --perfetto FILE.gz` writes
// through it, so the export still streams and is never held in memory.
#pragma once

#include <zlib.h>

#include <cstdio>
#include <streambuf>
#include <string>
#include <vector>

namespace pinscope {

// Not thread safe. Open() then write through an std::ostream over it;
// Close() finishes the gzip member and reports whether every write worked.
// The output is deterministic (no file name, time 0 in the header), so the
// same input gives the same bytes.
class GzipFileBuf : public std::streambuf {
 public:
  GzipFileBuf() = default;
  ~GzipFileBuf() override;
  GzipFileBuf(const GzipFileBuf&) = delete;
  GzipFileBuf& operator=(const GzipFileBuf&) = delete;

  bool Open(const std::string& path);
  // False if any compression or write failed.
  bool Close();

 protected:
  int_type overflow(int_type ch) override;
  std::streamsize xsputn(const char* data, std::streamsize n) override;
  int sync() override;

 private:
  // Compresses `n` bytes (flush: Z_NO_FLUSH or Z_FINISH) and writes the output.
  bool Deflate(const char* data, size_t n, int flush);

  FILE* file_ = nullptr;
  z_stream zs_{};
  bool open_ = false;
  bool ok_ = true;
  std::vector<char> in_;  // bytes written but not yet compressed
  std::vector<unsigned char> out_;
};

}  // namespace pinscope
