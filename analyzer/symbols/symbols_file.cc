// Reading and writing RUN/symbols.pb; see symbols_file.h.
#include "analyzer/symbols/symbols_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace pinscope {

std::string SymbolsFilePath(const std::string& run_dir) { return run_dir + "/" + kSymbolsFileName; }

Status ReadSymbolsFile(const std::string& path, symbols::SymbolFile* file, bool* exists) {
  *exists = false;
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    return Status::Error(Status::Code::kIoError, path + ": " + std::strerror(errno));
  }
  *exists = true;
  if (!S_ISREG(st.st_mode)) {
    return Status::Error(Status::Code::kIoError, path + ": not a regular file");
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  if (!in) {
    return Status::Error(Status::Code::kIoError, path + ": cannot be read");
  }
  if (!file->ParseFromString(bytes.str())) {
    return Status::Error(Status::Code::kCorrupt,
                         path + ": not a pinscope symbols file (it does not parse as SymbolFile)");
  }
  if (file->format_version() == 0) {
    return Status::Error(Status::Code::kBadHeader,
                         path + ": not a pinscope symbols file (no format version)");
  }
  if (file->format_version() > kSymbolsFormatVersion) {
    return Status::Error(Status::Code::kNewerFormat, path + ": symbols format version " +
                                                         std::to_string(file->format_version()) +
                                                         " is newer than this pinscope reads (" +
                                                         std::to_string(kSymbolsFormatVersion) +
                                                         "); update pinscope");
  }
  return Status::Ok();
}

Status WriteSymbolsFile(const std::string& path, const symbols::SymbolFile& file) {
  std::string bytes;
  if (!file.SerializeToString(&bytes)) {
    return Status::Error(Status::Code::kIoError, path + ": cannot serialize the symbols");
  }
  const std::string temp = path + ".tmp-" + std::to_string(getpid());
  // O_EXCL|O_NOFOLLOW as for trace files: never write through a link.
  const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return Status::Error(Status::Code::kIoError, temp + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = std::strerror(errno);
      close(fd);
      unlink(temp.c_str());
      return Status::Error(Status::Code::kIoError, temp + ": " + why);
    }
    done += static_cast<size_t>(n);
  }
  if (close(fd) != 0 || rename(temp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    unlink(temp.c_str());
    return Status::Error(Status::Code::kIoError, path + ": " + why);
  }
  return Status::Ok();
}

FileIdentity IdentityOf(const std::string& path) {
  FileIdentity id;
  struct stat st;
  if (path.empty() || stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return id;
  id.exists = true;
  id.size = static_cast<uint64_t>(st.st_size);
  id.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  return id;
}

}  // namespace pinscope
