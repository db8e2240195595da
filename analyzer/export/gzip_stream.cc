// GzipFileBuf: zlib's deflate in gzip mode (windowBits 15 + 16) over stdio.
#include "analyzer/export/gzip_stream.h"

#include <cstring>

#include "analyzer/common/private_file.h"

namespace pinscope {

namespace {
constexpr size_t kInBuffer = 1 << 20;
constexpr size_t kOutBuffer = 1 << 18;
}  // namespace

GzipFileBuf::~GzipFileBuf() { Close(); }

bool GzipFileBuf::Open(const std::string& path) {
  if (!CreatePrivateFile(path, nullptr)) return false;
  file_ = std::fopen(path.c_str(), "wb");
  if (file_ == nullptr) return false;
  // Level 6 (zlib's default), gzip wrapper, default memory; deflateInit2
  // writes a header with no name and mtime 0: the output is reproducible.
  if (deflateInit2(&zs_, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK) {
    std::fclose(file_);
    file_ = nullptr;
    return false;
  }
  open_ = true;
  in_.reserve(kInBuffer);
  out_.resize(kOutBuffer);
  return true;
}

bool GzipFileBuf::Deflate(const char* data, size_t n, int flush) {
  zs_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
  zs_.avail_in = static_cast<uInt>(n);
  do {
    zs_.next_out = out_.data();
    zs_.avail_out = static_cast<uInt>(out_.size());
    const int result = deflate(&zs_, flush);
    if (result == Z_STREAM_ERROR) return false;
    const size_t produced = out_.size() - zs_.avail_out;
    if (produced > 0 && std::fwrite(out_.data(), 1, produced, file_) != produced) return false;
  } while (zs_.avail_out == 0 || (flush == Z_FINISH && zs_.avail_in > 0));
  return true;
}

GzipFileBuf::int_type GzipFileBuf::overflow(int_type ch) {
  if (!open_ || traits_type::eq_int_type(ch, traits_type::eof())) return traits_type::not_eof(ch);
  const char c = traits_type::to_char_type(ch);
  return xsputn(&c, 1) == 1 ? ch : traits_type::eof();
}

std::streamsize GzipFileBuf::xsputn(const char* data, std::streamsize n) {
  if (!open_ || !ok_) return 0;
  const size_t size = static_cast<size_t>(n);
  if (in_.size() + size > kInBuffer) {
    ok_ = Deflate(in_.data(), in_.size(), Z_NO_FLUSH);
    in_.clear();
    if (size > kInBuffer) {
      ok_ = ok_ && Deflate(data, size, Z_NO_FLUSH);
      return ok_ ? n : 0;
    }
  }
  in_.insert(in_.end(), data, data + size);
  return ok_ ? n : 0;
}

int GzipFileBuf::sync() { return ok_ ? 0 : -1; }  // data is compressed at Close()

bool GzipFileBuf::Close() {
  if (!open_) return ok_;
  open_ = false;
  ok_ = Deflate(in_.data(), in_.size(), Z_FINISH) && ok_;
  in_.clear();
  deflateEnd(&zs_);
  if (std::fclose(file_) != 0) ok_ = false;
  file_ = nullptr;
  return ok_;
}

}  // namespace pinscope
